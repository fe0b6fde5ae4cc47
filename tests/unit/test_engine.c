/* Unit tests of the I/O engine: thread pool, block cache, and sqz_file
 * against real containers in a temporary directory. */
#include "engine/cache.h"
#include "engine/engine.h"
#include "engine/file_int.h"
#include "engine/pool.h"
#include "format/io.h"
#include "testutil.h"
#include "testparams.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#include <errno.h>
#include <sys/resource.h>
#include <signal.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char *tmpdir;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", tmpdir, name);
}

/* ================= pool ================= */

typedef struct pool_rec {
    atomic_int *counter;
    pthread_t who;
    int slow;
    int ran;
} pool_rec;

static void pool_job(void *arg)
{
    pool_rec *r = arg;
    if (r->slow)
        sleep_ms(2);
    r->who = pthread_self();
    r->ran++;
    atomic_fetch_add(r->counter, 1);
}

typedef struct pool_thread_arg {
    sqz_pool *p;
    int ok;
} pool_thread_arg;

static void *pool_submitter(void *arg)
{
    pool_thread_arg *a = arg;
    enum { N = 300 };
    atomic_int counter = 0;
    pool_rec recs[N];
    sqz_job jobs[N];
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < N; i++) {
            recs[i] = (pool_rec){.counter = &counter};
            jobs[i] = (sqz_job){pool_job, &recs[i]};
        }
        sqz_batch b;
        sqz_batch_init(&b, jobs, N);
        sqz_pool_run(a->p, &b);
        for (int i = 0; i < N; i++)
            if (recs[i].ran != 1)
                a->ok = 0;
    }
    if (atomic_load(&counter) != 5 * N)
        a->ok = 0;
    return NULL;
}

/* A job that itself runs a batch on the same pool: with one worker this
 * only terminates because a waiter runs its own batch's jobs. */
typedef struct nested_arg {
    sqz_pool *p;
    atomic_int *counter;
} nested_arg;

static void nested_job(void *arg)
{
    nested_arg *na = arg;
    pool_rec recs[8];
    sqz_job jobs[8];
    for (int i = 0; i < 8; i++) {
        recs[i] = (pool_rec){.counter = na->counter};
        jobs[i] = (sqz_job){pool_job, &recs[i]};
    }
    sqz_batch b;
    sqz_batch_init(&b, jobs, 8);
    sqz_pool_run(na->p, &b);
}

