"""The smaller holes of issue 31 (item 4 and the set-ID part of item 5),
through real mounts: a torn unpacking, stale hidden temporaries, rmdir
and a user's `.sqz-tmp.*` file, set-ID bits on fallocate and direct
writes, and the writer lock's mode."""
import errno
import os
import random
import stat
import subprocess
import time

from conftest import run_as
from mountlib import run_cli, squeezefs_bin

PTR_XATTR = "user.squeezefs.packed"
CTR_MAGIC = b"SQZFS\x00\x01\x1a"


def rd(path):
    with open(path, "rb") as f:
        return f.read()


def wr(path, content):
    with open(path, "wb") as f:
        f.write(content)


def has_pointer(bpath):
    return PTR_XATTR in os.listxattr(bpath, follow_symlinks=False)


def wait_for(cond, timeout=8.0):
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def packed(bpath):
    return os.lstat(bpath).st_size == 0 and has_pointer(bpath)


# ------------------------------------------------------ torn unpacking


def test_torn_unpacking_reads_as_the_packed_content(mount_factory):
    """An unpacking torn by a crash after more than the header's first
    sector reached the backing file (a whole header, the header region,
    the header region and part of a record: a container that holds
    nothing), the pointer still set: the packed content counts. verify
    names it (exit 3, never 0), a read-only mount reads the packed content,
    a read-write one resets the backing file to 0 bytes (the packed file
    again). Before: an empty file, and verify exit 0 for the header
    region."""
    m = mount_factory()
    rnd = random.Random(31)
    cuts = (64, 1536, 4096)
    want = {f"s{n}": rnd.randbytes(3000 + n) for n in cuts}
    for name, content in want.items():
        wr(m.path(name), content)
    # a container of raw (incompressible) blocks: no commit in its first
    # 4096 bytes
    wr(m.path("big"), rnd.randbytes(300000))
    back = {n: os.path.join(m.backing, n) for n in want}
    assert wait_for(lambda: all(packed(b) for b in back.values())), m.log()
    assert m.unmount() == 0
    # the first write of a lazy creation: the header, zero anchor slots
    # (written by the later durable marks), the records
    head = rd(os.path.join(m.backing, "big"))
    assert head.startswith(CTR_MAGIC)
    head = head[:512] + bytes(1024) + head[1536:]
    for n in cuts:
        with open(back[f"s{n}"], "r+b") as f:  # the pointer stays
            f.write(head[:n])
    r = run_cli("verify", m.backing, check=False)
    assert r.returncode == 3, r.stdout
    for n in cuts:
        assert (f"{back[f's{n}']}: uncommitted tail, {n} bytes (an unpacking "
                "torn by a crash") in r.stdout, r.stdout
    for n in cuts:  # squeezefs cat reads the packed content too
        c = subprocess.run([squeezefs_bin(), "cat", back[f"s{n}"]],
                           capture_output=True, timeout=60)
        assert c.returncode == 0 and c.stdout == want[f"s{n}"], c.stderr
    ro = mount_factory(options=["ro"], backing=m.backing, name="ro")
    for name, content in want.items():
        assert os.stat(ro.path(name)).st_size == len(content), name
        assert rd(ro.path(name)) == content, name
    assert ro.unmount() == 0
    assert all(os.lstat(b).st_size > 0 for b in back.values())
    m.start()
    for name, content in want.items():
        assert os.stat(m.path(name)).st_size == len(content), name
        assert rd(m.path(name)) == content, name
        assert packed(back[name]), name
    assert m.unmount() == 0
    assert run_cli("verify", m.backing, check=False).returncode == 0
