"""Packed files (issue 14) through a real mount.

A regular file written through a read-write mount and closed, of
1..131072 bytes and at most one block of its policy, with one link, is stored packed
by the durable thread's next batch (about 2 s, src/content/durable.c) or at
unmount: its backing file becomes a 0-byte file carrying the pointer xattr
user.squeezefs.packed (48 bytes), its stored bytes an entry of a hidden
pack `.sqz-tmp.pack.<16 hex>` in the same backing directory
(include/squeezefs/pack.h). Through the mount the file reads back exactly,
`stat` shows its size and st_blocks = ceil(stored / 512), and neither the
packs nor the pointer are visible. A writer, a truncate to a non-zero size,
a second link or a rename into another directory make it a container
first; O_TRUNC and truncate to 0 drop the pointer. Damage is tested by
tests/test_integrity.py (test_corruption_matrix_packed_files)."""
import errno
import mmap
import os
import random
import re
import struct
import threading
import time

import pytest

from fsutil import rd, wr
from mountlib import (RENAME_EXCHANGE, Mount, mount_stats, renameat2, run_cli,
                      skip_if_io_uring)

PTR_XATTR = "user.squeezefs.packed"
PTR_MAGIC = 0x50505153          # "SQPP"
PACK_RE = re.compile(r"^\.sqz-tmp\.pack\.[0-9a-f]{16}$")
CTR_MAGIC = b"SQZFS\x00\x01\x1a"
MAX_PACKED = 131072             # SQZ_PACK_MAX_LENGTH (and one block)
# the durable thread's batch interval is 2 s: poll up to this long
PACK_WAIT = 6.0
# what the ASan and TSan stages run (SQZ_QUICK=1, conftest.py): packing,
# reading packed files (read-write, read-only, with no read request), a
# reader during an unpacking, unpacking and repacking, reclaiming packs at
# rmdir, packing at unmount and the model (TSan; ASan skips it). The rest
# checks rules (which file is packed when) on the same code paths, mostly
# waiting on the 2 s batch timer; the plain stage runs them.
SANITIZER_SUBSET = {
    "test_small_closed_files_are_packed", "test_changes_unpack_and_repack",
    "test_open_reader_sees_unpack_and_changes", "test_rmdir_with_only_packs_left",
    "test_read_only_mount_reads_packed_files", "test_unmount_packs_what_is_pending",
    "test_reading_packed_files_needs_no_read_request", "test_random_operations_match_model",
}

def data(n, seed):
    """n bytes, text and random mixed (compresses, but not to nothing)."""
    rnd = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"0x7f", b"return", b"\n", b"{", b"}"]
    out = bytearray()
    while len(out) < n:
        if rnd.random() < 0.3:
            out += rnd.randbytes(rnd.randint(1, 40))
        else:
            out += rnd.choice(words) + b" "
    return bytes(out[:n])


def pointer(bpath):
    """The decoded pack pointer of a backing file, or None."""
    try:
        v = os.getxattr(bpath, PTR_XATTR, follow_symlinks=False)
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise
    assert len(v) in (48, 56), (bpath, len(v))   # version 2: + ctime shown
    if len(v) == 48:
        magic, ver, kind, _params, stored, pack_id, off, length, _crc, _ck = \
            struct.unpack("<IBB6sIQQQII", v)
    else:
        magic, ver, kind, _params, stored, pack_id, off, length = \
            struct.unpack("<IBB6sIQII", v[:32])
    assert magic == PTR_MAGIC and ver == (1 if len(v) == 48 else 2), \
        (bpath, magic, ver)
    return {"kind": kind, "stored": stored, "pack_id": pack_id, "off": off,
            "length": length}


def state(bpath):
    """'packed', 'container', 'empty' (0 bytes, no pointer) or 'other'."""
    st = os.lstat(bpath)
    if st.st_size == 0:
        return "packed" if pointer(bpath) else "empty"
    fd = os.open(bpath, os.O_RDONLY | os.O_NOATIME)   # an observer
    try:
        return "container" if os.pread(fd, 8, 0) == CTR_MAGIC else "other"
    finally:
        os.close(fd)


def wait_states(backing, want, timeout=PACK_WAIT):
    """Poll until every backing file (relative path -> wanted state) is in
    its state; return {rel: state} as last seen."""
    deadline = time.time() + timeout
    while True:
        got = {rel: state(os.path.join(backing, rel)) for rel in want}
        if got == want or time.time() > deadline:
            return got
        time.sleep(0.1)


def packs(bdir):
    return sorted(n for n in os.listdir(bdir) if PACK_RE.match(n))


def blocks(stored):
    return (stored + 511) // 512


# ---------------------------------------------------------------- packing


