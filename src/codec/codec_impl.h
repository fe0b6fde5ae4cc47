/* Internal interface between the codec registry (codec.c) and the
 * individual codecs (codec_*.c). Not installed; nothing outside src/codec/
 * includes it.
 *
 * The codec table SQZ_CODECS below is the only list of codecs: one row per
 * codec. codec.c builds from it the registry (lookup by id, name, alias and
 * kdb+ number; level ranges; the display order sqz_all_algs; the name lists
 * of error messages) and the per-thread context table. Adding a codec means:
 * its own codec_X.c defining `const sqz_codec_ops sqz_X_ops`, one row here,
 * the file in meson.build and, as the id is stored in containers, a value in
 * the public enum sqz_alg (include/squeezefs/codec.h).
 *
 * The registry validates arguments (algorithm, level, NULL pointers with
 * zero sizes) before calling into a codec, so codec functions may assume:
 * level is in range, src and dst are non-NULL (a one-byte dummy is
 * substituted for NULL with size 0).
 *
 * Per-thread contexts: every codec owns one slot of a per-thread table
 * managed by codec.c (a pthread key whose destructor calls the codec's
 * tls_free at thread exit). These slots are the only global state of the
 * codec layer. */
#ifndef SQUEEZEFS_CODEC_IMPL_H
#define SQUEEZEFS_CODEC_IMPL_H

#include <stddef.h>
#include <sys/types.h>

#include "squeezefs/codec.h"

/* A codec's functions. */
typedef struct sqz_codec_ops {
    /* Worst-case output size for n input bytes; 0 if n is too large. */
    size_t (*bound)(size_t n);
    /* Returns compressed size, -ENOSPC if it does not fit cap, or another
     * negative errno. */
    ssize_t (*compress)(void **slot, int level, const void *src, size_t n,
                        void *dst, size_t cap);
    /* Returns expected, or -EBADMSG (corrupt / size mismatch), -ENOMEM.
     * Must never write beyond dst[expected). */
    ssize_t (*decompress)(void **slot, const void *src, size_t n, void *dst,
                          size_t expected);
    /* Frees the codec's per-thread context (what it stored in its
     * context slot) at thread exit; NULL if it keeps none. */
    void (*tls_free)(void *ctx);
    /* A draft (sqz_compress_draft): as fast as the codec can, decoded
     * like compress's output. NULL: compress at the lowest level. */
    ssize_t (*draft)(void **slot, const void *src, size_t n, void *dst,
                     size_t cap);
} sqz_codec_ops;

/* The codec table, in display order (the order of sqz_all_algs, `squeezefs
 * bench` and the name lists of messages). Columns:
 *   id        sqz_alg value (stored in containers: never renumber)
 *   name      canonical name (SPEC, messages)
 *   alias     another accepted name, or NULL
 *   kdb       kdb+ algorithm number, -1 if none
 *   lo hi def level range and default (lo == hi: "no levels")
 *   ops       the codec's sqz_codec_ops, defined in its codec_X.c */
#define SQZ_CODECS(X)                                                       \
    /* id             name      alias   kdb lo  hi def ops          */     \
    X(SQZ_ALG_NONE,   "none",   NULL,    0,  0,  0, 0, sqz_none_ops)       \
    X(SQZ_ALG_GZIP,   "gzip",   "zlib",  2,  0,  9, 6, sqz_gzip_ops)       \
    X(SQZ_ALG_SNAPPY, "snappy", NULL,    3,  0,  0, 0, sqz_snappy_ops)     \
    X(SQZ_ALG_LZ4,    "lz4",    NULL,   -1,  0,  0, 0, sqz_lz4_ops)        \
    X(SQZ_ALG_LZ4HC,  "lz4hc",  NULL,    4,  1, 12, 9, sqz_lz4hc_ops)      \
    X(SQZ_ALG_ZSTD,   "zstd",   NULL,    5, -7, 22, 3, sqz_zstd_ops)       \
    X(SQZ_ALG_QIPC,   "qipc",   NULL,    1,  0,  0, 0, sqz_qipc_ops)

#define SQZ_CODEC_DECLARE_OPS(id, name, alias, kdb, lo, hi, def, ops)       \
    extern const sqz_codec_ops ops;
SQZ_CODECS(SQZ_CODEC_DECLARE_OPS)
#undef SQZ_CODEC_DECLARE_OPS

/* slot (compress, decompress): the calling thread's context slot of this
 * codec, owned by the registry (codec.c): initially NULL; the codec stores
 * its context there and the registry calls its tls_free on it at thread
 * exit. NULL if the per-thread table cannot be created (out of memory): a
 * codec that needs a context returns -ENOMEM then. Passing it in keeps the
 * codecs from calling back into the registry (no dependency cycle). */

#endif
