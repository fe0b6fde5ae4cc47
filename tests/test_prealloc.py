"""Preallocated log space through a mount (docs/FORMAT.md "Preallocated log
space"): a file fsync'ed after every small write (a database's WAL) keeps
its backing size across most fsyncs, reads right through the writer and a
read-only mount of the same BACKING after every fsync, and is cut back to
its log at close (verify clean)."""
import os
import random

from mountlib import run_cli

PAGE = 8192


def page(i):
    rnd = random.Random(i)
    return bytes(rnd.choice(b"abcdefghij,0123456789\n") for _ in range(PAGE))


def test_fsync_per_page_keeps_the_backing_size(mount_factory):
    w = mount_factory(name="w")
    r = mount_factory(options=["ro"], backing=w.backing, name="r")
    path = w.path("wal")
    back = os.path.join(w.backing, "wal")
    with open(path, "wb") as f:
        f.write(b"\0" * (1 << 20))
        f.flush()
        os.fsync(f.fileno())
    want = bytearray(b"\0" * (1 << 20))
    fd = os.open(path, os.O_RDWR)
    sizes = []
    try:
        for i in range(120):
            off = (i * PAGE) % (1 << 20)
            os.pwrite(fd, page(i), off)
            want[off:off + PAGE] = page(i)
            os.fdatasync(fd)
            sizes.append(os.stat(back).st_size)
            if i % 20 == 19:
                # the writer and a read-only mount see exactly this version
                assert os.pread(fd, len(want), 0) == want
                with open(r.path("wal"), "rb") as g:
                    assert g.read() == want, f"read-only mount after fsync {i}"
        changes = sum(1 for a, b in zip(sizes, sizes[1:]) if a != b)
        # appending every commit would change it 119 times
        assert changes < 20, f"backing size changed at {changes} of 119 fsyncs"
    finally:
        os.close(fd)
    # after the last close the log ends the file: nothing after it
    w.unmount()
    out = run_cli("verify", back, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    w.start()
    with open(path, "rb") as f:
        assert f.read() == want
