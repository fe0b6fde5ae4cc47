"""Recompress and tiering are invisible to stat (issue 31): on a local
BACKING a replaced file keeps its inode number (docs/FORMAT.md "Kept inode
numbers"), times, size and link count, and its directory its times, through
the mount and after a remount; no two live files show one number, also
after the numbers the replaces freed were given to new files; a removed
file's kept number is freed; chmod, chown, utimens and setxattr racing a
replace are never lost."""
import fcntl
import os
import struct
import threading
import time

import pytest

from fsutil import text
from mountlib import run_cli
from test_identity import FIELDS, shown
from test_pack import data, wr

DAY = 86400
RULES = "/hdb/** lz4/64K after 1d zstd:6/256K\n* zstd:1\n"
IDS = ".sqz-tmp.ids"


def recompress(path, spec=b"gzip:9"):
    os.setxattr(path, "user.squeezefs.recompress", spec)


def inos_of_tree(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = os.lstat(p).st_ino
    return out


def test_recompress_and_tiering_keep_stat(mount_factory, tmp_path):
    rules = tmp_path / "hdb.rules"
    rules.write_text(RULES)
    opts = ["policy=" + str(rules)]
    m = mount_factory(options=opts)
    os.mkdir(m.path("d"))
    os.mkdir(m.path("hdb"))
    wr(m.path("d/big"), text(600_000, 1))
    wr(m.path("d/other"), text(200_000, 2))
    wr(m.path("hdb/f"), text(400_000, 3))
    t = time.time() - 2 * DAY
    os.utime(m.path("hdb/f"), (t, t))
    os.chmod(m.path("d/big"), 0o640)
    names = ["d/big", "d/other", "hdb/f", "d", "hdb", ""]
    time.sleep(3)                       # durable marks done
    assert m.unmount() == 0, m.log()
    m = mount_factory(options=opts, backing=m.backing, name="w2")
    before = {n: shown(m.path(n)) for n in names}
    time.sleep(0.05)
    # squeezefs recompress on the mount: the daemon's ioctl (a setxattr
    # would move the ctime, as any setxattr does)
    run_cli("recompress", "--policy", "gzip:9", m.path("d/big"))
    run_cli("recompress", "--policy", "zstd:3", m.path("d/big"))  # its kept number
    run_cli("recompress", "--policy", "gzip:9", m.path("d/other"))
    p = run_cli("tier", m.path("hdb"), check=False)
    assert p.returncode == 0, (p.stdout, p.stderr)
    p = run_cli("stat", "--json", m.path("hdb/f"))
    assert '"zstd"' in p.stdout, p.stdout       # it was tiered
    time.sleep(1.2)                             # past the attribute timeout
    during = {n: shown(m.path(n)) for n in names}
    assert m.unmount() == 0, m.log()
    r = mount_factory(options=["ro"], backing=m.backing, name="ro")
    ro = {n: shown(r.path(n)) for n in names}
    assert r.unmount() == 0, r.log()
    m2 = mount_factory(options=opts, backing=m.backing, name="again")
    again = {n: shown(m2.path(n)) for n in names}
    for what, got in (("through the mount", during), ("read-only mount", ro),
                      ("after a remount", again)):
        diff = {n: {f: (before[n][f], got[n][f]) for f in FIELDS
                    if before[n][f] != got[n][f]} for n in names}
        assert got == before, (what, {n: d for n, d in diff.items() if d})
    assert open(m2.path("d/big"), "rb").read() == text(600_000, 1)
    assert open(m2.path("hdb/f"), "rb").read() == text(400_000, 3)
    # new files take the numbers the second recompress freed
    os.mkdir(m2.path("new"))
    for i in range(50):
        wr(m2.path(f"new/f{i}"), data(100, i))
    live = inos_of_tree(m2.path(""))
    assert len(set(live.values())) == len(live), live
    # a removed file's kept number is freed
    kept = os.listdir(os.path.join(m2.backing, IDS))
    assert len(kept) == 3, kept
    os.unlink(m2.path("d/big"))
    deadline = time.time() + 10
    while len(os.listdir(os.path.join(m2.backing, IDS))) != 2 and time.time() < deadline:
        time.sleep(0.1)
    assert len(os.listdir(os.path.join(m2.backing, IDS))) == 2
    assert m2.unmount() == 0, m2.log()
    p = run_cli("verify", m2.backing, check=False)
    assert p.returncode == 0, (p.stdout, p.stderr)


def test_hard_link_after_recompress_shows_the_kept_number(mount_factory):
    m = mount_factory()
    wr(m.path("a"), text(100_000, 4))
    ino = os.stat(m.path("a")).st_ino
    recompress(m.path("a"))
    os.link(m.path("a"), m.path("b"))
    assert os.stat(m.path("b")).st_ino == ino
    assert os.stat(m.path("a")).st_nlink == 2
    os.unlink(m.path("a"))                  # one link left: the number stays
    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=m.backing, name="again")
    assert os.stat(m2.path("b")).st_ino == ino
    assert {e.name: e.inode() for e in os.scandir(m2.path(""))} == {"b": ino}
    assert m2.unmount() == 0, m2.log()


