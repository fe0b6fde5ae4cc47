/* Loading a container's state at open: after the checkpoint of the newest
 * valid anchor (replay_anchor.c), replay the log records after it with
 * large buffered reads (replay_scan.c). Before the anchors'
 * durable mark an invalid record is damage: it is logged and skipped (the
 * scan resynchronises on the next valid record) and replay goes on; after
 * the mark, the first record that is invalid, truncated or out of sequence
 * ends the log (a torn or uncommitted tail). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/replay_int.h"
#include "common/errbuf.h"

/* a valid DATA record waiting for its COMMIT */
typedef struct pend {
    sqz_wire_entry w;
    uint64_t txn;
    uint64_t size; /* record size on disk */
} pend;

typedef struct pending {
    pend *v;
    size_t n, cap;
} pending;

static int pending_push(pending *pd, const sqz_wire_entry *w, uint64_t txn,
                        uint64_t size)
{
    if (pd->n == pd->cap) {
        size_t nc = pd->cap ? pd->cap * 2 : 16;
        pend *nv = realloc(pd->v, nc * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        pd->v = nv;
        pd->cap = nc;
    }
    pd->v[pd->n++] = (pend){*w, txn, size};
    return 0;
}

/* DATA payload: 0 block u64  8 stored checksum u32  12 kind u8
 * 13 log2bs u8  14 reserved u16  16 stored bytes */
static int data_record(const uint8_t *pl, uint32_t plen, uint64_t off,
                       int log2bs, uint64_t log0, sqz_wire_entry *w)
{
    if (plen <= SQZ_DATA_PREFIX || pl[13] != log2bs || sqz_get16(pl + 14))
        return -EBADMSG;
    w->idx = sqz_get64(pl);
    w->kind = pl[12];
    w->e.off = off;
    w->e.len = plen - SQZ_DATA_PREFIX;
    w->e.crc = sqz_get32(pl + 8);
    w->e.kind = w->kind;
    if (w->kind == SQZ_KIND_HOLE ||
        sqz_entry_check(w, sqz_max_blocks(log2bs), (size_t)1 << log2bs,
                        log0, off + sqz_rec_size(plen)) < 0 ||
        sqz_checksum(pl + SQZ_DATA_PREFIX, w->e.len) != w->e.crc)
        return -EBADMSG;
    return 0;
}

/* COMMIT payload prefix: new length, entry count. 0 or -EBADMSG. */
static int commit_prefix(const uint8_t *pl, uint32_t plen, uint64_t *len,
                         uint32_t *n)
{
    if (plen < SQZ_LIST_PREFIX)
        return -EBADMSG;
    *len = sqz_get64(pl);
    *n = sqz_get32(pl + 8);
    if (*len > SQZ_MAX_LENGTH || sqz_get32(pl + 12) ||
        (uint64_t)SQZ_LIST_PREFIX + (uint64_t)*n * SQZ_ENTRY_WIRE != plen)
        return -EBADMSG;
    return 0;
}

/* Whether the DATA record d is the block the COMMIT entry w lists. */
static int same_block(const sqz_wire_entry *d, const sqz_wire_entry *w)
{
    return d->idx == w->idx && d->kind == w->kind && d->e.off == w->e.off &&
           d->e.len == w->e.len && d->e.crc == w->e.crc;
}

/* Set the entries of a checked COMMIT payload and its length. */
static int commit_set(sqz_state *st, int log2bs, const uint8_t *pl,
                      uint32_t n, uint64_t len)
{
    for (uint32_t i = 0; i < n; i++) {
        sqz_wire_entry w;
        uint64_t replaced;
        sqz_wire_get(pl + SQZ_LIST_PREFIX + (uint64_t)i * SQZ_ENTRY_WIRE, &w);
        int r = sqz_index_set(&st->ix, w.idx, &w.e, &replaced);
        if (r < 0)
            return r;
        st->dead_bytes += replaced;
    }
    size_t bs = (size_t)1 << log2bs;
    st->dead_bytes += sqz_index_drop_from(&st->ix, (len + bs - 1) >> log2bs);
    st->length = len;
    return 0;
}

/* Validate a COMMIT payload against the DATA records just before it; on
 * success apply it to st. 1 applied, 0 invalid (stop), <0 error. */
static int apply_commit(sqz_state *st, const sqz_header *h, const uint8_t *pl,
                        uint32_t plen, uint64_t rec_off, const pending *pd)
{
    int log2bs = h->params.log2bs;
    size_t bs = (size_t)1 << log2bs;
    uint64_t len;
    uint32_t n;
    if (commit_prefix(pl, plen, &len, &n) < 0)
        return 0;
    uint64_t nblocks = (len + bs - 1) >> log2bs;
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        sqz_wire_entry w;
        sqz_wire_get(pl + SQZ_LIST_PREFIX + (uint64_t)i * SQZ_ENTRY_WIRE, &w);
        if (sqz_entry_check(&w, nblocks, bs, sqz_log_start(h->version),
                            rec_off) < 0)
            return 0;
        if (w.kind == SQZ_KIND_HOLE)
            continue;
        if (k >= pd->n)
            return 0;
        if (!same_block(&pd->v[k++].w, &w))
            return 0;
    }
    if (k != pd->n)
        return 0;
    int r = commit_set(st, log2bs, pl, n, len);
    if (r < 0)
        return r;
    st->txn++;
    return 1;
}

