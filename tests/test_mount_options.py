"""Mount options of squeezefs: accepted values take effect, bad ones fail
fast (exit 1, a clear message, nothing mounted)."""
import errno
import json
import os
import subprocess
import time

import pytest

from conftest import run_as
from fsutil import rd, text, wr
from mountlib import is_mounted, mount_stats, run_cli, squeezefs_bin

KiB = 1024
MiB = 1024 * 1024
NOBODY = 65534


def sqz_stat(path):
    return json.loads(run_cli("stat", "--json", path).stdout)


def mount_entry(path):
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            dev, mp, typ, opts = line.split()[:4]
            if mp == path:
                return dev, typ, opts.split(",")
    return None


# ---------------------------------------------------------------- failures

def expect_mount_failure(tmp_path, options, backing=None, foreground=True,
                         words=()):
    """Run squeezefs with options; it must exit 1 within a few seconds with
    a message on stderr containing every string of `words` (case-insensitive)
    and leave nothing mounted."""
    if backing is None:
        backing = tmp_path / "backing"
        backing.mkdir(exist_ok=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    cmd = [squeezefs_bin()] + (["-f"] if foreground else [])
    if options:
        cmd += ["-o", ",".join(options)]
    cmd += [str(backing), str(mnt)]
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err = "(killed after 10 s) " + err
    elapsed = time.time() - t0
    mounted = is_mounted(mnt)
    if mounted:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        time.sleep(0.2)
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
    assert not mounted, f"{cmd} mounted (must refuse); stderr: {err}"
    assert p.returncode == 1, f"{cmd}: exit status {p.returncode}, want 1; stderr: {err}"
    assert elapsed < 5, f"{cmd} took {elapsed:.1f}s to fail"
    assert err.strip(), f"{cmd}: no message on stderr"
    for w in words:
        assert w.lower() in err.lower(), f"{cmd}: stderr does not mention {w!r}: {err}"
    return err


BAD_OPTIONS = [
    (["compress=zstd:99"], ["99"]),
    (["compress=zsdt:3"], ["zsdt"]),
    (["compress=gzip:10"], ["10"]),
    (["compress=lz4hc:0"], ["lz4hc"]),
    (["compress=zstd/3K"], ["3K"]),
    (["compress=17 7 0"], ["kdb+ algorithm 7"]),
    (["compress=17 1 1"], ["qipc level 1"]),  # kdb+ IPC (1) has no levels
    (["compress="], ["compress"]),
    (["block=3K"], ["3K"]),
    (["block=2M"], ["2M"]),
    (["block=11"], ["block"]),
    (["block=21"], ["block"]),
    (["threads=-1"], ["threads"]),
    (["threads=abc"], ["threads"]),
    (["max_fds=+"], ["max_fds"]),
    (["max_fds=-5"], ["max_fds"]),
    (["max_fds=15"], ["max_fds"]),
    (["cache=abc"], ["cache"]),
    (["cache=-5M"], ["cache"]),
    (["min_saving=abc"], ["min_saving"]),
    (["readahead=abc"], ["readahead"]),
    (["readahead=1K"], ["readahead"]),
    (["readahead=128M"], ["readahead"]),
    (["min_saving=101"], ["min_saving"]),
    (["wait_writer=-1"], ["wait_writer"]),
    (["wait_writer=3601"], ["wait_writer"]),
    (["wait_writer=5s"], ["wait_writer"]),
    (["foo=bar"], ["foo"]),
    (["nosuchflag"], ["nosuchflag"]),
    (["policy=/nonexistent/rules"], ["/nonexistent/rules"]),
]


@pytest.mark.parametrize("options,words", BAD_OPTIONS, ids=[o[0][0] or "empty" for o in BAD_OPTIONS])
def test_bad_option_fails(tmp_path, sqz_bin, options, words):
    expect_mount_failure(tmp_path, options, words=words)


def test_bad_option_fails_without_foreground(tmp_path, sqz_bin):
    """Without -f the daemon must reject options before it daemonizes."""
    expect_mount_failure(tmp_path, ["compress=zstd:99"], foreground=False, words=["99"])


def test_bad_option_among_good_ones(tmp_path, sqz_bin):
    expect_mount_failure(tmp_path, ["compress=zstd:3/128K", "cache=64M", "threads=nope"],
                         words=["threads"])


def test_rule_file_with_bad_line(tmp_path, sqz_bin):
    rules = tmp_path / "bad.rules"
    rules.write_text("# rules\n*.log gzip:9/64K\n*.dat zsdt:3\n")
    err = expect_mount_failure(tmp_path, [f"policy={rules}"], words=["bad.rules"])
    assert ":3" in err, f"the message should name line 3: {err}"


def test_rule_file_bad_block(tmp_path, sqz_bin):
    rules = tmp_path / "r.rules"
    rules.write_text("*.x zstd:3/5K\n")
    expect_mount_failure(tmp_path, [f"policy={rules}"], words=["r.rules"])


def test_backing_missing(tmp_path, sqz_bin):
    missing = tmp_path / "does-not-exist"
    expect_mount_failure(tmp_path, [], backing=missing, words=[str(missing)])


def test_backing_not_a_directory(tmp_path, sqz_bin):
    f = tmp_path / "plainfile"
    f.write_text("x")
    expect_mount_failure(tmp_path, [], backing=f, words=[str(f)])


def test_wrong_argument_count(tmp_path, sqz_bin):
    p = subprocess.run([squeezefs_bin(), "-f", str(tmp_path)], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode != 0 and p.stderr.strip()


# ---------------------------------------------------------------- success

def test_proc_mounts_type_and_clean_unmount(mount_factory):
    m = mount_factory()
    e = mount_entry(m.mnt)
    assert e is not None, "not in /proc/mounts"
    assert e[1] == "fuse.squeezefs", e
    wr(m.path("f"), b"x")
    assert m.unmount() == 0, m.log()
    assert not is_mounted(m.mnt)


@pytest.mark.parametrize("spec,alg,level,lbs", [
    (None, "zstd", 1, 17),              # the default: zstd:1/128K
    ("zstd:3/128K", "zstd", 3, 17),
    ("lz4hc:9/64K", "lz4hc", 9, 16),
    ("gzip", "gzip", 6, 17),
    ("none", "none", 0, 17),
    ("snappy", "snappy", 0, 17),
    ("lz4", "lz4", 0, 17),
    ("qipc/64K", "qipc", 0, 16),
    ("17 1 0", "qipc", 0, 17),          # kdb+ triple: lbs 17, q IPC, no level
    ("17 2 6", "gzip", 6, 17),          # kdb+ triple: lbs 17, gzip, level 6
    ("12 5 -3", "zstd", -3, 12),
    ("zstd/1M", "zstd", 3, 20),
    ("gzip:9/4096", "gzip", 9, 12),
])
def test_compress_option(mount_factory, spec, alg, level, lbs):
    m = mount_factory(options=[f"compress={spec}"] if spec else [])
    data = text(700 * KiB)
    wr(m.path("f"), data)
    assert rd(m.path("f")) == data
    s = sqz_stat(m.path("f"))
    assert s["algorithm"] == alg, s
    assert s["zipLevel"] == level, s
    assert s["logicalBlockSize"] == lbs, s
    assert s["uncompressedLength"] == len(data)
    if alg != "none":
        assert s["compressedLength"] < len(data) // 2, s
    m.unmount()
    assert run_cli("verify", m.backing, check=False).returncode == 0


@pytest.mark.parametrize("block,lbs", [("4K", 12), ("64K", 16), ("1M", 20), ("14", 14),
                                       ("131072", 17)])
def test_block_option(mount_factory, block, lbs):
    m = mount_factory(options=["compress=zstd:3", f"block={block}"])
    data = text(300 * KiB + 5)
    wr(m.path("f"), data)
    assert rd(m.path("f")) == data
    s = sqz_stat(m.path("f"))
    assert (s["algorithm"], s["zipLevel"], s["logicalBlockSize"]) == ("zstd", 3, lbs), s


@pytest.mark.parametrize("opts", [["threads=1"], ["threads=4"], ["cache=1M"], ["cache=64M"],
                                  ["min_saving=0"], ["min_saving=50"],
                                  ["threads=2", "cache=8M", "compress=lz4/4K"]])
def test_tuning_options_work(mount_factory, opts):
    m = mount_factory(options=opts)
    rnd = os.urandom(200 * KiB)
    files = {f"f{i}": text(500 * KiB + i, i) + rnd for i in range(4)}
    for k, v in files.items():
        wr(m.path(k), v)
    for k, v in files.items():
        assert rd(m.path(k)) == v
    m.unmount()
    m.start()
    for k, v in files.items():
        assert rd(m.path(k)) == v


def bdi_read_ahead_kb(path):
    st = os.stat(path)
    with open(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb") as f:
        return int(f.read())


@pytest.mark.parametrize("opts,name,expect_kb", [
    ([], "mnt", 1024),
    (["readahead=256K"], "mnt", 256),
    (["readahead=4M"], "mnt", 4096),
    (["readahead=0"], "mnt", None),            # None: the kernel's default stays
    ([], "mount point\\with space", 1024),   # mountinfo escapes the path
], ids=["default", "256K", "4M", "off", "escaped-path"])
def test_readahead_option(mount_factory, opts, name, expect_kb):
    """readahead= sets the kernel read-ahead window of the mount (the size
    of buffered read requests) at the first open."""
    if os.geteuid() != 0:
        pytest.skip("setting read_ahead_kb needs root")
    m = mount_factory(options=opts, name=name)
    before = bdi_read_ahead_kb(m.mnt)
    data = text(3 * MiB + 7)
    wr(m.path("f"), data)
    assert rd(m.path("f")) == data
    after = bdi_read_ahead_kb(m.mnt)
    assert after == (before if expect_kb is None else expect_kb), (before, after)


def half_random(n, seed=1):
    """Blocks that compress to roughly 55%: random bytes interleaved with zeros."""
    import random
    r = random.Random(seed)
    out = bytearray()
    while len(out) < n:
        out += r.randbytes(2048) + bytes(1700)
    return bytes(out[:n])


def test_min_saving(mount_factory):
    data = half_random(1 * MiB)
    m = mount_factory(options=["compress=zstd:1/64K", "min_saving=70"], name="hi")
    wr(m.path("f"), data)
    assert rd(m.path("f")) == data
    s = sqz_stat(m.path("f"))
    # every block saves < 70%: all stored raw
    assert s["rawBlocks"] == s["blocks"] == 16, s
    m2 = mount_factory(options=["compress=zstd:1/64K", "min_saving=10"], name="lo")
    wr(m2.path("f"), data)
    s2 = sqz_stat(m2.path("f"))
    assert s2["rawBlocks"] == 0, s2
    assert s2["compressedLength"] < 0.75 * len(data), s2


def test_cache_option_bounds_cache(mount_factory):
    m = mount_factory(options=["compress=zstd:1/128K", "cache=1M"])
    data = text(8 * MiB)
    wr(m.path("f"), data)
    m.unmount()
    m.start()
    assert rd(m.path("f")) == data
    st = mount_stats(m.mnt)
    assert st["cache_bytes"] <= 1 * MiB + 128 * KiB, st


def test_ro(mount_factory):
    m = mount_factory()
    os.mkdir(m.path("d"))
    wr(m.path("d/f"), b"read only data")
    m.unmount()
    ro = mount_factory(options=["ro"], backing=m.backing, name="ro")
    assert "ro" in mount_entry(ro.mnt)[2]
    assert rd(ro.path("d/f")) == b"read only data"
    for fn in (lambda: wr(ro.path("new"), b"x"),
               lambda: os.open(ro.path("d/f"), os.O_WRONLY),
               lambda: os.mkdir(ro.path("d2")),
               lambda: os.unlink(ro.path("d/f")),
               lambda: os.rename(ro.path("d/f"), ro.path("g")),
               lambda: os.truncate(ro.path("d/f"), 0),
               lambda: os.chmod(ro.path("d/f"), 0o600),
               lambda: os.setxattr(ro.path("d/f"), "user.x", b"1")):
        with pytest.raises(OSError) as ei:
            fn()
        assert ei.value.errno == errno.EROFS
    before = os.stat(os.path.join(m.backing, "d/f"))
    ro.unmount()
    after = os.stat(os.path.join(m.backing, "d/f"))
    assert (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns)


PROBE = r"""
import errno, os, sys
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
M = sys.argv[1] if len(sys.argv) > 1 else {mnt!r}
def rd(p):
    with open(p, "rb") as f:
        return f.read()
def wr(p, d):
    with open(p, "wb") as f:
        f.write(d)
res = {{}}
res["list"] = attempt(lambda: os.listdir(M))
res["read_public"] = attempt(lambda: rd(os.path.join(M, "public")))
res["read_private"] = attempt(lambda: rd(os.path.join(M, "private")))
res["write_public"] = attempt(lambda: open(os.path.join(M, "public"), "r+b").close())
res["create_shared"] = attempt(lambda: wr(os.path.join(M, "shared", "mine"), b"by nobody"))
res["create_root"] = attempt(lambda: wr(os.path.join(M, "nope"), b"x"))
st = None
try:
    st = os.stat(os.path.join(M, "shared", "mine"))
except OSError:
    pass
res["owner"] = (st.st_uid, st.st_gid) if st else None
print(repr(res))
"""


def prepare_perm_tree(m):
    wr(m.path("public"), b"public data")
    os.chmod(m.path("public"), 0o644)
    wr(m.path("private"), b"secret")
    os.chmod(m.path("private"), 0o600)
    os.mkdir(m.path("shared"))
    os.chmod(m.path("shared"), 0o777)
    os.chmod(m.mnt, 0o755)


def test_allow_other_enforces_permissions(public_mount_factory):
    m = public_mount_factory(options=["allow_other"])
    prepare_perm_tree(m)
    p = run_as(NOBODY, PROBE.format(mnt=m.mnt))
    assert p.returncode == 0, p.stderr
    res = eval(p.stdout)
    assert res["list"] == "ok", res
    assert res["read_public"] == "ok", res
    assert res["read_private"] == "EACCES", res      # default_permissions is forced
    assert res["write_public"] == "EACCES", res
    assert res["create_root"] == "EACCES", res
    assert res["create_shared"] == "ok", res
    assert res["owner"] == (NOBODY, NOBODY), res     # new files belong to their creator
    st = os.lstat(os.path.join(m.backing, "shared", "mine"))
    assert st.st_uid == NOBODY
    assert rd(m.path("shared", "mine")) == b"by nobody"


def test_without_allow_other_others_are_locked_out(public_mount_factory):
    m = public_mount_factory()
    prepare_perm_tree(m)
    p = run_as(NOBODY, PROBE.format(mnt=m.mnt))
    assert p.returncode == 0, p.stderr
    res = eval(p.stdout)
    assert res["list"] == "EACCES" and res["read_public"] == "EACCES", res


def test_default_permissions_for_root_mount(public_mount_factory):
    """default_permissions alone: the kernel checks modes (root still may)."""
    m = public_mount_factory(options=["default_permissions"])
    prepare_perm_tree(m)
    assert rd(m.path("private")) == b"secret"
    assert "default_permissions" in mount_entry(m.mnt)[2]


def test_allow_other_shows_default_permissions(public_mount_factory):
    m = public_mount_factory(options=["allow_other"])
    opts = mount_entry(m.mnt)[2]
    assert "allow_other" in opts and "default_permissions" in opts, opts


def test_writeback_option(mount_factory):
    import mmap
    m = mount_factory(options=["writeback", "compress=lz4/4K"])
    p = m.path("wb")
    data = bytearray(text(1 * MiB))
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        for off in range(0, len(data), 4099):
            os.pwrite(fd, bytes(data[off:off + 4099]), off)
        os.pwrite(fd, b"!", 3 * MiB)
        data += bytes(3 * MiB - len(data)) + b"!"
        assert os.fstat(fd).st_size == len(data)
        mp = mmap.mmap(fd, len(data))
        mp[10:15] = b"MMAP!"
        data[10:15] = b"MMAP!"
        mp.flush()
        mp.close()
        os.ftruncate(fd, 2 * MiB)
        del data[2 * MiB:]
        os.fsync(fd)
        assert os.pread(fd, len(data) + 1, 0) == bytes(data)
    finally:
        os.close(fd)
    assert os.stat(p).st_size == len(data)
    m.unmount()
    m.start()
    assert rd(p) == bytes(data)


def test_writeback_never_on_a_read_only_mount(mount_factory):
    """The kernel writeback cache is on by default, on a read-write mount
    only: a read-only mount follows another mount's writes, and with the
    cache its kernel would keep its own file sizes."""
    m = mount_factory()
    assert mount_stats(m.mnt)["writeback_cache"] == 1
    backing = m.backing
    assert m.unmount() == 0
    r = mount_factory(options=["ro", "writeback"], backing=backing, name="ro")
    assert mount_stats(r.mnt)["writeback_cache"] == 0
    r2 = mount_factory(options=["ro"], backing=backing, name="ro2")
    assert mount_stats(r2.mnt)["writeback_cache"] == 0


def test_writeback_is_on_by_default_and_nowriteback_turns_it_off(mount_factory):
    """By default the kernel gathers write(2)s in its page cache (nothing
    reaches the daemon before a flush, fsync or close); with -o nowriteback
    every write(2) reaches the daemon at once (logical_bytes_written before
    any flush/close). The counters are read in this process: a child
    process would close its copy of the descriptor at exec, and a close
    flushes the kernel's pages."""
    def written(m):
        return json.loads(os.getxattr(m.mnt, "user.squeezefs.stats"))["logical_bytes_written"]

    for opts, cached in (([], True), (["nowriteback"], False)):
        m = mount_factory(options=opts, name="wb" if cached else "nowb")
        assert mount_stats(m.mnt)["writeback_cache"] == (1 if cached else 0)
        fd = os.open(m.path("f"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            before = written(m)
            for _ in range(25):
                os.write(fd, b"w" * 4096)
            after = written(m)
            if cached:
                assert after - before < 25 * 4096
            else:
                assert after - before == 25 * 4096
            os.fsync(fd)
            assert written(m) - before == 25 * 4096
        finally:
            os.close(fd)
        assert rd(m.path("f")) == b"w" * (25 * 4096)
        assert m.unmount() == 0


def test_mount_via_mount_fuse3_fstab_style(tmp_path, squeezefs_on_path):
    """`mount -t fuse.squeezefs BACKING MNT -o OPTS` (what /etc/fstab does):
    mount.fuse3 runs `squeezefs BACKING MNT -o OPTS` found through the
    system PATH (the squeezefs_on_path fixture)."""
    import subprocess
    backing, mnt = tmp_path / "b", tmp_path / "m"
    backing.mkdir()
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "fuse.squeezefs", str(backing), str(mnt),
                        "-o", "compress=gzip:9/64K,noatime"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        with open(mnt / "f", "wb") as f:
            f.write(b"fstab " * 5000)
        out = run_cli("stat", "--json", mnt / "f").stdout
        st = json.loads(out)
        assert (st["algorithm"], st["zipLevel"], st["logicalBlockSize"]) == ("gzip", 9, 16)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=60)
    assert not is_mounted(str(mnt))
    assert run_cli("cat", backing / "f").stdout == "fstab " * 5000
