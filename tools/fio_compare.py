#!/usr/bin/env python3
"""Run the fio workloads of tools/fio/ against a raw directory, a mergerfs
passthrough of a directory and squeezefs mounts, side by side, and print a
table of MB/s and IOPS with ratios to raw and to passthrough.

Usually started through tools/fio-compare.sh. Needs root for dropping the
page cache (otherwise runs with a warning) and for --slow-storage.

Examples:
  tools/fio-compare.sh --quick
  tools/fio-compare.sh --policy zstd:1/128K --policy lz4/64K \\
      --target-opts threads=1 --runs 5 --csv out.csv --png out.png
"""
import argparse
import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib
from benchlib import ROOT, PASSTHROUGH_OPTS, FuseTarget, du_bytes, parse_size

FIO_DIR = os.path.join(ROOT, "tools", "fio")
ALL_JOBS = ["seq-write-1m", "seq-read-1m", "rand-read-4k", "log-append",
            "mixed-randrw"]
# Jobs that repeat until --runtime is over (the others stop after one pass
# over the file, or at --runtime).
TIME_BASED = {"rand-read-4k", "mixed-randrw"}


def log(msg):
    benchlib.log(msg, "fio-compare")


def drop_caches(state):
    benchlib.drop_caches(state, "fio-compare")


class Target(FuseTarget):
    """Where a job runs: name, how to mount, extra info for the table."""

    def __init__(self, name, kind, opts=""):
        self.name, self.kind, self.opts = name, kind, opts
        self.backing = self.mnt = None

    def setup(self, base, args):
        """Create backing/mount dirs; returns the directory fio uses."""
        self.backing = os.path.join(base, "backing")
        self.mnt = os.path.join(base, "mnt")
        os.makedirs(self.backing, exist_ok=True)
        self.fuse = None
        if self.kind == "raw":
            return self.backing
        return self.mount_fuse(self.kind, args.squeezefs, self.opts, self.backing, self.mnt,
                               os.path.join(base, "daemon.log"))

    def teardown(self):
        self.unmount_fuse()


def job_reads(jobfile):
    with open(jobfile) as f:
        for line in f:
            line = line.strip().replace(" ", "")
            if line.startswith("rw="):
                v = line[3:]
                return "read" in v or v in ("rw", "readwrite", "randrw")
    return False


def fio_cmd(job, workdir, args, extra=()):
    """The fio command line of a job. The job files set no directory and no
    time limit, and a default size=256m; fio lets a job file's options win
    over the same options on its command line, so the size is given as
    --filesize (fio caps the I/O at the file size) and --io_size."""
    cmd = ["fio", "--output-format=json", f"--directory={workdir}",
           f"--filesize={args.size}", f"--io_size={args.size}",
           f"--runtime={args.runtime}"]
    if job in TIME_BASED:
        cmd.append("--time_based=1")
    return cmd + list(extra) + [os.path.join(FIO_DIR, job + ".fio")]


def run_fio(job, workdir, args, extra=(), out=None):
    cmd = fio_cmd(job, workdir, args, extra)
    p = subprocess.run(cmd, capture_output=True, text=True,
                       cwd=FIO_DIR, timeout=args.runtime * 20 + 600)
    if p.returncode != 0:
        raise RuntimeError(f"fio failed ({p.returncode}) in {workdir}:\n{p.stderr[-3000:]}")
    if out is not None:
        with open(out, "w") as f:
            f.write(p.stdout)
    # fio may print warnings before the JSON document.
    text = p.stdout[p.stdout.find("{"):]
    return json.loads(text)


def measure_once(job, target, args, base, cache_state):
    jobfile = os.path.join(FIO_DIR, job + ".fio")
    os.makedirs(base, exist_ok=True)
    try:
        d = target.setup(base, args)
        if job_reads(jobfile):
            run_fio(job, d, args, extra=["--create_only=1"])
            target.remount()            # cold daemon cache
        drop_caches(cache_state)        # cold page cache
        res = run_fio(job, d, args, out=os.path.join(base, "fio.json"))
        os.sync()
        stored = du_bytes(target.backing)
    finally:
        target.teardown()
    j = res["jobs"][0]
    bw = j["read"]["bw_bytes"] + j["write"]["bw_bytes"]
    iops = j["read"]["iops"] + j["write"]["iops"]
    return bw / 1e6, iops, stored


