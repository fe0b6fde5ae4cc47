"""Faults of the backing store: ENOSPC (BACKING on a small tmpfs), EIO and
short writes (LD_PRELOAD tests/fault_shim.c in the daemon), corrupted
containers, and SIGTERM with unflushed data."""
import errno
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from mountlib import flip_bytes, is_mounted, run_cli, squeezefs_bin

HERE = os.path.dirname(os.path.abspath(__file__))


def text_data(n, seed=0):
    import random
    rnd = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"2026-11-23", b"12.50", b"IBM", b"\n"]
    out = bytearray()
    while len(out) < n:
        out += b" ".join(rnd.choice(words) for _ in range(12)) + b"\n"
    return bytes(out[:n])


def write_fsync(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_fsync_chunks(path, data, chunk=256 << 10):
    """Write data in chunks, fsync after each: several backing writes, so an
    Nth-write fault lands whatever the daemon's commit batching is."""
    with open(path, "wb", buffering=0) as f:
        for off in range(0, len(data), chunk):
            f.write(data[off:off + chunk])
            os.fsync(f.fileno())


def sha(b):
    return hashlib.sha256(b).hexdigest()


def damage_a_block(path, n=64, nblocks=None):
    """Invert n bytes of a backing container where they hit a data block
    (with nblocks, the file's number of blocks: neither its first nor its
    last block). The layout depends on how background commits were batched,
    so the middle of the file may be a commit record, a checkpoint, a
    superseded version of a block (redundant, no data lost) or any block of
    the file: try positions on a copy until reading the copy's content
    (`squeezefs cat`) fails at a block that qualifies, then damage the file
    itself there."""
    size = path.stat().st_size
    copy = path.with_name(path.name + ".probe")
    try:
        for frac in (1 / 2, 1 / 3, 2 / 3, 2 / 5, 3 / 5, 1 / 4, 3 / 4, 3 / 7, 4 / 7):
            pos = int(size * frac)
            shutil.copyfile(path, copy)
            flip_bytes(copy, pos, n)
            c = subprocess.run([squeezefs_bin(), "cat", str(copy)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, timeout=120)
            hit = re.search(r"block (\d+) is damaged", c.stderr)
            if c.returncode != 0 and hit and (
                    nblocks is None or 0 < int(hit.group(1)) < nblocks - 1):
                flip_bytes(path, pos, n)
                return pos
    finally:
        copy.unlink(missing_ok=True)
    raise AssertionError(f"no position in {path} hit a data block")


def map_damage(fd, data, step):
    """pread fd in step-sized pieces: each fails with EIO or returns exactly
    the expected bytes. Returns the offsets of the pieces that failed."""
    bad = []
    for off in range(0, len(data), step):
        try:
            got = os.pread(fd, step, off)
        except OSError as e:
            assert e.errno == errno.EIO, f"read at {off}: {e!r} (want EIO)"
            bad.append(off)
            continue
        assert got == data[off:off + step], f"read at {off} returned wrong data, not EIO"
    return bad


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root")


@pytest.fixture
def small_tmpfs(tmp_path):
    need_root()
    d = tmp_path / "small"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "sqz-enospc", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    yield d
    subprocess.run(["umount", str(d)], capture_output=True)
    if is_mounted(d):
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_enospc(mount_factory, small_tmpfs):
    backing = small_tmpfs / "backing"
    m = mount_factory(backing=backing)
    keep = text_data(1 << 20, 1)
    write_fsync(m.path("keep"), keep)

    got = None
    written = 0
    f = open(m.path("fill"), "wb", buffering=0)
    try:
        while written < (64 << 20):
            chunk = os.urandom(256 << 10)  # incompressible
            written += f.write(chunk)
            if written % (2 << 20) == 0:
                os.fsync(f.fileno())
    except OSError as e:
        got = e
    try:
        f.close()
    except OSError as e:
        got = got or e
    if got is None:
        try:
            os.sync()
        except OSError:
            pass
    assert got is not None, f"wrote {written} bytes to an 8 MiB backing store without an error"
    assert got.errno == errno.ENOSPC, f"expected ENOSPC, got {got!r}"

    assert m.proc.poll() is None, "daemon died on ENOSPC:\n" + m.log()[-3000:]
    assert sha(open(m.path("keep"), "rb").read()) == sha(keep), "fsync'ed file damaged by ENOSPC"
    assert "keep" in os.listdir(m.mnt)

    os.unlink(m.path("fill"))
    again = text_data(1 << 20, 2)
    write_fsync(m.path("again"), again)
    assert open(m.path("again"), "rb").read() == again
    assert m.unmount() == 0, m.log()[-3000:]
    m2 = mount_factory(backing=backing)
    assert open(m2.path("keep"), "rb").read() == keep
    assert open(m2.path("again"), "rb").read() == again
    assert m2.unmount() == 0
    v = run_cli("verify", backing, check=False)
    assert v.returncode == 0, v.stdout + v.stderr


def test_enospc_draft_falls_back_to_compression(mount_factory, small_tmpfs):
    """A new small file is stored as a draft at its close, about its own
    size (docs/FORMAT.md, "Drafts"); where only its compressed form fits,
    the close compresses it instead of failing."""
    backing = small_tmpfs / "backing"
    m = mount_factory(backing=backing)
    data = text_data(120_000, 3)                     # ~20 KB compressed

    def diag(name):
        st = run_cli("stat", "--json", m.path(name), check=False)
        return f"{name}: {st.stdout}{st.stderr}\nlog: {m.log()[-2000:]}"

    s0 = json_stats(m.mnt)
    with open(m.path("first"), "wb") as f:          # room: a draft
        f.write(data)
    s1 = json_stats(m.mnt)
    assert s1["draft_blocks"] == s0["draft_blocks"] + 1, (s0, s1, diag("first"))
    # leave about 48 KiB free: the compressed file fits, its draft does not
    st = os.statvfs(backing)
    free = st.f_bavail * st.f_frsize
    with open(backing / "ballast", "wb") as f:
        f.write(b"\xff" * (free - (48 << 10)))
    with open(m.path("small"), "wb") as f:
        f.write(data)                                # the close must succeed
    s2 = json_stats(m.mnt)
    assert s2["draft_blocks"] == s1["draft_blocks"], (s1, s2, diag("small"))
    assert open(m.path("small"), "rb").read() == data
    os.unlink(backing / "ballast")
    assert m.unmount() == 0, m.log()[-3000:]
    m2 = mount_factory(backing=backing)
    assert open(m2.path("first"), "rb").read() == data
    assert open(m2.path("small"), "rb").read() == data
    assert m2.unmount() == 0


def json_stats(mnt):
    import json
    return json.loads(run_cli("stats", "--json", mnt).stdout)


@pytest.fixture(scope="module")
def fault_shim(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler to build tests/fault_shim.c")
    out = tmp_path_factory.mktemp("fshim") / "fault_shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(out),
                    os.path.join(HERE, "fault_shim.c"), "-ldl"], check=True)
    return str(out)


@pytest.mark.parametrize("mode,nth,count", [("eio", 1, 1), ("eio", 3, 0), ("short", 1, 1)])
def test_backing_write_faults(mount_factory, tmp_path, fault_shim, mode, nth, count):
    backing = tmp_path / "backing"
    backing.mkdir()
    arm = tmp_path / "armed"
    env = {"LD_PRELOAD": fault_shim, "SQZ_FAULT_DIR": str(backing.resolve()),
           "SQZ_FAULT_ARM": str(arm), "SQZ_FAULT_NTH": str(nth),
           "SQZ_FAULT_COUNT": str(count), "SQZ_FAULT_MODE": mode,
           "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
    m = mount_factory(backing=backing, env=env)
    before = text_data(600 << 10, 3)
    write_fsync(m.path("before"), before)

    arm.touch()
    victim = text_data(2 << 20, 4) + os.urandom(256 << 10)
    err = None
    try:
        write_fsync_chunks(m.path("victim"), victim)
    except OSError as e:
        err = e
    arm.unlink()
    if mode == "eio":
        assert err is not None, "an EIO of the backing store was not reported to the writer"
        assert err.errno in (errno.EIO, errno.ENOSPC, errno.EROFS), repr(err)
        assert "fault_shim: injecting" in m.log()
    else:
        # a short write is no error: the daemon writes the rest, the data
        # is complete and the writer never hears of it
        assert err is None, f"a short backing write failed the writer: {err!r}\n{m.log()[-3000:]}"
        assert "fault_shim: injecting a short write" in m.log()
        assert open(m.path("victim"), "rb").read() == victim
    assert m.proc.poll() is None, "daemon died:\n" + m.log()[-3000:]
    assert open(m.path("before"), "rb").read() == before
    # still serving: a new file works
    after = text_data(300 << 10, 5)
    write_fsync(m.path("after"), after)
    assert open(m.path("after"), "rb").read() == after
    assert m.unmount() == 0, m.log()[-3000:]

    m2 = mount_factory(backing=backing)
    assert open(m2.path("before"), "rb").read() == before
    assert open(m2.path("after"), "rb").read() == after
    if err is None:
        assert open(m2.path("victim"), "rb").read() == victim
    elif os.path.exists(m2.path("victim")):
        with open(m2.path("victim"), "rb") as f:  # readable, whatever it holds
            f.read()
    assert m2.unmount() == 0
    v = run_cli("verify", backing, check=False)
    assert v.returncode == 0, v.stdout + v.stderr


@pytest.mark.parametrize("opts,calls,first", [
    (["nowriteback"], "write,fsync,close", "write"),
    ([], "write,fsync,close", "fsync"),
    ([], "write,close", "close"),
], ids=["nowriteback", "writeback-fsync", "writeback-close"])
def test_plain_file_write_making_no_progress(mount_factory, tmp_path, fault_shim,
                                             opts, calls, first):
    """A backing pwrite that returns 0 (no progress, no error) fails with
    EIO instead of spinning forever (the plain-file path). Without the
    kernel writeback cache write(2) itself reports it; with the cache (the
    default) the write lands in the kernel's page cache and the error is
    reported by fsync, or by close when the program does not fsync: never
    dropped."""
    backing = tmp_path / "backing"
    backing.mkdir()
    (backing / "plain.txt").write_bytes(b"not a container\n" * 100)
    arm = tmp_path / "armed"
    env = {"LD_PRELOAD": fault_shim, "SQZ_FAULT_DIR": str(backing.resolve()),
           "SQZ_FAULT_ARM": str(arm), "SQZ_FAULT_NTH": "1",
           "SQZ_FAULT_COUNT": "0", "SQZ_FAULT_MODE": "zero",
           "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
    m = mount_factory(backing=backing, env=env, options=opts)
    arm.touch()
    code = ("import os, sys\n"
            "fd = os.open(sys.argv[1], os.O_WRONLY)\n"
            "calls = {'write': lambda: os.pwrite(fd, b'x' * 4096, 0),\n"
            "         'fsync': lambda: os.fsync(fd),\n"
            "         'close': lambda: os.close(fd)}\n"
            "for name in sys.argv[2].split(','):\n"
            "    try:\n"
            "        calls[name]()\n"
            "    except OSError as e:\n"
            "        print(name, e.errno)\n"
            "        break\n")
    r = subprocess.run([sys.executable, "-c", code, m.path("plain.txt"), calls],
                       capture_output=True, text=True, timeout=30)
    arm.unlink()
    assert r.stdout.strip() == f"{first} {errno.EIO}", (r.stdout, r.stderr, m.log()[-2000:])
    assert "fault_shim: injecting a 0-byte write" in m.log()
    assert m.proc.poll() is None, "daemon died:\n" + m.log()[-3000:]
    assert m.unmount() == 0


def test_corruption_is_detected(mount_factory, tmp_path):
    backing = tmp_path / "backing"
    m = mount_factory(backing=backing)
    data_a = text_data(4 << 20, 6)
    data_b = text_data(1 << 20, 7)
    write_fsync(m.path("a"), data_a)
    write_fsync(m.path("b"), data_b)
    assert m.unmount() == 0

    damage_a_block(backing / "a")

    m2 = mount_factory(backing=backing)
    bs = 128 << 10
    fd = os.open(m2.path("a"), os.O_RDONLY)
    try:
        bad = map_damage(fd, data_a, bs)
    finally:
        os.close(fd)
    good = -(-len(data_a) // bs) - len(bad)
    assert bad, "64 flipped bytes in the middle of a container went unnoticed"
    assert good > 0, "one damaged block made the whole file unreadable"
    assert open(m2.path("b"), "rb").read() == data_b
    assert m2.proc.poll() is None
    log = m2.log()
    # the file and the block, as the read found them: "a: block N is damaged"
    named = re.findall(r"(?:^|[\s/])a: block (\d+) is damaged", log, re.M)
    assert named and {int(b) for b in named} == {off // bs for off in bad}, (
        f"daemon log does not name the damaged blocks {[off // bs for off in bad]} "
        f"of a:\n{log[-3000:]}")
    assert m2.unmount() == 0
    v = run_cli("verify", backing, check=False)
    assert v.returncode == 1, f"verify exit {v.returncode}:\n{v.stdout}{v.stderr}"
    out = v.stdout + v.stderr
    assert str(backing / "a") in out, f"verify does not name {backing / 'a'}:\n{out}"
    assert str(backing / "b") not in out.replace(str(backing / "b") + ": ok", ""), out
    vb = run_cli("verify", backing / "b", check=False)
    assert vb.returncode == 0, vb.stdout + vb.stderr


@pytest.mark.parametrize("spec", ["zstd:1/128K", "lz4/4K"])
def test_damaged_block_inside_large_reads(mount_factory, tmp_path, spec):
    """Reads much larger than a block (1 MiB reads, 1 MiB kernel read-ahead)
    that span a damaged block fail with EIO: never a short read, which FUSE
    would take for the end of the file (zero-filled pages, a shrunken file).
    Data around the damage stays readable, also right after such a failure."""
    backing = tmp_path / "backing"
    m = mount_factory(backing=backing, options=[f"compress={spec}"])
    data = text_data(6 << 20, 11)
    write_fsync(m.path("a"), data)
    assert m.unmount() == 0
    bs = int(spec.split("/")[1].rstrip("K")) << 10
    damage_a_block(backing / "a", nblocks=len(data) // bs)

    m2 = mount_factory(backing=backing, options=[f"compress={spec}"])
    p = m2.path("a")
    # 1. The whole file in one go: EIO, not a shorter or zero-filled file.
    with pytest.raises(OSError) as ei:
        with open(p, "rb") as f:
            f.read()
    assert ei.value.errno == errno.EIO
    assert os.stat(p).st_size == len(data), "a failed read changed the file size"
    # 2. Map the damage with 4 KiB reads; everything else reads back exactly.
    page = 4096
    fd = os.open(p, os.O_RDONLY)
    try:
        bad = map_damage(fd, data, page)
        assert bad, "the damage went unnoticed"
        lo, hi = bad[0], bad[-1] + page
        assert lo > 0 and hi < len(data)
        # 3. 1 MiB reads: those touching [lo, hi) fail with EIO or, as
        # read(2) may, return the exact bytes before the damage (and the
        # next read there fails); the others are exact.
        big = 1 << 20
        for off in range(0, len(data), big // 2):
            n = min(big, len(data) - off)
            if off < hi and off + n > lo:
                try:
                    got = os.pread(fd, n, off)
                except OSError as e:
                    assert e.errno == errno.EIO, f"1M read at {off}: {e!r}"
                    continue
                assert off + len(got) <= lo and got == data[off:off + len(got)], \
                    f"1M read at {off} over the damage returned {len(got)} wrong bytes"
                with pytest.raises(OSError) as ei:
                    os.pread(fd, n - len(got), off + len(got))
                assert ei.value.errno == errno.EIO
            else:
                assert os.pread(fd, n, off) == data[off:off + n], f"1M read at {off}"
        assert os.fstat(fd).st_size == len(data)
    finally:
        os.close(fd)
    # 4. Sequential reads up to the damage and from just after it.
    with open(p, "rb") as f:
        assert f.read(lo) == data[:lo]
        f.seek(hi)
        assert f.read() == data[hi:]
    assert m2.proc.poll() is None
    assert m2.unmount() == 0


@pytest.mark.parametrize("opts", [[], ["nowriteback"]], ids=["writeback", "nowriteback"])
def test_sigterm_flushes(mount_factory, tmp_path, opts):
    """Data written to a file still open (neither fsync'ed nor closed) is
    committed when the daemon gets SIGTERM: with the kernel writeback cache
    (the default) the daemon first has the kernel write its cached pages."""
    backing = tmp_path / "backing"
    m = mount_factory(backing=backing, options=opts)
    data = text_data(3 << 20, 8)
    fd = os.open(m.path("open-file"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)  # no fsync, no close
        m.proc.send_signal(signal.SIGTERM)
        try:
            rc = m.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = "still running 30 s after SIGTERM"
        still_mounted = is_mounted(m.mnt)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
        m.kill()  # cleanup whatever is left
    assert rc == 0, f"daemon exit {rc} on SIGTERM:\n{m.log()[-3000:]}"
    assert not still_mounted, "the daemon exited on SIGTERM but left the mount behind"
    m2 = mount_factory(backing=backing)
    assert open(m2.path("open-file"), "rb").read() == data
    assert m2.unmount() == 0


def keep_size_fallocate(fd, length):
    """fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, length): 0 or the errno."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                               ctypes.c_int64]
    r = libc.fallocate(fd, 1, 0, length)
    return 0 if r == 0 else ctypes.get_errno()


def test_fallocate_beyond_the_free_space_is_enospc(mount_factory, small_tmpfs):
    """xfstests generic/213: fallocate of more than the backing file system
    could hold even uncompressed fails with ENOSPC (and changes nothing);
    within it, it extends the file (nothing is reserved: squeezefs(8),
    NOTES). KEEP_SIZE: the same check over the whole range."""
    m = mount_factory(backing=small_tmpfs / "b")
    free = os.statvfs(m.backing)
    room = free.f_bfree * free.f_frsize
    fd = os.open(m.path("f"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as e:
            os.posix_fallocate(fd, 0, 2 * room)
        assert e.value.errno == errno.ENOSPC
        assert os.fstat(fd).st_size == 0
        assert keep_size_fallocate(fd, 2 * room) == errno.ENOSPC
        os.posix_fallocate(fd, 0, room // 2)
        assert os.fstat(fd).st_size == room // 2
        assert keep_size_fallocate(fd, room // 4) == 0
        assert os.fstat(fd).st_size == room // 2
        assert os.pread(fd, 4096, 1000) == b"\0" * 4096
    finally:
        os.close(fd)
    assert m.unmount() == 0, m.log()
