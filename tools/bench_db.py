#!/usr/bin/env python3
"""Databases on squeezefs (issue 14), side by side with the raw directory
(ext4 here), btrfs compress-force=zstd:1 on a loop device, mergerfs as
plain FUSE passthrough and squeezefs (defaults, plus --variant mounts):

  pg -i     PostgreSQL 15 `pgbench -i -s SCALE` (default 20), wall time;
            fsync on, the server's default settings otherwise
  pg TPS    `pgbench -c 4 -j 2 -T DURATION` (default 10 s, the issue used
            30 s: --duration 30) right after each -i
  pg du     the data directory on disk after the last round (server
            stopped; btrfs: compsize's disk usage, others: st_blocks of
            the directory (squeezefs: of the backing directory))
  sqlite    ROWS rows (default 1M) inserted in transactions of 10,000 rows,
            journal_mode WAL and DELETE (synchronous FULL, the default)
  commit    a WAL's commit path alone: a 16 MiB file written with zeros
            and fsync'ed, then COMMITS (default 2000) times an 8 KiB page
            written in turn and fdatasync'ed; the median latency of one
            page + fdatasync (what bounds a database's commits per second)
  git clone `git clone --no-local` of a medium repository (default: the
            fio mirror under /work/.mirror if present, else this repo),
            then `git status` cold (page cache dropped) and warm

Every round runs the targets in a rotated order; the table gives medians
of --runs rounds (default 3) and each target's ratio to btrfs. FUSE mounts
get allow_other (PostgreSQL runs as the `postgres` user). Needs root.

Targets: ext4 (raw dir), btrfs, mergerfs, squeezefs with default options
(the kernel writeback cache, on by default since it was made the
default for issue 14) and with -o nowriteback (every write(2) a request to
the daemon, the default before), --variant NAME=OPTS mounts, --base BIN (an older squeezefs with default options).

Usage (about 8 minutes with the defaults):
  tools/bench_db.py [--runs 3] [--scale 20] [--duration 10]
      [--rows 1000000] [--commits 2000] [--variant NAME=OPTS ...]
      [--only pg,sqlite,git,commit]
      [--git-src REPO] [--dir /var/tmp] [--squeezefs build/src/squeezefs]
Prints a Markdown table (paste into docs/BENCHMARKS.md).
"""
import argparse
import os
import pwd
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from benchlib import (PASSTHROUGH_OPTS, FuseMount, du_bytes,  # noqa: E402
                         drop_caches, is_mounted)

PGBIN = "/usr/lib/postgresql/15/bin"


