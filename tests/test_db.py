"""Databases on squeezefs (issue 14): FUSE_HANDLE_KILLPRIV_V2 (no
security.capability round trip per write, set-ID bits still cleared as the
VFS does), PostgreSQL and SQLite recovering after the daemon is killed."""
import os
import platform
import pwd
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time

import pytest

from crashlib import assert_verify_after_crash
from mountlib import Mount
from pglib import find_pg, pg_runner


def stats(mnt):
    import json
    return json.loads(os.getxattr(mnt, "user.squeezefs.stats"))


def kernel_has_v2():
    """FUSE_HANDLE_KILLPRIV_V2 is in Linux 5.11 and later."""
    rel = platform.release().split(".")
    try:
        return (int(rel[0]), int(rel[1].split("-")[0])) >= (5, 11)
    except (ValueError, IndexError):
        return False


def nobody():
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user")


def as_user(u, code, *args):
    """Run python code as user u (a second user writing through the mount)."""
    def demote():
        os.setgroups([])
        os.setgid(u.pw_gid)
        os.setuid(u.pw_uid)
    r = subprocess.run(["python3", "-c", code, *args], preexec_fn=demote,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.fixture
def public_mount(sqz_bin):
    """A mount with allow_other in a 0755 temp dir (other users may use
    it; pytest's own temp dirs are private to root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (allow_other + a second user)")
    top = tempfile.mkdtemp(prefix="sqz-db-")
    os.chmod(top, 0o755)
    made = []

    def make(options=(), backing=None):
        b = backing or os.path.join(top, "backing")
        os.makedirs(b, exist_ok=True)
        m = Mount(b, os.path.join(top, "mnt"), options=["allow_other", *options])
        os.chmod(m.mnt, 0o777)
        made.append(m)
        return m
    try:
        yield make
    finally:
        for m in made:
            if m.proc is not None:
                try:
                    m.unmount()
                except Exception:
                    m.kill()
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("opts", [[], ["nowriteback"]], ids=["writeback", "nowriteback"])
def test_writes_ask_no_security_xattr(mount_factory, opts):
    """With KILLPRIV_V2 the kernel checks security.capability once per
    inode, not before every write(2) (that was one GETXATTR round trip per
    8 KiB PostgreSQL page)."""
    if not kernel_has_v2():
        pytest.skip("kernel older than 5.11 has no FUSE_HANDLE_KILLPRIV_V2")
    m = mount_factory(options=opts)
    s0 = stats(m.mnt)
    assert s0["killpriv_v2"] == 1
    fd = os.open(m.path("rel"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        for i in range(300):
            os.pwrite(fd, bytes([i % 251]) * 8192, i * 8192)
        os.fsync(fd)
    finally:
        os.close(fd)
    s1 = stats(m.mnt)
    assert s1["security_xattr_gets"] - s0["security_xattr_gets"] <= 2
    with open(m.path("rel"), "rb") as f:
        data = f.read()
    assert data == b"".join(bytes([i % 251]) * 8192 for i in range(300))


def test_setid_bits_cleared_like_the_vfs(public_mount):
    """The daemon now clears set-ID bits (the kernel no longer does): a
    write, a truncate and an open(O_TRUNC) by a user without CAP_FSETID
    clear S_ISUID and (group-executable) S_ISGID; root's writes keep them;
    set-group-ID without group execute stays."""
    if not kernel_has_v2():
        pytest.skip("kernel older than 5.11 has no FUSE_HANDLE_KILLPRIV_V2")
    u = nobody()
    m = public_mount()
    cases = {
        "write": "import os,sys; fd=os.open(sys.argv[1], os.O_WRONLY); os.write(fd, b'x'); os.close(fd)",
        "truncate": "import os,sys; os.truncate(sys.argv[1], 1)",
        "otrunc": "import os,sys; os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC))",
    }
    for name, code in cases.items():
        p = m.path(name)
        with open(p, "wb") as f:
            f.write(b"#!/bin/sh\n")
        os.chown(p, u.pw_uid, u.pw_gid)
        os.chmod(p, 0o6775)
        as_user(u, code, p)
        back = os.stat(os.path.join(m.backing, name)).st_mode & 0o7777
        assert back == 0o775, f"{name}: backing mode {oct(back)}"
    # set-group-ID without group execute (mandatory-locking style) stays
    p = m.path("sgid-noexec")
    with open(p, "wb") as f:
        f.write(b"data")
    os.chown(p, u.pw_uid, u.pw_gid)
    os.chmod(p, 0o2664)
    as_user(u, cases["write"], p)
    assert os.stat(os.path.join(m.backing, "sgid-noexec")).st_mode & 0o7777 == 0o2664
    # root has CAP_FSETID: its writes keep the bits
    p = m.path("root-write")
    with open(p, "wb") as f:
        f.write(b"#!/bin/sh\n")
    os.chmod(p, 0o4755)
    with open(p, "r+b") as f:
        f.write(b"#")
    assert os.stat(os.path.join(m.backing, "root-write")).st_mode & 0o7777 == 0o4755


# ---- PostgreSQL: kill -9 of the daemon, remount, recovery ----

@pytest.mark.parametrize("opts", [[], ["nowriteback"]], ids=["writeback", "nowriteback"])
def test_postgresql_survives_daemon_kill(public_mount, opts):
    """initdb, pgbench -i -s 1, a short pgbench run; kill -9 the squeezefs
    daemon under the running server (then the server), remount: PostgreSQL
    recovers from its WAL, pgbench's invariant holds (the balances of
    accounts, tellers, branches and the history's deltas sum up equal;
    with -n pgbench does not empty the history before a run) and
    pg_amcheck finds the tables and indexes intact."""
    names = ("initdb", "pg_ctl", "pgbench", "psql", "pg_amcheck")
    bins = {n: find_pg(n) for n in names}
    if not all(bins.values()):
        pytest.skip("PostgreSQL not installed (initdb/pg_ctl/pgbench/psql/pg_amcheck)")
    try:
        pg = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no 'postgres' user")
    m = public_mount(opts)
    data = m.path("pgdata")
    os.mkdir(data, 0o700)
    os.chown(data, pg.pw_uid, pg.pw_gid)
    sock = tempfile.mkdtemp(prefix="sqz-pgsock-")
    os.chown(sock, pg.pw_uid, pg.pw_gid)
    logf = os.path.join(sock, "server.log")
    port = "54331" if opts else "54330"

    as_pg = pg_runner(pg, sock, port, logf, m)

    def q(sql):
        return as_pg(bins["psql"], "-At", "-c", sql, "postgres").stdout.strip()

    srv = f"-k {sock} -p {port} -c listen_addresses=''"
    postmaster = None
    try:
        as_pg(bins["initdb"], "-D", data, "-A", "trust", "-U", "postgres", "--encoding=UTF8")
        as_pg(bins["pg_ctl"], "-D", data, "-o", srv, "-l", logf, "-w", "-t", "120", "start")
        with open(os.path.join(data, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        as_pg(bins["pgbench"], "-i", "-s", "1", "postgres")
        as_pg(bins["pgbench"], "-n", "-c", "2", "-j", "2", "-T", "3", "postgres")
        # a crash while clients are writing
        load = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", "env", f"PGHOST={sock}", f"PGPORT={port}",
             bins["pgbench"], "-n", "-c", "2", "-T", "20", "postgres"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)
        backing = m.backing
        m.kill()
        os.kill(postmaster, signal.SIGKILL)
        load.wait(timeout=60)
        for _ in range(300):  # wait until it is gone (its backends follow)
            try:
                os.kill(postmaster, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        for _ in range(300):
            r = subprocess.run(["pgrep", "-u", "postgres", "-f", f"-p {port}"],
                               capture_output=True)
            if r.returncode != 0:
                break
            time.sleep(0.1)
        postmaster = None
        assert_verify_after_crash(backing, "after kill -9 under PostgreSQL")
        m2 = public_mount(opts, backing=backing)
        assert m2.path("pgdata") == data
        os.unlink(os.path.join(data, "postmaster.pid"))
        as_pg(bins["pg_ctl"], "-D", data, "-o", srv, "-l", logf, "-w", "-t", "120", "start")
        with open(os.path.join(data, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        assert q("select count(*) from pgbench_accounts") == "100000"
        sums = q("select (select sum(abalance) from pgbench_accounts), "
                 "(select sum(tbalance) from pgbench_tellers), "
                 "(select sum(bbalance) from pgbench_branches), "
                 "(select coalesce(sum(delta), 0) from pgbench_history)").split("|")
        assert len(set(sums)) == 1, sums
        assert int(q("select count(*) from pgbench_history")) > 0
        r = as_pg(bins["pg_amcheck"], "--install-missing", "--heapallindexed", "postgres",
                  check=False)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        as_pg(bins["pg_ctl"], "-D", data, "-m", "fast", "-w", "stop")
        postmaster = None
        assert m2.unmount() == 0, m2.log()[-3000:]
    finally:
        if postmaster:
            try:
                os.kill(postmaster, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(sock, ignore_errors=True)


# ---- SQLite: kill -9 of the daemon during bulk inserts ----

SQLITE_WRITER = r"""
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("PRAGMA journal_mode=" + sys.argv[2])
con.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, tx INT, v TEXT)")
tx = 0
while True:
    with con:
        con.executemany("INSERT INTO t (tx, v) VALUES (?, ?)",
                        [(tx, "row %d of transaction %d" % (i, tx)) for i in range(500)])
    tx += 1
    print(tx, flush=True)
