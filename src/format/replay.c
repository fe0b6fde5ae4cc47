/* Loading a container's state at open: pick the newest valid anchor, load
 * and verify its checkpoint (falling back to the other slot), then replay
 * the log records after it with large buffered reads, stopping at the first
 * record that is invalid, truncated or out of sequence. */
#include <errno.h>
#include <stdlib.h>

#include "format/format_int.h"

typedef struct scanner {
    const sqz_io *io;
    int fd;
    uint64_t fsize;
    uint8_t *buf;
    size_t cap;
    uint64_t boff;
    size_t blen;
} scanner;

/* Make [off, off+n) available (caller guarantees off+n <= fsize); the
 * buffer never exceeds max(n, SQZ_SCAN_CHUNK), so it is bounded by the
 * file size. */
static int scan_get(scanner *s, uint64_t off, uint64_t n, const uint8_t **p)
{
    if (off >= s->boff && off + n <= s->boff + s->blen) {
        *p = s->buf + (off - s->boff);
        return 0;
    }
    uint64_t want = n > SQZ_SCAN_CHUNK ? n : SQZ_SCAN_CHUNK;
    if (want > s->fsize - off)
        want = s->fsize - off;
    if (want > s->cap) {
        uint8_t *nb = realloc(s->buf, want);
        if (!nb)
            return -ENOMEM;
        s->buf = nb;
        s->cap = want;
    }
    s->blen = 0;
    ssize_t r = s->io->pread(s->io->ctx, s->fd, s->buf, want, off);
    if (r < 0)
        return (int)r;
    s->boff = off;
    s->blen = (size_t)r;
    if ((uint64_t)r < n)
        return -EBADMSG; /* file shrank under us */
    *p = s->buf;
    return 0;
}

typedef struct pending {
    sqz_wire_entry *v;
    size_t n, cap;
} pending;

static int pending_push(pending *pd, const sqz_wire_entry *w)
{
    if (pd->n == pd->cap) {
        size_t nc = pd->cap ? pd->cap * 2 : 16;
        sqz_wire_entry *nv = realloc(pd->v, nc * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        pd->v = nv;
        pd->cap = nc;
    }
    pd->v[pd->n++] = *w;
    return 0;
}

/* DATA payload: 0 block u64  8 stored checksum u32  12 kind u8
 * 13 log2bs u8  14 reserved u16  16 stored bytes */
static int data_record(const uint8_t *pl, uint32_t plen, uint64_t off,
                       int log2bs, sqz_wire_entry *w)
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
                        off + sqz_rec_size(plen)) < 0 ||
        sqz_checksum(pl + SQZ_DATA_PREFIX, w->e.len) != w->e.crc)
        return -EBADMSG;
    return 0;
}

/* Validate a COMMIT payload against the DATA records just before it; on
 * success apply it to st. 1 applied, 0 invalid (stop), <0 error. */
static int apply_commit(sqz_state *st, const sqz_header *h, const uint8_t *pl,
                        uint32_t plen, uint64_t rec_off, const pending *pd)
{
    int log2bs = h->params.log2bs;
    size_t bs = (size_t)1 << log2bs;
    if (plen < SQZ_LIST_PREFIX)
        return 0;
    uint64_t len = sqz_get64(pl);
    uint32_t n = sqz_get32(pl + 8);
    if (len > SQZ_MAX_LENGTH || sqz_get32(pl + 12) ||
        (uint64_t)SQZ_LIST_PREFIX + (uint64_t)n * SQZ_ENTRY_WIRE != plen)
        return 0;
    uint64_t nblocks = (len + bs - 1) >> log2bs;
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        sqz_wire_entry w;
        sqz_wire_get(pl + SQZ_LIST_PREFIX + (uint64_t)i * SQZ_ENTRY_WIRE, &w);
        if (sqz_entry_check(&w, nblocks, bs, rec_off) < 0)
            return 0;
        if (w.kind == SQZ_KIND_HOLE)
            continue;
        if (k >= pd->n)
            return 0;
        const sqz_wire_entry *d = &pd->v[k++];
        if (d->idx != w.idx || d->kind != w.kind || d->e.off != w.e.off ||
            d->e.len != w.e.len || d->e.crc != w.e.crc)
            return 0;
    }
    if (k != pd->n)
        return 0;
    for (uint32_t i = 0; i < n; i++) {
        sqz_wire_entry w;
        uint64_t replaced;
        sqz_wire_get(pl + SQZ_LIST_PREFIX + (uint64_t)i * SQZ_ENTRY_WIRE, &w);
        int r = sqz_index_set(&st->ix, w.idx, &w.e, &replaced);
        if (r < 0)
            return r;
        st->dead_bytes += replaced;
    }
    st->dead_bytes += sqz_index_drop_from(&st->ix, nblocks);
    st->length = len;
    st->txn++;
    return 1;
}

