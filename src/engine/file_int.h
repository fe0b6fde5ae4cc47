/* Private to the engine's file rooms (src/engine/file*.c): struct
 * sqz_file, the types it holds and the helpers they share.
 *
 *   file.c         the file object: open, close, queries
 *   file_read.c    reads: the read window
 *   file_load.c    loading committed blocks: single flight, runs read at
 *                  once (sqz_ctr_run_read), read-ahead
 *   file_write.c   write, append, make room (dirty bounds), truncate
 *   file_commit.c  commits: in-flight batches, commit, flush, fsync and
 *                  the flusher's write-back callback
 *   file_seek.c    SEEK_DATA / SEEK_HOLE
 *   file_copy.c    stored blocks copied between files (copy_file_range)
 *
 * Locks: docs/LOCKING.md (f->lock, ra_mu, ld_mu).
 *
 * Invariants (under f->lock):
 *  - committed_len <= length; blocks not dirty read as their committed
 *    content, which is zero at and past committed_len (so blocks lying
 *    wholly in [committed_len, length) are holes and need no buffer);
 *  - every dirty buffer and every cached block is zero past `length`, so
 *    growing the file exposes zeros (shrinking commits at once, passing
 *    the new last block with its tail zeroed);
 *  - the dirty array is sorted by block index, without duplicates;
 *  - in-flight batches (FIFO, oldest first) hold immutable blocks that
 *    are being compressed or wait for their commit; a block's newest
 *    version is: dirty, else the newest in-flight one, else committed.
 *    Reads and read-modify-writes follow that order; commits go in FIFO
 *    order (newest version wins); a shrinking truncate commits all
 *    in-flight work first, so it wins over it.
 */
#ifndef SQUEEZEFS_ENGINE_FILE_INT_H
#define SQUEEZEFS_ENGINE_FILE_INT_H

#include "engine/engine_int.h"

#include <stdlib.h>
#include <string.h>

/* Compression job argument (sync commits and in-flight batches). */
typedef struct prep_arg {
    const sqz_ctr *c;
    struct sqz_file *f;
    const sqz_cblock *b;
    sqz_prepared *out;
    int draft;               /* sqz_ctr_prepare_draft (sqz_file_flush_draft) */
    int rc;
} prep_arg;

/* A batch of dirty blocks compressed in the background: blocks written
 * to their end, or every dirty block (make_room, sqz_file_hint_flush). The
 * blocks are immutable from submission on (a later write to one of them
 * makes a new dirty copy); committed in FIFO order under f->lock
 * exclusive. */
typedef struct abatch {
    struct abatch *next;
    size_t n;
    uint64_t len;            /* the file's length at submission: what the
                                batch's last block holds data up to */
    sqz_cblock **blk;        /* sorted by idx, references held */
    sqz_prepared *prep;
    prep_arg *args;
    sqz_job *jobs;
    sqz_batch batch;
} abatch;

/* Read-ahead job argument: blocks [idx, idx + n). */
typedef struct ra_arg {
    struct sqz_file *f;
    uint64_t idx;
    size_t n;
} ra_arg;

/* Blocks resolved (and decompressed) together by one read. */
#define SQZ_READ_WINDOW 16
/* A run read from the backing file at once (sqz_ctr_run_read): at most
 * this many blocks and (unless one block is larger) stored bytes, so a
 * run's buffer stays bounded. */
#define SQZ_RUN_MAX_BLOCKS 64
#define SQZ_RUN_MAX_BYTES ((size_t)4 << 20)
/* The read-ahead window grows up to this many decompressed bytes (and at
 * most SQZ_RA_MAX_BLOCKS blocks and a sixteenth of the cache; never below
 * readahead_blocks). */
#define SQZ_RA_MAX_BYTES ((size_t)8 << 20)
#define SQZ_RA_MAX_BLOCKS 256
#define SQZ_RA_INFLIGHT 4

struct sqz_file {
    sqz_engine *e;
    sqz_ctr *c;
    uint64_t fid;            /* cache key; unique per engine */
    size_t bs;
    unsigned log2bs;

    pthread_rwlock_t lock;   /* protects the fields below up to ra_mu */
    uint64_t length;         /* logical length including dirty data */
    uint64_t committed_len;  /* length of the last commit */
    sqz_cblock **dirty;      /* sorted by idx */
    size_t ndirty, capdirty;
    size_t dirty_bytes;
    struct abatch *inflight_head, *inflight_tail; /* FIFO, oldest first */
    size_t inflight_bytes;   /* blocks being compressed or awaiting commit */
    int bg_err;              /* error of a background commit, not yet
                                reported to a caller */
    sqz_counter copies;      /* write copies done (overlap statistic) */

    pthread_mutex_t ra_mu;   /* protects the read-ahead state below */
    uint64_t ra_next_off;    /* where a sequential read would start */
    uint64_t ra_hi;          /* blocks below this were already requested */
    size_t ra_cap;           /* readahead_blocks: the first window */
    size_t ra_max;           /* the largest window (ra_args has room) */
    size_t ra_win;           /* the next window's size */
    size_t ra_last;          /* the last window's size (0: none yet) */
    /* SQZ_RA_INFLIGHT windows may be in flight at once (the next one is
     * issued while those before still load): window k uses ra_args and
     * ra_jobs [k * ra_max, (k + 1) * ra_max). */
    ra_arg *ra_args;
    sqz_job *ra_jobs;
    sqz_batch ra_batch[SQZ_RA_INFLIGHT]; /* each in flight until sqz_pool_done */

