/* Regular files, the shared sqz_file of an inode: opening the container
 * (read-only view, reopened read-write by the first writer; the lookup's
 * kept container), refreshing a stale view, creating containers per the
 * policy (or PENDING for auto, materialised by the first data), closing
 * it after the last handle (or queueing it for its durable mark), the
 * user's kept times, and the policy glue. Locks: docs/LOCKING.md (io, then
 * meta). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/kind.h"
#include "node/ptimes.h"
#include "pack/packing.h"
#include "content/content.h"
#include "content/content_int.h"
#include "content/durable.h"
#include "common/lockorder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sqz_resolve(struct sqz_fs *fs, const char *relpath, sqz_resolved *out)
{
    return sqz_policy_resolve(fs->root_dirfd, relpath, fs->rules,
                              fs->rules_name, &fs->opts.spec, out);
}

int sqz_resolve_inode(struct sqz_fs *fs, struct sqz_inode *in,
                      sqz_resolved *out)
{
    char rel[PATH_MAX];
    int rc = sqz_inode_relpath(fs, in, rel, sizeof(rel));
    return rc ? rc : sqz_resolve(fs, rel, out);
}

void sqz_params_from_spec(struct sqz_fs *fs, const sqz_spec *s, sqz_params *p)
{
    memset(p, 0, sizeof(*p));
    p->alg = s->alg;
    p->level = s->level;
    p->log2bs = s->log2bs ? s->log2bs : fs->opts.spec.log2bs;
    p->min_saving = fs->opts.min_saving;
    p->auto_mode = (uint8_t)s->auto_mode;
}

/* Open the container of a file for ensure_sf and set file_key to the
 * version it is read at. A read-only open takes the container the lookup's
 * probe opened if the file is still at that version (kind.c). */
static int open_ctr(struct sqz_fs *fs, struct sqz_inode *in, int want_write,
                    sqz_ctr **out)
{
    if (!want_write) {
        struct sqz_bkey key;
        *out = sqz_inode_stash_take(in, &key);
        if (*out) {
            in->file_key = key;
            return 0;
        }
    } else {
        sqz_inode_stash_drop(in);
    }
    int mode = want_write ? SQZ_OPEN_RDWR : SQZ_OPEN_RDONLY;
    int fd = sqz_inode_reopen(in, want_write ? O_RDWR : O_RDONLY);
    if (fd < 0)
        return fd;
    /* the version this view shows: taken before the replay reads it (a
     * change after this is seen again at the next open) */
    struct stat kst;
    if (fstat(fd, &kst) == 0)
        sqz_bkey_of(&kst, &in->file_key);
    else
        memset(&in->file_key, 0, sizeof(in->file_key));
    int rc = sqz_ctr_open_fd(fd, mode, SQZ_LABEL_FROM_FD, out);
    if (rc == 0 && want_write && fs->prealloc_ok)
        sqz_ctr_allow_prealloc(*out, 1);
    if (rc == -EBADMSG) {
        char label[PATH_MAX];
        sqz_inode_label(fs, in, label, sizeof(label));
        sqz_logf(SQZ_LOG_ERR, "%s: damaged container header: %s", label, strerror(-rc));
        sqz_content_invalidate(in);
        return -EIO;
    }
    return rc;
}

/* Open the shared sqz_file of a container (caller holds io exclusive).
 * Read-only users get a read-only container, so reading never modifies
 * BACKING (no tail repair); the first writer reopens it read-write (safe:
 * a read-only sf has no dirty data, and io exclusive keeps readers out). */
