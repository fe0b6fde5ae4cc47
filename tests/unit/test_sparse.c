/* Unit tests of holes: the container's next stored block / hole
 * (sqz_ctr_next_block), reclaiming a punch's space (sqz_ctr_reclaim), a
 * block's stored bytes copied into another container (sqz_ctr_stored_get),
 * and the engine's SEEK_DATA / SEEK_HOLE (sqz_file_seek) and zeroing of
 * ranges (sqz_file_zero_range) against a model, across a reopen. */
#include "engine/engine.h"
#include "testutil.h"
#include "testparams.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *tmpdir;

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", tmpdir, name);
}

static sqz_ctr *create_ctr(const char *name, sqz_alg alg, int log2bs)
{
    char path[4096];
    path_of(path, sizeof path, name);
    sqz_params p = params_of(alg, log2bs);
    sqz_ctr *c = NULL;
    REQUIRE(sqz_ctr_create_path(path, &p, 0644, &c) == 0);
    return c;
}

static sqz_ctr *open_ctr(const char *name, int flags)
{
    char path[4096];
    path_of(path, sizeof path, name);
    sqz_ctr *c = NULL;
    REQUIRE(sqz_ctr_open_path(path, flags, &c) == 0);
    return c;
}

/* ---- format ---- */

static void test_next_block(void)
{
    sqz_ctr *c = create_ctr("next", SQZ_ALG_ZSTD, 12);
    enum { BS = 4096 };
    unsigned char *buf = malloc(3000 * BS);
    REQUIRE(buf);
    memset(buf, 0, 3000 * BS);
    /* data in blocks 1, 1030..2050 (past a whole chunk of 1024), 2999 */
    sqz_test_fill(buf + 1 * BS, BS, 2, 1);
    for (int b = 1030; b <= 2050; b++)
        buf[(size_t)b * BS + 7] = (unsigned char)(b | 1);
    buf[2999 * (size_t)BS + BS - 1] = 9;
    REQUIRE(sqz_ctr_pwrite(c, buf, 3000 * BS, 0) == 3000 * BS);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 0, 1), 1);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 1, 1), 1);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 2, 1), 1030);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 1031, 1), 1031);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 2051, 1), 2999);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 3000, 1), UINT64_MAX);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 0, 0), 0);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 1, 0), 2);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 1030, 0), 2051);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 1100, 0), 2051); /* a full chunk */
    CHECK_EQ_INT(sqz_ctr_next_block(c, 2999, 0), 3000); /* past the end */
    CHECK_EQ_INT(sqz_ctr_next_block(c, 1u << 30, 0), 1u << 30);
    /* hole entries committed over stored blocks: gone from both ways */
    sqz_prepared h[2] = {{.idx = 1030, .kind = 0}, {.idx = 1, .kind = 0}};
    REQUIRE(sqz_ctr_commit(c, h, 2, 3000 * BS) == 0);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 0, 1), 1031);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 1030, 0), 1030);
    REQUIRE(sqz_ctr_close(c) == 0);
    /* the same after a reopen (replay of the hole entries) */
    c = open_ctr("next", SQZ_OPEN_RDONLY);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 0, 1), 1031);
    CHECK_EQ_INT(sqz_ctr_next_block(c, 1030, 0), 1030);
    sqz_ctr_close(c);
    free(buf);
}

