/* Loading a container's state at open, first step: pick the newest valid
 * anchor slot, load and verify the checkpoint it points to (falling back
 * to the other slot), and record the durable mark. The log after the
 * checkpoint is replayed by replay.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/replay_int.h"
#include "common/errbuf.h"

/* Load the checkpoint an anchor points to. 0, -EBADMSG, -ENOMEM, I/O. */
static int load_anchor(const sqz_io *io, int fd, const sqz_header *h,
                       uint64_t fsize, const sqz_anchor *a, sqz_state *st)
{
    if (a->ckpt_off == 0) {
        /* written by a sync before the first checkpoint: the log starts
         * right after the header (nothing has been punched) */
        st->anchor_seq = a->seq;
        st->ckpt_end = sqz_log_start(h->version);
        return 0;
    }
    if (a->ckpt_off < sqz_log_start(h->version) || (a->ckpt_off & 7) ||
        a->ckpt_off > fsize || a->ckpt_len > fsize - a->ckpt_off ||
        a->ckpt_len < sqz_rec_size(SQZ_LIST_PREFIX) ||
        a->ckpt_len > sqz_rec_size(UINT32_MAX))
        return -EBADMSG;
    uint8_t *rec = malloc(a->ckpt_len);
    if (!rec)
        return -ENOMEM;
    int r;
    ssize_t got = io->pread(io->ctx, fd, rec, a->ckpt_len, a->ckpt_off);
    sqz_rec_hdr rh;
    if (got < 0) {
        r = (int)got;
    } else if ((uint64_t)got != a->ckpt_len ||
               sqz_rec_parse(rec, h->file_id, &rh) < 0 ||
               rh.type != SQZ_REC_CHECKPOINT ||
               sqz_rec_size(rh.plen) != a->ckpt_len ||
               !sqz_rec_verify(rec, &rh)) {
        r = -EBADMSG;
    } else {
        r = sqz_ckpt_parse(rec + SQZ_REC_HDR, rh.plen, a->ckpt_off,
                           h->params.log2bs, sqz_log_start(h->version),
                           &st->ix, &st->length);
        if (r == 0) {
            st->txn = rh.seq;
            st->anchor_seq = a->seq;
            st->ckpt_off = a->ckpt_off;
            st->ckpt_end = a->ckpt_off + a->ckpt_len;
        }
    }
    free(rec);
    return r;
}

int sqz_anchor_check(const sqz_io *io, int fd, const sqz_header *h,
                     uint64_t fsize, const sqz_anchor *a)
{
    sqz_state st;
    memset(&st, 0, sizeof st);
    int r = load_anchor(io, fd, h, fsize, a, &st);
    sqz_index_free(&st.ix);
    return r;
}

int sqz_replay_load_checkpoint(const sqz_io *io, int fd, const sqz_header *h,
                           uint64_t fsize, sqz_state *st, char *err,
                           size_t errlen)
{
    uint8_t slots[2][SQZ_ANCHOR_READ];
    sqz_anchor a[2];
    int valid[2], damaged = 0;
    for (unsigned s = 0; s < 2; s++) {
        ssize_t r = io->pread(io->ctx, fd, slots[s], SQZ_ANCHOR_READ,
                              SQZ_ANCHOR_OFF(s));
        if (r < 0)
            return (int)r;
        if ((size_t)r != SQZ_ANCHOR_READ) {
            sqz_errf(err, errlen, "header region truncated");
            return -EBADMSG;
        }
        int d = sqz_anchor_decode(slots[s], s, h->file_id,
                                  sqz_log_start(h->version), &a[s]);
        valid[s] = d == 1;
        damaged += d < 0;
        /* a mark in a valid slot holds even if its checkpoint is damaged;
         * marks only grow, so the larger one is the newest */
        if (valid[s] && a[s].durable_end > st->durable_end) {
            st->durable_end = a[s].durable_end;
            uint64_t len, txn;
            st->mark_known =
                sqz_anchor_ext_decode(slots[s], &len, &txn) == 1;
            st->mark_len = st->mark_known ? len : 0;
            st->mark_txn = st->mark_known ? txn : 0;
        }
    }
    unsigned order[2] = {0, 1};
    if (valid[1] && (!valid[0] || a[1].seq > a[0].seq)) {
        order[0] = 1;
        order[1] = 0;
    }
    int tried = 0;
    for (int i = 0; i < 2; i++) {
        unsigned s = order[i];
        if (!valid[s])
            continue;
        tried = 1;
        int r = load_anchor(io, fd, h, fsize, &a[s], st);
        if (r == 0)
            return 0;
        if (r != -EBADMSG)
            return r;
    }
    if (tried) {
        sqz_errf(err, errlen, "index damaged (no valid checkpoint)");
        return -EBADMSG;
    }
    /* A crash tears at most the slot being written; the other one was made
     * durable before. Both damaged is bit rot: the log may have been
     * punched, so replaying it from the start could show a wrong state. */
    if (damaged == 2) {
        sqz_errf(err, errlen, "index damaged (both anchor slots)");
        return -EBADMSG;
    }
    /* no anchor was ever written (or the first write was torn): nothing has
     * been punched, the log starts right after the header */
    st->ckpt_end = sqz_log_start(h->version);
    return 0;
}
