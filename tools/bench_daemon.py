#!/usr/bin/env python3
"""Daemon-level targets of squeezefs, measured side by side in one run.

  speed  (default) -- for each run, and for each target in a rotating order
         (raw dir, mergerfs passthrough, squeezefs threads=2, squeezefs
         threads=1), on a TAQ-like file (`squeezefs bench --gen ... --dump`):
           write     sequential 1 MiB writes of the file from tmpfs + fsync
           seqread   remount (cold daemon cache, empty FUSE page cache), warm
                     the backing file, then read the file in 1 MiB requests
           reread    read it again at once (page cache)
           rand4k    remount, warm backing, fio 4 KiB psync random reads
         plus, on squeezefs, blocks_decompressed for one cold 4 KiB pread.
         Prints per-run values, medians and the target ratios.
  rss    -- mount squeezefs with cache=SIZE, write N GiB (the dump file
         repeated), drop caches, read it back and compare with the source,
         sampling the daemon's VmRSS every 0.2 s; prints the peaks.

Needs root (drop_caches) and mergerfs for the passthrough target.

  tools/bench_daemon.py speed --runs 3 --size 1g
  tools/bench_daemon.py rss --total 4g --cache 256M
"""
import argparse
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from benchlib import drop_caches_or_fail as drop_caches  # noqa: E402
from benchlib import FuseMount, FuseTarget, PASSTHROUGH_OPTS, parse_size, is_mounted  # noqa: E402

MiB = 1 << 20


def log(msg):
    print(f"bench-daemon: {msg}", file=sys.stderr, flush=True)


def read_all(path, bs=MiB, compare=None):
    """Read path in bs requests; returns (bytes, seconds). compare: mmap of
    the expected content (repeated), raises on mismatch."""
    buf = bytearray(bs)
    mv = memoryview(buf)
    n = 0
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            k = os.readv(fd, [mv])
            if k <= 0:
                break
            if compare is not None:
                off = n % len(compare)
                if off + k <= len(compare):
                    exp = compare[off:off + k]
                else:
                    exp = compare[off:] + compare[:k - (len(compare) - off)]
                if mv[:k] != exp:
                    raise RuntimeError(f"data mismatch in {path} at [{n}, {n + k})")
            n += k
    finally:
        os.close(fd)
    return n, time.perf_counter() - t0


def write_all(path, src, total, bs=MiB):
    """Write total bytes of src (repeated) in bs requests, fsync, close."""
    mv = memoryview(src)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n = 0
        while n < total:
            off = n % len(src)
            k = min(bs, total - n, len(src) - off)
            w = os.write(fd, mv[off:off + k])
            n += w
        os.fsync(fd)
    finally:
        os.close(fd)
    return n, time.perf_counter() - t0


def warm(path):
    read_all(path)


