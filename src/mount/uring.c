/* FUSE over io_uring (-o io_uring): requests and replies pass through
 * io_uring rings (one per core, libfuse's own threads) instead of read(2)
 * and writev(2) on /dev/fuse. It needs libfuse >= 3.18 built with it
 * (tools/build-libfuse.sh; meson defines SQZ_HAVE_FUSE_URING) and a kernel
 * with /sys/module/fuse/parameters/enable_uring set to Y. Without the
 * option the session is the classic /dev/fuse one, as before.
 *
 * libfuse enables the rings with its session option "io_uring" (or its
 * environment variable FUSE_URING_ENABLE, which is cleared here so that
 * the mount option alone decides). Set-ID bits are cleared by the
 * handlers as on /dev/fuse with this libfuse (killpriv.c).
 * A ring that fails to start is logged by libfuse and the mount goes on
 * through /dev/fuse: that message is raised to an error here. */
#include "mount/mountlife.h"
#include "squeezefs/container.h" /* sqz_logf */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ENABLE_URING_PARAM "/sys/module/fuse/parameters/enable_uring"

int sqz_uring_check(char *err, size_t errlen)
{
#ifndef SQZ_HAVE_FUSE_URING
    snprintf(err, errlen, "-o io_uring: this squeezefs was built against "
             "libfuse %d.%d, which has no FUSE over io_uring (libfuse >= "
             "3.18 has it: tools/build-libfuse.sh builds it, then rebuild "
             "squeezefs)", FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION);
    return -EOPNOTSUPP;
#else
    int v = fuse_version(); /* the library loaded, e.g. 318 */
    if (v < 318) {
        snprintf(err, errlen, "-o io_uring: the libfuse loaded is %d.%d, "
                 "which has no FUSE over io_uring (built against %d.%d: "
                 "check the rpath, ldd squeezefs)", v / 100, v % 100,
                 FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION);
        return -EOPNOTSUPP;
    }
    char c = 0;
    int fd = open(ENABLE_URING_PARAM, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "-o io_uring: this kernel has no FUSE over "
                 "io_uring (no %s; Linux 6.14 and later have it)",
                 ENABLE_URING_PARAM);
        return -EOPNOTSUPP;
    }
    ssize_t n = read(fd, &c, 1);
    close(fd);
    if (n != 1 || (c != 'Y' && c != '1')) {
        snprintf(err, errlen, "-o io_uring: the kernel's FUSE over io_uring "
                 "is off (%s is %c); root turns it on with: echo Y > %s",
                 ENABLE_URING_PARAM, n == 1 ? c : '?', ENABLE_URING_PARAM);
        return -EOPNOTSUPP;
    }
    return 0;
#endif
}

#ifdef SQZ_HAVE_FUSE_URING
/* libfuse's messages, as its default handler writes them (stderr); the
 * ones about the rings also through the daemon's log (syslog when
 * detached), a ring that did not start as an error. */
static void fuse_log_sink(enum fuse_log_level level, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (!strstr(msg, "io-uring") && !strstr(msg, "io_uring")) {
        fputs(msg, stderr);
        return;
    }
    msg[strcspn(msg, "\n")] = '\0';
    if (strstr(msg, "fail"))
        sqz_logf(SQZ_LOG_ERR, "FUSE over io_uring did not start, requests "
                 "go through /dev/fuse: %s", msg);
    else
        sqz_logf(level <= FUSE_LOG_ERR ? SQZ_LOG_ERR : SQZ_LOG_INFO, "%s", msg);
}
#endif

int sqz_uring_args(struct sqz_fs *fs, struct fuse_args *args)
{
    unsetenv("FUSE_URING_ENABLE");
    if (!fs->opts.io_uring)
        return 0;
#ifdef SQZ_HAVE_FUSE_URING
    fuse_set_log_func(fuse_log_sink);
#endif
    return fuse_opt_add_arg(args, "-oio_uring") ? -ENOMEM : 0;
}

void sqz_uring_init(struct sqz_fs *fs, struct fuse_conn_info *conn)
{
#ifdef SQZ_HAVE_FUSE_URING
    if (!fs->opts.io_uring) {
        conn->want &= ~(unsigned)FUSE_CAP_OVER_IO_URING;
        return;
    }
    if (conn->capable & FUSE_CAP_OVER_IO_URING) {
        conn->want |= FUSE_CAP_OVER_IO_URING;
        sqz_logf(SQZ_LOG_INFO, "FUSE over io_uring: the kernel offers it, "
                 "starting the rings");
    } else {
        sqz_logf(SQZ_LOG_ERR, "FUSE over io_uring: the kernel did not offer "
                 "it at INIT; requests go through /dev/fuse");
    }
#else
    (void)fs;
    (void)conn;
#endif
}
