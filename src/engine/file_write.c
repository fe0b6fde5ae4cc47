/* The write path of an engine file: write and append (read-modify-write
 * of partial blocks, blocks filled to their end handed to the background),
 * the dirty bounds (make room) and truncate. Invariants: file_int.h. */
#include "engine/file_int.h"
#include "common/lockorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    SQZ_ASSERT_HELD(&f->lock);
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

/* Fill out[bs] with the current content of block idx, which is not dirty:
 * its newest in-flight version, else the committed one. */
static int load_current_block(sqz_file *f, uint64_t idx, unsigned char *out)
{
    SQZ_ASSERT_HELD(&f->lock);
    sqz_cblock *b = inflight_find(f, idx);
    if (b) {
        memcpy(out, b->data, f->bs);
        return 0;
    }
    return load_clean_block(f, idx, out);
}

/* ---- write ---- */

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
    SQZ_ASSERT_EXCL(&f->lock);
    if (over_global_bound(f))
        return sqz_file_commit_locked(f, f->length, NULL);
    if (!over_file_bound(f))
        return 0;
    int rc = sqz_file_commit_inflight(f, 0);
    if (rc < 0)
        return rc;
    if (over_file_bound(f) && f->ndirty > 0 &&
        sqz_file_submit_range(f, 0, UINT64_MAX) < 0)
        return sqz_file_commit_locked(f, f->length, NULL);
    while (f->inflight_head && over_file_bound(f)) {
        /* Not sqz_pool_wait: a streaming writer must not become an extra
         * compression thread (threads=N is the bound). */
        sqz_pool_wait_done(f->e->pool, &f->inflight_head->batch);
        if ((rc = sqz_file_commit_inflight(f, 0)) < 0)
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
    SQZ_ASSERT_EXCL(&f->lock);
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
    if ((err = sqz_file_commit_inflight(f, 0)) < 0)
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
        (void)sqz_file_submit_range(f, off >> f->log2bs, (off + done) >> f->log2bs);
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
    SQZ_ASSERT_EXCL(&f->lock);
    sqz_engine *e = f->e;
    if (atomic_load(&e->dirty_total) <= e->dirty_bytes_max)
        return 0;
    int rc = sqz_file_commit_locked(f, f->length, NULL);
    if (atomic_load(&e->dirty_total) > e->dirty_bytes_max)
        sqz_engine_pressure(e);
    return rc;
}

/* The write's result, given the global bound's commit error rc: a write
 * that made progress returns its byte count and the error is kept for the
 * next write, flush, fsync or close (never dropped). f->lock exclusive. */
static ssize_t write_result(sqz_file *f, ssize_t r, int rc)
{
    SQZ_ASSERT_EXCL(&f->lock);
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
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    ssize_t r = write_locked(f, buf, n, off);
    r = write_result(f, r, enforce_global_bound(f));
    SQZ_RWUNLOCK(&f->lock);
    return r;
}

ssize_t sqz_file_append(sqz_file *f, const void *buf, size_t n,
                        uint64_t *off_out)
{
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    uint64_t off = f->length;
    ssize_t r = write_locked(f, buf, n, off);
    r = write_result(f, r, enforce_global_bound(f));
    SQZ_RWUNLOCK(&f->lock);
    if (off_out)
        *off_out = off;
    return r;
}

/* ---- truncate ---- */

int sqz_file_truncate(sqz_file *f, uint64_t length)
{
    if (length > sqz_max_length((int)f->log2bs))
        return -EFBIG;
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    int rc = 0;
    if (length >= f->length) {
        /* Grow: dirty buffers and committed blocks are zero past the old
         * length already; the new length goes with the next commit. */
        if (length > f->length) {
            f->length = length;
            mark_length_dirty(f);
        }
        SQZ_RWUNLOCK(&f->lock);
        return 0;
    }
    /* Shrink: commit in-flight work first (the truncate is newer), then
     * commit, passing the new last block with a zero tail. */
    sqz_cblock *extra = NULL;
    if ((rc = sqz_file_commit_inflight(f, 1)) < 0)
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
    rc = sqz_file_commit_locked(f, length, extra);
out:
    sqz_cblock_put(extra);
    SQZ_RWUNLOCK(&f->lock);
    return rc;
}

/* ---- zero range / punch ---- */

/* Zero bytes [from, to) of block idx (a partial block) as a write would:
 * in its dirty version, made from its current content. A block whose
 * current content is a committed hole needs nothing. f->lock exclusive
 * (make_room may have put dirty blocks in flight). */
