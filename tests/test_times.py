"""Access times as a local file system keeps them (xfstests generic/003):
the kernel leaves a FUSE file's atime to the daemon, and reads served from
its page cache never reach the daemon, so the daemon moves the atime at an
open for reading, as the mount's atime option says (relatime, the default:
when it is not after the mtime or ctime; noatime: never; strictatime:
always), and its own reads of the backing file never move it."""
import os
import time

import pytest

from mountlib import Mount


def times(path):
    st = os.stat(path)
    return (st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)


def changed(a, b):
    return tuple(x != y for x, y in zip(a, b))


def cat(path):
    with open(path, "rb") as f:
        f.read()


@pytest.mark.parametrize("opts", [[], ["nowriteback", "nopack"]])
def test_atime_follows_the_mount_options(mount_factory, opts):
    m = mount_factory(options=opts)
    os.mkdir(m.path("d"))
    with open(m.path("d/f1"), "w") as f:
        f.write("aaa\n")
    before = times(m.path("d/f1"))
    time.sleep(1.1)
    cat(m.path("d/f1"))
    first = times(m.path("d/f1"))
    assert changed(before, first) == (True, False, False)
    time.sleep(1.1)
    cat(m.path("d/f1"))
    second = times(m.path("d/f1"))
    assert changed(first, second) == (False, False, False)   # relatime
    d_before = times(m.path("d"))
    assert m.unmount() == 0, m.log()
    m = mount_factory(backing=m.backing, name="noatime",
                      options=opts + ["noatime"])
    assert times(m.path("d/f1")) == second      # background work, remount
    assert times(m.path("d")) == d_before
    with open(m.path("d/f3"), "w") as f:
        f.write("ccc\n")
    f3 = times(m.path("d/f3"))
    time.sleep(1.1)
    cat(m.path("d/f3"))
    assert changed(f3, times(m.path("d/f3"))) == (False, False, False)
    assert m.unmount() == 0, m.log()
    m = mount_factory(backing=m.backing, name="strict",
                      options=opts + ["strictatime"])
    a = times(m.path("d/f3"))
    cat(m.path("d/f3"))
    b = times(m.path("d/f3"))
    assert changed(a, b) == (True, False, False)
    time.sleep(1.1)
    cat(m.path("d/f3"))
    assert changed(b, times(m.path("d/f3"))) == (True, False, False)
    # an open with O_NOATIME, and one for writing only, move nothing
    c = times(m.path("d/f3"))
    time.sleep(0.05)
    os.close(os.open(m.path("d/f3"), os.O_RDONLY | os.O_NOATIME))
    os.close(os.open(m.path("d/f3"), os.O_WRONLY))
    assert times(m.path("d/f3")) == c
    assert m.unmount() == 0, m.log()


def daemon_calls(pid, names, fn):
    """Calls of the syscalls names the daemon made while fn ran
    (strace -c -f attached to it): {name: calls}."""
    import re
    import signal
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile("r") as out:
        p = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", out.name,
                              "-e", "trace=" + ",".join(names)],
                             stderr=subprocess.PIPE, text=True)
        while "attached" not in p.stderr.readline():
            assert p.poll() is None, "strace could not attach"
        time.sleep(0.5)  # (every thread)
        fn()
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
        calls = {}
        for line in out.read().splitlines():
            f = line.split()
            if len(f) >= 5 and f[-1] in names and re.match(r"[\d.]+$", f[0]):
                calls[f[-1]] = int(f[3])
        return calls


