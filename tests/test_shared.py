"""Shared BACKING: one writer, enforced (issue 15, item 1).

A read-write mount holds an exclusive lock on BACKING; a second read-write
mount of the same BACKING is refused with a message naming the holder,
read-only mounts may be many, and a crashed writer's lock goes with it.
"""
import os
import signal

import pytest


def test_second_rw_mount_is_refused(mount_factory, tmp_path):
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    with pytest.raises(RuntimeError) as ei:
        mount_factory(backing=backing, name="w2")
    msg = str(ei.value)
    assert "already mounted read-write" in msg, msg
    assert f"pid {w.proc.pid}" in msg, msg
    assert os.path.realpath(w.mnt) in msg, msg
    # the writer is unharmed and its lock file is not part of the tree
    with open(w.path("f"), "wb") as f:
        f.write(b"x" * 100000)
    assert sorted(os.listdir(w.mnt)) == ["f"]
    # nor of what the tree commands see in BACKING
    from mountlib import run_cli
    v = run_cli("verify", "-v", backing, check=False)
    assert v.returncode == 0 and "writer-lock" not in v.stdout, v.stdout
    assert "not containers" not in v.stdout, v.stdout
    assert w.unmount() == 0, w.log()


def test_readers_mount_beside_the_writer(mount_factory, tmp_path):
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    data = os.urandom(50000) * 4
    with open(w.path("f"), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    r1 = mount_factory(options=["ro"], backing=backing, name="r1")
    r2 = mount_factory(options=["ro"], backing=backing, name="r2")
    for r in (r1, r2):
        assert open(r.path("f"), "rb").read() == data
    for m in (r1, r2, w):
        assert m.unmount() == 0, m.log()


def test_lock_goes_with_a_killed_writer(mount_factory, tmp_path):
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    with open(w.path("f"), "wb") as f:
        f.write(b"abc" * 1000)
        f.flush()
        os.fsync(f.fileno())
    w.kill(signal.SIGKILL)
    w2 = mount_factory(backing=backing, name="w2")
    assert open(w2.path("f"), "rb").read() == b"abc" * 1000
    assert w2.unmount() == 0, w2.log()
    # after a clean unmount the next writer mounts too
    w3 = mount_factory(backing=backing, name="w3")
    assert w3.unmount() == 0, w3.log()


def test_reader_open_after_writer_fsync_sees_new_bytes(mount_factory, tmp_path):
    """Close-to-open across mounts: a reader that keeps the file open (so
    its view stays loaded) still gets the new content from every open after
    the writer's fsync, never bytes that were never in the file."""
    import time
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    r = mount_factory(options=["ro"], backing=backing, name="r")
    old = bytes(range(256)) * 400
    with open(w.path("f"), "wb") as f:
        f.write(old)
        f.flush()
        os.fsync(f.fileno())
    held = open(r.path("f"), "rb")  # keeps the reader's view loaded
    assert held.read() == old
    # in-place overwrite of 20 bytes in the middle, fsync'ed
    new = bytearray(old)
    new[50000:50020] = b"X" * 20
    fd = os.open(w.path("f"), os.O_WRONLY)
    os.pwrite(fd, b"X" * 20, 50000)
    os.fsync(fd)
    with open(r.path("f"), "rb") as g:
        assert g.read() == bytes(new), "a reader's open after the writer's fsync saw old bytes"
    # growth: visible to opens after the attribute timeout (1 s)
    os.pwrite(fd, b"tail" * 1000, len(new))
    os.fsync(fd)
    os.close(fd)
    new += b"tail" * 1000
    time.sleep(1.2)
    with open(r.path("f"), "rb") as g:
        assert g.read() == bytes(new)
    held.close()
    for m in (r, w):
        assert m.unmount() == 0, m.log()


def test_open_descriptor_sees_changes_within_revalidate(mount_factory, tmp_path):
    """A descriptor a reader keeps open shows the writer's fsync'ed change
    within about revalidate= seconds (default 1), cached pages included."""
    import time
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    r = mount_factory(options=["ro", "revalidate=1"], backing=backing, name="r")
    old = b"A" * 300000
    with open(w.path("f"), "wb") as f:
        f.write(old)
        f.flush()
        os.fsync(f.fileno())
    held = os.open(r.path("f"), os.O_RDONLY)
    assert os.pread(held, len(old), 0) == old  # now in the kernel's page cache
    fd = os.open(w.path("f"), os.O_WRONLY)
    os.pwrite(fd, b"B" * 20, 150000)
    os.fsync(fd)
    os.close(fd)
    new = old[:150000] + b"B" * 20 + old[150020:]
    deadline = time.time() + 4
    got = None
    while time.time() < deadline:
        got = os.pread(held, len(old), 0)
        assert got in (old, new), "a mix of old and new bytes"
        if got == new:
            break
        time.sleep(0.2)
    os.close(held)
    assert got == new, "the open descriptor still shows the old bytes after 4 s"
    for m in (r, w):
        assert m.unmount() == 0, m.log()


def test_reader_of_an_empty_file_never_sees_container_bytes(mount_factory, tmp_path):
    """A 0-byte backing file (e.g. made by another tool) is an empty plain
    file; the writer mount makes it a container when it opens it for
    writing. A reader mount that opened it while empty must not show that
    container as the file's bytes: the held descriptor reads the file as it
    was (empty) or its new content; a new open, the new content."""
    import time
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    r = mount_factory(options=["ro", "revalidate=1"], backing=backing, name="r")
    (backing / "e").write_bytes(b"")
    held = os.open(r.path("e"), os.O_RDONLY)
    assert os.pread(held, 100, 0) == b""
    data = b"%08d,trade,AAPL,187.25,100\n" * 200
    with open(w.path("e"), "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    assert (backing / "e").read_bytes()[:5] == b"SQZFS"  # a container now
    deadline = time.time() + 3
    while time.time() < deadline:  # past revalidate=: the kernel asks again
        os.fstat(held)
        got = os.pread(held, 1 << 20, 0)
        assert got in (b"", data), f"held descriptor read {len(got)} bytes no version had"
        time.sleep(0.2)
    # a new open, with the old descriptor still open beside it (they share
    # the kernel's page cache), then with it closed
    with open(r.path("e"), "rb") as f:
        assert f.read() == data
    os.close(held)
    with open(r.path("e"), "rb") as f:
        assert f.read() == data
    for m in (r, w):
        assert m.unmount() == 0, m.log()


def test_new_open_beside_a_descriptor_held_since_empty(mount_factory, tmp_path):
    """Lazy creation: a file created through the writer mount is a 0-byte
    backing file until its first data, so a reader mount opens it as an
    empty file. That descriptor, held while the writer writes, fsyncs and
    closes, shares the kernel's page cache and cached size with every later
    open of the file on the reader: its reads must not leave an empty
    (zero-filled, size 0) view there. A new open after the writer's close
    reads exactly the writer's content, also after the held descriptor read
    between that open's stat and its read."""
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    r = mount_factory(options=["ro", "revalidate=1"], backing=backing, name="r")
    data = b"%08d,trade,AAPL,187.25,100\n" * 200  # 5600 bytes, two pages
    with open(w.path("e"), "wb"):
        pass  # created through the mount: 0 bytes in BACKING
    assert (backing / "e").stat().st_size == 0
    held = os.open(r.path("e"), os.O_RDONLY)
    assert os.pread(held, 100, 0) == b""
    with open(w.path("e"), "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(r.path("e"), os.O_RDONLY)  # after the writer's close
    assert os.fstat(fd).st_size == len(data)
    assert os.pread(held, 1 << 20, 0) in (b"", data)
    got = os.pread(fd, 1 << 20, 0)
    assert got == data, f"a new open read {len(got)} bytes, the writer has {len(data)}"
    os.close(fd)
    os.close(held)
    with open(r.path("e"), "rb") as f:  # after both were released
        assert f.read() == data
    for m in (r, w):
        assert m.unmount() == 0, m.log()


def test_new_open_beside_a_descriptor_held_on_a_creation_in_flight(mount_factory, tmp_path):
    """A reader that opens a file while the writer's first write (the start
    of a version-2 header) is only partly there shows it as empty; once the
    write is complete, a new open shows the content, also while that first
    descriptor is still held."""
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w")
    r = mount_factory(options=["ro", "revalidate=1"], backing=backing, name="r")
    data = bytes(range(256)) * 30
    with open(w.path("src"), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    ctr = (backing / "src").read_bytes()
    assert ctr[:5] == b"SQZFS"
    (backing / "t").write_bytes(ctr[:20])  # the first write, in flight
    held = os.open(r.path("t"), os.O_RDONLY)
    assert os.pread(held, 1 << 20, 0) == b""
    with open(backing / "t", "r+b") as f:  # the first write is complete
        f.write(ctr)
    with open(r.path("t"), "rb") as f:
        got = f.read()
    assert got == data, f"a new open read {len(got)} bytes, the writer has {len(data)}"
    assert os.pread(held, 1 << 20, 0) in (b"", data)
    os.close(held)
    for m in (r, w):
        assert m.unmount() == 0, m.log()


def test_revalidate_option_is_checked(mount_factory, tmp_path):
    for bad in ("revalidate=-1", "revalidate=x", "revalidate=86401", "revalidate"):
        with pytest.raises(RuntimeError) as ei:
            mount_factory(options=["ro", bad], name="bad")
        assert "revalidate=" in str(ei.value)
    m = mount_factory(options=["ro", "revalidate=0"], name="ok")
    assert m.unmount() == 0


def test_reader_rereads_only_changed_blocks(mount_factory, tmp_path):
    """A reader's new view after the writer's change keeps the cached blocks
    that did not change: re-reading the whole file decompresses only the
    changed block and the file's last block, not all 32."""
    import json
    from mountlib import run_cli
    backing = tmp_path / "shared"
    w = mount_factory(options=["compress=zstd:1/64K"], backing=backing, name="w")
    r = mount_factory(options=["ro"], backing=backing, name="r")
    data = bytes(b"".join(b"%08d," % i for i in range(240000))[: 2 << 20])
    with open(w.path("f"), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())

    def decompressed():
        st = json.loads(run_cli("stats", "--json", r.mnt).stdout)
        return st["blocks_decompressed"]

    held = open(r.path("f"), "rb")  # keeps the view (and its cache) alive
    assert held.read() == data
    before = decompressed()
    fd = os.open(w.path("f"), os.O_WRONLY)
    os.pwrite(fd, b"CHANGED!" * 2, 1 << 20)  # inside block 16 of 32
    os.fsync(fd)
    os.close(fd)
    new = data[:1 << 20] + b"CHANGED!" * 2 + data[(1 << 20) + 16:]
    with open(r.path("f"), "rb") as g:
        assert g.read() == new
    again = decompressed() - before
    assert 1 <= again <= 2, f"{again} blocks decompressed again (32 in the file)"
    held.close()
    for m in (r, w):
        assert m.unmount() == 0, m.log()
