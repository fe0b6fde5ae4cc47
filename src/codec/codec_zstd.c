/* Codec "zstd" (kdb+ algorithm 5), levels -7..22 (negative = fast modes).
 * One ZSTD_CCtx and one ZSTD_DCtx per thread. Frames carry their content
 * size, which must equal the expected size before anything is decoded.
 *
 * zstd needs a few bytes of working slack per block beyond the final frame
 * size, so with cap < bound it would report "too small" for output that
 * fits exactly. In that case the frame is built in a per-thread scratch
 * buffer of cap + SLACK bytes (still aborting early on incompressible data)
 * and copied out if it fits in cap. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>
#include <zstd_errors.h>

#include "codec_impl.h"

typedef struct zstd_ctx {
    ZSTD_CCtx *c;
    ZSTD_DCtx *d;
    unsigned char *scratch;
    size_t scratch_cap;
} zstd_ctx;

/* Working slack: generous for the per-block needs (about 8-24 bytes per
 * 128 KiB block measured). */
static size_t zstd_slack(size_t n)
{
    return 64 + (n >> 10);
}

static void zstd_tls_free(void *p)
{
    zstd_ctx *z = p;
    ZSTD_freeCCtx(z->c);
    ZSTD_freeDCtx(z->d);
    free(z->scratch);
    free(z);
}

static zstd_ctx *zstd_get(void **slot)
{
    if (!slot)
        return NULL;
    if (!*slot)
        *slot = calloc(1, sizeof(zstd_ctx));
    return *slot;
}

static size_t zstd_bound(size_t n)
{
    size_t b = ZSTD_compressBound(n);
    return ZSTD_isError(b) ? 0 : b;
}

static ssize_t zstd_compress(void **slot, int level, const void *src, size_t n, void *dst,
                             size_t cap)
{
    zstd_ctx *z = zstd_get(slot);
    if (!z)
        return -ENOMEM;
    if (!z->c && !(z->c = ZSTD_createCCtx()))
        return -ENOMEM;
    size_t bound = ZSTD_compressBound(n);
    if (ZSTD_isError(bound))
        return -EINVAL;
    size_t r;
    if (cap >= bound) {
        r = ZSTD_compressCCtx(z->c, dst, cap, src, n, level);
    } else {
        size_t tcap = cap + zstd_slack(n);
        if (tcap > bound)
            tcap = bound;
        if (z->scratch_cap < tcap) {
            unsigned char *b = realloc(z->scratch, tcap);
            if (!b)
                return -ENOMEM;
            z->scratch = b;
            z->scratch_cap = tcap;
        }
        r = ZSTD_compressCCtx(z->c, z->scratch, tcap, src, n, level);
        if (!ZSTD_isError(r)) {
            if (r > cap)
                return -ENOSPC;
            memcpy(dst, z->scratch, r);
        }
    }
    if (!ZSTD_isError(r))
        return (ssize_t)r;
    switch (ZSTD_getErrorCode(r)) {
    case ZSTD_error_dstSize_tooSmall: return -ENOSPC;
    case ZSTD_error_memory_allocation: return -ENOMEM;
    case ZSTD_error_srcSize_wrong: return -EINVAL;
    default: return -EIO;
    }
}

static ssize_t zstd_decompress(void **slot, const void *src, size_t n, void *dst,
                               size_t expected)
{
    unsigned long long fcs = ZSTD_getFrameContentSize(src, n);
    if (fcs == ZSTD_CONTENTSIZE_UNKNOWN || fcs == ZSTD_CONTENTSIZE_ERROR ||
        fcs != (unsigned long long)expected)
        return -EBADMSG;
    /* Exactly one frame, nothing after it. */
    size_t fsize = ZSTD_findFrameCompressedSize(src, n);
    if (ZSTD_isError(fsize) || fsize != n)
        return -EBADMSG;
    zstd_ctx *z = zstd_get(slot);
    if (!z)
        return -ENOMEM;
    if (!z->d && !(z->d = ZSTD_createDCtx()))
        return -ENOMEM;
    size_t r = ZSTD_decompressDCtx(z->d, dst, expected, src, n);
    if (ZSTD_isError(r)) {
        if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation)
            return -ENOMEM;
        return -EBADMSG;
    }
    if (r != expected)
        return -EBADMSG;
    return (ssize_t)expected;
}

const sqz_codec_ops sqz_zstd_ops = {
    .bound = zstd_bound,
    .compress = zstd_compress,
    .decompress = zstd_decompress,
    .tls_free = zstd_tls_free,
};
