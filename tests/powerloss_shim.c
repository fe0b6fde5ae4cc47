/* LD_PRELOAD shim for the squeezefs DAEMON used by tests/test_powerloss.py.
 *
 * For every write-like call on a file under $SQZ_PL_DIR it first appends an
 * undo record (path, offset, old bytes, old file size) to the journal
 * $SQZ_PL_JOURNAL; after a successful fsync/fdatasync (or a write on an
 * O_SYNC/O_DSYNC fd, or syncfs/sync) it appends a SYNC record: the file's
 * earlier undo records no longer apply. renames and unlinks are journalled
 * so that the test can follow names. The test kills the daemon with -9,
 * then undoes (all or some of) the unsynced writes: a simulated power loss.
 *
 * Journal record: "SQPL" u8 type u16 pathlen u16 path2len u64 off
 *                 u64 oldlen u64 oldsize u64 arg, path, path2, old bytes.
 * Types: 1 write (old bytes of [off, off+oldlen), file size oldsize before),
 *        2 truncate/size change (arg = new size), 3 sync, 4 syncall,
 *        5 rename (path -> path2), 6 unlink, 7 exchange (RENAME_EXCHANGE:
 *        path and path2 swap their inodes).
 * Journal writes go through the raw syscall and are serialised by a mutex.
 * Build: cc -shared -fPIC -O1 -o powerloss_shim.so powerloss_shim.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { T_WRITE = 1, T_TRUNC = 2, T_SYNC = 3, T_SYNCALL = 4, T_RENAME = 5, T_UNLINK = 6,
       T_EXCHANGE = 7 };

static pthread_mutex_t jlock = PTHREAD_MUTEX_INITIALIZER;
static int jfd = -1;
static char dir[PATH_MAX];
static size_t dirlen;
static int inited;

#define REAL(ret, name, ...)                                                   \
    static ret (*real_##name)(__VA_ARGS__);                                    \
    if (!real_##name)                                                          \
        real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);

static void init(void)
{
    if (__atomic_load_n(&inited, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&jlock);
    if (!inited) {
        const char *d = getenv("SQZ_PL_DIR"), *j = getenv("SQZ_PL_JOURNAL");
        if (d && j && realpath(d, dir)) {
            dirlen = strlen(dir);
            jfd = (int)syscall(SYS_openat, AT_FDCWD, j,
                               O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        }
        __atomic_store_n(&inited, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&jlock);
}

static void jwrite_all(const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = syscall(SYS_write, jfd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            abort(); /* the journal must be complete */
        p += w;
        n -= (size_t)w;
    }
}

static void journal(int type, const char *path, const char *path2, uint64_t off,
                    const void *old, uint64_t oldlen, uint64_t oldsize, uint64_t arg)
{
    unsigned char hdr[4 + 1 + 2 + 2 + 8 * 4];
    uint16_t pl = (uint16_t)strlen(path), p2l = path2 ? (uint16_t)strlen(path2) : 0;
    unsigned char *h = hdr;
    memcpy(h, "SQPL", 4); h += 4;
    *h++ = (unsigned char)type;
    memcpy(h, &pl, 2); h += 2;
    memcpy(h, &p2l, 2); h += 2;
    memcpy(h, &off, 8); h += 8;
    memcpy(h, &oldlen, 8); h += 8;
    memcpy(h, &oldsize, 8); h += 8;
    memcpy(h, &arg, 8);
    int saved = errno;
    pthread_mutex_lock(&jlock);
    jwrite_all(hdr, sizeof hdr);
    jwrite_all(path, pl);
    if (p2l)
        jwrite_all(path2, p2l);
    if (oldlen)
        jwrite_all(old, oldlen);
    pthread_mutex_unlock(&jlock);
    errno = saved;
}

static int under_dir(const char *p)
{
    return dirlen && strncmp(p, dir, dirlen) == 0 && (p[dirlen] == '/' || p[dirlen] == 0);
}

/* Path of fd if it is a regular file under the watched dir. */
static int fd_path(int fd, char *out)
{
    init();
    if (jfd < 0 || fd < 0)
        return 0;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n <= 0)
        return 0;
    out[n] = 0;
    if (!under_dir(out))
        return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    return 1;
}

