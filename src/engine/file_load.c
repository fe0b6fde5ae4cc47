/* Loading committed blocks into the cache: single flight (one thread
 * decompresses a block, the others wait for it), runs of consecutive
 * blocks read from the backing file with one read and decompressed in
 * parallel on the pool, and the read-ahead of a sequential reader.
 * Invariants: file_int.h. */
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

/* Read-ahead job: load the blocks [idx, idx + n) into the cache (one
 * backing read where they are stored together). Best effort: it never
 * blocks on the file lock (a writer holding it may be waiting for the
 * pool), and skips blocks that are dirty, in flight, cached, being loaded
 * by another thread or past the committed end. */
static void ra_job(void *arg)
{
    ra_arg *a = arg;
    sqz_file *f = a->f;
    sqz_engine *e = f->e;
    if (SQZ_TRYRDLOCK(&f->lock, SQZ_RANK_FILE) != 0)
        return;
    sqz_load *ms = calloc(a->n, sizeof *ms);
    size_t n = 0;
    uint64_t nb = nblocks_of(f, f->committed_len);
    for (uint64_t idx = a->idx; ms && idx < a->idx + a->n && idx < nb; idx++) {
        if (dirty_find(f, idx) || inflight_find(f, idx) ||
            sqz_cache_contains(e->cache, f->fid, idx) ||
            !sqz_load_claim(f, idx))
            continue;
        sqz_cblock *b = NULL;
        /* re-check: a reader may have finished it since */
        if (!sqz_cache_contains(e->cache, f->fid, idx))
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
    SQZ_RWUNLOCK(&f->lock);
}

void sqz_readahead_after(sqz_file *f, uint64_t off, size_t got)
{
    SQZ_ASSERT_HELD(&f->lock);
    if (f->ra_cap == 0)
        return;
    SQZ_MUTEX_LOCK(&f->ra_mu, SQZ_RANK_FILE_RA);
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
        size_t nj = 0;
        for (uint64_t i = from; i < to; i++) {
            if (dirty_find(f, i) || inflight_find(f, i) ||
                sqz_cache_contains(f->e->cache, f->fid, i))
                continue;
            /* consecutive blocks to load: one job, one backing read */
            if (nj > 0 && f->ra_args[nj - 1].idx + f->ra_args[nj - 1].n == i &&
                f->ra_args[nj - 1].n < SQZ_RUN_MAX_BLOCKS) {
                f->ra_args[nj - 1].n++;
                continue;
            }
            f->ra_args[nj] = (ra_arg){.f = f, .idx = i, .n = 1};
            f->ra_jobs[nj] = (sqz_job){.fn = ra_job, .arg = &f->ra_args[nj]};
            nj++;
        }
        if (to > f->ra_hi)
            f->ra_hi = to;
        if (nj > 0) {
            sqz_batch_init(&f->ra_batch, f->ra_jobs, nj);
            sqz_pool_submit(f->e->pool, &f->ra_batch);
        }
    }
    SQZ_MUTEX_UNLOCK(&f->ra_mu);
}
