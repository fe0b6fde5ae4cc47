#!/usr/bin/env python3
"""What making closed files durable costs (issue 10), side by side.

Runs two squeezefs binaries (e.g. the commit before the durability points
and the current build) on the same disk, interleaved, medians of --runs:

  cp -r       copy a tree of many small files into the mount (the caller's
              path: close must not fsync), then `sync`
  unmount     the clean unmount after it (drains the durability queue)
  log-append  tools/fio/log-append.fio (4 KiB appends, fsync every 16)

Usage:
  tools/bench_durable.py --base OLD_BIN --new NEW_BIN [--src /usr/include]
                         [--runs 3] [--dir /var/tmp] [--fio-size 64m]
Prints a Markdown table (paste into docs/BENCHMARKS.md).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from mountlib import Mount  # noqa: E402


def count_files(src):
    n = 0
    for _, _, files in os.walk(src):
        n += len(files)
    return n


def one_run(binary, src, workdir, fio_size):
    os.environ["SQUEEZEFS_BIN"] = binary
    base = tempfile.mkdtemp(dir=workdir, prefix="sqz-bench-durable-")
    try:
        os.makedirs(os.path.join(base, "b"))
        m = Mount(os.path.join(base, "b"), os.path.join(base, "m"))
        t0 = time.monotonic()
        subprocess.run(["cp", "-r", src, m.path("tree")], check=True)
        t_cp = time.monotonic() - t0
        subprocess.run(["sync"], check=True)
        t_sync = time.monotonic() - t0
        fio = subprocess.run(
            ["fio", "--output-format=json", f"--directory={m.mnt}",
             f"--filesize={fio_size}", f"--io_size={fio_size}",
             os.path.join(HERE, "fio", "log-append.fio")],
            check=True, capture_output=True, text=True)
        job = json.loads(fio.stdout)["jobs"][0]
        mbps = job["write"]["bw"] / 1024.0
        t1 = time.monotonic()
        rc = m.unmount()
        t_umount = time.monotonic() - t1
        if rc != 0:
            raise RuntimeError(f"{binary}: daemon exit {rc}:\n{m.log()[-2000:]}")
        return {"cp": t_cp, "cp+sync": t_sync, "unmount": t_umount,
                "log-append MB/s": mbps}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="squeezefs binary before")
    ap.add_argument("--new", required=True, help="squeezefs binary after")
    ap.add_argument("--src", default="/usr/include")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/var/tmp", help="a disk-backed directory")
    ap.add_argument("--fio-size", default="64m")
    a = ap.parse_args()
    if shutil.which("fio") is None:
        sys.exit("bench_durable: fio is not installed (tools/install-deps.sh)")
    nfiles = count_files(a.src)
    res = {"base": [], "new": []}
    for r in range(a.runs):
        for name, binary in (("base", a.base), ("new", a.new)):
            x = one_run(os.path.abspath(binary), a.src, a.dir, a.fio_size)
            res[name].append(x)
            print(f"run {r + 1} {name}: " +
                  ", ".join(f"{k} {v:.2f}" for k, v in x.items()), file=sys.stderr)
    keys = list(res["base"][0].keys())
    print(f"\n`cp -r {a.src}` ({nfiles} files), then `sync`; fio log-append "
          f"({a.fio_size}); medians of {a.runs}, interleaved runs\n")
    print("| metric | before | after | after / before |")
    print("|---|---|---|---|")
    for k in keys:
        b = statistics.median(x[k] for x in res["base"])
        n = statistics.median(x[k] for x in res["new"])
        unit = "" if "MB/s" in k else " s"
        print(f"| {k} | {b:.2f}{unit} | {n:.2f}{unit} | {n / b:.2f}x |")


if __name__ == "__main__":
    main()
