"""Multi-process stress (fsstress-like): several processes create, write,
append, truncate, rename, link, unlink, mkdir and rmdir in shared
directories at once. Races give the expected errnos (ENOENT, EEXIST, ...);
anything else (EIO above all) fails. Each worker also works in a private
directory, checked against an in-memory model as it goes (every errno,
every read) and at the end (names, sizes, bytes, hard links). Afterwards
every file reads end to end, the mounted tree equals what `squeezefs cat`
reads offline from BACKING, the daemon exits cleanly and `squeezefs verify
BACKING` is clean.
Seeds are printed; SQZ_STRESS_SEED=N reruns one."""
import errno
import json
import os
import subprocess
import sys

import pytest

from mountlib import run_cli, squeezefs_bin

WORKER = r'''
import errno, hashlib, json, os, random, sys
root, seed, nops, pdir, model_out = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                     sys.argv[4], sys.argv[5])
rnd = random.Random(seed)
dirs = ["d0", "d1", "d2", "d0/sub", "d2/sub"]
names = [f"f{i}" for i in range(12)]
OK = {errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR,
      errno.ENOTDIR, errno.EINVAL, errno.EBUSY}
def path():
    return os.path.join(root, rnd.choice(dirs), rnd.choice(names))
def data(n):
    line = f"{seed}:{rnd.random():.12f},".encode()
    return (line * (n // len(line) + 1))[:n]
# The worker's private directory pdir: no other process touches it, so
# an in-memory model (name -> inode -> bytes) says what every operation
# there must return and what every read must read, while the shared
# directories race.
pnames = [f"g{i}" for i in range(6)]
links, inodes, nextino = {}, {}, [0]
def ppath(n):
    return os.path.join(root, pdir, n)
def new_inode():
    nextino[0] += 1
    inodes[nextino[0]] = bytearray()
    return nextino[0]
def put(b, off, d):
    if len(b) < off:
        b.extend(bytes(off - len(b)))
    b[off:off + len(d)] = d
def private(i, op):
    a, b = rnd.choice(pnames), rnd.choice(pnames)
    want, result = None, None
    if op == "write":
        d, off = data(rnd.choice([10, 5000, 200000])), rnd.randrange(0, 300000)
        fd = os.open(ppath(a), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, d, off)
        finally:
            os.close(fd)
        if a not in links:
            links[a] = new_inode()
        put(inodes[links[a]], off, d)
        return
    if op == "append":
        d = data(rnd.choice([7, 3000, 70000]))
        fd = os.open(ppath(a), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, d)
        finally:
            os.close(fd)
        if a not in links:
            links[a] = new_inode()
        inodes[links[a]] += d
        return
    try:
        if op == "truncate":
            n = rnd.choice([0, 1, 4095, 4096, 131073, 400000])
            want = None if a in links else errno.ENOENT
            os.truncate(ppath(a), n)
            c = inodes[links[a]]
            del c[n:]
            c.extend(bytes(n - len(c)))
        elif op == "rename":
            want = None if a in links else errno.ENOENT
            os.rename(ppath(a), ppath(b))
            if links.get(b) != links[a]:   # same file: rename does nothing
                links[b] = links.pop(a)
        elif op == "link":
            want = errno.ENOENT if a not in links else errno.EEXIST if b in links else None
            os.link(ppath(a), ppath(b))
            links[b] = links[a]
        elif op == "unlink":
            want = None if a in links else errno.ENOENT
            os.unlink(ppath(a))
            del links[a]
        elif op == "read":
            want = None if a in links else errno.ENOENT
            with open(ppath(a), "rb") as f:
                got = f.read()
            if got != inodes[links[a]]:
                result = f"read {len(got)} bytes, the model has {len(inodes[links[a]])}"
        else:
            want = None if a in links else errno.ENOENT
            fd = os.open(ppath(a), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as e:
        if e.errno != want:
            result = f"{e!r}, the model says {errno.errorcode.get(want, 'success')}"
    else:
        if want is not None:
            result = f"succeeded, the model says {errno.errorcode[want]}"
    if result:
        sys.stderr.write(f"seed {seed} op {i} {op} {pdir}/{a} {b}: {result}\n")
        sys.exit(1)
counts = {}
for i in range(nops):
    op = rnd.choice(["write", "write", "append", "append", "truncate", "rename",
                     "link", "unlink", "mkdir", "rmdir", "read", "read", "fsync"])
    if op not in ("mkdir", "rmdir") and rnd.random() < 0.4:
        counts["private"] = counts.get("private", 0) + 1
        private(i, op)
        continue
    counts[op] = counts.get(op, 0) + 1
    try:
        if op == "write":
            fd = os.open(path(), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, data(rnd.choice([10, 5000, 200000])), rnd.randrange(0, 300000))
            finally:
                os.close(fd)
        elif op == "append":
            fd = os.open(path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, data(rnd.choice([7, 3000, 70000])))
            finally:
                os.close(fd)
        elif op == "truncate":
            os.truncate(path(), rnd.choice([0, 1, 4095, 4096, 131073, 400000]))
        elif op == "rename":
            os.rename(path(), path())
        elif op == "link":
            os.link(path(), path())
        elif op == "unlink":
            os.unlink(path())
        elif op == "mkdir":
            os.mkdir(os.path.join(root, rnd.choice(dirs), "sub"))
        elif op == "rmdir":
            os.rmdir(os.path.join(root, rnd.choice(dirs), "sub"))
        elif op == "read":
            with open(path(), "rb") as f:
                f.read()
        else:
            fd = os.open(path(), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as e:
        if e.errno not in OK:
            sys.stderr.write(f"seed {seed} op {i} {op}: {e!r}\n")
            sys.exit(1)
with open(model_out, "w") as f:
    json.dump({n: [ino, len(inodes[ino]), hashlib.sha256(inodes[ino]).hexdigest()]
               for n, ino in links.items()}, f)
print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
'''


