"""POSIX behaviour of a squeezefs mount, the BACKING layout, and remount
persistence. Every test mounts in a temp dir (fixtures in conftest.py)."""
import ctypes
import ctypes.util
import errno
import json
import mmap
import os
import random
import stat
import subprocess

import pytest

from fsutil import rd, text, wr
from mountlib import run_cli, squeezefs_bin

KiB = 1024
MiB = 1024 * 1024
GiB = 1024 * MiB

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
FALLOC_FL_KEEP_SIZE = 1


def renameat2(old, new, flags):
    f = _libc.renameat2
    f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if f(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)


def fallocate(fd, mode, off, length):
    f = _libc.fallocate
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if f(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def sqz_cat(path):
    p = subprocess.run([squeezefs_bin(), "cat", str(path)], capture_output=True, timeout=120)
    assert p.returncode == 0, f"squeezefs cat {path} failed: {p.stderr.decode(errors='replace')}"
    return p.stdout


KDB_ALGS = {0: "none", 1: "qipc", 2: "gzip", 3: "snappy", 4: "lz4hc", 5: "zstd", 6: "lz4"}


def alg_name(v):
    """`algorithm` of `squeezefs stat --json` as a name (number or name accepted)."""
    if isinstance(v, int):
        return KDB_ALGS.get(v, str(v))
    return str(v).lower()


def sqz_stat(path):
    p = run_cli("stat", "--json", path)
    return json.loads(p.stdout)


# ---------------------------------------------------------------- basics

def test_create_write_read_getattr(mnt):
    p = mnt.path("hello.txt")
    data = text(300 * KiB)
    wr(p, data)
    st = os.stat(p)
    assert stat.S_ISREG(st.st_mode)
    assert st.st_size == len(data)  # uncompressed length
    assert rd(p) == data
    assert os.path.exists(p) and not os.path.exists(mnt.path("nothere"))
    with pytest.raises(FileNotFoundError):
        os.stat(mnt.path("nothere"))


def test_size_visible_before_close(mnt):
    p = mnt.path("f")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, b"x" * 10000)
        assert os.fstat(fd).st_size == 10000
        assert os.stat(p).st_size == 10000
        os.pwrite(fd, b"y", 200000)
        assert os.stat(p).st_size == 200001
        assert os.pread(fd, 10, 9995) == b"xxxxx" + bytes(5)
    finally:
        os.close(fd)


def test_st_blocks_reflect_compressed_size(mnt):
    p = mnt.path("big.txt")
    data = text(8 * MiB)
    wr(p, data)
    st = os.stat(p)
    assert st.st_size == 8 * MiB
    # highly compressible: allocation much smaller than 8 MiB
    assert st.st_blocks * 512 < 1 * MiB, f"st_blocks*512 = {st.st_blocks * 512}"
    du = subprocess.run(["du", "-k", p], capture_output=True, text=True, check=True)
    assert int(du.stdout.split()[0]) < 1024, du.stdout
    assert rd(p) == data


def test_multiblock_random_access(mnt):
    p = mnt.path("multi")
    rnd = random.Random(5)
    data = bytearray(text(3 * MiB + 777))
    data[MiB:MiB + 300 * KiB] = rnd.randbytes(300 * KiB)  # incompressible region
    wr(p, bytes(data))
    fd = os.open(p, os.O_RDWR)
    try:
        for _ in range(200):
            off = rnd.randrange(0, len(data) + 1000)
            n = rnd.choice((1, 17, 4096, 4097, 65536, 131073, 400000))
            assert os.pread(fd, n, off) == bytes(data[off:off + n]), (off, n)
        for _ in range(50):
            off = rnd.randrange(0, len(data))
            chunk = rnd.randbytes(rnd.choice((1, 100, 5000, 140000)))
            os.pwrite(fd, chunk, off)
            data[off:off + len(chunk)] = chunk
        assert os.pread(fd, len(data) + 10, 0) == bytes(data)
    finally:
        os.close(fd)
    assert rd(p) == bytes(data)


def test_read_at_and_past_eof(mnt):
    p = mnt.path("small")
    wr(p, b"0123456789")
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.pread(fd, 100, 5) == b"56789"
        assert os.pread(fd, 100, 10) == b""
        assert os.pread(fd, 100, 1 << 30) == b""
    finally:
        os.close(fd)


def test_readdir(mnt):
    names = {"a", "b.txt", "c d", "sub"}
    for n in names - {"sub"}:
        wr(mnt.path(n), n.encode())
    os.mkdir(mnt.path("sub"))
    os.symlink("a", mnt.path("lnk"))
    assert set(os.listdir(mnt.path())) == names | {"lnk"}
    kinds = {e.name: (e.is_dir(follow_symlinks=False), e.is_symlink()) for e in os.scandir(mnt.path())}
    assert kinds["sub"] == (True, False)
    assert kinds["lnk"] == (False, True)
    assert kinds["a"] == (False, False)
    assert os.listdir(mnt.path("sub")) == []


