"""Many files with the daemon's descriptors bounded (issue 28): an inode the
kernel knows no longer holds a descriptor in the daemon for its whole life
(src/fuse/ifd.c; docs/FORMAT.md "Descriptors of inodes"). The daemon runs
under a hard open-file limit far below the number of files; no error
reaches the user, the bytes round-trip, `squeezefs verify` is clean and the
daemon's descriptors (/proc/PID/fd, sampled) stay within max_fds=.
tools/bench_manyfiles.py measures 10k to 1M files."""
import collections
import hashlib
import json
import os
import threading
import time

import pytest

from mountlib import Mount, mount_stats, require_fuse, run_cli

LIMIT = 512     # the daemon's hard open-file limit (prlimit)
MAX_FDS = 128   # its bound (max_fds=)
# the descriptors not counted by max_fds: the user's open files (one at a
# time here, and a directory being listed); the daemon's own (the FUSE
# device, BACKING, the writer lock, stdio, the request threads' share)
# are within it
SLACK = 4


class LimitedMount(Mount):
    """A daemon started through prlimit (which execs it: same pid)."""

    def cmd(self):
        return ["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--"] + super().cmd()


class FdSampler:
    """Counts the daemon's open descriptors every few ms in a thread."""

    def __init__(self, pid):
        self.pid, self.peak, self.samples, self.kinds = pid, 0, 0, {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.005)

    def sample(self):
        try:
            n = len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return
        if n > self.peak:  # what they are, for a failure's message
            self.kinds = self.kinds_now()
        self.peak = max(self.peak, n)
        self.samples += 1

    def kinds_now(self):
        """The daemon's descriptors counted by kind: O_PATH, directory,
        regular file (a container, a pack), other."""
        k = collections.Counter()
        for f in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{f}")
                with open(f"/proc/{self.pid}/fdinfo/{f}") as fi:
                    flags = int(fi.read().split("flags:")[1].split()[0], 8)
            except (OSError, IndexError, ValueError):
                continue
            kind = ("O_PATH" if flags & 0o10000000 else
                    "dir" if os.path.isdir(target) else
                    "file" if os.path.isfile(target) else target.split(":")[0])
            k[kind] += 1
        return dict(k)

    def stop(self):
        self._stop.set()
        self._t.join()
        self.sample()
        return self.peak