static void test_pool(void)
{
    sqz_pool *p;
    REQUIRE(sqz_pool_new(2, &p) == 0);
    CHECK_EQ_INT(sqz_pool_threads(p), 2);

    /* Slow jobs: more than one thread must take part. */
    enum { N = 64 };
    atomic_int counter = 0;
    pool_rec recs[N];
    sqz_job jobs[N];
    for (int i = 0; i < N; i++) {
        recs[i] = (pool_rec){.counter = &counter, .slow = 1};
        jobs[i] = (sqz_job){pool_job, &recs[i]};
    }
    sqz_batch b;
    sqz_batch_init(&b, jobs, N);
    sqz_pool_run(p, &b);
    CHECK_EQ_INT(atomic_load(&counter), N);
    int distinct = 1;
    for (int i = 1; i < N; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++)
            if (pthread_equal(recs[i].who, recs[j].who))
                seen = 1;
        if (!seen)
            distinct++;
        CHECK_EQ_INT(recs[i].ran, 1);
    }
    CHECK(distinct >= 2);

    /* Fire and forget, then poll. */
    atomic_store(&counter, 0);
    for (int i = 0; i < N; i++)
        recs[i] = (pool_rec){.counter = &counter, .slow = i < 4};
    sqz_batch_init(&b, jobs, N);
    sqz_pool_submit(p, &b);
    uint64_t t0 = now_ms();
    while (!sqz_pool_done(p, &b) && now_ms() - t0 < 10000)
        sleep_ms(1);
    CHECK(sqz_pool_done(p, &b));
    CHECK_EQ_INT(atomic_load(&counter), N);
    sqz_pool_wait(p, &b); /* finished: returns at once */

    /* sqz_pool_wait_done: all jobs finish, none of them on the caller
     * (the threads= bound of a blocked writer). */
    atomic_store(&counter, 0);
    for (int i = 0; i < N; i++)
        recs[i] = (pool_rec){.counter = &counter, .slow = i % 8 == 0};
    sqz_batch_init(&b, jobs, N);
    sqz_pool_submit(p, &b);
    sqz_pool_wait_done(p, &b);
    CHECK(sqz_pool_done(p, &b));
    CHECK_EQ_INT(atomic_load(&counter), N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(recs[i].ran, 1);
        CHECK(!pthread_equal(recs[i].who, pthread_self()));
    }

    /* An empty batch is done and waiting on it returns. */
    sqz_batch_init(&b, NULL, 0);
    CHECK(sqz_pool_done(p, &b));
    sqz_pool_run(p, &b);
    sqz_pool_wait_done(p, &b);

    /* Several submitters at once. */
    pthread_t th[4];
    pool_thread_arg ta[4];
    for (int i = 0; i < 4; i++) {
        ta[i] = (pool_thread_arg){p, 1};
        REQUIRE(pthread_create(&th[i], NULL, pool_submitter, &ta[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(ta[i].ok);
    }
    sqz_pool_free(p);

    /* Nested batches with a single worker do not deadlock. */
    REQUIRE(sqz_pool_new(1, &p) == 0);
    atomic_store(&counter, 0);
    nested_arg na[6];
    sqz_job nj[6];
    for (int i = 0; i < 6; i++) {
        na[i] = (nested_arg){p, &counter};
        nj[i] = (sqz_job){nested_job, &na[i]};
    }
    sqz_batch_init(&b, nj, 6);
    sqz_pool_run(p, &b);
    CHECK_EQ_INT(atomic_load(&counter), 48);
    sqz_pool_free(p);
    CHECK(sqz_pool_new(0, &p) == -EINVAL);
}

/* ================= cache ================= */

static sqz_cblock *mkblock(uint64_t fid, uint64_t idx, size_t size, int fill)
{
    sqz_cblock *b = sqz_cblock_new(size, 0);
    REQUIRE(b);
    b->fid = fid;
    b->idx = idx;
    memset(b->data, fill, size);
    return b;
}

static void test_cache(void)
{
    sqz_cache *c;
    REQUIRE(sqz_cache_new(3 * 4096, &c) == 0);
    for (int i = 0; i < 3; i++) {
        sqz_cblock *b = mkblock(1, (uint64_t)i, 4096, i);
        sqz_cache_insert(c, b);
        sqz_cblock_put(b);
    }
    CHECK_EQ_INT(sqz_cache_bytes(c), 3 * 4096);
    CHECK_EQ_INT(sqz_cache_count(c), 3);
    /* Touch 0: 1 becomes the least recently used. */
    sqz_cblock *g = sqz_cache_get(c, 1, 0);
    REQUIRE(g);
    CHECK_EQ_INT(g->data[100], 0);
    sqz_cblock_put(g);
    sqz_cblock *b = mkblock(1, 3, 4096, 3);
    sqz_cache_insert(c, b);
    sqz_cblock_put(b);
    CHECK_EQ_INT(sqz_cache_bytes(c), 3 * 4096);
    CHECK(!sqz_cache_contains(c, 1, 1));
    CHECK(sqz_cache_contains(c, 1, 0));
    CHECK(sqz_cache_contains(c, 1, 2));
    CHECK(sqz_cache_contains(c, 1, 3));

    /* A held block survives eviction (ASan would see a use after free). */
    g = sqz_cache_get(c, 1, 2);
    REQUIRE(g);
    for (int i = 10; i < 20; i++) {
        b = mkblock(2, (uint64_t)i, 4096, i);
        sqz_cache_insert(c, b);
        sqz_cblock_put(b);
        CHECK(sqz_cache_bytes(c) <= 3 * 4096);
    }
    CHECK(!sqz_cache_contains(c, 1, 2));
    CHECK_EQ_INT(g->data[4095], 2);
    sqz_cblock_put(g);

    /* Replacing a key keeps one entry with the new content. */
    b = mkblock(2, 19, 4096, 0x55);
    sqz_cache_insert(c, b);
    sqz_cblock_put(b);
    CHECK_EQ_INT(sqz_cache_count(c), 3);
    g = sqz_cache_get(c, 2, 19);
    REQUIRE(g);
    CHECK_EQ_INT(g->data[0], 0x55);
    sqz_cblock_put(g);

    /* Mixed sizes stay within the byte bound; too large is not kept. */
    b = mkblock(3, 0, 8192, 1);
    sqz_cache_insert(c, b);
    sqz_cblock_put(b);
    CHECK(sqz_cache_bytes(c) <= 3 * 4096);
    CHECK(sqz_cache_contains(c, 3, 0));
    b = mkblock(3, 1, 4 * 4096, 1);
    sqz_cache_insert(c, b);
    sqz_cblock_put(b);
    CHECK(!sqz_cache_contains(c, 3, 1));
    CHECK(sqz_cache_bytes(c) <= 3 * 4096);

    /* drop_file removes only that file's blocks from an index on. */
    sqz_cache_drop_file(c, 2, 0);
    CHECK(!sqz_cache_contains(c, 2, 19));
    CHECK(sqz_cache_contains(c, 3, 0));
    sqz_cache_drop(c, 3, 0);
    CHECK_EQ_INT(sqz_cache_count(c), 0);
    CHECK_EQ_INT(sqz_cache_bytes(c), 0);
    sqz_cache_free(c);

    /* Many entries (table growth), drop_file with a start index. */
    REQUIRE(sqz_cache_new(1000 * 64, &c) == 0);
    for (int i = 0; i < 1500; i++) {
        b = mkblock((uint64_t)(i % 3), (uint64_t)i, 64, i & 0xff);
        sqz_cache_insert(c, b);
        sqz_cblock_put(b);
    }
    CHECK_EQ_INT(sqz_cache_count(c), 1000);
    CHECK_EQ_INT(sqz_cache_bytes(c), 1000 * 64);
    CHECK(!sqz_cache_contains(c, 0, 0));
    CHECK(sqz_cache_contains(c, 0, 1497));
    sqz_cache_drop_file(c, 1, 1000);
    for (int i = 1000; i < 1500; i++)
        if (i % 3 == 1)
            CHECK(!sqz_cache_contains(c, 1, (uint64_t)i));
    CHECK(sqz_cache_contains(c, 2, 1499));
    sqz_cache_free(c);

    /* Capacity 0 caches nothing. */
    REQUIRE(sqz_cache_new(0, &c) == 0);
    b = mkblock(1, 1, 4096, 1);
    sqz_cache_insert(c, b);
    CHECK(!sqz_cache_contains(c, 1, 1));
    CHECK(sqz_cache_get(c, 1, 1) == NULL);
    CHECK_EQ_INT(sqz_cache_bytes(c), 0);
    sqz_cblock_put(b);
    sqz_cache_free(c);
}

/* ================= files on real containers ================= */

static sqz_file *create_file(sqz_engine *e, const char *path, sqz_alg alg,
                             int log2bs)
{
    sqz_params p = params_of(alg, log2bs);
    sqz_ctr *c = NULL;
    int rc = sqz_ctr_create_path(path, &p, 0644, &c);
    if (rc != 0)
        fprintf(stderr, "create %s: %s\n", path, strerror(-rc));
    REQUIRE(rc == 0);
    sqz_file *f = NULL;
    REQUIRE(sqz_file_new(e, c, &f) == 0);
    return f;
}

static sqz_file *open_file(sqz_engine *e, const char *path)
{
    sqz_ctr *c = NULL;
    int rc = sqz_ctr_open_path(path, SQZ_OPEN_RDWR, &c);
    if (rc != 0)
        fprintf(stderr, "open %s: %s\n", path, strerror(-rc));
    REQUIRE(rc == 0);
    sqz_file *f = NULL;
    REQUIRE(sqz_file_new(e, c, &f) == 0);
    return f;
}

/* Logical length as seen by a separate read-only container. */
static uint64_t backing_length(const char *path)
{
    sqz_ctr *c = NULL;
    if (sqz_ctr_open_path(path, SQZ_OPEN_RDONLY, &c) != 0)
        return UINT64_MAX;
    uint64_t len = sqz_ctr_length(c);
    sqz_ctr_close(c);
    return len;
}

/* Compare the whole content through a separate read-only container. */
static int backing_equals(const char *path, const unsigned char *model,
                          uint64_t len)
{
    sqz_ctr *c = NULL;
    if (sqz_ctr_open_path(path, SQZ_OPEN_RDONLY, &c) != 0)
        return 0;
    int ok = sqz_ctr_length(c) == len;
    unsigned char *buf = malloc(len ? len : 1);
    REQUIRE(buf);
    if (ok) {
        ssize_t r = sqz_ctr_pread(c, buf, len, 0);
        ok = r == (ssize_t)len && memcmp(buf, model, len) == 0;
    }
    free(buf);
    sqz_ctr_close(c);
    return ok;
}

static void fill_chunk(unsigned char *buf, size_t n, uint64_t *rng)
{
    int kind = (int)(sqz_test_rand(rng) % 5);
    sqz_test_fill(buf, n, kind, sqz_test_rand(rng));
}

#define MODEL_MAX (3u << 20)

/* Random operations against an in-memory model. */
static void random_ops(sqz_alg alg, int log2bs, size_t cache, uint64_t seed,
                       int nops)
{
    char path[4096];
    char name[64];
    snprintf(name, sizeof name, "model-%d-%d-%zu", (int)alg, log2bs, cache);
    path_of(path, sizeof path, name);
    size_t bs = (size_t)1 << log2bs;
    sqz_engine_opts o = {.threads = 2,
                         .cache_bytes = cache,
                         .dirty_bytes_file = 6 * bs,
                         .dirty_bytes_max = 10 * bs,
                         .dirty_expire_ms = 50,
                         .readahead_blocks = 3};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f = create_file(e, path, alg, log2bs);
    unsigned char *model = calloc(1, MODEL_MAX);
    unsigned char *buf = malloc(MODEL_MAX);
    REQUIRE(model && buf);
    uint64_t len = 0, rng = seed;
    uint64_t span = 10 * bs < MODEL_MAX / 2 ? 10 * bs : MODEL_MAX / 2;
    int fails = 0;
    for (int op = 0; op < nops && fails < 5; op++) {
        unsigned r = (unsigned)(sqz_test_rand(&rng) % 100);
        if (r < 35) { /* write */
            uint64_t off = sqz_test_rand(&rng) % (len + bs + 1);
            if (off > span)
                off = sqz_test_rand(&rng) % span;
            size_t n = (size_t)(sqz_test_rand(&rng) % (3 * bs)) + 1;
            if (sqz_test_rand(&rng) % 4 == 0) { /* block aligned */
                off &= ~(uint64_t)(bs - 1);
                n = bs * (1 + sqz_test_rand(&rng) % 3);
            }
            if (off + n > MODEL_MAX)
                continue;
            fill_chunk(buf, n, &rng);
            ssize_t w = sqz_file_write(f, buf, n, off);
            CHECK_EQ_INT(w, n);
            memcpy(model + off, buf, n);
            if (off + n > len)
                len = off + n;
        } else if (r < 65) { /* read */
            uint64_t off = sqz_test_rand(&rng) % (len + bs);
            size_t n = (size_t)(sqz_test_rand(&rng) % (3 * bs)) + 1;
            if (sqz_test_rand(&rng) % 3 == 0)
                off = sqz_test_rand(&rng) % 3 ? 0 : off; /* sequential-ish */
            ssize_t got = sqz_file_read(f, buf, n, off);
            size_t want = off >= len ? 0 : (size_t)(len - off < n ? len - off : n);
            if (got != (ssize_t)want || memcmp(buf, model + off, want) != 0) {
                fprintf(stderr, "op %d: read(%zu @ %llu) = %zd, want %zu\n",
                        op, n, (unsigned long long)off, got, want);
                fails++;
                sqz_test_failures++;
            }
            /* and continue sequentially a couple of times */
            for (int s = 0; s < 2 && got > 0; s++) {
                off += (uint64_t)got;
                got = sqz_file_read(f, buf, bs, off);
                want = off >= len ? 0 : (size_t)(len - off < bs ? len - off : bs);
                if (got != (ssize_t)want || memcmp(buf, model + off, want)) {
                    fails++;
                    sqz_test_failures++;
                }
            }
        } else if (r < 75) { /* append */
            size_t n = (size_t)(sqz_test_rand(&rng) % (2 * bs)) + 1;
            if (len + n > MODEL_MAX)
                continue;
            fill_chunk(buf, n, &rng);
            uint64_t at = 0;
            CHECK_EQ_INT(sqz_file_append(f, buf, n, &at), n);
            CHECK_EQ_INT(at, len);
            memcpy(model + len, buf, n);
            len += n;
        } else if (r < 85) { /* truncate */
            uint64_t nl = sqz_test_rand(&rng) % (len + 2 * bs + 1);
            if (nl > MODEL_MAX)
                continue;
            CHECK_EQ_INT(sqz_file_truncate(f, nl), 0);
            if (nl > len)
                memset(model + len, 0, nl - len);
            else
                memset(model + nl, 0, len - nl);
            len = nl;
        } else if (r < 90) {
            CHECK_EQ_INT(sqz_file_flush(f), 0);
            CHECK(!sqz_file_dirty(f));
        } else if (r < 94) {
            CHECK_EQ_INT(sqz_file_fsync(f, (int)(r & 1)), 0);
            CHECK(backing_equals(path, model, len));
        } else if (r < 97) {
            CHECK_EQ_INT(sqz_file_close(f), 0);
            CHECK(backing_equals(path, model, len));
            f = open_file(e, path);
        } else {
            sqz_file_drop_cache(f);
        }
        CHECK_EQ_INT(sqz_file_length(f), len);
        sqz_stats st;
        sqz_engine_stats(e, &st);
        CHECK(st.cache_bytes <= (cache == SQZ_ENGINE_CACHE_OFF ? 0
                                 : cache ? cache
                                         : (size_t)256 << 20));
    }
    /* Full read back, then through a fresh container. */
    ssize_t got = sqz_file_read(f, buf, MODEL_MAX, 0);
    CHECK_EQ_INT(got, len);
    CHECK(got >= 0 && memcmp(buf, model, (size_t)got) == 0);
    struct sqz_ctr_stat cs;
    CHECK_EQ_INT(sqz_file_stat(f, &cs), 0);
    CHECK_EQ_INT(cs.length, len);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    CHECK(backing_equals(path, model, len));
    sqz_stats st;
    sqz_engine_stats(e, &st);
    CHECK_EQ_INT(st.dirty_bytes, 0);
    CHECK(st.blocks_compressed > 0);
    sqz_engine_free(e);
    free(model);
    free(buf);
    unlink(path);
}

/* ---- concurrency ---- */

typedef struct conc {
    sqz_file *f;
    size_t bs;
    uint64_t nblocks;     /* writer owns blocks [0, nblocks/2) */
    const unsigned char *fixed; /* content of the readers' half */
    atomic_int stop;
    atomic_int errors;
    uint64_t seed;
} conc;

/* Writer: rewrites whole blocks of its half with a uniform byte. */
static void *conc_writer(void *arg)
{
    conc *c = arg;
    unsigned char *buf = malloc(c->bs);
    REQUIRE(buf);
    uint64_t rng = c->seed;
    for (int i = 0; i < 400; i++) {
        uint64_t blk = sqz_test_rand(&rng) % (c->nblocks / 2);
        memset(buf, (int)(1 + sqz_test_rand(&rng) % 250), c->bs);
        if (sqz_file_write(c->f, buf, c->bs, blk * c->bs) != (ssize_t)c->bs)
            atomic_fetch_add(&c->errors, 1);
        if (i % 50 == 0 && sqz_file_flush(c->f) != 0)
            atomic_fetch_add(&c->errors, 1);
    }
    free(buf);
    atomic_store(&c->stop, 1);
    return NULL;
}

static void *conc_reader(void *arg)
{
    conc *c = arg;
    unsigned char *buf = malloc(3 * c->bs);
    REQUIRE(buf);
    uint64_t rng = c->seed ^ (uint64_t)(uintptr_t)&buf;
    uint64_t half = c->nblocks / 2;
    while (!atomic_load(&c->stop)) {
        /* the writer's half: every block is uniform (no torn blocks) */
        uint64_t blk = sqz_test_rand(&rng) % half;
        if (sqz_file_read(c->f, buf, c->bs, blk * c->bs) != (ssize_t)c->bs)
            atomic_fetch_add(&c->errors, 1);
        for (size_t i = 1; i < c->bs; i++)
            if (buf[i] != buf[0]) {
                atomic_fetch_add(&c->errors, 1);
                break;
            }
        /* the fixed half, sequential runs */
        uint64_t off = half * c->bs + sqz_test_rand(&rng) % (half * c->bs);
        for (int s = 0; s < 3; s++) {
            size_t n = 1 + (size_t)(sqz_test_rand(&rng) % (2 * c->bs));
            uint64_t end = c->nblocks * c->bs;
            size_t want = off >= end ? 0 : (size_t)(end - off < n ? end - off : n);
            ssize_t got = sqz_file_read(c->f, buf, n, off);
            if (got != (ssize_t)want ||
                memcmp(buf, c->fixed + (off - half * c->bs), want) != 0)
                atomic_fetch_add(&c->errors, 1);
            off += want;
        }
    }
    free(buf);
    return NULL;
}

static void test_concurrent_rw(int log2bs)
{
    char path[4096];
    path_of(path, sizeof path, "conc");
    size_t bs = (size_t)1 << log2bs;
    sqz_engine_opts o = {.threads = 2, .cache_bytes = 8 * bs,
                         .dirty_bytes_file = 4 * bs, .dirty_expire_ms = 20};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f = create_file(e, path, SQZ_ALG_LZ4, log2bs);
    uint64_t nb = 32;
    unsigned char *init = malloc(nb * bs);
    REQUIRE(init);
    memset(init, 7, nb / 2 * bs);
    sqz_test_fill(init + nb / 2 * bs, nb / 2 * bs, 2, 42);
    CHECK_EQ_INT(sqz_file_write(f, init, nb * bs, 0), nb * bs);
    CHECK_EQ_INT(sqz_file_flush(f), 0);
    conc c = {.f = f, .bs = bs, .nblocks = nb, .fixed = init + nb / 2 * bs,
              .seed = 99};
    pthread_t w, r[3];
    REQUIRE(pthread_create(&w, NULL, conc_writer, &c) == 0);
    for (int i = 0; i < 3; i++)
        REQUIRE(pthread_create(&r[i], NULL, conc_reader, &c) == 0);
    pthread_join(w, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(r[i], NULL);
    CHECK_EQ_INT(atomic_load(&c.errors), 0);
    CHECK_EQ_INT(sqz_file_length(f), nb * bs);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);
    free(init);
    unlink(path);
}

typedef struct sep_arg {
    sqz_engine *e;
    int id;
    int ok;
} sep_arg;

static void *separate_writer(void *arg)
{
    sep_arg *a = arg;
    char path[4096], name[32];
    snprintf(name, sizeof name, "sep%d", a->id);
    path_of(path, sizeof path, name);
    sqz_file *f = create_file(a->e, path, a->id ? SQZ_ALG_ZSTD : SQZ_ALG_GZIP,
                              14);
    enum { SZ = 512 * 1024 };
    unsigned char *model = calloc(1, SZ), *buf = malloc(SZ);
    REQUIRE(model && buf);
    uint64_t rng = (uint64_t)a->id * 7777 + 1, len = 0;
    for (int i = 0; i < 300; i++) {
        uint64_t off = sqz_test_rand(&rng) % (SZ - 40000);
        size_t n = 1 + (size_t)(sqz_test_rand(&rng) % 40000);
        fill_chunk(buf, n, &rng);
        if (sqz_file_write(f, buf, n, off) != (ssize_t)n)
            a->ok = 0;
        memcpy(model + off, buf, n);
        if (off + n > len)
            len = off + n;
    }
    if (sqz_file_read(f, buf, SZ, 0) != (ssize_t)len ||
        memcmp(buf, model, len) != 0)
        a->ok = 0;
    if (sqz_file_close(f) != 0 || !backing_equals(path, model, len))
        a->ok = 0;
    free(model);
    free(buf);
    unlink(path);
    return NULL;
}

static void test_separate_writers(void)
{
    sqz_engine_opts o = {.threads = 2, .cache_bytes = 1 << 20,
                         .dirty_bytes_file = 256 * 1024,
                         .dirty_bytes_max = 384 * 1024};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    pthread_t th[3];
    sep_arg a[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (sep_arg){e, i, 1};
        REQUIRE(pthread_create(&th[i], NULL, separate_writer, &a[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK(a[i].ok);
    }
    sqz_stats st;
    sqz_engine_stats(e, &st);
    CHECK_EQ_INT(st.dirty_bytes, 0);
    sqz_engine_free(e);
}

/* ---- appenders ---- */

typedef struct app_arg {
    sqz_file *f;
    uint32_t id;
    int ok;
} app_arg;

enum { APPENDS = 300 };

/* Record: u32 id, u32 seq, u32 len (total), then bytes (id*31+seq+i). */
static void *appender(void *arg)
{
    app_arg *a = arg;
    unsigned char buf[6000];
    uint64_t rng = a->id + 5;
    for (uint32_t seq = 0; seq < APPENDS; seq++) {
        uint32_t len = 12 + (uint32_t)(sqz_test_rand(&rng) % 5000);
        memcpy(buf, &a->id, 4);
        memcpy(buf + 4, &seq, 4);
        memcpy(buf + 8, &len, 4);
        for (uint32_t i = 12; i < len; i++)
            buf[i] = (unsigned char)(a->id * 31 + seq + i);
        uint64_t at;
        if (sqz_file_append(a->f, buf, len, &at) != (ssize_t)len)
            a->ok = 0;
    }
    return NULL;
}

static void test_appenders(void)
{
    char path[4096];
    path_of(path, sizeof path, "append");
    sqz_engine_opts o = {.threads = 2, .dirty_bytes_file = 64 * 1024};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f = create_file(e, path, SQZ_ALG_SNAPPY, 12);
    pthread_t th[2];
    app_arg a[2];
    for (uint32_t i = 0; i < 2; i++) {
        a[i] = (app_arg){f, i + 1, 1};
        REQUIRE(pthread_create(&th[i], NULL, appender, &a[i]) == 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK(a[i].ok);
    }
    CHECK_EQ_INT(sqz_file_close(f), 0);
    f = open_file(e, path);
    uint64_t len = sqz_file_length(f);
    unsigned char *all = malloc(len);
    REQUIRE(all);
    CHECK_EQ_INT(sqz_file_read(f, all, len, 0), len);
    uint32_t next[3] = {0, 0, 0};
    uint64_t pos = 0;
    int bad = 0;
    while (pos + 12 <= len && !bad) {
        uint32_t id, seq, rl;
        memcpy(&id, all + pos, 4);
        memcpy(&seq, all + pos + 4, 4);
        memcpy(&rl, all + pos + 8, 4);
        if (id < 1 || id > 2 || seq != next[id] || rl < 12 || pos + rl > len) {
            bad = 1;
            break;
        }
        for (uint32_t i = 12; i < rl; i++)
            if (all[pos + i] != (unsigned char)(id * 31 + seq + i))
                bad = 1;
        next[id]++;
        pos += rl;
    }
    CHECK(!bad);
    CHECK_EQ_INT(pos, len);
    CHECK_EQ_INT(next[1], APPENDS);
    CHECK_EQ_INT(next[2], APPENDS);
    free(all);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);
    unlink(path);
}

/* ---- read path: cold read, read-ahead, damaged block ---- */

/* A file of nb blocks of text (distinct per block), written and closed. */
static unsigned char *make_text_file(const char *path, int log2bs, uint64_t nb)
{
    size_t bs = (size_t)1 << log2bs;
    unsigned char *data = malloc(nb * bs);
    REQUIRE(data);
    for (uint64_t i = 0; i < nb; i++)
        sqz_test_fill(data + i * bs, bs, 2, 1000 + i);
    sqz_engine *e;
    REQUIRE(sqz_engine_new(NULL, &e) == 0);
    sqz_file *f = create_file(e, path, SQZ_ALG_ZSTD, log2bs);
    CHECK_EQ_INT(sqz_file_write(f, data, nb * bs, 0), nb * bs);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);
    return data;
}

/* A sequential reader racing the read-ahead never decompresses a block
 * twice: a request that needs a block the read-ahead is still working on
 * waits for it instead of decompressing it again. */
static void test_readahead_no_double_work(void)
{
    char path[4096];
    path_of(path, sizeof path, "ra2");
    const int log2bs = 16;
    const size_t bs = (size_t)1 << log2bs;
    const uint64_t nb = 256;
    unsigned char *data = make_text_file(path, log2bs, nb);
    unsigned char *buf = malloc(16 * bs);
    REQUIRE(buf);
    const size_t reads[] = {bs / 2, bs, 3 * bs, 8 * bs, 16 * bs};
    for (size_t k = 0; k < sizeof reads / sizeof reads[0]; k++) {
        sqz_engine_opts o = {.threads = 2, .readahead_blocks = 4};
        sqz_engine *e;
        REQUIRE(sqz_engine_new(&o, &e) == 0);
        sqz_file *f = open_file(e, path);
        for (uint64_t off = 0; off < nb * bs; off += reads[k]) {
            size_t n = reads[k];
            if (n > nb * bs - off)
                n = (size_t)(nb * bs - off);
            CHECK_EQ_INT(sqz_file_read(f, buf, n, off), n);
            CHECK(memcmp(buf, data + off, n) == 0);
        }
        CHECK_EQ_INT(sqz_file_close(f), 0); /* waits for the read-ahead */
        sqz_stats st;
        sqz_engine_stats(e, &st);
        if (st.blocks_decompressed != nb)
            fprintf(stderr, "reads of %zu bytes: %llu blocks decompressed for %llu\n",
                    reads[k], (unsigned long long)st.blocks_decompressed,
                    (unsigned long long)nb);
        CHECK_EQ_INT(st.blocks_decompressed, nb);
        sqz_engine_free(e);
    }
    /* A cache too small to hold a block: nothing is shared (no waiting
     * for a block that cannot be kept), reads stay exact. */
    {
        sqz_engine_opts o = {.threads = 2, .readahead_blocks = 4,
                             .cache_bytes = bs / 2};
        sqz_engine *e;
        REQUIRE(sqz_engine_new(&o, &e) == 0);
        sqz_file *f = open_file(e, path);
        for (uint64_t off = 0; off < nb * bs; off += 3 * bs) {
            size_t n = 3 * bs;
            if (n > nb * bs - off)
                n = (size_t)(nb * bs - off);
            CHECK_EQ_INT(sqz_file_read(f, buf, n, off), n);
            CHECK(memcmp(buf, data + off, n) == 0);
        }
        CHECK_EQ_INT(sqz_file_close(f), 0);
        sqz_engine_free(e);
    }
    free(buf);
    free(data);
    unlink(path);
}

static void test_cold_read_and_readahead(void)
{
    char path[4096];
    path_of(path, sizeof path, "ra");
    const int log2bs = 17;
    const size_t bs = (size_t)1 << log2bs;
    const uint64_t nb = 16;
    unsigned char *data = make_text_file(path, log2bs, nb);
    unsigned char *buf = malloc(bs);
    REQUIRE(buf);

    sqz_engine_opts o = {.threads = 2, .readahead_blocks = 4};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f = open_file(e, path);
    sqz_stats s0, s1;
    sqz_engine_stats(e, &s0);
    CHECK_EQ_INT(sqz_file_read(f, buf, 4096, 5 * bs + 1000), 4096);
    CHECK(memcmp(buf, data + 5 * bs + 1000, 4096) == 0);
    sleep_ms(50);
    sqz_engine_stats(e, &s1);
    CHECK_EQ_INT(s1.blocks_decompressed - s0.blocks_decompressed, 1);
    CHECK_EQ_INT(s1.cache_misses - s0.cache_misses, 1);
    CHECK(s1.bytes_decompressed - s0.bytes_decompressed == bs);
    CHECK(s1.backing_bytes_read > s0.backing_bytes_read);
    CHECK(s1.backing_bytes_read - s0.backing_bytes_read < bs);
    /* The same range again: a cache hit, nothing decompressed. */
    CHECK_EQ_INT(sqz_file_read(f, buf, 4096, 5 * bs), 4096);
    sqz_engine_stats(e, &s0);
    CHECK_EQ_INT(s0.blocks_decompressed, s1.blocks_decompressed);
    CHECK_EQ_INT(s0.cache_hits - s1.cache_hits, 1);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);

    /* Sequential reader: after the second read, blocks 2..5 are
     * decompressed in the background and the next reads hit the cache. */
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    f = open_file(e, path);
    sqz_engine_stats(e, &s0);
    CHECK_EQ_INT(sqz_file_read(f, buf, bs, 0), bs);
    CHECK_EQ_INT(sqz_file_read(f, buf, bs, bs), bs);
    CHECK(memcmp(buf, data + bs, bs) == 0);
    uint64_t t0 = now_ms();
    do {
        sleep_ms(5);
        sqz_engine_stats(e, &s1);
    } while (s1.blocks_decompressed - s0.blocks_decompressed < 6 &&
             now_ms() - t0 < 5000);
    CHECK_EQ_INT(s1.blocks_decompressed - s0.blocks_decompressed, 6);
    for (uint64_t i = 2; i < 6; i++) {
        CHECK_EQ_INT(sqz_file_read(f, buf, bs, i * bs), bs);
        CHECK(memcmp(buf, data + i * bs, bs) == 0);
        sleep_ms(20);
    }
    sqz_engine_stats(e, &s0);
    CHECK_EQ_INT(s0.cache_hits - s1.cache_hits, 4);
    /* A reader that takes its time between reads (so the background
     * work is done: wait until the next block has been decompressed, not
     * a fixed time, which a loaded machine may not honour) finds every
     * further block in the cache. */
    for (uint64_t i = 6; i < nb; i++) {
        CHECK_EQ_INT(sqz_file_read(f, buf, bs, i * bs), bs);
        CHECK(memcmp(buf, data + i * bs, bs) == 0);
        uint64_t want = i + 2 < nb ? i + 2 : nb, w0 = now_ms();
        sqz_stats sw;
        do {
            sleep_ms(2);
            sqz_engine_stats(e, &sw);
        } while (sw.blocks_decompressed < want && now_ms() - w0 < 10000);
    }
    CHECK_EQ_INT(sqz_file_read(f, buf, bs, nb * bs), 0);
    sqz_engine_stats(e, &s1);
    CHECK_EQ_INT(s1.cache_hits - s0.cache_hits, nb - 6);
    CHECK_EQ_INT(s1.blocks_decompressed, nb);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);

    /* Read-ahead off: only what is read is decompressed. */
    o.readahead_blocks = -1;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    f = open_file(e, path);
    for (uint64_t i = 0; i < 4; i++)
        CHECK_EQ_INT(sqz_file_read(f, buf, bs, i * bs), bs);
    sleep_ms(30);
    sqz_engine_stats(e, &s1);
    CHECK_EQ_INT(s1.blocks_decompressed, 4);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);

    /* No cache: still correct, every read decompresses. */
    o.cache_bytes = SQZ_ENGINE_CACHE_OFF;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    f = open_file(e, path);
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(sqz_file_read(f, buf, 4096, 3 * bs), 4096);
        CHECK(memcmp(buf, data + 3 * bs, 4096) == 0);
    }
    sqz_engine_stats(e, &s1);
    CHECK_EQ_INT(s1.blocks_decompressed, 2);
    CHECK_EQ_INT(s1.cache_bytes, 0);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);

    free(buf);
    free(data);
    unlink(path);
}