def test_mkdir_rmdir(mnt):
    d = mnt.path("d")
    os.mkdir(d, 0o750)
    st = os.stat(d)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o750 & ~current_umask()
    with pytest.raises(FileExistsError):
        os.mkdir(d)
    wr(os.path.join(d, "f"), b"x")
    with pytest.raises(OSError) as ei:
        os.rmdir(d)
    assert ei.value.errno == errno.ENOTEMPTY
    with pytest.raises(NotADirectoryError):
        os.rmdir(os.path.join(d, "f"))
    os.unlink(os.path.join(d, "f"))
    os.rmdir(d)
    assert not os.path.exists(d)
    with pytest.raises(FileNotFoundError):
        os.rmdir(d)


def current_umask():
    u = os.umask(0)
    os.umask(u)
    return u


def test_create_mode(mnt):
    p = mnt.path("m")
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o640)
    os.close(fd)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640 & ~current_umask()


# ---------------------------------------------------------------- open flags

def test_o_append(mnt):
    p = mnt.path("app")
    wr(p, b"first\n")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, b"second\n")
        os.write(fd, b"third\n")
    finally:
        os.close(fd)
    with open(p, "ab") as f:
        f.write(b"fourth\n")
    assert rd(p) == b"first\nsecond\nthird\nfourth\n"


def test_o_trunc(mnt):
    p = mnt.path("t")
    wr(p, text(500 * KiB))
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    try:
        assert os.fstat(fd).st_size == 0
        os.write(fd, b"new")
    finally:
        os.close(fd)
    assert rd(p) == b"new"
    assert os.stat(p).st_size == 3


def test_o_excl(mnt):
    p = mnt.path("x")
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.close(fd)
    with pytest.raises(FileExistsError):
        os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.symlink("dangling-target", mnt.path("dl"))
    with pytest.raises(FileExistsError):
        os.open(mnt.path("dl"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)


def test_access_modes_ebadf(mnt):
    p = mnt.path("rw")
    wr(p, b"content")
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as ei:
            os.write(fd, b"nope")
        assert ei.value.errno == errno.EBADF
        assert os.read(fd, 100) == b"content"
    finally:
        os.close(fd)
    fd = os.open(p, os.O_WRONLY)
    try:
        with pytest.raises(OSError) as ei:
            os.read(fd, 10)
        assert ei.value.errno == errno.EBADF
        os.write(fd, b"C")
    finally:
        os.close(fd)
    fd = os.open(p, os.O_RDWR)
    try:
        os.pwrite(fd, b"O", 1)
        assert os.pread(fd, 100, 0) == b"COntent"
    finally:
        os.close(fd)
    assert rd(p) == b"COntent"


def test_open_errors(mnt):
    os.mkdir(mnt.path("dir"))
    with pytest.raises(IsADirectoryError):
        os.open(mnt.path("dir"), os.O_WRONLY)
    with pytest.raises(FileNotFoundError):
        os.open(mnt.path("missing"), os.O_RDONLY)
    wr(mnt.path("file"), b"x")
    with pytest.raises(NotADirectoryError):
        os.open(mnt.path("file", "sub"), os.O_RDONLY)


# ---------------------------------------------------------------- truncate

def test_truncate_shrink_grow_zero(mnt):
    p = mnt.path("tr")
    data = text(1 * MiB + 5000)
    wr(p, data)
    os.truncate(p, 300001)
    assert os.stat(p).st_size == 300001
    assert rd(p) == data[:300001]
    os.truncate(p, 2 * MiB + 3)  # grow: zeros
    got = rd(p)
    assert len(got) == 2 * MiB + 3
    assert got[:300001] == data[:300001]
    assert got[300001:] == bytes(2 * MiB + 3 - 300001)
    os.truncate(p, 0)
    assert os.stat(p).st_size == 0
    assert rd(p) == b""


def test_ftruncate_then_write(mnt):
    p = mnt.path("ftr")
    data = bytearray(text(700 * KiB))
    wr(p, bytes(data))
    fd = os.open(p, os.O_RDWR)
    try:
        os.ftruncate(fd, 123457)
        del data[123457:]
        assert os.fstat(fd).st_size == 123457
        # shrink then grow: the old tail must not reappear
        os.ftruncate(fd, 600000)
        data += bytes(600000 - len(data))
        os.pwrite(fd, b"END", 599997)
        data[599997:600000] = b"END"
        assert os.pread(fd, 700000, 0) == bytes(data)
    finally:
        os.close(fd)
    assert rd(p) == bytes(data)


# ---------------------------------------------------------------- rename / unlink / link

def test_rename_overwrite(mnt):
    a, b = mnt.path("a"), mnt.path("b")
    wr(a, b"AAA")
    wr(b, text(200 * KiB))
    os.rename(a, b)
    assert not os.path.exists(a)
    assert rd(b) == b"AAA"
    assert os.listdir(mnt.path()) == ["b"]


def test_rename_noreplace(mnt):
    a, b = mnt.path("a"), mnt.path("b")
    wr(a, b"A")
    wr(b, b"B")
    with pytest.raises(OSError) as ei:
        renameat2(a, b, RENAME_NOREPLACE)
    assert ei.value.errno == errno.EEXIST
    assert rd(a) == b"A" and rd(b) == b"B"
    renameat2(a, mnt.path("c"), RENAME_NOREPLACE)
    assert rd(mnt.path("c")) == b"A" and not os.path.exists(a)


def test_rename_exchange(mnt):
    a, b = mnt.path("a"), mnt.path("b")
    wr(a, text(10000, 1))
    os.mkdir(b)
    wr(os.path.join(b, "inner"), b"inner")
    renameat2(a, b, RENAME_EXCHANGE)
    assert os.path.isdir(a) and rd(os.path.join(a, "inner")) == b"inner"
    assert rd(b) == text(10000, 1)


def test_rename_dirs_and_across_dirs(mnt):
    os.makedirs(mnt.path("x", "y"))
    wr(mnt.path("x", "y", "f"), b"deep")
    os.mkdir(mnt.path("z"))
    os.rename(mnt.path("x", "y", "f"), mnt.path("z", "g"))
    assert rd(mnt.path("z", "g")) == b"deep"
    os.rename(mnt.path("x"), mnt.path("z", "x2"))
    assert os.path.isdir(mnt.path("z", "x2", "y"))
    # rename a dir over an empty dir works, over a non-empty one fails
    os.mkdir(mnt.path("empty"))
    os.rename(mnt.path("z", "x2"), mnt.path("empty"))
    assert os.path.isdir(mnt.path("empty", "y"))
    with pytest.raises(OSError) as ei:
        os.rename(mnt.path("empty"), mnt.path("z"))
    assert ei.value.errno in (errno.ENOTEMPTY, errno.EEXIST)


def test_rename_open_file_and_parent(mnt):
    """An open fd follows its file across renames (of the file and of the
    directory holding it)."""
    os.mkdir(mnt.path("d1"))
    p = mnt.path("d1", "f")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, b"one ")
        os.rename(p, mnt.path("d1", "g"))
        os.write(fd, b"two ")
        os.rename(mnt.path("d1"), mnt.path("d2"))
        os.write(fd, b"three")
        os.fsync(fd)
        assert os.pread(fd, 100, 0) == b"one two three"
    finally:
        os.close(fd)
    assert rd(mnt.path("d2", "g")) == b"one two three"
    assert not os.path.exists(mnt.path("d1"))


