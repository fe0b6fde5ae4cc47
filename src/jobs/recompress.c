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
 * Steps 1 (the temporary, its metadata) and 2-3 (rename, swap) are in
 * replace.c, shared with tiering (tier_job.c), which writes the data
 * without holding io, and packing (pack_job.c). */
#include "jobs/recompress.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/kind.h"
#include "store/replace.h"
#include "content/content.h"
#include "content/durable.h"
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

int sqz_recompress_install_locked(struct sqz_fs *fs, struct sqz_inode *in,
                          struct sqz_replace_temp *t, sqz_file *nsf)
{
    ino_t before = in->ino;
    int rc = sqz_replace_locked(fs, in, t, nsf, SQZ_REPLACE_SYNC_DIR);
    if (in->ino != before) {
        /* a container of the replaced file still waiting for its durable
         * mark: that file is gone from the tree (the new one was synced) */
        sqz_ctr *queued = sqz_durable_take_locked(in);
        if (queued)
            sqz_ctr_close(queued);
    }
    return rc;
}

/* io exclusive: the content to rewrite, as src (the open sqz_file
 * flushed, a read-only container, or a plain file's fd) and its length;
 * a packed file is unpacked first, a PENDING one made a container. 0 or
 * -errno: -EMLINK (hard links), -EBUSY (open as a plain file), -EIO
 * (damaged). */
static int open_source(struct sqz_fs *fs, struct sqz_inode *in,
                       const char *label, struct stat *bst,
                       struct source *src, uint64_t *len)
{
    int rc = sqz_backing_stat(in, bst);
    if (rc)
        return rc;
    if (bst->st_nlink > 1)
        return -EMLINK;
    if (in->plain_users > 0)
        return -EBUSY;
    enum sqz_kind kind;
    rc = sqz_content_kind_locked(fs, in, bst, &kind, len);
    if (rc)
        return rc;
    if (kind == SQZ_K_DAMAGED)
        return -EIO;
    if (kind == SQZ_K_PACKED) { /* the source is a container again */
        rc = sqz_content_unpack_locked(fs, in);
        if (rc == 0)
            rc = sqz_backing_stat(in, bst);
        if (rc == 0)
            rc = sqz_content_kind_locked(fs, in, bst, &kind, len);
        if (rc == 0 && kind != SQZ_K_CONTAINER)
            rc = -EIO;
        if (rc)
            return rc;
    }
    if (kind == SQZ_K_PENDING) {
        rc = sqz_content_materialize_locked(fs, in, NULL, 0);
        if (rc)
            return rc;
        kind = SQZ_K_CONTAINER;
        *len = 0;
    }
    if (kind == SQZ_K_CONTAINER && in->file) {
        rc = sqz_file_flush(in->file);
        if (rc)
            return rc;
        src->sf = in->file;
        *len = sqz_file_length(in->file);
        return 0;
    }
    int fd = sqz_inode_reopen(in, O_RDONLY | O_NOATIME);
    if (fd < 0)
        return fd;
    if (kind == SQZ_K_CONTAINER) {
        rc = sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, label, &src->ctr);
        if (rc)
            return rc;
        *len = sqz_ctr_length(src->ctr);
    } else {
        src->plain_fd = fd;
        *len = (uint64_t)bst->st_size;
    }
    return 0;
}

/* The new container's params from spec: without a block size the file's
 * (a plain file: its policy's); auto: chosen by trial on the source. */
static int target_params(struct sqz_fs *fs, struct sqz_inode *in,
                         const sqz_spec *spec, struct source *src,
                         uint64_t len, sqz_params *p)
{
    sqz_params_from_spec(fs, spec, p);
    if (spec->log2bs == 0) {
        const sqz_ctr *cur = src->sf ? sqz_file_ctr(src->sf) : src->ctr;
        if (cur) {
            p->log2bs = sqz_ctr_params(cur)->log2bs;
        } else {
            char rel[PATH_MAX];
            sqz_resolved r;
            int rc = sqz_inode_relpath(fs, in, rel, sizeof(rel));
            if (rc == 0)
                rc = sqz_resolve(fs, rel, &r);
            if (rc)
                return rc;
            p->log2bs = r.spec.log2bs;
        }
    }
    char err[256] = "";
    if (spec->auto_mode == SQZ_AUTO_NONE &&
        sqz_params_check(p, err, sizeof(err)) != 0)
        return -EINVAL;
    if (spec->auto_mode != SQZ_AUTO_NONE)
        return choose_auto(src, p, len);
    return 0;
}

/* The temporary (t) made, written from src under p, synced, given the
 * original's metadata: *nsf its open engine file. */
static int write_temp(struct sqz_fs *fs, struct sqz_inode *in,
                      const char *label, const struct stat *bst,
                      const sqz_params *p, struct source *src, uint64_t len,
                      struct sqz_replace_temp *t, sqz_file **nsf)
{
    int tfd = sqz_replace_temp_create(fs, in, bst, t);
    if (tfd < 0)
        return tfd;
    sqz_ctr *nc = NULL;
    int rc = sqz_ctr_create_fd(tfd, p, label, &nc);
    if (rc)
        return rc;
    rc = sqz_file_new(fs->engine, nc, nsf);
    if (rc) {
        *nsf = NULL;
        return rc;
    }
    rc = copy_data(src, *nsf, len, (size_t)1 << 20);
    if (rc == 0)
        rc = sqz_file_fsync(*nsf, 0);
    if (rc == 0)
        rc = sqz_replace_temp_meta(in, bst, sqz_ctr_fd(sqz_file_ctr(*nsf)));
    return rc;
}

int sqz_recompress(struct sqz_fs *fs, struct sqz_inode *in,
                   const sqz_spec *spec)
{
    if (in->type != S_IFREG)
        return -EINVAL;
    char label[PATH_MAX];
    sqz_inode_label(fs, in, label, sizeof(label));
    struct source src = {.sf = NULL, .ctr = NULL, .plain_fd = -1};
    sqz_file *nsf = NULL;
    struct sqz_replace_temp t = {.dirfd = -1};
    struct stat bst;
    uint64_t len = 0;
    sqz_params p;

    SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
    int rc = open_source(fs, in, label, &bst, &src, &len);
    if (rc == 0)
        rc = target_params(fs, in, spec, &src, len, &p);
    if (rc == 0)
        rc = write_temp(fs, in, label, &bst, &p, &src, len, &t, &nsf);
    if (rc == 0) {
        if (src.sf == in->file)
            src.sf = NULL; /* closed by the install */
        rc = sqz_recompress_install_locked(fs, in, &t, nsf);
        nsf = NULL;
        if (rc == 0)
            sqz_logf(SQZ_LOG_INFO, "%s: recompressed", label);
    }
    if (nsf)
        sqz_file_close(nsf);
    sqz_replace_temp_discard(&t);
    if (src.ctr)
        sqz_ctr_close(src.ctr);
    if (src.plain_fd >= 0)
        close(src.plain_fd);
    SQZ_RWUNLOCK(&in->io);
    return rc;
}