static void test_reclaim(void)
{
    sqz_ctr *c = create_ctr("reclaim", SQZ_ALG_ZSTD, 16);
    enum { BS = 65536, N = 64 };
    unsigned char *buf = malloc((size_t)N * BS);
    REQUIRE(buf);
    sqz_test_fill(buf, (size_t)N * BS, 0, 3); /* random: stored raw */
    REQUIRE(sqz_ctr_pwrite(c, buf, (size_t)N * BS, 0) == (ssize_t)N * BS);
    REQUIRE(sqz_ctr_sync(c, 1) == 0);
    /* nothing dead: not due */
    CHECK_EQ_INT(sqz_ctr_reclaim(c), 0);
    struct sqz_ctr_stat st0, st1;
    REQUIRE(sqz_ctr_stat(c, &st0) == 0);
    sqz_prepared h[40];
    for (int i = 0; i < 40; i++)
        h[i] = (sqz_prepared){.idx = (uint64_t)i + 10, .kind = 0};
    REQUIRE(sqz_ctr_commit(c, h, 40, (uint64_t)N * BS) == 0);
    CHECK_EQ_INT(sqz_ctr_reclaim(c), 1);
    REQUIRE(sqz_ctr_stat(c, &st1) == 0);
    CHECK(st1.backing_alloc + 39ull * BS <= st0.backing_alloc);
    CHECK_EQ_INT(st1.dead_bytes, 0);
    REQUIRE(sqz_ctr_close(c) == 0);
    c = open_ctr("reclaim", SQZ_OPEN_RDONLY);
    unsigned char *got = malloc((size_t)N * BS);
    REQUIRE(got);
    memset(buf + 10 * (size_t)BS, 0, 40 * (size_t)BS);
    CHECK(sqz_ctr_pread(c, got, (size_t)N * BS, 0) == (ssize_t)N * BS);
    CHECK(memcmp(got, buf, (size_t)N * BS) == 0);
    sqz_ctr_close(c);
    free(buf);
    free(got);
}

static void test_stored_get(void)
{
    sqz_ctr *a = create_ctr("sg-a", SQZ_ALG_ZSTD, 12);
    sqz_ctr *b = create_ctr("sg-b", SQZ_ALG_ZSTD, 12);
    enum { BS = 4096 };
    unsigned char buf[4 * BS], got[4 * BS];
    sqz_test_fill(buf, sizeof buf, 2, 5);
    memset(buf + BS, 0, BS);             /* block 1: a hole */
    sqz_test_fill(buf + 2 * BS, BS, 0, 6); /* block 2: raw */
    REQUIRE(sqz_ctr_pwrite(a, buf, sizeof buf, 0) == sizeof buf);
    sqz_prepared p[4];
    for (int i = 0; i < 4; i++)
        REQUIRE(sqz_ctr_stored_get(a, (uint64_t)i, (uint64_t)(3 - i), &p[i]) == 0);
    CHECK_EQ_INT(p[1].kind, 0);
    CHECK_EQ_INT(p[2].kind, 2);
    CHECK_EQ_INT(p[0].kind, 1);
    /* past the end: a hole */
    sqz_prepared past;
    REQUIRE(sqz_ctr_stored_get(a, 99, 0, &past) == 0);
    CHECK_EQ_INT(past.kind, 0);
    REQUIRE(sqz_ctr_commit(b, p, 4, sizeof buf) == 0);
    for (int i = 0; i < 4; i++)
        sqz_prepared_free(&p[i]);
    REQUIRE(sqz_ctr_close(b) == 0);
    b = open_ctr("sg-b", SQZ_OPEN_RDONLY);
    CHECK(sqz_ctr_pread(b, got, sizeof got, 0) == sizeof got);
    for (int i = 0; i < 4; i++)
        CHECK(memcmp(got + (size_t)(3 - i) * BS, buf + (size_t)i * BS, BS) == 0);
    CHECK(sqz_ctr_verify(b, NULL, NULL) == 0);
    sqz_ctr_close(b);
    sqz_ctr_close(a);
}

/* ---- engine ---- */

#define MODEL_MAX (1u << 20)

/* SEEK_DATA / SEEK_HOLE of the model at block granularity. */
static int model_seek(const unsigned char *m, uint64_t len, size_t bs,
                      uint64_t off, int hole, uint64_t *out)
{
    if (off >= len)
        return -ENXIO;
    for (uint64_t b = off / bs; b * bs < len; b++) {
        uint64_t e = (b + 1) * bs < len ? (b + 1) * bs : len;
        int data = 0;
        for (uint64_t i = b * bs; i < e && !data; i++)
            data = m[i] != 0;
        if (data != hole) {
            *out = b * bs > off ? b * bs : off;
            return 0;
        }
    }
    if (!hole)
        return -ENXIO;
    *out = len;
    return 0;
}

