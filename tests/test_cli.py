"""The squeezefs command line off a mount: dispatch, pack/unpack, cat, stat,
verify, policy and recompress on files in temp dirs."""
import json
import os
import random
import re
import subprocess
import stat as st_mod

import pytest

ALGS = ["none", "gzip", "snappy", "lz4", "lz4hc", "zstd", "qipc"]
MTIME_NS = 1_600_000_000_123_456_789


def xattrs_supported(path):
    try:
        os.setxattr(path, "user.sqz-test", b"1")
        os.removexattr(path, "user.sqz-test")
        return True
    except OSError:
        return False


def text_bytes(n, seed=1):
    rnd = random.Random(seed)
    words = ["price", "size", "sym", "time", "bid", "ask", "trade", "quote",
             "AAPL", "MSFT", "IBM", "0.25", "100", "exchange", "N", "Q"]
    out = []
    total = 0
    while total < n:
        w = rnd.choice(words)
        out.append(w)
        total += len(w) + 1
    return (" ".join(out).encode() + b"\n")[:n]


def make_tree(root):
    """A tree with the awkward cases; returns root."""
    os.makedirs(root / "a" / "b" / "c")
    (root / "random.bin").write_bytes(random.Random(7).randbytes(200_000))
    (root / "a" / "text.txt").write_bytes(text_bytes(300_000))
    (root / "a" / "b" / "empty").write_bytes(b"")
    with open(root / "a" / "b" / "c" / "sparse", "wb") as f:
        f.seek(3 * 1024 * 1024 - 1)
        f.write(b"x")
    (root / "a" / "small").write_bytes(b"hello\n")
    os.symlink("a/text.txt", root / "link")
    os.symlink("/nonexistent/target", root / "a" / "dangling")
    os.chmod(root / "a" / "small", 0o640)
    os.chmod(root / "random.bin", 0o600)
    os.chmod(root / "a" / "b", 0o750)
    for p in [root / "random.bin", root / "a" / "text.txt", root / "a" / "small",
              root / "a" / "b" / "empty", root / "a" / "b" / "c" / "sparse"]:
        os.utime(p, ns=(MTIME_NS, MTIME_NS))
    for d in [root / "a" / "b" / "c", root / "a" / "b", root / "a"]:
        os.utime(d, ns=(MTIME_NS + 5, MTIME_NS + 5))
    return root


