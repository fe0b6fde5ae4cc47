/* Commits of an engine file: blocks filled to their end are compressed
 * in the background as in-flight batches and committed in FIFO order;
 * commit_locked prepares every dirty block in parallel on the pool and
 * commits them with the new length in one transaction. Also flush, fsync
 * and the flusher's write-back callback. Invariants: file_int.h. */
#include "engine/file_int.h"
#include "common/lockorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void prep_job(void *arg)
{
    prep_arg *a = arg;
    uint64_t c0 = atomic_load(&a->f->copies);
    a->rc = a->draft ? sqz_ctr_prepare_draft(a->c, a->b->idx, a->b->data, a->out)
                     : sqz_ctr_prepare(a->c, a->b->idx, a->b->data, a->out);
    /* A writer copied data into this file while we compressed. */
    if (atomic_load(&a->f->copies) != c0)
        atomic_fetch_add(&a->f->e->st.compress_overlapped, 1);
}

void sqz_file_abatch_free(sqz_file *f, abatch *a)
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
int sqz_file_submit_range(sqz_file *f, uint64_t lo, uint64_t hi)
{
    SQZ_ASSERT_EXCL(&f->lock);
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
    a->len = f->length;
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
    uint64_t len;            /* its batch's length at submission */
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

/* Commit the in-flight batches at the head of the queue that have
 * finished compressing (wait_all: wait for and commit all of them) in one
 * transaction, in order (the newest version of a block wins). The length
 * committed covers the committed blocks (never less than the committed
 * length, never more than the logical length); dirty blocks and later
 * batches stay pending. On failure the batches stay queued (retried by
 * the next commit; reads keep seeing them). f->lock exclusive. */
int sqz_file_commit_inflight(sqz_file *f, int wait_all)
{
    SQZ_ASSERT_EXCL(&f->lock);
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
            v[k] = (cent){.idx = a->blk[i]->idx, .seq = k, .len = a->len,
                          .p = &a->prep[i], .b = a->blk[i]};
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
        /* Up to the end of the last block, but no further than that
         * block's version holds data (a partial block written further
         * after its submission is zeros there in this version). */
        uint64_t top = (v[m - 1].idx + 1) << f->log2bs;
        if (top > v[m - 1].len)
            top = v[m - 1].len;
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
        sqz_file_abatch_free(f, a);
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
static int commit_locked(sqz_file *f, uint64_t new_len, sqz_cblock *extra,
                         int draft)
{
    SQZ_ASSERT_EXCL(&f->lock);
    sqz_engine *e = f->e;
    int irc = sqz_file_commit_inflight(f, 1);
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
        args[i].draft = draft;
        jobs[i].fn = prep_job;
        jobs[i].arg = &args[i];
    }

    int rc = 0;
    sqz_pool_run_jobs(e->pool, jobs, n);
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

int sqz_file_commit_locked(sqz_file *f, uint64_t new_len, sqz_cblock *extra)
{
    return commit_locked(f, new_len, extra, 0);
}

/* ---- flush / fsync / write-back ---- */

static int flush(sqz_file *f, uint64_t draft_min, uint64_t draft_max)
{
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    int draft = f->ndirty > 0 && f->length > 0 && f->length >= draft_min &&
                f->length <= draft_max && f->length <= f->bs;
    int rc = commit_locked(f, f->length, NULL, draft);
    if (rc == -ENOSPC && draft) {
        /* the backing file system has room for the compressed block only
         * (a failed commit changed nothing) */
        draft = 0;
        rc = commit_locked(f, f->length, NULL, 0);
    }
    if (rc == 0 && draft)
        atomic_fetch_add(&f->e->st.draft_blocks, 1);
    int bg = take_bg_err(f);
    if (rc == 0)
        rc = bg < 0 ? bg : draft;
    SQZ_RWUNLOCK(&f->lock);
    return rc;
}

int sqz_file_flush(sqz_file *f)
{
    return flush(f, 1, 0);
}

int sqz_file_flush_draft(sqz_file *f, uint64_t min_len, uint64_t max_len)
{
    return flush(f, min_len, max_len);
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

void sqz_file_hint_flush(sqz_file *f, uint64_t end)
{
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    if (end >= f->length && f->ndirty > 0)
        (void)sqz_file_submit_range(f, 0, UINT64_MAX); /* -ENOMEM: stays dirty */
    SQZ_RWUNLOCK(&f->lock);
}

/* The flusher's callback (sqz_file_link.writeback). */
int sqz_file_writeback(sqz_file *f, uint64_t cutoff_ms)
{
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    int rc = 0;
    uint64_t since = atomic_load(&f->link.dirty_since);
    if (since != 0 && since <= cutoff_ms)
        rc = sqz_file_commit_locked(f, f->length, NULL);
    if (rc < 0 && f->bg_err == 0)
        f->bg_err = rc; /* reported by the next write/flush/fsync/close */
    SQZ_RWUNLOCK(&f->lock);
    return rc;
}