static int check_seeks(sqz_file *f, const unsigned char *m, uint64_t len,
                       size_t bs, uint64_t *rng, int op)
{
    int bad = 0;
    for (int k = 0; k < 6; k++) {
        uint64_t off = sqz_test_rand(rng) % (len + bs + 1);
        if (k == 0)
            off = 0;
        int hole = k & 1;
        uint64_t want = 0, got = 0;
        int wr = model_seek(m, len, bs, off, hole, &want);
        int gr = sqz_file_seek(f, off, hole, &got);
        if (wr != gr || (wr == 0 && want != got)) {
            fprintf(stderr, "op %d: seek %s from %llu: %d/%llu, want %d/%llu\n",
                    op, hole ? "hole" : "data", (unsigned long long)off, gr,
                    (unsigned long long)got, wr, (unsigned long long)want);
            bad++;
        }
    }
    return bad;
}

static void engine_model(sqz_alg alg, int log2bs, uint64_t seed, int nops)
{
    char path[4096];
    char name[64];
    snprintf(name, sizeof name, "emodel-%d-%d", (int)alg, log2bs);
    path_of(path, sizeof path, name);
    size_t bs = (size_t)1 << log2bs;
    sqz_engine_opts o = {.threads = 2, .dirty_bytes_file = 6 * bs,
                         .dirty_bytes_max = 10 * bs, .dirty_expire_ms = 50};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_params p = params_of(alg, log2bs);
    sqz_ctr *c = NULL;
    REQUIRE(sqz_ctr_create_path(path, &p, 0644, &c) == 0);
    sqz_file *f = NULL;
    REQUIRE(sqz_file_new(e, c, &f) == 0);
    unsigned char *m = calloc(1, MODEL_MAX);
    unsigned char *buf = malloc(MODEL_MAX);
    REQUIRE(m && buf);
    uint64_t len = 0, rng = seed, span = 12 * bs;
    int fails = 0;
    for (int op = 0; op < nops && fails < 5; op++) {
        unsigned r = (unsigned)(sqz_test_rand(&rng) % 100);
        uint64_t off = sqz_test_rand(&rng) % span;
        size_t n = (size_t)(sqz_test_rand(&rng) % (4 * bs)) + 1;
        if (sqz_test_rand(&rng) % 3 == 0) {
            off &= ~(uint64_t)(bs - 1);
            n = bs * (1 + sqz_test_rand(&rng) % 4);
        }
        if (r < 35) { /* write: data, or zeros now and then */
            if (sqz_test_rand(&rng) % 5 == 0)
                memset(buf, 0, n);
            else
                sqz_test_fill(buf, n, 2, sqz_test_rand(&rng));
            CHECK_EQ_INT(sqz_file_write(f, buf, n, off), n);
            memcpy(m + off, buf, n);
            if (off + n > len)
                len = off + n;
        } else if (r < 60) { /* punch or zero range */
            int keep = sqz_test_rand(&rng) % 2;
            CHECK_EQ_INT(sqz_file_zero_range(f, off, n, keep), 0);
            if (off < len)
                memset(m + off, 0, (size_t)((off + n < len ? off + n : len) - off));
            if (!keep && off + n > len)
                len = off + n;
        } else if (r < 70) { /* truncate */
            uint64_t t = sqz_test_rand(&rng) % span;
            CHECK_EQ_INT(sqz_file_truncate(f, t), 0);
            if (t < len)
                memset(m + t, 0, (size_t)(len - t));
            len = t;
        } else if (r < 78) {
            CHECK_EQ_INT(sqz_file_flush(f), 0);
        } else {
            fails += check_seeks(f, m, len, bs, &rng, op);
        }
        CHECK_EQ_INT(sqz_file_length(f), len);
        if (op % 25 == 0) {
            ssize_t got = sqz_file_read(f, buf, (size_t)len, 0);
            if (got != (ssize_t)len || memcmp(buf, m, (size_t)len) != 0) {
                fprintf(stderr, "op %d: content differs\n", op);
                fails++;
            }
        }
    }
    sqz_test_failures += fails;
    REQUIRE(sqz_file_close(f) == 0);
    /* reopened: the same content, the same answers */
    c = NULL;
    REQUIRE(sqz_ctr_open_path(path, SQZ_OPEN_RDWR, &c) == 0);
    REQUIRE(sqz_file_new(e, c, &f) == 0);
    CHECK_EQ_INT(sqz_file_length(f), len);
    CHECK(sqz_file_read(f, buf, (size_t)len, 0) == (ssize_t)len &&
          memcmp(buf, m, (size_t)len) == 0);
    for (int k = 0; k < 40; k++)
        sqz_test_failures += check_seeks(f, m, len, bs, &rng, -1);
    REQUIRE(sqz_file_close(f) == 0);
    sqz_engine_free(e);
    unlink(path);
    free(m);
    free(buf);
}

