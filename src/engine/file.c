/* sqz_file: one open container seen through the engine — the file
 * object, open and close, and queries. The read path is in file_read.c,
 * the write path in file_write.c, commits in file_commit.c; struct
 * sqz_file and its invariants in file_int.h. */
#include "engine/file_int.h"
#include "common/lockorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- open / close ---- */

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
    /* Read-ahead only into a cache that can keep a block: without one,
     * every block read ahead would be decompressed again by its reader. */
    f->ra_cap = sqz_cache_capacity(e->cache) >= f->bs
                    ? (size_t)e->readahead_blocks : 0;
    for (int k = 0; k < SQZ_RA_INFLIGHT; k++)
        sqz_batch_init(&f->ra_batch[k], NULL, 0);
    int rc = 0;
    if (f->bs == 0 || ((size_t)1 << f->log2bs) != f->bs) {
        rc = -EINVAL;
        goto fail;
    }
    if (f->ra_cap > 0) {
        /* the window grows from ra_cap to ra_max blocks (file_load.c) */
        size_t mx = (SQZ_RA_MAX_BYTES >> f->log2bs);
        if (mx > SQZ_RA_MAX_BLOCKS)
            mx = SQZ_RA_MAX_BLOCKS;
        /* a small cache would evict what was read ahead before it is
         * read: the window stays within a sixteenth of it */
        size_t cache_mx = (sqz_cache_capacity(e->cache) / 16) >> f->log2bs;
        if (mx > cache_mx)
            mx = cache_mx;
        f->ra_max = mx > f->ra_cap ? mx : f->ra_cap;
        f->ra_win = f->ra_cap;
        f->ra_args = calloc(SQZ_RA_INFLIGHT * f->ra_max, sizeof *f->ra_args);
        f->ra_jobs = calloc(SQZ_RA_INFLIGHT * f->ra_max, sizeof *f->ra_jobs);
        if (!f->ra_args || !f->ra_jobs) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    /* Writers first: glibc's default rwlock prefers readers, and a steady
     * stream of readers (and their read-ahead) starved a writer for
     * minutes in the concurrent read/write test. No path takes f->lock
     * shared twice in one thread (the lock-order checks abort on that), so
     * the non-recursive writer preference cannot deadlock. */
    pthread_rwlockattr_t la;
    if ((rc = -pthread_rwlockattr_init(&la)) < 0)
        goto fail;
    pthread_rwlockattr_setkind_np(&la,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    rc = -pthread_rwlock_init(&f->lock, &la);
    pthread_rwlockattr_destroy(&la);
    if (rc < 0)
        goto fail;
    if ((rc = -sqz_mutex_init(&f->ra_mu)) < 0) {
        pthread_rwlock_destroy(&f->lock);
        goto fail;
    }
    if ((rc = -sqz_mutex_init(&f->ld_mu)) < 0) {
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
    f->link.writeback = sqz_file_writeback;
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
    for (int k = 0; k < SQZ_RA_INFLIGHT; k++)
        sqz_pool_wait(e->pool, &f->ra_batch[k]);

    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    int rc = sqz_file_commit_locked(f, f->length, NULL);
    if (rc == 0 && f->bg_err < 0)
        rc = f->bg_err;
    for (size_t i = 0; i < f->ndirty; i++) /* only left after an error */
        sqz_cblock_put(f->dirty[i]);
    atomic_fetch_sub(&e->dirty_total, f->dirty_bytes + f->inflight_bytes);
    while (f->inflight_head) { /* likewise */
        abatch *a = f->inflight_head;
        f->inflight_head = a->next;
        sqz_file_abatch_free(f, a);
    }
    SQZ_RWUNLOCK(&f->lock);

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

/* A reader's new view of a file another mount changed: nf (fresh, not
 * used yet) takes over the cache entries of old (a read-only view being
 * replaced, no readers: the caller excludes them), except the blocks whose
 * stored form changed, the blocks holding either end of the file (their
 * cached copies are zero past the old length) and the blocks past the new
 * end. So a reader re-reads only what the writer changed. */
#define SQZ_INHERIT_MAX_BLOCKS (1u << 20)
void sqz_file_inherit_cache(sqz_file *nf, sqz_file *old)
{
    sqz_engine *e = nf->e;
    for (int k = 0; k < SQZ_RA_INFLIGHT; k++) /* nothing of old arrives later */
        sqz_pool_wait(e->pool, &old->ra_batch[k]);
    SQZ_RDLOCK(&old->lock, SQZ_RANK_FILE);
    int clean = old->ndirty == 0 && !old->inflight_head;
    uint64_t olen = old->length;
    SQZ_RWUNLOCK(&old->lock);
    if (!clean || nf->log2bs != old->log2bs)
        return; /* old's close drops its entries */
    uint64_t nlen = sqz_file_length(nf);
    uint64_t nb_old = nblocks_of(old, olen);
    uint64_t nb_new = nblocks_of(nf, nlen);
    uint64_t fid = old->fid;
    if (nb_old > SQZ_INHERIT_MAX_BLOCKS)
        return; /* comparing would cost more than re-reading */
    old->fid = atomic_fetch_add(&e->next_fid, 1); /* its close keeps them */
    for (uint64_t idx = 0; idx < nb_old && idx < nb_new; idx++)
        if (!sqz_ctr_block_same(old->c, nf->c, idx))
            sqz_cache_drop(e->cache, fid, idx);
    if (olen > 0)
        sqz_cache_drop(e->cache, fid, (olen - 1) >> old->log2bs);
    if (nlen > 0)
        sqz_cache_drop(e->cache, fid, (nlen - 1) >> nf->log2bs);
    sqz_cache_drop_file(e->cache, fid, nb_new);
    sqz_cache_drop_file(e->cache, nf->fid, 0);
    nf->fid = fid;
}

/* ---- queries ---- */

uint64_t sqz_file_length(sqz_file *f)
{
    SQZ_RDLOCK(&f->lock, SQZ_RANK_FILE);
    uint64_t len = f->length;
    SQZ_RWUNLOCK(&f->lock);
    return len;
}

int sqz_file_stat(sqz_file *f, struct sqz_ctr_stat *st)
{
    SQZ_RDLOCK(&f->lock, SQZ_RANK_FILE);
    int rc = sqz_ctr_stat(f->c, st);
    if (rc == 0) {
        st->length = f->length;
        st->blocks = nblocks_of(f, f->length);
    }
    SQZ_RWUNLOCK(&f->lock);
    return rc;
}

sqz_ctr *sqz_file_ctr(sqz_file *f)
{
    return f->c;
}

int sqz_file_dirty(sqz_file *f)
{
    SQZ_RDLOCK(&f->lock, SQZ_RANK_FILE);
    int d = !is_clean(f);
    SQZ_RWUNLOCK(&f->lock);
    return d;
}

void sqz_file_drop_cache(sqz_file *f)
{
    /* Exclusive, so no reader re-inserts a block read before the drop. */
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    sqz_cache_drop_file(f->e->cache, f->fid, 0);
    SQZ_RWUNLOCK(&f->lock);
}
