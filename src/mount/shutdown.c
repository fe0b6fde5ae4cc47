/* Leaving on SIGTERM, SIGINT or SIGHUP without losing written data.
 *
 * With the kernel writeback cache (the default on read-write mounts) data
 * a program wrote into a file it has not closed or fsync'ed may still be
 * in the kernel's page cache, not in the daemon. libfuse's own handlers end
 * the request loop at once, and fuse_session_unmount then closes
 * /dev/fuse before unmounting: those pages would be dropped. So a signal
 * is only noted here (a byte into a pipe, the one async-signal-safe thing
 * the handler does). A thread then, with the request loop still serving:
 *
 *  1. syncfs(2)s the mount: the kernel writes its dirty pages to the
 *     daemon as ordinary WRITE requests;
 *  2. waits until the connection has no request left in flight
 *     (/sys/fs/fuse/connections/N/waiting reads 0, at most
 *     SQZ_LEAVE_DRAIN_MS), since writes may still be queued when syncfs
 *     returns;
 *  3. ends the loop (fuse_session_exit, then the same signal to the main
 *     thread, whose wait in the loop it interrupts).
 *
 * op_destroy then commits everything the daemon holds, as on an unmount.
 * A second signal while this runs ends the loop at once (an impatient
 * operator's Ctrl-C twice); what the kernel still held is then lost, as
 * with kill -9. Without the writeback cache steps 1 and 2 are skipped: the
 * kernel holds nothing the daemon has not seen.
 */
#include "daemon/fs.h"
#include "mount/mountlife.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define SQZ_LEAVE_DRAIN_MS 30000

/* Process-wide: signal handlers are. One mount per daemon process. */
static struct fuse_session *g_se;
static int g_pipe[2] = {-1, -1};
static pthread_t g_main;
static pthread_t g_thread;
static int g_started;
static atomic_int g_phase; /* 0 running, 1 flushing, 2 leaving */
static int g_signo = SIGTERM;

static void on_signal(int sig)
{
    int saved = errno;
    int phase = atomic_load(&g_phase);
    if (phase == 0) {
        g_signo = sig;
        atomic_store(&g_phase, 1);
        char c = 's';
        ssize_t w = write(g_pipe[1], &c, 1);
        (void)w;
    } else {
        /* the thread's wake-up (2) or a second signal (1): leave now */
        atomic_store(&g_phase, 2);
        fuse_session_exit(g_se);
    }
    errno = saved;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Requests of this connection not yet answered, or -errno. */
static long waiting_requests(dev_t dev)
{
    char path[96];
    unsigned kdev = (major(dev) << 20) | minor(dev); /* the kernel's dev_t */
    snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/waiting", kdev);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[32];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    int e = errno;
    close(fd);
    if (n <= 0)
        return n < 0 ? -e : -EIO;
    buf[n] = 0;
    return strtol(buf, NULL, 10);
}

/* Steps 1 and 2 (see the top of the file). */
static void flush_kernel(struct sqz_fs *fs)
{
    if (!fs->mnt_real) {
        sqz_logf(SQZ_LOG_WARN, "leaving: mount point unknown, the kernel's "
                               "unwritten pages cannot be flushed");
        return;
    }
    int fd = open(fs->mnt_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        sqz_logf(SQZ_LOG_ERR, "leaving: cannot open %s to flush the kernel's "
                              "pages: %s", fs->mnt_real, strerror(errno));
        return;
    }
    struct stat st;
    int have_dev = fstat(fd, &st) == 0;
    if (syncfs(fd) != 0)
        sqz_logf(SQZ_LOG_ERR, "leaving: syncfs of %s failed: %s", fs->mnt_real,
                 strerror(errno));
    close(fd);
    if (!have_dev)
        return;
    uint64_t end = now_ms() + SQZ_LEAVE_DRAIN_MS;
    long w;
    while ((w = waiting_requests(st.st_dev)) > 0 && now_ms() < end)
        usleep(2000);
    if (w > 0)
        sqz_logf(SQZ_LOG_ERR, "leaving: %ld requests still in flight after "
                              "%d s", w, SQZ_LEAVE_DRAIN_MS / 1000);
    else if (w < 0 && w != -ENOENT)
        sqz_logf(SQZ_LOG_WARN, "leaving: cannot read the connection's "
                               "waiting requests: %s", strerror((int)-w));
}

static void *leave_main(void *arg)
{
    struct sqz_fs *fs = arg;
    for (;;) {
        char c;
        ssize_t r = read(g_pipe[0], &c, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || c == 'q')
            return NULL; /* sqz_shutdown_stop */
        if (fs->opts.writeback)
            flush_kernel(fs);
        if (atomic_exchange(&g_phase, 2) == 2)
            return NULL; /* a second signal ended the loop already */
        fuse_session_exit(g_se);
        /* interrupt the main thread's wait in the loop (handler: phase 2) */
        pthread_kill(g_main, g_signo);
        return NULL;
    }
}

int sqz_shutdown_start(struct sqz_fs *fs, struct fuse_session *se)
{
    if (pipe2(g_pipe, O_CLOEXEC) != 0)
        return -errno;
    g_se = se;
    g_main = pthread_self();
    atomic_store(&g_phase, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: the loop's wait must see EINTR */
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    /* The thread takes no signal itself (the handler may run anywhere
     * else; it only writes to the pipe or ends the loop). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&g_thread, NULL, leave_main, fs);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        close(g_pipe[0]);
        close(g_pipe[1]);
        g_pipe[0] = g_pipe[1] = -1;
        return -rc;
    }
    g_started = 1;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        if (sigaction(sigs[i], &sa, NULL) != 0)
            return -errno;
    return 0;
}

void sqz_shutdown_stop(struct sqz_fs *fs)
{
    (void)fs;
    if (!g_started)
        return;
    /* Signals from here on end nothing more (the loop has ended). */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    char c = 'q';
    ssize_t w = write(g_pipe[1], &c, 1);
    (void)w;
    pthread_join(g_thread, NULL);
    g_started = 0;
    close(g_pipe[0]);
    close(g_pipe[1]);
    g_pipe[0] = g_pipe[1] = -1;
}
