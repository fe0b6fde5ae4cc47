"""Compression policy on a live mount: directory/file xattrs, rule files,
precedence, effective-policy reporting, recompress, auto, permissions."""
import errno
import json
import os
import random
import time

import pytest

from conftest import run_as
from fsutil import rd, text, wr
from mountlib import RENAME_EXCHANGE, renameat2, run_cli

KiB = 1024
MiB = 1024 * 1024
POLICY = "user.squeezefs.policy"
EFFECTIVE = "user.squeezefs.effective"
RECOMPRESS = "user.squeezefs.recompress"
NOBODY = 65534


def params(path):
    s = json.loads(run_cli("stat", "--json", path).stdout)
    return s["algorithm"], s["zipLevel"], s["logicalBlockSize"]


def effective(path):
    return os.getxattr(path, EFFECTIVE).decode().rstrip("\0\n")


def setpol(path, spec):
    os.setxattr(path, POLICY, spec.encode())


# ---------------------------------------------------------------- directory policy

def test_directory_policy_applies_to_new_files_and_subdirs(mnt):
    d = mnt.path("data")
    os.mkdir(d)
    setpol(d, "lz4hc:9/64K")
    assert os.getxattr(d, POLICY).decode().rstrip("\0") == "lz4hc:9/64K"
    wr(os.path.join(d, "f"), text(300 * KiB))
    assert params(os.path.join(d, "f")) == ("lz4hc", 9, 16)
    os.makedirs(os.path.join(d, "sub", "subsub"))
    wr(os.path.join(d, "sub", "subsub", "g"), text(100 * KiB))
    assert params(os.path.join(d, "sub", "subsub", "g")) == ("lz4hc", 9, 16)
    assert rd(os.path.join(d, "sub", "subsub", "g")) == text(100 * KiB)
    # outside the directory: the mount default zstd:1/128K
    wr(mnt.path("outside"), text(1000))
    assert params(mnt.path("outside")) == ("zstd", 1, 17)
    # the policy lives in BACKING as the same xattr
    assert os.getxattr(os.path.join(mnt.backing, "data"), POLICY).decode().rstrip("\0") \
        == "lz4hc:9/64K"


def test_existing_files_keep_params_when_dir_policy_changes(mnt):
    d = mnt.path("d")
    os.mkdir(d)
    wr(os.path.join(d, "old"), text(200 * KiB))
    setpol(d, "gzip:9/4K")
    wr(os.path.join(d, "new"), text(200 * KiB))
    assert params(os.path.join(d, "old")) == ("zstd", 1, 17)
    assert params(os.path.join(d, "new")) == ("gzip", 9, 12)
    # appending to the old file keeps its parameters
    with open(os.path.join(d, "old"), "ab") as f:
        f.write(b"more")
    assert params(os.path.join(d, "old")) == ("zstd", 1, 17)
    assert rd(os.path.join(d, "old")) == text(200 * KiB) + b"more"


def test_spec_without_block_takes_block_from_below(mount_factory):
    m = mount_factory(options=["compress=zstd:1/64K"])
    os.mkdir(m.path("d"))
    setpol(m.path("d"), "gzip:9")
    wr(m.path("d", "f"), text(100 * KiB))
    assert params(m.path("d", "f")) == ("gzip", 9, 16)


def test_kdb_triple_policy(mnt):
    os.mkdir(mnt.path("k"))
    setpol(mnt.path("k"), "17 2 6")
    wr(mnt.path("k", "f"), text(100 * KiB))
    assert params(mnt.path("k", "f")) == ("gzip", 6, 17)


@pytest.mark.parametrize("bad", ["zstd:99", "bogus", "lz4hc:9/3K", "gzip:x", "", "17 7 0",
                                 "17 1 1", "qipc:1", "zstd:3/128K trailing"])
def test_invalid_policy_rejected(mnt, bad):
    d = mnt.path("d")
    os.mkdir(d)
    with pytest.raises(OSError) as ei:
        os.setxattr(d, POLICY, bad.encode())
    assert ei.value.errno == errno.EINVAL
    wr(mnt.path("f"), b"x")
    with pytest.raises(OSError) as ei:
        os.setxattr(mnt.path("f"), POLICY, bad.encode())
    assert ei.value.errno == errno.EINVAL
    # nothing stored
    with pytest.raises(OSError) as ei:
        os.getxattr(d, POLICY)
    assert ei.value.errno == errno.ENODATA


