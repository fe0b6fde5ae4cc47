"""squeezefs du: a tree written through a real mount with several policies
(lz4, zstd:3, none, the default), an empty file (a 0-byte plain file in
BACKING: containers are made with the first data), a sparse file, an
incompressible file, a plain file, a symlink and a hard link; du on the mount
and on the backing directory must agree with st_size seen through the mount
and with the per-file `squeezefs stat --json` figures."""
import collections
import json
import os
import random
import stat as st_mod

import pytest

from mountlib import run_cli


def text_bytes(n, seed=1):
    rnd = random.Random(seed)
    words = [b"price", b"size", b"sym", b"time", b"bid", b"ask", b"AAPL", b"0.25", b"100"]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(words) + b" "
    return bytes(out[:n])


def build_tree(m):
    """Through the mount; returns the relpaths of the container files."""
    for d, spec in (("logs", "lz4"), ("db", "zstd:3"), ("raw", "none")):
        os.makedirs(m.path(d))
        run_cli("policy", "set", m.path(d), spec)
    os.makedirs(m.path("db", "2024", "q1"))
    files = {
        "logs/app.log": text_bytes(300_000, 1),
        "logs/empty.log": b"",
        "db/trades.csv": text_bytes(700_000, 2),
        "db/2024/q1/quotes.csv": text_bytes(200_000, 3),
        "raw/random.bin": random.Random(4).randbytes(200_000),
        "incompressible.bin": random.Random(5).randbytes(300_000),  # default zstd:1
        "notes.txt": text_bytes(50_000, 6),
    }
    for rel, data in files.items():
        with open(m.path(rel), "wb") as f:
            f.write(data)
    with open(m.path("db", "2024", "sparse.bin"), "wb") as f:  # holes
        f.seek(5 * 1024 * 1024)
        f.write(b"the end")
    os.symlink("notes.txt", m.path("link-to-notes"))
    # an empty file costs no data block: it stays a 0-byte plain file
    assert os.stat(os.path.join(m.backing, "logs", "empty.log")).st_size == 0
    del files["logs/empty.log"]
    return sorted(list(files) + ["db/2024/sparse.bin"])


def walk(root):
    """(regular files as {relpath: lstat}, dirs, symlinks) under root, each
    hard-linked file once."""
    regs, dirs, links, seen = {}, 0, 0, set()
    for dp, dns, fns in os.walk(root):
        dirs += 1
        for n in dns:
            if os.path.islink(os.path.join(dp, n)):
                links += 1
        for n in fns:
            p = os.path.join(dp, n)
            s = os.lstat(p)
            if st_mod.S_ISLNK(s.st_mode):
                links += 1
            elif st_mod.S_ISREG(s.st_mode):
                if s.st_nlink > 1:
                    if (s.st_dev, s.st_ino) in seen:
                        continue
                    seen.add((s.st_dev, s.st_ino))
                regs[os.path.relpath(p, root)] = s
    return regs, dirs, links


def du_json(*args, check=True):
    r = run_cli("du", "--json", *args, check=check)
    return json.loads(r.stdout), r


def stat_figures(paths):
    out = json.loads(run_cli("stat", "--json", *paths).stdout)
    return out if isinstance(out, list) else [out]


@pytest.fixture
def tree(mount_factory, tmp_path):
    m = mount_factory()
    rels = build_tree(m)
    # a plain (non-container) file and a hard link, made in BACKING
    with open(os.path.join(m.backing, "plain.txt"), "wb") as f:
        f.write(b"not a container\n" * 100)
    os.link(os.path.join(m.backing, "db", "trades.csv"),
            os.path.join(m.backing, "db", "trades-link.csv"))
    return m, rels


def expected(m, rels):
    """What du must say, from st_size through the mount and stat --json."""
    regs, dirs, links = walk(m.mnt)
    figs = stat_figures([m.path(r) for r in rels])
    per_alg = collections.defaultdict(lambda: collections.Counter())
    for rel, f in zip(rels, figs):
        a = per_alg[f["algorithm"]]
        a["files"] += 1
        a["logical_bytes"] += f["uncompressedLength"]
        a["stored_bytes"] += f["storedBytes"]
        a["disk_bytes"] += f["backingAlloc"]
        a["blocks"] += f["blocks"]
        a["raw_blocks"] += f["rawBlocks"]
        a["hole_blocks"] += f["holeBlocks"]
        assert f["uncompressedLength"] == regs[rel].st_size, rel
    return regs, dirs, links, figs, per_alg


