"""Background work is invisible to stat (issue 31): durable marks and
packing change none of a file's inode number, times, size or link count,
through the mount and after a remount; no two live files show one inode
number; tree copies made while packing runs equal their source."""
import os
import shutil
import subprocess
import tarfile
import time

import pytest

from test_pack import data, packs, state, wait_states, wr

FIELDS = ("st_ino", "st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
          "st_mtime_ns", "st_ctime_ns")


def shown(path):
    st = os.lstat(path)
    return {f: getattr(st, f) for f in FIELDS}


def tree_files(root):
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(out)


def test_packing_and_marks_leave_stat_alone(mount_factory):
    """What the daemon shows (seen through read-only mounts of the same
    BACKING: the writer's kernel keeps its own mtime and ctime of a file
    under the writeback cache) is the same before and after the durable
    marks and the packing, and through a remount of the writer."""
    m = mount_factory()
    os.mkdir(m.path("d"))
    names = [f"d/s{i}" for i in range(60)] + [f"big{i}" for i in range(3)]
    sizes = {n: 300 + 97 * i if n.startswith("d/") else 700_000
             for i, n in enumerate(names)}
    for i, n in enumerate(names):
        wr(m.path(n), data(sizes[n], i))
    names += ["d", ""]                  # the directories: a pack is made in d
    r1 = mount_factory(options=["ro"], backing=m.backing, name="r1")
    before = {n: shown(r1.path(n)) for n in names}
    assert r1.unmount() == 0, r1.log()
    small = {n: "packed" for n in names if n.startswith("d/")}
    assert wait_states(m.backing, small) == small, m.log()[-2000:]
    time.sleep(2.5)                     # the big files' marks too
    r2 = mount_factory(options=["ro"], backing=m.backing, name="r2")
    after = {n: shown(r2.path(n)) for n in names}
    assert r2.unmount() == 0, r2.log()
    inos = [s["st_ino"] for s in after.values()]
    assert len(set(inos)) == len(inos)
    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=m.backing, name="again")
    again = {n: shown(m2.path(n)) for n in names}
    for name, got in (("after the background work", after),
                      ("after a remount", again)):
        diff = {n: {f: (before[n][f], got[n][f]) for f in FIELDS
                    if before[n][f] != got[n][f]} for n in names}
        assert got == before, (name, {n: d for n, d in diff.items() if d})
    for i, n in enumerate(names):
        if n in sizes:
            with open(m2.path(n), "rb") as f:
                assert f.read() == data(sizes[n], i)
    assert m2.unmount() == 0, m2.log()


def test_reclaiming_packs_leaves_the_directory_alone(mount_factory):
    """Removing packed files changes their directory's times (the user's
    change); the pack removed a moment later by the reclaimer does not."""
    m = mount_factory()
    os.mkdir(m.path("d"))
    for i in range(20):
        wr(m.path(f"d/f{i}"), data(500 + i, i))
    want = {f"d/f{i}": "packed" for i in range(20)}
    assert wait_states(m.backing, want) == want, m.log()[-2000:]
    bd = os.path.join(m.backing, "d")
    assert packs(bd)
    for i in range(20):
        os.unlink(m.path(f"d/f{i}"))
    time.sleep(1.2)                     # past the attribute timeout
    seen = shown(m.path("d"))
    deadline = time.time() + 30
    while packs(bd) and time.time() < deadline:
        time.sleep(0.2)
    assert not packs(bd), m.log()[-2000:]
    time.sleep(1.2)
    assert shown(m.path("d")) == seen
    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=m.backing, name="again")
    assert shown(m2.path("d")) == seen
    assert m2.unmount() == 0, m2.log()


def test_a_change_right_after_packing_shows(mount_factory):
    """A chmod through the mount moves the ctime shown, also the one that
    comes right after the durable mark or packing kept the old one."""
    m = mount_factory()
    wr(m.path("f"), data(900, 3))
    assert wait_states(m.backing, {"f": "packed"}) == {"f": "packed"}
    time.sleep(1.2)
    c0 = os.stat(m.path("f")).st_ctime_ns
    time.sleep(0.05)
    os.chmod(m.path("f"), 0o600)
    st = os.stat(m.path("f"))
    assert st.st_ctime_ns > c0 and (st.st_mode & 0o777) == 0o600
    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=m.backing, name="again")
    assert os.stat(m2.path("f")).st_ctime_ns == st.st_ctime_ns
    assert m2.unmount() == 0, m2.log()


