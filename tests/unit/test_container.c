/* Unit tests of the container library (src/format/): round trips over all
 * algorithms, levels and block sizes; random operation sequences against a
 * model; crash injection through the I/O seam; corruption and hostile
 * input; concurrent readers and a writer. With SQZ_WRITE_CORPUS=DIR it also
 * writes the fuzz seed corpus (valid and damaged containers) into DIR. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "format/format_int.h"

#include "container_simdisk.c"

/* log lines are counted, printed only when SQZ_TEST_VERBOSE is set */
typedef struct logsink {
    int lines;
    int verbose;
    char last[1024]; /* the last line (single-threaded tests only) */
} logsink;

static void test_log(void *user, int level, const char *msg)
{
    logsink *s = user;
    __atomic_add_fetch(&s->lines, 1, __ATOMIC_RELAXED);
    snprintf(s->last, sizeof s->last, "%s", msg);
    if (s->verbose)
        fprintf(stderr, "[log %d] %s\n", level, msg);
}

static void quiet_report(void *user, const char *msg)
{
    int *verbose = user;
    if (verbose && *verbose)
        fprintf(stderr, "[verify] %s\n", msg);
}

static int g_verbose;

static sqz_params mkparams(sqz_alg alg, int level, int log2bs)
{
    sqz_params p = {.alg = alg, .level = level, .log2bs = log2bs,
                    .min_saving = SQZ_MIN_SAVING_DEFAULT};
    return p;
}

static sqz_ctr *create_mem(const sqz_params *p)
{
    int fd = memfd_create("sqzctr", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    sqz_ctr *c;
    int r = sqz_ctr_create_fd(fd, p, "mem", &c);
    REQUIRE(r == 0);
    return c;
}

/* reopen the same backing file through a fresh descriptor */
static sqz_ctr *reopen(sqz_ctr *c, int flags)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", sqz_ctr_fd(c));
    int fd = open(path, flags == SQZ_OPEN_RDWR ? O_RDWR : O_RDONLY);
    REQUIRE(fd >= 0);
    REQUIRE(sqz_ctr_close(c) == 0);
    sqz_ctr *n;
    int r = sqz_ctr_open_fd(fd, flags, "reopened", &n);
    REQUIRE(r == 0);
    return n;
}

static int content_equals(sqz_ctr *c, const unsigned char *want, size_t n)
{
    if (sqz_ctr_length(c) != n)
        return 0;
    unsigned char *got = malloc(n + 1);
    REQUIRE(got);
    ssize_t r = sqz_ctr_pread(c, got, n + 1, 0);
    int ok = r == (ssize_t)n && memcmp(got, want, n) == 0;
    free(got);
    return ok;
}

/* ---------------------------------------------------------------- 1 ---- */

static int slow_level(sqz_alg alg, int level)
{
    return (alg == SQZ_ALG_ZSTD && level >= 16) ||
           (alg == SQZ_ALG_LZ4HC && level >= 10) ||
           (alg == SQZ_ALG_GZIP && level >= 8);
}

static void roundtrip_one(const sqz_params *p, int input, int *checked)
{
    size_t bs = (size_t)1 << p->log2bs;
    size_t n = 0;
    int kind = 0;
    int expect_holes = 0;
    int big = p->log2bs >= 20;
    switch (input) {
    case 0: n = big ? bs / 2 * 3 : bs * 2 + bs / 2; kind = 0; break;
    case 1: n = big ? bs + 4096 : bs * 2; kind = 1; break;
    case 2: n = bs + bs / 2; kind = 2; break;
    case 3: n = 0; break;
    case 4: n = 1; kind = 2; break;
    case 5: n = bs - 1; kind = 2; break;
    case 6: n = bs; kind = 1; break;
    case 7: n = bs + 1; kind = 4; break;
    case 8: n = 2 * bs + 100; kind = 2; expect_holes = 1; break;
    }
    unsigned char *data = malloc(n + 1);
    REQUIRE(data);
    sqz_test_fill(data, n, kind, 1000 + (uint64_t)input);
    if (input == 8)
        memset(data + bs, 0, bs);
    sqz_ctr *c = create_mem(p);
    if (n)
        CHECK_EQ_INT(sqz_ctr_pwrite(c, data, n, 0), n);
    CHECK(content_equals(c, data, n));
    struct sqz_ctr_stat st;
    CHECK_EQ_INT(sqz_ctr_stat(c, &st), 0);
    uint64_t blocks = (n + bs - 1) / bs;
    CHECK_EQ_INT(st.length, n);
    CHECK_EQ_INT(st.blocks, blocks);
    CHECK_EQ_INT(st.hole_blocks, expect_holes);
    CHECK_EQ_INT(st.stored_blocks, blocks - (uint64_t)expect_holes);
    int stores = p->alg == SQZ_ALG_NONE ||
                 (p->alg == SQZ_ALG_GZIP && p->level == 0); /* no compression */
    if (stores)
        CHECK_EQ_INT(st.raw_blocks, st.stored_blocks);
    else if (kind == 0) /* a zero-padded partial last block compresses */
        CHECK_EQ_INT(st.raw_blocks, n / bs);
    else if (kind == 2 && n >= 64)
        CHECK_EQ_INT(st.raw_blocks, 0);
    CHECK(st.backing_size >= SQZ_LOG_START_V2);
    CHECK(st.params.alg == p->alg && st.params.level == p->level);
    c = reopen(c, SQZ_OPEN_RDONLY);
    CHECK(content_equals(c, data, n));
    CHECK_EQ_INT(sqz_ctr_verify(c, quiet_report, &g_verbose), 0);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    free(data);
    (*checked)++;
}

static void test_roundtrip(void)
{
    static const int sizes[] = {12, 16, 17, 20};
    /* every level at 4K blocks; at 64K, 128K and 1M the lowest, the
     * default and the highest (SQZ_LONG: every level at every size) */
    int every = getenv("SQZ_LONG") != NULL;
    int checked = 0;
    for (int a = 0; a < SQZ_ALG_COUNT; a++) {
        sqz_alg alg = sqz_all_algs[a];
        for (int lv = sqz_level_min(alg); lv <= sqz_level_max(alg); lv++) {
            int edge = lv == sqz_level_min(alg) || lv == sqz_level_default(alg) ||
                       lv == sqz_level_max(alg);
            for (int s = 0; s < 4; s++) {
                if (sizes[s] >= 16 && !edge && !every)
                    continue;
                sqz_params p = mkparams(alg, lv, sizes[s]);
                /* slow levels with big blocks: fewer inputs (time budget) */
                int slow = sizes[s] >= 16 && slow_level(alg, lv);
                for (int in = 0; in < 9; in++) {
                    if (slow && in != 4 && in != 8 && (sizes[s] == 20 || in < 5))
                        continue;
                    roundtrip_one(&p, in, &checked);
                }
            }
        }
    }
    /* the block API directly: prepare on one thread, commit, read_block */
    sqz_params p = mkparams(SQZ_ALG_ZSTD, 3, 12);
    sqz_ctr *c = create_mem(&p);
    unsigned char blk[4096], out[4096];
    sqz_test_fill(blk, sizeof blk, 2, 7);
    sqz_prepared pr[2];
    CHECK_EQ_INT(sqz_ctr_prepare(c, 0, blk, &pr[0]), 0);
    memset(out, 0, sizeof out);
    CHECK_EQ_INT(sqz_ctr_prepare(c, 3, out, &pr[1]), 0);
    CHECK_EQ_INT(pr[1].kind, SQZ_KIND_HOLE);
    CHECK_EQ_INT(sqz_ctr_commit(c, pr, 2, 4 * 4096), 0);
    size_t sl = 99;
    CHECK_EQ_INT(sqz_ctr_read_block(c, 0, out, &sl), 4096);
    CHECK(memcmp(out, blk, 4096) == 0 && sl == pr[0].stored_len);
    CHECK_EQ_INT(sqz_ctr_read_block(c, 3, out, &sl), 4096);
    CHECK(sl == 0 && out[0] == 0 && out[4095] == 0);
    CHECK_EQ_INT(sqz_ctr_read_block(c, 9, out, NULL), 0);
    CHECK_EQ_INT(sqz_ctr_nblocks(c), 4);
    sqz_prepared beyond = pr[0];
    beyond.idx = 4;
    CHECK_EQ_INT(sqz_ctr_commit(c, &beyond, 1, 4 * 4096), -EINVAL);
    CHECK_EQ_INT(sqz_ctr_commit(c, NULL, 0, SQZ_MAX_LENGTH + 1), -EFBIG);
    CHECK_EQ_INT(sqz_ctr_pwrite(c, blk, 1, SQZ_MAX_LENGTH), -EFBIG);
    sqz_prepared_free(&pr[0]);
    sqz_prepared_free(&pr[1]);
    /* a draft (sqz_ctr_prepare_draft): zstd's fastest mode keeps 3000
     * bytes of text about as they are, which in a 4 KiB block saves less
     * than min_saving, so the block is stored raw; it reads back like any
     * block, and the header keeps level 3 */
    sqz_test_fill(blk, 3000, 2, 8);
    memset(blk + 3000, 0, sizeof blk - 3000);
    CHECK_EQ_INT(sqz_ctr_prepare_draft(c, 1, blk, &pr[0]), 0);
    CHECK_EQ_INT(sqz_ctr_prepare(c, 2, blk, &pr[1]), 0);
    CHECK_EQ_INT(pr[0].kind, SQZ_KIND_RAW);
    CHECK_EQ_INT(pr[1].kind, SQZ_KIND_COMP);
    CHECK(pr[1].stored_len < 1500);
    CHECK_EQ_INT(sqz_ctr_commit(c, pr, 2, 4 * 4096), 0);
    CHECK_EQ_INT(sqz_ctr_read_block(c, 1, out, &sl), 4096);
    CHECK(memcmp(out, blk, 4096) == 0 && sl == pr[0].stored_len);
    CHECK_EQ_INT(sqz_ctr_params(c)->level, 3);
    sqz_prepared_free(&pr[0]);
    sqz_prepared_free(&pr[1]);
    c = reopen(c, SQZ_OPEN_RDONLY);
    CHECK_EQ_INT(sqz_ctr_read_block(c, 1, out, NULL), 4096);
    CHECK(memcmp(out, blk, 4096) == 0);
    CHECK_EQ_INT(sqz_ctr_pwrite(c, blk, 10, 0), -EROFS);
    CHECK_EQ_INT(sqz_ctr_truncate(c, 0), -EROFS);
    CHECK_EQ_INT(sqz_ctr_checkpoint(c), -EROFS);
    sqz_ctr_close(c);
    /* parameter checks */
    char err[128];
    sqz_params bad = mkparams(SQZ_ALG_ZSTD, 30, 17);
    CHECK_EQ_INT(sqz_params_check(&bad, err, sizeof err), -EINVAL);
    bad = mkparams(SQZ_ALG_ZSTD, 3, 11);
    CHECK_EQ_INT(sqz_params_check(&bad, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "block size") != NULL);
    bad = mkparams((sqz_alg)7, 0, 17);
    CHECK_EQ_INT(sqz_params_check(&bad, err, sizeof err), -EINVAL);
    bad = mkparams(SQZ_ALG_LZ4, 0, 17);
    bad.min_saving = 1001;
    CHECK_EQ_INT(sqz_params_check(&bad, err, sizeof err), -EINVAL);
    printf("round trips: %d\n", checked);
}

