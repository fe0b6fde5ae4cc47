#!/usr/bin/env python3
"""Random reads side by side (issue 13): cold 4 KiB random-read IOPS of a
TAQ-like dump on the raw directory, a mergerfs passthrough, btrfs
compress-force=zstd:1 on a loop device and squeezefs (default options),
plus 16 KiB / 64 KiB random reads, 4 parallel random readers, sequential
write, cold sequential read, re-read and the stored size.

Every target gets the same file (`squeezefs bench --gen taq-trade --size S
--dump`), written with `dd bs=1M conv=fsync`. Before each cold measurement
the page cache is dropped and the FUSE targets are remounted (so
squeezefs's own block cache is empty too); random reads are
`fio --rw=randread --ioengine=psync --time_based --invalidate=1`. Medians of
--runs runs, the target order rotating from run to run.

Targets:
  raw          the directory itself (on the disk of /tmp)
  mergerfs     a plain FUSE passthrough of a directory
  btrfs        compress-force=zstd:1 on a loop device with its image on /tmp
  squeezefs    the build's binary, default mount options (cache=256M: the
               1 GiB file is 4x the cache)
  squeezefs cache=64M   4 KiB random reads only, the file 16x the cache
  squeezefs (before)    --baseline BIN: another squeezefs binary (e.g. the
               commit before a change) with the same measurements, for the
               no-regression check

Default run (<= 8 minutes): 1 GiB file, 4 KiB reads for 10 s, the 16K/64K/
4-reader runs for --runtime-other seconds (2), 3 runs. --quick: 256 MiB,
2 s, 1 run (development only). Needs root (drop_caches, losetup, mount).

  tools/bench_randread.py [--baseline /tmp/sqzbase/build/squeezefs]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from benchlib import drop_caches_or_fail as drop_caches  # noqa: E402
from benchlib import FuseMount, PASSTHROUGH_OPTS, is_mounted  # noqa: E402

MB = 1 << 20


def log(msg):
    print(f"bench_randread: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Target:
    """A place to put the file; remount() empties the caches above the disk."""

    def __init__(self, name, fio=("4k", "16k", "64k", "4x4k"), full=True):
        self.name, self.fio, self.full = name, fio, full

    def setup(self):
        pass

    def remount(self):
        pass

    def teardown(self):
        pass

    def path(self):
        raise NotImplementedError

    def stored(self):
        return os.stat(self.path()).st_blocks * 512


class Raw(Target):
    def __init__(self, work):
        super().__init__("raw (disk)")
        self.dir = os.path.join(work, "raw")

    def setup(self):
        os.makedirs(self.dir, exist_ok=True)

    def path(self):
        return os.path.join(self.dir, "f")


class FuseTarget(Target):
    """A FUSE mount (cmd + [backing, mnt]) over a directory on the disk."""

    def __init__(self, name, work, tag, cmd, **kw):
        super().__init__(name, **kw)
        self.backing = os.path.join(work, f"{tag}-b")
        self.mnt = os.path.join(work, f"{tag}-m")
        self.m = FuseMount(cmd + [self.backing, self.mnt], self.mnt,
                           os.path.join(work, f"{tag}.log"))

    def setup(self):
        os.makedirs(self.backing, exist_ok=True)
        self.m.start()

    def remount(self):
        self.m.stop()
        self.m.start()

    def teardown(self):
        self.m.stop()

    def path(self):
        return os.path.join(self.mnt, "f")

    def stored(self):
        return os.stat(os.path.join(self.backing, "f")).st_blocks * 512


class Mergerfs(FuseTarget):
    def __init__(self, work):
        super().__init__("mergerfs passthrough", work, "mfs",
                         ["mergerfs", "-f", "-o", PASSTHROUGH_OPTS])


class Btrfs(Target):
    def __init__(self, work, size):
        super().__init__("btrfs compress-force=zstd:1")
        self.img = os.path.join(work, "btrfs.img")
        self.mnt = os.path.join(work, "btrfs-mnt")
        self.size = size
        self.dev = None

    def setup(self):
        with open(self.img, "wb") as f:
            f.truncate(max(3 * self.size, 1 << 30))
        self.dev = run(["losetup", "-f", "--show", self.img]).stdout.strip()
        run(["mkfs.btrfs", "-q", "-f", self.dev])
        os.makedirs(self.mnt, exist_ok=True)
        self._mount()

    def _mount(self):
        run(["mount", "-o", "compress-force=zstd:1", self.dev, self.mnt])

    def remount(self):
        run(["umount", self.mnt])
        self._mount()

    def teardown(self):
        if is_mounted(self.mnt):
            subprocess.run(["umount", self.mnt], capture_output=True)
        if self.dev:
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)
            self.dev = None
        if os.path.exists(self.img):
            os.unlink(self.img)

    def path(self):
        return os.path.join(self.mnt, "f")

    def stored(self):
        out = run(["compsize", "-b", self.path()]).stdout
        for line in out.splitlines():
            if line.startswith("TOTAL"):
                return int(line.split()[2])
        raise RuntimeError(f"compsize: {out}")


class Squeezefs(FuseTarget):
    def __init__(self, work, name, binary, opts=None, tag="sqz", **kw):
        cmd = [binary, "-f"]
        if opts:
            cmd += ["-o", opts]
        super().__init__(name, work, tag, cmd, **kw)


def dd(src, dst, fsync=False):
    cmd = ["dd", f"if={src}", f"of={dst}", "bs=1M", "status=none"]
    if fsync:
        cmd.append("conv=fsync")
    t = time.perf_counter()
    run(cmd)
    return time.perf_counter() - t


FIO = {"4k": ("4k", 1), "16k": ("16k", 1), "64k": ("64k", 1), "4x4k": ("4k", 4)}


def fio(path, kind, runtime):
    bs, jobs = FIO[kind]
    cmd = ["fio", "--name=rr", f"--filename={path}", "--rw=randread", f"--bs={bs}",
           "--ioengine=psync", f"--runtime={runtime}", "--time_based", "--invalidate=1",
           f"--numjobs={jobs}", "--group_reporting", "--output-format=json"]
    out = run(cmd).stdout
    j = json.loads(out[out.index("{"):])
    return sum(job["read"]["iops"] for job in j["jobs"])


def one_round(t, src, size, args):
    """One run on target t: returns {metric: value}."""
    r = {}
    p = t.path()
    if os.path.exists(p):
        os.unlink(p)
    drop_caches()
    r["write"] = size / MB / dd(src, p, fsync=True)
    r["stored"] = t.stored() / MB
    if t.full:
        t.remount()
        drop_caches()
        r["seqread"] = size / MB / dd(p, "/dev/null")
        r["reread"] = size / MB / dd(p, "/dev/null")
    for kind in t.fio:
        t.remount()
        drop_caches()
        r[kind] = fio(p, kind, args.runtime if kind == "4k" else args.runtime_other)
    return r


def fmt(v, unit=""):
    if v is None:
        return "–"
    return f"{v:,.0f}{unit}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="file size (default 1G)")
    ap.add_argument("--runtime", type=int, default=10, help="seconds of 4 KiB random reads")
    ap.add_argument("--runtime-other", type=int, default=2,
                    help="seconds of the 16K, 64K and 4-reader runs")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="256M, 2 s, 1 run")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "squeezefs"))
    ap.add_argument("--baseline", help="a second squeezefs binary: 'squeezefs (before)'")
    ap.add_argument("--small-cache", default="64M",
                    help="cache= of the extra squeezefs target (4K reads only; '' = none)")
    ap.add_argument("--no-btrfs", action="store_true")
    ap.add_argument("--no-mergerfs", action="store_true")
    ap.add_argument("--json", help="write the medians here")
    ap.add_argument("--workdir", default="/tmp")
    args = ap.parse_args()
    if args.quick:
        args.size, args.runtime, args.runtime_other, args.runs = "256M", 2, 2, 1
    if os.geteuid() != 0:
        sys.exit("bench_randread: needs root (drop_caches, losetup, mount)")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    size = int(args.size[:-1]) * mult[args.size[-1].upper()] if args.size[-1].isalpha() \
        else int(args.size)

    work = tempfile.mkdtemp(prefix="bench_randread.", dir=args.workdir)
    src = os.path.join(work, "taq.dat")
    targets = [Raw(work)]
    if not args.no_mergerfs:
        if shutil.which("mergerfs"):
            targets.append(Mergerfs(work))
        else:
            log("mergerfs not installed: skipped")
    if not args.no_btrfs:
        if shutil.which("mkfs.btrfs") and shutil.which("losetup"):
            targets.append(Btrfs(work, size))
        else:
            log("mkfs.btrfs/losetup missing: btrfs skipped")
    targets.append(Squeezefs(work, "squeezefs zstd:1/128K (default)", args.binary))
    if args.baseline:
        targets.append(Squeezefs(work, "squeezefs (before)", args.baseline, tag="base"))
    if args.small_cache:
        targets.append(Squeezefs(work, f"squeezefs cache={args.small_cache}", args.binary,
                                 opts=f"cache={args.small_cache}", tag="small",
                                 fio=("4k",), full=False))

    def cleanup(*_):
        for t in targets:
            try:
                t.teardown()
            except Exception as e:  # keep tearing the others down
                log(f"teardown {t.name}: {e}")
        shutil.rmtree(work, ignore_errors=True)

    def on_signal(signum, _frame):
        cleanup()
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    results = {t.name: [] for t in targets}
    t0 = time.time()
    try:
        log(f"generating {args.size} TAQ-like dump")
        run([args.binary, "bench", "--gen", "taq-trade", "--size", str(size), "--dump", src])
        for t in targets:
            t.setup()
        for rnd in range(args.runs):
            k = rnd % len(targets)
            for t in targets[k:] + targets[:k]:
                log(f"run {rnd + 1}/{args.runs}: {t.name}")
                results[t.name].append(one_round(t, src, size, args))
    finally:
        cleanup()

    med = {}
    for name, rs in results.items():
        med[name] = {m: statistics.median(r[m] for r in rs) for m in rs[0]}
    btrfs = next((m for n, m in med.items() if n.startswith("btrfs")), None)
    before = med.get("squeezefs (before)")
    print(f"\n{args.size} TAQ-like dump, medians of {args.runs} "
          f"(4K: {args.runtime} s, 16K/64K/4 readers: {args.runtime_other} s each), "
          f"{time.time() - t0:.0f} s in all\n")
    cols = [("4k", "4K rand IOPS"), ("16k", "16K rand IOPS"), ("64k", "64K rand IOPS"),
            ("4x4k", "4 readers 4K IOPS"), ("write", "seq write MB/s"),
            ("seqread", "cold seq read MB/s"), ("reread", "re-read MB/s"),
            ("stored", "stored MB")]
    print("| target | " + " | ".join(c[1] for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, m in med.items():
        print(f"| {name} | " + " | ".join(fmt(m.get(c)) for c, _ in cols) + " |")
    if btrfs:
        print("\nratio to btrfs zstd:1 (higher is better; stored: lower is better)\n")
        print("| target | " + " | ".join(c[1] for c in cols) + " |")
        print("|---|" + "---|" * len(cols))
        for name, m in med.items():
            if name.startswith("squeezefs"):
                print(f"| {name} | " + " | ".join(
                    f"{m[c] / btrfs[c]:.2f}x" if c in m and btrfs.get(c) else "–"
                    for c, _ in cols) + " |")
    if before:
        now = med["squeezefs zstd:1/128K (default)"]
        print("\nsqueezefs now / before (no-regression check: write, seq read, "
              "re-read, stored within 5 %)\n")
        print("| " + " | ".join(c[1] for c in cols) + " |")
        print("|" + "---|" * len(cols))
        print("| " + " | ".join(f"{now[c] / before[c]:.2f}x" if before.get(c) else "–"
                                for c, _ in cols) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "runs": args.runs, "runtime": args.runtime,
                       "runtime_other": args.runtime_other, "medians": med,
                       "all": results}, f, indent=1)


if __name__ == "__main__":
    main()