def check_report(d, m, rels, regs, dirs, links, per_alg):
    assert d["paths"]
    assert set(d["algorithms"]) == {"lz4", "zstd", "none"}, d["algorithms"]
    files = {a: v["files"] for a, v in d["algorithms"].items()}
    assert files == {"lz4": 1, "zstd": 5, "none": 1}, files
    for alg, want in per_alg.items():
        got = d["algorithms"][alg]
        for k, v in want.items():
            assert got[k] == v, (alg, k, got, want)
        assert got["ratio"] == pytest.approx(got["logical_bytes"] / got["stored_bytes"],
                                             rel=1e-4)
    assert d["algorithms"]["zstd"]["hole_blocks"] >= 40      # the sparse file
    assert d["algorithms"]["none"]["raw_blocks"] == d["algorithms"]["none"]["blocks"] > 0
    assert d["algorithms"]["zstd"]["raw_blocks"] > 0         # incompressible.bin
    assert d["algorithms"]["lz4"]["stored_bytes"] < d["algorithms"]["lz4"]["logical_bytes"] // 2
    plain = d["plain"]
    # plain.txt and the empty log
    assert plain["files"] == 2 and plain["logical_bytes"] == 1600 == plain["stored_bytes"]
    # totals: every regular file once (the hard link once)
    tot = d["total"]
    assert tot["files"] == len(regs) == len(rels) + 2
    assert tot["logical_bytes"] == sum(s.st_size for s in regs.values())
    assert tot["stored_bytes"] == sum(v["stored_bytes"] for v in per_alg.values()) + 1600
    assert tot["disk_bytes"] == sum(v["disk_bytes"] for v in per_alg.values()) + plain["disk_bytes"]
    c = d["containers"]
    for k in ("files", "logical_bytes", "stored_bytes", "disk_bytes", "blocks",
              "raw_blocks", "hole_blocks"):
        assert c[k] == sum(v[k] for v in d["algorithms"].values()), k
        assert tot[k] == c[k] + plain[k], k
    assert (d["directories"], d["symlinks"], d["other"]) == (dirs, links, 0)
    assert (d["damaged"], d["unreadable"], d["problems"]) == (0, 0, [])


def test_du_mount_and_backing_agree_with_stat(tree):
    m, rels = tree
    regs, dirs, links, figs, per_alg = expected(m, rels)
    on_mount, r = du_json(m.mnt)
    assert r.stderr == ""  # no progress line without a terminal, no noise
    check_report(on_mount, m, rels, regs, dirs, links, per_alg)
    on_backing, _ = du_json(m.backing)
    check_report(on_backing, m, rels, regs, dirs, links, per_alg)
    for k in ("algorithms", "containers", "plain", "total", "directories", "symlinks"):
        assert on_mount[k] == on_backing[k], k
    # the text table says the same
    text = run_cli("du", m.mnt).stdout.splitlines()
    assert text[0].split() == ["TYPE", "FILES", "LOGICAL", "STORED", "DISK", "RATIO",
                               "BLOCKS", "RAW", "HOLES"]
    rows = {line.split()[0]: line.split() for line in text[1:-1]}
    assert set(rows) == {"lz4", "none", "zstd", "plain", "TOTAL"}
    assert rows["zstd"][1] == "5" and rows["TOTAL"][1] == str(len(regs))
    assert rows["TOTAL"][-3:] == [str(on_mount["total"][k])
                                  for k in ("blocks", "raw_blocks", "hole_blocks")]
    assert text[-1] == (f"directories: {dirs}  symlinks: {links}  other: 0  "
                        "damaged: 0  unreadable: 0")


