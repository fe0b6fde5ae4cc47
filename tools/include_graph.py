#!/usr/bin/env python3
"""Dependency graph between the source files of src/, and its checks.

For every object file of a build (BUILDDIR/src/LAYER/lib*.a.p/NAME.c.o and
BUILDDIR/squeezefs.p/src_cli_NAME.c.o) `nm` lists the global symbols the
file defines and the ones it leaves undefined. File A depends on file B
when A uses a symbol that B defines. The check fails when

  * two files depend on each other, directly or through others (a cycle:
    every strongly connected component of the graph must be one file;
    cycles inside TOLERATED_CYCLE_DIRS are only noted);
  * a file depends on a file of a layer above its own (the layers are
    codec <- policy, codec <- format <- engine <- daemon <- node <- store
    <- pack <- content <- jobs <- fuse <- mount <- cli);
  * a file of src/ has more than --max-lines lines (default 650).

Usage: tools/include_graph.py [--build BUILDDIR] [--max-lines N]
                              [--edges] [--quiet]
Exit 0 when every check passes, 1 otherwise, 2 on a usage error (no
build, no object files, no nm).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Which layers a layer may use (besides itself). src/common (the
# lock-order checks) lies below every layer.
LAYERS = {
    "common": set(),
    "codec": {"common"},
    "policy": {"codec", "common"},
    "format": {"codec", "common"},
    "engine": {"format", "codec", "common"},
}
# The daemon's folders, bottom to top: each uses the ones before it (and
# every library layer). daemon: struct sqz_fs, options, the mount table;
# node: the inode table, kinds and the attributes shown, the page-cache
# push, shown times; store: the daemon's own files in BACKING (temporaries
# and the crash-safe swap, leftovers, open packs); pack: packing and pack
# reclaiming; content: a regular file's content, open handles, durable
# marks; jobs: recompress, tiering, revalidation; fuse: the request
# translation; mount: the mount's life (main, writer lock, remount).
DAEMON = ["daemon", "node", "store", "pack", "content", "jobs", "fuse", "mount"]
for _i, _d in enumerate(DAEMON):
    LAYERS[_d] = set(DAEMON[:_i]) | {"engine", "format", "policy", "codec", "common"}
LAYERS["cli"] = set(DAEMON) | {"engine", "format", "policy", "codec", "common"}


# Cycles inside these directories would be reported as notes, not
# failures. None: the codec registry now passes each codec its per-thread
# context slot, so no codec calls back into codec.c.
TOLERATED_CYCLE_DIRS = ()


def source_of(obj, build):
    """src/ path of an object file, or None if it is not built from src/."""
    rel = os.path.relpath(obj, build)
    m = re.match(r"src/([a-z]+)/lib[^/]+\.a\.p/(.+)\.o$", rel)
    if m:
        return f"src/{m.group(1)}/{m.group(2)}"
    m = re.match(r"squeezefs\.p/src_cli_(.+)\.o$", rel)
    if m:
        return f"src/cli/{m.group(1)}"
    return None


def nm_symbols(obj):
    """(defined, undefined) global symbol sets of one object file."""
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True,
                         check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDBRCVWGS" or kind == "u":
            defined.add(name)
    return defined, undefined


def build_graph(build):
    objs = {}
    for dirpath, _, files in os.walk(build):
        for f in files:
            if f.endswith(".c.o"):
                src = source_of(os.path.join(dirpath, f), build)
                if src:
                    objs[src] = os.path.join(dirpath, f)
    defs, undefs = {}, {}
    for src, obj in objs.items():
        defs[src], undefs[src] = nm_symbols(obj)
    owner = {}
    for src, syms in defs.items():
        for s in syms:
            owner.setdefault(s, src)
    edges = {src: {} for src in objs}
    for src, syms in undefs.items():
        for s in syms:
            dst = owner.get(s)
            if dst and dst != src:
                edges[src].setdefault(dst, set()).add(s)
    return edges


def sccs(edges):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def layer_of(src):
    return src.split("/")[1]


def long_files(max_lines):
    out = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in files:
            if f.endswith((".c", ".h")):
                p = os.path.join(dirpath, f)
                with open(p, "rb") as fh:
                    n = fh.read().count(b"\n")
                if n > max_lines:
                    out.append((os.path.relpath(p, ROOT), n))
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--max-lines", type=int, default=650)
    ap.add_argument("--edges", action="store_true",
                    help="print every edge with the symbols it uses")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    if not shutil.which("nm"):
        print("include_graph: nm not found", file=sys.stderr)
        return 2
    if not os.path.isdir(a.build):
        print(f"include_graph: no build directory {a.build}", file=sys.stderr)
        return 2
    edges = build_graph(a.build)
    if not edges:
        print(f"include_graph: no object files under {a.build}", file=sys.stderr)
        return 2
    problems, notes = [], []
    cycles = [c for c in sccs(edges) if len(c) > 1]
    for comp in cycles:
        detail = []
        for s in comp:
            for d in sorted(edges[s]):
                if d in comp:
                    detail.append(f"    {s} -> {d}: {', '.join(sorted(edges[s][d]))}")
        text = "cycle between " + ", ".join(comp) + ":\n" + "\n".join(detail)
        if any(all(f.startswith(t) for f in comp) for t in TOLERATED_CYCLE_DIRS):
            notes.append("note: tolerated " + text)
        else:
            problems.append(text)
    for s in sorted(edges):
        for d in sorted(edges[s]):
            ls, ld = layer_of(s), layer_of(d)
            if ls != ld and ld not in LAYERS.get(ls, set()):
                problems.append(f"layer violation: {s} ({ls}) -> {d} ({ld}): "
                                + ", ".join(sorted(edges[s][d])))
    for p, n in long_files(a.max_lines):
        problems.append(f"too long: {p} has {n} lines (limit {a.max_lines})")
    nedges = sum(len(v) for v in edges.values())
    if a.edges:
        for s in sorted(edges):
            for d in sorted(edges[s]):
                print(f"{s} -> {d}: {', '.join(sorted(edges[s][d]))}")
    if not a.quiet:
        print(f"include_graph: {len(edges)} files, {nedges} dependencies, "
              f"{len(cycles)} cycles ({len(notes)} tolerated), "
              f"{len(problems)} problems")
        for n in notes:
            print(n)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
