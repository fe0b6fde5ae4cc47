"""Damage is never silent: the corruption matrix of issue 10.

For each file state {fsync'ed and open, closed (left alone past the
durability interval, then the daemon killed), closed + clean unmount,
closed + SIGTERM, daemon killed with -9 right after close + sync} x each
region of the container {header, anchor slot 0, anchor slot 1, a DATA record
in the middle, a COMMIT record in the middle, the CHECKPOINT record, the last
record} x block size {4K, 128K}: flip bytes in a copy of the backing file,
remount, read every block. Every read is the exact original bytes or EIO;
for the clean states `stat` never shows a shorter file; `squeezefs verify`
flags the file (non-zero exit) every time. Only the killed-daemon state may
lose data that was never synced, and even there reads are exact-or-EIO.
Every region must be found, and the EIO blocks stay within the region's
bound (EIO_BOUNDS). The data seeds come from the case's name (zlib.crc32),
the same in every run, and every failure message names them.
"""
import errno
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import time
import zlib

import pytest

from mountlib import flip_bytes, run_cli

# layout (docs/FORMAT.md)
HDR_REGION = 4096
REC_MAGIC = 0x52435153
DATA, COMMIT, CHECKPOINT = 1, 2, 3
ANCHOR_OFF = (512, 1024)
# the daemon's durability interval (src/content/durable.c) plus slack
DURABLE_WAIT = 3.5

FIRST = 9 << 20           # written, then fsync'ed: a checkpoint
TOTAL = FIRST + (1 << 20)  # the rest written after it


def make_data(n, seed):
    """Half random, half text per 4 KiB: compresses about 2x, so the first
    9 MiB append more than the 4 MiB that make fsync write a checkpoint."""
    rnd = random.Random(seed)
    words = [b"trade", b"quote", b"IBM", b"MSFT", b"12.50", b"2026-11-24", b"\n"]
    out = bytearray()
    while len(out) < n:
        out += rnd.randbytes(2048)
        line = bytearray()
        while len(line) < 2048:
            line += b" ".join(rnd.choice(words) for _ in range(8)) + b"\n"
        out += line[:2048]
    return bytes(out[:n])


def log_start(buf):
    """Where the log starts: after the 4 KiB header region in version 1,
    after the anchor slots (1536) in version 2 (docs/FORMAT.md)."""
    version = struct.unpack_from("<I", buf, 8)[0]
    assert version in (1, 2), version
    return HDR_REGION if version == 1 else 1536


def records(path):
    """[(offset, type, size)] of the records in a container, in log order."""
    out = []
    with open(path, "rb") as f:
        buf = f.read()
    pos = log_start(buf)
    while pos + 32 <= len(buf):
        magic, typ = struct.unpack_from("<IB", buf, pos)
        if magic != REC_MAGIC or typ not in (DATA, COMMIT, CHECKPOINT):
            # dead space reclaimed by a checkpoint is punched (zeros) and
            # the bytes around it are partial dead records: records are
            # 8-aligned, so look for the next one
            pos += 8
            continue
        plen = struct.unpack_from("<I", buf, pos + 24)[0]
        size = (32 + plen + 7) & ~7
        if pos + size > len(buf):
            break
        out.append((pos, typ, size))
        pos += size
    return out


def newest_checkpoint(path):
    """Offset of the CHECKPOINT the newest anchor slot points to (0: none)."""
    best = (0, 0)
    with open(path, "rb") as f:
        for off in ANCHOR_OFF:
            f.seek(off)
            b = f.read(56)
            if b[:4] != b"SQCA":
                continue
            seq, ckpt = struct.unpack_from("<QQ", b, 16)
            if seq > best[0]:
                best = (seq, ckpt)
    return best[1]


