/* Packing small closed files (docs/FORMAT.md "Packed files"), run by the
 * durable thread (durable.c) right after a batch got its durable marks:
 *
 *   0. after its durable mark, a closed container of one block of at
 *      most SQZ_PACK_MAX_LENGTH bytes is noted (an open reference keeps
 *      the inode); the notes are packed at a quiet moment: a batch of the
 *      durable thread that was not started by a full queue (a stream of
 *      closes, e.g. `cp -r`, is not slowed down), fs->pack_pending_max
 *      notes (then only down below it), or the unmount; oldest first, in
 *      slices of SQZ_PACK_SLICE between which the durable thread serves
 *      its queue of closed files;
 *   1. under the file's io lock: a noted file that is still a container,
 *      with one link, not open, is a candidate; its content is read;
 *   2. without locks: every candidate is appended to the pack of its
 *      directory (one open pack per directory, kept across batches, a new
 *      one past SQZ_PACK_MAX_SIZE), and every pack written to is
 *      fdatasync'ed;
 *   3. under the file's io lock again, if nothing changed it meanwhile (no
 *      open, no write, same backing version, still in that directory): on
 *      a local BACKING the pointer is set on the container itself and the
 *      file truncated to 0 bytes (in place: the inode stays); on a shared
 *      one (GlusterFS, NFS) a hidden temporary gets the original's owner,
 *      mode, user xattrs and times plus the pointer and is exchanged with
 *      the original, the inode swapping over to it (replace.c).
 *
 * A crash before the truncation (or the exchange) leaves the container;
 * after it, the packed file, whose entry was durable before the pointer
 * existed. On a shared BACKING, readers of other mounts that hold the old
 * container open keep reading it (the exchange leaves that inode whole).
 * Only the durable thread appends to packs, so the pack cache needs no
 * lock. */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/kind.h"
#include "node/ptimes.h"
#include "store/replace.h"
#include "pack/packing.h"
#include "common/lockorder.h"
#include "squeezefs/pack.h"
#include "squeezefs/shown.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "pack/pack_job_int.h"

struct sqz_pack_cand {
    struct sqz_inode *in;
    void *data;
    size_t len;
    sqz_params params;
    struct sqz_bkey key;  /* the backing version read */
    uint64_t wgen;
    sqz_pack_ptr ptr;
    int appended, deferred; /* deferred: no pack could be opened for it */
    size_t vi;            /* sqz_pack_pending's index of its inode */
    dev_t dir_dev;        /* the directory of the pack it went into */
    ino_t dir_ino;
};

int sqz_packer_init(struct sqz_fs *fs)
{
    fs->packer = calloc(1, sizeof(*fs->packer));
    return fs->packer ? 0 : -ENOMEM;
}

static void drop(struct open_pack *op)
{
    sqz_pack_writer_close(&op->w);
    if (op->dirfd >= 0)
        close(op->dirfd);
    op->dirfd = -1;
}

void sqz_packer_free(struct sqz_fs *fs)
{
    struct sqz_packer *pk = fs->packer;
    if (!pk)
        return;
    for (size_t i = 0; i < pk->n; i++)
        drop(&pk->p[i]);
    free(pk->p);
    free(pk->pend);
    free(pk->retry);
    free(pk);
    fs->packer = NULL;
}

void sqz_packer_stats(struct sqz_fs *fs, uint64_t *packed, uint64_t *failed)
{
    *packed = fs->packer ? atomic_load(&fs->packer->packed) : 0;
    *failed = fs->packer ? atomic_load(&fs->packer->failed) : 0;
}

int sqz_pack_drafts(struct sqz_fs *fs)
{
    return fs->packer && !atomic_load(&fs->packer->disabled) && fs->opts.pack &&
           !fs->opts.ro;
}

int sqz_pack_worth(struct sqz_fs *fs, sqz_ctr *c)
{
    uint64_t len = sqz_ctr_length(c);
    return sqz_pack_drafts(fs) && len > 0 && len <= SQZ_PACK_MAX_LENGTH &&
           len <= sqz_ctr_block_size(c);
}

/* A candidate from c, the closed container of in (io exclusive). 1: not
 * now, a draft that is open (tried again later). */
