"""Simulated power loss: the daemon runs with tests/powerloss_shim.c
preloaded, which journals the old contents before every write to BACKING
and marks files durable at fsync. After kill -9 the test undoes the
unsynced writes — all of them, a per-file prefix with the next write torn,
or a random subset (reordering) — remounts WITHOUT the shim and checks that
every fsync'ed byte reads back, all files are readable and verify is clean.
Seeds are printed; rerun with SQZ_SEED=N."""
import os
import random
import shutil
import struct
import sys
import subprocess
import time

import pytest

from crashlib import (assert_verify_after_crash, kill_under_writer, round_check, round_seeds,
                      start_writer)
from mountlib import run_cli

HERE = os.path.dirname(os.path.abspath(__file__))
T_WRITE, T_TRUNC, T_SYNC, T_SYNCALL, T_RENAME, T_UNLINK, T_EXCHANGE = 1, 2, 3, 4, 5, 6, 7
HDR = struct.Struct("<4sBHHQQQQ")


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc) to build the power-loss shim")
    out = tmp_path_factory.mktemp("shim") / "powerloss_shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(out),
                    os.path.join(HERE, "powerloss_shim.c"), "-ldl", "-lpthread"],
                   check=True)
    return str(out)


def read_journal(path):
    recs = []
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + HDR.size <= len(data):
        magic, typ, pl, p2l, off, oldlen, oldsize, arg = HDR.unpack_from(data, pos)
        assert magic == b"SQPL", f"bad journal record at {pos}"
        pos += HDR.size
        p = data[pos:pos + pl].decode()
        pos += pl
        p2 = data[pos:pos + p2l].decode()
        pos += p2l
        old = data[pos:pos + oldlen]
        pos += oldlen
        recs.append(dict(type=typ, path=p, path2=p2, off=off, old=old,
                         oldsize=oldsize, arg=arg))
    return recs


def unsynced_records(recs):
    """Walk backwards; return the records still to be undone, newest first,
    each with 'real' = the path the data lives at now."""
    alias, synced, out = {}, set(), []

    def real(p):
        return alias.get(p, p)

    for r in reversed(recs):
        t = r["type"]
        if t == T_RENAME:
            a, b = r["path"], r["path2"]
            if a != "-":
                alias[a] = real(b) if b != "-" else None
            if b != "-" and b != a:
                # before the rename, name b was another (now gone) inode
                alias[b] = None if a != "-" else alias.get(b)
        elif t == T_EXCHANGE:
            # the two names swapped inodes (replace.c): before, each named
            # what the other names now
            a, b = r["path"], r["path2"]
            ra, rb = real(a), real(b)
            if a != "-":
                alias[a] = rb if b != "-" else None
            if b != "-":
                alias[b] = ra if a != "-" else None
        elif t == T_UNLINK:
            alias[r["path"]] = None
        elif t == T_SYNCALL:
            break  # everything before is durable
        elif t == T_SYNC:
            rp = real(r["path"])
            if rp:
                synced.add(rp)
        else:
            rp = real(r["path"])
            if rp is None or rp in synced:
                continue
            out.append(dict(r, real=rp))
    return out


def uncovered(a, b, cover):
    """Parts of [a, b) not covered by the intervals in cover."""
    parts = [(a, b)]
    for c0, c1 in cover:
        nxt = []
        for p0, p1 in parts:
            if c1 <= p0 or c0 >= p1:
                nxt.append((p0, p1))
                continue
            if p0 < c0:
                nxt.append((p0, c0))
            if c1 < p1:
                nxt.append((c1, p1))
        parts = nxt
    return parts


def undo(r, start=None, cover=(), kept_end=0):
    """Restore the bytes record r changed (from `start` on, except `cover`)
    and set the size it had before (but keep kept_end / a torn prefix)."""
    path = r["real"]
    if not os.path.exists(path):
        return
    if r["type"] == T_TRUNC:
        os.truncate(path, max(r["oldsize"], kept_end))
        return
    off, old, oldsize = r["off"], r["old"], r["oldsize"]
    n = max(r["arg"], len(old))
    s = off if start is None else start
    with open(path, "r+b") as f:
        for p0, p1 in uncovered(s, off + n, cover):
            p1c = min(p1, max(oldsize, kept_end, s))  # nothing past the final size
            if p1c <= p0:
                continue
            buf = bytearray(p1c - p0)
            o0 = p0 - off
            src = old[o0:o0 + len(buf)]
            buf[:len(src)] = src   # bytes past the old size become zeros
            f.seek(p0)
            f.write(buf)
        size = os.fstat(f.fileno()).st_size
        final = max(oldsize, kept_end, s if start is not None else 0)
        if size > final:
            f.truncate(final)


