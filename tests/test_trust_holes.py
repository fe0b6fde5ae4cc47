"""The smaller holes of issue 31 (item 4, and the set-ID tests of item 5),
through real mounts: a torn unpacking, leftover hidden temporaries, rmdir
and a user's `.sqz-tmp.*` file, set-ID bits on fallocate and direct
writes, the writer lock's mode, and CREATE of a name made meanwhile."""
import errno
import json
import os
import random
import re
import shutil
import stat
import subprocess
import time

import pytest

from conftest import run_as
from fsutil import rd, words, wr
from mountlib import extra_mount_options, run_cli, squeezefs_bin

PTR_XATTR = "user.squeezefs.packed"
CTR_MAGIC = b"SQZFS\x00\x01\x1a"


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
    the header region and part of a record: a container with no commit),
    the pointer still set: the packed content counts. verify
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


def test_stale_pointer_on_a_container_emptied_counts_for_nothing(mount_factory):
    """An unpacking whose pointer removal a crash undid leaves a container
    with a stale pointer; emptied later (truncate, O_TRUNC), it has a
    commit: an empty file, never the old packed content again."""
    m = mount_factory()
    old = {"t": b"old packed content " * 50, "o": b"other old content " * 50}
    for n, c in old.items():
        wr(m.path(n), c)
    back = {n: os.path.join(m.backing, n) for n in old}
    assert wait_for(lambda: all(packed(b) for b in back.values())), m.log()
    ptrs = {n: os.getxattr(b, PTR_XATTR) for n, b in back.items()}
    assert m.unmount() == 0
    m = mount_factory(options=["nopack"], backing=m.backing, name="nopack")
    for n in old:
        with open(m.path(n), "r+b") as f:  # unpacked: a container
            f.write(b"N")
    assert m.unmount() == 0
    for n, b in back.items():
        assert rd(b).startswith(CTR_MAGIC) and not has_pointer(b)
        os.setxattr(b, PTR_XATTR, ptrs[n])  # the removal undone by a crash
    m.start()
    assert rd(m.path("t")) == b"N" + old["t"][1:]
    os.truncate(m.path("t"), 0)
    with open(m.path("o"), "r+b") as f:
        f.truncate(0)
    wr(m.path("o"), b"")
    for n in old:
        assert os.stat(m.path(n)).st_size == 0 and rd(m.path(n)) == b"", n
    assert m.unmount() == 0
    for n, b in back.items():
        c = subprocess.run([squeezefs_bin(), "cat", b], capture_output=True, timeout=60)
        assert c.returncode == 0 and c.stdout == b"", n
    m.start()
    for n in old:
        assert os.stat(m.path(n)).st_size == 0 and rd(m.path(n)) == b"", n
    assert m.unmount() == 0


# ------------------------------------------------- hidden temporaries


def daemon_temps(bdir):
    return sorted(n for n in os.listdir(bdir) if TEMP_RE.match(n))


TEMP_RE = re.compile(r"^\.sqz-tmp\.[0-9a-f]{16}$")


def intents(ids):
    if not os.path.isdir(ids):
        return []
    return sorted(n for n in os.listdir(ids) if n.startswith("n."))


