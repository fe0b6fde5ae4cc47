/* Byte codecs of log records (DATA, COMMIT, CHECKPOINT) and of the index
 * entries they carry, with the bounds checks applied to everything read
 * from disk (docs/FORMAT.md). */
#include <errno.h>
#include <stdlib.h>

#include "format/format_int.h"

/* record header:
 *  0 magic u32  4 type u8  5 reserved[3]  8 file id u64  16 seq u64
 * 24 payload length u32  28 checksum u32; payload at 32, zero padding to 8 */
void sqz_rec_seal(uint8_t *rec, uint8_t type, uint64_t file_id, uint64_t seq,
                  uint32_t plen)
{
    memset(rec, 0, SQZ_REC_HDR);
    sqz_put32(rec, SQZ_REC_MAGIC);
    rec[4] = type;
    sqz_put64(rec + 8, file_id);
    sqz_put64(rec + 16, seq);
    sqz_put32(rec + 24, plen);
    uint64_t total = sqz_rec_size(plen);
    memset(rec + SQZ_REC_HDR + plen, 0, total - SQZ_REC_HDR - plen);
    sqz_put32(rec + 28, sqz_checksum2(rec, 28, rec + SQZ_REC_HDR, plen));
}

int sqz_rec_parse(const uint8_t *rec, uint64_t file_id, sqz_rec_hdr *h)
{
    if (sqz_get32(rec) != SQZ_REC_MAGIC || rec[5] || rec[6] || rec[7] ||
        sqz_get64(rec + 8) != file_id)
        return -EBADMSG;
    h->type = rec[4];
    if (h->type < SQZ_REC_DATA || h->type > SQZ_REC_CHECKPOINT)
        return -EBADMSG;
    h->seq = sqz_get64(rec + 16);
    h->plen = sqz_get32(rec + 24);
    h->csum = sqz_get32(rec + 28);
    return 0;
}

int sqz_rec_verify(const uint8_t *rec, const sqz_rec_hdr *h)
{
    return sqz_checksum2(rec, 28, rec + SQZ_REC_HDR, h->plen) == h->csum;
}

/* wire entry: 0 block u64 (bits 0..55) | kind << 56; 8 record offset u64;
 * 16 stored length u32; 20 stored checksum u32 */
void sqz_wire_put(uint8_t *p, uint64_t idx, uint8_t kind, const sqz_entry *e)
{
    sqz_put64(p, idx | (uint64_t)kind << 56);
    if (kind == SQZ_KIND_HOLE) {
        memset(p + 8, 0, 16);
        return;
    }
    sqz_put64(p + 8, e->off);
    sqz_put32(p + 16, e->len);
    sqz_put32(p + 20, e->crc);
}

void sqz_wire_get(const uint8_t *p, sqz_wire_entry *w)
{
    uint64_t v = sqz_get64(p);
    w->idx = v & ((1ULL << 56) - 1);
    w->kind = (uint8_t)(v >> 56);
    w->e.off = sqz_get64(p + 8);
    w->e.len = sqz_get32(p + 16);
    w->e.crc = sqz_get32(p + 20);
    w->e.kind = w->kind;
}

int sqz_entry_check(const sqz_wire_entry *w, uint64_t max_blocks, size_t bs,
                    uint64_t log0, uint64_t limit)
{
    if (w->idx >= max_blocks)
        return -EBADMSG;
    switch (w->kind) {
    case SQZ_KIND_HOLE:
        return w->e.off || w->e.len || w->e.crc ? -EBADMSG : 0;
    case SQZ_KIND_COMP:
        if (w->e.len == 0 || w->e.len > bs)
            return -EBADMSG;
        break;
    case SQZ_KIND_RAW:
        if (w->e.len != bs)
            return -EBADMSG;
        break;
    default:
        return -EBADMSG;
    }
    if (w->e.off < log0 || (w->e.off & 7) || w->e.off > limit ||
        sqz_rec_size(SQZ_DATA_PREFIX + (uint64_t)w->e.len) > limit - w->e.off)
        return -EBADMSG;
    return 0;
}

struct ckpt_fill {
    uint8_t *p;
};

static int ckpt_put(void *u, uint64_t idx, const sqz_entry *e)
{
    struct ckpt_fill *f = u;
    sqz_wire_put(f->p, idx, e->kind, e);
    f->p += SQZ_ENTRY_WIRE;
    return 0;
}

/* CHECKPOINT payload: 0 length u64  8 count u64  16 entries (ascending) */
int sqz_ckpt_build(const sqz_index *ix, uint64_t file_id, uint64_t txn,
                   uint64_t length, uint8_t **out, uint64_t *outlen)
{
    uint64_t plen = SQZ_LIST_PREFIX + ix->stored_blocks * SQZ_ENTRY_WIRE;
    if (plen > UINT32_MAX)
        return -EFBIG;
    uint64_t total = sqz_rec_size(plen);
    uint8_t *rec = malloc(total);
    if (!rec)
        return -ENOMEM;
    uint8_t *pl = rec + SQZ_REC_HDR;
    sqz_put64(pl, length);
    sqz_put64(pl + 8, ix->stored_blocks);
    struct ckpt_fill f = {pl + SQZ_LIST_PREFIX};
    sqz_index_each(ix, ckpt_put, &f);
    sqz_rec_seal(rec, SQZ_REC_CHECKPOINT, file_id, txn, (uint32_t)plen);
    *out = rec;
    *outlen = total;
    return 0;
}

int sqz_ckpt_parse(const uint8_t *payload, uint32_t plen, uint64_t rec_off,
                   int log2bs, uint64_t log0, sqz_index *ix, uint64_t *length)
{
    if (plen < SQZ_LIST_PREFIX)
        return -EBADMSG;
    uint64_t len = sqz_get64(payload);
    uint64_t n = sqz_get64(payload + 8);
    if (len > SQZ_MAX_LENGTH || n > (plen - SQZ_LIST_PREFIX) / SQZ_ENTRY_WIRE ||
        SQZ_LIST_PREFIX + n * SQZ_ENTRY_WIRE != plen)
        return -EBADMSG;
    size_t bs = (size_t)1 << log2bs;
    uint64_t nblocks = (len + bs - 1) >> log2bs;
    sqz_index_init(ix);
    uint64_t prev = 0;
    for (uint64_t i = 0; i < n; i++) {
        sqz_wire_entry w;
        sqz_wire_get(payload + SQZ_LIST_PREFIX + i * SQZ_ENTRY_WIRE, &w);
        uint64_t replaced;
        int r = -EBADMSG;
        if (w.kind != SQZ_KIND_HOLE && (i == 0 || w.idx > prev) &&
            sqz_entry_check(&w, nblocks, bs, log0, rec_off) == 0)
            r = sqz_index_set(ix, w.idx, &w.e, &replaced);
        if (r < 0) {
            sqz_index_free(ix);
            return r;
        }
        prev = w.idx;
    }
    *length = len;
    return 0;
}
