/* FUSE_HANDLE_KILLPRIV_V2 under libfuse 3.14 (killpriv.c). Internal
 * header. */
#ifndef SQZ_FUSE_KILLPRIV_H
#define SQZ_FUSE_KILLPRIV_H

#include "node/inode.h"

/* After fuse_session_mount: route the session's I/O through killpriv.c.
 * 0 or -errno (the mount then works as before, without V2). */
int sqz_killpriv_install(struct fuse_session *se);
/* 1 once the kernel accepted FUSE_HANDLE_KILLPRIV_V2. */
int sqz_killpriv_active(void);
/* CREATE with O_TRUNC opened a file another creator made meanwhile: clear
 * its set-ID bits as an O_TRUNC open would (the caller lacks CAP_FSETID). */
void sqz_killpriv_create_trunc(struct sqz_fs *fs, fuse_req_t req,
                               struct sqz_inode *in);

#endif
