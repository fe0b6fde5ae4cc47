/* Unit tests of the codec layer: registry and error texts, round trips over
 * every algorithm x level x size x data kind, -ENOSPC, corrupt input, and
 * concurrent use from several threads. With SQZ_WRITE_CORPUS=DIR it only
 * writes the seed corpus of fuzz_codec into DIR. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "squeezefs/codec.h"
#include "testutil.h"

#define MAXN (1u << 20)
#define NKINDS 5

static unsigned char *data[NKINDS]; /* MAXN bytes of each kind */

static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 65536, 131072, 1u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void test_registry(void)
{
    static const char *names[] = {"none", "gzip", "snappy", "lz4", "lz4hc",
                                  "zstd", "qipc"};
    char err[256];
    for (int i = 0; i < SQZ_ALG_COUNT; i++) {
        sqz_alg a = sqz_all_algs[i];
        CHECK(sqz_alg_valid((int)a));
        REQUIRE(sqz_alg_name(a) != NULL);
        CHECK(strcmp(sqz_alg_name(a), names[i]) == 0);
        sqz_alg got = (sqz_alg)-1;
        CHECK_EQ_INT(sqz_alg_from_name(names[i], &got, err, sizeof err), 0);
        CHECK_EQ_INT(got, a);
        CHECK(sqz_level_min(a) <= sqz_level_default(a));
        CHECK(sqz_level_default(a) <= sqz_level_max(a));
    }
    /* the table: names and kdb+ numbers are unique, ids valid */
    for (int i = 0; i < SQZ_ALG_COUNT; i++)
        for (int j = i + 1; j < SQZ_ALG_COUNT; j++) {
            sqz_alg a = sqz_all_algs[i], b = sqz_all_algs[j];
            CHECK(a != b);
            CHECK(strcmp(sqz_alg_name(a), sqz_alg_name(b)) != 0);
            CHECK(sqz_alg_kdb_number(a) < 0 ||
                  sqz_alg_kdb_number(a) != sqz_alg_kdb_number(b));
        }
    /* the name lists of messages are generated from the table */
    CHECK(strcmp(sqz_alg_names(),
                 "none, gzip (alias zlib), snappy, lz4, lz4hc, zstd, qipc") == 0);
    CHECK(strcmp(sqz_alg_kdb_names(),
                 "0 none, 1 qipc, 2 gzip, 3 snappy, 4 lz4hc or 5 zstd") == 0);
    CHECK_EQ_INT(SQZ_ALG_NONE, 0);
    CHECK_EQ_INT(SQZ_ALG_GZIP, 2);
    CHECK_EQ_INT(SQZ_ALG_SNAPPY, 3);
    CHECK_EQ_INT(SQZ_ALG_LZ4HC, 4);
    CHECK_EQ_INT(SQZ_ALG_ZSTD, 5);
    CHECK_EQ_INT(SQZ_ALG_LZ4, 6);
    CHECK_EQ_INT(SQZ_ALG_QIPC, 1);
    CHECK(sqz_alg_valid(1));
    CHECK(!sqz_alg_valid(7));
    CHECK(!sqz_alg_valid(-1));
    CHECK(!sqz_alg_valid(256));
    CHECK(sqz_alg_name((sqz_alg)7) == NULL);
    CHECK(sqz_alg_name((sqz_alg)99) == NULL);

    /* case-insensitive, zlib alias */
    sqz_alg a;
    CHECK_EQ_INT(sqz_alg_from_name("ZSTD", &a, NULL, 0), 0);
    CHECK_EQ_INT(a, SQZ_ALG_ZSTD);
    CHECK_EQ_INT(sqz_alg_from_name("Zlib", &a, NULL, 0), 0);
    CHECK_EQ_INT(a, SQZ_ALG_GZIP);
    CHECK_EQ_INT(sqz_alg_from_name("LZ4HC", &a, NULL, 0), 0);
    CHECK_EQ_INT(a, SQZ_ALG_LZ4HC);
    err[0] = 0;
    CHECK_EQ_INT(sqz_alg_from_name("zsdt", &a, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "'zsdt'") != NULL);
    CHECK(strstr(err, "none, gzip") != NULL);
    CHECK(strstr(err, "lz4hc, zstd") != NULL);
    CHECK_EQ_INT(sqz_alg_from_name("", &a, NULL, 0), -EINVAL);
    CHECK_EQ_INT(sqz_alg_from_name("zstd ", &a, NULL, 0), -EINVAL);
    CHECK_EQ_INT(sqz_alg_from_name(NULL, &a, err, sizeof err), -EINVAL);
    /* truncated message stays NUL-terminated */
    memset(err, 'x', sizeof err);
    CHECK_EQ_INT(sqz_alg_from_name("bogus", &a, err, 8), -EINVAL);
    CHECK(strlen(err) == 7);

    /* kdb+ numbers */
    static const struct { int k; sqz_alg a; } kdb[] = {
        {0, SQZ_ALG_NONE}, {2, SQZ_ALG_GZIP}, {3, SQZ_ALG_SNAPPY},
        {4, SQZ_ALG_LZ4HC}, {5, SQZ_ALG_ZSTD}, {1, SQZ_ALG_QIPC}};
    for (size_t i = 0; i < sizeof kdb / sizeof kdb[0]; i++) {
        CHECK_EQ_INT(sqz_alg_from_kdb(kdb[i].k, &a, err, sizeof err), 0);
        CHECK_EQ_INT(a, kdb[i].a);
        CHECK_EQ_INT(sqz_alg_kdb_number(kdb[i].a), kdb[i].k);
    }
    CHECK_EQ_INT(sqz_alg_kdb_number(SQZ_ALG_LZ4), -1);
    err[0] = 0;
    CHECK_EQ_INT(sqz_alg_from_kdb(6, &a, err, sizeof err), -EINVAL);
    CHECK(strcmp(err, "unknown kdb+ algorithm 6; use 0 none, 1 qipc, 2 gzip, "
                      "3 snappy, 4 lz4hc or 5 zstd") == 0);
    CHECK(strstr(err, "6") != NULL && strstr(err, "5 zstd") != NULL);
    CHECK_EQ_INT(sqz_alg_from_kdb(-1, &a, NULL, 0), -EINVAL);

    /* level ranges */
    static const struct { sqz_alg a; int lo, hi, def; } lv[] = {
        {SQZ_ALG_NONE, 0, 0, 0},   {SQZ_ALG_GZIP, 0, 9, 6},
        {SQZ_ALG_SNAPPY, 0, 0, 0}, {SQZ_ALG_LZ4, 0, 0, 0},
        {SQZ_ALG_LZ4HC, 1, 12, 9}, {SQZ_ALG_ZSTD, -7, 22, 3},
        {SQZ_ALG_QIPC, 0, 0, 0}};
    for (size_t i = 0; i < sizeof lv / sizeof lv[0]; i++) {
        CHECK_EQ_INT(sqz_level_min(lv[i].a), lv[i].lo);
        CHECK_EQ_INT(sqz_level_max(lv[i].a), lv[i].hi);
        CHECK_EQ_INT(sqz_level_default(lv[i].a), lv[i].def);
        for (int l = lv[i].lo - 3; l <= lv[i].hi + 3; l++) {
            int ok = l >= lv[i].lo && l <= lv[i].hi;
            err[0] = 0;
            CHECK_EQ_INT(sqz_level_check(lv[i].a, l, err, sizeof err),
                         ok ? 0 : -EINVAL);
            if (!ok) {
                char want[64];
                snprintf(want, sizeof want, "%s level %d is out of range %d..%d",
                         sqz_alg_name(lv[i].a), l, lv[i].lo, lv[i].hi);
                CHECK(strncmp(err, want, strlen(want)) == 0);
            }
        }
    }
    CHECK_EQ_INT(sqz_level_check(SQZ_ALG_ZSTD, 30, err, sizeof err), -EINVAL);
    CHECK(strcmp(err, "zstd level 30 is out of range -7..22") == 0);
    CHECK_EQ_INT(sqz_level_check((sqz_alg)7, 0, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "unknown algorithm") != NULL);
}

