#!/usr/bin/env python3
"""fsx-style random file exerciser for squeezefs (reusable driver).

One file on the file system under test (normally a squeezefs mount) is
driven by a deterministic random sequence of operations -- read, write,
append (O_APPEND fd), truncate up/down, fallocate (extending, KEEP_SIZE,
PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE with and without KEEP_SIZE), mmap read, shared mmap write + msync, fsync, fdatasync,
close+reopen, stat -- and every operation is mirrored on a shadow file in a
plain directory. Every read (pread and mmap) is compared byte-for-byte with
the shadow; the whole file is compared every `check_every` operations, after
a remount and at the end.

The sequence depends only on the seed and the parameters, so a failure is
reproduced by the replay command printed in every failure message, e.g.

    python3 tests/fsx.py --seed 42 --ops 25000 --options compress=zstd:1/4K \
        --maxlen 2097152 --remount-at 12500

Standalone, the script mounts squeezefs itself (binary: $SQUEEZEFS_BIN or
build/squeezefs) on temporary directories; with --dir DIR it runs on an
existing directory (e.g. a plain one, to check the driver itself).
"""
import argparse
import collections
import ctypes
import ctypes.util
import errno
import mmap
import os
import random
import shutil
import sys
import tempfile
import time

PAGE = mmap.PAGESIZE
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
FALLOC_FL_ZERO_RANGE = 0x10

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.fallocate.restype = ctypes.c_int


def fallocate(fd, mode, off, length):
    """fallocate(2) via ctypes; raises OSError."""
    if _libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# Default operation weights (relative). Reads/writes dominate; the ops that
# make the daemon commit (fsync, reopen, msync) are rare to keep the run fast.
DEFAULT_WEIGHTS = {
    "read": 300,
    "write": 300,
    "append": 60,
    "truncate_down": 30,
    "truncate_up": 30,
    "fallocate": 20,
    "fallocate_keep": 10,
    "punch": 12,
    "zero_range": 12,
    "mapread": 15,
    "mapwrite": 15,
    "fsync": 12,
    "fdatasync": 6,
    "reopen": 20,
    "stat": 30,
}


class FsxFailure(AssertionError):
    pass


def _first_diff(a, b):
    n = min(len(a), len(b))
    # binary search on equal prefixes would be faster; chunks are enough
    step = 4096
    for i in range(0, n, step):
        if a[i:i + step] != b[i:i + step]:
            for j in range(i, min(i + step, n)):
                if a[j] != b[j]:
                    return j
    return n


