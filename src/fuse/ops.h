/* The lowlevel operations (ops_*.c): FUSE request translation. Internal
 * header. */
#ifndef SQZ_FUSE_OPS_H
#define SQZ_FUSE_OPS_H

#include "node/inode.h"

/* Whether the caller of req may access (access(2) mask: R_OK, W_OK, X_OK)
 * the object st describes, by its mode bits. 0 or -EACCES. */
int sqz_req_may(fuse_req_t req, const struct stat *st, int mask);
void sqz_ops_entry(struct fuse_lowlevel_ops *ops);
void sqz_ops_setattr(struct fuse_lowlevel_ops *ops); /* ops_setattr.c */
void sqz_ops_file(struct fuse_lowlevel_ops *ops);
void sqz_ops_dir(struct fuse_lowlevel_ops *ops);
void sqz_ops_xattr(struct fuse_lowlevel_ops *ops);
void sqz_ops_access(struct fuse_lowlevel_ops *ops); /* ops_access.c */

/* ---- defer.c: requests a ring thread hands over (-o io_uring) ---- */
int sqz_defer_start(struct sqz_fs *fs);
/* Run what is queued and join the thread (after the pusher is stopped:
 * the requests queued may wait for its pushes). Idempotent. */
void sqz_defer_stop(struct sqz_fs *fs);
void sqz_defer_free(struct sqz_fs *fs); /* after the session is destroyed */
/* Run fn on a copy of the len bytes at arg on the defer thread, which may
 * wait for pushes; fn replies to the request it carries. 0, or -errno and
 * nothing queued (the caller replies). */
int sqz_defer(struct sqz_fs *fs, void (*fn)(void *), const void *arg,
              size_t len);

#endif