/* by path, probe, plain files */
static void test_paths(void)
{
    char *dir = sqz_test_tmpdir();
    REQUIRE(dir);
    char path[4200], plain[4200];
    snprintf(path, sizeof path, "%s/c.sqz", dir);
    snprintf(plain, sizeof plain, "%s/plain", dir);
    sqz_params p = mkparams(SQZ_ALG_GZIP, 6, 16);
    sqz_ctr *c;
    REQUIRE(sqz_ctr_create_path(path, &p, 0644, &c) == 0);
    CHECK_EQ_INT(sqz_ctr_pwrite(c, "hello", 5, 70000), 5);
    CHECK_EQ_INT(sqz_ctr_sync(c, 0), 0);
    CHECK_EQ_INT(sqz_ctr_probe_fd(sqz_ctr_fd(c)), 1);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    REQUIRE(sqz_ctr_open_path(path, SQZ_OPEN_RDONLY, &c) == 0);
    char buf[16] = {1};
    CHECK_EQ_INT(sqz_ctr_pread(c, buf, 16, 69999), 6);
    CHECK(buf[0] == 0 && memcmp(buf + 1, "hello", 5) == 0);
    CHECK_EQ_INT(sqz_ctr_pread(c, buf, 16, 70005), 0);
    sqz_ctr_close(c);
    int fd = open(plain, O_RDWR | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    CHECK_EQ_INT(write(fd, "just a text file\n", 17), 17);
    CHECK_EQ_INT(sqz_ctr_probe_fd(fd), 0);
    int problems = sqz_verify_fd(fd, "plain", quiet_report, &g_verbose);
    CHECK(problems >= 1);
    close(fd);
    CHECK_EQ_INT(sqz_ctr_open_path(plain, SQZ_OPEN_RDONLY, &c), -EBADMSG);
    CHECK(c == NULL);
    CHECK_EQ_INT(sqz_ctr_probe_fd(-1), -EBADF);
    unlink(path);
    unlink(plain);
    rmdir(dir);
    free(dir);
}

/* ---------------------------------------------------------------- 2 ---- */

typedef struct model {
    unsigned char *p;
    size_t n, cap;
} model;

static void model_resize(model *m, size_t n)
{
    if (n > m->cap) {
        size_t nc = m->cap ? m->cap : 4096;
        while (nc < n)
            nc *= 2;
        m->p = realloc(m->p, nc);
        REQUIRE(m->p);
        m->cap = nc;
    }
    if (n > m->n)
        memset(m->p + m->n, 0, n - m->n);
    m->n = n;
}

static void test_random_ops(sqz_alg alg, int level, int log2bs, int nops,
                            uint64_t seed)
{
    sqz_params p = mkparams(alg, level, log2bs);
    size_t bs = (size_t)1 << log2bs;
    sqz_ctr *c = create_mem(&p);
    model m = {0};
    uint64_t rng = seed;
    size_t maxlen = 6 * bs;
    unsigned char *buf = malloc(3 * bs + 10);
    REQUIRE(buf);
    int failed = 0;
    for (int i = 0; i < nops && !failed; i++) {
        unsigned op = (unsigned)(sqz_test_rand(&rng) % 100);
        if (op < 60) { /* write, often straddling blocks */
            size_t off = (size_t)(sqz_test_rand(&rng) % (m.n + bs + 1));
            if (off > maxlen)
                off = maxlen;
            size_t n = 1 + (size_t)(sqz_test_rand(&rng) % (2 * bs + 3));
            int kind = (int)(sqz_test_rand(&rng) % 5);
            sqz_test_fill(buf, n, kind, sqz_test_rand(&rng));
            if (sqz_test_rand(&rng) % 8 == 0)
                memset(buf, 0, n);
            ssize_t r = sqz_ctr_pwrite(c, buf, n, off);
            if (r != (ssize_t)n) {
                fprintf(stderr, "pwrite %zu at %zu: %zd\n", n, off, r);
                failed = 1;
            }
            if (off + n > m.n)
                model_resize(&m, off + n);
            memcpy(m.p + off, buf, n);
        } else if (op < 75) { /* truncate shrink or grow */
            size_t len = (size_t)(sqz_test_rand(&rng) % (maxlen + 1));
            if (sqz_ctr_truncate(c, len) != 0)
                failed = 1;
            if (len < m.n)
                m.n = len;
            else
                model_resize(&m, len);
        } else if (op < 80) {
            c = reopen(c, SQZ_OPEN_RDWR);
        } else if (op < 85) {
            if (sqz_ctr_sync(c, (int)(op & 1)) != 0)
                failed = 1;
        } else if (op < 87) {
            if (sqz_ctr_checkpoint(c) != 0)
                failed = 1;
        } else { /* read a random range */
            size_t off = (size_t)(sqz_test_rand(&rng) % (m.n + bs + 1));
            size_t n = (size_t)(sqz_test_rand(&rng) % (2 * bs + 3));
            ssize_t r = sqz_ctr_pread(c, buf, n, off);
            size_t want = off >= m.n ? 0 : (m.n - off < n ? m.n - off : n);
            if (r != (ssize_t)want || memcmp(buf, m.p + off, want) != 0) {
                fprintf(stderr, "pread %zu at %zu: %zd, want %zu\n", n, off, r,
                        want);
                failed = 1;
            }
        }
        if (sqz_ctr_length(c) != m.n)
            failed = 1;
        if ((i % 64 == 63 || i == nops - 1) && !content_equals(c, m.p, m.n))
            failed = 1;
        if (failed)
            fprintf(stderr, "random ops (alg %s level %d bs 2^%d): mismatch "
                    "after op %d (seed %llu)\n", sqz_alg_name(alg), level,
                    log2bs, i, (unsigned long long)seed);
    }
    CHECK(!failed);
    c = reopen(c, SQZ_OPEN_RDONLY);
    CHECK(content_equals(c, m.p, m.n));
    CHECK_EQ_INT(sqz_ctr_verify(c, quiet_report, &g_verbose), 0);
    sqz_ctr_close(c);
    free(m.p);
    free(buf);
}

/* A 1 MiB file rewritten 200 times must not keep 200 MiB allocated. */
static void test_space_bounded(void)
{
    char *dir = sqz_test_tmpdir();
    REQUIRE(dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/rewrite.sqz", dir);
    sqz_params p = mkparams(SQZ_ALG_LZ4, 0, 16);
    sqz_ctr *c;
    REQUIRE(sqz_ctr_create_path(path, &p, 0644, &c) == 0);
    size_t n = 1 << 20;
    unsigned char *buf = malloc(n);
    REQUIRE(buf);
    for (int i = 0; i < 200; i++) {
        sqz_test_fill(buf, n, i % 2 ? 0 : 1, (uint64_t)i);
        REQUIRE(sqz_ctr_pwrite(c, buf, n, 0) == (ssize_t)n);
        CHECK_EQ_INT(sqz_ctr_sync(c, 1), 0);
    }
    struct sqz_ctr_stat st;
    CHECK_EQ_INT(sqz_ctr_stat(c, &st), 0);
    printf("after 200 rewrites: live %llu, backing size %llu, allocated %llu, "
           "dead %llu\n", (unsigned long long)st.compressed_bytes,
           (unsigned long long)st.backing_size,
           (unsigned long long)st.backing_alloc,
           (unsigned long long)st.dead_bytes);
    CHECK(st.backing_size > 100ull << 20); /* the apparent size keeps growing */
    CHECK(st.backing_alloc < 3 * st.compressed_bytes + (8ull << 20));
    c = reopen(c, SQZ_OPEN_RDONLY);
    CHECK(content_equals(c, buf, n));
    CHECK_EQ_INT(sqz_ctr_verify(c, quiet_report, &g_verbose), 0);
    sqz_ctr_close(c);
    free(buf);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* ---------------------------------------------------------------- 3 ---- */

typedef struct snapshot {
    unsigned char *p;
    size_t n;
} snapshot;

static int matches_some(sqz_ctr *c, const snapshot *s, size_t ns)
{
    uint64_t len = sqz_ctr_length(c);
    unsigned char *got = malloc(len ? len : 1);
    REQUIRE(got);
    int ok = sqz_ctr_pread(c, got, len, 0) == (ssize_t)len;
    int found = -1;
    for (size_t i = 0; ok && i < ns && found < 0; i++)
        if (s[i].n == len && memcmp(s[i].p, got, len) == 0)
            found = (int)i;
    free(got);
    return found;
}

static void test_crash(uint64_t seed)
{
    simdisk d = {0};
    d.fd = memfd_create("sim", MFD_CLOEXEC);
    REQUIRE(d.fd >= 0);
    sqz_io io = sim_io(&d);
    sqz_params p = mkparams(SQZ_ALG_LZ4, 0, 12);
    sqz_ctr *c;
    REQUIRE(sqz_ctr_create_fd_io(d.fd, &p, "sim", &io, &c) == 0);
    model m = {0};
    snapshot *states = NULL; /* [0] = state at the last sync, then commits */
    size_t nstates = 0;
    uint64_t rng = seed;
    unsigned char buf[3 * 4096];
    int crashes = 0, failed = 0;
#define PUSH_STATE() do { \
        states = realloc(states, (nstates + 1) * sizeof *states); \
        REQUIRE(states); \
        states[nstates].p = malloc(m.n ? m.n : 1); REQUIRE(states[nstates].p); \
        if (m.n) { memcpy(states[nstates].p, m.p, m.n); } \
        states[nstates].n = m.n; \
        nstates++; } while (0)
#define RESET_STATES() do { \
        for (size_t k = 0; k < nstates; k++) { free(states[k].p); } \
        nstates = 0; \
        PUSH_STATE(); } while (0)
    RESET_STATES();
    for (int step = 0; step < 90 && !failed; step++) {
        unsigned op = (unsigned)(sqz_test_rand(&rng) % 100);
        if (op < 70) {
            size_t off = (size_t)(sqz_test_rand(&rng) % (m.n + 4097));
            size_t n = 1 + (size_t)(sqz_test_rand(&rng) % sizeof buf);
            sqz_test_fill(buf, n, (int)(sqz_test_rand(&rng) % 5), step);
            REQUIRE(sqz_ctr_pwrite(c, buf, n, off) == (ssize_t)n);
            if (off + n > m.n)
                model_resize(&m, off + n);
            memcpy(m.p + off, buf, n);
            PUSH_STATE();
        } else if (op < 80) {
            size_t len = (size_t)(sqz_test_rand(&rng) % (m.n + 8192));
            REQUIRE(sqz_ctr_truncate(c, len) == 0);
            if (len < m.n)
                m.n = len;
            else
                model_resize(&m, len);
            PUSH_STATE();
        } else if (op < 92) {
            REQUIRE(sqz_ctr_sync(c, 1) == 0);
            RESET_STATES();
        } else {
            REQUIRE(sqz_ctr_checkpoint(c) == 0);
            RESET_STATES();
        }
        for (int mode = 0; mode < 4 && !failed; mode++) {
            int reps = mode == 1 || mode == 2 ? 3 : 1;
            for (int rep = 0; rep < reps && !failed; rep++) {
                simimg im = sim_crash(&d, mode, &rng);
                int fd = memfd_with(im.p, im.n);
                free(im.p);
                sqz_ctr *r;
                int o = sqz_ctr_open_fd(fd, SQZ_OPEN_RDWR, "crashed", &r);
                crashes++;
                if (o != 0) {
                    fprintf(stderr, "crash step %d mode %d: open %d (seed %llu)\n",
                            step, mode, o, (unsigned long long)seed);
                    failed = 1;
                    break;
                }
                int which = matches_some(r, states, nstates);
                /* recovery from a crash never finds damage: no block that
                 * was synced (or committed and kept) reads as -EIO */
                {
                    size_t bs = sqz_ctr_block_size(r);
                    unsigned char *blk = malloc(bs);
                    REQUIRE(blk);
                    uint64_t nb = sqz_ctr_nblocks(r);
                    for (uint64_t b = 0; b < nb; b++)
                        if (sqz_ctr_read_block(r, b, blk, NULL) == -EIO) {
                            fprintf(stderr, "crash step %d mode %d: block "
                                    "%llu reads -EIO (seed %llu)\n", step,
                                    mode, (unsigned long long)b,
                                    (unsigned long long)seed);
                            failed = 1;
                        }
                    free(blk);
                    if (r->st.ndamage || r->st.lost_commits) {
                        fprintf(stderr, "crash step %d mode %d: replay saw "
                                "damage (seed %llu)\n", step, mode,
                                (unsigned long long)seed);
                        failed = 1;
                    }
                }
                /* consecutive states may be equal: check the exact ones */
                if (which < 0 ||
                    (mode == 0 && !content_equals(r, states[0].p, states[0].n)) ||
                    (mode == 3 && !content_equals(r, states[nstates - 1].p,
                                                  states[nstates - 1].n))) {
                    fprintf(stderr, "crash step %d mode %d: state %d of %zu "
                            "(seed %llu)\n", step, mode, which, nstates,
                            (unsigned long long)seed);
                    failed = 1;
                }
                if (sqz_ctr_verify(r, quiet_report, &g_verbose) != 0)
                    failed = 1;
                /* keep writing after recovery */
                size_t len = (size_t)sqz_ctr_length(r);
                unsigned char *want = malloc(len + 5000);
                REQUIRE(want);
                REQUIRE(sqz_ctr_pread(r, want, len, 0) == (ssize_t)len);
                sqz_test_fill(want + len, 5000, 2, (uint64_t)step);
                if (sqz_ctr_pwrite(r, want + len, 5000, len) != 5000 ||
                    sqz_ctr_sync(r, 1) != 0)
                    failed = 1;
                r = reopen(r, SQZ_OPEN_RDONLY);
                if (!content_equals(r, want, len + 5000) ||
                    sqz_ctr_verify(r, quiet_report, &g_verbose) != 0) {
                    fprintf(stderr, "crash step %d mode %d: writing after "
                            "recovery failed (seed %llu)\n", step, mode,
                            (unsigned long long)seed);
                    failed = 1;
                }
                sqz_ctr_close(r);
                free(want);
            }
        }
    }
    CHECK(!failed);
    CHECK(d.syncs > 5);
    printf("crash images checked: %d\n", crashes);
    sqz_ctr_close(c);
    for (size_t k = 0; k < nstates; k++)
        free(states[k].p);
    free(states);
    free(m.p);
    sim_free(&d);
#undef PUSH_STATE
#undef RESET_STATES
}

/* ---------------------------------------------------------------- 4 ---- */

/* A container whose history has strictly growing lengths, so that any
 * committed state is identified by its length. Returns the image; states
 * receive every committed content. */
typedef struct history {
    snapshot *s;
    size_t n;
} history;

static const snapshot *history_find(const history *h, uint64_t len)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->s[i].n == len)
            return &h->s[i];
    return NULL;
}

