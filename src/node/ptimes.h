/* The ctime shown through the mount when the daemon's own work (durable
 * marks, packing) moved a backing object's ctime: ptimes.c,
 * include/squeezefs/shown.h, docs/FORMAT.md "Shown times". Internal
 * header. */
#ifndef SQZ_NODE_PTIMES_H
#define SQZ_NODE_PTIMES_H

#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

struct sqz_fs;
struct sqz_inode;

/* stat of in as shown: st_ctim replaced by a kept ctime that counts.
 * Regular files and directories; st is the backing stat (before
 * sqz_content_fix_stat: a packed file's record is in its pointer, read
 * when the backing file has 0 bytes). */
void sqz_ptimes_apply(struct sqz_fs *fs, struct sqz_inode *in,
                      struct stat *st);
/* The ctime shown for backing stat bst (before background work). */
struct timespec sqz_ptimes_shown(struct sqz_fs *fs, struct sqz_inode *in,
                                 const struct stat *bst);
/* Before background work on in: the generation of users' changes. */
uint64_t sqz_ptimes_begin(struct sqz_inode *in);
/* After background work on in moved its backing ctime: keep `shown` as
 * the ctime stat shows, unless a user's change came since gen (then the
 * backing ctime is shown). fd: an open descriptor of the object (not
 * O_PATH), or -1 for in's own. Failures are logged, never fatal: the
 * backing ctime is shown then. */
void sqz_ptimes_keep(struct sqz_fs *fs, struct sqz_inode *in, int fd,
                     const struct timespec *shown, uint64_t gen);
/* The same, with the object's stat since its last change of size (io held
 * across; NULL: stat it) and, if after is not NULL, its stat once the
 * record is written: 0 if *after is filled (the record is then what the
 * next stat at that ctime uses, with no xattr read), -1 if not. */
int sqz_ptimes_keep_st(struct sqz_fs *fs, struct sqz_inode *in, int fd,
                       const struct timespec *shown, uint64_t gen,
                       const struct stat *known, struct stat *after);
/* Background work that adds or removes entries of a backing directory
 * (pack files): begin before, end after; the directory then shows the
 * mtime and ctime it had, unless a change through the mount came
 * meanwhile. dfd: the directory opened (not O_PATH). fs NULL: no
 * change through the mount can come (before it serves, after it ended). */
struct sqz_ptimes_dir {
    struct sqz_inode *in; /* its inode (open reference) or NULL */
    struct stat before;
    struct timespec shown;
    uint64_t gen;
    int ok;
};
void sqz_ptimes_dir_begin(struct sqz_fs *fs, int dfd,
                          struct sqz_ptimes_dir *t);
void sqz_ptimes_dir_end(struct sqz_fs *fs, int dfd, struct sqz_ptimes_dir *t);
/* The same begin while the caller holds a file's io (replace.c): the
 * directory's io is only tried (docs/LOCKING.md), for up to 0.1 s; if it
 * stays taken, the directory's times are not put back. */
void sqz_ptimes_dir_try_begin(struct sqz_fs *fs, int dfd,
                              struct sqz_ptimes_dir *t);
/* stat of directory in as shown (taken under its io: never in the middle
 * of background work on its entries). 0 or -errno. */
int sqz_ptimes_stat_dir(struct sqz_fs *fs, struct sqz_inode *in,
                        struct stat *st);
/* A change through the mount is about to move in's backing ctime
 * (setattr, a write, link, rename, unlink, xattrs; a directory's entries):
 * a kept ctime that could still count is removed. */
void sqz_ptimes_user(struct sqz_fs *fs, struct sqz_inode *in);
/* Under the writeback cache the kernel keeps a regular file's mtime and
 * ctime itself from the entry that made its inode on (it tells its own
 * changes by SETATTR); the file shows those after its data's commits and
 * after a remount too. An entry given to the kernel (CREATE, LOOKUP): */
void sqz_ptimes_kernel_seen(struct sqz_fs *fs, struct sqz_inode *in,
                            const struct stat *attr);
/* A SETATTR done (to_set, attr as the kernel sent them): the kernel's
 * new times recorded and shown (sqz_ptimes_restore). */
void sqz_ptimes_kernel_set(struct sqz_fs *fs, struct sqz_inode *in,
                           int to_set, const struct stat *attr);
/* After the daemon wrote to the backing file: its mtime put back to the
 * kernel's (or to the times the user set: utimes_kept) and the kernel's
 * ctime kept. io held. */
void sqz_ptimes_restore(struct sqz_fs *fs, struct sqz_inode *in);
/* A SETATTR's ctime that came while the file was open for writing is kept
 * by the restore after the commit of the last writer's FLUSH, or, if none
 * came, at the release of the last writable handle: 1 if such a restore
 * is owed (io held). */
int sqz_ptimes_restore_owed(struct sqz_inode *in);
/* A regular file this daemon just created (no xattr): its stats read no
 * kept ctime until one is written. */
void sqz_ptimes_new_file(struct sqz_fs *fs, struct sqz_inode *in);
/* sqz_ptimes_user for each of up to four inodes (NULL: none). */
void sqz_ptimes_user4(struct sqz_fs *fs, struct sqz_inode *a,
                      struct sqz_inode *b, struct sqz_inode *c,
                      struct sqz_inode *d);
/* An open for reading through the mount (not O_NOATIME): the kernel
 * leaves a FUSE file's atime to the daemon and reads served from its page
 * cache never reach it, so the atime moves here, as the mount's atime
 * option says (noatime: never; strictatime: always; relatime, the
 * default: when it is not after the mtime or ctime, or a day old). io
 * held exclusive (the open's own: sqz_content_open_atime); seen: the
 * backing stat taken under this hold, or NULL (stat'ed here). 1 if it
 * moved (the kernel's attributes are to be dropped). */
int sqz_ptimes_atime_open_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                 const struct stat *seen);
/* At mount: kept ctimes written by the mount before may count for a
 * little longer (until now + the bound). */
void sqz_ptimes_mount(struct sqz_fs *fs);

#endif
