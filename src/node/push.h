/* Decompressed blocks pushed into the kernel's page cache (push.c).
 * Internal header. */
#ifndef SQZ_NODE_PUSH_H
#define SQZ_NODE_PUSH_H

#include "node/inode.h"

int sqz_push_init(struct sqz_inode *in);
void sqz_push_destroy(struct sqz_inode *in);
/* A content change (writable handle, truncate) begins: no push starts
 * until sqz_push_unblock, and the pushes in flight are waited for. Call
 * with no lock held. */
void sqz_push_block(struct sqz_inode *in);
void sqz_push_unblock(struct sqz_inode *in);
/* Over io_uring, on a ring thread, before a handler that may change in's
 * content or fence its pushes: 0 when no push of in is in flight, and then
 * pushes are blocked (as sqz_push_block, which the handler's first call for
 * in takes over without waiting) until sqz_push_preblock_end, a no-op if
 * taken over; -EWOULDBLOCK when a push is in flight: hand the request to a
 * thread that may wait (src/fuse/defer.c). Elsewhere 0, nothing done. */
int sqz_push_preblock(struct sqz_fs *fs, struct sqz_inode *in);
void sqz_push_preblock_end(struct sqz_inode *in);
/* The content changed at once (a read-only view was replaced, io already
 * released): end the pushes in flight and refuse those sampled before.
 * No lock held. */
void sqz_push_fence(struct sqz_inode *in);
/* io held: 1 and *gen if the bytes read now under io may be pushed. */
int sqz_push_sample(struct sqz_fs *fs, struct sqz_inode *in, uint64_t *gen);
/* After the READ reply, with no lock held and the inode kept alive: push
 * the blocks of sp if nothing changed since the sample gen. 0 when all
 * were pushed, -EAGAIN refused, or the first error of the kernel. */
int sqz_push_store(struct sqz_fs *fs, fuse_ino_t ino, struct sqz_inode *in,
                   uint64_t gen, sqz_read_spill *sp);
/* A read-only open of a packed file on a read-write mount, before its
 * reply: push the whole content (the daemon already holds it) so that the
 * reads that follow need no READ. 1 when every page was pushed (the open
 * may keep the kernel's cache), else 0. */
int sqz_push_packed(struct sqz_fs *fs, fuse_ino_t ino, struct sqz_inode *in);

/* ---- pushq.c: the pusher thread (over io_uring) ---- */
/* Start it (-o io_uring). 0 or -errno. */
int sqz_pushq_start(struct sqz_fs *fs);
/* Stop it (join); the pushes still queued, and those queued later, are
 * dropped. Idempotent. Ring threads may still run: sqz_pushq_free after
 * the session is destroyed. */
void sqz_pushq_stop(struct sqz_fs *fs);
void sqz_pushq_free(struct sqz_fs *fs);
/* After the READ reply, no lock held: queue the push of sp (as
 * sqz_push_store), taking over sp and the caller's open reference of in;
 * when the queue is full, the push is dropped (counted as skipped). */
void sqz_pushq_add(struct sqz_fs *fs, fuse_ino_t ino, struct sqz_inode *in,
                   uint64_t gen, sqz_read_spill *sp);

#endif