static int zero_part(sqz_file *f, uint64_t idx, size_t from, size_t to)
{
    SQZ_ASSERT_EXCL(&f->lock);
    sqz_cblock *b = dirty_find(f, idx);
    if (!b) {
        if (!inflight_find(f, idx) &&
            ((idx << f->log2bs) >= f->committed_len ||
             sqz_ctr_next_block(f->c, idx, 1) != idx))
            return 0;
        int rc = make_room(f);
        if (rc < 0)
            return rc;
        b = sqz_cblock_new(f->bs, 0);
        if (!b)
            return -ENOMEM;
        b->fid = f->fid;
        b->idx = idx;
        if ((rc = load_current_block(f, idx, b->data)) < 0 ||
            (rc = dirty_insert(f, b)) < 0) {
            sqz_cblock_put(b);
            return rc;
        }
    }
    memset(b->data + from, 0, to - from);
    atomic_fetch_add_explicit(&f->copies, 1, memory_order_relaxed);
    return 0;
}

void sqz_file_drop_dirty(sqz_file *f, uint64_t lo, uint64_t hi)
{
    SQZ_ASSERT_EXCL(&f->lock);
    size_t i0 = dirty_pos(f, lo), i1 = dirty_pos(f, hi);
    if (i1 <= i0)
        return;
    for (size_t i = i0; i < i1; i++)
        sqz_cblock_put(f->dirty[i]);
    memmove(f->dirty + i0, f->dirty + i1, (f->ndirty - i1) * sizeof *f->dirty);
    f->ndirty -= i1 - i0;
    f->dirty_bytes -= (i1 - i0) * f->bs;
    atomic_fetch_sub(&f->e->dirty_total, (i1 - i0) * f->bs);
}

/* Most hole entries per COMMIT of a punch (a crash keeps a prefix of the
 * punch's commits, as it keeps a prefix of a long write's). */
#define PUNCH_BATCH 65536u

/* Blocks [fb, lb) become holes: their dirty versions are dropped and the
 * committed ones replaced by hole entries. f->lock exclusive, none of them
 * in flight. */
static int punch_blocks(sqz_file *f, uint64_t fb, uint64_t lb)
{
    SQZ_ASSERT_EXCL(&f->lock);
    sqz_engine *e = f->e;
    sqz_file_drop_dirty(f, fb, lb);
    sqz_prepared *p = NULL;
    int rc = 0;
    uint64_t at = fb;
    for (;;) {
        size_t n = 0;
        while (n < PUNCH_BATCH) {
            at = sqz_ctr_next_block(f->c, at, 1);
            if (at >= lb)
                break;
            if (!p && !(p = calloc(PUNCH_BATCH, sizeof *p)))
                return -ENOMEM;
            p[n++] = (sqz_prepared){.idx = at, .kind = 0};
            at++;
        }
        if (n == 0)
            break;
        if ((rc = sqz_ctr_commit(f->c, p, n, f->committed_len)) < 0)
            break;
        for (size_t i = 0; i < n; i++)
            sqz_cache_drop(e->cache, f->fid, p[i].idx);
        if (at >= lb)
            break;
    }
    free(p);
    if (rc == 0 && is_clean(f))
        atomic_store(&f->link.dirty_since, 0);
    return rc;
}

int sqz_file_zero_range(sqz_file *f, uint64_t off, uint64_t len,
                        int keep_size)
{
    uint64_t max = sqz_max_length((int)f->log2bs);
    if (off > max || len > max - off)
        return -EFBIG;
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    int rc = take_bg_err(f);
    /* in-flight versions are older than the zeros: committed first */
    if (rc == 0)
        rc = sqz_file_commit_inflight(f, 1);
    uint64_t end = off + len;
    /* past the length the file reads as zeros already */
    uint64_t zend = end < f->length ? end : f->length;
    int punched = 0;
    if (rc == 0 && off < zend) {
        uint64_t fb = (off + f->bs - 1) >> f->log2bs, lb = zend >> f->log2bs;
        size_t mask = f->bs - 1;
        if (fb > lb) { /* within one block */
            rc = zero_part(f, lb, off & mask, zend & mask);
        } else {
            /* the whole blocks first, with nothing of them in flight (a
             * partial block's make_room may put dirty blocks in flight) */
            if (fb < lb) {
                rc = punch_blocks(f, fb, lb);
                punched = rc == 0;
            }
            if (rc == 0 && (off & mask))
                rc = zero_part(f, fb - 1, off & mask, f->bs);
            if (rc == 0 && (zend & mask))
                rc = zero_part(f, lb, 0, zend & mask);
        }
    }
    if (rc == 0 && !keep_size && end > f->length) {
        f->length = end;
        mark_length_dirty(f);
    }
    SQZ_RWUNLOCK(&f->lock);
    if (rc == 0 && punched) {
        int r = sqz_ctr_reclaim(f->c);
        if (r < 0)
            sqz_logf(SQZ_LOG_WARN, "punch: reclaiming the space failed: %s",
                     strerror(-r));
    }
    return rc;
}
