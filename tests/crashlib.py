"""Shared pieces of the crash and power-loss tests: a writer process that
appends/overwrites records in several files of a mount and logs what was
fsync'ed, and a checker that compares a (re)mounted tree with that log.

Log format (plain text, one line per event, written by the writer to a file
OUTSIDE the mount, flushed after every line; only the daemon is killed, so
the log survives as written):
  W <seq> <file> <offset> <length> <sha256>   before a write is issued
  S <file> <seq>                              after fsync(file) returned 0:
                                              every W of <file> with seq <=
                                              <seq> is durable

The writer's "small" mode makes a small-file tree instead (issue 14): new
files of 0..4000 bytes, each written with one write and closed, a third of
them fsync'ed before the close, now and then one reopened and appended to.
A file written once and never fsync'ed must then read as empty or as
exactly that write (one commit at close): never other bytes.
"""
import hashlib
import os
import random
import subprocess
import sys
import time

# The writer's exit status when an operation failed (it never stops
# otherwise); its stderr then ends with "STOPPED <monotonic time> <errno> <message>".
STOPPED_BY_ERROR = 4

WRITER = r'''
import hashlib, os, random, sys, time
STOPPED_BY_ERROR = 4
mnt, logpath, seed, nfiles, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
mode = sys.argv[6]
rnd = random.Random(seed)
words = [b"trade", b"quote", b"AAPL", b"MSFT", b"IBM", b"bid", b"ask", b"0.25",
         b"100", b"NYSE", b"2026-11-23", b"12:00:01.123456", b"\n", b","]
def payload(n):
    out = bytearray()
    while len(out) < n:
        if rnd.random() < 0.2:
            out += rnd.randbytes(rnd.randint(1, 64))
        else:
            out += b",".join(rnd.choice(words) for _ in range(8)) + b"\n"
    return bytes(out[:n])
if not os.path.ismount(mnt):
    sys.stderr.write(f"writer: {mnt} is not a mount point\n")
    sys.exit(3)
log = open(logpath, "a", buffering=1)
fds, sizes, seqs = {}, {}, {}
seq = 0
def small_tree():
    global seq
    os.makedirs(os.path.join(mnt, prefix + "d"), exist_ok=True)
    made = []
    log.write("R\n")
    for i in range(1 << 30):
        # at most 1,500 new files a round: every file the kernel knows
        # holds a descriptor in the daemon (one per inode), and the rounds
        # share one tree that the check reads whole (the machine's limit
        # may be 20,000); past that, appends to the round's files
        if made and (rnd.random() < 0.1 or len(made) >= 1500):
            name = rnd.choice(made)                      # append to an old one
            flags = os.O_WRONLY | os.O_APPEND
        else:
            name = f"{prefix}d/{i % 7}-{i}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            made.append(name)
        fd = os.open(os.path.join(mnt, name), flags, 0o644)
        off = os.fstat(fd).st_size
        n = rnd.choice([0, rnd.randint(1, 200), rnd.randint(1, 4000)])
        if n:
            data = payload(n)
            seq += 1
            log.write(f"W {seq} {name} {off} {n} {hashlib.sha256(data).hexdigest()}\n")
            done = 0
            while done < n:
                done += os.write(fd, data[done:])
        if rnd.random() < 0.33:
            os.fsync(fd)
            log.write(f"S {name} {seq}\n")
        os.close(fd)
try:
    if mode == "small":
        small_tree()
    for i in range(nfiles):
        name = f"{prefix}{i}"
        fd = os.open(os.path.join(mnt, name), os.O_RDWR | os.O_CREAT, 0o644)
        fds[name] = fd
        sizes[name] = os.fstat(fd).st_size
    log.write("R\n")  # ready: every file is open on the mount
    while True:
        name = rnd.choice(list(fds))
        fd = fds[name]
        r = rnd.random()
        if r < 0.15:
            (os.fdatasync if rnd.random() < 0.5 else os.fsync)(fd)
            log.write(f"S {name} {seq}\n")
            continue
        n = rnd.choice([rnd.randint(1, 600), rnd.randint(1, 20000), rnd.randint(1, 300000)])
        if r < 0.35 and sizes[name] > 0:
            off = rnd.randrange(0, sizes[name])          # overwrite
        else:
            off = sizes[name]                            # append
        data = payload(n)
        seq += 1
        log.write(f"W {seq} {name} {off} {n} {hashlib.sha256(data).hexdigest()}\n")
        done = 0
        while done < n:
            done += os.pwrite(fd, data[done:], off + done)
        sizes[name] = max(sizes[name], off + n)
except OSError as e:
    # the only way out of the loops: the daemon died under the writer, or
    # an operation failed before that (the test compares with the kill time)
    sys.stderr.write(f"STOPPED {time.monotonic():.6f} {e.errno} {e}\n")
    sys.exit(STOPPED_BY_ERROR)
'''


