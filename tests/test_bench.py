"""squeezefs bench: CSV, table, --where, --recommend, generators, --plot."""
import csv
import os
import re
import struct
import subprocess

import pytest

HEADER = "input,size,lbs,alg,lvl,compFactor,writeTime,readTime,writeMBps,readMBps"
ALGS = {"none", "gzip", "snappy", "lz4", "lz4hc", "zstd", "qipc"}
GENERATORS = ["longs", "longs:1000:50", "sorted-longs", "contiguous-longs", "booleans",
              "symbols", "symbols:4", "floats", "taq-trade", "taq-quote",
              "taq-trade.price", "taq-trade.time", "taq-quote.bid", "taq-quote.ex"]


def read_csv(path):
    with open(path, newline="") as f:
        text = f.read()
    assert text.splitlines()[0] == HEADER
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_row(r):
    assert int(r["size"]) > 0
    assert 12 <= int(r["lbs"]) <= 20
    assert r["alg"] in ALGS
    int(r["lvl"])
    for k in ("compFactor", "writeTime", "readTime", "writeMBps", "readMBps"):
        assert float(r[k]) > 0, (k, r)


def test_quick_bench_csv(cli, tmp_path):
    out = tmp_path / "r.csv"
    p = cli("bench", "--quick", "--runs", "1", "--gen", "longs", "--size", "64K",
            "--csv", out, "--tmpdir", tmp_path)
    rows = read_csv(out)
    for r in rows:
        check_row(r)
        assert r["input"] == "longs" and int(r["size"]) == 65536
    assert {r["alg"] for r in rows} == ALGS  # qipc included by default
    assert {int(r["lbs"]) for r in rows} == {12, 16, 17, 20}
    combos = {(r["lbs"], r["alg"], r["lvl"]) for r in rows}
    assert len(combos) == len(rows) == 4 * 15
    assert {int(r["lvl"]) for r in rows if r["alg"] == "qipc"} == {0}
    assert {int(r["lvl"]) for r in rows if r["alg"] == "zstd"} == {-7, 1, 3, 9, 19}
    assert {int(r["lvl"]) for r in rows if r["alg"] == "gzip"} == {1, 6, 9}
    assert {int(r["lvl"]) for r in rows if r["alg"] == "lz4hc"} == {1, 9, 12}
    # random longs in 0..999 compress (about 8 bytes -> 10 bits); none does not
    assert all(float(r["compFactor"]) < 1.01 for r in rows if r["alg"] == "none")
    assert max(float(r["compFactor"]) for r in rows if r["alg"] == "zstd") > 3
    # the table has the same columns, and shows qipc next to lz4 and zstd
    assert p.stdout.split()[:10] == HEADER.split(",")
    assert {r["alg"] for r in parse_table(p.stdout)} == ALGS
    assert not [n for n in os.listdir(tmp_path) if n.startswith("sqz-bench.")]