SQZ_IOC_TIER = 0x40085116        # _IOW('Q', 0x16, uint64_t), src/daemon/fs.h
SQZ_IOC_RECOMPRESS = 0x40405117  # _IOW('Q', 0x17, char[64])


def tier_now(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, SQZ_IOC_TIER, struct.pack("Q", 0))
    finally:
        os.close(fd)


def recompress_ioctl(path, spec):
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, SQZ_IOC_RECOMPRESS, spec.ljust(64, b"\0"))
    finally:
        os.close(fd)


def backing_meta(path):
    b = os.stat(path)
    return (b.st_mode & 0o7777, b.st_uid, b.st_gid, b.st_mtime_ns,
            os.getxattr(path, "user.mark"))


@pytest.mark.parametrize("how", ["tier", "recompress"])
def test_metadata_changes_racing_a_replace_are_kept(mount_factory, tmp_path, how):
    """chmod, chown, utime and setxattr through the mount, one after the
    other as fast as they go, while tiering (an ioctl, so the kernel does
    not hold the file's lock) or a recompress by ioctl replaces the file:
    once the replace returned, the file has what was set last. (The new
    file took the metadata before the change and was exchanged in after
    it: the change was lost.)"""
    rules = tmp_path / "hdb.rules"
    rules.write_text(RULES)
    m = mount_factory(options=["policy=" + str(rules)])
    os.mkdir(m.path("hdb"))
    p, bp = m.path("hdb/f"), os.path.join(m.backing, "hdb/f")
    wr(p, text(300_000, 5))
    os.setxattr(p, "user.mark", b"0")
    old = int(time.time() - 3 * DAY) * 10**9
    os.utime(p, ns=(old, old))
    lost = []
    for rnd in range(25):
        if how == "tier":   # stored otherwise than its aged policy: due
            os.setxattr(p, "user.squeezefs.recompress", b"lz4/64K")
        stop = threading.Event()
        last = {}

        def churn():
            k = 0
            while not stop.is_set():
                k += 1
                last.update(mode=0o600 | (k % 8) << 3, uid=1000 + k % 50,
                            mt=old + k, val=b"%d.%d" % (rnd, k))
                os.chmod(p, last["mode"])
                os.chown(p, last["uid"], last["uid"])
                os.utime(p, ns=(old, last["mt"]))
                os.setxattr(p, "user.mark", last["val"])

        th = threading.Thread(target=churn)
        th.start()
        try:
            time.sleep(0.002 * (rnd % 5))
            if how == "tier":
                tier_now(p)
            else:
                recompress_ioctl(p, [b"gzip:1", b"zstd:2", b"lz4"][rnd % 3])
        finally:
            stop.set()
            th.join()
        want = (last["mode"], last["uid"], last["uid"], last["mt"], last["val"])
        if backing_meta(bp) != want:
            lost.append((rnd, backing_meta(bp), want))
        s = os.stat(p)
        if (s.st_mode & 0o7777, s.st_uid, s.st_gid, s.st_mtime_ns) != want[:4]:
            lost.append(("mount", rnd, s, want))
    assert not lost, lost[:5]
    assert m.unmount() == 0, m.log()


def test_listing_during_replaces_never_shows_the_kept_inode(mount_factory):
    """READDIRPLUS looks every entry up: a lookup that opened the file's
    name just before a replace exchanged it found the old backing inode,
    which is no longer the file's but the emptied keeper (it has a link,
    so it was not taken for a file renamed over): the name showed 0 bytes
    or read as empty. The lookup asks the name again when it no longer
    holds what it opened."""
    m = mount_factory()
    os.mkdir(m.path("d"))
    want = {f"f{i}": text(60_000 + i, i) for i in range(4)}
    for n, c in want.items():
        wr(m.path("d", n), c)
    stop = threading.Event()
    errors = []

    def churn():
        k = 0
        while not stop.is_set():
            for n in want:
                try:
                    recompress_ioctl(m.path("d", n), [b"zstd:1", b"lz4"][k % 2])
                except OSError as e:
                    errors.append(e)
            k += 1

    th = threading.Thread(target=churn)
    th.start()
    bad = []
    try:
        deadline = time.time() + 4
        while time.time() < deadline and not bad:
            for e in os.scandir(m.path("d")):
                st = e.stat()
                if st.st_size != len(want[e.name]):
                    bad.append((e.name, st.st_size))
    finally:
        stop.set()
        th.join()
    assert not errors, errors[:3]
    assert not bad, bad[:5]
    for n, c in want.items():
        with open(m.path("d", n), "rb") as f:
            assert f.read() == c, n
    assert m.unmount() == 0, m.log()