def snapshot(root):
    """{relpath: (kind, mode, mtime_ns, content or link target)}."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            s = os.lstat(p)
            if st_mod.S_ISLNK(s.st_mode):
                out[rel] = ("link", None, None, os.readlink(p))
            elif st_mod.S_ISDIR(s.st_mode):
                out[rel] = ("dir", st_mod.S_IMODE(s.st_mode), s.st_mtime_ns, None)
            else:
                with open(p, "rb") as f:
                    data = f.read()
                out[rel] = ("file", st_mod.S_IMODE(s.st_mode), s.st_mtime_ns, data)
    return out


def stat_json(cli, *paths):
    return json.loads(cli("stat", "--json", *paths).stdout)


# ---- dispatch ----

COMMANDS = ["pack", "unpack", "cat", "stat", "du", "verify", "stats", "policy",
            "recompress", "tier", "bench"]


def listed_commands(cli):
    """{command: its usage line(s)} as `squeezefs --help` lists them."""
    out = cli("--help").stdout
    section = out.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    usages, cur = {}, None
    for line in section.splitlines():
        if line.startswith("        ") and cur:  # continuation (bench)
            usages[cur] += " " + line.strip()
        elif line.startswith("  "):
            cur = line.split()[0]
            usages[cur] = line.strip()
    usages.pop("help", None)
    usages.pop("--version", None)
    return usages


def test_help_lists_commands_and_mount_usage(cli):
    out = cli("--help").stdout
    assert sorted(listed_commands(cli)) == sorted(COMMANDS)
    assert "MOUNTPOINT" in out
    assert "help [COMMAND]" in out
    assert cli("help").stdout == out
    assert cli("-h").stdout == out


def test_help_command_for_every_command(cli):
    """help COMMAND and COMMAND --help: usage, every option of the usage
    line (and policy's subcommands, bench's goals), examples, exit status."""
    for c, usage in listed_commands(cli).items():
        h = cli("help", c).stdout
        assert len(h.splitlines()) >= 12, (c, h)
        assert f"usage: squeezefs {c}" in h, c
        assert "\nexamples:\n  squeezefs " in h, c
        assert "\nexit status:\n  0  " in h and "\n  2  " in h, c
        opts = re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", usage)
        words = re.findall(r"(?<![\w.-])[a-z][a-z]+(?![\w.])", usage[len(c):])
        for o in opts + words:
            assert o in h, (c, o)
        assert cli(c, "--help").stdout == h, c
        assert cli(c, "-h").stdout == h, c
    # the options that are there for sure, so the parsing above cannot pass
    # by finding nothing
    assert "--by-dir" in cli("help", "du").stdout
    for o in ("--tmpdir", "--dump", "--gen", "--where", "--recommend"):
        assert o in listed_commands(cli)["bench"]
    assert "compress=SPEC" in cli("help", "mount").stdout


def test_help_unknown_command(cli):
    for args in (["help", "nosuch"], ["help", "du", "extra"], ["help", "--json"]):
        p = cli(*args, check=False)
        assert p.returncode == 2, args
        assert p.stdout == "", args
    p = cli("help", "nosuch", check=False)
    assert "unknown command 'nosuch'" in p.stderr
    assert "du [--json] [--by-dir] PATH..." in p.stderr  # the list of commands


def test_version(cli):
    assert cli("--version").stdout.startswith("squeezefs ")


def test_unknown_command(cli, tmp_path):
    p = cli("pakc", check=False)
    assert p.returncode == 2
    assert "unknown command 'pakc'" in p.stderr
    assert "pack SRC DST" in p.stderr


# ---- pack / unpack ----

@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("block", ["4K", "128K", "1M"])
def test_pack_unpack_round_trip(cli, tmp_path, alg, block):
    src = make_tree(tmp_path / "src")
    packed, out = tmp_path / "packed", tmp_path / "out"
    cli("pack", src, packed, "--policy", f"{alg}/{block}")
    cli("unpack", packed, out)
    want, got = snapshot(src), snapshot(out)
    assert got.keys() == want.keys()
    for rel in want:
        assert got[rel] == want[rel], rel
    # packed regular files are containers with the requested parameters
    info = stat_json(cli, packed / "a" / "text.txt")
    assert info["algorithm"] == alg
    assert info["logicalBlockSize"] == {"4K": 12, "128K": 17, "1M": 20}[block]
    assert info["uncompressedLength"] == 300_000
    # the sparse file stays sparse when unpacked
    sp = os.stat(out / "a" / "b" / "c" / "sparse")
    assert sp.st_size == 3 * 1024 * 1024
    assert sp.st_blocks * 512 < 1024 * 1024
    assert os.readlink(packed / "link") == "a/text.txt"


def test_pack_single_file_and_cat(cli, tmp_path):
    data = text_bytes(500_000, seed=3)
    f = tmp_path / "f.txt"
    f.write_bytes(data)
    cli("pack", f, tmp_path / "f.sqz")
    assert (tmp_path / "f.sqz").read_bytes() != data
    p = cli("cat", tmp_path / "f.sqz")
    assert p.stdout.encode() == data
    # into an existing directory: keeps the name
    (tmp_path / "d").mkdir()
    cli("pack", f, tmp_path / "d")
    assert stat_json(cli, tmp_path / "d" / "f.txt")["uncompressedLength"] == len(data)


def test_cat_several_and_plain(cli, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"first\n" * 1000)
    b.write_bytes(b"second plain\n")
    cli("pack", a, tmp_path / "a.sqz")
    import subprocess
    from mountlib import squeezefs_bin
    got = subprocess.run([squeezefs_bin(), "cat", str(tmp_path / "a.sqz"), str(b)],
                         capture_output=True, check=True).stdout
    assert got == b"first\n" * 1000 + b"second plain\n"
    p = cli("cat", tmp_path / "missing", check=False)
    assert p.returncode == 1 and "missing" in p.stderr


def test_pack_min_saving_and_bad_values(cli, tmp_path):
    f = tmp_path / "f"
    f.write_bytes(text_bytes(100_000))
    p = cli("pack", f, tmp_path / "x", "--min-saving", "150", check=False)
    assert p.returncode == 2 and "min-saving" in p.stderr
    cli("pack", f, tmp_path / "y", "--min-saving", "50")
    assert stat_json(cli, tmp_path / "y")["uncompressedLength"] == 100_000


# ---- stat ----

def test_stat_figures(cli, tmp_path):
    rnd = tmp_path / "random"
    rnd.write_bytes(random.Random(5).randbytes(64 * 1024 * 6))
    zeros = tmp_path / "zeros"
    zeros.write_bytes(bytes(1024 * 1024))
    txt = tmp_path / "text"
    txt.write_bytes(text_bytes(400_000))
    cli("pack", rnd, tmp_path / "random.sqz", "--policy", "zstd:3/64K")
    cli("pack", zeros, tmp_path / "zeros.sqz", "--policy", "lz4/128K")
    cli("pack", txt, tmp_path / "text.sqz", "--policy", "17 2 6")

    r = stat_json(cli, tmp_path / "random.sqz")
    assert isinstance(r, dict)
    assert r["uncompressedLength"] == 64 * 1024 * 6
    assert r["blocks"] == 6 and r["rawBlocks"] == 6 and r["holeBlocks"] == 0
    assert r["algorithm"] == "zstd" and r["zipLevel"] == 3 and r["logicalBlockSize"] == 16
    assert r["auto"] is False
    assert r["compressedLength"] == r["backingSize"] == os.path.getsize(tmp_path / "random.sqz")
    # raw blocks are stored whole; the container adds header, index, commits
    assert r["storedBytes"] == 64 * 1024 * 6 < r["compressedLength"]

    z = stat_json(cli, tmp_path / "zeros.sqz")
    assert z["blocks"] == 8 and z["holeBlocks"] == 8 and z["rawBlocks"] == 0
    assert z["ratio"] > 10
    assert z["storedBytes"] == 0  # holes only

    t = stat_json(cli, tmp_path / "text.sqz")
    assert (t["algorithm"], t["zipLevel"], t["logicalBlockSize"]) == ("gzip", 6, 17)
    assert t["uncompressedLength"] == 400_000
    assert t["ratio"] == pytest.approx(400_000 / t["compressedLength"], rel=1e-3)
    assert t["ratio"] > 2
    assert 0 < t["storedBytes"] < t["compressedLength"]

    many = stat_json(cli, tmp_path / "random.sqz", tmp_path / "text.sqz")
    assert isinstance(many, list) and len(many) == 2
    assert many[1]["algorithm"] == "gzip"

    text = cli("stat", tmp_path / "text.sqz").stdout
    assert "algorithm:" in text and "gzip" in text
    assert "logicalBlockSize:   17" in text
    assert "uncompressedLength: 400000" in text


def test_stat_not_a_container(cli, tmp_path):
    f = tmp_path / "plain.txt"
    f.write_bytes(b"just text\n")
    p = cli("stat", f, check=False)
    assert p.returncode == 1
    assert "plain.txt" in p.stderr and "not a squeezefs container" in p.stderr


# ---- verify ----

def test_verify_clean_and_damaged(cli, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "one").write_bytes(text_bytes(1_000_000, seed=11))
    (src / "two").write_bytes(text_bytes(200_000, seed=12))
    (src / "plain-later").write_bytes(b"x")
    cli("pack", src, tmp_path / "p", "--policy", "zstd:3/64K")
    (tmp_path / "p" / "notacontainer").write_bytes(b"plain")
    ok = cli("verify", "-v", tmp_path / "p")
    assert "3 files checked, 0 damaged" in ok.stdout
    assert "skipped" in ok.stdout

    # flip a byte in the middle of the data of one container
    victim = tmp_path / "p" / "one"
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0x5A]))
    bad = cli("verify", tmp_path / "p", check=False)
    assert bad.returncode == 1
    assert str(victim) in bad.stdout
    assert "block" in bad.stdout.lower()
    assert "1 damaged" in bad.stdout
    assert str(tmp_path / "p" / "two") not in bad.stdout
    assert cli("verify", tmp_path / "p" / "two").returncode == 0


# ---- specs and policy ----

@pytest.mark.parametrize("spec,words", [
    ("zsdt:3", ["zstd", "gzip"]),
    ("zstd:99", ["-7..22"]),
    ("gzip/3K", ["4K"]),
])
def test_bad_specs_refused(cli, tmp_path, spec, words):
    f = tmp_path / "f"
    f.write_bytes(b"data")
    for args in (["pack", f, tmp_path / "o", "--policy", spec],
                 ["policy", "set", f, spec],
                 ["recompress", "--policy", spec, f]):
        p = cli(*args, check=False)
        assert p.returncode == 2, args
        assert spec in p.stderr
        for w in words:
            assert w in p.stderr, (args, p.stderr)
    assert not (tmp_path / "o").exists()


def test_policy_set_get_unset_off_mount(cli, tmp_path):
    d = tmp_path / "data" / "taq"
    d.mkdir(parents=True)
    f = d / "trade"
    f.write_bytes(b"x" * 100)
    if not xattrs_supported(f):
        pytest.skip("user xattrs not supported on the temp file system")
    rel_dir = str(d).lstrip("/")
    assert cli("policy", "get", f).stdout.strip() == "zstd:1/128K (from default)"
    cli("policy", "set", d, "zstd:3/64K")
    assert os.getxattr(d, "user.squeezefs.policy") == b"zstd:3/64K"
    assert cli("policy", "get", f).stdout.strip() == f"zstd:3/64K (from directory {rel_dir})"
    cli("policy", "set", f, "17 2 6")
    assert os.getxattr(f, "user.squeezefs.policy") == b"gzip:6/128K"
    got = cli("policy", "get", f).stdout.strip()
    assert got.startswith("gzip:6/128K (from file ")
    cli("policy", "unset", f)
    cli("policy", "unset", f)  # missing is fine
    assert cli("policy", "get", f).stdout.strip() == f"zstd:3/64K (from directory {rel_dir})"
    # a spec without a block size takes it from below
    cli("policy", "set", f, "lz4hc:12")
    assert cli("policy", "get", f).stdout.strip().startswith("lz4hc:12/64K (from file")


def test_policy_check_and_test(cli, tmp_path):
    good = tmp_path / "good.rules"
    good.write_text("# comment\n*.log gzip:9/64K\n\ndata/** zstd:3\n*.csv \"17 2 6\"\n")
    out = cli("policy", "check", good).stdout
    assert "3 rules" in out
    out = cli("policy", "test", good, "x/app.log", "data/taq/trade", "other/file").stdout
    lines = out.strip().splitlines()
    assert lines[0] == f"x/app.log: gzip:9/64K (rule {good}:2)"
    assert lines[1].startswith("data/taq/trade: zstd:3") and f"{good}:4" in lines[1]
    assert lines[2] == "other/file: no rule matches"
    bad = tmp_path / "bad.rules"
    bad.write_text("*.log gzip\n*.bin zsdt:3\n")
    p = cli("policy", "check", bad, check=False)
    assert p.returncode == 2
    assert ":2" in p.stderr and "zsdt" in p.stderr


# ---- recompress ----

def test_recompress_off_mount(cli, tmp_path):
    data = text_bytes(700_000, seed=21)
    f = tmp_path / "f"
    f.write_bytes(data)
    packed = tmp_path / "f.sqz"
    cli("pack", f, packed, "--policy", "lz4/64K")
    os.chmod(packed, 0o640)
    os.utime(packed, ns=(MTIME_NS, MTIME_NS))
    before = os.path.getsize(packed)
    out = cli("recompress", "--policy", "zstd:9/128K", packed).stdout
    assert str(packed) in out and "total:" in out
    info = stat_json(cli, packed)
    assert (info["algorithm"], info["zipLevel"], info["logicalBlockSize"]) == ("zstd", 9, 17)
    assert cli("cat", packed).stdout.encode() == data
    s = os.stat(packed)
    assert st_mod.S_IMODE(s.st_mode) == 0o640
    assert s.st_mtime_ns == MTIME_NS
    assert os.path.getsize(packed) < before
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".sqz-tmp.")]


def test_recompress_plain_file_uses_policy_xattr(cli, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    f = d / "plain"
    data = text_bytes(150_000, seed=4)
    f.write_bytes(data)
    if not xattrs_supported(d):
        pytest.skip("user xattrs not supported on the temp file system")
    cli("policy", "set", d, "gzip:9/32K")
    cli("recompress", d)
    info = stat_json(cli, f)
    assert (info["algorithm"], info["zipLevel"], info["logicalBlockSize"]) == ("gzip", 9, 15)
    assert cli("cat", f).stdout.encode() == data
    # without a policy anywhere a container keeps its parameters
    cli("policy", "unset", d)
    cli("recompress", f)
    info = stat_json(cli, f)
    assert (info["algorithm"], info["zipLevel"]) == ("gzip", 9)


def test_stats_not_a_mount(cli, tmp_path):
    p = cli("stats", tmp_path, check=False)
    assert p.returncode == 1
    assert "not a squeezefs mount" in p.stderr


# ---- on a mount: the CLI reads the daemon's virtual xattrs ----

STATS_KEYS = {"logical_bytes_read", "logical_bytes_written", "backing_bytes_read",
              "backing_bytes_written", "blocks_decompressed", "bytes_decompressed",
              "blocks_compressed", "bytes_compressed", "raw_blocks_stored",
              "cache_hits", "cache_misses", "cache_bytes", "dirty_bytes"}


def test_on_mount_stat_stats_policy(cli, mnt):
    data = text_bytes(300_000, seed=9)
    with open(mnt.path("f.txt"), "wb") as f:
        f.write(data)
    os.makedirs(mnt.path("sub"))
    info = stat_json(cli, mnt.path("f.txt"))
    assert info["uncompressedLength"] == len(data)
    assert info["algorithm"] == "zstd" and info["logicalBlockSize"] == 17
    assert 0 < info["storedBytes"] < info["compressedLength"] < len(data)
    # the daemon and the container itself agree
    assert stat_json(cli, os.path.join(mnt.backing, "f.txt"))["storedBytes"] == \
        info["storedBytes"]
    stats = json.loads(cli("stats", "--json", mnt.mnt).stdout)
    assert STATS_KEYS <= set(stats)
    assert stats["logical_bytes_written"] >= len(data)
    text = cli("stats", mnt.mnt).stdout
    assert "cache_hit_rate" in text and "logical_bytes_written" in text
    assert cli("policy", "get", mnt.path("f.txt")).stdout.strip() == \
        "zstd:1/128K (from default)"
    cli("policy", "set", mnt.path("sub"), "gzip:9/64K")
    assert cli("policy", "get", mnt.path("sub")).stdout.strip() == \
        "gzip:9/64K (from directory sub)"
    cli("recompress", "--policy", "lz4/64K", mnt.path("f.txt"))
    info = stat_json(cli, mnt.path("f.txt"))
    assert (info["algorithm"], info["logicalBlockSize"]) == ("lz4", 16)
    with open(mnt.path("f.txt"), "rb") as f:
        assert f.read() == data


# ---- packed files (include/squeezefs/pack.h) in a BACKING directory ----
# made offline by build/tests/unit/mkpacked (tests/unit/mkpacked.c): the
# files' contents go into one new pack of their directory, then each file
# is emptied and given the pointer xattr, as the daemon does.

PACK_RE = re.compile(r"^\.sqz-tmp\.pack\.[0-9a-f]{16}$")
PTR_XATTR = "user.squeezefs.packed"


def mkpacked(files, *opts):
    """Pack files (all in one directory); returns the pack's path."""
    from mountlib import squeezefs_bin
    tool = os.path.join(os.path.dirname(squeezefs_bin()), "tests", "unit", "mkpacked")
    if not os.path.exists(tool):
        pytest.fail(f"{tool} not built: build first (ninja -C build)")
    p = subprocess.run([tool, *opts, *map(str, files)], capture_output=True,
                       text=True, check=True)
    name = p.stdout.strip()
    assert PACK_RE.match(name), name
    for f in files:
        assert os.path.getsize(f) == 0 and len(os.getxattr(f, PTR_XATTR)) == 48
    return os.path.join(os.path.dirname(files[0]), name)


