/* The steps of a crash-safe rewrite (replace.c) shared by recompress
 * (recompress.c), tiering (tier_job.c) and packing (pack_job.c): a hidden
 * temporary next to the original, its metadata, and the exchange + swap of
 * the inode. Internal header. */
#ifndef SQZ_FUSE_RECOMPRESS_INT_H
#define SQZ_FUSE_RECOMPRESS_INT_H

#include <limits.h>

#include "fuse/fs.h"

struct sqz_rc_temp {
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
 * O_RDWR fd, or -errno. t must be discarded (sqz_rc_temp_discard) in
 * every case. */
int sqz_rc_temp_create(struct sqz_fs *fs, struct sqz_inode *in,
                       const struct stat *bst, struct sqz_rc_temp *t);
/* Remove the temporary if it still exists; close the directory. */
void sqz_rc_temp_discard(struct sqz_rc_temp *t);
/* Give the temporary (cfd) the original's owner, mode, user xattrs and
 * times (bst), and fsync it. */
int sqz_rc_temp_meta(struct sqz_inode *in, const struct stat *bst, int cfd);
/* The same without the fsync (packing: the file is empty, a crash before
 * the rename is durable leaves the original). */
int sqz_rc_temp_meta_nosync(struct sqz_inode *in, const struct stat *bst,
                            int cfd);
/* Caller holds io exclusive; the temporary is complete and synced, nsf
 * the open engine file on it (taken over in every case). Rename it over
 * the original, fsync the directory, and swap the inode over: its O_PATH
 * fd (same number), the table key, the open sqz_file (replaced by nsf, or
 * nsf closed when there was none). Closes in->sf if it was replaced.
 * -ESTALE (nothing done) if the original was renamed or removed since the
 * temporary was made, -EMLINK if it got a second link. */
int sqz_rc_install_locked(struct sqz_fs *fs, struct sqz_inode *in,
                          struct sqz_rc_temp *t, sqz_file *nsf);
/* The same without dropping a queued container of the replaced file
 * (sqz_rc_install_locked, in recompress.c, does that: durable.c); nsf may
 * be NULL (no open file to hand over: the caller has no handles); flags:
 * SQZ_RC_* (without SQZ_RC_SYNC_DIR, for packing: either name state is a
 * whole file after a crash). */
int sqz_rc_replace_locked(struct sqz_fs *fs, struct sqz_inode *in,
                             struct sqz_rc_temp *t, sqz_file *nsf,
                             int flags);
#define SQZ_RC_SYNC_DIR 1      /* fsync the directory after the rename */
#define SQZ_RC_NEED_EXCHANGE 2 /* -EOPNOTSUPP where the file system has no
                                  RENAME_EXCHANGE (packing: a checked plain
                                  rename could replace a file renamed over
                                  the name meanwhile) */

#endif
