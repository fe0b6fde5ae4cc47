"""Confinement by construction (issue 31, item 3): the daemon runs as root
over a tree its users write, so no backing access may follow a path that a
user can change under it. An unprivileged user, acting only through an
allow_other mount, exchanges one of its directories with a symlink to a
root-only directory outside BACKING (renameat2 RENAME_EXCHANGE, in a tight
loop) while it makes the daemon do every kind of work it does: times on a
symlink and a file, xattrs, create, rename, unlink, mkdir, rmdir, packing,
reads of packed files, unpacking, recompress and tiering. Afterwards the
root-only directory is exactly as before: the same names, and for each of
them and the directory itself the same content, xattrs, mode, owner and
mtime, ctime and atime (the atimes are set before the mtimes, so a read
would move them; our own checks read with O_NOATIME).

Before the fix, the daemon set a symlink's times by the path read back
from /proc/self/fd (the times landed on the root-only file of the same
name), and opened a packed file's directory by such a path (packs were
created in the root-only directory)."""
import os
import shutil
import stat
import subprocess
import tempfile
import time

import pytest

from mountlib import Mount, system_python

NOBODY = 65534
RACE_S = 7.0
DAY = 86400

USER = r'''
import ctypes, os, subprocess, sys, time

if sys.argv[1] == "race":   # exchange the directory and the symlink
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = os.fsencode(sys.argv[2]), os.fsencode(sys.argv[3])
    end, n = time.monotonic() + float(sys.argv[4]), 0
    while time.monotonic() < end:
        n += libc.renameat2(-100, a, -100, b, 2) == 0   # RENAME_EXCHANGE
    print(n)
    sys.exit(0)

u, secret, secs = sys.argv[2], sys.argv[3], float(sys.argv[4])
os.mkdir(os.path.join(u, "d"))
os.symlink(secret, os.path.join(u, "s"))
d = os.open(os.path.join(u, "d"), os.O_RDONLY | os.O_DIRECTORY)

def put(name, data, flags=os.O_TRUNC):
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | flags, 0o644, dir_fd=d)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)

def fopen(name):
    return os.open(name, os.O_RDONLY, dir_fd=d)

big = b"".join(b"%08d some column data\n" % i for i in range(8000))  # 200 KB
os.symlink("f", "lnk", dir_fd=d)
put("f", b"f" * 5000)
old = time.time() - 2 * 86400
for i in range(3):
    put("r%d" % i, big)
    put("t%d" % i, big)
    os.utime("t%d" % i, (old, old), dir_fd=d)
for i in range(40):           # packed during the race, unpacked later
    put("q%d" % i, b"q%d " % i * 300)
race = subprocess.Popen([sys.executable, __file__, "race", os.path.join(u, "d"), os.path.join(u, "s"),
                         str(secs)], stdout=subprocess.PIPE, text=True)
T = 12345 * 10**9

def times_lnk(n):
    os.utime("lnk", ns=(T + n, T + n), dir_fd=d, follow_symlinks=False)

def times_f(n):
    os.utime("f", ns=(T + n, T + n), dir_fd=d, follow_symlinks=False)

def xattrs(n):
    fd = fopen("f")
    try:
        os.setxattr(fd, "user.t", b"v%d" % n)
        os.getxattr(fd, "user.t")
        os.listxattr(fd)
        os.removexattr(fd, "user.t")
    finally:
        os.close(fd)

def entries(n):
    put("c", b"c" * 100)
    os.rename("c", "c2", src_dir_fd=d, dst_dir_fd=d)
    os.unlink("c2", dir_fd=d)
    os.mkdir("m", dir_fd=d)
    os.rmdir("m", dir_fd=d)

def pack(n):
    if n < 200:
        put("p%d" % n, b"p%d " % n * 200)

def unpack(n):
    put("q%d" % (n % 40), b"more", os.O_APPEND)
    fd = fopen("p%d" % (n % 200))
    try:
        os.read(fd, 1 << 20)
    finally:
        os.close(fd)

def recompress(n):
    fd = fopen("r%d" % (n % 3))
    try:
        os.setxattr(fd, "user.squeezefs.recompress", b"zstd:%d" % (1 + n % 3))
    finally:
        os.close(fd)

def tier(n):
    fd = fopen("t%d" % (n % 3))
    try:
        os.setxattr(fd, "user.squeezefs.recompress", b"lz4")
        os.setxattr(fd, "user.squeezefs.tier", b"")
    finally:
        os.close(fd)

ops = [times_lnk, pack, times_f, xattrs, times_lnk, entries, recompress,
       times_lnk, tier, unpack]
count = {op.__name__: 0 for op in ops}
start = time.monotonic()
end = start + secs - 0.3
while time.monotonic() < end:
    for op in ops:
        if op is unpack and time.monotonic() < start + 3.5:
            continue          # after the first packing batch
        stop = time.monotonic() + 0.05
        while time.monotonic() < stop:
            try:
                op(count[op.__name__])
            except OSError:
                pass
            count[op.__name__] += 1
print(race.communicate()[0].strip(), count)
'''


