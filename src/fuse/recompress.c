/* user.squeezefs.recompress: rewrite a regular file under another policy,
 * crash-safely:
 *   1. write a new container to SQZ_TMP_PREFIX<random> in the same backing
 *      directory (hidden from the mount), copy owner/mode/user xattrs,
 *      fsync it;
 *   2. renameat over the original, fsync the directory;
 *   3. swap the inode over to the new backing file: its O_PATH fd is
 *      replaced in place with dup3 (same fd number), the inode table is
 *      re-keyed to the new (dev, ino), and an open sqz_file is replaced by
 *      the new one. The kernel node id stays the same.
 * A crash before step 2 leaves the original untouched (plus a hidden
 * temporary); after it, the new file is complete and durable.
 * Runs with the inode's io lock held exclusive. Refused (EMLINK) for files
 * with several hard links (renaming would split them) and (EBUSY) while
 * the file is open as a plain passthrough file.
 * Steps 1 (the temporary, its metadata) and 2-3 (rename, swap) are shared
 * with tiering (tier_job.c), which writes the data without holding io
 * (recompress_int.h). */
#include "fuse/fs.h"
#include "fuse/recompress_int.h"
#include "common/lockorder.h"
#include "common/fullio.h"
#include "squeezefs/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/xattr.h>
#include <unistd.h>

/* Source of the data being rewritten. */
struct source {
    sqz_file *sf;   /* the inode's open sqz_file, or */
    sqz_ctr *ctr;   /* a temporary read-only container, or */
    int plain_fd;   /* a plain file */
};

static ssize_t src_read(struct source *s, void *buf, size_t n, uint64_t off)
{
    if (s->sf)
        return sqz_file_read(s->sf, buf, n, off);
    if (s->ctr)
        return sqz_ctr_pread(s->ctr, buf, n, off);
    return sqz_pread_full(s->plain_fd, buf, n, off);
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

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
        if (strncmp(name, "user.", 5) != 0 || strcmp(name, SQZ_PACK_XATTR) == 0)
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

static int choose_auto(struct source *s, sqz_params *p, uint64_t len)
{
    size_t n = (size_t)4 << p->log2bs;
    if (len < n)
        n = (size_t)len;
    if (n == 0) {
        p->alg = SQZ_ALG_ZSTD;
        p->level = sqz_level_default(SQZ_ALG_ZSTD);
        return 0;
    }
    void *buf = malloc(n);
    if (!buf)
        return -ENOMEM;
    ssize_t r = src_read(s, buf, n, 0);
    int rc = r < 0 ? (int)r
                   : sqz_auto_choose(p->auto_mode, buf, (size_t)r, p->log2bs,
                                     &p->alg, &p->level);
    free(buf);
    return rc;
}

/* Write the whole source into the new sqz_file. */
static int copy_data(struct source *s, sqz_file *dst, uint64_t len,
                     size_t chunk)
{
    unsigned char *buf = malloc(chunk);
    if (!buf)
        return -ENOMEM;
    int rc = sqz_file_truncate(dst, len);
    for (uint64_t off = 0; rc == 0 && off < len;) {
        size_t want = len - off < chunk ? (size_t)(len - off) : chunk;
        ssize_t r = src_read(s, buf, want, off);
        if (r < 0) {
            rc = (int)r;
            break;
        }
        if ((size_t)r != want) {
            rc = -EIO; /* source shrank under us */
            break;
        }
        if (!all_zero(buf, want)) {
            ssize_t w = sqz_file_write(dst, buf, want, off);
            if (w < 0)
                rc = (int)w;
            else if ((size_t)w != want)
                rc = -EIO;
        }
        off += want;
    }
    free(buf);
    return rc;
}

static int split_path(const char *abs, char *dir, size_t dn, char *base,
                      size_t bn)
{
    const char *slash = strrchr(abs, '/');
    if (!slash || !slash[1])
        return -EINVAL;
    size_t dl = (size_t)(slash - abs);
    if (dl == 0)
        dl = 1;
    if (dl >= dn || strlen(slash + 1) >= bn)
        return -ENAMETOOLONG;
    memcpy(dir, abs, dl);
    dir[dl] = '\0';
    strcpy(base, slash + 1);
    return 0;
}

int sqz_rc_temp_create(struct sqz_inode *in, const struct stat *bst,
                       struct sqz_rc_temp *t)
{
    t->dirfd = -1;
    t->made = 0;
    t->tmp[0] = '\0';
    char abs[PATH_MAX + 16], dir[PATH_MAX];
    int rc = sqz_inode_abspath(in, abs, sizeof(abs));
    if (rc == 0)
        rc = split_path(abs, dir, sizeof(dir), t->base, sizeof(t->base));
    if (rc)
        return rc;
    t->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (t->dirfd < 0)
        return -errno;
    struct stat cur;
    if (fstatat(t->dirfd, t->base, &cur, AT_SYMLINK_NOFOLLOW) != 0 ||
        cur.st_ino != bst->st_ino || cur.st_dev != bst->st_dev)
        return -EBUSY; /* renamed meanwhile */
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)getpid() ^ (uint64_t)(uintptr_t)in;
    snprintf(t->tmp, sizeof(t->tmp), SQZ_TMP_PREFIX "%016llx", (unsigned long long)rnd);
    int tfd = openat(t->dirfd, t->tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     0600);
    if (tfd < 0)
        return -errno;
    t->made = 1;
    return tfd;
}

