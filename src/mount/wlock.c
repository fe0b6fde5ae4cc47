/* One writer per BACKING: a read-write mount holds an exclusive lock on
 * BACKING/.sqz-tmp.writer-lock (the prefix hides it from the mount and from
 * `squeezefs du`) for its whole life, and a second read-write mount of the
 * same BACKING — on this host or, over a file system that forwards fcntl
 * locks (NFS, GlusterFS), on another — is refused with a message naming the
 * holder. Read-only mounts take no lock and may be many.
 *
 * The lock is an open-file-description lock (F_OFD_SETLK): it survives the
 * fork of fuse_daemonize and goes away with the daemon, also after kill -9.
 * Where OFD locks are not supported, a classic POSIX fcntl lock is taken
 * instead (after daemonizing, by the process that serves the mount). Where
 * the file system has no locks at all, the mount goes ahead and says once
 * that a second writer would not be detected.
 *
 * A holder that is leaving is waited for (wait_writer=, default 30 s), not
 * refused: `fusermount3 -u M; squeezefs B M` comes while the old daemon
 * still commits and closes its files, and a kill -9'd daemon holds the lock
 * until its last thread is gone. The holder writes its pid, host, mount
 * point and, once mounted, its mount's device into the lock file, and the
 * line "leaving" when its request loop has ended. A holder counts as
 * leaving if that line is there, or (same host) its process is gone, a
 * zombie, exiting or killed, or its mount's device is no longer mounted in
 * its mount namespace. Any other holder is refused at once: waiting never
 * lets two writers in, the lock itself decides. */
#include "daemon/fs.h"
#include "daemon/mountinfo.h"
#include "node/ptimes.h"
#include "mount/mountlife.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>

#define SQZ_WLOCK_NAME SQZ_TMP_PREFIX "writer-lock"

static int set_lock(int fd, int ofd)
{
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    return fcntl(fd, ofd ? F_OFD_SETLK : F_SETLK, &fl) == 0 ? 0 : -errno;
}

/* Who holds it: the text the holder wrote, on one line. */
static void holder_text(int fd, char *out, size_t n)
{
    char buf[512];
    ssize_t r = pread(fd, buf, sizeof(buf) - 1, 0);
    if (r <= 0) {
        snprintf(out, n, "another squeezefs process");
        return;
    }
    buf[r] = 0;
    for (char *p = buf; *p; p++)
        if (*p == '\n')
            *p = p[1] ? ',' : 0;
    snprintf(out, n, "%s", buf);
}

/* Record the holder (pid, host, mount point, time, and with_dev the
 * device of its mount) in the lock file. */
static void write_holder(struct sqz_fs *fs, int with_dev)
{
    char host[256] = "?", when[64] = "?", text[1200], dev[64] = "";
    gethostname(host, sizeof(host) - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm))
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %z", &tm);
    char *info = NULL;
    if (with_dev && fs->mnt_real && sqz_slurp("/proc/self/mountinfo", &info) == 0) {
        char d[48];
        if (sqz_mountinfo_fuse_dev(info, fs->mnt_real, d, sizeof(d)) == 0)
            snprintf(dev, sizeof(dev), "dev %s\n", d);
        free(info);
    }
    int len = snprintf(text, sizeof(text), "pid %d\nhost %s\nmountpoint %s\nsince %s\n%s",
                       (int)getpid(), host,
                       fs->mnt_real ? fs->mnt_real : "?", when, dev);
    if (len < 0 || (size_t)len >= sizeof(text))
        return;
    if (ftruncate(fs->wlock.fd, 0) != 0 ||
        pwrite(fs->wlock.fd, text, (size_t)len, 0) != len)
        sqz_logf(SQZ_LOG_WARN, "squeezefs: cannot record the writer in %s: %s",
                 SQZ_WLOCK_NAME, strerror(errno));
}

/* The value of the line "KEY VALUE" of the holder's text, or NULL. */
static const char *holder_field(const char *text, const char *key, char *out,
                                size_t n)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        if (strncmp(p, key, kl) != 0 || (p[kl] != ' ' && p[kl] != '\n' && p[kl]))
            continue;
        const char *v = p[kl] == ' ' ? p + kl + 1 : p + kl;
        size_t l = strcspn(v, "\n");
        if (l >= n)
            l = n - 1;
        memcpy(out, v, l);
        out[l] = 0;
        return out;
    }
    return NULL;
}