def cat_bytes(*paths):
    from mountlib import squeezefs_bin
    return subprocess.run([squeezefs_bin(), "cat", *map(str, paths)],
                          capture_output=True)


@pytest.fixture
def packed_dir(tmp_path):
    """d/ with packed text.txt, random.bin, one and a container big.sqz;
    returns (d, {name: content}, pack path)."""
    if not xattrs_supported(tmp_path):
        pytest.skip("no user xattrs on the temp file system")
    d = tmp_path / "d"
    d.mkdir()
    want = {"text.txt": text_bytes(20_000, seed=21),
            "random.bin": random.Random(22).randbytes(3000), "one": b"Z"}
    for n, data in want.items():
        (d / n).write_bytes(data)
    pack = mkpacked([d / n for n in want], "-a", "lz4", "-b", "16")
    return d, want, pack


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x5A]))


@pytest.mark.parametrize("size", [1, 4095, 65536])
@pytest.mark.parametrize("kind", ["text", "random"])
@pytest.mark.parametrize("alg", ["zstd", "lz4", "none"])
def test_packed_cat_round_trip(cli, tmp_path, size, kind, alg):
    if not xattrs_supported(tmp_path):
        pytest.skip("no user xattrs on the temp file system")
    data = text_bytes(size, seed=size) if kind == "text" else random.Random(size).randbytes(size)
    f = tmp_path / "f"
    f.write_bytes(data)
    mkpacked([f], "-a", alg)
    p = cat_bytes(f)
    assert p.returncode == 0, p.stderr
    assert p.stdout == data
    # with another file around it: each in turn
    g = tmp_path / "g"
    g.write_bytes(b"plain\n")
    assert cat_bytes(g, f, g).stdout == b"plain\n" + data + b"plain\n"