def test_small_closed_files_are_packed(mount_factory):
    m = mount_factory()
    os.makedirs(m.path("d"))
    rnd = random.Random(1)
    small = {"d/s1": b"x", "d/s100": data(100, 2), "d/s4096": data(4096, 3),
             "d/raw30000": rnd.randbytes(30000),          # stored raw
             "d/s65536": data(65536, 4), "d/s131072": data(MAX_PACKED, 8),
             "top": data(500, 5)}
    big = {"d/b131073": data(MAX_PACKED + 1, 6), "d/b200000": data(200000, 7)}
    files = {**small, **big, "d/empty": b""}
    for rel, content in files.items():
        wr(m.path(rel), content)
    # metadata set after close, before packing: kept by the packed file
    # (times set explicitly: right after a write the kernel's writeback
    # cache shows its own mtime, not the backing file's, packed or not)
    for i, rel in enumerate(files):
        os.utime(m.path(rel), ns=(1_000_000_123 + i, 2_000_000_456 + 7 * i))
    os.chmod(m.path("d/s100"), 0o640)
    os.setxattr(m.path("d/raw30000"), "user.color", b"blue")
    if os.geteuid() == 0:
        os.chown(m.path("d/s4096"), 1234, 5678)
    before = {rel: os.stat(m.path(rel)) for rel in files}

    want = {rel: "packed" for rel in small}
    want.update({rel: "container" for rel in big})
    want["d/empty"] = "empty"
    got = wait_states(m.backing, want)
    assert got == want, m.log()[-2000:]

    bd = os.path.join(m.backing, "d")
    assert len(packs(bd)) >= 1 and len(packs(m.backing)) >= 1
    for rel in small:
        b = os.lstat(os.path.join(m.backing, rel))
        assert b.st_size == 0, rel  # (xattr blocks may count in st_blocks)
        p = pointer(os.path.join(m.backing, rel))
        assert p["length"] == len(small[rel]), rel
        assert PACK_RE.match(".sqz-tmp.pack.%016x" % p["pack_id"])
        assert os.path.exists(os.path.join(os.path.dirname(
            os.path.join(m.backing, rel)), ".sqz-tmp.pack.%016x" % p["pack_id"])), rel
    # incompressible bytes are stored raw: stored == length
    assert pointer(os.path.join(m.backing, "d/raw30000"))["stored"] == 30000

    def check_mount(mm, where):
        assert sorted(os.listdir(mm.path("d"))) == sorted(
            r[2:] for r in files if r.startswith("d/")), where
        assert sorted(os.listdir(mm.mnt)) == ["d", "top"], where
        for rel, content in files.items():
            p = mm.path(rel)
            assert rd(p) == content, (where, rel)
            st = os.stat(p)
            assert st.st_size == len(content), (where, rel)
            b = before[rel]
            assert (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns) == \
                (b.st_mode, b.st_uid, b.st_gid, b.st_mtime_ns), (where, rel)
            if rel in small:
                stored = pointer(os.path.join(mm.backing, rel))["stored"]
                assert st.st_blocks == blocks(stored), (where, rel, st.st_blocks, stored)
                assert PTR_XATTR not in os.listxattr(p), (where, rel)
                with pytest.raises(OSError) as ei:
                    os.getxattr(p, PTR_XATTR)
                assert ei.value.errno == errno.ENODATA, (where, rel)
        assert os.getxattr(mm.path("d/raw30000"), "user.color") == b"blue"
        assert os.listxattr(mm.path("d/raw30000")) == ["user.color"]
        assert os.stat(mm.path("d/s1")).st_mtime_ns == 2_000_000_456
        assert os.stat(mm.path("top")).st_mtime_ns == \
            2_000_000_456 + 7 * list(files).index("top")
        # a pack's name is not there through the mount
        for pk in packs(bd):
            with pytest.raises(FileNotFoundError):
                os.stat(mm.path("d", pk))
        # mmap reads the packed bytes too
        with open(mm.path("d/s4096"), "rb") as f:
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mp:
                assert mp[:] == files["d/s4096"]
        # a pread in the middle and past the end
        fd = os.open(mm.path("d/s65536"), os.O_RDONLY)
        try:
            assert os.pread(fd, 1000, 30000) == files["d/s65536"][30000:31000]
            assert os.pread(fd, 100, 65536) == b""
        finally:
            os.close(fd)

    check_mount(m, "running")
    # the pointer can be neither set nor removed through the mount
    p = m.path("d/s100")
    with pytest.raises(OSError):
        os.setxattr(p, PTR_XATTR, b"\0" * 48)
    with pytest.raises(OSError):
        os.removexattr(p, PTR_XATTR)
    with pytest.raises(OSError):
        os.setxattr(m.path("d/b131073"), PTR_XATTR, b"\0" * 48)
    assert pointer(os.path.join(m.backing, "d/b131073")) is None
    # creating a file of a pack's name through the mount does not touch it
    pk = packs(bd)[0]
    size = os.path.getsize(os.path.join(bd, pk))
    with pytest.raises(OSError):
        wr(m.path("d", pk), b"overwrite")
    assert os.path.getsize(os.path.join(bd, pk)) == size
    # reading a packed file leaves it packed
    assert state(os.path.join(m.backing, "d/s100")) == "packed"
    assert rd(p) == files["d/s100"]

    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=m.backing, name="again")
    check_mount(m2, "remounted")
    for rel in small:
        assert state(os.path.join(m.backing, rel)) == "packed", rel
    assert m2.unmount() == 0, m2.log()


def test_block_limit_and_nopack(mount_factory):
    """At most one block of the file's policy (4K here) and at most
    131072 bytes (a 256K block: the length limit counts); -o nopack packs
    nothing, neither in the background nor at unmount."""
    a = mount_factory(options=["compress=zstd:1/4K"], name="a")
    n = mount_factory(options=["nopack"], name="n")
    c = mount_factory(options=["compress=zstd:1/256K"], name="c")
    os.mkdir(c.path("p64"))     # a directory policy: one block is 64K
    os.setxattr(c.path("p64"), "user.squeezefs.policy", b"zstd:3/64K")
    fc = {"l131072": data(MAX_PACKED, 7), "l131073": data(MAX_PACKED + 1, 8),
          "p64/b65536": data(65536, 9), "p64/b65537": data(65537, 10)}
    for name, content in fc.items():
        wr(c.path(name), content)
    fa = {"b4096": data(4096, 1), "b4097": data(4097, 2), "b100": data(100, 3),
          "r4000": random.Random(4).randbytes(4000)}
    fn = {"s1": b"1", "s100": data(100, 5), "s60000": data(60000, 6)}
    for name, content in fa.items():
        wr(a.path(name), content)
    for name, content in fn.items():
        wr(n.path(name), content)
    t0 = time.time()
    want = {"b4096": "packed", "b4097": "container", "b100": "packed",
            "r4000": "packed"}
    assert wait_states(a.backing, want) == want, a.log()[-2000:]
    assert blocks(4000) == os.stat(a.path("r4000")).st_blocks
    want = {"l131072": "packed", "l131073": "container",
            "p64/b65536": "packed", "p64/b65537": "container"}
    assert wait_states(c.backing, want) == want, c.log()[-2000:]
    for name, content in fc.items():
        assert rd(c.path(name)) == content, name
    assert c.unmount() == 0, c.log()
    # the nopack mount had at least as long as the other one
    time.sleep(max(0.0, 3.0 - (time.time() - t0)))
    for name in fn:
        assert state(os.path.join(n.backing, name)) == "container", name
    assert packs(n.backing) == []
    assert n.unmount() == 0, n.log()
    for name, content in fn.items():
        assert state(os.path.join(n.backing, name)) == "container", name
    assert packs(n.backing) == []
    assert a.unmount() == 0, a.log()
    for mm in (mount_factory(backing=a.backing, name="a2"),
               mount_factory(backing=n.backing, name="n2")):
        for name, content in (fa if mm.backing == a.backing else fn).items():
            assert rd(mm.path(name)) == content, name
        assert mm.unmount() == 0


def test_hard_linked_file_is_not_packed(mount_factory):
    m = mount_factory()
    wr(m.path("a"), data(1000, 1))
    os.link(m.path("a"), m.path("a2"))        # two links before packing
    wr(m.path("solo"), data(1000, 2))
    want = {"solo": "packed", "a": "container"}
    got = wait_states(m.backing, want)
    assert got == want
    assert os.lstat(os.path.join(m.backing, "a")).st_nlink == 2
    assert rd(m.path("a2")) == data(1000, 1)
    assert m.unmount() == 0, m.log()
    assert state(os.path.join(m.backing, "a")) == "container"


