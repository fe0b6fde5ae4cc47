/* Durability of closed files (docs/FORMAT.md, "Durability points").
 *
 * close() must stay cheap, so the last close of a file written during the
 * mount commits its data but does not fsync. Its container stays open in a
 * queue instead; a background thread wakes every SQZ_DURABLE_DELAY_MS and
 * makes the whole queue durable with one flush of the backing file system
 * (syncfs where the file system is local and syncfs is trusted; one
 * fdatasync per file elsewhere, e.g. on FUSE or network file systems), then
 * writes every file's durable mark and closes it. Without the mark, damage
 * in a file's log would look like a torn tail after a crash and cut the
 * file short; with it, damage reads as EIO for the damaged block only.
 *
 * A reopen takes the queued container back (two containers must never be
 * open for writing on one backing file). Marks are written only for the
 * state the batch flushed (sqz_ctr_mark_end checks), and the backing file's
 * times are put back after the mark (bookkeeping, not a data change).
 * Unmount (sqz_durable_drain with final = 1) processes the queue at once
 * and flushes again so that the marks themselves are durable.
 *
 * Locking: a queued inode's durable.ctr/durable.gen/durable.queued are protected by its io
 * lock; the queue array by d->mu. The thread takes d->mu alone, then one
 * inode's io at a time, never both. Ranks and order: docs/LOCKING.md. */
#include "content/durable.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/ptimes.h"
#include "pack/packing.h"
#include "common/bgthread.h"
#include "common/lockorder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define SQZ_DURABLE_DELAY_MS 2000
/* Queue length at which the thread is woken early, and at which a closing
 * caller waits for room (each entry holds an open file descriptor: a
 * quarter of max_fds=, ifd.c). */
#define SQZ_DURABLE_KICK 256
#define SQZ_DURABLE_MAX 1024

struct sqz_durable {
    pthread_mutex_t mu;
    sqz_bgthread bg;        /* the thread (sleeps under mu); bg.wake: stop,
                             * or the queue is long */
    pthread_cond_t room;    /* closers waiting for the queue to shrink */
    struct sqz_inode **q;
    size_t n, cap;
    size_t kick, max;       /* SQZ_DURABLE_KICK/MAX within max_fds= */
    size_t inflight;        /* entries of the batch being processed (their
                               descriptors count against max too) */
    int use_syncfs;
    int root_fd;
    /* statistics (mu) */
    uint64_t batches, marked, failures;
};

/* Local file systems whose syncfs(2) flushes every file's data and metadata
 * and reports errors. */
int sqz_backing_local(int fd)
{
    struct statfs sfs;
    if (fstatfs(fd, &sfs) != 0)
        return 0;
    switch ((unsigned long)sfs.f_type) {
    case 0xEF53UL:     /* ext2/3/4 */
    case 0x58465342UL: /* xfs */
    case 0x9123683EUL: /* btrfs */
    case 0xF2F52010UL: /* f2fs */
    case 0x01021994UL: /* tmpfs: nothing to flush */
        return 1;
    default:
        return 0;
    }
}

struct entry {
    struct sqz_inode *in;
    sqz_ctr *c;
    uint64_t gen;
    size_t vi;          /* its slot in the batch */
    sqz_mark_ticket t;
    struct stat before; /* times to put back after the mark */
    int have_before;
    struct timespec shown; /* the ctime it showed before the mark */
    uint64_t tgen;      /* users' changes before the mark (ptimes.c) */
};

/* The mark is bookkeeping: the file shows the times it had before it
 * (its atime and mtime put back, its ctime kept: ptimes.c). */
