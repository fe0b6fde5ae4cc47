/* The mount's life beside mount.c: the writer lock of a BACKING
 * (wlock.c), remounts (remount.c), a signal's shutdown (shutdown.c) and
 * FUSE over io_uring (uring.c). Internal header. */
#ifndef SQZ_MOUNT_MOUNTLIFE_H
#define SQZ_MOUNT_MOUNTLIFE_H

#include "daemon/fs.h"

/* ---- wlock.c: one read-write mount per BACKING ---- */
/* Before mounting (read-write mounts only): take the writer lock. A holder
 * that is leaving is waited for up to wait_writer= seconds (saying so on
 * stderr). -EBUSY with a message naming the holder if another mount holds
 * it. */
int sqz_writer_lock(struct sqz_fs *fs, char *err, size_t errlen);
/* After mounting and daemonizing: record this process and its mount as the
 * holder. */
int sqz_writer_lock_own(struct sqz_fs *fs);
/* The request loop has ended: mark the lock file "leaving", so that the
 * next mount of BACKING waits for this one instead of being refused. */
void sqz_writer_leaving(struct sqz_fs *fs);
void sqz_writer_unlock(struct sqz_fs *fs);

/* ---- remount.c ---- */
/* `squeezefs -o remount,OPTS BACKING MOUNTPOINT` (what mount -o remount
 * runs through the helper): raw is every -o string, joined by ','. The
 * kernel flags change; squeezefs and FUSE options must keep the mount's
 * values (else a message naming them). Exit status: 0 or 1. */
int sqz_remount(const char *raw, const char *backing, const char *mnt);

/* ---- shutdown.c ---- */
/* SIGTERM/SIGINT/SIGHUP flush the kernel's cached pages to
 * the daemon before the request loop ends. Start from the thread that
 * runs the loop; stop after fuse_session_unmount. */
int sqz_shutdown_start(struct sqz_fs *fs, struct fuse_session *se);
void sqz_shutdown_stop(struct sqz_fs *fs);

/* ---- uring.c: FUSE over io_uring (-o io_uring) ---- */
/* Before anything is mounted, with -o io_uring: 0 if it can work here (the
 * library has it, the kernel's enable_uring is Y), else -EOPNOTSUPP and
 * the reason in err. */
int sqz_uring_check(char *err, size_t errlen);
/* The libfuse session arguments for the option (none without it); the
 * environment's FUSE_URING_ENABLE is cleared either way. */
int sqz_uring_args(struct sqz_fs *fs, struct fuse_args *args);
/* From op_init: want the rings with the option (logging whether the kernel
 * offered them), never without it. */
void sqz_uring_init(struct sqz_fs *fs, struct fuse_conn_info *conn);

#endif
