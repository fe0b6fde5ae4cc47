"""Security: symlinks and names cannot make the daemon touch files outside
BACKING, allow_other gives other users exactly the backing permissions, the
policy xattr is owner/root only, and hostile containers give EIO without
blowing up the daemon's memory."""
import errno
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from mountlib import Mount, run_cli, system_python

NOBODY = 65534
POLICY_XATTR = "user.squeezefs.policy"


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (setuid to another user)")


def daemon_paths(m):
    """Paths of the files/dirs the daemon has open (from /proc/PID/fd)."""
    out = []
    d = f"/proc/{m.proc.pid}/fd"
    for fd in os.listdir(d):
        try:
            t = os.readlink(os.path.join(d, fd))
        except OSError:
            continue
        if t.startswith("/"):
            out.append(t)
    return out


def assert_daemon_inside(m, backing):
    b = os.path.realpath(backing)
    for p in daemon_paths(m):
        if p.startswith(("/dev/", "/proc/", "/sys/")) or p == m.log_path:
            continue
        if p.endswith(" (deleted)"):
            p = p[:-10]
        assert p == b or p.startswith(b + "/") or p == m.log_path, \
            f"daemon has {p} open, outside BACKING {b}"


def test_symlinks_resolve_on_caller_side(mount_factory, tmp_path):
    backing = tmp_path / "backing"
    backing.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"outside secret\n")
    os.symlink("/etc", backing / "etc-link")
    os.symlink(str(outside / "secret"), backing / "abs-link")
    os.symlink("../../../../../../../../etc/hostname", backing / "rel-link")
    m = mount_factory(backing=backing)

    for name in ("etc-link", "abs-link", "rel-link"):
        st = os.lstat(m.path(name))
        assert stat.S_ISLNK(st.st_mode), f"{name} is not shown as a symlink"
    assert os.readlink(m.path("etc-link")) == "/etc"
    assert os.readlink(m.path("abs-link")) == str(outside / "secret")
    # The kernel follows the link for the caller: the real files, raw.
    assert open(m.path("abs-link"), "rb").read() == b"outside secret\n"
    assert sorted(os.listdir(m.path("etc-link"))) == sorted(os.listdir("/etc"))
    with open(m.path("abs-link"), "rb") as held:
        held.read(1)
        assert_daemon_inside(m, backing)
    # The daemon never wrote through a link into the outside file.
    assert (outside / "secret").read_bytes() == b"outside secret\n"
    # Writing to a new file next to the links stays in BACKING.
    with open(m.path("plain"), "wb") as f:
        f.write(b"x" * 1000)
    assert (backing / "plain").exists()
    assert_daemon_inside(m, backing)


def test_dotdot_names_do_not_escape(mount_factory, tmp_path):
    m = mount_factory()
    os.mkdir(m.path("sub"))
    with pytest.raises(FileNotFoundError):
        open(m.path("sub", "..", "..", "..", "etc", "passwd"), "rb")
    # '..' inside a name is just a name
    for name in ("a..b", "..x", "x.."):
        with open(m.path("sub", name), "wb") as f:
            f.write(name.encode())
        assert open(m.path("sub", name), "rb").read() == name.encode()
        assert os.path.exists(os.path.join(m.backing, "sub", name))
    assert_daemon_inside(m, m.backing)


def run_as_nobody(code, *args):
    """Run python code as uid/gid 65534; returns CompletedProcess."""
    def demote():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    return subprocess.run([system_python(), "-c", code, *map(str, args)],
                          preexec_fn=demote, capture_output=True, text=True,
                          timeout=60, cwd="/")


@pytest.fixture
def shared_mount():
    """A mount with allow_other in a world-traversable temp dir (pytest's
    tmp dirs are 0700)."""
    need_root()
    top = tempfile.mkdtemp(prefix="sqz-sec-")
    os.chmod(top, 0o755)
    backing = os.path.join(top, "backing")
    os.mkdir(backing, 0o755)
    m = None
    try:
        m = Mount(backing, os.path.join(top, "mnt"), options=("allow_other",))
        os.chmod(m.mnt, 0o755)
        yield m
    finally:
        if m is not None and m.proc is not None:
            try:
                m.unmount(timeout=30)
            except Exception:
                m.kill()
        shutil.rmtree(top, ignore_errors=True)


CHECK_READ = r'''
import sys
try:
    print(len(open(sys.argv[1], "rb").read()))
except PermissionError:
    print("EACCES")
'''


def test_allow_other_uses_backing_permissions(shared_mount):
    m = shared_mount
    for name, mode in (("secret", 0o600), ("public", 0o644)):
        with open(m.path(name), "wb") as f:
            f.write(b"z" * 5000)
        os.chmod(m.path(name), mode)
        assert stat.S_IMODE(os.stat(os.path.join(m.backing, name)).st_mode) == mode
    r = run_as_nobody(CHECK_READ, m.path("secret"))
    assert r.stdout.strip() == "EACCES", f"uid {NOBODY} read a 0600 root file: {r.stdout}{r.stderr}"
    r = run_as_nobody(CHECK_READ, m.path("public"))
    assert r.stdout.strip() == "5000", f"uid {NOBODY} could not read a 0644 file: {r.stdout}{r.stderr}"
    r = run_as_nobody("import sys; open(sys.argv[1], 'ab').write(b'x')", m.path("public"))
    assert r.returncode != 0 and "PermissionError" in r.stderr, "uid 65534 wrote to a 0644 root file"
    assert os.path.getsize(m.path("public")) == 5000


SET_XATTR = r'''
import os, sys
try:
    os.setxattr(sys.argv[1], sys.argv[2], sys.argv[3].encode())
    print("OK")
except OSError as e:
    print(e.errno)
'''