static int slow_level(sqz_alg a, int level)
{
    return (a == SQZ_ALG_ZSTD && level >= 13) ||
           (a == SQZ_ALG_LZ4HC && level >= 8) ||
           (a == SQZ_ALG_GZIP && level >= 7);
}

/* Buffers reused by all round trips. Every buffer handed to the codec is
 * placed at the very end of its heap block, so ASan reports any access past
 * the size the codec was given (without a malloc per combination). */
typedef struct rt_bufs {
    unsigned char *cbuf, *exact, *out;
    size_t cap, outcap;
} rt_bufs;

/* Compress with cap = bound, check the bound, re-compress into exactly the
 * compressed size, decompress into exactly n bytes and compare; then the
 * wrong expected sizes n-1 and n+1 must give -EBADMSG. */
static void roundtrip_one(sqz_alg a, int level, const unsigned char *src,
                          size_t n, rt_bufs *b)
{
    size_t bound = sqz_compress_bound(a, n);
    REQUIRE(bound >= 1 || (a == SQZ_ALG_NONE && n == 0));
    REQUIRE(bound <= b->cap && n + 1 <= b->outcap);
    unsigned char *dst = b->cbuf + b->cap - bound;
    ssize_t c = sqz_compress(a, level, src, n, dst, bound);
    if (c < 0 || (size_t)c > bound) {
        fprintf(stderr, "compress %s:%d n=%zu -> %zd (bound %zu)\n",
                sqz_alg_name(a), level, n, c, bound);
        sqz_test_failures++;
        return;
    }
    unsigned char *in = b->exact + b->cap - (size_t)c;
    if (!slow_level(a, level) && n <= 131072) {
        /* exactly the compressed size is enough, same bytes */
        ssize_t c2 = sqz_compress(a, level, src, n, in, (size_t)c);
        CHECK_EQ_INT(c2, c);
        CHECK(c2 != c || memcmp(in, dst, (size_t)c) == 0);
    }
    memcpy(in, dst, (size_t)c);
    unsigned char *out = b->out + b->outcap - n;
    ssize_t d = sqz_decompress(a, in, (size_t)c, n ? out : NULL, n);
    if (d != (ssize_t)n || (n && memcmp(out, src, n) != 0)) {
        fprintf(stderr, "roundtrip %s:%d n=%zu: decompress -> %zd%s\n",
                sqz_alg_name(a), level, n, d,
                d == (ssize_t)n ? " (data differs)" : "");
        sqz_test_failures++;
    }
    /* expected size mismatch is always -EBADMSG */
    if (n > 0)
        CHECK_EQ_INT(sqz_decompress(a, in, (size_t)c, out + 1, n - 1),
                     -EBADMSG);
    CHECK_EQ_INT(sqz_decompress(a, in, (size_t)c, out - 1, n + 1), -EBADMSG);
}

