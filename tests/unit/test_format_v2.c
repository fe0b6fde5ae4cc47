/* Unit tests of container format version 2 and lazy creation
 * (docs/FORMAT.md "Layout", "Creation"): the log right after the anchor
 * slots, small files in one 4 KiB block, version-1 files still read and
 * written, the first write (header region + first commit) torn at every
 * byte never reading as wrong bytes or as a damaged container, and nothing
 * written after it before it is durable. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "format/format_int.h"

#include "container_simdisk.c"

static sqz_params params(sqz_alg alg, int log2bs)
{
    sqz_params p = {.alg = alg, .level = sqz_level_default(alg),
                    .log2bs = log2bs, .min_saving = SQZ_MIN_SAVING_DEFAULT};
    return p;
}

/* write n bytes at 0 (n <= 4 blocks) as one commit */
static void put(sqz_ctr *c, const unsigned char *data, size_t n)
{
    size_t bs = sqz_ctr_block_size(c);
    unsigned char *blk = calloc(1, bs);
    REQUIRE(blk);
    sqz_prepared pr[4];
    size_t nb = (n + bs - 1) / bs;
    REQUIRE(nb <= 4);
    for (size_t i = 0; i < nb; i++) {
        size_t k = n - i * bs < bs ? n - i * bs : bs;
        memset(blk, 0, bs);
        memcpy(blk, data + i * bs, k);
        REQUIRE(sqz_ctr_prepare(c, i, blk, &pr[i]) == 0);
    }
    CHECK_EQ_INT(sqz_ctr_commit(c, pr, nb, n), 0);
    for (size_t i = 0; i < nb; i++)
        sqz_prepared_free(&pr[i]);
    free(blk);
}

static int reads_back(sqz_ctr *c, const unsigned char *data, size_t n)
{
    size_t bs = sqz_ctr_block_size(c);
    unsigned char *blk = malloc(bs);
    REQUIRE(blk);
    int ok = sqz_ctr_length(c) == n;
    for (size_t i = 0; ok && i * bs < n; i++) {
        size_t k = n - i * bs < bs ? n - i * bs : bs;
        ok = sqz_ctr_read_block(c, i, blk, NULL) == (ssize_t)k &&
             memcmp(blk, data + i * bs, k) == 0;
    }
    free(blk);
    return ok;
}

/* a small text file in a real file of the test directory: one 4 KiB block
 * on the backing file system, and the header is written with the data */
