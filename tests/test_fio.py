"""The fio workloads parse, and tools/fio-compare.sh runs end to end at a
tiny size and writes a CSV with rows for raw, passthrough (with mergerfs)
and squeezefs."""
import csv
import glob
import os
import shutil
import subprocess

import pytest

from mountlib import ROOT, squeezefs_bin

JOBS = sorted(glob.glob(os.path.join(ROOT, "tools", "fio", "*.fio")))


def need_fio():
    if not shutil.which("fio"):
        pytest.skip("fio not installed (tools/install-deps.sh)")


def test_job_files_exist():
    names = {os.path.basename(j)[:-4] for j in JOBS}
    assert {"seq-write-1m", "seq-read-1m", "rand-read-4k", "log-append",
            "mixed-randrw"} <= names, names


@pytest.mark.parametrize("job", JOBS, ids=[os.path.basename(j) for j in JOBS])
def test_fio_parse_only(job, tmp_path):
    need_fio()
    env = dict(os.environ, DIR=str(tmp_path), SIZE="8m", RUNTIME="1")
    r = subprocess.run(["fio", "--parse-only", job], capture_output=True, text=True,
                       env=env, cwd=os.path.dirname(job), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "error" not in r.stderr.lower(), r.stderr


@pytest.mark.slow
def test_fio_compare_end_to_end(tmp_path, sqz_bin):
    need_fio()
    if not (os.path.exists("/dev/fuse") and shutil.which("fusermount3")):
        pytest.skip("FUSE not available")
    out = tmp_path / "out.csv"
    env = dict(os.environ, SQUEEZEFS_BIN=squeezefs_bin())
    r = subprocess.run([os.path.join(ROOT, "tools", "fio-compare.sh"), "--quick",
                        "--size", "8m", "--runtime", "1", "--runs", "1",
                        "--jobs", "seq-read-1m,rand-read-4k", "--csv", str(out),
                        "--workdir", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = list(csv.DictReader(open(out)))
    kinds = {(row["job"], row["kind"]) for row in rows}
    want = ["raw", "squeezefs"] + (["passthrough"] if shutil.which("mergerfs") else [])
    for job in ("seq-read-1m", "rand-read-4k"):
        for k in want:
            assert (job, k) in kinds, f"no {k} row for {job}: {rows}"
    for row in rows:
        assert float(row["mb_s"]) > 0 and float(row["iops"]) > 0, row
    assert "x raw" in r.stdout  # the table was printed
    leftover = [line for line in open("/proc/self/mountinfo") if str(tmp_path) in line]
    assert not leftover, f"fio-compare left mounts behind: {leftover}"
