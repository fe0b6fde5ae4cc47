/* The block API: reading a block (checksum + decompression), preparing a
 * block for a commit (lock-free compression), and committing prepared
 * blocks as DATA records plus one COMMIT record in a single append. */
#include <errno.h>
#include <stdlib.h>

#include "format/format_int.h"
#include "common/errbuf.h"
#include "common/lockorder.h"

int sqz_block_decode(const sqz_ctr *c, const sqz_entry *e, const void *src,
                     void *buf, char *err, size_t errlen)
{
    if (sqz_checksum(src, e->len) != e->crc) {
        sqz_errf(err, errlen, "checksum mismatch");
        return -EIO;
    }
    if (e->kind != SQZ_KIND_COMP) {
        if (src != buf)
            memcpy(buf, src, e->len);
        return 0;
    }
    ssize_t d = sqz_decompress(c->hdr.params.alg, src, e->len, buf, c->bs);
    if (d == -ENOMEM)
        return -ENOMEM;
    if (d != (ssize_t)c->bs) {
        sqz_errf(err, errlen, "decompression failed");
        return -EIO;
    }
    return 0;
}

int sqz_block_load(const sqz_ctr *c, const sqz_entry *e, void *buf,
                   char *err, size_t errlen)
{
    uint64_t at = e->off + SQZ_DATA_SKIP;
    void *src = buf;
    if (e->kind == SQZ_KIND_COMP) {
        src = malloc(e->len);
        if (!src)
            return -ENOMEM;
    }
    int r = 0;
    ssize_t got = c->io.pread(c->io.ctx, c->fd, src, e->len, at);
    if (got < 0) {
        r = (int)got;
        sqz_errf(err, errlen, "read error");
    } else if ((size_t)got != e->len) {
        r = -EIO;
        sqz_errf(err, errlen, "stored bytes lie outside the file");
    } else {
        r = sqz_block_decode(c, e, src, buf, err, errlen);
    }
    if (src != buf)
        free(src);
    return r;
}

ssize_t sqz_ctr_read_block_locked(sqz_ctr *c, uint64_t idx, void *buf,
                                  size_t *stored_len)
{
    SQZ_ASSERT_HELD(&c->lock);
    uint64_t len = c->st.length;
    int log2bs = c->hdr.params.log2bs;
    if (stored_len)
        *stored_len = 0;
    if (idx >= ((len + c->bs - 1) >> log2bs)) {
        memset(buf, 0, c->bs);
        return 0;
    }
    size_t valid = len - (idx << log2bs) >= c->bs ? c->bs
                                                  : (size_t)(len - (idx << log2bs));
    const sqz_entry *e = sqz_index_get(&c->st.ix, idx);
    if (!e) {
        memset(buf, 0, c->bs);
        return (ssize_t)valid;
    }
    char why[64] = "";
    int r = sqz_block_load(c, e, buf, why, sizeof why);
    if (r < 0) {
        if (r != -ENOMEM) {
            sqz_logf(SQZ_LOG_ERR, "%s: block %llu is damaged (%s at offset %llu)",
                     SQZ_LBL(c->label), (unsigned long long)idx, why[0] ? why : "I/O error",
                     (unsigned long long)e->off);
            r = -EIO;
        }
        return r;
    }
    memset((char *)buf + valid, 0, c->bs - valid);
    if (stored_len)
        *stored_len = e->len;
    return (ssize_t)valid;
}

ssize_t sqz_ctr_read_block(sqz_ctr *c, uint64_t idx, void *buf,
                           size_t *stored_len)
{
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    ssize_t r = sqz_ctr_read_block_locked(c, idx, buf, stored_len);
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    static const unsigned char zero[256];
    while (n >= sizeof zero) {
        if (memcmp(b, zero, sizeof zero))
            return 0;
        b += sizeof zero;
        n -= sizeof zero;
    }
    return memcmp(b, zero, n) == 0;
}