static void test_damaged_block(void)
{
    char path[4096];
    path_of(path, sizeof path, "damaged");
    const int log2bs = 12;
    const size_t bs = 4096;
    const uint64_t nb = 6;
    unsigned char *data = make_text_file(path, log2bs, nb);

    /* Locate block 3's stored bytes: prepare the same data again (the
     * codecs are deterministic) and find them in the backing file. */
    sqz_ctr *c;
    REQUIRE(sqz_ctr_open_path(path, SQZ_OPEN_RDWR, &c) == 0);
    /* A checkpoint, so that opening trusts the index instead of replaying
     * (and checking) the data record. */
    REQUIRE(sqz_ctr_checkpoint(c) == 0);
    sqz_prepared p = {0};
    REQUIRE(sqz_ctr_prepare(c, 3, data + 3 * bs, &p) == 0);
    REQUIRE(sqz_ctr_close(c) == 0);
    REQUIRE(p.kind == 1 && p.stored && p.stored_len > 16);
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    struct stat stt;
    REQUIRE(fstat(fd, &stt) == 0);
    unsigned char *file = malloc((size_t)stt.st_size);
    REQUIRE(file);
    REQUIRE(pread(fd, file, (size_t)stt.st_size, 0) == stt.st_size);
    unsigned char *hit = memmem(file, (size_t)stt.st_size, p.stored,
                                p.stored_len);
    REQUIRE(hit);
    off_t at = (off_t)(hit - file) + (off_t)(p.stored_len / 2);
    unsigned char byte = (unsigned char)(file[at] ^ 0x5a);
    REQUIRE(pwrite(fd, &byte, 1, at) == 1);
    close(fd);
    free(file);
    sqz_prepared_free(&p);

    sqz_engine *e;
    REQUIRE(sqz_engine_new(NULL, &e) == 0);
    sqz_ctr *rc;
    REQUIRE(sqz_ctr_open_path(path, SQZ_OPEN_RDONLY, &rc) == 0);
    sqz_file *f;
    REQUIRE(sqz_file_new(e, rc, &f) == 0);
    unsigned char buf[3 * 4096];
    CHECK_EQ_INT(sqz_file_read(f, buf, bs, 3 * bs), -EIO);
    CHECK_EQ_INT(sqz_file_read(f, buf, 100, 3 * bs + 4000), -EIO);
    for (uint64_t i = 0; i < nb; i++) {
        if (i == 3)
            continue;
        CHECK_EQ_INT(sqz_file_read(f, buf, bs, i * bs), bs);
        CHECK(memcmp(buf, data + i * bs, bs) == 0);
    }
    /* A read spanning good blocks and the damaged one fails as a whole:
     * never a short read inside the file (FUSE takes it for EOF). */
    CHECK_EQ_INT(sqz_file_read(f, buf, 3 * bs, 1 * bs + 10), -EIO);
    /* Again, with block 2 cached now; the good blocks alone still read. */
    CHECK_EQ_INT(sqz_file_read(f, buf, 2 * bs, 2 * bs), -EIO);
    CHECK_EQ_INT(sqz_file_read(f, buf, 2 * bs - 10, 1 * bs + 10), 2 * bs - 10);
    CHECK(memcmp(buf, data + bs + 10, 2 * bs - 10) == 0);
    CHECK_EQ_INT(sqz_file_read(f, buf, bs, 3 * bs), -EIO);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);
    free(data);
    unlink(path);
}