static void put_back_times(struct sqz_fs *fs, struct entry *x, int fd)
{
    struct sqz_inode *in = x->in;
    const struct stat *b = &x->before;
    struct stat now;
    if (fstat(fd, &now) != 0)
        return;
    if (now.st_mtim.tv_sec != b->st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != b->st_mtim.tv_nsec) {
        /* (the atime: untouched by the mark, maybe moved by an open since) */
        struct timespec tv[2] = {{.tv_nsec = UTIME_OMIT}, b->st_mtim};
        if (futimens(fd, tv) != 0 || fstat(fd, &now) != 0)
            return;
    }
    if (now.st_ctim.tv_sec != b->st_ctim.tv_sec ||
        now.st_ctim.tv_nsec != b->st_ctim.tv_nsec) {
        if (sqz_ptimes_keep_st(fs, in, fd, &x->shown, x->tgen, &now, &now) != 0 &&
            fstat(fd, &now) != 0)
            return;
    }
    /* the caches keyed by the backing file's version stay valid */
    struct sqz_bkey old, cur;
    sqz_bkey_of(b, &old);
    sqz_bkey_of(&now, &cur);
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    if (in->probe.valid && sqz_bkey_eq(&in->probe.key, &old))
        in->probe.key = cur;
    if (in->keep_cache.valid && sqz_bkey_eq(&in->keep_cache.key, &old))
        in->keep_cache.key = cur;
    SQZ_MUTEX_UNLOCK(&in->meta);
}

static int requeue_locked(struct sqz_durable *d, struct sqz_inode *in)
{
    SQZ_ASSERT_EXCL(&d->mu);
    return sqz_inodes_push(&d->q, &d->n, &d->cap, 64, in);
}

/* Make one batch durable. final: unmount (flush the marks too). Returns
 * the first error. */