static void test_small_file_one_block(void)
{
    char *dir = sqz_test_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/small", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    sqz_params p = params(SQZ_ALG_ZSTD, 17);
    sqz_ctr *c;
    REQUIRE(sqz_ctr_create_fd_lazy(fd, &p, path, &c) == 0);
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    CHECK_EQ_INT(st.st_size, 0); /* nothing written before the first commit */
    CHECK_EQ_INT(sqz_ctr_unmarked(c), 0);
    unsigned char text[3900];
    sqz_test_fill(text, sizeof text, 2, 7);
    put(c, text, sizeof text);
    CHECK(reads_back(c, text, sizeof text));
    CHECK_EQ_INT(sqz_ctr_sync(c, 1), 0);
    struct sqz_ctr_stat cs;
    CHECK_EQ_INT(sqz_ctr_stat(c, &cs), 0);
    CHECK_EQ_INT(cs.format_version, 2);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    REQUIRE(stat(path, &st) == 0);
    CHECK(st.st_size <= 4096);
    CHECK((uint64_t)st.st_blocks * 512 <= 4096);
    REQUIRE(sqz_ctr_open_path(path, SQZ_OPEN_RDWR, &c) == 0);
    CHECK(reads_back(c, text, sizeof text));
    CHECK_EQ_INT(sqz_ctr_close(c), 0);

    /* created and closed without a commit: an empty (plain) file */
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(sqz_ctr_create_fd_lazy(fd, &p, path, &c) == 0);
    CHECK_EQ_INT(sqz_ctr_sync(c, 1), 0);
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    REQUIRE(stat(path, &st) == 0);
    CHECK_EQ_INT(st.st_size, 0);
    CHECK_EQ_INT(st.st_blocks, 0);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* version 1 (log at 4096) is still read and written; the log start of
 * each version is where its first record lies */
static void test_v1_still_works(void)
{
    for (uint32_t ver = 1; ver <= 2; ver++) {
        int fd = memfd_create("v", MFD_CLOEXEC);
        REQUIRE(fd >= 0);
        sqz_params p = params(SQZ_ALG_LZ4, 12);
        sqz_ctr *c;
        REQUIRE(sqz_ctr_create_fd_ver(fd, &p, ver, "v", &sqz_io_syscalls, &c) == 0);
        unsigned char d[9000];
        sqz_test_fill(d, sizeof d, 2, ver);
        put(c, d, 5000);
        CHECK_EQ_INT(sqz_ctr_sync(c, 1), 0);
        int dfd = dup(sqz_ctr_fd(c));
        CHECK_EQ_INT(sqz_ctr_close(c), 0);
        uint8_t m[4];
        REQUIRE(pread(dfd, m, 4, (off_t)sqz_log_start(ver)) == 4);
        CHECK_EQ_INT(sqz_get32(m), SQZ_REC_MAGIC);
        REQUIRE(sqz_ctr_open_fd(dup(dfd), SQZ_OPEN_RDWR, "v", &c) == 0);
        CHECK(reads_back(c, d, 5000));
        put(c, d, sizeof d); /* written again: stays its version */
        CHECK_EQ_INT(sqz_ctr_checkpoint(c), 0);
        struct sqz_ctr_stat cs;
        CHECK_EQ_INT(sqz_ctr_stat(c, &cs), 0);
        CHECK_EQ_INT(cs.format_version, ver);
        CHECK_EQ_INT(sqz_ctr_close(c), 0);
        REQUIRE(sqz_ctr_open_fd(dfd, SQZ_OPEN_RDONLY, "v", &c) == 0);
        CHECK(reads_back(c, d, sizeof d));
        CHECK_EQ_INT(sqz_ctr_verify(c, NULL, NULL), 0);
        CHECK_EQ_INT(sqz_ctr_close(c), 0);
    }
}

/* What a crash leaves of a lazy creation's first write, torn after every
 * byte: an empty file (plain and empty, or the torn start of a header the
 * probe names), or the container with nothing committed, or the whole
 * commit. Never a damaged container, never other bytes. */
static void test_first_write_torn_everywhere(void)
{
    simdisk d = {0};
    d.fd = memfd_create("sim", MFD_CLOEXEC);
    REQUIRE(d.fd >= 0);
    sqz_io io = sim_io(&d);
    sqz_params p = params(SQZ_ALG_ZSTD, 12);
    sqz_ctr *c;
    REQUIRE(sqz_ctr_create_fd_lazy_io(d.fd, &p, "sim", &io, &c) == 0);
    CHECK_EQ_INT(d.nops, 0);
    unsigned char text[6000];
    sqz_test_fill(text, sizeof text, 2, 3);
    put(c, text, sizeof text);
    CHECK_EQ_INT(d.nops, 1); /* one write, no flush */
    CHECK_EQ_INT(d.syncs, 0);
    REQUIRE(d.ops[0].kind == SIM_WRITE && d.ops[0].off == 0);
    const simop *w = &d.ops[0];
    int torn_probe = 0, empty_ctr = 0, whole = 0;
    for (uint64_t keep = 0; keep <= w->len; keep++) {
        int fd = memfd_with(w->data, (size_t)keep);
        int pr = sqz_ctr_probe_fd(fd);
        if (keep == 0) {
            CHECK_EQ_INT(pr, 0); /* an empty plain file */
            close(fd);
            continue;
        }
        if (keep < 8) {
            /* a prefix of the magic alone is a plain file of those bytes
             * (devices do not tear inside the first sector) */
            CHECK_EQ_INT(pr, 0);
            close(fd);
            continue;
        }
        if (keep < SQZ_HDR_SIZE) {
            if (pr != SQZ_PROBE_TORN)
                fprintf(stderr, "torn after %llu bytes: probe %d\n",
                        (unsigned long long)keep, pr);
            CHECK_EQ_INT(pr, SQZ_PROBE_TORN);
            torn_probe++;
            close(fd);
            continue;
        }
        CHECK_EQ_INT(pr, 1);
        sqz_ctr *r;
        int o = sqz_ctr_open_fd(fd, keep % 3 ? SQZ_OPEN_RDONLY : SQZ_OPEN_RDWR,
                                "torn", &r);
        if (o != 0) {
            fprintf(stderr, "torn after %llu bytes: open %d\n",
                    (unsigned long long)keep, o);
            CHECK_EQ_INT(o, 0);
            continue;
        }
        if (keep == w->len) {
            CHECK(reads_back(r, text, sizeof text));
            whole++;
        } else {
            CHECK_EQ_INT(sqz_ctr_length(r), 0);
            if (keep < SQZ_LOG_START_V2 && keep % 3) /* no problem, not clean */
                CHECK_EQ_INT(sqz_ctr_verify(r, NULL, NULL), 0);
            empty_ctr++;
        }
        if (keep % 3 == 0) { /* repaired: writable again */
            put(r, text, 100);
            CHECK(reads_back(r, text, 100));
        }
        CHECK_EQ_INT(sqz_ctr_close(r), 0);
    }
    CHECK_EQ_INT(torn_probe, SQZ_HDR_SIZE - 8);
    CHECK(empty_ctr > 1000);
    CHECK_EQ_INT(whole, 1);

    /* the second commit waits for the first write to be durable */
    put(c, text, 3000);
    CHECK_EQ_INT(d.syncs, 1);
    CHECK_EQ_INT(d.nops, 1); /* the second append, after the flush */
    /* every crash image from here is the first or the second state */
    uint64_t rng = 99;
    for (int t = 0; t < 200; t++) {
        simimg im = sim_crash(&d, t % 4, &rng);
        sqz_ctr *r;
        REQUIRE(sqz_ctr_open_fd(memfd_with(im.p, im.n), SQZ_OPEN_RDONLY, "c", &r) == 0);
        CHECK(reads_back(r, text, sizeof text) || reads_back(r, text, 3000));
        sqz_ctr_close(r);
        free(im.p);
    }
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    sim_free(&d);
}

/* A batched durable mark (the daemon's closed files): the caller's flush
 * covers the first write; afterwards the next commit needs no flush of
 * its own. */
static void test_batched_mark_covers_first_write(void)
{
    simdisk d = {0};
    d.fd = memfd_create("sim", MFD_CLOEXEC);
    REQUIRE(d.fd >= 0);
    sqz_io io = sim_io(&d);
    sqz_params p = params(SQZ_ALG_LZ4, 12);
    sqz_ctr *c;
    REQUIRE(sqz_ctr_create_fd_lazy_io(d.fd, &p, "sim", &io, &c) == 0);
    sqz_mark_ticket t;
    CHECK_EQ_INT(sqz_ctr_mark_begin(c, &t), 0); /* nothing to mark yet */
    unsigned char text[5000];
    sqz_test_fill(text, sizeof text, 2, 5);
    put(c, text, 2000);
    CHECK_EQ_INT(sqz_ctr_unmarked(c), 1);
    CHECK_EQ_INT(sqz_ctr_mark_begin(c, &t), 1);
    CHECK_EQ_INT(sim_sync(&d, d.fd, 1), 0); /* the caller's flush */
    CHECK_EQ_INT(sqz_ctr_mark_end(c, &t), 0);
    CHECK_EQ_INT(sqz_ctr_unmarked(c), 0);
    unsigned syncs = d.syncs;
    put(c, text, sizeof text);
    CHECK_EQ_INT(d.syncs, syncs); /* no flush of its own */
    CHECK_EQ_INT(sqz_ctr_close(c), 0);
    sim_free(&d);
}

int main(void)
{
    test_small_file_one_block();
    test_v1_still_works();
    test_first_write_torn_everywhere();
    test_batched_mark_covers_first_write();
    return sqz_test_done("format_v2");
}
