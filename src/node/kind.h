/* What a backing object is and what stat shows of it (kind.c): kind
 * probing, cached per backing version (a container, a packed file's
 * pointer, a plain file), getattr and lookup replies. Internal header. */
#ifndef SQZ_NODE_KIND_H
#define SQZ_NODE_KIND_H

#include "node/inode.h"

struct sqz_pack_ptr;

/* Fix up st (backing stat) for a regular file: logical size, blocks,
 * mtime of pending writes. Takes io shared. */
void sqz_content_fix_stat(struct sqz_fs *fs, struct sqz_inode *in,
                          struct stat *st);
/* stat as shown through the mount (logical size for containers). */
int sqz_getattr(struct sqz_fs *fs, struct sqz_inode *in, struct stat *st);
/* The entry of in with the attributes st, as a LOOKUP reply gives it. */
void sqz_entry_fill(struct sqz_fs *fs, struct sqz_inode *in,
                    const struct stat *st, struct fuse_entry_param *e);
/* Look name up in parent (sqz_inode_lookup) and fill e with the
 * attributes shown through the mount. 0 or -errno. */
int sqz_do_lookup(struct sqz_fs *fs, struct sqz_inode *parent,
                  const char *name, struct fuse_entry_param *e);
void sqz_content_invalidate(struct sqz_inode *in);
/* Handles open on in (sf or plain users). */
int sqz_content_handles_open(const struct sqz_inode *in);
/* io held (shared or exclusive): kind and logical length. *bst is the
 * backing stat the caller took; it is taken anew when the probe reset a
 * torn creation to an empty file (kind.c). */
int sqz_content_kind_locked(struct sqz_fs *fs, struct sqz_inode *in,
                            struct stat *bst, enum sqz_kind *kind,
                            uint64_t *len);
/* Record the probe result of a backing version (takes
 * meta). */
void sqz_content_probe_store(struct sqz_inode *in, const struct stat *bst,
                             enum sqz_kind kind, uint64_t len);

/* The pack pointer of in's backing file: 1 (*p), 0 none, -EBADMSG damaged
 * (reason in err), -errno. */
int sqz_pack_ptr_of(struct sqz_inode *in, struct sqz_pack_ptr *p, char *err,
                    size_t errlen);
/* Kind of a 0-byte backing file: PLAIN (empty), PACKED (*len its length)
 * or DAMAGED (a damaged pointer, logged). Caller holds io. */
int sqz_content_probe_empty(struct sqz_fs *fs, struct sqz_inode *in,
                            enum sqz_kind *kind, uint64_t *len);

#endif
