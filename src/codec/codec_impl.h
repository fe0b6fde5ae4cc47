/* Internal interface between the codec registry (codec.c) and the
 * individual codecs (codec_*.c). Not installed; nothing outside src/codec/
 * includes it.
 *
 * Each codec is described by one constant vtable. The registry validates
 * arguments (algorithm, level, NULL pointers with zero sizes) before calling
 * into a vtable, so codec functions may assume: level is in range, src and
 * dst are non-NULL (a one-byte dummy is substituted for NULL with size 0).
 *
 * Per-thread contexts: each codec that needs state owns one slot of a
 * per-thread table managed by codec.c (a pthread key whose destructor calls
 * the codec's free function at thread exit). These slots are the only
 * global state of the codec layer. */
#ifndef SQUEEZEFS_CODEC_IMPL_H
#define SQUEEZEFS_CODEC_IMPL_H

#include <stddef.h>
#include <sys/types.h>

#include "squeezefs/codec.h"

typedef struct sqz_codec_vt {
    sqz_alg alg;
    const char *name;
    int kdb;           /* kdb+ algorithm number, -1 if none */
    int level_min;
    int level_max;
    int level_default;
    /* Worst-case output size for n input bytes; 0 if n is too large. */
    size_t (*bound)(size_t n);
    /* Returns compressed size, -ENOSPC if it does not fit cap, or another
     * negative errno. */
    ssize_t (*compress)(int level, const void *src, size_t n, void *dst,
                        size_t cap);
    /* Returns expected, or -EBADMSG (corrupt / size mismatch), -ENOMEM.
     * Must never write beyond dst[expected). */
    ssize_t (*decompress)(const void *src, size_t n, void *dst,
                          size_t expected);
} sqz_codec_vt;

extern const sqz_codec_vt sqz_codec_none;
extern const sqz_codec_vt sqz_codec_gzip;
extern const sqz_codec_vt sqz_codec_snappy;
extern const sqz_codec_vt sqz_codec_lz4;
extern const sqz_codec_vt sqz_codec_lz4hc;
extern const sqz_codec_vt sqz_codec_zstd;

/* Per-thread context slots, one per codec family that keeps state. */
enum sqz_tls_slot {
    SQZ_TLS_GZIP = 0,
    SQZ_TLS_SNAPPY,
    SQZ_TLS_LZ4,
    SQZ_TLS_ZSTD,
    SQZ_TLS_COUNT
};

/* Address of the calling thread's slot (initially NULL), or NULL if the
 * per-thread table cannot be created (out of memory). The codec stores its
 * context there; it is released with the matching sqz_*_tls_free at thread
 * exit. */
void **sqz_codec_tls(enum sqz_tls_slot slot);

/* Per-thread context destructors, called by codec.c at thread exit. */
void sqz_gzip_tls_free(void *ctx);
void sqz_snappy_tls_free(void *ctx);
void sqz_lz4_tls_free(void *ctx);
void sqz_zstd_tls_free(void *ctx);

#endif
