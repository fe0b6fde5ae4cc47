/* The default I/O implementation of the seam in io.h: system calls. */
#include <errno.h>
#include <fcntl.h>
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