void sqz_rc_temp_discard(struct sqz_rc_temp *t)
{
    if (t->made)
        unlinkat(t->dirfd, t->tmp, 0);
    t->made = 0;
    if (t->dirfd >= 0)
        close(t->dirfd);
    t->dirfd = -1;
}

int sqz_rc_temp_meta(struct sqz_inode *in, const struct stat *bst, int cfd)
{
    int rc = sqz_rc_temp_meta_nosync(in, bst, cfd);
    if (rc == 0 && fsync(cfd) != 0)
        rc = -errno;
    return rc;
}

int sqz_rc_temp_meta_nosync(struct sqz_inode *in, const struct stat *bst,
                            int cfd)
{
    char pp[64];
    sqz_proc_path(in->fd, pp, sizeof(pp));
    if (fchown(cfd, bst->st_uid, bst->st_gid) != 0 ||
        fchmod(cfd, bst->st_mode & 07777) != 0)
        return -errno;
    int rc = copy_xattrs(pp, cfd);
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
 * elsewhere. 0 or -errno (-ESTALE: the name holds another file now). */
static int replace_original(struct sqz_rc_temp *t, const struct sqz_inode *in,
                            const char *label)
{
    if (renameat2(t->dirfd, t->tmp, t->dirfd, t->base, RENAME_EXCHANGE) != 0) {
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP &&
            errno != EOPNOTSUPP)
            return -errno;
        if (renameat(t->dirfd, t->tmp, t->dirfd, t->base) != 0)
            return -errno;
        t->made = 0;
        return 0;
    }
    /* the temporary's name now holds what the original's name held */
    struct stat was;
    if (fstatat(t->dirfd, t->tmp, &was, AT_SYMLINK_NOFOLLOW) == 0 &&
        was.st_ino == in->ino && was.st_dev == in->dev) {
        if (unlinkat(t->dirfd, t->tmp, 0) != 0)
            sqz_logf(SQZ_LOG_WARN, "%s: the replaced file stays as the hidden %s: %s",
                     label, t->tmp, strerror(errno));
        t->made = 0;
        return 0;
    }
    if (renameat2(t->dirfd, t->tmp, t->dirfd, t->base, RENAME_EXCHANGE) != 0) {
        sqz_logf(SQZ_LOG_ERR, "%s: cannot give the name back to the file that took it "
                 "meanwhile (hidden as %s): %s", label, t->tmp, strerror(errno));
        t->made = 0; /* that file must not be removed as the temporary */
    }
    return -ESTALE;
}

