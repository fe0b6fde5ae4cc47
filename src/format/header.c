/* Byte codecs of the header region: the immutable header in sector 0 and
 * the two anchor slots in sectors 1 and 2 (docs/FORMAT.md). */
#include <errno.h>

#include "format/format_int.h"
#include "common/errbuf.h"

const unsigned char sqz_hdr_magic[8] = {'S', 'Q', 'Z', 'F', 'S', 0, 1, 0x1a};

/* sector 0:
 *  0 magic[8]  8 version u32  12 header size u32 (64)
 * 16 alg u8  17 auto_mode u8  18 log2bs u8  19 reserved u8
 * 20 level i32  24 min_saving u32  28 flags u32
 * 32 creation length u64  40 file id u64  48 reserved[12]
 * 60 checksum u32 over bytes 0..59 */
void sqz_header_encode(const sqz_header *h, uint8_t out[SQZ_HDR_SIZE])
{
    memset(out, 0, SQZ_HDR_SIZE);
    memcpy(out, sqz_hdr_magic, 8);
    sqz_put32(out + 8, h->version);
    sqz_put32(out + 12, SQZ_HDR_SIZE);
    out[16] = (uint8_t)h->params.alg;
    out[17] = h->params.auto_mode;
    out[18] = (uint8_t)h->params.log2bs;
    sqz_put32(out + 20, (uint32_t)h->params.level);
    sqz_put32(out + 24, h->params.min_saving);
    sqz_put32(out + 28, h->flags);
    sqz_put64(out + 32, h->create_length);
    sqz_put64(out + 40, h->file_id);
    sqz_put32(out + 60, sqz_checksum(out, 60));
}

int sqz_header_decode(const uint8_t *in, size_t n, sqz_header *h,
                      char *err, size_t errlen)
{
    if (n < SQZ_HDR_SIZE || memcmp(in, sqz_hdr_magic, 8) != 0) {
        sqz_errf(err, errlen, "not a squeezefs container");
        return -ENOENT;
    }
    if (sqz_get32(in + 60) != sqz_checksum(in, 60)) {
        sqz_errf(err, errlen, "header damaged (checksum mismatch)");
        return -EBADMSG;
    }
    h->version = sqz_get32(in + 8);
    if (h->version != 1 && h->version != SQZ_FMT_VERSION) {
        sqz_errf(err, errlen, "unsupported container format version");
        return -EPROTONOSUPPORT;
    }
    memset(&h->params, 0, sizeof h->params);
    h->params.alg = (sqz_alg)in[16];
    h->params.auto_mode = in[17];
    h->params.log2bs = in[18];
    h->params.level = (int32_t)sqz_get32(in + 20);
    h->params.min_saving = sqz_get32(in + 24);
    h->flags = sqz_get32(in + 28);
    h->create_length = sqz_get64(in + 32);
    h->file_id = sqz_get64(in + 40);
    if (sqz_get32(in + 12) != SQZ_HDR_SIZE || h->flags != 0 ||
        h->create_length != 0 || sqz_params_check(&h->params, NULL, 0) < 0) {
        sqz_errf(err, errlen, "header damaged (invalid field)");
        return -EBADMSG;
    }
    return 0;
}

/* anchor slot:
 *  0 magic u32  4 slot u32  8 file id u64  16 seq u64
 * 24 checkpoint offset u64  32 checkpoint length u64 (both 0: none yet)
 * 40 durable end u64  48 reserved u32  52 checksum u32 over bytes 0..51 */
void sqz_anchor_encode(const sqz_anchor *a, unsigned slot, uint64_t file_id,
                       uint8_t out[SQZ_ANCHOR_SIZE])
{
    memset(out, 0, SQZ_ANCHOR_SIZE);
    sqz_put32(out, SQZ_ANCHOR_MAGIC);
    sqz_put32(out + 4, slot);
    sqz_put64(out + 8, file_id);
    sqz_put64(out + 16, a->seq);
    sqz_put64(out + 24, a->ckpt_off);
    sqz_put64(out + 32, a->ckpt_len);
    sqz_put64(out + 40, a->durable_end);
    sqz_put32(out + 52, sqz_checksum(out, 52));
}

/* ext: 0 magic u32 | 4 reserved u32 | 8 length u64 | 16 txn u64 |
 * 24 checksum u32 of sector bytes [0, 88) | 28 reserved u32 */
void sqz_anchor_ext_encode(uint8_t *sector, uint64_t length, uint64_t txn)
{
    uint8_t *x = sector + SQZ_ANCHOR_EXT_OFF;
    memset(sector + SQZ_ANCHOR_SIZE, 0, SQZ_ANCHOR_READ - SQZ_ANCHOR_SIZE);
    sqz_put32(x, SQZ_ANCHOR_EXT_MAGIC);
    sqz_put64(x + 8, length);
    sqz_put64(x + 16, txn);
    sqz_put32(x + 24, sqz_checksum(sector, SQZ_ANCHOR_EXT_OFF + 24));
}

int sqz_anchor_ext_decode(const uint8_t *in, uint64_t *length, uint64_t *txn)
{
    const uint8_t *x = in + SQZ_ANCHOR_EXT_OFF;
    int zero = 1;
    for (unsigned i = SQZ_ANCHOR_SIZE; i < SQZ_ANCHOR_READ; i++)
        if (in[i]) {
            zero = 0;
            break;
        }
    if (zero)
        return 0;
    for (unsigned i = SQZ_ANCHOR_SIZE; i < SQZ_ANCHOR_EXT_OFF; i++)
        if (in[i])
            return -EBADMSG;
    if (sqz_get32(x) != SQZ_ANCHOR_EXT_MAGIC || sqz_get32(x + 4) ||
        sqz_get32(x + 28) ||
        sqz_get32(x + 24) != sqz_checksum(in, SQZ_ANCHOR_EXT_OFF + 24))
        return -EBADMSG;
    *length = sqz_get64(x + 8);
    *txn = sqz_get64(x + 16);
    return *length > SQZ_MAX_LENGTH ? -EBADMSG : 1;
}

int sqz_anchor_decode(const uint8_t *in, unsigned slot, uint64_t file_id,
                      uint64_t log0, sqz_anchor *a)
{
    int zero = 1;
    for (unsigned i = 0; i < SQZ_ANCHOR_SIZE; i++)
        if (in[i]) {
            zero = 0;
            break;
        }
    memset(a, 0, sizeof *a);
    if (zero)
        return 0;
    if (sqz_get32(in) != SQZ_ANCHOR_MAGIC || sqz_get32(in + 4) != slot ||
        sqz_get64(in + 8) != file_id || sqz_get32(in + 48) ||
        sqz_get32(in + 52) != sqz_checksum(in, 52))
        return -EBADMSG;
    a->seq = sqz_get64(in + 16);
    a->ckpt_off = sqz_get64(in + 24);
    a->ckpt_len = sqz_get64(in + 32);
    a->durable_end = sqz_get64(in + 40);
    /* the durable end lies at or after the checkpoint (or the header) */
    uint64_t floor = a->ckpt_off ? a->ckpt_off + a->ckpt_len : log0;
    if (a->seq == 0 || (a->seq & 1) != slot || (!a->ckpt_off != !a->ckpt_len) ||
        a->ckpt_off + a->ckpt_len < a->ckpt_off || (a->durable_end & 7) ||
        a->durable_end < floor) {
        memset(a, 0, sizeof *a);
        return -EBADMSG;
    }
    return 1;
}
