"""Small files (issue 14) through a real mount: a file under 4 KiB takes
one 4 KiB block of the backing file system, an empty file none; a
version-1 container (log at 4096, docs/FORMAT.md) is read and written and
stays version 1 until `squeezefs recompress` makes it version 2. The crash,
power-loss and corruption guarantees on small-file trees are tested by
tests/test_crash.py, tests/test_powerloss.py ([small-files]) and
tests/unit/test_format_v2.c."""
import hashlib
import os
import random
import shutil
import struct
import time

from fsutil import words
from mountlib import ROOT, run_cli

# made by `squeezefs pack` of e1674e0 (format version 1) from 20,000 bytes
# of text; sha256 of the text:
V1_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "v1-zstd-text.sqz")
V1_SHA256 = "eec4549f2fc418ff41f5f4382cd632dbea5da13489228c3f9128a926bfaac29e"


def version(path):
    with open(path, "rb") as f:
        head = f.read(12)
    assert head[:8] == b"SQZFS\x00\x01\x1a", head
    return struct.unpack("<I", head[8:12])[0]


def test_small_and_empty_files_take_at_most_one_block(mount_factory):
    m = mount_factory()
    files = {"empty": b"", "one": b"x", "line": b"hello world\n",
             "rand2k": random.Random(1).randbytes(2000)}
    for n in (100, 1000, 3000, 4000, 4095):
        files[f"text{n}"] = words(n, n)
    os.makedirs(m.path("d"))
    for name, data in files.items():
        with open(m.path("d", name), "wb") as f:
            f.write(data)
    open(m.path("d", "touched"), "wb").close()
    files["touched"] = b""
    for name, data in files.items():
        with open(m.path("d", name), "rb") as f:
            assert f.read() == data, name
        b = os.stat(os.path.join(m.backing, "d", name))
        if data:
            assert 0 < b.st_blocks * 512 <= 4096, (name, b.st_blocks)
            assert version(os.path.join(m.backing, "d", name)) == 2
        else:
            # an empty file is a 0-byte backing file: no data block
            assert b.st_size == 0 and b.st_blocks == 0, (name, b.st_size, b.st_blocks)
    assert m.unmount() == 0
    # the same after a clean unmount (durable marks written) and remount
    for name, data in files.items():
        b = os.stat(os.path.join(m.backing, "d", name))
        assert b.st_blocks * 512 <= (4096 if data else 0), name
    m2 = mount_factory(backing=m.backing, name="mnt2")
    for name, data in files.items():
        with open(m2.path("d", name), "rb") as f:
            assert f.read() == data, name
    # an empty file opened again and written becomes a container
    with open(m2.path("d", "empty"), "ab") as f:
        f.write(b"now with data\n")
    with open(m2.path("d", "empty"), "rb") as f:
        assert f.read() == b"now with data\n"
    assert version(os.path.join(m2.backing, "d", "empty")) == 2


def test_version1_file_read_written_and_recompressed(mount_factory, tmp_path):
    backing = tmp_path / "backing"
    backing.mkdir()
    old = backing / "old.bin"
    shutil.copyfile(V1_FIXTURE, old)
    assert version(old) == 1
    m = mount_factory(backing=backing)
    with open(m.path("old.bin"), "rb") as f:
        want = f.read()
    assert hashlib.sha256(want).hexdigest() == V1_SHA256
    with open(m.path("old.bin"), "ab") as f:
        f.write(b"appended through the mount\n")
    want += b"appended through the mount\n"
    with open(m.path("old.bin"), "rb") as f:
        assert f.read() == want
    assert version(old) == 1          # written, never converted by surprise
    assert m.unmount() == 0
    assert run_cli("verify", str(old), check=False).returncode == 0
    m2 = mount_factory(backing=backing, name="mnt2")
    with open(m2.path("old.bin"), "rb") as f:
        assert f.read() == want
    run_cli("recompress", m2.path("old.bin"))
    assert version(old) == 2          # recompress writes version 2
    with open(m2.path("old.bin"), "rb") as f:
        assert f.read() == want
    assert m2.unmount() == 0
    assert run_cli("verify", str(old), check=False).returncode == 0


