/* Codec registry: algorithm ids, names, kdb+ numbers, level ranges, argument
 * validation and dispatch to the per-codec vtables; owner of the per-thread
 * context table. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/types.h>

#include "common/errbuf.h"
#include "squeezefs/codec.h"
#include "codec_impl.h"

const sqz_alg sqz_all_algs[SQZ_ALG_COUNT] = {
    SQZ_ALG_NONE, SQZ_ALG_GZIP, SQZ_ALG_SNAPPY,
    SQZ_ALG_LZ4,  SQZ_ALG_LZ4HC, SQZ_ALG_ZSTD,
};

#define VALID_NAMES "none, gzip (alias zlib), snappy, lz4, lz4hc, zstd"
#define VALID_KDB "use 0 none, 2 gzip, 3 snappy, 4 lz4hc or 5 zstd"

static const sqz_codec_vt *vt_of(int alg)
{
    switch (alg) {
    case SQZ_ALG_NONE: return &sqz_codec_none;
    case SQZ_ALG_GZIP: return &sqz_codec_gzip;
    case SQZ_ALG_SNAPPY: return &sqz_codec_snappy;
    case SQZ_ALG_LZ4HC: return &sqz_codec_lz4hc;
    case SQZ_ALG_ZSTD: return &sqz_codec_zstd;
    case SQZ_ALG_LZ4: return &sqz_codec_lz4;
    default: return NULL;
    }
}

const char *sqz_alg_name(sqz_alg alg)
{
    const sqz_codec_vt *vt = vt_of((int)alg);
    return vt ? vt->name : NULL;
}

int sqz_alg_valid(int alg)
{
    return vt_of(alg) != NULL;
}

int sqz_alg_from_name(const char *name, sqz_alg *out, char *err, size_t errlen)
{
    if (name) {
        if (strcasecmp(name, "zlib") == 0) {
            if (out)
                *out = SQZ_ALG_GZIP;
            return 0;
        }
        for (size_t i = 0; i < SQZ_ALG_COUNT; i++) {
            const sqz_codec_vt *vt = vt_of((int)sqz_all_algs[i]);
            if (strcasecmp(name, vt->name) == 0) {
                if (out)
                    *out = vt->alg;
                return 0;
            }
        }
    }
    sqz_errf(err, errlen, "unknown algorithm '%.64s'; valid: " VALID_NAMES,
            name ? name : "");
    return -EINVAL;
}

int sqz_alg_from_kdb(int number, sqz_alg *out, char *err, size_t errlen)
{
    if (number == 1) {
        sqz_errf(err, errlen,
                "kdb+ algorithm 1 (q IPC) is not supported; " VALID_KDB);
        return -ENOTSUP;
    }
    for (size_t i = 0; i < SQZ_ALG_COUNT; i++) {
        const sqz_codec_vt *vt = vt_of((int)sqz_all_algs[i]);
        if (vt->kdb >= 0 && vt->kdb == number) {
            if (out)
                *out = vt->alg;
            return 0;
        }
    }
    sqz_errf(err, errlen, "unknown kdb+ algorithm %d; " VALID_KDB, number);
    return -EINVAL;
}

int sqz_alg_kdb_number(sqz_alg alg)
{
    const sqz_codec_vt *vt = vt_of((int)alg);
    return vt ? vt->kdb : -1;
}

int sqz_level_min(sqz_alg alg)
{
    const sqz_codec_vt *vt = vt_of((int)alg);
    return vt ? vt->level_min : 0;
}

int sqz_level_max(sqz_alg alg)
{
    const sqz_codec_vt *vt = vt_of((int)alg);
    return vt ? vt->level_max : 0;
}

int sqz_level_default(sqz_alg alg)
{
    const sqz_codec_vt *vt = vt_of((int)alg);
    return vt ? vt->level_default : 0;
}

int sqz_level_check(sqz_alg alg, int level, char *err, size_t errlen)
{
    const sqz_codec_vt *vt = vt_of((int)alg);
    if (!vt) {
        sqz_errf(err, errlen, "unknown algorithm id %d; valid: " VALID_NAMES,
                (int)alg);
        return -EINVAL;
    }
    if (level < vt->level_min || level > vt->level_max) {
        if (vt->level_min == vt->level_max)
            sqz_errf(err, errlen,
                    "%s level %d is out of range %d..%d (%s has no levels)",
                    vt->name, level, vt->level_min, vt->level_max, vt->name);
        else
            sqz_errf(err, errlen, "%s level %d is out of range %d..%d",
                    vt->name, level, vt->level_min, vt->level_max);
        return -EINVAL;
    }
    return 0;
}

size_t sqz_compress_bound(sqz_alg alg, size_t n)
{
    const sqz_codec_vt *vt = vt_of((int)alg);
    return vt ? vt->bound(n) : 0;
}

ssize_t sqz_compress(sqz_alg alg, int level, const void *src, size_t n,
                     void *dst, size_t cap)
{
    static const unsigned char no_input[1];
    unsigned char no_output[1];
    const sqz_codec_vt *vt = vt_of((int)alg);
    if (!vt || level < vt->level_min || level > vt->level_max)
        return -EINVAL;
    if ((!src && n) || (!dst && cap) || n > (size_t)SSIZE_MAX)
        return -EINVAL;
    if (!src)
        src = no_input;
    if (!dst) {
        dst = no_output;
        cap = 0;
    }
    return vt->compress(level, src, n, dst, cap);
}

ssize_t sqz_decompress(sqz_alg alg, const void *src, size_t n, void *dst,
                       size_t expected)
{
    static const unsigned char no_input[1];
    unsigned char no_output[1];
    const sqz_codec_vt *vt = vt_of((int)alg);
    if (!vt || (!src && n) || (!dst && expected) ||
        expected > (size_t)SSIZE_MAX)
        return -EINVAL;
    if (!src)
        src = no_input;
    if (!dst)
        dst = no_output;
    return vt->decompress(src, n, dst, expected);
}

/* ---- per-thread context table ---- */

typedef struct tls_table {
    void *slot[SQZ_TLS_COUNT];
} tls_table;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_key_ok;

static void tls_destroy(void *p)
{
    static void (*const free_fn[SQZ_TLS_COUNT])(void *) = {
        [SQZ_TLS_GZIP] = sqz_gzip_tls_free,
        [SQZ_TLS_SNAPPY] = sqz_snappy_tls_free,
        [SQZ_TLS_LZ4] = sqz_lz4_tls_free,
        [SQZ_TLS_ZSTD] = sqz_zstd_tls_free,
    };
    tls_table *t = p;
    for (int i = 0; i < SQZ_TLS_COUNT; i++)
        if (t->slot[i])
            free_fn[i](t->slot[i]);
    free(t);
}

static void tls_init(void)
{
    tls_key_ok = pthread_key_create(&tls_key, tls_destroy) == 0;
}

void **sqz_codec_tls(enum sqz_tls_slot slot)
{
    if (pthread_once(&tls_once, tls_init) != 0 || !tls_key_ok)
        return NULL;
    tls_table *t = pthread_getspecific(tls_key);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t)
            return NULL;
        if (pthread_setspecific(tls_key, t) != 0) {
            free(t);
            return NULL;
        }
    }
    return &t->slot[slot];
}