def test_remove_dir_policy(mnt):
    d = mnt.path("d")
    os.mkdir(d)
    setpol(d, "snappy/4K")
    wr(os.path.join(d, "a"), text(50 * KiB))
    os.removexattr(d, POLICY)
    wr(os.path.join(d, "b"), text(50 * KiB))
    assert params(os.path.join(d, "a")) == ("snappy", 0, 12)
    assert params(os.path.join(d, "b")) == ("zstd", 1, 17)


def test_moved_directory_takes_its_new_chain_at_once(mnt):
    # the daemon caches a directory's chain for new files: a rename
    # through the mount must not leave the old one in use
    for top, spec in (("a", "lz4/4K"), ("b", "gzip:9/16K")):
        os.mkdir(mnt.path(top))
        setpol(mnt.path(top), spec)
    os.makedirs(mnt.path("a", "sub"))
    wr(mnt.path("a", "sub", "f1"), text(40 * KiB))
    assert params(mnt.path("a", "sub", "f1")) == ("lz4", 0, 12)
    os.rename(mnt.path("a", "sub"), mnt.path("b", "sub"))
    wr(mnt.path("b", "sub", "f2"), text(40 * KiB))
    assert params(mnt.path("b", "sub", "f2")) == ("gzip", 9, 14)
    # an ancestor moved: the same
    os.makedirs(mnt.path("b", "sub", "deep"))
    wr(mnt.path("b", "sub", "deep", "g1"), text(40 * KiB))
    os.rename(mnt.path("b", "sub"), mnt.path("a", "sub2"))
    wr(mnt.path("a", "sub2", "deep", "g2"), text(40 * KiB))
    assert params(mnt.path("a", "sub2", "deep", "g1")) == ("gzip", 9, 14)
    assert params(mnt.path("a", "sub2", "deep", "g2")) == ("lz4", 0, 12)
    # exchanged directories swap chains
    os.makedirs(mnt.path("b", "x"))
    wr(mnt.path("a", "sub2", "h1"), text(40 * KiB))
    wr(mnt.path("b", "x", "h1"), text(40 * KiB))
    renameat2(mnt.path("a", "sub2"), mnt.path("b", "x"), RENAME_EXCHANGE)
    wr(mnt.path("a", "sub2", "h2"), text(40 * KiB))  # was b/x
    wr(mnt.path("b", "x", "h2"), text(40 * KiB))     # was a/sub2
    assert params(mnt.path("a", "sub2", "h2")) == ("lz4", 0, 12)
    assert params(mnt.path("b", "x", "h2")) == ("gzip", 9, 14)
    for rel in ("a/sub2/h1", "b/x/h1"):
        assert rd(mnt.path(rel)) == text(40 * KiB)


def test_policy_set_on_backing_is_seen_within_the_timeout(mnt):
    # set behind the mount's back (on BACKING): no generation bump, so
    # the cached chain of the directory serves until it is a second old
    d = mnt.path("d")
    os.mkdir(d)
    wr(os.path.join(d, "a"), text(40 * KiB))
    setpol(os.path.join(mnt.backing, "d"), "snappy/8K")
    time.sleep(1.2)
    wr(os.path.join(d, "b"), text(40 * KiB))
    assert params(os.path.join(d, "a")) == ("zstd", 1, 17)
    assert params(os.path.join(d, "b")) == ("snappy", 0, 13)


