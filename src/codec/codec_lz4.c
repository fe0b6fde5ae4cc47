/* Codecs "lz4" (fast mode, squeezefs id 6, no levels) and "lz4hc" (kdb+
 * algorithm 4, levels 1..12). Raw LZ4 blocks; each mode keeps its
 * compression state in its own per-thread slot, allocated on first use. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <lz4.h>
#include <lz4hc.h>

#include "codec_impl.h"

/* The calling thread's state of one mode (its own per-thread slot: the
 * slot holds the malloc'ed state itself), allocated on first use. */
static void *lz4_state(void **slot, size_t size)
{
    if (!slot)
        return NULL;
    if (!*slot)
        *slot = malloc(size);
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

static ssize_t lz4_fast_compress(void **slot, int level, const void *src, size_t n,
                                 void *dst, size_t cap)
{
    (void)level;
    if (n > (size_t)LZ4_MAX_INPUT_SIZE)
        return -EINVAL;
    void *state = lz4_state(slot, (size_t)LZ4_sizeofState());
    if (!state)
        return -ENOMEM;
    int r = LZ4_compress_fast_extState(state, src, dst, (int)n,
                                       clamp_int(cap), 1);
    return r > 0 ? (ssize_t)r : -ENOSPC;
}

static ssize_t lz4hc_compress(void **slot, int level, const void *src, size_t n, void *dst,
                              size_t cap)
{
    if (n > (size_t)LZ4_MAX_INPUT_SIZE)
        return -EINVAL;
    void *state = lz4_state(slot, (size_t)LZ4_sizeofStateHC());
    if (!state)
        return -ENOMEM;
    int r = LZ4_compress_HC_extStateHC(state, src, dst, (int)n,
                                       clamp_int(cap), level);
    return r > 0 ? (ssize_t)r : -ENOSPC;
}

static ssize_t lz4_decompress(void **slot, const void *src, size_t n, void *dst,
                              size_t expected)
{
    (void)slot;
    if (n > (size_t)INT32_MAX || expected > (size_t)INT32_MAX)
        return -EBADMSG;
    int r = LZ4_decompress_safe(src, dst, (int)n, (int)expected);
    if (r < 0 || (size_t)r != expected)
        return -EBADMSG;
    return (ssize_t)expected;
}

const sqz_codec_ops sqz_lz4_ops = {
    .bound = lz4_bound,
    .compress = lz4_fast_compress,
    .decompress = lz4_decompress,
    .tls_free = free,
};

const sqz_codec_ops sqz_lz4hc_ops = {
    .bound = lz4_bound,
    .compress = lz4hc_compress,
    .decompress = lz4_decompress,
    .tls_free = free,
};