def test_changes_unpack_and_repack(mount_factory):
    m = mount_factory()
    os.makedirs(m.path("d"))
    os.makedirs(m.path("e"))
    names = ["app", "mid", "trsmall", "trbig", "tr0", "otrunc", "otrunc_empty",
             "renin", "renx", "lnk", "lnkx", "rd", "rwnoop", "xa", "xb"]
    files = {f"d/{n}": data(3000 + 11 * i, i) for i, n in enumerate(names)}
    files["e/xb"] = data(900, 77)   # a packed file in another directory
    del files["d/xb"]
    mtimes = {}
    for i, rel in enumerate(files):
        wr(m.path(rel), files[rel])
        mtimes[rel] = 3_000_000_000 + 1001 * i
        os.utime(m.path(rel), ns=(mtimes[rel], mtimes[rel]))
    got = wait_states(m.backing, {rel: "packed" for rel in files})
    assert set(got.values()) == {"packed"}, got
    for rel in files:
        assert os.stat(m.path(rel)).st_mtime_ns == mtimes[rel], rel
    B = m.backing

    def st(rel):
        return state(os.path.join(B, rel))

    # append: the open alone leaves it packed (PostgreSQL opens files
    # O_RDWR to read them); the first write reaching the daemon (fsync:
    # the kernel's writeback cache holds it until then) unpacks it
    with open(m.path("d/app"), "ab") as f:
        assert st("d/app") == "packed"
        f.write(b"appended")
        f.flush()
        os.fsync(f.fileno())
        assert st("d/app") == "container"
    files["d/app"] += b"appended"
    # write in the middle, no O_TRUNC
    with open(m.path("d/mid"), "r+b") as f:
        f.seek(10)
        f.write(b"XYZ")
    files["d/mid"] = files["d/mid"][:10] + b"XYZ" + files["d/mid"][13:]
    assert st("d/mid") == "container"
    # truncate(2) to a smaller and to a larger size
    os.truncate(m.path("d/trsmall"), 5)
    files["d/trsmall"] = files["d/trsmall"][:5]
    assert st("d/trsmall") == "container"
    os.truncate(m.path("d/trbig"), 200000)
    files["d/trbig"] += b"\0" * (200000 - len(files["d/trbig"]))
    assert st("d/trbig") == "container"
    # truncate to 0 and O_TRUNC just drop the pointer
    os.truncate(m.path("d/tr0"), 0)
    files["d/tr0"] = b""
    assert st("d/tr0") == "empty"
    fd = os.open(m.path("d/otrunc_empty"), os.O_WRONLY | os.O_TRUNC)
    assert st("d/otrunc_empty") == "empty"
    os.close(fd)
    files["d/otrunc_empty"] = b""
    wr(m.path("d/otrunc"), b"brand new")
    files["d/otrunc"] = b"brand new"
    # rename in the same directory: still packed, same entry
    ptr = pointer(os.path.join(B, "d/renin"))
    os.rename(m.path("d/renin"), m.path("d/renin2"))
    files["d/renin2"] = files.pop("d/renin")
    mtimes["d/renin2"] = mtimes.pop("d/renin")
    assert st("d/renin2") == "packed"
    assert pointer(os.path.join(B, "d/renin2")) == ptr
    # rename into another directory: a container there
    os.rename(m.path("d/renx"), m.path("e/renx"))
    files["e/renx"] = files.pop("d/renx")
    mtimes["e/renx"] = mtimes.pop("d/renx")
    assert st("e/renx") == "container"
    # a second link, in the same and in another directory
    os.link(m.path("d/lnk"), m.path("d/lnk2"))
    files["d/lnk2"] = files["d/lnk"]
    mtimes["d/lnk2"] = mtimes["d/lnk"]
    assert st("d/lnk") == "container"
    assert os.stat(m.path("d/lnk")).st_nlink == 2
    os.link(m.path("d/lnkx"), m.path("e/lnkx"))
    files["e/lnkx"] = files["d/lnkx"]
    mtimes["e/lnkx"] = mtimes["d/lnkx"]
    assert st("d/lnkx") == "container"
    # RENAME_EXCHANGE across directories: both leave their packs
    renameat2(m.path("d/xa"), m.path("e/xb"), RENAME_EXCHANGE)
    files["d/xa"], files["e/xb"] = files["e/xb"], files["d/xa"]
    mtimes["d/xa"], mtimes["e/xb"] = mtimes["e/xb"], mtimes["d/xa"]
    assert st("d/xa") == "container" and st("e/xb") == "container"
    # read: stays packed; open for writing without writing: stays packed
    # too (unpacked by the first write only)
    assert rd(m.path("d/rd")) == files["d/rd"]
    assert st("d/rd") == "packed"
    with open(m.path("d/rwnoop"), "r+b"):
        pass
    assert st("d/rwnoop") == "packed"

    def check(mm, where):
        for rel, content in files.items():
            assert rd(mm.path(rel)) == content, (where, rel)
            assert os.stat(mm.path(rel)).st_size == len(content), (where, rel)
        assert sorted(os.listdir(mm.path("d"))) == sorted(
            r[2:] for r in files if r.startswith("d/")), where
        assert sorted(os.listdir(mm.path("e"))) == sorted(
            r[2:] for r in files if r.startswith("e/")), where
        # none of these was written: the times are the ones before
        for rel in ("d/renin2", "e/renx", "d/lnk", "d/lnk2", "e/lnkx",
                    "d/xa", "e/xb", "d/rd", "d/rwnoop"):
            assert os.stat(mm.path(rel)).st_mtime_ns == mtimes[rel], (where, rel)

    check(m, "changed")
    # the files written through a descriptor are small and single-link
    # again: packed again
    want = {"d/app": "packed", "d/mid": "packed", "d/otrunc": "packed"}
    got = wait_states(B, want)
    assert got == want, m.log()[-2000:]
    for rel in ("d/trbig", "d/lnk", "d/lnk2", "d/lnkx", "e/lnkx"):
        assert st(rel) == "container", rel       # too big / two links
    for rel in ("d/tr0", "d/otrunc_empty"):
        assert st(rel) == "empty", rel
    check(m, "repacked")
    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=B, name="again")
    check(m2, "remounted")
    assert m2.unmount() == 0, m2.log()


def test_open_reader_sees_unpack_and_changes(mount_factory):
    """A descriptor reading a packed file keeps reading the right bytes
    while another one appends (the unpack happens under it) or the file
    moves into another directory."""
    m = mount_factory()
    os.makedirs(m.path("d"))
    os.makedirs(m.path("e"))
    a, b = data(5000, 1), data(7000, 2)
    wr(m.path("d/a"), a)
    wr(m.path("d/b"), b)
    want = {"d/a": "packed", "d/b": "packed"}
    assert wait_states(m.backing, want) == want
    ra = os.open(m.path("d/a"), os.O_RDONLY)
    rb = os.open(m.path("d/b"), os.O_RDONLY)
    try:
        assert os.pread(ra, 100, 0) == a[:100]
        assert os.pread(rb, 100, 0) == b[:100]
        with open(m.path("d/a"), "ab") as f:
            f.write(b"more")
        os.rename(m.path("d/b"), m.path("e/b"))
        assert os.pread(ra, 10000, 0) == a + b"more"
        assert os.pread(rb, 10000, 0) == b
    finally:
        os.close(ra)
        os.close(rb)
    assert rd(m.path("d/a")) == a + b"more"
    assert rd(m.path("e/b")) == b
    assert m.unmount() == 0, m.log()


