"""The qipc codec (kdb+ algorithm 1, kdb+'s IPC compression).

Every block payload squeezefs stores is decoded here by an independent
reference decoder, written in Python from the published description of
kdb+'s IPC compression (not from squeezefs' C code), so that a bug shared by
squeezefs' own encoder and decoder cannot hide. The containers come from
`squeezefs pack` (crafted inputs) and from a real mount (compress=qipc/128K
and a directory policy "17 1 0"), which is also checked with stat, verify
and byte equality."""
import json
import os
import random
import struct
import subprocess

import pytest

from fsutil import text
from mountlib import run_cli, squeezefs_bin

KiB = 1024
QIPC_ID = 1  # the algorithm id byte of the container header (= kdb+ number)


# ---------------------------------------------------------------- reference decoder

def ref_decode(payload):
    """Decode one qipc block payload: a 4-byte little-endian uncompressed
    length, then groups of items, each group led by a control byte read
    least significant bit first. Bit 0: one literal byte. Bit 1: two bytes,
    an index into a 256-entry table of earlier output positions and a count
    n: copy n + 2 bytes from that position. The table is kept by the decoder
    itself: position p is recorded under out[p] ^ out[p + 1] once both bytes
    exist; after a copy, recording resumes after the copied bytes (only the
    pairs up to the copy's first two bytes are recorded). Positions count from
    the first byte of the block (squeezefs keeps no IPC message header).

    Raises ValueError on anything malformed."""
    if len(payload) < 4:
        raise ValueError("no length")
    size = int.from_bytes(payload[:4], "little")
    out = bytearray(size)
    table = [None] * 256
    d = 4          # next input byte
    s = 0          # next output byte
    p = 0          # next position to record in the table
    mask = 0       # bit of the current item in ctl; 0: read a control byte
    ctl = 0

    def byte():
        nonlocal d
        if d >= len(payload):
            raise ValueError("input ends early")
        d += 1
        return payload[d - 1]

    while s < size:
        if mask == 0:
            ctl, mask = byte(), 1
        if ctl & mask:
            pos = table[byte()]
            extra = byte()
            if pos is None:
                raise ValueError("reference through an unset table entry")
            if s + 2 + extra > size:
                raise ValueError("reference past the end")
            out[s] = out[pos]
            out[s + 1] = out[pos + 1]
            s += 2
            while p < s - 1:
                table[out[p] ^ out[p + 1]] = p
                p += 1
            for m in range(extra):
                out[s + m] = out[pos + 2 + m]
            s += extra
            p = s
        else:
            out[s] = byte()
            s += 1
            while p < s - 1:
                table[out[p] ^ out[p + 1]] = p
                p += 1
        mask = (mask << 1) & 0xFF
    if d != len(payload):
        raise ValueError("trailing input")
    return bytes(out)


def test_reference_decoder_on_hand_made_payloads():
    # "abababab": literals a, b, then a reference to position 0 (the pair
    # "ab", index 'a'^'b') copying 2 + 4 bytes.
    idx = ord("a") ^ ord("b")
    assert ref_decode(struct.pack("<I", 8) + bytes([0b100, 97, 98, idx, 4])) == b"ab" * 4
    # empty block: just the length
    assert ref_decode(struct.pack("<I", 0)) == b""
    # nine literals: a second control byte
    nine = bytes(range(9))
    assert ref_decode(struct.pack("<I", 9) + b"\0" + nine[:8] + b"\0" + nine[8:]) == nine
    with pytest.raises(ValueError):
        ref_decode(struct.pack("<I", 8) + bytes([0b100, 97, 98, idx, 5]))  # too long
    with pytest.raises(ValueError):
        ref_decode(struct.pack("<I", 4) + bytes([0b1, 7, 2]))  # unset entry


# ---------------------------------------------------------------- containers