static int process(struct sqz_fs *fs, struct sqz_inode **v, size_t n,
                   int final)
{
    struct sqz_durable *d = fs->durable;
    struct entry *e = calloc(n ? n : 1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    size_t m = 0;
    int first = 0;
    /* 1: take a ticket for what each queued container holds now */
    for (size_t i = 0; i < n; i++) {
        struct sqz_inode *in = v[i];
        SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
        in->durable.queued = 0;
        if (in->durable.ctr) {
            struct entry *x = &e[m];
            x->in = in;
            x->vi = i;
            x->c = in->durable.ctr;
            x->gen = in->durable.gen;
            int r = sqz_ctr_mark_begin(x->c, &x->t);
            if (r < 0 && first == 0)
                first = r;
            x->have_before = fstat(sqz_ctr_fd(x->c), &x->before) == 0;
            if (x->have_before) {
                x->tgen = sqz_ptimes_begin(in);
                x->shown = sqz_ptimes_shown(fs, in, &x->before);
            }
            m++;
        }
        SQZ_RWUNLOCK(&in->io);
    }
    /* 2: one flush for all (outside every lock: reopen and I/O go on) */
    int flushed = 0;
    if (m > 0 && d->use_syncfs) {
        flushed = syncfs(d->root_fd) == 0 ? 0 : -errno;
    } else {
        for (size_t i = 0; i < m && flushed == 0; i++)
            if (e[i].t.end && fdatasync(sqz_ctr_fd(e[i].c)) != 0)
                flushed = -errno;
    }
    if (flushed < 0) {
        sqz_logf(SQZ_LOG_ERR, "squeezefs: flushing %zu closed file(s) to make them "
                    "durable failed: %s (retried)", m, strerror(-flushed));
        if (first == 0)
            first = flushed;
    }
    /* 3: mark, put the times back, close (unless a reopen took it back);
     * small files are noted for packing (pack_job.c) */
    for (size_t i = 0; i < m; i++) {
        struct entry *x = &e[i];
        struct sqz_inode *in = x->in;
        SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
        if (in->durable.ctr != x->c || in->durable.gen != x->gen) {
            SQZ_RWUNLOCK(&in->io); /* reopened: its owner marks */
            continue;
        }
        int r = flushed;
        if (r == 0 && x->t.end) {
            r = sqz_ctr_mark_end(x->c, &x->t);
            if (r == 0 && final && !d->use_syncfs &&
                fdatasync(sqz_ctr_fd(x->c)) != 0)
                r = -errno;
            if (r == 0 && x->have_before)
                put_back_times(fs, x, sqz_ctr_fd(x->c));
        }
        if (r == 0) {
            in->durable.ctr = NULL;
            sqz_pack_note_locked(fs, in, x->c);
            int rc = sqz_ctr_close(x->c);
            if (rc < 0 && first == 0)
                first = rc;
            SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
            d->marked++;
            SQZ_MUTEX_UNLOCK(&d->mu);
        } else if (!final) {
            /* keep it queued; the entry's open reference goes with it */
            in->durable.queued = 1;
            SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
            d->failures++;
            if (requeue_locked(d, in) == 0)
                v[x->vi] = NULL; /* the queue keeps its open reference */
            else
                in->durable.queued = 0;
            SQZ_MUTEX_UNLOCK(&d->mu);
        } else {
            char label[PATH_MAX];
            sqz_inode_label(fs, in, label, sizeof(label));
            sqz_logf(SQZ_LOG_ERR, "%s: cannot make the closed file durable: %s", label,
                     strerror(-r));
            if (first == 0)
                first = r;
            in->durable.ctr = NULL;
            sqz_ctr_close(x->c);
        }
        SQZ_RWUNLOCK(&in->io);
    }
    free(e);
    return first;
}

/* Take the queue and process it; drop the queue's open references. */
static int run_batch(struct sqz_fs *fs, int final)
{
    struct sqz_durable *d = fs->durable;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
    struct sqz_inode **v = d->q;
    size_t n = d->n;
    d->q = NULL;
    d->n = d->cap = 0;
    d->inflight = n;
    if (n)
        d->batches++;
    pthread_cond_broadcast(&d->room);
    SQZ_MUTEX_UNLOCK(&d->mu);
    if (n == 0) {
        free(v);
        return 0;
    }
    /* process() moves requeued inodes' references back to the queue: it
     * marks them by clearing their slot in a copy */
    struct sqz_inode **keep = malloc(n * sizeof(*keep));
    int rc;
    if (!keep) {
        /* put them back (the array is the queue again) */
        SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
        struct sqz_inode **newer = d->q;
        size_t nn = d->n;
        d->inflight = 0;
        d->q = v;
        d->n = d->cap = n;
        for (size_t i = 0; i < nn; i++)
            if (requeue_locked(d, newer[i]) < 0)
                break; /* cannot happen: they fitted in newer */
        SQZ_MUTEX_UNLOCK(&d->mu);
        free(newer);
        return -ENOMEM;
    }
    memcpy(keep, v, n * sizeof(*keep));
    rc = process(fs, keep, n, final);
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
    d->inflight = 0;
    pthread_cond_broadcast(&d->room);
    SQZ_MUTEX_UNLOCK(&d->mu);
    for (size_t i = 0; i < n; i++)
        if (keep[i])
            sqz_inode_open_unref(fs, v[i]);
    free(keep);
    free(v);
    return rc;
}

/* 1 if the queue asks for a batch now (or the thread is stopping). */
static int queue_full(struct sqz_durable *d)
{
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
    int full = d->n >= d->kick || d->bg.stop;
    SQZ_MUTEX_UNLOCK(&d->mu);
    return full;
}

/* Pack the notes (quiet), or only down below their bound; slice by slice,
 * back to the queue as soon as it is full again (closers would wait for
 * room) unless the notes are a queue's length past their bound. */
static void pack_some(struct sqz_fs *fs, int quiet)
{
    struct sqz_durable *d = fs->durable;
    size_t max = sqz_pack_pending_max(fs), np;
    while ((np = sqz_pack_npending(fs)) > 0) {
        if (!quiet && np < max)
            break;
        if (np < max + d->max && queue_full(d))
            break;
        if (sqz_pack_pending(fs) == 0)
            break; /* no memory: the notes stay */
    }
}

static void *durable_main(void *arg)
{
    struct sqz_fs *fs = arg;
    struct sqz_durable *d = fs->durable;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
    while (!d->bg.stop) {
        if (d->n < d->kick && !sqz_bg_sleep(&d->bg, SQZ_DURABLE_DELAY_MS))
            break;
        size_t queued = d->n;
        SQZ_MUTEX_UNLOCK(&d->mu);
        if (queued > 0)
            (void)run_batch(fs, 0); /* failures stay queued and retried */
        /* packing waits for a quiet moment: a batch not started by a full
         * queue (a stream of closes is not slowed down by it) */
        sqz_pack_retry(fs);
        pack_some(fs, queued < d->kick);
        sqz_pack_gc_run(fs, 0);
        SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
    }
    SQZ_MUTEX_UNLOCK(&d->mu);
    return NULL;
}

int sqz_durable_start(struct sqz_fs *fs)
{
    struct sqz_durable *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->root_fd = fs->root_dirfd;
    /* 3/8 of max_fds= (the inode cache has half, ifd.c) */
    d->max = fs->opts.max_fds ? fs->opts.max_fds * 3 / 8 : SQZ_DURABLE_MAX;
    d->max = d->max < 4 ? 4 : d->max > SQZ_DURABLE_MAX ? SQZ_DURABLE_MAX : d->max;
    d->kick = d->max / 4 < SQZ_DURABLE_KICK ? d->max / 4 : SQZ_DURABLE_KICK;
    d->use_syncfs = sqz_backing_local(fs->root_dirfd);
    int rc = -sqz_mutex_init(&d->mu);
    if (rc == 0 && (rc = -pthread_cond_init(&d->room, NULL)) < 0)
        pthread_mutex_destroy(&d->mu);
    if (rc == 0 && (rc = sqz_bg_init(&d->bg, &d->mu, SQZ_RANK_DURABLE)) < 0) {
        pthread_cond_destroy(&d->room);
        pthread_mutex_destroy(&d->mu);
    }
    if (rc < 0) {
        free(d);
        return rc;
    }
    fs->durable = d;
    if ((rc = sqz_bg_start(&d->bg, durable_main, fs)) < 0) {
        fs->durable = NULL;
        sqz_bg_destroy(&d->bg);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->room);
        free(d);
        return rc;
    }
    return 0;
}

