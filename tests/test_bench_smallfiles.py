"""tools/bench_smallfiles.py end to end on a tiny tree: raw and squeezefs
(and mergerfs where installed), one run, with --ext4 (a fresh ext4 on a
loop device per target and run): the medians land in the JSON, the
squeezefs copy is packed at rest, and no mount or loop device is left."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from mountlib import ROOT, squeezefs_bin


def test_bench_smallfiles_on_fresh_ext4(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (loop devices, mount, drop_caches)")
    if not (os.path.exists("/dev/fuse") and shutil.which("losetup")
            and shutil.which("mkfs.ext4")):
        pytest.skip("needs /dev/fuse, losetup and mkfs.ext4")
    tree = tmp_path / "tree"
    for d in range(3):
        os.makedirs(tree / f"d{d}")
        for i in range(20):
            (tree / f"d{d}" / f"f{i}").write_bytes((b"line %d of %d\n" % (i, d)) * (i * 40 + 1))
    out = tmp_path / "out.json"
    targets = "raw,squeezefs" + (",mergerfs" if shutil.which("mergerfs") else "")
    losetup_before = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_smallfiles.py"),
                        "--trees", str(tree), "--targets", targets, "--runs", "1",
                        "--dir", str(tmp_path), "--ext4", str(64 << 20),
                        "--squeezefs", squeezefs_bin(), "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    med = json.load(open(out))[str(tree)]
    for t in targets.split(","):
        assert med[t]["cp"] > 0 and med[t]["tar"] > 0 and med[t]["cat"] > 0, med
    # at rest the small files are packed: far less than one block per file
    assert med["squeezefs"]["space"] < med["raw"]["space"] / 2, med
    assert "| squeezefs |" in r.stdout
    fresh = [ln for ln in r.stderr.splitlines() if "fresh ext4 on /dev/loop" in ln]
    assert len(fresh) == len(targets.split(",")), r.stderr
    mounts = open("/proc/self/mountinfo").read()
    assert str(tmp_path) not in mounts, "the benchmark left mounts behind"
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in loops and len(loops) <= len(losetup_before), loops