def data_records(path):
    """The DATA records of a container (docs/FORMAT.md), in log order:
    (block, kind, log2bs, stored bytes); and the header's algorithm id."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:8] == b"SQZFS\x00\x01\x1a", path
    alg = buf[16]
    file_id = buf[40:48]
    recs = []
    # the log starts after the header region: 4096 in version 1, 1536 in 2
    version = int.from_bytes(buf[8:12], "little")
    assert version in (1, 2), (path, version)
    off = 4096 if version == 1 else 1536
    while off + 32 <= len(buf):
        plen = int.from_bytes(buf[off + 24:off + 28], "little")
        if (buf[off:off + 4] != b"SQCR" or buf[off + 8:off + 16] != file_id
                or buf[off + 4] not in (1, 2, 3) or off + 32 + plen > len(buf)):
            off += 8  # punched (reclaimed) space
            continue
        if buf[off + 4] == 1:
            block = int.from_bytes(buf[off + 32:off + 40], "little")
            kind, log2bs = buf[off + 44], buf[off + 45]
            recs.append((block, kind, log2bs, buf[off + 48:off + 32 + plen]))
        off += (32 + plen + 7) & ~7
    return alg, recs


def check_container(path, content, log2bs):
    """Decode the newest stored version of every block of container `path`
    with the reference decoder and compare with `content`. Returns the
    number of compressed blocks decoded."""
    alg, recs = data_records(path)
    assert alg == QIPC_ID, (path, alg)
    bs = 1 << log2bs
    newest = {}
    for block, kind, lbs, stored in recs:
        assert lbs == log2bs
        newest[block] = (kind, stored)
    decoded = 0
    for block, (kind, stored) in newest.items():
        want = content[block * bs:(block + 1) * bs].ljust(bs, b"\0")
        if kind == 1:
            assert len(stored) < bs
            got = ref_decode(stored)
            decoded += 1
        else:
            assert kind == 2
            got = stored
        assert got == want, f"{path}: block {block} (kind {kind}) differs"
    # blocks without a record are holes: all zeros
    for block in range((len(content) + bs - 1) // bs):
        if block not in newest:
            assert not any(content[block * bs:(block + 1) * bs]), (path, block)
    return decoded


def longs(n, seed, sort=False):
    r = random.Random(seed)
    v = [r.randrange(1000) for _ in range(n)]
    return struct.pack(f"<{n}q", *(sorted(v) if sort else v))


def xor_collisions(n, seed):
    """Many pairs with the same XOR but different bytes: candidates whose
    hash matches and whose bytes do not."""
    r = random.Random(seed)
    out = bytearray()
    while len(out) < n:
        a = r.randrange(256)
        out += bytes([a, a ^ 0x5A]) * r.randrange(1, 4)
    return bytes(out[:n])


INPUTS = {
    "one-byte": b"x",
    "two-bytes": b"xy",
    "three-same": b"zzz",
    "run-100k": b"a" * 100_000,                   # references of 257 bytes, overlapping
    "period-2": b"ab" * 30_000 + b"a",
    "period-7": b"abcdefg" * 9_000,
    "text": text(70_000),
    "random": random.Random(1).randbytes(20_000),
    "longs": longs(6_000, 2),
    "sorted-longs": longs(6_000, 3, sort=True),
    "xor-collisions": xor_collisions(40_000, 4),
    "mixed": random.Random(5).randbytes(5_000) + b"\0" * 9_000 + text(20_000) + b"q" * 3,
}


@pytest.mark.parametrize("name", sorted(INPUTS))
@pytest.mark.parametrize("lbs", [12, 16])
def test_reference_decoder_reads_packed_blocks(cli, tmp_path, name, lbs):
    data = INPUTS[name]
    src = tmp_path / "in"
    src.write_bytes(data)
    # --min-saving 0: every block that shrinks at all is stored compressed
    cli("pack", src, tmp_path / "c", "--policy", f"qipc/{1 << (lbs - 10)}K",
        "--min-saving", "0")
    decoded = check_container(tmp_path / "c", data, lbs)
    if name != "random":
        assert decoded >= 1
    # squeezefs' own decoder agrees
    p = subprocess.run([squeezefs_bin(), "cat", str(tmp_path / "c")], capture_output=True,
                       timeout=60)
    assert p.returncode == 0 and p.stdout == data


def test_pack_and_recompress_with_kdb_triple(cli, tmp_path):
    data = text(300_000, 5) + longs(20_000, 6, sort=True)
    src = tmp_path / "in"
    src.write_bytes(data)
    cli("pack", src, tmp_path / "c", "--policy", "zstd:3/64K")
    cli("recompress", "--policy", "17 1 0", tmp_path / "c")
    s = json.loads(cli("stat", "--json", tmp_path / "c").stdout)
    assert (s["algorithm"], s["zipLevel"], s["logicalBlockSize"]) == ("qipc", 0, 17)
    assert check_container(tmp_path / "c", data, 17) >= 3
    assert cli("verify", tmp_path / "c").returncode == 0


# ---------------------------------------------------------------- a real mount

def sqz_stat_json(path):
    return json.loads(run_cli("stat", "--json", path).stdout)


def taq(tmp_path, size):
    f = tmp_path / "taq.bin"
    run_cli("bench", "--gen", "taq-trade", "--dump", f, "--size", str(size))
    return f.read_bytes()


def test_qipc_mount_and_kdb_policy(mount_factory, tmp_path):
    m = mount_factory(options=["compress=qipc/128K"])
    rnd = random.Random(11)
    files = {
        "random.bin": (rnd.randbytes(300_001), 17),
        "text.txt": (text(1_000_003), 17),
        "taq.bin": (taq(tmp_path, 700 * KiB + 5), 17),
        "k/taq.bin": (taq(tmp_path, 900 * KiB + 3), 17),
        "k/mixed.bin": (rnd.randbytes(70_000) + bytes(200_000) + text(333_333, 2), 17),
        "k4/text.txt": (text(90_001, 3), 12),
        "k4/random.bin": (rnd.randbytes(20_000), 12),
    }
    os.mkdir(m.path("k"))
    os.setxattr(m.path("k"), "user.squeezefs.policy", b'"17 1 0"')
    os.mkdir(m.path("k4"))
    os.setxattr(m.path("k4"), "user.squeezefs.policy", b"12 1 0")
    for rel, (data, _) in files.items():
        with open(m.path(rel), "wb") as f:
            f.write(data)
    # an overwrite in the middle and an append: blocks rewritten
    patch = rnd.randbytes(5000)
    with open(m.path("text.txt"), "r+b") as f:
        f.seek(200_000)
        f.write(patch)
    with open(m.path("k/taq.bin"), "ab") as f:
        f.write(b"tail" * 1000)
    data, lbs = files["text.txt"]
    files["text.txt"] = (data[:200_000] + patch + data[205_000:], lbs)
    data, lbs = files["k/taq.bin"]
    files["k/taq.bin"] = (data + b"tail" * 1000, lbs)

    # recompress through the daemon, from zstd and to another block size
    os.mkdir(m.path("z"))
    os.setxattr(m.path("z"), "user.squeezefs.policy", b"zstd:3/16K")
    files["z/re.txt"] = (text(150_001, 4), 16)
    with open(m.path("z/re.txt"), "wb") as f:
        f.write(files["z/re.txt"][0])
    assert sqz_stat_json(m.path("z/re.txt"))["algorithm"] == "zstd"
    run_cli("recompress", "--policy", "qipc/64K", m.path("z/re.txt"))

    for rel, (data, lbs) in files.items():
        with open(m.path(rel), "rb") as f:
            assert f.read() == data, rel
        s = sqz_stat_json(m.path(rel))
        assert (s["algorithm"], s["zipLevel"], s["logicalBlockSize"]) == ("qipc", 0, lbs), s
        assert s["uncompressedLength"] == len(data)
    eff = os.getxattr(m.path("k", "taq.bin"), "user.squeezefs.effective").decode()
    assert eff.rstrip("\0\n") == "qipc/128K directory k"
    # compressible data really shrinks (ratio: uncompressed / compressed);
    # the TAQ table about as much as with lz4 (2.4)
    assert sqz_stat_json(m.path("text.txt"))["ratio"] > 4
    assert sqz_stat_json(m.path("taq.bin"))["ratio"] > 2
    assert "algorithm:          qipc" in run_cli("stat", m.path("k", "taq.bin")).stdout
    m.unmount()

    # the backing files: verify is clean, and the reference decoder reads
    # every compressed block squeezefs wrote
    v = run_cli("verify", m.backing, check=False)
    assert v.returncode == 0, v.stdout + v.stderr
    decoded = 0
    for rel, (data, lbs) in files.items():
        decoded += check_container(os.path.join(m.backing, rel), data, lbs)
    print("qipc blocks decoded by the reference decoder:", decoded)
    assert decoded >= 30

    # remounted with another default, the files read back the same
    m2 = mount_factory(options=["compress=zstd:1"], backing=m.backing, name="again")
    for rel, (data, _) in files.items():
        with open(m2.path(rel), "rb") as f:
            assert f.read() == data, rel