/* Apply the first n pending DATA records: their transactions were committed
 * (a later commit, or the durable mark, shows it) but their COMMIT records
 * are damaged. Their blocks are intact; the length change and holes of
 * those transactions are lost. */
static int apply_lost(sqz_state *st, pending *pd, size_t n, const char *label)
{
    if (n == 0)
        return 0;
    for (size_t k = 0; k < n; k++) {
        uint64_t replaced;
        int r = sqz_index_set(&st->ix, pd->v[k].w.idx, &pd->v[k].w.e, &replaced);
        if (r < 0)
            return r;
        st->dead_bytes += replaced;
    }
    sqz_logf(SQZ_LOG_ERR, "%s: the commit record of transaction(s) %llu..%llu is "
                "damaged; %zu intact block(s) of them recovered, their length "
                "changes and holes are lost", SQZ_LBL(label),
             (unsigned long long)pd->v[0].txn,
             (unsigned long long)pd->v[n - 1].txn, n);
    if (pd->v[n - 1].txn > st->txn)
        st->txn = pd->v[n - 1].txn;
    memmove(pd->v, pd->v + n, (pd->n - n) * sizeof *pd->v);
    pd->n -= n;
    return 0;
}

/* Damage accounting for the log between the last applied record (from) and
 * to: in a true log those bytes are exactly the DATA and COMMIT records of
 * the transactions lost there (and the damaged DATA records of the commit
 * at to, whose sizes its entries give: known_damaged). The damaged bytes
 * must hold at least the COMMIT record of every lost transaction (a
 * transaction with k recovered DATA records has one of at least
 * align8(48 + 24 k) bytes). If anything is left, a lost transaction may
 * have written blocks (or holes) that cannot be identified: their old
 * contents would be shown as current, so the open must fail. nlost:
 * number of lost transactions (at least those with pending records).
 * 0 consistent, 1 inconsistent (the closing commit is not believable),
 * 2 unidentifiable blocks. */
static int account_damage(const pending *pd, uint64_t from, uint64_t to,
                          uint64_t known_damaged, uint64_t nlost)
{
    uint64_t dmg = to - from, need = known_damaged;
    uint64_t txns = 0;
    for (size_t k = 0; k < pd->n; k++)
        dmg -= pd->v[k].size;
    for (size_t k = 0; k < pd->n;) {
        size_t j = k;
        while (j < pd->n && pd->v[j].txn == pd->v[k].txn)
            j++;
        need += sqz_align8(SQZ_REC_HDR + SQZ_LIST_PREFIX +
                           (uint64_t)(j - k) * SQZ_ENTRY_WIRE);
        txns++;
        k = j;
    }
    if (nlost > txns)
        need += (nlost - txns) * sqz_rec_size(SQZ_LIST_PREFIX);
    if (dmg < need)
        return 1;
    /* Anything left over held records that cannot be identified: a lost
     * DATA record (>= 56 bytes) or hole entries of a lost COMMIT (24 bytes
     * each). Either would show a block's older contents as current. */
    return dmg > need ? 2 : 0;
}

