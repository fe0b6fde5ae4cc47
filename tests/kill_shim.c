/* LD_PRELOAD shim for the squeezefs DAEMON used by tests/test_crash_matrix.py:
 * kill -9 the daemon right before or right after the Nth call of one step.
 *
 * A *step* is a call of a libc function that changes BACKING: fsetxattr,
 * setxattr, lsetxattr, fremovexattr, removexattr, lremovexattr (the step's
 * key names the xattr too: "fsetxattr:user.squeezefs.packed"), ftruncate,
 * fallocate, futimens, utimensat, fchmod, fchmodat, fchown, fchownat,
 * renameat, renameat2 (key
 * "renameat2:exchange" for RENAME_EXCHANGE), linkat, unlinkat, openat with O_CREAT
 * ("openat:creat"), pwrite, pwritev, write, fsync, fdatasync, syncfs. Only
 * calls on something under $SQZ_KS_DIR count (an fd's /proc/self/fd link,
 * also for a path given as /proc/self/fd/N; dirfd + name for the *at
 * calls), and only while the file $SQZ_KS_ARM exists (the test arms it
 * after a clean set-up).
 *
 * Environment:
 *   SQZ_KS_DIR   BACKING (made absolute with realpath)
 *   SQZ_KS_ARM   the arm file
 *   SQZ_KS_TRACE a file: every step is appended as "KEY\tPATH\n" (the
 *                test's list of the operation's steps, in order)
 *   SQZ_KS_KEY   with SQZ_KS_NTH and SQZ_KS_WHEN (before|after): kill
 *                the daemon (kill(getpid(), SIGKILL)) before or after the
 *                NTH step with this key; written first to stderr as
 *                "kill_shim: killing ..."
 * Build: cc -shared -fPIC -O1 -o kill_shim.so kill_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long count;

#define REAL(ret, name, ...)                                                   \
    static ret (*real_##name)(__VA_ARGS__);                                    \
    if (!real_##name)                                                          \
        real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);

static int under(const char *p)
{
    static char dir[PATH_MAX];
    static size_t dl;
    if (!dl) {
        const char *d = getenv("SQZ_KS_DIR");
        if (!d || !realpath(d, dir))
            return 0;
        dl = strlen(dir);
    }
    return strncmp(p, dir, dl) == 0 && (p[dl] == '/' || p[dl] == 0);
}

static int armed(void)
{
    const char *a = getenv("SQZ_KS_ARM");
    return a && syscall(SYS_faccessat, AT_FDCWD, a, F_OK) == 0;
}

static int fd_path(int fd, char *out)
{
    char l[64];
    snprintf(l, sizeof l, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(l, out, PATH_MAX - 1);
    if (n <= 0)
        return -1;
    out[n] = 0;
    return 0;
}

#define OUTMAX (2 * PATH_MAX + 2)

/* out: OUTMAX bytes */
static int abs_path(int dirfd, const char *p, char *out)
{
    if (!p)
        return -1;
    if (strncmp(p, "/proc/self/fd/", 14) == 0 && !strchr(p + 14, '/'))
        return fd_path(atoi(p + 14), out);
    if (p[0] == '/') {
        snprintf(out, OUTMAX, "%s", p);
        return 0;
    }
    char d[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (!getcwd(d, sizeof d))
            return -1;
    } else if (fd_path(dirfd, d) != 0) {
        return -1;
    }
    if (!*p) {
        snprintf(out, OUTMAX, "%s", d);
        return 0;
    }
    snprintf(out, OUTMAX, "%s/%s", d, p);
    return 0;
}

/* -1: not a step; 0: a step, go on; 1: kill before; 2: kill after. */
static int step(const char *key, const char *path)
{
    if (!path || !under(path) || !armed())
        return -1;
    int d = 0;
    pthread_mutex_lock(&lock);
    const char *tr = getenv("SQZ_KS_TRACE"), *k = getenv("SQZ_KS_KEY");
    if (tr) {
        int fd = (int)syscall(SYS_openat, AT_FDCWD, tr,
                              O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            char line[OUTMAX + 320];
            int n = snprintf(line, sizeof line, "%s\t%s\n", key, path);
            if (n > 0)
                syscall(SYS_write, fd, line, (size_t)n);
            close(fd);
        }
    }
    if (k && strcmp(k, key) == 0) {
        long nth = getenv("SQZ_KS_NTH") ? atol(getenv("SQZ_KS_NTH")) : 1;
        if (++count == nth) {
            const char *w = getenv("SQZ_KS_WHEN");
            d = w && strcmp(w, "after") == 0 ? 2 : 1;
            fprintf(stderr, "kill_shim: killing %s %s #%ld on %s\n",
                    d == 1 ? "before" : "after", key, nth, path);
            fflush(stderr);
        }
    }
    pthread_mutex_unlock(&lock);
    if (d == 1)
        kill(getpid(), SIGKILL);
    return d;
}