static int prepare(const sqz_ctr *c, uint64_t idx, const void *data, int draft,
                   sqz_prepared *out)
{
    const sqz_params *p = &c->hdr.params;
    size_t bs = c->bs;
    memset(out, 0, sizeof *out);
    out->idx = idx;
    if (all_zero(data, bs)) {
        out->kind = SQZ_KIND_HOLE;
        return 0;
    }
    unsigned char *st = malloc(bs);
    if (!st)
        return -ENOMEM;
    size_t cap = bs - bs * p->min_saving / 1000;
    ssize_t n = -ENOSPC;
    if (p->alg != SQZ_ALG_NONE && cap > 0)
        n = draft ? sqz_compress_draft(p->alg, data, bs, st, cap)
                  : sqz_compress(p->alg, p->level, data, bs, st, cap);
    if (n == -ENOSPC || n == 0) {
        memcpy(st, data, bs);
        out->kind = SQZ_KIND_RAW;
        out->stored_len = (uint32_t)bs;
    } else if (n < 0) {
        free(st);
        return (int)n;
    } else {
        out->kind = SQZ_KIND_COMP;
        out->stored_len = (uint32_t)n;
        unsigned char *shrunk = realloc(st, (size_t)n);
        if (shrunk)
            st = shrunk;
    }
    out->stored = st;
    out->crc = sqz_checksum(st, out->stored_len);
    return 0;
}

int sqz_ctr_prepare(const sqz_ctr *c, uint64_t idx, const void *data,
                    sqz_prepared *out)
{
    return prepare(c, idx, data, 0, out);
}

int sqz_ctr_prepare_draft(const sqz_ctr *c, uint64_t idx, const void *data,
                          sqz_prepared *out)
{
    return prepare(c, idx, data, 1, out);
}

void sqz_prepared_free(sqz_prepared *p)
{
    if (!p)
        return;
    free(p->stored);
    p->stored = NULL;
}

static int prepared_ok(const sqz_ctr *c, const sqz_prepared *b, uint64_t nb)
{
    if (b->idx >= nb)
        return 0;
    switch (b->kind) {
    case SQZ_KIND_HOLE:
        return 1;
    case SQZ_KIND_COMP:
        return b->stored && b->stored_len > 0 && b->stored_len <= c->bs;
    case SQZ_KIND_RAW:
        return b->stored && b->stored_len == c->bs;
    default:
        return 0;
    }
}

/* Shrinking into the middle of a stored block that the caller did not pass:
 * rewrite it with its tail zeroed, so that bytes past the length stay zero
 * if the file grows again. *have tells whether *fix was prepared. */
static int tail_fixup(sqz_ctr *c, const sqz_prepared *blocks, size_t n,
                      uint64_t new_length, sqz_prepared *fix, int *have)
{
    *have = 0;
    size_t part = (size_t)(new_length & (c->bs - 1));
    if (new_length >= c->st.length || part == 0)
        return 0;
    uint64_t last = new_length >> c->hdr.params.log2bs;
    for (size_t i = 0; i < n; i++)
        if (blocks[i].idx == last)
            return 0;
    if (!sqz_index_get(&c->st.ix, last))
        return 0;
    unsigned char *buf = malloc(c->bs);
    if (!buf)
        return -ENOMEM;
    ssize_t r = sqz_ctr_read_block_locked(c, last, buf, NULL);
    if (r >= 0) {
        memset(buf + part, 0, c->bs - part);
        r = sqz_ctr_prepare(c, last, buf, fix);
    }
    free(buf);
    if (r < 0)
        return (int)r;
    *have = 1;
    return 0;
}