/* ---- runs: consecutive blocks read with one backing read ---- */

/* Where block idx's stored bytes are in the backing file (found by
 * preparing the same data again: the codecs are deterministic); with
 * flip, a byte in their middle is changed. A checkpoint first, so that
 * opening trusts the index instead of checking the record. */
static off_t stored_at(const char *path, const unsigned char *data, size_t bs,
                       uint64_t idx, int flip)
{
    sqz_ctr *c;
    REQUIRE(sqz_ctr_open_path(path, SQZ_OPEN_RDWR, &c) == 0);
    REQUIRE(sqz_ctr_checkpoint(c) == 0);
    sqz_prepared p = {0};
    REQUIRE(sqz_ctr_prepare(c, idx, data + idx * bs, &p) == 0);
    REQUIRE(sqz_ctr_close(c) == 0);
    REQUIRE(p.kind == 1 && p.stored && p.stored_len > 16);
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    struct stat stt;
    REQUIRE(fstat(fd, &stt) == 0);
    unsigned char *file = malloc((size_t)stt.st_size);
    REQUIRE(file);
    REQUIRE(pread(fd, file, (size_t)stt.st_size, 0) == stt.st_size);
    unsigned char *hit = memmem(file, (size_t)stt.st_size, p.stored,
                                p.stored_len);
    REQUIRE(hit);
    off_t at = (off_t)(hit - file) + (off_t)(p.stored_len / 2);
    unsigned char byte = (unsigned char)(file[at] ^ 0x5a);
    if (flip)
        REQUIRE(pwrite(fd, &byte, 1, at) == 1);
    close(fd);
    free(file);
    sqz_prepared_free(&p);
    return at;
}