/* A COMMIT met after damage in the durable part of the log. The DATA
 * records it lists may be damaged (then reading those blocks fails their
 * stored checksum: -EIO for that block), and commits before it may be lost
 * (a gap in transaction numbers). Everything that is readable is checked:
 * entries are bounds-checked like all others, lie after the last applied
 * record, in ascending order, do not overlap a valid DATA record unless
 * they match it exactly, and no pending record belongs to a later
 * transaction, and the damaged bytes before it must be explained by the
 * lost transactions' records (account_damage). 1 applied, 0 invalid, 2 a
 * lost transaction's blocks cannot be identified, <0 error. */
static int apply_commit_damaged(sqz_state *st, const sqz_header *h,
                                const uint8_t *pl, uint32_t plen,
                                uint64_t rec_off, uint64_t seq, pending *pd,
                                const char *label)
{
    int log2bs = h->params.log2bs;
    size_t bs = (size_t)1 << log2bs;
    uint64_t len;
    uint32_t n;
    if (seq <= st->txn || commit_prefix(pl, plen, &len, &n) < 0)
        return 0;
    size_t lost = 0;
    uint64_t lo = st->valid_end;
    for (size_t k = 0; k < pd->n; k++) {
        if (pd->v[k].txn > seq)
            return 0;
        if (pd->v[k].txn < seq) {
            lost = k + 1;
            lo = pd->v[k].w.e.off + pd->v[k].size;
        }
    }
    uint64_t nblocks = (len + bs - 1) >> log2bs;
    size_t k = lost;
    uint64_t known_damaged = 0;
    for (uint32_t i = 0; i < n; i++) {
        sqz_wire_entry w;
        sqz_wire_get(pl + SQZ_LIST_PREFIX + (uint64_t)i * SQZ_ENTRY_WIRE, &w);
        if (sqz_entry_check(&w, nblocks, bs, sqz_log_start(h->version),
                            rec_off) < 0)
            return 0;
        if (w.kind == SQZ_KIND_HOLE)
            continue;
        uint64_t wend = w.e.off + sqz_rec_size(SQZ_DATA_PREFIX + (uint64_t)w.e.len);
        if (w.e.off < lo)
            return 0;
        while (k < pd->n && pd->v[k].w.e.off + pd->v[k].size <= w.e.off)
            k++;
        if (k < pd->n && pd->v[k].w.e.off < wend) {
            if (!same_block(&pd->v[k].w, &w))
                return 0;
            k++;
        } else {
            known_damaged += wend - w.e.off;
        }
        lo = wend;
    }
    /* the valid records of this commit's own transaction are not damage */
    uint64_t own = 0;
    for (size_t j = lost; j < pd->n; j++)
        own += pd->v[j].size;
    pending lostpd = {pd->v, lost, lost};
    int acc = account_damage(&lostpd, st->valid_end, rec_off - own,
                             known_damaged, seq - st->txn - 1);
    if (acc == 1)
        return 0;
    if (acc == 2)
        return 2;
    uint64_t before = st->txn;
    int r = apply_lost(st, pd, lost, label);
    if (r == 0)
        r = commit_set(st, log2bs, pl, n, len);
    if (r < 0)
        return r;
    if (seq > st->txn + 1)
        sqz_logf(SQZ_LOG_ERR, "%s: transaction(s) %llu..%llu are lost in damaged log "
                    "records (their blocks keep older contents)", SQZ_LBL(label),
                 (unsigned long long)(st->txn + 1),
                 (unsigned long long)(seq - 1));
    st->lost_commits += seq - before - 1;
    st->txn = seq;
    pd->n = 0;
    return 1;
}

static void note_damage(sqz_state *st, uint64_t off, uint64_t len)
{
    if (st->ndamage < SQZ_DAMAGE_MAX)
        st->damage[st->ndamage] = (sqz_damage){off, len};
    st->ndamage++;
}

