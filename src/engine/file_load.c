/* Loading committed blocks into the cache: single flight (one thread
 * decompresses a block, the others wait for it), runs of consecutive
 * blocks read from the backing file with one read and decompressed in
 * parallel on the pool, and the read-ahead of a sequential reader, whose
 * window grows while the reader stays sequential. Invariants: file_int.h. */
#include "engine/file_int.h"
#include "common/lockorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- single-flight decompression ---- */

/* Single flight needs a cache that can hold a block (both are constant). */
static int load_shared(const sqz_file *f)
{
    return sqz_cache_capacity(f->e->cache) >= f->bs;
}

int sqz_load_claim(sqz_file *f, uint64_t idx)
{
    if (!load_shared(f))
        return 1;
    SQZ_MUTEX_LOCK(&f->ld_mu, SQZ_RANK_FILE_LOAD);
    for (size_t i = 0; i < f->nloading; i++)
        if (f->loading[i] == idx) {
            SQZ_MUTEX_UNLOCK(&f->ld_mu);
            return 0;
        }
    if (f->nloading == f->caploading) {
        size_t cap = f->caploading ? 2 * f->caploading : 32;
        uint64_t *nl = realloc(f->loading, cap * sizeof *nl);
        if (!nl) { /* unrecorded claim: at worst duplicate work */
            SQZ_MUTEX_UNLOCK(&f->ld_mu);
            return 1;
        }
        f->loading = nl;
        f->caploading = cap;
    }
    f->loading[f->nloading++] = idx;
    SQZ_MUTEX_UNLOCK(&f->ld_mu);
    return 1;
}

void sqz_load_done(sqz_file *f, uint64_t idx)
{
    if (!load_shared(f))
        return;
    SQZ_MUTEX_LOCK(&f->ld_mu, SQZ_RANK_FILE_LOAD);
    for (size_t i = 0; i < f->nloading; i++)
        if (f->loading[i] == idx) {
            f->loading[i] = f->loading[--f->nloading];
            break;
        }
    pthread_cond_broadcast(&f->ld_cv);
    SQZ_MUTEX_UNLOCK(&f->ld_mu);
}

void sqz_load_wait(sqz_file *f, uint64_t idx)
{
    SQZ_MUTEX_LOCK(&f->ld_mu, SQZ_RANK_FILE_LOAD);
    for (;;) {
        size_t i = 0;
        while (i < f->nloading && f->loading[i] != idx)
            i++;
        if (i == f->nloading)
            break;
        pthread_cond_wait(&f->ld_cv, &f->ld_mu);
    }
    SQZ_MUTEX_UNLOCK(&f->ld_mu);
}

/* ---- runs: one backing read for consecutive blocks ---- */

static void load_job(void *arg)
{
    sqz_load *m = arg;
    m->rc = -EAGAIN;
    if (m->run)
        m->rc = sqz_ctr_run_block(m->f->c, m->run, m->ri, m->b->data,
                                  &m->stored);
    if (m->rc == -EAGAIN) /* alone, or its cluster's read failed */
        m->rc = sqz_ctr_read_block(m->f->c, m->idx, m->b->data, &m->stored);
}

void sqz_load_blocks(sqz_file *f, sqz_load *ms, size_t n)
{
    sqz_ctr_run *runs = n > 1 ? malloc(n * sizeof *runs) : NULL;
    sqz_job stackjobs[SQZ_READ_WINDOW];
    sqz_job *jobs = n <= SQZ_READ_WINDOW ? stackjobs
                                         : malloc(n * sizeof *jobs);
    size_t nruns = 0;
    for (size_t i = 0; i < n;) {
        ms[i].run = NULL;
        size_t j = i + 1; /* consecutive blocks ms[i..j) */
        while (runs && j < n && ms[j].idx == ms[j - 1].idx + 1 &&
               j - i < SQZ_RUN_MAX_BLOCKS)
            j++;
        if (j - i > 1 &&
            sqz_ctr_run_read(f->c, ms[i].idx, j - i, SQZ_RUN_MAX_BYTES,
                             &runs[nruns]) == 0) {
            sqz_ctr_run *r = &runs[nruns++];
            for (size_t k = 0; k < r->n; k++) {
                ms[i + k].run = r;
                ms[i + k].ri = k;
            }
            i += r->n;
        } else {
            i++; /* alone, or no memory for the run */
        }
    }
    if (jobs) {
        for (size_t i = 0; i < n; i++)
            jobs[i] = (sqz_job){.fn = load_job, .arg = &ms[i]};
        sqz_pool_run_jobs(f->e->pool, jobs, n);
    } else {
        for (size_t i = 0; i < n; i++)
            load_job(&ms[i]);
    }
    for (size_t i = 0; i < nruns; i++)
        sqz_ctr_run_free(&runs[i]);
    for (size_t i = 0; i < n; i++)
        ms[i].run = NULL;
    if (jobs != stackjobs)
        free(jobs);
    free(runs);
}

/* ---- read-ahead ---- */

