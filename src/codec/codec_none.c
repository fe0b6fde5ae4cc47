/* Codec "none": stored bytes, compressed size == logical size. */
#include <errno.h>
#include <string.h>

#include "codec_impl.h"

static size_t none_bound(size_t n)
{
    return n;
}

static ssize_t none_compress(void **slot, int level, const void *src, size_t n, void *dst,
                             size_t cap)
{
    (void)slot;
    (void)level;
    if (n > cap)
        return -ENOSPC;
    memcpy(dst, src, n);
    return (ssize_t)n;
}

static ssize_t none_decompress(void **slot, const void *src, size_t n, void *dst,
                               size_t expected)
{
    (void)slot;
    if (n != expected)
        return -EBADMSG;
    memcpy(dst, src, n);
    return (ssize_t)n;
}

const sqz_codec_ops sqz_none_ops = {
    .bound = none_bound,
    .compress = none_compress,
    .decompress = none_decompress,
};