/* Leaving the durable part of the log after damage in it. DATA records
 * still pending there belong to committed transactions (the durable mark
 * is always at a commit boundary) whose COMMIT records are damaged, and no
 * later commit tells the file's length: showing the older length would
 * silently cut off synced data, so the file is refused (EIO) rather than
 * served short. 0 = fine, 2 = refuse. */
static int leave_durable(sqz_state *st, pending *pd, uint64_t durable,
                         int log2bs, const char *label)
{
    int acc = 0;
    if (st->valid_end < durable &&
        (acc = account_damage(pd, st->valid_end, durable, 0, 1)) == 2)
        return 2;
    if (pd->n == 0)
        return 0;
    /* The mark's length extension was written with this very mark: it
     * gives the length after the lost commit. Only one transaction may be
     * lost (an earlier lost one may have changed the length too), and the
     * damaged bytes must be exactly its COMMIT record listing the pending
     * DATA records (no hole entries lost). */
    if (st->mark_known && durable == st->durable_end && acc == 0 &&
        st->mark_txn == st->txn + 1 && pd->v[0].txn == st->mark_txn &&
        pd->v[pd->n - 1].txn == st->mark_txn) {
        int r = apply_lost(st, pd, pd->n, label);
        if (r < 0)
            return r;
        size_t bs = (size_t)1 << log2bs;
        st->dead_bytes += sqz_index_drop_from(&st->ix,
                                              (st->mark_len + bs - 1) >> log2bs);
        st->length = st->mark_len;
        st->txn = st->mark_txn;
        st->lost_commits++;
        st->valid_end = durable;
        sqz_logf(SQZ_LOG_ERR, "%s: the last synced commit is damaged; its blocks and "
                    "the length %llu recorded with the durable mark are used",
                 SQZ_LBL(label), (unsigned long long)st->mark_len);
        return 0;
    }
    sqz_logf(SQZ_LOG_ERR, "%s: the last synced commit is damaged; the file's length "
                "is unknown", SQZ_LBL(label));
    return 2;
}

/* One replay's state while it walks the log. */
typedef struct replay {
    const sqz_header *h;
    const char *label;
    sqz_state *st;
    scanner sc;
    pending pd;
    int log2bs;
    uint64_t log0;    /* where the log starts (sqz_log_start) */
    uint64_t durable; /* before it an invalid record is damage */
    uint64_t budget;  /* bytes resynchronising may still read */
    uint64_t unknown; /* damage hiding blocks of a lost transaction */
} replay;

/* Where the synced part of the log ends (rp->durable), from the anchors'
 * durable mark; a file shorter than it is damage. lenient_to > the mark:
 * treat the log up to it like the synced part. */
static void replay_bounds(replay *rp, uint64_t file_size, uint64_t lenient_to)
{
    sqz_state *st = rp->st;
    /* Before the durable mark every record was fdatasync'ed: an invalid one
     * there is damage (skipped, replay goes on), after it a torn tail. */
    uint64_t durable = st->durable_end;
    if (durable < st->ckpt_end)
        durable = st->ckpt_end;
    if (durable > file_size) {
        sqz_logf(SQZ_LOG_ERR, "%s: the file ends at %llu, before the end of its synced "
                    "log (%llu)", SQZ_LBL(rp->label), (unsigned long long)file_size,
                 (unsigned long long)durable);
        durable = file_size & ~(uint64_t)7; /* records are 8-aligned */
        note_damage(st, durable, st->durable_end - durable);
    }
    st->durable_end = durable;
    if (lenient_to > durable && lenient_to <= file_size)
        durable = lenient_to;
    rp->durable = durable;
}

/* leave_durable, with a refusal as -EBADMSG (rp->unknown set). */
static int replay_leave(replay *rp)
{
    int r = leave_durable(rp->st, &rp->pd, rp->durable, rp->log2bs, rp->label);
    if (r == 2) {
        rp->unknown = rp->durable;
        r = -EBADMSG;
    }
    return r;
}

/* A valid DATA record at pos: pending until its COMMIT. skip_to: the
 * transaction the record may follow (st->txn unless a gap is allowed).
 * 1 taken, 0 invalid here, <0 error. */
