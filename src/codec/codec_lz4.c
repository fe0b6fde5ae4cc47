/* Codecs "lz4" (fast mode, squeezefs id 6, no levels) and "lz4hc" (kdb+
 * algorithm 4, levels 1..12). Raw LZ4 blocks; the per-thread context holds
 * one state for each mode, allocated on first use. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <lz4.h>
#include <lz4hc.h>

#include "codec_impl.h"

typedef struct lz4_ctx {
    void *fast;  /* LZ4_sizeofState() bytes */
    void *hc;    /* LZ4_sizeofStateHC() bytes */
} lz4_ctx;

void sqz_lz4_tls_free(void *p)
{
    lz4_ctx *c = p;
    free(c->fast);
    free(c->hc);
    free(c);
}

static lz4_ctx *lz4_get(void)
{
    void **slot = sqz_codec_tls(SQZ_TLS_LZ4);
    if (!slot)
        return NULL;
    if (!*slot)
        *slot = calloc(1, sizeof(lz4_ctx));
    return *slot;
}

static size_t lz4_bound(size_t n)
{
    if (n > (size_t)LZ4_MAX_INPUT_SIZE)
        return 0;
    return (size_t)LZ4_compressBound((int)n);
}

static int clamp_int(size_t v)
{
    return v > (size_t)INT32_MAX ? INT32_MAX : (int)v;
}

static ssize_t lz4_fast_compress(int level, const void *src, size_t n,
                                 void *dst, size_t cap)
{
    (void)level;
    if (n > (size_t)LZ4_MAX_INPUT_SIZE)
        return -EINVAL;
    lz4_ctx *c = lz4_get();
    if (!c)
        return -ENOMEM;
    if (!c->fast && !(c->fast = malloc((size_t)LZ4_sizeofState())))
        return -ENOMEM;
    int r = LZ4_compress_fast_extState(c->fast, src, dst, (int)n,
                                       clamp_int(cap), 1);
    return r > 0 ? (ssize_t)r : -ENOSPC;
}

static ssize_t lz4hc_compress(int level, const void *src, size_t n, void *dst,
                              size_t cap)
{
    if (n > (size_t)LZ4_MAX_INPUT_SIZE)
        return -EINVAL;
    lz4_ctx *c = lz4_get();
    if (!c)
        return -ENOMEM;
    if (!c->hc && !(c->hc = malloc((size_t)LZ4_sizeofStateHC())))
        return -ENOMEM;
    int r = LZ4_compress_HC_extStateHC(c->hc, src, dst, (int)n,
                                       clamp_int(cap), level);
    return r > 0 ? (ssize_t)r : -ENOSPC;
}

static ssize_t lz4_decompress(const void *src, size_t n, void *dst,
                              size_t expected)
{
    if (n > (size_t)INT32_MAX || expected > (size_t)INT32_MAX)
        return -EBADMSG;
    int r = LZ4_decompress_safe(src, dst, (int)n, (int)expected);
    if (r < 0 || (size_t)r != expected)
        return -EBADMSG;
    return (ssize_t)expected;
}

const sqz_codec_vt sqz_codec_lz4 = {
    .alg = SQZ_ALG_LZ4,
    .name = "lz4",
    .kdb = -1,
    .level_min = 0,
    .level_max = 0,
    .level_default = 0,
    .bound = lz4_bound,
    .compress = lz4_fast_compress,
    .decompress = lz4_decompress,
};

const sqz_codec_vt sqz_codec_lz4hc = {
    .alg = SQZ_ALG_LZ4HC,
    .name = "lz4hc",
    .kdb = 4,
    .level_min = 1,
    .level_max = 12,
    .level_default = 9,
    .bound = lz4_bound,
    .compress = lz4hc_compress,
    .decompress = lz4_decompress,
};