static int commit_write(sqz_ctr *c, const sqz_prepared *blocks, size_t n,
                        const sqz_prepared *fix, int have_fix,
                        uint64_t new_length)
{
    size_t total_n = n + (size_t)have_fix;
    if (total_n > (UINT32_MAX - SQZ_LIST_PREFIX) / SQZ_ENTRY_WIRE)
        return -E2BIG;
    uint64_t nb = (new_length + c->bs - 1) >> c->hdr.params.log2bs;
    uint64_t total = 0;
    for (size_t i = 0; i < total_n; i++) {
        const sqz_prepared *b = i < n ? &blocks[i] : fix;
        if (!prepared_ok(c, b, nb))
            return -EINVAL;
        if (b->kind != SQZ_KIND_HOLE) {
            total += sqz_rec_size(SQZ_DATA_PREFIX + (uint64_t)b->stored_len);
            int r = sqz_index_reserve(&c->st.ix, b->idx);
            if (r < 0)
                return r;
        }
    }
    uint32_t cplen = (uint32_t)(SQZ_LIST_PREFIX + total_n * SQZ_ENTRY_WIRE);
    total += sqz_rec_size(cplen);
    /* lazy creation: the header region goes with the first commit */
    uint64_t pre = c->hdr_pending ? c->end : 0;
    if (total + pre > SIZE_MAX)
        return -E2BIG;
    int r = sqz_ctr_order_first(c);
    if (r == 0 && !pre)
        r = sqz_ctr_room(c, total);
    if (r < 0)
        return r;
    uint8_t *wbuf = malloc((size_t)(pre + total));
    if (!wbuf)
        return -ENOMEM;
    if (pre)
        sqz_ctr_header_region(c, wbuf);
    uint8_t *buf = wbuf + pre;
    uint64_t txn = c->st.txn + 1;
    uint64_t fid = c->hdr.file_id;
    uint64_t pos = 0;
    uint64_t data_total = total - sqz_rec_size(cplen);
    /* the COMMIT payload is filled in as the DATA records are laid out */
    uint8_t *cp = buf + data_total + SQZ_REC_HDR;
    sqz_put64(cp, new_length);
    sqz_put32(cp + 8, (uint32_t)total_n);
    sqz_put32(cp + 12, 0);
    for (size_t i = 0; i < total_n; i++) {
        const sqz_prepared *b = i < n ? &blocks[i] : fix;
        sqz_entry e = {.kind = b->kind};
        if (b->kind != SQZ_KIND_HOLE) {
            uint8_t *rec = buf + pos;
            uint8_t *pl = rec + SQZ_REC_HDR;
            uint32_t plen = SQZ_DATA_PREFIX + b->stored_len;
            sqz_put64(pl, b->idx);
            sqz_put32(pl + 8, b->crc);
            pl[12] = b->kind;
            pl[13] = (uint8_t)c->hdr.params.log2bs;
            sqz_put16(pl + 14, 0);
            memcpy(pl + SQZ_DATA_PREFIX, b->stored, b->stored_len);
            sqz_rec_seal(rec, SQZ_REC_DATA, fid, txn, plen);
            e.off = c->end + pos;
            e.len = b->stored_len;
            e.crc = b->crc;
            pos += sqz_rec_size(plen);
        }
        sqz_wire_put(cp + SQZ_LIST_PREFIX + i * SQZ_ENTRY_WIRE, b->idx, b->kind,
                     &e);
    }
    sqz_rec_seal(buf + data_total, SQZ_REC_COMMIT, fid, txn, cplen);
    r = c->io.pwrite(c->io.ctx, c->fd, wbuf, (size_t)(pre + total),
                     c->end - pre);
    if (r < 0) {
        free(wbuf);
        /* take back whatever part of the append reached the file */
        if (c->io.truncate(c->io.ctx, c->fd, c->end - pre) < 0)
            c->broken = 1;
        c->phys_end = c->end - pre;
        return r;
    }
    if (pre) {
        c->hdr_pending = 0;
        c->first_unsynced = 1;
    }
    /* the commit is in the file: mirror it in memory */
    pos = 0;
    for (size_t i = 0; i < total_n; i++) {
        const sqz_prepared *b = i < n ? &blocks[i] : fix;
        sqz_entry e = {.kind = b->kind};
        if (b->kind != SQZ_KIND_HOLE) {
            e.off = c->end + pos;
            e.len = b->stored_len;
            e.crc = b->crc;
            pos += sqz_rec_size(SQZ_DATA_PREFIX + (uint64_t)b->stored_len);
        }
        uint64_t replaced;
        int s = sqz_index_set(&c->st.ix, b->idx, &e, &replaced);
        if (s < 0) {
            /* memory no longer mirrors the file: refuse further writes;
             * reopening recovers the committed state from the file */
            c->broken = 1;
            r = s;
        }
        c->st.dead_bytes += replaced;
    }
    free(wbuf);
    c->st.dead_bytes += sqz_index_drop_from(&c->st.ix, nb);
    c->st.length = new_length;
    c->st.txn = txn;
    c->end += total;
    c->since_ckpt += total;
    sqz_ctr_appended(c);
    return r;
}