/* Read-ahead job: load the blocks [idx, idx + n), which the thread that
 * issued the window claimed for it (so a reader needing one of them waits
 * for this job instead of reading it again), into the cache: one backing
 * read where they are stored together. Best effort: it never blocks on
 * the file lock (a writer holding it may be waiting for the pool), and
 * skips blocks that became dirty, in flight, cached or past the committed
 * end since; every claim is given back. */
static void ra_job(void *arg)
{
    ra_arg *a = arg;
    sqz_file *f = a->f;
    sqz_engine *e = f->e;
    int locked = SQZ_TRYRDLOCK(&f->lock, SQZ_RANK_FILE) == 0;
    sqz_load *ms = locked ? calloc(a->n, sizeof *ms) : NULL;
    size_t n = 0;
    for (uint64_t idx = a->idx; idx < a->idx + a->n; idx++) {
        sqz_cblock *b = NULL;
        if (ms && idx < nblocks_of(f, f->committed_len) &&
            !dirty_find(f, idx) && !inflight_find(f, idx) &&
            !sqz_cache_contains(e->cache, f->fid, idx))
            b = sqz_cblock_new(f->bs, 0);
        if (!b) {
            sqz_load_done(f, idx);
            continue;
        }
        b->fid = f->fid;
        b->idx = idx;
        ms[n++] = (sqz_load){.f = f, .idx = idx, .b = b};
    }
    sqz_load_blocks(f, ms, n);
    for (size_t i = 0; i < n; i++) {
        if (ms[i].rc >= 0) {
            count_decompress(e, ms[i].rc, ms[i].stored);
            sqz_cache_insert(e->cache, ms[i].b);
        }
        sqz_cblock_put(ms[i].b);
        sqz_load_done(f, ms[i].idx);
    }
    free(ms);
    if (locked)
        SQZ_RWUNLOCK(&f->lock);
}

/* A read-ahead batch that is not in flight, or -1. ra_mu held. */
static int ra_free_batch(sqz_file *f)
{
    for (int k = 0; k < SQZ_RA_INFLIGHT; k++)
        if (sqz_pool_done(f->e->pool, &f->ra_batch[k]))
            return k;
    return -1;
}

/* Issue blocks [from, to) not yet loaded as read-ahead batch k: claimed
 * here, consecutive ones as one job. ra_mu and f->lock held. */
static void ra_issue(sqz_file *f, int k, uint64_t from, uint64_t to)
{
    ra_arg *args = f->ra_args + (size_t)k * f->ra_max;
    sqz_job *jobs = f->ra_jobs + (size_t)k * f->ra_max;
    size_t nj = 0;
    for (uint64_t i = from; i < to; i++) {
        if (dirty_find(f, i) || inflight_find(f, i) ||
            sqz_cache_contains(f->e->cache, f->fid, i) || !sqz_load_claim(f, i))
            continue;
        if (nj > 0 && args[nj - 1].idx + args[nj - 1].n == i &&
            args[nj - 1].n < SQZ_RUN_MAX_BLOCKS) {
            args[nj - 1].n++;
            continue;
        }
        args[nj] = (ra_arg){.f = f, .idx = i, .n = 1};
        jobs[nj] = (sqz_job){.fn = ra_job, .arg = &args[nj]};
        nj++;
    }
    if (nj > 0) {
        sqz_batch_init(&f->ra_batch[k], jobs, nj);
        sqz_pool_submit(f->e->pool, &f->ra_batch[k]);
    }
}

void sqz_readahead_start(sqz_file *f, uint64_t off, size_t n)
{
    SQZ_ASSERT_HELD(&f->lock);
    if (f->ra_cap == 0)
        return;
    SQZ_MUTEX_LOCK(&f->ra_mu, SQZ_RANK_FILE_RA);
    int seq = off == f->ra_next_off, k;
    f->ra_next_off = off + n;
    if (!seq) {
        f->ra_hi = 0;
        f->ra_win = f->ra_cap;
        f->ra_last = 0;
    } else if (n > 0 && (k = ra_free_batch(f)) >= 0) {
        /* Issue the next window once the reader has used half of the
         * last one (those before may still be loading: SQZ_RA_INFLIGHT at
         * most); each window is twice the one before (up to ra_max), like
         * the kernel's read-ahead while a reader stays sequential. */
        uint64_t next = ((off + n - 1) >> f->log2bs) + 1;
        if (f->ra_hi < next)
            f->ra_hi = next;
        uint64_t from = f->ra_hi;
        uint64_t thr = f->ra_last ? (f->ra_last + 1) / 2 : 1;
        uint64_t to = from - next < thr ? from + f->ra_win : from;
        uint64_t nb = nblocks_of(f, f->committed_len);
        if (to > nb)
            to = nb;
        if (to > from) {
            ra_issue(f, k, from, to);
            f->ra_last = (size_t)(to - from);
            if (f->ra_win < f->ra_max)
                f->ra_win = 2 * f->ra_win < f->ra_max ? 2 * f->ra_win
                                                      : f->ra_max;
            f->ra_hi = to;
        }
    }
    SQZ_MUTEX_UNLOCK(&f->ra_mu);
}
