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


# Confinement (issue 31, CONTRIBUTING.md "Confinement"): the daemon's
# backing accesses are relative to a descriptor. A syscall that takes a
# path may take, in the daemon's folders and src/format, only the magic link of the
# daemon's own descriptor ("/proc/self/fd/N", built by sqz_proc_path into
# a variable named pp, or resolve.c's proc), or a path in the files listed
# here, for the reason given.
PATH_CALLS = ("open", "opendir", "fopen", "stat", "lstat", "truncate", "chmod",
              "chown", "lchown", "rename", "unlink", "mkdir", "rmdir", "utimes",
              "getxattr", "lgetxattr", "setxattr", "lsetxattr", "listxattr",
              "llistxattr", "removexattr", "lremovexattr")
AT_CALLS = ("utimensat", "fchmodat", "fchownat", "linkat", "openat", "fstatat",
            "renameat", "renameat2", "unlinkat", "mkdirat", "symlinkat",
            "mknodat", "readlinkat")  # with AT_FDCWD: a path
DAEMON_DIRS = tuple(f"src/{d}" for d in ("daemon", "node", "store", "pack",
                                        "content", "jobs", "fuse", "mount"))
PATH_ALLOWED = {  # file: (the path arguments allowed there, or None: any; why)
    "src/mount/mount.c": (None, "BACKING, the mount point: the command line"),
    "src/mount/shutdown.c": (None, "/sys/fs/fuse/connections, the mount point"),
    "src/daemon/mountinfo.c": (None, "/proc/self/mountinfo, /sys files of the mount's bdi, the mount point (mount flags)"),
    "src/fuse/killpriv.c": (None, "/proc/PID/status and /proc/PID/ns/user "
                            "of the caller (CAP_FSETID)"),
    "src/mount/remount.c": ({"mnt"}, "the mount point named on the command line "
                           "(remount runs in the command, not the daemon)"),
    "src/jobs/revalidate.c": (None, "/proc/self/mountinfo"),
    "src/mount/uring.c": ({"ENABLE_URING_PARAM"}, "the kernel's "
                          "/sys/module/fuse/parameters/enable_uring"),
    "src/policy/rules.c": (None, "the rule file named by policy="),
    "src/format/container.c": ({"path"}, "sqz_ctr_*_path, for the offline tools"),
    "src/format/pack.c": ({"path"}, "sqz_pack_ptr_get_follow: a magic link only"),
    "src/store/replace.c": ({"src"}, "copy_xattrs(src): called with pp"),
}


def test_daemon_syscalls_take_no_backing_path():
    import re
    call = re.compile(r"(?<![\w.>])(?:(?:" + "|".join(PATH_CALLS) +
                      r")\(|(?:" + "|".join(AT_CALLS) +
                      r")\(\s*AT_FDCWD\s*,)\s*([^,)]*)")
    bad = []
    for layer in DAEMON_DIRS + ("src/format", "src/policy"):
        for name in sorted(os.listdir(os.path.join(ROOT, layer))):
            rel = f"{layer}/{name}"
            if not name.endswith(".c"):
                continue
            ok, _why = PATH_ALLOWED.get(rel, (set(), ""))
            if ok is None:
                continue
            with open(os.path.join(ROOT, rel)) as f:
                text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
            if "/proc/self/fd/%d/" in text:  # a magic link, then a path walk
                bad.append(f"{rel}: /proc/self/fd/%d/NAME")
            for mo in call.finditer(text):
                if mo.group(1).strip() not in {"pp", "proc"} | ok:
                    line = text.count("\n", 0, mo.start()) + 1
                    bad.append(f"{rel}:{line}: {mo.group(0)}")
    assert not bad, "a path-based syscall on a backing path: " + "; ".join(bad)


def test_readlinked_paths_are_labels_only():
    """The path of a descriptor read back from /proc (sqz_fd_path) is for
    log labels and policy matching: only inode_path.c (sqz_inode_relpath,
    sqz_inode_dirfd, which checks the name it finds) and log.c call it, and the absolute-path helper is gone."""
    import re
    users = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        for name in files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, ROOT)
            with open(p) as f:
                text = f.read()
            assert "sqz_inode_abspath" not in text, rel
            if re.search(r"\bsqz_fd_path\(", text) and not rel.endswith("fdpath.h"):
                users.add(rel)
    assert users == {"src/node/inode_path.c", "src/format/log.c"}, users
