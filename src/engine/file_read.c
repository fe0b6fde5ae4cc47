/* The read path of an engine file: a read resolves a window of blocks
 * (dirty, in flight, cached, being decompressed by another thread, or
 * loaded here: file_load.c reads consecutive ones at once and decompresses
 * them in parallel on the pool), then starts the read-ahead of a
 * sequential reader (file_load.c). Invariants: file_int.h. */
#include "engine/file_int.h"
#include "common/lockorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

/* What holes read as in a vector: never written (bss: the zero page). */
static unsigned char zeros[(size_t)1 << SQZ_LOG2BS_MAX];

void sqz_read_vec_release(sqz_read_vec *v)
{
    for (size_t i = 0; i < v->n; i++)
        if (v->ref[i])
            sqz_cblock_put(v->ref[i]);
    free(v->iov);
    free(v->ref);
    free(v->own);
    memset(v, 0, sizeof *v);
}

/* Hand out data[0, len) of block b (NULL: zeros) at position done of the
 * read: a piece referring to b (ref: the caller's reference, passed on)
 * or, for a block that may change (dirty) or none, a copy or the zeros. */
static int vec_add(sqz_read_vec *v, size_t total, size_t done,
                   const unsigned char *data, size_t len, sqz_cblock *ref)
{
    const void *base = data ? data : zeros;
    if (data && !ref) {
        if (!v->own && !(v->own = malloc(total)))
            return -ENOMEM;
        memcpy(v->own + done, data, len);
        base = v->own + done;
    }
    v->iov[v->n].iov_base = (void *)base;
    v->iov[v->n].iov_len = len;
    v->ref[v->n++] = ref;
    return 0;
}

/* The read of sqz_file_read_spill into out, or (out NULL) into the
 * vector v, whose arrays have room for every block of the range. */
static ssize_t read_core(sqz_file *f, unsigned char *out, sqz_read_vec *v,
                         size_t n, uint64_t off, sqz_read_spill *sp)
{
    sqz_engine *e = f->e;
    if (sp)
        sp->n = 0;
    SQZ_RDLOCK(&f->lock, SQZ_RANK_FILE);
    uint64_t len = f->length;
    if (off >= len || n == 0) {
        sqz_readahead_start(f, off, 0);
        SQZ_RWUNLOCK(&f->lock);
        return 0;
    }
    if (n > len - off)
        n = (size_t)(len - off);
    sqz_readahead_start(f, off, n);

    size_t done = 0;
    int err = 0;
    while (done < n && !err) {
        /* Resolve a window of blocks: dirty / cached / being decompressed
         * by another thread (waited for) / to decompress here. */
        sqz_cblock *blk[SQZ_READ_WINDOW];
        int owned[SQZ_READ_WINDOW]; /* 1: our reference to put */
        int wrc[SQZ_READ_WINDOW];   /* 0 or the block's error */
        int theirs[SQZ_READ_WINDOW];/* 1: another thread was decompressing it */
        sqz_load ms[SQZ_READ_WINDOW];
        size_t nmiss = 0, nw = 0, ntheirs = 0;
        uint64_t first = (off + done) >> f->log2bs;
        uint64_t last = (off + n - 1) >> f->log2bs;
        for (uint64_t idx = first; idx <= last && nw < SQZ_READ_WINDOW; idx++) {
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
                } else if (!sqz_load_claim(f, idx)) {
                    atomic_fetch_add(&e->st.cache_misses, 1);
                    theirs[nw] = 1;
                    ntheirs++;
                } else if ((b = sqz_cache_get(e->cache, f->fid, idx))) {
                    /* finished by another thread since the first look */
                    sqz_load_done(f, idx);
                    atomic_fetch_add(&e->st.cache_hits, 1);
                    owned[nw] = 1;
                } else {
                    atomic_fetch_add(&e->st.cache_misses, 1);
                    b = sqz_cblock_new(f->bs, 0);
                    if (!b) {
                        sqz_load_done(f, idx);
                        err = -ENOMEM;
                        break;
                    }
                    b->fid = f->fid;
                    b->idx = idx;
                    ms[nmiss++] = (sqz_load){.f = f, .idx = idx, .b = b,
                                             .w = nw};
                    owned[nw] = 1;
                }
            }
            blk[nw++] = b; /* NULL: a hole past the committed end, or theirs */
        }
        sqz_load_blocks(f, ms, nmiss);
        for (size_t i = 0; i < nmiss; i++) {
            if (ms[i].rc >= 0) {
                count_decompress(e, ms[i].rc, ms[i].stored);
                sqz_cache_insert(e->cache, ms[i].b);
            } else {
                wrc[ms[i].w] = (int)ms[i].rc;
            }
            sqz_load_done(f, ms[i].idx);
        }
        /* Blocks another thread was decompressing: wait, then take them
         * from the cache (or, if that failed or was evicted, load here). */
        for (size_t w = 0; ntheirs > 0 && w < nw; w++) {
            if (!theirs[w])
                continue;
            uint64_t idx = first + w;
            sqz_load_wait(f, idx);
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
                /* owned: from the cache or decompressed here */
                if (blk[w] && owned[w] && (done == 0 || done + chunk == n))
                    spill_keep(f, sp, blk[w], len, chunk);
                if (v) {
                    /* an owned block is immutable: its reference goes
                     * with the piece; dirty and in-flight ones are copied */
                    int rc = vec_add(v, n, done, blk[w] ? blk[w]->data + boff
                                                        : NULL,
                                     chunk, owned[w] ? blk[w] : NULL);
                    if (rc < 0)
                        err = rc;
                    else if (owned[w])
                        owned[w] = 0; /* the vector holds it now */
                } else if (blk[w])
                    memcpy(out + done, blk[w]->data + boff, chunk);
                else
                    memset(out + done, 0, chunk);
                done += chunk;
            }
            if (owned[w])
                sqz_cblock_put(blk[w]);
        }
    }
    SQZ_RWUNLOCK(&f->lock);
    /* A damaged block fails the whole read, even after good blocks: a
     * short read means end of file to FUSE (the kernel would zero-fill the
     * rest of its read-ahead pages and shrink the file). The kernel then
     * retries page by page, so the good blocks stay readable. */
    if (err) {
        if (sp)
            sqz_read_spill_release(sp);
        if (v)
            sqz_read_vec_release(v);
        return err;
    }
    atomic_fetch_add(&e->st.logical_bytes_read, done);
    return (ssize_t)done;
}

ssize_t sqz_file_read(sqz_file *f, void *buf, size_t n, uint64_t off)
{
    return read_core(f, buf, NULL, n, off, NULL);
}

ssize_t sqz_file_read_spill(sqz_file *f, void *buf, size_t n, uint64_t off,
                            sqz_read_spill *sp)
{
    return read_core(f, buf, NULL, n, off, sp);
}

ssize_t sqz_file_read_vec(sqz_file *f, size_t n, uint64_t off,
                          sqz_read_vec *v, sqz_read_spill *sp)
{
    memset(v, 0, sizeof *v);
    if (n == 0)
        return read_core(f, NULL, v, 0, off, sp);
    /* pieces: at most one per block the range touches */
    size_t cap = (size_t)((((off + n - 1) >> f->log2bs) - (off >> f->log2bs)) + 1);
    v->iov = malloc(cap * sizeof *v->iov);
    v->ref = malloc(cap * sizeof *v->ref);
    if (!v->iov || !v->ref) {
        sqz_read_vec_release(v);
        return -ENOMEM;
    }
    ssize_t r = read_core(f, NULL, v, n, off, sp);
    if (r == 0)
        sqz_read_vec_release(v);
    return r;
}