static simimg build_history(sqz_alg alg, int log2bs, history *h, int ncommits)
{
    sqz_params p = mkparams(alg, sqz_level_default(alg), log2bs);
    sqz_ctr *c = create_mem(&p);
    size_t bs = (size_t)1 << log2bs;
    model m = {0};
    uint64_t rng = 99 + (uint64_t)alg;
    unsigned char *buf = malloc(2 * bs);
    REQUIRE(buf);
    h->s = calloc((size_t)ncommits + 1, sizeof *h->s);
    REQUIRE(h->s);
    h->n = 0;
    h->s[h->n++] = (snapshot){malloc(1), 0};
    for (int i = 0; i < ncommits; i++) {
        size_t grow = 1 + (size_t)(sqz_test_rand(&rng) % bs);
        size_t n = (size_t)(sqz_test_rand(&rng) % (2 * bs));
        size_t off = m.n + grow > n ? (size_t)(sqz_test_rand(&rng) %
                                               (m.n + grow - n + 1)) : 0;
        if (off + n < m.n + grow)
            n = m.n + grow - off; /* the write reaches the new end */
        if (n > 2 * bs) {
            off = m.n + grow - 2 * bs;
            n = 2 * bs;
        }
        int kind = i % 7 == 3 ? 3 : (int)(sqz_test_rand(&rng) % 5);
        sqz_test_fill(buf, n, kind, (uint64_t)i);
        REQUIRE(sqz_ctr_pwrite(c, buf, n, off) == (ssize_t)n);
        model_resize(&m, off + n);
        memcpy(m.p + off, buf, n);
        snapshot s = {malloc(m.n), m.n};
        REQUIRE(s.p);
        memcpy(s.p, m.p, m.n);
        h->s[h->n++] = s;
        if (i == ncommits / 3 || i == 2 * ncommits / 3)
            REQUIRE(sqz_ctr_checkpoint(c) == 0);
    }
    simimg im = sim_read_fd(sqz_ctr_fd(c));
    sqz_ctr_close(c);
    free(buf);
    free(m.p);
    return im;
}

