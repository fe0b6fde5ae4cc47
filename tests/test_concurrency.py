"""Concurrent access to a squeezefs mount: parallel writers, readers racing
an appender, O_APPEND from two processes, write vs truncate, rename/create
races, shared-block writers. Each test ends by checking the daemon is alive
and (where useful) by an offline `squeezefs verify` of BACKING."""
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

import pytest

from fsutil import rd, wr
from mountlib import run_cli

KiB = 1024
MiB = 1024 * 1024


def run_threads(targets):
    """Run callables in threads; re-raise the first exception."""
    errors = []

    def wrap(fn):
        def w():
            try:
                fn()
            except BaseException as e:  # noqa: B902
                errors.append(e)
        return w
    ts = [threading.Thread(target=wrap(fn)) for fn in targets]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
        assert not t.is_alive(), "a worker thread hung (daemon deadlock?)"
    if errors:
        raise errors[0]


def alive(m):
    assert m.proc.poll() is None, f"daemon died (status {m.proc.returncode}):\n{m.log()[-3000:]}"


def verify_offline(m):
    rc = m.unmount()
    assert rc == 0, f"daemon exit status {rc}:\n{m.log()[-3000:]}"
    v = run_cli("verify", m.backing, check=False)
    assert v.returncode == 0, f"squeezefs verify: {v.stdout}\n{v.stderr}"


# ---------------------------------------------------------------- writers

