/* sqz_file: one open container seen through the engine — per-file dirty
 * blocks, read (cache, parallel decompression, read-ahead), write
 * (read-modify-write of partial blocks), append, truncate, and commits
 * that prepare all dirty blocks in parallel on the pool.
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
#include "engine/engine_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct sqz_file;

/* Compression job argument (sync commits and in-flight batches). */
typedef struct prep_arg {
    const sqz_ctr *c;
    struct sqz_file *f;
    const sqz_cblock *b;
    sqz_prepared *out;
    int rc;
} prep_arg;

/* A batch of full dirty blocks compressed in the background. The blocks
 * are immutable from submission on (a later write to one of them makes a
 * new dirty copy); committed in FIFO order under f->lock exclusive. */
typedef struct abatch {
    struct abatch *next;
    size_t n;
    sqz_cblock **blk;        /* sorted by idx, references held */
    sqz_prepared *prep;
    prep_arg *args;
    sqz_job *jobs;
    sqz_batch batch;
} abatch;

/* Read-ahead job argument. */
typedef struct ra_arg {
    sqz_file *f;
    uint64_t idx;
} ra_arg;

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
    size_t ra_cap;           /* readahead_blocks */
    ra_arg *ra_args;
    sqz_job *ra_jobs;
    sqz_batch ra_batch;      /* in flight until sqz_pool_done */

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

static uint64_t nblocks_of(const sqz_file *f, uint64_t len)
{
    return (len + f->bs - 1) >> f->log2bs;
}

static void count_decompress(sqz_engine *e, ssize_t got, size_t stored)
{
    if (got >= 0 && stored > 0) {
        atomic_fetch_add(&e->st.blocks_decompressed, 1);
        atomic_fetch_add(&e->st.bytes_decompressed, (uint64_t)got);
        atomic_fetch_add(&e->st.backing_bytes_read, stored);
    }
}

/* Index of idx in v[0..n) (sorted by idx), or where it would be inserted.
 * Serves the dirty array and every in-flight batch. */
static size_t cblock_pos(sqz_cblock *const *v, size_t n, uint64_t idx)
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
static size_t dirty_pos(const sqz_file *f, uint64_t idx)
{
    return cblock_pos(f->dirty, f->ndirty, idx);
}

static sqz_cblock *dirty_find(const sqz_file *f, uint64_t idx)
{
    size_t i = dirty_pos(f, idx);
    return i < f->ndirty && f->dirty[i]->idx == idx ? f->dirty[i] : NULL;
}

static int dirty_insert(sqz_file *f, sqz_cblock *b)
{
    if (f->ndirty == f->capdirty) {
        size_t cap = f->capdirty ? f->capdirty * 2 : 16;
        sqz_cblock **nd = realloc(f->dirty, cap * sizeof *nd);
        if (!nd)
            return -ENOMEM;
        f->dirty = nd;
        f->capdirty = cap;
    }
    size_t i = dirty_pos(f, b->idx);
    memmove(f->dirty + i + 1, f->dirty + i, (f->ndirty - i) * sizeof *f->dirty);
    f->dirty[i] = b;
    f->ndirty++;
    f->dirty_bytes += f->bs;
    atomic_fetch_add(&f->e->dirty_total, f->bs);
    if (atomic_load(&f->link.dirty_since) == 0)
        atomic_store(&f->link.dirty_since, sqz_engine_now_ms());
    return 0;
}

static void mark_length_dirty(sqz_file *f)
{
    if (atomic_load(&f->link.dirty_since) == 0)
        atomic_store(&f->link.dirty_since, sqz_engine_now_ms());
}

/* Fill out[bs] with the current content of block idx, which is not dirty
 * (cache, else decompress). Does not insert into the cache. 0 or -EIO. */
static int load_clean_block(sqz_file *f, uint64_t idx, unsigned char *out)
{
    sqz_engine *e = f->e;
    if ((idx << f->log2bs) >= f->committed_len) {
        memset(out, 0, f->bs);
        return 0;
    }
    sqz_cblock *cb = sqz_cache_get(e->cache, f->fid, idx);
    if (cb) {
        atomic_fetch_add(&e->st.cache_hits, 1);
        memcpy(out, cb->data, f->bs);
        sqz_cblock_put(cb);
        return 0;
    }
    atomic_fetch_add(&e->st.cache_misses, 1);
    size_t stored = 0;
    ssize_t got = sqz_ctr_read_block(f->c, idx, out, &stored);
    if (got < 0)
        return (int)got;
    count_decompress(e, got, stored);
    return 0;
}

/* ---- single-flight decompression ---- */

/* Single flight needs a cache that can hold a block (both are constant). */
static int load_shared(const sqz_file *f)
{
    return sqz_cache_capacity(f->e->cache) >= f->bs;
}

/* Claim block idx for decompression. 1: the caller decompresses it and
 * then calls load_done; 0: another thread is at it (load_wait, then look
 * in the cache). Without a cache that can keep the block there is nothing
 * to share: always 1. */
