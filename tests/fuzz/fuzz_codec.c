/* libFuzzer target for the codec layer: every decompressor on hostile input,
 * and every compressor on arbitrary data. (The container fuzzer seldom gets
 * a damaged payload past the block checksums to a decompressor.)
 *
 * Input: byte 0 selects the codec (index into sqz_all_algs, modulo
 * SQZ_ALG_COUNT), bytes 1..3 the expected size (24 bits little-endian,
 * modulo 1 MiB + 1), byte 1 also the level; the rest is the payload.
 *   1. decompress the payload into exactly `expected` bytes: the result must
 *      be `expected` or -EBADMSG (or -ENOMEM);
 *   2. compress the payload as data with cap = bound, decompress it again:
 *      must give the payload back; with one byte less than it needed, the
 *      compressor must fail with -ENOSPC or produce a smaller valid stream.
 * Every buffer is an exact-size heap block, so ASan reports any access
 * outside the sizes the codec was given. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "squeezefs/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static unsigned char *dup_exact(const void *p, size_t n)
{
    unsigned char *b = malloc(n ? n : 1);
    if (b && n)
        memcpy(b, p, n);
    return b;
}

/* Decompresses c[0..cn) (copied into an exact-size buffer) and compares
 * with want[0..wn); aborts on any difference. */
static void must_decode(sqz_alg a, const unsigned char *c, size_t cn,
                        const unsigned char *want, size_t wn)
{
    unsigned char *in = dup_exact(c, cn), *out = malloc(wn ? wn : 1);
    if (!in || !out)
        abort();
    if (sqz_decompress(a, in, cn, out, wn) != (ssize_t)wn ||
        (wn && memcmp(out, want, wn) != 0))
        abort();
    free(in);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 4)
        return 0;
    sqz_alg a = sqz_all_algs[d[0] % SQZ_ALG_COUNT];
    size_t expected = ((size_t)d[1] | (size_t)d[2] << 8 | (size_t)d[3] << 16) %
                      ((1u << 20) + 1);
    const uint8_t *p = d + 4;
    size_t pn = n - 4;

    /* 1. hostile input */
    unsigned char *in = dup_exact(p, pn), *out = malloc(expected ? expected : 1);
    if (!in || !out)
        abort();
    ssize_t r = sqz_decompress(a, in, pn, out, expected);
    if (r != (ssize_t)expected && r != -EBADMSG && r != -ENOMEM)
        abort();
    free(out);

    /* 2. round trip of the payload as data */
    int lo = sqz_level_min(a), hi = sqz_level_max(a);
    int level = lo + d[1] % (hi - lo + 1);
    size_t bound = sqz_compress_bound(a, pn);
    unsigned char *c = malloc(bound ? bound : 1);
    if (!c)
        abort();
    ssize_t cl = sqz_compress(a, level, in, pn, c, bound);
    if (cl < 0 || (size_t)cl > bound)
        abort();
    must_decode(a, c, (size_t)cl, in, pn);
    if (cl > 0) {
        unsigned char *small = malloc((size_t)cl - 1 ? (size_t)cl - 1 : 1);
        if (!small)
            abort();
        ssize_t s = sqz_compress(a, level, in, pn, small, (size_t)cl - 1);
        if (s >= 0 && (s == 0 || s >= cl))
            abort();
        if (s > 0)
            must_decode(a, small, (size_t)s, in, pn);
        else if (s != -ENOSPC)
            abort();
        free(small);
    }
    free(c);
    free(in);
    return 0;
}