static void test_roundtrip(void)
{
    size_t cap = sqz_compress_bound(SQZ_ALG_GZIP, MAXN);
    for (int i = 0; i < SQZ_ALG_COUNT; i++) {
        size_t b = sqz_compress_bound(sqz_all_algs[i], MAXN);
        if (b > cap)
            cap = b;
    }
    rt_bufs b = {.cbuf = malloc(cap), .exact = malloc(cap),
                 .out = malloc(MAXN + 1), .cap = cap, .outcap = MAXN + 1};
    REQUIRE(b.cbuf && b.exact && b.out);
    long combos = 0;
    for (int i = 0; i < SQZ_ALG_COUNT; i++) {
        sqz_alg a = sqz_all_algs[i];
        for (int l = sqz_level_min(a); l <= sqz_level_max(a); l++) {
            for (int k = 0; k < NKINDS; k++) {
                for (size_t s = 0; s < NSIZES; s++) {
                    /* slowest levels: only up to 128K (1 MiB of sorted
                     * int64 or runs takes up to 1 s there) */
                    if (slow_level(a, l) && sizes[s] > 131072)
                        continue;
                    /* take the block from an odd offset to vary content */
                    const unsigned char *src = data[k] + (MAXN - sizes[s]) / 3;
                    roundtrip_one(a, l, src, sizes[s], &b);
                    combos++;
                }
            }
        }
    }
    printf("round trips: %ld combinations\n", combos);
    free(b.cbuf);
    free(b.exact);
    free(b.out);
}

/* Blocks ending in zeros (the last block of a file): zstd compresses them
 * up to the last non-zero byte and writes the zeros as RLE blocks of the
 * same frame. Every level and block size, tails just under, at and over
 * the threshold, random heads (the head part stored raw inside the frame)
 * and a tail longer than one zstd block; each frame must end in an RLE
 * last block when the tail is long enough, decode to exactly the block,
 * and fit the exact-size buffer. */
static void test_zstd_zero_tail(void)
{
    static const size_t bss[] = {4096, 8192, 65536, 131072, 262144, 1u << 20};
    static const size_t heads[] = {1, 100, 3000, 4096, 15000, 70000, 200000};
    unsigned char *blk = malloc(MAXN), *out = malloc(MAXN);
    size_t cap = sqz_compress_bound(SQZ_ALG_ZSTD, MAXN);
    unsigned char *c = malloc(cap), *c2 = malloc(cap);
    REQUIRE(blk && out && c && c2);
    int rle_frames = 0;
    for (int l = sqz_level_min(SQZ_ALG_ZSTD); l <= sqz_level_max(SQZ_ALG_ZSTD); l++) {
        for (size_t bi = 0; bi < sizeof bss / sizeof bss[0]; bi++) {
            size_t n = bss[bi];
            if (slow_level(SQZ_ALG_ZSTD, l) && n > 131072)
                continue;
            for (size_t hi = 0; hi <= sizeof heads / sizeof heads[0]; hi++) {
                /* the last round: a tail of 4095 zeros, one short */
                size_t head = hi < sizeof heads / sizeof heads[0] ? heads[hi]
                                                                  : n - 4095;
                if (head >= n)
                    continue;
                int kind = hi % 2 ? 0 : 2; /* random or text */
                memcpy(blk, data[kind], head);
                blk[head - 1] |= 1; /* the head ends in a non-zero byte */
                memset(blk + head, 0, n - head);
                ssize_t z = sqz_compress(SQZ_ALG_ZSTD, l, blk, n, c, cap);
                REQUIRE(z > 4);
                int rle = (c[z - 4] & 7) == 3 && c[z - 1] == 0;
                if (n - head >= 4096) {
                    CHECK(rle);
                    rle_frames += rle;
                }
                ssize_t d = sqz_decompress(SQZ_ALG_ZSTD, c, (size_t)z, out, n);
                CHECK_EQ_INT(d, (ssize_t)n);
                CHECK(d != (ssize_t)n || memcmp(out, blk, n) == 0);
                /* exactly the compressed size fits, one byte less does not */
                CHECK_EQ_INT(sqz_compress(SQZ_ALG_ZSTD, l, blk, n, c2, (size_t)z), z);
                CHECK(memcmp(c2, c, (size_t)z) == 0);
                CHECK_EQ_INT(sqz_compress(SQZ_ALG_ZSTD, l, blk, n, c2, (size_t)z - 1),
                             -ENOSPC);
            }
        }
    }
    CHECK(rle_frames > 100);
    /* Zeros compress as before when the whole block is zeros. */
    memset(blk, 0, 65536);
    ssize_t z = sqz_compress(SQZ_ALG_ZSTD, 1, blk, 65536, c, cap);
    CHECK(z > 0 && z < 64);
    CHECK_EQ_INT(sqz_decompress(SQZ_ALG_ZSTD, c, (size_t)z, out, 65536), 65536);
    free(blk);
    free(out);
    free(c);
    free(c2);
}