static int candidate_locked(struct sqz_fs *fs, struct sqz_inode *in,
                            sqz_ctr *c, struct sqz_pack_cand **out)
{
    SQZ_ASSERT_EXCL(&in->io);
    *out = NULL;
    if (atomic_load(&in->pack.drafted) && sqz_pack_worth(fs, c) &&
        in->type == S_IFREG && sqz_content_handles_open(in))
        return 1;
    if (!sqz_pack_worth(fs, c) || in->type != S_IFREG ||
        sqz_content_handles_open(in) || in->file || in->durable.ctr)
        return 0;
    uint64_t len = sqz_ctr_length(c);
    struct stat st;
    if (fstat(sqz_ctr_fd(c), &st) != 0 || st.st_nlink != 1 ||
        st.st_size == 0)
        return 0;
    /* a version-1 file keeps its format until recompress (docs/FORMAT.md) */
    struct sqz_ctr_stat cs;
    if (sqz_ctr_stat(c, &cs) != 0 || cs.format_version < 2)
        return 0;
    struct sqz_pack_cand *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    x->data = malloc(len);
    if (!x->data) {
        free(x);
        return -ENOMEM;
    }
    ssize_t got = sqz_ctr_pread(c, x->data, len, 0);
    if (got != (ssize_t)len) {
        free(x->data);
        free(x);
        return got < 0 ? (int)got : -EIO;
    }
    x->in = in;
    x->len = len;
    x->params = *sqz_ctr_params(c);
    sqz_bkey_of(&st, &x->key);
    x->wgen = atomic_load(&in->change_gen);
    *out = x;
    return 0;
}

void sqz_pack_note_locked(struct sqz_fs *fs, struct sqz_inode *in, sqz_ctr *c)
{
    SQZ_ASSERT_EXCL(&in->io);
    struct sqz_packer *pk = fs->packer;
    if (!pk || in->pack.noted || !sqz_pack_worth(fs, c))
        return;
    if (sqz_inodes_push(&pk->pend, &pk->npend, &pk->pcap, 256, in) < 0)
        return; /* not packed now: the next close tries again */
    sqz_inode_open_ref(fs, in);
    in->pack.noted = 1;
    atomic_store(&pk->npend_seen, pk->npend);
}

/* Keep in (noted, with the open reference of its note) for the next
 * sqz_pack_retry. */
static int retry_later(struct sqz_packer *pk, struct sqz_inode *in)
{
    return sqz_inodes_push(&pk->retry, &pk->nretry, &pk->rcap, 16, in);
}

size_t sqz_pack_pending(struct sqz_fs *fs)
{
    struct sqz_packer *pk = fs->packer;
    if (!pk || pk->npend == 0)
        return 0;
    size_t n = pk->npend < SQZ_PACK_SLICE ? pk->npend : SQZ_PACK_SLICE;
    struct sqz_inode **v = malloc(n * sizeof(*v));
    struct sqz_pack_cand **c = calloc(n, sizeof(*c));
    if (!v || !c) {
        free(v);
        free(c);
        return 0; /* the notes stay: tried again by the next call */
    }
    memcpy(v, pk->pend, n * sizeof(*v));
    pk->npend -= n;
    memmove(pk->pend, pk->pend + n, pk->npend * sizeof(*v));
    atomic_store(&pk->npend_seen, pk->npend);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        struct sqz_inode *in = v[i];
        int later = 0;
        SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
        in->pack.noted = 0;
        int fd = sqz_inode_reopen(in, O_RDONLY | O_NOATIME);
        sqz_ctr *ctr = NULL;
        /* (a file changed meanwhile, packed, emptied or damaged, is no
         * container of its own any more, or not a candidate) */
        if (fd >= 0 && sqz_ctr_probe_fd(fd) == 1) {
            char label[PATH_MAX];
            sqz_inode_label(fs, in, label, sizeof(label));
            if (sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, label, &ctr) == 0) {
                int r = candidate_locked(fs, in, ctr, &c[m]);
                if (r == 0 && c[m])
                    c[m++]->vi = i;
                later = r == 1 && retry_later(pk, in) == 0;
                if (later)
                    in->pack.noted = 1;
                sqz_ctr_close(ctr);
            }
        } else if (fd >= 0) {
            close(fd);
        }
        SQZ_RWUNLOCK(&in->io);
        if (later)
            v[i] = NULL; /* the retry list keeps its open reference */
    }
    sqz_pack_run(fs, c, m);
    int progress = 0;
    for (size_t i = 0; i < m; i++)
        progress |= c[i]->appended;
    for (size_t i = 0; i < m; i++) {
        /* no pack could be opened for it (the open packs are bounded):
         * back to the notes, for the next slice of this quiet moment
         * while slices make progress, else for the next moment */
        struct sqz_inode *in = c[i]->in;
        if (c[i]->deferred &&
            (progress ? sqz_inodes_push(&pk->pend, &pk->npend, &pk->pcap, 16, in)
                      : retry_later(pk, in)) == 0) {
            in->pack.noted = 1; /* its note keeps the reference */
            v[c[i]->vi] = NULL;
        }
        sqz_pack_cand_free(c[i]);
    }
    atomic_store(&pk->npend_seen, pk->npend);
    free(c);
    for (size_t i = 0; i < n; i++)
        if (v[i])
            sqz_inode_open_unref(fs, v[i]);
    free(v);
    return n;
}

