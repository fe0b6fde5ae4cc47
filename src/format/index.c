/* The in-memory block index: a two-level radix. The top array holds one
 * pointer per chunk of SQZ_CHUNK_ENTRIES blocks; chunks are allocated when
 * their first block is stored and freed when their last one goes; the top
 * array only grows to the highest chunk in use. Absent blocks are holes. */
#include <errno.h>
#include <stdlib.h>

#include "format/format_int.h"

void sqz_index_init(sqz_index *ix)
{
    memset(ix, 0, sizeof *ix);
}

void sqz_index_free(sqz_index *ix)
{
    for (uint64_t i = 0; i < ix->nchunks; i++)
        free(ix->chunks[i]);
    free(ix->chunks);
    free(ix->chunk_used);
    sqz_index_init(ix);
}

const sqz_entry *sqz_index_get(const sqz_index *ix, uint64_t idx)
{
    uint64_t ci = idx >> SQZ_CHUNK_SHIFT;
    if (ci >= ix->nchunks || !ix->chunks[ci])
        return NULL;
    const sqz_entry *e = &ix->chunks[ci][idx & (SQZ_CHUNK_ENTRIES - 1)];
    return e->off ? e : NULL;
}

static uint64_t entry_record_bytes(const sqz_entry *e)
{
    return sqz_rec_size(SQZ_DATA_PREFIX + (uint64_t)e->len);
}

static void account(sqz_index *ix, const sqz_entry *e, int sign)
{
    if (sign > 0) {
        ix->stored_blocks++;
        ix->raw_blocks += e->kind == SQZ_KIND_RAW;
        ix->stored_bytes += e->len;
        ix->record_bytes += entry_record_bytes(e);
    } else {
        ix->stored_blocks--;
        ix->raw_blocks -= e->kind == SQZ_KIND_RAW;
        ix->stored_bytes -= e->len;
        ix->record_bytes -= entry_record_bytes(e);
    }
}

static int grow_top(sqz_index *ix, uint64_t need)
{
    uint64_t n = ix->nchunks ? ix->nchunks : 1;
    while (n < need)
        n *= 2;
    uint64_t maxc = (sqz_max_blocks(SQZ_LOG2BS_MIN) >> SQZ_CHUNK_SHIFT);
    if (n > maxc)
        n = maxc < need ? need : maxc;
    sqz_entry **nc = realloc(ix->chunks, n * sizeof *nc);
    if (!nc)
        return -ENOMEM;
    ix->chunks = nc;
    uint32_t *nu = realloc(ix->chunk_used, n * sizeof *nu);
    if (!nu)
        return -ENOMEM;
    ix->chunk_used = nu;
    for (uint64_t i = ix->nchunks; i < n; i++) {
        nc[i] = NULL;
        nu[i] = 0;
    }
    ix->nchunks = n;
    return 0;
}

int sqz_index_set(sqz_index *ix, uint64_t idx, const sqz_entry *e,
                  uint64_t *replaced)
{
    uint64_t ci = idx >> SQZ_CHUNK_SHIFT;
    sqz_entry *slot = NULL;
    *replaced = 0;
    if (ci < ix->nchunks && ix->chunks[ci])
        slot = &ix->chunks[ci][idx & (SQZ_CHUNK_ENTRIES - 1)];
    if (e->kind == SQZ_KIND_HOLE || e->off == 0) {
        if (slot && slot->off) {
            *replaced = entry_record_bytes(slot);
            account(ix, slot, -1);
            memset(slot, 0, sizeof *slot);
            if (--ix->chunk_used[ci] == 0) {
                free(ix->chunks[ci]);
                ix->chunks[ci] = NULL;
            }
        }
        return 0;
    }
    if (!slot) {
        int r = sqz_index_reserve(ix, idx);
        if (r < 0)
            return r;
        slot = &ix->chunks[ci][idx & (SQZ_CHUNK_ENTRIES - 1)];
    }
    if (slot->off) {
        *replaced = entry_record_bytes(slot);
        account(ix, slot, -1);
    } else {
        ix->chunk_used[ci]++;
    }
    *slot = *e;
    account(ix, slot, 1);
    return 0;
}

int sqz_index_reserve(sqz_index *ix, uint64_t idx)
{
    uint64_t ci = idx >> SQZ_CHUNK_SHIFT;
    if (ci >= ix->nchunks) {
        int r = grow_top(ix, ci + 1);
        if (r < 0)
            return r;
    }
    if (!ix->chunks[ci]) {
        ix->chunks[ci] = calloc(SQZ_CHUNK_ENTRIES, sizeof(sqz_entry));
        if (!ix->chunks[ci])
            return -ENOMEM;
    }
    return 0;
}

uint64_t sqz_index_drop_from(sqz_index *ix, uint64_t first)
{
    uint64_t dropped = 0;
    for (uint64_t ci = first >> SQZ_CHUNK_SHIFT; ci < ix->nchunks; ci++) {
        sqz_entry *ch = ix->chunks[ci];
        if (!ch)
            continue;
        uint64_t base = ci << SQZ_CHUNK_SHIFT;
        for (uint32_t j = 0; j < SQZ_CHUNK_ENTRIES; j++) {
            if (base + j < first || !ch[j].off)
                continue;
            dropped += entry_record_bytes(&ch[j]);
            account(ix, &ch[j], -1);
            memset(&ch[j], 0, sizeof ch[j]);
            ix->chunk_used[ci]--;
        }
        if (ix->chunk_used[ci] == 0) {
            free(ch);
            ix->chunks[ci] = NULL;
        }
    }
    return dropped;
}

int sqz_index_each(const sqz_index *ix,
                   int (*fn)(void *u, uint64_t idx, const sqz_entry *e),
                   void *u)
{
    for (uint64_t ci = 0; ci < ix->nchunks; ci++) {
        const sqz_entry *ch = ix->chunks[ci];
        if (!ch)
            continue;
        for (uint32_t j = 0; j < SQZ_CHUNK_ENTRIES; j++) {
            if (!ch[j].off)
                continue;
            int r = fn(u, (ci << SQZ_CHUNK_SHIFT) + j, &ch[j]);
            if (r)
                return r;
        }
    }
    return 0;
}

uint64_t sqz_index_next(const sqz_index *ix, uint64_t from, int stored)
{
    for (uint64_t ci = from >> SQZ_CHUNK_SHIFT; ci < ix->nchunks; ci++) {
        const sqz_entry *ch = ix->chunks[ci];
        uint64_t base = ci << SQZ_CHUNK_SHIFT;
        uint32_t j0 = base < from ? (uint32_t)(from - base) : 0;
        if (!ch) {
            if (!stored)
                return base + j0;
            continue;
        }
        if (stored ? ix->chunk_used[ci] == 0
                   : ix->chunk_used[ci] == SQZ_CHUNK_ENTRIES)
            continue;
        for (uint32_t j = j0; j < SQZ_CHUNK_ENTRIES; j++)
            if ((ch[j].off != 0) == (stored != 0))
                return base + j;
    }
    if (stored)
        return UINT64_MAX;
    /* past the top array: holes */
    uint64_t top = ix->nchunks << SQZ_CHUNK_SHIFT;
    return from > top ? from : top;
}