static int fd_step(const char *key, int fd)
{
    char p[PATH_MAX];
    return fd_path(fd, p) == 0 ? step(key, p) : -1;
}

static int at_step(const char *key, int dirfd, const char *name)
{
    char p[OUTMAX];
    return abs_path(dirfd, name, p) == 0 ? step(key, p) : -1;
}

static void after(int d)
{
    if (d == 2)
        kill(getpid(), SIGKILL);
}

static void xkey(char *k, size_t n, const char *fn, const char *name)
{
    snprintf(k, n, "%s:%s", fn, name ? name : "");
}

#define WRAP_RET(expr, d)                                                      \
    do {                                                                       \
        int e_;                                                                \
        __typeof__(expr) r_ = (expr);                                          \
        e_ = errno;                                                            \
        after(d);                                                              \
        errno = e_;                                                            \
        return r_;                                                             \
    } while (0)

int fsetxattr(int fd, const char *name, const void *v, size_t n, int fl)
{
    REAL(int, fsetxattr, int, const char *, const void *, size_t, int);
    char k[300];
    xkey(k, sizeof k, "fsetxattr", name);
    int d = fd_step(k, fd);
    WRAP_RET(real_fsetxattr(fd, name, v, n, fl), d);
}

int setxattr(const char *p, const char *name, const void *v, size_t n, int fl)
{
    REAL(int, setxattr, const char *, const char *, const void *, size_t, int);
    char k[300];
    xkey(k, sizeof k, "setxattr", name);
    int d = at_step(k, AT_FDCWD, p);
    WRAP_RET(real_setxattr(p, name, v, n, fl), d);
}

int lsetxattr(const char *p, const char *name, const void *v, size_t n, int fl)
{
    REAL(int, lsetxattr, const char *, const char *, const void *, size_t, int);
    char k[300];
    xkey(k, sizeof k, "lsetxattr", name);
    int d = at_step(k, AT_FDCWD, p);
    WRAP_RET(real_lsetxattr(p, name, v, n, fl), d);
}

int fremovexattr(int fd, const char *name)
{
    REAL(int, fremovexattr, int, const char *);
    char k[300];
    xkey(k, sizeof k, "fremovexattr", name);
    int d = fd_step(k, fd);
    WRAP_RET(real_fremovexattr(fd, name), d);
}

int removexattr(const char *p, const char *name)
{
    REAL(int, removexattr, const char *, const char *);
    char k[300];
    xkey(k, sizeof k, "removexattr", name);
    int d = at_step(k, AT_FDCWD, p);
    WRAP_RET(real_removexattr(p, name), d);
}

int lremovexattr(const char *p, const char *name)
{
    REAL(int, lremovexattr, const char *, const char *);
    char k[300];
    xkey(k, sizeof k, "lremovexattr", name);
    int d = at_step(k, AT_FDCWD, p);
    WRAP_RET(real_lremovexattr(p, name), d);
}

int ftruncate(int fd, off_t len)
{
    REAL(int, ftruncate, int, off_t);
    int d = fd_step(len == 0 ? "ftruncate:0" : "ftruncate", fd);
    WRAP_RET(real_ftruncate(fd, len), d);
}