def snapshot(path):
    """Everything about a directory and its entries that the daemon could
    have changed: names, stat (times, mode, owner, size, links), xattrs,
    content. Read with O_NOATIME, so the atimes stay ours."""
    def info(p):
        st = os.lstat(p)
        xa = {k: os.getxattr(p, k, follow_symlinks=False)
              for k in sorted(os.listxattr(p, follow_symlinks=False))}
        return (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_nlink,
                st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_atime_ns, xa)
    out = {".": info(path)}
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOATIME)
    try:
        names = sorted(os.listdir(fd))
    finally:
        os.close(fd)
    for n in names:
        p = os.path.join(path, n)
        out[n] = info(p)
        if stat.S_ISREG(out[n][0]):
            fd = os.open(p, os.O_RDONLY | os.O_NOATIME)
            try:
                out[n] += (os.read(fd, 1 << 20),)
            finally:
                os.close(fd)
    out["."] = info(path)
    return out


def packed_files(bdir):
    n = 0
    for name in os.listdir(bdir):
        p = os.path.join(bdir, name)
        try:
            if os.lstat(p).st_size == 0 and os.getxattr(
                    p, "user.squeezefs.packed", follow_symlinks=False):
                n += 1
        except OSError:
            pass
    return n


@pytest.fixture
def arena():
    """A world-traversable temp dir with BACKING (holding u/, owned by
    nobody), the mount point, a policy file (t* files are aged after a
    day) and the root-only directory secret/ with canary files named as
    the user's files are."""
    if os.geteuid() != 0:
        pytest.skip("needs root (setuid to another user)")
    top = tempfile.mkdtemp(prefix="sqz-confine-")
    os.chmod(top, 0o755)
    backing = os.path.join(top, "backing")
    os.makedirs(os.path.join(backing, "u"))
    os.chmod(backing, 0o755)
    os.chown(os.path.join(backing, "u"), NOBODY, NOBODY)
    rules = os.path.join(top, "rules")
    with open(rules, "w") as f:
        f.write("t* lz4 after 1d zstd:3\n* zstd:1\n")
    secret = os.path.join(top, "secret")
    os.mkdir(secret, 0o700)
    for name in ("lnk", "f", "r0", "t0", "q0", "p0", "c", "m"):
        p = os.path.join(secret, name)
        with open(p, "wb") as f:
            f.write(b"root-only canary %s\n" % name.encode())
        os.chmod(p, 0o600)
        os.setxattr(p, "user.canary", name.encode())
        os.utime(p, ns=(1_000_000_000 * 10**9, 1_500_000_000 * 10**9))
    os.utime(secret, ns=(1_000_000_000 * 10**9, 1_500_000_000 * 10**9))
    m = None
    try:
        m = Mount(backing, os.path.join(top, "mnt"),
                  options=("allow_other", "policy=" + rules))
        os.chmod(m.mnt, 0o755)
        yield m, secret
    finally:
        if m is not None and m.proc is not None:
            try:
                m.unmount(timeout=30)
            except Exception:
                m.kill()
        shutil.rmtree(top, ignore_errors=True)