/* The system calls, with the backing reads counted. */
typedef struct counting_io {
    atomic_ulong preads;
    atomic_ulong bytes;
    int fd;                  /* the container's (not its own) */
    off_t bad_at;            /* >= 0: a read covering it fails (-EIO) */
} counting_io;

static ssize_t counting_pread(void *ctx, int fd, void *buf, size_t n,
                              uint64_t off)
{
    counting_io *ci = ctx;
    atomic_fetch_add(&ci->preads, 1);
    atomic_fetch_add(&ci->bytes, n);
    if (ci->bad_at >= 0 && (uint64_t)ci->bad_at >= off &&
        (uint64_t)ci->bad_at < off + n)
        return -EIO;
    return sqz_io_syscalls.pread(sqz_io_syscalls.ctx, fd, buf, n, off);
}

static sqz_file *open_counted(sqz_engine *e, const char *path, counting_io *ci)
{
    sqz_io io = sqz_io_syscalls;
    io.pread = counting_pread;
    io.ctx = ci;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    sqz_ctr *c = NULL;
    REQUIRE(sqz_ctr_open_fd_io(fd, SQZ_OPEN_RDONLY, path, &io, &c) == 0);
    ci->fd = fd;
    sqz_file *f = NULL;
    REQUIRE(sqz_file_new(e, c, &f) == 0);
    atomic_store(&ci->preads, 0);
    atomic_store(&ci->bytes, 0);
    return f;
}

/* A sequential reader: blocks stored one after the other come from far
 * fewer backing reads than blocks (a read's blocks and each read-ahead
 * window, growing while the reader stays sequential, are runs),
 * the bytes are right across block boundaries, and a damaged block inside
 * a run fails only the reads that touch it. A lone random read reads one
 * block, with one backing read. */
