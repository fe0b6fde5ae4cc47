#!/usr/bin/env python3
"""copy_file_range inside one mount (issue 27), measured side by side.

A TAQ-like file (`squeezefs bench --gen taq-trade --dump`, --size bytes)
is written through a mount (default policy), then copied within the mount
several ways, each from a fresh mount (cold block cache, no kernel pages
of the files; the backing files stay in the host's page cache alike):

  pipe       `cat a | cat > b`: the bytes make the round trip through
             the process (read: decompressed by the daemon; write:
             compressed again) -- the baseline, what `cat a > b` cost
             before copy_file_range was implemented (coreutils 9's cat
             tries copy_file_range first; a pipe makes it read and write)
  cat        `cat a > b` (coreutils 9: copy_file_range)
  cfr        os.copy_file_range until the end
  cp         coreutils `cp` (9.1 copies a file that looks sparse, as every
             compressed file does, st_blocks < st_size / 512, by
             SEEK_DATA/SEEK_HOLE and read/write, not copy_file_range)

Each timing ends when the destination is closed (its data committed by
the daemon) and includes nothing else. Medians of --runs, the ways
interleaved; the ratio to `pipe` is the issue's goal (<= 0.5x). A second
set copies into a directory of another policy (lz4/64K): the daemon then
decompresses and compresses, still without the round trip through the
process.

Usage: tools/bench_copy.py [--size 256M] [--runs 3] [--dir /var/tmp]
       [--bin build/squeezefs]
Prints a Markdown table.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from mountlib import Mount  # noqa: E402

MiB = 1 << 20


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def copy_pipe(src, dst):
    subprocess.run(f"cat '{src}' | cat > '{dst}'", shell=True, check=True)


def copy_cat(src, dst):
    subprocess.run(f"cat '{src}' > '{dst}'", shell=True, check=True)


def copy_cfr(src, dst):
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(dst, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        while os.copy_file_range(fi, fo, 1 << 30) > 0:
            pass
    finally:
        os.close(fi)
        os.close(fo)


def copy_cp(src, dst):
    subprocess.run(["cp", src, dst], check=True)


WAYS = {"pipe": copy_pipe, "cat": copy_cat, "cfr": copy_cfr, "cp": copy_cp}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="256M")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "squeezefs"))
    a = ap.parse_args()
    os.environ["SQUEEZEFS_BIN"] = os.path.abspath(a.bin)
    size = parse_size(a.size)
    work = tempfile.mkdtemp(prefix="bench-copy-", dir=a.dir)
    try:
        dump = os.path.join(work, "taq")
        subprocess.run([a.bin, "bench", "--gen", "taq-trade", "--dump", dump,
                        "--size", str(size)], check=True, capture_output=True)
        size = os.path.getsize(dump)  # the generator's rows: about --size
        backing, mnt = os.path.join(work, "b"), os.path.join(work, "m")
        os.makedirs(backing)
        with Mount(backing, mnt) as m:
            shutil.copyfile(dump, m.path("a"))
            os.mkdir(m.path("other"))
            os.setxattr(m.path("other"), "user.squeezefs.policy", b"lz4/64K")
        os.unlink(dump)
        times = {(w, d): [] for w in WAYS for d in ("same", "other")}
        for _ in range(a.runs):
            for dest in ("same", "other"):
                for way, fn in WAYS.items():
                    with Mount(backing, mnt) as m:
                        dst = m.path("b") if dest == "same" else m.path("other", "b")
                        t = time.perf_counter()
                        fn(m.path("a"), dst)
                        times[(way, dest)].append(time.perf_counter() - t)
                        if os.path.getsize(dst) != size:
                            sys.exit(f"{way}: copy is {os.path.getsize(dst)} bytes, not {size}")
                        os.unlink(dst)
        print(f"copy of a {size // MiB} MiB taq-trade file inside one mount "
              f"(median of {a.runs}, seconds)\n")
        print("| destination | way | time | MB/s | vs pipe |")
        print("|---|---|---:|---:|---:|")
        for dest in ("same", "other"):
            base = statistics.median(times[("pipe", dest)])
            for way in WAYS:
                t = statistics.median(times[(way, dest)])
                label = "same policy" if dest == "same" else "other policy (lz4/64K)"
                print(f"| {label} | {way} | {t:.3f} | {size / MiB / t:.0f} | "
                      f"{t / base:.2f}x |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