def check_model(mnt, pdir, model, ctx):
    """A worker's private directory against its model: the same names,
    each with the model's size and bytes, hard links sharing an inode."""
    import hashlib
    got = sorted(os.listdir(os.path.join(mnt, pdir)))
    assert got == sorted(model), f"{ctx}: {pdir} holds {got}, the model {sorted(model)}"
    ino_of = {}
    for n, (ino, size, sha) in model.items():
        p = os.path.join(mnt, pdir, n)
        st = os.stat(p)
        assert st.st_size == size, f"{ctx}: {pdir}/{n}: size {st.st_size}, the model {size}"
        with open(p, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == sha, \
                f"{ctx}: {pdir}/{n}: content differs from the model"
        ino_of.setdefault(ino, set()).add(st.st_ino)
    assert all(len(v) == 1 for v in ino_of.values()), f"{ctx}: links split: {ino_of}"
    assert len({next(iter(v)) for v in ino_of.values()}) == len(ino_of), \
        f"{ctx}: separate files share an inode: {ino_of}"


def tree_contents(root):
    out = {}
    for d, dnames, fnames in os.walk(root):
        for n in fnames:
            p = os.path.join(d, n)
            if os.path.islink(p):
                continue
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


@pytest.mark.parametrize("options", [(), ("compress=lz4/4K",)], ids=["default", "lz4-4K"])
def test_multiprocess_stress(mount_factory, tmp_path, options):
    base = int(os.environ.get("SQZ_STRESS_SEED", "1123"))
    nproc, nops = 4, (20000 if os.environ.get("SQZ_LONG") == "1" else 2500)
    m = mount_factory(options=options)
    for d in ["d0", "d1", "d2", "d0/sub", "d2/sub"] + [f"p{i}" for i in range(nproc)]:
        os.makedirs(m.path(d), exist_ok=True)
    models = [tmp_path / f"model{i}.json" for i in range(nproc)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, m.mnt, str(base + i), str(nops),
                               f"p{i}", str(models[i])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(nproc)]
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"worker seed {base + i} failed:\n{err}\n{m.log()[-3000:]}"
        print(f"worker seed {base + i}: {out.strip()}")
    assert m.proc.poll() is None, "daemon died:\n" + m.log()[-3000:]
    mounted = tree_contents(m.mnt)  # every file reads end to end (EIO raises)
    assert mounted, "the stress run left no files at all"
    models = [json.loads(p.read_text()) for p in models]
    for i, model in enumerate(models):
        check_model(m.mnt, f"p{i}", model, f"worker seed {base + i}")
    assert sum(len(md) for md in models) > 0, "no private file survived to compare"
    assert m.unmount() == 0, m.log()[-3000:]
    v = run_cli("verify", m.backing, check=False)
    assert v.returncode == 0, f"verify after stress (seed {base}):\n{v.stdout}{v.stderr}"
    # offline view of BACKING == what the mount showed (and the private
    # directories' files, there as the models say)
    for rel, content in mounted.items():
        got = subprocess.run([squeezefs_bin(), "cat",
                              os.path.join(m.backing, rel)], capture_output=True)
        assert got.returncode == 0, got.stderr
        assert got.stdout == content, f"{rel}: offline content differs (seed {base})"
    # packs of small files (docs/FORMAT.md "Packed files") stay; nothing
    # else hidden may
    hidden = [n for d, _, fs in os.walk(m.backing) for n in fs
              if n.startswith(".sqz-tmp.") and not n.startswith(".sqz-tmp.pack.")]
    assert not hidden, f"temporary files left in BACKING: {hidden}"
