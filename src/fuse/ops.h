/* The lowlevel operations (ops_*.c): FUSE request translation. Internal
 * header. */
#ifndef SQZ_FUSE_OPS_H
#define SQZ_FUSE_OPS_H

#include "node/inode.h"

/* Whether the caller of req may access (access(2) mask: R_OK, W_OK, X_OK)
 * the object st describes, by its mode bits. 0 or -EACCES. */
int sqz_req_may(fuse_req_t req, const struct stat *st, int mask);
void sqz_ops_entry(struct fuse_lowlevel_ops *ops);
void sqz_ops_file(struct fuse_lowlevel_ops *ops);
void sqz_ops_dir(struct fuse_lowlevel_ops *ops);
void sqz_ops_xattr(struct fuse_lowlevel_ops *ops);
void sqz_ops_access(struct fuse_lowlevel_ops *ops); /* ops_access.c */

#endif
