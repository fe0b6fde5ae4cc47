/* Codec "snappy" (kdb+ algorithm 3), no levels. snappy_compress needs an
 * output buffer of the full worst-case size, so when the caller's cap is
 * smaller the block is compressed into a per-thread scratch buffer and
 * copied out if it fits. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <snappy-c.h>

#include "codec_impl.h"

typedef struct snappy_ctx {
    char *buf;
    size_t cap;
} snappy_ctx;

static void snappy_tls_free(void *p)
{
    snappy_ctx *c = p;
    free(c->buf);
    free(c);
}

/* Per-thread scratch buffer of at least `need` bytes, or NULL. */
static char *snappy_scratch(void **slot, size_t need)
{
    if (!slot)
        return NULL;
    snappy_ctx *c = *slot;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return NULL;
        *slot = c;
    }
    if (c->cap < need) {
        char *b = realloc(c->buf, need);
        if (!b)
            return NULL;
        c->buf = b;
        c->cap = need;
    }
    return c->buf;
}

static size_t snappy_bound(size_t n)
{
    size_t b = snappy_max_compressed_length(n);
    return b < n ? 0 : b; /* wrapped around: too large */
}

static ssize_t snappy_codec_compress(void **slot, int level, const void *src, size_t n,
                                     void *dst, size_t cap)
{
    (void)level;
    size_t bound = snappy_bound(n);
    if (bound == 0)
        return -EINVAL;
    if (cap >= bound) {
        size_t len = cap;
        if (snappy_compress(src, n, dst, &len) != SNAPPY_OK)
            return -EIO;
        return (ssize_t)len;
    }
    char *tmp = snappy_scratch(slot, bound);
    if (!tmp)
        return -ENOMEM;
    size_t len = bound;
    if (snappy_compress(src, n, tmp, &len) != SNAPPY_OK)
        return -EIO;
    if (len > cap)
        return -ENOSPC;
    memcpy(dst, tmp, len);
    return (ssize_t)len;
}

static ssize_t snappy_codec_decompress(void **slot, const void *src, size_t n, void *dst,
                                       size_t expected)
{
    (void)slot;
    size_t len;
    if (snappy_uncompressed_length(src, n, &len) != SNAPPY_OK ||
        len != expected)
        return -EBADMSG;
    len = expected;
    if (snappy_uncompress(src, n, dst, &len) != SNAPPY_OK || len != expected)
        return -EBADMSG;
    return (ssize_t)expected;
}

const sqz_codec_ops sqz_snappy_ops = {
    .bound = snappy_bound,
    .compress = snappy_codec_compress,
    .decompress = snappy_codec_decompress,
    .tls_free = snappy_tls_free,
};