def test_rename_over_open_file_keeps_old_content(mnt):
    a, b = mnt.path("a"), mnt.path("b")
    wr(a, b"new content")
    wr(b, b"old content")
    fd = os.open(b, os.O_RDONLY)
    try:
        os.rename(a, b)
        assert os.pread(fd, 100, 0) == b"old content"
    finally:
        os.close(fd)
    assert rd(b) == b"new content"


def test_unlink(mnt):
    p = mnt.path("u")
    wr(p, b"bye")
    os.unlink(p)
    assert not os.path.exists(p)
    assert os.listdir(mnt.path()) == []
    with pytest.raises(FileNotFoundError):
        os.unlink(p)
    os.mkdir(mnt.path("dir"))
    with pytest.raises(OSError) as ei:
        os.unlink(mnt.path("dir"))
    assert ei.value.errno in (errno.EISDIR, errno.EPERM)


def test_unlink_while_open(mnt):
    p = mnt.path("open-unlinked")
    data = text(300 * KiB)
    wr(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        os.unlink(p)
        assert not os.path.exists(p)
        assert os.pread(fd, len(data) + 1, 0) == data
        os.pwrite(fd, b"still writable", 10)
        assert os.pread(fd, 14, 10) == b"still writable"
        wr(p, b"a new file with the same name")
        assert os.pread(fd, 14, 10) == b"still writable"
    finally:
        os.close(fd)
    assert rd(p) == b"a new file with the same name"
    assert not [n for n in os.listdir(mnt.path()) if n.startswith(".sqz-tmp.")]


def test_hard_link(mnt):
    a, b = mnt.path("a"), mnt.path("b")
    wr(a, b"shared")
    os.link(a, b)
    assert os.stat(a).st_nlink == 2 and os.stat(b).st_nlink == 2
    assert os.stat(a).st_ino == os.stat(b).st_ino
    with open(a, "r+b") as f:
        f.seek(0, 2)
        f.write(b" data via a")
    assert rd(b) == b"shared data via a"
    with open(b, "ab") as f:
        f.write(b", via b")
    assert rd(a) == b"shared data via a, via b"
    os.unlink(a)
    assert os.stat(b).st_nlink == 1
    assert rd(b) == b"shared data via a, via b"


def test_symlink_readlink(mnt):
    targets = {
        "l1": "plain-target",
        "l2": "../outside/of the mount/with spaces",
        "l3": "/absolute/path/ünïcødé",
        "l4": "dir/",
    }
    wr(mnt.path("plain-target"), b"pointed to")
    for name, t in targets.items():
        os.symlink(t, mnt.path(name))
    for name, t in targets.items():
        st = os.lstat(mnt.path(name))
        assert stat.S_ISLNK(st.st_mode)
        assert os.readlink(mnt.path(name)) == t
    assert rd(mnt.path("l1")) == b"pointed to"
    assert os.stat(mnt.path("l1")).st_size == len(b"pointed to")
    with pytest.raises(FileNotFoundError):
        os.stat(mnt.path("l2"))
    with pytest.raises(FileExistsError):
        os.symlink("x", mnt.path("l1"))


# ---------------------------------------------------------------- attributes

def test_chmod_chown_utime(mnt):
    p = mnt.path("attr")
    wr(p, b"x" * 1000)
    os.chmod(p, 0o4711)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o4711
    os.chmod(p, 0o600)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    os.chown(p, 1234, 5678)
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    os.chown(p, -1, 42)
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (1234, 42)
    atime = 1_000_000_000_123_456_789
    mtime = 1_200_000_000_987_654_321
    os.utime(p, ns=(atime, mtime))
    st = os.stat(p)
    assert st.st_mtime_ns == mtime
    assert st.st_atime_ns == atime
    assert st.st_size == 1000  # metadata changes keep the logical size
    d = mnt.path("dir")
    os.mkdir(d)
    os.chmod(d, 0o701)
    os.utime(d, ns=(atime, mtime))
    st = os.stat(d)
    assert stat.S_IMODE(st.st_mode) == 0o701 and st.st_mtime_ns == mtime


def test_write_updates_mtime(mnt):
    p = mnt.path("mt")
    wr(p, b"abc")
    old = 1_000_000_000_000_000_000
    os.utime(p, ns=(old, old))
    with open(p, "r+b") as f:
        f.write(b"z")
    assert os.stat(p).st_mtime_ns > old
    os.utime(p, ns=(old, old))
    os.truncate(p, 1)
    assert os.stat(p).st_mtime_ns > old


def test_statfs(mnt):
    s = os.statvfs(mnt.path())
    assert s.f_bsize > 0 and s.f_blocks > 0
    assert s.f_bfree <= s.f_blocks and s.f_bavail <= s.f_blocks
    assert s.f_namemax >= 255
    df = subprocess.run(["df", mnt.path()], capture_output=True, text=True)
    assert df.returncode == 0, df.stderr


def test_fsync_fdatasync(mnt):
    p = mnt.path("sync")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, text(200 * KiB))
        os.fsync(fd)
        os.write(fd, b"tail")
        os.fdatasync(fd)
        assert os.fstat(fd).st_size == 200 * KiB + 4
    finally:
        os.close(fd)
    dfd = os.open(mnt.path(), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)  # fsync of a read-only fd is allowed
    finally:
        os.close(fd)


