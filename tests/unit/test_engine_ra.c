/* Unit test of the engine's read path under change: sequential readers
 * (read-ahead windows in flight, runs, the zero-copy vector of
 * sqz_file_read_vec) while a writer rewrites, truncates and punches the
 * file. A read must never return bytes older than a write that finished
 * before it started, nor a torn block. */
#include "engine/engine.h"
#include "testutil.h"
#include "testparams.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define NB 96
#define LOG2BS 12
#define BS ((size_t)1 << LOG2BS)

typedef struct {
    sqz_file *f;
    _Atomic uint64_t pub[NB]; /* version of block b whose write finished */
    atomic_uint tseq;         /* odd while a truncate/punch is under way */
    atomic_int stop;
    atomic_int stale, torn, errors;
} shared;

/* Block content of version v (0: zeros). */
static void fill_block(unsigned char *b, uint64_t idx, uint64_t v)
{
    if (v == 0) {
        memset(b, 0, BS);
        return;
    }
    memcpy(b, &v, sizeof v);
    for (size_t i = sizeof v; i < BS; i++)
        b[i] = (unsigned char)(v * 131 + idx * 7 + i);
}

/* The version a block read holds, or UINT64_MAX if torn. */
static uint64_t block_version(const unsigned char *b, uint64_t idx)
{
    uint64_t v;
    memcpy(&v, b, sizeof v);
    unsigned char want[BS];
    fill_block(want, idx, v);
    return memcmp(want, b, BS) == 0 ? v : UINT64_MAX;
}

static void *writer(void *arg)
{
    shared *s = arg;
    uint64_t ver[NB], rng = 7;
    unsigned char *buf = malloc(BS);
    REQUIRE(buf);
    for (size_t b = 0; b < NB; b++)
        ver[b] = atomic_load(&s->pub[b]);
    for (int op = 0; op < 2500; op++) {
        uint64_t r = sqz_test_rand(&rng) % 100;
        if (r < 6) {
            /* truncate or punch, then write the blocks again */
            uint64_t lo = sqz_test_rand(&rng) % NB;
            uint64_t hi = lo + 1 + sqz_test_rand(&rng) % (NB - lo);
            if (r >= 3)
                hi = NB;
            atomic_fetch_add(&s->tseq, 1);
            int rc = r < 3 ? sqz_file_zero_range(s->f, lo * BS, (hi - lo) * BS, 1)
                           : sqz_file_truncate(s->f, lo * BS + (r == 4 ? 100 : 0));
            if (rc != 0)
                atomic_fetch_add(&s->errors, 1);
            for (uint64_t b = lo; b < hi; b++) {
                fill_block(buf, b, ++ver[b]);
                if (sqz_file_write(s->f, buf, BS, b * BS) != (ssize_t)BS)
                    atomic_fetch_add(&s->errors, 1);
                atomic_store(&s->pub[b], ver[b]);
            }
            atomic_fetch_add(&s->tseq, 1);
        } else {
            uint64_t b = sqz_test_rand(&rng) % NB;
            fill_block(buf, b, ++ver[b]);
            if (sqz_file_write(s->f, buf, BS, b * BS) != (ssize_t)BS)
                atomic_fetch_add(&s->errors, 1);
            atomic_store(&s->pub[b], ver[b]);
        }
        if (r >= 90 && sqz_file_flush(s->f) != 0)
            atomic_fetch_add(&s->errors, 1);
        if (op % 64 == 0)
            usleep(200);
    }
    free(buf);
    atomic_store(&s->stop, 1);
    return NULL;
}

static void *reader(void *arg)
{
    shared *s = arg;
    uint64_t rng = (uint64_t)(uintptr_t)&rng;
    unsigned char *buf = malloc(8 * BS);
    REQUIRE(buf);
    uint64_t snap[8];
    int use_vec = 0;
    while (!atomic_load(&s->stop)) {
        use_vec ^= 1;
        for (uint64_t b = 0; b < NB;) {
            size_t nb = 1 + (size_t)(sqz_test_rand(&rng) % 4);
            if (nb > NB - b)
                nb = NB - b;
            unsigned t1 = atomic_load(&s->tseq);
            for (size_t i = 0; i < nb; i++)
                snap[i] = atomic_load(&s->pub[b + i]);
            ssize_t got;
            if (use_vec) {
                sqz_read_vec v;
                got = sqz_file_read_vec(s->f, nb * BS, b * BS, &v, NULL);
                if (got > 0) {
                    size_t at = 0;
                    for (size_t i = 0; i < v.n; i++) {
                        memcpy(buf + at, v.iov[i].iov_base, v.iov[i].iov_len);
                        at += v.iov[i].iov_len;
                    }
                    if (at != (size_t)got)
                        atomic_fetch_add(&s->errors, 1);
                    sqz_read_vec_release(&v);
                }
            } else {
                got = sqz_file_read(s->f, buf, nb * BS, b * BS);
            }
            unsigned t2 = atomic_load(&s->tseq);
            int quiet = t1 == t2 && !(t1 & 1);
            if (got < 0) {
                atomic_fetch_add(&s->errors, 1);
            } else if ((size_t)got != nb * BS) {
                if (quiet)
                    atomic_fetch_add(&s->errors, 1);
            } else {
                for (size_t i = 0; i < nb; i++) {
                    uint64_t v = block_version(buf + i * BS, b + i);
                    if (v == UINT64_MAX) {
                        if (quiet)
                            atomic_fetch_add(&s->torn, 1);
                    } else if (v < snap[i] && quiet) {
                        atomic_fetch_add(&s->stale, 1);
                    }
                }
            }
            b += nb;
        }
    }
    free(buf);
    return NULL;
}

