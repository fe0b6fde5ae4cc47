"""Small file helpers the tests share: read and write a whole file, and
deterministic compressible test data."""
import os
import random


def rd(path):
    """The whole content of path (bytes)."""
    with open(path, "rb") as f:
        return f.read()


def wr(path, data, mode="wb", parents=False):
    """Write data to path (mode "wb" or "ab"); parents=True creates the
    missing directories first."""
    if parents:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(data)


def text(n, seed=0):
    """n bytes of compressible, position-dependent text (numbered lines:
    every 4096 lines repeat; seed changes every line)."""
    line = b"".join(b"line %08d of squeezefs test data seed %d\n" % (i, seed)
                    for i in range(4096))
    return (line * (n // len(line) + 1))[:n]


CSV_WORDS = (b"trade", b"quote", b"IBM", b"MSFT", b"101.25", b"100", b"NYSE",
             b"12:00:01.123", b"\n", b",")


def words(n, seed=0, vocab=CSV_WORDS, per_line=12, sep=b",", noise=0.0):
    """n bytes of random lines of per_line words of vocab joined by sep:
    compresses, without repeating like text(). noise: the share of lines
    followed by 64 random bytes."""
    rnd = random.Random(seed)
    out, total = [], 0
    while total < n:
        w = rnd.choices(vocab, k=per_line * 2048)
        for i in range(0, len(w), per_line):
            line = sep.join(w[i:i + per_line]) + b"\n"
            if noise and rnd.random() < noise:
                line += rnd.randbytes(64)
            out.append(line)
            total += len(line)
    return b"".join(out)[:n]