def test_packed_stat_figures(cli, tmp_path, packed_dir):
    d, want, pack = packed_dir
    (tmp_path / "c.txt").write_bytes(text_bytes(100_000))
    cli("pack", tmp_path / "c.txt", d / "big.sqz", "--policy", "zstd:3/64K")
    t, r, c = stat_json(cli, d / "text.txt", d / "random.bin", d / "big.sqz")
    keys = ["path", "compressedLength", "uncompressedLength", "storedBytes", "algorithm",
            "zipLevel", "logicalBlockSize", "blocks", "rawBlocks", "holeBlocks", "ratio",
            "backingSize", "backingAlloc", "auto", "packed"]
    assert list(c) == keys and c["packed"] is False
    assert list(t) == keys + ["pack"] and list(r) == keys + ["pack"]
    for x, name in ((t, "text.txt"), (r, "random.bin")):
        assert x["packed"] is True and x["pack"] == os.path.basename(pack)
        assert x["uncompressedLength"] == len(want[name])
        assert (x["algorithm"], x["zipLevel"], x["logicalBlockSize"]) == ("lz4", 0, 16)
        assert x["blocks"] == 1 and x["holeBlocks"] == 0 and x["auto"] is False
        assert x["backingSize"] == 0
        # the entry: a 48-byte header and the stored bytes
        assert x["compressedLength"] == 48 + x["storedBytes"]
        assert x["ratio"] == pytest.approx(x["uncompressedLength"] / x["compressedLength"],
                                           rel=1e-4)
    assert t["rawBlocks"] == 0 and t["storedBytes"] < len(want["text.txt"]) * 0.7
    assert r["rawBlocks"] == 1 and r["storedBytes"] == 3000  # incompressible: raw
    text = cli("stat", d / "one").stdout
    assert "packed:             true" in text and os.path.basename(pack) in text
    assert "packed:             false" in cli("stat", d / "big.sqz").stdout


