"""Installable like other file systems: `meson install` puts the binary,
the man page squeezefs(8) and the mount(8) helper mount.fuse.squeezefs in
place (checked with --destdir into a temp dir: nothing is installed
system-wide); the man page renders without warnings and documents every
mount option the parser (opts.c) knows and every command of `squeezefs
--help`, and `squeezefs help mount` summarises the daemon's own options; the
installed helper mounts through mount.fuse3 with the installed binary."""
import glob
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from mountlib import ROOT, is_mounted, run_cli, squeezefs_bin

MAN = os.path.join(ROOT, "docs", "squeezefs.8")


def opts_source():
    """The text of the mount option parser (src/**/opts.c: one file)."""
    found = glob.glob(os.path.join(ROOT, "src", "**", "opts.c"), recursive=True)
    assert len(found) == 1, found
    return open(found[0]).read()


def opts_c_names():
    """(every option-like string literal of opts.c, the daemon's own option
    names). Own: compared with a key (`strcmp(key, "x")`) or the first field
    of an option table row (`{"x", ...`), without the options it passes to
    FUSE, sets as mount flags or drops (its lists fuse_known, mnt_flag_opts,
    fstab_dropped, and what is tested together with a list)."""
    src = opts_source()
    every = set(re.findall(r'"([a-z_][a-z_0-9]*=?)"', src))
    own = set(re.findall(r'strcmp\((?:key|name), "([a-z_]+)"\)', src))
    own |= set(re.findall(r'^\s*\{\s*"([a-z_]+)=?"\s*,', src, re.M))
    for lst in ("fuse_known", "mnt_flag_opts", "fstab_dropped"):
        for m in re.finditer(rf"{lst}\[\] = \{{(.*?)\}};|in_list\({lst}[^{{;]*", src, re.S):
            own -= {n.rstrip("=") for n in re.findall(r'"([a-z_]+=?)"', m.group(0))}
    assert len(every) >= 40 and len(own) >= 20, (
        "opts.c's option names were not found (%d, %d): teach this test the "
        "parser's new form" % (len(every), len(own)))
    return every, own


def man_option_tags():
    """The tag lines (after .TP) of the man page's OPTIONS section, source
    form with font escapes and quotes removed."""
    src = open(MAN).read().split("\n.SH OPTIONS\n", 1)[1].split("\n.SH ", 1)[0]
    tags = re.findall(r"^\.TP\n(.*)$", src, re.M)
    return [re.sub(r'\\f[BIRP]|\\-|"|^\.[A-Z]+ ', lambda m: "-" if m.group(0) == "\\-"
                   else "", t) for t in tags]


def man_options_section(text):
    """The rendered OPTIONS section, with groff's hyphenation at line ends
    undone."""
    text = re.sub("\u2010\n +", "", text)
    return text.split("\nOPTIONS\n", 1)[1].split("\nSPEC SYNTAX\n", 1)[0]


def help_commands():
    """{command: usage} from `squeezefs --help` (bench's continuation lines
    joined)."""
    out = run_cli("--help").stdout
    section = out.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    usages, cur = {}, None
    for line in section.splitlines():
        if line.startswith("        ") and cur:
            usages[cur] += " " + line.strip()
        elif line.startswith("  "):
            cur = line.split()[0]
            usages[cur] = line.strip()
    usages.pop("--version", None)
    return usages


def rendered_man():
    if not shutil.which("groff"):
        pytest.skip("groff not installed (tools/install-deps.sh installs groff-base)")
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-P-c", "-P-b", "-P-u", MAN],
                       capture_output=True, text=True, env=dict(os.environ, LC_ALL="C.UTF-8"),
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def test_man_page_renders_without_warnings():
    r = rendered_man()
    assert r.stderr == "", r.stderr  # -ww: every warning
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "SPEC SYNTAX",
                    "POLICY SOURCES", "RULE FILE", "COMMANDS", "FILES", "EXAMPLES",
                    "EXIT STATUS", "SEE ALSO"):
        assert re.search(rf"^{section}$", r.stdout, re.M), section
    if shutil.which("man"):
        m = subprocess.run(["man", "--warnings", "-l", MAN], capture_output=True, text=True,
                           env=dict(os.environ, MANPAGER="cat", MANWIDTH="80"), timeout=60)
        assert m.returncode == 0 and m.stderr == "", m.stderr
        assert "mount.fuse.squeezefs" in m.stdout


def test_man_page_documents_options_and_commands():
    text = rendered_man().stdout
    flat = re.sub(r"\s+", " ", text.replace("\u2010", "-").replace("\u2011", "-"))
    every, own = opts_c_names()
    options = man_options_section(text)
    tags = man_option_tags()
    for name in sorted(own):
        assert any(re.search(rf"(?<![\w-]){name}\b", t) for t in tags), \
            f"mount option {name} of opts.c has no entry in OPTIONS of squeezefs.8"
    for name in sorted(every):
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w])", options), \
            f"option name {name} of opts.c is not in OPTIONS of squeezefs.8"
    commands = text.split("\nCOMMANDS\n", 1)[1].split("\nFILES\n", 1)[0]
    for c, usage in help_commands().items():
        if c == "help":
            assert "help [COMMAND]" in commands
            continue
        assert re.search(rf"^ +{c} ", commands, re.M), f"command {c}"
        for o in re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", usage):
            assert o in commands, f"{c} {o}"
    for words in ("fusermount3(1)", "mount.fuse3(8)", "fuse.squeezefs defaults,compress=zstd:3",
                  "mount -t fuse.squeezefs"):
        assert words in flat, words


