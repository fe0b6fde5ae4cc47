"""Running PostgreSQL's programs as the 'postgres' user in tests."""
import glob
import os
import shutil
import subprocess


def find_pg(name):
    """Path of a PostgreSQL program (PATH first, then Debian's
    /usr/lib/postgresql/VERSION/bin, newest version), or None."""
    p = shutil.which(name)
    if p:
        return p
    c = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return c[-1] if c else None


def pg_runner(pg, sock, port, logf, mount):
    """as_pg(*cmd, check=True, timeout=300): run cmd as the user `pg` (a
    pwd entry) against the server on unix socket dir `sock` and `port`; a
    failure (with check) raises with the output, the server log `logf` and
    the squeezefs daemon log of `mount`."""
    def as_pg(*cmd, check=True, timeout=300):
        def demote():
            os.setgroups([])
            os.setgid(pg.pw_gid)
            os.setuid(pg.pw_uid)
        env = dict(os.environ, HOME=pg.pw_dir, PGHOST=sock, PGPORT=port, PGUSER="postgres")
        r = subprocess.run(list(cmd), preexec_fn=demote, capture_output=True, text=True,
                           timeout=timeout, env=env, cwd="/")
        if check and r.returncode != 0:
            log = open(logf).read()[-3000:] if os.path.exists(logf) else ""
            raise AssertionError(f"{cmd} failed ({r.returncode}):\n{r.stdout[-2000:]}\n"
                                 f"{r.stderr[-2000:]}\n--- server log:\n{log}\n"
                                 f"--- daemon log:\n{mount.log()[-2000:]}")
        return r
    return as_pg
