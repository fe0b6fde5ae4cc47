/* Regular files, packed (docs/FORMAT.md "Packed files"): a packed file's
 * content for readers, unpacking it before anything writes it, dropping
 * the pointer when a file is emptied, its figures. Recognising one is
 * kind probing (kind.c). Packing itself is done by the durable
 * thread (pack_job.c). Locks: docs/LOCKING.md (io, then meta). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/kind.h"
#include "store/pack_rd.h"
#include "pack/packing.h"
#include "content/content.h"
#include "content/content_int.h"
#include "common/lockorder.h"
#include "squeezefs/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

/* The backing directory of in (O_RDONLY|O_DIRECTORY) or -errno. */
static int parent_dirfd(struct sqz_fs *fs, struct sqz_inode *in)
{
    return sqz_inode_dirfd(fs, in, NULL, 0);
}

/* Read the content of a packed inode (malloc'd into *buf, *p its
 * pointer). 0, -EIO (damaged, logged), -ENODATA (not packed any more) or
 * -errno. Caller holds io. */
static int load(struct sqz_fs *fs, struct sqz_inode *in, sqz_pack_ptr *p,
                void **buf)
{
    char err[200] = "", label[PATH_MAX];
    *buf = NULL;
    int r = sqz_pack_ptr_of(in, p, err, sizeof(err));
    if (r == 0)
        return -ENODATA;
    if (r == 1) {
        *buf = malloc(p->length);
        if (!*buf)
            return -ENOMEM;
        int kept = sqz_pack_rd_get(fs, p->pack_id);
        if (kept >= 0) {
            r = sqz_pack_read_fd(kept, p, *buf, err, sizeof(err));
            close(kept);
            if (r == 0)
                return 0;
        }
        int dfd = parent_dirfd(fs, in);
        if (dfd < 0) {
            free(*buf);
            *buf = NULL;
            return dfd;
        }
        int pfd = sqz_pack_open(dfd, p->pack_id, err, sizeof(err));
        r = pfd < 0 ? pfd : sqz_pack_read_fd(pfd, p, *buf, err, sizeof(err));
        if (r == 0)
            sqz_pack_rd_put(fs, p->pack_id, pfd);
        else if (pfd >= 0)
            close(pfd);
        /* another mount may have moved the entry meanwhile: follow the
         * pointer once more if it changed */
        sqz_pack_ptr again;
        if (r == -EIO && sqz_pack_ptr_of(in, &again, NULL, 0) == 1 &&
            (again.pack_id != p->pack_id || again.off != p->off) &&
            again.length <= p->length) {
            *p = again;
            r = sqz_pack_read(dfd, p, *buf, err, sizeof(err));
        }
        close(dfd);
        if (r < 0) {
            free(*buf);
            *buf = NULL;
        }
    }
    if (r == -EBADMSG || r == -EIO) {
        sqz_inode_label(fs, in, label, sizeof(label));
        sqz_logf(SQZ_LOG_ERR, "%s: %s", label, err);
        return -EIO;
    }
    return r < 0 ? r : 0;
}

int sqz_content_packed_load_locked(struct sqz_fs *fs, struct sqz_inode *in)
{
    SQZ_ASSERT_EXCL(&in->io);
    if (in->pack.buf)
        return 0;
    sqz_pack_ptr p;
    void *buf;
    int r = load(fs, in, &p, &buf);
    if (r == 0) {
        in->pack.buf = buf;
        in->pack.buf_len = p.length;
    }
    return r;
}

ssize_t sqz_content_read_packed_since(struct sqz_fs *fs, struct sqz_inode *in,
                                      uint64_t len, void *buf, size_t n,
                                      uint64_t off)
{
    SQZ_ASSERT_HELD(&in->io);
    struct stat bst;
    if (sqz_backing_stat(in, &bst) != 0 || bst.st_size != 0)
        return -EIO;
    /* the version this view holds: packing puts the container's mtime
     * back, and every change of the content moves it (a file rewritten
     * since, then packed, is another version: EIO as before) */
    if (!in->file || bst.st_ino != in->file_key.ino ||
        bst.st_mtim.tv_sec != in->file_key.mtime.tv_sec ||
        bst.st_mtim.tv_nsec != in->file_key.mtime.tv_nsec)
        return -EIO;
    sqz_pack_ptr p;
    void *all;
    int r = load(fs, in, &p, &all);
    if (r < 0)
        return r == -ENODATA ? -EIO : r;
    ssize_t got = -EIO; /* packed with other content: not this view's */
    if (p.length == len) {
        got = 0;
        if (off < len) {
            got = (ssize_t)(len - off < n ? len - off : n);
            memcpy(buf, (const char *)all + off, (size_t)got);
        }
    }
    free(all);
    return got;
}

void sqz_content_packed_free_locked(struct sqz_inode *in)
{
    free(in->pack.buf);
    in->pack.buf = NULL;
    in->pack.buf_len = 0;
}

void sqz_content_note_unpacked(struct sqz_fs *fs, struct sqz_inode *in)
{
    int dfd = parent_dirfd(fs, in);
    if (dfd >= 0) {
        sqz_pack_gc_note(fs, dfd);
        close(dfd);
    }
}