static void test_runs(void)
{
    char path[4096];
    path_of(path, sizeof path, "runs");
    const int log2bs = 12;
    const size_t bs = (size_t)1 << log2bs;
    const uint64_t nb = 256, bad = 37;
    unsigned char *data = make_text_file(path, log2bs, nb);
    unsigned char *buf = malloc(64 * bs);
    REQUIRE(buf);
    sqz_engine_opts o = {.threads = 2, .readahead_blocks = 4};
    counting_io ci = {.bad_at = -1};

    /* Clean file: reads of 3 blocks + 100 bytes, never block-aligned. */
    for (int ra = 0; ra < 2; ra++) {
        o.readahead_blocks = ra ? 4 : -1;
        sqz_engine *e;
        REQUIRE(sqz_engine_new(&o, &e) == 0);
        sqz_file *f = open_counted(e, path, &ci);
        const size_t step = 3 * bs + 100;
        for (uint64_t off = 0; off < nb * bs; off += step) {
            size_t n = step < nb * bs - off ? step : (size_t)(nb * bs - off);
            CHECK_EQ_INT(sqz_file_read(f, buf, n, off), n);
            CHECK(memcmp(buf, data + off, n) == 0);
        }
        CHECK_EQ_INT(sqz_file_close(f), 0);
        close(ci.fd);
        sqz_stats st;
        sqz_engine_stats(e, &st);
        unsigned long reads = atomic_load(&ci.preads);
        if (ra && reads > nb / 8)
            fprintf(stderr, "sequential read: %lu backing reads for %llu blocks\n",
                    reads, (unsigned long long)nb);
        /* with read-ahead: windows that grow up to SQZ_RUN_MAX_BLOCKS
         * blocks, claimed when issued (the reader waits for them instead
         * of reading them again); without: the 4 blocks each read
         * touches, at once */
        CHECK(reads <= (ra ? nb / 8 : nb / 3 + 1));
        CHECK_EQ_INT(st.blocks_decompressed, nb);
        sqz_engine_free(e);
    }

    /* A small cache (16 blocks): the window stays within a sixteenth of
     * it, so nothing read ahead is evicted before the reader gets to it
     * (every block is decompressed once). */
    {
        sqz_engine_opts so = {.threads = 2, .readahead_blocks = 4,
                              .cache_bytes = 16 * bs};
        sqz_engine *e;
        REQUIRE(sqz_engine_new(&so, &e) == 0);
        sqz_file *f = open_counted(e, path, &ci);
        for (uint64_t i = 0; i < nb; i++) {
            CHECK_EQ_INT(sqz_file_read(f, buf, bs, i * bs), bs);
            CHECK(memcmp(buf, data + i * bs, bs) == 0);
        }
        CHECK_EQ_INT(sqz_file_close(f), 0);
        close(ci.fd);
        sqz_stats st;
        sqz_engine_stats(e, &st);
        CHECK_EQ_INT(st.blocks_decompressed, nb);
        sqz_engine_free(e);
    }

    /* A random 4 KiB read: one block, one backing read, no read-ahead. */
    {
        sqz_engine *e;
        o.readahead_blocks = 4;
        REQUIRE(sqz_engine_new(&o, &e) == 0);
        sqz_file *f = open_counted(e, path, &ci);
        CHECK_EQ_INT(sqz_file_read(f, buf, 4096, 100 * bs), 4096);
        CHECK(memcmp(buf, data + 100 * bs, 4096) == 0);
        CHECK_EQ_INT(sqz_file_close(f), 0);
        close(ci.fd);
        CHECK_EQ_INT(atomic_load(&ci.preads), 1);
        CHECK(atomic_load(&ci.bytes) < bs);
        sqz_engine_free(e);
    }

    /* A bad spot of the backing file under block `bad` (its reads fail),
     * then that block damaged (its checksum fails), inside the runs: only
     * the reads that touch it fail. */
    ci.bad_at = stored_at(path, data, bs, bad, 0);
    for (int k = 0; k < 4; k++) {
        int ra = k & 1;
        if (k == 2) {
            ci.bad_at = -1;
            stored_at(path, data, bs, bad, 1);
        }
        o.readahead_blocks = ra ? 4 : -1;
        sqz_engine *e;
        REQUIRE(sqz_engine_new(&o, &e) == 0);
        sqz_file *f = open_counted(e, path, &ci);
        const size_t step = 3 * bs + 100;
        for (uint64_t off = 0; off < nb * bs; off += step) {
            size_t n = step < nb * bs - off ? step : (size_t)(nb * bs - off);
            int hits = off < (bad + 1) * bs && off + n > bad * bs;
            ssize_t r = sqz_file_read(f, buf, n, off);
            if (hits) {
                CHECK_EQ_INT(r, -EIO);
            } else {
                CHECK_EQ_INT(r, n);
                CHECK(memcmp(buf, data + off, n) == 0);
            }
        }
        /* its neighbours, whole, and every byte but the damaged block's */
        CHECK_EQ_INT(sqz_file_read(f, buf, bs, bad * bs), -EIO);
        CHECK_EQ_INT(sqz_file_read(f, buf, 1, bad * bs + bs - 1), -EIO);
        CHECK_EQ_INT(sqz_file_read(f, buf, bad * bs, 0), bad * bs);
        CHECK(memcmp(buf, data, bad * bs) == 0);
        CHECK_EQ_INT(sqz_file_read(f, buf, 32 * bs, (bad + 1) * bs), 32 * bs);
        CHECK(memcmp(buf, data + (bad + 1) * bs, 32 * bs) == 0);
        CHECK_EQ_INT(sqz_file_close(f), 0);
        close(ci.fd);
        sqz_engine_free(e);
    }
    free(buf);
    free(data);
    unlink(path);
}

/* sqz_file_read_vec: the same bytes as sqz_file_read, as pieces; those of
 * committed blocks refer to the decompressed blocks (no copy: v.own stays
 * NULL), dirty ones are copied, holes are zeros; a damaged block fails the
 * read and leaves nothing to release. */
static void check_vec(sqz_file *f, const unsigned char *want, size_t n,
                      uint64_t off, int copies)
{
    sqz_read_vec v;
    ssize_t r = sqz_file_read_vec(f, n, off, &v, NULL);
    CHECK_EQ_INT(r, n);
    if (r <= 0)
        return;
    size_t at = 0;
    for (size_t i = 0; i < v.n; i++) {
        CHECK(at + v.iov[i].iov_len <= n);
        if (at + v.iov[i].iov_len > n)
            break;
        CHECK(memcmp(v.iov[i].iov_base, want + at, v.iov[i].iov_len) == 0);
        at += v.iov[i].iov_len;
    }
    CHECK_EQ_INT(at, n);
    CHECK_EQ_INT(v.own != NULL, copies);
    sqz_read_vec_release(&v);
}

static void test_read_vec(void)
{
    char path[4096];
    path_of(path, sizeof path, "vec");
    const int log2bs = 12;
    const size_t bs = (size_t)1 << log2bs;
    const uint64_t nb = 40;
    unsigned char *data = make_text_file(path, log2bs, nb);
    unsigned char *want = calloc(nb + 3, bs);
    REQUIRE(want);
    memcpy(want, data, nb * bs);
    sqz_engine_opts o = {.threads = 2, .readahead_blocks = 4};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f = open_file(e, path);
    /* cold, then cached; sequential and not; across block boundaries */
    check_vec(f, want + 100, 3 * bs, 100, 0);
    check_vec(f, want + 100 + 3 * bs, 20 * bs + 7, 100 + 3 * bs, 0);
    check_vec(f, want + 5 * bs, 1, 5 * bs, 0);
    check_vec(f, want, nb * bs, 0, 0);
    /* a dirty block (copied) and a hole past the committed end (zeros) */
    memset(want + 7 * bs + 10, 'x', 50);
    CHECK_EQ_INT(sqz_file_write(f, want + 7 * bs + 10, 50, 7 * bs + 10), 50);
    CHECK_EQ_INT(sqz_file_truncate(f, (nb + 3) * bs), 0);
    check_vec(f, want + 6 * bs + 1, 2 * bs, 6 * bs + 1, 1);
    check_vec(f, want + (nb - 1) * bs, 4 * bs, (nb - 1) * bs, 0);
    sqz_read_vec v;
    CHECK_EQ_INT(sqz_file_read_vec(f, bs, (nb + 3) * bs, &v, NULL), 0);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);

    /* damaged block 30: the read fails as a whole, its neighbours read */
    free(make_text_file(path, log2bs, nb));
    stored_at(path, data, bs, 30, 1);
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    f = open_file(e, path);
    CHECK_EQ_INT(sqz_file_read_vec(f, 4 * bs, 28 * bs, &v, NULL), -EIO);
    check_vec(f, data + 20 * bs, 10 * bs, 20 * bs, 0);
    check_vec(f, data + 31 * bs, 9 * bs, 31 * bs, 0);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);
    free(want);
    free(data);
    unlink(path);
}

/* ---- dirty bounds and the background flusher ---- */

static void test_dirty_bound(void)
{
    char path[4096];
    /* Each step writes the first half of 24 blocks: a block is handed to
     * the background only when a write reaches its end, so these stay
     * dirty until a bound commits them, and the peak does not depend on
     * how fast the pool compresses. */
    const size_t max = 1 << 20, bs = 4096, piece = bs / 2, per_step = 24;
    const size_t wsize = per_step * piece, stride = per_step * bs;
    sqz_engine_opts o = {.threads = 2, .dirty_bytes_file = 512 * 1024,
                         .dirty_bytes_max = max, .dirty_expire_ms = 60000};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f[4];
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "bound%d", i);
        path_of(path, sizeof path, name);
        f[i] = create_file(e, path, SQZ_ALG_LZ4, 12);
    }
    unsigned char *buf = malloc(piece);
    REQUIRE(buf);
    sqz_test_fill(buf, piece, 4, 3);
    uint64_t peak = 0;
    for (int i = 0; i < 200; i++) {
        sqz_file *t = f[i % 4];
        for (size_t j = 0; j < per_step; j++) {
            uint64_t off = (uint64_t)(i / 4) * stride + j * bs;
            CHECK_EQ_INT(sqz_file_write(t, buf, piece, off), piece);
            sqz_stats st;
            sqz_engine_stats(e, &st);
            if (st.dirty_bytes > peak)
                peak = st.dirty_bytes;
            /* Above the bound the writer commits its own data at once. */
            CHECK(st.dirty_bytes <= max + bs);
        }
    }
    /* The bound was reached: four files at equal pace stay under the
     * per-file bound (512K) until together they reach max. */
    CHECK(peak >= max - bs);
    unsigned char *back = malloc(stride);
    REQUIRE(back);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(sqz_file_length(f[i]), 49 * stride + 23 * bs + piece);
        CHECK_EQ_INT(sqz_file_read(f[i], back, stride, 7 * stride), stride);
        for (size_t j = 0; j < per_step; j++) {
            CHECK(memcmp(back + j * bs, buf, piece) == 0);
            CHECK(back[j * bs + piece] == 0 && back[j * bs + bs - 1] == 0);
        }
        CHECK_EQ_INT(sqz_file_close(f[i]), 0);
    }
    free(back);
    sqz_stats st;
    sqz_engine_stats(e, &st);
    CHECK_EQ_INT(st.dirty_bytes, 0);
    CHECK_EQ_INT(st.logical_bytes_written, 200 * wsize);
    sqz_engine_free(e);
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "bound%d", i);
        path_of(path, sizeof path, name);
        unlink(path);
    }
    free(buf);
}