/* Drafts (sqz_compress_draft): every algorithm's decode like its normal
 * output, for text, random data and a zero tail; zstd's is its fastest
 * mode, about the size of the data (a level-1 frame of the same text is
 * far smaller), still with the zero tail as RLE blocks. */
static void test_draft(void)
{
    static const size_t heads[] = {1, 3000, 15000, 120000};
    const size_t n = 131072;
    unsigned char *blk = malloc(n), *out = malloc(n);
    size_t cap = 0;
    for (size_t i = 0; i < SQZ_ALG_COUNT; i++) {
        size_t b = sqz_compress_bound(sqz_all_algs[i], n);
        cap = b > cap ? b : cap;
    }
    unsigned char *c = malloc(cap), *c1 = malloc(cap);
    REQUIRE(blk && out && c && c1);
    for (size_t i = 0; i < SQZ_ALG_COUNT; i++) {
        sqz_alg a = sqz_all_algs[i];
        for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++) {
            for (int kind = 0; kind <= 2; kind += 2) { /* random, text */
                size_t head = heads[hi];
                memcpy(blk, data[kind], head);
                memset(blk + head, 0, n - head);
                ssize_t z = sqz_compress_draft(a, blk, n, c, cap);
                CHECK(z > 0);
                if (z <= 0)
                    continue;
                CHECK_EQ_INT(sqz_decompress(a, c, (size_t)z, out, n), (ssize_t)n);
                CHECK(memcmp(out, blk, n) == 0);
                if (a != SQZ_ALG_ZSTD || kind != 2 || head < 3000)
                    continue;
                ssize_t z1 = sqz_compress(a, 1, blk, n, c1, cap);
                CHECK(z1 > 0 && z1 < (ssize_t)head * 3 / 4);
                CHECK(z >= (ssize_t)head * 9 / 10 && z <= (ssize_t)head + 64);
                CHECK((c[z - 4] & 7) == 3 && c[z - 1] == 0); /* RLE tail */
            }
        }
    }
    /* a draft too large for cap is -ENOSPC, as for sqz_compress */
    memcpy(blk, data[0], n);
    CHECK_EQ_INT(sqz_compress_draft(SQZ_ALG_ZSTD, blk, n, c, n / 2), -ENOSPC);
    CHECK_EQ_INT(sqz_compress_draft((sqz_alg)99, blk, n, c, cap), -EINVAL);
    free(blk);
    free(out);
    free(c);
    free(c1);
}

static void test_compress_ratio_sanity(void)
{
    /* Every real codec must actually shrink zeros and text. */
    size_t n = 65536;
    unsigned char *cbuf = malloc(sqz_compress_bound(SQZ_ALG_ZSTD, n) + n);
    REQUIRE(cbuf);
    for (int i = 0; i < SQZ_ALG_COUNT; i++) {
        sqz_alg a = sqz_all_algs[i];
        if (a == SQZ_ALG_NONE)
            continue;
        int l = sqz_level_default(a);
        if (a == SQZ_ALG_GZIP)
            l = 1; /* level 0 is stored */
        ssize_t c = sqz_compress(a, l, data[3], n, cbuf, n);
        CHECK(c > 0 && c < (ssize_t)n / 10);
        c = sqz_compress(a, l, data[2], n, cbuf, n);
        CHECK(c > 0 && c < (ssize_t)n / 2);
    }
    free(cbuf);
}