void sqz_pack_retry(struct sqz_fs *fs)
{
    struct sqz_packer *pk = fs->packer;
    if (!pk || pk->nretry == 0)
        return;
    if (pk->npend + pk->nretry > pk->pcap) {
        size_t nc = pk->npend + pk->nretry;
        struct sqz_inode **np = realloc(pk->pend, nc * sizeof(*np));
        if (!np)
            return; /* tried again by the next call */
        pk->pend = np;
        pk->pcap = nc;
    }
    memcpy(pk->pend + pk->npend, pk->retry, pk->nretry * sizeof(*pk->retry));
    pk->npend += pk->nretry;
    pk->nretry = 0;
    atomic_store(&pk->npend_seen, pk->npend);
}

size_t sqz_pack_pending_max(struct sqz_fs *fs)
{
    return fs->pack_pending_max ? fs->pack_pending_max : SQZ_PACK_PENDING_MIN;
}

size_t sqz_pack_npending(struct sqz_fs *fs)
{
    return fs->packer ? atomic_load(&fs->packer->npend_seen) : 0;
}

/* A new pack in directory dirfd, which shows the times it had. */
static int writer_open(struct sqz_fs *fs, sqz_pack_writer *w, int dirfd)
{
    struct sqz_ptimes_dir t;
    sqz_ptimes_dir_begin(fs, dirfd, &t);
    int rc = sqz_pack_writer_open(w, dirfd);
    sqz_ptimes_dir_end(fs, dirfd, &t);
    return rc;
}

/* The open pack of the directory of x's file (started if needed). */
static struct open_pack *pack_for(struct sqz_fs *fs, struct sqz_inode *in,
                                  int *err)
{
    struct sqz_packer *pk = fs->packer;
    int dfd = sqz_inode_dirfd(fs, in, NULL, 0);
    struct stat ds;
    if (dfd < 0 || fstat(dfd, &ds) != 0) {
        *err = dfd < 0 ? dfd : -errno;
        if (dfd >= 0)
            close(dfd);
        return NULL;
    }
    struct open_pack *op = NULL;
    for (size_t i = 0; i < pk->n; i++)
        if (pk->p[i].dev == ds.st_dev && pk->p[i].ino == ds.st_ino)
            op = &pk->p[i];
    /* a cached pack whose directory or file is gone (removed; the
     * directory's inode number may be a new directory's now) is dropped */
    struct stat cs;
    if (op && !op->touched &&
        ((fstat(op->dirfd, &cs) == 0 && cs.st_nlink == 0) ||
         (op->w.fd >= 0 && fstat(op->w.fd, &cs) == 0 && cs.st_nlink == 0))) {
        drop(op);
        op->dirfd = dfd;
        op->w.fd = -1;
        dfd = -1;
    } else if (op && op->w.end >= SQZ_PACK_MAX_SIZE && !op->touched) {
        drop(op); /* full: the next entries go to a new pack */
        op->dirfd = dfd;
        op->w.fd = -1;
        dfd = -1;
    } else if (op) {
        close(dfd);
        dfd = -1;
    }
    while (!op && pk->n >= SQZ_PACK_OPEN_MAX) { /* close the LRU untouched */
        size_t lru = pk->n;
        for (size_t i = 0; i < pk->n; i++)
            if (!pk->p[i].touched &&
                (lru == pk->n || pk->p[i].used < pk->p[lru].used))
                lru = i;
        if (lru == pk->n) { /* each has entries of this batch: wait */
            close(dfd);
            *err = -EAGAIN;
            return NULL;
        }
        drop(&pk->p[lru]);
        pk->p[lru] = pk->p[--pk->n];
    }
    if (!op) {
        if (pk->n == pk->cap) {
            size_t nc = pk->cap ? pk->cap * 2 : SQZ_PACK_OPEN_MAX;
            struct open_pack *np = realloc(pk->p, nc * sizeof(*np));
            if (!np) {
                close(dfd);
                *err = -ENOMEM;
                return NULL;
            }
            pk->p = np;
            pk->cap = nc;
        }
        op = &pk->p[pk->n++];
        memset(op, 0, sizeof(*op));
        op->dev = ds.st_dev;
        op->ino = ds.st_ino;
        op->dirfd = dfd;
        op->w.fd = -1;
    }
    if (op->w.fd < 0) {
        *err = writer_open(fs, &op->w, op->dirfd);
        if (*err) {
            drop(op);
            *op = pk->p[--pk->n];
            return NULL;
        }
    }
    op->used = pk->batch;
    return op;
}

