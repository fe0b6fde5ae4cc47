"""-o io_uring: FUSE over io_uring (src/mount/uring.c).

The mount really serves its requests through io_uring rings (the daemon's
io_uring descriptors, whose completion counters grow with the requests),
gives the same bytes, and without the option (or with libfuse's own
FUSE_URING_ENABLE in the environment) uses /dev/fuse alone. Whole suites
run over it with SQZ_MOUNT_OPTS=io_uring (tests/mountlib.py)."""
import os
import subprocess

import pytest

from mountlib import squeezefs_bin

PARAM = "/sys/module/fuse/parameters/enable_uring"
LIB_PREFIX = "/opt/squeezefs/libfuse"  # tools/build-libfuse.sh, meson's libfuse_prefix


def read_param():
    with open(PARAM) as f:
        return f.read().strip()


def write_param(v):
    with open(PARAM, "w") as f:
        f.write(v)


@pytest.fixture
def uring_param(monkeypatch):
    """The kernel's enable_uring set to Y for the test, restored after."""
    monkeypatch.delenv("SQZ_MOUNT_OPTS", raising=False)
    if not os.path.exists(PARAM):
        pytest.skip(f"the kernel has no FUSE over io_uring (no {PARAM})")
    old = read_param()
    if old != "Y":
        try:
            write_param("Y")
        except OSError as e:
            pytest.skip(f"cannot turn on {PARAM} ({e}): not root?")
    yield
    if old != "Y":
        write_param(old)


def uring_counters(pid):
    """{fd: CqTail} of the process's io_uring descriptors."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:[io_uring]":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        out[fd] = int(info["CqTail"].strip())
    return out


def abort_connection(pid):
    """Abort the FUSE connection of the daemon pid (a deadlocked daemon's
    threads, and its callers, wait in the kernel until then)."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/fuse":
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("fuse_connection:"):
                        with open(f"/sys/fs/fuse/connections/{line.split()[1]}/abort", "w") as a:
                            a.write("1")
                        return


def mount_uring(mount_factory, **kw):
    try:
        return mount_factory(options=["io_uring"], **kw)
    except RuntimeError as e:
        msg = str(e)
        if "built against libfuse" in msg and not os.path.exists(LIB_PREFIX + "/lib/libfuse3.so"):
            pytest.skip("squeezefs was built against a libfuse older than 3.18 "
                        "(tools/build-libfuse.sh builds 3.18): " + msg.splitlines()[-1])
        raise


def workload(root, n=60):
    """n files written, closed, read back: a few requests each."""
    for i in range(n):
        with open(os.path.join(root, f"f{i}"), "wb") as f:
            f.write(bytes([i]) * (1000 + i))
    for i in range(n):
        with open(os.path.join(root, f"f{i}"), "rb") as f:
            assert f.read() == bytes([i]) * (1000 + i)


def test_io_uring_serves_requests(mount_factory, uring_param):
    m = mount_uring(mount_factory)
    before = uring_counters(m.proc.pid)
    assert before, "no io_uring descriptor in the daemon with -o io_uring"
    assert "FUSE over io_uring" in m.log()
    workload(m.mnt)
    after = uring_counters(m.proc.pid)
    served = sum(after.values()) - sum(before.values())
    # 60 creates, flushes, releases, opens, reads...: all through the rings
    assert served >= 240, (before, after)
    assert m.unmount() == 0
    # The same bytes through a /dev/fuse mount of the same BACKING
    m2 = mount_factory(backing=m.backing, name="mnt2")
    assert uring_counters(m2.proc.pid) == {}
    for i in range(60):
        with open(m2.path(f"f{i}"), "rb") as f:
            assert f.read() == bytes([i]) * (1000 + i)


def test_without_option_no_rings_even_with_libfuse_env(mount_factory, uring_param):
    """libfuse's FUSE_URING_ENABLE would start the rings behind killpriv.c's
    custom I/O: the daemon clears it, the option alone decides."""
    m = mount_factory(env={"FUSE_URING_ENABLE": "1"})
    workload(m.mnt, n=5)
    assert uring_counters(m.proc.pid) == {}
    assert m.unmount() == 0


