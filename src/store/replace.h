/* The crash-safe replacement of a backing file (replace.c) shared by recompress
 * (recompress.c), tiering (tier_job.c) and packing (pack_job.c): a hidden
 * temporary next to the original, its metadata, and the exchange + swap of
 * the inode. Internal header. */
#ifndef SQZ_STORE_REPLACE_H
#define SQZ_STORE_REPLACE_H

#include <limits.h>

#include "node/inode.h"

struct sqz_replace_temp {
    int dirfd;              /* the original's backing directory */
    char base[NAME_MAX + 1];/* the original's name in it */
    char tmp[64];           /* the temporary's name (SQZ_TMP_PREFIX..., or
                               an intent n.S.B.Y in the keepers' directory) */
    int made;               /* the temporary exists (removed by discard) */
    int tdirfd;             /* the temporary's directory: the keepers'
                               (ident.c, borrowed: the original keeps its
                               inode number), or -1: dirfd */
};

/* Create the temporary for in's backing file, which must still be the
 * file bst describes (else -EBUSY) in its directory as sqz_inode_dirfd
 * opens it (beneath BACKING, no symlink followed): in the keepers'
 * directory on a local BACKING (ident.h: the file keeps its inode number,
 * its directory sees only the exchange), else next to it. Returns its
 * O_RDWR fd, or -errno. t must be discarded (sqz_replace_temp_discard) in
 * every case. */
int sqz_replace_temp_create(struct sqz_fs *fs, struct sqz_inode *in,
                       const struct stat *bst, struct sqz_replace_temp *t);
/* Remove the temporary if it still exists; close the directory. */
void sqz_replace_temp_discard(struct sqz_replace_temp *t);
/* Give the temporary (cfd) the original's owner, mode, user xattrs and
 * times (bst), and fsync it. */
int sqz_replace_temp_meta(struct sqz_inode *in, const struct stat *bst, int cfd);
/* The same without the fsync (packing: the file is empty, a crash before
 * the rename is durable leaves the original). */
int sqz_replace_temp_meta_nosync(struct sqz_inode *in, const struct stat *bst,
                            int cfd);
/* The same without dropping a queued container of the replaced file
 * (sqz_recompress_install_locked, in recompress.c, does that: durable.c); nsf may
 * be NULL (no open file to hand over: the caller has no handles); flags:
 * SQZ_REPLACE_* (without SQZ_REPLACE_SYNC_DIR, for packing: either name state is a
 * whole file after a crash). */
int sqz_replace_locked(struct sqz_fs *fs, struct sqz_inode *in,
                             struct sqz_replace_temp *t, sqz_file *nsf,
                             int flags);
#define SQZ_REPLACE_SYNC_DIR 1      /* fsync the directory after the rename */
#define SQZ_REPLACE_NEED_EXCHANGE 2 /* -EOPNOTSUPP where the file system has no
                                  RENAME_EXCHANGE (packing: a checked plain
                                  rename could replace a file renamed over
                                  the name meanwhile) */

#endif