int ftruncate64(int fd, off_t len)
{
    return ftruncate(fd, len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    REAL(int, fallocate, int, int, off_t, off_t);
    int d = fd_step("fallocate", fd);
    WRAP_RET(real_fallocate(fd, mode, off, len), d);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    return fallocate(fd, mode, off, len);
}

int futimens(int fd, const struct timespec t[2])
{
    REAL(int, futimens, int, const struct timespec *);
    int d = fd_step("futimens", fd);
    WRAP_RET(real_futimens(fd, t), d);
}

int utimensat(int dfd, const char *p, const struct timespec t[2], int fl)
{
    REAL(int, utimensat, int, const char *, const struct timespec *, int);
    int d = at_step("utimensat", dfd, p);
    WRAP_RET(real_utimensat(dfd, p, t, fl), d);
}

int fchmod(int fd, mode_t mode)
{
    REAL(int, fchmod, int, mode_t);
    int d = fd_step("fchmod", fd);
    WRAP_RET(real_fchmod(fd, mode), d);
}

int fchmodat(int dfd, const char *p, mode_t mode, int fl)
{
    REAL(int, fchmodat, int, const char *, mode_t, int);
    int d = at_step("fchmodat", dfd, p);
    WRAP_RET(real_fchmodat(dfd, p, mode, fl), d);
}

int fchown(int fd, uid_t u, gid_t g)
{
    REAL(int, fchown, int, uid_t, gid_t);
    int d = fd_step("fchown", fd);
    WRAP_RET(real_fchown(fd, u, g), d);
}

int fchownat(int dfd, const char *p, uid_t u, gid_t g, int fl)
{
    REAL(int, fchownat, int, const char *, uid_t, gid_t, int);
    int d = at_step("fchownat", dfd, p);
    WRAP_RET(real_fchownat(dfd, p, u, g, fl), d);
}

int renameat(int ofd, const char *o, int nfd, const char *n)
{
    REAL(int, renameat, int, const char *, int, const char *);
    int d = at_step("renameat", ofd, o);
    (void)nfd;
    WRAP_RET(real_renameat(ofd, o, nfd, n), d);
}

int renameat2(int ofd, const char *o, int nfd, const char *n, unsigned int fl)
{
    REAL(int, renameat2, int, const char *, int, const char *, unsigned int);
    int d = at_step(fl & RENAME_EXCHANGE ? "renameat2:exchange" : "renameat2", ofd, o);
    WRAP_RET(real_renameat2(ofd, o, nfd, n, fl), d);
}

int linkat(int ofd, const char *o, int nfd, const char *n, int fl)
{
    REAL(int, linkat, int, const char *, int, const char *, int);
    int d = at_step("linkat", nfd, n);
    WRAP_RET(real_linkat(ofd, o, nfd, n, fl), d);
}

int unlinkat(int dfd, const char *p, int fl)
{
    REAL(int, unlinkat, int, const char *, int);
    int d = at_step("unlinkat", dfd, p);
    WRAP_RET(real_unlinkat(dfd, p, fl), d);
}

static int open_common(int dfd, const char *p, int fl, mode_t mode)
{
    REAL(int, openat, int, const char *, int, ...);
    int d = (fl & O_CREAT) ? at_step("openat:creat", dfd, p) : -1;
    WRAP_RET(real_openat(dfd, p, fl, mode), d);
}

int openat(int dfd, const char *p, int fl, ...)
{
    mode_t mode = 0;
    if (fl & (O_CREAT | __O_TMPFILE)) {
        va_list ap;
        va_start(ap, fl);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    return open_common(dfd, p, fl, mode);
}

int openat64(int dfd, const char *p, int fl, ...)
{
    mode_t mode = 0;
    if (fl & (O_CREAT | __O_TMPFILE)) {
        va_list ap;
        va_start(ap, fl);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    return open_common(dfd, p, fl, mode);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(ssize_t, pwrite, int, const void *, size_t, off_t);
    int d = fd_step("pwrite", fd);
    WRAP_RET(real_pwrite(fd, buf, n, off), d);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(ssize_t, pwritev, int, const struct iovec *, int, off_t);
    int d = fd_step("pwrite", fd);
    WRAP_RET(real_pwritev(fd, iov, cnt, off), d);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    return pwritev(fd, iov, cnt, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(ssize_t, write, int, const void *, size_t);
    /* (stderr and /dev/fuse are never under BACKING: no recursion) */
    int d = fd_step("write", fd);
    WRAP_RET(real_write(fd, buf, n), d);
}

int fsync(int fd)
{
    REAL(int, fsync, int);
    int d = fd_step("fsync", fd);
    WRAP_RET(real_fsync(fd), d);
}

int fdatasync(int fd)
{
    REAL(int, fdatasync, int);
    int d = fd_step("fdatasync", fd);
    WRAP_RET(real_fdatasync(fd), d);
}

int syncfs(int fd)
{
    REAL(int, syncfs, int);
    int d = fd_step("syncfs", fd);
    WRAP_RET(real_syncfs(fd), d);
}
