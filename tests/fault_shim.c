/* LD_PRELOAD fault injection for the squeezefs DAEMON (tests/test_faults.py).
 *
 * Environment:
 *   SQZ_FAULT_DIR   only writes to regular files under this directory count
 *   SQZ_FAULT_ARM   a path: faults are injected only while this file exists
 *                   (so the test can arm it after a clean set-up)
 *   SQZ_FAULT_NTH   the Nth counted write (pwrite/pwrite64/pwritev/write)
 *                   after arming fails (default 1)
 *   SQZ_FAULT_COUNT how many consecutive counted writes fail from the Nth
 *                   on (default 1; 0 = all of them)
 *   SQZ_FAULT_MODE  eio (fail with EIO, nothing written), short (write
 *                   only half of the bytes and return that count) or zero
 *                   (write nothing and return 0: no progress, no error)
 * Build: cc -shared -fPIC -O1 -o fault_shim.so fault_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long counter;

/* 0: do the write normally; 1: fail with EIO; 2: short write. */
static int decide(int fd)
{
    const char *dir = getenv("SQZ_FAULT_DIR"), *arm = getenv("SQZ_FAULT_ARM");
    if (!dir || !arm || access(arm, F_OK) != 0)
        return 0;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0)
        return 0;
    path[n] = 0;
    size_t dl = strlen(dir);
    if (strncmp(path, dir, dl) != 0 || (path[dl] != '/' && path[dl] != 0))
        return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    long nth = getenv("SQZ_FAULT_NTH") ? atol(getenv("SQZ_FAULT_NTH")) : 1;
    long count = getenv("SQZ_FAULT_COUNT") ? atol(getenv("SQZ_FAULT_COUNT")) : 1;
    long k = __atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST);
    if (k < nth || (count > 0 && k >= nth + count))
        return 0;
    const char *mode = getenv("SQZ_FAULT_MODE");
    int m = (mode && strcmp(mode, "short") == 0)  ? 2
            : (mode && strcmp(mode, "zero") == 0) ? 3
                                                  : 1;
    fprintf(stderr, "fault_shim: injecting %s into write #%ld on %s\n",
            m == 1 ? "EIO" : m == 2 ? "a short write" : "a 0-byte write", k,
            path);
    return m;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real)
        real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    int d = decide(fd);
    if (d == 1) {
        errno = EIO;
        return -1;
    }
    if (d == 3)
        return 0;
    if (d == 2 && n > 1)
        n /= 2;
    return real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real)
        real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    int d = decide(fd);
    if (d == 1) {
        errno = EIO;
        return -1;
    }
    if (d == 3)
        return 0;
    if (d == 2 && n > 1)
        n /= 2;
    return real(fd, buf, n);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    static ssize_t (*real)(int, const struct iovec *, int, off_t);
    if (!real)
        real = (ssize_t(*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "pwritev");
    int d = decide(fd);
    if (d == 1) {
        errno = EIO;
        return -1;
    }
    if (d == 3)
        return 0;
    if (d == 2 && cnt > 0 && iov[0].iov_len > 1) {
        struct iovec half = {iov[0].iov_base, iov[0].iov_len / 2};
        return real(fd, &half, 1, off);
    }
    return real(fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    return pwritev(fd, iov, cnt, off);
}