def test_read_only_mount_sees_numbers_kept_after_it_started(mount_factory):
    """A read-only mount of the same BACKING, made before the writer's
    recompress, shows the kept number too (it reads the writer's
    .sqz-tmp.ids again when it changed, at most once a second)."""
    m = mount_factory()
    wr(m.path("a"), text(100_000, 6))
    wr(m.path("b"), text(100_000, 7))
    time.sleep(2.5)                     # durable marks done
    r = mount_factory(options=["ro"], backing=m.backing, name="ro")
    ino = {n: os.stat(r.path(n)).st_ino for n in ("a", "b")}
    run_cli("recompress", "--policy", "gzip:9", m.path("a"))
    run_cli("recompress", "--policy", "gzip:9", m.path("b"))
    time.sleep(2.2)                     # attribute timeout, the once a second
    assert {n: os.stat(r.path(n)).st_ino for n in ("a", "b")} == ino
    assert {e.name: e.inode() for e in os.scandir(r.path(""))} == ino
    assert open(r.path("a"), "rb").read() == text(100_000, 6)
    assert r.unmount() == 0, r.log()
    assert m.unmount() == 0, m.log()


def test_mount_finishes_or_removes_what_a_crash_left_in_ids(mount_factory):
    """What the next read-write mount does with .sqz-tmp.ids before it
    serves (FORMAT.md "Kept inode numbers"): a temporary and an intent
    still holding the new container are removed, a keeper that is not the
    inode its name says (a copied BACKING) is removed, an intent holding
    some other file is left alone (never a user's data removed), a keeper
    with bytes is emptied and counts."""
    m = mount_factory()
    wr(m.path("f"), text(50_000, 8))
    assert m.unmount() == 0, m.log()
    b = m.backing
    ids = os.path.join(b, IDS)
    os.mkdir(ids)
    f_ino = os.stat(os.path.join(b, "f")).st_ino

    def put(name, content=b""):
        with open(os.path.join(ids, name), "wb") as fh:
            fh.write(content)
        return os.stat(os.path.join(ids, name)).st_ino

    put(".sqz-tmp.0123456789abcdef", b"partial")
    y = put("tmpname", b"new container")
    os.rename(os.path.join(ids, "tmpname"), os.path.join(ids, f"n.5.5.{y}"))
    put(f"n.7.8.{y + 100000}", b"someone's file")
    put(f"{f_ino + 100000}.{f_ino}")            # not the inode it names
    k = put("k", b"old content")                # a keeper not yet emptied
    os.rename(os.path.join(ids, "k"), os.path.join(ids, f"{k}.{f_ino}"))
    m2 = mount_factory(backing=b, name="again")
    assert sorted(os.listdir(ids)) == sorted([f"n.7.8.{y + 100000}", f"{k}.{f_ino}"])
    assert os.path.getsize(os.path.join(ids, f"{k}.{f_ino}")) == 0
    assert open(os.path.join(ids, f"n.7.8.{y + 100000}"), "rb").read() == b"someone's file"
    assert os.stat(m2.path("f")).st_ino == k
    assert "left as it is" in m2.log()
    assert m2.unmount() == 0, m2.log()


def test_recompress_below_a_bind_mount_in_backing(mount_factory, tmp_path):
    """A directory of BACKING that is a bind mount (same file system, no
    rename across it): a replace there cannot exchange with .sqz-tmp.ids,
    so it keeps the temporary next to the file as before (the number
    changes); it failed with EXDEV."""
    import subprocess
    m = mount_factory()
    os.mkdir(m.path("sub"))
    src = tmp_path / "src"
    src.mkdir()
    sub = os.path.join(m.backing, "sub")
    subprocess.run(["mount", "--bind", str(src), sub], check=True)
    try:
        wr(m.path("top"), text(80_000, 9))
        time.sleep(1.1)                 # the kernel's entry for sub: again
        wr(m.path("sub/a"), text(80_000, 10))
        ino = os.stat(m.path("top")).st_ino
        run_cli("recompress", "--policy", "gzip:9", m.path("sub/a"), m.path("top"))
        assert open(m.path("sub/a"), "rb").read() == text(80_000, 10)
        assert os.stat(m.path("top")).st_ino == ino
        assert m.unmount() == 0, m.log()
    finally:
        subprocess.run(["umount", sub], check=False)