def test_torn_creation_reads_as_an_empty_file(mount_factory, tmp_path):
    """A lazy creation torn by a crash inside its header (the first pwrite
    of header and record cut after N < 64 bytes: SQZ_PROBE_TORN) is an
    empty file: stat and the first read after the mount's reset say 0
    bytes, never N zero bytes (the size of the backing file before the
    reset was shown, and with the kernel writeback cache the kernel filled
    the bytes the daemon did not return with zeros)."""
    m = mount_factory()
    data = words(3000, 5)
    with open(m.path("src"), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    ctr = os.path.join(m.backing, "src")
    with open(ctr, "rb") as f:
        whole = f.read()
    assert m.unmount() == 0
    for n in (8, 11, 50, 63):
        with open(os.path.join(m.backing, f"torn{n}"), "wb") as f:
            f.write(whole[:n])
    m.start()
    for n in (8, 11, 50, 63):
        p = m.path(f"torn{n}")
        assert os.stat(p).st_size == 0, n
        with open(p, "rb") as f:
            assert f.read() == b"", n
    with open(m.path("src"), "rb") as f:
        assert f.read() == data
    assert m.unmount() == 0


def _stats(m):
    import json
    return json.loads(os.getxattr(m.mnt, "user.squeezefs.stats"))


def _daemon_fds(m):
    d = f"/proc/{m.proc.pid}/fd"
    out = []
    for n in os.listdir(d):
        try:
            out.append(os.readlink(os.path.join(d, n)))
        except OSError:
            pass
    return out


def test_open_after_lookup_reuses_the_probed_container(mount_factory, tmp_path):
    """A lookup probes a container for its length; the open that follows
    takes that container instead of opening and parsing it again
    (opens_from_lookup), but only while the backing file is at the version
    the probe read: a change by another mount in between is seen. A file
    unlinked or renamed over through the mount leaves no descriptor of it in
    the daemon once the kernel has forgotten it (its space is freed)."""
    backing = tmp_path / "shared"
    w = mount_factory(backing=backing, name="w", options=["nopack"])  # containers
    files = {f"f{i}": words(500 + 37 * i, i) for i in range(40)}
    for name, data in files.items():
        with open(w.path(name), "wb") as f:
            f.write(data)
    assert w.unmount() == 0
    w.start()
    # unlink and rename-over, right after a lookup (fresh mount: nothing
    # cached in the kernel): the stashed descriptors go with the names
    os.stat(w.path("f2"))
    os.stat(w.path("f3"))
    os.stat(w.path("f4"))
    os.unlink(w.path("f2"))
    os.rename(w.path("f4"), w.path("f3"))
    # the kernel forgets the removed inodes (FORGET, asynchronous); with
    # them go the daemon's descriptors of the inode and its stash
    deadline = time.time() + 5
    while True:
        gone = [p for p in _daemon_fds(w) if "(deleted)" in p]
        if not gone or time.time() > deadline:
            break
        time.sleep(0.05)
    assert not gone, gone
    with open(w.path("f3"), "rb") as f:
        assert f.read() == files["f4"]
    files["f3"] = files.pop("f4")
    del files["f2"]
    before = _stats(w)["opens_from_lookup"]
    for name, data in files.items():
        with open(w.path(name), "rb") as f:  # lookup, then open
            assert f.read() == data
    assert _stats(w)["opens_from_lookup"] - before >= len(files) // 2
    # a reader mount looks the file up, the writer changes it, the reader
    # opens it: the probed version must not be served
    r = mount_factory(options=["ro", "revalidate=1"], backing=backing, name="r")
    assert os.stat(r.path("f1")).st_size == len(files["f1"])
    more = words(3000, 99)
    with open(w.path("f1"), "ab") as f:
        f.write(more)
    with open(r.path("f1"), "rb") as f:
        assert f.read() == files["f1"] + more
    for m in (r, w):
        assert m.unmount() == 0


def test_plain_files_that_start_like_a_container_are_kept(mount_factory, tmp_path):
    """Files already in BACKING (plain files) whose few bytes happen to be
    the start of the container magic ("S", "SQZ", "SQZFS") are plain files
    with those bytes: a writable mount must not take them for a torn lazy
    creation and empty them."""
    backing = tmp_path / "b"
    backing.mkdir()
    magic = b"SQZFS\x00\x01\x1a"
    files = {f"p{n}": magic[:n] for n in range(1, 8)}
    files["text"] = b"SQZ\n"
    for name, data in files.items():
        (backing / name).write_bytes(data)
    m = mount_factory(backing=backing)
    for name, data in files.items():
        assert os.stat(m.path(name)).st_size == len(data), name
        with open(m.path(name), "rb") as f:
            assert f.read() == data, name
    assert m.unmount() == 0
    for name, data in files.items():
        assert (backing / name).read_bytes() == data, name


def test_directory_listing_gives_logical_sizes(mount_factory):
    """A directory read with READDIRPLUS hands the kernel every entry's
    attributes: the logical length of a container (not its backing size),
    which the kernel then serves to stat without a LOOKUP. Entries created,
    renamed or removed after the listing are seen as such."""
    m = mount_factory()
    os.mkdir(m.path("d"))
    files = {f"f{i:03d}": words(100 + 211 * i, i) for i in range(150)}
    for name, data in files.items():
        with open(m.path("d", name), "wb") as f:
            f.write(data)
    os.mkdir(m.path("d", "sub"))
    os.symlink("f001", m.path("d", "link"))
    assert m.unmount() == 0
    m.start()
    names = sorted(os.listdir(m.path("d")))
    assert names == sorted(list(files) + ["sub", "link"])
    with os.scandir(m.path("d")) as it:
        kinds = {e.name: (e.is_dir(follow_symlinks=False),
                          e.is_symlink()) for e in it}
    assert kinds["sub"] == (True, False) and kinds["link"] == (False, True)
    for name, data in files.items():
        st = os.stat(m.path("d", name))
        assert st.st_size == len(data), name
    assert os.readlink(m.path("d", "link")) == "f001"
    os.rename(m.path("d", "f000"), m.path("d", "g000"))
    os.unlink(m.path("d", "f002"))
    with open(m.path("d", "f003"), "ab") as f:
        f.write(b"more")
    files["g000"] = files.pop("f000")
    del files["f002"]
    files["f003"] += b"more"
    assert sorted(os.listdir(m.path("d"))) == sorted(list(files) + ["sub", "link"])
    for name, data in files.items():
        with open(m.path("d", name), "rb") as f:
            assert f.read() == data, name
        assert os.stat(m.path("d", name)).st_size == len(data), name
    assert not os.path.exists(m.path("d", "f002"))
    assert m.unmount() == 0


def test_created_written_truncated_to_empty_before_any_commit(mount_factory):
    """A new file whose data is truncated away before its first commit
    leaves a 0-byte backing file (lazy creation wrote nothing): it is an
    empty file at its next open, never a container whose header is
    missing (EIO). Found by test_stress with the writeback cache."""
    for opts in ([], ["nowriteback"]):
        m = mount_factory(options=opts, name="wb" if not opts else "nowb")
        for i in range(20):
            p = m.path(f"f{i}")
            fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, words(100 + 50 * i, i))
            os.ftruncate(fd, 0)
            os.close(fd)
            with open(p, "rb") as f:
                assert f.read() == b"", (opts, i)
            os.truncate(p, 10)  # by path, no handle open
            with open(p, "rb") as f:
                assert f.read() == bytes(10), (opts, i)
        assert m.unmount() == 0, m.log()


def fd_table(pid):
    """(the kernel's fd table size, the soft open-file limit) of pid."""
    with open(f"/proc/{pid}/status") as f:
        size = next(int(line.split()[1]) for line in f if line.startswith("FDSize:"))
    with open(f"/proc/{pid}/limits") as f:
        soft = next(line.split()[3] for line in f if line.startswith("Max open files"))
    return size, (1 << 20 if soft == "unlimited" else int(soft))


def test_daemon_fd_table_is_grown_before_its_threads(mount_factory):
    """Every inode keeps an O_PATH fd, and a multi-threaded process growing
    its fd table waits for an RCU grace period (~10 ms here) at each
    doubling: a `cp -r` of 1,400 entries stalled 5 times. The daemon grows
    the table once, before its threads start, to its fd limit (at most
    65,536), and it stays that size while files are made."""
    m = mount_factory()
    size, soft = fd_table(m.proc.pid)
    want = min(soft, 65536)
    assert size >= want, (size, soft)
    os.mkdir(m.path("d"))
    for i in range(300):
        with open(m.path("d", f"f{i}"), "wb") as f:
            f.write(b"x" * (i + 1))
    assert fd_table(m.proc.pid)[0] == size
    assert m.unmount() == 0, m.log()
