"""Helpers to run squeezefs in tests: mount a backing dir, always unmount."""
import ctypes
import ctypes.util
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def squeezefs_bin():
    """Path of the squeezefs binary under test ($SQUEEZEFS_BIN or build/)."""
    b = os.environ.get("SQUEEZEFS_BIN") or os.path.join(ROOT, "build", "squeezefs")
    return os.path.abspath(b)


def system_python():
    """A python3 that other users can execute (sys.executable may live under
    root's 0700 home, e.g. pyenv): for tests that drop privileges."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            return cand
    return sys.executable


def in_ci():
    """CI=true (or 1/yes): the suite runs where the product must be tested
    whole, so a missing piece of the machine fails instead of skipping."""
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def require_fuse():
    """Fail the calling test (pytest.fail) unless /dev/fuse and fusermount3
    are there: without them no mount test can run, and a stage that skipped
    them all would pass without testing the product. SQZ_ALLOW_NO_FUSE=1
    turns that into a skip, outside CI only."""
    import shutil
    import pytest
    missing = [w for w, ok in (("/dev/fuse", os.path.exists("/dev/fuse")),
                               ("fusermount3", shutil.which("fusermount3") is not None))
               if not ok]
    if not missing:
        return
    why = f"FUSE is not available ({' and '.join(missing)} missing)"
    if os.environ.get("SQZ_ALLOW_NO_FUSE") == "1" and not in_ci():
        pytest.skip(f"{why}; SQZ_ALLOW_NO_FUSE=1")
    pytest.fail(f"{why}: the mount tests cannot run here, a failure, not a skip "
                "(outside CI, SQZ_ALLOW_NO_FUSE=1 skips them)", pytrace=False)


def extra_mount_options():
    """$SQZ_MOUNT_OPTS (comma separated): options added to every Mount, e.g.
    SQZ_MOUNT_OPTS=io_uring runs a suite over FUSE over io_uring."""
    return [o for o in os.environ.get("SQZ_MOUNT_OPTS", "").split(",") if o]


def skip_if_io_uring(what):
    """Skip a test of the packed file's push at open (src/node/push.c,
    sqz_push_packed), which is off over io_uring (it would run on the
    open's ring thread), when the suite runs with SQZ_MOUNT_OPTS=io_uring."""
    if "io_uring" in extra_mount_options():
        import pytest
        pytest.skip(f"{what}: not pushed over io_uring (SQZ_MOUNT_OPTS)")


def run_cli(*args, check=True, input=None, timeout=300, env=None):
    """Run `squeezefs ARGS`; returns CompletedProcess (text mode)."""
    cmd = [squeezefs_bin()] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, input=input,
                       timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def mount_stats(mnt):
    """The daemon's counters of the mount at mnt (`squeezefs stats --json`)."""
    import json
    return json.loads(run_cli("stats", "--json", mnt).stdout)


def unescape_mountinfo(field):
    """mountinfo writes space, tab, newline and backslash as \\ooo."""
    return re.sub(r"\\([0-3][0-7][0-7])", lambda m: chr(int(m.group(1), 8)), field)


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if unescape_mountinfo(parts[4]) == path:
                return True
    return False


class Mount:
    """A running squeezefs daemon (foreground, -f) on backing -> mountpoint.

    Use as a context manager; the daemon is always unmounted and reaped.
    The daemon's stderr goes to self.log_path (read it with .log())."""

    def __init__(self, backing, mountpoint, options=(), extra_args=(),
                 env=None, wait=True):
        self.backing = str(backing)
        self.mnt = str(mountpoint)
        self.options = list(options)
        self.extra_args = list(extra_args)
        self.env = env
        self.proc = None
        self.log_path = self.mnt.rstrip("/") + ".log"
        self._log = None
        if wait:
            self.start()

    def cmd(self):
        c = [squeezefs_bin(), "-f"]
        opts = self.options + extra_mount_options()
        if opts:
            c += ["-o", ",".join(opts)]
        c += self.extra_args + [self.backing, self.mnt]
        return c

    def start(self, timeout=20):
        os.makedirs(self.mnt, exist_ok=True)
        self._log = open(self.log_path, "ab")
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(self.cmd(), stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if is_mounted(self.mnt):
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"squeezefs exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"mount did not appear within {timeout}s:\n{self.log()}")

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def unmount(self, timeout=60):
        """Clean unmount (fusermount3 -u), then wait for the daemon to exit.
        Returns the daemon's exit code."""
        if self.proc is None:
            return None
        if is_mounted(self.mnt):
            for _ in range(100):
                r = subprocess.run(["fusermount3", "-u", self.mnt],
                                   capture_output=True, text=True)
                if r.returncode == 0 or not is_mounted(self.mnt):
                    break
                time.sleep(0.1)  # EBUSY: a test process still has a file open
            else:
                subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._close_log()
        self.proc = None
        return rc

    def kill(self, sig=signal.SIGKILL):
        """Kill the daemon (crash simulation) and clear the dead mount."""
        if self.proc is None:
            return None
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            pass
        rc = None
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
        self._close_log()
        self.proc = None
        return rc

    def _close_log(self):
        if self._log:
            self._log.close()
            self._log = None

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            if exc[0] is None:
                self.unmount()
            else:
                self.kill()
        return False


def flip_bytes(path, pos, n=64):
    """Invert n bytes of a file at pos (bit rot, a bad sector)."""
    with open(path, "r+b") as f:
        f.seek(pos)
        chunk = f.read(n)
        f.seek(pos)
        f.write(bytes(x ^ 0xFF for x in chunk))


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
RENAME_EXCHANGE = 2


def renameat2(old, new, flags):
    """renameat2(2) of two paths (flags: RENAME_EXCHANGE, ...)."""
    f = _libc.renameat2
    f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                  ctypes.c_uint]
    if f(-100, os.fsencode(old), -100, os.fsencode(new), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)