def start_writer(mnt, logpath, seed, nfiles=3, prefix="f", timeout=30, mode="mixed"):
    """Start the writer and return once it has opened its files on the
    mount (its "R" line), so a kill that follows always hits a live
    workload (else a slow start could open files after the daemon died,
    on the bare mount point directory). mode: "mixed" (appends, overwrites
    and fsyncs in nfiles files) or "small" (a small-file tree)."""
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(mnt), str(logpath),
                          str(seed), str(nfiles), prefix, mode],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if p.poll() is not None:
            break
        try:
            with open(logpath) as f:
                if any(line == "R\n" for line in f):
                    return p
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    err = stop_writer(p, timeout=1)
    raise AssertionError(f"writer did not start (exit {p.returncode}): {err}")


def stop_writer(p, timeout=30):
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    return err.decode(errors="replace") if err else ""


def kill_under_writer(m, w, ctx):
    """kill -9 the daemon of mount m under the running writer w, then stop
    the writer. The writer must have stopped on an error that came after
    the kill: an error before it (EIO from the daemon, say) is a failure
    the crash would otherwise hide."""
    killed_at = time.monotonic()
    m.kill()
    err = stop_writer(w)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    assert w.returncode == STOPPED_BY_ERROR and last.startswith("STOPPED "), (
        f"{ctx}: the writer did not stop on an error of the dead mount "
        f"(exit {w.returncode}):\n{err}")
    t, errno_, msg = last.split(" ", 3)[1:]
    assert float(t) >= killed_at, (
        f"{ctx}: the writer got errno {errno_} ({msg}) {killed_at - float(t):.3f}s "
        f"BEFORE the daemon was killed:\n{err}\n--- daemon log:\n{m.log()[-3000:]}")
    return err


def parse_log(logpath):
    """-> (writes, synced): writes = list of (seq, file, off, len, sha) in
    issue order; synced = {file: highest durable seq}."""
    writes, synced = [], {}
    with open(logpath) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # torn last line of a killed writer
            p = line.split()
            if p[0] == "W":
                writes.append((int(p[1]), p[2], int(p[3]), int(p[4]), p[5]))
            elif p[0] == "S":
                synced[p[1]] = max(synced.get(p[1], 0), int(p[2]))
    return writes, synced