"""


@pytest.mark.parametrize("mode", ["WAL", "DELETE"])
def test_sqlite_survives_daemon_kill(mount_factory, tmp_path, mode):
    """Bulk inserts in transactions of 500 rows; kill -9 of the daemon in
    the middle; after the remount integrity_check is ok and every
    transaction is there whole or not at all, at least up to the last one
    the writer saw committed before the crash (synchronous=FULL)."""
    m = mount_factory()
    db = m.path("bulk.db")
    out = open(tmp_path / "writer.out", "w+")
    w = subprocess.Popen(["python3", "-c", SQLITE_WRITER, db, mode], stdout=out,
                         stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        out.seek(0)
        if len(out.read().split()) >= 20:
            break
        time.sleep(0.05)
    backing = m.backing
    out.seek(0)
    seen = len(out.read().split())  # committed (and fsynced) before the kill
    m.kill()
    w.kill()
    w.wait()
    assert seen >= 20, "the writer made no progress"
    assert_verify_after_crash(backing, f"SQLite {mode}")
    m2 = mount_factory(backing=backing)
    con = sqlite3.connect(m2.path("bulk.db"))
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = con.execute("SELECT tx, count(*) FROM t GROUP BY tx ORDER BY tx").fetchall()
    con.close()
    assert all(n == 500 for _, n in rows), rows[-3:]
    assert [tx for tx, _ in rows] == list(range(len(rows)))
    assert len(rows) >= seen
    assert m2.unmount() == 0, m2.log()[-3000:]


# ---- the shipped rule file for PostgreSQL data directories ----

RULES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "examples", "postgresql.rules")


def test_postgresql_rules_check_and_match(cli):
    r = cli("policy", "check", RULES)
    assert r.stdout.strip().endswith("3 rules, ok"), r.stdout
    paths = ["pgdata/base/5/16384", "pgdata/base/5/16384_fsm", "db/pg15/global/1262",
             "pgdata/pg_wal/000000010000000000000001", "base/1/2",
             "pgdata/postgresql.conf", "pgdata/pg_xact/0000"]
    out = cli("policy", "test", RULES, *paths).stdout.splitlines()
    got = dict(line.split(": ", 1) for line in out)
    for p in paths[:5]:
        assert got[p].startswith("zstd:1/16K"), (p, got[p])
    for p in paths[5:]:
        assert got[p] == "no rule matches", (p, got[p])


def test_postgresql_rules_on_a_mount(mount_factory):
    """Files created below base/, global/ and pg_wal/ of a data directory
    get 16 KiB blocks, the others the mount default (128 KiB)."""
    m = mount_factory(options=["writeback", f"policy={RULES}"])
    for d in ("pgdata/base/5", "pgdata/global", "pgdata/pg_wal", "pgdata/pg_xact"):
        os.makedirs(m.path(d))
    want = {"pgdata/base/5/16384": 14, "pgdata/global/1262": 14,
            "pgdata/pg_wal/000000010000000000000001": 14,
            "pgdata/pg_xact/0000": 17, "pgdata/postgresql.conf": 17}
    for rel in want:
        with open(m.path(rel), "wb") as f:
            f.write(os.urandom(100) * 200)
    import json
    for rel, log2bs in want.items():
        st = json.loads(os.getxattr(m.path(rel), "user.squeezefs.stat"))
        assert st["logicalBlockSize"] == log2bs, (rel, st)
        assert st["algorithm"] == "zstd" and st["zipLevel"] == 1, (rel, st)
    assert m.unmount() == 0