static void history_free(history *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->s[i].p);
    free(h->s);
}

/* Open a damaged image read-only and check: open fails with -EBADMSG, or
 * it shows a committed state in which every block reads back exactly or
 * fails with -EIO; blocks failing imply verify problems. Returns 1 if the
 * open succeeded, 2 if some block was damaged, 0 if the open failed. */
static int check_damaged(const simimg *im, const history *h, const char *what,
                         int *failed, int *problems_out)
{
    if (problems_out)
        *problems_out = 0;
    int fd = memfd_with(im->p, im->n);
    sqz_ctr *c;
    int r = sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, what, &c);
    if (r != 0) {
        if (r != -EBADMSG) {
            fprintf(stderr, "%s: open gave %d\n", what, r);
            *failed = 1;
        }
        return 0;
    }
    uint64_t len = sqz_ctr_length(c);
    const snapshot *s = history_find(h, len);
    if (!s) {
        fprintf(stderr, "%s: length %llu is no committed state\n", what,
                (unsigned long long)len);
        *failed = 1;
        sqz_ctr_close(c);
        return 1;
    }
    size_t bs = sqz_ctr_block_size(c);
    unsigned char *blk = malloc(bs);
    REQUIRE(blk);
    int damaged = 0;
    uint64_t nb = sqz_ctr_nblocks(c);
    for (uint64_t b = 0; b < nb; b++) {
        ssize_t g = sqz_ctr_read_block(c, b, blk, NULL);
        size_t valid = len - b * bs < bs ? (size_t)(len - b * bs) : bs;
        if (g == -EIO) {
            damaged = 1;
            continue;
        }
        if (g != (ssize_t)valid || memcmp(blk, s->p + b * bs, valid) != 0) {
            fprintf(stderr, "%s: block %llu reads wrong bytes (%zd)\n", what,
                    (unsigned long long)b, g);
            *failed = 1;
        }
    }
    struct sqz_ctr_stat st;
    CHECK_EQ_INT(sqz_ctr_stat(c, &st), 0);
    int problems = sqz_ctr_verify(c, quiet_report, &g_verbose);
    if (problems_out)
        *problems_out = problems;
    if (problems < 0 || (damaged && problems == 0)) {
        fprintf(stderr, "%s: verify gave %d with damaged blocks\n", what,
                problems);
        *failed = 1;
    }
    free(blk);
    sqz_ctr_close(c);
    return damaged ? 2 : 1;
}

/* re-seal the record at off after a test modified its fields */
static void reseal(simimg *im, uint64_t off)
{
    uint32_t plen = sqz_get32(im->p + off + 24);
    sqz_rec_seal(im->p + off, im->p[off + 4], sqz_get64(im->p + off + 8),
                 sqz_get64(im->p + off + 16), plen);
}

/* offsets of all records of a clean image (walk from the log start, stepping over
 * punched space) */
static size_t record_offsets(const simimg *im, uint64_t *offs, size_t max)
{
    size_t n = 0;
    uint64_t pos = SQZ_LOG_START_V2;
    while (pos + SQZ_REC_HDR <= im->n && n < max) {
        if (sqz_get32(im->p + pos) != SQZ_REC_MAGIC) {
            pos += 8;
            continue;
        }
        offs[n++] = pos;
        pos += sqz_rec_size(sqz_get32(im->p + pos + 24));
    }
    return n;
}

static void test_corruption(void)
{
    int failed = 0, opened = 0, damaged_seen = 0, refused = 0;
    history h;
    simimg orig = build_history(SQZ_ALG_ZSTD, 12, &h, 40);
    uint64_t offs[512];
    size_t nrec = record_offsets(&orig, offs, 512);
    CHECK(nrec > 40);
    /* clean image first */
    CHECK_EQ_INT(check_damaged(&orig, &h, "clean", &failed, NULL), 1);
    simimg im = {malloc(orig.n), orig.n};
    REQUIRE(im.p);
    uint64_t rng = 4242;
    /* bit flips: every bit of the header and anchors, and random bits
     * across the log, plus every record header */
    enum { AB = SQZ_ANCHOR_SIZE * 8 };
    for (int t = 0; t < 64 * 8 + 2 * AB + 700 + (int)nrec * 4; t++) {
        uint64_t bit;
        if (t < 64 * 8)
            bit = (uint64_t)t;
        else if (t < 64 * 8 + 2 * AB) {
            int k = t - 64 * 8;
            bit = (SQZ_ANCHOR_OFF(k / AB)) * 8ull + (uint64_t)(k % AB);
        } else if (t < 64 * 8 + 2 * AB + 700)
            bit = SQZ_LOG_START_V2 * 8ull +
                  sqz_test_rand(&rng) % ((orig.n - SQZ_LOG_START_V2) * 8);
        else {
            int k = t - (64 * 8 + 2 * AB + 700);
            bit = offs[k / 4] * 8 + sqz_test_rand(&rng) % (SQZ_REC_HDR * 8 + 64);
            if (bit >= orig.n * 8)
                continue;
        }
        memcpy(im.p, orig.p, orig.n);
        im.p[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        char what[64];
        snprintf(what, sizeof what, "flip bit %llu", (unsigned long long)bit);
        int r = check_damaged(&im, &h, what, &failed, NULL);
        opened += r > 0;
        refused += r == 0;
        damaged_seen += r == 2;
        if (t < 64 * 8 && r != 0) {
            fprintf(stderr, "header bit %llu flipped: opened\n",
                    (unsigned long long)bit);
            failed = 1;
        }
    }
    CHECK(damaged_seen > 50); /* payload flips are found */
    /* truncation at many lengths */
    for (uint64_t len = 0; len < orig.n; len += 1 + len / 8) {
        simimg t = {orig.p, (size_t)len};
        char what[64];
        snprintf(what, sizeof what, "truncated to %llu", (unsigned long long)len);
        int r = check_damaged(&t, &h, what, &failed, NULL);
        /* shorter than the header region: refused, except what the torn
         * first write of a lazy creation leaves (a version-2 header, then
         * only zeros: docs/FORMAT.md "Creation"), which is an empty file */
        int torn_ok = len >= SQZ_HDR_SIZE && len <= SQZ_ANCHOR_OFF(0);
        if (len < SQZ_LOG_START_V2 && r != 0 && !torn_ok) {
            fprintf(stderr, "%s: opened\n", what);
            failed = 1;
        }
        if (len < SQZ_LOG_START_V2 && r != 0 && torn_ok) {
            sqz_ctr *e;
            REQUIRE(sqz_ctr_open_fd(memfd_with(t.p, t.n), SQZ_OPEN_RDONLY,
                                    what, &e) == 0);
            CHECK_EQ_INT(sqz_ctr_length(e), 0);
            CHECK(sqz_ctr_tail_bytes(e) == len); /* verify: not clean */
            sqz_ctr_close(e);
        }
    }
    /* hostile fields with valid checksums */
    uint64_t ckpt_off = 0, commit_off = 0, data_off = 0;
    for (size_t i = 0; i < nrec; i++) {
        uint8_t type = orig.p[offs[i] + 4];
        if (type == SQZ_REC_CHECKPOINT)
            ckpt_off = offs[i]; /* the newest */
        if (type == SQZ_REC_COMMIT && ckpt_off && !commit_off)
            commit_off = offs[i]; /* first commit after a checkpoint */
        if (type == SQZ_REC_DATA && !data_off)
            data_off = offs[i];
    }
    REQUIRE(ckpt_off && commit_off && data_off);
    struct { uint64_t rec, field; int width; uint64_t value; const char *what; }
    hostile[] = {
        {ckpt_off, 32 + 8, 8, 1ull << 40, "checkpoint count 2^40"},
        {ckpt_off, 32 + 8, 8, UINT64_MAX, "checkpoint count max"},
        {ckpt_off, 32, 8, SQZ_MAX_LENGTH + 1, "checkpoint length huge"},
        {ckpt_off, 32 + 16, 8, 1ull << 50, "checkpoint block idx huge"},
        {ckpt_off, 32 + 16 + 8, 8, 1ull << 40, "checkpoint entry offset huge"},
        {ckpt_off, 32 + 16 + 8, 8, 512, "checkpoint entry offset in header"},
        {ckpt_off, 32 + 16 + 16, 4, UINT32_MAX, "checkpoint entry len huge"},
        {ckpt_off, 24, 4, UINT32_MAX - 64, "checkpoint payload length huge"},
        {commit_off, 32 + 8, 4, UINT32_MAX, "commit count huge"},
        {commit_off, 32, 8, UINT64_MAX, "commit length huge"},
        {commit_off, 32 + 16 + 8, 8, 1ull << 40, "commit entry offset huge"},
        {commit_off, 32 + 16 + 16, 4, 1u << 30, "commit entry len huge"},
        {commit_off, 16, 8, 12345, "commit txn out of sequence"},
        {data_off, 24, 4, UINT32_MAX - 40, "data payload length huge"},
    };
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        memcpy(im.p, orig.p, orig.n);
        uint8_t *f = im.p + hostile[i].rec + hostile[i].field;
        if (hostile[i].width == 8)
            sqz_put64(f, hostile[i].value);
        else
            sqz_put32(f, (uint32_t)hostile[i].value);
        if (hostile[i].field != 24) /* a resealed bogus length would run off */
            reseal(&im, hostile[i].rec);
        int problems;
        int r = check_damaged(&im, &h, hostile[i].what, &failed, &problems);
        if (hostile[i].rec == ckpt_off && r != 0 && problems == 0) {
            /* the newest checkpoint is referenced by an anchor: either the
             * open falls back to the older anchor (an older committed state)
             * and verify reports the damage, or it refuses */
            fprintf(stderr, "%s: opened\n", hostile[i].what);
            failed = 1;
        }
    }
    /* hostile anchor: valid checksum, checkpoint offset past the end */
    memcpy(im.p, orig.p, orig.n);
    for (unsigned s = 0; s < 2; s++) {
        sqz_anchor a;
        uint64_t fid = sqz_get64(im.p + 40);
        if (sqz_anchor_decode(im.p + SQZ_ANCHOR_OFF(s), s, fid, SQZ_LOG_START_V2,
                              &a) == 1) {
            a.ckpt_off = 1ull << 40;
            a.ckpt_len = 1ull << 40;
            sqz_anchor_encode(&a, s, fid, im.p + SQZ_ANCHOR_OFF(s));
        }
    }
    CHECK_EQ_INT(check_damaged(&im, &h, "anchors point away", &failed, NULL), 0);
    /* garbage headers */
    for (int g = 0; g < 50; g++) {
        memcpy(im.p, orig.p, orig.n);
        sqz_test_fill(im.p, 4096, 0, (uint64_t)g);
        if (g % 2)
            memcpy(im.p, sqz_hdr_magic, 8);
        CHECK_EQ_INT(check_damaged(&im, &h, "garbage header", &failed, NULL), 0);
    }
    /* verify_fd on a damaged header reports, does not fail */
    memcpy(im.p, orig.p, orig.n);
    im.p[20] ^= 1;
    int fd = memfd_with(im.p, im.n);
    CHECK_EQ_INT(sqz_verify_fd(fd, "damaged", quiet_report, &g_verbose), 1);
    CHECK_EQ_INT(sqz_ctr_probe_fd(fd), -EBADMSG); /* damaged, not plain */
    close(fd);
    fd = memfd_with(orig.p, orig.n);
    CHECK_EQ_INT(sqz_verify_fd(fd, "clean", quiet_report, &g_verbose), 0);
    CHECK_EQ_INT(sqz_ctr_probe_fd(fd), 1);
    close(fd);
    CHECK(!failed);
    printf("corruption: %d opened (%d with damaged blocks), %d refused\n",
           opened, damaged_seen, refused);
    free(im.p);
    free(orig.p);
    history_free(&h);
}

