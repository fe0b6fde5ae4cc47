/* Preallocated log space (src/format/prealloc.c, docs/FORMAT.md
 * "Preallocated log space"): a container synced often with little appended
 * in between writes its log end ahead as zeros, so most syncs find no size
 * change; the zeros are no torn tail for readers, verify or a crash, a
 * full disk only turns the preallocation off, and the last close cuts
 * them off. Runs on the simulated disk of the crash tests. */
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

static void quiet(void *user, const char *msg)
{
    (void)user;
    (void)msg;
}

static void quiet_log(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    (void)msg;
}

static uint64_t fd_size(int fd)
{
    struct stat st;
    REQUIRE(fstat(fd, &st) == 0);
    return (uint64_t)st.st_size;
}

static sqz_params params(void)
{
    sqz_params p = {0};
    p.alg = SQZ_ALG_ZSTD;
    p.level = 1;
    p.log2bs = 16;
    return p;
}

/* A container on a fresh simulated disk (*io must stay alive with it). */
static sqz_ctr *sim_ctr(simdisk *d, sqz_io *io, const char *name, int allow)
{
    memset(d, 0, sizeof *d);
    d->fd = memfd_create("sim", MFD_CLOEXEC);
    REQUIRE(d->fd >= 0);
    *io = sim_io(d);
    sqz_params p = params();
    sqz_ctr *c;
    REQUIRE(sqz_ctr_create_fd_io(dup(d->fd), &p, name, io, &c) == 0);
    sqz_ctr_allow_prealloc(c, allow);
    return c;
}

static void sim_done(simdisk *d)
{
    int fd = d->fd;
    sim_free(d);
    close(fd);
}

/* a WAL-like file: 8 KiB pages written in turn, each made durable */
static void wal_pages(sqz_ctr *c, unsigned char *model, size_t *mlen,
                      unsigned from, unsigned n, int datasync)
{
    unsigned char page[8192];
    for (unsigned i = from; i < from + n; i++) {
        sqz_test_fill(page, sizeof page, 2, i);
        REQUIRE(sqz_ctr_pwrite(c, page, sizeof page, (uint64_t)i * 8192) ==
                (ssize_t)sizeof page);
        memcpy(model + (size_t)i * 8192, page, sizeof page);
        if ((size_t)(i + 1) * 8192 > *mlen)
            *mlen = (size_t)(i + 1) * 8192;
        REQUIRE(sqz_ctr_sync(c, datasync) == 0);
    }
}

static int content_is(sqz_ctr *c, const unsigned char *want, size_t n)
{
    if (sqz_ctr_length(c) != n)
        return 0;
    unsigned char *got = malloc(n ? n : 1);
    REQUIRE(got);
    int ok = sqz_ctr_pread(c, got, n, 0) == (ssize_t)n && memcmp(got, want, n) == 0;
    free(got);
    return ok;
}

/* Copy the live image into a new memfd (a crash that kept everything). */
static int snapshot_fd(int fd)
{
    simimg im = sim_read_fd(fd);
    int s = memfd_with(im.p, im.n);
    free(im.p);
    return s;
}

static void test_small_syncs_write_ahead(void)
{
    simdisk d;
    sqz_io io;
    sqz_ctr *c = sim_ctr(&d, &io, "wal", 1);
    size_t cap = 400 * 8192, mlen = 0;
    unsigned char *model = calloc(1, cap);
    REQUIRE(model);

    /* count how often a sync found the backing size changed */
    unsigned char page[8192];
    uint64_t last = 0;
    unsigned size_changes = 0, n = 300;
    for (unsigned i = 0; i < n; i++) {
        sqz_test_fill(page, sizeof page, 2, i);
        REQUIRE(sqz_ctr_pwrite(c, page, sizeof page, (uint64_t)i * 8192) == 8192);
        memcpy(model + (size_t)i * 8192, page, sizeof page);
        mlen = (size_t)(i + 1) * 8192;
        REQUIRE(sqz_ctr_sync(c, 1) == 0);
        uint64_t s = fd_size(d.fd);
        size_changes += s != last;
        last = s;
        /* the invariant: zeros after the log end, up to the file's end */
        CHECK(c->end <= c->phys_end && c->phys_end == s);
        CHECK(sqz_ctr_tail_is_zero(&io, d.fd, c->end, s));
    }
    /* without preallocation every sync changes the size */
    CHECK(size_changes < n / 8);
    CHECK(c->prealloc);
    CHECK(fd_size(d.fd) > c->end);

    /* a reader of the live file (another mount, verify): the zeros are no
     * uncommitted tail */
    sqz_ctr *r;
    REQUIRE(sqz_ctr_open_fd(snapshot_fd(d.fd), SQZ_OPEN_RDONLY, "reader", &r) == 0);
    CHECK(content_is(r, model, mlen));
    CHECK_EQ_INT(sqz_ctr_verify(r, quiet, NULL), 0);
    CHECK(sqz_ctr_tail_bytes(r) == 0);
    sqz_ctr_close(r);

    /* a crash keeping the zeros: a read-write open keeps them as log space
     * (no truncate, no sync) and appends into them */
    int cfd = snapshot_fd(d.fd);
    uint64_t csize = fd_size(cfd);
    REQUIRE(sqz_ctr_open_fd(dup(cfd), SQZ_OPEN_RDWR, "crashed", &r) == 0);
    sqz_ctr_allow_prealloc(r, 1);
    CHECK(fd_size(cfd) == csize);
    CHECK(r->phys_end == csize && r->end < csize);
    size_t mlen2 = mlen;
    unsigned char *model2 = malloc(cap);
    REQUIRE(model2);
    memcpy(model2, model, cap);
    wal_pages(r, model2, &mlen2, n, 20, 1);
    CHECK(content_is(r, model2, mlen2));
    /* its close cuts the zeros off: a closed file has no tail */
    uint64_t end = r->end;
    REQUIRE(sqz_ctr_close(r) == 0);
    CHECK(fd_size(cfd) == end);
    close(cfd);
    free(model2);

    /* the same for the original */
    wal_pages(c, model, &mlen, n, 10, 0);
    end = c->end;
    REQUIRE(sqz_ctr_close(c) == 0);
    CHECK(fd_size(d.fd) == end);
    REQUIRE(sqz_ctr_open_fd(dup(d.fd), SQZ_OPEN_RDONLY, "closed", &r) == 0);
    CHECK(sqz_ctr_tail_bytes(r) == 0 && content_is(r, model, mlen));
    CHECK_EQ_INT(sqz_ctr_verify(r, quiet, NULL), 0);
    sqz_ctr_close(r);
    free(model);
    sim_done(&d);
}

