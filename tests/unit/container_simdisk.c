/* A simulated disk for crash tests of the container library, installed
 * through the I/O seam (format/io.h). The live image is a real file (all
 * calls pass through to it); the disk additionally keeps the durable image
 * (the file as of the last sync) and the ordered list of writes, truncates
 * and hole punches since then, from which crash images are built. Included
 * by test_container.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/io.h"

enum { SIM_WRITE, SIM_TRUNC, SIM_PUNCH };

typedef struct simop {
    int kind;
    uint64_t off, len;
    unsigned char *data; /* SIM_WRITE */
} simop;

typedef struct simdisk {
    int fd;                 /* the live image */
    unsigned char *durable;
    size_t dlen;
    simop *ops;
    size_t nops, cap;
    unsigned syncs;
    uint64_t max_size;      /* a full disk: writes past it fail ENOSPC (0: none) */
} simdisk;

typedef struct simimg {
    unsigned char *p;
    size_t n;
} simimg;

static void sim_push(simdisk *d, simop op)
{
    if (d->nops == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->ops = realloc(d->ops, d->cap * sizeof *d->ops);
        REQUIRE(d->ops);
    }
    d->ops[d->nops++] = op;
}

static void sim_clear_ops(simdisk *d)
{
    for (size_t i = 0; i < d->nops; i++)
        free(d->ops[i].data);
    d->nops = 0;
}

static ssize_t sim_pread(void *ctx, int fd, void *buf, size_t n, uint64_t off)
{
    (void)ctx;
    return sqz_io_syscalls.pread(NULL, fd, buf, n, off);
}

static int sim_pwrite(void *ctx, int fd, const void *buf, size_t n, uint64_t off)
{
    simdisk *d = ctx;
    if (d->max_size && off + n > d->max_size)
        return -ENOSPC;
    simop op = {SIM_WRITE, off, n, malloc(n ? n : 1)};
    REQUIRE(op.data);
    memcpy(op.data, buf, n);
    sim_push(d, op);
    return sqz_io_syscalls.pwrite(NULL, fd, buf, n, off);
}

static int sim_truncate(void *ctx, int fd, uint64_t len)
{
    simdisk *d = ctx;
    sim_push(d, (simop){SIM_TRUNC, len, 0, NULL});
    return sqz_io_syscalls.truncate(NULL, fd, len);
}

static int sim_punch(void *ctx, int fd, uint64_t off, uint64_t len)
{
    simdisk *d = ctx;
    sim_push(d, (simop){SIM_PUNCH, off, len, NULL});
    return sqz_io_syscalls.punch(NULL, fd, off, len);
}

static int sim_size(void *ctx, int fd, uint64_t *size, uint64_t *alloc)
{
    (void)ctx;
    return sqz_io_syscalls.size(NULL, fd, size, alloc);
}

/* read the whole live file */
static simimg sim_read_fd(int fd)
{
    uint64_t size;
    REQUIRE(sqz_io_syscalls.size(NULL, fd, &size, NULL) == 0);
    simimg im = {malloc(size ? size : 1), (size_t)size};
    REQUIRE(im.p);
    REQUIRE(sqz_io_syscalls.pread(NULL, fd, im.p, im.n, 0) == (ssize_t)im.n);
    return im;
}

static int sim_sync(void *ctx, int fd, int datasync)
{
    (void)datasync;
    simdisk *d = ctx;
    simimg im = sim_read_fd(fd);
    free(d->durable);
    d->durable = im.p;
    d->dlen = im.n;
    sim_clear_ops(d);
    d->syncs++;
    return 0;
}

static sqz_io sim_io(simdisk *d)
{
    sqz_io io = {sim_pread, sim_pwrite, sim_sync, sim_truncate, sim_punch,
                 sim_size, d};
    return io;
}

static void img_resize(simimg *im, size_t n)
{
    if (n > im->n) {
        im->p = realloc(im->p, n);
        REQUIRE(im->p);
        memset(im->p + im->n, 0, n - im->n);
    }
    im->n = n;
}

static void img_apply(simimg *im, const simop *op, uint64_t keep)
{
    switch (op->kind) {
    case SIM_WRITE:
        if (keep == 0)
            return;
        if (op->off + keep > im->n)
            img_resize(im, (size_t)(op->off + keep));
        memcpy(im->p + op->off, op->data, (size_t)keep);
        break;
    case SIM_TRUNC:
        img_resize(im, (size_t)op->off);
        break;
    default:
        if (op->off < im->n) {
            uint64_t e = op->off + op->len < im->n ? op->off + op->len : im->n;
            memset(im->p + op->off, 0, (size_t)(e - op->off));
        }
    }
}

/* Crash image. mode 0: lose all unsynced operations; 1: keep a random
 * subset (in order); 2: keep everything before a random write, keep a
 * random prefix of that write (torn), lose the rest; 3: keep all. */
static simimg sim_crash(const simdisk *d, int mode, uint64_t *rng)
{
    simimg im = {malloc(d->dlen ? d->dlen : 1), d->dlen};
    REQUIRE(im.p);
    memcpy(im.p, d->durable, d->dlen);
    size_t torn = d->nops;
    if (mode == 2 && d->nops) {
        torn = sqz_test_rand(rng) % d->nops;
        while (torn < d->nops && d->ops[torn].kind != SIM_WRITE)
            torn++;
    }
    for (size_t i = 0; i < d->nops; i++) {
        const simop *op = &d->ops[i];
        if (mode == 0)
            break;
        if (mode == 1 && (sqz_test_rand(rng) & 1))
            continue;
        if (mode == 2 && i > torn)
            break;
        uint64_t keep = op->len;
        if (mode == 2 && i == torn)
            keep = op->len ? sqz_test_rand(rng) % op->len : 0;
        img_apply(&im, op, keep);
    }
    return im;
}

static int memfd_with(const void *p, size_t n)
{
    int fd = memfd_create("sqzimg", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(sqz_io_syscalls.pwrite(NULL, fd, p, n, 0) == 0);
    REQUIRE(ftruncate(fd, (off_t)n) == 0);
    return fd;
}

static void sim_free(simdisk *d)
{
    sim_clear_ops(d);
    free(d->ops);
    free(d->durable);
    memset(d, 0, sizeof *d);
}