int sqz_content_empty_pointer(struct sqz_inode *in, int fd)
{
    int r = sqz_content_drop_pointer(fd);
    if (r > 0)
        atomic_store(&in->pack.ptr_dropped, 1);
    return r < 0 ? r : 0;
}

int sqz_content_drop_pointer(int fd)
{
    if (fremovexattr(fd, SQZ_PACK_XATTR) == 0)
        return 1;
    if (errno == ENODATA || errno == ENOTSUP)
        return 0;
    return -errno;
}

int sqz_content_unpack_locked(struct sqz_fs *fs, struct sqz_inode *in)
{
    SQZ_ASSERT_EXCL(&in->io);
    if (fs->opts.ro)
        return -EROFS;
    sqz_pack_ptr p;
    void *buf = NULL;
    int r;
    if (in->pack.buf) { /* the readers' copy is the content */
        r = sqz_pack_ptr_of(in, &p, NULL, 0);
        if (r == 1 && p.length == in->pack.buf_len) {
            buf = malloc(p.length);
            if (!buf)
                return -ENOMEM;
            memcpy(buf, in->pack.buf, p.length);
            r = 0;
        } else {
            r = load(fs, in, &p, &buf);
        }
    } else {
        r = load(fs, in, &p, &buf);
    }
    if (r == -ENODATA) { /* no pointer any more: nothing to unpack */
        if (sqz_content_handles_open(in))
            return -EIO; /* handles on a packed view of a file now gone */
        sqz_content_packed_free_locked(in);
        in->kind = SQZ_K_UNKNOWN;
        return 0;
    }
    if (r)
        return r;
    char label[PATH_MAX];
    sqz_inode_label(fs, in, label, sizeof(label));
    int fd = sqz_inode_reopen(in, O_RDWR);
    if (fd < 0) {
        free(buf);
        return fd;
    }
    struct stat st;
    r = fstat(fd, &st) != 0 ? -errno : st.st_size != 0 ? -ESTALE : 0;
    if (r) {
        close(fd);
        free(buf);
        return r;
    }
    /* The container is written and synced before the pointer goes: a
     * crash in between leaves a backing file with bytes (the pointer then
     * counts for nothing) or, torn, one that the probe resets to 0 bytes
     * (the pointer then shows the packed content again). */
    sqz_ctr *c = NULL;
    int cfd = dup(fd);
    if (cfd < 0) {
        r = -errno;
        close(fd);
        free(buf);
        return r;
    }
    r = sqz_ctr_create_fd_lazy(cfd, &p.params, label, &c);
    if (r == 0) {
        ssize_t w = sqz_ctr_pwrite(c, buf, p.length, 0);
        r = w < 0 ? (int)w : (uint64_t)w != p.length ? -EIO : 0;
        if (r == 0)
            r = sqz_ctr_sync(c, 0);
        int r2 = sqz_ctr_close(c);
        if (r == 0)
            r = r2;
    }
    free(buf);
    if (r == 0) {
        int d = sqz_content_drop_pointer(fd);
        r = d < 0 ? d : 0;
    } else {
        sqz_logf(SQZ_LOG_ERR, "%s: cannot unpack for writing: %s", label, strerror(-r));
    }
    close(fd);
    if (r < 0)
        return r;
    sqz_content_packed_free_locked(in);
    sqz_content_invalidate(in);
    sqz_content_note_unpacked(fs, in);
    if (sqz_content_handles_open(in)) {
        /* the handles of the packed content use the container from now on
         * (read-write if one of them may write) */
        in->kind = SQZ_K_CONTAINER;
        r = sqz_content_ensure_sf(fs, in, in->writers > 0);
    } else {
        in->kind = SQZ_K_UNKNOWN;
    }
    return r;
}

int sqz_content_unpack_if_packed_locked(struct sqz_fs *fs, struct sqz_inode *in)
{
    SQZ_ASSERT_EXCL(&in->io);
    if (in->type != S_IFREG || fs->opts.ro)
        return 0;
    struct stat bst;
    enum sqz_kind kind = SQZ_K_UNKNOWN;
    uint64_t len;
    int r = sqz_backing_stat(in, &bst);
    if (r == 0)
        r = sqz_content_kind_locked(fs, in, &bst, &kind, &len);
    if (r == 0 && kind == SQZ_K_PACKED)
        r = sqz_content_unpack_locked(fs, in);
    return r;
}

int sqz_content_packed_stat(struct sqz_inode *in, const struct stat *bst,
                            struct sqz_ctr_stat *st)
{
    sqz_pack_ptr p;
    int r = sqz_pack_ptr_of(in, &p, NULL, 0);
    if (r <= 0)
        return r == 0 ? -ENODATA : r == -EBADMSG ? -EIO : r;
    memset(st, 0, sizeof(*st));
    st->params = p.params;
    st->length = p.length;
    st->backing_size = (uint64_t)bst->st_size;
    st->backing_alloc = (uint64_t)bst->st_blocks * 512u;
    st->blocks = st->stored_blocks = 1;
    st->raw_blocks = p.kind == 2;
    st->compressed_bytes = p.stored_len;
    st->format_version = 2;
    st->packed_bytes = SQZ_PACK_ENTRY_HDR + p.stored_len;
    return 0;
}
