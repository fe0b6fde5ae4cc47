/* FUSE_HANDLE_KILLPRIV_V2 under libfuse 3.14 (killpriv.c). Internal
 * header. */
#ifndef SQZ_FUSE_KILLPRIV_H
#define SQZ_FUSE_KILLPRIV_H

#include "node/inode.h"

/* After fuse_session_mount: route the session's I/O through killpriv.c
 * (libfuse 3.14; with 3.18 nothing to do). 0 or -errno (the mount then
 * works as before, without V2). */
int sqz_killpriv_install(struct fuse_session *se);
/* 1 once the kernel accepted FUSE_HANDLE_KILLPRIV_V2. */
int sqz_killpriv_active(void);
/* CREATE with O_TRUNC opened a file another creator made meanwhile: clear
 * its set-ID bits as an O_TRUNC open would (the caller lacks CAP_FSETID). */
void sqz_killpriv_create_trunc(struct sqz_fs *fs, fuse_req_t req,
                               struct sqz_inode *in);

/* libfuse >= 3.18 (no custom I/O; /dev/fuse or io_uring): from op_init,
 * ask libfuse for V2 if the kernel offers it; then every WRITE, SETATTR
 * with FUSE_SET_ATTR_KILL_SUID (ask 0), OPEN with O_TRUNC and allocating
 * FALLOCATE calls sqz_killpriv_req before it acts (ask 1: only if the
 * caller lacks CAP_FSETID). No-ops with libfuse 3.14 (the custom I/O). */
void sqz_killpriv_want(struct fuse_conn_info *conn);
void sqz_killpriv_req(struct sqz_fs *fs, fuse_req_t req, fuse_ino_t ino,
                      int ask);

#endif
