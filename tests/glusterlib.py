"""A throw-away single-brick GlusterFS volume for tests and benchmarks.

glusterd runs as a plain daemon (no systemd) with its own working, run and
log directories under a temp dir (a glusterd.vol of our own: working-
directory, run-directory, glusterd-sockfile), so it never touches
/var/lib/glusterd. The volume has one brick on the local disk, named by the
machine's hostname (glusterd refuses 127.0.0.1; `force` because the brick
is on the root file system), and is mounted with mount -t glusterfs.
Everything is torn down by stop(): client unmounts, volume stop + delete,
then the brick and glusterd processes, by the pids they wrote.

Only one glusterd can listen on port 24007 per network namespace: if one is
already running, start() raises GlusterUnavailable with cause "machine"
(tests skip); a failure of the set-up itself has cause "setup" (tests fail).

    g = Gluster(base_dir)          # base_dir: an empty temp dir
    g.start()                      # glusterd + volume 'sqz' started
    g.mount(path)                  # client mount; g.umount(path)
    g.stop()                       # always; safe to call twice

For a server in another network namespace (tools/bench_gluster.py):
Gluster(base, netns="name", host="10.x.y.z") runs glusterd and the gluster
CLI inside the namespace and names the brick by that address.
"""
import os
import shutil
import signal
import socket
import subprocess
import time


class GlusterUnavailable(Exception):
    """GlusterFS could not be set up (why is in the message). `cause` says
    whose fault it is: "machine" (the machine cannot run it: another
    glusterd holds the port, no /dev/fuse), "not-installed" (the packages
    tools/install-deps.sh installs are missing) or "setup" (our own set-up
    failed: glusterd, the gluster CLI or the client mount did not do what
    we asked). Tests skip on the first two and fail on "setup"."""

    def __init__(self, msg, cause="setup"):
        super().__init__(msg)
        self.cause = cause


GLUSTERD_VOL = """volume management
    type mgmt/glusterd
    option working-directory {wd}
    option run-directory {run}
    option glusterd-sockfile {sock}
    option transport-type socket
    option transport.socket.listen-port 24007
    option transport.socket.read-fail-log off
    option ping-timeout 0
    option event-threads 1
    option max-port 60999
end-volume
"""


# Close-to-open across GlusterFS clients (one per host): a client must not
# answer a reader's stat or open from its caches. Kernel side: no attribute
# or entry caching on the GlusterFS FUSE mount; GlusterFS side: the client
# caches that keep stat results (md-cache) or file data across opens
# (quick-read, io-cache) or fake opens (open-behind) are off. Data written
# by the writer's client reaches the brick at its fsync/close (write-behind
# flushes there), so it stays on.
COHERENT_MOUNT = ("attribute-timeout=0", "entry-timeout=0", "negative-timeout=0")
COHERENT_VOLUME = (
    ("performance.stat-prefetch", "off"),
    ("performance.quick-read", "off"),
    ("performance.io-cache", "off"),
    ("performance.open-behind", "off"),
    ("performance.write-behind", "off"),
)