def test_user_xattrs(mnt):
    p = mnt.path("xf")
    d = mnt.path("xd")
    wr(p, b"x")
    os.mkdir(d)
    for target in (p, d):
        os.setxattr(target, "user.test", b"value1")
        os.setxattr(target, "user.bin", bytes(range(256)))
        assert os.getxattr(target, "user.test") == b"value1"
        assert os.getxattr(target, "user.bin") == bytes(range(256))
        names = os.listxattr(target)
        assert "user.test" in names and "user.bin" in names
        os.setxattr(target, "user.test", b"v2", os.XATTR_REPLACE)
        assert os.getxattr(target, "user.test") == b"v2"
        with pytest.raises(FileExistsError):
            os.setxattr(target, "user.test", b"v3", os.XATTR_CREATE)
        os.removexattr(target, "user.test")
        with pytest.raises(OSError) as ei:
            os.getxattr(target, "user.test")
        assert ei.value.errno == errno.ENODATA
        assert "user.test" not in os.listxattr(target)
    # xattrs do not disturb the content
    assert rd(p) == b"x"


# ---------------------------------------------------------------- fallocate / mmap

def test_posix_fallocate_extends_with_zeros(mnt):
    p = mnt.path("fa")
    wr(p, b"abc")
    fd = os.open(p, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 1 * MiB)
        assert os.fstat(fd).st_size == 1 * MiB
        os.posix_fallocate(fd, 0, 100)  # inside: no change
        assert os.fstat(fd).st_size == 1 * MiB
    finally:
        os.close(fd)
    assert rd(p) == b"abc" + bytes(MiB - 3)


