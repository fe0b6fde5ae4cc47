"""Crash safety: kill -9 the daemon at random moments of a mixed
append/overwrite/fsync workload (and of a small-file tree being made:
crashlib's "small" mode), remount, and check that every fsync'ed
record reads back exactly, every file is readable end to end and
`squeezefs verify BACKING` is clean. 12 rounds by default (4 for the
other variants), 120 with SQZ_LONG=1. The seeds are new every run (a
random base seed), so the runs add up; they are printed: rerun one with
SQZ_SEED=N."""
import os
import random
import time

import pytest

from crashlib import (assert_verify_after_crash, check_remount, kill_under_writer, round_check,
                      round_seeds, start_writer)
from mountlib import run_cli


def rounds():
    return 120 if os.environ.get("SQZ_LONG") == "1" else 12


@pytest.mark.slow
@pytest.mark.parametrize("options,mode", [((), "mixed"),
                                          (("compress=lz4/4K", "nowriteback"), "mixed"),
                                          ((), "small")],
                         ids=["default", "lz4-4K-nowriteback", "small-files"])
def test_kill9_during_workload(mount_factory, tmp_path, options, mode):
    n = rounds() if not options and mode == "mixed" else max(4, rounds() // 4)
    base, seeds = round_seeds(n)
    backing = tmp_path / "backing"
    backing.mkdir()
    logs, prefixes = [], []
    # A safety net for slow machines (the file must stay < 2 min), never
    # fewer than the minimum rounds.
    short = bool(options) or mode != "mixed"
    budget = 900 if os.environ.get("SQZ_LONG") == "1" else (25 if short else 85)
    t_end = time.time() + budget
    full = False
    for r, seed in enumerate(seeds):
        if time.time() > t_end and r >= (4 if short else 12):
            print(f"time budget reached after {r} rounds")
            break
        rnd = random.Random(seed)
        logpath = tmp_path / f"round{r}.log"
        logs.append(logpath)
        prefixes.append(f"r{r}-f")
        m = mount_factory(options=options, backing=backing)
        w = start_writer(m.mnt, logpath, seed, nfiles=rnd.randint(1, 4), prefix=prefixes[-1],
                         mode=mode)
        time.sleep(rnd.uniform(0.05, 1.2))
        kill_under_writer(m, w, f"round {r} seed {seed} (base {base})")

        m2 = mount_factory(options=options, backing=backing)
        # this round's log and the one before; every round's now and then
        problems, checked, rc, full = round_check(m2, logs, prefixes, r, r == len(seeds) - 1)
        assert not problems, (f"round {r} seed {seed} (base {base}):\n" + "\n".join(problems[:20])
                              + f"\n--- daemon log:\n{m2.log()[-3000:]}")
        assert rc == 0, f"round {r} seed {seed}: daemon exit {rc}:\n{m2.log()[-3000:]}"
        assert_verify_after_crash(backing, f"round {r} seed {seed} (base {base})")
        print(f"round {r} seed {seed}: ok, {checked} fsync'ed records checked exactly"
              + (" (every round's)" if full else ""))
    if not full:    # stopped by the budget: the last check covers every round
        m2 = mount_factory(options=options, backing=backing)
        problems, checked, rc = check_remount(m2, logs)
        assert not problems, (f"after {len(logs)} rounds (base {base}):\n"
                              + "\n".join(problems[:20]) + f"\n--- daemon log:\n{m2.log()[-3000:]}")
        assert rc == 0, f"final check: daemon exit {rc}:\n{m2.log()[-3000:]}"
    # the last check covered every round's log: some records must have been
    # fsync'ed and compared, else the checks above compared nothing
    assert checked > 0, f"no fsync'ed record checked in {len(logs)} rounds (base {base})"


def test_writer_error_before_the_kill_fails(mount_factory, tmp_path):
    """The crash tests' own check: a writer that stopped on an error before
    the daemon was killed (here ENOENT: its directory removed under it)
    fails the round instead of passing as a crash."""
    import shutil
    m = mount_factory()
    logpath = tmp_path / "round.log"
    w = start_writer(m.mnt, logpath, 1, prefix="x", mode="small")
    shutil.rmtree(m.path("xd"), ignore_errors=True)
    deadline = time.time() + 30
    while w.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    with pytest.raises(AssertionError, match="BEFORE the daemon was killed"):
        kill_under_writer(m, w, "self-test")
