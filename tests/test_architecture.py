"""The house rules of src/ (issue 12, CONTRIBUTING.md): no cycles between
source files (from the call graph of the build's object files, see
tools/include_graph.py), dependencies only down the layers, and no source
file over 650 lines."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "include_graph.py")
MAX_LINES = 650


def build_dir():
    """The build the tests run against: the directory of $SQUEEZEFS_BIN
    when it is a meson build, else build/."""
    b = os.environ.get("SQUEEZEFS_BIN")
    if b:
        d = os.path.dirname(os.path.abspath(b))
        if os.path.exists(os.path.join(d, "build.ninja")):
            return d
    return os.path.join(ROOT, "build")


def load_tool():
    spec = importlib.util.spec_from_file_location("include_graph", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_cycles_and_layers_respected():
    b = build_dir()
    if not os.path.exists(os.path.join(b, "build.ninja")):
        pytest.fail(f"no build in {b}: build first (tools/build.sh)")
    p = subprocess.run([sys.executable, TOOL, "--build", b,
                        "--max-lines", str(MAX_LINES)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert " 0 problems" in p.stdout, p.stdout


def test_no_long_source_files():
    long = load_tool().long_files(MAX_LINES)
    assert not long, "split these files by concern: " + ", ".join(
        f"{path} ({n} lines)" for path, n in long)


def test_checker_finds_cycles():
    """The checker itself: a two-file and a three-file cycle are found, a
    chain is not."""
    g = load_tool()
    edges = {"a": {"b": {"f"}}, "b": {"a": {"g"}}, "c": {"d": {"h"}},
             "d": {"e": {"i"}}, "e": {"c": {"j"}}, "x": {"y": {"k"}}, "y": {}}
    comps = sorted(c for c in g.sccs(edges) if len(c) > 1)
    assert comps == [["a", "b"], ["c", "d", "e"]]


def test_checker_reads_object_files(tmp_path):
    """nm's undefined symbols of one object, defined in another, make an
    edge: two objects calling each other are a cycle."""
    cc = os.environ.get("CC", "cc")
    d = tmp_path / "src" / "fuse" / "libx.a.p"
    d.mkdir(parents=True)
    (tmp_path / "a.c").write_text("int b(void);\nint a(void) { return b(); }\n")
    (tmp_path / "b.c").write_text("int a(void);\nint b(void) { return a(); }\n")
    for n in ("a", "b"):
        r = subprocess.run([cc, "-c", str(tmp_path / f"{n}.c"), "-o",
                            str(d / f"{n}.c.o")], capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"no C compiler: {r.stderr}")
    edges = load_tool().build_graph(str(tmp_path))
    assert edges == {"src/fuse/a.c": {"src/fuse/b.c": {"b"}},
                     "src/fuse/b.c": {"src/fuse/a.c": {"a"}}}