/* ---------------------------------------------------------------- 5 ---- */

typedef struct conc {
    sqz_ctr *c;
    size_t bs;
    uint64_t nblocks;
    int done;
    int bad;
    uint64_t reads;
} conc;

/* block b at version v: every 8-byte word is (b << 32 | v), v >= 1 */
static void conc_fill(unsigned char *p, size_t bs, uint64_t b, uint64_t v)
{
    for (size_t i = 0; i < bs; i += 8)
        sqz_put64(p + i, b << 32 | v);
}

static void *conc_reader(void *arg)
{
    conc *k = arg;
    unsigned char *buf = malloc(k->bs);
    REQUIRE(buf);
    uint64_t rng = (uint64_t)(uintptr_t)arg ^ (uint64_t)pthread_self();
    while (!__atomic_load_n(&k->done, __ATOMIC_ACQUIRE)) {
        uint64_t b = sqz_test_rand(&rng) % k->nblocks;
        ssize_t r = sqz_ctr_read_block(k->c, b, buf, NULL);
        if (r < 0) {
            __atomic_store_n(&k->bad, 1, __ATOMIC_RELAXED);
            break;
        }
        uint64_t w0 = sqz_get64(buf);
        int ok = w0 == 0 || (w0 >> 32) == b;
        for (size_t i = 8; ok && i < k->bs; i += 8)
            ok = sqz_get64(buf + i) == w0;
        if (!ok)
            __atomic_store_n(&k->bad, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&k->reads, 1, __ATOMIC_RELAXED);
    }
    free(buf);
    return NULL;
}