static int abs_path(int dirfd, const char *p, char *out)
{
    init();
    if (jfd < 0 || !p)
        return 0;
    char base[PATH_MAX];
    if (p[0] == '/') {
        snprintf(out, PATH_MAX, "%s", p);
    } else {
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base))
                return 0;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n <= 0)
                return 0;
            base[n] = 0;
        }
        if (snprintf(out, PATH_MAX, "%s/%s", base, p) >= PATH_MAX)
            return 0;
    }
    return under_dir(out);
}

/* The old bytes [off, off+n) of fd, also of a write-only descriptor
 * (packing truncates through one: read through its /proc/self/fd link).
 * Bytes read; aborts if they cannot be read (the journal must be
 * complete). */
static ssize_t pread_old(int fd, void *buf, size_t n, uint64_t off)
{
    ssize_t r = syscall(SYS_pread64, fd, buf, n, off);
    if (r < 0 && errno == EBADF) {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        int rfd = (int)syscall(SYS_openat, AT_FDCWD, link, O_RDONLY | O_CLOEXEC);
        if (rfd < 0)
            abort();
        r = syscall(SYS_pread64, rfd, buf, n, off);
        syscall(SYS_close, rfd);
    }
    if (r < 0)
        abort();
    return r;
}

/* Record the undo of writing n bytes at off (off < 0: current offset). */
static void before_write(int fd, int64_t off, size_t n)
{
    char path[PATH_MAX];
    if (!fd_path(fd, path))
        return;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return;
    if (off < 0) {
        int fl = fcntl(fd, F_GETFL);
        off = (fl >= 0 && (fl & O_APPEND)) ? st.st_size : lseek(fd, 0, SEEK_CUR);
        if (off < 0)
            return;
    }
    uint64_t oldlen = 0;
    void *old = NULL;
    if ((uint64_t)off < (uint64_t)st.st_size) {
        oldlen = (uint64_t)st.st_size - (uint64_t)off;
        if (oldlen > n)
            oldlen = n;
        old = malloc(oldlen ? oldlen : 1);
        if (!old)
            abort();
        oldlen = (uint64_t)pread_old(fd, old, oldlen, (uint64_t)off);
    }
    journal(T_WRITE, path, NULL, (uint64_t)off, old, oldlen, (uint64_t)st.st_size, n);
    free(old);
}

static void after_sync(int fd)
{
    char path[PATH_MAX];
    if (fd_path(fd, path))
        journal(T_SYNC, path, NULL, 0, NULL, 0, 0, 0);
}

static void after_write(int fd, ssize_t r)
{
    if (r < 0)
        return;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & (O_SYNC | O_DSYNC)))
        after_sync(fd);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(ssize_t, pwrite, int, const void *, size_t, off_t);
    before_write(fd, off, n);
    ssize_t r = real_pwrite(fd, buf, n, off);
    after_write(fd, r);
    return r;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(ssize_t, write, int, const void *, size_t);
    before_write(fd, -1, n);
    ssize_t r = real_write(fd, buf, n);
    after_write(fd, r);
    return r;
}

static size_t iov_total(const struct iovec *iov, int cnt)
{
    size_t t = 0;
    for (int i = 0; i < cnt; i++)
        t += iov[i].iov_len;
    return t;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(ssize_t, pwritev, int, const struct iovec *, int, off_t);
    before_write(fd, off, iov_total(iov, cnt));
    ssize_t r = real_pwritev(fd, iov, cnt, off);
    after_write(fd, r);
    return r;
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    return pwritev(fd, iov, cnt, off);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    REAL(ssize_t, pwritev2, int, const struct iovec *, int, off_t, int);
    before_write(fd, off, iov_total(iov, cnt));
    ssize_t r = real_pwritev2(fd, iov, cnt, off, flags);
    after_write(fd, r);
    if (r >= 0 && (flags & (RWF_SYNC | RWF_DSYNC)))
        after_sync(fd);
    return r;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    REAL(ssize_t, writev, int, const struct iovec *, int);
    before_write(fd, -1, iov_total(iov, cnt));
    ssize_t r = real_writev(fd, iov, cnt);
    after_write(fd, r);
    return r;
}