def test_new_directory_takes_its_parents_chain(mnt):
    # a directory made through the mount takes its parent's cached chain
    # (no walk at its first create, newfile_policy.c) with the parent's
    # walk time: what is set on BACKING behind the mount's back is still
    # seen a second later, and what is set through the mount at once
    d = mnt.path("d")
    os.mkdir(d)
    setpol(d, "lz4/16K")
    wr(os.path.join(d, "a"), text(40 * KiB))        # walks d's chain
    sub = os.path.join(d, "sub")
    os.mkdir(sub)                                   # takes d's
    wr(os.path.join(sub, "b"), text(40 * KiB))
    assert params(os.path.join(sub, "b")) == ("lz4", 0, 14)
    setpol(os.path.join(mnt.backing, "d", "sub"), "snappy/8K")
    time.sleep(1.2)
    wr(os.path.join(sub, "c"), text(40 * KiB))
    assert params(os.path.join(sub, "c")) == ("snappy", 0, 13)
    os.mkdir(os.path.join(sub, "deeper"))           # takes sub's
    setpol(sub, "zstd:3/32K")
    wr(os.path.join(sub, "deeper", "e"), text(40 * KiB))
    assert params(os.path.join(sub, "deeper", "e")) == ("zstd", 3, 15)
    for name in ("a", "sub/b", "sub/c", "sub/deeper/e"):
        assert rd(os.path.join(d, name)) == text(40 * KiB)


# ---------------------------------------------------------------- reporting

def test_effective_xattr_and_policy_get(mnt):
    d = mnt.path("data")
    os.makedirs(os.path.join(d, "sub"))
    setpol(d, "zstd:3/128K")
    f = os.path.join(d, "sub", "f")
    wr(f, text(10000))
    assert effective(f) == "zstd:3/128K directory data"
    out = run_cli("policy", "get", f).stdout
    assert "zstd:3/128K (from directory data)" in out, out
    # the directory itself
    assert effective(d) == "zstd:3/128K directory data"
    # the default
    wr(mnt.path("plain"), b"x")
    e = effective(mnt.path("plain"))
    assert e.startswith("zstd:1/128K default"), e
    out = run_cli("policy", "get", mnt.path("plain")).stdout
    assert "zstd:1/128K (from default" in out, out


def test_file_policy_beats_directory(mnt):
    d = mnt.path("d")
    os.mkdir(d)
    setpol(d, "lz4/4K")
    f = os.path.join(d, "f")
    wr(f, b"")
    setpol(f, "gzip:1/64K")
    assert os.getxattr(f, POLICY).decode().rstrip("\0") == "gzip:1/64K"
    assert effective(f) == "gzip:1/64K file d/f"
    out = run_cli("policy", "get", f).stdout
    assert "gzip:1/64K (from file d/f)" in out, out
    assert effective(os.path.join(d)) == "lz4/4K directory d"


def test_precedence_with_rule_file(mount_factory, tmp_path):
    rules = tmp_path / "policy.rules"
    rules.write_text("# test rules\n"
                     "**/sym none\n"
                     "*.log gzip:9/64K\n"
                     "/top/*.bin \"12 4 5\"\n")
    m = mount_factory(options=[f"policy={rules}", "compress=zstd:1/128K"])
    os.makedirs(m.path("a", "b"))
    os.makedirs(m.path("top"))
    os.makedirs(m.path("pol", "inner"))
    setpol(m.path("pol"), "lz4/4K")
    setpol(m.path("pol", "inner"), "snappy/16K")
    cases = {
        "x.log": ("gzip", 9, 16),          # rule
        "a/b/deep.log": ("gzip", 9, 16),   # rule, basename anywhere
        "x.dat": ("zstd", 1, 17),          # default
        "sym": ("none", 0, 17),            # **/sym matches at the root too
        "a/b/sym": ("none", 0, 17),        # rule **/sym
        "top/v.bin": ("lz4hc", 5, 12),     # anchored rule with a kdb+ triple
        "a/v.bin": ("zstd", 1, 17),        # anchored rule does not match here
        "pol/x.log": ("lz4", 0, 12),       # directory beats rule
        "pol/inner/x.log": ("snappy", 0, 14),  # nearest directory wins
        "pol/inner/sym": ("snappy", 0, 14),
    }
    for rel, want in cases.items():
        wr(m.path(rel), text(40 * KiB))
        assert params(m.path(rel)) == want, rel
        assert rd(m.path(rel)) == text(40 * KiB)
    e = effective(m.path("x.log"))
    assert e.startswith("gzip:9/64K rule ") and e.endswith(":3"), e
    assert effective(m.path("pol/x.log")) == "lz4/4K directory pol"
    assert effective(m.path("pol/inner/x.log")) == "snappy/16K directory pol/inner"
    out = run_cli("policy", "get", m.path("x.log")).stdout
    assert "gzip:9/64K (from rule" in out, out


