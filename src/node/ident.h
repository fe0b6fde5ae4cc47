/* The inode numbers a file keeps across recompress and tiering on a local
 * BACKING (ident.c; docs/FORMAT.md "Kept inode numbers"). Internal header.
 *
 * Replacing a file (replace.c) exchanges a new backing file in; the
 * replaced backing inode B is not freed but kept, emptied, as the hidden
 * `.sqz-tmp.ids/S.Y`: the file now at backing inode Y shows S (S = B the
 * first time, else the number it already showed). A kept inode is never a
 * file's, so no other file can ever show or get its number. Locks: the
 * map under sqz_ident.mu (docs/LOCKING.md), no I/O under it. */
#ifndef SQZ_NODE_IDENT_H
#define SQZ_NODE_IDENT_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

struct sqz_fs;
struct sqz_inode;

#define SQZ_IDENT_DIR ".sqz-tmp.ids"

/* At mount, before serving, after the writer lock (a read-write mount
 * finishes or removes what a crash left in the directory). Never fatal:
 * without it files show their backing numbers. */
void sqz_ident_init(struct sqz_fs *fs);
void sqz_ident_free(struct sqz_fs *fs);
/* The number shown for backing inode (dev, ino). */
ino_t sqz_ident_shown(struct sqz_fs *fs, dev_t dev, ino_t ino);
/* A stat of in as shown: st_ino (and the root's link count without the
 * hidden directory). */
void sqz_ident_stat(struct sqz_fs *fs, struct sqz_inode *in, struct stat *st);
/* The directory's descriptor if replaces of files on device dev keep
 * numbers (a local read-write BACKING, the same file system), made when
 * missing (the caller puts BACKING's times back): >= 0, else -errno. */
int sqz_ident_dirfd(struct sqz_fs *fs, dev_t dev, int make);
/* A temporary made in the directory (its name tmp, descriptor tfd) to
 * replace backing inode b: renamed to "n.S.B.Y" (its intent: what the next
 * mount finishes if the exchange happened), the new name in out. 0 or
 * -errno (then tmp keeps its name). */
int sqz_ident_intent(struct sqz_fs *fs, int tfd, const char *tmp, ino_t b,
                     char *out, size_t n);
/* After the exchange: the entry `name` (an intent) holds the replaced
 * inode; the file is at backing inode y and keeps its number. */
void sqz_ident_exchanged(struct sqz_fs *fs, const char *name);
/* The last link of backing inode (dev, ino) is gone and nothing holds it
 * any more: its kept number is freed. */
void sqz_ident_gone(struct sqz_fs *fs, dev_t dev, ino_t ino);
/* 1 if some file shows a kept number. */
int sqz_ident_any(struct sqz_fs *fs);

#endif
