/* Checkpoints and space reclaim: writing a CHECKPOINT record, making it
 * durable, pointing the other anchor slot at it, then punching holes into
 * everything before it that no live block uses. Also sqz_ctr_sync, which
 * writes a checkpoint when enough has been appended since the last one. */
#include <errno.h>
#include <stdlib.h>

#include "format/format_int.h"
#include "common/lockorder.h"

#define SQZ_CKPT_MIN_BYTES (4u << 20)

uint64_t sqz_ckpt_threshold(const sqz_ctr *c)
{
    uint64_t q = c->st.ix.record_bytes / 4;
    return q > SQZ_CKPT_MIN_BYTES ? q : SQZ_CKPT_MIN_BYTES;
}

typedef struct live_range {
    uint64_t off, len;
} live_range;

struct collect {
    live_range *v;
    size_t n;
};

static int collect_live(void *u, uint64_t idx, const sqz_entry *e)
{
    (void)idx;
    struct collect *cl = u;
    cl->v[cl->n].off = e->off;
    cl->v[cl->n].len = sqz_rec_size(SQZ_DATA_PREFIX + (uint64_t)e->len);
    cl->n++;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const live_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Punch [from, to) rounded inward to 4096-byte boundaries. 0, or the error
 * that stops reclaiming. */
static int punch(sqz_ctr *c, uint64_t from, uint64_t to)
{
    uint64_t a = (from + 4095) & ~(uint64_t)4095, b = to & ~(uint64_t)4095;
    if (b <= a)
        return 0;
    return c->io.punch(c->io.ctx, c->fd, a, b - a);
}

/* Release dead space in [log start, limit). Best effort: failures are logged. */
static void reclaim(sqz_ctr *c, uint64_t limit)
{
    if (c->punch_unsupported)
        return;
    struct collect cl = {0};
    if (c->st.ix.stored_blocks) {
        cl.v = malloc(c->st.ix.stored_blocks * sizeof *cl.v);
        if (!cl.v) {
            sqz_logf(SQZ_LOG_WARN, "%s: out of memory while reclaiming space", SQZ_LBL(c->label));
            return;
        }
        sqz_index_each(&c->st.ix, collect_live, &cl);
        qsort(cl.v, cl.n, sizeof *cl.v, by_offset);
    }
    uint64_t cur = sqz_log_start(c->hdr.version);
    int r = 0;
    for (size_t i = 0; i < cl.n && r == 0; i++) {
        if (cl.v[i].off >= limit)
            break;
        if (cl.v[i].off > cur)
            r = punch(c, cur, cl.v[i].off);
        if (cl.v[i].off + cl.v[i].len > cur)
            cur = cl.v[i].off + cl.v[i].len;
    }
    if (r == 0 && cur < limit)
        r = punch(c, cur, limit);
    free(cl.v);
    if (r == -EOPNOTSUPP) {
        c->punch_unsupported = 1;
        sqz_logf(SQZ_LOG_INFO, "%s: the file system cannot punch holes; dead space "
                    "is not reclaimed", SQZ_LBL(c->label));
    } else if (r < 0) {
        sqz_logf(SQZ_LOG_WARN, "%s: reclaiming dead space failed (error %d)", SQZ_LBL(c->label), -r);
    } else {
        c->st.dead_bytes = 0;
    }
}

/* Write anchor slot seq & 1 as a full sector: {seq, the newest checkpoint
 * (or none), durable_end}. No fsync. A torn write damages only this slot. */
static int write_anchor(sqz_ctr *c, uint64_t seq, uint64_t durable_end)
{
    sqz_anchor a = {.seq = seq, .durable_end = durable_end};
    if (c->st.ckpt_off) {
        a.ckpt_off = c->st.ckpt_off;
        a.ckpt_len = c->st.ckpt_end - c->st.ckpt_off;
    }
    unsigned slot = (unsigned)(seq & 1);
    uint8_t sector[512] = {0};
    sqz_anchor_encode(&a, slot, c->hdr.file_id, sector);
    /* every anchor is written for the current end of the log: the length
     * and transaction there make the file's length survive damage to its
     * last commit or checkpoint */
    if (durable_end == c->end)
        sqz_anchor_ext_encode(sector, c->st.length, c->st.txn);
    return c->io.pwrite(c->io.ctx, c->fd, sector, sizeof sector,
                        SQZ_ANCHOR_OFF(slot));
}

void sqz_ctr_header_region(const sqz_ctr *c, uint8_t *out)
{
    memset(out, 0, sqz_log_start(c->hdr.version));
    sqz_header_encode(&c->hdr, out);
}

int sqz_ctr_order_first(sqz_ctr *c)
{
    if (!c->first_unsynced)
        return 0;
    int r = c->io.sync(c->io.ctx, c->fd, 1);
    if (r == 0)
        c->first_unsynced = 0;
    return r;
}

/* A lazily created container that gets a checkpoint before any commit:
 * the header region alone is its first write. */
static int write_pending_header(sqz_ctr *c)
{
    if (!c->hdr_pending)
        return 0;
    uint8_t region[SQZ_LOG_START_V2];
    sqz_ctr_header_region(c, region);
    int r = c->io.pwrite(c->io.ctx, c->fd, region, sizeof region, 0);
    if (r < 0) {
        if (c->io.truncate(c->io.ctx, c->fd, 0) < 0)
            c->broken = 1;
        return r;
    }
    c->hdr_pending = 0;
    c->first_unsynced = 1;
    sqz_ctr_appended(c);
    return 0;
}

int sqz_ctr_checkpoint_locked(sqz_ctr *c)
{
    SQZ_ASSERT_EXCL(&c->lock);
    if (!c->writable)
        return -EROFS;
    if (c->broken)
        return -EIO;
    uint8_t *rec;
    uint64_t len;
    int r = write_pending_header(c);
    if (r == 0)
        r = sqz_ctr_order_first(c);
    if (r < 0)
        return r;
    r = sqz_ckpt_build(&c->st.ix, c->hdr.file_id, c->st.txn, c->st.length,
                           &rec, &len);
    if (r < 0)
        return r;
    uint64_t at = c->end;
    if ((r = sqz_ctr_room(c, len)) < 0) {
        free(rec);
        return r;
    }
    r = c->io.pwrite(c->io.ctx, c->fd, rec, (size_t)len, at);
    free(rec);
    if (r < 0) {
        if (c->io.truncate(c->io.ctx, c->fd, at) < 0)
            c->broken = 1;
        c->phys_end = at;
        return r;
    }
    c->end += len;
    sqz_ctr_appended(c);
    c->since_ckpt = 0;
    /* the checkpoint (and everything before it) must be durable before an
     * anchor points at it; that also makes the last anchor write durable,
     * so the slot written next is the only one a crash can tear */
    if ((r = c->io.sync(c->io.ctx, c->fd, 1)) < 0)
        return r;
    uint64_t prev_off = c->st.ckpt_off, prev_end = c->st.ckpt_end;
    c->st.ckpt_off = at;
    c->st.ckpt_end = at + len;
    if ((r = write_anchor(c, c->st.anchor_seq + 1, c->end)) < 0 ||
        (r = c->io.sync(c->io.ctx, c->fd, 1)) < 0) {
        /* the slot may hold either checkpoint; later anchors (written by
         * sync) point at the old one until a checkpoint succeeds */
        c->st.ckpt_off = prev_off;
        c->st.ckpt_end = prev_end;
        return r;
    }
    c->st.anchor_seq++;
    c->marked_end = c->end;
    if (c->punch_unsupported)
        return 0;
    /* Before space is freed, the other slot must point at this checkpoint
     * too: it may still lead to an older checkpoint or to none (replay from
     * offset 4096), and replaying from there would read punched space. */
    if ((r = write_anchor(c, c->st.anchor_seq + 1, c->end)) < 0 ||
        (r = c->io.sync(c->io.ctx, c->fd, 1)) < 0)
        return r;
    c->st.anchor_seq++;
    reclaim(c, at);
    return 0;
}

int sqz_ctr_checkpoint(sqz_ctr *c)
{
    SQZ_WRLOCK(&c->lock, SQZ_RANK_CTR);
    int r = sqz_ctr_checkpoint_locked(c);
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

/* After a successful fdatasync covering the log up to c->end: record that
 * in the anchor slot not holding the newest anchor (same checkpoint, seq+1),
 * without another flush. The next fdatasync (sync or checkpoint) makes it
 * durable, so the mark lags by at most one sync; a crash tearing this write
 * leaves the other slot intact, and that one was made durable by the
 * fdatasync just done. */
static int mark_durable(sqz_ctr *c)
{
    if (c->end == c->marked_end || c->hdr_pending)
        return 0;
    int r = write_anchor(c, c->st.anchor_seq + 1, c->end);
    if (r < 0) {
        sqz_logf(SQZ_LOG_WARN, "%s: cannot write the durable mark (error %d)", SQZ_LBL(c->label),
                 -r);
        return r;
    }
    c->st.anchor_seq++;
    c->marked_end = c->end;
    return 0;
}

int sqz_ctr_sync(sqz_ctr *c, int datasync)
{
    SQZ_WRLOCK(&c->lock, SQZ_RANK_CTR);
    int r;
    if (!c->writable)
        r = 0;
    else if (c->broken)
        r = -EIO;
    else if (c->hdr_pending) /* nothing written yet: an empty file */
        r = c->io.sync(c->io.ctx, c->fd, datasync);
    else if (c->since_ckpt > sqz_ckpt_threshold(c)) {
        r = sqz_ctr_checkpoint_locked(c); /* fdatasyncs, marks */
        if (r == 0 && !datasync)
            r = c->io.sync(c->io.ctx, c->fd, 0);
        if (r == 0)
            sqz_ctr_synced(c);
    } else {
        r = c->io.sync(c->io.ctx, c->fd, datasync);
        if (r == 0) {
            c->first_unsynced = 0;
            sqz_ctr_synced(c);
            r = mark_durable(c);
        }
    }
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

int sqz_ctr_unmarked(sqz_ctr *c)
{
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    int u = c->writable && !c->broken && !c->hdr_pending &&
            c->end != c->marked_end;
    SQZ_RWUNLOCK(&c->lock);
    return u;
}

int sqz_ctr_mark_begin(sqz_ctr *c, sqz_mark_ticket *t)
{
    memset(t, 0, sizeof *t);
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    int r = 0;
    if (c->broken)
        r = -EIO;
    else if (c->writable && !c->hdr_pending && c->end != c->marked_end) {
        t->end = c->end;
        t->seq = c->st.anchor_seq;
        r = 1;
    }
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

int sqz_ctr_mark_end(sqz_ctr *c, const sqz_mark_ticket *t)
{
    if (t->end == 0)
        return 0;
    SQZ_WRLOCK(&c->lock, SQZ_RANK_CTR);
    int r = 0;
    /* Only for the state the ticket saw: another anchor written since (a
     * sync or checkpoint of a new user) was not covered by the caller's
     * flush, and a later commit's length is not the length at t->end. */
    if (c->broken) {
        r = -EIO;
    } else {
        /* the caller's flush covered every write up to the ticket, the
         * first one (lazy creation) included */
        c->first_unsynced = 0;
        if (c->st.anchor_seq == t->seq && c->end == t->end &&
            c->marked_end != t->end)
            r = mark_durable(c);
    }
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