def test_policy_xattr_owner_or_root_only(shared_mount):
    m = shared_mount
    for name, mode, owner in (("root-rw-all", 0o666, 0), ("nobody-own", 0o644, NOBODY)):
        with open(m.path(name), "wb") as f:
            f.write(b"q" * 100)
        os.chmod(m.path(name), mode)
        os.chown(m.path(name), owner, owner)
    r = run_as_nobody(SET_XATTR, m.path("root-rw-all"), POLICY_XATTR, "zstd:9")
    assert r.stdout.strip() in (str(errno.EPERM), str(errno.EACCES)), \
        f"a non-owner set the policy xattr of a 0666 root file: {r.stdout}{r.stderr}"
    r = run_as_nobody(SET_XATTR, m.path("nobody-own"), POLICY_XATTR, "zstd:9")
    assert r.stdout.strip() == "OK", f"the owner could not set the policy xattr: {r.stdout}{r.stderr}"
    os.setxattr(m.path("root-rw-all"), POLICY_XATTR, b"lz4")  # root may


def vm_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def test_hostile_containers(mount_factory, tmp_path):
    """Valid containers with fields overwritten by huge values: reads give
    EIO or data, never a crash or a huge allocation."""
    backing = tmp_path / "backing"
    m = mount_factory(backing=backing)
    rnd = random.Random(1234)
    data = b"".join(b"%08d,IBM,%d.%02d,100\n" % (i, i % 300, i % 100) for i in range(40000))
    with open(m.path("good"), "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    assert m.unmount() == 0
    good = (backing / "good").read_bytes()
    n = len(good)
    variants = {}
    positions = sorted({rnd.randrange(8, min(n, 4096)) for _ in range(6)}
                       | {rnd.randrange(4096, n - 8) for _ in range(10) if n > 4104}
                       | {n - 8, n - 16, n - 64, n // 2})
    for pos in positions:
        for fill in (b"\xff" * 8, b"\x00\x00\x00\x80\xff\xff\xff\x7f"):
            b = bytearray(good)
            b[pos:pos + 8] = fill
            name = f"hostile-{pos}-{fill[0]:02x}"
            (backing / name).write_bytes(bytes(b))
            variants[name] = pos
    (backing / "truncated").write_bytes(good[: n // 3])

    m2 = mount_factory(backing=backing)
    results = {}
    for name in list(variants) + ["truncated"]:
        try:
            with open(m2.path(name), "rb") as f:
                got = f.read()
            results[name] = "ok" if got == data else f"{len(got)} bytes, different"
        except OSError as e:
            results[name] = errno.errorcode.get(e.errno, str(e.errno))
        assert m2.proc.poll() is None, f"daemon died on {name}:\n{m2.log()[-3000:]}"
        rss = vm_rss_mb(m2.proc.pid)
        assert rss < 200, f"daemon RSS {rss:.0f} MB after reading {name}"
    print(results)
    assert "EIO" in results.values(), f"no hostile variant gave EIO: {results}"
    # The file was fsync'ed before the damage, so every variant reads back
    # exactly or fails with EIO: never different (e.g. shorter) bytes.
    wrong = {k: v for k, v in results.items() if v not in ("ok", "EIO")}
    assert not wrong, f"hostile variants returned wrong bytes: {wrong}"
    assert m2.unmount() == 0
    v = run_cli("verify", backing, check=False)
    assert v.returncode == 1, f"verify exit {v.returncode} with hostile containers:\n{v.stdout}{v.stderr}"


def test_access_counts_every_supplementary_group(tmp_path):
    """access(2) through a mount checks all of the caller's supplementary
    groups, not only the first 64 (a user in more got a false EACCES). The
    daemon runs as the unprivileged user itself (fusermount3), so the
    kernel asks squeezefs (op_access) rather than checking modes itself."""
    import tempfile
    from mountlib import is_mounted, require_fuse, squeezefs_bin
    if os.geteuid() != 0:
        pytest.skip("needs root to set up a user with many groups")
    require_fuse()
    uid = 65534
    groups = list(range(42000, 42000 + 80))  # the file's group is the last
    base = tempfile.mkdtemp(prefix="sqz-groups-")
    os.chmod(base, 0o755)
    backing = os.path.join(base, "backing")
    mnt = os.path.join(base, "mnt")
    os.mkdir(backing)
    os.mkdir(mnt)
    os.chown(backing, uid, uid)
    os.chown(mnt, uid, uid)
    target = os.path.join(backing, "grp.txt")
    with open(target, "w") as f:
        f.write("group readable\n")
    os.chown(target, 0, groups[-1])
    os.chmod(target, 0o640)

    def demote():
        os.setgroups(groups)
        os.setgid(uid)
        os.setuid(uid)
    log = open(os.path.join(base, "log"), "wb")
    proc = subprocess.Popen([squeezefs_bin(), "-f", backing, mnt], stdout=log,
                            stderr=subprocess.STDOUT, preexec_fn=demote, cwd="/")
    try:
        deadline = time.time() + 20
        while not is_mounted(mnt):
            assert proc.poll() is None and time.time() < deadline, (
                open(os.path.join(base, "log")).read())
            time.sleep(0.05)
        code = ("import os, sys\n"
                "p = sys.argv[1]\n"
                "print(int(os.access(p, os.R_OK)), int(os.access(p, os.W_OK)),\n"
                "      open(p).read().strip())\n")
        r = subprocess.run([system_python(), "-c", code, os.path.join(mnt, "grp.txt")],
                           capture_output=True, text=True, timeout=60,
                           preexec_fn=demote, cwd="/")
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[:2] == ["1", "0"], r.stdout
        assert "group readable" in r.stdout
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        if is_mounted(mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(base, ignore_errors=True)