def test_packed_verify_clean(cli, packed_dir):
    d, want, pack = packed_dir
    ok = cli("verify", "-v", d)
    assert ok.returncode == 0
    # the pack and the three packed files, none of them "plain"
    assert "4 files checked, 0 damaged\n" in ok.stdout
    assert "skipped" not in ok.stdout
    assert f"{pack}: ok (pack, 3 entries)" in ok.stdout
    for n in want:
        assert f"{d / n}: ok (packed in {os.path.basename(pack)})" in ok.stdout
    j = json.loads(cli("verify", "--json", d).stdout)
    assert {f["path"]: f["status"] for f in j["files"]} == dict(
        [(pack, "ok")] + [(str(d / n), "ok") for n in want])
    assert (j["checked"], j["damaged"], j["skipped"], j["exit_status"]) == (4, 0, 0, 0)


def test_packed_damaged_entry(cli, packed_dir):
    d, want, pack = packed_dir
    flip(pack, 64 + 48 + 3)  # the stored bytes of the first entry (text.txt)
    bad = cli("verify", d, check=False)
    assert bad.returncode == 1, bad.stdout
    assert f"{d / 'text.txt'}: DAMAGED (1 problem)" in bad.stdout
    assert f"{d / 'text.txt'}: damaged packed file: checksum mismatch" in bad.stdout
    assert f"{pack}: DAMAGED" in bad.stdout
    assert str(d / "random.bin") + ": DAMAGED" not in bad.stdout
    # never wrong bytes: nothing on stdout, the reason on stderr
    p = cat_bytes(d / "text.txt")
    assert p.returncode == 1 and p.stdout == b""
    assert b"text.txt: damaged packed file" in p.stderr
    assert cat_bytes(d / "random.bin").stdout == want["random.bin"]
    s = cli("stat", d / "text.txt", check=False)
    assert s.returncode == 1 and "damaged packed file" in s.stderr