def check_tree(mnt, logpath):
    """Check the durable promises of the log against files under mnt.
    Returns a list of problem strings (empty = all good), and the number of
    records checked exactly."""
    writes, synced = parse_log(logpath)
    problems = []
    checked = 0
    by_file = {}
    for w in writes:
        by_file.setdefault(w[1], []).append(w)
    for name, ws in by_file.items():
        path = os.path.join(mnt, name)
        durable = [w for w in ws if w[0] <= synced.get(name, 0)]
        if not durable and len(ws) == 1 and ws[0][2] == 0 and ws[0][3] <= 4000:
            # written once, never fsync'ed: empty, or exactly that write
            try:
                with open(path, "rb") as f:
                    content = f.read()
            except FileNotFoundError:
                continue  # its creation was lost with the crash
            except OSError as e:
                problems.append(f"{name}: cannot read: {e}")
                continue
            if content and hashlib.sha256(content).hexdigest() != ws[0][4]:
                problems.append(f"{name}: never fsync'ed, reads {len(content)} bytes "
                                f"that are neither empty nor its one write of {ws[0][3]}")
            continue
        if not durable:
            continue
        try:
            with open(path, "rb") as f:
                content = f.read()
        except OSError as e:
            problems.append(f"{name}: cannot read: {e}")
            continue
        need = max(w[2] + w[3] for w in durable)
        if len(content) < need:
            problems.append(f"{name}: length {len(content)} < {need}, the end of fsync'ed data")
        for i, w in enumerate(ws):
            if w[0] > synced.get(name, 0):
                break
            seq, _, off, n, sha = w
            # Only ranges no later write (durable or not) touched are exact.
            later = ws[i + 1:]
            if any(l[2] < off + n and off < l[2] + l[3] for l in later):
                continue
            got = content[off:off + n]
            if hashlib.sha256(got).hexdigest() != sha:
                problems.append(f"{name}: fsync'ed write #{seq} at {off}+{n} differs "
                                f"(read {len(got)} bytes)")
            else:
                checked += 1
    return problems, checked


def read_all_files(root, prefixes=None):
    """Read every regular file end to end (with prefixes: only under the
    entries of root whose names start with one of them); returns problems."""
    problems = []
    for dp, dirs, files in os.walk(root):
        if prefixes is not None and dp == str(root):
            dirs[:] = [d for d in dirs if d.startswith(tuple(prefixes))]
            files = [f for f in files if f.startswith(tuple(prefixes))]
        for fn in files:
            p = os.path.join(dp, fn)
            try:
                with open(p, "rb") as f:
                    while f.read(1 << 20):
                        pass
            except OSError as e:
                problems.append(f"{p}: {e}")
    return problems


def round_seeds(n, base=None):
    """Per-round seeds from a base seed ($SQZ_SEED or random), printed."""
    if base is None:
        base = int(os.environ.get("SQZ_SEED", random.randrange(1 << 30)))
    rnd = random.Random(base)
    print(f"base seed {base} (rerun with SQZ_SEED={base})")
    return base, [rnd.randrange(1 << 30) for _ in range(n)]


def check_remount(m2, logs, prefixes=None):
    """After a crash and a new mount m2: every fsync'ed record of every
    writer log reads back exactly and every file reads end to end (with
    prefixes: the files of those names only); then m2 is unmounted.
    Returns (problems, records checked, daemon exit code)."""
    problems, checked = [], 0
    for lp in logs:
        p, c = check_tree(m2.mnt, lp)
        problems += p
        checked += c
    problems += read_all_files(m2.mnt, prefixes)
    return problems, checked, m2.unmount()


# Rounds of the crash tests: each round checks its own log and the one
# before (whose files the round's daemon may still have packed or marked
# durable); every FULL_EVERY rounds and in the last round, every round's
# log and every file of BACKING (a later crash must not have damaged what
# an earlier round made durable; damage stays, so it is found then).
FULL_EVERY = 5


def round_check(m2, logs, prefixes, r, last):
    """check_remount for round r (0-based) of a crash test whose rounds
    used logs[i] and file prefix prefixes[i]; last: the final round. Returns
    (problems, checked, rc, full)."""
    full = last or r % FULL_EVERY == FULL_EVERY - 1
    if full:
        return check_remount(m2, logs) + (True,)
    return check_remount(m2, logs[-2:], prefixes[-2:]) + (False,)


def assert_verify_after_crash(backing, ctx):
    """`squeezefs verify` of BACKING after a crash: clean, or an uncommitted
    tail the crash left (exit 3: named, not damage); never damage."""
    from mountlib import run_cli
    v = run_cli("verify", backing, check=False)
    assert v.returncode in (0, 3), f"{ctx}: verify exit {v.returncode}:\n{v.stdout}\n{v.stderr}"