def test_du_by_dir_lines_add_up(tree):
    m, rels = tree
    for root in (m.mnt, m.backing):
        d, _ = du_json("--by-dir", root)
        rows = d["by_dir"]
        assert [(r["path"], r["top_level"]) for r in rows] == [
            (root, True), (os.path.join(root, "db"), False),
            (os.path.join(root, "logs"), False), (os.path.join(root, "raw"), False)]
        for k in ("files", "logical_bytes", "stored_bytes", "disk_bytes", "blocks",
                  "raw_blocks", "hole_blocks"):
            assert sum(r[k] for r in rows) == d["total"][k], (root, k)
        by = {os.path.basename(r["path"]): r for r in rows}
        assert by["db"]["files"] == 3 and by["logs"]["files"] == 2 and by["raw"]["files"] == 1
        # top level: incompressible.bin, notes.txt, plain.txt
        assert rows[0]["files"] == 3
        assert by["logs"]["logical_bytes"] == 300_000
        text = run_cli("du", "--by-dir", root).stdout.splitlines()
        assert text[0].split() == ["FILES", "LOGICAL", "STORED", "DISK", "RATIO", "DIRECTORY"]
        assert text[1].endswith(f"{root} (top level)")
        assert [line.split()[-1] for line in text[2:5]] == [
            os.path.join(root, s) for s in ("db", "logs", "raw")]
        assert text[5].split()[0] == str(d["total"]["files"]) and text[5].endswith("TOTAL")


def test_du_several_paths_and_a_file(tree):
    m, rels = tree
    whole, _ = du_json(m.mnt)
    logs, _ = du_json(m.path("logs"))
    db, _ = du_json(m.path("db"))
    both, _ = du_json(m.path("logs"), m.path("db"))
    assert both["total"]["files"] == logs["total"]["files"] + db["total"]["files"] == 5
    assert both["total"]["stored_bytes"] == (logs["total"]["stored_bytes"]
                                             + db["total"]["stored_bytes"])
    one, _ = du_json(m.path("logs", "app.log"))
    assert one["total"]["files"] == 1 and one["directories"] == 0
    assert one["algorithms"]["lz4"]["logical_bytes"] == 300_000
    assert whole["total"]["files"] > both["total"]["files"]


def test_du_damaged_container_is_named_and_fails(tree, mount_factory):
    m, rels = tree
    before, _ = du_json(m.backing)
    m.unmount()
    victim = os.path.join(m.backing, "logs", "app.log")
    with open(victim, "r+b") as f:  # the header
        f.write(b"X" * 64)
    d, r = du_json(m.backing, check=False)
    assert r.returncode == 1
    assert victim in r.stderr and "damaged" in r.stderr
    assert d["damaged"] == 1 and d["problems"][0]["path"] == victim
    assert "lz4" not in d["algorithms"]  # the empty log is a plain file
    assert d["total"]["files"] == before["total"]["files"] - 1
    text = run_cli("du", m.backing, check=False)
    assert text.returncode == 1 and victim in text.stderr
    assert "damaged: 1" in text.stdout
    # through a mount of the same backing directory
    m2 = mount_factory(backing=m.backing, name="mnt2")
    d2, r2 = du_json("--by-dir", m2.mnt, check=False)
    assert r2.returncode == 1
    assert m2.path("logs", "app.log") in r2.stderr
    assert d2["damaged"] == 1
    assert {r["path"]: r["damaged"] for r in d2["by_dir"]}[m2.path("logs")] == 1
    assert d2["total"]["files"] == d["total"]["files"]


def test_du_usage_errors(cli, tmp_path):
    p = cli("du", check=False)
    assert p.returncode == 2 and "usage: squeezefs du" in p.stderr
    p = cli("du", "--bogus", tmp_path, check=False)
    assert p.returncode == 2 and "--bogus" in p.stderr
    p = cli("du", tmp_path / "missing", check=False)
    assert p.returncode == 1 and "missing" in p.stderr
    d = json.loads(p.stdout) if p.stdout.startswith("{") else None
    assert d is None  # text mode: a table, not JSON
    assert "unreadable: 1" in p.stdout


def test_du_off_mount_plain_tree(cli, tmp_path):
    """A directory with no containers at all: every file is plain."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"a" * 5000)
    (tmp_path / "d" / "b").write_bytes(b"")
    d = json.loads(cli("du", "--json", tmp_path / "d").stdout)
    assert d["algorithms"] == {}
    assert d["plain"]["files"] == 2 and d["plain"]["logical_bytes"] == 5000
    assert d["total"]["ratio"] == 1
    assert d["containers"]["files"] == 0 and d["containers"]["ratio"] is None
