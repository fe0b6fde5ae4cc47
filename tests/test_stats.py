"""`squeezefs stats` counters of a live mount and `squeezefs stat` of files."""
import json
import os
import random


from fsutil import text, wr
from mountlib import mount_stats, run_cli

KiB = 1024
MiB = 1024 * 1024

KEYS = {"logical_bytes_read", "logical_bytes_written", "backing_bytes_read",
        "backing_bytes_written", "blocks_decompressed", "bytes_decompressed",
        "blocks_compressed", "bytes_compressed", "raw_blocks_stored", "draft_blocks",
        "cache_hits",
        "cache_misses", "cache_bytes", "dirty_bytes", "pushed_blocks", "pushed_bytes",
        "push_skipped", "opens_from_lookup", "files_packed", "pack_failures",
        "packs_removed", "pack_entries_moved", "packed_bytes_read"}
# tiering (read-write mounts, issue 16)
TIER_KEYS = {"tier_interval", "tier_rate", "tier_files", "tier_bytes_before",
             "tier_bytes_after", "tier_logical_bytes", "tier_skipped", "tier_abandoned",
             "tier_failed", "tier_passes", "tier_running", "tier_last_pass",
             "tier_last_pass_seconds"}
# FUSE-level counters (not deltas of the engine's): see tests/test_db.py
FUSE_KEYS = {"security_xattr_gets", "killpriv_v2", "writeback_cache", "pack_pending",
             "read_errors", "durable_queued", "durable_marked", "durable_batches",
             "durable_failures"}
# the inodes and the daemon's descriptors of them (issue 28, src/node/ifd.c)
FD_KEYS = {"inodes", "max_fds", "fd_handles", "fd_cached", "fd_cache_max", "fd_reopens",
           "fd_evictions", "fd_stale"}


def delta(a, b):
    return {k: b[k] - a[k] for k in KEYS}


def test_stats_keys(mnt):
    s = mount_stats(mnt.mnt)
    want = KEYS | TIER_KEYS | FUSE_KEYS | FD_KEYS
    assert set(s) == want, f"extra {set(s) - want}, missing {want - set(s)}"
    for k, v in s.items():
        assert isinstance(v, (float if k == "tier_last_pass_seconds" else int)) and v >= 0, (k, v)
    p = run_cli("stats", mnt.mnt)  # human form works too
    assert p.stdout.strip()