def test_bench_explicit_lists_and_file_input(cli, tmp_path):
    data = tmp_path / "input.bin"
    data.write_bytes(b"".join(struct.pack("<q", i // 7) for i in range(20000)))
    out = tmp_path / "r.csv"
    cli("bench", "--lbs", "12,17", "--alg", "zstd,gzip", "--level", "1", "--runs", "2",
        "--threads", "2", "--csv", out, "--tmpdir", tmp_path, data)
    rows = read_csv(out)
    assert sorted((int(r["lbs"]), r["alg"], int(r["lvl"])) for r in rows) == [
        (12, "gzip", 1), (12, "zstd", 1), (17, "gzip", 1), (17, "zstd", 1)]
    for r in rows:
        check_row(r)
        assert r["input"] == str(data) and int(r["size"]) == 160000
        assert float(r["compFactor"]) > 3
        mbps = int(r["size"]) / 1e6 / (float(r["writeTime"]) / 1e3)
        assert float(r["writeMBps"]) == pytest.approx(mbps, rel=0.02, abs=0.2)


def test_bench_level_range(cli, tmp_path):
    out = tmp_path / "r.csv"
    cli("bench", "--lbs", "16", "--alg", "zstd,lz4", "--level", "-2..2", "--runs", "1",
        "--gen", "sorted-longs", "--size", "32K", "--csv", out, "--tmpdir", tmp_path)
    rows = read_csv(out)
    assert sorted(int(r["lvl"]) for r in rows if r["alg"] == "zstd") == [-2, -1, 0, 1, 2]
    assert [int(r["lvl"]) for r in rows if r["alg"] == "lz4"] == [0]


def parse_table(stdout):
    lines = stdout.splitlines()
    assert lines[0].split() == HEADER.split(",")
    rows = []
    for ln in lines[1:]:
        if not ln.strip():
            break
        f = ln.split()
        rows.append({"alg": f[3], "lvl": int(f[4]), "compFactor": float(f[5]),
                     "writeTime": float(f[6])})
    return rows


def test_where_filters_and_sorts(cli, tmp_path):
    csvp = tmp_path / "all.csv"
    p = cli("bench", "--lbs", "12,16", "--alg", "zstd,gzip,lz4", "--level", "1,3",
            "--runs", "1", "--gen", "contiguous-longs", "--size", "64K",
            "--csv", csvp, "--where", "alg==zstd and compFactor>1 or alg == 'lz4'",
            "--tmpdir", tmp_path)
    rows = parse_table(p.stdout)
    assert {r["alg"] for r in rows} == {"zstd", "lz4"}
    assert len(rows) == 2 * 2 + 2
    cfs = [r["compFactor"] for r in rows]
    assert cfs == sorted(cfs, reverse=True)
    assert len(read_csv(csvp)) == 2 * (2 + 2 + 1)  # the CSV keeps every row
    p = cli("bench", "--lbs", "12", "--alg", "gzip", "--level", "1", "--runs", "1",
            "--gen", "booleans", "--size", "16K", "--where", "compFactor > 1e9",
            "--tmpdir", tmp_path)
    assert parse_table(p.stdout) == []


@pytest.mark.parametrize("expr", ["writeTime <", "speed>3", "alg==zsdt", "lbs>>3",
                                  "(lbs>3"])
def test_where_bad_expression(cli, tmp_path, expr):
    p = cli("bench", "--gen", "longs", "--size", "16K", "--where", expr, check=False)
    assert p.returncode == 2
    assert "--where" in p.stderr


@pytest.mark.parametrize("goal", ["ratio", "write", "read", "balanced"])
def test_recommend_prints_a_usable_spec(cli, tmp_path, goal):
    p = cli("bench", "--lbs", "12,17", "--alg", "zstd,lz4,gzip", "--level", "1,9",
            "--runs", "1", "--gen", "taq-trade", "--size", "128K", "--recommend", goal,
            "--tmpdir", tmp_path)
    m = re.search(rf"^recommended \({goal}\): (\S+)$", p.stdout, re.M)
    assert m, p.stdout
    spec = m.group(1)
    assert re.match(r"^(zstd|lz4|gzip)(:\d+)?/(4K|128K)$", spec), spec
    assert re.search(r"^why: .*compFactor", p.stdout, re.M)
    # the spec is accepted by the tool itself
    f = tmp_path / "f"
    f.write_bytes(b"abc" * 1000)
    cli("pack", f, tmp_path / "packed", "--policy", spec)
    if goal == "ratio":
        rows = parse_table(p.stdout)
        best = max(r["compFactor"] for r in rows)
        alg, lvl = spec.split("/")[0].split(":") + ["0"] * (":" not in spec)
        assert any(r["alg"] == alg and r["compFactor"] >= best / 1.006 for r in rows)


def test_recommend_bad_goal(cli):
    p = cli("bench", "--gen", "longs", "--recommend", "cheap", check=False)
    assert p.returncode == 2 and "ratio, write, read or balanced" in p.stderr


def test_gen_list(cli):
    out = cli("bench", "--gen", "list").stdout
    for g in ["longs", "sorted-longs", "contiguous-longs", "booleans", "symbols",
              "floats", "taq-trade", "taq-quote", "price", "bid"]:
        assert g in out


def dump(cli, tmp_path, gen, seed, size="64K", name=None):
    path = tmp_path / (name or f"{gen}.{seed}")
    cli("bench", "--gen", gen, "--seed", seed, "--size", size, "--dump", path)
    return path.read_bytes()


@pytest.mark.parametrize("gen", GENERATORS)
def test_generators_deterministic(cli, tmp_path, gen):
    a = dump(cli, tmp_path, gen, 1, name="a")
    b = dump(cli, tmp_path, gen, 1, name="b")
    c = dump(cli, tmp_path, gen, 2, name="c")
    assert a == b
    assert a != c
    if gen == "longs:1000:50":
        assert len(a) == 8000
    else:
        assert 0.9 * 65536 <= len(a) <= 65536


def test_generator_shapes(cli, tmp_path):
    def longs(b):
        return list(struct.unpack(f"<{len(b) // 8}q", b))
    r = longs(dump(cli, tmp_path, "longs:5000:1000", 3))
    assert len(r) == 5000 and min(r) >= 0 and max(r) < 1000
    s = longs(dump(cli, tmp_path, "sorted-longs:5000:1000", 3))
    assert s == sorted(s) and max(s) < 1000
    c = longs(dump(cli, tmp_path, "contiguous-longs:5000:1000", 3))
    seen, last = set(), None
    for v in c:  # every value in one run
        if v != last:
            assert v not in seen
            seen.add(v)
            last = v
    bools = dump(cli, tmp_path, "booleans", 3, size="8K")
    assert set(bools) == {0, 1}
    syms = struct.unpack("<2048i", dump(cli, tmp_path, "symbols:3", 3, size="8K"))
    assert syms[0] == 0 and max(syms) < 4096
    assert all(syms[i] <= max(syms[:i]) + 1 for i in range(1, 200))  # enumerated
    t = longs(dump(cli, tmp_path, "taq-trade.time", 3, size="64K"))
    sym = struct.unpack("<16384i", dump(cli, tmp_path, "taq-trade.sym", 3, size="64K"))
    assert list(sym) == sorted(sym) and len(set(sym)) > 5
    prices = struct.unpack("<8192d", dump(cli, tmp_path, "taq-trade.price", 3, size="64K"))
    assert all(0 < p < 10000 for p in prices)
    assert all(abs(p * 100 - round(p * 100)) < 1e-6 for p in prices)
    steps = [abs(prices[i + 1] - prices[i]) for i in range(len(prices) - 1)]
    assert sorted(steps)[len(steps) // 2] < 0.06  # a small random walk
    assert t[1] > 7.5e17  # nanoseconds since 2000: the year 2024
    ex = dump(cli, tmp_path, "taq-quote.ex", 3, size="4K")
    assert set(ex) <= set(b"QNPZKJYBXAM")
    p = cli("bench", "--gen", "taq-trade.nosuch", "--dump", tmp_path / "x", check=False)
    assert p.returncode == 2 and "nosuch" in p.stderr


def have_matplotlib():
    return subprocess.run(["python3", "-c", "import matplotlib"],
                          capture_output=True).returncode == 0


def test_plot(cli, tmp_path):
    if not have_matplotlib():
        pytest.skip("matplotlib is not installed for python3: --plot not tested")
    plots = tmp_path / "plots"
    env = dict(os.environ)
    env["SQZ_BENCH_PLOT"] = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "tools", "bench_plot.py")
    cli("bench", "--lbs", "12,17", "--alg", "zstd,lz4,gzip", "--level", "1,3,6",
        "--runs", "1", "--gen", "floats", "--size", "32K", "--plot", plots,
        "--tmpdir", tmp_path, env=env)
    for name in ["by_level.png", "by_lbs.png", "pareto.png"]:
        with open(plots / name, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", name


def test_bench_help(cli):
    r = cli("bench", "--help", check=False)
    assert r.returncode == 0, r.stderr
    assert "usage: squeezefs bench" in r.stdout + r.stderr


TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")


@pytest.mark.parametrize("script", sorted(f for f in os.listdir(TOOLS)
                                            if f.endswith(".py") and f != "benchlib.py"))
def test_every_tool_script_starts(script):
    """Every Python tool imports what it needs (the bench scripts share
    tools/benchlib.py) and answers --help."""
    p = subprocess.run(["python3", os.path.join(TOOLS, script), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "usage" in p.stdout.lower(), p.stdout[:500]