static int load_claim(sqz_file *f, uint64_t idx)
{
    if (!load_shared(f))
        return 1;
    pthread_mutex_lock(&f->ld_mu);
    for (size_t i = 0; i < f->nloading; i++)
        if (f->loading[i] == idx) {
            pthread_mutex_unlock(&f->ld_mu);
            return 0;
        }
    if (f->nloading == f->caploading) {
        size_t cap = f->caploading ? 2 * f->caploading : 32;
        uint64_t *nl = realloc(f->loading, cap * sizeof *nl);
        if (!nl) { /* unrecorded claim: at worst duplicate work */
            pthread_mutex_unlock(&f->ld_mu);
            return 1;
        }
        f->loading = nl;
        f->caploading = cap;
    }
    f->loading[f->nloading++] = idx;
    pthread_mutex_unlock(&f->ld_mu);
    return 1;
}

/* The claimed block idx is in the cache now, or failed. */
static void load_done(sqz_file *f, uint64_t idx)
{
    if (!load_shared(f))
        return;
    pthread_mutex_lock(&f->ld_mu);
    for (size_t i = 0; i < f->nloading; i++)
        if (f->loading[i] == idx) {
            f->loading[i] = f->loading[--f->nloading];
            break;
        }
    pthread_cond_broadcast(&f->ld_cv);
    pthread_mutex_unlock(&f->ld_mu);
}

/* Wait until nobody is decompressing block idx. Loaders never wait for
 * anything but the pool, whose jobs never block, so this returns. */
static void load_wait(sqz_file *f, uint64_t idx)
{
    pthread_mutex_lock(&f->ld_mu);
    for (;;) {
        size_t i = 0;
        while (i < f->nloading && f->loading[i] != idx)
            i++;
        if (i == f->nloading)
            break;
        pthread_cond_wait(&f->ld_cv, &f->ld_mu);
    }
    pthread_mutex_unlock(&f->ld_mu);
}

/* ---- in-flight (background) compression ---- */

/* Newest in-flight version of block idx, or NULL. f->lock held. */
static sqz_cblock *inflight_find(const sqz_file *f, uint64_t idx)
{
    sqz_cblock *found = NULL;
    for (const abatch *a = f->inflight_head; a; a = a->next) {
        size_t lo = cblock_pos(a->blk, a->n, idx);
        if (lo < a->n && a->blk[lo]->idx == idx)
            found = a->blk[lo]; /* later batches are newer */
    }
    return found;
}

/* Fill out[bs] with the current content of block idx, which is not dirty:
 * its newest in-flight version, else the committed one. */
static int load_current_block(sqz_file *f, uint64_t idx, unsigned char *out)
{
    sqz_cblock *b = inflight_find(f, idx);
    if (b) {
        memcpy(out, b->data, f->bs);
        return 0;
    }
    return load_clean_block(f, idx, out);
}

static void prep_job(void *arg)
{
    prep_arg *a = arg;
    uint64_t c0 = atomic_load(&a->f->copies);
    a->rc = sqz_ctr_prepare(a->c, a->b->idx, a->b->data, a->out);
    /* A writer copied data into this file while we compressed. */
    if (atomic_load(&a->f->copies) != c0)
        atomic_fetch_add(&a->f->e->st.compress_overlapped, 1);
}

static void abatch_free(sqz_file *f, abatch *a)
{
    sqz_pool_wait(f->e->pool, &a->batch); /* no job may still use it */
    for (size_t i = 0; i < a->n; i++) {
        if (a->args[i].rc == 0)
            sqz_prepared_free(&a->prep[i]);
        sqz_cblock_put(a->blk[i]);
    }
    free(a->blk);
    free(a->prep);
    free(a->args);
    free(a->jobs);
    free(a);
}

/* Move the dirty blocks with lo <= idx < hi into a new in-flight batch and
 * start compressing them on the pool. f->lock exclusive. On -ENOMEM the
 * blocks simply stay dirty. */
static int submit_range(sqz_file *f, uint64_t lo, uint64_t hi)
{
    size_t i0 = dirty_pos(f, lo), i1 = dirty_pos(f, hi);
    size_t n = i1 - i0;
    if (n == 0)
        return 0;
    abatch *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    a->blk = calloc(n, sizeof *a->blk);
    a->prep = calloc(n, sizeof *a->prep);
    a->args = calloc(n, sizeof *a->args);
    a->jobs = calloc(n, sizeof *a->jobs);
    if (!a->blk || !a->prep || !a->args || !a->jobs) {
        free(a->blk);
        free(a->prep);
        free(a->args);
        free(a->jobs);
        free(a);
        return -ENOMEM;
    }
    a->n = n;
    memcpy(a->blk, f->dirty + i0, n * sizeof *f->dirty);
    memmove(f->dirty + i0, f->dirty + i1, (f->ndirty - i1) * sizeof *f->dirty);
    f->ndirty -= n;
    f->dirty_bytes -= n * f->bs;
    f->inflight_bytes += n * f->bs; /* dirty_total unchanged */
    for (size_t i = 0; i < n; i++) {
        a->args[i] = (prep_arg){.c = f->c, .f = f, .b = a->blk[i],
                                .out = &a->prep[i]};
        a->jobs[i] = (sqz_job){.fn = prep_job, .arg = &a->args[i]};
    }
    sqz_batch_init(&a->batch, a->jobs, n);
    if (f->inflight_tail)
        f->inflight_tail->next = a;
    else
        f->inflight_head = a;
    f->inflight_tail = a;
    sqz_pool_submit(f->e->pool, &a->batch);
    return 0;
}

