"""Holes through a real mount (issue 27): lseek SEEK_DATA / SEEK_HOLE at
block granularity, fallocate PUNCH_HOLE|KEEP_SIZE and ZERO_RANGE (with and
without KEEP_SIZE), st_blocks after a punch, and copy_file_range inside the
mount.

A block (the policy's block size) is a hole when all its bytes are zero
(never written, punched, zeroed, or written as zeros), committed or not;
every other block is data; the end of the file is a hole. So the answers
are defined from a model (a bytearray) and the block size alone."""
import ctypes
import errno
import os
import random

import pytest

from mountlib import Mount

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.fallocate.restype = ctypes.c_int

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
KiB = 1024
MiB = 1024 * KiB


def fallocate(fd, mode, off, length):
    if _libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def punch(fd, off, n):
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n)


def model_seek(m, bs, off, whence):
    """SEEK_DATA / SEEK_HOLE of bytes m at block granularity (or ENXIO)."""
    n = len(m)
    if off >= n:
        return -errno.ENXIO
    zero = bytes(bs)
    b = off // bs
    while b * bs < n:
        blk = bytes(m[b * bs:min(n, (b + 1) * bs)])
        data = blk != zero[:len(blk)]
        if data == (whence == os.SEEK_DATA):
            return max(off, b * bs)
        b += 1
    return n if whence == os.SEEK_HOLE else -errno.ENXIO


def fs_seek(fd, off, whence):
    try:
        return os.lseek(fd, off, whence)
    except OSError as e:
        return -e.errno


def check_seeks(fd, m, bs, rnd, where, k=8):
    offs = [0, len(m), max(0, len(m) - 1)] + [rnd.randrange(len(m) + bs + 1)
                                               for _ in range(k)]
    for off in offs:
        for whence in (os.SEEK_DATA, os.SEEK_HOLE):
            want = model_seek(m, bs, off, whence)
            got = fs_seek(fd, off, whence)
            assert got == want, (f"{where}: lseek({off}, "
                                 f"{'SEEK_DATA' if whence == os.SEEK_DATA else 'SEEK_HOLE'})"
                                 f" = {got}, want {want}")


def check_content(fd, m, where):
    assert os.fstat(fd).st_size == len(m), where
    got = os.pread(fd, len(m) + 10, 0)
    if got != bytes(m):
        i = next((i for i in range(min(len(got), len(m))) if got[i] != m[i]),
                 min(len(got), len(m)))
        raise AssertionError(f"{where}: content differs at {i} (len {len(got)} vs {len(m)})")


BS = 4096


@pytest.mark.parametrize("wb", ["writeback", "nowriteback"])
def test_model_writes_punches_zero_ranges_truncates_seeks(mount_factory, tmp_path, wb):
    opts = ["compress=zstd:1/4K"] + (["nowriteback"] if wb == "nowriteback" else [])
    backing = tmp_path / "b"
    m = mount_factory(options=opts, backing=backing)
    rnd = random.Random(27 if wb == "writeback" else 28)
    p = m.path("f")
    model = bytearray()
    span = 48 * BS
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        for op in range(400):
            r = rnd.random()
            off = rnd.randrange(span)
            n = rnd.randrange(1, 5 * BS)
            if rnd.random() < 0.3:
                off -= off % BS
                n = BS * rnd.randint(1, 5)
            where = f"op {op}"
            if r < 0.3:
                buf = bytes(n) if rnd.random() < 0.2 else rnd.randbytes(n)
                os.pwrite(fd, buf, off)
                if off > len(model):
                    model += bytes(off - len(model))
                model[off:off + n] = buf
            elif r < 0.45:
                punch(fd, off, n)
                end = min(off + n, len(model))
                if off < end:
                    model[off:end] = bytes(end - off)
            elif r < 0.6:
                keep = rnd.random() < 0.5
                fallocate(fd, FALLOC_FL_ZERO_RANGE | (FALLOC_FL_KEEP_SIZE if keep else 0),
                          off, n)
                end = min(off + n, len(model))
                if off < end:
                    model[off:end] = bytes(end - off)
                if not keep and off + n > len(model):
                    model += bytes(off + n - len(model))
            elif r < 0.68:
                t = rnd.randrange(span)
                os.ftruncate(fd, t)
                if t < len(model):
                    del model[t:]
                else:
                    model += bytes(t - len(model))
            elif r < 0.72:
                os.fsync(fd)
            elif r < 0.8:
                check_content(fd, model, where)
            else:
                check_seeks(fd, model, BS, rnd, where, k=3)
        check_content(fd, model, "end")
        check_seeks(fd, model, BS, rnd, "end", k=30)
    finally:
        os.close(fd)
    # another handle, a read-only one (no writer: no invalidation first)
    fd = os.open(p, os.O_RDONLY)
    try:
        check_seeks(fd, model, BS, rnd, "read-only handle", k=30)
    finally:
        os.close(fd)
    m.unmount()
    m2 = mount_factory(options=opts, backing=backing, name="again")
    fd = os.open(m2.path("f"), os.O_RDONLY)
    try:
        check_content(fd, model, "remounted")
        check_seeks(fd, model, BS, rnd, "remounted", k=40)
    finally:
        os.close(fd)


