/* Holes of regular files through the mount: SEEK_DATA / SEEK_HOLE
 * (lseek), and fallocate's PUNCH_HOLE and ZERO_RANGE on a container (the
 * engine's sqz_file_seek and sqz_file_zero_range, at block granularity).
 * Locks: docs/LOCKING.md (io). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "content/content.h"
#include "content/content_int.h"
#include "common/lockorder.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int sqz_content_has_writers(struct sqz_inode *in)
{
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    int w = in->writers > 0;
    SQZ_RWUNLOCK(&in->io);
    return w;
}

int sqz_content_lseek(struct sqz_fs *fs, struct sqz_handle *h, uint64_t off,
                      int whence, uint64_t *out)
{
    (void)fs;
    struct sqz_inode *in = h->inode;
    if (whence != SEEK_DATA && whence != SEEK_HOLE)
        return -EINVAL;
    if (h->plain_fd >= 0) {
        off_t r = lseek(h->plain_fd, (off_t)off, whence);
        if (r < 0)
            return -errno;
        *out = (uint64_t)r;
        return 0;
    }
    int hole = whence == SEEK_HOLE;
    int rc;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (in->kind == SQZ_K_CONTAINER && in->file) {
        rc = sqz_file_seek(in->file, off, hole, out);
    } else if (in->kind == SQZ_K_PACKED && in->pack.buf) {
        /* a packed file is at most one block: data unless all zeros */
        const unsigned char *b = in->pack.buf;
        uint64_t n = in->pack.buf_len;
        int data = n > 0 && (b[0] != 0 || memcmp(b, b + 1, n - 1) != 0);
        rc = off < n && (hole || data) ? 0 : -ENXIO;
        *out = hole && data ? n : off;
    } else if (in->kind == SQZ_K_PENDING ||
               (in->kind == SQZ_K_PLAIN && fs->opts.ro)) {
        rc = -ENXIO; /* empty (see sqz_content_read) */
    } else {
        rc = -EIO;
    }
    SQZ_RWUNLOCK(&in->io);
    return rc;
}

int sqz_content_zero_locked(struct sqz_inode *in, int mode, uint64_t off,
                            uint64_t len)
{
    SQZ_ASSERT_EXCL(&in->io);
    if (in->kind != SQZ_K_CONTAINER || !in->file)
        return -EIO;
    return sqz_file_zero_range(in->file, off, len,
                               (mode & FALLOC_FL_KEEP_SIZE) != 0);
}