typedef struct cent {
    uint64_t idx;
    size_t seq;              /* position in submission order */
    sqz_prepared *p;
    sqz_cblock *b;
} cent;

static int cent_cmp(const void *x, const void *y)
{
    const cent *a = x, *b = y;
    if (a->idx != b->idx)
        return a->idx < b->idx ? -1 : 1;
    return a->seq > b->seq ? -1 : a->seq < b->seq; /* newest first */
}

static int is_clean(const sqz_file *f)
{
    return f->ndirty == 0 && !f->inflight_head &&
           f->length == f->committed_len;
}

/* Commit the in-flight batches at the head of the queue that have
 * finished compressing (wait_all: wait for and commit all of them) in one
 * transaction, in order (the newest version of a block wins). The length
 * committed covers the committed blocks (never less than the committed
 * length, never more than the logical length); dirty blocks and later
 * batches stay pending. On failure the batches stay queued (retried by
 * the next commit; reads keep seeing them). f->lock exclusive. */
static int commit_inflight(sqz_file *f, int wait_all)
{
    sqz_engine *e = f->e;
    if (!f->inflight_head)
        return 0;
    size_t nbatch = 0, total = 0;
    abatch *a;
    for (a = f->inflight_head; a; a = a->next) {
        if (wait_all)
            sqz_pool_wait(e->pool, &a->batch);
        else if (!sqz_pool_done(e->pool, &a->batch))
            break;
        nbatch++;
        total += a->n;
    }
    abatch *end = a;
    if (nbatch == 0)
        return 0;

    cent *v = calloc(total, sizeof *v);
    sqz_prepared *p = calloc(total, sizeof *p);
    if (!v || !p) {
        free(v);
        free(p);
        return -ENOMEM;
    }
    int rc = 0;
    size_t k = 0;
    for (a = f->inflight_head; a != end; a = a->next) {
        for (size_t i = 0; i < a->n; i++) {
            if (a->args[i].rc != 0) /* e.g. -ENOMEM: try again here */
                prep_job(&a->args[i]);
            if (a->args[i].rc != 0 && rc == 0)
                rc = a->args[i].rc;
            v[k] = (cent){.idx = a->blk[i]->idx, .seq = k, .p = &a->prep[i],
                          .b = a->blk[i]};
            k++;
        }
    }
    size_t m = 0;
    uint64_t ncomp = 0, nraw = 0, stored = 0, new_len = f->committed_len;
    if (rc == 0) {
        qsort(v, total, sizeof *v, cent_cmp);
        for (size_t i = 0; i < total; i++) {
            if (i > 0 && v[i].idx == v[i - 1].idx)
                continue; /* an older version, superseded */
            v[m] = v[i];
            p[m] = *v[i].p;
            if (p[m].kind != 0)
                ncomp++;
            if (p[m].kind == 2)
                nraw++;
            stored += p[m].stored_len;
            m++;
        }
        uint64_t top = (v[m - 1].idx + 1) << f->log2bs;
        new_len = top < f->length ? top : f->length;
        if (new_len < f->committed_len)
            new_len = f->committed_len;
        rc = sqz_ctr_commit(f->c, p, m, new_len);
    }
    if (rc < 0) {
        free(v);
        free(p);
        return rc;
    }
    atomic_fetch_add(&e->st.blocks_compressed, ncomp);
    atomic_fetch_add(&e->st.bytes_compressed, ncomp * f->bs);
    atomic_fetch_add(&e->st.raw_blocks_stored, nraw);
    atomic_fetch_add(&e->st.backing_bytes_written, stored);
    /* Publish the committed versions (immutable) in the cache. */
    for (size_t i = 0; i < m; i++)
        sqz_cache_insert(e->cache, v[i].b);
    free(v);
    free(p);
    while (f->inflight_head != end) {
        a = f->inflight_head;
        f->inflight_head = a->next;
        abatch_free(f, a);
    }
    if (!f->inflight_head)
        f->inflight_tail = NULL;
    f->inflight_bytes -= total * f->bs;
    atomic_fetch_sub(&e->dirty_total, total * f->bs);
    f->committed_len = new_len;
    if (is_clean(f))
        atomic_store(&f->link.dirty_since, 0);
    return 0;
}

/* ---- commit ---- */

/* Commit the dirty blocks below ceil(new_len/bs) (with `extra`, if given,
 * replacing the dirty block of its index) and the length new_len in one
 * transaction, preparing the blocks in parallel on the pool; in-flight
 * batches are waited for and committed first. On success the committed
 * blocks move into the cache, every dirty buffer is released, cached
 * blocks past the new end are dropped, and length = committed_len =
 * new_len. On failure nothing (more) changes. f->lock exclusive. */