static void run(int vec_cache_blocks, int ra)
{
    char *dir = sqz_test_tmpdir();
    REQUIRE(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/ra", dir);
    sqz_engine_opts o = {.threads = 2, .cache_bytes = (size_t)vec_cache_blocks * BS,
                         .readahead_blocks = ra, .dirty_bytes_file = 8 * BS,
                         .dirty_expire_ms = 10};
    sqz_engine *e;
    REQUIRE(sqz_engine_new(&o, &e) == 0);
    sqz_params p = params_of(SQZ_ALG_LZ4, LOG2BS);
    sqz_ctr *c = NULL;
    REQUIRE(sqz_ctr_create_path(path, &p, 0644, &c) == 0);
    shared *s = calloc(1, sizeof *s);
    REQUIRE(s);
    REQUIRE(sqz_file_new(e, c, &s->f) == 0);
    unsigned char *buf = malloc(BS);
    REQUIRE(buf);
    for (uint64_t b = 0; b < NB; b++) {
        fill_block(buf, b, 1);
        CHECK_EQ_INT(sqz_file_write(s->f, buf, BS, b * BS), BS);
        atomic_store(&s->pub[b], 1);
    }
    CHECK_EQ_INT(sqz_file_flush(s->f), 0);
    pthread_t w, r[3];
    REQUIRE(pthread_create(&w, NULL, writer, s) == 0);
    for (int i = 0; i < 3; i++)
        REQUIRE(pthread_create(&r[i], NULL, reader, s) == 0);
    pthread_join(w, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(r[i], NULL);
    CHECK_EQ_INT(atomic_load(&s->stale), 0);
    CHECK_EQ_INT(atomic_load(&s->torn), 0);
    CHECK_EQ_INT(atomic_load(&s->errors), 0);
    /* at the end, every block holds its last version */
    for (uint64_t b = 0; b < NB; b++) {
        CHECK_EQ_INT(sqz_file_read(s->f, buf, BS, b * BS), BS);
        CHECK_EQ_INT(block_version(buf, b), atomic_load(&s->pub[b]));
    }
    CHECK_EQ_INT(sqz_file_close(s->f), 0);
    sqz_engine_free(e);
    free(buf);
    free(s);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* Without a cache that can keep a block (cache=0, or smaller than a
 * block), what the read-ahead decompresses is thrown away at once: a
 * sequential reader must decompress every block once, not twice. */
static void test_no_cache_no_readahead(void)
{
    char *dir = sqz_test_tmpdir();
    REQUIRE(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/nocache", dir);
    const size_t sizes[] = {SQZ_ENGINE_CACHE_OFF, BS / 2};
    for (int k = 0; k < 2; k++) {
        sqz_engine_opts o = {.threads = 2, .cache_bytes = sizes[k],
                             .readahead_blocks = 4};
        sqz_engine *e;
        REQUIRE(sqz_engine_new(&o, &e) == 0);
        sqz_params p = params_of(SQZ_ALG_LZ4, LOG2BS);
        sqz_ctr *c = NULL;
        REQUIRE(sqz_ctr_create_path(path, &p, 0644, &c) == 0);
        sqz_file *f = NULL;
        REQUIRE(sqz_file_new(e, c, &f) == 0);
        unsigned char *buf = malloc(2 * BS);
        REQUIRE(buf);
        for (uint64_t b = 0; b < NB; b++) {
            fill_block(buf, b, 1);
            CHECK_EQ_INT(sqz_file_write(f, buf, BS, b * BS), BS);
        }
        CHECK_EQ_INT(sqz_file_close(f), 0);
        REQUIRE(sqz_ctr_open_path(path, SQZ_OPEN_RDONLY, &c) == 0);
        REQUIRE(sqz_file_new(e, c, &f) == 0);
        sqz_stats before, after;
        sqz_engine_stats(e, &before);
        for (uint64_t b = 0; b < NB; b += 2) {
            CHECK_EQ_INT(sqz_file_read(f, buf, 2 * BS, b * BS), 2 * BS);
            CHECK_EQ_INT(block_version(buf, b), 1);
            CHECK_EQ_INT(block_version(buf + BS, b + 1), 1);
        }
        CHECK_EQ_INT(sqz_file_close(f), 0);
        sqz_engine_stats(e, &after);
        CHECK_EQ_INT(after.blocks_decompressed - before.blocks_decompressed, NB);
        sqz_engine_free(e);
        free(buf);
        unlink(path);
    }
    rmdir(dir);
    free(dir);
}

int main(void)
{
    test_no_cache_no_readahead();
    run(1024, 4); /* windows up to 16 blocks, 4 in flight */
    run(64, 4);   /* a small cache: read-ahead evicted before it is used */
    run(1024, -1);
    return sqz_test_done("engine_ra");
}