def test_symlink_swap_race_stays_inside_backing(arena):
    m, secret = arena
    top = os.path.dirname(secret)
    script = os.path.join(top, "user.py")
    with open(script, "w") as f:
        f.write(USER)
    os.chmod(script, 0o644)
    before = snapshot(secret)
    top_names = sorted(os.listdir(top))

    def demote():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    p = subprocess.run([system_python(), script, "work", m.path("u"), secret,
                        str(RACE_S)], preexec_fn=demote, capture_output=True,
                       text=True, timeout=60, cwd="/")
    assert p.returncode == 0, p.stdout + p.stderr
    exchanges, counts = p.stdout.split(" ", 1)
    assert int(exchanges) > 100, p.stdout     # the race ran
    bdirs = [os.path.join(m.backing, "u", n) for n in ("d", "s")]
    bdir = next(b for b in bdirs if not os.path.islink(b))
    # packing ran during the race (or at the latest right after it)
    deadline = time.time() + 6
    while packed_files(bdir) == 0 and time.time() < deadline:
        time.sleep(0.2)
    assert packed_files(bdir) > 0, (p.stdout, m.log()[-2000:])
    assert m.unmount() == 0, m.log()

    after = snapshot(secret)
    changed = {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
               if before.get(k) != after.get(k)}
    assert not changed, f"outside BACKING changed ({p.stdout.strip()}): {changed}"
    assert sorted(os.listdir(top)) == top_names
    print(p.stdout)


RACER = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
end, n = time.monotonic() + float(sys.argv[3]), 0
while time.monotonic() < end:
    n += libc.renameat2(-100, a, -100, b, 2) == 0   # RENAME_EXCHANGE