# ---------------------------------------------------------------- slow storage
class SlowStorage:
    """ext4 on a loop device, throttled to `bps` with cgroup v2 io.max or
    cgroup v1 blkio.throttle; this process (and so fio and the daemons it
    starts) is moved into the throttled cgroup."""

    def __init__(self, base, size_bytes, bps):
        self.base, self.size, self.bps = base, size_bytes, bps
        self.loop = None
        self.mnt = os.path.join(base, "slow")
        self.cg = None
        self.orig_cg = None
        self.mode = None

    def _cgroup_dirs(self):
        v2 = v1 = None
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                i = parts.index("-")
                fstype, opts = parts[i + 1], parts[i + 3] if len(parts) > i + 3 else ""
                if fstype == "cgroup2" and v2 is None:
                    v2 = parts[4]
                if fstype == "cgroup" and "blkio" in (parts[5] + "," + opts).split(","):
                    v1 = parts[4]
        return v2, v1

    def setup(self):
        for tool in ("mkfs.ext4", "losetup", "mount"):
            if not shutil.which(tool):
                raise RuntimeError(f"{tool} not found")
        img = os.path.join(self.base, "slow.img")
        with open(img, "wb") as f:
            f.truncate(self.size)
        subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True, capture_output=True)
        self.loop = subprocess.run(["losetup", "-f", "--show", img], check=True,
                                   capture_output=True, text=True).stdout.strip()
        os.makedirs(self.mnt, exist_ok=True)
        subprocess.run(["mount", self.loop, self.mnt], check=True, capture_output=True)
        st = os.stat(self.loop)
        dev = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        v2, v1 = self._cgroup_dirs()
        errors = []
        if v2:
            try:
                ctl = os.path.join(v2, "cgroup.controllers")
                if "io" not in open(ctl).read().split():
                    raise RuntimeError("io controller not available in cgroup v2")
                with open(os.path.join(v2, "cgroup.subtree_control"), "w") as f:
                    f.write("+io")
                self.cg = os.path.join(v2, f"sqz-fio-{os.getpid()}")
                os.makedirs(self.cg, exist_ok=True)
                with open(os.path.join(self.cg, "io.max"), "w") as f:
                    f.write(f"{dev} rbps={self.bps} wbps={self.bps}\n")
                self.orig_cg = v2
                self.mode = "cgroup v2 io.max"
            except (OSError, RuntimeError) as e:
                errors.append(f"cgroup v2: {e}")
                self._rmcg()
        if self.mode is None and v1:
            try:
                self.cg = os.path.join(v1, f"sqz-fio-{os.getpid()}")
                os.makedirs(self.cg, exist_ok=True)
                for k in ("read", "write"):
                    with open(os.path.join(self.cg, f"blkio.throttle.{k}_bps_device"), "w") as f:
                        f.write(f"{dev} {self.bps}\n")
                self.orig_cg = v1
                self.mode = "cgroup v1 blkio.throttle (buffered writeback is not throttled)"
            except OSError as e:
                errors.append(f"cgroup v1: {e}")
                self._rmcg()
        if self.mode is None:
            raise RuntimeError("no usable I/O throttling: " + ("; ".join(errors) or "no cgroup blkio/io hierarchy"))
        with open(os.path.join(self.cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        return self.mnt

    def _rmcg(self):
        if self.cg and os.path.isdir(self.cg):
            try:
                os.rmdir(self.cg)
            except OSError:
                pass
        self.cg = None

    def teardown(self):
        if self.cg and self.orig_cg:
            try:
                with open(os.path.join(self.orig_cg, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                pass
            for _ in range(20):
                try:
                    os.rmdir(self.cg)
                    break
                except OSError:
                    time.sleep(0.1)
            self.cg = None
        if os.path.ismount(self.mnt):
            subprocess.run(["umount", self.mnt], capture_output=True)
            if os.path.ismount(self.mnt):
                subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
            self.loop = None


# ---------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squeezefs", default=os.environ.get("SQUEEZEFS_BIN",
                    os.path.join(ROOT, "build", "squeezefs")), help="squeezefs binary")
    ap.add_argument("--policy", action="append", default=[], metavar="SPEC",
                    help="a squeezefs target mounted with compress=SPEC (repeatable; "
                         "default: one target with the mount defaults)")
    ap.add_argument("--target-opts", action="append", default=[], metavar="OPTS",
                    help="a squeezefs target mounted with -o OPTS (repeatable)")
    ap.add_argument("--passthrough-opts", default=PASSTHROUGH_OPTS,
                    help=f"mergerfs options (default {PASSTHROUGH_OPTS})")
    ap.add_argument("--no-passthrough", action="store_true", help="skip mergerfs")
    ap.add_argument("--jobs", default=",".join(ALL_JOBS),
                    help="comma-separated job names (tools/fio/NAME.fio)")
    ap.add_argument("--runs", type=int, default=None, help="runs per cell, median reported (3; --quick 1)")
    ap.add_argument("--size", default=None, help="file size per job (1g; --quick 64m)")
    ap.add_argument("--runtime", type=int, default=None, help="seconds per timed job (20; --quick 3)")
    ap.add_argument("--quick", action="store_true", help="small and short")
    ap.add_argument("--workdir", default=None, help="where backing dirs go (default: a temp dir in /var/tmp)")
    ap.add_argument("--slow-storage", action="store_true",
                    help="put every backing dir on a loop-device ext4 throttled to --slow-bps")
    ap.add_argument("--slow-bps", type=int, default=50 * 1000 * 1000)
    ap.add_argument("--csv", help="write the results as CSV")
    ap.add_argument("--png", help="write a bar chart (needs matplotlib)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    args = ap.parse_args(argv)

    args.runs = args.runs or (1 if args.quick else 3)
    args.size = args.size or ("64m" if args.quick else "1g")
    args.runtime = args.runtime or (3 if args.quick else 20)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    for j in jobs:
        if not os.path.exists(os.path.join(FIO_DIR, j + ".fio")):
            ap.error(f"unknown job '{j}' (have: {', '.join(ALL_JOBS)})")
    if not shutil.which("fio"):
        log("fio not found (apt-get install fio / tools/install-deps.sh)")
        return 2
    if not os.path.exists(args.squeezefs):
        log(f"squeezefs binary not found at {args.squeezefs} (tools/build.sh)")
        return 2

    targets = [Target("raw", "raw")]
    if args.no_passthrough:
        pass
    elif shutil.which("mergerfs"):
        targets.append(Target("passthrough", "passthrough", args.passthrough_opts))
    else:
        log("mergerfs not found: skipping the passthrough target")
    if not args.policy and not args.target_opts:
        targets.append(Target("squeezefs", "squeezefs", ""))
    for p in args.policy:
        targets.append(Target(f"squeezefs[{p}]", "squeezefs", f"compress={p}"))
    for o in args.target_opts:
        targets.append(Target(f"squeezefs[{o}]", "squeezefs", o))

    parent = args.workdir or "/var/tmp"
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix="sqz-fio-", dir=parent)
    slow = None
    interrupted = []

    def on_signal(sig, frame):
        interrupted.append(sig)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    rows = []
    cache_state = {}
    try:
        root = work
        if args.slow_storage:
            need = len(targets) * parse_size(args.size) * 3 + (256 << 20)
            slow = SlowStorage(work, need, args.slow_bps)
            try:
                root = slow.setup()
                log(f"slow storage: {slow.loop} on {root}, {args.slow_bps / 1e6:.0f} MB/s via {slow.mode}")
            except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
                log(f"--slow-storage not possible here, skipping the benchmark: {e}")
                return 0
        log(f"jobs {','.join(jobs)}; size {args.size}, runtime {args.runtime}s, "
            f"{args.runs} run(s); targets: {', '.join(t.name for t in targets)}; work dir {work}")
        for job in jobs:
            for t in targets:
                bws, iopss, stored = [], [], []
                for r in range(args.runs):
                    base = os.path.join(root, f"{job}-{len(rows)}-{r}")
                    bw, iops, st = measure_once(job, t, args, base, cache_state)
                    bws.append(bw)
                    iopss.append(iops)
                    stored.append(st)
                    shutil.rmtree(base, ignore_errors=True)
                rows.append({"job": job, "target": t.name, "kind": t.kind,
                             "mount_opts": t.opts, "runs": args.runs,
                             "mb_s": statistics.median(bws),
                             "iops": statistics.median(iopss),
                             "backing_mb": statistics.median(stored) / 1e6})
                log(f"{job:14s} {t.name:30s} {rows[-1]['mb_s']:10.1f} MB/s {rows[-1]['iops']:10.0f} IOPS")
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        log(f"error: {e}")
        return 1
    finally:
        for t in targets:
            t.teardown()
        if slow:
            slow.teardown()
        if args.keep:
            log(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    # ratios
    for r in rows:
        for base in ("raw", "passthrough"):
            b = next((x for x in rows if x["job"] == r["job"] and x["kind"] == base), None)
            r[f"x_{base}"] = (r["mb_s"] / b["mb_s"]) if b and b["mb_s"] > 0 else None

    def fmt(v):
        return "-" if v is None else f"{v:.2f}"

    hdr = f"{'job':14s} {'target':32s} {'MB/s':>10s} {'IOPS':>10s} {'x raw':>7s} {'x pass':>7s} {'backing MB':>11s}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['job']:14s} {r['target']:32s} {r['mb_s']:10.1f} {r['iops']:10.0f} "
              f"{fmt(r['x_raw']):>7s} {fmt(r['x_passthrough']):>7s} {r['backing_mb']:11.1f}")
    print(f"(median of {args.runs} run(s); size {args.size}, runtime {args.runtime}s; "
          f"passthrough = mergerfs -o {args.passthrough_opts}"
          f"{'; slow storage ' + str(args.slow_bps // 1000000) + ' MB/s' if args.slow_storage else ''})")

    if args.csv:
        cols = ["job", "target", "kind", "mount_opts", "runs", "mb_s", "iops",
                "x_raw", "x_passthrough", "backing_mb"]
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
        log(f"wrote {args.csv}")
    if args.png:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            log("matplotlib not installed: no PNG")
        else:
            names = [t.name for t in targets]
            fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(jobs) * max(1, len(names)) / 3), 4.5))
            width = 0.8 / len(names)
            for i, n in enumerate(names):
                vals = [next((r["mb_s"] for r in rows if r["job"] == j and r["target"] == n), 0) for j in jobs]
                ax.bar([k + i * width for k in range(len(jobs))], vals, width, label=n)
            ax.set_xticks([k + 0.4 - width / 2 for k in range(len(jobs))])
            ax.set_xticklabels(jobs)
            ax.set_ylabel("MB/s (median)")
            ax.set_title(f"fio: size {args.size}, {args.runs} run(s)")
            ax.legend(fontsize="small")
            fig.tight_layout()
            fig.savefig(args.png, dpi=110)
            log(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
