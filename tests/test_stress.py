"""Multi-process stress (fsstress-like): several processes create, write,
append, truncate, rename, link, unlink, mkdir and rmdir in shared
directories at once. Races give the expected errnos (ENOENT, EEXIST, ...);
anything else (EIO above all) fails. Afterwards every file reads end to
end, the mounted tree equals what `squeezefs cat` reads offline from
BACKING, the daemon exits cleanly and `squeezefs verify BACKING` is clean.
Seeds are printed; SQZ_STRESS_SEED=N reruns one."""
import errno
import os
import subprocess
import sys

import pytest

from mountlib import run_cli, squeezefs_bin

WORKER = r'''
import errno, os, random, sys
root, seed, nops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
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
counts = {}
for i in range(nops):
    op = rnd.choice(["write", "write", "append", "append", "truncate", "rename",
                     "link", "unlink", "mkdir", "rmdir", "read", "read", "fsync"])
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
print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
'''


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
    for d in ("d0", "d1", "d2", "d0/sub", "d2/sub"):
        os.makedirs(m.path(d), exist_ok=True)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, m.mnt, str(base + i), str(nops)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(nproc)]
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"worker seed {base + i} failed:\n{err}\n{m.log()[-3000:]}"
        print(f"worker seed {base + i}: {out.strip()}")
    assert m.proc.poll() is None, "daemon died:\n" + m.log()[-3000:]
    mounted = tree_contents(m.mnt)  # every file reads end to end (EIO raises)
    assert mounted, "the stress run left no files at all"
    assert m.unmount() == 0, m.log()[-3000:]
    v = run_cli("verify", m.backing, check=False)
    assert v.returncode == 0, f"verify after stress (seed {base}):\n{v.stdout}{v.stderr}"
    # offline view of BACKING == what the mount showed
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