static void test_enospc(void)
{
    size_t n = 65536;
    for (int i = 0; i < SQZ_ALG_COUNT; i++) {
        sqz_alg a = sqz_all_algs[i];
        for (int l = sqz_level_min(a); l <= sqz_level_max(a); l++) {
            /* random data with cap = n - n/8: early abort; the exact-size
             * buffer lets ASan catch writes past cap */
            size_t cap = n - n / 8;
            unsigned char *dst = malloc(cap);
            REQUIRE(dst);
            CHECK_EQ_INT(sqz_compress(a, l, data[0], n, dst, cap), -ENOSPC);
            free(dst);
            /* nothing fits in 0 bytes */
            CHECK_EQ_INT(sqz_compress(a, l, data[2], n, NULL, 0), -ENOSPC);
            /* compressible data: exactly the compressed size fits, one
             * byte less does not */
            size_t bound = sqz_compress_bound(a, n);
            unsigned char *full = malloc(bound);
            REQUIRE(full);
            ssize_t c = sqz_compress(a, l, data[4], n, full, bound);
            REQUIRE(c > 0);
            unsigned char *exact = malloc((size_t)c);
            REQUIRE(exact);
            CHECK_EQ_INT(sqz_compress(a, l, data[4], n, exact, (size_t)c), c);
            CHECK(memcmp(exact, full, (size_t)c) == 0);
            CHECK_EQ_INT(sqz_compress(a, l, data[4], n, exact, (size_t)c - 1),
                         -ENOSPC);
            free(exact);
            free(full);
        }
    }
}

static void test_invalid_args(void)
{
    unsigned char buf[64];
    CHECK_EQ_INT(sqz_compress(SQZ_ALG_ZSTD, 23, data[2], 16, buf, sizeof buf),
                 -EINVAL);
    CHECK_EQ_INT(sqz_compress(SQZ_ALG_ZSTD, -8, data[2], 16, buf, sizeof buf),
                 -EINVAL);
    CHECK_EQ_INT(sqz_compress(SQZ_ALG_GZIP, 10, data[2], 16, buf, sizeof buf),
                 -EINVAL);
    CHECK_EQ_INT(sqz_compress(SQZ_ALG_LZ4HC, 0, data[2], 16, buf, sizeof buf),
                 -EINVAL);
    CHECK_EQ_INT(sqz_compress(SQZ_ALG_SNAPPY, 1, data[2], 16, buf, sizeof buf),
                 -EINVAL);
    CHECK_EQ_INT(sqz_compress(SQZ_ALG_QIPC, 1, data[2], 16, buf, sizeof buf),
                 -EINVAL);
    CHECK_EQ_INT(sqz_compress((sqz_alg)-1, 0, data[2], 16, buf, sizeof buf),
                 -EINVAL);
    CHECK_EQ_INT(sqz_compress((sqz_alg)7, 0, data[2], 16, buf, sizeof buf),
                 -EINVAL);
    CHECK_EQ_INT(sqz_compress(SQZ_ALG_NONE, 0, NULL, 16, buf, sizeof buf),
                 -EINVAL);
    CHECK_EQ_INT(sqz_decompress((sqz_alg)7, buf, 4, buf, 4), -EINVAL);
    CHECK_EQ_INT(sqz_decompress(SQZ_ALG_ZSTD, NULL, 4, buf, 4), -EINVAL);
    CHECK_EQ_INT(sqz_compress_bound((sqz_alg)9, 100), 0);
    /* empty input decompresses to 0 bytes only from a valid empty frame */
    for (int i = 0; i < SQZ_ALG_COUNT; i++) {
        sqz_alg a = sqz_all_algs[i];
        CHECK_EQ_INT(sqz_decompress(a, NULL, 0, buf, 16), -EBADMSG);
        if (a != SQZ_ALG_NONE)
            CHECK_EQ_INT(sqz_decompress(a, NULL, 0, NULL, 0), -EBADMSG);
    }
    CHECK_EQ_INT(sqz_decompress(SQZ_ALG_NONE, NULL, 0, NULL, 0), 0);
}

/* Decompress input that may be corrupt into an exact-size heap buffer.
 * Returns the result; anything but -EBADMSG or `expected` is a failure. */
static ssize_t try_corrupt(sqz_alg a, const unsigned char *src, size_t n,
                           size_t expected)
{
    unsigned char *in = malloc(n ? n : 1); /* exact size: catches overreads */
    unsigned char *out = malloc(expected ? expected : 1);
    REQUIRE(in && out);
    if (n)
        memcpy(in, src, n);
    ssize_t r = sqz_decompress(a, in, n, out, expected);
    if (r != -EBADMSG && r != (ssize_t)expected) {
        fprintf(stderr, "%s: corrupt input (n=%zu, expected=%zu) -> %zd\n",
                sqz_alg_name(a), n, expected, r);
        sqz_test_failures++;
    }
    free(in);
    free(out);
    return r;
}

