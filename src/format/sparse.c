/* Holes and stored blocks as such: where the next stored block or hole of
 * a container is (SEEK_DATA / SEEK_HOLE), releasing the space of blocks
 * made holes (a punch), and a block's stored bytes copied as they are
 * into another container of the same coding (copy_file_range). */
#include <errno.h>
#include <stdlib.h>

#include "format/format_int.h"
#include "common/errbuf.h"
#include "common/lockorder.h"

/* Dead bytes below which a punch leaves reclaiming to the next checkpoint
 * (sqz_ctr_reclaim). */
#define SQZ_RECLAIM_MIN_DEAD (64u << 10)

uint64_t sqz_ctr_next_block(sqz_ctr *c, uint64_t from, int data)
{
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    uint64_t r = sqz_index_next(&c->st.ix, from, data);
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

int sqz_ctr_reclaim(sqz_ctr *c)
{
    SQZ_WRLOCK(&c->lock, SQZ_RANK_CTR);
    int r = 0;
    uint64_t q = c->st.ix.record_bytes / 4;
    if (q < SQZ_RECLAIM_MIN_DEAD)
        q = SQZ_RECLAIM_MIN_DEAD;
    if (c->writable && !c->broken && !c->punch_unsupported &&
        !c->hdr_pending && c->st.dead_bytes >= q) {
        r = sqz_ctr_checkpoint_locked(c);
        if (r == 0)
            r = 1;
    }
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

int sqz_ctr_stored_get(sqz_ctr *c, uint64_t idx, uint64_t as_idx,
                       sqz_prepared *out)
{
    memset(out, 0, sizeof *out);
    out->idx = as_idx;
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    int r = 0;
    const sqz_entry *e = NULL;
    if (idx < ((c->st.length + c->bs - 1) >> c->hdr.params.log2bs))
        e = sqz_index_get(&c->st.ix, idx);
    if (!e) {
        out->kind = SQZ_KIND_HOLE;
        goto out;
    }
    out->stored = malloc(e->len ? e->len : 1);
    if (!out->stored) {
        r = -ENOMEM;
        goto out;
    }
    ssize_t got = c->io.pread(c->io.ctx, c->fd, out->stored, e->len,
                              e->off + SQZ_DATA_SKIP);
    if (got < 0 || (size_t)got != e->len ||
        sqz_checksum(out->stored, e->len) != e->crc) {
        sqz_logf(SQZ_LOG_ERR, "%s: block %llu is damaged (%s at offset %llu)",
                 SQZ_LBL(c->label), (unsigned long long)idx,
                 got < 0 ? "read error" : "checksum mismatch",
                 (unsigned long long)e->off);
        free(out->stored);
        out->stored = NULL;
        r = -EIO;
        goto out;
    }
    out->kind = e->kind;
    out->stored_len = e->len;
    out->crc = e->crc;
out:
    SQZ_RWUNLOCK(&c->lock);
    return r;
}
