/* copy_file_range inside the mount. Whole blocks between two containers
 * of the same algorithm and block size, at offsets of the same place in
 * a block, are copied as they are stored (src/engine/file_copy.c: read,
 * checksum, append; nothing decompressed or compressed); every other
 * byte is read and written by the daemon (decompressed and compressed
 * again, but without the round trip through the calling process). Never
 * two inodes' io at once (docs/LOCKING.md): the stored blocks of a batch
 * are taken under the source's io, then committed under the
 * destination's. */
#include "daemon/fs.h"
#include "node/inode.h"
#include "content/content.h"
#include "content/content_int.h"
#include "common/lockorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Blocks per batch of stored blocks. */
#define COPY_BATCH 256u

/* io held: 1 if in is an open container coded with alg and 2^log2bs-byte
 * blocks. */
static int coded_as(struct sqz_inode *in, sqz_alg alg, int log2bs)
{
    if (in->kind != SQZ_K_CONTAINER || !in->file)
        return 0;
    const sqz_params *p = sqz_ctr_params(sqz_file_ctr(in->file));
    return p->alg == alg && p->log2bs == log2bs;
}

/* The coding and length of in's open container (takes io shared): 0, or
 * -1 if it is not an open container. */
static int coding_of(struct sqz_inode *in, sqz_alg *alg, int *log2bs,
                     uint64_t *len)
{
    int rc = -1;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (in->kind == SQZ_K_CONTAINER && in->file) {
        const sqz_params *p = sqz_ctr_params(sqz_file_ctr(in->file));
        *alg = p->alg;
        *log2bs = p->log2bs;
        *len = sqz_file_length(in->file);
        rc = 0;
    }
    SQZ_RWUNLOCK(&in->io);
    return rc;
}

/* Copy n whole blocks as stored, from block si of src to block di of dst.
 * Returns n, 0 if the files no longer allow it (changed meanwhile: the
 * caller copies the bytes instead), or -errno. */
static ssize_t copy_stored(struct sqz_inode *src, struct sqz_inode *dst,
                           uint64_t si, uint64_t di, size_t n, sqz_alg alg,
                           int log2bs)
{
    sqz_prepared *p = calloc(n, sizeof *p);
    if (!p)
        return -ENOMEM;
    int rc = 1;
    SQZ_RDLOCK(&src->io, SQZ_RANK_IO);
    if (coded_as(src, alg, log2bs))
        rc = sqz_file_stored_get(src->file, si, n, di, p);
    SQZ_RWUNLOCK(&src->io);
    if (rc == 0) {
        sqz_inode_changed(dst);
        SQZ_MUTEX_LOCK(&dst->meta, SQZ_RANK_META);
        dst->utimes_kept = 0; /* a data change (content_io.c) */
        SQZ_MUTEX_UNLOCK(&dst->meta);
        rc = 1;
        SQZ_RDLOCK(&dst->io, SQZ_RANK_IO);
        if (coded_as(dst, alg, log2bs))
            rc = sqz_file_stored_put(dst->file, p, n);
        SQZ_RWUNLOCK(&dst->io);
        for (size_t i = 0; i < n; i++)
            sqz_prepared_free(&p[i]);
    }
    free(p);
    if (rc == 1 || rc == -EINVAL) /* changed, or shorter meanwhile */
        return 0;
    return rc < 0 ? rc : (ssize_t)n;
}

/* A destination created empty (PENDING: its container is made with its
 * first data) becomes a container now, with the source's first bytes as
 * the sample its policy may choose by, so that stored blocks can go into
 * it. Takes the source's io, then the destination's. */