int sqz_content_ensure_sf(struct sqz_fs *fs, struct sqz_inode *in, int want_write)
{
    SQZ_ASSERT_EXCL(&in->io);
    if (in->file && (in->file_rw || !want_write))
        return 0;
    if (want_write && fs->opts.ro)
        return -EROFS;
    /* closed and still waiting for its durable mark: the queued container
     * is the one writer of this file (read-write; no reopen) */
    sqz_ctr *queued = sqz_durable_take_locked(in);
    if (queued) {
        sqz_file *nsf = NULL;
        int rc = sqz_file_new(fs->engine, queued, &nsf);
        if (rc)
            return rc;
        if (in->file)
            sqz_file_close(in->file); /* a read-only view: nothing dirty */
        in->file = nsf;
        in->file_rw = 1;
        return 0;
    }
    sqz_ctr *c = NULL;
    int rc = open_ctr(fs, in, want_write, &c);
    if (rc)
        return rc;
    sqz_file *nsf = NULL;
    rc = sqz_file_new(fs->engine, c, &nsf);
    if (rc)
        return rc;
    if (in->file) {
        int rc2 = sqz_file_close(in->file);
        if (rc2) {
            char label[PATH_MAX];
            sqz_inode_label(fs, in, label, sizeof(label));
            sqz_logf(SQZ_LOG_WARN, "%s: closing the read-only view: %s",
                     label, strerror(-rc2));
        }
    }
    in->file = nsf;
    in->file_rw = want_write;
    return 0;
}

/* Close-to-open consistency: a read-only view (another mount, the one
 * writer of BACKING, may change the file) opened before the backing file
 * last changed is replaced by a fresh one at the next open, so every open
 * after a writer's close or fsync sees the new content (and the kernel's
 * cached pages are dropped: *changed). Caller holds io exclusive, which
 * keeps the readers of the old view out. */
int sqz_content_refresh_view_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                    const struct stat *bst, int *changed)
{
    SQZ_ASSERT_EXCL(&in->io);
    if (!in->file || in->file_rw)
        return 0;
    struct sqz_bkey now;
    sqz_bkey_of(bst, &now);
    if (sqz_bkey_eq(&now, &in->file_key))
        return 0;
    sqz_file *old = in->file;
    in->file = NULL;
    int rc = sqz_content_ensure_sf(fs, in, 0);
    if (rc) {
        in->file = old; /* keep serving the old view; this open fails */
        return rc;
    }
    /* unchanged blocks stay cached: re-read only what the writer changed */
    sqz_file_inherit_cache(in->file, old);
    sqz_file_close(old); /* read-only: nothing to commit */
    *changed = 1;
    return 0;
}

/* Write a fresh container into the (empty) backing file and open it as the
 * inode's sf. Caller holds io exclusive. */
static int make_container(struct sqz_fs *fs, struct sqz_inode *in,
                          const sqz_params *p)
{
    SQZ_ASSERT_EXCL(&in->io);
    char err[256] = "";
    if (sqz_params_check(p, err, sizeof(err)) != 0) {
        char label[PATH_MAX];
        sqz_inode_label(fs, in, label, sizeof(label));
        sqz_logf(SQZ_LOG_ERR, "%s: invalid compression parameters: %s", label, err);
        return -EINVAL;
    }
    int fd = in->create_fd; /* the creation's own fd, else a new one */
    in->create_fd = -1;
    if (fd < 0)
        fd = sqz_inode_reopen(in, O_RDWR);
    if (fd < 0)
        return fd;
    sqz_ctr *c = NULL;
    int rc = sqz_ctr_create_fd_lazy(fd, p, SQZ_LABEL_FROM_FD, &c);
    if (rc)
        return rc;
    if (fs->prealloc_ok)
        sqz_ctr_allow_prealloc(c, 1);
    rc = sqz_file_new(fs->engine, c, &in->file);
    if (rc) {
        in->file = NULL;
        return rc;
    }
    in->file_rw = 1;
    in->kind = SQZ_K_CONTAINER;
    sqz_content_invalidate(in);
    return 0;
}

/* Make an empty file PENDING with the resolved policy r: the container is
 * written only when the first data arrives (sqz_content_materialize_locked),
 * so an empty file stays a 0-byte backing file (no data block, no header
 * write, no fsync; a 0-byte file reads as empty whatever it was meant to
 * become). Caller holds io exclusive. */
