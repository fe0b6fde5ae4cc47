/* squeezefs codec layer: one interface over none, gzip (zlib), snappy, lz4,
 * lz4hc, zstd and qipc (kdb+ IPC compression, squeezefs' own code). Nothing
 * outside src/codec/ includes a codec library header.
 *
 * Thread safety: every function may be called from any thread at once.
 * Compression/decompression contexts are kept per thread (created on first
 * use in a thread, freed when the thread exits), never allocated per block.
 *
 * Errors are values: functions return 0 / a size on success and a negative
 * errno on failure (-EINVAL bad argument, -ENOSPC output does not fit,
 * -EBADMSG corrupt input, -ENOMEM).
 */
#ifndef SQUEEZEFS_CODEC_H
#define SQUEEZEFS_CODEC_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Algorithm ids. Values 0..5 are kdb+'s numbers (1 = qipc, kdb+'s IPC
 * compression); 6 (lz4, the fast mode) is squeezefs' own. The id is stored in
 * containers: never renumber. */
typedef enum sqz_alg {
    SQZ_ALG_NONE = 0,
    SQZ_ALG_QIPC = 1,
    SQZ_ALG_GZIP = 2,
    SQZ_ALG_SNAPPY = 3,
    SQZ_ALG_LZ4HC = 4,
    SQZ_ALG_ZSTD = 5,
    SQZ_ALG_LZ4 = 6,
} sqz_alg;

#define SQZ_ALG_COUNT 7 /* number of supported algorithms (checked against
                          * the codec table at compile time) */

/* Supported algorithms in a stable display order: none, gzip, snappy, lz4,
 * lz4hc, zstd, qipc. */
extern const sqz_alg sqz_all_algs[SQZ_ALG_COUNT];

/* Name ("none", "gzip", "snappy", "lz4", "lz4hc", "zstd", "qipc") or NULL if
 * unknown. */
const char *sqz_alg_name(sqz_alg alg);
/* 1 if alg is a supported id, else 0. */
int sqz_alg_valid(int alg);
/* The valid names for messages, in display order:
 * "none, gzip (alias zlib), snappy, lz4, lz4hc, zstd, qipc". */
const char *sqz_alg_names(void);
/* The kdb+ numbers for messages: "0 none, 1 qipc, 2 gzip, 3 snappy,
 * 4 lz4hc or 5 zstd". */
const char *sqz_alg_kdb_names(void);
/* Look up by name (case-insensitive; "zlib" is an alias of gzip).
 * -EINVAL if unknown; if err != NULL a message listing the valid names is
 * written to err (NUL-terminated, truncated to errlen). */
int sqz_alg_from_name(const char *name, sqz_alg *out, char *err, size_t errlen);
/* Look up by kdb+ number 0..5 (1 is qipc); -EINVAL with a message listing
 * the numbers for any other. */
int sqz_alg_from_kdb(int number, sqz_alg *out, char *err, size_t errlen);
/* kdb+ number of alg (lz4 has none: returns -1). */
int sqz_alg_kdb_number(sqz_alg alg);

/* Level range: none 0..0, gzip 0..9, snappy 0..0, lz4 0..0,
 * lz4hc 1..12, zstd -7..22, qipc 0..0. */
int sqz_level_min(sqz_alg alg);
int sqz_level_max(sqz_alg alg);
int sqz_level_default(sqz_alg alg); /* gzip 6, lz4hc 9, zstd 3, others 0 */
/* 0 if level is valid for alg, else -EINVAL with a message naming the range,
 * e.g. "zstd level 30 is out of range -7..22". */
int sqz_level_check(sqz_alg alg, int level, char *err, size_t errlen);

/* Worst-case compressed size of n bytes. */
size_t sqz_compress_bound(sqz_alg alg, size_t n);

/* Compress src[0..n) into dst[0..cap). Returns the compressed size, or
 * -ENOSPC if it does not fit in cap (callers use cap < n to abort early on
 * incompressible data), or another negative errno. */
ssize_t sqz_compress(sqz_alg alg, int level, const void *src, size_t n,
                     void *dst, size_t cap);

/* A draft of src[0..n) for data that is compressed again soon (squeezefs
 * packs small files seconds after their close, compressing them anew): as
 * fast as alg can, whatever the ratio (zstd: its fastest mode, about the
 * size of the input; others: their lowest level). Decoded by
 * sqz_decompress(alg) like sqz_compress's output; returns as it does.
 * src and dst must not be NULL. */
ssize_t sqz_compress_draft(sqz_alg alg, const void *src, size_t n, void *dst,
                           size_t cap);

/* Decompress src[0..n) into dst, which must receive exactly `expected`
 * bytes. Returns expected on success, -EBADMSG if the input is corrupt or
 * does not decompress to exactly `expected` bytes. Never writes past
 * dst[expected). */
ssize_t sqz_decompress(sqz_alg alg, const void *src, size_t n, void *dst,
                       size_t expected);

#ifdef __cplusplus
}
#endif
#endif
