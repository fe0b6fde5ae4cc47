/* The daemon's own hidden files in BACKING (leftover.c; docs/FORMAT.md
 * "Hidden files"). Internal header. */
#ifndef SQZ_STORE_LEFTOVER_H
#define SQZ_STORE_LEFTOVER_H

#include "node/inode.h"

/* 1 if name is a temporary's (SQZ_TMP_PREFIX + 16 hex digits, replace.c;
 * *id its number), else 0. */
int sqz_tmp_name_parse(const char *name, uint64_t *id);
/* A job of this daemon uses the temporary name from before it is created
 * (begin) until it is gone or left for good (end): never a leftover. */
void sqz_tmp_live_begin(const char *name);
void sqz_tmp_live_end(const char *name);
enum {
    SQZ_HIDDEN_OTHER = 0,  /* not the daemon's: a user's file, the writer
                              lock, the tier state; never removed */
    SQZ_HIDDEN_GONE,       /* no such name (any more) */
    SQZ_HIDDEN_PACK,       /* a pack (its header, or its creation torn) */
    SQZ_HIDDEN_TEMP,       /* a temporary a crash left (0 bytes, or a
                              container or its start) */
    SQZ_HIDDEN_TEMP_LIVE,  /* the same, in use by a job of this daemon */
};
/* Which of the above the hidden name in directory dfd is (its size in
 * *size if a regular file and size is not NULL). */
int sqz_hidden_kind(int dfd, const char *name, off_t *size);
/* A read-write mount's READDIR of dir (dfd) met the hidden name: removed
 * if it is a temporary a crash left (logged). */
void sqz_leftover_meet(struct sqz_fs *fs, struct sqz_inode *dir, int dfd,
                       const char *name);
/* rmdir of name in p found it not empty: if it holds nothing but the
 * daemon's own hidden files (packs, temporaries), remove them. 0 if it
 * held nothing else (a user's SQZ_TMP_PREFIX* file counts), else
 * -ENOTEMPTY or -errno. */
int sqz_hidden_clear(struct sqz_fs *fs, struct sqz_inode *p, const char *name);

#endif
