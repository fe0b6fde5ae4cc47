"""The mount's life cycle (issue 27, part 2).

Remount right after unmount: `fusermount3 -u M; squeezefs B M` comes while
the old daemon still commits and closes its files (or while a kill -9'd one
has threads left), and its writer lock is still held. The new mount waits
for a holder that is leaving (wait_writer=, default 30 s) instead of being
refused; a holder that still serves its mount is refused at once.
"""
import errno
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from mountlib import Mount, is_mounted, run_cli, squeezefs_bin

LOCK = ".sqz-tmp.writer-lock"
CYCLES = 50


def payload(i, n=3 << 20):
    """Compressible, distinct per cycle: the daemon has something to commit
    at unmount."""
    line = (f"cycle {i:04d} " + "x" * 50 + "\n").encode()
    return (line * (n // len(line) + 1))[:n]


def unmount_no_wait(m):
    """fusermount3 -u, returning as soon as the mount is gone (as scripts
    do), while the daemon may still be tearing down. The process is reaped
    later (reap)."""
    # (another process walking the tree, such as a concurrent pytest
    # removing its old temporary directories, can hold the mount busy for a
    # moment: EBUSY is tried again for up to 2 s)
    for _ in range(20):
        r = subprocess.run(["fusermount3", "-u", m.mnt], capture_output=True,
                           text=True)
        if r.returncode == 0 or "busy" not in r.stderr:
            break
        time.sleep(0.1)
    assert r.returncode == 0, r.stderr
    assert not is_mounted(m.mnt)


def reap(m):
    rc = m.proc.wait(timeout=60)
    m._close_log()
    m.proc = None
    return rc


def test_unmount_then_mount_at_once_in_a_loop(tmp_path):
    """50 cycles (~10 s) of write, unmount, mount at
    once: every mount succeeds, every file written so far reads back, the
    old daemons exit cleanly, and BACKING verifies clean."""
    backing, mnt = tmp_path / "b", tmp_path / "m"
    backing.mkdir()
    old, waited = [], 0
    try:
        for i in range(CYCLES):
            m = Mount(backing, mnt)  # raises if the mount is refused
            old.append(m)
            for j in range(max(0, i - 2), i):  # the last cycles' files
                with open(m.path(f"f{j}"), "rb") as f:
                    assert f.read() == payload(j), f"cycle {i}: f{j} differs"
            with open(m.path(f"f{i}"), "wb") as f:
                f.write(payload(i))
            unmount_no_wait(m)
        for m in old:
            log = m.log()
            waited += "waiting for the previous writer" in log
            assert reap(m) == 0, log
    finally:
        for m in old:
            if m.proc is not None:
                m.kill()
    assert sorted(os.listdir(backing)) == sorted(f"f{i}" for i in range(CYCLES))
    for i in range(CYCLES):
        assert run_cli("cat", backing / f"f{i}").stdout.encode() == payload(i)
    v = run_cli("verify", backing, check=False)
    assert v.returncode == 0, v.stdout + v.stderr
    print(f"{waited} of {CYCLES} mounts waited for the previous writer")


def test_kill9_during_heavy_writes_then_mount_at_once(tmp_path):
    """kill -9 while writers stream data, detach the dead mount and mount
    again at once (three rounds): the mount succeeds (waiting for the dying
    daemon if need be), what was fsync'ed is intact, and after a clean
    unmount BACKING verifies clean."""
    backing, mnt = tmp_path / "b", tmp_path / "m"
    backing.mkdir()
    synced = {}
    for r in range(3):
        m = Mount(backing, mnt)
        try:
            for name, data in synced.items():
                with open(m.path(name), "rb") as f:
                    assert f.read() == data, f"round {r}: {name} differs"
            data = os.urandom(1 << 16) * 16 + bytes([r]) * 1000
            with open(m.path(f"synced{r}"), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            synced[f"synced{r}"] = data
            stop = threading.Event()

            def writer(k):
                # files written and closed: the daemon's durable thread
                # syncs BACKING (syncfs) for them while the next are written
                block = os.urandom(1 << 16) * 4
                try:
                    for n in range(1000000):
                        if stop.is_set():
                            break
                        with open(m.path(f"heavy{r}-{k}-{n % 8}"), "wb") as f:
                            for _ in range(8):
                                f.write(block)
                except OSError:
                    pass  # the daemon is gone: ENOTCONN, ECONNABORTED

            ts = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
            for t in ts:
                t.start()
            time.sleep(1.0)
            m.proc.send_signal(signal.SIGKILL)
            subprocess.run(["fusermount3", "-uz", m.mnt], capture_output=True)
            t0 = time.monotonic()
            m2 = Mount(backing, mnt)  # at once: raises if refused
            took = time.monotonic() - t0
            stop.set()
            for t in ts:
                t.join(timeout=60)
            assert took < 20, took
            m.proc.wait(timeout=60)
            m._close_log()
            m.proc = None
            for name, d in synced.items():
                with open(m2.path(name), "rb") as f:
                    assert f.read() == d, f"round {r}: {name} differs after kill -9"
            assert m2.unmount() == 0, m2.log()
        finally:
            if m.proc is not None:
                m.kill()
    # no damage; a file the killed daemon was writing may keep the data
    # after its last commit (an uncommitted tail, removed at its next
    # write: docs/FORMAT.md): verify warns about it (exit 3), nothing else
    v = run_cli("verify", backing, check=False)
    out = v.stdout + v.stderr
    assert v.returncode in (0, 3), out
    assert " 0 damaged" in out, out
    warned = [l for l in v.stdout.splitlines() if l.startswith(str(backing))]
    assert all("uncommitted tail" in l for l in warned), out


def test_second_writer_is_refused_at_once(mount_factory, tmp_path):
    """A live writer is not waited for: the second read-write mount fails
    at once, naming the holder."""
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as ei:
        mount_factory(backing=backing, name="w2")
    assert time.monotonic() - t0 < 3
    msg = str(ei.value)
    assert "already mounted read-write" in msg and f"pid {w.proc.pid}" in msg, msg
    assert "waiting" not in msg, msg
    assert w.unmount() == 0, w.log()


def hold_lock(backing, text):
    """Take BACKING's writer lock in this process (a POSIX lock conflicts
    with the daemon's OFD lock) with text as the holder's record."""
    fd = os.open(os.path.join(backing, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)
    return fd


def mount_once(backing, mnt, *opts):
    """squeezefs -f in the background; (exit code or None if it mounted,
    output so far, seconds it took)."""
    os.makedirs(mnt, exist_ok=True)
    cmd = [squeezefs_bin(), "-f"] + (["-o", ",".join(opts)] if opts else []) + \
        [str(backing), str(mnt)]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while p.poll() is None and not is_mounted(str(mnt)):
        time.sleep(0.02)
    took = time.monotonic() - t0
    if p.poll() is None:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
        out = p.communicate(timeout=60)[0]
        assert p.returncode == 0, out
        return None, out, took
    return p.returncode, p.communicate()[0], took


def test_leaving_holder_is_waited_for_within_the_bound(tmp_path):
    """A holder that marked itself leaving: the mount waits for it (saying
    so), mounts once it is gone, and gives up after wait_writer= seconds
    with a message saying the previous writer is still unmounting."""
    backing, mnt = tmp_path / "b", tmp_path / "m"
    backing.mkdir()
    me = f"pid {os.getpid()}\nhost {socket.gethostname()}\nmountpoint /x\nsince now\n"
    fd = hold_lock(backing, me + "leaving\n")
    rc, out, took = mount_once(backing, mnt, "wait_writer=1")
    assert rc == 1 and 0.9 < took < 5, (rc, took, out)
    assert f"pid {os.getpid()}" in out, out
    assert "still locked by its previous writer" in out and "wait_writer=1" in out, out
    threading.Timer(1.5, os.close, (fd,)).start()  # it leaves in 1.5 s
    rc, out, took = mount_once(backing, mnt)
    assert rc is None and 1.4 < took < 10, (rc, took, out)
    # said once the wait passed a second (a shorter one is silent)
    assert "waiting for the previous writer" in out and "is gone after" in out, out
    fd = hold_lock(backing, me + "leaving\n")
    threading.Timer(0.3, os.close, (fd,)).start()
    rc, out, took = mount_once(backing, mnt)
    assert rc is None and "waiting" not in out and "gone" not in out, (rc, took, out)
    # wait_writer=0: not waited for
    fd = hold_lock(backing, me + "leaving\n")
    try:
        rc, out, took = mount_once(backing, mnt, "wait_writer=0")
        assert rc == 1 and took < 3 and "waiting" not in out, (rc, took, out)
    finally:
        os.close(fd)


def test_holder_gone_from_its_mount_is_waited_for(tmp_path):
    """Without the "leaving" line: a holder whose mount's device is no
    longer mounted is waited for; one whose device is mounted is refused
    at once."""
    backing, mnt = tmp_path / "b", tmp_path / "m"
    backing.mkdir()
    live_dev = open("/proc/self/mountinfo").readline().split()[2]
    me = f"pid {os.getpid()}\nhost {socket.gethostname()}\nmountpoint /x\nsince now\n"
    fd = hold_lock(backing, me + f"dev {live_dev}\n")
    try:
        rc, out, took = mount_once(backing, mnt, "wait_writer=5")
        assert rc == 1 and took < 3 and "already mounted read-write" in out, (rc, took, out)
    finally:
        os.close(fd)
    fd = hold_lock(backing, me + "dev 0:99999\n")
    threading.Timer(1.5, os.close, (fd,)).start()
    rc, out, took = mount_once(backing, mnt, "wait_writer=5")
    assert rc is None and "waiting for the previous writer" in out, (rc, took, out)


# ---- mount -o remount,... -------------------------------------------------

def mount_opts(path):
    """(per-mount options, super block options) of the mount on path."""
    path = os.path.realpath(path)
    for line in open("/proc/self/mountinfo"):
        a, b = line.split(" - ")
        if a.split()[4] == path:
            found = (a.split()[5].split(","), b.split()[2].split(","))
    return found


def remount(m, opts, backing=None):
    """What `mount -o remount,OPTS M` runs: mount(8) calls the helper with
    the mount's flags merged with OPTS plus "remount", and the helper hands
    over to mount.fuse3, which runs `squeezefs BACKING M -o ...` (squeezefs
    found through PATH). Without mount.fuse3, squeezefs directly."""
    backing = str(backing or m.backing)
    bindir = os.path.dirname(squeezefs_bin())
    mf = shutil.which("mount.fuse3", path="/usr/sbin:/sbin:/usr/bin")
    if mf:
        cmd = [mf, backing, m.mnt, "-o", opts + ",remount", "-t", "fuse.squeezefs"]
    else:
        cmd = [squeezefs_bin(), backing, m.mnt, "-o", opts + ",remount"]
    env = dict(os.environ, PATH=f"{bindir}:/usr/bin:/bin")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


def test_remount_changes_the_kernel_flags(mount_factory):
    """remount,ro and back to rw, noatime, noexec: the kernel's flags
    change, the daemon keeps serving (same process), the data stays."""
    m = mount_factory()
    with open(m.path("f"), "wb") as f:
        f.write(b"before " * 1000)
    r = remount(m, "ro,nosuid,nodev,relatime")
    assert r.returncode == 0, r.stderr
    mo, so = mount_opts(m.mnt)
    assert "ro" in mo and "ro" in so, (mo, so)
    with pytest.raises(OSError) as ei:
        open(m.path("g"), "wb")
    assert ei.value.errno == errno.EROFS
    assert open(m.path("f"), "rb").read() == b"before " * 1000
    r = remount(m, "rw,nosuid,nodev,noatime,noexec")
    assert r.returncode == 0, r.stderr
    mo, so = mount_opts(m.mnt)
    assert {"rw", "noatime", "noexec", "nosuid", "nodev"} <= set(mo), mo
    with open(m.path("g"), "wb") as f:
        f.write(b"after " * 1000)
    assert m.proc.poll() is None
    assert m.unmount() == 0, m.log()
    assert run_cli("cat", os.path.join(m.backing, "g")).stdout == "after " * 1000


def test_remount_keeps_squeezefs_options_and_names_changed_ones(mount_factory):
    """The mount's own options repeated (as fstab lines are) are fine; a
    changed one fails the remount, naming it, and changes nothing."""
    m = mount_factory(options=["compress=zstd:3", "block=64K", "cache=64M", "nopack"])
    r = remount(m, "rw,nodev,compress=zstd:3,block=64K,cache=64M,nopack,noauto,_netdev")
    assert r.returncode == 0, r.stderr
    assert "nodev" in mount_opts(m.mnt)[0]
    r = remount(m, "ro,compress=lz4,cache=1G,nopack,allow_root")
    assert r.returncode != 0
    for words in ("compress=lz4", "compress=zstd:3/64K", "cache=1G", "allow_root",
                  "new mount"):
        assert words in r.stderr, r.stderr
    assert "nopack" not in r.stderr, r.stderr
    assert "rw" in mount_opts(m.mnt)[0]  # nothing changed
    with open(m.path("f"), "wb") as f:
        f.write(b"x" * 100000)
    assert m.unmount() == 0, m.log()


def test_remount_rw_of_a_read_only_mount_is_refused(mount_factory):
    m = mount_factory(options=["ro"])
    r = remount(m, "rw")
    assert r.returncode != 0 and "mounted read-only" in r.stderr, r.stderr
    r = remount(m, "ro,noatime")
    assert r.returncode == 0, r.stderr
    assert "noatime" in mount_opts(m.mnt)[0]
    assert m.unmount() == 0, m.log()


def test_remount_of_something_else_is_refused(mount_factory, tmp_path):
    m = mount_factory()
    other = tmp_path / "other"
    other.mkdir()
    r = subprocess.run([squeezefs_bin(), "-o", "remount,ro", str(other), m.mnt],
                       capture_output=True, text=True)
    assert r.returncode == 1 and f"not of {other}" in r.stderr, r.stderr
    r = subprocess.run([squeezefs_bin(), "-o", "remount,ro", m.backing, str(other)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "not a FUSE mount" in r.stderr, r.stderr
    assert "rw" in mount_opts(m.mnt)[0]
    assert m.unmount() == 0, m.log()


# ---- BACKING mounted on itself (in place) ---------------------------------

def run_refused(cmd, mnt):
    """Run a mount that must be refused (without -f: it returns either
    way); if it mounted after all, unmount it again."""
    os.makedirs(mnt, exist_ok=True)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if is_mounted(str(mnt)):
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        r.returncode = "mounted"
    return r


def test_backing_mounted_on_itself(tmp_path):
    """`squeezefs D D`: programs keep their paths (a kdb+ HDB). Files
    written through the mount are containers in D once it is unmounted, a
    plain file that was there reads through, and it mounts in place again.
    While it is mounted, another mount of D (read-only too) is refused with
    a message naming the situation; so is a squeezefs mount as BACKING."""
    d = tmp_path / "hdb"
    d.mkdir()
    (d / "old").write_bytes(b"plain before\n")
    data = payload(7, 1 << 20)
    m = Mount(d, d)
    try:
        assert open(m.path("old"), "rb").read() == b"plain before\n"
        with open(m.path("col"), "wb") as f:
            f.write(data)
        assert sorted(os.listdir(d)) == ["col", "old"]
        for opts in ((), ("-o", "ro")):
            r = run_refused([squeezefs_bin(), *opts, str(d), str(tmp_path / "o")],
                            tmp_path / "o")
            assert r.returncode == 1, r.stdout + r.stderr
            assert "is mounted on itself" in r.stderr, r.stderr
    finally:
        assert m.unmount() == 0, m.log()
    st = run_cli("stat", "--json", d / "col").stdout
    assert '"algorithm": "zstd"' in st, st
    assert os.path.getsize(d / "col") < len(data) / 4
    assert run_cli("cat", d / "col").stdout.encode() == data
    with Mount(d, d) as m2:
        assert open(m2.path("col"), "rb").read() == data
        # a squeezefs mount (not in place) is no BACKING either
        other = tmp_path / "nested"
        r = run_refused([squeezefs_bin(), "-o", "ro", str(d), str(other)], other)
        assert r.returncode == 1 and "mounted on itself" in r.stderr, r.stderr


def test_squeezefs_mount_as_backing_is_refused(mount_factory, tmp_path):
    m = mount_factory()
    out = tmp_path / "o"
    out.mkdir()
    r = run_refused([squeezefs_bin(), "-o", "ro", m.mnt, str(out)], out)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"is a squeezefs mount (of {os.path.realpath(m.backing)})" in r.stderr, r.stderr
    assert m.unmount() == 0, m.log()