static int commit_locked(sqz_file *f, uint64_t new_len, sqz_cblock *extra)
{
    sqz_engine *e = f->e;
    int irc = commit_inflight(f, 1);
    if (irc < 0)
        return irc;
    uint64_t nb = nblocks_of(f, new_len);
    if (f->ndirty == 0 && !extra && new_len == f->committed_len) {
        f->length = new_len;
        atomic_store(&f->link.dirty_since, 0);
        return 0;
    }

    size_t n = 0;
    for (size_t i = 0; i < f->ndirty; i++)
        if (f->dirty[i]->idx < nb && !(extra && f->dirty[i]->idx == extra->idx))
            n++;
    if (extra)
        n++;

    sqz_prepared *prep = NULL;
    prep_arg *args = NULL;
    sqz_job *jobs = NULL;
    if (n > 0) {
        prep = calloc(n, sizeof *prep);
        args = calloc(n, sizeof *args);
        jobs = calloc(n, sizeof *jobs);
        if (!prep || !args || !jobs) {
            free(prep);
            free(args);
            free(jobs);
            return -ENOMEM;
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < f->ndirty; i++) {
        sqz_cblock *b = f->dirty[i];
        if (b->idx < nb && !(extra && b->idx == extra->idx))
            args[k++].b = b;
    }
    if (extra)
        args[k++].b = extra;
    for (size_t i = 0; i < n; i++) {
        args[i].c = f->c;
        args[i].f = f;
        args[i].out = &prep[i];
        jobs[i].fn = prep_job;
        jobs[i].arg = &args[i];
    }

    int rc = 0;
    if (n == 1) {
        prep_job(&args[0]);
    } else if (n > 1) {
        sqz_batch batch;
        sqz_batch_init(&batch, jobs, n);
        sqz_pool_run(e->pool, &batch);
    }
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = args[i].rc;

    uint64_t ncomp = 0, nraw = 0, stored = 0;
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            if (prep[i].kind != 0)
                ncomp++;
            if (prep[i].kind == 2)
                nraw++;
            stored += prep[i].stored_len;
        }
        rc = sqz_ctr_commit(f->c, prep, n, new_len);
    }
    for (size_t i = 0; i < n; i++)
        if (args[i].rc == 0)
            sqz_prepared_free(&prep[i]);
    free(prep);
    free(args);
    free(jobs);
    if (rc < 0)
        return rc;

    atomic_fetch_add(&e->st.blocks_compressed, ncomp);
    atomic_fetch_add(&e->st.bytes_compressed, ncomp * f->bs);
    atomic_fetch_add(&e->st.raw_blocks_stored, nraw);
    atomic_fetch_add(&e->st.backing_bytes_written, stored);

    /* Drop cached blocks past the new end first, then publish the
     * committed buffers (they are immutable from now on). */
    if (new_len < f->length || new_len < f->committed_len)
        sqz_cache_drop_file(e->cache, f->fid, nb);
    for (size_t i = 0; i < f->ndirty; i++) {
        sqz_cblock *b = f->dirty[i];
        if (b->idx < nb && !(extra && b->idx == extra->idx))
            sqz_cache_insert(e->cache, b);
        sqz_cblock_put(b);
    }
    if (extra)
        sqz_cache_insert(e->cache, extra);
    atomic_fetch_sub(&e->dirty_total, f->dirty_bytes);
    f->ndirty = 0;
    f->dirty_bytes = 0;
    f->length = f->committed_len = new_len;
    atomic_store(&f->link.dirty_since, 0);
    return 0;
}

/* ---- open / close ---- */

static int file_writeback(sqz_file *f, uint64_t cutoff_ms);

