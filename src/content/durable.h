/* Closed files made durable in batches by the durable thread (durable.c),
 * which also runs packing and pack reclaiming. Internal header. */
#ifndef SQZ_CONTENT_DURABLE_H
#define SQZ_CONTENT_DURABLE_H

#include "node/inode.h"

/* fd is on a local file system (ext4, xfs, btrfs, f2fs, tmpfs) whose
 * syncfs(2) flushes everything and reports errors. */
int sqz_backing_local(int fd);
int sqz_durable_start(struct sqz_fs *fs);
/* Unmount: stop the thread, mark every queued file, flush so the marks are
 * durable too. Returns the first error. */
int sqz_durable_finish(struct sqz_fs *fs);
void sqz_durable_free(struct sqz_fs *fs);
/* Before a release takes io: wait while the queue is full. */
void sqz_durable_wait_room(struct sqz_fs *fs);
/* io exclusive: queue the committed container c of a closed file. 0, or
 * -errno with c still the caller's. */
int sqz_durable_defer_locked(struct sqz_fs *fs, struct sqz_inode *in,
                             sqz_ctr *c);
/* io exclusive: take a queued container back (NULL if none). */
sqz_ctr *sqz_durable_take_locked(struct sqz_inode *in);
void sqz_durable_stats(struct sqz_fs *fs, uint64_t *queued, uint64_t *marked,
                       uint64_t *batches, uint64_t *failures);

#endif