static void test_flusher(void)
{
    char path[4096];
    path_of(path, sizeof path, "flusher");
    sqz_engine_opts o = {.threads = 2, .dirty_expire_ms = 200};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f = create_file(e, path, SQZ_ALG_ZSTD, 17);
    unsigned char buf[100000];
    sqz_test_fill(buf, sizeof buf, 2, 8);
    uint64_t t0 = now_ms();
    CHECK_EQ_INT(sqz_file_write(f, buf, sizeof buf, 0), sizeof buf);
    CHECK(sqz_file_dirty(f));
    CHECK_EQ_INT(backing_length(path), 0);
    uint64_t seen = 0;
    while (now_ms() - t0 < 5000) {
        seen = backing_length(path);
        if (seen == sizeof buf)
            break;
        sleep_ms(10);
    }
    uint64_t dt = now_ms() - t0;
    CHECK_EQ_INT(seen, sizeof buf);
    CHECK(dt >= 150);  /* not before it expired */
    CHECK(dt < 4000);  /* but soon after (generous: loaded CI machines) */
    CHECK(!sqz_file_dirty(f));
    sqz_stats st;
    sqz_engine_stats(e, &st);
    CHECK_EQ_INT(st.dirty_bytes, 0);
    /* flush_all commits everything of every file. */
    CHECK_EQ_INT(sqz_file_truncate(f, 300000), 0);
    CHECK_EQ_INT(sqz_engine_flush_all(e), 0);
    CHECK_EQ_INT(backing_length(path), 300000);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);
    unlink(path);
}

/* Full blocks are compressed in the background while the writer keeps
 * copying: with threads=2 and zstd level 9, some compression jobs must run
 * while sqz_file_write calls copy data (a counter the engine keeps; zero
 * when the writer commits synchronously). The data must come out intact
 * and dirty + in-flight data stays within the per-file bound. */
static void test_write_overlap(void)
{
    char path[4096];
    path_of(path, sizeof path, "overlap");
    const size_t wsize = 1 << 20, total = (size_t)64 << 20;
    sqz_engine_opts o = {.threads = 2, .dirty_bytes_file = 8u << 20,
                         .dirty_expire_ms = 60000};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_params p = params_of(SQZ_ALG_ZSTD, 17);
    p.level = 9;
    sqz_ctr *c = NULL;
    REQUIRE(sqz_ctr_create_path(path, &p, 0644, &c) == 0);
    sqz_file *f = NULL;
    REQUIRE(sqz_file_new(e, c, &f) == 0);
    unsigned char *buf = malloc(wsize);
    REQUIRE(buf);
    uint64_t peak = 0;
    uint64_t t0 = now_ms();
    for (size_t off = 0; off < total; off += wsize) {
        sqz_test_fill(buf, wsize, 2, off / wsize + 1);
        CHECK_EQ_INT(sqz_file_write(f, buf, wsize, off), wsize);
        sqz_stats st;
        sqz_engine_stats(e, &st);
        if (st.dirty_bytes > peak)
            peak = st.dirty_bytes;
    }
    CHECK_EQ_INT(sqz_file_flush(f), 0);
    uint64_t dt = now_ms() - t0;
    sqz_stats st;
    sqz_engine_stats(e, &st);
    fprintf(stderr, "overlap: %llu of %llu blocks compressed during writer "
            "copies, peak pending %llu KiB, %llu ms\n",
            (unsigned long long)st.blocks_compressed_overlapped,
            (unsigned long long)st.blocks_compressed,
            (unsigned long long)(peak >> 10), (unsigned long long)dt);
    CHECK_EQ_INT(st.blocks_compressed, total >> 17);
    /* Under ThreadSanitizer the writer's instrumented copies are many
     * times slower than the (uninstrumented) zstd library: each batch is
     * compressed before the next copy starts, so no overlap is expected. */
    if (!UNDER_TSAN)
        CHECK(st.blocks_compressed_overlapped > 0);
    CHECK(peak <= (8u << 20) + wsize);
    CHECK_EQ_INT(st.dirty_bytes, 0);
    /* read back through the engine and a separate container */
    for (size_t off = 0; off < total; off += wsize) {
        sqz_test_fill(buf, wsize, 2, off / wsize + 1);
        unsigned char *got = malloc(wsize);
        REQUIRE(got);
        CHECK_EQ_INT(sqz_file_read(f, got, wsize, off), wsize);
        CHECK(memcmp(got, buf, wsize) == 0);
        free(got);
    }
    CHECK_EQ_INT(sqz_file_close(f), 0);
    CHECK_EQ_INT(backing_length(path), total);
    sqz_engine_free(e);
    free(buf);
    unlink(path);
}

/* sqz_file_hint_flush: a write reaching the end of the file starts
 * compressing the dirty blocks, the flush commits them. White box: the
 * pool's only worker is held by a job of the test, so the hinted batch is
 * still queued when the same (partial) block is written further; the batch
 * committed on its own then claims no more than it holds (100 bytes, not
 * the 200 the file has by then: never zeros where data was written). */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, entered;
} gate;

static void gate_job(void *arg)
{
    gate *g = arg;
    pthread_mutex_lock(&g->mu);
    g->entered = 1;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void test_hint_flush(void)
{
    char path[4096];
    path_of(path, sizeof path, "hint");
    sqz_engine_opts o = {.threads = 1, .dirty_expire_ms = 60000};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f = create_file(e, path, SQZ_ALG_ZSTD, 17);
    unsigned char a[100], b[100], c[50], model[1050];
    memset(a, 'a', sizeof a);
    memset(b, 'b', sizeof b);
    memset(c, 'c', sizeof c);

    /* no dirty block, or not at the end: nothing starts */
    sqz_file_hint_flush(f, 0);
    CHECK(f->inflight_head == NULL);
    CHECK_EQ_INT(sqz_file_write(f, a, sizeof a, 0), (ssize_t)sizeof a);
    sqz_file_hint_flush(f, 50);
    CHECK(f->inflight_head == NULL && f->ndirty == 1);

    gate g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    sqz_job gj = {gate_job, &g};
    sqz_batch gb;
    sqz_batch_init(&gb, &gj, 1);
    sqz_pool_submit(e->pool, &gb);
    pthread_mutex_lock(&g.mu);
    while (!g.entered)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);

    sqz_file_hint_flush(f, sizeof a); /* queued behind the gate */
    CHECK(f->inflight_head != NULL && f->ndirty == 0);
    CHECK_EQ_INT(sqz_file_write(f, b, sizeof b, 100), (ssize_t)sizeof b);
    CHECK(f->inflight_head != NULL && f->ndirty == 1);
    /* reads see the newest data while the batch is in flight */
    unsigned char got[1050];
    CHECK_EQ_INT(sqz_file_read(f, got, 200, 0), 200);
    CHECK(memcmp(got, a, 100) == 0 && memcmp(got + 100, b, 100) == 0);

    pthread_mutex_lock(&g.mu);
    g.open = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    sqz_pool_wait(e->pool, &gb);
    sqz_pool_wait(e->pool, &f->inflight_head->batch);
    /* the next write commits the finished batch first, on its own */
    CHECK_EQ_INT(sqz_file_write(f, c, sizeof c, 1000), (ssize_t)sizeof c);
    CHECK(f->inflight_head == NULL);
    CHECK_EQ_INT(backing_length(path), 100);
    CHECK(backing_equals(path, a, 100));

    memset(model, 0, sizeof model);
    memcpy(model, a, 100);
    memcpy(model + 100, b, 100);
    memcpy(model + 1000, c, 50);
    CHECK_EQ_INT(sqz_file_flush(f), 0);
    CHECK(backing_equals(path, model, 1050));
    /* a hint at the end, then the flush: one commit of the hinted block */
    sqz_stats st0, st1;
    sqz_engine_stats(e, &st0);
    CHECK_EQ_INT(sqz_file_write(f, a, 10, 1050), 10);
    sqz_file_hint_flush(f, 1060);
    CHECK(f->ndirty == 0);
    CHECK_EQ_INT(sqz_file_flush(f), 0);
    sqz_engine_stats(e, &st1);
    CHECK_EQ_INT(st1.blocks_compressed - st0.blocks_compressed, 1);
    CHECK_EQ_INT(backing_length(path), 1060);
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);
    unlink(path);
}

/* sqz_file_flush_draft: a file within its first block and max_len is
 * stored as a draft (zstd's fastest mode: about its own size) and reads
 * back the same; a file longer than max_len or than one block, and
 * sqz_file_flush, are compressed as usual. */