# Alternative spellings that the summary leaves to the man page.
HELP_ALIASES = {"writeback_cache", "no_writeback_cache"}


def test_help_mount_summarises_every_own_option():
    out = run_cli("help", "mount").stdout
    _, own = opts_c_names()
    missing = [n for n in sorted(own - HELP_ALIASES)
               if not re.search(rf"(?<![\w-]){n}\b", out)]
    assert not missing, f"`squeezefs help mount` does not mention {missing}"


def build_dir():
    d = os.path.dirname(squeezefs_bin())
    if not os.path.isdir(os.path.join(d, "meson-private")) or not shutil.which("meson"):
        pytest.skip(f"{squeezefs_bin()} is not in a meson build dir (or no meson)")
    return d


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`meson install --destdir` of the build under test: {name: path}."""
    bd = build_dir()
    dest = tmp_path_factory.mktemp("destdir")
    r = subprocess.run(["meson", "install", "-C", bd, "--destdir", str(dest),
                        "--no-rebuild", "--quiet"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    where = json.loads(subprocess.run(["meson", "introspect", bd, "--installed"],
                                      capture_output=True, text=True, check=True).stdout)
    out = {}
    for target in where.values():
        name = os.path.basename(target)
        out[name] = os.path.join(str(dest), target.lstrip("/"))
        out["target:" + name] = target
    return out


def test_meson_install_puts_everything_in_place(installed):
    exe = installed["squeezefs"]
    assert os.access(exe, os.X_OK)
    assert subprocess.run([exe, "--version"], capture_output=True, text=True,
                          check=True).stdout.startswith("squeezefs ")
    man = installed["squeezefs.8"]
    assert man.endswith("/man8/squeezefs.8")
    assert open(man, "rb").read() == open(MAN, "rb").read()
    helper = installed["mount.fuse.squeezefs"]
    assert os.path.basename(os.path.dirname(helper)) == "sbin"
    assert os.stat(helper).st_mode & 0o111 == 0o111
    text = open(helper).read()
    assert text.startswith("#!/bin/sh\n") and "@BINDIR@" not in text
    # the installed bin directory (without DESTDIR) is searched last
    bindir = os.path.dirname(installed["target:squeezefs"])
    assert re.search(rf"^PATH=.*:{re.escape(bindir)}$", text, re.M), text
    assert os.path.dirname(os.path.dirname(installed["target:mount.fuse.squeezefs"])) == \
        os.path.dirname(bindir)  # the same prefix
    if shutil.which("sh"):
        assert subprocess.run(["sh", "-n", helper]).returncode == 0


def daemon_exe(mnt):
    """The executable of the squeezefs daemon serving mnt."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if os.path.basename(exe) == "squeezefs" and str(mnt).encode() in argv:
            return exe
    return None


def test_installed_helper_mounts_like_mount_does(installed, tmp_path):
    """What mount(8) runs for `mount -t fuse.squeezefs B M -o OPTS`, with
    the helper and the binary of the install: mount.fuse.squeezefs B M -o
    OPTS. mount.fuse3 must find the installed squeezefs through PATH."""
    if os.geteuid() != 0 or not shutil.which("mount.fuse3", path="/usr/sbin:/sbin"):
        pytest.skip("needs root and mount.fuse3 (fuse3)")
    backing, mnt = tmp_path / "b", tmp_path / "m"
    backing.mkdir()
    mnt.mkdir()
    bindir = os.path.dirname(installed["squeezefs"])
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run([installed["mount.fuse.squeezefs"], str(backing), str(mnt),
                        "-o", "rw,compress=gzip:9/64K,noatime,nofail,_netdev"],
                       capture_output=True, text=True, env=env, timeout=60)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert is_mounted(str(mnt))
        fstype = [line.split(" - ")[1].split()[0] for line in open("/proc/self/mountinfo")
                  if line.split()[4] == str(mnt)]
        assert fstype == ["fuse.squeezefs"], fstype
        assert daemon_exe(mnt) == installed["squeezefs"]
        with open(mnt / "f", "wb") as f:
            f.write(b"installed " * 5000)
        st = json.loads(run_cli("stat", "--json", mnt / "f").stdout)
        assert (st["algorithm"], st["zipLevel"], st["logicalBlockSize"]) == ("gzip", 9, 16)
    finally:
        for _ in range(50):
            if not is_mounted(str(mnt)):
                break
            subprocess.run(["umount", str(mnt)], capture_output=True, timeout=60)
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=60)
    assert not is_mounted(str(mnt))
    assert run_cli("cat", backing / "f").stdout == "installed " * 5000


def test_helper_without_mount_fuse3_says_so(installed, tmp_path):
    """No mount.fuse3 on PATH, /usr/sbin or /sbin: a clear message, exit 1.
    (Checked with a copy of the helper whose search path has no sbin.)"""
    text = open(installed["mount.fuse.squeezefs"]).read()
    copy = tmp_path / "mount.fuse.squeezefs"
    copy.write_text(re.sub(r"^PATH=.*$", f"PATH={tmp_path}", text, flags=re.M))
    copy.chmod(0o755)
    r = subprocess.run(["/bin/sh", str(copy), "b", "m"], capture_output=True, text=True,
                       env={"PATH": str(tmp_path)}, timeout=60)
    assert r.returncode == 1 and "mount.fuse3 not found" in r.stderr