class Fsx:
    """Drive one file at `path` against a shadow at `shadow_path`.

    remount: optional callable() called (with both fds closed) at op
    `remount_at`; it must unmount and mount again and may return a new
    path for the file (or None to keep `path`).
    replay: the command line that reproduces this run (put in messages).
    """

    def __init__(self, path, shadow_path, seed, nops, maxlen=2 << 20,
                 maxop=256 << 10, block=None, weights=None, remount=None,
                 remount_at=None, check_every=2000, replay="", verbose=False):
        self.path = path
        self.shadow_path = shadow_path
        self.seed = seed
        self.nops = nops
        self.maxlen = maxlen
        self.maxop = min(maxop, maxlen)
        self.block = block or 4096
        w = dict(DEFAULT_WEIGHTS)
        if weights:
            w.update(weights)
        self.opnames = [k for k, v in w.items() if v > 0]
        self.opweights = [w[k] for k in self.opnames]
        self.remount = remount
        self.remount_at = remount_at
        self.check_every = check_every
        self.replay = replay
        self.verbose = verbose
        self.rng = random.Random(seed)
        self.history = collections.deque(maxlen=40)
        self.opno = 0
        self.counts = collections.Counter()
        self.fd = self.afd = self.sfd = -1

    # ---- failure reporting -------------------------------------------
    def fail(self, what):
        hist = "\n".join(f"  #{n}: {d}" for n, d in self.history)
        raise FsxFailure(
            f"fsx FAILED seed={self.seed} op={self.opno}: {what}\n"
            f"last operations:\n{hist}\n"
            f"replay: {self.replay or '(no replay command given)'}")

    def note(self, desc):
        self.history.append((self.opno, desc))
        if self.verbose:
            print(f"#{self.opno}: {desc}", file=sys.stderr)

    # ---- file handles ---------------------------------------------------
    def open_files(self, create=False):
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        self.fd = os.open(self.path, flags, 0o644)
        self.afd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        if self.sfd < 0:
            self.sfd = os.open(self.shadow_path, flags, 0o644)

    def close_files(self, shadow=False):
        for name in ("fd", "afd") + (("sfd",) if shadow else ()):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)

    def size(self):
        return os.fstat(self.sfd).st_size

    # ---- data -------------------------------------------------------------
    def data(self, n):
        r = self.rng.random()
        if r < 0.5:   # compressible text tagged with the op number
            unit = b"op%07d:" % self.opno + bytes([97 + self.opno % 26]) * 7
            return (unit * (n // len(unit) + 1))[:n]
        if r < 0.8:   # incompressible
            return self.rng.randbytes(n)
        if r < 0.9:   # zeros (hole-like blocks)
            return bytes(n)
        return bytes([self.rng.randrange(1, 256)]) * n

    def length(self):
        r = self.rng.random()
        if r < 0.6:
            n = self.rng.randint(1, 4096)
        elif r < 0.92:
            n = self.rng.randint(1, 65536)
        else:
            n = self.rng.randint(1, self.maxop)
        return min(n, self.maxlen)

    def offset(self, limit):
        """An offset in [0, limit], biased to block boundaries."""
        if limit <= 0:
            return 0
        r = self.rng.random()
        if r < 0.2:
            b = self.rng.choice((self.block, PAGE, 65536))
            k = self.rng.randint(0, limit // b)
            off = k * b + self.rng.choice((0, 0, -1, 1, -7, 13))
            return max(0, min(limit, off))
        return self.rng.randint(0, limit)

    # ---- checks -------------------------------------------------------------
    def compare(self, got, off, n, how):
        exp = os.pread(self.sfd, n, off)
        if got != exp:
            if len(got) != len(exp):
                self.fail(f"{how} at {off} len {n}: got {len(got)} bytes, "
                          f"expected {len(exp)} (file size {self.size()})")
            d = _first_diff(got, exp)
            self.fail(f"{how} at {off} len {n}: first bad byte at file "
                      f"offset {off + d}: got {got[d:d + 16].hex()} expected "
                      f"{exp[d:d + 16].hex()}")

    def full_check(self, why):
        size = self.size()
        st = os.stat(self.path)
        if st.st_size != size:
            self.fail(f"{why}: st_size {st.st_size}, expected {size}")
        fd = os.open(self.path, os.O_RDONLY)
        try:
            off = 0
            while True:
                got = os.pread(fd, 1 << 20, off)
                exp = os.pread(self.sfd, 1 << 20, off)
                if got != exp:
                    if not got and exp:
                        self.fail(f"{why}: file ends at {off}, expected size {size}")
                    d = _first_diff(got, exp)
                    self.fail(f"{why}: content differs at offset {off + d}: "
                              f"got {got[d:d + 16].hex()} expected "
                              f"{exp[d:d + 16].hex()} (size {size})")
                if not got:
                    break
                off += len(got)
        finally:
            os.close(fd)

    # ---- operations -------------------------------------------------------
    def op_read(self):
        size = self.size()
        off = self.offset(size + (4096 if self.rng.random() < 0.1 else 0))
        n = self.length()
        self.note(f"read {off} {n} (size {size})")
        self.compare(os.pread(self.fd, n, off), off, n, "read")

    def op_write(self):
        size = self.size()
        off = self.offset(min(self.maxlen - 1, size + 65536))
        n = min(self.length(), self.maxlen - off)
        d = self.data(n)
        self.note(f"write {off} {n} (size {size})")
        w = os.pwrite(self.fd, d, off)
        if w != n:
            self.fail(f"short write: {w} of {n} at {off}")
        os.pwrite(self.sfd, d, off)

    def op_append(self):
        size = self.size()
        n = min(self.length(), self.maxlen - size)
        if n <= 0:
            return self.op_truncate_down()
        d = self.data(n)
        self.note(f"append {n} (size {size})")
        w = os.write(self.afd, d)
        if w != n:
            self.fail(f"short append: {w} of {n}")
        os.pwrite(self.sfd, d, size)
        if self.rng.random() < 0.2:
            pos = os.lseek(self.afd, 0, os.SEEK_CUR)
            if pos != size + n:
                self.fail(f"O_APPEND fd offset after append is {pos}, expected {size + n}")

    def _truncate(self, new, how):
        self.note(f"{how} {self.size()} -> {new}")
        os.ftruncate(self.fd, new)
        os.ftruncate(self.sfd, new)

    def op_truncate_down(self):
        size = self.size()
        new = 0 if self.rng.random() < 0.03 else self.offset(size)
        self._truncate(new, "truncate_down")

    def op_truncate_up(self):
        size = self.size()
        new = self.offset(min(self.maxlen, size + self.length()))
        self._truncate(max(new, size), "truncate_up")

    def op_fallocate(self):
        size = self.size()
        off = self.offset(min(self.maxlen - 1, size + 65536))
        n = min(self.length(), self.maxlen - off)
        self.note(f"fallocate {off} {n} (size {size})")
        try:
            os.posix_fallocate(self.fd, off, n)
        except OSError as e:
            self.fail(f"posix_fallocate({off}, {n}) failed: {e}")
        if off + n > size:
            os.ftruncate(self.sfd, off + n)
        if self.rng.random() < 0.3:
            st = os.fstat(self.fd).st_size
            if st != self.size():
                self.fail(f"size after fallocate is {st}, expected {self.size()}")

    def op_fallocate_keep(self):
        size = self.size()
        off = self.offset(min(self.maxlen - 1, size + 65536))
        n = min(self.length(), self.maxlen - off)
        self.note(f"fallocate KEEP_SIZE {off} {n} (size {size})")
        try:
            fallocate(self.fd, FALLOC_FL_KEEP_SIZE, off, n)
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                self.fail(f"fallocate(KEEP_SIZE, {off}, {n}) failed: {e}")
        st = os.fstat(self.fd).st_size
        if st != size:
            self.fail(f"fallocate KEEP_SIZE changed the size: {size} -> {st}")

    def _zero(self, mode, what):
        size = self.size()
        off = self.offset(min(self.maxlen - 1, size + 65536))
        n = min(self.length(), self.maxlen - off)
        self.note(f"{what} {off} {n} (size {size})")
        try:
            fallocate(self.fd, mode, off, n)
        except OSError as e:
            self.fail(f"fallocate({what}, {off}, {n}) failed: {e}")
        fallocate(self.sfd, mode, off, n)
        st = os.fstat(self.fd).st_size
        if st != self.size():
            self.fail(f"size after {what} is {st}, expected {self.size()}")

    def op_punch(self):
        self._zero(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, "punch")

    def op_zero_range(self):
        keep = self.rng.random() < 0.5
        self._zero(FALLOC_FL_ZERO_RANGE | (FALLOC_FL_KEEP_SIZE if keep else 0),
                   "zero_range" + (" KEEP_SIZE" if keep else ""))

    def op_mapread(self):
        size = self.size()
        if size == 0:
            return self.op_write()
        off = self.offset(size - 1)
        n = min(self.length(), size - off)
        base = off - off % mmap.ALLOCATIONGRANULARITY
        self.note(f"mapread {off} {n} (size {size})")
        m = mmap.mmap(self.fd, off + n - base, mmap.MAP_SHARED, mmap.PROT_READ,
                      offset=base)
        try:
            got = m[off - base:off - base + n]
        finally:
            m.close()
        self.compare(got, off, n, "mmap read")

    def op_mapwrite(self):
        size = self.size()
        off = self.offset(min(self.maxlen - 1, size + 8192))
        n = min(self.length(), self.maxlen - off)
        if off + n > size:   # like fsx: extend first, then write via the map
            self.note(f"mapwrite: ftruncate {size} -> {off + n}")
            os.ftruncate(self.fd, off + n)
            os.ftruncate(self.sfd, off + n)
        d = self.data(n)
        base = off - off % mmap.ALLOCATIONGRANULARITY
        self.note(f"mapwrite {off} {n} (size {size})")
        m = mmap.mmap(self.fd, off + n - base, mmap.MAP_SHARED,
                      mmap.PROT_READ | mmap.PROT_WRITE, offset=base)
        try:
            m[off - base:off - base + n] = d
            m.flush()   # msync(MS_SYNC)
        finally:
            m.close()
        os.pwrite(self.sfd, d, off)

    def op_fsync(self):
        self.note("fsync")
        os.fsync(self.fd)

    def op_fdatasync(self):
        self.note("fdatasync")
        os.fdatasync(self.fd)

    def op_reopen(self):
        self.note("close+reopen")
        self.close_files()
        self.open_files()

    def op_stat(self):
        self.note("stat")
        size = self.size()
        st = os.fstat(self.fd) if self.rng.random() < 0.5 else os.stat(self.path)
        if st.st_size != size:
            self.fail(f"st_size is {st.st_size}, expected {size}")

    # ---- main loop ------------------------------------------------------------
    def run(self):
        t0 = time.time()
        self.open_files(create=True)
        try:
            for self.opno in range(1, self.nops + 1):
                if self.remount is not None and self.opno == self.remount_at:
                    self.note("remount")
                    self.close_files()
                    newpath = self.remount()
                    if newpath:
                        self.path = newpath
                    self.full_check("after remount")
                    self.open_files()
                name = self.rng.choices(self.opnames, self.opweights)[0]
                self.counts[name] += 1
                try:
                    getattr(self, "op_" + name)()
                except FsxFailure:
                    raise
                except OSError as e:
                    self.fail(f"{name} raised {e!r}")
                if self.check_every and self.opno % self.check_every == 0:
                    self.note("full check")
                    self.full_check("periodic full check")
            self.opno = self.nops
            self.note("final fsync + close")
            try:
                os.fsync(self.fd)
            except OSError as e:
                self.fail(f"final fsync raised {e!r}")
            self.close_files()
            self.full_check("final check")
        finally:
            self.close_files(shadow=True)
        self.elapsed = time.time() - t0
        return self


def replay_command(seed, nops, options, maxlen, remount_at=None, maxop=None,
                   block=None):
    here = os.path.relpath(os.path.abspath(__file__))
    c = f"python3 {here} --seed {seed} --ops {nops} --maxlen {maxlen}"
    if options:
        c += " --options " + ",".join(options)
    if remount_at:
        c += f" --remount-at {remount_at}"
    if maxop:
        c += f" --maxop {maxop}"
    if block:
        c += f" --block {block}"
    return c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--ops", type=int, default=10000)
    ap.add_argument("--maxlen", type=int, default=2 << 20)
    ap.add_argument("--maxop", type=int, default=256 << 10)
    ap.add_argument("--block", type=int, default=None,
                    help="block size to bias offsets to (default: from compress=)")
    ap.add_argument("--options", default="",
                    help="squeezefs -o options, comma separated")
    ap.add_argument("--remount-at", type=int, default=None)
    ap.add_argument("--dir", default=None,
                    help="run in this existing directory instead of mounting")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else random.randrange(1 << 31)
    opts = [o for o in a.options.split(",") if o]
    tmp = tempfile.mkdtemp(prefix="sqz-fsx-")
    shadow = os.path.join(tmp, "shadow")
    replay = replay_command(seed, a.ops, opts, a.maxlen, a.remount_at,
                            a.maxop, a.block)
    mount = None
    try:
        if a.dir:
            target = os.path.join(a.dir, "fsx.file")
            remount = None
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from mountlib import Mount
            backing = os.path.join(tmp, "backing")
            os.mkdir(backing)
            mount = Mount(backing, os.path.join(tmp, "mnt"), options=opts)
            target = mount.path("fsx.file")

            def remount():
                mount.unmount()
                mount.start()
        f = Fsx(target, shadow, seed, a.ops, maxlen=a.maxlen, maxop=a.maxop,
                block=a.block or block_of(opts), remount=None if a.dir else remount,
                remount_at=a.remount_at, replay=replay, verbose=a.verbose)
        try:
            f.run()
        except FsxFailure as e:
            print(e, file=sys.stderr)
            if mount:
                print("--- daemon log ---\n" + mount.log()[-4000:], file=sys.stderr)
            return 1
        print(f"fsx ok: seed={seed} ops={a.ops} in {f.elapsed:.1f}s "
              f"{dict(f.counts)}")
        return 0
    finally:
        if mount is not None and mount.proc is not None:
            try:
                mount.unmount(timeout=30)
            except Exception:
                mount.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def block_of(options):
    """Block size implied by compress=/block= options (bias only)."""
    units = {"K": 1024, "M": 1 << 20}
    bs = 128 << 10
    for o in options:
        v = None
        if o.startswith("compress=") and "/" in o:
            v = o.split("/", 1)[1]
        elif o.startswith("block="):
            v = o.split("=", 1)[1]
        if v:
            try:
                if v[-1:].upper() in units:
                    bs = int(v[:-1]) * units[v[-1].upper()]
                elif int(v) <= 20:
                    bs = 1 << int(v)
                else:
                    bs = int(v)
            except ValueError:
                pass
    return bs


if __name__ == "__main__":
    sys.exit(main())