    /* Single flight: blocks some thread is decompressing right now (under
     * a read lock of f->lock), so that a reader racing the read-ahead, or
     * two readers, wait for one decompression instead of doing it twice. */
    pthread_mutex_t ld_mu;   /* protects loading/nloading/caploading */
    pthread_cond_t ld_cv;    /* broadcast when a block leaves loading */
    uint64_t *loading;
    size_t nloading, caploading;

    sqz_file_link link;      /* engine's open set; link.dirty_since is
                                written under lock (exclusive), read
                                lock-free by the flusher; 0 = clean */
};

/* ---- helpers ---- */

static inline uint64_t nblocks_of(const sqz_file *f, uint64_t len)
{
    return (len + f->bs - 1) >> f->log2bs;
}

static inline void count_decompress(sqz_engine *e, ssize_t got, size_t stored)
{
    if (got >= 0 && stored > 0) {
        atomic_fetch_add(&e->st.blocks_decompressed, 1);
        atomic_fetch_add(&e->st.bytes_decompressed, (uint64_t)got);
        atomic_fetch_add(&e->st.backing_bytes_read, stored);
    }
}

/* Index of idx in v[0..n) (sorted by idx), or where it would be inserted.
 * Serves the dirty array and every in-flight batch. */
static inline size_t cblock_pos(sqz_cblock *const *v, size_t n, uint64_t idx)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid]->idx < idx)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index in the dirty array of idx, or of where it would be inserted. */
static inline size_t dirty_pos(const sqz_file *f, uint64_t idx)
{
    return cblock_pos(f->dirty, f->ndirty, idx);
}

static inline sqz_cblock *dirty_find(const sqz_file *f, uint64_t idx)
{
    SQZ_ASSERT_HELD(&f->lock);
    size_t i = dirty_pos(f, idx);
    return i < f->ndirty && f->dirty[i]->idx == idx ? f->dirty[i] : NULL;
}

/* Newest in-flight version of block idx, or NULL. f->lock held. */
static inline sqz_cblock *inflight_find(const sqz_file *f, uint64_t idx)
{
    SQZ_ASSERT_HELD(&f->lock);
    sqz_cblock *found = NULL;
    for (const abatch *a = f->inflight_head; a; a = a->next) {
        size_t lo = cblock_pos(a->blk, a->n, idx);
        if (lo < a->n && a->blk[lo]->idx == idx)
            found = a->blk[lo]; /* later batches are newer */
    }
    return found;
}

static inline int is_clean(const sqz_file *f)
{
    return f->ndirty == 0 && !f->inflight_head &&
           f->length == f->committed_len;
}

/* Take (and clear) the error of a background commit. f->lock exclusive. */
static inline int take_bg_err(sqz_file *f)
{
    SQZ_ASSERT_EXCL(&f->lock);
    int rc = f->bg_err;
    f->bg_err = 0;
    return rc;
}

/* ---- file_load.c ---- */

/* Claim block idx for decompression. 1: the caller decompresses it and
 * then calls sqz_load_done; 0: another thread is at it (sqz_load_wait,
 * then look in the cache). Without a cache that can keep the block there
 * is nothing to share: always 1. */
int sqz_load_claim(sqz_file *f, uint64_t idx);
/* The claimed block idx is in the cache now, or failed. */
void sqz_load_done(sqz_file *f, uint64_t idx);
/* Wait until nobody is decompressing block idx. Loaders never wait for
 * anything but the pool, whose jobs never block, so this returns. */
void sqz_load_wait(sqz_file *f, uint64_t idx);

/* One committed block to load into b->data (the caller claimed it). */
typedef struct sqz_load {
    sqz_file *f;
    uint64_t idx;
    sqz_cblock *b;
    ssize_t rc;              /* as sqz_ctr_read_block */
    size_t stored;
    size_t w;                /* the caller's own (position in its window) */
    const sqz_ctr_run *run;  /* private */
    size_t ri;
} sqz_load;
/* Load ms[0..n) (ascending idx): consecutive blocks stored together are
 * read with one backing read each run (sqz_ctr_run_read, bounded by
 * SQZ_RUN_MAX_*), a lone block by itself; the blocks are decompressed on
 * the pool. Fills rc and stored; a damaged block fails only its own rc. */
void sqz_load_blocks(sqz_file *f, sqz_load *ms, size_t n);
/* Sequential detection at a read of [off, off+n) (n: what it will return)
 * and the read-ahead it starts beyond that range, its blocks claimed at
 * once; f->lock held (shared or exclusive). */
void sqz_readahead_start(sqz_file *f, uint64_t off, size_t n);

/* ---- file_write.c ---- */

/* Drop the dirty versions of blocks lo <= idx < hi (they are replaced by
 * newer committed ones: a punch, a copy). f->lock exclusive. */
void sqz_file_drop_dirty(sqz_file *f, uint64_t lo, uint64_t hi);

/* ---- file_commit.c ---- */

/* Commit the dirty blocks below ceil(new_len/bs) (with `extra`, if given,
 * replacing the dirty block of its index) and the length new_len in one
 * transaction; see file_commit.c. f->lock exclusive. */
int sqz_file_commit_locked(sqz_file *f, uint64_t new_len, sqz_cblock *extra);
/* Commit the finished in-flight batches at the head of the queue (wait_all:
 * all of them). f->lock exclusive. */
int sqz_file_commit_inflight(sqz_file *f, int wait_all);
/* Move the dirty blocks with lo <= idx < hi into a new in-flight batch
 * compressed on the pool. f->lock exclusive. */
int sqz_file_submit_range(sqz_file *f, uint64_t lo, uint64_t hi);
/* Wait for an in-flight batch's jobs and free it. */
void sqz_file_abatch_free(sqz_file *f, abatch *a);
/* The flusher's callback (sqz_file_link.writeback). */
int sqz_file_writeback(sqz_file *f, uint64_t cutoff_ms);

#endif