static int replay_data(replay *rp, const sqz_rec_hdr *rh, const uint8_t *pl,
                       uint64_t pos, uint64_t total, int lenient, uint64_t skip_to)
{
    sqz_state *st = rp->st;
    pending *pd = &rp->pd;
    sqz_wire_entry w;
    uint64_t last = pd->n ? pd->v[pd->n - 1].txn : st->txn + 1;
    int ok;
    if (lenient)
        ok = rh->seq > st->txn && rh->seq >= last;
    else
        ok = rh->seq == skip_to + 1;
    ok = ok && data_record(pl, rh->plen, pos, rp->log2bs, rp->log0, &w) == 0;
    if (!ok)
        return 0;
    if (skip_to != st->txn) {
        st->lost_commits += skip_to - st->txn;
        st->txn = skip_to;
    }
    int r = pending_push(pd, &w, rh->seq, total);
    return r < 0 ? r : 1;
}

/* A valid COMMIT record at pos: apply its transaction. 1 applied, 0
 * invalid here, <0 error (-EBADMSG with rp->unknown set: a lost
 * transaction's blocks cannot be identified). */
static int replay_commit(replay *rp, const sqz_rec_hdr *rh, const uint8_t *pl,
                         uint64_t pos, uint64_t total, int lenient, uint64_t skip_to)
{
    sqz_state *st = rp->st;
    int a;
    if (lenient) {
        a = apply_commit_damaged(st, rp->h, pl, rh->plen, pos, rh->seq, &rp->pd,
                                 rp->label);
        if (a == 2) {
            rp->unknown = pos;
            a = -EBADMSG;
        }
    } else if (rh->seq != skip_to + 1) {
        a = 0;
    } else {
        uint64_t was = st->txn;
        st->txn = skip_to;
        a = apply_commit(st, rp->h, pl, rh->plen, pos, &rp->pd);
        if (a <= 0)
            st->txn = was;
        else
            st->lost_commits += skip_to - was;
    }
    if (a > 0) {
        rp->pd.n = 0;
        st->valid_end = pos + total;
    }
    return a;
}

/* A valid CHECKPOINT record at pos: it replaces the index. 1 taken, 0
 * invalid here, <0 error. */
static int replay_checkpoint(replay *rp, const sqz_rec_hdr *rh, const uint8_t *pl,
                             uint64_t pos, uint64_t total, int lenient,
                             uint64_t skip_to)
{
    sqz_state *st = rp->st;
    pending *pd = &rp->pd;
    int ok;
    if (lenient) {
        /* a checkpoint holds everything up to its txn */
        ok = rh->seq >= st->txn && (!pd->n || pd->v[pd->n - 1].txn <= rh->seq);
    } else {
        ok = rh->seq == skip_to && !pd->n;
    }
    if (!ok)
        return 0;
    sqz_index nix;
    uint64_t len;
    int c = sqz_ckpt_parse(pl, rh->plen, pos, rp->log2bs, rp->log0, &nix, &len);
    if (c == -ENOMEM)
        return c;
    if (c != 0)
        return 0;
    sqz_index_free(&st->ix);
    st->ix = nix;
    st->length = len;
    st->txn = rh->seq; /* complete: nothing of a gap is lost */
    st->ckpt_off = pos;
    st->ckpt_end = pos + total;
    st->valid_end = st->ckpt_end;
    pd->n = 0;
    return 1;
}

/* Damage at pos in the synced part of the log: skip to the next valid
 * record (*pos), logged and noted. 0 or <0 error. */
static int replay_skip_damage(replay *rp, uint64_t *pos)
{
    uint64_t next = rp->durable;
    int r = sqz_scan_resync(&rp->sc, *pos, rp->durable, rp->h->file_id, &rp->budget,
                            &next);
    if (r < 0)
        return r;
    sqz_logf(SQZ_LOG_ERR, "%s: damaged log record at offset %llu (synced data): "
                "%llu bytes skipped, replay continues at offset %llu",
             SQZ_LBL(rp->label), (unsigned long long)*pos,
             (unsigned long long)(next - *pos), (unsigned long long)next);
    note_damage(rp->st, *pos, next - *pos);
    *pos = next;
    return 0;
}

/* Walk the log from the checkpoint to the end of the file or of the valid
 * records, skipping damage in the synced part. 0 or <0 error. */
