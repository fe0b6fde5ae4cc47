"""The Debian package (debian/): `dpkg-buildpackage -us -uc -b` on the tree
gives a .deb with the binary, the mount helper, the man page and the
example rule files; it installs, mounts from an fstab line and is removed
cleanly. Long mode only (tools/test.sh --long): the build takes minutes."""
import os
import shutil
import subprocess

import pytest

from mountlib import is_mounted

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.long

WANT = {"./usr/bin/squeezefs", "./usr/sbin/mount.fuse.squeezefs",
        "./usr/share/man/man8/squeezefs.8.gz",
        "./usr/share/doc/squeezefs/examples/postgresql.rules",
        "./usr/share/doc/squeezefs/examples/hdb.rules",
        "./usr/share/doc/squeezefs/examples/fstab",
        "./usr/share/doc/squeezefs/copyright"}


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def installed():
    return run(["dpkg-query", "-W", "-f=${Status}", "squeezefs"]).stdout.startswith("install ok")


def test_deb_builds_installs_mounts_and_removes(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (dpkg -i)")
    for tool in ("dpkg-buildpackage", "dh"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} missing: tools/install-deps.sh installs dpkg-dev and debhelper")
    if installed() or os.path.exists("/usr/bin/squeezefs"):
        pytest.skip("a squeezefs is already installed in /usr/bin: not touching it")
    # the tree as git knows it (tracked and new files), without build dirs
    src = tmp_path / "squeezefs"
    files = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                check=True).stdout.split("\n")
    for f in filter(None, files):
        if f.startswith("build") or not os.path.isfile(os.path.join(ROOT, f)):
            continue
        os.makedirs(src / os.path.dirname(f), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, f), src / f)
    b = run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, timeout=1800)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    debs = [p for p in os.listdir(tmp_path) if p.startswith("squeezefs_") and p.endswith(".deb")]
    assert len(debs) == 1, os.listdir(tmp_path)
    deb = str(tmp_path / debs[0])
    contents = {ln.split()[5] for ln in run(["dpkg", "-c", deb], check=True).stdout.splitlines()}
    assert WANT <= contents, WANT - contents
    info = run(["dpkg-deb", "-f", deb, "Depends"], check=True).stdout
    assert "fuse3" in info and "libzstd" in info, info

    i = run(["dpkg", "-i", deb], timeout=300)
    assert i.returncode == 0, i.stdout + i.stderr
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    fstab = tmp_path / "fstab"
    fstab.write_text(f"{backing} {mnt} fuse.squeezefs defaults,compress=zstd:3,_netdev,"
                     f"x-systemd.requires-mounts-for={backing} 0 0\n")
    try:
        assert run(["man", "-w", "squeezefs"]).returncode == 0
        assert run(["/usr/bin/squeezefs", "--version"]).returncode == 0
        # mount(8) with the fstab line: /sbin/mount.fuse.squeezefs runs the
        # installed binary by its full path
        m = run(["mount", "-T", str(fstab), str(mnt)], timeout=60)
        assert m.returncode == 0, m.stdout + m.stderr
        try:
            pids = run(["pgrep", "-f", f"squeezefs .*{mnt}"]).stdout.split()
            assert any(os.readlink(f"/proc/{p}/exe") == "/usr/bin/squeezefs" for p in pids), pids
            data = b"installed " * 100000
            with open(mnt / "f", "wb") as f:
                f.write(data)
            with open(mnt / "f", "rb") as f:
                assert f.read() == data
        finally:
            run(["umount", str(mnt)], timeout=60)
        assert not is_mounted(str(mnt))
        assert run(["/usr/bin/squeezefs", "verify", str(backing)]).returncode == 0
        assert run(["/usr/bin/squeezefs", "cat", str(backing / "f")]).stdout == data.decode()
    finally:
        r = run(["dpkg", "--purge", "squeezefs"], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not installed()
    for path in ("/usr/bin/squeezefs", "/usr/sbin/mount.fuse.squeezefs",
                 "/usr/share/man/man8/squeezefs.8.gz", "/usr/share/doc/squeezefs"):
        assert not os.path.exists(path), f"{path} left after dpkg --purge"