def test_fallocate_keep_size(mnt):
    p = mnt.path("fk")
    wr(p, b"0123456789")
    fd = os.open(p, os.O_RDWR)
    try:
        try:
            fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4 * MiB)
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
        assert os.fstat(fd).st_size == 10
        assert os.pread(fd, 100, 0) == b"0123456789"
    finally:
        os.close(fd)
    assert os.stat(p).st_size == 10


def test_mmap_shared_write(mount_factory):
    m = mount_factory()
    p = m.path("mm")
    size = 300 * KiB + 123
    base = text(size, 7)
    wr(p, base)
    exp = bytearray(base)
    fd = os.open(p, os.O_RDWR)
    try:
        mp = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        for off, chunk in ((0, b"HEAD"), (4095, b"XY"), (131071, b"across-block"),
                           (size - 5, b"TAIL!")):
            mp[off:off + len(chunk)] = chunk
            exp[off:off + len(chunk)] = chunk
        mp.flush()
        mp.close()
    finally:
        os.close(fd)
    assert rd(p) == bytes(exp)
    m.unmount()
    m.start()
    assert rd(p) == bytes(exp)


def test_mmap_read(mnt):
    p = mnt.path("mr")
    data = text(1 * MiB + 4321, 3)
    wr(p, data)
    with open(p, "rb") as f:
        mp = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            assert mp[:] == data
            assert mp[500000:500100] == data[500000:500100]
        finally:
            mp.close()


def test_mmap_write_then_pwrite_coherent(mnt):
    p = mnt.path("coh")
    wr(p, bytes(64 * KiB))
    fd = os.open(p, os.O_RDWR)
    try:
        mp = mmap.mmap(fd, 64 * KiB)
        mp[100:105] = b"mmap!"
        mp.flush()
        os.pwrite(fd, b"write", 200)
        assert mp[200:205] == b"write"
        assert os.pread(fd, 5, 100) == b"mmap!"
        mp.close()
    finally:
        os.close(fd)


# ---------------------------------------------------------------- special files

def test_fifo(mnt):
    p = mnt.path("fifo")
    os.mkfifo(p, 0o600)
    assert stat.S_ISFIFO(os.stat(p).st_mode)
    assert "fifo" in os.listdir(mnt.path())
    assert stat.S_ISFIFO(os.lstat(os.path.join(mnt.backing, "fifo")).st_mode)


def test_access(mnt):
    p = mnt.path("acc")
    wr(p, b"x")
    os.chmod(p, 0o644)
    assert os.access(p, os.R_OK) and os.access(p, os.W_OK)
    assert not os.access(p, os.X_OK)  # even root needs one x bit
    os.chmod(p, 0o755)
    assert os.access(p, os.X_OK)
    assert os.access(mnt.path(), os.R_OK | os.W_OK | os.X_OK)
    assert not os.access(mnt.path("nope"), os.F_OK)


def test_sparse_file(mount_factory):
    m = mount_factory()
    p = m.path("sparse")
    off = GiB + 12345
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, b"Z", off)
        assert os.fstat(fd).st_size == off + 1
        for pos in (0, 4096, 300 * MiB + 7, GiB - MiB, off - 200000):
            n = min(MiB, off - pos)
            assert os.pread(fd, n, pos) == bytes(n), f"non-zero bytes at {pos}"
        assert os.pread(fd, 10, off - 3) == b"\0\0\0Z"
    finally:
        os.close(fd)
    st = os.stat(p)
    assert st.st_size == off + 1
    assert st.st_blocks * 512 < 2 * MiB, f"du of sparse file: {st.st_blocks * 512}"
    m.unmount()
    b = os.stat(os.path.join(m.backing, "sparse"))
    assert b.st_blocks * 512 < 2 * MiB, f"backing allocation {b.st_blocks * 512}"
    assert b.st_size < 64 * MiB, f"backing st_size {b.st_size}"
    m.start()
    assert os.stat(p).st_size == off + 1
    with open(p, "rb") as f:
        f.seek(off - 1)
        assert f.read() == b"\0Z"


def test_many_files(mnt):
    d = mnt.path("many")
    os.mkdir(d)
    names = {f"file-{i:04d}" for i in range(1000)}
    for n in names:
        with open(os.path.join(d, n), "wb") as f:
            f.write(n.encode())
    listed = os.listdir(d)
    assert len(listed) == 1000 and set(listed) == names
    for n in ("file-0000", "file-0500", "file-0999"):
        assert rd(os.path.join(d, n)) == n.encode()
    # readdir while deleting (rm -rf pattern)
    for n in listed[:500]:
        os.unlink(os.path.join(d, n))
    assert set(os.listdir(d)) == set(listed[500:])