static int replay_log(replay *rp, uint64_t file_size)
{
    sqz_state *st = rp->st;
    uint64_t pos = st->ckpt_end;
    int r = 0, damaged = 0, left = 0, gap_ok = 0;
    while (pos <= file_size && file_size - pos >= SQZ_REC_HDR) {
        if (damaged && !left && pos >= rp->durable) {
            left = 1;
            gap_ok = pos == rp->durable;
            if ((r = replay_leave(rp)) < 0)
                return r;
        }
        int in_durable = pos < rp->durable;
        int lenient = damaged && in_durable;
        const uint8_t *rec;
        sqz_rec_hdr rh;
        uint64_t total = 0;
        int ok = sqz_scan_record(&rp->sc, pos, in_durable ? rp->durable : file_size,
                                 rp->h->file_id, &rh, &rec, &total);
        if (ok < 0)
            return ok;
        /* the first record right at the durable mark after damage may
         * follow lost transactions */
        uint64_t skip_to = st->txn;
        if (ok && gap_ok && rh.seq > st->txn + (rh.type != SQZ_REC_CHECKPOINT))
            skip_to = rh.seq - (rh.type != SQZ_REC_CHECKPOINT);
        gap_ok = 0;
        const uint8_t *pl = ok ? rec + SQZ_REC_HDR : NULL;
        if (ok && rh.type == SQZ_REC_DATA)
            ok = replay_data(rp, &rh, pl, pos, total, lenient, skip_to);
        else if (ok && rh.type == SQZ_REC_COMMIT)
            ok = replay_commit(rp, &rh, pl, pos, total, lenient, skip_to);
        else if (ok)
            ok = replay_checkpoint(rp, &rh, pl, pos, total, lenient, skip_to);
        if (ok < 0)
            return ok;
        if (ok) {
            pos += total;
            continue;
        }
        if (!in_durable)
            break; /* torn or uncommitted tail */
        if ((r = replay_skip_damage(rp, &pos)) < 0)
            return r;
        damaged = 1;
    }
    if (pos < rp->durable) {
        /* a fragment too short for a record */
        note_damage(st, pos, rp->durable - pos);
        damaged = 1;
    }
    if (damaged && !left)
        return replay_leave(rp);
    return 0;
}

/* One replay. lenient_to > the durable mark: treat the log up to it like
 * the synced part (evidence pass, see sqz_replay). *applied: the end of the
 * last record applied. */
int sqz_replay_pass(const sqz_io *io, int fd, const sqz_header *h,
                       uint64_t file_size, const char *label, sqz_state *st,
                       char *err, size_t errlen, uint64_t lenient_to,
                       uint64_t *applied)
{
    memset(st, 0, sizeof *st);
    sqz_index_init(&st->ix);
    int r = sqz_replay_load_checkpoint(io, fd, h, file_size, st, err, errlen);
    if (r < 0) {
        sqz_index_free(&st->ix);
        return r;
    }
    replay rp = {.h = h, .label = label, .st = st,
                 .sc = {.io = io, .fd = fd, .fsize = file_size},
                 .log2bs = h->params.log2bs, .log0 = sqz_log_start(h->version),
                 .budget = 4 * file_size + (64u << 20)};
    st->valid_end = st->ckpt_end;
    replay_bounds(&rp, file_size, lenient_to);
    r = replay_log(&rp, file_size);
    free(rp.sc.buf);
    free(rp.pd.v);
    if (r < 0) {
        if (r == -EBADMSG && rp.unknown) {
            sqz_logf(SQZ_LOG_ERR, "%s: the damaged log before offset %llu held blocks "
                        "of a lost transaction that cannot be identified",
                     SQZ_LBL(label), (unsigned long long)rp.unknown);
            sqz_errf(err, errlen, "log damaged (lost transaction's blocks unknown)");
        } else if (r == -EBADMSG) {
            sqz_errf(err, errlen, "file changed while being read");
        }
        sqz_index_free(&st->ix);
        return r;
    }
    *applied = st->valid_end;
    /* nothing before the durable mark is ever cut off or overwritten */
    if (st->valid_end < rp.durable)
        st->valid_end = rp.durable;
    return 0;
}