/* Is process pid (of this host) gone, a zombie, exiting or killed? */
static int pid_leaving(long pid)
{
    char path[64], *text = NULL;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    if (sqz_slurp(path, &text) != 0)
        return 1; /* gone: its lock goes with its last descriptor */
    /* PID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS */
    char *p = strrchr(text, ')');
    char state = 0;
    unsigned long flags = 0;
    int ok = p && sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) == 2;
    free(text);
    if (!ok)
        return 0;
    if (state == 'Z' || state == 'X' || (flags & 0x4)) /* PF_EXITING */
        return 1;
    /* kill -9: SIGKILL stays pending for the group until its last thread
     * (one in syncfs, say) is gone */
    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    if (sqz_slurp(path, &text) != 0)
        return 1;
    int killed = 0;
    char v[32];
    if (holder_field(text, "ShdPnd:", v, sizeof(v)) &&
        (strtoull(v, NULL, 16) & (1ull << (SIGKILL - 1))))
        killed = 1;
    free(text);
    return killed;
}

/* Is the holder whose text the lock file holds leaving? */
static int holder_leaving(const char *text)
{
    char v[256], host[256] = "";
    if (holder_field(text, "leaving", v, sizeof(v)))
        return 1;
    long pid = holder_field(text, "pid", v, sizeof(v)) ? strtol(v, NULL, 10) : 0;
    gethostname(host, sizeof(host) - 1);
    if (pid <= 0 || !holder_field(text, "host", v, sizeof(v)) || strcmp(v, host) != 0)
        return 0; /* another host: only its own word counts */
    if (pid_leaving(pid))
        return 1;
    char dev[64], path[64], *info = NULL;
    if (!holder_field(text, "dev", dev, sizeof(dev)))
        return 0; /* not mounted yet (or an older squeezefs) */
    snprintf(path, sizeof(path), "/proc/%ld/mountinfo", pid);
    if (sqz_slurp(path, &info) != 0)
        return 1;
    int mounted = sqz_mountinfo_has_dev(info, dev);
    free(info);
    return !mounted;
}

/* Open BACKING's lock file and try to lock it once: 0 (locked, *fdp set),
 * or a negative errno (-EAGAIN/-EACCES: held; *fdp still open), or -errno
 * of the open with *fdp = -1. */