def test_packed_files_read_their_pointer_once_per_stat(mount_factory):
    """The kept ctime of a packed file is in its pointer, and the probe of
    its kind reads that pointer too: a LOOKUP reads it once, not twice; and
    an open that moves the atime, with the fstat after it (tar), reads no
    more pointers than the record's rewrite and the open's own need, and
    stats the backing file no more than the open itself does."""
    import shutil
    if not shutil.which("strace"):
        pytest.skip("needs strace")
    n = 60
    m = mount_factory()
    os.mkdir(m.path("d"))
    for i in range(n):
        with open(m.path("d", f"f{i}"), "w") as f:
            f.write(f"file {i}\n" * 20)
    m.unmount()  # (packs them all)
    assert all(os.stat(os.path.join(m.backing, "d", f"f{i}")).st_size == 0
               for i in range(n))
    m = mount_factory(backing=m.backing, name="mnt2")
    xattr_reads = ["getxattr", "fgetxattr", "lgetxattr"]

    def stat_all():
        for i in range(n):
            os.stat(m.path("d", f"f{i}"))

    def tar_all():
        for i in range(n):
            with open(m.path("d", f"f{i}"), "rb") as f:
                os.fstat(f.fileno())
                assert f.read() == (f"file {i}\n" * 20).encode()

    looked = sum(daemon_calls(m.proc.pid, xattr_reads, stat_all).values())
    calls = daemon_calls(m.proc.pid, xattr_reads + ["read", "newfstatat"], tar_all)
    read = sum(calls.get(c, 0) for c in xattr_reads)
    # requests (a read of /dev/fuse each): OPEN, IOCTL (Python's isatty),
    # GETATTR, FLUSH, RELEASE per file; a LOOKUP more when the kernel's
    # entry timed out meanwhile (1 s: a loaded machine), which reads the
    # pointer once
    lookups = max(0, calls.get("read", 0) - 5 * n)
    assert looked <= n * 1.2, (looked, n)
    assert read <= n * 3.2 + lookups, (read, n, calls)
    # the atime moved under the open's own hold of io, from its last stat
    # of the backing file (7 per file before: one of its own)
    assert calls.get("newfstatat", 0) <= 6 * n + 2 * lookups + 2, calls


def test_a_written_file_keeps_its_ctime_once_at_its_close(mount_factory):
    """The kernel sends a written file's mtime and ctime by SETATTR just
    before the FLUSH of its close (writeback cache, a write a clock tick
    after the creation); the restore after that FLUSH's commit keeps the
    ctime, so the SETATTR, which comes while the file is open for writing,
    writes no record of its own. The times shown survive the close and a
    remount all the same."""
    import shutil
    if not shutil.which("strace"):
        pytest.skip("needs strace")
    m = mount_factory()
    names = [f"f{i}" for i in range(5)]
    files = [open(m.path(n), "w") for n in names]
    time.sleep(0.05)
    for f in files:
        f.write("data\n")

    def close_all():
        for f in files:
            f.close()
    writes = daemon_calls(m.proc.pid, ["setxattr", "fsetxattr"], close_all)
    assert sum(writes.values()) <= len(names), writes
    seen = [os.stat(m.path(n)) for n in names]
    m.unmount()
    m = mount_factory(backing=m.backing, name="mnt2")
    for n, st in zip(names, seen):
        again = os.stat(m.path(n))
        assert (again.st_mtime_ns, again.st_ctime_ns) == (st.st_mtime_ns, st.st_ctime_ns), n


def test_new_files_read_no_kept_ctime(mount_factory):
    """A file the mount created has no kept ctime until the daemon writes
    one (it is the only writer of records on a read-write mount): a stat
    of it reads no xattr for it (user.squeezefs.shown, a pack pointer); once
    its close kept one, the ctime shown is kept across a remount."""
    import shutil
    if not shutil.which("strace"):
        pytest.skip("needs strace")
    m = mount_factory()
    n = 20
    for i in range(n):
        open(m.path(f"e{i}"), "w").close()

    def chmod_all():
        for i in range(n):
            os.chmod(m.path(f"e{i}"), 0o600)
    xattr_reads = ["getxattr", "fgetxattr", "lgetxattr"]
    calls = daemon_calls(m.proc.pid, xattr_reads + ["read"], chmod_all)
    reads = sum(calls.get(c, 0) for c in xattr_reads)
    # per SETATTR the probe's (is the empty file a packed one?) and, if the
    # kernel's ctime is kept, the record's (is it in a pointer?), and one
    # per LOOKUP when the kernel's entry timed out (1 s: a loaded machine);
    # before, the stat read the pointer and user.squeezefs.shown again
    lookups = max(0, calls.get("read", 0) - n)
    assert reads <= 2 * n + lookups + 2, calls
    with open(m.path("e0"), "w") as f:
        time.sleep(0.05)
        f.write("now with data\n")
    seen = os.stat(m.path("e0"))
    m.unmount()
    m = mount_factory(backing=m.backing, name="mnt2")
    again = os.stat(m.path("e0"))
    assert (again.st_mtime_ns, again.st_ctime_ns) == (seen.st_mtime_ns, seen.st_ctime_ns)
    assert all(os.stat(m.path(f"e{i}")).st_mode & 0o777 == 0o600 for i in range(n))
