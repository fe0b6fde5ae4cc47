"""The fio workloads parse and run on their own (no environment, fio's own
command-line options), one runs directly on a real mount, and
tools/fio-compare.sh runs end to end at a tiny size and writes a CSV with
rows for raw, passthrough (with mergerfs) and squeezefs."""
import csv
import glob
import json
import os
import shutil
import subprocess

import pytest

from mountlib import ROOT, require_fuse, run_cli, squeezefs_bin

FIO_DIR = os.path.join(ROOT, "tools", "fio")
JOBS = sorted(glob.glob(os.path.join(FIO_DIR, "*.fio")))


def clean_env():
    """Only PATH: the jobs must not need SIZE, DIR, RUNTIME or anything."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def need_fio():
    if not shutil.which("fio"):
        pytest.skip("fio not installed (tools/install-deps.sh)")


def test_job_files_exist():
    names = {os.path.basename(j)[:-4] for j in JOBS}
    assert {"seq-write-1m", "seq-read-1m", "rand-read-4k", "log-append",
            "mixed-randrw"} <= names, names


def test_job_files_use_no_environment():
    # fio expands ${VAR} to nothing when VAR is unset ("failed parsing
    # directory="); the jobs take their knobs from fio's command line.
    for f in JOBS + [os.path.join(FIO_DIR, "common.inc")]:
        text = open(f).read()
        assert "${" not in text, f
        opts = [line.split("=")[0].strip() for line in text.splitlines()
                if "=" in line and not line.lstrip().startswith(";")]
        # set in a job file, these could not be changed on the command line
        for knob in ("directory", "filesize", "io_size", "runtime", "time_based"):
            assert knob not in opts, f"{f} sets {knob}="


@pytest.mark.parametrize("job", JOBS, ids=[os.path.basename(j) for j in JOBS])
def test_fio_parse_only(job, tmp_path):
    """fio --parse-only JOB with no environment, from another directory."""
    need_fio()
    r = subprocess.run(["fio", "--parse-only", job], capture_output=True, text=True,
                       env=clean_env(), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "error" not in r.stderr.lower() and "failed" not in r.stderr.lower(), r.stderr


def test_fio_job_runs_directly_on_mount(mnt, tmp_path):
    """docs/BENCHMARKS.md's direct run: fio --directory=MNT with a small file and a
    2 s time limit, nothing from the environment."""
    need_fio()
    job = os.path.join(FIO_DIR, "rand-read-4k.fio")
    out = tmp_path / "fio.json"
    r = subprocess.run(["fio", f"--directory={mnt.mnt}", "--filesize=8m", "--io_size=8m",
                        "--time_based", "--runtime=2", "--output-format=json",
                        f"--output={out}", job],
                       capture_output=True, text=True, env=clean_env(), cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    j = res["jobs"][0]
    assert j["jobname"] == "rand-read-4k" and j["error"] == 0, j
    assert j["read"]["io_bytes"] > 0 and j["read"]["iops"] > 0, j["read"]
    assert j["write"]["io_bytes"] == 0
    # --runtime with --time_based: about 2 s, not one pass over the file
    assert 1500 <= j["job_runtime"] <= 10000, j["job_runtime"]
    # the file fio laid out went through squeezefs: 8 MiB, stored compressed
    files = os.listdir(mnt.mnt)
    assert files == ["rand-read-4k.0.0"], files
    assert os.path.getsize(mnt.path(files[0])) == 8 << 20
    st = json.loads(run_cli("stat", "--json", os.path.join(mnt.backing, files[0])).stdout)
    assert st["uncompressedLength"] == 8 << 20
    assert st["compressedLength"] < (8 << 20) // 2, st  # fio's buffers are 80% compressible


@pytest.mark.slow
def test_fio_compare_end_to_end(tmp_path, sqz_bin):
    need_fio()
    require_fuse()
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
