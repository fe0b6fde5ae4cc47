/* Reading the log at open: a scanner keeps a window of the file read with
 * large buffered reads; records are read and verified through it, and
 * after damage the scan resynchronises on the next valid record. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/replay_int.h"

/* Make [off, off+n) available (caller guarantees off+n <= fsize); the
 * buffer never exceeds max(n, SQZ_SCAN_CHUNK), so it is bounded by the
 * file size. */
int sqz_scan_get(scanner *s, uint64_t off, uint64_t n, const uint8_t **p)
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

/* Read the record at pos, which must end at or before limit: 1 valid (rec,
 * rh, total set), 0 invalid, <0 error. */
int sqz_scan_record(scanner *sc, uint64_t pos, uint64_t limit,
                       uint64_t file_id, sqz_rec_hdr *rh, const uint8_t **rec,
                       uint64_t *total)
{
    if (pos > limit || limit - pos < SQZ_REC_HDR)
        return 0;
    int r = sqz_scan_get(sc, pos, SQZ_REC_HDR, rec);
    if (r < 0)
        return r;
    if (sqz_rec_parse(*rec, file_id, rh) < 0)
        return 0;
    *total = sqz_rec_size(rh->plen);
    if (*total > limit - pos)
        return 0;
    if ((r = sqz_scan_get(sc, pos, *total, rec)) < 0)
        return r;
    return sqz_rec_verify(*rec, rh);
}

/* After damage at pos (inside the durable part, which ends at durable):
 * the offset of the next valid record of this file before durable, or
 * durable if there is none. Records are 8-aligned, so every 8th offset is
 * tried; the scanner reads 1 MiB windows, and the bytes checksummed for
 * candidates (headers that parse but whose checksum may fail) come out of
 * *budget, so a large damaged region costs linear time. */
int sqz_scan_resync(scanner *sc, uint64_t pos, uint64_t durable, uint64_t fid,
                  uint64_t *budget, uint64_t *next)
{
    for (uint64_t q = pos + 8; q < durable && durable - q >= SQZ_REC_HDR;
         q += 8) {
        const uint8_t *rec;
        sqz_rec_hdr rh;
        int r = sqz_scan_get(sc, q, SQZ_REC_HDR, &rec);
        if (r < 0)
            return r;
        if (sqz_rec_parse(rec, fid, &rh) < 0)
            continue;
        uint64_t total = sqz_rec_size(rh.plen);
        if (total > durable - q)
            continue;
        if (total > *budget)
            break;
        *budget -= total;
        if ((r = sqz_scan_get(sc, q, total, &rec)) < 0)
            return r;
        if (sqz_rec_verify(rec, &rh)) {
            *next = q;
            return 0;
        }
    }
    *next = durable;
    return 0;
}
