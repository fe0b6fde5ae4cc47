/* The atime shown through the mount (docs/FORMAT.md "Shown times"): the
 * kernel leaves a FUSE file's atime to the daemon, and reads served from
 * its page cache never reach it, so an open for reading moves it, as the
 * mount's atime option says; the ctime the file showed stays (ptimes.c). */
#include "node/ptimes.h"
#include "daemon/fs.h"
#include "daemon/mountinfo.h"
#include "node/inode.h"
#include "common/lockorder.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>

enum { ATIME_RELATIME = 1, ATIME_NOATIME, ATIME_STRICT };

/* The mount's atime option, read at most once a second (a remount may
 * change it). */
static int atime_mode(struct sqz_fs *fs)
{
    struct timespec m;
    clock_gettime(CLOCK_MONOTONIC, &m);
    int64_t t = (int64_t)m.tv_sec * 1000000000LL + m.tv_nsec;
    int64_t seen = atomic_load(&fs->times.atime_seen_ns);
    if (seen == 0 || t - seen > 1000000000LL) {
        unsigned long f = fs->mnt_real ? sqz_mount_flags_of(fs->mnt_real) : 0;
        int mode = !f ? 0 : (f & MS_NOATIME) ? ATIME_NOATIME
                 : (f & MS_STRICTATIME) ? ATIME_STRICT : ATIME_RELATIME;
        atomic_store(&fs->times.atime_mode, mode ? mode : ATIME_RELATIME);
        atomic_store(&fs->times.atime_seen_ns, t);
    }
    return atomic_load(&fs->times.atime_mode);
}

static int ts_lt(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec ||
           (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* The backing file changed from version old to cur by the daemon's own
 * bookkeeping (its content did not): the views and caches keyed by old
 * stay valid (io exclusive). */
static void rekey_locked(struct sqz_inode *in, const struct stat *old,
                         const struct stat *cur)
{
    SQZ_ASSERT_EXCL(&in->io);
    struct sqz_bkey o, c;
    sqz_bkey_of(old, &o);
    sqz_bkey_of(cur, &c);
    if (in->file && !in->file_rw && sqz_bkey_eq(&in->file_key, &o))
        in->file_key = c;
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    if (in->probe.valid && sqz_bkey_eq(&in->probe.key, &o))
        in->probe.key = c;
    if (in->keep_cache.valid && sqz_bkey_eq(&in->keep_cache.key, &o))
        in->keep_cache.key = c;
    if (in->stash && sqz_bkey_eq(&in->stash_key, &o))
        in->stash_key = c;
    SQZ_MUTEX_UNLOCK(&in->meta);
}

int sqz_ptimes_atime_open_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                 const struct stat *seen)
{
    SQZ_ASSERT_EXCL(&in->io);
    if (fs->opts.ro || in->type != S_IFREG)
        return 0;
    int mode = atime_mode(fs);
    if (mode == ATIME_NOATIME)
        return 0;
    struct stat bst;
    int moved = 0;
    if (seen)
        bst = *seen;
    else if (sqz_backing_stat(in, &bst) != 0)
        goto out;
    struct stat st = bst;
    sqz_ptimes_apply(fs, in, &st);
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    if (fs->opts.writeback && in->times.kernel_set) {
        st.st_mtim = in->times.kmtime;
        st.st_ctim = in->times.kctime;
    }
    SQZ_MUTEX_UNLOCK(&in->meta);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (mode == ATIME_RELATIME && ts_lt(&st.st_mtim, &st.st_atim) &&
        ts_lt(&st.st_ctim, &st.st_atim) &&
        now.tv_sec - st.st_atim.tv_sec < 24 * 3600)
        goto out;
    uint64_t gen = sqz_ptimes_begin(in);
    struct timespec tv[2] = {{.tv_nsec = UTIME_NOW}, {.tv_nsec = UTIME_OMIT}};
    char pp[64];
    int ifd = sqz_ifd_get(in);
    if (ifd < 0)
        goto out;
    sqz_proc_path(ifd, pp, sizeof(pp));
    /* meta across it: times kept to be put back after the next commit
     * (utimes_kept) get this atime too */
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    struct stat after;
    int ok = utimensat(AT_FDCWD, pp, tv, 0) == 0;
    sqz_ifd_put(in);
    if (ok && in->utimes_kept && sqz_backing_stat(in, &after) == 0)
        in->utimes[0] = after.st_atim;
    SQZ_MUTEX_UNLOCK(&in->meta);
    if (!ok)
        goto out;
    moved = 1;
    /* the atime is no change of the file: the ctime it showed stays, and so
     * do the views and caches of its content */
    struct stat cur;
    if (sqz_ptimes_keep_st(fs, in, -1, &st.st_ctim, gen, &bst, &cur) == 0 ||
        sqz_backing_stat(in, &cur) == 0)
        rekey_locked(in, &bst, &cur);
out:
    return moved;
}
