/* The default I/O implementation of the seam in io.h: system calls. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/io.h"
#include "common/fullio.h"

static ssize_t sys_pread(void *ctx, int fd, void *buf, size_t n, uint64_t off)
{
    (void)ctx;
    return sqz_pread_full(fd, buf, n, off);
}

static int sys_pwrite(void *ctx, int fd, const void *buf, size_t n, uint64_t off)
{
    (void)ctx;
    return sqz_pwrite_full(fd, buf, n, off);
}

static int sys_sync(void *ctx, int fd, int datasync)
{
    (void)ctx;
    int r = datasync ? fdatasync(fd) : fsync(fd);
    return r < 0 ? -errno : 0;
}

static int sys_truncate(void *ctx, int fd, uint64_t len)
{
    (void)ctx;
    int r;
    do
        r = ftruncate(fd, (off_t)len);
    while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}

static int sys_punch(void *ctx, int fd, uint64_t off, uint64_t len)
{
    (void)ctx;
    int r;
    do
        r = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      (off_t)off, (off_t)len);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return errno == ENOSYS ? -EOPNOTSUPP : -errno;
    return 0;
}

static int sys_size(void *ctx, int fd, uint64_t *size, uint64_t *alloc)
{
    (void)ctx;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (size)
        *size = (uint64_t)st.st_size;
    if (alloc)
        *alloc = (uint64_t)st.st_blocks * 512u;
    return 0;
}

const sqz_io sqz_io_syscalls = {
    .pread = sys_pread,
    .pwrite = sys_pwrite,
    .sync = sys_sync,
    .truncate = sys_truncate,
    .punch = sys_punch,
    .size = sys_size,
    .ctx = NULL,
};

/* ---- the head cache of an open (io.h: sqz_io_head) ---- */

static ssize_t head_pread(void *ctx, int fd, void *buf, size_t n, uint64_t off)
{
    sqz_io_head *h = ctx;
    if (fd == h->fd && off <= h->len && (n <= h->len - off || h->whole)) {
        size_t k = n <= h->len - off ? n : (size_t)(h->len - off);
        memcpy(buf, h->buf + off, k);
        return (ssize_t)k;
    }
    return h->base->pread(h->base->ctx, fd, buf, n, off);
}

static int head_pwrite(void *ctx, int fd, const void *buf, size_t n, uint64_t off)
{
    sqz_io_head *h = ctx;
    return h->base->pwrite(h->base->ctx, fd, buf, n, off);
}

static int head_sync(void *ctx, int fd, int datasync)
{
    sqz_io_head *h = ctx;
    return h->base->sync(h->base->ctx, fd, datasync);
}

static int head_truncate(void *ctx, int fd, uint64_t len)
{
    sqz_io_head *h = ctx;
    return h->base->truncate(h->base->ctx, fd, len);
}

static int head_punch(void *ctx, int fd, uint64_t off, uint64_t len)
{
    sqz_io_head *h = ctx;
    return h->base->punch(h->base->ctx, fd, off, len);
}

static int head_size(void *ctx, int fd, uint64_t *size, uint64_t *alloc)
{
    sqz_io_head *h = ctx;
    return h->base->size(h->base->ctx, fd, size, alloc);
}

int sqz_io_head_init(sqz_io_head *h, const sqz_io *base, int fd,
                     uint64_t fsize, size_t cap)
{
    memset(h, 0, sizeof *h);
    h->io = (sqz_io){head_pread, head_pwrite, head_sync, head_truncate,
                     head_punch, head_size, h};
    h->base = base;
    h->fd = fd;
    size_t want = fsize < cap ? (size_t)fsize : cap;
    h->buf = malloc(want ? want : 1);
    if (!h->buf)
        return -ENOMEM;
    ssize_t got = base->pread(base->ctx, fd, h->buf, want, 0);
    if (got < 0) {
        free(h->buf);
        h->buf = NULL;
        return (int)got;
    }
    h->len = (size_t)got;
    /* the file ends inside the buffer: reads past it are at end of file */
    h->whole = (uint64_t)got < want || fsize <= cap;
    return 0;
}

void sqz_io_head_free(sqz_io_head *h)
{
    free(h->buf);
    h->buf = NULL;
}
