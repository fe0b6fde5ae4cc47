/* Replacing a regular file's backing file crash-safely, for recompress,
 * tiering (store/replace.h) and packing (pack_job.c):
 *   1. a hidden temporary, given the original's owner, mode, user xattrs
 *      (not a pack pointer) and times: on a local BACKING in the keepers'
 *      directory (ident.c), named for its intent n.S.B.Y; else next to the
 *      original (SQZ_TMP_PREFIX<random>);
 *   2. put in the original's place: exchanged atomically with it where the
 *      file system can (RENAME_EXCHANGE; given back if another file took
 *      the name meanwhile, since a rename through the mount does not take
 *      the inode's io), else renamed over it after a check;
 *   3. on a local BACKING the replaced inode, now under the intent's name,
 *      is kept emptied and the file shows its number (ident.c), its
 *      directory its times and itself its ctime (ptimes.c); else the
 *      replaced inode is removed;
 *   4. the inode swapped over to the new file: its O_PATH fd replaced in
 *      place (same fd number) and the table re-keyed in one critical
 *      section (inode.c), an open sqz_file replaced. The kernel node id
 *      stays the same.
 * A crash before step 2 leaves the original (plus a hidden temporary);
 * after it, the new file (and the next mount finishes step 3). Callers
 * hold the inode's io exclusive for steps 2 to 4. */
#include "node/inode.h"
#include "node/ident.h"
#include "node/ptimes.h"
#include "store/leftover.h"
#include "store/replace.h"
#include "node/kind.h"
#include "common/lockorder.h"
#include "squeezefs/pack.h"
#include "squeezefs/shown.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

/* Copy the user.* xattrs of the file at path src to fd. */
static int copy_xattrs(const char *src, int fd)
{
    ssize_t n = listxattr(src, NULL, 0);
    if (n <= 0)
        return n < 0 ? -errno : 0;
    char *names = malloc((size_t)n);
    if (!names)
        return -ENOMEM;
    n = listxattr(src, names, (size_t)n);
    if (n < 0) {
        int e = -errno;
        free(names);
        return e;
    }
    int rc = 0;
    for (ssize_t i = 0; i < n && rc == 0; i += (ssize_t)strlen(names + i) + 1) {
        const char *name = names + i;
        if (strncmp(name, "user.", 5) != 0 || strcmp(name, SQZ_PACK_XATTR) == 0 ||
            strcmp(name, SQZ_SHOWN_XATTR) == 0)
            continue; /* a pack pointer belongs to the file it was set on */
        ssize_t vl = getxattr(src, name, NULL, 0);
        if (vl < 0) {
            rc = -errno;
            break;
        }
        char *v = malloc((size_t)vl + 1);
        if (!v) {
            rc = -ENOMEM;
            break;
        }
        vl = getxattr(src, name, v, (size_t)vl);
        if (vl < 0 || fsetxattr(fd, name, v, (size_t)vl, 0) != 0)
            rc = -errno;
        free(v);
    }
    free(names);
    return rc;
}

static int tdir(const struct sqz_replace_temp *t)
{
    return t->tdirfd >= 0 ? t->tdirfd : t->dirfd;
}

/* 1 unless a and b are on two mounts (a bind mount inside BACKING:
 * no rename between them). */
static int same_mount(int a, int b)
{
#ifdef STATX_MNT_ID
    struct statx sa, sb;
    if (statx(a, "", AT_EMPTY_PATH, STATX_MNT_ID, &sa) == 0 &&
        statx(b, "", AT_EMPTY_PATH, STATX_MNT_ID, &sb) == 0 &&
        (sa.stx_mask & sb.stx_mask & STATX_MNT_ID))
        return sa.stx_mnt_id == sb.stx_mnt_id;
#else
    (void)a;
    (void)b;
#endif
    return 1;
}

/* The keepers' directory for in (ident.c), made if missing with
 * BACKING's times put back: an fd (borrowed) or -errno (no keeping). */
static int keep_dir(struct sqz_fs *fs, struct sqz_inode *in)
{
    int kfd = sqz_ident_dirfd(fs, in->dev, 0);
    if (kfd != -ENOENT)
        return kfd;
    struct sqz_ptimes_dir pt;
    sqz_ptimes_dir_try_begin(fs, fs->root_dirfd, &pt);
    kfd = sqz_ident_dirfd(fs, in->dev, 1);
    sqz_ptimes_dir_end(fs, fs->root_dirfd, &pt);
    return kfd;
}

