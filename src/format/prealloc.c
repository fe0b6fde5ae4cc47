/* Log space written ahead as zeros (docs/FORMAT.md "Preallocated log
 * space"). A commit appends records, so every commit grows the backing
 * file, and an fdatasync after a size change must commit the backing file
 * system's journal too: on ext4 a commit of a few KiB plus fdatasync took
 * 565 us appending and 172 us writing into space already in the file
 * (tools/bench_db.py, docs/BENCHMARKS.md). A container that its user syncs
 * often with little appended in between (a database's WAL, SQLite) gets
 * its log end extended in steps of SQZ_PREALLOC_CHUNK bytes of written
 * zeros: the records land inside the file, and only one sync per step pays
 * for a size change.
 *
 * Invariant: the bytes [c->end, c->phys_end) of the backing file are
 * zeros. Replay stops at the first zero record header, so such a tail is
 * the end of the log; an all-zero tail is not a torn or uncommitted one.
 * The last close cuts it off. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/lockorder.h"
#include "format/format_int.h"

#define ZERO_BUF (64u << 10)
static const uint8_t zeros[ZERO_BUF];

/* Written-ahead step beyond what a commit needs. */
#define SQZ_PREALLOC_CHUNK (256u << 10)
/* A tail found at open is checked for zeros only up to this size. */
#define SQZ_ZERO_TAIL_MAX (16u << 20)

int sqz_ctr_tail_is_zero(const sqz_io *io, int fd, uint64_t from, uint64_t to)
{
    if (to <= from)
        return 1;
    if (to - from > SQZ_ZERO_TAIL_MAX)
        return 0;
    uint8_t *buf = malloc(ZERO_BUF);
    if (!buf)
        return 0;
    int zero = 1;
    for (uint64_t off = from; zero && off < to;) {
        size_t n = to - off < ZERO_BUF ? (size_t)(to - off) : ZERO_BUF;
        ssize_t got = io->pread(io->ctx, fd, buf, n, off);
        if (got != (ssize_t)n || memcmp(buf, zeros, n) != 0)
            zero = 0;
        off += n;
    }
    free(buf);
    return zero;
}

int sqz_ctr_room(sqz_ctr *c, uint64_t need)
{
    if (!c->prealloc_ok && c->phys_end > c->end) {
        /* zeros kept from an earlier open, not allowed now: every commit
         * must change the size again (sqz_ctr_allow_prealloc) */
        int r = c->io.truncate(c->io.ctx, c->fd, c->end);
        if (r < 0)
            return r;
        c->phys_end = c->end;
    }
    if (!c->prealloc || c->hdr_pending || c->end + need <= c->phys_end)
        return 0;
    uint64_t from = c->phys_end > c->end ? c->phys_end : c->end;
    uint64_t to = (c->end + need + SQZ_PREALLOC_CHUNK + 4095) & ~(uint64_t)4095;
    for (uint64_t off = from; off < to;) {
        size_t n = to - off < ZERO_BUF ? (size_t)(to - off) : ZERO_BUF;
        int r = c->io.pwrite(c->io.ctx, c->fd, zeros, n, off);
        if (r < 0) {
            /* no room ahead (a full disk): take the zeros back and append
             * as without preallocation; the append reports its own error */
            if (c->io.truncate(c->io.ctx, c->fd, from) < 0) {
                c->broken = 1;
                return r;
            }
            c->phys_end = from;
            c->prealloc = 0;
            return 0;
        }
        off += n;
    }
    c->phys_end = to;
    return 0;
}

void sqz_ctr_appended(sqz_ctr *c)
{
    if (c->phys_end < c->end)
        c->phys_end = c->end;
}

void sqz_ctr_allow_prealloc(sqz_ctr *c, int allow)
{
    SQZ_WRLOCK(&c->lock, SQZ_RANK_CTR);
    c->prealloc_ok = allow != 0;
    if (!c->prealloc_ok)
        c->prealloc = 0;
    SQZ_RWUNLOCK(&c->lock);
}

void sqz_ctr_synced(sqz_ctr *c)
{
    /* little appended since the previous sync: the next syncs would each
     * pay for a size change, so write ahead from now on; a large batch
     * between syncs pays for one anyway */
    c->prealloc = c->prealloc_ok && c->end - c->end_at_sync <= SQZ_PREALLOC_CHUNK;
    c->end_at_sync = c->end;
}

int sqz_ctr_trim(sqz_ctr *c)
{
    if (!c->writable || c->broken || c->hdr_pending || c->phys_end <= c->end)
        return 0;
    int r = c->io.truncate(c->io.ctx, c->fd, c->end);
    if (r == 0)
        c->phys_end = c->end;
    return r;
}