def test_rename_into_other_policy_keeps_params(mnt):
    os.mkdir(mnt.path("gz"))
    os.mkdir(mnt.path("l4"))
    setpol(mnt.path("gz"), "gzip:9/64K")
    setpol(mnt.path("l4"), "lz4/4K")
    data = text(300 * KiB)
    wr(mnt.path("gz", "f"), data)
    os.rename(mnt.path("gz", "f"), mnt.path("l4", "f"))
    assert params(mnt.path("l4", "f")) == ("gzip", 9, 16)
    assert rd(mnt.path("l4", "f")) == data
    # it gets written to in the new place: parameters still kept
    with open(mnt.path("l4", "f"), "r+b") as fh:
        fh.seek(1000)
        fh.write(b"CHANGED")
    assert params(mnt.path("l4", "f")) == ("gzip", 9, 16)
    # but effective policy now reports the new directory (for new files)
    assert effective(mnt.path("l4", "f")) == "lz4/4K directory l4"


def test_policy_survives_remount(mount_factory):
    m = mount_factory()
    os.mkdir(m.path("d"))
    setpol(m.path("d"), "lz4hc:12/1M")
    wr(m.path("d", "before"), text(2 * MiB))
    m.unmount()
    m2 = mount_factory(options=["compress=gzip:1/4K"], backing=m.backing, name="again")
    assert os.getxattr(m2.path("d"), POLICY).decode().rstrip("\0") == "lz4hc:12/1M"
    wr(m2.path("d", "after"), text(100 * KiB))
    assert params(m2.path("d", "after")) == ("lz4hc", 12, 20)
    assert params(m2.path("d", "before")) == ("lz4hc", 12, 20)
    assert rd(m2.path("d", "before")) == text(2 * MiB)
    wr(m2.path("top"), text(100 * KiB))
    assert params(m2.path("top")) == ("gzip", 1, 12)


def test_nonroot_cannot_set_policy_on_root_file(public_mount_factory):
    m = public_mount_factory(options=["allow_other"])
    os.chmod(m.mnt, 0o755)
    wr(m.path("rootfile"), text(1000))
    os.chmod(m.path("rootfile"), 0o644)
    os.mkdir(m.path("rootdir"), 0o755)
    os.mkdir(m.path("open"), 0o777)
    os.chmod(m.path("open"), 0o777)
    code = f"""
import errno, os
def t(fn):
    try:
        fn(); return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
M = {m.mnt!r}
r = {{}}
r["file"] = t(lambda: os.setxattr(M + "/rootfile", {POLICY!r}, b"none"))
r["dir"] = t(lambda: os.setxattr(M + "/rootdir", {POLICY!r}, b"none"))
r["recompress"] = t(lambda: os.setxattr(M + "/rootfile", {RECOMPRESS!r}, b"none"))
with open(M + "/open/mine", "wb") as f:
    f.write(b"nobody's data" * 1000)
r["own"] = t(lambda: os.setxattr(M + "/open/mine", {POLICY!r}, b"gzip:9"))
print(repr(r))
"""
    p = run_as(NOBODY, code)
    assert p.returncode == 0, p.stderr
    r = eval(p.stdout)
    assert r["file"] in ("EPERM", "EACCES"), r
    assert r["dir"] in ("EPERM", "EACCES"), r
    assert r["recompress"] in ("EPERM", "EACCES"), r
    assert r["own"] == "ok", r
    for p_ in ("rootfile", "rootdir"):
        with pytest.raises(OSError) as ei:
            os.getxattr(m.path(p_), POLICY)
        assert ei.value.errno == errno.ENODATA
    assert params(m.path("rootfile")) == ("zstd", 1, 17)


# ---------------------------------------------------------------- recompress / auto