def test_seek_sees_data_the_kernel_has_not_written_back(mount_factory):
    """With the writeback cache the kernel asks for SEEK_DATA without
    writing back its dirty pages: the daemon has them written back first."""
    m = mount_factory(options=["compress=zstd:1/128K"])
    p = m.path("f")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, b"x" * 100, 5 * 128 * KiB + 7)
        assert os.lseek(fd, 0, os.SEEK_DATA) == 5 * 128 * KiB
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 0
        assert os.lseek(fd, 5 * 128 * KiB, os.SEEK_HOLE) == 5 * 128 * KiB + 107
    finally:
        os.close(fd)


def test_st_blksize_is_the_block_size_holes_are_counted_in(mount_factory):
    """st_blksize shows the file's block size, the unit SEEK_HOLE counts
    holes in (xfstests' seek_sanity_test takes it as the allocation size):
    for a file just created, one written, one packed, after a remount."""
    m = mount_factory(options=["compress=zstd:1/64K"])
    fd = os.open(m.path("new"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        assert os.fstat(fd).st_blksize == 64 * KiB
        os.pwrite(fd, b"y" * 10, 3 * 64 * KiB + 5)
        assert os.fstat(fd).st_blksize == 64 * KiB
        # data ends inside its block: the hole starts at the block's end
        assert os.lseek(fd, 3 * 64 * KiB, os.SEEK_HOLE) == 3 * 64 * KiB + 15
        os.pwrite(fd, b"z" * 10, 9 * 64 * KiB)
        assert os.lseek(fd, 3 * 64 * KiB, os.SEEK_HOLE) == 4 * 64 * KiB
    finally:
        os.close(fd)
    with open(m.path("small"), "wb") as f:
        f.write(b"s" * 5000)
    os.makedirs(m.path("d"))
    with open(m.path("d", "big"), "wb") as f:
        f.write(b"b" * (300 * KiB))
    m.unmount()
    m.start()
    for name in ("new", "small", "d/big"):
        assert os.stat(m.path(name)).st_blksize == 64 * KiB, name


def test_punch_frees_space_in_stat_and_du(mount_factory):
    m = mount_factory(options=["compress=zstd:1/64K"])
    p = m.path("f")
    data = random.Random(3).randbytes(8 * MiB)  # incompressible: stored raw
    with open(p, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    before = os.stat(p).st_blocks * 512
    assert before >= 8 * MiB
    fd = os.open(p, os.O_RDWR)
    try:
        punch(fd, 1 * MiB + 100, 6 * MiB)
        after = os.fstat(fd).st_blocks * 512
        assert os.fstat(fd).st_size == 8 * MiB
    finally:
        os.close(fd)
    assert after <= before - 5 * MiB, (before, after)
    assert os.stat(p).st_blocks * 512 <= before - 5 * MiB  # after its close too
    want = bytearray(data)
    want[1 * MiB + 100:7 * MiB + 100] = bytes(6 * MiB)
    with open(p, "rb") as f:
        assert f.read() == bytes(want)


def test_punch_and_fsync_survive_kill9(mount_factory, tmp_path):
    backing = tmp_path / "b"
    m = mount_factory(options=["compress=zstd:1/16K"], backing=backing)
    p = m.path("f")
    data = random.Random(5).randbytes(2 * MiB)
    with open(p, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    fd = os.open(p, os.O_RDWR)
    try:
        punch(fd, 100 * KiB + 3, 1 * MiB)
        fallocate(fd, FALLOC_FL_ZERO_RANGE, 2 * MiB - 10, 20 * KiB)
        os.fsync(fd)
    finally:
        os.close(fd)
    m.kill()
    want = bytearray(data)
    want[100 * KiB + 3:1124 * KiB + 3] = bytes(1 * MiB)
    want[2 * MiB - 10:] = bytes(10)
    want += bytes(20 * KiB - 10)
    m2 = mount_factory(options=["compress=zstd:1/16K"], backing=backing, name="again")
    fd = os.open(m2.path("f"), os.O_RDONLY)
    try:
        check_content(fd, want, "after kill -9")
        check_seeks(fd, want, 16 * KiB, random.Random(1), "after kill -9", k=20)
    finally:
        os.close(fd)


def test_fallocate_mode_rules(mnt):
    p = mnt.path("f")
    with open(p, "wb") as f:
        f.write(b"a" * 10000)
    fd = os.open(p, os.O_RDWR)
    try:
        with pytest.raises(OSError) as ei:  # PUNCH_HOLE needs KEEP_SIZE
            fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 100)
        assert ei.value.errno == errno.EOPNOTSUPP
        punch(fd, 20000, 100)  # past the end: nothing
        assert os.fstat(fd).st_size == 10000
        fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 9000, 5000)
        assert os.fstat(fd).st_size == 10000
        fallocate(fd, FALLOC_FL_ZERO_RANGE, 9500, 1000)
        assert os.fstat(fd).st_size == 10500
        assert os.pread(fd, 20000, 0) == b"a" * 9000 + bytes(1500)
    finally:
        os.close(fd)
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as ei:
            punch(fd, 0, 10)
        assert ei.value.errno == errno.EBADF
    finally:
        os.close(fd)


def test_punch_a_packed_file(mount_factory):
    """A packed small file is unpacked first, as for a write."""
    from test_pack import pointer, wait_states
    m = mount_factory(options=["compress=zstd:1/16K"])  # packed: one block
    p = m.path("small")
    data = random.Random(9).randbytes(3000) + b"t" * 9000  # < 16 KiB
    with open(p, "wb") as f:
        f.write(data)
    got = wait_states(m.backing, {"small": "packed"})
    assert got == {"small": "packed"}, m.log()[-2000:]
    assert pointer(os.path.join(m.backing, "small")) is not None
    zeros = m.path("zeros")
    with open(zeros, "wb") as f:
        f.write(bytes(5000))
    got = wait_states(m.backing, {"small": "packed", "zeros": "packed"})
    assert got == {"small": "packed", "zeros": "packed"}, m.log()[-2000:]
    fd = os.open(p, os.O_RDONLY)
    try:  # a packed file is one block: data
        assert os.lseek(fd, 0, os.SEEK_DATA) == 0
        assert os.lseek(fd, 10, os.SEEK_HOLE) == len(data)
    finally:
        os.close(fd)
    fd = os.open(zeros, os.O_RDONLY)
    try:  # ... or a hole
        check_seeks(fd, bytes(5000), 16 * KiB, random.Random(3), "packed zeros")
    finally:
        os.close(fd)
    fd = os.open(p, os.O_RDWR)
    try:
        punch(fd, 100, 8000)
        want = bytearray(data)
        want[100:8100] = bytes(8000)
        check_content(fd, want, "punched packed file")
        check_seeks(fd, want, 16 * KiB, random.Random(2), "punched packed file")
        punch(fd, 0, len(data))
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 0
        with pytest.raises(OSError) as ei:
            os.lseek(fd, 0, os.SEEK_DATA)
        assert ei.value.errno == errno.ENXIO
    finally:
        os.close(fd)


# ---------------------------------------------------------------- copy_file_range

def copy_all(src, dst, n, off_in=None, off_out=None):
    """copy_file_range until n bytes or the source's end; bytes copied."""
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(dst, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        done = 0
        while done < n:
            r = os.copy_file_range(fi, fo, n - done,
                                   None if off_in is None else off_in + done,
                                   None if off_out is None else off_out + done)
            if r == 0:
                break
            done += r
        return done
    finally:
        os.close(fi)
        os.close(fo)


def blocks_compressed(m):
    from mountlib import mount_stats
    return mount_stats(m.mnt)["blocks_compressed"]


def test_copy_file_range_same_policy_copies_stored_blocks(mount_factory, tmp_path):
    backing = tmp_path / "b"
    m = mount_factory(options=["compress=zstd:3/64K"], backing=backing)
    rnd = random.Random(11)
    data = b"".join(rnd.choice([bytes(64 * KiB), rnd.randbytes(64 * KiB),
                                b"abcd" * (16 * KiB)]) for _ in range(40)) + b"tail" * 999
    with open(m.path("a"), "wb") as f:
        f.write(data)
    before = blocks_compressed(m)
    assert copy_all(m.path("a"), m.path("b"), len(data) + 100) == len(data)
    # whole blocks went over as stored: only the partial last one compressed
    assert blocks_compressed(m) - before <= 2
    with open(m.path("b"), "rb") as f:
        assert f.read() == data
    fd = os.open(m.path("b"), os.O_RDONLY)
    try:
        check_seeks(fd, data, 64 * KiB, rnd, "copy", k=20)
    finally:
        os.close(fd)
    # over a destination with uncommitted data of its own, at an offset
    # a block apart, then not block-aligned on both sides (same place in
    # the block), then at unrelated offsets
    want = bytearray(rnd.randbytes(5 * 64 * KiB))
    fo = os.open(m.path("c"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fo, want)
    finally:
        os.close(fo)
    cases = [(64 * KiB, 128 * KiB, 3 * 64 * KiB), (1000, 64 * KiB + 1000, 200 * KiB + 5),
             (12345, 777, 300 * KiB), (len(data) - 5000, 6 * 64 * KiB, 9000)]
    for off_in, off_out, n in cases:
        got = copy_all(m.path("a"), m.path("c"), n, off_in, off_out)
        n = min(n, len(data) - off_in)
        assert got == n
        if off_out > len(want):
            want += bytes(off_out - len(want))
        want[off_out:off_out + n] = data[off_in:off_in + n]
        with open(m.path("c"), "rb") as f:
            assert f.read() == bytes(want), (off_in, off_out, n)
    # past the source's end: nothing
    assert copy_all(m.path("a"), m.path("c"), 100, len(data) + 10, 0) == 0
    m.unmount()
    m2 = mount_factory(options=["compress=zstd:3/64K"], backing=backing, name="again")
    for name, content in (("a", data), ("b", data), ("c", bytes(want))):
        with open(m2.path(name), "rb") as f:
            assert f.read() == content, name
    assert run_verify(backing) == 0


def run_verify(backing):
    from mountlib import run_cli
    return run_cli("verify", backing, check=False).returncode


def test_copy_file_range_other_policy_and_same_file(mount_factory):
    m = mount_factory(options=["compress=zstd:1/64K"])
    os.mkdir(m.path("lz"))
    os.setxattr(m.path("lz"), "user.squeezefs.policy", b"lz4/16K")
    rnd = random.Random(12)
    data = rnd.randbytes(200 * KiB) + b"xyz" * 100000
    with open(m.path("a"), "wb") as f:
        f.write(data)
    before = blocks_compressed(m)
    assert copy_all(m.path("a"), m.path("lz/b"), len(data)) == len(data)
    assert blocks_compressed(m) - before >= len(data) // (16 * KiB) - 1  # recompressed
    with open(m.path("lz/b"), "rb") as f:
        assert f.read() == data
    assert os.getxattr(m.path("lz/b"), "user.squeezefs.stat")  # a container
    # within one file: not overlapping is a copy, overlapping is EINVAL
    p = m.path("a")
    assert copy_all(p, p, 100 * KiB, 0, len(data) + 3) == 100 * KiB
    want = data + bytes(3) + data[:100 * KiB]
    with open(p, "rb") as f:
        assert f.read() == want
    fd = os.open(p, os.O_RDWR)
    try:
        with pytest.raises(OSError) as ei:
            os.copy_file_range(fd, fd, 64 * KiB, 0, 1000)
        assert ei.value.errno == errno.EINVAL
    finally:
        os.close(fd)
