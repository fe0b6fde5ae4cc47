#!/usr/bin/env python3
"""Age-based tiering (issue 16), measured.

An HDB-like tree from the project's TAQ generators (`squeezefs bench --gen
taq-trade.COL / taq-quote.COL --dump`): 30 daily partitions hdb/DATE/{trade,
quote}/COLUMN, plus two "today" partitions (rt/DATE/...) that the
foreground readers use. Everything is written through a mount whose rule
file says

    /hdb/** lz4/128K after 30d zstd:19/1M
    /rt/**  lz4/128K

and the hdb partitions are aged 31..60 days (os.utime, as `cp -p` of old
partitions would leave them).

  size      `squeezefs tier` over hdb (one pass, unlimited rate) vs writing
            the same hdb tree directly on a mount with compress=zstd:19/1M:
            bytes of the backing files (goal: tiered <= direct + 2 %); the
            pass's own throughput (file data rewritten per second); the
            peer: btrfs compress-force=zstd:1 and zstd:15 (its strongest) on
            a loop device (image in /tmp, compsize's disk usage)
  reads     foreground reads of the rt partitions, 1 MiB sequential (MB/s)
            and 4 KiB random (reads/s), on a mount with tier=1s,
            tier_rate=50M while its background pass runs, vs the same mount
            without tier= (idle); medians of --runs, interleaved. The block
            cache is off (cache=0) and the kernel's cached pages of the
            files are dropped (fadvise) before each sequential read and
            every 64 random reads, so every read decompresses in the daemon
            (the work the pass competes with). The background pass's own
            rate during the reads is reported too.

Usage: tools/bench_tier.py [--size 256M] [--runs 3] [--dir /var/tmp]
       [--bin build/squeezefs] [--secs 4]
--size is the hdb tree's logical size (the issue's figure is ~2 GiB; the
default is smaller so that the run, dominated by zstd:19 at ~3.5 MB/s per
core, stays within a few minutes). Prints Markdown tables.
"""
import argparse
import json
import os
import random
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
DAY = 86400
TRADE = ["time", "sym", "price", "size", "ex", "cond", "seq", "stop"]
QUOTE = ["time", "sym", "bid", "ask", "bsize", "asize", "ex", "cond", "seq"]
RULES = "/hdb/** lz4/128K after 30d zstd:19/1M\n/rt/** lz4/128K\n"


def parse_size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * m[s[-1].upper()]) if s[-1].upper() in m else int(s)


def sqz(binary, *args, **kw):
    return subprocess.run([binary] + [str(a) for a in args], check=True,
                          capture_output=True, text=True, **kw)


def gen_tree(binary, dst, size):
    """hdb: 30 partitions of size/30; rt: 2 partitions of the same size."""
    per = size // 30
    dates = [f"2026.{9 + i // 30:02d}.{1 + i % 30:02d}" for i in range(32)]
    for i, date in enumerate(dates):
        top = "hdb" if i < 30 else "rt"
        for table, cols, share in (("trade", TRADE, 0.4), ("quote", QUOTE, 0.6)):
            d = os.path.join(dst, top, date, table)
            os.makedirs(d, exist_ok=True)
            n = int(per * share / len(cols))
            for c in cols:
                sqz(binary, "bench", "--gen", f"taq-{table}.{c}", "--size", n,
                    "--seed", 1000 + i, "--dump", os.path.join(d, c))


def tree_bytes(path):
    size = alloc = 0
    for dp, _, fs in os.walk(path):
        for f in fs:
            if f.startswith(".sqz-tmp."):
                continue
            st = os.lstat(os.path.join(dp, f))
            size += st.st_size
            alloc += st.st_blocks * 512
    return size, alloc