int sqz_ctr_commit_locked(sqz_ctr *c, sqz_prepared *blocks, size_t n,
                          uint64_t new_length)
{
    SQZ_ASSERT_EXCL(&c->lock);
    if (!c->writable)
        return -EROFS;
    if (c->broken)
        return -EIO;
    if (new_length > sqz_max_length(c->hdr.params.log2bs))
        return -EFBIG;
    if (n && !blocks)
        return -EINVAL;
    if ((uint64_t)n + 1 > SQZ_COMMIT_MAX_ENTRIES) /* + the tail fix-up */
        return -E2BIG;
    if (n == 0 && new_length == c->st.length)
        return 0;
    sqz_prepared fix;
    int have_fix;
    int r = tail_fixup(c, blocks, n, new_length, &fix, &have_fix);
    if (r < 0)
        return r;
    r = commit_write(c, blocks, n, &fix, have_fix, new_length);
    if (have_fix)
        sqz_prepared_free(&fix);
    return r;
}

int sqz_ctr_commit(sqz_ctr *c, sqz_prepared *blocks, size_t n,
                   uint64_t new_length)
{
    SQZ_WRLOCK(&c->lock, SQZ_RANK_CTR);
    int r = sqz_ctr_commit_locked(c, blocks, n, new_length);
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

uint64_t sqz_max_length(int log2bs)
{
    if (log2bs < SQZ_LOG2BS_MIN || log2bs > SQZ_LOG2BS_MAX)
        return 0;
    uint64_t blocks = (UINT32_MAX - SQZ_LIST_PREFIX) / SQZ_ENTRY_WIRE;
    uint64_t max = blocks << log2bs;
    return max < SQZ_MAX_LENGTH ? max : SQZ_MAX_LENGTH;
}

int sqz_ctr_block_same(sqz_ctr *a, sqz_ctr *b, uint64_t idx)
{
    if (a->hdr.file_id != b->hdr.file_id ||
        a->hdr.params.log2bs != b->hdr.params.log2bs)
        return 0;
    SQZ_RDLOCK(&a->lock, SQZ_RANK_CTR);
    const sqz_entry *ea = sqz_index_get(&a->st.ix, idx);
    sqz_entry ca = ea ? *ea : (sqz_entry){0};
    SQZ_RWUNLOCK(&a->lock);
    SQZ_RDLOCK(&b->lock, SQZ_RANK_CTR);
    const sqz_entry *eb = sqz_index_get(&b->st.ix, idx);
    sqz_entry cb = eb ? *eb : (sqz_entry){0};
    SQZ_RWUNLOCK(&b->lock);
    /* a block is rewritten only by appending a new DATA record, so the
     * same record offset, size and checksum mean the same stored bytes */
    return ca.off == cb.off && ca.len == cb.len && ca.crc == cb.crc &&
           (ca.off == 0 || ca.kind == cb.kind);
}