static int try_lock(struct sqz_fs *fs, int *fdp)
{
    int fd, rc;
    for (int tries = 0;; tries++) {
        /* 0600: no other user may open it and lock a stale one */
        fd = openat(fs->root_dirfd, SQZ_WLOCK_NAME,
                    O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            *fdp = -1;
            return -errno;
        }
        (void)fchmod(fd, 0600); /* one an older daemon left 0644 */
        rc = set_lock(fd, 1);
        if (rc == -EINVAL) { /* no OFD locks: a per-process lock, re-taken */
            rc = set_lock(fd, 0); /* after daemonize (sqz_writer_lock_own) */
            fs->wlock.posix = rc == 0;
        }
        /* A clean unmount removes the file: the lock counts only if the
         * file locked is still the one under that name. */
        struct stat a, b;
        if (rc != 0 || tries >= 100 ||
            (fstat(fd, &a) == 0 &&
             fstatat(fs->root_dirfd, SQZ_WLOCK_NAME, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
             a.st_ino == b.st_ino && a.st_dev == b.st_dev))
            break;
        close(fd);
    }
    *fdp = fd;
    return rc;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int sqz_writer_lock(struct sqz_fs *fs, char *err, size_t errlen)
{
    fs->wlock.fd = -1;
    fs->wlock.posix = 0;
    if (fs->opts.ro)
        return 0;
    int fd, rc, waited = 0;
    double start = mono_s();
    for (;;) {
        /* BACKING shows the times it had (the file is the daemon's) */
        struct sqz_ptimes_dir t;
        sqz_ptimes_dir_begin(NULL, fs->root_dirfd, &t);
        rc = try_lock(fs, &fd);
        sqz_ptimes_dir_end(NULL, fs->root_dirfd, &t);
        if (fd < 0) {
            snprintf(err, errlen, "cannot open the writer lock %s/%s: %s",
                     fs->backing_real, SQZ_WLOCK_NAME, strerror(-rc));
            return rc;
        }
        if (rc != -EAGAIN && rc != -EACCES)
            break;
        char text[512] = "", who[600];
        ssize_t r = pread(fd, text, sizeof(text) - 1, 0);
        text[r > 0 ? r : 0] = 0;
        holder_text(fd, who, sizeof(who));
        close(fd);
        int leaving = holder_leaving(text);
        double waited_s = mono_s() - start;
        if (leaving && waited_s < fs->opts.wait_writer_s) {
            /* said after a second: a short wait is as silent as any mount
             * (scripts and xfstests compare a mount's output) */
            if (!waited && waited_s >= 1.0) {
                char pid[32] = "?";
                holder_field(text, "pid", pid, sizeof(pid));
                fprintf(stderr, "squeezefs: waiting for the previous writer of %s "
                        "(pid %s) to finish its unmount (at most %d s, "
                        "-o wait_writer=)\n", fs->backing_real, pid,
                        fs->opts.wait_writer_s);
                waited = 1;
            }
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (leaving)
            snprintf(err, errlen,
                     "%s is still locked by its previous writer (%s), which "
                     "has been finishing its unmount for %.0f s (-o "
                     "wait_writer=%d); try again when that process has exited",
                     fs->backing_real, who, waited_s, fs->opts.wait_writer_s);
        else
            snprintf(err, errlen,
                     "%s is already mounted read-write (%s); a second writer "
                     "would damage its files. Unmount that mount first, or "
                     "mount this one read-only (-o ro)",
                     fs->backing_real, who);
        return -EBUSY;
    }
    if (waited)
        fprintf(stderr, "squeezefs: the previous writer of %s is gone after "
                "%.2f s\n", fs->backing_real, mono_s() - start);
    if (rc == -ENOLCK || rc == -EOPNOTSUPP || rc == -ENOSYS) {
        sqz_logf(SQZ_LOG_WARN, "squeezefs: %s cannot be locked (%s): a second "
                    "read-write mount of it would not be detected",
                 fs->backing_real, strerror(-rc));
        close(fd);
        return 0;
    }
    if (rc < 0) {
        snprintf(err, errlen, "cannot lock %s/%s: %s", fs->backing_real,
                 SQZ_WLOCK_NAME, strerror(-rc));
        close(fd);
        return rc;
    }
    fs->wlock.fd = fd;
    write_holder(fs, 0);
    return 0;
}

int sqz_writer_lock_own(struct sqz_fs *fs)
{
    if (fs->wlock.fd < 0)
        return 0;
    if (fs->wlock.posix) {
        /* POSIX locks belong to a process and are not inherited by fork:
         * the serving process takes it again (a short window in which a
         * second writer could slip in, only where OFD locks are missing) */
        int rc = set_lock(fs->wlock.fd, 0);
        if (rc < 0) {
            sqz_logf(SQZ_LOG_ERR, "squeezefs: lost the writer lock of %s: %s",
                     fs->backing_real, strerror(-rc));
            return rc;
        }
    }
    write_holder(fs, 1);
    return 0;
}

void sqz_writer_leaving(struct sqz_fs *fs)
{
    struct stat st;
    if (fs->wlock.fd < 0 || fstat(fs->wlock.fd, &st) != 0)
        return;
    static const char line[] = "leaving\n";
    if (pwrite(fs->wlock.fd, line, sizeof(line) - 1, st.st_size) !=
        (ssize_t)sizeof(line) - 1)
        sqz_logf(SQZ_LOG_WARN, "squeezefs: cannot mark %s as leaving: %s",
                 SQZ_WLOCK_NAME, strerror(errno));
}

void sqz_writer_unlock(struct sqz_fs *fs)
{
    if (fs->wlock.fd >= 0) {
        /* remove the file while still holding the lock (a waiting mount
         * re-checks the name after locking), so a clean unmount leaves
         * nothing behind; after a crash the file stays, unlocked */
        if (fs->root_dirfd >= 0) {
            struct sqz_ptimes_dir t;
            sqz_ptimes_dir_begin(NULL, fs->root_dirfd, &t);
            unlinkat(fs->root_dirfd, SQZ_WLOCK_NAME, 0);
            sqz_ptimes_dir_end(NULL, fs->root_dirfd, &t);
        }
        close(fs->wlock.fd);
    }
    fs->wlock.fd = -1;
}