static void test_concurrency(void)
{
    sqz_params p = mkparams(SQZ_ALG_LZ4, 0, 14);
    conc k = {.c = create_mem(&p), .bs = 1u << 14, .nblocks = 64};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        REQUIRE(pthread_create(&th[i], NULL, conc_reader, &k) == 0);
    unsigned char *buf = malloc(2 * k.bs);
    REQUIRE(buf);
    uint64_t rng = 5;
    for (uint64_t v = 1; v <= 1500; v++) {
        uint64_t b = sqz_test_rand(&rng) % (k.nblocks - 1);
        conc_fill(buf, k.bs, b, v);
        conc_fill(buf + k.bs, k.bs, b + 1, v);
        REQUIRE(sqz_ctr_pwrite(k.c, buf, 2 * k.bs, b * k.bs) ==
                (ssize_t)(2 * k.bs));
        if (v % 100 == 0)
            CHECK_EQ_INT(sqz_ctr_sync(k.c, 1), 0);
        if (v % 500 == 0)
            CHECK_EQ_INT(sqz_ctr_checkpoint(k.c), 0);
        if (v % 50 == 0) {
            struct sqz_ctr_stat st;
            CHECK_EQ_INT(sqz_ctr_stat(k.c, &st), 0);
        }
    }
    __atomic_store_n(&k.done, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(!k.bad);
    CHECK(k.reads > 100);
    CHECK_EQ_INT(sqz_ctr_verify(k.c, quiet_report, &g_verbose), 0);
    printf("concurrency: %llu reads\n", (unsigned long long)k.reads);
    sqz_ctr_close(k.c);
    free(buf);
}

/* ---------------------------------------------------------------- 6 ---- */

/* Bit rot in the synced part of the log: a damaged record is skipped, its
 * block gives -EIO, everything else (before and after it) stays readable
 * and nothing is truncated. */

enum { ROT_BS_LOG2 = 17, ROT_LEN = 4 << 20, ROT_CHUNK = 256 << 10 };

typedef struct reports {
    int n;
    char msg[32][256];
} reports;

static void collect_report(void *user, const char *msg)
{
    reports *r = user;
    if (g_verbose)
        fprintf(stderr, "[verify] %s\n", msg);
    if (r->n < 32)
        snprintf(r->msg[r->n++], sizeof r->msg[0], "%s", msg);
}

/* some report names "offset OFF" (not a longer number) */
static int reports_offset(const reports *r, uint64_t off)
{
    char pat[48];
    int k = snprintf(pat, sizeof pat, "offset %llu", (unsigned long long)off);
    for (int i = 0; i < r->n; i++) {
        const char *p = strstr(r->msg[i], pat);
        if (p && (p[k] < '0' || p[k] > '9'))
            return 1;
    }
    return 0;
}

/* 4 MiB of text at 128 KiB blocks in 16 commits and one sync: no
 * checkpoint, everything covered by the durable mark. */
static simimg build_synced(unsigned char **data)
{
    sqz_params p = mkparams(SQZ_ALG_ZSTD, 1, ROT_BS_LOG2);
    sqz_ctr *c = create_mem(&p);
    *data = malloc(ROT_LEN);
    REQUIRE(*data);
    sqz_test_fill(*data, ROT_LEN, 2, 77);
    for (size_t off = 0; off < ROT_LEN; off += ROT_CHUNK)
        REQUIRE(sqz_ctr_pwrite(c, *data + off, ROT_CHUNK, off) == ROT_CHUNK);
    CHECK_EQ_INT(sqz_ctr_sync(c, 1), 0);
    CHECK_EQ_INT(c->st.ckpt_off, 0); /* below the checkpoint threshold */
    simimg im = sim_read_fd(sqz_ctr_fd(c));
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    /* the sync left a durable mark at the end of the log */
    uint64_t fid = sqz_get64(im.p + 40), mark = 0;
    for (unsigned slot = 0; slot < 2; slot++) {
        sqz_anchor a;
        if (sqz_anchor_decode(im.p + SQZ_ANCHOR_OFF(slot), slot, fid, SQZ_LOG_START_V2,
                              &a) == 1 &&
            a.durable_end > mark)
            mark = a.durable_end;
    }
    CHECK_EQ_INT(mark, im.n);
    return im;
}

/* Check an open container against model (length len): every block reads
 * back exactly or (only if may_eio[b]) fails with -EIO. Returns the number
 * of -EIO blocks; eio[b] receives which. */
static int rot_blocks(sqz_ctr *c, const unsigned char *model, size_t len,
                      const unsigned char *may_eio, unsigned char *eio,
                      const char *what, int *failed)
{
    size_t bs = sqz_ctr_block_size(c);
    unsigned char *blk = malloc(bs);
    REQUIRE(blk);
    if (sqz_ctr_length(c) != len) {
        fprintf(stderr, "%s: length %llu, want %zu\n", what,
                (unsigned long long)sqz_ctr_length(c), len);
        *failed = 1;
    }
    int n = 0;
    uint64_t nb = (len + bs - 1) / bs;
    for (uint64_t b = 0; b < nb; b++) {
        ssize_t g = sqz_ctr_read_block(c, b, blk, NULL);
        size_t valid = len - b * bs < bs ? (size_t)(len - b * bs) : bs;
        if (eio)
            eio[b] = g == -EIO;
        if (g == -EIO && (!may_eio || may_eio[b])) {
            n++;
            continue;
        }
        if (g != (ssize_t)valid || memcmp(blk, model + b * bs, valid) != 0) {
            fprintf(stderr, "%s: block %llu: %s (%zd)\n", what,
                    (unsigned long long)b,
                    g < 0 ? "error" : "wrong bytes", g);
            *failed = 1;
        }
    }
    free(blk);
    return n;
}

/* Open the damaged image RDONLY and RDWR; check blocks, verify, then keep
 * writing on the RDWR open, sync, reopen and check again. rec_off: the
 * record that verify must name. may_eio: NULL = any block may be -EIO.
 * Returns the number of -EIO blocks seen on the first open. */
static int rot_check(const simimg *im, const unsigned char *data,
                     const unsigned char *may_eio, uint64_t rec_off,
                     const char *what, int *failed)
{
    size_t bs = (size_t)1 << ROT_BS_LOG2, nb = ROT_LEN / bs;
    unsigned char eio[ROT_LEN >> ROT_BS_LOG2];
    sqz_ctr *c;
    REQUIRE(sqz_ctr_open_fd(memfd_with(im->p, im->n), SQZ_OPEN_RDONLY, what,
                            &c) == 0);
    int neio = rot_blocks(c, data, ROT_LEN, may_eio, eio, what, failed);
    reports rep = {0};
    int problems = sqz_ctr_verify(c, collect_report, &rep);
    if (problems < 1 || !reports_offset(&rep, rec_off)) {
        fprintf(stderr, "%s: verify gave %d problems, offset %llu %snamed\n",
                what, problems, (unsigned long long)rec_off,
                reports_offset(&rep, rec_off) ? "" : "not ");
        *failed = 1;
    }
    CHECK_EQ_INT(sqz_ctr_close(c), 0);

    /* RDWR: nothing is truncated, the same blocks are damaged */
    REQUIRE(sqz_ctr_open_fd(memfd_with(im->p, im->n), SQZ_OPEN_RDWR, what,
                            &c) == 0);
    struct stat st;
    REQUIRE(fstat(sqz_ctr_fd(c), &st) == 0);
    CHECK_EQ_INT(st.st_size, im->n);
    unsigned char eio2[ROT_LEN >> ROT_BS_LOG2];
    CHECK_EQ_INT(rot_blocks(c, data, ROT_LEN, may_eio, eio2, what, failed),
                 neio);
    CHECK(memcmp(eio, eio2, nb) == 0);
    /* more writes: append 300 KiB, rewrite the first intact block */
    size_t more = 300 << 10, len = ROT_LEN + more;
    unsigned char *model = malloc(len);
    REQUIRE(model);
    memcpy(model, data, ROT_LEN);
    sqz_test_fill(model + ROT_LEN, more, 2, 78);
    CHECK_EQ_INT(sqz_ctr_pwrite(c, model + ROT_LEN, more, ROT_LEN),
                 (ssize_t)more);
    size_t fix = 0;
    while (fix < nb && eio[fix])
        fix++;
    REQUIRE(fix < nb);
    sqz_test_fill(model + fix * bs, bs, 4, 79);
    CHECK_EQ_INT(sqz_ctr_pwrite(c, model + fix * bs, bs, fix * bs),
                 (ssize_t)bs);
    CHECK_EQ_INT(sqz_ctr_sync(c, 1), 0);
    c = reopen(c, SQZ_OPEN_RDONLY);
    unsigned char eio3[(ROT_LEN >> ROT_BS_LOG2) + 3];
    unsigned char may3[(ROT_LEN >> ROT_BS_LOG2) + 3];
    memcpy(may3, eio, nb);
    memset(may3 + nb, 0, 3);
    CHECK_EQ_INT(rot_blocks(c, model, len, may3, eio3, what, failed), neio);
    REQUIRE(fstat(sqz_ctr_fd(c), &st) == 0);
    CHECK((uint64_t)st.st_size > im->n);
    rep.n = 0;
    problems = sqz_ctr_verify(c, collect_report, &rep);
    CHECK(problems >= 1 && reports_offset(&rep, rec_off));
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    free(model);
    return neio;
}

/* the record of a clean image containing byte off */
static uint64_t record_at(const simimg *im, uint64_t off)
{
    uint64_t offs[1024];
    size_t n = record_offsets(im, offs, 1024);
    REQUIRE(n > 0 && n < 1024);
    size_t i = 0;
    while (i + 1 < n && offs[i + 1] <= off)
        i++;
    return offs[i];
}

static void flip64(simimg *im, uint64_t off)
{
    for (int i = 0; i < 64; i++)
        im->p[off + (uint64_t)i] ^= 0xff;
}

static void test_rot_in_synced_log(void)
{
    int failed = 0;
    unsigned char *data;
    simimg orig = build_synced(&data);
    simimg im = {malloc(orig.n), orig.n};
    REQUIRE(im.p);
    size_t nb = ROT_LEN >> ROT_BS_LOG2;

    /* (a) 64 bytes flipped in the middle of the file: a DATA record */
    memcpy(im.p, orig.p, orig.n);
    uint64_t mid = orig.n / 2;
    flip64(&im, mid);
    int neio = rot_check(&im, data, NULL, record_at(&orig, mid), "rot middle",
                         &failed);
    CHECK(neio >= 1 && neio <= 2);

    /* (b) the flip lands on COMMIT records: blocks of that transaction read
     * exactly or -EIO, all others (earlier and later) exactly */
    uint64_t offs[1024];
    size_t nrec = record_offsets(&orig, offs, 1024);
    uint64_t commits[64];
    size_t ncommit = 0;
    for (size_t i = 0; i < nrec && ncommit < 64; i++)
        if (orig.p[offs[i] + 4] == SQZ_REC_COMMIT)
            commits[ncommit++] = offs[i];
    CHECK_EQ_INT(ncommit, ROT_LEN / ROT_CHUNK);
    size_t per = ROT_CHUNK >> ROT_BS_LOG2; /* blocks per transaction */
    for (size_t t = 1; t + 1 < ncommit; t += 3) {
        for (int where = 0; where < 2; where++) {
            unsigned char may[ROT_LEN >> ROT_BS_LOG2];
            memset(may, 0, sizeof may);
            /* where 0: the whole COMMIT; 1: its end and the header of the
             * next transaction's first DATA record */
            uint64_t at = where == 0 ? commits[t] : commits[t] + 64;
            for (size_t b = t * per; b < (t + 2) * per && b < nb; b++)
                may[b] = 1;
            memcpy(im.p, orig.p, orig.n);
            flip64(&im, at);
            char what[64];
            snprintf(what, sizeof what, "rot commit %zu/%d", t, where);
            rot_check(&im, data, may, commits[t], what, &failed);
        }
    }

    /* the last COMMIT (at the durable mark): no later commit tells the
     * length, but the durable mark's length extension does: its intact
     * DATA records are applied, the file keeps its synced length and every
     * block reads exactly; verify reports the lost commit record */
    memcpy(im.p, orig.p, orig.n);
    flip64(&im, commits[ncommit - 1]);
    sqz_ctr *c;
    int lastfd = memfd_with(im.p, im.n);
    CHECK_EQ_INT(sqz_ctr_open_fd(dup(lastfd), SQZ_OPEN_RDWR, "rot last commit",
                                 &c), 0);
    CHECK_EQ_INT(sqz_ctr_length(c), ROT_LEN);
    unsigned char none[ROT_LEN >> ROT_BS_LOG2], eiol[ROT_LEN >> ROT_BS_LOG2];
    memset(none, 0, sizeof none);
    CHECK_EQ_INT(rot_blocks(c, data, ROT_LEN, none, eiol, "rot last commit",
                            &failed), 0);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    CHECK(sqz_verify_fd(lastfd, "rot last commit", quiet_report, &g_verbose) >= 1);
    close(lastfd);
    /* the same without the extension (anchors written by an older
     * version): the length is unknown, so the file is refused rather than
     * shown shorter than it was synced (a silent loss) */
    for (unsigned s = 0; s < 2; s++)
        memset(im.p + 512 + 512 * s + 56, 0, 40);
    lastfd = memfd_with(im.p, im.n);
    CHECK_EQ_INT(sqz_ctr_open_fd(dup(lastfd), SQZ_OPEN_RDWR, "rot last commit v1",
                                 &c), -EBADMSG);
    CHECK(sqz_verify_fd(lastfd, "rot last commit v1", quiet_report, &g_verbose) >= 1);
    uint64_t mlen = 0;
    CHECK_EQ_INT(sqz_ctr_marked_length_fd(lastfd, &mlen), -ENODATA);
    close(lastfd);
    /* a destroyed header: the marked length is still readable */
    memcpy(im.p, orig.p, orig.n);
    memset(im.p, 0xff, 64);
    lastfd = memfd_with(im.p, im.n);
    CHECK_EQ_INT(sqz_ctr_marked_length_fd(lastfd, &mlen), 0);
    CHECK_EQ_INT(mlen, ROT_LEN);
    close(lastfd);

    /* 64 bytes flipped anywhere in the log: the open fails or every block
     * reads back exactly or -EIO, never wrong bytes */
    uint64_t rng = 31337;
    int refused = 0;
    for (int t = 0; t < 60; t++) {
        uint64_t at = SQZ_LOG_START_V2 +
                      sqz_test_rand(&rng) % (orig.n - SQZ_LOG_START_V2 - 64);
        memcpy(im.p, orig.p, orig.n);
        flip64(&im, at);
        int o = sqz_ctr_open_fd(memfd_with(im.p, im.n), SQZ_OPEN_RDONLY,
                                "rot random", &c);
        if (o != 0) {
            CHECK_EQ_INT(o, -EBADMSG);
            refused++;
            continue;
        }
        uint64_t len = sqz_ctr_length(c);
        CHECK(len % ROT_CHUNK == 0 && len >= ROT_LEN - ROT_CHUNK);
        rot_blocks(c, data, (size_t)len, NULL, NULL, "rot random", &failed);
        CHECK(sqz_ctr_verify(c, quiet_report, &g_verbose) >= 1);
        CHECK_EQ_INT(sqz_ctr_close(c), 0);
    }
    CHECK(refused < 10);

    /* a large damaged region (a third of the log zeroed) destroys whole
     * transactions: which blocks they wrote is unknown, so showing the
     * other blocks' older contents could be wrong: the open fails (and
     * changes nothing), verify reports it */
    memcpy(im.p, orig.p, orig.n);
    memset(im.p + orig.n / 4, 0, orig.n / 3);
    for (int mode = 0; mode < 2; mode++) {
        int fd = memfd_with(im.p, im.n);
        int keep = dup(fd);
        REQUIRE(keep >= 0);
        CHECK_EQ_INT(sqz_ctr_open_fd(fd, mode ? SQZ_OPEN_RDWR : SQZ_OPEN_RDONLY,
                                     "rot zeros", &c), -EBADMSG);
        struct stat st;
        REQUIRE(fstat(keep, &st) == 0);
        CHECK_EQ_INT(st.st_size, im.n);
        CHECK_EQ_INT(sqz_verify_fd(keep, "rot zeros", quiet_report, &g_verbose), 1);
        close(keep);
    }
    CHECK(!failed);
    free(im.p);
    free(orig.p);
    free(data);
}

/* ------------------------------------------------------------- corpus ---- */

static void write_file(const char *dir, const char *name, const void *p,
                       size_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static void write_corpus(const char *dir)
{
    const sqz_alg *algs = sqz_all_algs; /* one valid-ALG seed per codec */
    for (size_t i = 0; i < SQZ_ALG_COUNT; i++) {
        history h;
        simimg im = build_history(algs[i], 12, &h, 6 + (int)i);
        char name[64];
        snprintf(name, sizeof name, "valid-%s", sqz_alg_name(algs[i]));
        write_file(dir, name, im.p, im.n);
        if (algs[i] == SQZ_ALG_ZSTD) {
            im.p[im.n / 2] ^= 0x10;
            write_file(dir, "damaged-payload-zstd", im.p, im.n);
            write_file(dir, "truncated-zstd", im.p, im.n - 100);
            im.p[im.n / 2] ^= 0x10;
            im.p[SQZ_ANCHOR_OFF(1) + 20] ^= 1;
            write_file(dir, "damaged-anchor-zstd", im.p, im.n);
            im.p[30] ^= 1;
            write_file(dir, "damaged-header-zstd", im.p, im.n);
        }
        free(im.p);
        history_free(&h);
    }
    sqz_params p = mkparams(SQZ_ALG_LZ4, 0, 12);
    sqz_ctr *c = create_mem(&p);
    simimg im = sim_read_fd(sqz_ctr_fd(c));
    write_file(dir, "empty-lz4", im.p, im.n);
    free(im.p);
    sqz_ctr_close(c);
    printf("corpus written to %s\n", dir);
}

/* verify tells a tail torn by a crash (harmless: a warning) from damage in
 * the middle of the log that hides later valid commits (a problem). */
static void test_tail_vs_damage(void)
{
    sqz_params p = mkparams(SQZ_ALG_ZSTD, 1, 12);
    sqz_ctr *c = create_mem(&p);
    int fd = dup(sqz_ctr_fd(c));
    REQUIRE(fd >= 0);
    char blk[4096];
    uint64_t ends[4];
    for (int i = 0; i < 4; i++) {
        sqz_test_fill(blk, sizeof blk, 2, (uint64_t)i);
        CHECK_EQ_INT(sqz_ctr_pwrite(c, blk, sizeof blk, (uint64_t)i * 4096), 4096);
        struct stat st;
        REQUIRE(fstat(fd, &st) == 0);
        ends[i] = (uint64_t)st.st_size;
    }
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    /* a torn tail: cut the last commit in half */
    uint64_t torn = ends[2] + (ends[3] - ends[2]) / 2;
    int t = memfd_create("torn", MFD_CLOEXEC);
    REQUIRE(t >= 0);
    char *img = malloc(ends[3]);
    REQUIRE(img);
    CHECK_EQ_INT(pread(fd, img, ends[3], 0), (ssize_t)ends[3]);
    CHECK_EQ_INT(write(t, img, torn), (ssize_t)torn);
    CHECK_EQ_INT(sqz_verify_fd(t, "torn", quiet_report, &g_verbose), 0);
    {
        /* not damage, but never "clean": the tail is reported */
        sqz_verify_extra ex;
        CHECK_EQ_INT(sqz_verify_fd_ex(t, "torn", quiet_report, &g_verbose, &ex), 0);
        CHECK_EQ_INT(ex.tail_bytes, torn - ends[2]);
        CHECK_EQ_INT(ex.warnings, 0);
    }
    close(t);
    /* a destroyed header (magic and all) still probes as a damaged
     * container, never as a plain file whose bytes would be served */
    int h = memfd_create("hdr", MFD_CLOEXEC);
    REQUIRE(h >= 0);
    char *bad = malloc(ends[3]);
    REQUIRE(bad);
    memcpy(bad, img, ends[3]);
    memset(bad, 0xff, 64);
    CHECK_EQ_INT(write(h, bad, ends[3]), (ssize_t)ends[3]);
    CHECK_EQ_INT(sqz_ctr_probe_fd(h), -EBADMSG);
    bad[0] ^= 0xff; /* magic intact again, checksum still wrong */
    CHECK_EQ_INT(pwrite(h, bad, 64, 0), 64);
    CHECK_EQ_INT(sqz_ctr_probe_fd(h), -EBADMSG);
    CHECK(sqz_verify_fd(h, "hdr", quiet_report, &g_verbose) >= 1);
    close(h);
    free(bad);
    /* never synced: a bad record in the middle followed by intact, chained
     * commits is damage by evidence (not a torn tail): the file keeps its
     * length, the damaged block reads as EIO, the others exactly, and
     * verify reports it */
    uint64_t mid = ends[0] + (ends[1] - ends[0]) / 2;
    img[mid] ^= 0x40;
    int d = memfd_create("mid", MFD_CLOEXEC);
    REQUIRE(d >= 0);
    CHECK_EQ_INT(write(d, img, ends[3]), (ssize_t)ends[3]);
    CHECK(sqz_verify_fd(d, "mid", quiet_report, &g_verbose) >= 1);
    {
        sqz_ctr *mc;
        REQUIRE(sqz_ctr_open_fd(dup(d), SQZ_OPEN_RDWR, "mid", &mc) == 0);
        CHECK_EQ_INT(sqz_ctr_length(mc), 4 * 4096);
        char got[4096];
        for (int i = 0; i < 4; i++) {
            sqz_test_fill(blk, sizeof blk, 2, (uint64_t)i);
            ssize_t r = sqz_ctr_read_block(mc, (uint64_t)i, got, NULL);
            if (i == 1)
                CHECK_EQ_INT(r, -EIO);
            else
                CHECK(r == 4096 && memcmp(got, blk, 4096) == 0);
        }
        CHECK_EQ_INT(sqz_ctr_close(mc), 0);
    }
    close(d);
    free(img);
    close(fd);
    /* synced: the same flip is damage inside the durable log */
    c = create_mem(&p);
    fd = dup(sqz_ctr_fd(c));
    REQUIRE(fd >= 0);
    for (int i = 0; i < 4; i++) {
        sqz_test_fill(blk, sizeof blk, 2, (uint64_t)i);
        CHECK_EQ_INT(sqz_ctr_pwrite(c, blk, sizeof blk, (uint64_t)i * 4096), 4096);
    }
    CHECK_EQ_INT(sqz_ctr_sync(c, 1), 0);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    char byte;
    CHECK_EQ_INT(pread(fd, &byte, 1, mid), 1);
    byte ^= 0x40;
    CHECK_EQ_INT(pwrite(fd, &byte, 1, mid), 1);
    CHECK(sqz_verify_fd(fd, "mid synced", quiet_report, &g_verbose) >= 1);
    close(fd);
}

/* SQZ_LABEL_FROM_FD: a container opened without a label text is named in
 * log lines by its file's path, relative to the label root (absolute
 * without one), also when the open itself fails; a file renamed since it
 * was opened is named by its new path. */
static logsink *g_sink;

static void test_lazy_label(void)
{
    char *dir = sqz_test_tmpdir();
    REQUIRE(dir);
    char sub[4200], path[4300], moved[4300], bad[4300];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(path, sizeof path, "%s/f", sub);
    snprintf(moved, sizeof moved, "%s/g", sub);
    snprintf(bad, sizeof bad, "%s/bad", sub);
    REQUIRE(mkdir(sub, 0755) == 0);
    sqz_params p = mkparams(SQZ_ALG_LZ4, 0, 12);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
    REQUIRE(fd >= 0);
    sqz_ctr *c;
    REQUIRE(sqz_ctr_create_fd(fd, &p, SQZ_LABEL_FROM_FD, &c) == 0);
    unsigned char blk[4096];
    sqz_test_fill(blk, sizeof blk, 0, 7); /* random: stored raw */
    CHECK_EQ_INT(sqz_ctr_pwrite(c, blk, sizeof blk, 0), 4096);
    CHECK_EQ_INT(sqz_ctr_sync(c, 1), 0);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    /* damage the middle of the block's stored bytes */
    fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    struct stat st;
    REQUIRE(fstat(fd, &st) == 0);
    off_t mid = st.st_size - 4096 / 2 - 64;
    unsigned char byte;
    REQUIRE(pread(fd, &byte, 1, mid) == 1);
    byte ^= 0x10;
    REQUIRE(pwrite(fd, &byte, 1, mid) == 1);
    close(fd);

    char want[4400];
    for (int round = 0; round < 3; round++) {
        const char *name = round == 2 ? moved : path;
        if (round == 0)
            CHECK_EQ_INT(sqz_set_label_root(NULL), 0);
        else
            CHECK_EQ_INT(sqz_set_label_root(dir), 0);
        fd = open(name, O_RDONLY);
        REQUIRE(fd >= 0);
        REQUIRE(sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, SQZ_LABEL_FROM_FD, &c) == 0);
        if (round == 2) /* renamed while open: named by the new path */
            REQUIRE(rename(moved, path) == 0);
        g_sink->last[0] = '\0';
        CHECK_EQ_INT(sqz_ctr_pread(c, blk, sizeof blk, 0), -EIO);
        if (round == 0)
            snprintf(want, sizeof want, "%s: ", path);
        else
            snprintf(want, sizeof want, "sub/f: ");
        if (strncmp(g_sink->last, want, strlen(want)) != 0) {
            fprintf(stderr, "round %d: log line \"%s\", wanted \"%s...\"\n",
                    round, g_sink->last, want);
            sqz_test_failures++;
        }
        CHECK_EQ_INT(sqz_ctr_close(c), 0);
        if (round == 1)
            REQUIRE(rename(path, moved) == 0);
    }
    /* a failed open names the file too (its descriptor is still open) */
    fd = open(bad, O_RDWR | O_CREAT | O_EXCL, 0644);
    REQUIRE(fd >= 0);
    CHECK_EQ_INT(write(fd, "SQZFS but not a header at all", 29), 29);
    g_sink->last[0] = '\0';
    CHECK_EQ_INT(sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, SQZ_LABEL_FROM_FD, &c),
                 -EBADMSG);
    CHECK(strncmp(g_sink->last, "sub/bad: ", 9) == 0);
    CHECK_EQ_INT(sqz_set_label_root(NULL), 0);
    unlink(path);
    unlink(bad);
    rmdir(sub);
    rmdir(dir);
    free(dir);
}