/* Step 3's first check (io exclusive): the file is still the closed
 * container read at step 1, with one link, nobody holding it; *bst its
 * backing stat. 0, -EBUSY (changed meanwhile: stays a container) or
 * -errno. */
static int still_candidate_locked(struct sqz_pack_cand *x, struct stat *bst)
{
    struct sqz_inode *in = x->in;
    SQZ_ASSERT_EXCL(&in->io);
    int rc = sqz_backing_stat(in, bst);
    if (rc)
        return rc;
    struct sqz_bkey now;
    sqz_bkey_of(bst, &now);
    if (sqz_content_handles_open(in) || in->file || in->durable.ctr ||
        atomic_load(&in->change_gen) != x->wgen || !sqz_bkey_eq(&now, &x->key) ||
        bst->st_nlink != 1)
        return -EBUSY;
    return 0;
}

/* Step 3 on a shared or network BACKING (GlusterFS, NFS): a hidden
 * temporary with the pointer is exchanged with the original, as before
 * packing in place. Readers of other mounts, which may hold the container
 * open and cache its size and attributes, keep reading the old inode
 * whole; the file gets a new inode number there. io exclusive. */
static int install_exchange_locked(struct sqz_fs *fs, struct sqz_pack_cand *x)
{
    struct sqz_inode *in = x->in;
    SQZ_ASSERT_EXCL(&in->io);
    struct stat bst;
    int rc = still_candidate_locked(x, &bst);
    if (rc)
        return rc;
    struct timespec shown = sqz_ptimes_shown(fs, in, &bst);
    uint64_t tgen = sqz_ptimes_begin(in);
    struct sqz_replace_temp t;
    int tfd = sqz_replace_temp_create(fs, in, &bst, &t);
    if (tfd < 0) {
        sqz_replace_temp_discard(&t);
        return tfd;
    }
    /* still in the directory whose pack holds the entry (a rename into
     * another one unpacks under io, but may have come between the append
     * and now) */
    struct stat ds;
    if (fstat(t.dirfd, &ds) != 0 || ds.st_dev != x->dir_dev ||
        ds.st_ino != x->dir_ino) {
        close(tfd);
        sqz_replace_temp_discard(&t);
        return -EBUSY;
    }
    rc = sqz_pack_ptr_set(tfd, &x->ptr);
    if (rc == 0)
        rc = sqz_replace_temp_meta_nosync(in, &bst, tfd);
    /* the original, to see a chmod/chown/utimens that came (through the
     * mount, which does not take io for them) after its metadata was
     * copied */
    int oldfd = sqz_ifd_get(in);
    if (oldfd >= 0) {
        int ifd = oldfd;
        oldfd = fcntl(ifd, F_DUPFD_CLOEXEC, 0);
        sqz_ifd_put(in);
    }
    if (rc == 0)
        rc = sqz_replace_locked(fs, in, &t, NULL, SQZ_REPLACE_NEED_EXCHANGE);
    if (rc == 0) {
        atomic_store(&in->pack.drafted, 0);
        sqz_ptimes_keep(fs, in, tfd, &shown, tgen);
    }
    struct stat was;
    if (rc == 0 && oldfd >= 0 && fstat(oldfd, &was) == 0 &&
        (was.st_mode != bst.st_mode || was.st_uid != bst.st_uid ||
         was.st_gid != bst.st_gid ||
         was.st_mtim.tv_sec != bst.st_mtim.tv_sec ||
         was.st_mtim.tv_nsec != bst.st_mtim.tv_nsec)) {
        struct timespec tv[2] = {was.st_atim, was.st_mtim};
        if (fchown(tfd, was.st_uid, was.st_gid) != 0 ||
            fchmod(tfd, was.st_mode & 07777) != 0 || futimens(tfd, tv) != 0) {
            char label[PATH_MAX];
            sqz_inode_label(fs, in, label, sizeof(label));
            sqz_logf(SQZ_LOG_WARN, "%s: packing: a change of owner, mode or times "
                     "made meanwhile could not be carried over: %s", label,
                     strerror(errno));
        }
    }
    if (oldfd >= 0)
        close(oldfd);
    close(tfd);
    sqz_replace_temp_discard(&t);
    return rc;
}


