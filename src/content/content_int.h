/* Private to the rooms of src/content:
 *
 *   content_sf.c    the shared sqz_file, creating containers, kept
 *                   times, policy glue
 *   content_pack.c  packed files: content for readers, unpacking,
 *                   dropping the pointer, figures
 *   content_open.c  open, create, release
 *   content_io.c    read, write, flush, fsync, fallocate, truncate,
 *                   commit, container figures, sync at unmount
 *   content_sparse.c lseek SEEK_DATA/SEEK_HOLE, punch and zero range
 *   content_copy.c  copy_file_range inside the mount
 *
 * What other subsystems use is in content/content.h; these are shared
 * between content_*.c only. Locks: docs/LOCKING.md. */
#ifndef SQZ_CONTENT_CONTENT_INT_H
#define SQZ_CONTENT_CONTENT_INT_H

#include "content/content.h"


/* content_sf.c, all with io held exclusive: */
/* Open the inode's shared sqz_file (read-only, or read-write for a
 * writer; a read-only one is reopened read-write). */
int sqz_content_ensure_sf(struct sqz_fs *fs, struct sqz_inode *in,
                          int want_write);
/* Close the sf after its last handle, or queue it for its durable mark. */
int sqz_content_close_sf(struct sqz_fs *fs, struct sqz_inode *in);
/* Make an empty file PENDING (its container is written with its first
 * data) per its policy: the resolved r, or (convert_empty) the one its
 * path resolves to. */
int sqz_content_pending_locked(struct sqz_fs *fs, struct sqz_inode *in,
                               const sqz_resolved *r);
int sqz_content_convert_empty(struct sqz_fs *fs, struct sqz_inode *in);
/* After container bookkeeping writes: put back the times the user set
 * (takes meta, held across one utimensat). io held (shared or
 * exclusive). */
void sqz_content_restore_times(struct sqz_fs *fs, struct sqz_inode *in);

/* content_pack.c: a read-only view of a container (another mount's
 * handle) whose backing file was packed in place since (pack_job.c): the
 * bytes of [off, off+n) from the packed content, if it is len bytes long.
 * Bytes read, or -EIO (not packed, or other content). io held. */
ssize_t sqz_content_read_packed_since(struct sqz_fs *fs, struct sqz_inode *in,
                                      uint64_t len, void *buf, size_t n,
                                      uint64_t off);

#endif
