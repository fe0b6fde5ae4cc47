/* Views of files another mount writes, kept fresh (revalidate.c).
 * Internal header. */
#ifndef SQZ_JOBS_REVALIDATE_H
#define SQZ_JOBS_REVALIDATE_H

#include "daemon/fs.h"

/* Read-only mounts with revalidate=N: a thread that refreshes the views of
 * open files every N seconds and drops the kernel's cached pages of the
 * changed ones. */
int sqz_revalidate_start(struct sqz_fs *fs);
void sqz_revalidate_stop(struct sqz_fs *fs);

#endif