int sqz_replace_temp_create(struct sqz_fs *fs, struct sqz_inode *in,
                       const struct stat *bst, struct sqz_replace_temp *t)
{
    t->dirfd = -1;
    t->tdirfd = -1;
    t->made = 0;
    t->tmp[0] = '\0';
    int dfd = sqz_inode_dirfd(fs, in, t->base, sizeof(t->base));
    if (dfd < 0)
        return dfd;
    t->dirfd = dfd;
    struct stat cur;
    if (fstatat(t->dirfd, t->base, &cur, AT_SYMLINK_NOFOLLOW) != 0 ||
        cur.st_ino != bst->st_ino || cur.st_dev != bst->st_dev)
        return -EBUSY; /* renamed meanwhile */
    int kfd = keep_dir(fs, in);
    if (kfd >= 0 && same_mount(kfd, t->dirfd))
        t->tdirfd = kfd;
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)getpid() ^ (uint64_t)(uintptr_t)in;
    snprintf(t->tmp, sizeof(t->tmp), SQZ_TMP_PREFIX "%016llx", (unsigned long long)rnd);
    sqz_tmp_live_begin(t->tmp); /* not a leftover (leftover.c) */
    int tfd = openat(tdir(t), t->tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     0600);
    if (tfd < 0)
        return -errno;
    t->made = 1;
    if (t->tdirfd >= 0) {
        char intent[sizeof(t->tmp)];
        int rc = sqz_ident_intent(fs, tfd, t->tmp, bst->st_ino, intent, sizeof(intent));
        if (rc) {
            close(tfd);
            return rc;
        }
        sqz_tmp_live_end(t->tmp);
        snprintf(t->tmp, sizeof(t->tmp), "%s", intent);
        sqz_tmp_live_begin(t->tmp);
    }
    return tfd;
}

void sqz_replace_temp_discard(struct sqz_replace_temp *t)
{
    if (t->made)
        unlinkat(tdir(t), t->tmp, 0);
    t->made = 0;
    sqz_tmp_live_end(t->tmp);
    t->tmp[0] = '\0';
    if (t->dirfd >= 0)
        close(t->dirfd);
    t->dirfd = -1;
    t->tdirfd = -1; /* (borrowed) */
}

int sqz_replace_temp_meta(struct sqz_inode *in, const struct stat *bst, int cfd)
{
    int rc = sqz_replace_temp_meta_nosync(in, bst, cfd);
    if (rc == 0 && fsync(cfd) != 0)
        rc = -errno;
    return rc;
}

int sqz_replace_temp_meta_nosync(struct sqz_inode *in, const struct stat *bst,
                            int cfd)
{
    char pp[64];
    if (fchown(cfd, bst->st_uid, bst->st_gid) != 0 ||
        fchmod(cfd, bst->st_mode & 07777) != 0)
        return -errno;
    int ifd = sqz_ifd_get(in);
    if (ifd < 0)
        return ifd;
    sqz_proc_path(ifd, pp, sizeof(pp));
    int rc = copy_xattrs(pp, cfd);
    sqz_ifd_put(in);
    if (rc)
        return rc;
    struct timespec times[2] = {bst->st_atim, bst->st_mtim};
    if (futimens(cfd, times) != 0)
        return -errno;
    return 0;
}

/* Put the temporary in place of the original (checked to be at its name
 * just before). Exchanged atomically where the file system can, and
 * undone if another file took the name in the meantime (a rename through
 * the mount does not take io): that file keeps its name. A plain rename
 * elsewhere. 0 or -errno (-ESTALE: the name holds another file now).
 * *kept: the temporary's name holds the replaced file, to be kept
 * (ident.c; a temporary in the keepers' directory). */
static int replace_original(struct sqz_replace_temp *t, const struct sqz_inode *in,
                            const char *label, int flags, int *kept)
{
    *kept = 0;
    if (renameat2(tdir(t), t->tmp, t->dirfd, t->base, RENAME_EXCHANGE) != 0) {
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP &&
            errno != EOPNOTSUPP)
            return -errno;
        if (flags & SQZ_REPLACE_NEED_EXCHANGE)
            return -EOPNOTSUPP;
        if (renameat(tdir(t), t->tmp, t->dirfd, t->base) != 0)
            return -errno;
        t->made = 0;
        return 0;
    }
    /* the temporary's name now holds what the original's name held */
    struct stat was;
    if (fstatat(tdir(t), t->tmp, &was, AT_SYMLINK_NOFOLLOW) == 0 &&
        was.st_ino == in->ino && was.st_dev == in->dev) {
        t->made = 0;
        if (t->tdirfd >= 0)
            *kept = 1;
        else if (unlinkat(t->dirfd, t->tmp, 0) != 0)
            sqz_logf(SQZ_LOG_WARN, "%s: the replaced file stays as the hidden %s: %s",
                     label, t->tmp, strerror(errno));
        return 0;
    }
    if (renameat2(tdir(t), t->tmp, t->dirfd, t->base, RENAME_EXCHANGE) != 0) {
        sqz_logf(SQZ_LOG_ERR, "%s: cannot give the name back to the file that took it "
                 "meanwhile (hidden as %s): %s", label, t->tmp, strerror(errno));
        t->made = 0; /* that file must not be removed as the temporary */
        sqz_tmp_live_begin(t->tmp); /* nor as a leftover (leftover.c) */
    }
    return -ESTALE;
}