int sqz_rc_install_locked(struct sqz_fs *fs, struct sqz_inode *in,
                          struct sqz_rc_temp *t, sqz_file *nsf)
{
    return sqz_rc_install_ex_locked(fs, in, t, nsf, 1);
}

int sqz_rc_install_ex_locked(struct sqz_fs *fs, struct sqz_inode *in,
                             struct sqz_rc_temp *t, sqz_file *nsf,
                             int sync_dir)
{
    SQZ_ASSERT_EXCL(&in->io);
    char label[PATH_MAX];
    sqz_inode_label(fs, in, label, sizeof(label));
    int rc = 0;
    /* The new file's O_PATH fd, taken by the temporary's name: after the
     * rename, its name may already hold another file. */
    int npfd = openat(t->dirfd, t->tmp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
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
    if (fstatat(t->dirfd, t->base, &cur, AT_SYMLINK_NOFOLLOW) != 0 ||
        cur.st_ino != in->ino || cur.st_dev != in->dev)
        rc = -ESTALE;
    else if (cur.st_nlink > 1) /* linked meanwhile: renaming would split them */
        rc = -EMLINK;
    else
        rc = replace_original(t, in, label);
    if (rc) {
        close(npfd);
        sqz_file_close(nsf);
        return rc;
    }
    if (sync_dir && fsync(t->dirfd) != 0)
        sqz_logf(SQZ_LOG_WARN, "%s: recompress: fsync of the directory failed: %s", label,
                 strerror(errno));

    /* Swap the inode over to the new backing file. */
    rc = sqz_inode_swap(fs, in, npfd, nst.st_dev, nst.st_ino);
    close(npfd);
    if (rc) {
        sqz_logf(SQZ_LOG_ERR, "%s: recompress: cannot swap to the new file: %s", label,
                 strerror(-rc));
        sqz_file_close(nsf);
        return rc;
    }
    sqz_inode_changed(in);
    /* a container of the replaced file still waiting for its durable mark:
     * that file is gone from the tree (the new one was synced) */
    sqz_ctr *queued = sqz_durable_take_locked(in);
    if (queued)
        sqz_ctr_close(queued);
    if (in->sf) {
        sqz_file *old = in->sf;
        in->sf = nsf;
        in->sf_rw = 1;
        int rc2 = sqz_file_close(old);
        if (rc2)
            sqz_logf(SQZ_LOG_WARN, "%s: recompress: closing the old file: %s", label,
                     strerror(-rc2));
    } else if (nsf) {
        rc = sqz_file_close(nsf);
    }
    in->kind = sqz_content_handles_open(in) ? SQZ_K_CONTAINER : SQZ_K_UNKNOWN;
    sqz_content_invalidate(in);
    return rc;
}

int sqz_recompress(struct sqz_fs *fs, struct sqz_inode *in,
                   const sqz_spec *spec)
{
    if (in->type != S_IFREG)
        return -EINVAL;
    sqz_params p;
    sqz_params_from_spec(fs, spec, &p);
    char err[256] = "";

    char label[PATH_MAX];
    sqz_inode_label(fs, in, label, sizeof(label));
    int rc;
    struct source src = {.sf = NULL, .ctr = NULL, .plain_fd = -1};
    sqz_file *nsf = NULL;
    struct sqz_rc_temp t = {.dirfd = -1};

    SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
    struct stat bst;
    rc = sqz_backing_stat(in, &bst);
    if (rc)
        goto out;
    if (bst.st_nlink > 1) {
        rc = -EMLINK;
        goto out;
    }
    if (in->plain_users > 0) {
        rc = -EBUSY;
        goto out;
    }
    enum sqz_kind kind;
    uint64_t len;
    rc = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
    if (rc)
        goto out;
    if (kind == SQZ_K_DAMAGED) {
        rc = -EIO;
        goto out;
    }
    if (kind == SQZ_K_PACKED) { /* the source is a container again */
        rc = sqz_content_unpack_locked(fs, in);
        if (rc == 0)
            rc = sqz_backing_stat(in, &bst);
        if (rc == 0)
            rc = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
        if (rc == 0 && kind != SQZ_K_CONTAINER)
            rc = -EIO;
        if (rc)
            goto out;
    }
    if (kind == SQZ_K_PENDING) {
        rc = sqz_content_materialize_locked(fs, in, NULL, 0);
        if (rc)
            goto out;
        kind = SQZ_K_CONTAINER;
        len = 0;
    }
    /* The source. */
    if (kind == SQZ_K_CONTAINER && in->sf) {
        rc = sqz_file_flush(in->sf);
        if (rc)
            goto out;
        src.sf = in->sf;
        len = sqz_file_length(in->sf);
    } else {
        int fd = sqz_inode_reopen(in, O_RDONLY);
        if (fd < 0) {
            rc = fd;
            goto out;
        }
        if (kind == SQZ_K_CONTAINER) {
            rc = sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, label, &src.ctr);
            if (rc)
                goto out;
            len = sqz_ctr_length(src.ctr);
        } else {
            src.plain_fd = fd;
            len = (uint64_t)bst.st_size;
        }
    }
    if (spec->log2bs == 0) {
        /* No block size given: keep the file's (plain: the policy's). */
        const sqz_ctr *cur = src.sf ? sqz_file_ctr(src.sf) : src.ctr;
        if (cur) {
            p.log2bs = sqz_ctr_params(cur)->log2bs;
        } else {
            char rel[PATH_MAX];
            sqz_resolved r;
            rc = sqz_inode_relpath(fs, in, rel, sizeof(rel));
            if (rc == 0)
                rc = sqz_resolve(fs, rel, &r);
            if (rc)
                goto out;
            p.log2bs = r.spec.log2bs;
        }
    }
    if (spec->auto_mode == SQZ_AUTO_NONE &&
        sqz_params_check(&p, err, sizeof(err)) != 0) {
        rc = -EINVAL;
        goto out;
    }
    if (spec->auto_mode != SQZ_AUTO_NONE) {
        rc = choose_auto(&src, &p, len);
        if (rc)
            goto out;
    }

    /* The temporary next to the original. */
    int tfd = sqz_rc_temp_create(in, &bst, &t);
    if (tfd < 0) {
        rc = tfd;
        goto out;
    }
    sqz_ctr *nc = NULL;
    rc = sqz_ctr_create_fd(tfd, &p, label, &nc);
    if (rc)
        goto out;
    rc = sqz_file_new(fs->engine, nc, &nsf);
    if (rc) {
        nsf = NULL;
        goto out;
    }
    rc = copy_data(&src, nsf, len, (size_t)1 << 20);
    if (rc == 0)
        rc = sqz_file_fsync(nsf, 0);
    if (rc == 0)
        rc = sqz_rc_temp_meta(in, &bst, sqz_ctr_fd(sqz_file_ctr(nsf)));
    if (rc)
        goto out;
    if (src.sf == in->sf)
        src.sf = NULL; /* closed by the install */
    rc = sqz_rc_install_locked(fs, in, &t, nsf);
    nsf = NULL;
    if (rc == 0)
        sqz_logf(SQZ_LOG_INFO, "%s: recompressed", label);

out:
    if (nsf)
        sqz_file_close(nsf);
    sqz_rc_temp_discard(&t);
    if (src.ctr)
        sqz_ctr_close(src.ctr);
    if (src.plain_fd >= 0)
        close(src.plain_fd);
    SQZ_RWUNLOCK(&in->io);
    return rc;
}
