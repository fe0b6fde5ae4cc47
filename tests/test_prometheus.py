"""`squeezefs stats --prometheus`: the counters of live mounts in
Prometheus' text exposition format, read back with the official client
library's parser (prometheus_client, tools/install-deps.sh)."""
import os
import re
import subprocess

import pytest

from mountlib import flip_bytes, mount_stats, run_cli, squeezefs_bin

prom_parser = pytest.importorskip(
    "prometheus_client.parser",
    reason="prometheus_client is installed by tools/install-deps.sh")

GAUGES = {"cache_bytes", "dirty_bytes", "pack_pending", "durable_queued",
          "killpriv_v2", "writeback_cache", "tier_interval", "tier_rate",
          "tier_running", "tier_last_pass", "tier_last_pass_seconds",
          "inodes", "max_fds", "fd_handles", "fd_cached", "fd_cache_max"}


def prom(*mounts, check=True):
    p = subprocess.run([squeezefs_bin(), "stats", "--prometheus", *mounts],
                       capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def families(text):
    """{name: (type, {mountpoint: value})} as the client library parses it."""
    out = {}
    for fam in prom_parser.text_string_to_metric_families(text):
        vals = {}
        for s in fam.samples:
            vals[s.labels["mountpoint"]] = s.value
        out[fam.name] = (fam.type, vals, fam.documentation)
    return out


def test_every_counter_is_a_typed_metric_with_help(mnt):
    with open(mnt.path("f"), "wb") as f:
        f.write(b"x" * 300000)
    stats = mount_stats(mnt.mnt)
    p = prom(mnt.mnt)
    fams = families(p.stdout)
    real = os.path.realpath(mnt.mnt)
    assert fams["squeezefs_up"][0] == "gauge"
    assert fams["squeezefs_up"][1] == {real: 1.0}
    for key, value in stats.items():
        # the client library strips _total from a counter family's name
        fam = fams.get("squeezefs_" + key)
        assert fam is not None, f"{key} missing from the exposition"
        typ, vals, doc = fam
        assert typ == ("gauge" if key in GAUGES else "counter"), (key, typ)
        assert doc and "squeezefs(8)" not in doc, f"{key} has no HELP of its own"
        assert real in vals, key
    # counters carry _total on the wire
    assert re.search(r"^squeezefs_logical_bytes_written_total\{mountpoint=\"[^\"]+\"\} \d+$",
                     p.stdout, re.M), p.stdout
    assert re.search(r"^# TYPE squeezefs_dirty_bytes gauge$", p.stdout, re.M)


def test_values_follow_the_mount(mnt):
    before = families(prom(mnt.mnt).stdout)["squeezefs_logical_bytes_written"][1]
    data = os.urandom(1 << 20)
    with open(mnt.path("g"), "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    after = families(prom(mnt.mnt).stdout)["squeezefs_logical_bytes_written"][1]
    real = os.path.realpath(mnt.mnt)
    assert after[real] - before[real] >= len(data)


def test_several_mounts_and_one_that_is_not(mount_factory, tmp_path):
    a = mount_factory(name="a")
    b = mount_factory(name="b")
    plain = tmp_path / "plain"
    plain.mkdir()
    p = prom(a.mnt, b.mnt, str(plain), check=False)
    assert p.returncode == 1
    assert "not a squeezefs mount" in p.stderr
    fams = families(p.stdout)  # the parser rejects a repeated HELP/TYPE
    assert fams["squeezefs_up"][1] == {os.path.realpath(a.mnt): 1.0,
                                       os.path.realpath(b.mnt): 1.0,
                                       str(plain): 0.0}
    assert set(fams["squeezefs_cache_hits"][1]) == {os.path.realpath(a.mnt),
                                                    os.path.realpath(b.mnt)}
    assert p.stdout.count("# TYPE squeezefs_cache_hits_total counter") == 1


def test_label_escaping(mount_factory, tmp_path):
    m = mount_factory(name='we"ird\\name')
    p = prom(m.mnt)
    fams = families(p.stdout)
    assert fams["squeezefs_up"][1] == {os.path.realpath(m.mnt): 1.0}
    assert '\\"' in p.stdout and "\\\\" in p.stdout


def test_read_errors_count_damaged_reads(mount_factory):
    m = mount_factory(options=["nopack"])
    data = bytes(range(256)) * 4096 * 4  # 4 MiB, 32 blocks of 128 KiB
    with open(m.path("col"), "wb") as f:
        f.write(data)
    m.unmount()
    backing = os.path.join(m.backing, "col")
    flip_bytes(backing, os.path.getsize(backing) // 2, 256)
    m.start()
    with pytest.raises(OSError) as e:
        with open(m.path("col"), "rb") as f:
            f.read()
    assert e.value.errno == 5
    fams = families(prom(m.mnt).stdout)
    assert fams["squeezefs_read_errors"][1][os.path.realpath(m.mnt)] >= 1


def test_usage_errors():
    for args in (["stats", "--prometheus"], ["stats", "--prometheus", "--json", "/"],
                 ["stats", "--bogus", "/"], ["stats", "a", "b"]):
        p = run_cli(*args, check=False)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert "usage" in p.stderr