def test_deep_tree(mnt):
    parts = [f"level{i}" for i in range(60)]
    deep = mnt.path(*parts)
    os.makedirs(deep)
    wr(os.path.join(deep, "leaf"), b"bottom")
    assert rd(os.path.join(deep, "leaf")) == b"bottom"
    walked = list(os.walk(mnt.path()))
    assert len(walked) == 61
    assert walked[-1][2] == ["leaf"]
    # and long names
    long = "n" * 255
    wr(mnt.path(long), b"long name")
    assert rd(mnt.path(long)) == b"long name"
    with pytest.raises(OSError) as ei:
        wr(mnt.path("n" * 256), b"too long")
    assert ei.value.errno == errno.ENAMETOOLONG


def test_special_names(mnt):
    names = ["with space.txt", "  leading", "trailing  ", "日本語 ファイル.txt",
             "émoji 🎉.bin", "tab\there", "new\nline", "-dash", ".dotfile",
             "percent%s%n", "quote'\"", "back\\slash"]
    for i, n in enumerate(names):
        wr(mnt.path(n), text(1000 + i, i))
    assert set(os.listdir(mnt.path())) == set(names)
    for i, n in enumerate(names):
        assert rd(mnt.path(n)) == text(1000 + i, i)
    os.mkdir(mnt.path("dir ü"))
    os.rename(mnt.path(names[3]), mnt.path("dir ü", names[3]))
    assert rd(mnt.path("dir ü", names[3])) == text(1003, 3)
    # (the writer lock of the live mount is squeezefs' own, hidden file)
    assert set(os.listdir(mnt.backing)) - {".sqz-tmp.writer-lock"} == \
        (set(names) - {names[3]}) | {"dir ü"}


# ---------------------------------------------------------------- BACKING layout

def test_backing_layout(mount_factory):
    m = mount_factory()
    data = {"f": text(1 * MiB, 1), "empty": b"", "sub/g": os.urandom(200 * KiB),
            "sub/deeper/h": text(5000, 2)}
    os.makedirs(m.path("sub", "deeper"))
    for k, v in data.items():
        wr(m.path(k), v)
    os.symlink("sub/g", m.path("link"))
    os.mkfifo(m.path("pipe"))
    m.unmount()
    b = m.backing
    assert os.path.isdir(os.path.join(b, "sub", "deeper"))
    assert os.path.islink(os.path.join(b, "link"))
    assert os.readlink(os.path.join(b, "link")) == "sub/g"
    assert stat.S_ISFIFO(os.lstat(os.path.join(b, "pipe")).st_mode)
    # regular files are containers, not the plain content
    assert rd(os.path.join(b, "f")) != data["f"]
    assert os.stat(os.path.join(b, "f")).st_size < len(data["f"]) // 4
    # a small file is packed: an empty backing file pointing into a pack of
    # its directory (docs/FORMAT.md "Packed files")
    h = os.path.join(b, "sub", "deeper", "h")
    assert os.stat(h).st_size == 0 and "user.squeezefs.packed" in os.listxattr(h)
    assert [n for n in os.listdir(os.path.dirname(h)) if n.startswith(".sqz-tmp.pack.")]
    v = run_cli("verify", b, check=False)
    assert v.returncode == 0, f"squeezefs verify {b}: {v.stdout}\n{v.stderr}"
    for k, val in data.items():
        assert sqz_cat(os.path.join(b, k)) == val, k
    assert not [n for n in os.listdir(b) if n.startswith(".sqz-tmp.")]


def test_preexisting_plain_files(mount_factory, tmp_path):
    backing = tmp_path / "pre-backing"
    os.makedirs(backing / "sub")
    rnd = random.Random(11)
    plain = {"a.txt": text(300 * KiB, 4), "empty": b"", "sub/bin": rnd.randbytes(1 * MiB + 3),
             "tiny": b"x"}
    for k, v in plain.items():
        wr(backing / k, v)
    m = mount_factory(backing=backing)
    for k, v in plain.items():
        assert os.stat(m.path(k)).st_size == len(v), k
        assert rd(m.path(k)) == v, k
    with open(m.path("sub/bin"), "rb") as f:
        f.seek(700000)
        assert f.read(5000) == plain["sub/bin"][700000:705000]
    # modify a plain file through the mount
    with open(m.path("a.txt"), "ab") as f:
        f.write(b"appended")
    with open(m.path("tiny"), "r+b") as f:
        f.write(b"y")
    assert rd(m.path("a.txt")) == plain["a.txt"] + b"appended"
    assert rd(m.path("tiny")) == b"y"
    m.unmount()
    m.start()
    assert rd(m.path("a.txt")) == plain["a.txt"] + b"appended"
    assert rd(m.path("sub/bin")) == plain["sub/bin"]
    assert rd(m.path("empty")) == b""


