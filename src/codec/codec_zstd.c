/* Codec "zstd" (kdb+ algorithm 5), levels -7..22 (negative = fast modes).
 * One ZSTD_CCtx and one ZSTD_DCtx per thread. Frames carry their content
 * size, which must equal the expected size before anything is decoded.
 *
 * zstd needs a few bytes of working slack per block beyond the final frame
 * size, so with cap < bound it would report "too small" for output that
 * fits exactly. In that case the frame is built in a per-thread scratch
 * buffer of cap + SLACK bytes (still aborting early on incompressible data)
 * and copied out if it fits in cap.
 *
 * A block that ends in at least ZERO_TAIL_MIN zero bytes (the last block of
 * most files: the engine compresses whole blocks, zero-filled past the end
 * of the file) is compressed up to its last non-zero byte, and its zeros
 * follow as RLE blocks of the same frame (RFC 8878 Block_Type 1: one byte
 * repeated Block_Size times). It is still one frame with the content size
 * of the whole block, read by any zstd decoder; it costs a third less time
 * for a 16 KiB file in a 128 KiB block than letting zstd find the zeros. */
#include <errno.h>
#include <stdint.h>
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

static ssize_t zstd_err(size_t r)
{
    switch (ZSTD_getErrorCode(r)) {
    case ZSTD_error_dstSize_tooSmall: return -ENOSPC;
    case ZSTD_error_memory_allocation: return -ENOMEM;
    case ZSTD_error_srcSize_wrong: return -EINVAL;
    default: return -EIO;
    }
}

#define ZERO_TAIL_MIN 4096

/* The number of zero bytes at the end of p[0..n). */
static size_t zero_tail(const unsigned char *p, size_t n)
{
    size_t i = n;
    while (i >= 64) {
        uint64_t w[8];
        memcpy(w, p + i - 64, sizeof w);
        if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0)
            break;
        i -= 64;
    }
    while (i > 0 && p[i - 1] == 0)
        i--;
    return n - i;
}

/* The frame of src[0..n) whose bytes from `head` on are zeros: src[0..head)
 * compressed with the content size n pledged, then RLE blocks of at most
 * ZSTD_BLOCKSIZE_MAX zeros (the frame's window covers min(n, 128 KiB) at
 * least, so every such block fits its Block_Maximum_Size). */
static size_t zero_tail_frame(ZSTD_CCtx *c, int level, const void *src,
                              size_t n, size_t head, void *dst, size_t cap)
{
    size_t nrle = (n - head + ZSTD_BLOCKSIZE_MAX - 1) / ZSTD_BLOCKSIZE_MAX;
    if (cap < 4 * nrle)
        return (size_t)-ZSTD_error_dstSize_tooSmall;
    ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
    size_t r = ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setPledgedSrcSize(c, n);
    ZSTD_outBuffer out = {dst, cap - 4 * nrle, 0};
    ZSTD_inBuffer in = {src, head, 0};
    while (!ZSTD_isError(r)) {
        r = ZSTD_compressStream2(c, &out, &in, ZSTD_e_flush);
        if (r == 0)
            break;
        if (!ZSTD_isError(r) && out.pos == out.size)
            r = (size_t)-ZSTD_error_dstSize_tooSmall;
    }
    ZSTD_CCtx_reset(c, ZSTD_reset_session_only);
    if (ZSTD_isError(r))
        return r;
    unsigned char *o = (unsigned char *)dst + out.pos;
    for (size_t left = n - head; left > 0;) {
        size_t b = left < ZSTD_BLOCKSIZE_MAX ? left : ZSTD_BLOCKSIZE_MAX;
        left -= b;
        /* Last_Block (bit 0), Block_Type 1 = RLE (bits 1-2), Block_Size
         * (bits 3-23), little-endian; then the byte repeated */
        uint32_t h = (left == 0 ? 1u : 0u) | (1u << 1) | ((uint32_t)b << 3);
        o[0] = (unsigned char)h;
        o[1] = (unsigned char)(h >> 8);
        o[2] = (unsigned char)(h >> 16);
        o[3] = 0;
        o += 4;
    }
    return (size_t)(o - (unsigned char *)dst);
}

static size_t zstd_frame(ZSTD_CCtx *c, int level, const void *src, size_t n,
                         size_t head, void *dst, size_t cap)
{
    if (head < n)
        return zero_tail_frame(c, level, src, n, head, dst, cap);
    return ZSTD_compressCCtx(c, dst, cap, src, n, level);
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
    size_t head = n, tail = zero_tail(src, n);
    if (tail >= ZERO_TAIL_MIN && tail < n)
        head = n - tail;
    size_t r;
    if (cap >= bound) {
        r = zstd_frame(z->c, level, src, n, head, dst, cap);
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
        r = zstd_frame(z->c, level, src, n, head, z->scratch, tcap);
        if (!ZSTD_isError(r)) {
            if (r > cap)
                return -ENOSPC;
            memcpy(dst, z->scratch, r);
        }
    }
    return ZSTD_isError(r) ? zstd_err(r) : (ssize_t)r;
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

/* zstd's fastest mode (ZSTD_minCLevel(): the largest acceleration, mostly
 * raw blocks), below the levels a policy may name. */
static ssize_t zstd_draft(void **slot, const void *src, size_t n, void *dst,
                          size_t cap)
{
    return zstd_compress(slot, ZSTD_minCLevel(), src, n, dst, cap);
}

const sqz_codec_ops sqz_zstd_ops = {
    .bound = zstd_bound,
    .compress = zstd_compress,
    .decompress = zstd_decompress,
    .tls_free = zstd_tls_free,
    .draft = zstd_draft,
};