int sqz_replace_locked(struct sqz_fs *fs, struct sqz_inode *in,
                             struct sqz_replace_temp *t, sqz_file *nsf,
                             int flags)
{
    SQZ_ASSERT_EXCL(&in->io);
    char label[PATH_MAX];
    sqz_inode_label(fs, in, label, sizeof(label));
    int rc = 0;
    /* The new file's O_PATH fd, taken by the temporary's name: after the
     * rename, its name may already hold another file. */
    int npfd = openat(tdir(t), t->tmp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat nst;
    if (npfd < 0 || fstatat(npfd, "", &nst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
        rc = -errno;
        if (npfd >= 0)
            close(npfd);
        sqz_file_close(nsf);
        return rc;
    }
    /* the original must still be there under its name (a rename or unlink
     * through the mount does not take io) */
    struct stat cur;
    struct sqz_ptimes_dir pt = {.ok = 0};
    struct sqz_swap_pend pend = {.in = NULL};
    struct timespec shown = {0, 0};
    uint64_t gen = sqz_ptimes_begin(in);
    int kept = 0;
    if (fstatat(t->dirfd, t->base, &cur, AT_SYMLINK_NOFOLLOW) != 0 ||
        cur.st_ino != in->ino || cur.st_dev != in->dev) {
        rc = -ESTALE;
    } else if (cur.st_nlink > 1) { /* linked meanwhile: renaming would split them */
        rc = -EMLINK;
    } else {
        shown = sqz_ptimes_shown(fs, in, &cur); /* the ctime it shows */
        if (t->tdirfd >= 0) /* only the exchange changes the directory */
            sqz_ptimes_dir_try_begin(fs, t->dirfd, &pt);
        sqz_inode_swap_begin(fs, in, &pend, nst.st_dev, nst.st_ino);
        rc = replace_original(t, in, label, flags, &kept);
    }
    if (rc) {
        sqz_inode_swap_end(fs, &pend); /* (nothing if not begun) */
        sqz_ptimes_dir_end(fs, t->dirfd, &pt); /* (nothing if not begun) */
        close(npfd);
        sqz_file_close(nsf);
        return rc;
    }
    if ((flags & SQZ_REPLACE_SYNC_DIR) && fsync(t->dirfd) != 0)
        sqz_logf(SQZ_LOG_WARN, "%s: replacing: fsync of the directory failed: %s", label,
                 strerror(errno));
    if (t->tdirfd >= 0)
        sqz_ptimes_dir_end(fs, t->dirfd, &pt);
    if (kept) /* before the swap: stat shows the kept number at once */
        sqz_ident_exchanged(fs, t->tmp);

    /* Swap the inode over to the new backing file. */
    rc = sqz_inode_swap(fs, in, npfd, nst.st_dev, nst.st_ino);
    sqz_inode_swap_end(fs, &pend);
    close(npfd);
    if (rc) {
        sqz_logf(SQZ_LOG_ERR, "%s: replacing: cannot swap to the new file: %s", label,
                 strerror(-rc));
        sqz_file_close(nsf);
        return rc;
    }
    sqz_inode_changed(in);
    if (in->file) {
        sqz_file *old = in->file;
        in->file = nsf;
        in->file_rw = 1;
        int rc2 = sqz_file_close(old);
        if (rc2)
            sqz_logf(SQZ_LOG_WARN, "%s: replacing: closing the old file: %s", label,
                     strerror(-rc2));
    } else if (nsf) {
        rc = sqz_file_close(nsf);
    }
    if (kept) /* the new backing file's ctime moved: the old one shows */
        sqz_ptimes_keep(fs, in, -1, &shown, gen);
    in->kind = sqz_content_handles_open(in) ? SQZ_K_CONTAINER : SQZ_K_UNKNOWN;
    sqz_content_invalidate(in);
    return rc;
}