/* Whole blocks copied as stored between two engine files: the source's
 * uncommitted data is copied, the destination's dirty versions of those
 * blocks are replaced, its other dirty data kept. */
static void test_engine_copy_stored(void)
{
    char pa[4096], pb[4096];
    path_of(pa, sizeof pa, "cp-a");
    path_of(pb, sizeof pb, "cp-b");
    enum { BS = 4096, N = 8 };
    sqz_engine_opts o = {.threads = 2};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_params p = params_of(SQZ_ALG_ZSTD, 12);
    sqz_ctr *ca = NULL, *cb = NULL;
    REQUIRE(sqz_ctr_create_path(pa, &p, 0644, &ca) == 0);
    p.level = 1; /* another level: blocks are stored alike */
    REQUIRE(sqz_ctr_create_path(pb, &p, 0644, &cb) == 0);
    sqz_file *a, *b;
    REQUIRE(sqz_file_new(e, ca, &a) == 0);
    REQUIRE(sqz_file_new(e, cb, &b) == 0);
    unsigned char src[N * BS], dst[12 * BS], got[12 * BS];
    sqz_test_fill(src, sizeof src, 2, 7);
    memset(src + 3 * BS, 0, BS); /* a hole */
    CHECK_EQ_INT(sqz_file_write(a, src, sizeof src - 100, 0), sizeof src - 100);
    memset(src + sizeof src - 100, 0, 100);
    sqz_test_fill(dst, sizeof dst, 4, 8);
    CHECK_EQ_INT(sqz_file_write(b, dst, 10 * BS + 5, 0), 10 * BS + 5);
    memset(dst + 10 * BS + 5, 0, sizeof dst - 10 * BS - 5);
    /* a partial write: block 5 of b is dirty (the full ones are in
     * flight) */
    CHECK_EQ_INT(sqz_file_write(b, "zz", 2, 5 * BS + 7), 2);
    /* blocks 1..6 of a (uncommitted) over blocks 4..9 of b */
    sqz_prepared pr[6];
    REQUIRE(sqz_file_stored_get(a, 1, 6, 4, pr) == 0);
    CHECK_EQ_INT(pr[2].kind, 0);
    CHECK_EQ_INT(pr[0].idx, 4);
    /* past the length: refused */
    sqz_prepared past[8];
    CHECK_EQ_INT(sqz_file_stored_get(a, 1, 8, 0, past), -EINVAL);
    REQUIRE(sqz_file_stored_put(b, pr, 6) == 0);
    for (int i = 0; i < 6; i++)
        sqz_prepared_free(&pr[i]);
    memcpy(dst + 4 * BS, src + 1 * BS, 6 * BS);
    CHECK_EQ_INT(sqz_file_length(b), 10 * BS + 5);
    CHECK(sqz_file_read(b, got, sizeof got, 0) == 10 * BS + 5 &&
          memcmp(got, dst, 10 * BS + 5) == 0);
    uint64_t at = 0;
    CHECK(sqz_file_seek(b, 4 * BS, 1, &at) == 0 && at == 6 * BS);
    /* past the end of b: the length grows to cover the blocks */
    REQUIRE(sqz_file_stored_get(a, 0, 1, 11, pr) == 0);
    REQUIRE(sqz_file_stored_put(b, pr, 1) == 0);
    sqz_prepared_free(&pr[0]);
    memcpy(dst + 11 * BS, src, BS);
    CHECK_EQ_INT(sqz_file_length(b), 12 * BS);
    REQUIRE(sqz_file_close(b) == 0);
    REQUIRE(sqz_file_close(a) == 0);
    cb = NULL;
    REQUIRE(sqz_ctr_open_path(pb, SQZ_OPEN_RDONLY, &cb) == 0);
    CHECK(sqz_ctr_pread(cb, got, sizeof got, 0) == sizeof got &&
          memcmp(got, dst, sizeof got) == 0);
    CHECK(sqz_ctr_verify(cb, NULL, NULL) == 0);
    sqz_ctr_close(cb);
    sqz_engine_free(e);
    unlink(pa);
    unlink(pb);
}