def age_tree(mnt):
    """hdb partition k aged 31 + k days; rt stays fresh."""
    parts = sorted(os.listdir(os.path.join(mnt, "hdb")))
    now = time.time()
    for k, p in enumerate(parts):
        t = now - (31 + k) * DAY
        for dp, _, fs in os.walk(os.path.join(mnt, "hdb", p)):
            for f in fs:
                os.utime(os.path.join(dp, f), (t, t))


def copy_in(src, mnt, sub):
    subprocess.run(["cp", "-r", os.path.join(src, sub), os.path.join(mnt, sub)], check=True)


def stats(binary, mnt):
    return json.loads(sqz(binary, "stats", "--json", mnt).stdout)


def rt_files(mnt):
    out = []
    for dp, _, fs in os.walk(os.path.join(mnt, "rt")):
        for f in sorted(fs):
            out.append(os.path.join(dp, f))
    return sorted(out)


def seq_read(files, secs):
    """1 MiB sequential reads of the files, again and again, for secs."""
    total, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < secs:
        for p in files:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                off = 0
                while True:
                    b = os.pread(fd, MiB, off)
                    if not b:
                        break
                    off += len(b)
                    total += len(b)
            finally:
                os.close(fd)
            if time.monotonic() - t0 >= secs:
                break
    return total / MiB / (time.monotonic() - t0)


