/* Codec "qipc": kdb+'s IPC compression (kdb+ algorithm 1), no levels.
 * Written from the published description of the scheme; no code of any
 * implementation was used.
 *
 * The scheme: an LZ77 variant whose only dictionary is a 256-entry table of
 * earlier output positions, indexed by the XOR of the two bytes at a
 * position (out[q] ^ out[q+1]). The stream is a sequence of groups of up to
 * eight items, each group led by a control byte whose bits (least
 * significant first) tell the kind of each item:
 *   0  a literal: one byte, copied to the output;
 *   1  a back-reference: two bytes, an index i into the table and a count c;
 *      copy c + 2 bytes (2..257) from position table[i] of the output
 *      (forwards, byte by byte: the copy may overlap the bytes it writes).
 * The decoder keeps the table itself, updating it exactly as the encoder
 * does, so no table is transmitted:
 *   - positions are hashed in order once both of their bytes exist; after
 *     a back-reference of c + 2 bytes starting at s, positions up to s are
 *     hashed (s itself included: its pair is the first two copied bytes)
 *     and positions s + 1 .. s + c + 1 are skipped, hashing resumes at
 *     s + c + 2.
 * The last group may be short: items stop when the output is complete, and
 * no control byte is written for a group without items.
 *
 * squeezefs' block payload (the container records already hold the
 * compressed size and the block size): the kdb+ IPC message header (8
 * bytes) is not kept, so positions count from the first byte of the block,
 * and the table starts empty. The 4-byte uncompressed length that follows
 * the header in an IPC message is kept, as a little-endian uint32 at the
 * start of the payload (it makes a damaged or mismatched block fail before
 * decoding, and gives an empty block a non-empty payload):
 *     [len: uint32 LE == block size][control byte, items...]...
 *
 * Decoding is strict: the length must equal the expected size, a
 * back-reference must name a table entry that was set (it then always
 * points to bytes already produced) and must not run past the expected
 * size, the input must end exactly after the last item, and the unused
 * bits of the last control byte must be 0. Anything else is -EBADMSG.
 *
 * Worst case: all literals, one control byte per eight input bytes, so
 * bound(n) = 4 + n + ceil(n / 8). The encoder is greedy: at every position
 * it takes the table's candidate if its first two bytes match (a 2-byte
 * reference costs 2 bytes, as do two literals, but one control bit less)
 * and extends it as far as it matches, up to 257 bytes. The table is fixed
 * by the format, so there is no other candidate to try and no level. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "codec_impl.h"

#define QIPC_HDR 4         /* uint32 LE uncompressed length */
#define QIPC_MAXREF 257    /* longest back-reference: count 255 + 2 */

static size_t qipc_bound(size_t n)
{
    if (n > UINT32_MAX)
        return 0;
    return QIPC_HDR + n + (n + 7) / 8;
}

/* Number of equal bytes at a and b, at most max. */
static size_t match_len(const uint8_t *a, const uint8_t *b, size_t max)
{
    size_t c = 0;
    while (max - c >= 8) {
        uint64_t x, y;
        memcpy(&x, a + c, 8);
        memcpy(&y, b + c, 8);
        uint64_t diff = x ^ y;
        if (diff) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            return c + (size_t)__builtin_ctzll(diff) / 8;
#else
            return c + (size_t)__builtin_clzll(diff) / 8;
#endif
        }
        c += 8;
    }
    while (c < max && a[c] == b[c])
        c++;
    return c;
}

/* Table maintenance, shared by both directions: position q is recorded
 * (as q + 1; 0 = never set) under buf[q] ^ buf[q + 1] once buf[q + 1]
 * exists. At an item boundary s, either position s - 1 is still waiting
 * for its pair (`pend`, after a literal) or nothing is (at the start and
 * after a back-reference, whose inner positions are never recorded). */
#define RECORD(table, buf, q) ((table)[(buf)[q] ^ (buf)[(q) + 1]] = (uint32_t)(q) + 1)

static ssize_t qipc_compress(void **slot, int level, const void *src, size_t n, void *dst,
                             size_t cap)
{
    (void)slot;
    (void)level;
    if (n > UINT32_MAX)
        return -EINVAL;
    if (cap < QIPC_HDR)
        return -ENOSPC;
    const uint8_t *in = src;
    uint8_t *out = dst;
    out[0] = (uint8_t)n;
    out[1] = (uint8_t)(n >> 8);
    out[2] = (uint8_t)(n >> 16);
    out[3] = (uint8_t)(n >> 24);

    uint32_t table[256] = {0};
    size_t op = QIPC_HDR; /* output position */
    size_t s = 0;         /* input position of the next item */
    int pend = 0;         /* position s - 1 waits to be recorded */
    size_t ctl = 0;       /* where the current control byte is */
    unsigned bit = 0;     /* its bit for the next item; 0: start a group */
    while (s < n) {
        if (bit == 0) {
            if (op >= cap)
                return -ENOSPC;
            ctl = op++;
            out[ctl] = 0;
            bit = 1;
        }
        if (n - s >= 2) {
            unsigned h = in[s] ^ in[s + 1];
            uint32_t cand = table[h];
            if (cand != 0 && in[cand - 1] == in[s] && in[cand] == in[s + 1]) {
                size_t max = n - s - 2;
                if (max > QIPC_MAXREF - 2)
                    max = QIPC_MAXREF - 2;
                size_t c = match_len(in + cand + 1, in + s + 2, max);
                if (cap - op < 2)
                    return -ENOSPC;
                out[ctl] |= (uint8_t)bit;
                out[op++] = (uint8_t)h;
                out[op++] = (uint8_t)c;
                if (pend)
                    RECORD(table, in, s - 1);
                RECORD(table, in, s);
                s += c + 2;
                pend = 0;
                bit = (bit << 1) & 0xffu;
                continue;
            }
        }
        if (op >= cap)
            return -ENOSPC;
        out[op++] = in[s];
        if (pend)
            RECORD(table, in, s - 1);
        pend = 1;
        s++;
        bit = (bit << 1) & 0xffu;
    }
    return (ssize_t)op;
}

