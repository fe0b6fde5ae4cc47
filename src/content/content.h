/* A regular file's content through the mount: open handles (content_open.c),
 * the shared sqz_file, creation, kept times, policy glue (content_sf.c),
 * data I/O (content_io.c), packed files' content and unpacking
 * (content_pack.c; docs/FORMAT.md "Packed files"). Internal header; what
 * only these files share is in content_int.h. */
#ifndef SQZ_CONTENT_CONTENT_H
#define SQZ_CONTENT_CONTENT_H

#include "node/inode.h"

/* One open file handle (fi->fh). Fields are const after open except
 * under the inode's io lock. */
struct sqz_handle {
    struct sqz_inode *inode;
    int plain_fd;        /* PLAIN: own backing fd; -1 otherwise */
    int plain_was_empty; /* PLAIN opened at 0 bytes: another mount may make
                          * it a container (lazy creation), see
                          * sqz_content_read */
    int direct;          /* read-only mount, opened while the file was empty
                          * (0 bytes or a creation in flight): the kernel
                          * reads it with direct I/O (sqz_content_open) */
    int append;          /* O_APPEND: writes go through sqz_file_append */
    int writable;
    atomic_int draft;    /* it created the file and never fsync'ed it: its
                          * close stores a small file as a draft, packing
                          * compresses it (sqz_content_flush) */
};


/* Open a handle: flags as from open(2) (O_TRUNC honoured). On success
 * fills h and *keep_cache. Takes io exclusive. */
int sqz_content_open(struct sqz_fs *fs, struct sqz_inode *in, int flags,
                     struct sqz_handle *h, int *keep_cache);
/* The same; *atime 1 on entry for an open that moves the atime (for
 * reading, not O_NOATIME): moved as the mount says under the open's own
 * hold of io (sqz_ptimes_atime_open_locked, no stat of its own); *atime
 * is then 1 if it moved (the kernel's attributes are to be dropped). */
int sqz_content_open_atime(struct sqz_fs *fs, struct sqz_inode *in, int flags,
                           struct sqz_handle *h, int *keep_cache, int *atime);
/* The file was just created (0 bytes) by create: make it PENDING per its
 * effective policy r (sqz_resolve_new), as a first handle. create_fd: the
 * read-write fd the creation opened, or -1; it is taken (kept for the
 * container, closed with the inode's last handle) either way. st: the
 * backing stat of the new file, or NULL. */
int sqz_content_create(struct sqz_fs *fs, struct sqz_inode *in,
                       const sqz_resolved *r, int create_fd,
                       const struct stat *st, int flags, struct sqz_handle *h);
/* Drop a handle; the last one commits and closes the sf. Returns the
 * commit error. */
int sqz_content_release(struct sqz_fs *fs, struct sqz_handle *h);


/* content_sf.c */
/* Remember the backing file's current atime/mtime as set by the user
 * (setattr): container bookkeeping writes after it (the durable mark at
 * fsync, a checkpoint at close) must not change them. A data write forgets
 * them. */
void sqz_content_keep_times(struct sqz_inode *in);
/* io exclusive: PENDING -> CONTAINER choosing the algorithm by sample. */
int sqz_content_materialize_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                   const void *sample, size_t n);
/* Params to create a container with for a resolved policy. */
void sqz_params_from_spec(struct sqz_fs *fs, const sqz_spec *s,
                          sqz_params *p);
/* Policy glue: the effective policy of a path below BACKING. */
int sqz_resolve(struct sqz_fs *fs, const char *relpath, sqz_resolved *out);
/* The same for an inode, by its current path. */
int sqz_resolve_inode(struct sqz_fs *fs, struct sqz_inode *in,
                      sqz_resolved *out);


/* io exclusive: replace a read-only view of a container whose backing file
 * changed since the view was opened (*changed = 1 then). */
int sqz_content_refresh_view_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                    const struct stat *bst, int *changed);

/* content_io.c */
/* Read/write through a handle (locks io shared; materialises PENDING).
 * With sp, a read of a container also returns the blocks it used in part
 * and *push = 1, *gen (sqz_push_sample) when they may be pushed. */
ssize_t sqz_content_read(struct sqz_fs *fs, struct sqz_handle *h, void *buf,
                         size_t n, uint64_t off, sqz_read_spill *sp,
                         int *push, uint64_t *gen);