static int materialize(struct sqz_fs *fs, struct sqz_handle *hin,
                       uint64_t off_in, struct sqz_inode *dst)
{
    SQZ_RDLOCK(&dst->io, SQZ_RANK_IO);
    int pending = dst->kind == SQZ_K_PENDING;
    SQZ_RWUNLOCK(&dst->io);
    if (!pending)
        return 0;
    enum { SAMPLE = 64 * 1024 };
    void *sample = malloc(SAMPLE);
    if (!sample)
        return -ENOMEM;
    ssize_t n = sqz_content_read(fs, hin, sample, SAMPLE, off_in, NULL, NULL,
                                 NULL);
    int rc = n < 0 ? (int)n : 0;
    if (n > 0) {
        SQZ_WRLOCK(&dst->io, SQZ_RANK_IO);
        if (dst->kind == SQZ_K_PENDING)
            rc = sqz_content_materialize_locked(fs, dst, sample, (size_t)n);
        SQZ_RWUNLOCK(&dst->io);
    }
    free(sample);
    return rc;
}

ssize_t sqz_content_copy_range(struct sqz_fs *fs, struct sqz_handle *hin,
                               uint64_t off_in, struct sqz_handle *hout,
                               uint64_t off_out, size_t len)
{
    if (!hout->writable || hout->append)
        return -EBADF;
    if (off_out + len < off_out || off_out + len > SQZ_MAX_LENGTH)
        return -EFBIG;
    struct sqz_inode *src = hin->inode, *dst = hout->inode;
    sqz_alg alg = SQZ_ALG_NONE, a2;
    int log2bs = 0, l2;
    uint64_t slen = 0, dlen;
    if (src != dst && hout->plain_fd < 0) {
        int mrc = materialize(fs, hin, off_in, dst);
        if (mrc < 0)
            return mrc;
    }
    /* stored blocks: two open containers coded alike, at offsets the same
     * distance from a block's start (another file: one io at a time) */
    int fast = src != dst && hin->plain_fd < 0 && hout->plain_fd < 0 &&
               coding_of(src, &alg, &log2bs, &slen) == 0 &&
               coding_of(dst, &a2, &l2, &dlen) == 0 && a2 == alg &&
               l2 == log2bs &&
               ((off_in ^ off_out) & ((1ull << log2bs) - 1)) == 0;
    uint64_t bs = fast ? 1ull << log2bs : 0;
    void *buf = NULL;
    size_t done = 0;
    ssize_t rc = 0;
    while (done < len) {
        uint64_t pi = off_in + done, po = off_out + done;
        if (fast && (pi & (bs - 1)) == 0 && pi < slen) {
            uint64_t whole = (len - done) / bs, avail = (slen - pi) / bs;
            size_t n = (size_t)(whole < avail ? whole : avail);
            if (n > COPY_BATCH)
                n = COPY_BATCH;
            if (n > 0) {
                rc = copy_stored(src, dst, pi / bs, po / bs, n, alg, log2bs);
                if (rc < 0)
                    break;
                if (rc > 0) {
                    done += n * (size_t)bs;
                    continue;
                }
                fast = 0; /* changed meanwhile: bytes from here on */
            }
        }
        size_t chunk = len - done < SQZ_MAX_IO ? len - done : SQZ_MAX_IO;
        if (fast && (pi & (bs - 1)) && chunk > bs - (pi & (bs - 1)))
            chunk = (size_t)(bs - (pi & (bs - 1))); /* up to a block start */
        if (!buf && !(buf = malloc(SQZ_MAX_IO))) {
            rc = -ENOMEM;
            break;
        }
        rc = sqz_content_read(fs, hin, buf, chunk, pi, NULL, NULL, NULL);
        if (rc <= 0)
            break; /* the end of the source, or an error */
        size_t got = (size_t)rc;
        rc = sqz_content_write(fs, hout, buf, got, po, 0);
        if (rc <= 0)
            break;
        done += (size_t)rc;
        if ((size_t)rc < got)
            break;
    }
    free(buf);
    if (done > 0)
        return (ssize_t)done; /* an error after progress: a short copy */
    return rc < 0 ? rc : 0;
}