/* Limits of the index: a file whose full index would not fit a
 * CHECKPOINT is refused up front (-EFBIG), and an oversized COMMIT is
 * rejected before anything is written (-E2BIG). */
static void test_size_limits(void)
{
    CHECK_EQ_INT(sqz_max_length(12), 178956969ull << 12);
    CHECK_EQ_INT(sqz_max_length(16), 178956969ull << 16);
    CHECK_EQ_INT(sqz_max_length(17), SQZ_MAX_LENGTH);
    CHECK_EQ_INT(sqz_max_length(20), SQZ_MAX_LENGTH);
    sqz_params p = mkparams(SQZ_ALG_LZ4, 0, 12);
    sqz_ctr *c = create_mem(&p);
    uint64_t max = sqz_max_length(12);
    CHECK_EQ_INT(sqz_ctr_truncate(c, max + 1), -EFBIG);
    char b[16] = "x";
    CHECK_EQ_INT(sqz_ctr_pwrite(c, b, sizeof b, max - 8), -EFBIG);
    CHECK_EQ_INT(sqz_ctr_truncate(c, max), 0); /* sparse: fits */
    CHECK_EQ_INT(sqz_ctr_pwrite(c, b, sizeof b, max - 16), 16);
    CHECK_EQ_INT(sqz_ctr_sync(c, 1), 0);
    CHECK_EQ_INT(sqz_ctr_checkpoint(c), 0);
    sqz_prepared one;
    memset(&one, 0, sizeof one);
    CHECK_EQ_INT(sqz_ctr_commit(c, &one, (size_t)SQZ_COMMIT_MAX_ENTRIES, 4096),
                 -E2BIG);
    CHECK_EQ_INT(sqz_ctr_length(c), max);
    c = reopen(c, SQZ_OPEN_RDONLY);
    CHECK_EQ_INT(sqz_ctr_length(c), max);
    char got[16];
    CHECK_EQ_INT(sqz_ctr_pread(c, got, sizeof got, max - 16), 16);
    CHECK(memcmp(got, b, sizeof b) == 0);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
}