int sqz_file_new(sqz_engine *e, sqz_ctr *c, sqz_file **out)
{
    sqz_file *f = calloc(1, sizeof *f);
    if (!f) {
        sqz_ctr_close(c);
        return -ENOMEM;
    }
    f->e = e;
    f->c = c;
    f->fid = atomic_fetch_add(&e->next_fid, 1);
    f->bs = sqz_ctr_block_size(c);
    while (((size_t)1 << f->log2bs) < f->bs)
        f->log2bs++;
    f->length = f->committed_len = sqz_ctr_length(c);
    atomic_init(&f->link.dirty_since, 0);
    f->ra_next_off = UINT64_MAX;
    f->ra_cap = (size_t)e->readahead_blocks;
    sqz_batch_init(&f->ra_batch, NULL, 0);
    int rc = 0;
    if (f->bs == 0 || ((size_t)1 << f->log2bs) != f->bs) {
        rc = -EINVAL;
        goto fail;
    }
    if (f->ra_cap > 0) {
        f->ra_args = calloc(f->ra_cap, sizeof *f->ra_args);
        f->ra_jobs = calloc(f->ra_cap, sizeof *f->ra_jobs);
        if (!f->ra_args || !f->ra_jobs) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    if ((rc = -pthread_rwlock_init(&f->lock, NULL)) < 0)
        goto fail;
    if ((rc = -pthread_mutex_init(&f->ra_mu, NULL)) < 0) {
        pthread_rwlock_destroy(&f->lock);
        goto fail;
    }
    if ((rc = -pthread_mutex_init(&f->ld_mu, NULL)) < 0) {
        pthread_mutex_destroy(&f->ra_mu);
        pthread_rwlock_destroy(&f->lock);
        goto fail;
    }
    if ((rc = -pthread_cond_init(&f->ld_cv, NULL)) < 0) {
        pthread_mutex_destroy(&f->ld_mu);
        pthread_mutex_destroy(&f->ra_mu);
        pthread_rwlock_destroy(&f->lock);
        goto fail;
    }
    f->link.file = f;
    f->link.writeback = file_writeback;
    sqz_engine_attach(e, &f->link);
    *out = f;
    return 0;
fail:
    free(f->ra_args);
    free(f->ra_jobs);
    free(f);
    sqz_ctr_close(c);
    return rc;
}

static int file_close(sqz_file *f, sqz_ctr **keep);

int sqz_file_close(sqz_file *f)
{
    return file_close(f, NULL);
}

int sqz_file_close_keep(sqz_file *f, sqz_ctr **keep)
{
    *keep = NULL;
    return file_close(f, keep);
}

/* Commit everything, free the file; the container is closed, or handed to
 * *keep (if not NULL) when everything was committed. */
static int file_close(sqz_file *f, sqz_ctr **keep)
{
    if (!f)
        return 0;
    sqz_engine *e = f->e;
    sqz_engine_detach(e, &f->link);
    sqz_pool_wait(e->pool, &f->ra_batch);

    pthread_rwlock_wrlock(&f->lock);
    int rc = commit_locked(f, f->length, NULL);
    if (rc == 0 && f->bg_err < 0)
        rc = f->bg_err;
    for (size_t i = 0; i < f->ndirty; i++) /* only left after an error */
        sqz_cblock_put(f->dirty[i]);
    atomic_fetch_sub(&e->dirty_total, f->dirty_bytes + f->inflight_bytes);
    while (f->inflight_head) { /* likewise */
        abatch *a = f->inflight_head;
        f->inflight_head = a->next;
        abatch_free(f, a);
    }
    pthread_rwlock_unlock(&f->lock);

    sqz_cache_drop_file(e->cache, f->fid, 0);
    int rc2 = 0;
    if (keep && rc == 0)
        *keep = f->c;
    else
        rc2 = sqz_ctr_close(f->c);
    pthread_cond_destroy(&f->ld_cv);
    pthread_mutex_destroy(&f->ld_mu);
    free(f->loading);
    pthread_mutex_destroy(&f->ra_mu);
    pthread_rwlock_destroy(&f->lock);
    free(f->dirty);
    free(f->ra_args);
    free(f->ra_jobs);
    free(f);
    return rc < 0 ? rc : rc2;
}

/* ---- read ---- */

/* Read-ahead job: decompress one block into the cache. Best effort: it
 * never blocks on the file lock (a writer holding it may be waiting for
 * the pool), and skips blocks that are dirty, cached or past the end. */
static void ra_job(void *arg)
{
    ra_arg *a = arg;
    sqz_file *f = a->f;
    sqz_engine *e = f->e;
    if (pthread_rwlock_tryrdlock(&f->lock) != 0)
        return;
    if (a->idx < nblocks_of(f, f->length) && !dirty_find(f, a->idx) &&
        !inflight_find(f, a->idx) &&
        (a->idx << f->log2bs) < f->committed_len &&
        !sqz_cache_contains(e->cache, f->fid, a->idx) &&
        load_claim(f, a->idx)) {
        sqz_cblock *b = NULL;
        /* re-check: a reader may have finished it since */
        if (!sqz_cache_contains(e->cache, f->fid, a->idx))
            b = sqz_cblock_new(f->bs, 0);
        if (b) {
            size_t stored = 0;
            ssize_t got = sqz_ctr_read_block(f->c, a->idx, b->data, &stored);
            if (got >= 0) {
                count_decompress(e, got, stored);
                b->fid = f->fid;
                b->idx = a->idx;
                sqz_cache_insert(e->cache, b);
            }
            sqz_cblock_put(b);
        }
        load_done(f, a->idx);
    }
    pthread_rwlock_unlock(&f->lock);
}

/* Sequential detection after a read of [off, off+got); f->lock held
 * (shared or exclusive). */
static void readahead_after(sqz_file *f, uint64_t off, size_t got)
{
    if (f->ra_cap == 0)
        return;
    pthread_mutex_lock(&f->ra_mu);
    int seq = off == f->ra_next_off;
    f->ra_next_off = off + got;
    if (!seq) {
        f->ra_hi = 0;
    } else if (got > 0 && sqz_pool_done(f->e->pool, &f->ra_batch)) {
        /* Keep between cap/2 and 1.5 cap blocks requested ahead of the
         * reader, issuing a window of cap blocks at a time. */
        uint64_t next = ((off + got - 1) >> f->log2bs) + 1;
        if (f->ra_hi < next)
            f->ra_hi = next;
        uint64_t from = f->ra_hi;
        uint64_t to = from - next < (f->ra_cap + 1) / 2 ? from + f->ra_cap
                                                         : from;
        uint64_t nb = nblocks_of(f, f->committed_len);
        if (to > nb)
            to = nb;
        size_t n = 0;
        for (uint64_t i = from; i < to; i++) {
            if (dirty_find(f, i) || inflight_find(f, i) ||
                sqz_cache_contains(f->e->cache, f->fid, i))
                continue;
            f->ra_args[n].f = f;
            f->ra_args[n].idx = i;
            f->ra_jobs[n].fn = ra_job;
            f->ra_jobs[n].arg = &f->ra_args[n];
            n++;
        }
        if (to > f->ra_hi)
            f->ra_hi = to;
        if (n > 0) {
            sqz_batch_init(&f->ra_batch, f->ra_jobs, n);
            sqz_pool_submit(f->e->pool, &f->ra_batch);
        }
    }
    pthread_mutex_unlock(&f->ra_mu);
}

/* One missing block of a read window. */
typedef struct miss {
    sqz_file *f;
    uint64_t idx;
    sqz_cblock *b;
    ssize_t rc;
    size_t stored;
    size_t w;       /* position in the window */
} miss;

static void miss_job(void *arg)
{
    miss *m = arg;
    m->rc = sqz_ctr_read_block(m->f->c, m->idx, m->b->data, &m->stored);
}

#define READ_WINDOW 16 /* blocks resolved (and decompressed) together */

/* Decompress block idx here and cache it; NULL with *rc < 0 on failure. */
static sqz_cblock *load_block_here(sqz_file *f, uint64_t idx, int *rc)
{
    sqz_cblock *b = sqz_cblock_new(f->bs, 0);
    if (!b) {
        *rc = -ENOMEM;
        return NULL;
    }
    size_t stored = 0;
    ssize_t got = sqz_ctr_read_block(f->c, idx, b->data, &stored);
    if (got < 0) {
        *rc = (int)got;
        sqz_cblock_put(b);
        return NULL;
    }
    count_decompress(f->e, got, stored);
    b->fid = f->fid;
    b->idx = idx;
    sqz_cache_insert(f->e->cache, b);
    return b;
}

ssize_t sqz_file_read(sqz_file *f, void *buf, size_t n, uint64_t off)
{
    sqz_engine *e = f->e;
    unsigned char *out = buf;
    pthread_rwlock_rdlock(&f->lock);
    uint64_t len = f->length;
    if (off >= len || n == 0) {
        readahead_after(f, off, 0);
        pthread_rwlock_unlock(&f->lock);
        return 0;
    }
    if (n > len - off)
        n = (size_t)(len - off);

    size_t done = 0;
    int err = 0;
    while (done < n && !err) {
        /* Resolve a window of blocks: dirty / cached / being decompressed
         * by another thread (waited for) / to decompress here. */
        sqz_cblock *blk[READ_WINDOW];
        int owned[READ_WINDOW]; /* 1: our reference to put */
        int wrc[READ_WINDOW];   /* 0 or the block's error */
        int theirs[READ_WINDOW];/* 1: another thread was decompressing it */
        miss ms[READ_WINDOW];
        sqz_job jobs[READ_WINDOW];
        size_t nmiss = 0, nw = 0, ntheirs = 0;
        uint64_t first = (off + done) >> f->log2bs;
        uint64_t last = (off + n - 1) >> f->log2bs;
        for (uint64_t idx = first; idx <= last && nw < READ_WINDOW; idx++) {
            sqz_cblock *b = dirty_find(f, idx);
            if (!b)
                b = inflight_find(f, idx);
            owned[nw] = 0;
            wrc[nw] = 0;
            theirs[nw] = 0;
            if (!b && (idx << f->log2bs) < f->committed_len) {
                b = sqz_cache_get(e->cache, f->fid, idx);
                if (b) {
                    atomic_fetch_add(&e->st.cache_hits, 1);
                    owned[nw] = 1;
                } else if (!load_claim(f, idx)) {
                    atomic_fetch_add(&e->st.cache_misses, 1);
                    theirs[nw] = 1;
                    ntheirs++;
                } else if ((b = sqz_cache_get(e->cache, f->fid, idx))) {
                    /* finished by another thread since the first look */
                    load_done(f, idx);
                    atomic_fetch_add(&e->st.cache_hits, 1);
                    owned[nw] = 1;
                } else {
                    atomic_fetch_add(&e->st.cache_misses, 1);
                    b = sqz_cblock_new(f->bs, 0);
                    if (!b) {
                        load_done(f, idx);
                        err = -ENOMEM;
                        break;
                    }
                    b->fid = f->fid;
                    b->idx = idx;
                    ms[nmiss] = (miss){.f = f, .idx = idx, .b = b, .w = nw};
                    jobs[nmiss] = (sqz_job){.fn = miss_job, .arg = &ms[nmiss]};
                    nmiss++;
                    owned[nw] = 1;
                }
            }
            blk[nw++] = b; /* NULL: a hole past the committed end, or theirs */
        }
        if (nmiss == 1) {
            miss_job(&ms[0]);
        } else if (nmiss > 1) {
            sqz_batch batch;
            sqz_batch_init(&batch, jobs, nmiss);
            sqz_pool_run(e->pool, &batch);
        }
        for (size_t i = 0; i < nmiss; i++) {
            if (ms[i].rc >= 0) {
                count_decompress(e, ms[i].rc, ms[i].stored);
                sqz_cache_insert(e->cache, ms[i].b);
            } else {
                wrc[ms[i].w] = (int)ms[i].rc;
            }
            load_done(f, ms[i].idx);
        }
        /* Blocks another thread was decompressing: wait, then take them
         * from the cache (or, if that failed or was evicted, load here). */
        for (size_t w = 0; ntheirs > 0 && w < nw; w++) {
            if (!theirs[w])
                continue;
            uint64_t idx = first + w;
            load_wait(f, idx);
            sqz_cblock *b = sqz_cache_get(e->cache, f->fid, idx);
            if (!b)
                b = load_block_here(f, idx, &wrc[w]);
            blk[w] = b;
            owned[w] = b != NULL;
        }
        /* Copy out in order, stopping at the first damaged block. */
        for (size_t w = 0; w < nw; w++) {
            if (wrc[w] < 0 && !err)
                err = wrc[w];
            if (!err) {
                uint64_t pos = off + done;
                size_t boff = (size_t)(pos & (f->bs - 1));
                size_t chunk = f->bs - boff;
                if (chunk > n - done)
                    chunk = n - done;
                if (blk[w])
                    memcpy(out + done, blk[w]->data + boff, chunk);
                else
                    memset(out + done, 0, chunk);
                done += chunk;
            }
            if (owned[w])
                sqz_cblock_put(blk[w]);
        }
    }
    if (!err)
        readahead_after(f, off, done);
    pthread_rwlock_unlock(&f->lock);
    /* A damaged block fails the whole read, even after good blocks: a
     * short read means end of file to FUSE (the kernel would zero-fill the
     * rest of its read-ahead pages and shrink the file). The kernel then
     * retries page by page, so the good blocks stay readable. */
    if (err)
        return err;
    atomic_fetch_add(&e->st.logical_bytes_read, done);
    return (ssize_t)done;
}

/* ---- write ---- */

/* Take (and clear) the error of a background commit. f->lock exclusive. */
static int take_bg_err(sqz_file *f)
{
    int rc = f->bg_err;
    f->bg_err = 0;
    return rc;
}

/* Would making one more block dirty exceed a bound? */
static int over_file_bound(const sqz_file *f)
{
    size_t pending = f->dirty_bytes + f->inflight_bytes;
    return pending > 0 && pending + f->bs > f->e->dirty_bytes_file;
}

static int over_global_bound(const sqz_file *f)
{
    if (f->dirty_bytes + f->inflight_bytes == 0)
        return 0;
    return atomic_load(&f->e->dirty_total) + f->bs > f->e->dirty_bytes_max;
}

/* Make room for one more dirty block. Above the global bound: commit all
 * our data now. Above the per-file bound: hand every dirty block to the
 * background, then wait (on the pool's condition variable, without
 * running jobs here) and commit finished batches until under the bound.
 * f->lock exclusive. */
static int make_room(sqz_file *f)
{
    if (over_global_bound(f))
        return commit_locked(f, f->length, NULL);
    if (!over_file_bound(f))
        return 0;
    int rc = commit_inflight(f, 0);
    if (rc < 0)
        return rc;
    if (over_file_bound(f) && f->ndirty > 0 &&
        submit_range(f, 0, UINT64_MAX) < 0)
        return commit_locked(f, f->length, NULL);
    while (f->inflight_head && over_file_bound(f)) {
        /* Not sqz_pool_wait: a streaming writer must not become an extra
         * compression thread (threads=N is the bound). */
        sqz_pool_wait_done(f->e->pool, &f->inflight_head->batch);
        if ((rc = commit_inflight(f, 0)) < 0)
            return rc;
    }
    return 0;
}

/* Write with f->lock exclusive. Returns bytes written (short if a commit
 * or a load failed after some progress) or a negative errno. Blocks the
 * write fills up to their end start compressing in the background. */
static ssize_t write_locked(sqz_file *f, const void *buf, size_t n,
                           uint64_t off)
{
    sqz_engine *e = f->e;
    const unsigned char *in = buf;
    if (n == 0)
        return 0;
    uint64_t max = sqz_max_length((int)f->log2bs);
    if (off > max || n > max - off)
        return -EFBIG;
    int err = take_bg_err(f);
    if (err < 0)
        return err;
    /* Commit what the pool has finished (cheap: no compression here). */
    if ((err = commit_inflight(f, 0)) < 0)
        return err;
    size_t done = 0;
    while (done < n) {
        uint64_t pos = off + done;
        uint64_t idx = pos >> f->log2bs;
        size_t boff = (size_t)(pos & (f->bs - 1));
        size_t chunk = f->bs - boff;
        if (chunk > n - done)
            chunk = n - done;
        sqz_cblock *b = dirty_find(f, idx);
        if (!b) {
            if ((err = make_room(f)) < 0)
                break;
            int full = boff == 0 && chunk == f->bs;
            b = sqz_cblock_new(f->bs, 0);
            if (!b) {
                err = -ENOMEM;
                break;
            }
            b->fid = f->fid;
            b->idx = idx;
            if (!full && (err = load_current_block(f, idx, b->data)) < 0) {
                sqz_cblock_put(b);
                break;
            }
            if ((err = dirty_insert(f, b)) < 0) {
                sqz_cblock_put(b);
                break;
            }
        }
        memcpy(b->data + boff, in + done, chunk);
        atomic_fetch_add_explicit(&f->copies, 1, memory_order_relaxed);
        done += chunk;
        if (pos + chunk > f->length)
            f->length = pos + chunk;
    }
    /* Blocks written up to their end: compress them in the background. */
    if (done > 0)
        (void)submit_range(f, off >> f->log2bs, (off + done) >> f->log2bs);
    if (done == 0)
        return err;
    atomic_fetch_add(&e->st.logical_bytes_written, done);
    return (ssize_t)done;
}

/* After a write: if all files together are above the dirty bound, commit
 * our own data now (bounded growth) and ask the flusher to drain the
 * others. f->lock exclusive. */
static int enforce_global_bound(sqz_file *f)
{
    sqz_engine *e = f->e;
    if (atomic_load(&e->dirty_total) <= e->dirty_bytes_max)
        return 0;
    int rc = commit_locked(f, f->length, NULL);
    if (atomic_load(&e->dirty_total) > e->dirty_bytes_max)
        sqz_engine_pressure(e);
    return rc;
}

/* The write's result, given the global bound's commit error rc: a write
 * that made progress returns its byte count and the error is kept for the
 * next write, flush, fsync or close (never dropped). f->lock exclusive. */
static ssize_t write_result(sqz_file *f, ssize_t r, int rc)
{
    if (rc >= 0)
        return r;
    if (r <= 0)
        return r < 0 ? r : rc;
    if (f->bg_err == 0)
        f->bg_err = rc;
    return r;
}

ssize_t sqz_file_write(sqz_file *f, const void *buf, size_t n, uint64_t off)
{
    pthread_rwlock_wrlock(&f->lock);
    ssize_t r = write_locked(f, buf, n, off);
    r = write_result(f, r, enforce_global_bound(f));
    pthread_rwlock_unlock(&f->lock);
    return r;
}

ssize_t sqz_file_append(sqz_file *f, const void *buf, size_t n,
                        uint64_t *off_out)
{
    pthread_rwlock_wrlock(&f->lock);
    uint64_t off = f->length;
    ssize_t r = write_locked(f, buf, n, off);
    r = write_result(f, r, enforce_global_bound(f));
    pthread_rwlock_unlock(&f->lock);
    if (off_out)
        *off_out = off;
    return r;
}

/* ---- truncate / flush / fsync ---- */

int sqz_file_truncate(sqz_file *f, uint64_t length)
{
    if (length > sqz_max_length((int)f->log2bs))
        return -EFBIG;
    pthread_rwlock_wrlock(&f->lock);
    int rc = 0;
    if (length >= f->length) {
        /* Grow: dirty buffers and committed blocks are zero past the old
         * length already; the new length goes with the next commit. */
        if (length > f->length) {
            f->length = length;
            mark_length_dirty(f);
        }
        pthread_rwlock_unlock(&f->lock);
        return 0;
    }
    /* Shrink: commit in-flight work first (the truncate is newer), then
     * commit, passing the new last block with a zero tail. */
    sqz_cblock *extra = NULL;
    if ((rc = commit_inflight(f, 1)) < 0)
        goto out;
    size_t tail = (size_t)(length & (f->bs - 1));
    if (tail) {
        uint64_t t = length >> f->log2bs;
        extra = sqz_cblock_new(f->bs, 0);
        if (!extra) {
            rc = -ENOMEM;
            goto out;
        }
        extra->fid = f->fid;
        extra->idx = t;
        sqz_cblock *d = dirty_find(f, t);
        if (d)
            memcpy(extra->data, d->data, f->bs);
        else if ((rc = load_clean_block(f, t, extra->data)) < 0)
            goto out;
        memset(extra->data + tail, 0, f->bs - tail);
    }
    rc = commit_locked(f, length, extra);
out:
    sqz_cblock_put(extra);
    pthread_rwlock_unlock(&f->lock);
    return rc;
}

int sqz_file_flush(sqz_file *f)
{
    pthread_rwlock_wrlock(&f->lock);
    int rc = commit_locked(f, f->length, NULL);
    int bg = take_bg_err(f);
    if (rc == 0)
        rc = bg;
    pthread_rwlock_unlock(&f->lock);
    return rc;
}

int sqz_file_fsync(sqz_file *f, int datasync)
{
    int rc = sqz_file_flush(f);
    if (rc < 0)
        return rc;
    /* Outside the file lock: readers and writers proceed during the sync;
     * everything committed before it is made durable. */
    return sqz_ctr_sync(f->c, datasync);
}

/* The flusher's callback (sqz_file_link.writeback). */
static int file_writeback(sqz_file *f, uint64_t cutoff_ms)
{
    pthread_rwlock_wrlock(&f->lock);
    int rc = 0;
    uint64_t since = atomic_load(&f->link.dirty_since);
    if (since != 0 && since <= cutoff_ms)
        rc = commit_locked(f, f->length, NULL);
    if (rc < 0 && f->bg_err == 0)
        f->bg_err = rc; /* reported by the next write/flush/fsync/close */
    pthread_rwlock_unlock(&f->lock);
    return rc;
}

/* ---- queries ---- */

uint64_t sqz_file_length(sqz_file *f)
{
    pthread_rwlock_rdlock(&f->lock);
    uint64_t len = f->length;
    pthread_rwlock_unlock(&f->lock);
    return len;
}

int sqz_file_stat(sqz_file *f, struct sqz_ctr_stat *st)
{
    pthread_rwlock_rdlock(&f->lock);
    int rc = sqz_ctr_stat(f->c, st);
    if (rc == 0) {
        st->length = f->length;
        st->blocks = nblocks_of(f, f->length);
    }
    pthread_rwlock_unlock(&f->lock);
    return rc;
}

sqz_ctr *sqz_file_ctr(sqz_file *f)
{
    return f->c;
}

int sqz_file_dirty(sqz_file *f)
{
    pthread_rwlock_rdlock(&f->lock);
    int d = !is_clean(f);
    pthread_rwlock_unlock(&f->lock);
    return d;
}

void sqz_file_drop_cache(sqz_file *f)
{
    /* Exclusive, so no reader re-inserts a block read before the drop. */
    pthread_rwlock_wrlock(&f->lock);
    sqz_cache_drop_file(f->e->cache, f->fid, 0);
    pthread_rwlock_unlock(&f->lock);
}
