"""What the benchmark scripts share (not a script): FUSE mounts in the
foreground (squeezefs, or mergerfs as the passthrough baseline), mount
checks, dropping the page cache, disk usage, size parsing and fresh
file systems on loop devices.

Used by tools/fio_compare.py, bench_daemon.py, bench_db.py,
bench_gluster.py, bench_manyfiles.py, bench_randread.py and
bench_smallfiles.py.
"""
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PASSTHROUGH_OPTS = "cache.files=partial,category.create=ff,minfreespace=0,fsname=passthrough"


def log(msg, prog="bench"):
    print(f"{prog}: {msg}", file=sys.stderr, flush=True)


def unescape_mountinfo(field):
    """mountinfo writes space, tab, newline and backslash as \\ooo."""
    return re.sub(r"\\([0-3][0-7][0-7])", lambda m: chr(int(m.group(1), 8)), field)


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(unescape_mountinfo(line.split()[4]) == path for line in f)


def drop_caches_or_fail():
    """sync + drop the page cache (needs root); raises if impossible (for
    benchmarks whose 'cold' figures must not silently be warm)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def drop_caches(state, prog="bench"):
    """sync + drop the page cache (needs root); warns once if impossible."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        if not state.get("warned"):
            log(f"warning: cannot drop the page cache ({e}); reads may be warm", prog)
            state["warned"] = True


class FuseMount:
    """A FUSE daemon in the foreground (squeezefs -f / mergerfs -f)."""

    def __init__(self, cmd, mnt, logpath):
        self.cmd, self.mnt, self.logpath = cmd, mnt, logpath
        self.proc = None

    def start(self, timeout=20):
        os.makedirs(self.mnt, exist_ok=True)
        with open(self.logpath, "ab") as lf:
            self.proc = subprocess.Popen(self.cmd, stdout=lf, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if is_mounted(self.mnt):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        with open(self.logpath, "rb") as f:
            tail = f.read()[-2000:].decode(errors="replace")
        raise RuntimeError(f"mount failed: {' '.join(self.cmd)}\n{tail}")

    def stop(self):
        if self.proc is None:
            return
        if is_mounted(self.mnt):
            for _ in range(50):
                r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
                if r.returncode == 0 or not is_mounted(self.mnt):
                    break
                time.sleep(0.1)
            else:
                subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def fuse_cmd(kind, squeezefs, opts, backing, mnt):
    """The foreground command of a FUSE target: kind "passthrough" or
    "mergerfs" (opts default PASSTHROUGH_OPTS), else squeezefs (-o opts if
    any)."""
    if kind in ("passthrough", "mergerfs"):
        return ["mergerfs", "-f", "-o", opts or PASSTHROUGH_OPTS, backing, mnt]
    return [squeezefs, "-f"] + (["-o", opts] if opts else []) + [backing, mnt]


class FuseTarget:
    """A benchmark target that may be a FUSE mount (self.fuse, or None for
    a plain directory): mount, remount between runs, unmount."""
    fuse = None

    def mount_fuse(self, kind, squeezefs, opts, backing, mnt, logpath):
        """Mount backing at mnt (fuse_cmd) and return mnt."""
        self.fuse = FuseMount(fuse_cmd(kind, squeezefs, opts, backing, mnt), mnt, logpath)
        self.fuse.start()
        return mnt

    def remount(self):
        if self.fuse:
            self.fuse.stop()
            self.fuse.start()

    def unmount_fuse(self):
        if self.fuse:
            self.fuse.stop()
            self.fuse = None


def du_bytes(path):
    total = 0
    for dp, _, files in os.walk(path):
        for fn in files:
            try:
                total += os.lstat(os.path.join(dp, fn)).st_blocks * 512
            except OSError:
                pass
    return total


def parse_size(s):
    s = s.strip().lower().rstrip("b")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


class LoopFs:
    """A fresh file system (mkfs argv + device) on a loop device over a
    sparse image of size bytes, mounted at mnt with mount options opts."""

    def __init__(self, img, mnt, size, mkfs, opts=None):
        self.img, self.mnt, self.loop = img, mnt, None
        with open(img, "wb") as f:
            f.truncate(size)
        self.loop = subprocess.run(["losetup", "-f", "--show", img], check=True,
                                   capture_output=True, text=True).stdout.strip()
        try:
            subprocess.run(mkfs + [self.loop], check=True, stdout=subprocess.DEVNULL)
            os.makedirs(mnt, exist_ok=True)
            subprocess.run(["mount"] + (["-o", opts] if opts else []) + [self.loop, mnt], check=True)
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.loop:
            subprocess.run(["umount", self.mnt])
            subprocess.run(["losetup", "-d", self.loop])
            self.loop = None
        if os.path.exists(self.img):
            os.unlink(self.img)