def test_io_uring_refused_when_kernel_param_off(tmp_path, monkeypatch):
    monkeypatch.delenv("SQZ_MOUNT_OPTS", raising=False)
    if not os.path.exists(PARAM):
        pytest.skip(f"the kernel has no FUSE over io_uring (no {PARAM})")
    old = read_param()
    (tmp_path / "b").mkdir()
    (tmp_path / "m").mkdir()
    try:
        write_param("N")
    except OSError as e:
        pytest.skip(f"cannot write {PARAM} ({e}): not root?")
    try:
        p = subprocess.run([squeezefs_bin(), "-f", "-o", "io_uring",
                            str(tmp_path / "b"), str(tmp_path / "m")],
                           capture_output=True, text=True, timeout=20)
    finally:
        write_param(old)
    assert p.returncode == 1
    if "built against libfuse" in p.stderr and not os.path.exists(LIB_PREFIX + "/lib/libfuse3.so"):
        pytest.skip("squeezefs was built against a libfuse older than 3.18")
    assert "enable_uring is N" in p.stderr and "echo Y" in p.stderr, p.stderr


READER = r"""
import hashlib, os, random, sys
p, size = sys.argv[1], int(sys.argv[2])
fd = os.open(p, os.O_RDONLY)
rnd = random.Random(7)
for _ in range(200):  # 4K reads inside 128K blocks: each used in part
    off = rnd.randrange(0, size - 4096) & ~4095
    assert len(os.pread(fd, 4096, off)) == 4096
data = b""
while True:  # then the whole file, with the kernel's read-ahead
    b = os.read(fd, 1 << 20)
    if not b:
        break
    data += b
os.close(fd)
sys.stdout.write(str(len(data)) + " " + hashlib.sha256(data).hexdigest())
"""