def region_offset(path, region):
    """Where to flip bytes for a region name, or None if absent."""
    recs = records(path)
    if region == "header":
        return 8
    if region == "anchor0":
        return ANCHOR_OFF[0] + 16
    if region == "anchor1":
        return ANCHOR_OFF[1] + 16
    if region == "checkpoint":
        off = newest_checkpoint(path)
        return off + 40 if off else None
    if region == "last":
        return recs[-1][0] + 8 if recs else None
    if region == "data":
        mid = os.path.getsize(path) // 2
        cands = [r for r in recs if r[1] == DATA]
        if not cands:
            return None
        r = min(cands, key=lambda r: abs(r[0] - mid))
        return r[0] + min(48 + 16, r[2] // 2)
    # a COMMIT the file needs: after the newest checkpoint (those before
    # it are superseded by the checkpoint's index), not the last record
    ck = newest_checkpoint(path)
    cands = [r for r in recs[:-1] if r[1] == COMMIT and r[0] > ck]
    if not cands:
        return None
    return cands[len(cands) // 2][0] + 8


def flip(path, off, n=16):
    flip_bytes(path, off, n)


def read_blocks(path, expect, bs):
    """[(offset, 'ok'|'eio'|'wrong'|'short')] for every block of expect."""
    res = []
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:  # a container that cannot be opened at all
        assert e.errno == errno.EIO, f"open: {e}"
        return [(off, "eio") for off in range(0, len(expect), bs)]
    try:
        for off in range(0, len(expect), bs):
            want = expect[off:off + bs]
            try:
                got = os.pread(fd, len(want), off)
            except OSError as e:
                assert e.errno == errno.EIO, f"read at {off}: {e}"
                res.append((off, "eio"))
                continue
            if got == want:
                res.append((off, "ok"))
            elif want.startswith(got):
                res.append((off, "short"))
            else:
                res.append((off, "wrong"))
    finally:
        os.close(fd)
    return res


def make_state(mount_factory, tmp_path, state, opts, data, name):
    """Write data into a fresh mount and leave it in `state`; return the
    backing file's path (the daemon is gone)."""
    backing = tmp_path / f"{name}-b"
    m = mount_factory(options=opts, backing=backing, name=name)
    p = m.path("col")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data[:FIRST])
    os.fsync(fd)  # a checkpoint in the middle of the log
    # the rest in four appends, each closed (a commit each; the reopen takes
    # back the container queued for its durable mark), the last left open
    view = memoryview(data)
    piece = (TOTAL - FIRST) // 4
    for i in range(4):
        if i:
            fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.write(fd, view[FIRST + i * piece:FIRST + (i + 1) * piece])
        if i < 3:
            os.close(fd)
    if state == "fsynced-open":
        os.fsync(fd)
        m.kill(signal.SIGKILL)  # the host goes down with the file open
        try:
            os.close(fd)
        except OSError:
            pass
    else:
        os.close(fd)
        if state == "closed":
            time.sleep(DURABLE_WAIT)
            m.kill(signal.SIGKILL)
        elif state == "unmount":
            assert m.unmount() == 0, m.log()
        elif state == "sigterm":
            assert m.kill(signal.SIGTERM) == 0, m.log()
        elif state == "killed":
            os.sync()
            m.kill(signal.SIGKILL)
        else:
            raise AssertionError(state)
    return backing / "col"


STATES = ["fsynced-open", "closed", "unmount", "sigterm", "killed"]
REGIONS = ["header", "anchor0", "anchor1", "data", "commit", "checkpoint", "last"]
# How many blocks may read as EIO after a few flipped bytes in each region
# (min, max; None = every block), in every state (docs/FORMAT.md): a damaged
# header or newest checkpoint fails the open (every block EIO, never a
# wrong state); an anchor slot has a twin, so nothing is lost; a DATA
# record loses exactly its block; a COMMIT or the last record at most the
# blocks next to it (their DATA records stay).
EIO_BOUNDS = {"header": (None, None), "checkpoint": (None, None),
              "anchor0": (0, 0), "anchor1": (0, 0), "data": (1, 1),
              "commit": (0, 2), "last": (0, 2)}


# what the TSan stage runs (SQZ_QUICK=1, conftest.py): the matrix at
# 128K blocks in every state (the daemon's ends: kill, unmount, SIGTERM),
# and every other test; the 4K matrix reads 2,560 blocks per region
# through the same code and runs in the plain stage.
SANITIZER_SUBSET = {f"test_corruption_matrix[{st}-128K]" for st in STATES} | {
    "test_corruption_matrix_small_files", "test_crash_while_appending_then_damage",
    "test_verify_reports_uncommitted_tail", "test_closed_file_becomes_durable_in_background",
    "test_corruption_matrix_packed_files", "test_verify_flags_damaged_packed_files",
}


def matrix_seed(*key):
    """A data seed per case, the same in every run (hash() of a str is
    salted per process) and named in every failure message."""
    return zlib.crc32("/".join(key).encode()) & 0xFFFF


@pytest.mark.parametrize("bs", ["4K", "128K"])
@pytest.mark.parametrize("state", STATES)
def test_corruption_matrix(mount_factory, tmp_path, state, bs):
    opts = [f"compress=zstd:1/{bs}"]
    nbs = 4096 if bs == "4K" else 128 << 10
    seed = matrix_seed(state, bs)
    data = make_data(TOTAL, seed=seed)
    pristine = make_state(mount_factory, tmp_path, state, opts, data, "w")
    clean = state != "killed"
    # before any damage: everything the state promises is there
    v0 = run_cli("verify", pristine, check=False)
    assert v0.returncode in ((0,) if clean else (0, 3)), \
        f"{state}/{bs} (seed {seed}): " + v0.stdout + v0.stderr
    seen = []
    for region in REGIONS:
        ctx = f"{state}/{bs}/{region} (data seed {seed})"
        off = region_offset(pristine, region)
        # every state has every region (a checkpoint from the first fsync,
        # commits of the closed appends after it): one not found is a
        # case the matrix would not test
        assert off is not None, f"{ctx}: region not found in {records(pristine)}"
        work = tmp_path / f"{region}-b"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        shutil.copy2(pristine, work / "col")
        flip(work / "col", off)
        v = run_cli("verify", work, check=False)
        assert v.returncode in (1, 3), (
            f"{ctx}: verify did not flag the damage "
            f"(exit {v.returncode}):\n{v.stdout}{v.stderr}")
        m = mount_factory(options=opts, backing=work, name=f"{region}-m")
        p = m.path("col")
        size = os.stat(p).st_size
        res = read_blocks(p, data[:size] if size <= len(data) else data, nbs)
        bad = [r for r in res if r[1] in ("wrong", "short")]
        assert not bad, f"{ctx}: wrong bytes at {bad[:5]}\n{m.log()[-2000:]}"
        if size > len(data):
            pytest.fail(f"{ctx}: size {size} > {len(data)}")
        if clean:
            assert size == len(data), (
                f"{ctx}: the file shrank to {size} of {len(data)} "
                f"after damage\n{m.log()[-2000:]}")
        eio = sum(1 for r in res if r[1] == "eio")
        seen.append(f"{region}: size {size}, {eio} EIO block(s), verify {v.returncode}")
        lo, hi = EIO_BOUNDS[region]
        lo = len(res) if lo is None else lo
        hi = len(res) if hi is None else hi
        assert lo <= eio <= hi, (f"{ctx}: {eio} of {len(res)} blocks EIO, the bound is "
                                 f"{lo}..{hi}\n{m.log()[-2000:]}")
        assert m.unmount() == 0, m.log()
    print(f"{state}/{bs} (data seed {seed}): " + "; ".join(seen))


SMALL_STATES = ["closed", "unmount", "sigterm", "killed"]
SMALL_REGIONS = ["header", "anchor0", "anchor1", "data", "commit", "last"]


def small_files(seed):
    """A small-file tree's files (issue 14): text and random data of 1 byte
    to 4 KiB, each written once and closed; one appended to later (two
    commits), one empty."""
    rnd = random.Random(seed)
    files = {}
    for i, n in enumerate([1, 60, 700, 2500, 3000, 4000, 4096]):
        files[f"t{i}"] = make_data(8192, seed + i)[2048:2048 + n]  # text part
    files["r3000"] = rnd.randbytes(3000)
    files["app"] = make_data(8192, seed + 99)[2048:3048]
    files["empty"] = b""
    return files


@pytest.mark.parametrize("state", SMALL_STATES)
def test_corruption_matrix_small_files(mount_factory, tmp_path, state):
    """The corruption matrix on a small-file tree (format version 2, lazy
    creation: header, record and commit written by one pwrite): for every
    file x region {header, anchor slot 0, anchor slot 1, the DATA record,
    the COMMIT record, the last record}, flip bytes in a copy, remount,
    read: the exact bytes or EIO, never wrong bytes; in the clean states
    `stat` never shows a shorter file and `verify` flags every damaged
    file. An anchor slot that was never written (a small file has one
    durable mark, in one slot) holds no anchor to damage and is skipped.
    The files stay containers here (-o nopack); packed small files have
    their own matrix (test_corruption_matrix_packed)."""
    seed = matrix_seed("small", state)
    files = small_files(seed)
    backing = tmp_path / "w-b"
    m = mount_factory(backing=backing, name="w", options=["nopack"])
    for name, data in files.items():
        with open(m.path(name), "wb") as f:
            f.write(data if name != "app" else data[:400])
    with open(m.path("app"), "ab") as f:
        f.write(files["app"][400:])
    if state == "closed" or state == "killed":
        time.sleep(DURABLE_WAIT if state == "closed" else 0)
        if state == "killed":
            os.sync()
        m.kill()
    elif state == "sigterm":
        m.proc.send_signal(signal.SIGTERM)
        assert m.proc.wait(timeout=30) == 0, m.log()[-2000:]
        m.kill()
    else:
        assert m.unmount() == 0, m.log()
    clean = state != "killed"
    v0 = run_cli("verify", backing, check=False)
    assert v0.returncode in ((0,) if clean else (0, 3)), \
        f"{state} (data seed {seed}): " + v0.stdout + v0.stderr
    nonempty = {n for n, d in files.items() if d}
    # which files have each region: every written file a header, a DATA
    # record and a last record; only "app" (two commits) a COMMIT that is
    # not its last record; an anchor (one durable mark, in one of the two
    # slots) every file once the mark is written, so in the clean states
    expect = {"header": nonempty, "data": nonempty, "last": nonempty, "commit": {"app"}}
    anchored = set()
    seen = []
    for region in SMALL_REGIONS:
        ctx = f"{state}/{region} (data seed {seed})"
        work = tmp_path / f"{region}-b"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(backing, work)
        flipped = {}
        for name in files:
            path = work / name
            if os.path.getsize(path) == 0:
                continue  # an empty file is a 0-byte plain file
            off = region_offset(path, region)
            if off is None or off >= os.path.getsize(path):
                continue
            if region.startswith("anchor"):
                with open(path, "rb") as f:
                    f.seek(off - 16)
                    if f.read(4) != b"SQCA":
                        continue  # a slot never written: no anchor to damage
            flip(path, off, 8)
            flipped[name] = off
        if region.startswith("anchor"):
            assert not anchored & set(flipped), f"{ctx}: files with two anchors"
            anchored |= set(flipped)
        else:
            assert set(flipped) == expect[region], (
                f"{ctx}: the region was found in {sorted(flipped)}, "
                f"expected in {sorted(expect[region])}")
        if not flipped:
            seen.append(f"{region}: in no file")
            continue
        if clean:
            for name in flipped:
                v = run_cli("verify", work / name, check=False)
                assert v.returncode in (1, 3), (
                    f"{ctx}/{name}: verify did not flag the damage "
                    f"(exit {v.returncode}):\n{v.stdout}{v.stderr}")
        mm = mount_factory(backing=work, name=f"{region}-m")
        eio = set()
        for name, data in files.items():
            p = mm.path(name)
            size = os.stat(p).st_size
            if clean:
                assert size == len(data), (
                    f"{ctx}/{name}: size {size}, written {len(data)}"
                    f"\n{mm.log()[-2000:]}")
            try:
                with open(p, "rb") as f:
                    got = f.read()
            except OSError as e:
                assert e.errno == errno.EIO, f"{ctx}/{name}: {e}"
                eio.add(name)
                continue
            if clean:
                ok = got == data
            else:  # unsynced data may be lost, never replaced
                ok = got == data[:len(got)] and size == len(got)
            assert ok, (f"{ctx}/{name}: read {len(got)} bytes, not the "
                        f"{len(data)} written\n{mm.log()[-2000:]}")
        # the EIO bound: only damaged files fail; a damaged header always
        # fails the open; a damaged anchor slot (one mark) costs nothing
        assert eio <= set(flipped), f"{ctx}: undamaged files read EIO: {sorted(eio - set(flipped))}"
        if region == "header":
            assert eio == set(flipped), f"{ctx}: damaged headers opened: {sorted(set(flipped) - eio)}"
        if region.startswith("anchor"):
            assert not eio, f"{ctx}: a damaged anchor slot cost {sorted(eio)}"
        seen.append(f"{region}: {len(flipped)} damaged, {len(eio)} EIO")
        assert mm.unmount() == 0, mm.log()
    if clean:
        assert anchored == nonempty, f"{state} (data seed {seed}): anchors in {sorted(anchored)}"
    print(f"{state} (data seed {seed}): " + "; ".join(seen))


def test_crash_while_appending_then_damage(mount_factory, tmp_path):
    """kill -9 while appending, then damage a record inside the synced part:
    the synced bytes outside the damaged block read back exactly."""
    backing = tmp_path / "b"
    m = mount_factory(options=["compress=zstd:1/4K"], backing=backing)
    data = make_data(6 << 20, seed=7)
    synced = 4 << 20
    fd = os.open(m.path("log"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, data[:synced])
    os.fsync(fd)
    # unsynced appends, then the daemon dies under the writer
    os.write(fd, data[synced:synced + (1 << 20)])
    m.kill(signal.SIGKILL)
    try:
        os.close(fd)
    except OSError:
        pass
    path = backing / "log"
    recs = [r for r in records(path) if r[1] == DATA]
    # a DATA record in the synced first quarter
    target = recs[len(recs) // 4]
    flip(path, target[0] + 64)
    v = run_cli("verify", backing, check=False)
    assert v.returncode == 1, v.stdout + v.stderr
    m2 = mount_factory(options=["compress=zstd:1/4K"], backing=backing, name="m2")
    size = os.stat(m2.path("log")).st_size
    assert size >= synced, f"synced data lost: size {size} < {synced}"
    res = read_blocks(m2.path("log"), data[:size], 4096)
    assert not [r for r in res if r[1] in ("wrong", "short")]
    eio = [r[0] for r in res if r[1] == "eio"]
    assert len(eio) == 1 and eio[0] < synced, eio
    assert m2.unmount() == 0, m2.log()


def test_verify_reports_uncommitted_tail(tmp_path, cli):
    """An uncommitted tail is neither clean nor damage: its own exit status
    (3), named with its size, and the same in --json."""
    src = tmp_path / "src"
    src.write_bytes(make_data(200 << 10, seed=3))
    dst = tmp_path / "p" / "f"
    dst.parent.mkdir()
    cli("pack", src, dst)
    assert cli("verify", dst.parent).returncode == 0
    with open(dst, "ab") as f:
        f.write(b"\x01" * 100)
    v = cli("verify", dst.parent, check=False)
    assert v.returncode == 3, v.stdout
    assert "uncommitted tail, 100 bytes" in v.stdout
    j = cli("verify", "--json", dst.parent, check=False)
    assert j.returncode == 3
    doc = json.loads(j.stdout)
    assert doc["exit_status"] == 3 and doc["uncommitted_tails"] == 1
    assert doc["files"][0]["status"] == "tail"
    assert doc["files"][0]["uncommitted_tail_bytes"] == 100
    # damage wins over a tail: exit 1
    flip(dst, HDR_REGION + 200)
    assert cli("verify", dst.parent, check=False).returncode == 1


def test_closed_file_becomes_durable_in_background(mount_factory, tmp_path):
    """A file closed and left alone past the interval has its durable mark
    on disk while the daemon still runs (checked through the anchors'
    durable_end), and its backing mtime is the write's, not the mark's."""
    backing = tmp_path / "b"
    m = mount_factory(options=["compress=zstd:1/4K"], backing=backing)
    data = make_data(1 << 20, seed=11)
    with open(m.path("f"), "wb") as f:
        f.write(data)
    before = os.stat(backing / "f")
    time.sleep(DURABLE_WAIT)
    size = os.path.getsize(backing / "f")
    marks = []
    with open(backing / "f", "rb") as f:
        for off in ANCHOR_OFF:
            f.seek(off)
            b = f.read(56)
            if b[:4] == b"SQCA":
                marks.append(struct.unpack_from("<Q", b, 40)[0])
    assert marks and max(marks) == size, (marks, size)
    after = os.stat(backing / "f")
    assert after.st_mtime_ns == before.st_mtime_ns
    assert m.unmount() == 0, m.log()


# ---------------------------------------------------------------- packed files
# A small closed file is stored packed (issue 14, include/squeezefs/pack.h):
# a 0-byte backing file whose xattr user.squeezefs.packed (48 or 56 bytes) points
# at a checksummed entry (48-byte header, then the stored bytes) of a
# hidden pack file .sqz-tmp.pack.<16 hex> in the same directory.

PACK_XATTR = "user.squeezefs.packed"
PACK_ENTRY_HDR = 48
PACKED_SIZES = [1, 17, 300, 2048, 4096, 9000, 20000, 40000, 65536, 131072]
PACK_DAMAGE = ["entry-header", "stored-bytes", "truncate-pack", "delete-pack",
               "pointer"]


def packed_ptr(path):
    """The decoded pointer of a backing file, or None."""
    try:
        v = os.getxattr(path, PACK_XATTR)
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise
    assert len(v) in (48, 56), len(v)   # version 2 (56): + the ctime shown
    if len(v) == 48:
        _m, _v, kind, _p, stored, pack_id, off, length, _crc, _ck = \
            struct.unpack("<IBB6sIQQQII", v)
    else:
        _m, _v, kind, _p, stored, pack_id, off, length = \
            struct.unpack("<IBB6sIQII", v[:32])
    return {"kind": kind, "stored": stored, "pack": ".sqz-tmp.pack.%016x" % pack_id,
            "off": off, "length": length}


def packed_tree(mount_factory, tmp_path):
    """~10 files of 1..131072 bytes (random and text) written into d/ of a
    fresh mount, left until all are packed, then a clean unmount.
    Returns (backing, {name: bytes}, {name: pointer})."""
    backing = tmp_path / "packed-b"
    m = mount_factory(backing=backing, name="packw")
    os.mkdir(m.path("d"))
    files = {}
    for i, n in enumerate(PACKED_SIZES):
        raw = make_data(n + 4096, seed=500 + i)
        # even: the random half of make_data (stored raw), odd: text
        files[f"p{n}"] = raw[:n] if i % 2 == 0 else raw[2048:2048 + n]
    for name, content in files.items():
        with open(m.path("d", name), "wb") as f:
            f.write(content)
    deadline = time.time() + 6
    while True:
        ptrs = {name: packed_ptr(backing / "d" / name) for name in files}
        if all(ptrs.values()) or time.time() > deadline:
            break
        time.sleep(0.1)
    assert all(ptrs.values()), (ptrs, m.log()[-2000:])
    assert m.unmount() == 0, m.log()
    for name in files:
        assert os.path.getsize(backing / "d" / name) == 0, name
        assert ptrs[name]["length"] == len(files[name]), name
    assert any(p["kind"] == 2 for p in ptrs.values())   # some stored raw
    assert any(p["kind"] == 1 for p in ptrs.values())   # some compressed
    return backing, files, ptrs


def damage_packed(work, ptrs, kind):
    """Damage a copy of the tree; returns the names that lost their bytes."""
    d = work / "d"
    names = sorted(ptrs, key=lambda n: ptrs[n]["off"])
    target = names[len(names) // 2]
    t = ptrs[target]
    pack = d / t["pack"]
    same_pack = [n for n in names if ptrs[n]["pack"] == t["pack"]]
    if kind == "entry-header":
        flip_bytes(pack, t["off"] + 21, 1)       # inside the entry's pack id
        return {target}
    if kind == "stored-bytes":
        flip_bytes(pack, t["off"] + PACK_ENTRY_HDR + t["stored"] // 2, 1)
        return {target}
    if kind == "truncate-pack":
        os.truncate(pack, t["off"] + PACK_ENTRY_HDR + t["stored"] // 2)
        return {n for n in same_pack if ptrs[n]["off"] >= t["off"]}
    if kind == "delete-pack":
        os.unlink(pack)
        return set(same_pack)
    if kind == "pointer":
        # one byte of the value, in the middle (the entry's offset) of one
        # file's pointer and in the magic of another's
        hit = set()
        for name, pos in ((target, 26), (names[0], 0)):
            p = d / name
            v = bytearray(os.getxattr(p, PACK_XATTR))
            v[pos] ^= 0xFF
            os.setxattr(p, PACK_XATTR, bytes(v))
            hit.add(name)
        return hit
    raise AssertionError(kind)


def read_packed(path):
    """'ok'-able bytes, or the string 'eio'. Any other error fails."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        assert e.errno == errno.EIO, f"{path}: {e}"
        return "eio"


def test_corruption_matrix_packed_files(mount_factory, tmp_path):
    """For each kind of damage {a byte of an entry's header, a byte of its
    stored bytes, the pack truncated inside an entry, the pack deleted, a
    byte of the pointer xattr}: remount a damaged copy and read every file:
    the damaged ones fail with EIO (open or read; twice, nothing cached as
    empty), never wrong, shorter or empty bytes; every other file of the
    directory, in the same pack, reads exactly and stat shows its size."""
    backing, files, ptrs = packed_tree(mount_factory, tmp_path)
    seen = []
    for kind in PACK_DAMAGE:
        work = tmp_path / f"{kind}-b"
        shutil.copytree(backing, work)
        hit = damage_packed(work, ptrs, kind)
        assert hit and hit != set(files) or kind == "delete-pack", (kind, hit)
        m = mount_factory(backing=work, name=f"{kind}-m")
        for name, content in files.items():
            p = m.path("d", name)
            try:
                size = os.stat(p).st_size
            except OSError as e:
                assert e.errno == errno.EIO and name in hit, f"{kind}/{name}: stat {e}"
                size = None
            for attempt in (1, 2):
                got = read_packed(p)
                if name in hit:
                    assert got == "eio", (
                        f"{kind}/{name} (attempt {attempt}): damaged, but read "
                        f"{len(got)} bytes of {len(content)}"
                        f"{' (the exact ones)' if got == content else ''}\n"
                        f"{m.log()[-2000:]}")
                else:
                    assert got == content, (
                        f"{kind}/{name}: undamaged, but "
                        f"{got if got == 'eio' else f'{len(got)} wrong bytes'}"
                        f"\n{m.log()[-2000:]}")
                    assert size == len(content), (kind, name, size)
        # a damaged file can still be replaced (O_TRUNC) or removed
        first, *rest = sorted(hit)
        with open(m.path("d", first), "wb") as f:
            f.write(b"replaced")
        for name in rest:
            os.unlink(m.path("d", name))
        assert m.unmount() == 0, m.log()
        m.start()
        assert read_packed(m.path("d", first)) == b"replaced", kind
        assert sorted(os.listdir(m.path("d"))) == sorted(
            n for n in files if n not in rest), kind
        for name in set(files) - hit:
            assert read_packed(m.path("d", name)) == files[name], (kind, name)
        assert m.unmount() == 0, m.log()
        seen.append(f"{kind}: {len(hit)} EIO")
    print("packed: " + "; ".join(seen))


def test_verify_flags_damaged_packed_files(mount_factory, tmp_path):
    """`squeezefs verify BACKING` on the damaged copies of a packed tree:
    exit non-zero, naming every damaged file; 0 on the pristine tree."""
    backing, files, ptrs = packed_tree(mount_factory, tmp_path)
    v0 = run_cli("verify", "--json", backing, check=False)
    doc = json.loads(v0.stdout)
    by_path = {os.path.basename(f["path"]): f["status"] for f in doc["files"]}
    # every packed file checked ("ok (packed in ...)"), none skipped
    assert all(by_path.get(n) == "ok" for n in files), by_path
    assert v0.returncode == 0, v0.stdout + v0.stderr
    for kind in PACK_DAMAGE:
        work = tmp_path / f"{kind}-v"
        shutil.copytree(backing, work)
        hit = damage_packed(work, ptrs, kind)
        v = run_cli("verify", work, check=False)
        assert v.returncode == 1, f"{kind}: exit {v.returncode}\n{v.stdout}{v.stderr}"
        for name in hit:
            assert os.path.join(str(work), "d", name) in v.stdout + v.stderr, (
                f"{kind}: {name} not named\n{v.stdout}{v.stderr}")
