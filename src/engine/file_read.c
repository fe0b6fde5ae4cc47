/* The read path of an engine file: a read resolves a window of blocks
 * (dirty, in flight, cached, being decompressed by another thread, or
 * decompressed here in parallel on the pool), with single-flight loading
 * and sequential read-ahead. Invariants: file_int.h. */
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

/* Claim block idx for decompression. 1: the caller decompresses it and
 * then calls load_done; 0: another thread is at it (load_wait, then look
 * in the cache). Without a cache that can keep the block there is nothing
 * to share: always 1. */
static int load_claim(sqz_file *f, uint64_t idx)
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

/* The claimed block idx is in the cache now, or failed. */
static void load_done(sqz_file *f, uint64_t idx)
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

/* Wait until nobody is decompressing block idx. Loaders never wait for
 * anything but the pool, whose jobs never block, so this returns. */
static void load_wait(sqz_file *f, uint64_t idx)
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

/* ---- read-ahead ---- */

/* Read-ahead job: decompress one block into the cache. Best effort: it
 * never blocks on the file lock (a writer holding it may be waiting for
 * the pool), and skips blocks that are dirty, cached or past the end. */
static void ra_job(void *arg)
{
    ra_arg *a = arg;
    sqz_file *f = a->f;
    sqz_engine *e = f->e;
    if (SQZ_TRYRDLOCK(&f->lock, SQZ_RANK_FILE) != 0)
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
    SQZ_RWUNLOCK(&f->lock);
}

/* Sequential detection after a read of [off, off+got); f->lock held
 * (shared or exclusive). */
static void readahead_after(sqz_file *f, uint64_t off, size_t got)
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
    SQZ_MUTEX_UNLOCK(&f->ra_mu);
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

/* A block the read used only in part: kept (one reference) for the
 * caller's sqz_read_spill. Only committed blocks that came from the cache
 * or were decompressed for this read, never dirty or in-flight ones. */
static void spill_keep(sqz_file *f, sqz_read_spill *sp, sqz_cblock *b,
                       uint64_t len, size_t used)
{
    uint64_t start = b->idx << f->log2bs;
    size_t valid = len - start < f->bs ? (size_t)(len - start) : f->bs;
    if (!sp || used >= valid || sp->n >= SQZ_READ_SPILL_MAX)
        return;
    for (size_t i = 0; i < sp->n; i++)
        if (sp->v[i].off == start)
            return;
    sqz_cblock_ref(b);
    sp->v[sp->n].data = b->data;
    sp->v[sp->n].off = start;
    sp->v[sp->n].len = valid;
    sp->v[sp->n].ref = b;
    sp->n++;
}

void sqz_read_spill_release(sqz_read_spill *sp)
{
    for (size_t i = 0; i < sp->n; i++)
        sqz_cblock_put(sp->v[i].ref);
    sp->n = 0;
}

ssize_t sqz_file_read(sqz_file *f, void *buf, size_t n, uint64_t off)
{
    return sqz_file_read_spill(f, buf, n, off, NULL);
}

ssize_t sqz_file_read_spill(sqz_file *f, void *buf, size_t n, uint64_t off,
                            sqz_read_spill *sp)
{
    sqz_engine *e = f->e;
    if (sp)
        sp->n = 0;
    unsigned char *out = buf;
    SQZ_RDLOCK(&f->lock, SQZ_RANK_FILE);
    uint64_t len = f->length;
    if (off >= len || n == 0) {
        readahead_after(f, off, 0);
        SQZ_RWUNLOCK(&f->lock);
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
        sqz_pool_run_jobs(e->pool, jobs, nmiss);
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
                if (blk[w]) {
                    memcpy(out + done, blk[w]->data + boff, chunk);
                    /* owned: from the cache or decompressed here */
                    if (owned[w] && (done == 0 || done + chunk == n))
                        spill_keep(f, sp, blk[w], len, chunk);
                } else
                    memset(out + done, 0, chunk);
                done += chunk;
            }
            if (owned[w])
                sqz_cblock_put(blk[w]);
        }
    }
    if (!err)
        readahead_after(f, off, done);
    SQZ_RWUNLOCK(&f->lock);
    /* A damaged block fails the whole read, even after good blocks: a
     * short read means end of file to FUSE (the kernel would zero-fill the
     * rest of its read-ahead pages and shrink the file). The kernel then
     * retries page by page, so the good blocks stay readable. */
    if (err) {
        if (sp)
            sqz_read_spill_release(sp);
        return err;
    }
    atomic_fetch_add(&e->st.logical_bytes_read, done);
    return (ssize_t)done;
}