def test_recompress_xattr(mnt):
    f = mnt.path("f")
    data = text(700 * KiB) + os.urandom(5000)
    wr(f, data)
    assert params(f)[0] == "zstd"
    os.setxattr(f, RECOMPRESS, b"gzip:9")
    a, lvl, lbs = params(f)
    assert (a, lvl) == ("gzip", 9)
    assert lbs == 17  # block size kept when the spec gives none
    assert rd(f) == data
    assert os.stat(f).st_size == len(data)
    os.setxattr(f, RECOMPRESS, b"lz4hc:4/4K")
    assert params(f) == ("lz4hc", 4, 12)
    assert rd(f) == data
    with pytest.raises(OSError) as ei:
        os.setxattr(f, RECOMPRESS, b"zstd:99")
    assert ei.value.errno == errno.EINVAL
    assert params(f) == ("lz4hc", 4, 12)


def test_recompress_open_file(mnt):
    """Recompress while the file is open with dirty data: nothing lost."""
    f = mnt.path("f")
    fd = os.open(f, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, text(500 * KiB))
        os.setxattr(f, RECOMPRESS, b"snappy")
        os.write(fd, b"after")
        assert os.pread(fd, 600 * KiB, 0) == text(500 * KiB) + b"after"
    finally:
        os.close(fd)
    assert rd(f) == text(500 * KiB) + b"after"
    assert params(f)[0] == "snappy"


def test_recompress_cli(mnt):
    f = mnt.path("f")
    data = text(900 * KiB, 3)
    wr(f, data)
    run_cli("recompress", "--policy", "lz4", f)
    assert params(f)[0] == "lz4"
    assert rd(f) == data


def test_auto_policy(mnt):
    os.mkdir(mnt.path("auto"))
    setpol(mnt.path("auto"), "auto")
    rnd = random.Random(9).randbytes(1 * MiB)
    wr(mnt.path("auto", "random.bin"), rnd)
    wr(mnt.path("auto", "text.txt"), text(1 * MiB))
    s_r = json.loads(run_cli("stat", "--json", mnt.path("auto", "random.bin")).stdout)
    s_t = json.loads(run_cli("stat", "--json", mnt.path("auto", "text.txt")).stdout)
    assert s_r["algorithm"] == "none", s_r
    assert s_t["algorithm"] != "none", s_t
    assert s_t["compressedLength"] < s_t["uncompressedLength"] // 3, s_t
    assert s_r["auto"] is True and s_t["auto"] is True
    assert rd(mnt.path("auto", "random.bin")) == rnd
    assert rd(mnt.path("auto", "text.txt")) == text(1 * MiB)


@pytest.mark.parametrize("mode", ["auto:ratio", "auto:speed"])
def test_auto_modes(mnt, mode):
    os.mkdir(mnt.path("a"))
    setpol(mnt.path("a"), mode)
    rnd = random.Random(2).randbytes(512 * KiB)
    wr(mnt.path("a", "r"), rnd)
    wr(mnt.path("a", "t"), text(512 * KiB))
    s_r = json.loads(run_cli("stat", "--json", mnt.path("a", "r")).stdout)
    s_t = json.loads(run_cli("stat", "--json", mnt.path("a", "t")).stdout)
    assert s_r["algorithm"] == "none", s_r
    assert s_t["algorithm"] != "none" and s_t["ratio"] > 2, s_t
    assert rd(mnt.path("a", "r")) == rnd


def test_policy_cli_set_unset_on_mount(mnt):
    d = mnt.path("d")
    os.mkdir(d)
    run_cli("policy", "set", d, "gzip:9/64K")
    assert os.getxattr(d, POLICY).decode().rstrip("\0") == "gzip:9/64K"
    out = run_cli("policy", "get", d).stdout
    assert "gzip:9/64K (from directory d)" in out, out
    wr(os.path.join(d, "f"), text(10000))
    assert params(os.path.join(d, "f")) == ("gzip", 9, 16)
    bad = run_cli("policy", "set", d, "gzip:42", check=False)
    assert bad.returncode != 0 and bad.stderr.strip()
    run_cli("policy", "unset", d)
    with pytest.raises(OSError):
        os.getxattr(d, POLICY)
    out = run_cli("policy", "get", os.path.join(d, "f")).stdout
    assert "zstd:1/128K (from default" in out, out