def log(msg):
    print(f"bench_db: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Target:
    def __init__(self, name, kind, opts="", binary=None):
        self.name, self.kind, self.opts, self.binary = name, kind, opts, binary
        self.fuse = None
        self.loop = None
        self.top = self.backing = self.dir = None

    def setup(self, base, args):
        self.top = os.path.join(base, re.sub(r"[^A-Za-z0-9]+", "_", self.name))
        os.makedirs(self.top)
        os.chmod(self.top, 0o755)
        self.backing = os.path.join(self.top, "backing")
        os.makedirs(self.backing)
        if self.kind == "raw":
            self.dir = self.backing
        elif self.kind == "btrfs":
            img = os.path.join(args.img_dir, f"sqz-benchdb-{os.getpid()}.img")
            self.img = img
            with open(img, "wb") as f:
                f.truncate(16 << 30)
            self.loop = run(["losetup", "-f", "--show", img]).stdout.strip()
            run(["mkfs.btrfs", "-q", "-f", self.loop])
            run(["mount", "-o", "compress-force=zstd:1", self.loop, self.backing])
            self.dir = self.backing
        else:
            mnt = os.path.join(self.top, "mnt")
            if self.kind == "mergerfs":
                cmd = ["mergerfs", "-f", "-o", PASSTHROUGH_OPTS + ",allow_other",
                       self.backing, mnt]
            else:
                opts = "allow_other" + ("," + self.opts if self.opts else "")
                cmd = [self.binary or args.squeezefs, "-f", "-o", opts, self.backing, mnt]
            self.fuse = FuseMount(cmd, mnt, os.path.join(self.top, "daemon.log"))
            self.fuse.start()
            self.dir = mnt
        os.chmod(self.dir, 0o755)

    def disk_bytes(self, rel):
        """Bytes the target allocates for rel (a path under self.dir)."""
        if self.kind == "btrfs":
            r = subprocess.run(["compsize", "-b", os.path.join(self.backing, rel)],
                               capture_output=True, text=True)
            for line in r.stdout.splitlines():
                if line.startswith("TOTAL"):
                    return int(line.split()[2])
            return du_bytes(os.path.join(self.backing, rel))
        return du_bytes(os.path.join(self.backing, rel))

    def teardown(self):
        if self.fuse:
            self.fuse.stop()
            self.fuse = None
        if self.loop:
            subprocess.run(["umount", self.backing], capture_output=True)
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
            self.loop = None
            try:
                os.unlink(self.img)
            except OSError:
                pass


# ---- PostgreSQL ----

class Pg:
    def __init__(self, target, base, port):
        self.t = target
        self.pg = pwd.getpwnam("postgres")
        self.data = os.path.join(target.dir, "pgdata")
        self.sock = tempfile.mkdtemp(prefix="sqz-benchdb-sock-", dir="/tmp")
        os.chown(self.sock, self.pg.pw_uid, self.pg.pw_gid)
        self.logf = os.path.join(self.sock, "server.log")
        self.port = str(port)
        self.running = False

    def as_pg(self, *cmd, timeout=900):
        pg = self.pg

        def demote():
            os.setgroups([])
            os.setgid(pg.pw_gid)
            os.setuid(pg.pw_uid)
        env = dict(os.environ, HOME=pg.pw_dir, PGHOST=self.sock, PGPORT=self.port,
                   PGUSER="postgres")
        r = subprocess.run(list(cmd), preexec_fn=demote, capture_output=True, text=True,
                           timeout=timeout, env=env, cwd="/")
        if r.returncode != 0:
            tail = open(self.logf).read()[-2000:] if os.path.exists(self.logf) else ""
            raise RuntimeError(f"{self.t.name}: {cmd} failed:\n{r.stderr[-2000:]}\n{tail}")
        return r

    def initdb(self):
        os.mkdir(self.data, 0o700)
        os.chown(self.data, self.pg.pw_uid, self.pg.pw_gid)
        t0 = time.monotonic()
        self.as_pg(f"{PGBIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                   "--encoding=UTF8")
        return time.monotonic() - t0

    def start(self):
        self.as_pg(f"{PGBIN}/pg_ctl", "-D", self.data, "-o",
                   f"-k {self.sock} -p {self.port} -c listen_addresses=''",
                   "-l", self.logf, "-w", "-t", "300", "start")
        self.running = True

    def stop(self):
        if self.running:
            self.as_pg(f"{PGBIN}/pg_ctl", "-D", self.data, "-m", "fast", "-w",
                       "-t", "300", "stop")
            self.running = False

    def init_bench(self, scale):
        t0 = time.monotonic()
        self.as_pg(f"{PGBIN}/pgbench", "-i", "-q", "-s", str(scale), "postgres")
        return time.monotonic() - t0

    def tps(self, duration):
        r = self.as_pg(f"{PGBIN}/pgbench", "-c", "4", "-j", "2", "-T", str(duration),
                       "postgres")
        m = re.search(r"tps = ([0-9.]+) \(without initial", r.stdout)
        if not m:
            raise RuntimeError(f"{self.t.name}: no tps in pgbench output:\n{r.stdout}")
        return float(m.group(1))

    def close(self):
        try:
            self.stop()
        except Exception as e:  # keep tearing down
            log(f"{self.t.name}: stop failed: {e}")
        shutil.rmtree(self.sock, ignore_errors=True)


# ---- SQLite ----

def sqlite_insert(path, mode, rows):
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass
    t0 = time.monotonic()
    con = sqlite3.connect(path)
    got = con.execute(f"PRAGMA journal_mode={mode}").fetchone()[0].lower()
    if got != mode.lower():
        raise RuntimeError(f"journal_mode {mode} refused ({got})")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v REAL, note TEXT)")
    per = 10000
    for start in range(0, rows, per):
        n = min(per, rows - start)
        with con:
            con.executemany("INSERT INTO t (name, v, note) VALUES (?, ?, ?)",
                            ((f"name-{i}", i * 0.5, f"row {i} of the bulk insert")
                             for i in range(start, start + n)))
    con.close()
    return time.monotonic() - t0


# ---- commit latency ----

def commit_latency(path, commits):
    """Median seconds of one 8 KiB pwrite + fdatasync into a 16 MiB file
    written with zeros before (as PostgreSQL's WAL segments are)."""
    seg = 16 << 20
    page = bytes((65 + (i * 7) % 26) if i % 5 else (i * 31) & 0xff for i in range(8192))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        zero = b"\0" * (1 << 20)
        for i in range(seg // len(zero)):
            os.write(fd, zero)
        os.fsync(fd)
        lat = []
        for i in range(commits):
            t0 = time.perf_counter()
            os.pwrite(fd, page, (i * 8192) % seg)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(lat)


# ---- git ----

def git_clone(src, dst):
    t0 = time.monotonic()
    run(["git", "clone", "-q", "--no-local", src, dst])
    t_clone = time.monotonic() - t0
    drop_caches({"warned": True})
    t0 = time.monotonic()
    run(["git", "-C", dst, "status", "--porcelain"])
    t_cold = time.monotonic() - t0
    t0 = time.monotonic()
    r = run(["git", "-C", dst, "status", "--porcelain"])
    t_warm = time.monotonic() - t0
    if r.stdout.strip():
        raise RuntimeError(f"git status after clone not clean:\n{r.stdout[:500]}")
    return t_clone, t_cold, t_warm


def default_git_src():
    for c in ("/work/.mirror/axboe+fio/repo",):
        if os.path.isdir(c):
            return c
    return os.path.join(ROOT, ".git")


# ---- main ----

def fmt_t(v):
    return f"{v:.2f} s"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--duration", type=int, default=10, help="pgbench -T seconds")
    ap.add_argument("--rows", type=int, default=1000000, help="SQLite rows")
    ap.add_argument("--commits", type=int, default=2000,
                    help="page + fdatasync rounds of the commit test")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=OPTS: one more squeezefs mount with -o OPTS")
    ap.add_argument("--no-defaults", action="store_true",
                    help="skip the squeezefs defaults and nowriteback targets")
    ap.add_argument("--base", default=None,
                    help="another squeezefs binary (e.g. an older commit), "
                         "run with default options")
    ap.add_argument("--targets", default="raw,btrfs,mergerfs",
                    help="peers to run (comma list of raw, btrfs, mergerfs)")
    ap.add_argument("--only", default="pg,sqlite,git,commit")
    ap.add_argument("--git-src", default=None)
    ap.add_argument("--dir", default="/var/tmp", help="disk-backed directory")
    ap.add_argument("--img-dir", default="/tmp", help="where the btrfs image goes")
    ap.add_argument("--squeezefs", default=os.path.join(ROOT, "build", "squeezefs"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_db: needs root (loop device, allow_other, postgres user)")
    a.squeezefs = os.path.abspath(a.squeezefs)
    only = set(a.only.split(","))
    git_src = a.git_src or default_git_src()

    targets = []
    names = {"raw": "ext4 (raw dir)", "btrfs": "btrfs zstd:1",
             "mergerfs": "mergerfs"}
    for k in a.targets.split(","):
        if not k:
            continue
        if k == "btrfs" and not shutil.which("mkfs.btrfs"):
            log("skipping btrfs: mkfs.btrfs not installed")
            continue
        if k == "mergerfs" and not shutil.which("mergerfs"):
            log("skipping mergerfs: not installed")
            continue
        targets.append(Target(names[k], k))
    if a.base:
        targets.append(Target("squeezefs defaults, --base", "squeezefs",
                              binary=os.path.abspath(a.base)))
    if not a.no_defaults:
        targets.append(Target("squeezefs defaults", "squeezefs"))
        targets.append(Target("squeezefs nowriteback", "squeezefs", "nowriteback"))
    for v in a.variant:
        name, _, opts = v.partition("=")
        targets.append(Target(f"squeezefs {name}", "squeezefs", opts))
    if "pg" in only and not os.path.exists(f"{PGBIN}/pgbench"):
        log(f"skipping PostgreSQL: {PGBIN}/pgbench missing")
        only.discard("pg")

    base = tempfile.mkdtemp(prefix="sqz-benchdb-", dir=a.dir)
    os.chmod(base, 0o755)
    res = {t.name: {} for t in targets}
    extra = {t.name: {} for t in targets}

    def add(t, k, v):
        res[t.name].setdefault(k, []).append(v)

    pgs = {}
    try:
        for t in targets:
            t.setup(base, a)
        if "pg" in only:
            for i, t in enumerate(targets):
                pgs[t.name] = Pg(t, base, 54400 + i)
                extra[t.name]["initdb"] = pgs[t.name].initdb()
                log(f"{t.name}: initdb {extra[t.name]['initdb']:.2f} s")
        for r in range(a.runs):
            order = targets[r % len(targets):] + targets[:r % len(targets)]
            for t in order:
                if "pg" in only:
                    pg = pgs[t.name]
                    pg.start()
                    ti = pg.init_bench(a.scale)
                    tps = pg.tps(a.duration)
                    pg.stop()
                    add(t, "pg -i", ti)
                    add(t, "pg TPS", tps)
                    log(f"round {r + 1} {t.name}: pgbench -i {ti:.2f} s, {tps:.0f} TPS")
                if "sqlite" in only:
                    db = os.path.join(t.dir, "bench.sqlite")
                    for mode in ("WAL", "DELETE"):
                        ts = sqlite_insert(db, mode, a.rows)
                        add(t, f"sqlite {mode}", ts)
                        log(f"round {r + 1} {t.name}: sqlite {mode} {ts:.2f} s")
                    for suffix in ("", "-wal", "-shm", "-journal"):
                        if os.path.exists(db + suffix):
                            os.unlink(db + suffix)
                if "commit" in only:
                    lat = commit_latency(os.path.join(t.dir, "commit.dat"), a.commits)
                    add(t, "commit", lat)
                    log(f"round {r + 1} {t.name}: commit {lat * 1e6:.0f} us")
                if "git" in only:
                    dst = os.path.join(t.dir, f"clone{r}")
                    c, cold, warm = git_clone(git_src, dst)
                    add(t, "git clone", c)
                    add(t, "git status cold", cold)
                    add(t, "git status warm", warm)
                    log(f"round {r + 1} {t.name}: git clone {c:.2f} s, status cold "
                        f"{cold:.3f} s, warm {warm:.3f} s")
                    if r == 0:
                        os.sync()
                        extra[t.name]["git du"] = t.disk_bytes(f"clone{r}")
                    shutil.rmtree(dst)
        if "pg" in only:
            os.sync()
            for t in targets:
                extra[t.name]["pg du"] = t.disk_bytes("pgdata")
    finally:
        for pg in pgs.values():
            pg.close()
        for t in targets:
            try:
                t.teardown()
            except Exception as e:
                log(f"{t.name}: teardown: {e}")
        shutil.rmtree(base, ignore_errors=True)

    med = {n: {k: statistics.median(v) for k, v in d.items()} for n, d in res.items()}
    ref = "btrfs zstd:1" if "btrfs zstd:1" in med else None

    def ratio(n, k):
        if not ref or k not in med[ref] or not med[ref][k]:
            return ""
        return f" ({med[n][k] / med[ref][k]:.2f}x)"

    print(f"\nmedians of {a.runs} rounds, targets in rotated order; (x) = ratio to "
          f"btrfs; squeezefs at {run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD']).stdout.strip()}\n")
    if "pg" in only:
        print(f"PostgreSQL 15: `pgbench -i -s {a.scale}`, then `pgbench -c 4 -j 2 "
              f"-T {a.duration}`; data directory on disk after the last round\n")
        print("| target | initdb | pgbench -i | TPS | data dir on disk |")
        print("|---|---|---|---|---|")
        for t in targets:
            n = t.name
            print(f"| {n} | {fmt_t(extra[n]['initdb'])} | {fmt_t(med[n]['pg -i'])}"
                  f"{ratio(n, 'pg -i')} | {med[n]['pg TPS']:.0f}{ratio(n, 'pg TPS')} | "
                  f"{extra[n]['pg du'] / 1e6:.0f} MB |")
        print()
    if "sqlite" in only:
        print(f"SQLite {sqlite3.sqlite_version}: {a.rows:,} rows in transactions of "
              f"10,000 (synchronous FULL)\n")
        print("| target | journal_mode=WAL | journal_mode=DELETE |")
        print("|---|---|---|")
        for t in targets:
            n = t.name
            print(f"| {n} | {fmt_t(med[n]['sqlite WAL'])}{ratio(n, 'sqlite WAL')} | "
                  f"{fmt_t(med[n]['sqlite DELETE'])}{ratio(n, 'sqlite DELETE')} |")
        print()
    if "commit" in only:
        print(f"Commit path: {a.commits} x (8 KiB page written into a 16 MiB file "
              f"of zeros + fdatasync), median latency of one\n")
        print("| target | page + fdatasync |")
        print("|---|---|")
        for t in targets:
            n = t.name
            print(f"| {n} | {med[n]['commit'] * 1e6:.0f} us{ratio(n, 'commit')} |")
        print()
    if "git" in only:
        head = run(["git", "-C", git_src, "rev-parse", "--short", "HEAD"]).stdout.strip()
        nfiles = len(run(["git", "-C", git_src, "ls-tree", "-r", "HEAD"]).stdout.splitlines())
        print(f"git: `git clone --no-local` of {git_src} (HEAD {head}, {nfiles} files), "
              f"then `git status` with the page cache dropped (cold) and again (warm)\n")
        print("| target | git clone | git status cold | git status warm | clone on disk |")
        print("|---|---|---|---|---|")
        for t in targets:
            n = t.name
            print(f"| {n} | {fmt_t(med[n]['git clone'])}{ratio(n, 'git clone')} | "
                  f"{med[n]['git status cold']:.3f} s{ratio(n, 'git status cold')} | "
                  f"{med[n]['git status warm']:.3f} s{ratio(n, 'git status warm')} | "
                  f"{extra[n]['git du'] / 1e6:.0f} MB |")
    for t in targets:
        if t.fuse and is_mounted(t.fuse.mnt):
            log(f"warning: {t.fuse.mnt} still mounted")


if __name__ == "__main__":
    main()