static void test_corrupt(void)
{
    uint64_t rs = 12345;
    for (int i = 0; i < SQZ_ALG_COUNT; i++) {
        sqz_alg a = sqz_all_algs[i];
        int l = sqz_level_default(a);
        for (int k = 1; k <= 2; k++) {
            size_t n = 65536;
            const unsigned char *src = data[k];
            size_t bound = sqz_compress_bound(a, n);
            unsigned char *c = malloc(bound + 1);
            REQUIRE(c);
            ssize_t cl = sqz_compress(a, l, src, n, c, bound);
            REQUIRE(cl > 0);
            size_t clen = (size_t)cl;

            /* truncation is always detected */
            size_t cuts[64];
            size_t ncuts = 0;
            size_t fixed[] = {0, 1, 2, 3, 4, 5, 8, clen / 4, clen / 2,
                              clen - 2, clen - 1};
            for (size_t j = 0; j < sizeof fixed / sizeof fixed[0]; j++)
                if (fixed[j] < clen)
                    cuts[ncuts++] = fixed[j];
            while (ncuts < 48)
                cuts[ncuts++] = sqz_test_rand(&rs) % clen;
            for (size_t j = 0; j < ncuts; j++)
                CHECK_EQ_INT(try_corrupt(a, c, cuts[j], n), -EBADMSG);

            /* trailing garbage */
            c[clen] = 0x5a;
            ssize_t r = try_corrupt(a, c, clen + 1, n);
            if (a != SQZ_ALG_LZ4 && a != SQZ_ALG_LZ4HC)
                CHECK_EQ_INT(r, -EBADMSG);

            /* flipped bytes: detected or decoded to exactly n bytes */
            int detected = 0, trials = 300;
            for (int t = 0; t < trials; t++) {
                size_t pos = sqz_test_rand(&rs) % clen;
                unsigned char old = c[pos];
                c[pos] ^= (unsigned char)(1 + sqz_test_rand(&rs) % 255);
                if (try_corrupt(a, c, clen, n) == -EBADMSG)
                    detected++;
                c[pos] = old;
            }
            if (a == SQZ_ALG_NONE)
                CHECK_EQ_INT(detected, 0);
            if (a == SQZ_ALG_GZIP) /* adler32 trailer */
                CHECK(detected >= trials * 95 / 100);
            /* header bytes are always checked */
            for (size_t pos = 0; pos < 2 && a != SQZ_ALG_NONE; pos++) {
                unsigned char old = c[pos];
                c[pos] ^= 0x80;
                if (a != SQZ_ALG_LZ4 && a != SQZ_ALG_LZ4HC)
                    CHECK_EQ_INT(try_corrupt(a, c, clen, n), -EBADMSG);
                else
                    try_corrupt(a, c, clen, n);
                c[pos] = old;
            }
            /* the untouched frame still decodes */
            unsigned char *out = malloc(n);
            REQUIRE(out);
            CHECK_EQ_INT(sqz_decompress(a, c, clen, out, n), (ssize_t)n);
            CHECK(memcmp(out, src, n) == 0);
            free(out);
            free(c);
        }

        /* random garbage of many lengths and expected sizes */
        int garbage = 0, rejected = 0;
        unsigned char g[4096];
        for (int t = 0; t < 400; t++) {
            size_t glen = sqz_test_rand(&rs) % (t < 200 ? 16 : sizeof g);
            size_t exp = sqz_test_rand(&rs) % 70000;
            if (t % 4 == 0)
                exp = glen;
            for (size_t j = 0; j < glen; j++)
                g[j] = (unsigned char)sqz_test_rand(&rs);
            if (a == SQZ_ALG_NONE && glen == exp)
                continue;
            garbage++;
            if (try_corrupt(a, g, glen, exp) == -EBADMSG)
                rejected++;
        }
        CHECK(rejected >= garbage * 95 / 100);
    }
}

/* qipc: hand-made streams for every rule of the decoder, and random item
 * streams behind a correct length (the length check alone rejects most
 * garbage, so these reach the item decoder). Buffers are exact-size heap
 * blocks (try_corrupt): ASan sees any access outside them. */
static size_t qipc_stream(unsigned char *b, uint32_t len, const char *items,
                          size_t n)
{
    b[0] = (unsigned char)len;
    b[1] = (unsigned char)(len >> 8);
    b[2] = (unsigned char)(len >> 16);
    b[3] = (unsigned char)(len >> 24);
    memcpy(b + 4, items, n);
    return 4 + n;
}

