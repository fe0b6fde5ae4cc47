/* The daemon's shared state: struct sqz_fs (one per mount), the limits
 * and names every subsystem of the daemon uses. Internal header; each
 * subsystem has its own (node/inode.h for the inode table and struct
 * sqz_inode, content/content.h, pack/packing.h, ...: CONTRIBUTING.md).
 *
 * Locks: what each protects, their ranks, the order and which may be held
 * across I/O: docs/LOCKING.md (the one place; checked in debug builds by
 * src/common/lockorder.h). Fields are grouped by the lock that protects
 * them; "const" fields are set before the mount starts and never change. */
#ifndef SQZ_DAEMON_FS_H
#define SQZ_DAEMON_FS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/types.h>

#include "daemon/opts.h"
#include "engine/engine.h"
#include "squeezefs/policy.h"

struct sqz_inode;

/* max_write and the read size (max_pages): 1 MiB, the largest WRITE the
 * kernel sends */
#define SQZ_MAX_IO (1u << 20)

/* Temporary names used by recompress; never visible through the mount. */
#define SQZ_TMP_PREFIX ".sqz-tmp."

/* Virtual / special xattr names. */
#define SQZ_XATTR_STATS "user.squeezefs.stats"
#define SQZ_XATTR_STAT "user.squeezefs.stat"
#define SQZ_XATTR_EFFECTIVE "user.squeezefs.effective"
#define SQZ_XATTR_RECOMPRESS "user.squeezefs.recompress"
#define SQZ_XATTR_TIER "user.squeezefs.tier"
#define SQZ_XATTR_OPTIONS "user.squeezefs.options"
/* The same "tier it now" as an ioctl on an open descriptor (argument: the
 * rate in bytes/s, uint64_t, 0 = unlimited). squeezefs tier uses it: the
 * kernel holds a file's inode lock during setxattr, which would make
 * writes, truncates and renames of the file wait for the whole job. */
#define SQZ_IOC_TIER _IOW('Q', 0x16, uint64_t)
/* The same "recompress it now" as user.squeezefs.recompress, on an open
 * descriptor (argument: the SPEC text, NUL-terminated; "" the file's
 * policy). squeezefs recompress uses it: a setxattr moves the file's
 * ctime (the kernel's, as for any setxattr), an ioctl does not, and the
 * rewrite is meant to be invisible to stat (docs/FORMAT.md "Kept inode
 * numbers"). */
#define SQZ_IOC_SPEC_MAX 64
#define SQZ_IOC_RECOMPRESS _IOW('Q', 0x17, char[SQZ_IOC_SPEC_MAX])


struct sqz_fs {
    struct sqz_mount_opts opts; /* const after start */
    sqz_rules *rules;           /* const; NULL without policy= */
    char rules_name[256];       /* basename of the rule file */
    sqz_engine *engine;         /* const after init */
    int root_dirfd;             /* O_RDONLY|O_DIRECTORY fd of BACKING */
    char *backing_real;         /* realpath of BACKING */
    size_t backing_len;
    double timeout;             /* entry/attr timeout (seconds) */
    int syslog;                 /* log lines also go to syslog */
    uid_t uid;                  /* euid of the daemon */
    gid_t gid;                  /* egid of the daemon */
    char *mnt_real;             /* realpath of MOUNTPOINT, or NULL */
    int pack_in_place;          /* const: a local BACKING: packing keeps the
                                   backing inode (pack_job.c), the backing
                                   file gets the kernel's times (ptimes.c) */
    int prealloc_ok;            /* const: containers may write their log
                                   ahead (sqz_ctr_allow_prealloc): BACKING
                                   is local, with nanosecond times */
    size_t plus_max_inodes;     /* const: READDIRPLUS looks entries up only
                                   below this many inodes (mount.c) */
    size_t pack_pending_max;    /* const: notes that make the durable thread
                                   pack during a stream of closes (mount.c;
                                   0: SQZ_PACK_PENDING_MIN) */
    struct fuse_session *se;    /* for kernel cache invalidation */

    /* the subsystems' own state */
    struct sqz_durable *durable; /* durable.c; NULL before start */
    struct sqz_defer *defer;    /* src/fuse/defer.c: over io_uring, else
                                   NULL */
    struct sqz_packer *packer;  /* pack_job.c (durable thread only) */
    struct sqz_pack_gc *pack_gc; /* pack_gc.c */
    struct sqz_pack_rd *pack_rd; /* pack_rd.c */
    struct sqz_reval *reval;    /* revalidate.c; NULL if not running */
    struct sqz_tier *tier;      /* tier.c; NULL on read-only mounts */
    struct sqz_ident *ident;    /* ident.c: kept inode numbers; NULL on a
                                   shared BACKING */
    struct {                    /* wlock.c: the writer lock */
        int fd;                 /* -1: none */
        int posix;              /* it is a per-process POSIX lock */
    } wlock;
    struct {                    /* ops_file.c: the kernel's read-ahead */
        atomic_int done;        /* the first open set the window */
        pthread_mutex_t mu;     /* serialises that first attempt */
    } readahead;
    struct {                    /* push.c: pushes into the page cache */
        atomic_uint inflight;   /* running now */
        atomic_uint_fast64_t blocks, bytes, skipped; /* stats */
        struct sqz_pushq *q;    /* pushq.c: over io_uring, else NULL */
        atomic_int queue_on;    /* pushq.c: its thread takes pushes */
    } push;
    struct {                    /* ptimes.c */
        _Atomic int64_t shown_start_ns; /* until then, a kept ctime an
                                           earlier mount wrote may count */
        atomic_int atime_mode;  /* the mount's atime option, */
        _Atomic int64_t atime_seen_ns; /* read from mountinfo then (0:
                                          never) */
    } times;
    atomic_uint_fast64_t policy_gen; /* bumped after a policy xattr or a
                                        directory changed place through the
                                        mount (newfile_policy.c) */
    /* stats */
    atomic_uint_fast64_t packed_bytes_read; /* READ replies of packed files */
    atomic_uint_fast64_t read_errors; /* READ replies with EIO: damaged data
                                        (ops_file.c) */
    atomic_ulong sec_xattr_gets; /* GETXATTR of other than user.* names
                                    (the kernel's security.capability
                                    check before a write; killpriv.c) */

    struct {                    /* inode.c: the inode table */
        pthread_mutex_t lock;   /* sqz_fs.itable.lock (docs/LOCKING.md) */
        struct sqz_swap_pend *swap_pend; /* exchanges in progress */
        struct sqz_inode **buckets;
        size_t nbuckets, count;
        struct sqz_inode *root;
    } itable;
};

static inline struct sqz_fs *sqz_fs_of(fuse_req_t req)
{
    return (struct sqz_fs *)fuse_req_userdata(req);
}

#endif
