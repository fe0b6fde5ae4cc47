/* The byte-level API (sqz_ctr_pread / pwrite / truncate), built on the
 * block API with read-modify-write of partial blocks. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "format/format_int.h"
#include "common/lockorder.h"

ssize_t sqz_ctr_pread(sqz_ctr *c, void *buf, size_t n, uint64_t off)
{
    unsigned char *tmp = malloc(c->bs);
    if (!tmp)
        return -ENOMEM;
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    uint64_t len = c->st.length;
    ssize_t r = 0;
    if (off < len) {
        if (n > len - off)
            n = (size_t)(len - off);
        if (n > SSIZE_MAX)
            n = SSIZE_MAX;
        size_t done = 0;
        while (done < n) {
            uint64_t pos = off + done;
            uint64_t idx = pos >> c->hdr.params.log2bs;
            size_t in = (size_t)(pos & (c->bs - 1));
            size_t take = c->bs - in < n - done ? c->bs - in : n - done;
            ssize_t g = sqz_ctr_read_block_locked(c, idx, tmp, NULL);
            if (g < 0) {
                r = g;
                break;
            }
            memcpy((unsigned char *)buf + done, tmp + in, take);
            done += take;
        }
        if (r == 0)
            r = (ssize_t)n;
    }
    SQZ_RWUNLOCK(&c->lock);
    free(tmp);
    return r;
}

ssize_t sqz_ctr_pwrite(sqz_ctr *c, const void *buf, size_t n, uint64_t off)
{
    if (n == 0)
        return 0;
    int log2bs = ((const sqz_ctr *)c)->hdr.params.log2bs;
    uint64_t max = sqz_max_length(log2bs);
    if (n > SSIZE_MAX || off > max || n > max - off)
        return -EFBIG;
    uint64_t first = off >> log2bs, last = (off + n - 1) >> log2bs;
    size_t count = (size_t)(last - first + 1);
    sqz_prepared *pb = calloc(count, sizeof *pb);
    unsigned char *tmp = malloc(c->bs);
    if (!pb || !tmp) {
        free(pb);
        free(tmp);
        return -ENOMEM;
    }
    SQZ_WRLOCK(&c->lock, SQZ_RANK_CTR);
    ssize_t r = c->writable ? 0 : -EROFS;
    const unsigned char *src = buf;
    for (size_t i = 0; i < count && r == 0; i++) {
        uint64_t idx = first + i;
        uint64_t bstart = idx << log2bs;
        uint64_t from = off > bstart ? off : bstart;
        uint64_t to = off + n < bstart + c->bs ? off + n : bstart + c->bs;
        const unsigned char *data;
        if (from == bstart && to == bstart + c->bs) {
            data = src + (bstart - off);
        } else {
            ssize_t g = sqz_ctr_read_block_locked(c, idx, tmp, NULL);
            if (g < 0) {
                r = g;
                break;
            }
            memcpy(tmp + (from - bstart), src + (from - off), (size_t)(to - from));
            data = tmp;
        }
        r = sqz_ctr_prepare(c, idx, data, &pb[i]);
    }
    if (r == 0) {
        uint64_t new_len = off + n > c->st.length ? off + n : c->st.length;
        r = sqz_ctr_commit_locked(c, pb, count, new_len);
    }
    SQZ_RWUNLOCK(&c->lock);
    for (size_t i = 0; i < count; i++)
        sqz_prepared_free(&pb[i]);
    free(pb);
    free(tmp);
    return r < 0 ? r : (ssize_t)n;
}

int sqz_ctr_truncate(sqz_ctr *c, uint64_t length)
{
    SQZ_WRLOCK(&c->lock, SQZ_RANK_CTR);
    int r = sqz_ctr_commit_locked(c, NULL, 0, length);
    SQZ_RWUNLOCK(&c->lock);
    return r;
}