def test_io_uring_partial_reads_then_readahead_no_deadlock(mount_factory, uring_param):
    """A READ using a block in part, then more READs of the file's other
    pages (read-ahead) on the same core: with pushes into the page cache
    (push.c) the ring's one thread waited for those READs' pages behind it
    for ever (seen as a hang of test_posix over io_uring). Every read must
    end, with the right bytes."""
    import hashlib
    import random
    m = mount_uring(mount_factory)
    size = 8 << 20
    body = random.Random(3).randbytes(size // 4) * 4  # compressible, not constant
    with open(m.path("f"), "wb") as f:
        f.write(body)
    assert m.unmount() == 0
    m = mount_uring(mount_factory, backing=m.backing, name="mnt2")
    for cpu in (0, os.cpu_count() - 1):
        p = subprocess.Popen(["taskset", "-c", str(cpu), "python3", "-c", READER,
                              m.path("f"), str(size)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            abort_connection(m.proc.pid)  # the reader waits in the kernel
            m.kill()
            p.kill()
            p.wait()
            pytest.fail("reads over io_uring did not end within 30 s (deadlock)")
        assert p.returncode == 0, err
        n, h = out.split()
        assert int(n) == size and h == hashlib.sha256(body).hexdigest()
        subprocess.run(["sh", "-c", "echo 1 > /proc/sys/vm/drop_caches"])


def test_io_uring_clears_setid_bits(public_mount_factory, uring_param):
    """Over io_uring the handlers clear set-ID bits (libfuse's own
    FUSE_HANDLE_KILLPRIV_V2, killpriv.c): a write, a truncate, an
    open(O_TRUNC) and an fallocate by a user without CAP_FSETID clear them
    in BACKING; root's write keeps them. Before: the kernel, told V2 by
    nobody, left them to a daemon that did not clear them after O_TRUNC or
    fallocate."""
    import json
    from conftest import run_as
    if os.geteuid() != 0:
        pytest.skip("needs root (a second user)")
    try:
        m = public_mount_factory(options=["io_uring", "allow_other"])
    except RuntimeError as e:
        if "built against libfuse" in str(e) and not os.path.exists(LIB_PREFIX + "/lib/libfuse3.so"):
            pytest.skip("squeezefs was built against a libfuse older than 3.18")
        raise
    assert uring_counters(m.proc.pid)
    stats = json.loads(os.getxattr(m.mnt, "user.squeezefs.stats"))
    assert stats["killpriv_v2"] == 1, stats
    cases = {
        "write": "fd=os.open(p, os.O_WRONLY); os.write(fd, b'x'); os.close(fd)",
        "truncate": "os.truncate(p, 1)",
        "otrunc": "os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))",
        "fallocate": "import ctypes; fd=os.open(p, os.O_WRONLY); "
                     "assert ctypes.CDLL(None).fallocate(fd, 0, ctypes.c_long(0), "
                     "ctypes.c_long(65536)) == 0",
    }
    for name, code in cases.items():
        p = m.path(name)
        with open(p, "wb") as f:
            f.write(b"#!/bin/sh\n")
        os.chown(p, 65534, 65534)
        os.chmod(p, 0o6775)
        r = run_as(65534, f"import os; p={p!r}; {code}")
        assert r.returncode == 0, r.stderr
        back = os.stat(os.path.join(m.backing, name)).st_mode & 0o7777
        assert back == 0o775, f"{name}: backing mode {oct(back)}"
    p = m.path("root-write")
    with open(p, "wb") as f:
        f.write(b"#!/bin/sh\n")
    os.chmod(p, 0o4755)
    with open(p, "r+b") as f:
        f.write(b"#")
    assert os.stat(os.path.join(m.backing, "root-write")).st_mode & 0o7777 == 0o4755


def test_io_uring_pushes_the_neighbours_of_a_read(mount_factory, uring_param):
    """Over io_uring a READ that uses a block in part queues the push of the
    whole block to the pusher thread (src/node/pushq.c): then the block's
    other pages come from the kernel's page cache, without a READ (as on
    /dev/fuse). Before: nothing was pushed over io_uring, and every page
    read was a READ (13x slower cold 4K random reads, issue 29)."""
    import random
    import time
    from mountlib import mount_stats
    m = mount_uring(mount_factory)
    blocks, per = 8, 32  # 128 KiB blocks of 4 KiB pages
    body = random.Random(5).randbytes(blocks * per * 1024) * 4
    body = b"".join(body[i * 4096:(i + 1) * 4096] for i in range(blocks * per))
    with open(m.path("f"), "wb") as f:
        f.write(body)
    assert m.unmount() == 0  # a fresh mount: cold, no writer's release due
    m = mount_uring(mount_factory, backing=m.backing, name="mnt2")
    fd = os.open(m.path("f"), os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead
        s0 = mount_stats(m.mnt)
        for b in range(blocks):  # one page of each block
            p = b * per + 5
            assert os.pread(fd, 4096, p * 4096) == body[p * 4096:(p + 1) * 4096]
        deadline = time.monotonic() + 10
        while True:  # the pusher stores them after the replies
            s1 = mount_stats(m.mnt)
            if s1["pushed_blocks"] - s0["pushed_blocks"] >= blocks or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert s1["pushed_blocks"] - s0["pushed_blocks"] == blocks, (s0, s1)
        assert s1["logical_bytes_read"] - s0["logical_bytes_read"] == blocks * 4096
        for p in range(blocks * per):  # every page: from the kernel
            assert os.pread(fd, 4096, p * 4096) == body[p * 4096:(p + 1) * 4096], p
        s2 = mount_stats(m.mnt)
    finally:
        os.close(fd)
    assert s2["logical_bytes_read"] == s1["logical_bytes_read"], (s1, s2)
    assert s2["blocks_decompressed"] == s1["blocks_decompressed"], (s1, s2)
    assert uring_counters(m.proc.pid)


def test_io_uring_pushes_never_stale_racing_changes(mount_factory, tmp_path,
                                                    uring_param, monkeypatch):
    """test_randread's race over io_uring: random readers (whose blocks the
    pusher thread pushes) against a writer that opens for writing, writes,
    truncates, appends and recompresses the file. Never a stale page, many
    blocks pushed (>= 200), and no deadlock: the writer's opens and
    truncates that meet a push in flight are handed to the defer thread
    (src/fuse/defer.c) instead of waiting on their ring's one thread."""
    import threading
    import test_randread
    mount_uring(mount_factory, name="probe").unmount()  # skips without 3.18
    monkeypatch.setenv("SQZ_MOUNT_OPTS", "io_uring")
    made = []

    def factory(*a, **kw):
        made.append(mount_factory(*a, **kw))
        return made[-1]
    # a deadlock (a ring thread waiting for a push that waits for a READ
    # queued on that ring) fails the test instead of hanging it
    fired = []

    def abort_all():
        fired.append(1)
        for m in made:
            abort_connection(m.proc.pid)
    watchdog = threading.Timer(120, abort_all)
    watchdog.start()
    try:
        test_randread.test_random_reads_racing_writes_truncates_appends_recompress(
            factory, tmp_path)
    finally:
        watchdog.cancel()
    assert not fired, "aborted after 120 s: deadlock"


LSEEKER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b"squeeze " * 40000)  # dirty pages in the kernel (writeback cache)
assert os.lseek(fd, 0, os.SEEK_DATA) == 0
assert os.lseek(fd, 0, os.SEEK_HOLE) == 320000
os.close(fd)
"""


def run_or_abort(m, script):
    """Run script (python) on the file f of mount m; its stdout. A run that
    does not end within 30 s (a deadlock) aborts the connection and fails
    the test instead of hanging it."""
    p = subprocess.Popen(["python3", "-c", script, m.path("f")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        abort_connection(m.proc.pid)
        m.kill()
        p.kill()
        p.wait()
        pytest.fail("lseek over io_uring did not end within 30 s (deadlock)")
    assert p.returncode == 0, err
    return out


def test_io_uring_lseek_with_dirty_pages_no_deadlock(mount_factory, uring_param):
    """lseek(SEEK_DATA) of a file open for writing: the daemon invalidates the
    kernel's pages from the offset first, which writes the dirty ones back,
    as WRITEs sent from the thread asking, a ring thread pinned to its core:
    they queue on its own ring, which waited for them for ever (test_posix
    over io_uring hung). The defer thread does it now (src/fuse/defer.c)."""
    m = mount_uring(mount_factory)
    run_or_abort(m, LSEEKER)
    with open(m.path("f"), "rb") as f:
        assert f.read() == b"squeeze " * 40000


HOLE_SEEKER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"x" * 4096, 0)
os.pwrite(fd, b"y" * 4096, 1 << 20)  # a hole between, dirty in the kernel
print(os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 0, os.SEEK_HOLE),
      os.lseek(fd, 1 << 19, os.SEEK_DATA))
os.close(fd)
"""


def test_io_uring_seek_finds_a_hole_between_dirty_pages(mount_factory, uring_param):
    """Over io_uring the defer thread writes a file's dirty pages back
    before answering SEEK_DATA/SEEK_HOLE, so the hole between two dirty
    ranges is found (at block granularity) and the data after it too;
    nothing hangs."""
    m = mount_uring(mount_factory)
    out = run_or_abort(m, HOLE_SEEKER)
    d, h, d2 = map(int, out.split())
    assert d == 0 and 4096 <= h < (1 << 20) and h <= d2 <= (1 << 20), (d, h, d2)
    with open(m.path("f"), "rb") as f:
        body = f.read()
    assert body == b"x" * 4096 + bytes((1 << 20) - 4096) + b"y" * 4096
    assert m.unmount() == 0