def apply_power_loss(recs, mode, rnd):
    todo = unsynced_records(recs)  # newest first
    if mode == "all":
        for r in todo:
            undo(r)
        return f"undid all {len(todo)} unsynced records"
    by_file = {}
    for r in todo:
        by_file.setdefault(r["real"], []).append(r)
    desc = []
    for path, rs in by_file.items():
        has_trunc = any(r["type"] == T_TRUNC for r in rs)
        if mode == "prefix" or has_trunc:
            # rs is newest first: undo the newest k, tear the next one
            k = rnd.randint(0, len(rs))
            for r in rs[:k]:
                undo(r)
            if k < len(rs) and rs[k]["type"] == T_WRITE:
                r = rs[k]
                n = max(r["arg"], len(r["old"]))
                keep = rnd.randint(0, n)
                if r["off"] == 0 and 0 < keep < 8:
                    # a device does not tear inside a file's first sector;
                    # a shorter prefix of the container magic is a plain
                    # file's content (docs/FORMAT.md, "Creation")
                    keep = 0
                undo(r, start=r["off"] + keep)
                desc.append(f"{os.path.basename(path)}: undid {k}, tore 1 after {keep} bytes")
            else:
                desc.append(f"{os.path.basename(path)}: undid {k}")
        else:  # subset: each write independently landed or not
            cover, kept_end, n_undone = [], 0, 0
            for r in rs:
                n = max(r["arg"], len(r["old"]))
                if rnd.random() < 0.5:
                    undo(r, cover=cover, kept_end=kept_end)
                    n_undone += 1
                else:
                    cover.append((r["off"], r["off"] + n))
                    kept_end = max(kept_end, r["off"] + r["arg"])
            desc.append(f"{os.path.basename(path)}: undid {n_undone}/{len(rs)} at random")
    return "; ".join(desc)


def rounds():
    # the seeds are new every run (a random base seed): the runs add up
    return 100 if os.environ.get("SQZ_LONG") == "1" else 12


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["mixed", "small"], ids=["default", "small-files"])
def test_power_loss(mount_factory, tmp_path, shim, workload):
    n = rounds() if workload == "mixed" else max(6, rounds() // 3)
    base, seeds = round_seeds(n)
    backing = tmp_path / "backing"
    backing.mkdir()
    logs, prefixes = [], []
    modes = ["all", "prefix", "subset"]
    for r, seed in enumerate(seeds):
        rnd = random.Random(seed)
        mode = modes[r % 3]
        journal = tmp_path / f"journal{r}"
        logpath = tmp_path / f"round{r}.log"
        logs.append(logpath)
        prefixes.append(f"r{r}-f")
        env = {"LD_PRELOAD": shim, "SQZ_PL_DIR": str(backing),
               "SQZ_PL_JOURNAL": str(journal),
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
        m = mount_factory(backing=backing, env=env)
        w = start_writer(m.mnt, logpath, seed, nfiles=rnd.randint(1, 3), prefix=prefixes[-1],
                         mode=workload)
        time.sleep(rnd.uniform(0.05, 1.0))
        kill_under_writer(m, w, f"round {r} seed {seed} (base {base})")
        recs = read_journal(journal) if journal.exists() else []
        what = apply_power_loss(recs, mode, rnd)

        m2 = mount_factory(backing=backing)
        # this round's log and the one before; every round's now and then
        problems, checked, rc, _ = round_check(m2, logs, prefixes, r, r == len(seeds) - 1)
        ctx = f"round {r} seed {seed} (base {base}), mode {mode}: {what}"
        assert not problems, ctx + "\n" + "\n".join(problems[:20]) + f"\n--- daemon log:\n{m2.log()[-3000:]}"
        assert rc == 0, f"{ctx}: daemon exit {rc}:\n{m2.log()[-3000:]}"
        assert_verify_after_crash(backing, ctx)
        print(f"{ctx}: ok, {len(recs)} journal records, {checked} fsync'ed records checked")
    # the last check covered every round's log
    assert checked > 0, f"no fsync'ed record checked in {len(logs)} rounds (base {base})"


def test_shim_undo_roundtrip(tmp_path, shim):
    """The shim and the undo logic themselves, on a plain program (dd)."""
    d = tmp_path / "d"
    d.mkdir()
    f = d / "x"
    f.write_bytes(b"A" * 10000)
    journal = tmp_path / "j"
    env = dict(os.environ, LD_PRELOAD=shim, SQZ_PL_DIR=str(d), SQZ_PL_JOURNAL=str(journal))
    prog = ("import os\n"
            f"fd = os.open({str(f)!r}, os.O_RDWR)\n"
            "os.pwrite(fd, b'B' * 100, 50)\nos.fsync(fd)\n"
            "os.pwrite(fd, b'C' * 20000, 5000)\nos.ftruncate(fd, 7000)\n"
            "os.pwrite(fd, b'D' * 10, 0)\n")
    # python's os.pwrite/os.fsync call the libc functions the shim wraps
    subprocess.run([sys.executable, "-c", prog], env=env, check=True)
    recs = read_journal(journal)
    assert any(r["type"] == T_SYNC for r in recs), recs
    apply_power_loss(recs, "all", random.Random(1))
    assert f.read_bytes() == b"A" * 50 + b"B" * 100 + b"A" * 9850