@pytest.mark.parametrize("damage", ["flipped", "too-short", "too-long", "other-file"])
def test_packed_damaged_pointer(cli, packed_dir, damage):
    d, want, pack = packed_dir
    f = d / "one"
    ptr = bytearray(os.getxattr(f, PTR_XATTR))
    if damage == "flipped":
        ptr[20] ^= 1
    elif damage == "too-short":
        ptr = ptr[:47]
    elif damage == "too-long":
        ptr += b"\0"
    else:  # a valid pointer, but to another file's entry
        ptr = bytearray(os.getxattr(d / "random.bin", PTR_XATTR))
    os.setxattr(f, PTR_XATTR, bytes(ptr))
    bad = cli("verify", d, check=False)
    if damage == "other-file":
        # a valid pointer to an intact entry: the other file's content
        assert bad.returncode == 0 and cat_bytes(f).stdout == want["random.bin"]
        return
    assert bad.returncode == 1, bad.stdout
    assert f"{f}: damaged packed file: " in bad.stdout and f"{f}: DAMAGED" in bad.stdout
    assert "1 damaged" in bad.stdout
    p = cat_bytes(f)
    assert p.returncode == 1 and p.stdout == b"" and b"damaged packed file" in p.stderr


def test_packed_pack_missing(cli, packed_dir):
    d, want, pack = packed_dir
    os.unlink(pack)
    bad = cli("verify", "--json", d, check=False)
    assert bad.returncode == 1
    j = json.loads(bad.stdout)
    st = {f["path"]: (f["status"], f["problems"]) for f in j["files"]}
    assert set(st) == {str(d / n) for n in want}
    for status, problems in st.values():
        assert status == "damaged" and "cannot be opened" in problems[0], problems
    p = cat_bytes(d / "one")
    assert p.returncode == 1 and p.stdout == b"" and b"cannot be opened" in p.stderr


