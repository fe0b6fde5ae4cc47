"""Age-based tiering (issue 16): rules and policy xattrs with `after`,
`squeezefs tier` (dry run, JSON, exit codes, age boundary), the safety
guarantees (files open for writing are skipped; a file written while it is
being tiered keeps the writer's data and its tiering is abandoned; readers
read correct bytes during the pass; kill -9 mid-pass leaves each file old or
new with the same bytes and verify clean) and the daemon option tier=."""
import functools
import hashlib
import json
import os
import random
import subprocess
import threading
import time

import pytest

from fsutil import words
from mountlib import Mount, run_cli, squeezefs_bin

MiB = 1 << 20
DAY = 86400
TIER = "user.squeezefs.tier"
RULES = "/hdb/** lz4/64K after 1d zstd:6/256K\n* zstd:1\n"
# market-data-like text, now and then a few random bytes
ticks = functools.partial(words, per_line=16, noise=0.05)


def put(path, data, age=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    if age is not None:
        t = time.time() - age
        os.utime(path, (t, t))


def algo(path):
    s = json.loads(run_cli("stat", "--json", path).stdout)
    return s["algorithm"], s["zipLevel"], s["logicalBlockSize"]


def status(path):
    return json.loads(os.getxattr(path, TIER))


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def rules_file(tmp_path, text_=RULES):
    p = tmp_path / "hdb.rules"
    p.write_text(text_)
    return str(p)


def tier(*args, check=False):
    return run_cli("tier", *args, check=check)


def test_policy_syntax_and_cli(tmp_path, mount_factory):
    rf = rules_file(tmp_path, "/hdb/*/trade/** lz4/128K after 30d zstd:19/1M  # old trades\n"
                              "*.log zstd:1\n")
    p = run_cli("policy", "check", rf)
    assert "2 rules, ok; 1 with an aged policy" in p.stdout
    assert "line 1: /hdb/*/trade/**: lz4/128K, files older than 30d: zstd:19/1M" in p.stdout
    p = run_cli("policy", "test", rf, "hdb/2024.01.02/trade/price", "x.log")
    assert "hdb/2024.01.02/trade/price: lz4/128K after 30d zstd:19/1M (rule" in p.stdout
    p = run_cli("policy", "test", "--age", "40d", rf, "hdb/2024.01.02/trade/price")
    assert "zstd:19/1M at age 40d (aged, >= 30d" in p.stdout
    p = run_cli("policy", "test", "--age", "29d", rf, "hdb/2024.01.02/trade/price")
    assert "lz4/128K at age 29d (young, < 30d" in p.stdout
    for bad, msg in [("* lz4 after 30d\n", "unexpected text after the spec"),
                     ("* lz4 after 30x zstd\n", "invalid age '30x'"),
                     ("* lz4 after 30d zsdt\n", "unknown algorithm 'zsdt'")]:
        (tmp_path / "bad.rules").write_text(bad)
        p = run_cli("policy", "check", tmp_path / "bad.rules", check=False)
        assert p.returncode == 2 and msg in p.stderr, p.stderr
    assert run_cli("policy", "test", "--age", "3w", rf, "x", check=False).returncode == 2
    # a directory xattr with an after clause, through the mount
    m = mount_factory()
    d = m.path("hdb")
    os.mkdir(d)
    run_cli("policy", "set", d, "lz4 after 30d zstd:19")
    assert os.getxattr(d, "user.squeezefs.policy") == b"lz4 after 30d zstd:19"
    put(m.path("hdb", "f"), b"x" * 100000)
    assert run_cli("policy", "get", m.path("hdb", "f")).stdout.strip() == \
        "lz4/128K after 30d zstd:19/128K (from directory hdb)"
    st = status(m.path("hdb", "f"))
    assert st["state"] == "young" and st["after"] == 30 * DAY and st["target"] == "zstd:19/128K"
    p = run_cli("policy", "set", d, "lz4 after 30 zstd:19", check=False)
    assert p.returncode == 2 and "invalid age '30'" in p.stderr
    with pytest.raises(OSError):
        os.setxattr(d, "user.squeezefs.policy", b"lz4 after 1d nope")
    assert os.getxattr(d, "user.squeezefs.policy") == b"lz4 after 30d zstd:19"


def test_tier_cli_age_boundary_dry_run(tmp_path, mount_factory):
    m = mount_factory(options=["policy=" + rules_file(tmp_path)])
    files = {
        "hdb/d1/trade/price": (ticks(3 * MiB, 1), DAY + 120),      # past 1d: due
        "hdb/d1/trade/size": (ticks(2 * MiB, 2), DAY - 120),       # 2 minutes short
        "hdb/d2/quote/bid": (ticks(1 * MiB, 3), 40 * DAY),         # due
        # due, with 3 MiB of zeros (holes in the new container)
        "hdb/d2/quote/ask": (ticks(MiB, 9) + bytes(3 * MiB) + ticks(MiB + 77, 10), 40 * DAY),
        "other/old": (ticks(1 * MiB, 4), 40 * DAY),                # no after clause
    }
    for rel, (data, age) in files.items():
        put(m.path(rel), data, age)
    mtimes = {rel: os.stat(m.path(rel)).st_mtime_ns for rel in files}
    bk = {rel: sha(os.path.join(m.backing, rel)) for rel in files}
    states = {rel: status(m.path(rel))["state"] for rel in files}
    assert states == {"hdb/d1/trade/price": "due", "hdb/d1/trade/size": "young",
                      "hdb/d2/quote/bid": "due", "hdb/d2/quote/ask": "due",
                      "other/old": "no-after"}

    p = tier("--dry-run", m.path("hdb"), m.path("other"))
    assert p.returncode == 0, p.stderr
    assert "hdb/d1/trade/price: lz4/64K -> zstd:6/256K" in p.stdout
    assert "would tier" in p.stdout and "size" not in p.stdout.split("tier --dry-run")[0]
    assert "3 files would be tiered of 5" in p.stdout
    j = json.loads(tier("--dry-run", "--json", m.mnt).stdout)
    assert j["dry_run"] is True and j["files"] == 3 and j["scanned"] == 5
    assert 0 < j["estimated_bytes_after"] < j["bytes_before"]
    assert {c["result"] for c in j["changes"]} == {"would-tier"}
    # the dry run changed nothing
    assert {rel: sha(os.path.join(m.backing, rel)) for rel in files} == bk

    p = tier("--json", m.mnt)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["files"] == 3 and j["failed"] == 0 and j["bytes_after"] < j["bytes_before"]
    assert j["seconds"] > 0
    assert sorted(os.path.relpath(c["path"], m.mnt) for c in j["changes"]) == \
        ["hdb/d1/trade/price", "hdb/d2/quote/ask", "hdb/d2/quote/bid"]
    for rel, (data, age) in files.items():
        with open(m.path(rel), "rb") as f:
            assert f.read() == data, rel
        assert os.stat(m.path(rel)).st_mtime_ns == mtimes[rel], rel  # still old
    assert algo(os.path.join(m.backing, "hdb/d1/trade/price")) == ("zstd", 6, 18)
    assert algo(os.path.join(m.backing, "hdb/d2/quote/bid")) == ("zstd", 6, 18)
    assert algo(os.path.join(m.backing, "hdb/d1/trade/size")) == ("lz4", 0, 16)
    assert status(m.path("hdb/d1/trade/price"))["state"] == "done"
    # the young one crosses the boundary
    t = time.time() - DAY - 1
    os.utime(m.path("hdb/d1/trade/size"), (t, t))
    p = tier(m.path("hdb"))
    assert p.returncode == 0 and "1 file tiered of 4" in p.stdout, p.stdout
    assert algo(os.path.join(m.backing, "hdb/d1/trade/size")) == ("zstd", 6, 18)
    stats = json.loads(run_cli("stats", "--json", m.mnt).stdout)
    assert stats["tier_files"] == 4 and stats["tier_failed"] == 0
    assert stats["tier_bytes_after"] < stats["tier_bytes_before"]
    assert "tier_files" in run_cli("stats", m.mnt).stdout
    assert m.unmount() == 0
    assert run_cli("verify", m.backing, check=False).returncode == 0
    # not a mount
    p = tier(m.backing)
    assert p.returncode == 1 and "not on a squeezefs mount" in p.stderr
    assert tier("--max-rate", "x", m.backing).returncode == 2


def test_open_writer_skipped(tmp_path, mount_factory):
    m = mount_factory(options=["policy=" + rules_file(tmp_path)])
    data = ticks(2 * MiB, 5)
    put(m.path("hdb/f"), data, 2 * DAY)
    fd = os.open(m.path("hdb/f"), os.O_WRONLY)
    try:
        assert status(m.path("hdb/f"))["state"] == "writing"
        p = tier(m.path("hdb"))
        assert p.returncode == 3 and "skipped (open for writing)" in p.stdout, p.stdout
        assert algo(os.path.join(m.backing, "hdb/f"))[0] == "lz4"
    finally:
        os.close(fd)
    assert tier(m.path("hdb")).returncode == 0
    assert algo(os.path.join(m.backing, "hdb/f"))[0] == "zstd"
    with open(m.path("hdb/f"), "rb") as f:
        assert f.read() == data


def test_writer_during_tiering_abandons(tmp_path, mount_factory):
    m = mount_factory(options=["policy=" + rules_file(tmp_path)])
    data = bytearray(ticks(16 * MiB, 6))
    put(m.path("hdb/f"), bytes(data), 2 * DAY)
    p = subprocess.Popen([squeezefs_bin(), "tier", "--max-rate", "4", m.path("hdb")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # the copy is under way (16 MiB at 4 MiB/s)
    patch = b"WRITER-WAS-HERE" * 100
    with open(m.path("hdb/f"), "r+b") as f:
        f.seek(5 * MiB)
        f.write(patch)
    data[5 * MiB:5 * MiB + len(patch)] = patch
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3 and "abandoned" in out, (out, err)
    with open(m.path("hdb/f"), "rb") as f:
        assert f.read() == bytes(data)
    assert algo(os.path.join(m.backing, "hdb/f"))[0] == "lz4"
    assert json.loads(run_cli("stats", "--json", m.mnt).stdout)["tier_abandoned"] == 1
    # retried once it is old again
    t = time.time() - 2 * DAY
    os.utime(m.path("hdb/f"), (t, t))
    assert tier(m.path("hdb")).returncode == 0
    assert algo(os.path.join(m.backing, "hdb/f"))[0] == "zstd"
    with open(m.path("hdb/f"), "rb") as f:
        assert f.read() == bytes(data)
    assert not [n for n in os.listdir(os.path.join(m.backing, "hdb")) if n.startswith(".sqz-tmp.")]


def test_rename_unlink_truncate_during_tiering_abandon(tmp_path, mount_factory):
    """A file renamed, removed or truncated (by path, no descriptor) while its
    copy is made is not put back: the tiering is abandoned, the change
    stands. (squeezefs tier uses an ioctl, so none of these waits for it.)"""
    m = mount_factory(options=["policy=" + rules_file(tmp_path)])
    data = ticks(12 * MiB, 7)
    put(m.path("hdb/a"), data, 2 * DAY)
    put(m.path("hdb/gone"), ticks(12 * MiB, 8), 2 * DAY)
    put(m.path("hdb/t"), data, 2 * DAY)
    for name, act in (("a", lambda: os.rename(m.path("hdb/a"), m.path("hdb/b"))),
                      ("gone", lambda: os.unlink(m.path("hdb/gone"))),
                      ("t", lambda: os.truncate(m.path("hdb/t"), MiB + 5))):
        p = subprocess.Popen([squeezefs_bin(), "tier", "--max-rate", "4", m.path("hdb", name)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        t0 = time.monotonic()
        act()
        assert time.monotonic() - t0 < 1.0, name  # did not wait for the job
        out, err = p.communicate(timeout=60)
        assert p.returncode == 3 and "abandoned" in out, (name, out, err)
    assert sorted(os.listdir(m.path("hdb"))) == ["b", "t"]
    assert sorted(os.listdir(os.path.join(m.backing, "hdb"))) == ["b", "t"]
    with open(m.path("hdb/b"), "rb") as f:
        assert f.read() == data
    with open(m.path("hdb/t"), "rb") as f:
        assert f.read() == data[:MiB + 5]
    assert algo(os.path.join(m.backing, "hdb/b"))[0] == "lz4"
    assert algo(os.path.join(m.backing, "hdb/t"))[0] == "lz4"


def test_readers_during_pass(tmp_path, mount_factory):
    m = mount_factory(options=["policy=" + rules_file(tmp_path)])
    datas = {f"hdb/p{i}": ticks(6 * MiB, 10 + i) for i in range(3)}
    for rel, d in datas.items():
        put(m.path(rel), d, 3 * DAY)
    errors, reads = [], [0]
    stop = threading.Event()

    def reader(seed):
        rnd = random.Random(seed)
        fds = {rel: open(m.path(rel), "rb") for rel in datas}  # open across the swap
        try:
            while not stop.is_set():
                rel = rnd.choice(list(datas))
                off = rnd.randrange(0, len(datas[rel]) - 1)
                n = rnd.choice([4096, 65536, MiB])
                f = fds[rel] if rnd.random() < 0.7 else open(m.path(rel), "rb")
                f.seek(off)
                got = f.read(n)
                if f is not fds[rel]:
                    f.close()
                if got != datas[rel][off:off + n]:
                    errors.append((rel, off, n))
                reads[0] += 1
        finally:
            for f in fds.values():
                f.close()

    ths = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    for t in ths:
        t.start()
    try:
        p = tier("--max-rate", "12", m.path("hdb"))
    finally:
        stop.set()
        for t in ths:
            t.join()
    assert p.returncode == 0, p.stdout + p.stderr
    assert not errors, errors[:5]
    assert reads[0] > 20
    for rel in datas:
        assert algo(os.path.join(m.backing, rel))[0] == "zstd"


def test_kill9_mid_pass(tmp_path, mount_factory):
    backing = tmp_path / "backing"
    rf = rules_file(tmp_path)
    opts = ["policy=" + rf]
    m = mount_factory(backing=backing, options=opts)
    datas = {f"hdb/p{i}": ticks(8 * MiB, 20 + i) for i in range(3)}
    for rel, d in datas.items():
        put(m.path(rel), d, 5 * DAY)
    rnd = random.Random(16)

    def temps():  # the temporaries of rewrites in progress (replace.c)
        return {n for n in os.listdir(backing / "hdb") if n.startswith(".sqz-tmp.")}

    states, mid = [], []
    for r in range(4):
        before = temps()
        p = subprocess.Popen([squeezefs_bin(), "tier", "--max-rate", "10", m.path("hdb")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rnd.uniform(0.2, 2.0))
        rewriting = temps() - before
        m.kill()
        p.wait(timeout=60)
        for rel, d in datas.items():
            b = os.path.join(str(backing), rel)
            assert run_cli("verify", b, check=False).returncode in (0, 3)
            got = subprocess.run([squeezefs_bin(), "cat", b], capture_output=True)
            assert got.returncode == 0 and got.stdout == d, rel
        states.append(sorted(algo(os.path.join(str(backing), rel))[0] for rel in datas))
        # killed inside a pass: a file was being rewritten, or some files
        # were tiered and some not yet
        mid.append(bool(rewriting) or len(set(states[-1])) > 1)
        m = mount_factory(backing=backing, options=opts)
        for rel, d in datas.items():
            with open(m.path(rel), "rb") as f:
                assert f.read() == d
        assert not [n for n in os.listdir(m.path("hdb")) if n.startswith(".sqz-tmp.")]
    assert tier(m.path("hdb")).returncode == 0
    for rel in datas:
        assert algo(os.path.join(str(backing), rel))[0] == "zstd"
    assert m.unmount() == 0
    assert run_cli("verify", backing, check=False).returncode == 0
    print(f"algorithms after each kill: {states}, inside a pass: {mid}")
    assert any(mid), f"no kill landed inside a pass: algorithms after each kill {states}"


def wait_for(cond, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    return cond()


def test_daemon_option_background_pass(tmp_path, mount_factory):
    backing = tmp_path / "backing"
    rf = rules_file(tmp_path)
    m = mount_factory(backing=backing, options=["policy=" + rf])
    datas = {f"hdb/d{i}/col": ticks(2 * MiB, 30 + i) for i in range(6)}
    for rel, d in datas.items():
        put(m.path(rel), d, 2 * DAY)
    put(m.path("hdb/young"), ticks(MiB, 40), 3600)
    assert m.unmount() == 0
    # a slow background pass, stopped by an unmount mid-way, resumes after a remount
    m = mount_factory(backing=backing, options=["policy=" + rf, "tier=1s", "tier_rate=4M"])
    st = lambda: json.loads(run_cli("stats", "--json", m.mnt).stdout)  # noqa: E731
    assert st()["tier_interval"] == 1 and st()["tier_rate"] == 4 * MiB
    assert wait_for(lambda: st()["tier_files"] >= 1, 20)
    assert m.unmount() == 0  # stops the thread mid-pass, cleanly
    state = (backing / ".sqz-tmp.tier-state").read_bytes().split(b"\n", 2)
    assert state[0] == b"squeezefs-tier 1" and state[2].startswith(b"hdb/d"), state
    assert not [n for n in os.listdir(backing / "hdb") if n.startswith(".sqz-tmp.")]
    done_before = [rel for rel in datas if algo(os.path.join(backing, rel))[0] == "zstd"]
    assert done_before
    m = mount_factory(backing=backing, options=["policy=" + rf, "tier=1s", "tier_rate=0"])
    assert wait_for(lambda: st()["tier_passes"] >= 1, 30)
    s = st()
    assert s["tier_files"] == len(datas) - len(done_before), s
    assert s["tier_last_pass"] > 0 and s["tier_failed"] == 0
    for rel, d in datas.items():
        assert algo(os.path.join(backing, rel))[0] == "zstd", rel
        with open(m.path(rel), "rb") as f:
            assert f.read() == d
    assert algo(os.path.join(backing, "hdb/young"))[0] == "lz4"
    out = run_cli("stats", m.mnt).stdout
    assert "tier                   every 1 s, unlimited" in out and "tier_last_pass" in out
    # a file open for writing is skipped by the background pass too
    put(m.path("hdb/late"), ticks(MiB, 41), 2 * DAY)
    fd = os.open(m.path("hdb/late"), os.O_WRONLY)
    try:
        passes = st()["tier_passes"]
        assert wait_for(lambda: st()["tier_passes"] >= passes + 2, 20)
        assert algo(os.path.join(backing, "hdb/late"))[0] == "lz4"
        assert st()["tier_skipped"] >= 1, (st(), status(m.path("hdb/late")), m.log())
    finally:
        os.close(fd)
    t = time.time() - 2 * DAY
    os.utime(m.path("hdb/late"), (t, t))
    assert wait_for(lambda: algo(os.path.join(backing, "hdb/late"))[0] == "zstd", 20)
    assert m.unmount() == 0
    assert run_cli("verify", backing, check=False).returncode == 0


@pytest.mark.parametrize("opt", ["tier=5x", "tier=-1", "tier=366d", "tier_rate=fast", "tier"])
def test_bad_tier_options(tmp_path, opt):
    b = tmp_path / "b"
    b.mkdir()
    (tmp_path / "m").mkdir()
    p = subprocess.run([squeezefs_bin(), "-f", "-o", opt, str(b), str(tmp_path / "m")],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 1 and opt.split("=")[0] in p.stderr, p.stderr


def test_help_and_mount_help():
    h = run_cli("help", "tier").stdout
    assert "--dry-run" in h and "--max-rate MB/s" in h and "exit status" in h
    assert "tier=INTERVAL" in run_cli("--help").stdout