def content(d, i):
    # small files, some a little larger (a few blocks)
    n = 40 + (i * 37) % 300 + (5000 if i % 97 == 0 else 0)
    return (f"{d}/{i} ".encode() * (n // 8 + 1))[:n]


def limited_mount(tmp_path, name, options=(), env=None, backing=None):
    require_fuse()
    b = backing or tmp_path / (name + "-backing")
    os.makedirs(b, exist_ok=True)
    opts = [f"max_fds={MAX_FDS}"] + list(options)
    return LimitedMount(b, tmp_path / name, options=opts, env=env)


def round_trip(m, ndirs, per_dir):
    """Write, list, stat, read back and remove ndirs x per_dir files with
    the descriptors sampled; returns the sampler (peak, samples, kinds)."""
    s = FdSampler(m.proc.pid)
    try:
        for d in range(ndirs):
            os.mkdir(m.path(f"d{d:03}"))
            for i in range(per_dir):
                with open(m.path(f"d{d:03}", f"f{i:05}"), "wb") as f:
                    f.write(content(d, i))
        n = 0
        for root, dirs, files in os.walk(m.mnt):
            for fn in files:
                st = os.stat(os.path.join(root, fn))
                d, i = int(root[-3:]), int(fn[1:])
                assert st.st_size == len(content(d, i)), (root, fn)
                n += 1
        assert n == ndirs * per_dir
        for d in range(ndirs):
            for i in range(per_dir):
                with open(m.path(f"d{d:03}", f"f{i:05}"), "rb") as f:
                    assert f.read() == content(d, i), (d, i)
        run_cli("verify", m.backing)
        for d in range(ndirs):
            for i in range(per_dir):
                os.unlink(m.path(f"d{d:03}", f"f{i:05}"))
            os.rmdir(m.path(f"d{d:03}"))
        assert os.listdir(m.mnt) == []
    finally:
        s.stop()
    return s


def test_10k_files_under_a_512_descriptor_limit(tmp_path):
    m = limited_mount(tmp_path, "mnt")
    with m:
        s = round_trip(m, 24, 400)
        assert s.samples > 10
        assert s.peak <= MAX_FDS + SLACK, (s.peak, s.kinds, m.log()[-2000:])
        assert "Too many open files" not in m.log()
    run_cli("verify", m.backing)


@pytest.mark.long
def test_100k_files_under_a_4096_descriptor_limit(tmp_path):
    """The issue's limit with the default max_fds= (tools/test.sh --long)."""
    global LIMIT
    old, LIMIT = LIMIT, 4096
    try:
        require_fuse()
        b = tmp_path / "mnt-backing"
        os.makedirs(b, exist_ok=True)
        with LimitedMount(b, tmp_path / "mnt") as m:
            st = json.loads(run_cli("stats", "--json", m.mnt).stdout)
            s = round_trip(m, 200, 500)
            assert s.peak <= st["max_fds"] + SLACK, (s.peak, s.kinds)
    finally:
        LIMIT = old


def test_without_file_handles_names_are_walked(tmp_path):
    """SQZ_NO_HANDLES=1: the path of file systems without handles (an
    inode is opened again by its name below its parent)."""
    m = limited_mount(tmp_path, "mnt", env={"SQZ_NO_HANDLES": "1"})
    with m:
        st = run_cli("stats", "--json", m.mnt).stdout
        assert '"fd_handles": 0' in st, st
        s = round_trip(m, 8, 400)
        assert s.peak <= MAX_FDS + SLACK, (s.peak, s.kinds)


@pytest.mark.parametrize("handles", ["1", "0"])
def test_renames_of_parents_while_descriptors_are_evicted(tmp_path, handles):
    """Files the kernel holds are found again after their directories were
    renamed through the mount (the names the daemon keeps move with them),
    and a name that came to refer to another file (replaced in BACKING
    behind the mount) is not served as the old file."""
    env = {"SQZ_NO_HANDLES": "1"} if handles == "0" else None
    m = limited_mount(tmp_path, "mnt", options=["max_fds=64"], env=env)
    with m:
        s = FdSampler(m.proc.pid)
        want = {}
        for a in range(4):
            for b in range(4):
                p = m.path(f"a{a}", f"b{b}")
                os.makedirs(p)
                for i in range(12):
                    data = f"{a}/{b}/{i}\n".encode() * (i + 1)
                    with open(os.path.join(p, f"f{i}"), "wb") as f:
                        f.write(data)
                    want[(f"a{a}", f"b{b}", f"f{i}")] = data
        # open files keep working across renames of their parents
        held = open(m.path("a0", "b0", "f0"), "rb")
        for rnd in range(3):
            # rename every top and middle directory (a cycle of names)
            for a in range(4):
                os.rename(m.path(f"a{a}"), m.path(f"t{a}"))
            for a in range(4):
                os.rename(m.path(f"t{a}"), m.path(f"a{(a + 1) % 4}"))
            want = {(f"a{(int(k[0][1]) + 1) % 4}",) + k[1:]: v for k, v in want.items()}
            for a in range(4):
                os.rename(m.path(f"a{a}", "b1"), m.path(f"a{a}", "bx"))
                os.rename(m.path(f"a{a}", "b2"), m.path(f"a{a}", "b1"))
                os.rename(m.path(f"a{a}", "bx"), m.path(f"a{a}", "b2"))
            nw = {}
            for k, v in want.items():
                b = {"b1": "b2", "b2": "b1"}.get(k[1], k[1])
                nw[(k[0], b, k[2])] = v
            want = nw
            # renames of files, and unlink + create under an old name
            for a in range(4):
                d = m.path(f"a{a}", "b3")
                os.rename(os.path.join(d, "f1"), os.path.join(d, "g1"))
                os.rename(os.path.join(d, "g1"), os.path.join(d, "f1"))
                os.unlink(os.path.join(d, "f2"))
                data = f"new {rnd}\n".encode()
                with open(os.path.join(d, "f2"), "wb") as f:
                    f.write(data)
                want[(f"a{a}", "b3", "f2")] = data
            for k, v in sorted(want.items()):
                with open(m.path(*k), "rb") as f:
                    assert f.read() == v, k
                assert os.stat(m.path(*k)).st_size == len(v), k
        assert held.read() == b"0/0/0\n"
        held.close()
        # a file replaced behind the mount: the new one is served
        victim = next(k for k in want if k[1] == "b0" and k[2] == "f5")
        vp = m.path(*victim)
        os.stat(vp)
        for k in want:  # evict its descriptor
            os.stat(m.path(*k))
        bp = os.path.join(m.backing, *victim)
        os.unlink(bp)
        with open(bp + ".new", "wb") as f:
            f.write(b"plain bytes written behind the mount\n")
        os.rename(bp + ".new", bp)
        time.sleep(1.2)  # the kernel's attribute/entry timeout
        with open(vp, "rb") as f:
            assert f.read() == b"plain bytes written behind the mount\n"
        peak = s.stop()
        assert peak <= 64 + SLACK, (peak, s.kinds)
        st = json.loads(run_cli("stats", "--json", m.mnt).stdout)
        # the descriptors were evicted and opened again (by handle or name)
        assert st["fd_evictions"] > 100 and st["fd_reopens"] > 100, st
        assert st["fd_handles"] == (1 if handles == "1" else 0), st
        h = hashlib.sha256()
        for k in sorted(want):
            if k != victim:
                with open(m.path(*k), "rb") as f:
                    h.update(f.read())
    run_cli("verify", m.backing)


def drop_dentries():
    """The kernel's unused dentries and inodes dropped (root)."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")


def test_files_opened_again_disconnected_are_found_by_their_last_name(tmp_path):
    """A regular file whose descriptor was evicted and whose backing dentry
    the kernel reclaimed (drop_caches 2) is opened again by handle
    *disconnected* (its /proc path reads "/"). The name the daemon saw it
    by last (created, renamed through the mount) finds it: it is packed,
    its policy (its directory's xattr) is resolved, it is recompressed and
    tiered. Before: 14 of 300 files packed; the policy, recompress and
    tiering failed with ENOENT."""
    if os.geteuid() != 0:
        pytest.skip("drop_caches needs root")
    from test_pack import state
    m = limited_mount(tmp_path, "mnt", options=["max_fds=64"])
    with m:
        os.makedirs(m.path("p"))
        n = 300
        want = {}
        for i in range(n):
            with open(m.path("p", f"f{i}"), "wb") as f:
                f.write(content("p", i)[:2000])
            want[f"f{i}"] = content("p", i)[:2000]
        for i in range(0, n, 30):  # renamed: found by the new name
            os.rename(m.path("p", f"f{i}"), m.path("p", f"r{i}"))
            want[f"r{i}"] = want.pop(f"f{i}")
        # the packer works while descriptors are evicted and dentries go
        # (the backing files are not looked at meanwhile: that would
        # connect them again)
        deadline = time.time() + 12
        while time.time() < deadline:
            drop_dentries()
            if mount_stats(m.mnt)["files_packed"] >= n:
                break
            time.sleep(0.1)
        assert mount_stats(m.mnt)["files_packed"] == n
        for name, data in want.items():
            assert state(os.path.join(m.backing, "p", name)) == "packed", name
            with open(m.path("p", name), "rb") as f:
                assert f.read() == data, name

        # a container in a directory with a policy, held by the kernel (an
        # O_PATH descriptor: no lookup sent when it is used through it)
        os.makedirs(m.path("q"))
        os.setxattr(m.path("q"), "user.squeezefs.policy", b"lz4 after 30d zstd:19")
        big = b"".join(content("q", i) for i in range(600))[:200000]
        with open(m.path("q", "big"), "wb") as f:
            f.write(big)
        held = os.open(m.path("q", "big"), os.O_PATH)
        via = f"/proc/self/fd/{held}"

        def evict_and_drop():
            for name in want:  # lookups again: big's descriptor evicted
                os.stat(m.path("p", name))
            drop_dentries()

        try:
            time.sleep(2.5)  # closed, marked durable (durable.c)
            evict_and_drop()
            st = json.loads(os.getxattr(via, "user.squeezefs.tier"))
            assert st["policy"] == "lz4/128K after 30d zstd:19/128K", st
            os.setxattr(m.path("q"), "user.squeezefs.policy", b"zstd:3/64K")
            evict_and_drop()
            os.setxattr(via, "user.squeezefs.recompress", b"")
            info = json.loads(run_cli("stat", "--json",
                                      os.path.join(m.backing, "q", "big")).stdout)
            assert (info["algorithm"], info["logicalBlockSize"]) == ("zstd", 16), info
            # aged (its directory's policy's after): tiered now
            t = time.time() - 40 * 86400
            os.utime(via, (t, t))
            os.setxattr(m.path("q"), "user.squeezefs.policy",
                        b"zstd:3/64K after 30d lz4/16K")
            evict_and_drop()
            os.setxattr(via, "user.squeezefs.tier", b"")
            info = json.loads(run_cli("stat", "--json",
                                      os.path.join(m.backing, "q", "big")).stdout)
            assert (info["algorithm"], info["logicalBlockSize"]) == ("lz4", 14), info
            with open(via, "rb") as f:
                assert f.read() == big
        finally:
            os.close(held)
    run_cli("verify", m.backing)


def test_hard_links_hold_no_descriptor_per_name(tmp_path):
    """A hard-linked file the kernel looks up by a second name keeps no
    descriptor of that name: 400 files with two names each, both looked up
    (the dentries dropped between), stay within max_fds= (before: one
    O_PATH descriptor per such file outside the bound, 400 here). The last
    name seen still finds a file whose first name is gone: it is packed."""
    if os.geteuid() != 0:
        pytest.skip("drop_caches needs root")
    from test_pack import state
    m = limited_mount(tmp_path, "mnt", options=["max_fds=64", "nopack"])
    n = 400
    with m:
        os.makedirs(m.path("a"))
        os.makedirs(m.path("b"))
        for i in range(n):
            with open(m.path("a", f"f{i}"), "wb") as f:
                f.write(content("a", i))
            os.link(m.path("a", f"f{i}"), m.path("b", f"g{i}"))
        s = FdSampler(m.proc.pid)
        try:
            for names in (("a", "f"), ("b", "g"), ("a", "f"), ("b", "g")):
                drop_dentries()
                for i in range(n):
                    assert os.stat(m.path(names[0], f"{names[1]}{i}")).st_nlink == 2
        finally:
            s.stop()
        assert s.peak <= 64 + SLACK, (s.peak, s.kinds)
    # their first names removed, each written again by its second and
    # closed: the packer finds each one's directory by that name (the
    # dentries dropped first: no descriptor of the first name is cached)
    m2 = limited_mount(tmp_path, "again", options=["max_fds=64"], backing=m.backing)
    with m2:
        for i in range(n):
            os.stat(m2.path("b", f"g{i}"))
            os.unlink(m2.path("a", f"f{i}"))
        drop_dentries()
        s = FdSampler(m2.proc.pid)
        try:
            for i in range(n):
                with open(m2.path("b", f"g{i}"), "ab") as f:
                    f.write(b"more")
        finally:
            s.stop()
        assert s.peak <= 64 + SLACK, (s.peak, s.kinds)
    for i in range(n):
        assert state(os.path.join(m.backing, "b", f"g{i}")) == "packed", i


def test_reclaim_notes_without_handles_stay_within_the_bound(tmp_path):
    """Where BACKING has no file handles (GlusterFS, NFS; SQZ_NO_HANDLES=1)
    the notes of directories whose packs lost entries keep at most a few
    descriptors, then the directory's path (opened beneath BACKING, checked
    to be the same directory): 60 directories noted at once stay within
    max_fds= (before: one O_PATH descriptor per note, up to 4,096), and
    every dead pack is still reclaimed. The small files of 60 directories
    are packed at one quiet moment although only 2 packs may be open at
    once under this bound (before: 2 directories a second)."""
    from test_pack import state
    ndirs, per = 60, 3
    m = limited_mount(tmp_path, "mnt", options=["max_fds=64"],
                      env={"SQZ_NO_HANDLES": "1"})
    with m:
        for d in range(ndirs):
            os.mkdir(m.path(f"d{d}"))
            for i in range(per):
                with open(m.path(f"d{d}", f"f{i}"), "wb") as f:
                    f.write(content(d, i)[:500])
        deadline = time.time() + 8
        while time.time() < deadline and mount_stats(m.mnt)["files_packed"] < ndirs * per:
            time.sleep(0.2)
        assert mount_stats(m.mnt)["files_packed"] == ndirs * per
        assert state(os.path.join(m.backing, "d0", "f0")) == "packed"
        s = FdSampler(m.proc.pid)
        try:
            for d in range(ndirs):
                for i in range(per):
                    os.unlink(m.path(f"d{d}", f"f{i}"))
            deadline = time.time() + 30
            while time.time() < deadline and mount_stats(m.mnt)["packs_removed"] < ndirs:
                time.sleep(0.2)
        finally:
            s.stop()
        assert s.peak <= 64 + SLACK, (s.peak, s.kinds)
        assert mount_stats(m.mnt)["packs_removed"] == ndirs
    left = [d for d in range(ndirs)
            if any(n.startswith(".sqz-tmp.pack") for n in os.listdir(os.path.join(m.backing, f"d{d}")))]
    assert not left, left