def test_tree_copies_during_packing_equal_the_source(mount_factory, tmp_path):
    """cp -a, rsync -aH, tar and git status over a tree while it is being
    packed: the copies equal the source, no file is taken for a hard link
    of another, tar does not say 'file changed as we read it'."""
    m = mount_factory()
    src = m.path("t")
    os.mkdir(src)
    want = {}
    for i in range(400):
        rel = f"d{i % 8}/f{i}"
        os.makedirs(os.path.join(src, f"d{i % 8}"), exist_ok=True)
        want[rel] = data(200 + (i * 37) % 3000, i)
        wr(os.path.join(src, rel), want[rel])
    have_git = shutil.which("git") is not None
    if have_git:
        subprocess.run(["git", "init", "-q", src], check=True)
        subprocess.run(["git", "-C", src, "add", "-A"], check=True)
        subprocess.run(["git", "-C", src, "-c", "user.name=t", "-c",
                        "user.email=t@t", "commit", "-qm", "t"], check=True)
    time.sleep(1.0)        # the marks of the files are under way: packing
    cp_dst = tmp_path / "cp"
    subprocess.run(["cp", "-a", src, str(cp_dst)], check=True)
    tar_out = tmp_path / "t.tar"
    r = subprocess.run(["tar", "-C", m.path(""), "-cf", str(tar_out), "t"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rs_dst = tmp_path / "rs"
    if shutil.which("rsync"):
        subprocess.run(["rsync", "-aH", src + "/", str(rs_dst)], check=True)
    if have_git:
        st = subprocess.run(["git", "-C", src, "status", "--porcelain"],
                            capture_output=True, text=True, check=True)
        assert st.stdout == ""
    for rel, content in want.items():
        with open(cp_dst / rel, "rb") as f:
            assert f.read() == content, rel
        if rs_dst.exists():
            with open(rs_dst / rel, "rb") as f:
                assert f.read() == content, rel
            assert os.stat(rs_dst / rel).st_nlink == 1, rel
    with tarfile.open(tar_out) as t:
        links = [x.name for x in t.getmembers() if x.islnk()]
        assert links == []
        for rel, content in want.items():
            assert t.extractfile("t/" + rel).read() == content
    assert m.unmount() == 0, m.log()
    packed = sum(state(os.path.join(m.backing, "t", rel)) == "packed"
                 for rel in want)
    assert packed > 300, packed


@pytest.mark.parametrize("opts", [[], ["nowriteback"]])
def test_times_survive_a_remount(mount_factory, opts):
    """xfstests generic/003's first steps: what stat shows of a file written
    in the tick of its creation, one written later, one chmod'ed and one
    truncated is what it shows after a remount (under the writeback cache
    the kernel keeps a file's mtime and ctime itself: the daemon gives its
    backing file those)."""
    m = mount_factory(options=opts)
    with open(m.path("same"), "w") as f:
        f.write("hello\n")
    with open(m.path("later"), "w") as f:
        time.sleep(0.03)
        f.write("hello\n")
    with open(m.path("big"), "wb") as f:
        f.write(data(200_000, 1))
        time.sleep(0.03)
        f.write(data(300_000, 2))
    wr(m.path("mode"), b"x" * 5000)
    time.sleep(0.03)
    os.chmod(m.path("mode"), 0o640)
    wr(m.path("cut"), data(90_000, 3))
    time.sleep(0.03)
    os.truncate(m.path("cut"), 1000)
    names = ["same", "later", "big", "mode", "cut"]
    before = {n: shown(m.path(n)) for n in names}
    time.sleep(3)                       # durable marks, packing
    assert {n: shown(m.path(n)) for n in names} == before
    assert m.unmount() == 0, m.log()
    m2 = mount_factory(backing=m.backing, name="again", options=opts)
    again = {n: shown(m2.path(n)) for n in names}
    diff = {n: {f: (before[n][f], again[n][f]) for f in FIELDS
                if before[n][f] != again[n][f]} for n in names}
    assert again == before, {n: d for n, d in diff.items() if d}
    assert m2.unmount() == 0, m2.log()