static void test_not_allowed_changes_the_size_every_sync(void)
{
    /* the default (offline tools; a daemon over a network file system):
     * every commit changes the size, and zeros left by an earlier open
     * that was allowed are cut before the first append */
    simdisk d;
    sqz_io io;
    sqz_ctr *c = sim_ctr(&d, &io, "plain", 0);
    size_t cap = 64 * 8192, mlen = 0;
    unsigned char *model = calloc(1, cap);
    REQUIRE(model);
    uint64_t last = 0;
    for (unsigned i = 0; i < 30; i++) {
        wal_pages(c, model, &mlen, i, 1, 1);
        uint64_t s = fd_size(d.fd);
        CHECK(s > last && s == c->end);
        last = s;
    }
    sqz_ctr_allow_prealloc(c, 1);
    wal_pages(c, model, &mlen, 30, 5, 1);
    CHECK(fd_size(d.fd) > c->end);
    int cfd = snapshot_fd(d.fd); /* a crash keeping the zeros */
    sqz_ctr *r;
    REQUIRE(sqz_ctr_open_fd(dup(cfd), SQZ_OPEN_RDWR, "again", &r) == 0);
    CHECK(fd_size(cfd) > r->end);
    wal_pages(r, model, &mlen, 35, 1, 1);
    CHECK(fd_size(cfd) == r->end && content_is(r, model, mlen));
    sqz_ctr_close(r);
    close(cfd);
    sqz_ctr_close(c);
    free(model);
    sim_done(&d);
}

static void test_large_batches_do_not_preallocate(void)
{
    simdisk d;
    sqz_io io;
    sqz_ctr *c = sim_ctr(&d, &io, "bulk", 1);
    size_t n = 2u << 20;
    unsigned char *buf = malloc(n);
    REQUIRE(buf);
    for (int round = 0; round < 4; round++) {
        sqz_test_fill(buf, n, 0, (uint64_t)round);
        REQUIRE(sqz_ctr_pwrite(c, buf, n, (uint64_t)round * n) == (ssize_t)n);
        REQUIRE(sqz_ctr_sync(c, 1) == 0);
        CHECK(!c->prealloc);
        CHECK(fd_size(d.fd) == c->end);
    }
    free(buf);
    REQUIRE(sqz_ctr_close(c) == 0);
    sim_done(&d);
}

static void test_tail_with_data_is_still_cut(void)
{
    /* zeros and then one stray byte: not preallocated space, the usual
     * torn tail, which a read-write open cuts (and syncs) */
    simdisk d;
    sqz_io io;
    sqz_ctr *c = sim_ctr(&d, &io, "t", 1);
    size_t cap = 64 * 8192, mlen = 0;
    unsigned char *model = calloc(1, cap);
    REQUIRE(model);
    wal_pages(c, model, &mlen, 0, 40, 1);
    REQUIRE(fd_size(d.fd) > c->end + 16);
    int cfd = snapshot_fd(d.fd);
    uint64_t end = c->end;
    unsigned char x = 0x5a;
    REQUIRE(pwrite(cfd, &x, 1, (off_t)(fd_size(cfd) - 1)) == 1);
    sqz_ctr *r;
    REQUIRE(sqz_ctr_open_fd(dup(cfd), SQZ_OPEN_RDONLY, "ro", &r) == 0);
    CHECK(sqz_ctr_tail_bytes(r) > 0);
    sqz_ctr_close(r);
    REQUIRE(sqz_ctr_open_fd(dup(cfd), SQZ_OPEN_RDWR, "rw", &r) == 0);
    CHECK(fd_size(cfd) == end && content_is(r, model, mlen));
    sqz_ctr_close(r);
    close(cfd);
    sqz_ctr_close(c);
    free(model);
    sim_done(&d);
}