/* Step 3 for one candidate, in place (the backing inode stays, so does the
 * inode number stat shows): the pointer is set on the container itself
 * (a pointer on a file with bytes counts for nothing), then the file is
 * truncated to 0 bytes, the one step that makes it packed; its mtime is
 * put back (the atime is untouched) and the ctime it showed is kept
 * (ptimes.c). io exclusive. */
static int install_locked(struct sqz_fs *fs, struct sqz_pack_cand *x)
{
    struct sqz_inode *in = x->in;
    SQZ_ASSERT_EXCL(&in->io);
    struct stat bst;
    int rc = still_candidate_locked(x, &bst);
    if (rc)
        return rc;
    /* (a rename into another directory and a link through the mount take
     * io: checked below and above, they cannot come until it is done) */
    /* still named in the directory whose pack holds the entry */
    int dfd = sqz_inode_dirfd(fs, in, NULL, 0);
    if (dfd < 0)
        return dfd == -ENOENT ? -EBUSY : dfd;
    struct stat ds;
    rc = fstat(dfd, &ds) != 0 ? -errno : 0;
    close(dfd);
    if (rc)
        return rc;
    if (ds.st_dev != x->dir_dev || ds.st_ino != x->dir_ino)
        return -EBUSY;
    struct timespec shown = sqz_ptimes_shown(fs, in, &bst);
    uint64_t tgen = sqz_ptimes_begin(in);
    int fd = sqz_inode_reopen(in, O_WRONLY);
    if (fd < 0)
        return fd;
    /* the ctime record goes into the pointer (ptimes.c): one xattr, which
     * fits in the inode (two take a 4 KiB block per file on ext4) */
    fremovexattr(fd, SQZ_SHOWN_XATTR);
    rc = sqz_pack_ptr_set(fd, &x->ptr);
    if (rc == 0 && ftruncate(fd, 0) != 0) {
        rc = -errno;
        fremovexattr(fd, SQZ_PACK_XATTR); /* (counted for nothing) */
    }
    if (rc == 0) {
        atomic_store(&in->pack.drafted, 0);
        struct timespec tv[2] = {{.tv_nsec = UTIME_OMIT}, bst.st_mtim};
        if (futimens(fd, tv) != 0) {
            char label[PATH_MAX];
            sqz_inode_label(fs, in, label, sizeof(label));
            sqz_logf(SQZ_LOG_WARN, "%s: packing: cannot put its times back: %s",
                     label, strerror(errno));
        }
        sqz_ptimes_keep(fs, in, fd, &shown, tgen);
        sqz_inode_changed(in);
        in->kind = SQZ_K_UNKNOWN;
        sqz_content_invalidate(in);
    }
    close(fd);
    return rc;
}