print(n)
'''


def test_offline_tools_race_stays_inside_the_tree(tmp_path):
    """The offline tools walk BACKING by descriptor: root runs recompress,
    verify, du and pack over a tree while a user exchanges its directory
    with a symlink to a root-only directory holding files of the same
    names; nothing there is read, changed or created (before, recompress
    renamed its temporary by path: over the root-only files)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (setuid to another user)")
    from mountlib import run_cli
    top = tempfile.mkdtemp(prefix="sqz-confine-cli-")
    try:
        os.chmod(top, 0o755)
        u = os.path.join(top, "backing", "u")
        os.makedirs(os.path.join(u, "d"))
        os.chmod(os.path.join(top, "backing"), 0o755)
        secret = os.path.join(top, "secret")
        os.mkdir(secret, 0o700)
        names = [f"f{i}" for i in range(12)]
        for n in names:
            with open(os.path.join(u, "d", n), "wb") as f:
                f.write(b"".join(b"%06d user data %s\n" % (i, n.encode())
                                 for i in range(3000)))
            p = os.path.join(secret, n)
            with open(p, "wb") as f:
                f.write(b"root-only canary\n")
            os.chmod(p, 0o600)
            os.utime(p, ns=(1_000_000_000 * 10**9, 1_500_000_000 * 10**9))
        os.symlink(secret, os.path.join(u, "s"))
        for dirpath, dirs, files in os.walk(u):
            for e in dirs + files + [""]:
                os.chown(os.path.join(dirpath, e), NOBODY, NOBODY,
                         follow_symlinks=False)
        os.lchown(os.path.join(u, "s"), NOBODY, NOBODY)
        os.utime(secret, ns=(1_000_000_000 * 10**9, 1_500_000_000 * 10**9))
        script = os.path.join(top, "race.py")
        with open(script, "w") as f:
            f.write(RACER)
        os.chmod(script, 0o644)
        before = snapshot(secret)

        def demote():
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        race = subprocess.Popen([system_python(), script, os.path.join(u, "d"),
                                 os.path.join(u, "s"), "5"], preexec_fn=demote,
                                stdout=subprocess.PIPE, text=True, cwd="/")
        out = os.path.join(top, "out")
        rounds = 0
        while race.poll() is None:
            run_cli("recompress", "--policy", f"zstd:{1 + rounds % 3}", u, check=False)
            run_cli("verify", u, check=False)
            run_cli("du", u, check=False)
            run_cli("unpack" if rounds % 2 else "pack", u, out, check=False)
            shutil.rmtree(out, ignore_errors=True)
            rounds += 1
        exchanges = int(race.communicate()[0])
        assert exchanges > 100 and rounds >= 2, (exchanges, rounds)
        after = snapshot(secret)
        changed = {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                   if before.get(k) != after.get(k)}
        assert not changed, f"outside the tree changed ({rounds} rounds): {changed}"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_pack_reclaiming_swaps_pointers_by_descriptor(tmp_path):
    """Pack reclaiming reads and swaps the pointers of a directory's files
    through an O_PATH | O_NOFOLLOW open of each name below the directory
    (no /proc/self/fd/N/NAME path): a pack three quarters dead is rewritten
    at unmount, its live entries moved, and every file reads back; a symlink
    among the files is passed over."""
    import random
    from mountlib import run_cli
    backing = tmp_path / "backing"
    backing.mkdir()
    m = Mount(backing, tmp_path / "mnt")
    try:
        os.mkdir(m.path("d"))
        files = {f"f{i}": random.Random(i).randbytes(3000) for i in range(120)}
        for n, b in files.items():
            with open(m.path("d", n), "wb") as f:
                f.write(b)
        bdir = backing / "d"
        deadline = time.time() + 8
        while packed_files(bdir) < len(files) and time.time() < deadline:
            time.sleep(0.2)
        assert packed_files(bdir) == len(files), m.log()[-2000:]
        old = sorted(n for n in os.listdir(bdir) if n.startswith(".sqz-tmp.pack."))
        for i in range(90):
            os.unlink(m.path("d", f"f{i}"))
            del files[f"f{i}"]
        os.symlink("f100", m.path("d", "lnk"))
        assert m.unmount() == 0, m.log()
    finally:
        if m.proc is not None:
            m.kill()
    new = sorted(n for n in os.listdir(bdir) if n.startswith(".sqz-tmp.pack."))
    assert new and not set(new) & set(old), (old, new)
    assert packed_files(bdir) == len(files)
    with Mount(backing, tmp_path / "mnt") as m2:
        for n, b in files.items():
            with open(m2.path("d", n), "rb") as f:
                assert f.read() == b, n
        assert os.readlink(m2.path("d", "lnk")) == "f100"
    p = run_cli("verify", backing, check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_symlink_times_set_on_the_symlink(mount_factory):
    """utimensat(AT_SYMLINK_NOFOLLOW) through the mount sets the times of
    the backing symlink itself (on its O_PATH descriptor), not its
    target's."""
    m = mount_factory()
    with open(m.path("target"), "wb") as f:
        f.write(b"x")
    os.symlink("target", m.path("lnk"))
    before = os.stat(os.path.join(m.backing, "target"))
    os.utime(m.path("lnk"), ns=(1_111_000_000_123, 2_222_000_000_456),
             follow_symlinks=False)
    for st in (os.lstat(m.path("lnk")), os.lstat(os.path.join(m.backing, "lnk"))):
        assert (st.st_atime_ns, st.st_mtime_ns) == (1_111_000_000_123, 2_222_000_000_456)
    after = os.stat(os.path.join(m.backing, "target"))
    assert (after.st_mtime_ns, after.st_ctime_ns) == (before.st_mtime_ns, before.st_ctime_ns)