def test_packed_pack_torn_append_is_a_tail(cli, packed_dir):
    d, want, pack = packed_dir
    with open(pack, "ab") as f:  # an append a crash cut short: no pointer to it
        f.write(b"SQPE" + bytes(30))
    r = cli("verify", d, check=False)
    assert r.returncode == 3, r.stdout
    assert f"{pack}: uncommitted tail, 34 bytes" in r.stdout
    assert "0 damaged" in r.stdout


def test_packed_du(cli, tmp_path, packed_dir):
    d, want, pack = packed_dir
    (d / "plain.txt").write_bytes(b"p" * 1000)
    (d / ".sqz-tmp.other").write_bytes(b"x" * 5000)  # still skipped
    figs = stat_json(cli, *(d / n for n in want))
    j = json.loads(cli("du", "--json", d).stdout)
    lz4 = j["algorithms"]["lz4"]
    assert set(j["algorithms"]) == {"lz4"}
    assert lz4["files"] == 3 and j["packed"] == lz4
    assert lz4["logical_bytes"] == sum(map(len, want.values()))
    assert lz4["stored_bytes"] == sum(f["storedBytes"] for f in figs)
    assert lz4["blocks"] == 3 and lz4["raw_blocks"] == 2  # random.bin and one
    disk = os.stat(pack).st_blocks * 512
    assert j["packs"] == {"count": 1, "bytes": os.path.getsize(pack), "disk_bytes": disk}
    tot = j["total"]
    assert tot["files"] == 4 and j["plain"]["files"] == 1
    assert tot["stored_bytes"] == lz4["stored_bytes"] + 1000
    assert tot["disk_bytes"] == lz4["disk_bytes"] + j["plain"]["disk_bytes"] + disk
    text = cli("du", d).stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in text[1:-1]}
    assert set(rows) == {"lz4", "plain", "packs", "TOTAL"}
    assert rows["packs"][1] == "-" and rows["TOTAL"][1] == "4"
    assert text[-1].endswith("unreadable: 0  packs: 1")
    by = json.loads(cli("du", "--json", "--by-dir", d).stdout)["by_dir"]
    assert by[0]["disk_bytes"] == tot["disk_bytes"] and by[0]["files"] == 4
    # a damaged packed file is named and left out
    os.setxattr(d / "one", PTR_XATTR, b"x" * 48)
    p = cli("du", "--json", d, check=False)
    assert p.returncode == 1 and "one: damaged packed file: damaged pointer" in p.stderr
    assert json.loads(p.stdout)["algorithms"]["lz4"]["files"] == 2