def test_leftover_temporaries_are_reported_and_removed(mount_factory, tmp_path):
    """A kill -9 during a tiering (a recompress or packing alike) leaves its
    hidden temporary: verify lists it with its size (exit 3), and the next
    read-write mount removes it when it lists the directory. Hidden files
    the daemon did not make (a user's, a plain file with a temporary's
    name, an offline recompress temporary) are listed by verify and never
    removed. Before: verify skipped them all (exit 0) and the temporary
    stayed for good."""
    rules = tmp_path / "rules"
    rules.write_text("/d/** lz4/64K after 1d zstd:6/256K\n* zstd:1\n")
    opts = ["policy=" + str(rules), "nopack"]
    m = mount_factory(options=opts)
    os.makedirs(m.path("d"))
    data = words(3 << 20, 1)
    wr(m.path("d", "f"), data)
    old = time.time() - 2 * 86400
    os.utime(m.path("d", "f"), (old, old))
    bd = os.path.join(m.backing, "d")
    ids = os.path.join(m.backing, ".sqz-tmp.ids")
    job = subprocess.Popen([squeezefs_bin(), "tier", "--max-rate", "1", m.path("d", "f")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # on a local BACKING the temporary is in .sqz-tmp.ids, named for its
    # intent (FORMAT.md "Kept inode numbers")
    assert wait_for(lambda: intents(ids), timeout=20), m.log()
    time.sleep(0.3)  # some of the copy written
    m.kill()
    job.wait(timeout=60)
    intent = intents(ids)
    assert len(intent) == 1
    # next to the file: one as a shared BACKING's replace (or a daemon
    # before kept inode numbers) leaves it, a partly written container
    left = [".sqz-tmp.00000000000000aa"]
    shutil.copyfile(os.path.join(ids, intent[0]), os.path.join(bd, left[0]))
    foreign = {".sqz-tmp.notes": b"a user's notes",
               ".sqz-tmp.0123456789abcdef": b"plain bytes, not a container",
               ".sqz-tmp.f.Ab12Cd": b"offline recompress temporary"}
    for n, content in foreign.items():
        wr(os.path.join(bd, n), content)
    # a packing temporary: 0 bytes
    wr(os.path.join(bd, ".sqz-tmp.00000000000000ff"), b"")
    left.append(".sqz-tmp.00000000000000ff")
    r = run_cli("verify", m.backing, check=False)
    assert r.returncode == 3, r.stdout
    for n in left + list(foreign):
        size = os.path.getsize(os.path.join(bd, n))
        why = "a temporary of the daemon's" if n in left else "not shown"
        assert f"{os.path.join(bd, n)}: leftover hidden file, {size} bytes ({why}" \
            in r.stdout, (n, r.stdout)
    assert "writer-lock" not in r.stdout
    size = os.path.getsize(os.path.join(ids, intent[0]))
    assert f"{os.path.join(ids, intent[0])}: leftover hidden file, {size} bytes (a " \
        "replace's temporary" in r.stdout, r.stdout
    m = mount_factory(options=opts, backing=m.backing, name="again")
    assert os.listdir(ids) == []        # removed before the mount served
    assert rd(m.path("d", "f")) == data
    assert os.listdir(m.path("d")) == ["f"]
    assert daemon_temps(bd) == [".sqz-tmp.0123456789abcdef"]
    for n, content in foreign.items():
        assert rd(os.path.join(bd, n)) == content
    assert "a temporary left by a crash" in m.log()
    assert m.unmount() == 0
    r = run_cli("verify", m.backing, check=False)
    assert r.returncode == 3 and r.stdout.count(": leftover hidden file, ") == 3
    assert "a read-write mount removes it" not in r.stdout


def test_listing_keeps_the_temporary_of_a_running_job(mount_factory, tmp_path):
    """A directory listed over and over while a tiering job (rate-limited:
    its copy runs without the file's lock) has its temporary there: the
    temporary is in use, not a leftover; the job completes."""
    if "io_uring" in extra_mount_options():
        # one thread per ring: the job's request holds up the listings of
        # its core until it ends, so they do not meet the temporary
        pytest.skip("a long request holds up its ring's other requests over io_uring")
    rules = tmp_path / "rules"
    rules.write_text("/hdb/** lz4/64K after 1d zstd:6/256K\n* zstd:1\n")
    m = mount_factory(options=["policy=" + str(rules), "nopack"])
    os.makedirs(m.path("hdb"))
    data = words(3 << 20, 2)
    wr(m.path("hdb", "f"), data)
    old = time.time() - 2 * 86400
    os.utime(m.path("hdb", "f"), (old, old))
    ids = os.path.join(m.backing, ".sqz-tmp.ids")
    job = subprocess.Popen([squeezefs_bin(), "tier", "--max-rate", "3", m.path("hdb", "f")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    met = 0
    while job.poll() is None:
        assert os.listdir(m.path("hdb")) == ["f"]
        assert os.listdir(m.path("")) == ["hdb"]
        # (on a local BACKING the temporary is in .sqz-tmp.ids)
        met += bool(intents(ids))
    out, err = job.communicate()
    assert job.returncode == 0, (out, err, m.log())
    assert met > 10  # listed many times while the temporary was there
    assert rd(m.path("hdb", "f")) == data
    assert json.loads(run_cli("stat", "--json", m.path("hdb", "f")).stdout)[
        "algorithm"] == "zstd"
    assert "a temporary left by a crash" not in m.log()
    assert m.unmount() == 0


# ------------------------------------------------------- rmdir


def test_rmdir_removes_only_the_daemons_hidden_files(mount_factory):
    """rmdir through the mount of a directory with no visible entries
    removes the daemon's packs and temporaries, never a user's file named
    .sqz-tmp.*: with one there it fails with ENOTEMPTY and removes nothing.
    Before: any regular .sqz-tmp.* file was deleted."""
    m = mount_factory()
    rnd = random.Random(3)
    cases = {
        "notes": {".sqz-tmp.notes": b"a user's notes"},
        "plain": {".sqz-tmp.0123456789abcdef": b"plain, not a container"},
        "fakepack": {".sqz-tmp.pack.0123456789abcdef": b"not a pack" * 10},
        "otherpack": {},  # a real pack renamed to another id: filled below
    }
    for d in list(cases) + ["own"]:
        os.makedirs(m.path(d))
        wr(m.path(d, "f"), rnd.randbytes(2000))
    bk = {d: os.path.join(m.backing, d) for d in list(cases) + ["own"]}
    assert wait_for(lambda: all(packed(os.path.join(b, "f")) for b in bk.values()))
    for d in bk:
        os.unlink(m.path(d, "f"))
    pk = [n for n in os.listdir(bk["otherpack"]) if n.startswith(".sqz-tmp.pack.")]
    assert len(pk) == 1
    os.rename(os.path.join(bk["otherpack"], pk[0]),
              os.path.join(bk["otherpack"], ".sqz-tmp.pack.00000000000000aa"))
    for d, files in cases.items():
        for n, content in files.items():
            wr(os.path.join(bk[d], n), content)
    for d in cases:
        before = sorted(os.listdir(bk[d]))
        try:
            os.rmdir(m.path(d))
            raise AssertionError(f"{d}: rmdir removed a user's file")
        except OSError as e:
            assert e.errno == errno.ENOTEMPTY, (d, e)
        assert sorted(os.listdir(bk[d])) == before, d
    # the daemon's own: a pack, a temporary of each kind
    wr(os.path.join(bk["own"], ".sqz-tmp.00000000000000ab"), b"")
    with open(os.path.join(bk["own"], ".sqz-tmp.00000000000000ac"), "wb") as f:
        f.write(CTR_MAGIC + (2).to_bytes(4, "little"))
    os.rmdir(m.path("own"))
    assert not os.path.exists(bk["own"])
    assert m.unmount() == 0


# ------------------------------------------------- set-ID bits

NOBODY = 65534

FALLOCATE = ("import ctypes,os,sys\n"
             "fd=os.open(sys.argv[1], os.O_WRONLY)\n"
             "libc=ctypes.CDLL(None, use_errno=True)\n"
             "r=libc.fallocate(fd, int(sys.argv[2]), ctypes.c_long(0), ctypes.c_long(65536))\n"
             "assert r == 0, os.strerror(ctypes.get_errno())\n")
COPY = ("import os,sys\n"
        "fi=os.open(sys.argv[2], os.O_RDONLY); fo=os.open(sys.argv[1], os.O_WRONLY)\n"
        "assert os.copy_file_range(fi, fo, 70000, 0, 0) > 0\n")
DIRECT = ("import mmap,os,sys\n"
          "fd=os.open(sys.argv[1], os.O_RDWR | os.O_DIRECT)\n"
          "b=mmap.mmap(-1, 4096); b.write(b'x' * 4096)\n"
          "assert os.pwrite(fd, b, 0) == 4096\n")


def run_as_nobody(code, *args):
    def demote():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    r = subprocess.run(["/usr/bin/python3", "-c", code, *args], preexec_fn=demote,
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr


def setid_file(m, name, mode, owner=NOBODY):
    p = m.path(name)
    wr(p, b"#!/bin/sh\n" * 50)
    os.chown(p, owner, owner)
    os.chmod(p, mode)
    return p


def test_setid_bits_cleared_by_fallocate_and_direct_writes(public_mount_factory):
    """As a local file system does (xfstests generic/683, generic/355): a
    fallocate (allocating, keep-size or punching) and an O_DIRECT write by
    a caller without CAP_FSETID clear S_ISUID, and S_ISGID when the group
    may execute; set-group-ID without group execute stays; root's fallocate
    keeps the bits. Before: fallocate kept them (the kernel leaves the
    clearing to the daemon with FUSE_HANDLE_KILLPRIV_V2 and tells it
    nothing for FALLOCATE). Punching and zeroing (issue 27) and
    copy_file_range into the file (its destination: the kernel says nothing
    either) clear them the same way."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a second user)")
    m = public_mount_factory(options=["allow_other"])
    # allocate, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE (+KEEP_SIZE)
    for fmode in (0, 1, 3, 0x10, 0x11):
        p = setid_file(m, f"f{fmode}", 0o6775)
        run_as_nobody(FALLOCATE, p, str(fmode))
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o775, fmode
        p = setid_file(m, f"g{fmode}", 0o2664)
        run_as_nobody(FALLOCATE, p, str(fmode))
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o2664, fmode
    # copy_file_range: the destination's bits, as for a write
    p = setid_file(m, "cfr", 0o6775)
    wr(m.path("cfr.src"), b"y" * 70000)
    run_as_nobody(COPY, p, m.path("cfr.src"))
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o775
    p = setid_file(m, "root", 0o6775)
    fd = os.open(p, os.O_WRONLY)
    os.posix_fallocate(fd, 0, 65536)
    os.close(fd)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o6775
    # O_DIRECT writes: the kernel flags them (FUSE_WRITE_KILL_SUIDGID)
    for mode, want in ((0o6644, 0o2644), (0o6744, 0o2744), (0o6654, 0o654),
                       (0o6754, 0o754)):
        p = setid_file(m, f"d{mode:o}", mode)
        run_as_nobody(DIRECT, p)
        assert stat.S_IMODE(os.stat(p).st_mode) == want, oct(mode)
    # set-group-ID without group execute goes too when the caller is not
    # in the file's group (setattr_should_drop_sgid; generic/683 test 1),
    # and stat through the mount shows it at once (the kernel's cached
    # attributes are dropped; generic/355, 683)
    for name, code, args in (("ng", FALLOCATE, ("0",)), ("nd", DIRECT, ())):
        p = setid_file(m, name, 0o6664)
        os.chown(p, NOBODY, 0)
        os.chmod(p, 0o6664)
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o6664
        run_as_nobody(code, p, *args)
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o664, name
    # ... but not for a caller with CAP_FSETID: root's chown of a file of
    # another group clears set-user-ID only (generic/193)
    p = setid_file(m, "rootchown", 0o6664)
    os.chown(p, 0, -1)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o2664
    for name in os.listdir(m.mnt):
        assert stat.S_IMODE(os.stat(m.path(name)).st_mode) == \
            stat.S_IMODE(os.stat(os.path.join(m.backing, name)).st_mode)
    assert m.unmount() == 0


# ------------------------------------------------------- writer lock


def test_writer_lock_is_private(public_mount_factory, tmp_path):
    """The writer lock is 0600 (also one left 0644 by an older daemon's
    crash): another local user cannot open it, so cannot take a lock on a
    stale one that would block the next read-write mount. Before: 0644,
    any user could open it and read-lock it."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a second user)")
    m = public_mount_factory()
    lock = os.path.join(m.backing, ".sqz-tmp.writer-lock")
    os.chmod(m.backing, 0o755)
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    code = ("import os,sys\n"
            "try:\n"
            "    os.close(os.open(sys.argv[1], os.O_RDONLY))\n"
            "    print('opened')\n"
            "except PermissionError:\n"
            "    print('denied')\n")
    r = run_as(NOBODY, code.replace("sys.argv[1]", repr(lock)))
    assert r.stdout.strip() == "denied", r
    m.kill()  # a crash leaves the file; an older daemon made it 0644
    os.chmod(lock, 0o644)
    m.start()
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    r = run_as(NOBODY, code.replace("sys.argv[1]", repr(lock)))
    assert r.stdout.strip() == "denied", r
    assert m.unmount() == 0


# ------------------------------------------------- CREATE of an existing name

RACE_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* The daemon's CREATE (openat O_CREAT|O_EXCL) of the name in
 * $SQZ_RACE_NAME finds that another creator made it just before: the file
 * is made first (root's, $SQZ_RACE_MODE, "secret"), as in a race. */
static int (*real)(int, const char *, int, ...);
static int race(int dfd, const char *name, int flags)
{
    const char *want = getenv("SQZ_RACE_NAME");
    if (!want || strcmp(name, want) || (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL))
        return 0;
    if (!real)
        real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    mode_t m = (mode_t)strtol(getenv("SQZ_RACE_MODE"), NULL, 8);
    int fd = real(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, m);
    if (fd >= 0) {
        fchmod(fd, m);
        if (write(fd, "secret", 6) != 6) {}
        close(fd);
    }
    return 0;
}
int openat(int dfd, const char *name, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    race(dfd, name, flags);
    if (!real)
        real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    return real(dfd, name, flags, mode);
}
int openat64(int dfd, const char *name, int flags, ...)
    __attribute__((alias("openat")));
"""


def test_create_of_a_name_made_meanwhile_checks_permissions(public_mount_factory,
                                                            tmp_path):
    """CREATE (open O_CREAT without O_EXCL) of a name another creator made
    between the kernel's negative LOOKUP and the daemon's create opens the
    existing file, as open(2) would, but only with the access the caller
    has on it: the kernel checked nothing (it saw no file); with O_TRUNC
    its set-ID bits go. Before: a user opened root's 0600 file for
    writing, and O_TRUNC kept root's set-ID bits."""
    import shutil
    if os.geteuid() != 0:
        pytest.skip("needs root (a second user)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler for the race shim")
    src = tmp_path / "race.c"
    src.write_text(RACE_SHIM)
    so = tmp_path / "race.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(src), "-ldl"],
                   check=True)
    opened = ("import os,sys\n"
              "try:\n"
              "    fd = os.open(sys.argv[1], os.O_CREAT | int(sys.argv[2]), 0o666)\n"
              "    print('opened', os.fstat(fd).st_uid)\n"
              "except PermissionError:\n"
              "    print('denied')\n")
    for mode, acc, want in (("600", os.O_WRONLY, "denied"), ("644", os.O_RDWR, "denied"),
                            ("644", os.O_RDONLY, "opened 0"),
                            ("666", os.O_WRONLY, "opened 0"),
                            ("622", os.O_WRONLY, "opened 0"),
                            ("644", os.O_RDONLY | os.O_TRUNC, "denied")):
        m = public_mount_factory(options=["allow_other"], name=f"m{mode}{acc}",
                                 env={"LD_PRELOAD": str(so), "SQZ_RACE_NAME": "f",
                                      "SQZ_RACE_MODE": mode})
        os.chmod(m.backing, 0o777)
        r = run_as(NOBODY, opened.replace("sys.argv[1]", repr(m.path("f")))
                                 .replace("int(sys.argv[2])", str(acc)))
        assert r.stdout.strip() == want, (mode, acc, r)
        assert rd(os.path.join(m.backing, "f")) == b"secret"
        assert m.unmount() == 0
    # with O_TRUNC, as an open(O_TRUNC) would: emptied, set-ID bits cleared
    # for a caller without CAP_FSETID
    m = public_mount_factory(options=["allow_other"], name="trunc",
                             env={"LD_PRELOAD": str(so), "SQZ_RACE_NAME": "f",
                                  "SQZ_RACE_MODE": "6777"})
    os.chmod(m.backing, 0o777)
    r = run_as(NOBODY, opened.replace("sys.argv[1]", repr(m.path("f")))
                             .replace("int(sys.argv[2])", str(os.O_WRONLY | os.O_TRUNC)))
    assert r.stdout.strip() == "opened 0", r
    assert stat.S_IMODE(os.stat(os.path.join(m.backing, "f")).st_mode) == 0o777
    st = os.stat(m.path("f"))
    assert st.st_size == 0 and stat.S_IMODE(st.st_mode) == 0o777
    assert m.unmount() == 0