def _pid_alive(pid):
    """Alive and not a zombie (daemons are reparented to PID 1, which may
    not reap them in a container)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
    except (OSError, IndexError):
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def port_in_use(port, netns=None):
    cmd = ["ss", "-Hltn", f"sport = :{port}"]
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True)
    return bool(r.stdout.strip())


class Gluster:
    def __init__(self, base, volume="sqz", netns=None, host=None,
                 volume_options=COHERENT_VOLUME):
        self.volume_options = list(volume_options)
        self.base = os.path.abspath(str(base))
        self.volume = volume
        self.netns = netns
        self.host = host or socket.gethostname()
        self.wd = os.path.join(self.base, "wd")
        self.run_dir = os.path.join(self.base, "run")
        self.log_dir = os.path.join(self.base, "log")
        self.brick = os.path.join(self.base, "brick")
        self.sock = os.path.join(self.run_dir, "cli.socket")
        self.pidfile = os.path.join(self.base, "glusterd.pid")
        self.mounts = []
        self.volume_started = False
        self.volume_created = False
        self.glusterd_pid = None

    # -- helpers -----------------------------------------------------------
    def _ns(self, cmd):
        return (["ip", "netns", "exec", self.netns] + cmd) if self.netns else cmd

    def cli(self, *args, check=True, timeout=60):
        cmd = self._ns(["gluster", f"--glusterd-sock={self.sock}", "--mode=script",
                        f"--log-file={os.path.join(self.log_dir, 'cli.log')}"] + list(args))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise GlusterUnavailable(f"{' '.join(cmd)} failed ({r.returncode}): "
                                     f"{r.stdout.strip()} {r.stderr.strip()}".strip())
        return r

    def log_tail(self, name="glusterd.log", n=4000):
        try:
            with open(os.path.join(self.log_dir, name), errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    # -- life cycle --------------------------------------------------------
    def start(self, timeout=20):
        for exe in ("glusterd", "gluster", "mount.glusterfs"):
            if not shutil.which(exe) and not os.path.exists("/sbin/" + exe):
                raise GlusterUnavailable(f"{exe} not found (tools/install-deps.sh installs "
                                         "glusterfs-server glusterfs-client)", "not-installed")
        if not os.path.exists("/dev/fuse"):
            raise GlusterUnavailable("/dev/fuse missing (the GlusterFS client is a FUSE mount)",
                                     "machine")
        if port_in_use(24007, self.netns):
            raise GlusterUnavailable("port 24007 is in use: another glusterd is running "
                                     "in this network namespace", "machine")
        for d in (self.wd, self.run_dir, self.log_dir, self.brick):
            os.makedirs(d, exist_ok=True)
        vol = os.path.join(self.base, "glusterd.vol")
        with open(vol, "w") as f:
            f.write(GLUSTERD_VOL.format(wd=self.wd, run=self.run_dir, sock=self.sock))
        r = subprocess.run(self._ns(["glusterd", "-f", vol, "-p", self.pidfile,
                                     "-l", os.path.join(self.log_dir, "glusterd.log")]),
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise GlusterUnavailable(f"glusterd exited {r.returncode}: {r.stderr.strip()} "
                                     f"{self.log_tail(n=1500)}")
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.glusterd_pid = self.glusterd_pid or _read_pid(self.pidfile)
            if self.glusterd_pid and not _pid_alive(self.glusterd_pid):
                raise GlusterUnavailable("glusterd died at start: " + self.log_tail(n=1500))
            if os.path.exists(self.sock) and self.cli("volume", "list", check=False).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise GlusterUnavailable(f"glusterd did not answer within {timeout}s: "
                                     + self.log_tail(n=1500))
        self.cli("volume", "create", self.volume, f"{self.host}:{self.brick}", "force")
        self.volume_created = True
        for k, v in self.volume_options:
            self.cli("volume", "set", self.volume, k, v)
        self.cli("volume", "start", self.volume)
        self.volume_started = True
        return self

    def mount(self, path, timeout=20, options=COHERENT_MOUNT):
        os.makedirs(path, exist_ok=True)
        log = os.path.join(self.log_dir, "client-" + os.path.basename(str(path)) + ".log")
        opts = ",".join([f"log-file={log}"] + list(options))
        cmd = ["mount", "-t", "glusterfs", "-o", opts,
               f"{self.host}:/{self.volume}", str(path)]
        deadline = time.time() + timeout
        while True:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if r.returncode == 0 and is_mounted(path):
                break
            if time.time() > deadline:
                try:
                    with open(log, errors="replace") as f:
                        tail = f.read()[-1500:]
                except OSError:
                    tail = ""
                raise GlusterUnavailable(f"mount -t glusterfs failed ({r.returncode}): "
                                         f"{r.stderr.strip()} {tail}")
            time.sleep(0.3)  # the brick may still be coming up
        self.mounts.append(str(path))
        return str(path)

    def umount(self, path):
        path = str(path)
        for _ in range(50):
            if not is_mounted(path):
                break
            if subprocess.run(["umount", path], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", path], capture_output=True)
        if path in self.mounts:
            self.mounts.remove(path)

    def _our_pids(self):
        """glusterd and the daemons it started, by the pid files they wrote
        under our run directory (never by name)."""
        pids = []
        for dp, _, files in os.walk(self.run_dir):
            for fn in files:
                if fn.endswith(".pid"):
                    p = _read_pid(os.path.join(dp, fn))
                    if p:
                        pids.append(p)
        p = self.glusterd_pid or _read_pid(self.pidfile)
        if p:
            pids.append(p)
        return pids

    def _brick_leftovers(self):
        """The unix socket (/var/run/gluster/*.socket) and log file
        (/var/log/glusterfs/bricks/*.log) glusterd gives our brick process
        outside our directories, from its command line (-S, -l)."""
        paths = []
        for p in self._our_pids():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    args = f.read().decode(errors="replace").split("\0")
            except OSError:
                continue
            if not any(a.startswith(self.base) or self.base.replace("/", "-")[1:] in a
                       for a in args):
                continue
            for flag in ("-S", "-l"):
                if flag in args[:-1]:
                    v = args[args.index(flag) + 1]
                    if v.startswith(("/var/run/gluster/", "/run/gluster/",
                                     "/var/log/glusterfs/bricks/")):
                        paths.append(v)
        return paths

    def stop(self):
        leftovers = self._brick_leftovers()
        for m in list(self.mounts):
            self.umount(m)
        if self.volume_started:
            self.cli("volume", "stop", self.volume, "force", check=False)
            self.volume_started = False
        if self.volume_created:
            self.cli("volume", "delete", self.volume, check=False)
            self.volume_created = False
        pids = self._our_pids()
        for p in pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while time.time() < deadline and any(_pid_alive(p) for p in pids):
            time.sleep(0.05)
        for p in pids:
            if _pid_alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for path in leftovers:
            try:
                os.unlink(path)
            except OSError:
                pass