def test_packed_unpack_and_pack_tree(cli, tmp_path, packed_dir):
    d, want, pack = packed_dir
    cli("unpack", d, tmp_path / "plain")
    assert sorted(os.listdir(tmp_path / "plain")) == sorted(want)  # no pack copied
    for n, data in want.items():
        assert (tmp_path / "plain" / n).read_bytes() == data
        assert PTR_XATTR not in os.listxattr(tmp_path / "plain" / n)
    cli("pack", d, tmp_path / "ctrs", "--policy", "zstd:1/64K")
    assert sorted(os.listdir(tmp_path / "ctrs")) == sorted(want)
    for n, data in want.items():
        c = tmp_path / "ctrs" / n
        assert PTR_XATTR not in os.listxattr(c)
        assert stat_json(cli, c)["packed"] is False
        assert cat_bytes(c).stdout == data
    # the source is left as it was
    assert all(os.path.getsize(d / n) == 0 for n in want) and os.path.exists(pack)
    # a damaged packed file fails unpack, named
    flip(pack, 64 + 48 + 3)
    p = cli("unpack", d / "text.txt", tmp_path / "t", check=False)
    assert p.returncode == 1 and "text.txt: damaged packed file" in p.stderr


def test_packed_torn_unpacking_is_the_packed_content(cli, packed_dir):
    """An unpacking torn by a crash (the start of a container header on the
    file, the pointer still there): the packed content counts, verify says
    tail (3), never ok."""
    d, want, pack = packed_dir
    f = d / "text.txt"
    with open(f, "r+b") as fh:  # magic "SQZFS\0\1\x1a", version 2, then cut
        fh.write(bytes.fromhex("53515a465300011a") + (2).to_bytes(4, "little") + b"\0" * 20)
    assert cat_bytes(f).stdout == want["text.txt"]
    assert stat_json(cli, f)["packed"] is True
    r = cli("verify", f, check=False)
    assert r.returncode == 3, r.stdout
    assert f"{f}: uncommitted tail, 32 bytes (an unpacking torn by a crash" in r.stdout
