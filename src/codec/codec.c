/* Codec registry built from the codec table SQZ_CODECS (codec_impl.h):
 * algorithm ids, names, kdb+ numbers, level ranges, the name lists of error
 * messages, argument validation and dispatch to each codec's ops; owner of
 * the per-thread context table. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "common/errbuf.h"
#include "squeezefs/codec.h"
#include "codec_impl.h"

typedef struct codec_row {
    const char *name;  /* NULL: no codec has this id */
    const char *alias; /* or NULL */
    int kdb;
    int lo, hi, def;
    const sqz_codec_ops *ops;
} codec_row;

/* Rows indexed by id; a duplicate id is a -Woverride-init error. */
#define ROW(id_, name_, alias_, kdb_, lo_, hi_, def_, ops_)                 \
    [id_] = {.name = name_, .alias = alias_, .kdb = kdb_, .lo = lo_,        \
             .hi = hi_, .def = def_, .ops = &ops_},
static void **codec_tls(sqz_alg alg);

static const codec_row rows[] = {SQZ_CODECS(ROW)};
#undef ROW
#define NROWS (sizeof rows / sizeof rows[0])

/* Compile-time checks of every row. */
#define CHECK_ROW(id_, name_, alias_, kdb_, lo_, hi_, def_, ops_)           \
    _Static_assert((id_) >= 0 && (id_) <= 255,                              \
                   name_ ": the id must fit the container's id byte");      \
    _Static_assert((kdb_) >= -1 && (kdb_) <= 255,                           \
                   name_ ": kdb+ number out of range");                     \
    _Static_assert((lo_) <= (def_) && (def_) <= (hi_),                      \
                   name_ ": default level out of range");
SQZ_CODECS(CHECK_ROW)
#undef CHECK_ROW

#define ID(id_, ...) id_,
#define ONE(...) +1
_Static_assert((0 SQZ_CODECS(ONE)) == SQZ_ALG_COUNT,
               "SQZ_ALG_COUNT (codec.h) must be the number of SQZ_CODECS rows");
const sqz_alg sqz_all_algs[SQZ_ALG_COUNT] = {SQZ_CODECS(ID)};
#undef ID
#undef ONE

static const codec_row *row_of(int alg)
{
    if (alg < 0 || (size_t)alg >= NROWS || !rows[alg].name)
        return NULL;
    return &rows[alg];
}

/* ---- name lists for messages, built once from the table ---- */

static char names_text[256]; /* "none, gzip (alias zlib), snappy, ..." */
static char kdb_text[256];   /* "0 none, 1 qipc, 2 gzip, ... or 5 zstd" */
static pthread_once_t lists_once = PTHREAD_ONCE_INIT;

/* Appends to the NUL-terminated text in buf[0..cap), truncating. */
static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

static void build_lists(void)
{
    for (size_t i = 0; i < SQZ_ALG_COUNT; i++) {
        const codec_row *r = row_of((int)sqz_all_algs[i]);
        append(names_text, sizeof names_text, "%s%s", i ? ", " : "", r->name);
        if (r->alias)
            append(names_text, sizeof names_text, " (alias %s)", r->alias);
    }
    /* by kdb+ number: "0 none, 1 qipc, 2 gzip, 3 snappy, 4 lz4hc or 5 zstd" */
    int total = 0, done = 0;
    for (size_t i = 0; i < NROWS; i++)
        total += rows[i].name && rows[i].kdb >= 0;
    for (int k = 0; k <= 255 && done < total; k++)
        for (size_t i = 0; i < NROWS; i++) {
            if (!rows[i].name || rows[i].kdb != k)
                continue;
            append(kdb_text, sizeof kdb_text, "%s%d %s",
                   done == 0 ? "" : done + 1 == total ? " or " : ", ", k,
                   rows[i].name);
            done++;
        }
}

const char *sqz_alg_names(void)
{
    pthread_once(&lists_once, build_lists);
    return names_text;
}

const char *sqz_alg_kdb_names(void)
{
    pthread_once(&lists_once, build_lists);
    return kdb_text;
}

/* ---- lookups ---- */

const char *sqz_alg_name(sqz_alg alg)
{
    const codec_row *r = row_of((int)alg);
    return r ? r->name : NULL;
}

int sqz_alg_valid(int alg)
{
    return row_of(alg) != NULL;
}

int sqz_alg_from_name(const char *name, sqz_alg *out, char *err, size_t errlen)
{
    if (name) {
        for (size_t i = 0; i < SQZ_ALG_COUNT; i++) {
            const codec_row *r = row_of((int)sqz_all_algs[i]);
            if (strcasecmp(name, r->name) == 0 ||
                (r->alias && strcasecmp(name, r->alias) == 0)) {
                if (out)
                    *out = sqz_all_algs[i];
                return 0;
            }
        }
    }
    sqz_errf(err, errlen, "unknown algorithm '%.64s'; valid: %s",
            name ? name : "", sqz_alg_names());
    return -EINVAL;
}