def test_tmp_names_hidden(mount_factory, tmp_path):
    backing = tmp_path / "tmp-backing"
    backing.mkdir()
    wr(backing / ".sqz-tmp.leftover", b"junk from a crash")
    wr(backing / "visible", b"v")
    m = mount_factory(backing=backing)
    for i in range(20):
        p = m.path(f"f{i}")
        wr(p, text(50 * KiB, i))
        os.truncate(p, 1000)
        os.rename(p, m.path(f"g{i}"))
    names = os.listdir(m.path())
    assert not [n for n in names if n.startswith(".sqz-tmp.")], names
    assert set(names) == {"visible"} | {f"g{i}" for i in range(20)}


# ---------------------------------------------------------------- persistence

def test_remount_persistence_across_defaults(mount_factory, tmp_path):
    backing = tmp_path / "persist-backing"
    backing.mkdir()
    files = {}
    algs = [("gzip:6/64K", "gzip", 6, 16), ("lz4", "lz4", 0, 17),
            ("zstd:19/4K", "zstd", 19, 12), ("none/1M", "none", 0, 20),
            ("snappy/128K", "snappy", 0, 17), ("lz4hc:9/64K", "lz4hc", 9, 16),
            ("qipc/32K", "qipc", 0, 15)]
    rnd = random.Random(3)
    for i, (spec, *_x) in enumerate(algs):
        m = mount_factory(options=[f"compress={spec}"], backing=backing, name=f"m{i}")
        name = f"file-{i}"
        data = text(400 * KiB + i, i) + rnd.randbytes(70000) + bytes(140000)
        wr(m.path(name), data)
        files[name] = data
        # files from earlier mounts still intact under this default
        for n, d in files.items():
            assert rd(m.path(n)) == d, f"{n} under compress={spec}"
        m.unmount()
    m = mount_factory(options=["compress=zstd:1/4K"], backing=backing, name="final")
    for i, (spec, alg, level, lbs) in enumerate(algs):
        n = f"file-{i}"
        assert rd(m.path(n)) == files[n]
        s = sqz_stat(m.path(n))
        assert alg_name(s["algorithm"]) == alg, (spec, s)
        if alg in ("gzip", "zstd", "lz4hc"):
            assert s["zipLevel"] == level, (spec, s)
        assert s["logicalBlockSize"] == lbs, (spec, s)
    # a rewrite (O_TRUNC) of an old file keeps working; content right
    wr(m.path("file-0"), b"rewritten")
    assert rd(m.path("file-0")) == b"rewritten"
    m.unmount()
    v = run_cli("verify", backing, check=False)
    assert v.returncode == 0, v.stdout + v.stderr


# ---------------------------------------------------------------- more edge cases

def test_futimens_before_close_is_kept(mount_factory):
    """cp -p / tar / rsync set the times on the open fd after writing: the
    close (which commits the dirty data) must not overwrite them."""
    m = mount_factory()
    p = m.path("t")
    mtime = 1_234_567_890_111_222_333
    atime = 1_111_111_111_000_000_001
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, text(3 * MiB))
        os.utime(fd, ns=(atime, mtime))
    finally:
        os.close(fd)
    assert os.stat(p).st_mtime_ns == mtime
    # the same by path while another fd holds dirty data
    q = m.path("u")
    fd = os.open(q, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, text(200 * KiB))
        os.utime(q, ns=(atime, mtime))
        os.fsync(fd)
    finally:
        os.close(fd)
    assert os.stat(q).st_mtime_ns == mtime
    # a later data change (truncate, then fsync) moves mtime on again
    fd = os.open(q, os.O_WRONLY)
    try:
        os.ftruncate(fd, 1000)
        os.fsync(fd)
    finally:
        os.close(fd)
    assert os.stat(q).st_mtime_ns != mtime
    os.utime(q, ns=(atime, mtime))
    m.unmount()
    m.start()
    assert os.stat(p).st_mtime_ns == mtime
    assert os.stat(q).st_mtime_ns == mtime
    assert rd(p) == text(3 * MiB)


def test_metadata_survives_remount(mount_factory):
    m = mount_factory()
    os.mkdir(m.path("d"))
    wr(m.path("d/f"), text(100 * KiB))
    os.chmod(m.path("d/f"), 0o640)
    os.chown(m.path("d/f"), 321, 654)
    os.setxattr(m.path("d/f"), "user.note", b"kept")
    os.setxattr(m.path("d"), "user.dirnote", b"kept too")
    os.utime(m.path("d/f"), ns=(1_500_000_000_000_000_001, 1_600_000_000_000_000_002))
    os.link(m.path("d/f"), m.path("hard"))
    os.symlink("d/f", m.path("sym"))
    os.mkfifo(m.path("fifo"))
    m.unmount()
    m.start()
    st = os.stat(m.path("d/f"))
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert (st.st_uid, st.st_gid) == (321, 654)
    assert st.st_mtime_ns == 1_600_000_000_000_000_002
    assert st.st_size == 100 * KiB and st.st_nlink == 2
    assert os.getxattr(m.path("d/f"), "user.note") == b"kept"
    assert os.getxattr(m.path("d"), "user.dirnote") == b"kept too"
    assert os.stat(m.path("hard")).st_ino == st.st_ino
    assert os.readlink(m.path("sym")) == "d/f"
    assert rd(m.path("sym")) == text(100 * KiB)
    assert stat.S_ISFIFO(os.stat(m.path("fifo")).st_mode)