int sqz_durable_finish(struct sqz_fs *fs)
{
    struct sqz_durable *d = fs->durable;
    if (!d)
        return 0;
    sqz_bg_stop(&d->bg, &d->room); /* closers waiting for room go on */
    /* final mode requeues nothing, so one batch empties the queue */
    int first = run_batch(fs, 1);
    sqz_pack_retry(fs);
    while (sqz_pack_pending(fs) > 0)
        ;
    sqz_pack_gc_run(fs, 1);
    if (d->use_syncfs && syncfs(d->root_fd) != 0 && first == 0)
        first = -errno;
    return first;
}

void sqz_durable_free(struct sqz_fs *fs)
{
    struct sqz_durable *d = fs->durable;
    if (!d)
        return;
    (void)sqz_durable_finish(fs);
    fs->durable = NULL;
    sqz_bg_destroy(&d->bg);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->room);
    free(d->q);
    free(d);
}

void sqz_durable_wait_room(struct sqz_fs *fs)
{
    struct sqz_durable *d = fs->durable;
    if (!d)
        return;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
    while (d->n + d->inflight >= d->max && d->bg.running && !d->bg.stop) {
        pthread_cond_signal(&d->bg.wake);
        pthread_cond_wait(&d->room, &d->mu);
    }
    SQZ_MUTEX_UNLOCK(&d->mu);
}

int sqz_durable_defer_locked(struct sqz_fs *fs, struct sqz_inode *in,
                             sqz_ctr *c)
{
    SQZ_ASSERT_EXCL(&in->io);
    struct sqz_durable *d = fs->durable;
    if (!d)
        return -ENOSYS;
    in->durable.ctr = c;
    in->durable.gen++;
    if (in->durable.queued)
        return 0;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
    int rc = requeue_locked(d, in);
    if (rc == 0 && d->n >= d->kick)
        pthread_cond_signal(&d->bg.wake);
    SQZ_MUTEX_UNLOCK(&d->mu);
    if (rc < 0) {
        in->durable.ctr = NULL;
        return rc;
    }
    in->durable.queued = 1;
    sqz_inode_open_ref(fs, in); /* dropped when the entry is processed */
    return 0;
}

sqz_ctr *sqz_durable_take_locked(struct sqz_inode *in)
{
    SQZ_ASSERT_EXCL(&in->io);
    sqz_ctr *c = in->durable.ctr;
    in->durable.ctr = NULL;
    return c;
}

void sqz_durable_stats(struct sqz_fs *fs, uint64_t *queued, uint64_t *marked,
                       uint64_t *batches, uint64_t *failures)
{
    struct sqz_durable *d = fs->durable;
    *queued = *marked = *batches = *failures = 0;
    if (!d)
        return;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DURABLE);
    *queued = d->n;
    *marked = d->marked;
    *batches = d->batches;
    *failures = d->failures;
    SQZ_MUTEX_UNLOCK(&d->mu);
}
