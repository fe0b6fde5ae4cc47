"""Recompression is crash-safe: killed at any moment (the offline CLI, or
the daemon doing it for user.squeezefs.recompress), each file is either the
old container or the new one, never broken: same bytes, verify clean."""
import json
import os
import random
import signal
import subprocess
import sys
import time

from fsutil import words
from mountlib import run_cli, squeezefs_bin


def algorithm(path):
    return json.loads(run_cli("stat", "--json", path).stdout)["algorithm"]


def check_old_or_new(path, data, algs):
    # 3: an uncommitted tail the kill left (named, not damage)
    assert run_cli("verify", path, check=False).returncode in (0, 3)
    got = subprocess.run([squeezefs_bin(), "cat", path], capture_output=True)
    assert got.returncode == 0, got.stderr
    assert got.stdout == data, f"{path}: content changed by an interrupted recompress"
    alg = algorithm(path)
    assert alg in algs, alg
    return alg


def test_offline_recompress_killed(tmp_path):
    data = words(12 << 20, 1)
    src = tmp_path / "plain"
    src.write_bytes(data)
    f = tmp_path / "f"
    run_cli("pack", src, f, "--policy", "zstd:1/64K")
    rnd = random.Random(7)
    seen, interrupted = [], 0
    for r in range(8):
        old = algorithm(f)
        new, target = ("gzip", "gzip:9/64K") if old == "zstd" else ("zstd", "zstd:1/64K")
        temps = set(n for n in os.listdir(tmp_path) if n.startswith(".sqz-tmp.f."))
        p = subprocess.Popen([squeezefs_bin(), "recompress", "--policy", target, str(f)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rnd.uniform(0.0, 0.8))
        finished = p.poll() is not None
        p.send_signal(signal.SIGKILL)
        _, err = p.communicate()
        left = set(n for n in os.listdir(tmp_path) if n.startswith(".sqz-tmp.f.")) - temps
        alg = check_old_or_new(f, data, ("zstd", "gzip"))
        seen.append(alg)
        if finished:    # done before the kill: the new container, whole
            assert p.returncode == 0 and alg == new, (r, p.returncode, err, alg)
        elif left:      # killed between the temporary and its rename
            assert alg == old, f"round {r}: temporary {left} left, yet the file is {alg}"
            interrupted += 1
    print(f"algorithms after the kills: {seen}; {interrupted} killed mid-rewrite")
    # the kills must have hit the work itself, not only before or after it
    assert interrupted > 0, f"no kill landed during a rewrite: {seen}"
    # and an uninterrupted one still completes afterwards
    run_cli("recompress", "--policy", "lz4/64K", f)
    assert check_old_or_new(f, data, ("lz4",)) == "lz4"


SETTER = r"""
import os, sys, time
try:
    os.setxattr(sys.argv[1], "user.squeezefs.recompress", sys.argv[2].encode())
    print("OK")
except OSError as e:
    print(f"ERR {time.monotonic():.6f} {e.errno} {e}")
"""


def test_daemon_recompress_killed(mount_factory, tmp_path):
    backing = tmp_path / "backing"
    data = words(12 << 20, 2)
    rnd = random.Random(11)
    m = mount_factory(backing=backing, options=["compress=zstd:1/64K"])
    with open(m.path("f"), "wb") as fh:
        fh.write(data)
        os.fsync(fh.fileno())
    seen, interrupted = [], 0
    for r in range(6):
        old = algorithm(backing / "f")
        new, target = ("gzip", "gzip:9") if old == "zstd" else ("zstd", "zstd:1")
        setter = subprocess.Popen([sys.executable, "-c", SETTER, m.path("f"), target],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(rnd.uniform(0.05, 0.8))
        killed_at = time.monotonic()
        m.kill()
        out, err = setter.communicate(timeout=60)
        alg = check_old_or_new(backing / "f", data, ("zstd", "gzip"))
        seen.append(alg)
        if out.startswith("OK"):   # the recompress returned before the kill
            assert alg == new, f"round {r}: setxattr returned 0, the file is still {alg}"
        else:
            # only the dead daemon may fail the request: an error before
            # the kill (a refused or failed recompress) fails the test
            assert out.startswith("ERR "), (out, err)
            t = float(out.split()[1])
            assert t >= killed_at, (f"round {r}: setxattr failed {killed_at - t:.3f}s before "
                                    f"the kill: {out}\n{m.log()[-2000:]}")
            interrupted += 1
        m = mount_factory(backing=backing, options=["compress=zstd:1/64K"])
        with open(m.path("f"), "rb") as fh:
            assert fh.read() == data
        assert not [n for n in os.listdir(m.mnt) if n.startswith(".sqz-tmp.")]
    print(f"algorithms after the kills: {seen}; {interrupted} killed mid-recompress")
    assert interrupted > 0, f"no kill landed during a recompress: {seen}"
    assert m.unmount() == 0