static void test_flush_draft(void)
{
    char path[4096];
    path_of(path, sizeof path, "draft");
    sqz_engine_opts o = {.threads = 1, .dirty_expire_ms = 60000};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f = create_file(e, path, SQZ_ALG_ZSTD, 17);
    static unsigned char d[300000];
    sqz_test_fill(d, sizeof d, 2, 5);
    sqz_stats s0, s1;
    sqz_engine_stats(e, &s0);
    CHECK_EQ_INT(sqz_file_write(f, d, 20000, 0), 20000);
    CHECK_EQ_INT(sqz_file_flush_draft(f, 1, 10000), 0); /* longer than max_len */
    sqz_engine_stats(e, &s1);
    CHECK_EQ_INT(s1.draft_blocks - s0.draft_blocks, 0);
    CHECK(s1.backing_bytes_written - s0.backing_bytes_written < 10000);
    s0 = s1;
    CHECK_EQ_INT(sqz_file_write(f, d + 1, 20000, 0), 20000);
    CHECK_EQ_INT(sqz_file_flush(f), 0);
    sqz_engine_stats(e, &s1);
    CHECK_EQ_INT(s1.draft_blocks - s0.draft_blocks, 0);
    s0 = s1;
    CHECK_EQ_INT(sqz_file_write(f, d, 20000, 0), 20000);
    CHECK_EQ_INT(sqz_file_flush_draft(f, 30000, 131072), 0); /* shorter than min */
    sqz_engine_stats(e, &s1);
    CHECK_EQ_INT(s1.draft_blocks - s0.draft_blocks, 0);
    s0 = s1;
    CHECK_EQ_INT(sqz_file_write(f, d, 20000, 0), 20000);
    CHECK_EQ_INT(sqz_file_flush_draft(f, 4096, 131072), 1);
    CHECK_EQ_INT(sqz_file_flush_draft(f, 4096, 131072), 0); /* nothing dirty */
    sqz_engine_stats(e, &s1);
    CHECK_EQ_INT(s1.draft_blocks - s0.draft_blocks, 1);
    uint64_t w = s1.backing_bytes_written - s0.backing_bytes_written;
    CHECK(w >= 18000 && w <= 20100);
    CHECK(backing_equals(path, d, 20000));
    s0 = s1;
    CHECK_EQ_INT(sqz_file_write(f, d, 200000, 0), 200000); /* two blocks */
    CHECK_EQ_INT(sqz_file_flush_draft(f, 1, 1u << 20), 0);
    sqz_engine_stats(e, &s1);
    CHECK_EQ_INT(s1.draft_blocks - s0.draft_blocks, 0);
    CHECK(backing_equals(path, d, 200000));
    CHECK_EQ_INT(sqz_file_close(f), 0);
    sqz_engine_free(e);
    unlink(path);
}

/* A commit that fails at the global dirty bound after the write itself
 * succeeded is not dropped: the next fsync reports it even though the
 * failure was transient (the retried commit succeeds). Two files: A holds
 * the global bound's worth of dirty blocks, so B's first block takes B
 * over it after the write (B commits its own data then). */
static void test_bound_commit_error_surfaces(void)
{
    char pa[4096], pb[4096];
    const size_t bs = 4096;
    sqz_engine_opts o = {.threads = 1, .dirty_bytes_file = 64 * bs,
                         .dirty_bytes_max = 4 * bs, .dirty_expire_ms = 60000};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    path_of(pa, sizeof pa, "bounderr-a");
    path_of(pb, sizeof pb, "bounderr-b");
    sqz_file *a = create_file(e, pa, SQZ_ALG_LZ4, 12);
    sqz_file *b = create_file(e, pb, SQZ_ALG_LZ4, 12);
    unsigned char buf[4096 / 2];
    memset(buf, 'a', sizeof buf);
    for (int i = 0; i < 4; i++) /* half blocks stay dirty */
        CHECK_EQ_INT(sqz_file_write(a, buf, sizeof buf, (uint64_t)i * bs),
                     (ssize_t)sizeof buf);
    /* a file size limit at the containers' current size makes commits fail
     * (EFBIG; a failed append is truncated back, which the limit allows) */
    struct rlimit old, lim;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    struct stat st;
    REQUIRE(stat(pb, &st) == 0);
    lim = old;
    lim.rlim_cur = (rlim_t)st.st_size;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    ssize_t w = sqz_file_write(b, buf, sizeof buf, 0);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &old) == 0); /* the fault goes away */
    signal(SIGXFSZ, prev);
    CHECK_EQ_INT(w, (ssize_t)sizeof buf); /* the bytes were taken */
    CHECK_EQ_INT(sqz_file_fsync(b, 1), -EFBIG);
    CHECK_EQ_INT(sqz_file_fsync(b, 1), 0); /* reported once, data kept */
    unsigned char got[4096 / 2];
    CHECK_EQ_INT(sqz_file_read(b, got, sizeof got, 0), (ssize_t)sizeof got);
    CHECK(memcmp(got, buf, sizeof got) == 0);
    (void)sqz_file_close(a); /* may report the flusher's failed commit */
    CHECK_EQ_INT(sqz_file_close(b), 0);
    sqz_engine_free(e);
    unlink(pa);
    unlink(pb);
}

/* sqz_file_read_spill: the blocks a read used in part, whole, with their
 * content as the file has it; never dirty blocks; nothing on errors. */
static void test_read_spill(void)
{
    char path[4096];
    path_of(path, sizeof path, "spill");
    const int log2bs = 14;
    const size_t bs = (size_t)1 << log2bs;
    sqz_engine_opts o = {.threads = 2, .cache_bytes = 64 * bs};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_file *f = create_file(e, path, SQZ_ALG_ZSTD, log2bs);
    const uint64_t len = 5 * bs + 1000; /* the last block is partial */
    unsigned char *model = malloc(len), *buf = malloc(2 * bs);
    REQUIRE(model && buf);
    uint64_t rng = 77;
    fill_chunk(model, len, &rng);
    REQUIRE(sqz_file_write(f, model, len, 0) == (ssize_t)len);
    REQUIRE(sqz_file_flush(f) == 0);

    sqz_read_spill sp;
    /* 4 KiB inside block 1: block 1 whole */
    CHECK(sqz_file_read_spill(f, buf, 4096, bs + 8192, &sp) == 4096);
    CHECK(memcmp(buf, model + bs + 8192, 4096) == 0);
    CHECK(sp.n == 1);
    if (sp.n == 1) {
        CHECK(sp.v[0].off == bs && sp.v[0].len == bs);
        CHECK(memcmp(sp.v[0].data, model + bs, bs) == 0);
    }
    sqz_read_spill_release(&sp);
    CHECK(sp.n == 0);
    /* whole blocks: nothing to spill */
    CHECK(sqz_file_read_spill(f, buf, 2 * bs, 2 * bs, &sp) == (ssize_t)(2 * bs));
    CHECK(sp.n == 0);
    /* across blocks 2 and 3, both in part: both */
    CHECK(sqz_file_read_spill(f, buf, bs, 2 * bs + 100, &sp) == (ssize_t)bs);
    CHECK(sp.n == 2);
    for (size_t i = 0; i < sp.n; i++) {
        CHECK(sp.v[i].len == bs);
        CHECK(memcmp(sp.v[i].data, model + sp.v[i].off, bs) == 0);
    }
    sqz_read_spill_release(&sp);
    /* the partial last block, read from its middle: it ends at the length */
    CHECK(sqz_file_read_spill(f, buf, 4096, 5 * bs + 500, &sp) == 500);
    CHECK(sp.n == 1);
    if (sp.n == 1) {
        CHECK(sp.v[0].off == 5 * bs && sp.v[0].len == 1000);
        CHECK(memcmp(sp.v[0].data, model + 5 * bs, 1000) == 0);
    }
    sqz_read_spill_release(&sp);
    /* read whole to the end: nothing */
    CHECK(sqz_file_read_spill(f, buf, 2 * bs, 5 * bs, &sp) == 1000);
    CHECK(sp.n == 0);
    /* a dirty block is never spilled */
    REQUIRE(sqz_file_write(f, "x", 1, 3 * bs + 5) == 1);
    model[3 * bs + 5] = 'x';
    CHECK(sqz_file_read_spill(f, buf, 4096, 3 * bs + 4096, &sp) == 4096);
    CHECK(memcmp(buf, model + 3 * bs + 4096, 4096) == 0);
    CHECK(sp.n == 0);
    sqz_read_spill_release(&sp);
    CHECK(sqz_file_close(f) == 0);
    sqz_engine_free(e);
    unlink(path);
    free(model);
    free(buf);
}

int main(void)
{
    test_pool();
    test_cache();
    tmpdir = sqz_test_tmpdir();
    REQUIRE(tmpdir);

    static const sqz_alg algs[] = {SQZ_ALG_ZSTD, SQZ_ALG_LZ4, SQZ_ALG_GZIP};
    for (int a = 0; a < 3; a++) {
        random_ops(algs[a], 12, 16 * 4096, 11 + (uint64_t)a, 700);
        random_ops(algs[a], 17, 0, 21 + (uint64_t)a, 250);
    }
    random_ops(SQZ_ALG_NONE, 12, SQZ_ENGINE_CACHE_OFF, 5, 500);
    test_concurrent_rw(12);
    test_concurrent_rw(17);
    test_separate_writers();
    test_appenders();
    test_cold_read_and_readahead();
    test_readahead_no_double_work();
    test_damaged_block();
    test_runs();
    test_read_vec();
    test_dirty_bound();
    test_flusher();
    test_write_overlap();
    test_hint_flush();
    test_flush_draft();
    test_bound_commit_error_surfaces();
    test_read_spill();

    rmdir(tmpdir);
    free(tmpdir);
    return sqz_test_done("engine");
}
