"""Access times as a local file system keeps them (xfstests generic/003):
the kernel leaves a FUSE file's atime to the daemon, and reads served from
its page cache never reach the daemon, so the daemon moves the atime at an
open for reading, as the mount's atime option says (relatime, the default:
when it is not after the mtime or ctime; noatime: never; strictatime:
always), and its own reads of the backing file never move it."""
import os
import time

import pytest

from mountlib import Mount


def times(path):
    st = os.stat(path)
    return (st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)


def changed(a, b):
    return tuple(x != y for x, y in zip(a, b))


def cat(path):
    with open(path, "rb") as f:
        f.read()


@pytest.mark.parametrize("opts", [[], ["nowriteback", "nopack"]])
def test_atime_follows_the_mount_options(mount_factory, opts):
    m = mount_factory(options=opts)
    os.mkdir(m.path("d"))
    with open(m.path("d/f1"), "w") as f:
        f.write("aaa\n")
    before = times(m.path("d/f1"))
    time.sleep(1.1)
    cat(m.path("d/f1"))
    first = times(m.path("d/f1"))
    assert changed(before, first) == (True, False, False)
    time.sleep(1.1)
    cat(m.path("d/f1"))
    second = times(m.path("d/f1"))
    assert changed(first, second) == (False, False, False)   # relatime
    d_before = times(m.path("d"))
    assert m.unmount() == 0, m.log()
    m = mount_factory(backing=m.backing, name="noatime",
                      options=opts + ["noatime"])
    assert times(m.path("d/f1")) == second      # background work, remount
    assert times(m.path("d")) == d_before
    with open(m.path("d/f3"), "w") as f:
        f.write("ccc\n")
    f3 = times(m.path("d/f3"))
    time.sleep(1.1)
    cat(m.path("d/f3"))
    assert changed(f3, times(m.path("d/f3"))) == (False, False, False)
    assert m.unmount() == 0, m.log()
    m = mount_factory(backing=m.backing, name="strict",
                      options=opts + ["strictatime"])
    a = times(m.path("d/f3"))
    cat(m.path("d/f3"))
    b = times(m.path("d/f3"))
    assert changed(a, b) == (True, False, False)
    time.sleep(1.1)
    cat(m.path("d/f3"))
    assert changed(b, times(m.path("d/f3"))) == (True, False, False)
    # an open with O_NOATIME, and one for writing only, move nothing
    c = times(m.path("d/f3"))
    time.sleep(0.05)
    os.close(os.open(m.path("d/f3"), os.O_RDONLY | os.O_NOATIME))
    os.close(os.open(m.path("d/f3"), os.O_WRONLY))
    assert times(m.path("d/f3")) == c
    assert m.unmount() == 0, m.log()