def test_rmdir_with_only_packs_left(mount_factory):
    m = mount_factory()
    for d in ("gone", "kept", "sub"):
        os.makedirs(m.path(d))
        for i in range(3):
            wr(m.path(d, f"f{i}"), data(200 + i, i))
    os.makedirs(m.path("sub", "inner"))
    want = {f"{d}/f{i}": "packed" for d in ("gone", "kept", "sub") for i in range(3)}
    assert wait_states(m.backing, want) == want
    bg = os.path.join(m.backing, "gone")
    assert packs(bg)
    for i in range(3):
        os.unlink(m.path("gone", f"f{i}"))
    assert os.listdir(m.path("gone")) == []
    os.rmdir(m.path("gone"))
    assert not os.path.exists(bg)
    assert not os.path.exists(m.path("gone"))
    # a directory with a packed file left is not empty; its pack stays
    for i in range(2):
        os.unlink(m.path("kept", f"f{i}"))
    with pytest.raises(OSError) as ei:
        os.rmdir(m.path("kept"))
    assert ei.value.errno == errno.ENOTEMPTY
    assert packs(os.path.join(m.backing, "kept"))
    assert rd(m.path("kept", "f2")) == data(202, 2)
    # nor one with an empty subdirectory left
    for i in range(3):
        os.unlink(m.path("sub", f"f{i}"))
    with pytest.raises(OSError) as ei:
        os.rmdir(m.path("sub"))
    assert ei.value.errno == errno.ENOTEMPTY
    os.rmdir(m.path("sub", "inner"))
    os.rmdir(m.path("sub"))
    assert not os.path.exists(os.path.join(m.backing, "sub"))
    # a directory of the same name again: works as a new one
    os.makedirs(m.path("gone"))
    wr(m.path("gone", "new"), b"new file")
    assert wait_states(m.backing, {"gone/new": "packed"}) == {"gone/new": "packed"}
    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=m.backing, name="again")
    assert rd(m2.path("gone", "new")) == b"new file"
    assert rd(m2.path("kept", "f2")) == data(202, 2)
    assert sorted(os.listdir(m2.mnt)) == ["gone", "kept"]
    assert m2.unmount() == 0


def test_read_only_mount_reads_packed_files(mount_factory, tmp_path):
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    os.makedirs(w.path("d"))
    files = {f"d/f{i}": data(1 + i * 4000, i) for i in range(10)}
    files["d/big"] = data(300000, 99)
    files["top"] = data(77, 98)
    for rel, content in files.items():
        wr(w.path(rel), content)
    # a reader of another mount opens one before it is packed
    r = mount_factory(options=["ro"], backing=backing, name="r")
    early = os.open(r.path("d/f3"), os.O_RDONLY)
    try:
        want = {rel: "packed" for rel in files if rel != "d/big"}
        assert wait_states(str(backing), want) == want, w.log()[-2000:]
        # the container it holds open was renamed over: still its bytes
        assert os.pread(early, 100000, 0) == files["d/f3"]
    finally:
        os.close(early)

    def check(mm, where):
        for rel, content in files.items():
            assert rd(mm.path(rel)) == content, (where, rel)
            st = os.stat(mm.path(rel))
            assert st.st_size == len(content), (where, rel)
            if rel != "d/big":
                stored = pointer(os.path.join(backing, rel))["stored"]
                assert st.st_blocks == blocks(stored), (where, rel)
                assert PTR_XATTR not in os.listxattr(mm.path(rel))
        assert sorted(os.listdir(mm.path("d"))) == sorted(
            r[2:] for r in files if r.startswith("d/")), where

    r2 = mount_factory(options=["ro"], backing=backing, name="r2")
    check(r2, "ro while the writer runs")
    assert w.unmount() == 0, w.log()
    check(r, "ro, writer gone")
    r3 = mount_factory(options=["ro"], backing=backing, name="r3")
    check(r3, "ro after the writer")
    # a read-only mount changes nothing
    with pytest.raises(OSError) as ei:
        wr(r3.path("d/f1"), b"x", "ab")
    assert ei.value.errno == errno.EROFS
    assert state(os.path.join(backing, "d/f1")) == "packed"
    for mm in (r, r2, r3):
        assert mm.unmount() == 0, mm.log()


def test_unmount_packs_what_is_pending(mount_factory):
    m = mount_factory()
    os.makedirs(m.path("d"))
    files = {f"d/f{i}": data(1 + 997 * i, i) for i in range(30)}
    for rel, content in files.items():
        wr(m.path(rel), content)
    assert m.unmount() == 0, m.log()   # at once: within the first batch
    for rel in files:
        assert state(os.path.join(m.backing, rel)) == "packed", rel
    m2 = mount_factory(backing=m.backing, name="again")
    for rel, content in files.items():
        assert rd(m2.path(rel)) == content, rel
    assert os.listdir(m2.path("d")) and all(
        not PACK_RE.match(n) for n in os.listdir(m2.path("d")))
    assert m2.unmount() == 0, m2.log()


def test_reading_packed_files_needs_no_read_request(mount_factory):
    """A read-only open of a packed file pushes its whole content into the
    kernel (src/node/push.c, sqz_push_packed) and keeps it: the reads that
    follow reach the daemon not at all. The pushed content is never stale:
    a reader's open handle sees a later write through another handle, and
    opens after a write, truncate or O_TRUNC see the new content."""
    skip_if_io_uring("the packed file's push at open")
    m = mount_factory()
    os.makedirs(m.path("d"))
    files = {f"d/f{i}": data(100 + 4099 * i, 50 + i) for i in range(24)}
    for rel, content in files.items():
        wr(m.path(rel), content)
    assert m.unmount() == 0, m.log()
    assert all(state(os.path.join(m.backing, r)) == "packed" for r in files)
    m2 = mount_factory(backing=m.backing, name="again")
    before = mount_stats(m2.mnt)
    for rel, content in files.items():
        assert rd(m2.path(rel)) == content, rel
    after = mount_stats(m2.mnt)
    # the same reads through a direct_io handle reach the daemon: counted
    fd = os.open(m2.path("d/f9"), os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, 1 << 17)
        n = os.readv(fd, [buf])
        assert buf[:n] == files["d/f9"]
    finally:
        os.close(fd)
    assert mount_stats(m2.mnt)["packed_bytes_read"] - after["packed_bytes_read"] == n
    assert after["packed_bytes_read"] == before["packed_bytes_read"], (before, after)
    assert after["pushed_blocks"] - before["pushed_blocks"] >= len(files), after
    # a reader holding the file open while another handle writes
    p = m2.path("d/f3")
    old = files["d/f3"]
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.pread(fd, len(old), 0) == old
        with open(p, "r+b") as w:
            w.seek(10)
            w.write(b"NEW BYTES")
        new = old[:10] + b"NEW BYTES" + old[19:]
        assert os.pread(fd, len(old), 0) == new
    finally:
        os.close(fd)
    assert rd(p) == new
    # truncate(2) and O_TRUNC of packed files, then fresh opens
    os.truncate(m2.path("d/f5"), 7)
    assert rd(m2.path("d/f5")) == files["d/f5"][:7]
    wr(m2.path("d/f6"), b"short")
    assert rd(m2.path("d/f6")) == b"short"
    assert rd(m2.path("d/f7")) == files["d/f7"]
    assert m2.unmount() == 0, m2.log()
    m3 = mount_factory(backing=m.backing, name="third")
    assert rd(m3.path("d/f3")) == new
    assert rd(m3.path("d/f5")) == files["d/f5"][:7]
    assert rd(m3.path("d/f6")) == b"short"
    assert m3.unmount() == 0, m3.log()


def test_file_left_only_under_a_second_link_is_packed(mount_factory):
    """A file whose first name (the one the daemon opened it by) is
    removed while it lives on under a second hard link is packed: the
    daemon finds its directory by the other name its lookup saw (the link's
    reply). Before, it stayed a container for good (its content read back
    whole)."""
    m = mount_factory()
    os.mkdir(m.path("d"))
    wr(m.path("a"), data(3000, 1))
    os.link(m.path("a"), m.path("d/b"))
    os.unlink(m.path("a"))                 # one link again, in d
    wr(m.path("d/b"), b"more", "ab")       # written and closed
    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=m.backing, name="again")
    assert rd(m2.path("d/b")) == data(3000, 1) + b"more"
    assert m2.unmount() == 0, m2.log()
    assert state(os.path.join(m.backing, "d/b")) == "packed"