def test_logical_bytes_written(mnt):
    n = 1234567
    before = mount_stats(mnt.mnt)
    fd = os.open(mnt.path("f"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        data = text(n)
        off = 0
        while off < n:
            off += os.write(fd, data[off:off + 100000])
        os.fsync(fd)
    finally:
        os.close(fd)
    d = delta(before, mount_stats(mnt.mnt))
    assert d["logical_bytes_written"] == n, d
    # committed: compressed blocks went to the backing file, smaller than the input
    assert d["blocks_compressed"] >= n // (128 * KiB), d
    assert 0 < d["backing_bytes_written"] < n // 2, d


def test_raw_blocks_counted(mount_factory):
    m = mount_factory(options=["compress=zstd:1/64K"])
    before = mount_stats(m.mnt)
    wr(m.path("rnd"), random.Random(1).randbytes(1 * MiB))
    d = delta(before, mount_stats(m.mnt))
    assert d["raw_blocks_stored"] == 16, d
    assert d["logical_bytes_written"] == MiB, d


def test_dirty_bytes_zero_after_fsync(mnt):
    fd = os.open(mnt.path("f"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, text(3 * MiB))
        os.fsync(fd)
        assert mount_stats(mnt.mnt)["dirty_bytes"] == 0
    finally:
        os.close(fd)
    assert mount_stats(mnt.mnt)["dirty_bytes"] == 0


def test_cold_random_4k_read_decompresses_one_block(mount_factory):
    m = mount_factory(options=["compress=zstd:1/128K"])
    data = text(8 * MiB, 2)
    wr(m.path("f"), data)
    m.unmount()
    m.start()  # drop page cache and block cache
    fd = os.open(m.path("f"), os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        before = mount_stats(m.mnt)
        off = 5 * MiB + 3 * 4096
        assert os.pread(fd, 4096, off) == data[off:off + 4096]
        d = delta(before, mount_stats(m.mnt))
    finally:
        os.close(fd)
    assert d["blocks_decompressed"] == 1, d
    assert d["bytes_decompressed"] == 128 * KiB, d
    assert d["cache_misses"] >= 1, d
    assert 4096 <= d["logical_bytes_read"] <= 128 * KiB, d
    assert 0 < d["backing_bytes_read"] < 128 * KiB, d


def test_second_read_is_cached(mount_factory):
    m = mount_factory(options=["compress=zstd:1/128K"])
    data = text(4 * MiB, 3)
    nblocks = 32
    wr(m.path("f"), data)
    m.unmount()
    m.start()
    fd = os.open(m.path("f"), os.O_RDONLY)
    try:
        s0 = mount_stats(m.mnt)
        assert os.pread(fd, len(data), 0) == data
        s1 = mount_stats(m.mnt)
        assert os.pread(fd, len(data), 0) == data
        s2 = mount_stats(m.mnt)
    finally:
        os.close(fd)
    d1, d2 = delta(s0, s1), delta(s1, s2)
    # (a block may be decompressed twice when read-ahead races the reader)
    assert nblocks <= d1["blocks_decompressed"] <= 2 * nblocks, d1
    assert len(data) <= d1["logical_bytes_read"] <= len(data) + 256 * KiB, d1
    assert d2["blocks_decompressed"] < nblocks, d2


def test_block_cache_hits_across_opens(mount_factory):
    """Reading a file again after closing it: served without decompressing
    every block again (page cache or block cache)."""
    m = mount_factory(options=["compress=lz4/64K"])
    data = text(2 * MiB, 4)
    wr(m.path("f"), data)
    m.unmount()
    m.start()
    with open(m.path("f"), "rb") as f:
        assert f.read() == data
        # while the file is open its decompressed blocks sit in the block cache
        assert mount_stats(m.mnt)["cache_bytes"] > 0
    s1 = mount_stats(m.mnt)
    with open(m.path("f"), "rb") as f:
        assert f.read() == data
    d = delta(s1, mount_stats(m.mnt))
    assert d["blocks_decompressed"] < 32, d


def test_stat_json_of_mount_file(mnt):
    data = text(2 * MiB)
    wr(mnt.path("t.txt"), data)
    s = json.loads(run_cli("stat", "--json", mnt.path("t.txt")).stdout)
    assert s["uncompressedLength"] == len(data), s
    assert 0 < s["compressedLength"] < s["uncompressedLength"], s
    assert s["ratio"] > 1, s
    assert s["algorithm"] == "zstd" and s["zipLevel"] == 1 and s["logicalBlockSize"] == 17, s
    assert s["blocks"] == 16, s
    # while open with unflushed writes, stat still reports the logical length
    fd = os.open(mnt.path("t.txt"), os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"x" * 1000)
        s = json.loads(run_cli("stat", "--json", mnt.path("t.txt")).stdout)
        assert s["uncompressedLength"] == len(data) + 1000, s
    finally:
        os.close(fd)


def test_stat_json_random_data_ratio(mnt):
    wr(mnt.path("r"), os.urandom(512 * KiB))
    s = json.loads(run_cli("stat", "--json", mnt.path("r")).stdout)
    assert s["uncompressedLength"] == 512 * KiB
    assert s["rawBlocks"] == s["blocks"] == 4, s
    assert s["ratio"] <= 1.0 + 1e-9, s


def test_stats_on_non_mount_fails(tmp_path, sqz_bin):
    p = run_cli("stats", "--json", tmp_path, check=False)
    assert p.returncode != 0 and p.stderr.strip()
