"""The squeezefs command line off a mount: dispatch, pack/unpack, cat, stat,
verify, policy and recompress on files in temp dirs."""
import json
import os
import random
import re
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