void sqz_pack_run(struct sqz_fs *fs, struct sqz_pack_cand **v, size_t n)
{
    struct sqz_packer *pk = fs->packer;
    if (!pk || n == 0)
        return;
    pk->batch++;
    for (size_t i = 0; i < pk->n; i++)
        pk->p[i].touched = 0;
    /* 2: append, then make every pack written to durable */
    for (size_t i = 0; i < n; i++) {
        struct sqz_pack_cand *x = v[i];
        int err = 0;
        struct open_pack *op = pack_for(fs, x->in, &err);
        if (op) {
            err = sqz_pack_append(&op->w, &x->params, x->data, x->len, &x->ptr);
            if (err == -EFBIG) { /* full: flush what this batch put in it,
                                    go on in a new one */
                uint64_t full = op->w.id;
                err = sqz_pack_writer_flush(&op->w);
                sqz_pack_writer_close(&op->w);
                for (size_t j = 0; err && j < i; j++)
                    if (v[j]->appended && v[j]->ptr.pack_id == full)
                        v[j]->appended = 0; /* not durable: not pointed to */
                if (err == 0)
                    err = writer_open(fs, &op->w, op->dirfd);
                if (err == 0)
                    err = sqz_pack_append(&op->w, &x->params, x->data, x->len,
                                          &x->ptr);
            }
            if (err == 0) {
                x->appended = 1;
                x->dir_dev = op->dev;
                x->dir_ino = op->ino;
                op->touched = 1;
            }
        }
        x->deferred = err == -EAGAIN;
        if (err && err != -ENOENT && err != -EBUSY && err != -EAGAIN) {
            char label[PATH_MAX];
            sqz_inode_label(fs, x->in, label, sizeof(label));
            sqz_logf(SQZ_LOG_WARN, "%s: not packed: %s (stays a container)", label,
                     strerror(-err));
            pk->failed++;
        }
    }
    for (size_t i = 0; i < pk->n; i++) {
        if (!pk->p[i].touched)
            continue;
        int err = sqz_pack_writer_flush(&pk->p[i].w);
        if (err) {
            sqz_logf(SQZ_LOG_WARN, "squeezefs: flushing a pack failed: %s (its "
                     "files stay containers)", strerror(-err));
            for (size_t j = 0; j < n; j++)
                if (v[j]->appended && v[j]->ptr.pack_id == pk->p[i].w.id)
                    v[j]->appended = 0;
            pk->p[i].w.end = SQZ_PACK_MAX_SIZE; /* never appended to again */
            pk->p[i].touched = 0;
            pk->failed++;
        }
    }
    /* 3: point each file at its durable entry */
    for (size_t i = 0; i < n; i++) {
        struct sqz_pack_cand *x = v[i];
        if (!x->appended)
            continue;
        SQZ_WRLOCK(&x->in->io, SQZ_RANK_IO);
        int rc = fs->pack_in_place ? install_locked(fs, x)
                                   : install_exchange_locked(fs, x);
        SQZ_RWUNLOCK(&x->in->io);
        if (rc == 0) {
            pk->packed++;
        } else if (rc == -EBUSY || rc == -ESTALE || rc == -EMLINK ||
                   rc == -ENOENT) {
            pk->skipped++; /* changed, renamed or removed meanwhile */
        } else {
            if (rc == -ENOTSUP || rc == -EOPNOTSUPP) {
                atomic_store(&pk->disabled, 1);
                sqz_logf(SQZ_LOG_WARN, "squeezefs: the backing file system has no "
                         "user xattrs or no RENAME_EXCHANGE: small files are not "
                         "packed");
            } else {
                char label[PATH_MAX];
                sqz_inode_label(fs, x->in, label, sizeof(label));
                sqz_logf(SQZ_LOG_WARN, "%s: not packed: %s (stays a container)",
                         label, strerror(-rc));
            }
            pk->failed++;
        }
    }
}

uint64_t sqz_packer_current(struct sqz_fs *fs, const struct stat *dir)
{
    struct sqz_packer *pk = fs->packer;
    for (size_t i = 0; pk && i < pk->n; i++)
        if (pk->p[i].dev == dir->st_dev && pk->p[i].ino == dir->st_ino &&
            pk->p[i].w.fd >= 0)
            return pk->p[i].w.id;
    return 0;
}

void sqz_packer_forget(struct sqz_fs *fs, const struct stat *dir)
{
    struct sqz_packer *pk = fs->packer;
    for (size_t i = 0; pk && i < pk->n; i++) {
        if (pk->p[i].dev == dir->st_dev && pk->p[i].ino == dir->st_ino) {
            drop(&pk->p[i]);
            pk->p[i] = pk->p[--pk->n];
            return;
        }
    }
}

void sqz_pack_cand_free(struct sqz_pack_cand *x)
{
    if (!x)
        return;
    free(x->data);
    free(x);
}