static void before_resize(int fd, uint64_t newsize)
{
    char path[PATH_MAX];
    struct stat st;
    if (!fd_path(fd, path) || fstat(fd, &st) != 0)
        return;
    uint64_t oldsize = (uint64_t)st.st_size;
    if (newsize < oldsize) {
        uint64_t len = oldsize - newsize;
        void *old = malloc(len);
        if (!old)
            abort();
        ssize_t r = pread_old(fd, old, len, newsize);
        journal(T_WRITE, path, NULL, newsize, old, (uint64_t)r, oldsize, 0);
        free(old);
    }
    journal(T_TRUNC, path, NULL, 0, NULL, 0, oldsize, newsize);
}

int ftruncate(int fd, off_t len)
{
    REAL(int, ftruncate, int, off_t);
    before_resize(fd, (uint64_t)len);
    return real_ftruncate(fd, len);
}

int ftruncate64(int fd, off_t len)
{
    return ftruncate(fd, len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    REAL(int, fallocate, int, int, off_t, off_t);
    /* Any mode may change bytes in [off, off+len) (punch/zero) or the size. */
    before_write(fd, off, (size_t)len);
    return real_fallocate(fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    return fallocate(fd, mode, off, len);
}

int posix_fallocate(int fd, off_t off, off_t len)
{
    REAL(int, posix_fallocate, int, off_t, off_t);
    before_write(fd, off, (size_t)len);
    return real_posix_fallocate(fd, off, len);
}

int fsync(int fd)
{
    REAL(int, fsync, int);
    int r = real_fsync(fd);
    if (r == 0)
        after_sync(fd);
    return r;
}

int fdatasync(int fd)
{
    REAL(int, fdatasync, int);
    int r = real_fdatasync(fd);
    if (r == 0)
        after_sync(fd);
    return r;
}

int sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
    REAL(int, sync_file_range, int, off_t, off_t, unsigned int);
    return real_sync_file_range(fd, off, n, flags); /* not a durability point */
}

int syncfs(int fd)
{
    REAL(int, syncfs, int);
    int r = real_syncfs(fd);
    init();
    if (r == 0 && jfd >= 0)
        journal(T_SYNCALL, dir, NULL, 0, NULL, 0, 0, 0);
    return r;
}

void sync(void)
{
    REAL(void, sync, void);
    real_sync();
    init();
    if (jfd >= 0)
        journal(T_SYNCALL, dir, NULL, 0, NULL, 0, 0, 0);
}

int close(int fd)
{
    REAL(int, close, int);
    return real_close(fd);
}

static void journal_rename(int ofd, const char *o, int nfd, const char *n,
                           int type)
{
    char a[PATH_MAX], b[PATH_MAX];
    int ua = abs_path(ofd, o, a), ub = abs_path(nfd, n, b);
    if (ua || ub)
        journal(type, ua ? a : "-", ub ? b : "-", 0, NULL, 0, 0, 0);
}

int rename(const char *o, const char *n)
{
    REAL(int, rename, const char *, const char *);
    int r = real_rename(o, n);
    if (r == 0)
        journal_rename(AT_FDCWD, o, AT_FDCWD, n, T_RENAME);
    return r;
}

int renameat(int ofd, const char *o, int nfd, const char *n)
{
    REAL(int, renameat, int, const char *, int, const char *);
    int r = real_renameat(ofd, o, nfd, n);
    if (r == 0)
        journal_rename(ofd, o, nfd, n, T_RENAME);
    return r;
}

int renameat2(int ofd, const char *o, int nfd, const char *n, unsigned int flags)
{
    REAL(int, renameat2, int, const char *, int, const char *, unsigned int);
    int r = real_renameat2(ofd, o, nfd, n, flags);
    if (r == 0)
        journal_rename(ofd, o, nfd, n,
                       (flags & 2 /* RENAME_EXCHANGE */) ? T_EXCHANGE : T_RENAME);
    return r;
}

int unlink(const char *p)
{
    REAL(int, unlink, const char *);
    char a[PATH_MAX];
    int r = real_unlink(p);
    if (r == 0 && abs_path(AT_FDCWD, p, a))
        journal(T_UNLINK, a, NULL, 0, NULL, 0, 0, 0);
    return r;
}

int unlinkat(int dfd, const char *p, int flags)
{
    REAL(int, unlinkat, int, const char *, int);
    char a[PATH_MAX];
    int r = real_unlinkat(dfd, p, flags);
    if (r == 0 && abs_path(dfd, p, a))
        journal(T_UNLINK, a, NULL, 0, NULL, 0, 0, 0);
    return r;
}