def stats(sqz, mnt):
    p = subprocess.run([sqz, "stats", "--json", mnt], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


class T(FuseTarget):
    def __init__(self, name, kind, opts, base, sqz):
        self.name, self.kind, self.opts = name, kind, opts
        self.backing = os.path.join(base, name, "backing")
        self.mnt = os.path.join(base, name, "mnt")
        os.makedirs(self.backing, exist_ok=True)
        self.fuse = None
        if kind == "passthrough":
            cmd = ["mergerfs", "-f", "-o", opts, self.backing, self.mnt]
        elif kind == "squeezefs":
            cmd = [sqz, "-f", "-o", opts, self.backing, self.mnt]
        else:
            cmd = None
        if cmd:
            self.fuse = FuseMount(cmd, self.mnt, os.path.join(base, name, "daemon.log"))
            self.fuse.start()

    @property
    def dir(self):
        return self.mnt if self.fuse else self.backing

    def stop(self):
        if self.fuse:
            self.fuse.stop()


def fmt(key, x):
    return f"{x:.2f}" if key == "write_cores" else f"{x:.0f}"


def cpu_seconds(t):
    """CPU seconds used so far by this process (the writer) and, for FUSE
    targets, the daemon (all its threads)."""
    tm = os.times()
    total = tm.user + tm.system
    if t.fuse and t.fuse.proc:
        with open(f"/proc/{t.fuse.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def fio_rand(path, size, runtime):
    cmd = ["fio", "--output-format=json", "--name=rand4k", f"--filename={path}",
           "--rw=randread", "--bs=4k", "--ioengine=psync", f"--size={size}",
           f"--runtime={runtime}", "--time_based=1", "--randrepeat=1",
           "--random_generator=tausworthe64"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    j = json.loads(p.stdout[p.stdout.find("{"):])
    return j["jobs"][0]["read"]["iops"]


def cmd_speed(a):
    src_fd = os.open(a.data, os.O_RDONLY)
    size = min(parse_size(a.size), os.fstat(src_fd).st_size)
    src = mmap.mmap(src_fd, 0, prot=mmap.PROT_READ)
    base = os.path.join(a.workdir, f"sqz-daemon-{os.getpid()}")
    targets = [T("raw", "raw", "", base, a.squeezefs),
               T("passthrough", "passthrough", PASSTHROUGH_OPTS, base, a.squeezefs),
               T("sqz-t2", "squeezefs", f"compress={a.policy},threads=2", base, a.squeezefs),
               T("sqz-t1", "squeezefs", f"compress={a.policy},threads=1", base, a.squeezefs)]
    small = parse_size(a.rand_small)
    cols = ["write", "write_cores", "seqread", "reread1", "reread", "rand4k", "rand4k_small",
            "backing_mb", "cold4k_blocks", "cold4k_blocks_fadv_random"]
    res = {t.name: {c: [] for c in cols} for t in targets}
    try:
        for r in range(a.runs):
            order = targets[r % len(targets):] + targets[:r % len(targets)]
            for t in order:
                f = os.path.join(t.dir, "taq")
                bf = os.path.join(t.backing, "taq")
                if os.path.exists(f):
                    os.unlink(f)
                drop_caches()
                c0 = cpu_seconds(t)
                n, s = write_all(f, src, size)
                res[t.name]["write"].append(n / s / 1e6)
                res[t.name]["write_cores"].append((cpu_seconds(t) - c0) / s)
                os.sync()
                res[t.name]["backing_mb"].append(os.stat(bf).st_blocks * 512 / 1e6)
                # sequential read, warm backing, cold daemon + FUSE page cache
                t.remount()
                drop_caches()
                warm(bf)
                n, s = read_all(f)
                res[t.name]["seqread"].append(n / s / 1e6)
                # re-read, page cache: the first re-read and the median of
                # three (the VM's proactive reclaim and first-touch LRU work
                # make the first one noisy, for every target alike)
                rr = []
                for _ in range(3):
                    n, s = read_all(f)
                    rr.append(n / s / 1e6)
                res[t.name]["reread1"].append(rr[0])
                res[t.name]["reread"].append(statistics.median(rr))
                # 4 KiB random read, warm backing, cold daemon cache: over the
                # whole file, and over its first rand_small bytes (a working
                # set that fits the daemon's block cache)
                for key, region in (("rand4k", size), ("rand4k_small", min(size, small))):
                    t.remount()
                    drop_caches()
                    warm(bf)
                    res[t.name][key].append(fio_rand(f, region, a.rand_runtime))
                if t.kind == "squeezefs":
                    for key, fadv in (("cold4k_blocks", False), ("cold4k_blocks_fadv_random", True)):
                        t.remount()
                        drop_caches()
                        s0 = stats(a.squeezefs, t.mnt)
                        fd = os.open(f, os.O_RDONLY)
                        if fadv:
                            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                        os.pread(fd, 4096, (size // 2) // 4096 * 4096 + 8192)
                        os.close(fd)
                        s1 = stats(a.squeezefs, t.mnt)
                        res[t.name][key].append(s1["blocks_decompressed"] - s0["blocks_decompressed"])
                log(f"run {r + 1} {t.name:12s} " + " ".join(
                    f"{k}={fmt(k, v[-1])}" for k, v in res[t.name].items() if v))
    finally:
        for t in targets:
            t.stop()
        shutil.rmtree(base, ignore_errors=True)

    med = {n: {k: (statistics.median(v) if v else None) for k, v in d.items()} for n, d in res.items()}
    print(f"size {size / MiB:.0f} MiB of {a.data}; policy {a.policy}; runs {a.runs} (median; "
          f"per-run values in brackets); write/seqread/reread MB/s, rand4k IOPS; write_cores: CPU "
          f"seconds of the writer and the daemon per second of the write (cores busy, of "
          f"{os.cpu_count()}); reread1: first re-read, reread: median of 3; rand4k_small: "
          f"the first {small / MiB:.0f} MiB only")
    print("| target | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for t in targets:
        cells = []
        for c in cols:
            v = res[t.name][c]
            cells.append("-" if not v else f"{fmt(c, med[t.name][c])} [{', '.join(fmt(c, x) for x in v)}]")
        print(f"| {t.name} | " + " | ".join(cells) + " |")

    def ratio(num, den, key, per_run=True):
        xs = [x / y for x, y in zip(res[num][key], res[den][key])]
        return statistics.median(xs), xs

    print()
    print("| target | measured (median of per-run ratios) | per run | goal | met |")
    print("|---|---|---|---|---|")
    for label, num, den, key, goal in (
            ("seq 1 MiB read, warm backing: sqz-t2 / passthrough", "sqz-t2", "passthrough", "seqread", 0.8),
            ("re-read from page cache (median of 3): sqz-t2 / raw", "sqz-t2", "raw", "reread", 0.8),
            ("first re-read from page cache: sqz-t2 / raw", "sqz-t2", "raw", "reread1", 0.8),
            ("seq 1 MiB write: sqz-t2 / sqz-t1", "sqz-t2", "sqz-t1", "write", 1.7),
            ("4 KiB random read IOPS: sqz-t2 / passthrough", "sqz-t2", "passthrough", "rand4k", 0.5),
            ("4 KiB random read IOPS, working set fits the cache: sqz-t2 / passthrough",
             "sqz-t2", "passthrough", "rand4k_small", 0.5)):
        m, xs = ratio(num, den, key)
        print(f"| {label} | {m:.2f} | {', '.join(f'{x:.2f}' for x in xs)} | >= {goal} | "
              f"{'yes' if m >= goal else 'NO'} |")
    print(f"| cold 4 KiB pread decompresses one block | "
          f"{med['sqz-t2']['cold4k_blocks']:.0f} blocks (fadvise RANDOM: {med['sqz-t2']['cold4k_blocks_fadv_random']:.0f}) | "
          f"{res['sqz-t2']['cold4k_blocks']} / {res['sqz-t2']['cold4k_blocks_fadv_random']} | 1 | "
          f"{'yes' if med['sqz-t2']['cold4k_blocks'] == 1 else 'NO'} |")
    return 0


def vmrss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cmd_rss(a):
    src_fd = os.open(a.data, os.O_RDONLY)
    src = mmap.mmap(src_fd, 0, prot=mmap.PROT_READ)
    total = parse_size(a.total)
    cache = parse_size(a.cache)
    base = os.path.join(a.workdir, f"sqz-rss-{os.getpid()}")
    t = T("sqz", "squeezefs", f"compress={a.policy},cache={a.cache}", base, a.squeezefs)
    pid = t.fuse.proc.pid
    phase = ["idle"]
    peaks = {}
    samples = []
    stop = threading.Event()

    def sampler():
        t0 = time.time()
        while not stop.is_set():
            v = vmrss_kib(pid)
            samples.append((time.time() - t0, phase[0], v))
            peaks[phase[0]] = max(peaks.get(phase[0], 0), v)
            time.sleep(0.2)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    try:
        f = os.path.join(t.mnt, "big")
        phase[0] = "write"
        n, s = write_all(f, src, total)
        log(f"wrote {n / MiB:.0f} MiB in {s:.1f} s ({n / s / 1e6:.0f} MB/s)")
        phase[0] = "after-write"
        time.sleep(1)
        drop_caches()
        phase[0] = "read"
        n, s = read_all(f, compare=src)
        log(f"read back and compared {n / MiB:.0f} MiB in {s:.1f} s ({n / s / 1e6:.0f} MB/s)")
        if n != total:
            raise RuntimeError(f"read {n} bytes, expected {total}")
        phase[0] = "end"
        time.sleep(0.5)
        st = stats(a.squeezefs, t.mnt)
    finally:
        stop.set()
        th.join()
        t.stop()
        backing = os.path.join(base, "sqz", "backing", "big")
        bmb = os.stat(backing).st_blocks * 512 / 1e6 if os.path.exists(backing) else 0
        shutil.rmtree(base, ignore_errors=True)
    if a.samples:
        with open(a.samples, "w") as fo:
            fo.write("t_s,phase,vmrss_kib\n")
            for x in samples:
                fo.write(f"{x[0]:.2f},{x[1]},{x[2]}\n")
    limit = cache // 1024 + 64 * 1024
    print(f"{total / MiB:.0f} MiB written and read back (content verified), policy {a.policy}, "
          f"cache={a.cache}; backing file {bmb:.0f} MB; {len(samples)} VmRSS samples every 0.2 s")
    print("| phase | peak VmRSS MiB |")
    print("|---|---|")
    for k in ("idle", "write", "after-write", "read", "end"):
        if k in peaks:
            print(f"| {k} | {peaks[k] / 1024:.1f} |")
    pk = max(peaks.values())
    print(f"peak {pk / 1024:.1f} MiB; limit cache + 64 MiB = {limit / 1024:.0f} MiB -> "
          f"{'met' if pk <= limit else 'MISSED'}; cache_bytes at end {st.get('cache_bytes', 0) / MiB:.1f} MiB")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["speed", "rss"], nargs="?", default="speed")
    ap.add_argument("--squeezefs", default=os.path.join(ROOT, "build-bench", "squeezefs"))
    ap.add_argument("--data", default="/dev/shm/sqz-taq.bin",
                    help="source data (made with `squeezefs bench --gen taq-trade --size 1G --dump FILE` "
                         "if missing); keep it on tmpfs")
    ap.add_argument("--gen", default="taq-trade")
    ap.add_argument("--policy", default="zstd:1/128K")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", default="1g", help="speed: file size")
    ap.add_argument("--rand-runtime", type=int, default=8)
    ap.add_argument("--rand-small", default="128m",
                    help="speed: region of the second random-read run (fits cache=256M)")
    ap.add_argument("--total", default="4g", help="rss: bytes written and read")
    ap.add_argument("--cache", default="256M", help="rss: cache= mount option")
    ap.add_argument("--samples", help="rss: write the VmRSS samples as CSV")
    ap.add_argument("--workdir", default="/var/tmp")
    a = ap.parse_args()
    if not os.path.exists(a.data):
        log(f"generating {a.data} ({a.gen}, 1G)")
        subprocess.run([a.squeezefs, "bench", "--gen", a.gen, "--size", "1G", "--dump", a.data,
                        "--alg", "none", "--runs", "1", "--quick"], check=True, stdout=subprocess.DEVNULL)
    return cmd_speed(a) if a.mode == "speed" else cmd_rss(a)


if __name__ == "__main__":
    sys.exit(main())
