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
 * that a second writer would not be detected. */
#include "fuse/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* Record the holder (pid, host, mount point, time) in the lock file. */
static void write_holder(struct sqz_fs *fs)
{
    char host[256] = "?", when[64] = "?", text[1024];
    gethostname(host, sizeof(host) - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm))
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %z", &tm);
    int len = snprintf(text, sizeof(text), "pid %d\nhost %s\nmountpoint %s\nsince %s\n",
                       (int)getpid(), host,
                       fs->mnt_real ? fs->mnt_real : "?", when);
    if (len < 0)
        return;
    if (ftruncate(fs->wlock_fd, 0) != 0 ||
        pwrite(fs->wlock_fd, text, (size_t)len, 0) != len)
        sqz_logf(SQZ_LOG_WARN, "squeezefs: cannot record the writer in %s: %s",
                 SQZ_WLOCK_NAME, strerror(errno));
}

int sqz_writer_lock(struct sqz_fs *fs, char *err, size_t errlen)
{
    fs->wlock_fd = -1;
    fs->wlock_posix = 0;
    if (fs->opts.ro)
        return 0;
    int fd, rc;
    for (int tries = 0;; tries++) {
        /* 0600: no other user may open it and lock a stale one */
        fd = openat(fs->root_dirfd, SQZ_WLOCK_NAME,
                    O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            snprintf(err, errlen, "cannot open the writer lock %s/%s: %s",
                     fs->backing_real, SQZ_WLOCK_NAME, strerror(errno));
            return -errno;
        }
        (void)fchmod(fd, 0600); /* one an older daemon left 0644 */
        rc = set_lock(fd, 1);
        if (rc == -EINVAL) { /* no OFD locks: a per-process lock, re-taken */
            rc = set_lock(fd, 0); /* after daemonize (sqz_writer_lock_own) */
            fs->wlock_posix = rc == 0;
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
    if (rc == -EAGAIN || rc == -EACCES) {
        char who[600];
        holder_text(fd, who, sizeof(who));
        close(fd);
        snprintf(err, errlen,
                 "%s is already mounted read-write (%s); a second writer "
                 "would damage its files. Unmount that mount first, or "
                 "mount this one read-only (-o ro)",
                 fs->backing_real, who);
        return -EBUSY;
    }
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
    fs->wlock_fd = fd;
    write_holder(fs);
    return 0;
}

int sqz_writer_lock_own(struct sqz_fs *fs)
{
    if (fs->wlock_fd < 0)
        return 0;
    if (fs->wlock_posix) {
        /* POSIX locks belong to a process and are not inherited by fork:
         * the serving process takes it again (a short window in which a
         * second writer could slip in, only where OFD locks are missing) */
        int rc = set_lock(fs->wlock_fd, 0);
        if (rc < 0) {
            sqz_logf(SQZ_LOG_ERR, "squeezefs: lost the writer lock of %s: %s",
                     fs->backing_real, strerror(-rc));
            return rc;
        }
    }
    write_holder(fs);
    return 0;
}

void sqz_writer_unlock(struct sqz_fs *fs)
{
    if (fs->wlock_fd >= 0) {
        /* remove the file while still holding the lock (a waiting mount
         * re-checks the name after locking), so a clean unmount leaves
         * nothing behind; after a crash the file stays, unlocked */
        if (fs->root_dirfd >= 0)
            unlinkat(fs->root_dirfd, SQZ_WLOCK_NAME, 0);
        close(fs->wlock_fd);
    }
    fs->wlock_fd = -1;
}