/* sqz_ctr_committed: 0 for a container no commit reached (eager and lazy
 * creations, the first pwrite of a lazy one cut at the header region),
 * 1 once one did, also when the commit truncated it to 0 bytes. */
static void test_committed(void)
{
    sqz_params p = mkparams(SQZ_ALG_LZ4, 0, 12);
    sqz_ctr *c = create_mem(&p);
    CHECK_EQ_INT(sqz_ctr_committed(c), 0);
    c = reopen(c, SQZ_OPEN_RDONLY);
    CHECK_EQ_INT(sqz_ctr_committed(c), 0);
    c = reopen(c, SQZ_OPEN_RDWR);
    CHECK_EQ_INT(sqz_ctr_pwrite(c, "abc", 3, 0), 3);
    CHECK_EQ_INT(sqz_ctr_committed(c), 1);
    CHECK_EQ_INT(sqz_ctr_truncate(c, 0), 0);
    c = reopen(c, SQZ_OPEN_RDONLY);
    CHECK_EQ_INT(sqz_ctr_length(c), 0);
    CHECK_EQ_INT(sqz_ctr_committed(c), 1);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    /* lazy: the first commit's pwrite cut at the header region */
    int fd = memfd_create("sqzlazy", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(sqz_ctr_create_fd_lazy(fd, &p, "lazy", &c) == 0);
    CHECK_EQ_INT(sqz_ctr_committed(c), 0);
    CHECK_EQ_INT(sqz_ctr_pwrite(c, "abc", 3, 0), 3);
    CHECK_EQ_INT(sqz_ctr_committed(c), 1);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", sqz_ctr_fd(c));
    int cut = open(path, O_RDWR);
    REQUIRE(cut >= 0);
    REQUIRE(ftruncate(cut, 1536) == 0);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    REQUIRE(sqz_ctr_open_fd(cut, SQZ_OPEN_RDONLY, "cut", &c) == 0);
    CHECK_EQ_INT(sqz_ctr_committed(c), 0);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
}

int main(void)
{
    logsink sink = {.verbose = getenv("SQZ_TEST_VERBOSE") != NULL};
    g_verbose = sink.verbose;
    sqz_set_log(test_log, &sink);
    g_sink = &sink;
    const char *corpus = getenv("SQZ_WRITE_CORPUS");
    if (corpus) {
        write_corpus(corpus);
        return sqz_test_done("test_container (corpus)");
    }
    /* A fixed seed keeps CI deterministic; long mode explores new seeds. */
    uint64_t seed = getenv("SQZ_LONG") ? (uint64_t)time(NULL) : 20261123;
    const char *s = getenv("SQZ_TEST_SEED");
    if (s)
        seed = strtoull(s, NULL, 0);
    printf("seed %llu\n", (unsigned long long)seed);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
#define PHASE(x) do { struct timespec t1; x; clock_gettime(CLOCK_MONOTONIC, &t1); \
        printf("%-40s %.2fs\n", #x, (double)(t1.tv_sec - t0.tv_sec) + \
               (double)(t1.tv_nsec - t0.tv_nsec) / 1e9); t0 = t1; } while (0)
    PHASE(test_paths());
    PHASE(test_lazy_label());
    PHASE(test_tail_vs_damage());
    PHASE(test_size_limits());
    PHASE(test_committed());
    PHASE(test_rot_in_synced_log());
    PHASE(test_corruption());
    PHASE(test_roundtrip());
    PHASE(test_random_ops(SQZ_ALG_LZ4, 0, 12, 8000, seed));
    PHASE(test_random_ops(SQZ_ALG_ZSTD, 1, 12, 6000, seed + 1));
    PHASE(test_random_ops(SQZ_ALG_NONE, 0, 13, 3000, seed + 2));
    PHASE(test_random_ops(SQZ_ALG_GZIP, 1, 16, 1500, seed + 3));
    PHASE(test_random_ops(SQZ_ALG_SNAPPY, 0, 17, 1500, seed + 4));
    PHASE(test_space_bounded());
    PHASE(test_crash(seed + 5));
    PHASE(test_concurrency());
    printf("log lines: %d\n", sink.lines);
    return sqz_test_done("test_container");
}