/* sqz_content_read of a container without copying the data
 * (sqz_file_read_vec: pieces of its decompressed blocks in *v); -ENOTSUP
 * for other content, and for a damaged read of a view whose file may have
 * been packed in place since (sqz_content_read looks for that): the caller
 * reads into a buffer then. */
ssize_t sqz_content_read_vec(struct sqz_fs *fs, struct sqz_handle *h,
                             size_t n, uint64_t off, sqz_read_vec *v,
                             sqz_read_spill *sp, int *push, uint64_t *gen);
ssize_t sqz_content_write(struct sqz_fs *fs, struct sqz_handle *h,
                          const void *buf, size_t n, uint64_t off,
                          int writepage);
int sqz_content_flush(struct sqz_fs *fs, struct sqz_handle *h);
int sqz_content_fsync(struct sqz_fs *fs, struct sqz_handle *h, int datasync);
int sqz_content_fallocate(struct sqz_fs *fs, struct sqz_handle *h, int mode,
                          uint64_t off, uint64_t len);
/* truncate(2) by inode (with or without a handle). */
int sqz_content_truncate(struct sqz_fs *fs, struct sqz_inode *in,
                         uint64_t size);
/* Container figures (commits first). -ENODATA if not a container. */
int sqz_content_ctr_stat(struct sqz_fs *fs, struct sqz_inode *in,
                         struct sqz_ctr_stat *st);
/* destroy: commit + fsync every open sf. */
int sqz_content_sync_all(struct sqz_fs *fs);


/* content_sparse.c: holes (SEEK_DATA/SEEK_HOLE, punch, zero range) */
/* 1 if a handle that may write is open on in (takes io shared). */
int sqz_content_has_writers(struct sqz_inode *in);
/* lseek SEEK_DATA / SEEK_HOLE from off through a handle (takes io
 * shared): 0 and *out, -ENXIO, or -errno. */
int sqz_content_lseek(struct sqz_fs *fs, struct sqz_handle *h, uint64_t off,
                      int whence, uint64_t *out);
/* io exclusive, in a container: fallocate PUNCH_HOLE or ZERO_RANGE (mode,
 * with or without KEEP_SIZE) of [off, off + len). */
int sqz_content_zero_locked(struct sqz_inode *in, int mode, uint64_t off,
                            uint64_t len);


/* content_copy.c: copy_file_range inside the mount */
/* Copy [off_in, off_in + len) of hin's file to off_out of hout's (takes
 * each io in turn): bytes copied (fewer at the source's end, or after an
 * error once something was copied) or -errno. */
ssize_t sqz_content_copy_range(struct sqz_fs *fs, struct sqz_handle *hin,
                               uint64_t off_in, struct sqz_handle *hout,
                               uint64_t off_out, size_t len);


/* content_pack.c */
struct sqz_pack_ptr;
/* Load in->pbuf (io exclusive). 0, -EIO (damaged, logged), -ENODATA. */
int sqz_content_packed_load_locked(struct sqz_fs *fs, struct sqz_inode *in);
void sqz_content_packed_free_locked(struct sqz_inode *in);
/* user.squeezefs.stat of a packed file (io held). 0, -ENODATA, -EIO. */
int sqz_content_packed_stat(struct sqz_inode *in, const struct stat *bst,
                            struct sqz_ctr_stat *st);
/* A packed file of in's directory lost its entry (pack_gc.c). */
void sqz_content_note_unpacked(struct sqz_fs *fs, struct sqz_inode *in);
/* The file in is being emptied: remove its pack pointer (fd: its backing
 * file, open); its next fsync makes that durable. 0 or -errno. */
int sqz_content_empty_pointer(struct sqz_inode *in, int fd);
/* Remove the pack pointer from an open backing fd: 1 removed, 0 there
 * was none, -errno. */
int sqz_content_drop_pointer(int fd);
/* Make a packed file a container again (written, synced, then the
 * pointer removed); a no-op for other kinds. io exclusive / takes io. */
int sqz_content_unpack_locked(struct sqz_fs *fs, struct sqz_inode *in);
/* The same after probing the kind (any kind but PACKED: nothing). */
int sqz_content_unpack_if_packed_locked(struct sqz_fs *fs, struct sqz_inode *in);

#endif
