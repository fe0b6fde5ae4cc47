#!/usr/bin/env python3
"""Small-file trees (issue 14): space and time of copying a tree of many
small files into squeezefs, side by side with btrfs compress-force=zstd:1 on
a loop device, mergerfs (plain FUSE passthrough) and the raw directory.

For every tree and target, medians of --runs (the order of the targets
rotates from run to run):

  cp      `cp -r TREE DST` then `sync` (the source tree is read right
          before every copy, so it comes from the page cache)
  space   squeezefs, raw, mergerfs: the sum of st_blocks * 512 of the
          regular files in the backing directory (what the backing ext4
          allocates for their data, hidden packs included; directories and
          inodes not counted), at rest: after an unmount and mount, which
          completes squeezefs's background packing of small files (the
          table also shows the figure right after the copy where it
          differs).
          btrfs: `compsize` "Disk Usage" of the copied tree (its data
          extents, compressed, 4 KiB-rounded; small files that btrfs inlines
          into its metadata count with their compressed inline size, not
          rounded), and the delta of `btrfs filesystem df` around the copy:
          data used + metadata used (one copy; mkfs's default DUP metadata
          takes twice that on the device), i.e. everything btrfs added.
  tar     `tar cf - . | cat >/dev/null` in the copy, page cache dropped
          and FUSE daemons restarted before (cold)
  cat     `find . -type f -print0 | xargs -0 cat >/dev/null`, cold likewise

Prints one Markdown table per tree with the ratios the issue asks for
(space vs btrfs data, cp vs mergerfs, reads vs mergerfs).

Usage (root: loop device, mount, drop_caches):
  tools/bench_smallfiles.py [--trees /usr/include,/usr/lib/python3]
      [--runs 3] [--dir /tmp] [--targets raw,mergerfs,btrfs,squeezefs]
      [--squeezefs BIN] [--base BIN] [--opts squeezefs -o options] [--json F]
      [--ext4 BYTES]
--base BIN adds a second squeezefs binary (target "squeezefs-base"), e.g.
the build before a change. --ext4 BYTES gives raw, mergerfs and squeezefs
a fresh ext4 (mkfs defaults, with a journal) on a loop device per run
instead of directories under --dir, so that a run's copy does not pay for
what earlier runs deleted (see Ext4Loop).
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
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from benchlib import FuseTarget, LoopFs, drop_caches  # noqa: E402

DEFAULT_TREES = ["/usr/include", "/usr/lib/python3", "/usr/share/perl"]


def log(msg):
    print(f"bench-smallfiles: {msg}", file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def tree_stats(src):
    n = small = size = 0
    for dp, _, files in os.walk(src):
        for fn in files:
            p = os.path.join(dp, fn)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            n += 1
            size += st.st_size
            small += st.st_size < 4096
    return n, small, size


def alloc_bytes(path):
    total = 0
    for dp, _, files in os.walk(path):
        for fn in files:
            try:
                st = os.lstat(os.path.join(dp, fn))
            except OSError:
                continue
            if not os.path.islink(os.path.join(dp, fn)):
                total += st.st_blocks * 512
    return total


def warm(src):
    sh(f"tar cf - -C {src} . | cat >/dev/null", shell=True)


class Btrfs(LoopFs):
    """A btrfs compress-force=zstd:1 file system on a loop device."""

    def __init__(self, workdir, size):
        super().__init__(os.path.join(workdir, "btrfs.img"),
                         os.path.join(workdir, "btrfs-mnt"), size,
                         ["mkfs.btrfs", "-q", "-f"], "compress-force=zstd:1")

    def df(self):
        out = subprocess.run(["btrfs", "filesystem", "df", "-b", self.mnt], check=True,
                             capture_output=True, text=True).stdout
        used = {}
        for line in out.splitlines():
            kind = line.split(",")[0].strip()
            if "used=" in line:
                used[kind] = int(line.split("used=")[1].split()[0])
        return used.get("Data", 0), used.get("Metadata", 0)


class Ext4Loop(LoopFs):
    """A fresh ext4 (mkfs.ext4 defaults: journal, 256-byte inodes) on a
    loop device, mounted at mnt, for one target's run (--ext4): the
    targets do not share an allocator. Its inode tables and journal are
    written by mkfs (lazy_itable_init=0): otherwise the kernel's
    ext4lazyinit thread zeroes them in the background during the runs
    (mergerfs copied /usr/include in 2.5-3.3 s on such file systems, in
    2.1 s on initialized ones, 2026-11-25). On an ext4 without a journal (the
    root file system of some VMs) every inode allocation skips inodes
    freed in the last 60-360 s, one lookup each, so a copy's time there
    depends on what the previous runs deleted."""

    def __init__(self, img, mnt, size):
        super().__init__(img, mnt, size, ["mkfs.ext4", "-q", "-F", "-E",
                                          "lazy_itable_init=0,lazy_journal_init=0"])
        log(f"fresh ext4 on {self.loop} at {mnt}")


def compsize_disk(path):
    out = subprocess.run(["compsize", "-b", path], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        if line.startswith("TOTAL"):
            return int(line.split()[2])
    raise RuntimeError(f"compsize: no TOTAL line:\n{out}")


class Target(FuseTarget):
    def __init__(self, name, kind, binary=None, opts=""):
        self.name, self.kind, self.binary, self.opts = name, kind, binary, opts
        self.backing = None

    def setup(self, base, btrfs):
        if self.kind == "btrfs":
            self.backing = tempfile.mkdtemp(dir=btrfs.mnt, prefix="t-")
            return self.backing
        self.backing = os.path.join(base, "backing")
        os.makedirs(self.backing)
        if self.kind == "raw":
            return self.backing
        return self.mount_fuse(self.kind, self.binary, self.opts, self.backing,
                               os.path.join(base, "mnt"), os.path.join(base, "daemon.log"))

    def teardown(self):
        self.unmount_fuse()
        if self.backing:
            shutil.rmtree(self.backing, ignore_errors=True)
            self.backing = None


def timed_shell(cmd, cwd):
    t0 = time.monotonic()
    sh(cmd, shell=True, cwd=cwd)
    return time.monotonic() - t0


def one(target, src, base, btrfs, cache, ext4_size=0):
    os.makedirs(base)
    fs = None
    if ext4_size and target.kind != "btrfs":
        fs = Ext4Loop(base.rstrip("/") + ".img", base, ext4_size)
    try:
        d = target.setup(base, btrfs)
    except BaseException:
        if fs:
            fs.close()
        raise
    try:
        dst = os.path.join(d, "tree")
        before = btrfs.df() if target.kind == "btrfs" else None
        # the source in the page cache for every copy (the previous run's
        # read tests dropped it): the copy measures the target only
        warm(src)
        t0 = time.monotonic()
        sh(["cp", "-r", src, dst])
        t_cp = time.monotonic() - t0
        sh(["sync"])
        t_sync = time.monotonic() - t0
        res = {"cp": t_sync, "cp_nosync": t_cp}
        if target.kind == "btrfs":
            after = btrfs.df()
            res["space"] = compsize_disk(dst)
            res["df_data"] = after[0] - before[0]
            res["df_meta"] = after[1] - before[1]
        else:
            # right after the copy, then at rest: squeezefs packs small
            # files in its background batch (docs/FORMAT.md "Packed
            # files"), which an unmount completes
            res["space_now"] = alloc_bytes(target.backing)
            target.remount()
            res["space"] = alloc_bytes(target.backing)
        for key, cmd in (("tar", "tar cf - . | cat >/dev/null"),
                         ("cat", "find . -type f -print0 | xargs -0 cat >/dev/null")):
            target.remount()
            drop_caches(cache)
            res[key] = timed_shell(cmd, dst)
        return res
    finally:
        target.teardown()
        if fs:
            fs.close()
        shutil.rmtree(base, ignore_errors=True)
        if target.kind == "btrfs":
            sh(["sync"])


def mb(b):
    return f"{b / 1e6:.1f} MB"


def report(tree, info, results, names):
    n, small, size = info
    med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for t, rs in results.items() if rs}
    print(f"\n### {tree} ({n:,} files, {size / 1e6:.0f} MB; {small:,} under 4 KiB)\n")
    print("| target | space on disk | cp -r + sync | tar c (cold) | find + cat (cold) |")
    print("|---|---|---|---|---|")
    for t in names:
        if t not in med:
            continue
        m = med[t]
        sp = mb(m["space"])
        if "space_now" in m and abs(m["space_now"] - m["space"]) > 0.005 * m["space"]:
            sp += f" ({mb(m['space_now'])} right after the copy)"
        if "df_data" in m:
            sp += f" (df: data {mb(m['df_data'])} + metadata {mb(m['df_meta'])})"
        print(f"| {t} | {sp} | {m['cp']:.2f} s | {m['tar']:.2f} s | {m['cat']:.2f} s |")
    for t in names:
        if not t.startswith("squeezefs") or t not in med:
            continue
        m = med[t]
        parts = []
        if "btrfs" in med:
            parts.append(f"space {m['space'] / med['btrfs']['space']:.2f}x btrfs data")
            df = med["btrfs"]["df_data"] + med["btrfs"]["df_meta"]
            if df > 0:
                parts.append(f"{m['space'] / df:.2f}x btrfs df delta")
        if "mergerfs" in med:
            mg = med["mergerfs"]
            parts.append(f"cp {m['cp'] / mg['cp']:.2f}x mergerfs")
            parts.append(f"tar {m['tar'] / mg['tar']:.2f}x")
            parts.append(f"find+cat {m['cat'] / mg['cat']:.2f}x mergerfs")
        print(f"\n{t}: " + ", ".join(parts))
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", default=",".join(DEFAULT_TREES))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--targets", default="raw,mergerfs,btrfs,squeezefs")
    ap.add_argument("--squeezefs", default=os.path.join(ROOT, "build", "squeezefs"))
    ap.add_argument("--base", help="a second squeezefs binary (target squeezefs-base)")
    ap.add_argument("--opts", default="", help="squeezefs -o options (default: none)")
    ap.add_argument("--btrfs-size", default=2 << 30, type=int)
    ap.add_argument("--json", help="write the medians as JSON here")
    ap.add_argument("--ext4", type=int, default=0, metavar="BYTES",
                    help="give raw, mergerfs and squeezefs a fresh ext4 of this size on "
                         "a loop device per run (default: directories under --dir)")
    args = ap.parse_args()

    targets = []
    for k in args.targets.split(","):
        if k == "squeezefs":
            targets.append(Target("squeezefs", "squeezefs", os.path.abspath(args.squeezefs),
                                  args.opts))
        elif k in ("raw", "mergerfs", "btrfs"):
            targets.append(Target(k, k))
        else:
            ap.error(f"unknown target {k}")
    if args.base:
        targets.append(Target("squeezefs-base", "squeezefs", os.path.abspath(args.base),
                              args.opts))
    if os.geteuid() != 0 and any(t.kind == "btrfs" for t in targets):
        log("skipping btrfs: needs root (loop device, mount)")
        targets = [t for t in targets if t.kind != "btrfs"]
    if shutil.which("mergerfs") is None:
        log("skipping mergerfs: not installed")
        targets = [t for t in targets if t.kind != "mergerfs"]
    trees = [t for t in args.trees.split(",") if t]
    for t in list(trees):
        if not os.path.isdir(t):
            log(f"skipping tree {t}: not a directory")
            trees.remove(t)

    work = tempfile.mkdtemp(dir=args.dir, prefix="sqz-bench-small-")
    btrfs = None
    cache = {}
    out = {}
    try:
        if any(t.kind == "btrfs" for t in targets):
            btrfs = Btrfs(work, args.btrfs_size)
        for tree in trees:
            info = tree_stats(tree)
            results = {t.name: [] for t in targets}
            for r in range(args.runs):
                order = targets[r % len(targets):] + targets[:r % len(targets)]
                for t in order:
                    res = one(t, tree, os.path.join(work, f"run-{t.name}"), btrfs, cache,
                              args.ext4)
                    results[t.name].append(res)
                    log(f"{tree} run {r + 1} {t.name}: " +
                        ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in res.items()))
            out[tree] = report(tree, info, results, [t.name for t in targets])
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        for t in targets:
            t.teardown()
        if btrfs:
            btrfs.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