static void test_qipc_hostile(void)
{
    const sqz_alg Q = SQZ_ALG_QIPC;
    unsigned char b[4096], out[64];
    const char ab = 'a' ^ 'b';
    /* valid: "ab", then position 0 (pair "ab") copied 2 + 4 bytes */
    const char ok[] = {0x04, 'a', 'b', ab, 4};
    size_t n = qipc_stream(b, 8, ok, sizeof ok);
    CHECK_EQ_INT(sqz_decompress(Q, b, n, out, 8), 8);
    CHECK(memcmp(out, "abababab", 8) == 0);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 8), 8);
    /* the same with a wrong length, expected size, a byte missing at every
     * place, or a byte more */
    CHECK_EQ_INT(try_corrupt(Q, b, n, 7), -EBADMSG);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 9), -EBADMSG);
    n = qipc_stream(b, 7, ok, sizeof ok);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 7), -EBADMSG);
    n = qipc_stream(b, 8, ok, sizeof ok);
    for (size_t cut = 0; cut < n; cut++)
        CHECK_EQ_INT(try_corrupt(Q, b, cut, 8), -EBADMSG);
    b[n] = 0;
    CHECK_EQ_INT(try_corrupt(Q, b, n + 1, 8), -EBADMSG);
    /* the copy runs past the expected size */
    const char longref[] = {0x04, 'a', 'b', ab, 5};
    n = qipc_stream(b, 8, longref, sizeof longref);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 8), -EBADMSG);
    /* a reference through a table entry never set: first item, or another
     * index than the one set */
    const char unset0[] = {0x01, 0, 0};
    n = qipc_stream(b, 2, unset0, sizeof unset0);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 2), -EBADMSG);
    const char unset1[] = {0x04, 'a', 'b', (char)(ab ^ 1), 0};
    n = qipc_stream(b, 4, unset1, sizeof unset1);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 4), -EBADMSG);
    /* one literal: its pair is not complete, nothing is in the table yet */
    const char lit1[] = {0x02, 'a', 'a', 0};
    n = qipc_stream(b, 3, lit1, sizeof lit1);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 3), -EBADMSG);
    /* a copy hashes the positions up to its start, not those inside it:
     * "ab" + a copy of 6 from 0 leaves table[a^b] = 2 (the copy's start);
     * two more copies of 2 through it; an index no pair formed (0: 'a'^'a')
     * is corrupt */
    const char skip[] = {0x1c, 'a', 'b', ab, 4, ab, 0, ab, 0};
    n = qipc_stream(b, 12, skip, sizeof skip);
    CHECK_EQ_INT(sqz_decompress(Q, b, n, out, 12), 12);
    CHECK(memcmp(out, "abababababab", 12) == 0);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 12), 12);
    const char skip_bad[] = {0x0c, 'a', 'b', ab, 4, 0, 0};
    n = qipc_stream(b, 10, skip_bad, sizeof skip_bad);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 10), -EBADMSG);
    /* unused bits of the last control byte must be 0 */
    const char spare[] = {0x02, 'x'};
    n = qipc_stream(b, 1, spare, sizeof spare);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 1), -EBADMSG);
    const char one[] = {0x00, 'x'};
    n = qipc_stream(b, 1, one, sizeof one);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 1), 1);
    /* nine literals need a second control byte; without it: corrupt */
    const char nine[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 9};
    n = qipc_stream(b, 9, nine, sizeof nine);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 9), 9);
    const char nine_bad[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    n = qipc_stream(b, 9, nine_bad, sizeof nine_bad);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 9), -EBADMSG);
    /* empty block: only the length */
    n = qipc_stream(b, 0, "", 0);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 0), 0);
    const char zero_ctl[] = {0};
    n = qipc_stream(b, 0, zero_ctl, 1);
    CHECK_EQ_INT(try_corrupt(Q, b, n, 0), -EBADMSG);

    /* random item streams behind a correct length (nearly all rejected) */
    uint64_t rs = 777;
    for (int t = 0; t < 20000; t++) {
        size_t items = 1 + sqz_test_rand(&rs) % 600;
        uint32_t len = (uint32_t)(sqz_test_rand(&rs) % 3000);
        if (t % 3 == 0)
            len = (uint32_t)(sqz_test_rand(&rs) % 40);
        char it[1200];
        for (size_t j = 0; j < items && j < sizeof it; j++) {
            uint64_t r = sqz_test_rand(&rs);
            /* mostly literals (a 0 control byte now and then), so that the
             * table fills and references resolve */
            it[j] = (char)((r & 3) == 0 ? r >> 8 : (r >> 8) & 0x11);
        }
        n = qipc_stream(b, len, it, items < sizeof it ? items : sizeof it);
        try_corrupt(Q, b, n, len);
    }

    /* real streams with 1..4 bytes of the items changed: many still decode
     * (a changed literal, count or index that resolves), all stay inside
     * their buffers and give exactly the expected size or -EBADMSG */
    int decoded = 0, trials = 0;
    for (int k = 1; k < NKINDS; k++) {
        size_t sz = 4096 + 37 * (size_t)k;
        size_t cap = sqz_compress_bound(Q, sz);
        unsigned char *c = malloc(cap);
        REQUIRE(c);
        ssize_t cl = sqz_compress(Q, 0, data[k], sz, c, cap);
        REQUIRE(cl > 4);
        for (int t = 0; t < 1500; t++) {
            unsigned char *m = malloc((size_t)cl);
            REQUIRE(m);
            memcpy(m, c, (size_t)cl);
            int flips = 1 + (int)(sqz_test_rand(&rs) % 4);
            for (int f = 0; f < flips; f++)
                m[4 + sqz_test_rand(&rs) % ((size_t)cl - 4)] =
                    (unsigned char)sqz_test_rand(&rs);
            decoded += try_corrupt(Q, m, (size_t)cl, sz) == (ssize_t)sz;
            trials++;
            free(m);
        }
        free(c);
    }
    CHECK(decoded > 0 && decoded < trials);
}

