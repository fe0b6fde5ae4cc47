/* The kept ctime of a backing object (include/squeezefs/shown.h,
 * docs/FORMAT.md "Shown times"): 36 bytes, little-endian:
 *   0 magic "SQSH"   4 version 1, 3 zero bytes
 *   8 ctime seconds (i64)   16 ctime nanoseconds (u32)
 *  20 until nanoseconds (u32)   24 until seconds (i64)
 *  32 checksum of bytes 0..31 */
#include "squeezefs/shown.h"
#include "format/format_int.h"

#include <errno.h>
#include <string.h>

#define SHOWN_MAGIC 0x48535153u /* "SQSH" */

void sqz_shown_encode(const sqz_shown *s, uint8_t out[SQZ_SHOWN_SIZE])
{
    memset(out, 0, SQZ_SHOWN_SIZE);
    sqz_put32(out, SHOWN_MAGIC);
    out[4] = 1;
    sqz_put64(out + 8, (uint64_t)s->ctime.tv_sec);
    sqz_put32(out + 16, (uint32_t)s->ctime.tv_nsec);
    sqz_put32(out + 20, (uint32_t)s->until.tv_nsec);
    sqz_put64(out + 24, (uint64_t)s->until.tv_sec);
    sqz_put32(out + 32, sqz_checksum(out, 32));
}

int sqz_shown_decode(const void *in, size_t n, sqz_shown *s)
{
    const uint8_t *b = in;
    if (n != SQZ_SHOWN_SIZE || sqz_get32(b) != SHOWN_MAGIC || b[4] != 1 ||
        b[5] || b[6] || b[7] || sqz_get32(b + 32) != sqz_checksum(b, 32))
        return -EBADMSG;
    uint32_t cn = sqz_get32(b + 16), un = sqz_get32(b + 20);
    if (cn >= 1000000000u || un >= 1000000000u)
        return -EBADMSG;
    s->ctime.tv_sec = (time_t)(int64_t)sqz_get64(b + 8);
    s->ctime.tv_nsec = (long)cn;
    s->until.tv_sec = (time_t)(int64_t)sqz_get64(b + 24);
    s->until.tv_nsec = (long)un;
    return 0;
}

static int ts_le(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec ||
           (a->tv_sec == b->tv_sec && a->tv_nsec <= b->tv_nsec);
}

int sqz_shown_counts(const sqz_shown *s, const struct timespec *bctime)
{
    return ts_le(bctime, &s->until) && ts_le(&s->ctime, bctime);
}