def test_hard_link_open_fds_share_data(mnt):
    a, b = mnt.path("a"), mnt.path("b")
    wr(a, text(300 * KiB))
    os.link(a, b)
    fa = os.open(a, os.O_RDWR)
    fb = os.open(b, os.O_RDWR)
    try:
        os.pwrite(fa, b"via-a", 1000)
        assert os.pread(fb, 5, 1000) == b"via-a"
        os.ftruncate(fb, 5000)
        assert os.fstat(fa).st_size == 5000
        assert os.pread(fa, 10000, 0) == text(5000)[:1000] + b"via-a" + text(5000)[1005:]
        os.pwrite(fb, b"end", 9000)
    finally:
        os.close(fa)
        os.close(fb)
    exp = text(5000)[:1000] + b"via-a" + text(5000)[1005:] + bytes(4000) + b"end"
    assert rd(a) == exp and rd(b) == exp


def test_unlink_and_rename_with_dirty_data_leave_no_debris(mount_factory):
    m = mount_factory()
    fd = os.open(m.path("gone"), os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, text(1 * MiB))
    os.unlink(m.path("gone"))
    os.write(fd, b"more")
    os.close(fd)
    fd = os.open(m.path("src"), os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, text(500 * KiB, 1))
    wr(m.path("dst"), b"old")
    os.rename(m.path("src"), m.path("dst"))
    os.write(fd, b"tail")
    os.close(fd)
    assert rd(m.path("dst")) == text(500 * KiB, 1) + b"tail"
    m.unmount()
    assert sorted(os.listdir(m.backing)) == ["dst"], os.listdir(m.backing)
    assert sqz_cat(os.path.join(m.backing, "dst")) == text(500 * KiB, 1) + b"tail"


def test_o_trunc_while_other_fd_has_dirty_data(mnt):
    p = mnt.path("f")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, text(400 * KiB))
        fd2 = os.open(p, os.O_WRONLY | os.O_TRUNC)
        os.write(fd2, b"short")
        os.close(fd2)
        assert os.fstat(fd).st_size == 5
        assert os.pread(fd, 100, 0) == b"short"
    finally:
        os.close(fd)
    assert rd(p) == b"short"


def test_copy_file_range_and_sendfile(mnt):
    src = mnt.path("src")
    data = text(3 * MiB + 11, 5)
    wr(src, data)
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(mnt.path("dst"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        done = 0
        while done < len(data):
            n = os.copy_file_range(fi, fo, len(data) - done)
            assert n > 0
            done += n
    finally:
        os.close(fi)
        os.close(fo)
    assert rd(mnt.path("dst")) == data
    import shutil
    shutil.copyfile(src, mnt.path("dst2"))   # sendfile path
    assert rd(mnt.path("dst2")) == data
    # copy to a file outside the mount
    out = os.path.join(os.path.dirname(mnt.mnt), "outside.copy")
    shutil.copyfile(src, out)
    assert rd(out) == data


def test_lseek_data_hole_end(mnt):
    p = mnt.path("s")
    data = text(300 * KiB)
    wr(p, data)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_END) == len(data)
        assert os.lseek(fd, 0, os.SEEK_DATA) == 0
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
        assert hole == len(data), "a dense file has its first hole at EOF"
        with pytest.raises(OSError) as ei:
            os.lseek(fd, len(data) + 10, os.SEEK_DATA)
        assert ei.value.errno == errno.ENXIO
    finally:
        os.close(fd)
    # a sparse file: data after a big hole must be found (or the whole file
    # reported as data); never an offset past EOF
    q = mnt.path("sp")
    fd = os.open(q, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, b"data", 64 * MiB)
        d = os.lseek(fd, 0, os.SEEK_DATA)
        assert d <= 64 * MiB
        h = os.lseek(fd, 0, os.SEEK_HOLE)
        assert h <= 64 * MiB + 4
        assert os.pread(fd, 4, 64 * MiB) == b"data"
    finally:
        os.close(fd)


def test_single_huge_write_and_read(mnt):
    p = mnt.path("huge")
    rnd = random.Random(8)
    data = text(12 * MiB, 9)[:6 * MiB] + rnd.randbytes(6 * MiB)
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        assert os.write(fd, data) == len(data)
        assert os.pread(fd, len(data), 0) == data
    finally:
        os.close(fd)
    assert rd(p) == data
