/* SEEK_DATA / SEEK_HOLE of an engine file, at block granularity: a block
 * is a hole if its newest version (dirty, else in flight, else committed)
 * is all zeros (a committed all-zero block is stored as a hole, and so a
 * dirty one will be), data otherwise; blocks past the length are holes.
 * Invariants: file_int.h. */
#include "engine/file_int.h"
#include "common/lockorder.h"

#include <errno.h>

static int all_zero(const unsigned char *p, size_t n)
{
    static const unsigned char zero[256];
    while (n >= sizeof zero) {
        if (memcmp(p, zero, sizeof zero))
            return 0;
        p += sizeof zero;
        n -= sizeof zero;
    }
    return memcmp(p, zero, n) == 0;
}

/* Block idx's newest uncommitted version: -1 none, 0 all zeros, 1 data. */
static int pending_state(const sqz_file *f, uint64_t idx)
{
    sqz_cblock *b = dirty_find(f, idx);
    if (!b)
        b = inflight_find(f, idx);
    if (!b)
        return -1;
    return !all_zero(b->data, f->bs);
}

/* The first block >= from with an uncommitted version (UINT64_MAX: none). */
static uint64_t next_pending(const sqz_file *f, uint64_t from)
{
    uint64_t best = UINT64_MAX;
    size_t i = dirty_pos(f, from);
    if (i < f->ndirty)
        best = f->dirty[i]->idx;
    for (const abatch *a = f->inflight_head; a; a = a->next) {
        size_t j = cblock_pos(a->blk, a->n, from);
        if (j < a->n && a->blk[j]->idx < best)
            best = a->blk[j]->idx;
    }
    return best;
}

int sqz_file_seek(sqz_file *f, uint64_t off, int hole, uint64_t *out)
{
    SQZ_RDLOCK(&f->lock, SQZ_RANK_FILE);
    uint64_t len = f->length;
    int rc = 0;
    if (off >= len) {
        rc = -ENXIO;
        goto out;
    }
    uint64_t nb = nblocks_of(f, len);
    uint64_t b = off >> f->log2bs;
    while (b < nb) {
        int s = pending_state(f, b);
        if (s >= 0) {
            if (s == !hole)
                break;
            b++;
            continue;
        }
        /* committed: the container's index (blocks at and past the
         * committed length are not in it: holes) */
        uint64_t c = sqz_ctr_next_block(f->c, b, !hole);
        if (c == b)
            break;
        uint64_t p = next_pending(f, b + 1);
        b = c < p ? c : p;
    }
    if (b >= nb) {
        if (!hole)
            rc = -ENXIO;
        else
            *out = len; /* the end of the file is a hole */
        goto out;
    }
    uint64_t at = b << f->log2bs;
    *out = at > off ? at : off;
out:
    SQZ_RWUNLOCK(&f->lock);
    return rc;
}
