#!/usr/bin/env python3
"""Charts from `squeezefs bench --csv` results.

usage: bench_plot.py RESULTS.csv OUTDIR [--lbs N]

Writes into OUTDIR:
  by_level.png   compFactor, writeTime, readTime vs level per algorithm at
                 one block size (--lbs, else 17 if measured, else the most
                 common one)
  by_lbs.png     the same vs block size per algorithm at its default level
                 (or the nearest level measured)
  pareto.png     compFactor vs write speed, every combination, with the
                 Pareto front (no other point both compresses better and
                 writes faster) marked and labelled
Several inputs are combined: sizes and times add up, compFactor is the
total size over the total stored size.
"""
import argparse
import csv
import os
import sys

HEADER = ["input", "size", "lbs", "alg", "lvl", "compFactor", "writeTime",
          "readTime", "writeMBps", "readMBps"]
DEFAULT_LEVEL = {"none": 0, "gzip": 6, "snappy": 0, "lz4": 0, "lz4hc": 9, "zstd": 3,
                 "qipc": 0}
ALG_ORDER = ["none", "gzip", "snappy", "lz4", "lz4hc", "zstd", "qipc"]


def load(path):
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        if rd.fieldnames != HEADER:
            sys.exit(f"bench_plot: {path}: unexpected header {rd.fieldnames}")
        rows = list(rd)
    if not rows:
        sys.exit(f"bench_plot: {path}: no results")
    # combine inputs per (lbs, alg, lvl)
    agg = {}
    for r in rows:
        key = (int(r["lbs"]), r["alg"], int(r["lvl"]))
        size = float(r["size"])
        cf = float(r["compFactor"])
        a = agg.setdefault(key, {"size": 0.0, "stored": 0.0, "w": 0.0, "r": 0.0})
        a["size"] += size
        a["stored"] += size / cf if cf > 0 else 0.0
        a["w"] += float(r["writeTime"])
        a["r"] += float(r["readTime"])
    out = []
    for (lbs, alg, lvl), a in agg.items():
        out.append({
            "lbs": lbs, "alg": alg, "lvl": lvl,
            "cf": a["size"] / a["stored"] if a["stored"] > 0 else 0.0,
            "w": a["w"], "r": a["r"],
            "wmbps": a["size"] / 1e6 / (a["w"] / 1e3) if a["w"] > 0 else 0.0,
        })
    return out


def algs_of(rows):
    seen = {r["alg"] for r in rows}
    return [a for a in ALG_ORDER if a in seen] + sorted(seen - set(ALG_ORDER))


METRICS = [("cf", "compFactor"), ("w", "writeTime (ms)"), ("r", "readTime (ms)")]


def plot_by_level(plt, rows, lbs, out):
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    sel = [r for r in rows if r["lbs"] == lbs]
    for alg in algs_of(sel):
        pts = sorted((r for r in sel if r["alg"] == alg), key=lambda r: r["lvl"])
        for ax, (k, _) in zip(axes, METRICS):
            ax.plot([p["lvl"] for p in pts], [p[k] for p in pts],
                    marker="o", label=alg)
    for ax, (_, label) in zip(axes, METRICS):
        ax.set_xlabel("level")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"by level at lbs {lbs} ({1 << lbs >> 10} KiB blocks)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def plot_by_lbs(plt, rows, out):
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for alg in algs_of(rows):
        mine = [r for r in rows if r["alg"] == alg]
        want = DEFAULT_LEVEL.get(alg, 0)
        lvl = min({r["lvl"] for r in mine}, key=lambda v: (abs(v - want), v))
        pts = sorted((r for r in mine if r["lvl"] == lvl), key=lambda r: r["lbs"])
        for ax, (k, _) in zip(axes, METRICS):
            ax.plot([p["lbs"] for p in pts], [p[k] for p in pts],
                    marker="o", label=f"{alg}:{lvl}")
    for ax, (_, label) in zip(axes, METRICS):
        ax.set_xlabel("lbs (log2 block size)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].legend()
    fig.suptitle("by block size at each algorithm's default level")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def pareto_front(rows):
    """Points not dominated: no other point has cf >= and speed >= with one >."""
    front = []
    for p in rows:
        dominated = any(
            q["cf"] >= p["cf"] and q["wmbps"] >= p["wmbps"]
            and (q["cf"] > p["cf"] or q["wmbps"] > p["wmbps"])
            for q in rows)
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda r: r["wmbps"])


def plot_pareto(plt, rows, out):
    fig, ax = plt.subplots(figsize=(9, 6))
    for alg in algs_of(rows):
        pts = [r for r in rows if r["alg"] == alg]
        ax.scatter([p["wmbps"] for p in pts], [p["cf"] for p in pts], s=14,
                   alpha=0.6, label=alg)
    front = pareto_front(rows)
    ax.plot([p["wmbps"] for p in front], [p["cf"] for p in front], color="black",
            linewidth=1.2, marker="D", markersize=5, label="Pareto front")
    for p in front:
        ax.annotate(f'{p["alg"]}:{p["lvl"]}/{p["lbs"]}', (p["wmbps"], p["cf"]),
                    fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("write speed (MB/s)")
    ax.set_ylabel("compFactor")
    ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("compression ratio vs write speed")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("outdir")
    ap.add_argument("--lbs", type=int, default=None)
    a = ap.parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("bench_plot: matplotlib is not installed "
                 "(pip install matplotlib, or the python3-matplotlib package)")
    rows = load(a.csv)
    lbs_seen = sorted({r["lbs"] for r in rows})
    lbs = a.lbs
    if lbs is None:
        counts = {b: sum(1 for r in rows if r["lbs"] == b) for b in lbs_seen}
        lbs = 17 if 17 in counts else max(lbs_seen, key=lambda b: counts[b])
    elif lbs not in lbs_seen:
        sys.exit(f"bench_plot: no results at lbs {lbs} (have {lbs_seen})")
    os.makedirs(a.outdir, exist_ok=True)
    made = []
    for name, fn in (("by_level.png", lambda o: plot_by_level(plt, rows, lbs, o)),
                     ("by_lbs.png", lambda o: plot_by_lbs(plt, rows, o)),
                     ("pareto.png", lambda o: plot_pareto(plt, rows, o))):
        path = os.path.join(a.outdir, name)
        fn(path)
        made.append(path)
    for p in made:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
