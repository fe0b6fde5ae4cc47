"""fsx-style random I/O against squeezefs, per algorithm / block size.

Each configuration drives one file with the tests/fsx.py driver (a
deterministic random mix of read/write/append/truncate/fallocate/mmap/
fsync/reopen checked byte-for-byte against a shadow file), remounts once in
the middle, and at the end checks the backing container offline
(`squeezefs verify`, `squeezefs cat`).

Default suite: ~110k operations in total over the 24 configurations.
SQZ_QUICK=1 (the ASan stage of tools/test.sh, not with --long): one
configuration per algorithm (the block sizes in turn) and the three option
variants, 3,000 operations each. SQZ_LONG=1: also 1M operations per configuration.
SQZ_FSX_SEED=N changes the seeds (default: fixed per config).
"""
import os
import subprocess
import zlib

import pytest

from fsx import Fsx, FsxFailure, replay_command, block_of
from mountlib import run_cli, squeezefs_bin

# (id, mount options, operations in the default suite, max file length)
# Every algorithm x block sizes 4K/128K/1M, plus option variants (a slow
# high level, the block= option, without the kernel writeback cache: the
# default has it).
ALGS = [("none", "none"), ("gzip6", "gzip:6"), ("snappy", "snappy"),
        ("lz4", "lz4"), ("lz4hc9", "lz4hc:9"), ("zstd1", "zstd:1"), ("qipc", "qipc")]
SIZES = [("4K", 1 << 20), ("128K", 2 << 20), ("1M", 3 << 20)]
CONFIGS = [(f"{a}-{b}", [f"compress={spec}/{b}"], 4500, maxlen)
           for a, spec in ALGS for b, maxlen in SIZES]
CONFIGS += [
    ("zstd19-4K", ["compress=zstd:19/4K"], 3000, 512 << 10),
    ("lz4-block1M-option", ["compress=lz4", "block=1M"], 3000, 3 << 20),
    ("zstd1-128K-nowriteback", ["compress=zstd:1/128K", "nowriteback"], 6000, 2 << 20),
]
assert sum(c[2] for c in CONFIGS) >= 100000

# Under a sanitizer (SQZ_QUICK=1): every algorithm once, every block size
# at least twice, every option variant; fewer operations.
QUICK = os.environ.get("SQZ_QUICK") == "1" and os.environ.get("SQZ_LONG") != "1"
QUICK_IDS = {f"{a}-{SIZES[i % len(SIZES)][0]}" for i, (a, _) in enumerate(ALGS)}
QUICK_IDS |= {c[0] for c in CONFIGS[len(ALGS) * len(SIZES):]}
QUICK_OPS = 3000
assert len(QUICK_IDS) == len(ALGS) + 3
RUN = [(cid, o, min(n, QUICK_OPS), ml) for cid, o, n, ml in CONFIGS if cid in QUICK_IDS] \
    if QUICK else CONFIGS


def seed_for(cid):
    base = int(os.environ.get("SQZ_FSX_SEED", "0"))
    return (zlib.crc32(cid.encode()) + base) & 0x7FFFFFFF


def run_config(mount_factory, tmp_path, cid, options, nops, maxlen):
    seed = seed_for(cid)
    m = mount_factory(options=options)
    shadow = tmp_path / "shadow"
    remount_at = nops // 2
    replay = replay_command(seed, nops, options, maxlen, remount_at)

    def remount():
        rc = m.unmount()
        assert rc == 0, f"daemon exited with {rc} at remount (seed {seed}):\n{m.log()[-3000:]}"
        m.start()

    f = Fsx(m.path("fsx.file"), str(shadow), seed, nops, maxlen=maxlen,
            block=block_of(options), remount=remount, remount_at=remount_at,
            replay=replay)
    try:
        f.run()
    except FsxFailure as e:
        pytest.fail(f"{e}\n--- daemon log (tail) ---\n{m.log()[-3000:]}", pytrace=False)

    # Offline: the container is valid and holds exactly the shadow's bytes.
    rc = m.unmount()
    assert rc == 0, f"daemon exit status {rc} after fsx seed={seed}\n{m.log()[-3000:]}"
    backing_file = os.path.join(m.backing, "fsx.file")
    v = run_cli("verify", m.backing, check=False)
    assert v.returncode == 0, (f"squeezefs verify failed after fsx seed={seed} "
                               f"(replay: {replay}):\n{v.stdout}\n{v.stderr}")
    p = subprocess.run([squeezefs_bin(), "cat", backing_file], capture_output=True)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    with open(shadow, "rb") as fh:
        exp = fh.read()
    assert p.stdout == exp, (f"`squeezefs cat` of the backing file differs from the "
                             f"shadow after fsx seed={seed} (len {len(p.stdout)} vs "
                             f"{len(exp)}); replay: {replay}")
    return f


@pytest.mark.parametrize("cid,options,nops,maxlen", RUN, ids=[c[0] for c in RUN])
def test_fsx(mount_factory, tmp_path, cid, options, nops, maxlen):
    run_config(mount_factory, tmp_path, cid, options, nops, maxlen)


@pytest.mark.long
@pytest.mark.parametrize("cid,options,nops,maxlen", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_fsx_long(mount_factory, tmp_path, cid, options, nops, maxlen):
    run_config(mount_factory, tmp_path, cid + "-long", options, 1_000_000, maxlen)


def test_fsx_driver_detects_corruption(tmp_path):
    """The driver itself: on plain directories it passes, and it reports a
    mismatch with the seed, the op number and a replay command."""
    d = tmp_path / "plain"
    d.mkdir()
    Fsx(str(d / "f"), str(tmp_path / "shadow"), 7, 3000, maxlen=256 << 10,
        replay="REPLAY-CMD").run()

    class Corrupting(Fsx):
        def op_read(self):
            if self.size() > 0 and self.opno > 100:
                os.pwrite(self.fd, b"\xff", self.size() - 1)  # behind the shadow's back
            super().op_read()

    with pytest.raises(FsxFailure) as ei:
        Corrupting(str(d / "g"), str(tmp_path / "shadow2"), 7, 3000,
                   maxlen=256 << 10, replay="REPLAY-CMD").run()
    msg = str(ei.value)
    assert "seed=7" in msg and "op=" in msg and "replay: REPLAY-CMD" in msg
