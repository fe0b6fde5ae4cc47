"""Real programs on a squeezefs mount: PostgreSQL (pgbench, immediate stop,
restart; --long only), SQLite in WAL mode, git (commit, gc, fsck), tar + diff -r.
Each test skips with a message if its program is missing."""
import os
import pwd
import random
import shutil
import sqlite3
import subprocess
import tempfile

import pytest

from mountlib import Mount
from pglib import find_pg, pg_runner


def gen_tree(root, nfiles, seed):
    rnd = random.Random(seed)
    words = ["lorem", "ipsum", "dolor", "sit", "amet", "trade", "quote", "\n"]
    for i in range(nfiles):
        d = os.path.join(root, f"d{i % 17}", f"e{i % 5}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"file{i}.txt"), "wb") as f:
            if i % 7 == 0:
                f.write(os.urandom(rnd.randint(0, 70000)))
            else:
                n = rnd.choice([0, 10, 1000, 50000, 300000])
                f.write(" ".join(rnd.choice(words) for _ in range(n // 5)).encode())


@pytest.fixture
def world_mount():
    """A mount with allow_other in a 0755 temp dir (for other users)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (allow_other + a second user)")
    top = tempfile.mkdtemp(prefix="sqz-real-")
    os.chmod(top, 0o755)
    backing = os.path.join(top, "backing")
    os.mkdir(backing)
    state = {"m": None}

    def mount():
        state["m"] = Mount(backing, os.path.join(top, "mnt"), options=("allow_other",))
        os.chmod(state["m"].mnt, 0o755)
        return state["m"]

    try:
        yield top, mount
    finally:
        m = state["m"]
        if m is not None and m.proc is not None:
            try:
                m.unmount(timeout=60)
            except Exception:
                m.kill()
        shutil.rmtree(top, ignore_errors=True)


# The default run has PostgreSQL in tests/test_db.py (pgbench, the daemon
# killed under it, recovery, the invariant and pg_amcheck): a harsher case
# of this one (an immediate stop with the daemon alive).
@pytest.mark.long
def test_postgresql_pgbench(world_mount):
    initdb, pg_ctl, pgbench, psql = (find_pg(n) for n in ("initdb", "pg_ctl", "pgbench", "psql"))
    if not all((initdb, pg_ctl, pgbench, psql)):
        pytest.skip("PostgreSQL not installed (initdb/pg_ctl/pgbench/psql)")
    try:
        pg = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no 'postgres' user")
    top, mount = world_mount
    m = mount()
    data = m.path("pgdata")
    os.mkdir(data, 0o700)
    os.chown(data, pg.pw_uid, pg.pw_gid)
    sock = tempfile.mkdtemp(prefix="sqz-pgsock-")
    os.chown(sock, pg.pw_uid, pg.pw_gid)
    logf = os.path.join(sock, "server.log")
    port = "54329"

    as_pg = pg_runner(pg, sock, port, logf, m)

    opts = f"-k {sock} -p {port} -c listen_addresses=''"
    started = False
    try:
        as_pg(initdb, "-D", data, "-A", "trust", "-U", "postgres", "--encoding=UTF8")
        as_pg(pg_ctl, "-D", data, "-o", opts, "-l", logf, "-w", "-t", "120", "start")
        started = True
        as_pg(pgbench, "-i", "-s", "2", "postgres")
        r = as_pg(pgbench, "-T", "10", "-c", "2", "postgres")
        print(r.stdout[-600:])
        as_pg(pg_ctl, "-D", data, "-m", "immediate", "-w", "stop")
        started = False
        as_pg(pg_ctl, "-D", data, "-o", opts, "-l", logf, "-w", "-t", "120", "start")
        started = True
        r = as_pg(psql, "-At", "-c", "select count(*) from pgbench_accounts", "postgres")
        assert r.stdout.strip() == "200000", r.stdout
        r = as_pg(psql, "-At", "-c", "select count(*) from pgbench_branches", "postgres")
        assert r.stdout.strip() == "2", r.stdout
        as_pg(pg_ctl, "-D", data, "-m", "fast", "-w", "stop")
        started = False
    finally:
        if started:
            as_pg(pg_ctl, "-D", data, "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(sock, ignore_errors=True)
    assert m.unmount() == 0, m.log()[-3000:]


def test_sqlite_wal(mount_factory):
    m = mount_factory()
    db = m.path("test.db")
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() == "wal"
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v REAL)")
    for tx in range(100):
        with con:
            con.executemany("INSERT INTO t (name, v) VALUES (?, ?)",
                            [(f"name-{tx}-{i}" * 3, tx * 100 + i) for i in range(100)])
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    backing = m.backing
    assert m.unmount() == 0, m.log()[-3000:]
    m2 = mount_factory(backing=backing)
    con = sqlite3.connect(m2.path("test.db"))
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 10000
    assert con.execute("SELECT sum(v) FROM t").fetchone()[0] == sum(range(10000))
    con.close()
    assert m2.unmount() == 0


def test_git_commit_gc_fsck(mount_factory):
    if not shutil.which("git"):
        pytest.skip("git not installed")
    m = mount_factory()
    repo = m.path("repo")
    os.mkdir(repo)
    gen_tree(repo, 300, 42)

    def git(*args):
        r = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                            "-c", "safe.directory=*", "-c", "init.defaultBranch=main", *args],
                           cwd=repo, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"git {args}: {r.stdout}\n{r.stderr}\n--- daemon:\n{m.log()[-2000:]}"
        return r.stdout

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "tree")
    with open(os.path.join(repo, "d0", "e0", "file0.txt"), "ab") as f:
        f.write(b"change\n")
    git("commit", "-q", "-a", "-m", "change")
    git("gc", "-q")                      # repack, prune the loose objects
    git("fsck", "--full", "--strict")
    assert git("rev-list", "--count", "HEAD").strip() == "2"
    assert git("status", "--porcelain").strip() == ""


def test_tar_extract_diff(mount_factory, tmp_path):
    for tool in ("tar", "diff"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed")
    src = tmp_path / "src"
    src.mkdir()
    gen_tree(str(src), 250, 7)
    os.symlink("d0/e0/file0.txt", src / "a-link")
    tarball = tmp_path / "tree.tar"
    subprocess.run(["tar", "cf", str(tarball), "-C", str(src), "."], check=True)
    m = mount_factory()
    dst = m.path("x")
    os.mkdir(dst)
    subprocess.run(["tar", "xf", str(tarball), "-C", dst], check=True)
    r = subprocess.run(["diff", "-r", "--no-dereference", str(src), dst],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