/* Load the checkpoint an anchor points to. 0, -EBADMSG, -ENOMEM, I/O. */
static int load_anchor(const sqz_io *io, int fd, const sqz_header *h,
                       uint64_t fsize, const sqz_anchor *a, sqz_state *st)
{
    if (a->ckpt_off < SQZ_HDR_REGION || (a->ckpt_off & 7) ||
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
                           h->params.log2bs, &st->ix, &st->length);
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

static int load_checkpoint(const sqz_io *io, int fd, const sqz_header *h,
                           uint64_t fsize, sqz_state *st, const char **why)
{
    uint8_t slots[2][SQZ_ANCHOR_SIZE];
    sqz_anchor a[2];
    int valid[2];
    for (unsigned s = 0; s < 2; s++) {
        ssize_t r = io->pread(io->ctx, fd, slots[s], SQZ_ANCHOR_SIZE,
                              SQZ_ANCHOR_OFF(s));
        if (r < 0)
            return (int)r;
        if ((size_t)r != SQZ_ANCHOR_SIZE) {
            *why = "header region truncated";
            return -EBADMSG;
        }
        valid[s] = sqz_anchor_decode(slots[s], s, h->file_id, &a[s]) == 1;
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
        *why = "index damaged (no valid checkpoint)";
        return -EBADMSG;
    }
    /* no checkpoint was ever anchored: the log starts right after the header */
    st->ckpt_end = SQZ_HDR_REGION;
    return 0;
}

int sqz_replay(const sqz_io *io, int fd, const sqz_header *h,
               uint64_t file_size, sqz_state *st, const char **why)
{
    memset(st, 0, sizeof *st);
    sqz_index_init(&st->ix);
    int r = load_checkpoint(io, fd, h, file_size, st, why);
    if (r < 0) {
        sqz_index_free(&st->ix);
        return r;
    }
    int log2bs = h->params.log2bs;
    scanner sc = {.io = io, .fd = fd, .fsize = file_size};
    pending pd = {0};
    uint64_t pos = st->ckpt_end;
    st->valid_end = pos;
    while (r == 0 && pos <= file_size && file_size - pos >= SQZ_REC_HDR) {
        const uint8_t *rec;
        sqz_rec_hdr rh;
        if ((r = scan_get(&sc, pos, SQZ_REC_HDR, &rec)) < 0)
            break;
        if (sqz_rec_parse(rec, h->file_id, &rh) < 0)
            break;
        uint64_t total = sqz_rec_size(rh.plen);
        if (total > file_size - pos)
            break;
        if ((r = scan_get(&sc, pos, total, &rec)) < 0)
            break;
        if (!sqz_rec_verify(rec, &rh))
            break;
        const uint8_t *pl = rec + SQZ_REC_HDR;
        if (rh.type == SQZ_REC_DATA) {
            sqz_wire_entry w;
            if (rh.seq != st->txn + 1 ||
                data_record(pl, rh.plen, pos, log2bs, &w) < 0)
                break;
            r = pending_push(&pd, &w);
        } else if (rh.type == SQZ_REC_COMMIT) {
            if (rh.seq != st->txn + 1)
                break;
            int a = apply_commit(st, h, pl, rh.plen, pos, &pd);
            if (a <= 0) {
                r = a;
                break;
            }
            pd.n = 0;
            st->valid_end = pos + total;
        } else {
            sqz_index nix;
            uint64_t len;
            if (rh.seq != st->txn || pd.n)
                break;
            int c = sqz_ckpt_parse(pl, rh.plen, pos, log2bs, &nix, &len);
            if (c == -ENOMEM) {
                r = c;
                break;
            }
            if (c < 0)
                break;
            sqz_index_free(&st->ix);
            st->ix = nix;
            st->length = len;
            st->ckpt_off = pos;
            st->ckpt_end = pos + total;
            st->valid_end = st->ckpt_end;
        }
        pos += total;
    }
    free(sc.buf);
    free(pd.v);
    if (r < 0) {
        if (r == -EBADMSG)
            *why = "file changed while being read";
        sqz_index_free(&st->ix);
        return r;
    }
    return 0;
}
