#!/usr/bin/env python3
"""Many files (issue 28): a tree of N small files of mixed sizes in
N/250 directories created, walked (os.walk + lstat), read and removed
through squeezefs, side by side with mergerfs (plain FUSE passthrough, if
installed) and the raw directory. The FUSE daemons run with a hard
open-file limit of --limit (4,096 by default: the issue's goal).

Per target and size it prints the time per file of each phase, the
daemon's peak open descriptors (/proc/PID/fd, sampled every 20 ms) and its
peak RSS (sampled VmRSS), and the RSS growth per inode the daemon knows
after the walk ((RSS after the walk - RSS at start) / inodes, squeezefs's
count from its stats; per file for mergerfs).

Usage (root):
  tools/bench_manyfiles.py [--sizes 10000,100000] [--million]
      [--targets raw,mergerfs,squeezefs] [--dir /tmp] [--limit 4096]
      [--opts squeezefs -o options] [--squeezefs BIN] [--json F]
--million adds 1,000,000 files (several minutes and ~4 GB of backing).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from benchlib import PASSTHROUGH_OPTS, FuseMount, drop_caches  # noqa: E402

PER_DIR = 250


def log(msg):
    print(f"bench_manyfiles: {msg}", file=sys.stderr, flush=True)


def content(i):
    n = 64 + (i * 131) % 3000 + (20000 if i % 211 == 0 else 0)
    return (b"%d " % i * (n // 4 + 1))[:n]


class Sampler:
    def __init__(self, pid):
        self.pid, self.fds, self.rss = pid, 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def rss_now(self):
        if not self.pid:
            return 0
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self):
        while not self._stop.is_set():
            if self.pid:
                try:
                    self.fds = max(self.fds, len(os.listdir(f"/proc/{self.pid}/fd")))
                    self.rss = max(self.rss, self.rss_now())
                except OSError:
                    pass
            time.sleep(0.02)

    def stop(self):
        self._stop.set()
        self._t.join()


def phases(root, n):
    t = {}
    ndirs = (n + PER_DIR - 1) // PER_DIR
    t0 = time.monotonic()
    for d in range(ndirs):
        os.mkdir(os.path.join(root, f"d{d:05}"))
        for i in range(d * PER_DIR, min(n, (d + 1) * PER_DIR)):
            with open(os.path.join(root, f"d{d:05}", f"f{i:07}"), "wb") as f:
                f.write(content(i))
    os.sync()
    t["create"] = time.monotonic() - t0
    return t, ndirs


def walk(root):
    t0 = time.monotonic()
    k = 0
    for r, _, files in os.walk(root):
        for fn in files:
            os.lstat(os.path.join(r, fn))
            k += 1
    return time.monotonic() - t0, k


def read_all(root, n):
    t0 = time.monotonic()
    bad = 0
    for i in range(n):
        with open(os.path.join(root, f"d{i // PER_DIR:05}", f"f{i:07}"), "rb") as f:
            if f.read() != content(i):
                bad += 1
    return time.monotonic() - t0, bad


def remove(root, ndirs):
    t0 = time.monotonic()
    for d in range(ndirs):
        p = os.path.join(root, f"d{d:05}")
        for fn in os.listdir(p):
            os.unlink(os.path.join(p, fn))
        os.rmdir(p)
    return time.monotonic() - t0


def run_one(target, n, args, work):
    backing = os.path.join(work, f"{target}-b")
    mnt = os.path.join(work, f"{target}-m")
    os.makedirs(backing)
    fm = None
    limit = ["prlimit", f"--nofile={args.limit}:{args.limit}", "--"]
    if target == "squeezefs":
        cmd = limit + [args.squeezefs, "-f"]
        if args.opts:
            cmd += ["-o", args.opts]
        fm = FuseMount(cmd + [backing, mnt], mnt, os.path.join(work, "sqz.log"))
    elif target == "mergerfs":
        fm = FuseMount(limit + ["mergerfs", "-f", "-o", PASSTHROUGH_OPTS, backing, mnt],
                       mnt, os.path.join(work, "mergerfs.log"))
    root = backing
    if fm:
        fm.start()
        root = mnt
    s = Sampler(fm.proc.pid if fm else 0)
    rss0 = s.rss_now()
    res = {"target": target, "files": n}
    try:
        t, ndirs = phases(root, n)
        res.update(t)
        drop_caches({})
        res["walk"], k = walk(root)
        res["rss_after_walk"] = s.rss_now()
        if target == "squeezefs":
            st = json.loads(subprocess.run([args.squeezefs, "stats", "--json", mnt],
                                           capture_output=True, text=True).stdout)
            res["inodes_after_walk"] = st["inodes"]
            res["max_fds"] = st["max_fds"]
        assert k == n, (k, n)
        drop_caches({})
        res["read"], bad = read_all(root, n)
        assert bad == 0, f"{bad} files read back wrong"
        res["remove"] = remove(root, ndirs)
    finally:
        s.stop()
        if fm:
            fm.stop()
    res["peak_fds"], res["peak_rss"], res["rss_start"] = s.fds, s.rss, rss0
    if fm:
        known = res.get("inodes_after_walk") or n
        res["bytes_per_inode"] = max(0, res["rss_after_walk"] - rss0) / known
    shutil.rmtree(backing, ignore_errors=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--million", action="store_true")
    ap.add_argument("--targets", default="raw,mergerfs,squeezefs")
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--limit", type=int, default=4096)
    ap.add_argument("--opts", default="")
    ap.add_argument("--squeezefs", default=os.path.join(ROOT, "build", "squeezefs"))
    ap.add_argument("--json")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",") if x]
    if a.million:
        sizes.append(1000000)
    targets = [t for t in a.targets.split(",") if t]
    if "mergerfs" in targets and not shutil.which("mergerfs"):
        log("mergerfs not installed (tools/install-deps.sh): skipped")
        targets.remove("mergerfs")
    out = []
    for n in sizes:
        for tg in targets:
            work = tempfile.mkdtemp(prefix="bench-manyfiles-", dir=a.dir)
            try:
                log(f"{tg} {n} files")
                r = run_one(tg, n, a, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            out.append(r)
            log(json.dumps(r))
    print("| target | files | create us/file | walk us/file | read us/file | "
          "remove us/file | peak fds | peak RSS MiB | bytes/inode |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in out:
        n = r["files"]
        bpi = f"{r['bytes_per_inode']:.0f}" if "bytes_per_inode" in r else "-"
        print(f"| {r['target']} | {n} | {r['create'] / n * 1e6:.0f} | "
              f"{r['walk'] / n * 1e6:.1f} | {r['read'] / n * 1e6:.0f} | "
              f"{r['remove'] / n * 1e6:.0f} | {r['peak_fds'] or '-'} | "
              f"{r['peak_rss'] / 2**20:.0f} | {bpi} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