def test_files_of_many_directories_are_packed(mount_factory):
    """One batch with small files of 40 directories: all packed (the
    packer kept at most 32 packs open and left the files of the others
    containers, -EBUSY, until 3cf10ca)."""
    m = mount_factory()
    for i in range(40):
        os.mkdir(m.path(f"d{i}"))
        wr(m.path(f"d{i}", "f"), data(100 + i, i))
    assert m.unmount() == 0, m.log()       # one batch: the final one
    left = [i for i in range(40)
            if state(os.path.join(m.backing, f"d{i}", "f")) != "packed"]
    assert not left, (left, m.log()[-1000:])


def test_times_set_before_the_close_keep_the_draft(mount_factory):
    """Times set on a file whose data is not committed yet (utime(2) before
    close(2), or the SETATTR of the mtime that the kernel's writeback
    cache sends before the FLUSH of a file written a clock tick after its
    creation) are kept and put back after the data's commit instead of
    committing there: a new small file still becomes a draft. stat shows
    the set times at once, after the close, after packing (which reads the
    file with O_NOATIME) and after a remount; a write after them moves the
    mtime on again."""
    text = b"".join(b"%06d a small file whose times are set\n" % i
                    for i in range(600))          # 24,000 bytes of text
    A, M = 1_000_000_000 * 1_500_000_000, 1_000_000_000 * 1_600_000_000 + 123
    m = mount_factory()
    s0 = mount_stats(m.mnt)
    fd = os.open(m.path("f"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, text)
        os.utime(fd, ns=(A, M))
        assert os.fstat(fd).st_mtime_ns == M
    finally:
        os.close(fd)
    s1 = mount_stats(m.mnt)
    assert s1["draft_blocks"] - s0["draft_blocks"] == 1, (s0, s1)
    st = os.stat(m.path("f"))
    assert (st.st_atime_ns, st.st_mtime_ns) == (A, M)
    assert os.stat(os.path.join(m.backing, "f")).st_mtime_ns == M
    assert wait_states(m.backing, {"f": "packed"}) == {"f": "packed"}
    # packing read the file without touching its atime (A < M: relatime
    # would have moved it)
    st = os.stat(m.path("f"))
    assert (st.st_atime_ns, st.st_mtime_ns) == (A, M)
    assert m.unmount() == 0, m.log()
    m = mount_factory(backing=m.backing, name="again")
    st = os.stat(m.path("f"))
    assert (st.st_atime_ns, st.st_mtime_ns) == (A, M)
    assert rd(m.path("f")) == text
    assert m.unmount() == 0, m.log()

    # without the writeback cache the data is in the daemon, uncommitted,
    # when the times are set
    n = mount_factory(options=["nowriteback"], name="nowb")
    fd = os.open(n.path("g"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, text)
        os.utime(fd, ns=(A, M))
        assert os.fstat(fd).st_mtime_ns == M
        assert os.pread(fd, len(text) + 1, 0) == text
    finally:
        os.close(fd)
    assert os.stat(n.path("g")).st_mtime_ns == M
    # set again, then written: the write's time wins
    fd = os.open(n.path("g"), os.O_RDWR)
    try:
        os.utime(fd, ns=(A, M))
        before = time.time_ns()
        os.pwrite(fd, b"later", 0)
        assert os.fstat(fd).st_mtime_ns >= before - 10_000_000
    finally:
        os.close(fd)
    assert os.stat(n.path("g")).st_mtime_ns >= before - 10_000_000
    assert rd(n.path("g")) == b"later" + text[5:]
    assert n.unmount() == 0, n.log()
    n = mount_factory(backing=n.backing, name="nowb2")
    assert os.stat(n.path("g")).st_mtime_ns >= before - 10_000_000
    assert rd(n.path("g")) == b"later" + text[5:]
    assert n.unmount() == 0, n.log()


def test_new_small_file_is_a_draft_until_packed(mount_factory):
    """A small file created and closed without an fsync is stored as a
    draft (zstd's fastest mode, about its own size: a `cp -r` does not
    wait for compression, src/content/content_io.c) and compressed when it
    is packed. A reader that holds it open when packing comes (after its
    durable mark, during a stream of closes) delays that until its close:
    the draft is tried again, so none stays. A file fsync'ed before its
    close, and a file on a nopack mount, are compressed at once."""
    text = b"".join(b"%06d the draft of a small file, packed later\n" % i
                    for i in range(500))          # 23,500 bytes of text
    m = mount_factory()
    os.mkdir(m.path("d"))
    os.mkdir(m.path("s"))
    s0 = mount_stats(m.mnt)
    ba = os.path.join(m.backing, "d", "a")
    k = 0

    def stream(count):                 # closes that keep the batches full
        nonlocal k
        for _ in range(count):
            wr(m.path("s", f"f{k}"), b"%d\n" % k)
            k += 1

    stream(300)
    wr(m.path("d", "a"), text)
    s1 = mount_stats(m.mnt)
    # (the stream's files, under 4 KiB, are compressed at once)
    assert s1["draft_blocks"] - s0["draft_blocks"] == 1, (s0, s1)
    assert state(ba) == "container"
    assert len(text) * 9 // 10 < os.stat(ba).st_size < len(text) + 4096
    stream(600)                        # its durable mark, no quiet moment
    r = open(m.path("d", "a"), "rb")
    try:
        stream(300)
        assert wait_states(m.backing, {"s/f0": "packed", f"s/f{k - 1}": "packed"},
                           timeout=10) == {"s/f0": "packed", f"s/f{k - 1}": "packed"}
        time.sleep(4.5)                # two more batches: a stays open
        assert state(ba) == "container", m.log()[-1000:]
        assert r.read() == text
    finally:
        r.close()
    assert wait_states(m.backing, {"d/a": "packed"}, timeout=10) == {"d/a": "packed"}
    assert pointer(ba)["stored"] < len(text) // 4
    assert rd(m.path("d", "a")) == text
    # fsync'ed before its close: compressed at once
    s1 = mount_stats(m.mnt)
    with open(m.path("d", "b"), "wb") as w:
        w.write(text)
        w.flush()
        os.fsync(w.fileno())
    s2 = mount_stats(m.mnt)
    assert s2["draft_blocks"] == s1["draft_blocks"], (s1, s2)
    bb = os.path.join(m.backing, "d", "b")
    assert state(bb) == "packed" or os.stat(bb).st_size < len(text) // 2
    assert m.unmount() == 0, m.log()
    # nopack: no drafts
    n = mount_factory(options=["nopack"], name="nopack")
    wr(n.path("c"), text)
    assert mount_stats(n.mnt)["draft_blocks"] == 0
    bc = os.path.join(n.backing, "c")
    assert state(bc) == "container" and os.stat(bc).st_size < len(text) // 2
    assert rd(n.path("c")) == text
    assert n.unmount() == 0, n.log()


def pack_figures(s):
    """The stats that tell why packing lagged, in full (a dict's repr is
    cut short by pytest)."""
    return " ".join(f"{k}={s[k]}" for k in (
        "pack_pending", "files_packed", "pack_failures", "durable_queued",
        "durable_marked", "durable_batches", "inodes", "fd_cached",
        "fd_reopens", "fd_evictions", "fd_stale"))


class LimitedMount(Mount):
    """A daemon under an open-file limit of 10,000: it keeps at most 5,000
    notes of files to pack (half the limit, src/mount/mount.c)."""
    LIMIT = 10000

    def cmd(self):
        return ["prlimit", f"--nofile={self.LIMIT}:{self.LIMIT}", "--"] + super().cmd()


def test_stream_of_closes_is_packed_within_its_bound(mount_factory, tmp_path):
    """Small files closed in a stream wait for a quiet moment to be packed
    (a `cp -r` is not slowed down by packing), but never more of them than
    the bound (half the open-file limit) plus the durable queue's 1,024 and
    one batch: past the bound the durable thread packs the oldest down
    while the stream goes on. Once it ends, all are packed and read back."""
    mount_factory  # (FUSE present, squeezefs built; this mount is our own)
    n, bound = 7500, LimitedMount.LIMIT // 2 + 2 * 1024
    os.makedirs(tmp_path / "b")
    m = LimitedMount(tmp_path / "b", tmp_path / "m")
    rc = None
    try:
        os.mkdir(m.path("d"))
        content = {i: b"%06d small file\n" % i * (1 + i % 40) for i in range(n)}
        peak = 0
        for i in range(n):
            wr(m.path("d", f"f{i}"), content[i])
            if i % 250 == 249:
                peak = max(peak, mount_stats(m.mnt)["pack_pending"])
        s = mount_stats(m.mnt)
        peak = max(peak, s["pack_pending"])
        assert peak <= bound, (peak, pack_figures(s))
        # some while the stream went on
        assert s["files_packed"] > 0, pack_figures(s)
        deadline = time.time() + 60
        while time.time() < deadline:
            s = mount_stats(m.mnt)
            if s["pack_pending"] == 0 and s["files_packed"] >= n:
                break
            time.sleep(0.2)
        assert s["pack_pending"] == 0 and s["files_packed"] == n, pack_figures(s)
        assert s["pack_failures"] == 0, (pack_figures(s), m.log()[-2000:])
        for i in range(0, n, 7):
            assert rd(m.path("d", f"f{i}")) == content[i], i
    finally:
        rc = m.unmount()
    assert rc == 0, m.log()[-2000:]
    left = [i for i in range(n)
            if state(os.path.join(str(tmp_path / "b"), "d", f"f{i}")) != "packed"]
    assert not left, left[:10]


def test_files_whose_backing_names_left_the_dentry_cache_are_packed(mount_factory):
    """A file whose O_PATH descriptor was evicted (max_fds=) is opened again
    by its file handle; once the kernel dropped its backing dentry (memory
    pressure, drop_caches), that descriptor has no path: packing, which
    needs the file's directory, skipped it for good (a stream of closes on a
    busy machine then packed nothing: test_stream_of_closes_is_packed_within
    _its_bound failed). It is opened again through the name a lookup last
    gave it, checked to be the same file by its handle."""
    m = mount_factory(options=("max_fds=64",))
    if mount_stats(m.mnt)["fd_handles"] != 1:
        pytest.skip("BACKING has no file handles")
    n = 300
    os.mkdir(m.path("d"))
    os.mkdir(m.path("d", "sub"))
    names = [f"f{i}" for i in range(n)] + [f"sub/g{i}" for i in range(n // 3)]
    for i, rel in enumerate(names):
        wr(m.path("d", rel), b"%05d small\n" % i * (1 + i % 30))
    # before the durable thread's quiet moment (2 s) packs them: their
    # backing dentries go (the inodes stay: their notes hold them)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")
    deadline = time.time() + 30   # (a note leaves pack_pending when its
    while time.time() < deadline:  # slice starts: files_packed tells)
        s = mount_stats(m.mnt)
        if s["pack_pending"] == 0 and s["files_packed"] >= len(names):
            break
        time.sleep(0.2)
    s = mount_stats(m.mnt)
    assert s["fd_evictions"] > 0, s
    left = [rel for rel in names
            if state(os.path.join(m.backing, "d", rel)) != "packed"]
    assert not left and s["files_packed"] == len(names), (len(left), left[:5],
                                                           pack_figures(s))
    for i, rel in enumerate(names):
        assert rd(m.path("d", rel)) == b"%05d small\n" % i * (1 + i % 30), rel
    assert m.unmount() == 0, m.log()


def test_lookups_racing_packing_show_the_content_size(mount_factory):
    """A lookup (or getattr) stats the backing file before it takes the
    inode's io lock: packing in place could empty the container between
    the two, and the kind was then decided on the 0-byte file with the
    stat's size: a plain file of the container's size (1,688 bytes for a
    100-byte file). The kernel, trusting its own size under the writeback
    cache, then read zeros past the content (test_scale's walk read a file
    back with zeros at its end, once). Lookups of files whose kernel
    inodes keep being dropped, while they are packed."""
    m = mount_factory()
    n = 600
    os.mkdir(m.path("d"))
    want = {}
    for i in range(n):
        want[i] = b"%05d small " % i * (2 + i % 25)
        wr(m.path("d", "f%d" % i), want[i])
    bad, stop = [], threading.Event()

    def dropper():
        while not stop.is_set():
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("2")
            time.sleep(0.01)

    def looker(k):
        while not stop.is_set() and not bad:
            for i in range(k, n, 3):
                size = os.stat(m.path("d", "f%d" % i)).st_size
                if size != len(want[i]):
                    bad.append((i, size, len(want[i])))
    th = [threading.Thread(target=dropper)] + [
        threading.Thread(target=looker, args=(k,)) for k in range(3)]
    for t in th:
        t.start()
    try:
        deadline = time.time() + 20
        while time.time() < deadline and not bad:
            if mount_stats(m.mnt)["files_packed"] >= n:
                break
            time.sleep(0.1)
    finally:
        stop.set()
        for t in th:
            t.join()
    assert not bad, bad[:5]
    assert mount_stats(m.mnt)["files_packed"] >= n
    for i in range(n):
        assert rd(m.path("d", "f%d" % i)) == want[i], i
    assert m.unmount() == 0, m.log()


def test_verify_beside_a_mount_that_packs_reports_no_damage(mount_factory):
    """squeezefs verify of a BACKING whose mount is packing: a container
    truncated to 0 bytes under the reader (packed in place) read as "not a
    squeezefs container", a pack appended to as a damaged entry
    (test_scale's round trip verifies beside the running mount: failed 2
    of about 25 loaded runs). A file or pack that changed while it was read
    is checked anew."""
    m = mount_factory()
    n = 800
    os.mkdir(m.path("d"))
    for i in range(n):
        wr(m.path("d", "f%d" % i), b"%05d small " % i * (2 + i % 25))
    runs, deadline = 0, time.time() + 20
    while time.time() < deadline:
        p = run_cli("verify", m.backing, check=False)
        runs += 1
        assert p.returncode == 0, (runs, p.stdout[-1500:], p.stderr[-500:])
        if mount_stats(m.mnt)["files_packed"] >= n:
            break
    assert mount_stats(m.mnt)["files_packed"] >= n
    assert run_cli("verify", m.backing, check=False).returncode == 0
    assert m.unmount() == 0, m.log()


def test_fsynced_file_is_packed(mount_factory):
    """A file fsync'ed before its close (editors, package managers) is
    packed too: its close queues it although its durable mark is written
    (it was never packed until this was found by this test)."""
    m = mount_factory()
    with open(m.path("synced"), "wb") as f:
        f.write(data(3000, 1))
        f.flush()
        os.fsync(f.fileno())
    wr(m.path("plain"), data(3000, 2))
    assert m.unmount() == 0, m.log()
    assert state(os.path.join(m.backing, "plain")) == "packed"
    assert state(os.path.join(m.backing, "synced")) == "packed"


def test_writable_open_without_a_write_keeps_the_file_packed(mount_factory):
    """PostgreSQL opens every file O_RDWR, also to read it: a packed file
    is unpacked by its first write, not by the open. Reads through the
    writable descriptor give the packed content; the first write makes it
    a container with the write in it."""
    m = mount_factory()
    body = data(5000, 3)
    wr(m.path("f"), body)
    assert wait_states(m.backing, {"f": "packed"}) == {"f": "packed"}
    fd = os.open(m.path("f"), os.O_RDWR)
    try:
        assert os.pread(fd, 10000, 0) == body
        assert state(os.path.join(m.backing, "f")) == "packed"
        os.pwrite(fd, b"XYZ", 100)
        os.fsync(fd)  # the kernel's writeback cache sends the write now
        assert state(os.path.join(m.backing, "f")) == "container"
        assert os.pread(fd, 10000, 0) == body[:100] + b"XYZ" + body[103:]
    finally:
        os.close(fd)
    with open(m.path("f"), "rb") as f:
        assert f.read() == body[:100] + b"XYZ" + body[103:]
    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=m.backing, name="again")
    with open(m2.path("f"), "rb") as f:
        assert f.read() == body[:100] + b"XYZ" + body[103:]
    assert m2.unmount() == 0, m2.log()


def test_packing_keeps_the_inode_number(mount_factory):
    m = mount_factory()
    names = [f"f{i}" for i in range(8)]
    for n in names:
        wr(m.path(n), data(500, 1))
    before = {n: os.stat(m.path(n)).st_ino for n in names}
    want = {n: "packed" for n in names}
    assert wait_states(m.backing, want) == want
    after = {n: os.stat(m.path(n)).st_ino for n in names}
    assert m.unmount() == 0, m.log()
    assert after == before


# ---------------------------------------------------------------- model


class Model:
    """Paths -> inode numbers, inodes -> contents; directories top-level
    ("" is the root). expect[ino]: must the file be packed once the
    packer had its turn (True), or must it not (False), or either (None)."""

    def __init__(self):
        self.dirs = {""}
        self.names = {}      # rel path -> ino
        self.content = {}    # ino -> bytes
        self.expect = {}     # ino -> True / False / None
        # inodes that may be plain files (not containers, never packed): an
        # empty file that truncate(2) extended stays a plain file
        self.plain = set()
        # the name the daemon's inode was opened by (its first name in this
        # mount session; None: unknown), and the inodes that lost it while
        # another link kept them alive: the packer finds those by the last
        # other name a lookup saw (test_file_left_only_under_a_second_link_
        # is_packed), which may be gone too: packed or not
        self.origin = {}
        self.lost_origin = set()
        self.next = 100

    def remounted(self):
        for ino in self.content:
            names = [r for r, i in self.names.items() if i == ino]
            self.origin[ino] = names[0] if len(names) == 1 else None
        self.lost_origin.clear()

    def nlink(self, ino):
        return sum(1 for v in self.names.values() if v == ino)

    def files_in(self, d):
        return [p for p in self.names if os.path.dirname(p) == d]


def rel_of(d, name):
    return f"{d}/{name}" if d else name


def pick_size(rnd):
    r = rnd.random()
    if r < 0.05:
        return 0
    if r < 0.6:
        return rnd.randint(1, 4096)
    if r < 0.85:
        return rnd.randint(4097, 70000)
    if r < 0.9:
        return MAX_PACKED
    return rnd.randint(MAX_PACKED - 1000, 250000)


def written(md, ino):
    """The file's content changed through a descriptor and was closed:
    the packer must take it if it is small and has one link."""
    n = len(md.content[ino])
    md.expect[ino] = (0 < n <= MAX_PACKED) if md.nlink(ino) == 1 else False
    if (ino in md.plain or ino in md.lost_origin) and md.expect[ino]:
        md.expect[ino] = None


def drop_name(md, rel):
    """rel is gone; its inode with it if that was its last name. A file
    that is down to one link again may be packed if it was still queued
    for its durable mark, or stay a container: either."""
    ino = md.names.pop(rel)
    if ino not in md.names.values():
        del md.content[ino]
        del md.expect[ino]
        del md.origin[ino]
        md.plain.discard(ino)
        md.lost_origin.discard(ino)
    else:
        md.expect[ino] = None
        if md.origin[ino] in (rel, None):
            md.lost_origin.add(ino)


def random_op(rnd, m, md, log):
    files = sorted(md.names)
    dirs = sorted(md.dirs)
    op = rnd.choices(
        ["create", "overwrite", "append", "write_at", "truncate", "rename",
         "link", "unlink", "mkdir", "rmdir", "read", "rendir"],
        [16, 8, 10, 8, 6, 12, 4, 6, 2, 1, 6, 1])[0]
    if op in ("overwrite", "append", "write_at", "truncate", "rename", "link",
              "unlink", "read") and not files:
        op = "create"
    if op == "create":
        d = rnd.choice(dirs)
        rel = rel_of(d, f"f{md.next}")
        content = data(pick_size(rnd), rnd.randrange(1 << 30))
        wr(m.path(rel), content)
        ino = md.next
        md.next += 1
        md.names[rel] = ino
        md.content[ino] = content
        md.origin[ino] = rel
        written(md, ino)
        log.append(f"create {rel} {len(content)}")
    elif op == "overwrite":
        rel = rnd.choice(files)
        content = data(pick_size(rnd), rnd.randrange(1 << 30))
        wr(m.path(rel), content)
        ino = md.names[rel]
        md.content[ino] = content
        written(md, ino)
        log.append(f"overwrite {rel} {len(content)}")
    elif op == "append":
        rel = rnd.choice(files)
        extra = data(rnd.choice([1, 10, 500, 5000, 40000]), rnd.randrange(1 << 30))
        wr(m.path(rel), extra, "ab")
        ino = md.names[rel]
        md.content[ino] += extra
        written(md, ino)
        log.append(f"append {rel} {len(extra)}")
    elif op == "write_at":
        rel = rnd.choice(files)
        ino = md.names[rel]
        old = md.content[ino]
        off = rnd.randint(0, len(old))
        piece = data(rnd.randint(1, 3000), rnd.randrange(1 << 30))
        with open(m.path(rel), "r+b") as f:
            f.seek(off)
            f.write(piece)
        md.content[ino] = old[:off] + piece + old[off + len(piece):]
        written(md, ino)
        log.append(f"write_at {rel} {off} {len(piece)}")
    elif op == "truncate":
        rel = rnd.choice(files)
        ino = md.names[rel]
        old = md.content[ino]
        n = rnd.choice([0, rnd.randint(0, len(old)), len(old) + rnd.randint(1, 5000)])
        os.truncate(m.path(rel), n)
        if not old and n:
            md.plain.add(ino)
        md.content[ino] = old[:n] + b"\0" * max(0, n - len(old))
        # truncate(2) is not a write through a descriptor: either
        md.expect[ino] = None if 0 < n <= MAX_PACKED and md.nlink(ino) == 1 else False
        log.append(f"truncate {rel} {n}")
    elif op == "rename":
        src = rnd.choice(files)
        d = rnd.choice(dirs)
        if rnd.random() < 0.3 and md.files_in(d):
            dst = rnd.choice(md.files_in(d))   # over an existing file
        else:
            dst = rel_of(d, f"f{md.next}")
            md.next += 1
        os.rename(m.path(src), m.path(dst))
        ino = md.names[src]
        if dst != src and md.names.get(dst) != ino:
            if dst in md.names:
                drop_name(md, dst)
            md.names[dst] = md.names.pop(src)
            if md.origin[ino] == src:
                md.origin[ino] = dst
            if os.path.dirname(src) != os.path.dirname(dst):
                # a packed file is unpacked (and not written again); a
                # container still queued may be packed in its new directory
                md.expect[ino] = None
        log.append(f"rename {src} {dst}")
    elif op == "link":
        src = rnd.choice(files)
        d = rnd.choice(dirs)
        dst = rel_of(d, f"f{md.next}")
        md.next += 1
        os.link(m.path(src), m.path(dst))
        ino = md.names[src]
        md.names[dst] = ino
        md.expect[ino] = False
        log.append(f"link {src} {dst}")
    elif op == "unlink":
        rel = rnd.choice(files)
        os.unlink(m.path(rel))
        drop_name(md, rel)
        log.append(f"unlink {rel}")
    elif op == "mkdir":
        d = f"d{md.next}"
        md.next += 1
        os.mkdir(m.path(d))
        md.dirs.add(d)
        log.append(f"mkdir {d}")
    elif op == "rmdir":
        cands = [d for d in dirs if d]
        if not cands:
            return
        d = rnd.choice(cands)
        for rel in md.files_in(d):
            os.unlink(m.path(rel))
            drop_name(md, rel)
        os.rmdir(m.path(d))
        md.dirs.discard(d)
        log.append(f"rmdir {d}")
    elif op == "rendir":
        cands = [d for d in dirs if d]
        if not cands:
            return
        d = rnd.choice(cands)
        nd = f"d{md.next}"
        md.next += 1
        os.rename(m.path(d), m.path(nd))
        md.dirs.discard(d)
        md.dirs.add(nd)
        for rel in md.files_in(d):
            md.names[rel_of(nd, os.path.basename(rel))] = md.names.pop(rel)
        for ino, o in md.origin.items():
            if o is not None and os.path.dirname(o) == d:
                md.origin[ino] = rel_of(nd, os.path.basename(o))
        log.append(f"rendir {d} {nd}")
    elif op == "read":
        rel = rnd.choice(files)
        assert rd(m.path(rel)) == md.content[md.names[rel]], (rel, log[-20:])
        log.append(f"read {rel}")


def check_model(m, md, log, where, packed_check=True):
    for d in md.dirs:
        names = sorted(os.listdir(m.path(d) if d else m.mnt))
        want = sorted([os.path.basename(p) for p in md.files_in(d)] +
                      [x for x in md.dirs if x and not d])
        assert names == want, (where, d, log[-30:])
    for rel, ino in md.names.items():
        content = md.content[ino]
        st = os.stat(m.path(rel))
        assert st.st_size == len(content), (where, rel, st.st_size, len(content), log[-30:])
        assert st.st_nlink == md.nlink(ino), (where, rel)
        assert rd(m.path(rel)) == content, (where, rel, log[-30:])
    if not packed_check:
        return
    # the backing files: small closed single-link files written through a
    # descriptor are packed; big, linked and empty ones are not
    deadline = time.time() + PACK_WAIT
    while True:
        bad = []
        for rel, ino in md.names.items():
            s = state(os.path.join(m.backing, rel))
            n = len(md.content[ino])
            exp = md.expect[ino]
            if n == 0:     # 0 bytes, or an empty container: never packed
                ok = s in ("empty", "container")
            elif ino in md.plain and s == "other":
                ok = True
            elif n > MAX_PACKED or md.nlink(ino) > 1:
                ok = s == "container"
            elif exp is True:
                ok = s == "packed"
            elif exp is False:
                ok = s == "container"
            else:
                ok = s in ("packed", "container")
            if s == "packed":
                ok = ok and pointer(os.path.join(m.backing, rel))["length"] == n
            if not ok:
                bad.append((rel, n, exp, s))
        if not bad or time.time() > deadline:
            break
        time.sleep(0.1)
    assert not bad, (where, bad[:10], log[-30:], m.log()[-2000:])
    seen = {}
    for rel, ino in md.names.items():
        s = state(os.path.join(m.backing, rel))
        key = "must-pack" if md.expect[ino] and s == "packed" else s
        seen[key] = seen.get(key, 0) + 1
    return seen


# one seed in the plain stage and under the TSan daemon (SQZ_QUICK,
# tools/test.sh), which runs it several times slower; a second one with
# --long (SQZ_LONG=1); none under the ASan daemon (the default suite's time
# budget; its other tests there cover the packing code)
SEEDS = [int(os.environ.get("SQZ_PACK_SEED", "14"))] + (
    [3] if os.environ.get("SQZ_LONG") == "1" else [])


@pytest.mark.skipif(os.environ.get("SQZ_ASAN") == "1",
                    reason="runs under the plain and TSan daemons (time budget of the suite)")
@pytest.mark.parametrize("seed", SEEDS)
def test_random_operations_match_model(mount_factory, seed):
    """A few hundred random operations (create, overwrite, append, write in
    the middle, truncate, rename in and across directories and over other
    files, link, unlink, mkdir, rmdir, directory rename) in six phases;
    after each phase the packer gets its turn and the mount is checked
    against an in-memory model: names, sizes, link counts, bytes, and the
    backing files (small written files packed, big, linked and empty ones
    not). An unmount right after the third phase (packing what is
    pending), then a remount; a last remount at the end. SQZ_PACK_SEED=N
    runs another seed."""
    rnd = random.Random(seed)
    m = mount_factory()
    md = Model()
    log = []
    for d in ("d1", "d2", "d3"):
        os.mkdir(m.path(d))
        md.dirs.add(d)
    phases = 6
    counts = {}
    for phase in range(phases):
        for _ in range(60):
            random_op(rnd, m, md, log)
        where = f"seed {seed} phase {phase}"
        if phase == 2:
            # unmount right away: the unmount packs what is pending
            check_model(m, md, log, where + " (before unmount)", packed_check=False)
            assert m.unmount() == 0, m.log()
            m.start()
            md.remounted()
            where += " (remounted)"
        seen = check_model(m, md, log, where)
        for k, v in seen.items():
            counts[k] = counts.get(k, 0) + v
    print(f"seed {seed}: {len(log)} operations; files seen per state, summed "
          f"over the phases: {counts}")
    # a run that exercises the packer: many files it had to pack, and
    # changes to packed files (the next phase's operations)
    assert counts.get("must-pack", 0) >= 20, counts
    assert m.unmount() == 0, m.log()
    m.start()
    check_model(m, md, log, f"seed {seed} final remount")
    assert m.unmount() == 0, m.log()
