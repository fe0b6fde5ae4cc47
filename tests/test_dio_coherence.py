"""Direct writes and the kernel's page cache (xfstests generic/451): a
file rewritten by asynchronous O_DIRECT writes while other processes read
it buffered; every buffered read through a new open after a completed
write sees that write's bytes (tests/dio_cycle.c). Before: the open kept
the kernel's pages (keep_cache) that a racing buffered read had filled
with the bytes from before the write: stale data at the first cycle."""
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def dio_cycle(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("dio") / "dio_cycle")
    subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-o", out,
                    os.path.join(HERE, "dio_cycle.c")], check=True)
    return out


@pytest.mark.parametrize("opts", [[], ["nowriteback", "nopack"]])
def test_buffered_reads_after_async_direct_writes_are_fresh(mount_factory,
                                                             dio_cycle, opts):
    m = mount_factory(options=opts)
    r = subprocess.run([dio_cycle, m.path("f"), str(640 << 10), "3", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr + m.log()[-1500:]
    assert "no stale read" in r.stdout
    with open(m.path("f"), "rb") as f:
        d = f.read()
    assert len(d) == 640 << 10 and d in (b"\x55" * len(d), b"\xaa" * len(d))
    assert m.unmount() == 0, m.log()