/* ---- threads ---- */

typedef struct thread_arg {
    int id;
    int failures;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *ta = p;
    size_t n = 131072;
    size_t cap = 0; /* the largest bound of any codec */
    for (int i = 0; i < SQZ_ALG_COUNT; i++)
        if (sqz_compress_bound(sqz_all_algs[i], n) > cap)
            cap = sqz_compress_bound(sqz_all_algs[i], n);
    unsigned char *src = malloc(n), *c = malloc(cap), *ref = malloc(cap),
                  *out = malloc(n);
    if (!src || !c || !ref || !out) {
        ta->failures++;
        goto done;
    }
    for (int round = 0; round < 6; round++) {
        int kind = (ta->id + round) % NKINDS;
        sqz_test_fill(src, n, kind, (uint64_t)(ta->id * 100 + round));
        for (int i = 0; i < SQZ_ALG_COUNT; i++) {
            sqz_alg a = sqz_all_algs[i];
            int levels[2] = {sqz_level_min(a), sqz_level_default(a)};
            for (int li = 0; li < 2; li++) {
                size_t b = sqz_compress_bound(a, n);
                ssize_t cl = sqz_compress(a, levels[li], src, n, c, b);
                ssize_t cl2 = sqz_compress(a, levels[li], src, n, ref, b);
                /* same input, same level: same bytes */
                if (cl <= 0 || cl != cl2 || memcmp(c, ref, (size_t)cl) != 0) {
                    ta->failures++;
                    continue;
                }
                memset(out, 0, n);
                if (sqz_decompress(a, c, (size_t)cl, out, n) != (ssize_t)n ||
                    memcmp(out, src, n) != 0)
                    ta->failures++;
            }
        }
    }
done:
    free(src);
    free(c);
    free(ref);
    free(out);
    return NULL;
}

static void test_threads(void)
{
    pthread_t th[4];
    thread_arg ta[4];
    for (int i = 0; i < 4; i++) {
        ta[i].id = i;
        ta[i].failures = 0;
        REQUIRE(pthread_create(&th[i], NULL, thread_main, &ta[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        REQUIRE(pthread_join(th[i], NULL) == 0);
        CHECK_EQ_INT(ta[i].failures, 0);
    }
}

/* SQZ_WRITE_CORPUS=DIR: the seed corpus of tests/fuzz/fuzz_codec.c (input
 * format there): for every codec, valid streams of three kinds of data. */
static void write_corpus(const char *dir)
{
    for (int i = 0; i < SQZ_ALG_COUNT; i++) {
        sqz_alg a = sqz_all_algs[i];
        static const int kinds[] = {1, 2, 4}; /* longs, text, runs */
        for (size_t ki = 0; ki < 3; ki++) {
            int k = kinds[ki];
            size_t sz = 3000;
            size_t bound = sqz_compress_bound(a, sz);
            unsigned char *buf = malloc(4 + bound);
            REQUIRE(buf);
            buf[0] = (unsigned char)i;
            buf[1] = (unsigned char)sz;
            buf[2] = (unsigned char)(sz >> 8);
            buf[3] = 0;
            ssize_t c = sqz_compress(a, sqz_level_default(a), data[k], sz,
                                     buf + 4, bound);
            REQUIRE(c >= 0);
            char path[4200];
            snprintf(path, sizeof path, "%s/%s-kind%d", dir, sqz_alg_name(a), k);
            FILE *f = fopen(path, "wb");
            REQUIRE(f);
            REQUIRE(fwrite(buf, 1, 4 + (size_t)c, f) == 4 + (size_t)c);
            fclose(f);
            free(buf);
        }
    }
    printf("corpus written to %s\n", dir);
}

int main(void)
{
    for (int k = 0; k < NKINDS; k++) {
        data[k] = malloc(MAXN);
        REQUIRE(data[k]);
        sqz_test_fill(data[k], MAXN, k, 42 + (uint64_t)k);
    }
    const char *corpus = getenv("SQZ_WRITE_CORPUS");
    if (corpus) {
        write_corpus(corpus);
        for (int k = 0; k < NKINDS; k++)
            free(data[k]);
        return sqz_test_done("test_codec (corpus)");
    }
    test_registry();
    test_invalid_args();
    test_compress_ratio_sanity();
    test_enospc();
    test_corrupt();
    test_qipc_hostile();
    test_threads();
    test_zstd_zero_tail();
    test_draft();
    test_roundtrip();
    for (int k = 0; k < NKINDS; k++)
        free(data[k]);
    return sqz_test_done("test_codec");
}
