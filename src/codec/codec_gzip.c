/* Codec "gzip": zlib-format deflate (RFC 1950: header + adler32 trailer, as
 * kdb+ algorithm 2), levels 0..9. One deflate and one inflate stream per
 * thread, reset (not re-initialised) for every block. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "codec_impl.h"

typedef struct gzip_ctx {
    z_stream def;
    z_stream inf;
    int def_ready;   /* deflateInit2 done */
    int def_level;   /* level the deflate stream is set to */
    int inf_ready;   /* inflateInit done */
} gzip_ctx;

static void gzip_tls_free(void *p)
{
    gzip_ctx *c = p;
    if (c->def_ready)
        deflateEnd(&c->def);
    if (c->inf_ready)
        inflateEnd(&c->inf);
    free(c);
}

static gzip_ctx *gzip_get(void **slot)
{
    if (!slot)
        return NULL;
    if (!*slot)
        *slot = calloc(1, sizeof(gzip_ctx));
    return *slot;
}

static size_t gzip_bound(size_t n)
{
    if (n > UINT_MAX)
        return 0;
    return (size_t)compressBound((uLong)n);
}

static ssize_t gzip_compress(void **slot, int level, const void *src, size_t n, void *dst,
                             size_t cap)
{
    if (n > UINT_MAX)
        return -EINVAL;
    gzip_ctx *c = gzip_get(slot);
    if (!c)
        return -ENOMEM;
    z_stream *s = &c->def;
    if (!c->def_ready) {
        memset(s, 0, sizeof *s);
        if (deflateInit2(s, level, Z_DEFLATED, 15, 8, Z_DEFAULT_STRATEGY) !=
            Z_OK)
            return -ENOMEM;
        c->def_ready = 1;
        c->def_level = level;
    } else if (deflateReset(s) != Z_OK) {
        return -EIO;
    }
    if (c->def_level != level) {
        /* Nothing has been fed since the reset, so this only switches the
         * parameters; it produces no output. */
        if (deflateParams(s, level, Z_DEFAULT_STRATEGY) != Z_OK)
            return -EIO;
        c->def_level = level;
    }
    s->next_in = (Bytef *)(uintptr_t)src;
    s->avail_in = (uInt)n;
    s->next_out = dst;
    s->avail_out = cap > UINT_MAX ? UINT_MAX : (uInt)cap;
    int r = deflate(s, Z_FINISH);
    if (r == Z_STREAM_END)
        return (ssize_t)s->total_out;
    if (r == Z_OK || r == Z_BUF_ERROR)
        return -ENOSPC; /* output space ran out before the end */
    return r == Z_MEM_ERROR ? -ENOMEM : -EIO;
}

static ssize_t gzip_decompress(void **slot, const void *src, size_t n, void *dst,
                               size_t expected)
{
    if (n > UINT_MAX || expected > UINT_MAX)
        return -EBADMSG;
    gzip_ctx *c = gzip_get(slot);
    if (!c)
        return -ENOMEM;
    z_stream *s = &c->inf;
    if (!c->inf_ready) {
        memset(s, 0, sizeof *s);
        if (inflateInit(s) != Z_OK)
            return -ENOMEM;
        c->inf_ready = 1;
    } else if (inflateReset(s) != Z_OK) {
        return -EIO;
    }
    s->next_in = (Bytef *)(uintptr_t)src;
    s->avail_in = (uInt)n;
    s->next_out = dst;
    s->avail_out = (uInt)expected;
    int r = inflate(s, Z_FINISH);
    if (r == Z_MEM_ERROR)
        return -ENOMEM;
    /* Complete stream, exactly `expected` bytes, no trailing input. */
    if (r != Z_STREAM_END || s->total_out != expected || s->avail_in != 0)
        return -EBADMSG;
    return (ssize_t)expected;
}

const sqz_codec_ops sqz_gzip_ops = {
    .bound = gzip_bound,
    .compress = gzip_compress,
    .decompress = gzip_decompress,
    .tls_free = gzip_tls_free,
};
