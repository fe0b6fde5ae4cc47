"""Mounting at boot: the example fstab lines and mount unit in examples/
(docs/GUIDE.md "Mounting at boot") are what systemd accepts, and squeezefs
mounts with exactly the options those lines give."""
import os
import shutil
import subprocess

import pytest

from mountlib import is_mounted, run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
GENERATOR = "/usr/lib/systemd/system-generators/systemd-fstab-generator"


def fstab_lines():
    out = []
    with open(os.path.join(EXAMPLES, "fstab")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(line.split())
    return out


def need_systemd():
    if not shutil.which("systemd-analyze") or not os.path.exists(GENERATOR):
        pytest.skip("systemd-analyze and systemd-fstab-generator are not installed")


def verify(*units):
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", *units], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, SYSTEMD_LOG_LEVEL="info"))
    # unknown keys and bad settings are only warnings: none is allowed
    # (--man=no: the man page is there only once installed)
    assert p.returncode == 0 and not p.stderr.strip() and not p.stdout.strip(), \
        p.stdout + p.stderr


def test_example_fstab_generates_units_systemd_accepts(tmp_path):
    need_systemd()
    out = tmp_path / "gen"
    out.mkdir()
    p = subprocess.run([GENERATOR, str(out), str(out), str(out)], capture_output=True,
                       text=True, timeout=60,
                       env=dict(os.environ, SYSTEMD_FSTAB=os.path.join(EXAMPLES, "fstab")))
    assert p.returncode == 0, p.stderr
    sqz = [ln for ln in fstab_lines() if ln[2] == "fuse.squeezefs"]
    assert len(sqz) >= 2
    units = []
    for what, where, _typ, opts, *_ in sqz:
        name = subprocess.run(["systemd-escape", "-p", "--suffix=mount", where],
                              capture_output=True, text=True, check=True).stdout.strip()
        unit = out / name
        assert unit.exists(), f"no unit for {where}: {sorted(os.listdir(out))}"
        text = unit.read_text()
        assert f"What={what}\n" in text and "Type=fuse.squeezefs\n" in text, text
        remote = "_netdev" in opts.split(",")
        # a network BACKING is a remote mount: ordered after the network
        assert ("Before=remote-fs.target" in text) == remote, text
        for o in opts.split(","):
            if o.startswith("x-systemd.requires-mounts-for="):
                assert "RequiresMountsFor=" + o.split("=", 1)[1] in text, text
        units.append(str(unit))
    verify(*units)


def test_example_mount_unit_is_valid(tmp_path):
    need_systemd()
    src = os.path.join(EXAMPLES, "srv-data.mount")
    with open(src) as f:
        text = f.read()
    where = [ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("Where=")][0]
    name = subprocess.run(["systemd-escape", "-p", "--suffix=mount", where],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.basename(src) == name
    verify(src)


def test_example_fstab_options_mount(tmp_path, squeezefs_on_path):
    """Each squeezefs line of the example, with its own options (paths made
    temporary), mounts through mount(8) like the generated unit would."""
    rules = os.path.join(EXAMPLES, "hdb.rules")
    for i, (_what, _where, typ, opts, *_) in enumerate(fstab_lines()):
        if typ != "fuse.squeezefs":
            continue
        backing, mnt = tmp_path / f"b{i}", tmp_path / f"m{i}"
        backing.mkdir()
        mnt.mkdir()
        (backing / "old").write_bytes(b"")  # something for a ro mount to show
        opts = ",".join("policy=" + rules if o.startswith("policy=") else o
                        for o in opts.split(","))
        r = subprocess.run(["mount", "-t", typ, str(backing), str(mnt), "-o", opts],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (opts, r.stdout + r.stderr)
        try:
            assert is_mounted(str(mnt))
            got = run_cli("stats", "--json", mnt).stdout
            assert '"logical_bytes_read"' in got
            ro = "ro" in opts.split(",")
            try:
                with open(mnt / "new", "wb") as f:
                    f.write(b"x")
                wrote = True
            except OSError:
                wrote = False
            assert wrote != ro, (opts, wrote)
        finally:
            subprocess.run(["umount", str(mnt)], capture_output=True, timeout=60)
        assert not is_mounted(str(mnt))