int sqz_content_pending_locked(struct sqz_fs *fs, struct sqz_inode *in,
                               const sqz_resolved *r)
{
    SQZ_ASSERT_EXCL(&in->io);
    sqz_params p;
    sqz_params_from_spec(fs, &r->spec, &p);
    if (r->spec.auto_mode == SQZ_AUTO_NONE) {
        char err[256] = "";
        if (sqz_params_check(&p, err, sizeof(err)) != 0) {
            char label[PATH_MAX];
            sqz_inode_label(fs, in, label, sizeof(label));
            sqz_logf(SQZ_LOG_ERR, "%s: invalid compression parameters: %s",
                     label, err);
            return -EINVAL;
        }
    }
    in->pending = p;
    in->kind = SQZ_K_PENDING;
    return 0;
}

/* The same for an existing empty file, resolving its policy by its path
 * (its own xattr included). Caller holds io exclusive. */
int sqz_content_convert_empty(struct sqz_fs *fs, struct sqz_inode *in)
{
    SQZ_ASSERT_EXCL(&in->io);
    sqz_resolved r;
    int rc = sqz_resolve_inode(fs, in, &r);
    return rc ? rc : sqz_content_pending_locked(fs, in, &r);
}

/* Below this much data a trial compression says little (a first log line
 * would decide the file's algorithm forever): take zstd's default. */
#define AUTO_MIN_SAMPLE 4096

/* PENDING -> CONTAINER at the first data written (auto specs: pick the
 * algorithm from it). Caller holds io exclusive. */
int sqz_content_materialize_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                   const void *sample, size_t n)
{
    SQZ_ASSERT_EXCL(&in->io);
    sqz_params p = in->pending;
    if (p.auto_mode == SQZ_AUTO_NONE)
        return make_container(fs, in, &p);
    size_t cap = (size_t)4 << p.log2bs;
    if (n > cap)
        n = cap;
    if (sample && n >= AUTO_MIN_SAMPLE) {
        int rc = sqz_auto_choose(p.auto_mode, sample, n, p.log2bs, &p.alg,
                                 &p.level);
        if (rc)
            return rc;
    } else {
        p.alg = SQZ_ALG_ZSTD;
        p.level = sqz_level_default(SQZ_ALG_ZSTD);
    }
    return make_container(fs, in, &p);
}

void sqz_content_keep_times(struct sqz_inode *in)
{
    struct stat bst;
    if (sqz_backing_stat(in, &bst) != 0)
        return;
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    in->utimes[0] = bst.st_atim;
    in->utimes[1] = bst.st_mtim;
    in->utimes_kept = 1;
    SQZ_MUTEX_UNLOCK(&in->meta);
}

/* After the container wrote to the backing file: the times the file
 * shows are put back (ptimes.c). */
void sqz_content_restore_times(struct sqz_fs *fs, struct sqz_inode *in)
{
    sqz_ptimes_restore(fs, in);
}

/* Close the inode's sf after its last handle. A container written in this
 * mount and not yet marked durable is queued for a batched durable mark
 * (durable.c) instead of being closed: close never fsyncs. io exclusive. */
int sqz_content_close_sf(struct sqz_fs *fs, struct sqz_inode *in)
{
    SQZ_ASSERT_EXCL(&in->io);
    sqz_file *sf = in->file;
    in->file = NULL;
    if (!in->file_rw || !fs->durable)
        return sqz_file_close(sf);
    sqz_ctr *kept = NULL;
    int rc = sqz_file_close_keep(sf, &kept);
    if (!kept)
        return rc;
    /* queued also when already durable (fsync'ed) but small enough to be
     * packed: the durable thread packs it (pack_job.c) */
    if ((sqz_ctr_unmarked(kept) || sqz_pack_worth(fs, kept)) &&
        sqz_durable_defer_locked(fs, in, kept) == 0)
        return 0;
    return sqz_ctr_close(kept);
}