static void test_full_disk_turns_it_off(void)
{
    simdisk d;
    sqz_io io;
    sqz_ctr *c = sim_ctr(&d, &io, "full", 1);
    size_t cap = 200 * 8192, mlen = 0;
    unsigned char *model = calloc(1, cap);
    REQUIRE(model);
    wal_pages(c, model, &mlen, 0, 4, 1);
    /* the disk fills: no room for a step of zeros, some for records */
    d.max_size = c->phys_end > c->end ? c->phys_end : c->end + 64 * 1024;
    unsigned char page[8192];
    unsigned i = 4;
    int r = 0;
    for (; i < 200; i++) {
        sqz_test_fill(page, sizeof page, 2, i);
        if (sqz_ctr_pwrite(c, page, sizeof page, (uint64_t)i * 8192) != 8192 ||
            (r = sqz_ctr_sync(c, 1)) != 0)
            break;
        memcpy(model + (size_t)i * 8192, page, sizeof page);
        mlen = (size_t)(i + 1) * 8192;
    }
    /* it stops with ENOSPC, never with a broken file */
    CHECK(i < 200);
    CHECK(!c->broken);
    CHECK(c->phys_end <= d.max_size);
    d.max_size = 0;
    REQUIRE(sqz_ctr_close(c) == 0);
    sqz_ctr *o;
    REQUIRE(sqz_ctr_open_fd(dup(d.fd), SQZ_OPEN_RDONLY, "after", &o) == 0);
    /* every page synced before the disk was full reads back */
    unsigned char *got = malloc(mlen ? mlen : 1);
    REQUIRE(got);
    CHECK(sqz_ctr_length(o) >= mlen);
    CHECK(sqz_ctr_pread(o, got, mlen, 0) == (ssize_t)mlen &&
          memcmp(got, model, mlen) == 0);
    free(got);
    sqz_ctr_close(o);
    free(model);
    sim_done(&d);
}

static void test_crashes_with_preallocation(uint64_t seed)
{
    /* sync often (preallocating), crash in every mode after every step:
     * the state is the last synced one or a later commit, never damage */
    simdisk d;
    sqz_io io;
    sqz_ctr *c = sim_ctr(&d, &io, "crash", 1);
    size_t cap = 120 * 8192, mlen = 0, synced_len = 0;
    unsigned char *model = calloc(1, cap), *synced = calloc(1, cap);
    REQUIRE(model && synced);
    uint64_t rng = seed;
    unsigned char page[8192];
    int failed = 0;
    for (unsigned i = 0; i < 120 && !failed; i++) {
        sqz_test_fill(page, sizeof page, 2, i + seed);
        REQUIRE(sqz_ctr_pwrite(c, page, sizeof page, (uint64_t)i * 8192) == 8192);
        memcpy(model + (size_t)i * 8192, page, sizeof page);
        mlen = (size_t)(i + 1) * 8192;
        if (sqz_test_rand(&rng) % 4 != 0) {
            REQUIRE(sqz_ctr_sync(c, 1) == 0);
            memcpy(synced, model, mlen);
            synced_len = mlen;
        }
        for (int mode = 0; mode < 4 && !failed; mode++) {
            simimg im = sim_crash(&d, mode, &rng);
            int fd = memfd_with(im.p, im.n);
            free(im.p);
            sqz_ctr *r;
            if (sqz_ctr_open_fd(fd, SQZ_OPEN_RDWR, "crashed", &r) != 0) {
                fprintf(stderr, "prealloc crash %u mode %d: open fails\n", i, mode);
                failed = 1;
                break;
            }
            size_t len = (size_t)sqz_ctr_length(r);
            /* pages are appended in order: the state is a prefix of the
             * model at least as long as the synced one */
            int ok = len >= synced_len && len <= mlen && len % 8192 == 0 &&
                     content_is(r, model, len) && r->st.ndamage == 0 &&
                     sqz_ctr_verify(r, quiet, NULL) == 0;
            if (mode == 0)
                ok = ok && len == synced_len;
            if (!ok) {
                fprintf(stderr, "prealloc crash %u mode %d: length %zu "
                        "(synced %zu, written %zu)\n", i, mode, len,
                        synced_len, mlen);
                failed = 1;
            }
            sqz_ctr_close(r);
        }
    }
    CHECK(!failed);
    sqz_ctr_close(c);
    free(model);
    free(synced);
    sim_done(&d);
}

int main(void)
{
    sqz_set_log(quiet_log, NULL);
    test_small_syncs_write_ahead();
    test_not_allowed_changes_the_size_every_sync();
    test_large_batches_do_not_preallocate();
    test_tail_with_data_is_still_cut();
    test_full_disk_turns_it_off();
    for (uint64_t seed = 1; seed <= 6; seed++)
        test_crashes_with_preallocation(seed);
    return sqz_test_done("prealloc");
}
