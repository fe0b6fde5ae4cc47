/* The policy of a new file, chains cached per directory
 * (newfile_policy.c). Internal header. */
#ifndef SQZ_CONTENT_NEWFILE_POLICY_H
#define SQZ_CONTENT_NEWFILE_POLICY_H

#include "node/inode.h"

/* ---- newfile_policy.c: the policy of a new file, chains cached per
 * directory ---- */
/* The effective policy of a file name about to be created in dir (it has
 * no policy xattr of its own). 0 or -errno. */
int sqz_resolve_new(struct sqz_fs *fs, struct sqz_inode *dir,
                    const char *name, sqz_resolved *out);
/* After a policy xattr was set or removed, or a directory renamed,
 * through the mount: cached chains are walked again. */
void sqz_policy_changed(struct sqz_fs *fs);
/* dir was just made in parent through the mount (no policy xattr of its
 * own): it takes parent's cached chain, if parent has a valid one. */
void sqz_policy_seed_dir(struct sqz_fs *fs, struct sqz_inode *parent,
                         struct sqz_inode *dir);

#endif