int sqz_alg_from_kdb(int number, sqz_alg *out, char *err, size_t errlen)
{
    for (size_t i = 0; i < SQZ_ALG_COUNT; i++) {
        const codec_row *r = row_of((int)sqz_all_algs[i]);
        if (r->kdb >= 0 && r->kdb == number) {
            if (out)
                *out = sqz_all_algs[i];
            return 0;
        }
    }
    sqz_errf(err, errlen, "unknown kdb+ algorithm %d; use %s", number,
            sqz_alg_kdb_names());
    return -EINVAL;
}

int sqz_alg_kdb_number(sqz_alg alg)
{
    const codec_row *r = row_of((int)alg);
    return r ? r->kdb : -1;
}

int sqz_level_min(sqz_alg alg)
{
    const codec_row *r = row_of((int)alg);
    return r ? r->lo : 0;
}

int sqz_level_max(sqz_alg alg)
{
    const codec_row *r = row_of((int)alg);
    return r ? r->hi : 0;
}

int sqz_level_default(sqz_alg alg)
{
    const codec_row *r = row_of((int)alg);
    return r ? r->def : 0;
}

int sqz_level_check(sqz_alg alg, int level, char *err, size_t errlen)
{
    const codec_row *r = row_of((int)alg);
    if (!r) {
        sqz_errf(err, errlen, "unknown algorithm id %d; valid: %s", (int)alg,
                sqz_alg_names());
        return -EINVAL;
    }
    if (level < r->lo || level > r->hi) {
        if (r->lo == r->hi)
            sqz_errf(err, errlen,
                    "%s level %d is out of range %d..%d (%s has no levels)",
                    r->name, level, r->lo, r->hi, r->name);
        else
            sqz_errf(err, errlen, "%s level %d is out of range %d..%d",
                    r->name, level, r->lo, r->hi);
        return -EINVAL;
    }
    return 0;
}

/* ---- dispatch ---- */

size_t sqz_compress_bound(sqz_alg alg, size_t n)
{
    const codec_row *r = row_of((int)alg);
    return r ? r->ops->bound(n) : 0;
}

ssize_t sqz_compress(sqz_alg alg, int level, const void *src, size_t n,
                     void *dst, size_t cap)
{
    static const unsigned char no_input[1];
    unsigned char no_output[1];
    const codec_row *r = row_of((int)alg);
    if (!r || level < r->lo || level > r->hi)
        return -EINVAL;
    if ((!src && n) || (!dst && cap) || n > (size_t)SSIZE_MAX)
        return -EINVAL;
    if (!src)
        src = no_input;
    if (!dst) {
        dst = no_output;
        cap = 0;
    }
    return r->ops->compress(codec_tls(alg), level, src, n, dst, cap);
}

ssize_t sqz_compress_draft(sqz_alg alg, const void *src, size_t n, void *dst,
                           size_t cap)
{
    const codec_row *r = row_of((int)alg);
    if (!r)
        return -EINVAL;
    if (!r->ops->draft)
        return sqz_compress(alg, r->lo, src, n, dst, cap);
    if (!src || !dst || n > (size_t)SSIZE_MAX)
        return -EINVAL;
    return r->ops->draft(codec_tls(alg), src, n, dst, cap);
}

ssize_t sqz_decompress(sqz_alg alg, const void *src, size_t n, void *dst,
                       size_t expected)
{
    static const unsigned char no_input[1];
    unsigned char no_output[1];
    const codec_row *r = row_of((int)alg);
    if (!r || (!src && n) || (!dst && expected) ||
        expected > (size_t)SSIZE_MAX)
        return -EINVAL;
    if (!src)
        src = no_input;
    if (!dst)
        dst = no_output;
    return r->ops->decompress(codec_tls(alg), src, n, dst, expected);
}

/* ---- per-thread context table: one slot per id ---- */

typedef struct tls_table {
    void *slot[NROWS];
} tls_table;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_key_ok;

static void tls_destroy(void *p)
{
    tls_table *t = p;
    for (size_t i = 0; i < NROWS; i++)
        if (t->slot[i] && rows[i].ops->tls_free)
            rows[i].ops->tls_free(t->slot[i]);
    free(t);
}

static void tls_init(void)
{
    tls_key_ok = pthread_key_create(&tls_key, tls_destroy) == 0;
}

static void **codec_tls(sqz_alg alg)
{
    if (!row_of((int)alg))
        return NULL;
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
    return &t->slot[alg];
}