@pytest.mark.parametrize("opts", [["compress=zstd:1/128K"], ["compress=lz4/4K", "threads=2"]])
def test_parallel_writers_separate_files(mount_factory, opts):
    m = mount_factory(options=opts)
    size = 4 * MiB
    expected = {}

    def writer(t):
        rnd = random.Random(t)
        buf = bytearray(size)
        fd = os.open(m.path(f"w{t}"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            off = 0
            while off < size:  # sequential fill, random chunk sizes
                n = min(rnd.choice((1000, 4096, 65536, 200000)), size - off)
                chunk = (b"writer %d offset %d " % (t, off) * (n // 10 + 1))[:n]
                os.write(fd, chunk)
                buf[off:off + n] = chunk
                off += n
            for _ in range(300):  # random overwrites
                o = rnd.randrange(size)
                chunk = rnd.randbytes(rnd.choice((1, 100, 5000, 70000)))[:size - o]
                os.pwrite(fd, chunk, o)
                buf[o:o + len(chunk)] = chunk
            assert os.pread(fd, size, 0) == bytes(buf), f"writer {t}: readback differs"
        finally:
            os.close(fd)
        expected[t] = bytes(buf)

    run_threads([lambda t=t: writer(t) for t in range(4)])
    alive(m)
    for t in range(4):
        assert rd(m.path(f"w{t}")) == expected[t], f"file w{t}"
    m.unmount()
    m.start()
    for t in range(4):
        assert rd(m.path(f"w{t}")) == expected[t], f"file w{t} after remount"
    verify_offline(m)


def test_parallel_writer_processes(mount_factory):
    """4 processes (true parallelism, no GIL) writing separate files."""
    m = mount_factory()
    code = r"""
import os, sys, random
path, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
data = b"".join(b"proc %d line %d %s\n" % (seed, i, b"x" * (i % 50)) for i in range(60000))
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
off = 0
while off < len(data):
    n = r.choice((512, 4096, 33333, 131072))
    os.write(fd, data[off:off + n]); off += n
os.fsync(fd); os.close(fd)
"""
    ps = [subprocess.Popen([sys.executable, "-c", code, m.path(f"p{i}"), str(i)])
          for i in range(4)]
    for p in ps:
        assert p.wait(300) == 0
    alive(m)
    for i in range(4):
        exp = b"".join(b"proc %d line %d %s\n" % (i, j, b"x" * (j % 50)) for j in range(60000))
        assert rd(m.path(f"p{i}")) == exp


# ---------------------------------------------------------------- readers vs appender

REC = 64


def record(i):
    head = b"%010d:" % i
    body = bytes([65 + i % 26]) * (REC - len(head) - 1)
    return head + body + b"\n"


def expected_range(off, n):
    first, last = off // REC, (off + n - 1) // REC
    blob = b"".join(record(i) for i in range(first, last + 1))
    s = off - first * REC
    return blob[s:s + n]


@pytest.mark.parametrize("opts", [["compress=zstd:1/4K"], ["compress=gzip:1/128K"]])
def test_readers_during_append(mount_factory, opts):
    m = mount_factory(options=opts)
    p = m.path("log")
    wr(p, b"")
    total = 40000  # records -> 2.5 MiB
    done = threading.Event()
    seen = []

    def appender():
        rnd = random.Random(1)
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        try:
            i = 0
            while i < total:
                k = min(rnd.randint(1, 60), total - i)
                os.write(fd, b"".join(record(j) for j in range(i, i + k)))
                i += k
                if rnd.random() < 0.01:
                    os.fsync(fd)
        finally:
            os.close(fd)
            done.set()

    def reader(t):
        rnd = random.Random(100 + t)
        fd = os.open(p, os.O_RDONLY)
        reads = 0
        try:
            while not done.is_set() or reads < 50:
                size = os.fstat(fd).st_size
                if size == 0:
                    continue
                off = rnd.randrange(size)
                n = min(rnd.choice((1, 63, 4096, 65536, 300000)), size - off)
                got = os.pread(fd, n, off)
                exp = expected_range(off, len(got))
                if got != exp:
                    bad = next(i for i in range(len(got)) if got[i] != exp[i])
                    raise AssertionError(
                        f"reader {t}: wrong bytes at {off + bad} (read {off}+{n}, "
                        f"size {size}): {got[bad:bad + 20]!r} vs {exp[bad:bad + 20]!r}")
                reads += 1
        finally:
            os.close(fd)
            seen.append(reads)

    run_threads([appender] + [lambda t=t: reader(t) for t in range(4)])
    alive(m)
    assert os.stat(p).st_size == total * REC
    assert rd(p) == expected_range(0, total * REC)
    verify_offline(m)


# ---------------------------------------------------------------- O_APPEND from 2 processes

APPENDER = r"""
import os, sys
path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
for i in range(n):
    pad = "abcdefghijklmnopqrstuvwxyz"[i % 26] * (10 + (i * 37) % 300)
    line = f"{tag} {i:06d} {pad} end\n".encode()
    assert os.write(fd, line) == len(line)
os.close(fd)
"""


@pytest.mark.parametrize("opts", [[], ["nowriteback"]], ids=["writeback", "nowriteback"])
def test_two_process_o_append(mount_factory, opts):
    m = mount_factory(options=opts)
    p = m.path("shared.log")
    wr(p, b"")
    n = 2000
    ps = [subprocess.Popen([sys.executable, "-c", APPENDER, p, tag, str(n)])
          for tag in ("A", "B")]
    for pr in ps:
        assert pr.wait(300) == 0
    alive(m)
    lines = rd(p).split(b"\n")
    assert lines[-1] == b"", "file does not end with a newline"
    lines = lines[:-1]
    pat = re.compile(rb"^([AB]) (\d{6}) ([a-z])\3* end$")
    nxt = {b"A": 0, b"B": 0}
    for ln in lines:
        mt = pat.match(ln)
        assert mt, f"torn or mixed record: {ln[:120]!r}"
        tag, i = mt.group(1), int(mt.group(2))
        assert i == nxt[tag], f"record {tag} {i} out of order / missing (want {nxt[tag]})"
        exp_pad = "abcdefghijklmnopqrstuvwxyz"[i % 26] * (10 + (i * 37) % 300)
        assert ln == f"{tag.decode()} {i:06d} {exp_pad} end".encode(), f"bad record {ln[:80]!r}"
        nxt[tag] += 1
    assert len(lines) == 2 * n and nxt == {b"A": n, b"B": n}, (len(lines), nxt)


# ---------------------------------------------------------------- writer vs truncater

def test_writer_and_truncater(mount_factory):
    """A writer, a truncater (with fsyncs) and a reader on one file. The
    writer's and the truncater's calls each update an in-memory model of
    the file under one lock (the kernel orders them on the inode anyway);
    the reader races them unlocked, and every 16th of its reads, under the
    lock, must equal the model. The end: the model's bytes, also after a
    remount."""
    m = mount_factory(options=["compress=zstd:1/64K"])
    p = m.path("wt")
    wr(p, b"")
    stop = time.time() + 8
    lock = threading.Lock()
    model = bytearray()
    checked = [0]

    def writer():
        rnd = random.Random(5)
        fd = os.open(p, os.O_RDWR)
        try:
            while time.time() < stop:
                off = rnd.randrange(4 * MiB)
                data = rnd.randbytes(rnd.choice((10, 4096, 100000)))
                with lock:
                    assert os.pwrite(fd, data, off) == len(data)
                    if len(model) < off:
                        model.extend(bytes(off - len(model)))
                    model[off:off + len(data)] = data
        finally:
            os.close(fd)

    def truncater():
        rnd = random.Random(6)
        fd = os.open(p, os.O_RDWR)
        try:
            while time.time() < stop:
                n = rnd.randrange(5 * MiB)
                with lock:
                    os.ftruncate(fd, n)
                    if n < len(model):
                        del model[n:]
                    else:
                        model.extend(bytes(n - len(model)))
                time.sleep(0.001)
                if rnd.random() < 0.05:
                    os.fsync(fd)
        finally:
            os.close(fd)

    def reader():
        rnd = random.Random(7)
        fd = os.open(p, os.O_RDONLY)
        try:
            i = 0
            while time.time() < stop:
                off = rnd.randrange(5 * MiB)
                i += 1
                if i % 16:
                    os.pread(fd, 200000, off)
                    continue
                with lock:
                    got = os.pread(fd, 200000, off)
                    want = bytes(model[off:off + 200000])
                assert got == want, (f"read at {off}: {len(got)} bytes, the model has "
                                     f"{len(want)} there (file {len(model)} bytes)")
                checked[0] += 1
        finally:
            os.close(fd)

    run_threads([writer, truncater, reader])
    alive(m)
    assert checked[0] > 0
    print(f"{checked[0]} reads compared with the model")
    size = os.stat(p).st_size
    assert size == len(model), f"size {size}, the model {len(model)}"
    assert rd(p) == model, "the file differs from the model"
    m.unmount()
    m.start()
    assert os.stat(p).st_size == len(model)
    assert rd(p) == model, "content changed across remount"
    verify_offline(m)


# ---------------------------------------------------------------- shared blocks

def test_writers_interleaved_in_same_blocks(mount_factory):
    """4 threads write interleaved 1000-byte stripes (every block is shared
    by all of them); the final content has every stripe."""
    m = mount_factory(options=["compress=zstd:1/128K"])
    p = m.path("stripes")
    size = 2 * MiB
    wr(p, b"")
    stripe = 1000
    nthreads = 4

    def writer(t):
        fd = os.open(p, os.O_RDWR)
        try:
            order = list(range(t, size // stripe, nthreads))
            random.Random(t).shuffle(order)
            for k in order:
                os.pwrite(fd, bytes([65 + t]) * stripe, k * stripe)
        finally:
            os.close(fd)

    run_threads([lambda t=t: writer(t) for t in range(nthreads)])
    alive(m)
    exp = b"".join(bytes([65 + k % nthreads]) * stripe for k in range(size // stripe))
    got = rd(p)
    assert len(got) == len(exp)
    if got != exp:
        bad = next(i for i in range(len(exp)) if got[i] != exp[i])
        pytest.fail(f"stripe lost at offset {bad}: {got[bad:bad + 8]!r} vs {exp[bad:bad + 8]!r}")
    m.unmount()
    m.start()
    assert rd(p) == exp


def test_many_readers_one_file(mount_factory):
    m = mount_factory(options=["compress=gzip:6/16K", "cache=1M"])
    data = b"".join(b"%08d some text to compress\n" % i for i in range(150000))
    wr(m.path("f"), data)
    m.unmount()
    m.start()  # cold caches

    def reader(t):
        rnd = random.Random(t)
        fd = os.open(m.path("f"), os.O_RDONLY)
        try:
            for _ in range(300):
                off = rnd.randrange(len(data))
                n = rnd.choice((100, 5000, 70000))
                assert os.pread(fd, n, off) == data[off:off + n], f"reader {t} at {off}"
        finally:
            os.close(fd)

    run_threads([lambda t=t: reader(t) for t in range(6)])
    alive(m)


# ---------------------------------------------------------------- rename / create races

def test_concurrent_rename_create(mount_factory):
    m = mount_factory()
    d = m.path("dir")
    os.mkdir(d)
    n = 200
    payload = {}

    def creator_renamer(t):
        rnd = random.Random(t)
        for i in range(n):
            body = (b"thread %d file %d " % (t, i)) * rnd.randint(1, 500)
            payload[(t, i)] = body
            a = os.path.join(d, f"c{t}-{i}")
            wr(a, body)
            os.rename(a, os.path.join(d, f"r{t}-{i}"))
            if i % 10 == 0:
                # atomic replace of a shared name
                tmp = os.path.join(d, f"tmp{t}")
                wr(tmp, b"shared from %d %d\n" % (t, i) * 100)
                os.rename(tmp, os.path.join(d, "shared"))

    def lister():
        for _ in range(100):
            names = os.listdir(d)
            assert not [x for x in names if x.startswith(".sqz-tmp.")], names
            if "shared" in names:
                try:
                    s = rd(os.path.join(d, "shared"))
                except FileNotFoundError:
                    continue
                lines = s.split(b"\n")[:-1]
                assert len(lines) == 100 and len(set(lines)) == 1, "torn shared file"

    run_threads([lambda t=t: creator_renamer(t) for t in range(4)] + [lister])
    alive(m)
    names = set(os.listdir(d))
    exp = {f"r{t}-{i}" for t in range(4) for i in range(n)} | {"shared"}
    assert names == exp, (sorted(names - exp)[:10], sorted(exp - names)[:10])
    for (t, i), body in payload.items():
        assert rd(os.path.join(d, f"r{t}-{i}")) == body
    s = rd(os.path.join(d, "shared")).split(b"\n")[:-1]
    assert len(s) == 100 and len(set(s)) == 1
    verify_offline(m)


# ---------------------------------------------------------------- renames / recompress under I/O

def test_rename_dirs_while_writing(mount_factory):
    """Files stay the same files while their directories are renamed under
    open fds that keep writing."""
    m = mount_factory()
    os.makedirs(m.path("A", "sub"))
    n = 3
    fds = [os.open(m.path("A", "sub", f"f{i}"), os.O_CREAT | os.O_RDWR, 0o644)
           for i in range(n)]
    stop = threading.Event()
    written = [0] * n

    def writer(i):
        rnd = random.Random(i)
        while not stop.is_set():
            chunk = (b"%d:%08d|" % (i, written[i])) * rnd.randint(1, 400)
            os.write(fds[i], chunk)
            written[i] += len(chunk)

    def renamer():
        names = ["A", "B"]
        for k in range(300):
            os.rename(m.path(names[k % 2]), m.path(names[(k + 1) % 2]))
            os.rename(m.path(names[(k + 1) % 2], "sub"), m.path(names[(k + 1) % 2], "sub2"))
            os.rename(m.path(names[(k + 1) % 2], "sub2"), m.path(names[(k + 1) % 2], "sub"))
        stop.set()

    try:
        run_threads([lambda i=i: writer(i) for i in range(n)] + [renamer])
    finally:
        stop.set()
        for fd in fds:
            os.close(fd)
    alive(m)
    final = "A" if os.path.isdir(m.path("A")) else "B"
    assert sorted(os.listdir(m.path())) == [final]
    for i in range(n):
        p = m.path(final, "sub", f"f{i}")
        assert os.stat(p).st_size == written[i]
    m.unmount()
    m.start()
    for i in range(n):
        assert os.stat(m.path(final, "sub", f"f{i}")).st_size == written[i]
    verify_offline(m)


def test_recompress_while_appending(mount_factory):
    m = mount_factory()
    p = m.path("log")
    wr(p, b"")
    total = 30000
    done = threading.Event()
    ran, during = [], []

    def appender():
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        try:
            i = 0
            while i < total:
                os.write(fd, b"".join(record(j) for j in range(i, i + 50)))
                i += 50
                # the appends outlast two recompresses (they are fast)
                t_end = time.time() + 30
                while i >= total // 2 and len(ran) < 2 and time.time() < t_end:
                    time.sleep(0.001)
        finally:
            os.close(fd)
            done.set()

    specs = [b"gzip:1", b"lz4/4K", b"zstd:3/64K", b"snappy", b"none/16K"]
    backing = os.path.join(m.backing, "log")

    def recompressor():
        k = 0
        while not done.is_set() or k < 3:
            before = os.stat(backing).st_ino
            appending = not done.is_set()
            os.setxattr(p, "user.squeezefs.recompress", specs[k % len(specs)])
            # a recompress renames a new container over the old one
            ran.append(os.stat(backing).st_ino != before)
            during.append(appending)
            k += 1
            time.sleep(0.02)

    run_threads([appender, recompressor])
    alive(m)
    assert ran and all(ran), f"{ran.count(False)} of {len(ran)} recompress requests left " \
        "the backing file in place"
    print(f"{len(ran)} recompresses ran, {sum(during)} of them under the appends")
    assert sum(during) >= 2, "the recompresses did not run under the appends"
    last = specs[(len(ran) - 1) % len(specs)].decode()
    st = json.loads(run_cli("stat", "--json", backing).stdout)
    assert st["algorithm"] == last.split("/")[0].split(":")[0], (last, st)
    assert os.stat(p).st_size == total * REC
    got = rd(p)
    if got != expected_range(0, total * REC):
        exp = expected_range(0, total * REC)
        bad = next(i for i in range(len(exp)) if got[i] != exp[i])
        pytest.fail(f"content differs at {bad} after recompress under appends: "
                    f"{got[bad:bad + 20]!r} vs {exp[bad:bad + 20]!r}")
    verify_offline(m)