/* Copies count bytes from out + q to out + s, forwards (q < s: a source
 * byte may be one this copy wrote). With `wild`, up to 7 bytes past
 * out + s + count may be written too (the caller has room there). */
static inline void copy_back(uint8_t *out, size_t s, size_t q, size_t count,
                             int wild)
{
    if (wild && s - q >= 8) {
        for (size_t k = 0; k < count; k += 8)
            memcpy(out + s + k, out + q + k, 8);
    } else if (s - q >= count) {
        memcpy(out + s, out + q, count);
    } else {
        for (size_t k = 0; k < count; k++)
            out[s + k] = out[q + k];
    }
}

/* Output one back-reference: count (>= 2) bytes from position q < s - 1,
 * recording the pairs that end at the new positions (and the pending one
 * before s). wild: dst has room for copy_back's overlong copies. Returns
 * the new output position. */
static inline size_t put_ref(unsigned char *out, uint32_t *table, size_t s,
                             size_t q, size_t count, int pend, int wild)
{
    out[s] = out[q];
    out[s + 1] = out[q + 1];
    if (pend)
        RECORD(table, out, s - 1);
    RECORD(table, out, s);
    copy_back(out, s + 2, q + 2, count - 2, wild);
    return s + count;
}

static ssize_t qipc_decompress(void **slot, const void *src, size_t n, void *dst,
                               size_t expected)
{
    (void)slot;
    const uint8_t *ip = src, *end = ip + n;
    uint8_t *out = dst;
    if (n < QIPC_HDR || expected > UINT32_MAX)
        return -EBADMSG;
    uint32_t len = (uint32_t)ip[0] | (uint32_t)ip[1] << 8 |
                   (uint32_t)ip[2] << 16 | (uint32_t)ip[3] << 24;
    if (len != expected)
        return -EBADMSG;
    ip += QIPC_HDR;

    uint32_t table[256] = {0};
    size_t s = 0;
    int pend = 0;
    unsigned ctl = 0, bit = 0;
    while (s < expected) {
        if (bit == 0 && end - ip > 16 &&
            expected - s >= 8 * QIPC_MAXREF + 8) {
            /* A whole group with room for its longest form (8 references
             * of 2 input bytes and 257 output bytes, + 8 for wild copies):
             * no bounds checks per item. */
            unsigned c = *ip++;
            if (c == 0) {
                memcpy(out + s, ip, 8);
                ip += 8;
                if (pend)
                    RECORD(table, out, s - 1);
                for (size_t k = s; k < s + 7; k++)
                    RECORD(table, out, k);
                s += 8;
                pend = 1;
                continue;
            }
            for (unsigned b = 1; b < 256; b <<= 1) {
                if (c & b) {
                    uint32_t ref = table[ip[0]];
                    size_t count = (size_t)ip[1] + 2;
                    ip += 2;
                    if (ref == 0)
                        return -EBADMSG;
                    s = put_ref(out, table, s, ref - 1, count, pend, 1);
                    pend = 0;
                } else {
                    out[s] = *ip++;
                    if (pend)
                        RECORD(table, out, s - 1);
                    pend = 1;
                    s++;
                }
            }
            continue;
        }
        if (bit == 0) {
            if (ip == end)
                return -EBADMSG;
            ctl = *ip++;
            bit = 1;
        }
        if (ctl & bit) {
            if (end - ip < 2)
                return -EBADMSG;
            uint32_t ref = table[ip[0]];
            size_t count = (size_t)ip[1] + 2;
            ip += 2;
            /* An entry that was set is a position q < s - 1: the first two
             * bytes are already there, and so is every later source byte
             * when it is read (the copy runs forwards, s - q >= 2). */
            if (ref == 0 || count > expected - s)
                return -EBADMSG;
            s = put_ref(out, table, s, ref - 1, count, pend, 0);
            pend = 0;
        } else {
            if (ip == end)
                return -EBADMSG;
            out[s] = *ip++;
            if (pend)
                RECORD(table, out, s - 1);
            pend = 1;
            s++;
        }
        bit = (bit << 1) & 0xffu;
    }
    /* nothing after the last item; unused control bits are 0 */
    if (ip != end || (bit != 0 && (ctl & ~(bit - 1u)) != 0))
        return -EBADMSG;
    return (ssize_t)expected;
}

const sqz_codec_ops sqz_qipc_ops = {
    .bound = qipc_bound,
    .compress = qipc_compress,
    .decompress = qipc_decompress,
};
