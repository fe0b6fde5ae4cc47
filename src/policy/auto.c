/* auto: choose an algorithm and level by trial compression of a sample.
 *
 * Deterministic (sizes, not clocks, bound the work): at most 128 KiB of the
 * sample is compressed with zstd:1/zstd:3/lz4 and at most 64 KiB with
 * zstd:9, block by block at the file's block size, so a decision costs a
 * few milliseconds. Higher levels are never tried (zstd:19 can take
 * 100+ ms on 32 KiB of long runs); their benefit is inferred from the gain
 * of 9 over 3.
 *   - saving of zstd:1 below 3%  -> none (incompressible)
 *   - speed:    lz4 if its output is at most 30% larger than zstd:1's or
 *               costs at most 5% of the raw size more; else zstd:1
 *   - balanced: zstd:9 if 9 gains >= 8% over 3; else zstd:1 if 3 gains
 *               < 2% over 1; else zstd:3
 *   - ratio:    zstd:19 if 9 gains >= 3% over 3 (deeper search pays off
 *               on this data); else zstd:9
 * Gains of 9 over 3 below 0.5% of the raw size never count.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "squeezefs/policy.h"

#define TRIAL_CHEAP (128u << 10)
#define TRIAL_MID (64u << 10)

typedef struct trial {
    const unsigned char *data;
    size_t len;      /* bytes of sample available */
    size_t bs;       /* block size */
    unsigned char *buf;
    size_t bufcap;
} trial;

/* Total compressed size of the first `len` bytes (block by block), or
 * negative errno. Incompressible blocks count as stored. */
static long long trial_size(trial *t, sqz_alg alg, int level, size_t len)
{
    if (len > t->len)
        len = t->len;
    long long total = 0;
    for (size_t off = 0; off < len; off += t->bs) {
        size_t n = len - off < t->bs ? len - off : t->bs;
        ssize_t c = sqz_compress(alg, level, t->data + off, n, t->buf, n);
        if (c == -ENOSPC)
            c = (ssize_t)n;
        else if (c < 0)
            return c;
        total += c;
    }
    return total;
}

/* a <= b * pct / 100 */
static int within(long long a, long long b, int pct)
{
    return a * 100 <= b * pct;
}

int sqz_auto_choose(int mode, const void *sample, size_t len, int log2bs,
                    sqz_alg *alg, int *level)
{
    if (mode < SQZ_AUTO_BALANCED || mode > SQZ_AUTO_SPEED || !alg || !level ||
        (!sample && len) || (log2bs != 0 && (log2bs < 12 || log2bs > 20)))
        return -EINVAL;
    if (len == 0) { /* nothing to learn from: the mode's usual choice */
        *alg = mode == SQZ_AUTO_SPEED ? SQZ_ALG_LZ4 : SQZ_ALG_ZSTD;
        *level = mode == SQZ_AUTO_RATIO ? 9 : mode == SQZ_AUTO_SPEED ? 0 : 3;
        return 0;
    }
    trial t = {.data = sample,
               .len = len < TRIAL_CHEAP ? len : TRIAL_CHEAP,
               .bs = (size_t)1 << (log2bs ? log2bs : 17)};
    if (t.bs > t.len)
        t.bs = t.len;
    t.bufcap = t.bs;
    t.buf = malloc(t.bufcap);
    if (!t.buf)
        return -ENOMEM;

    int rc = 0;
    sqz_alg a = SQZ_ALG_ZSTD;
    int l = 3;
    long long raw = (long long)t.len;
    long long z1 = trial_size(&t, SQZ_ALG_ZSTD, 1, t.len);
    if (z1 < 0) {
        rc = (int)z1;
        goto out;
    }
    if (!within(z1, raw, 97)) {
        a = SQZ_ALG_NONE;
        l = 0;
        goto out;
    }
    if (mode == SQZ_AUTO_SPEED) {
        long long l4 = trial_size(&t, SQZ_ALG_LZ4, 0, t.len);
        if (l4 < 0) {
            rc = (int)l4;
            goto out;
        }
        if (within(l4, z1, 130) || (l4 - z1) * 100 <= raw * 5) {
            a = SQZ_ALG_LZ4;
            l = 0;
        } else {
            l = 1;
        }
        goto out;
    }
    long long z3 = trial_size(&t, SQZ_ALG_ZSTD, 3, t.len);
    long long z3m = trial_size(&t, SQZ_ALG_ZSTD, 3, TRIAL_MID);
    long long z9m = trial_size(&t, SQZ_ALG_ZSTD, 9, TRIAL_MID);
    if (z3 < 0 || z3m < 0 || z9m < 0) {
        rc = (int)(z3 < 0 ? z3 : z3m < 0 ? z3m : z9m);
        goto out;
    }
    /* gains below 0.5% of the raw size are not worth slower levels */
    long long mid = (long long)(t.len < TRIAL_MID ? t.len : TRIAL_MID);
    int worth = (z3m - z9m) * 200 >= mid;
    if (mode == SQZ_AUTO_RATIO)
        l = worth && within(z9m, z3m, 97) ? 19 : 9;
    else if (worth && within(z9m, z3m, 92))
        l = 9;
    else if (!within(z3, z1, 98))
        l = 1;
    else
        l = 3;
out:
    free(t.buf);
    if (rc == 0) {
        *alg = a;
        *level = l;
    }
    return rc;
}
