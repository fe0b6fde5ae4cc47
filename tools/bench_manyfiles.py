#!/usr/bin/env python3
"""Many files (issue 28): a tree of N small files of mixed sizes in
N/250 directories created, walked (os.walk + lstat), read and removed
through squeezefs, side by side with mergerfs (plain FUSE passthrough, if
installed), btrfs compress-force=zstd:1 on a loop device and the raw
directory. The FUSE daemons run with a hard open-file limit of --limit
(4,096 by default: the issue's goal).

Per target and size it prints the time per file of each phase, the
daemon's peak open descriptors (/proc/PID/fd, sampled every 20 ms) and its
peak RSS (sampled VmRSS), and the RSS growth per inode the daemon knows
after the walk ((RSS after the walk - RSS at start) / inodes, squeezefs's
count from its stats; per file for mergerfs).

Checked on every target: every byte reads back, no two files show one
inode number, and each file's number at the read is the one the walk saw.
squeezefs also, untimed between the read and the removal: packing and
durable marks settle (their counters are reported), the first 20 files
(200 KB containers; the rest are packed) are made two days old and a
tiering pass (`tier=1s`, a rule `d00000/* zstd:1 after 1d zstd:6`) walks
the whole tree and rewrites them, keeping their numbers across a remount, and `squeezefs
verify` of BACKING must exit 0. The removal takes two files of every
three first; squeezefs then waits (untimed) until reclaiming has moved
the live entries of its two-thirds-dead packs, and BACKING must be empty
after the removal.

Usage (root):
  tools/bench_manyfiles.py [--sizes 10000,100000] [--million]
      [--targets raw,mergerfs,btrfs,squeezefs] [--dir /tmp] [--limit 4096]
      [--opts squeezefs -o options] [--squeezefs BIN] [--json F]
--million adds 1,000,000 files (about an hour for all targets, ~6 GB).
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
from benchlib import PASSTHROUGH_OPTS, FuseMount, LoopFs, drop_caches  # noqa: E402

PER_DIR = 250
# Tiering at scale: the first 20 files (200 KB each: packed files are not
# tiered) have an aged policy; the rest of the tree the mount's default.
RULES = "d00000/*  zstd:1 after 1d zstd:6\n"
TIERED = 20


def log(msg):
    print(f"bench_manyfiles: {msg}", file=sys.stderr, flush=True)


def content(i):
    if i < TIERED:  # tiered below: containers (packed files are not tiered)
        return (b"%d " % i * 100000)[:200000 + i]
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
    """os.walk + lstat; returns (seconds, {relative path: st_ino})."""
    t0 = time.monotonic()
    inos = {}
    for r, _, files in os.walk(root):
        for fn in files:
            p = os.path.join(r, fn)
            inos[os.path.relpath(p, root)] = os.lstat(p).st_ino
    return time.monotonic() - t0, inos


def rel(i):
    return os.path.join(f"d{i // PER_DIR:05}", f"f{i:07}")


def read_all(root, n, inos):
    """Read every file back and compare; an fstat of each open file must
    show the number the walk saw (background work keeps it)."""
    t0 = time.monotonic()
    bad = moved = 0
    for i in range(n):
        with open(os.path.join(root, rel(i)), "rb") as f:
            if f.read() != content(i):
                bad += 1
            if os.fstat(f.fileno()).st_ino != inos.get(rel(i)):
                moved += 1
    return time.monotonic() - t0, bad, moved


def remove(root, n, ndirs, between=None):
    """Two files of every three of the whole tree first (squeezefs: its
    packs turn two thirds dead), then between() (untimed: squeezefs waits
    for its packs to be reclaimed), then the rest and the directories."""
    t0 = time.monotonic()
    for i in range(n):
        if i % 3:
            os.unlink(os.path.join(root, rel(i)))
    paused = between() if between else 0.0
    for d in range(ndirs):
        p = os.path.join(root, f"d{d:05}")
        for fn in os.listdir(p):
            os.unlink(os.path.join(p, fn))
        os.rmdir(p)
    return time.monotonic() - t0 - paused




def stats(args, mnt):
    out = subprocess.run([args.squeezefs, "stats", "--json", mnt], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def wait_stats(args, mnt, done, what, timeout):
    t0 = time.monotonic()
    while True:
        st = stats(args, mnt)
        if done(st):
            return st, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{what}: not done after {timeout} s: {st}")
        time.sleep(1)


def background(args, res, fm, sampler, mkcmd, backing, mnt, n, inos):
    """squeezefs only, untimed, between the read and the removal: packing
    and durable marks settle, a tiering pass walks the whole tree and
    rewrites the aged files, their numbers are kept across it and a
    remount, and verify finds the backing clean."""
    st, res["settle_s"] = wait_stats(
        args, mnt, lambda s: s["pack_pending"] == 0 and s["durable_queued"] == 0,
        "packing", 3600)
    for k in ("files_packed", "pack_failures", "durable_marked", "durable_failures",
              "read_errors"):
        res[k] = st[k]
    old = time.time() - 2 * 86400
    for i in range(min(n, TIERED)):
        os.utime(os.path.join(mnt, rel(i)), (old, old))
    fm.stop()
    fm.cmd = mkcmd(",tier=1s")
    fm.start()
    sampler.pid = fm.proc.pid
    st, res["tier_s"] = wait_stats(
        args, mnt, lambda s: s["tier_passes"] >= 1 and not s["tier_running"],
        "tiering", 7200)
    for k in ("tier_files", "tier_failed", "tier_abandoned", "tier_skipped"):
        res[k] = st[k]
    moved = 0
    for i in list(range(min(n, TIERED))) + list(range(TIERED, n, 97)):
        if os.lstat(os.path.join(mnt, rel(i))).st_ino != inos.get(rel(i)):
            moved += 1
    res["ino_moved_after_tier"] = moved
    fm.stop()
    t0 = time.monotonic()
    v = subprocess.run([args.squeezefs, "verify", backing], capture_output=True, text=True)
    res["verify_s"] = time.monotonic() - t0
    res["verify_rc"] = v.returncode
    if v.returncode != 0:
        log(f"verify exit {v.returncode}:\n{v.stdout[-3000:]}{v.stderr[-3000:]}")
    fm.cmd = mkcmd("")
    fm.start()
    sampler.pid = fm.proc.pid


def run_one(target, n, args, work):
    backing = os.path.join(work, f"{target}-b")
    mnt = os.path.join(work, f"{target}-m")
    fm = loop = None
    limit = ["prlimit", f"--nofile={args.limit}:{args.limit}", "--"]
    if target == "btrfs":
        loop = LoopFs(os.path.join(work, "btrfs.img"), mnt, max(8 << 30, n * 16384),
                      ["mkfs.btrfs", "-q", "-f"], "compress-force=zstd:1")
        backing = os.path.join(mnt, "t")
    os.makedirs(backing)
    if target == "squeezefs":
        rules = os.path.join(work, "rules")
        with open(rules, "w") as f:
            f.write(RULES)
        opts = f"policy={rules}" + (f",{args.opts}" if args.opts else "")

        def mkcmd(extra):
            return limit + [args.squeezefs, "-f", "-o", opts + extra, backing, mnt]
        fm = FuseMount(mkcmd(""), mnt, os.path.join(work, "sqz.log"))
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
        res["walk"], inos = walk(root)
        assert len(inos) == n, (len(inos), n)
        res["duplicate_inos"] = n - len(set(inos.values()))
        res["rss_after_walk"] = s.rss_now()
        if target == "squeezefs":
            st = stats(args, mnt)
            res["inodes_after_walk"] = st["inodes"]
            res["max_fds"] = st["max_fds"]
        drop_caches({})
        res["read"], bad, res["ino_moved"] = read_all(root, n, inos)
        assert bad == 0, f"{bad} files read back wrong"
        if target == "squeezefs":
            background(args, res, fm, s, mkcmd, backing, mnt, n, inos)
        between = None
        if target == "squeezefs":
            def between():
                """Until reclaiming (every 10 s per noted directory) has
                stopped moving entries and removing packs."""
                t0, last = time.monotonic(), None
                while time.monotonic() - t0 < 600:
                    time.sleep(6)
                    st = stats(args, mnt)
                    now = (st["pack_entries_moved"], st["packs_removed"])
                    if now == last and time.monotonic() - t0 > 20:
                        break
                    last = now
                res["packs_removed"], res["pack_entries_moved"] = (
                    st["packs_removed"], st["pack_entries_moved"])
                res["reclaim_s"] = time.monotonic() - t0
                return res["reclaim_s"]
        drop_caches({})
        res["remove"] = remove(root, n, ndirs, between)
    finally:
        s.stop()
        if fm:
            fm.stop()
        if loop:
            loop.close()
    res["peak_fds"], res["peak_rss"], res["rss_start"] = s.fds, s.rss, rss0
    if fm:
        known = res.get("inodes_after_walk") or n
        res["bytes_per_inode"] = max(0, res["rss_after_walk"] - rss0) / known
    if target == "squeezefs":
        res["backing_left"] = sorted(os.listdir(backing))
        ids = os.path.join(backing, ".sqz-tmp.ids")
        res["keepers_left"] = len(os.listdir(ids)) if os.path.isdir(ids) else 0
    shutil.rmtree(backing, ignore_errors=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--million", action="store_true")
    ap.add_argument("--targets", default="raw,mergerfs,btrfs,squeezefs")
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
          "remove us/file | peak fds | peak RSS MiB | bytes/inode | duplicate / moved numbers |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in out:
        n = r["files"]
        bpi = f"{r['bytes_per_inode']:.0f}" if "bytes_per_inode" in r else "-"
        print(f"| {r['target']} | {n} | {r['create'] / n * 1e6:.0f} | "
              f"{r['walk'] / n * 1e6:.1f} | {r['read'] / n * 1e6:.0f} | "
              f"{r['remove'] / n * 1e6:.0f} | {r['peak_fds'] or '-'} | "
              f"{r['peak_rss'] / 2**20:.0f} | {bpi} | "
              f"{r['duplicate_inos']} / {r['ino_moved']} |")
    sq = [r for r in out if r["target"] == "squeezefs"]
    if sq:
        print()
        print("| squeezefs files | packed | durable marks | failures (pack, durable, read) | "
              "settle s | tiered / failed | tier pass s | numbers moved by tier | "
              "verify s (exit) | packs reclaimed / entries moved | BACKING left (kept numbers) |")
        print("|---:|---:|---:|---|---:|---|---:|---:|---|---|---|")
        for r in sq:
            print(f"| {r['files']} | {r['files_packed']} | {r['durable_marked']} | "
                  f"{r['pack_failures']}, {r['durable_failures']}, {r['read_errors']} | "
                  f"{r['settle_s']:.0f} | {r['tier_files']} / {r['tier_failed']} | "
                  f"{r['tier_s']:.0f} | {r['ino_moved_after_tier']} | "
                  f"{r['verify_s']:.0f} ({r['verify_rc']}) | "
                  f"{r['packs_removed']} / {r['pack_entries_moved']} | "
                  f"{', '.join(r['backing_left']) or 'nothing'} ({r['keepers_left']}) |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