/* Seeks racing a writer that writes and zeroes ranges of the same file
 * (run under TSan by tools/test.sh, stage unit-tsan): every answer lies in
 * [off, the file's reach], and the final content is the one the writer
 * thread made (only it changes the file). */
typedef struct race_arg {
    sqz_file *f;
    size_t bs;
    atomic_int stop;
    int bad;
} race_arg;

static void *race_seeker(void *p)
{
    race_arg *a = p;
    uint64_t rng = 99;
    while (!atomic_load(&a->stop)) {
        uint64_t off = sqz_test_rand(&rng) % (40 * a->bs), at = 0;
        int hole = (int)(sqz_test_rand(&rng) & 1);
        int rc = sqz_file_seek(a->f, off, hole, &at);
        if ((rc != 0 && rc != -ENXIO) || (rc == 0 && (at < off || at > 40 * a->bs)))
            a->bad++;
    }
    return NULL;
}

static void test_race(void)
{
    char path[4096];
    path_of(path, sizeof path, "race");
    size_t bs = 4096;
    sqz_engine_opts o = {.threads = 2, .dirty_bytes_file = 4 * bs,
                         .dirty_expire_ms = 5};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_params p = params_of(SQZ_ALG_LZ4, 12);
    sqz_ctr *c = NULL;
    REQUIRE(sqz_ctr_create_path(path, &p, 0644, &c) == 0);
    race_arg a = {.bs = bs};
    REQUIRE(sqz_file_new(e, c, &a.f) == 0);
    unsigned char *m = calloc(1, 40 * bs), *buf = malloc(40 * bs);
    REQUIRE(m && buf);
    uint64_t len = 0, rng = 5;
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, race_seeker, &a) == 0);
    for (int op = 0; op < 800; op++) {
        uint64_t off = sqz_test_rand(&rng) % (36 * bs);
        size_t n = (size_t)(sqz_test_rand(&rng) % (3 * bs)) + 1;
        if (sqz_test_rand(&rng) % 2) {
            sqz_test_fill(buf, n, 2, op);
            CHECK_EQ_INT(sqz_file_write(a.f, buf, n, off), n);
            memcpy(m + off, buf, n);
            if (off + n > len)
                len = off + n;
        } else {
            CHECK_EQ_INT(sqz_file_zero_range(a.f, off, n, 1), 0);
            if (off < len)
                memset(m + off, 0, (size_t)((off + n < len ? off + n : len) - off));
        }
    }
    atomic_store(&a.stop, 1);
    pthread_join(t, NULL);
    CHECK_EQ_INT(a.bad, 0);
    CHECK(sqz_file_read(a.f, buf, (size_t)len, 0) == (ssize_t)len &&
          memcmp(buf, m, (size_t)len) == 0);
    REQUIRE(sqz_file_close(a.f) == 0);
    sqz_engine_free(e);
    unlink(path);
    free(m);
    free(buf);
}

int main(void)
{
    tmpdir = sqz_test_tmpdir();
    REQUIRE(tmpdir);
    test_next_block();
    test_reclaim();
    test_stored_get();
    test_engine_copy_stored();
    test_race();
    engine_model(SQZ_ALG_ZSTD, 12, 1, 1500);
    engine_model(SQZ_ALG_LZ4, 14, 2, 1000);
    engine_model(SQZ_ALG_NONE, 12, 3, 800);
    char path[4096];
    const char *names[] = {"next", "reclaim", "sg-a", "sg-b"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        path_of(path, sizeof path, names[i]);
        unlink(path);
    }
    rmdir(tmpdir);
    free(tmpdir);
    return sqz_test_done("sparse");
}
