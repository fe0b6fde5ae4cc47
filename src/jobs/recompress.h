/* Rewriting a regular file under another policy (recompress.c). Internal
 * header. */
#ifndef SQZ_JOBS_RECOMPRESS_H
#define SQZ_JOBS_RECOMPRESS_H

#include "store/replace.h"

/* Rewrite a regular file under spec (crash-safe temp + rename). */
int sqz_recompress(struct sqz_fs *fs, struct sqz_inode *in,
                   const sqz_spec *spec);

/* Caller holds io exclusive; the temporary is complete and synced, nsf
 * the open engine file on it (taken over in every case). Rename it over
 * the original, fsync the directory, and swap the inode over: its O_PATH
 * fd (same number), the table key, the open sqz_file (replaced by nsf, or
 * nsf closed when there was none). Closes in->sf if it was replaced.
 * -ESTALE (nothing done) if the original was renamed or removed since the
 * temporary was made, -EMLINK if it got a second link. */
int sqz_recompress_install_locked(struct sqz_fs *fs, struct sqz_inode *in,
                          struct sqz_replace_temp *t, sqz_file *nsf);

#endif