def rand_read(files, secs, seed):
    rnd = random.Random(seed)
    fds = [os.open(p, os.O_RDONLY) for p in files]
    sizes = [os.fstat(fd).st_size for fd in fds]
    for fd in fds:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    n, t0 = 0, time.monotonic()
    try:
        while time.monotonic() - t0 < secs:
            if n % 64 == 0:
                for fd in fds:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            i = rnd.randrange(len(fds))
            off = rnd.randrange(0, max(1, sizes[i] // 4096)) * 4096
            os.pread(fds[i], 4096, off)
            n += 1
    finally:
        for fd in fds:
            os.close(fd)
    return n / (time.monotonic() - t0)


def btrfs_size(src, work, level):
    """The hdb tree written onto btrfs compress-force=zstd:LEVEL on a loop
    device (the peer: one policy at write time): compsize's disk usage and
    the apparent size. None (with the reason printed) if btrfs cannot run."""
    for tool in ("mkfs.btrfs", "compsize", "losetup", "mount"):
        if not shutil.which(tool):
            print(f"btrfs peer skipped: {tool} not found", file=sys.stderr)
            return None
    img = os.path.join("/tmp", f"sqz-bench-tier-{os.getpid()}.img")
    mnt = os.path.join(work, "btrfs")
    os.makedirs(mnt, exist_ok=True)
    loop = None
    try:
        with open(img, "wb") as f:
            f.truncate(4 << 30)
        subprocess.run(["mkfs.btrfs", "-q", "-f", img], check=True, capture_output=True)
        loop = subprocess.run(["losetup", "-f", "--show", img], check=True,
                              capture_output=True, text=True).stdout.strip()
        subprocess.run(["mount", "-o", f"compress-force=zstd:{level}", loop, mnt],
                       check=True, capture_output=True)
        copy_in(src, mnt, "hdb")
        subprocess.run(["sync"], check=True)
        out = subprocess.run(["compsize", "-b", os.path.join(mnt, "hdb")], check=True,
                             capture_output=True, text=True).stdout
        total = [ln.split() for ln in out.splitlines() if ln.startswith("TOTAL")][0]
        return int(total[2]), int(total[3])
    except (subprocess.CalledProcessError, OSError, IndexError, ValueError) as e:
        print(f"btrfs peer skipped: {e}", file=sys.stderr)
        return None
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["umount", mnt], capture_output=True)
        if loop:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        if os.path.exists(img):
            os.unlink(img)


def measure_sizes(a, work, src):
    rules = os.path.join(work, "hdb.rules")
    # lz4 tree, aged: the template of the read runs too
    tmpl = os.path.join(work, "tmpl")
    os.makedirs(tmpl)
    m = Mount(tmpl, os.path.join(work, "m-tmpl"), options=["policy=" + rules])
    try:
        copy_in(src, m.mnt, "hdb")
        copy_in(src, m.mnt, "rt")
        age_tree(m.mnt)
    finally:
        assert m.unmount() == 0
    lz4_size = tree_bytes(os.path.join(tmpl, "hdb"))
    logical = tree_bytes(os.path.join(src, "hdb"))[0]
    # tier a copy of it
    tb = os.path.join(work, "tiered")
    subprocess.run(["cp", "-a", tmpl, tb], check=True)
    m = Mount(tb, os.path.join(work, "m-tiered"), options=["policy=" + rules])
    try:
        t0 = time.monotonic()
        j = json.loads(sqz(a.bin, "tier", "--json", m.path("hdb")).stdout)
        secs = time.monotonic() - t0
    finally:
        assert m.unmount() == 0
    tiered = tree_bytes(os.path.join(tb, "hdb"))
    shutil.rmtree(tb)
    # the same hdb written directly with zstd:19/1M
    db = os.path.join(work, "direct")
    os.makedirs(db)
    m = Mount(db, os.path.join(work, "m-direct"), options=["compress=zstd:19/1M"])
    try:
        t0 = time.monotonic()
        copy_in(src, m.mnt, "hdb")
        subprocess.run(["sync"], check=True)
        wsecs = time.monotonic() - t0
    finally:
        assert m.unmount() == 0
    direct = tree_bytes(os.path.join(db, "hdb"))
    shutil.rmtree(db)
    btrfs = {lv: btrfs_size(src, work, lv) for lv in (1, 15)}
    return {"logical": logical, "lz4": lz4_size, "tiered": tiered, "direct": direct,
            "btrfs": btrfs,
            "files": j["files"], "tier_secs": secs, "direct_secs": wsecs,
            "tier_json": j}, tmpl, rules


def read_run(a, work, tmpl, rules, during, run):
    b = os.path.join(work, f"read-{run}-{int(during)}")
    subprocess.run(["cp", "-a", tmpl, b], check=True)
    opts = ["policy=" + rules, "cache=0"]
    if during:
        opts += ["tier=1s", "tier_rate=50M"]
    m = Mount(b, os.path.join(work, f"m-read-{run}-{int(during)}"), options=opts)
    try:
        files = rt_files(m.mnt)
        if during:
            deadline = time.time() + 20
            while not stats(a.bin, m.mnt)["tier_running"] and time.time() < deadline:
                time.sleep(0.05)
            s0, t0 = stats(a.bin, m.mnt), time.monotonic()
        seq = seq_read(files, a.secs)
        rnd = rand_read(files, a.secs, run)
        res = {"seq": seq, "rand": rnd}
        if during:
            s1 = stats(a.bin, m.mnt)
            el = time.monotonic() - t0
            # the pass still ran (no pass completed) while we measured
            res["pass_running"] = s1["tier_running"] == 1 and s1["tier_passes"] == 0
            # finished files only: a lower bound of the pass's rate
            res["pass_mbps"] = (s1["tier_logical_bytes"] - s0["tier_logical_bytes"]) / MiB / el
    finally:
        assert m.unmount() == 0
    shutil.rmtree(b)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="256M")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=float, default=4.0)
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "squeezefs"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    os.environ["SQUEEZEFS_BIN"] = a.bin
    size = parse_size(a.size)
    work = tempfile.mkdtemp(dir=a.dir, prefix="sqz-bench-tier-")
    try:
        src = os.path.join(work, "src")
        t0 = time.monotonic()
        gen_tree(a.bin, src, size)
        with open(os.path.join(work, "hdb.rules"), "w") as f:
            f.write(RULES)
        print(f"generated {tree_bytes(os.path.join(src, 'hdb'))[0] / MiB:.0f} MiB hdb + "
              f"{tree_bytes(os.path.join(src, 'rt'))[0] / MiB:.0f} MiB rt in "
              f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
        sz, tmpl, rules = measure_sizes(a, work, src)
        print(f"sizes done ({sz['tier_secs']:.0f} s tier, {sz['direct_secs']:.0f} s direct)",
              file=sys.stderr)
        rows = {False: [], True: []}
        for r in range(a.runs):
            order = (False, True) if r % 2 == 0 else (True, False)
            for during in order:
                rows[during].append(read_run(a, work, tmpl, rules, during, r))
                print(f"run {r} {'during' if during else 'idle'}: {rows[during][-1]}",
                      file=sys.stderr)
        report(a, sz, rows)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


def report(a, sz, rows):
    L = sz["logical"] / MiB
    print(f"\nhdb tree: 30 partitions, {L:.0f} MiB logical, {sz['files']} files tiered; "
          f"`--size {a.size}`\n")
    print("| hdb stored as | backing bytes (MiB) | allocated (MiB) | vs direct zstd:19/1M |")
    print("|---|---:|---:|---:|")
    d = sz["direct"][0]
    for name, v in (("written lz4/128K (before tiering)", sz["lz4"]),
                    ("lz4/128K, then `squeezefs tier` -> zstd:19/1M", sz["tiered"]),
                    ("written directly zstd:19/1M", sz["direct"])):
        print(f"| {name} | {v[0] / MiB:.1f} | {v[1] / MiB:.1f} | {100.0 * (v[0] / d - 1):+.2f} % |")
    for lv, v in sz["btrfs"].items():
        if v is None:
            print(f"| btrfs compress-force=zstd:{lv} | skipped (see stderr) | | |")
        else:
            print(f"| btrfs compress-force=zstd:{lv}, written directly (compsize disk usage) "
                  f"| {v[0] / MiB:.1f} | {v[0] / MiB:.1f} | {100.0 * (v[0] / d - 1):+.2f} % |")
    print(f"| raw (the plain files) | {L:.1f} | | {100.0 * (sz['logical'] / d - 1):+.2f} % |")
    print(f"\n`squeezefs tier` pass (unlimited rate): {L:.0f} MiB in {sz['tier_secs']:.1f} s = "
          f"{L / sz['tier_secs']:.2f} MiB/s of file data; writing directly with zstd:19/1M: "
          f"{sz['direct_secs']:.1f} s = {L / sz['direct_secs']:.2f} MiB/s\n")
    idle, dur = rows[False], rows[True]

    def med(rs, k):
        return statistics.median(r[k] for r in rs)

    def vals(rs, k, fmt):
        return ", ".join(fmt.format(r[k]) for r in rs)

    print(f"| foreground (rt partitions, cache=0) | idle | during tier pass (tier_rate=50M) "
          f"| during / idle |")
    print("|---|---:|---:|---:|")
    print(f"| 1 MiB sequential reads, MB/s | {med(idle, 'seq'):.0f} ({vals(idle, 'seq', '{:.0f}')}) "
          f"| {med(dur, 'seq'):.0f} ({vals(dur, 'seq', '{:.0f}')}) "
          f"| {med(dur, 'seq') / med(idle, 'seq'):.2f}x |")
    print(f"| 4 KiB random reads, reads/s | {med(idle, 'rand'):.0f} ({vals(idle, 'rand', '{:.0f}')}) "
          f"| {med(dur, 'rand'):.0f} ({vals(dur, 'rand', '{:.0f}')}) "
          f"| {med(dur, 'rand') / med(idle, 'rand'):.2f}x |")
    print(f"\nbackground pass during the reads: {med(dur, 'pass_mbps'):.2f} MiB/s of file data "
          f"(completed files; per run {vals(dur, 'pass_mbps', '{:.2f}')}); pass still running "
          f"at the end of every measurement: {all(r['pass_running'] for r in dur)}")


if __name__ == "__main__":
    main()
