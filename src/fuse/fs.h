/* squeezefs FUSE front end: the state shared by the files of src/fuse/.
 * Internal header.
 *
 * Locks: sqz_inode.io, sqz_fs.itable_lock, sqz_inode.meta,
 * sqz_fs.readahead_mu and sqz_dirhandle.lock here, sqz_durable.mu in
 * durable.c. What each protects, their ranks, the order and which may be
 * held across I/O: docs/LOCKING.md (the one place; checked in debug
 * builds by src/common/lockorder.h). The fields below are grouped by the
 * lock that protects them.
 * Fields marked "const" are set before the inode is published and never
 * change. sqz_inode.fd's *number* is constant for the inode's life.
 */
#ifndef SQZ_FUSE_FS_H
#define SQZ_FUSE_FS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "engine/engine.h"
#include "fuse/opts.h"
#include "squeezefs/container.h"
#include "squeezefs/policy.h"

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

enum sqz_kind {
    SQZ_K_UNKNOWN = 0, /* not probed (or probe result stale) */
    SQZ_K_PLAIN,       /* pre-existing non-container file: passthrough */
    SQZ_K_CONTAINER,   /* squeezefs container */
    SQZ_K_DAMAGED,     /* looks like a container but cannot be opened */
    SQZ_K_PENDING,     /* auto policy: 0-byte backing file, container created
                          at the first write (open handles only) */
    SQZ_K_PACKED,      /* 0-byte backing file with a pack pointer: read-only
                          (content_pack.c); a writer unpacks it first */
};

/* What identifies a backing file's content version (for caches). */
struct sqz_bkey {
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
};

struct sqz_inode {
    /* itable_lock */
    struct sqz_inode *next;
    dev_t dev;
    ino_t ino;
    uint64_t nlookup;
    uint64_t nopen;      /* open handles referencing this inode */
    int alt_fd;          /* O_PATH fd of another name of a hard-linked
                            regular file, the last a lookup found it by
                            (inode_path.c), or -1 */
    /* const */
    int fd;              /* O_PATH|O_NOFOLLOW fd of the backing object */
    mode_t type;         /* S_IFMT bits */
    int is_root;
    /* io */
    pthread_rwlock_t io;
    enum sqz_kind kind;  /* meaningful while sf_users or plain_users > 0 */
    sqz_file *sf;        /* shared engine file (CONTAINER) */
    int sf_rw;           /* sf's container is open read-write */
    struct sqz_bkey sf_key; /* backing version a read-only sf was opened at */
    unsigned sf_users;   /* handles using sf / PENDING */
    unsigned plain_users;/* handles holding their own plain fd */
    sqz_params pending;  /* PENDING: block size, min_saving, auto mode */
    sqz_ctr *dctr;       /* closed, committed, waiting for its durable mark
                            (durable.c); a reopen takes it back */
    uint64_t dgen;       /* bumped whenever dctr is set */
    int dq_queued;       /* in the durable queue (holds an open ref) */
    unsigned writers;    /* open handles that may write (tiering skips) */
    int pack_noted;      /* waiting in the packer's notes (pack_job.c;
                            set and cleared by the durable thread) */
    atomic_int drafted;  /* a close stored it as a draft (content_io.c):
                            packing tries it again while it is open */
    atomic_int ptr_dropped; /* a pack pointer was removed (O_TRUNC,
                               truncate to 0): the next fsync makes that
                               durable (content_io.c) */
    void *pbuf;          /* PACKED with handles open: the content */
    uint64_t pbuf_len;
    int create_fd;       /* read-write fd of a file this mount just created,
                            for its container (make_container); -1 */
    /* atomic */
    atomic_uint_fast64_t wgen; /* bumped by every change of the content
                                  through the mount and every open for
                                  writing: tiering abandons a copy made
                                  while it moved (tier_job.c) */
    /* meta */
    pthread_mutex_t meta;
    int probe_valid;
    struct sqz_bkey probe_key;
    enum sqz_kind probe_kind;
    uint64_t probe_len;  /* logical length (CONTAINER, PACKED) */
    uint32_t probe_stored; /* PACKED: stored bytes (st_blocks) */
    sqz_ctr *stash;      /* the read-only container the last probe opened,
                            kept for the open that usually follows a
                            lookup (inode.c); NULL if none */
    struct sqz_bkey stash_key; /* backing version stash was opened at */
    atomic_int kc_direct; /* written with direct I/O: no keep_cache
                             (ops_file.c, content_open.c) */
    int kc_valid;        /* keep_cache: key recorded at last open/release */
    struct sqz_bkey kc_key;
    int wtime_set;       /* time of the newest uncommitted write */
    struct timespec wtime;
    int utimes_kept;     /* times set by the user after the last write: */
    struct timespec utimes[2]; /* re-applied after container writes that
                                  are not user data (sync mark, checkpoint) */
    struct sqz_dirpol *dirpol; /* directory: its policy chain for new files
                                  (newfile_policy.c); NULL if none cached */
    /* ptimes.c, the times shown: atomic tgen, shown_until_ns; meta the
     * record's cache (shown_*) and the kernel's times (k*) */
    atomic_uint_fast64_t tgen;  /* bumped before a user's change */
    _Atomic int64_t shown_until_ns; /* a record this mount wrote counts
                                       until then (0: none) */
    int shown_valid, shown_has, ktimes_set;
    struct timespec shown_key, shown_ctime, shown_until, kmtime, kctime;
    /* push_mu (push.c): blocks pushed into the kernel's page cache */
    pthread_mutex_t push_mu;
    pthread_cond_t push_cv;  /* push_busy dropped to 0 */
    uint64_t push_gen;       /* bumped when a content change starts/ends */
    unsigned push_block;     /* writable handles + truncates in progress */
    unsigned push_busy;      /* pushes in flight */
};

/* One open file handle (fi->fh). Fields are const after open except
 * under the inode's io lock. */
struct sqz_handle {
    struct sqz_inode *inode;
    int plain_fd;        /* PLAIN: own backing fd; -1 otherwise */
    int plain_was_empty; /* PLAIN opened at 0 bytes: another mount may make
                          * it a container (lazy creation), see
                          * sqz_content_read */
    int direct;          /* read-only mount, opened while the file was empty
                          * (0 bytes or a creation in flight): the kernel
                          * reads it with direct I/O (sqz_content_open) */
    int append;          /* O_APPEND: writes go through sqz_file_append */
    int writable;
    atomic_int draft;    /* it created the file and never fsync'ed it: its
                          * close stores a small file as a draft, packing
                          * compresses it (sqz_content_flush) */
};

/* One open directory handle. */
struct sqz_dirhandle {
    pthread_mutex_t lock; /* protects dp/entry/offset */
    DIR *dp;
    struct dirent *entry; /* entry read but not yet returned */
    off_t offset;
};

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
    atomic_int readahead_done;  /* the first open set the kernel's
                                   read-ahead window (ops_file.c) */
    pthread_mutex_t readahead_mu; /* serialises that first attempt */

    struct sqz_durable *durable; /* durable.c; NULL before start */
    struct sqz_packer *packer;  /* pack_job.c (durable thread only) */
    struct sqz_pack_gc *pack_gc; /* pack_gc.c */
    struct sqz_pack_rd *pack_rd; /* pack_rd.c */
    int wlock_fd;               /* wlock.c: the writer lock (-1: none) */
    struct fuse_session *se;    /* for kernel cache invalidation */
    struct sqz_reval *reval;    /* revalidate.c; NULL if not running */
    struct sqz_tier *tier;      /* tier.c; NULL on read-only mounts */
    struct sqz_ident *ident;    /* ident.c: kept inode numbers; NULL on a
                                   shared BACKING */
    int wlock_posix;            /* it is a per-process POSIX lock */
    atomic_uint push_inflight;  /* push.c: pushes running now */
    size_t plus_max_inodes;     /* const: READDIRPLUS looks entries up only
                                   below this many inodes (mount.c) */
    size_t pack_pending_max;    /* const: notes that make the durable thread
                                   pack during a stream of closes (mount.c;
                                   0: SQZ_PACK_PENDING_MIN) */
    atomic_uint_fast64_t push_blocks, push_bytes, push_skipped; /* stats */
    atomic_uint_fast64_t packed_bytes_read; /* READ replies of packed files */
    _Atomic int64_t shown_start_ns; /* ptimes.c: until then, a kept ctime
                                       an earlier mount wrote may count */
    atomic_int atime_mode;          /* ptimes.c: the mount's atime option, */
    _Atomic int64_t atime_seen_ns;  /* read from mountinfo then (0: never) */
    int pack_in_place;          /* const: a local BACKING: packing keeps the
                                   backing inode (pack_job.c), the backing
                                   file gets the kernel's times (ptimes.c) */
    int prealloc_ok;            /* const: containers may write their log
                                   ahead (sqz_ctr_allow_prealloc): BACKING
                                   is local, with nanosecond times */
    atomic_uint_fast64_t policy_gen; /* bumped after a policy xattr or a
                                        directory changed place through the
                                        mount (newfile_policy.c) */

    pthread_mutex_t itable_lock;
    struct sqz_swap_pend *swap_pend; /* exchanges in progress (inode.c) */
    struct sqz_inode **buckets;
    size_t nbuckets, count;
    struct sqz_inode *root;

    atomic_ulong sec_xattr_gets; /* GETXATTR of other than user.* names
                                    (the kernel's security.capability
                                    check before a write; killpriv.c) */
};

static inline struct sqz_fs *sqz_fs_of(fuse_req_t req)
{
    return (struct sqz_fs *)fuse_req_userdata(req);
}

/* ---- killpriv.c: FUSE_HANDLE_KILLPRIV_V2 under libfuse 3.14 ---- */
/* After fuse_session_mount: route the session's I/O through killpriv.c.
 * 0 or -errno (the mount then works as before, without V2). */
int sqz_killpriv_install(struct fuse_session *se);
/* 1 once the kernel accepted FUSE_HANDLE_KILLPRIV_V2. */
int sqz_killpriv_active(void);
/* CREATE with O_TRUNC opened a file another creator made meanwhile: clear
 * its set-ID bits as an O_TRUNC open would (the caller lacks CAP_FSETID). */
void sqz_killpriv_create_trunc(struct sqz_fs *fs, fuse_req_t req,
                               struct sqz_inode *in);

/* ---- inode.c: inode table ---- */
int sqz_itable_init(struct sqz_fs *fs);
/* Frees every inode (closes their sf first; returns the first error). */
int sqz_itable_free(struct sqz_fs *fs);
struct sqz_inode *sqz_inode_of(struct sqz_fs *fs, fuse_ino_t ino);
fuse_ino_t sqz_nodeid(struct sqz_fs *fs, struct sqz_inode *in);
/* Look name up in parent (O_PATH|O_NOFOLLOW), insert or find the inode,
 * count a lookup; *st receives the backing stat. 0 or -errno. */
int sqz_inode_lookup(struct sqz_fs *fs, struct sqz_inode *parent,
                     const char *name, struct stat *st,
                     struct sqz_inode **out);
/* The same below a backing directory fd (the tier pass walks BACKING
 * itself); the lookup counted is the caller's to forget. */
int sqz_inode_lookup_at(struct sqz_fs *fs, int dirfd, const char *name,
                        struct stat *st, struct sqz_inode **out);
void sqz_inode_forget(struct sqz_fs *fs, struct sqz_inode *in, uint64_t n);
void sqz_inode_open_ref(struct sqz_fs *fs, struct sqz_inode *in);
void sqz_inode_open_unref(struct sqz_fs *fs, struct sqz_inode *in);
/* The inode of backing object (dev, ino) if the table has it, with an
 * open reference (sqz_inode_open_unref), else NULL. */
struct sqz_inode *sqz_inode_find_ref(struct sqz_fs *fs, dev_t dev, ino_t ino);
/* After the backing object was renamed over (recompress, packing): make
 * in->fd a copy of npfd, the new object's O_PATH fd, and key the inode by
 * (dev, ino), in one critical section of the table. Caller holds io
 * exclusive. 0 or -errno (nothing changed). */
/* Around the exchange that precedes a swap (replace.c): a lookup that
 * opens the new backing file (dev, ino) by the file's name before the
 * swap finds in, not a second inode of that file. Caller holds io
 * exclusive; p lives until sqz_inode_swap_end. */
struct sqz_swap_pend {
    struct sqz_inode *in;
    dev_t dev;
    ino_t ino;
    struct sqz_swap_pend *next;
};
void sqz_inode_swap_begin(struct sqz_fs *fs, struct sqz_inode *in,
                          struct sqz_swap_pend *p, dev_t dev, ino_t ino);
void sqz_inode_swap_end(struct sqz_fs *fs, struct sqz_swap_pend *p);
int sqz_inode_swap(struct sqz_fs *fs, struct sqz_inode *in, int npfd,
                   dev_t dev, ino_t ino);
/* Call fn on every inode of the table, with no lock held: the inodes are
 * collected under itable_lock, each kept alive by an open reference, and
 * fn runs after the lock is released (so fn may take io and everything
 * ranked after it). 0, or -ENOMEM (fn was not called). */
int sqz_itable_foreach(struct sqz_fs *fs,
                       void (*fn)(struct sqz_fs *, struct sqz_inode *, void *),
                       void *user);
/* "/proc/self/fd/N": the magic link of the daemon's own descriptor fd,
 * which resolves to fd's inode itself (a symlink's too, not its target):
 * the one path form a syscall on a backing object may take besides a
 * single name below a directory descriptor (CONTRIBUTING.md,
 * "Confinement"). */
void sqz_proc_path(int fd, char *buf, size_t n);
/* Path of the inode relative to BACKING ("" for the root), as read from
 * /proc/self/fd: for log labels and policy resolving (rule matching, and
 * its walk beneath BACKING that follows no symlink) only, and for
 * sqz_inode_dirfd; never for a syscall that could follow a symlink. */
int sqz_inode_relpath(struct sqz_fs *fs, struct sqz_inode *in, char *buf,
                      size_t n);
/* The backing directory that holds in (O_RDONLY | O_DIRECTORY), opened
 * beneath BACKING with no symlink in any component, and checked to hold
 * in under its name (copied to base, bn bytes, if base is not NULL). An fd,
 * -EBUSY (moved while we looked, three times), -ENOENT (the root, or not
 * below BACKING) or -errno. */
int sqz_inode_dirfd(struct sqz_fs *fs, struct sqz_inode *in, char *base,
                    size_t bn);
/* Names never accepted from the kernel: "", ".", "..", with '/', and our
 * temporary prefix. */
int sqz_name_ok(const char *name);
int sqz_name_hidden(const char *name);
/* 0 if name may be used, else the errno to reply: EINVAL for a name never
 * accepted, hidden_errno for our temporary names (ENOENT where the name
 * must exist, EPERM where it would be created). */
int sqz_name_errno(const char *name, int hidden_errno);
/* Raw backing stat. */
int sqz_backing_stat(struct sqz_inode *in, struct stat *st);
/* Open the backing file of a regular inode for I/O ("/proc/self/fd"),
 * always with O_NOATIME (dropped where it is not allowed, EPERM: not the
 * file's owner, no CAP_FOWNER): the atime shown is the one the user's
 * opens set (ptimes.c), never moved by the daemon's own reads. */
int sqz_inode_reopen(struct sqz_inode *in, int flags);
/* Label for log lines: the path inside the mount, else "(inode N)". */
void sqz_inode_label(struct sqz_fs *fs, struct sqz_inode *in, char *buf,
                     size_t n);
/* Set the new object's owner to the caller's uid/gid (setgid dirs keep
 * the parent's group). Used by create/mkdir/mknod/symlink. parent_st: the
 * parent's backing stat, or NULL to take it only if it is needed. */
int sqz_chown_new(struct sqz_fs *fs, fuse_req_t req, struct sqz_inode *parent,
                  const char *name, const struct stat *parent_st);

/* ---- content_kind.c: kind probing, attributes shown ---- */
void sqz_bkey_of(const struct stat *st, struct sqz_bkey *k);
int sqz_bkey_eq(const struct sqz_bkey *a, const struct sqz_bkey *b);
/* Fix up st (backing stat) for a regular file: logical size, blocks,
 * mtime of pending writes. Takes io shared. */
void sqz_content_fix_stat(struct sqz_fs *fs, struct sqz_inode *in,
                          struct stat *st);
/* stat as shown through the mount (logical size for containers). */
int sqz_getattr(struct sqz_fs *fs, struct sqz_inode *in, struct stat *st);
/* The entry of in with the attributes st, as a LOOKUP reply gives it. */
void sqz_entry_fill(struct sqz_fs *fs, struct sqz_inode *in,
                    const struct stat *st, struct fuse_entry_param *e);
/* Look name up in parent (sqz_inode_lookup) and fill e with the
 * attributes shown through the mount. 0 or -errno. */
int sqz_do_lookup(struct sqz_fs *fs, struct sqz_inode *parent,
                  const char *name, struct fuse_entry_param *e);
void sqz_content_invalidate(struct sqz_inode *in);
/* inode.c: the container a probe opened (read-only), kept for the next
 * open. put: the probe hands it over (closed if too many are kept); take:
 * the caller owns it, and *key is its version, if the backing file is
 * still at that version (else NULL); drop: close it (a writable open, a
 * rekey, the inode's teardown). */
void sqz_inode_stash_put(struct sqz_inode *in, sqz_ctr *c,
                           const struct sqz_bkey *key);
sqz_ctr *sqz_inode_stash_take(struct sqz_inode *in, struct sqz_bkey *key);
void sqz_inode_stash_drop(struct sqz_inode *in);
uint64_t sqz_inode_stash_hits(void); /* opens that took one (stats) */
size_t sqz_inode_count(struct sqz_fs *fs); /* inodes in the table now */

int sqz_content_handles_open(const struct sqz_inode *in);
/* io held (shared or exclusive): kind and logical length. *bst is the
 * backing stat the caller took; it is taken anew when the probe reset a
 * torn creation to an empty file (content_kind.c). */
int sqz_content_kind_locked(struct sqz_fs *fs, struct sqz_inode *in,
                            struct stat *bst, enum sqz_kind *kind,
                            uint64_t *len);

/* ---- content_open.c: open handles ---- */
/* Open a handle: flags as from open(2) (O_TRUNC honoured). On success
 * fills h and *keep_cache. Takes io exclusive. */
int sqz_content_open(struct sqz_fs *fs, struct sqz_inode *in, int flags,
                     struct sqz_handle *h, int *keep_cache);
/* The file was just created (0 bytes) by create: make it PENDING per its
 * effective policy r (sqz_resolve_new), as a first handle. create_fd: the
 * read-write fd the creation opened, or -1; it is taken (kept for the
 * container, closed with the inode's last handle) either way. st: the
 * backing stat of the new file, or NULL. */
int sqz_content_create(struct sqz_fs *fs, struct sqz_inode *in,
                       const sqz_resolved *r, int create_fd,
                       const struct stat *st, int flags, struct sqz_handle *h);
/* Drop a handle; the last one commits and closes the sf. Returns the
 * commit error. */
int sqz_content_release(struct sqz_fs *fs, struct sqz_handle *h);

/* ---- content_sf.c: the shared sqz_file, creation, kept times, policy ---- */
/* Remember the backing file's current atime/mtime as set by the user
 * (setattr): container bookkeeping writes after it (the durable mark at
 * fsync, a checkpoint at close) must not change them. A data write forgets
 * them. */
void sqz_content_keep_times(struct sqz_inode *in);
/* io exclusive: PENDING -> CONTAINER choosing the algorithm by sample. */
int sqz_content_materialize_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                   const void *sample, size_t n);
/* Params to create a container with for a resolved policy. */
void sqz_params_from_spec(struct sqz_fs *fs, const sqz_spec *s,
                          sqz_params *p);
/* Policy glue: the effective policy of a path below BACKING. */
int sqz_resolve(struct sqz_fs *fs, const char *relpath, sqz_resolved *out);
/* The same for an inode, by its current path. */
int sqz_resolve_inode(struct sqz_fs *fs, struct sqz_inode *in,
                      sqz_resolved *out);

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

/* ---- content_io.c: data I/O ---- */
/* Read/write through a handle (locks io shared; materialises PENDING).
 * With sp, a read of a container also returns the blocks it used in part
 * and *push = 1, *gen (sqz_push_sample) when they may be pushed. */
ssize_t sqz_content_read(struct sqz_fs *fs, struct sqz_handle *h, void *buf,
                         size_t n, uint64_t off, sqz_read_spill *sp,
                         int *push, uint64_t *gen);
ssize_t sqz_content_write(struct sqz_fs *fs, struct sqz_handle *h,
                          const void *buf, size_t n, uint64_t off,
                          int writepage);
int sqz_content_flush(struct sqz_fs *fs, struct sqz_handle *h);
int sqz_content_fsync(struct sqz_fs *fs, struct sqz_handle *h, int datasync);
int sqz_content_fallocate(struct sqz_fs *fs, struct sqz_handle *h, int mode,
                          uint64_t off, uint64_t len);
/* truncate(2) by inode (with or without a handle). */
int sqz_content_truncate(struct sqz_fs *fs, struct sqz_inode *in,
                         uint64_t size);
/* Container figures (commits first). -ENODATA if not a container. */
int sqz_content_ctr_stat(struct sqz_fs *fs, struct sqz_inode *in,
                         struct sqz_ctr_stat *st);
/* destroy: commit + fsync every open sf. */
int sqz_content_sync_all(struct sqz_fs *fs);

/* ---- durable.c: closed files made durable in batches ---- */
/* fd is on a local file system (ext4, xfs, btrfs, f2fs, tmpfs) whose
 * syncfs(2) flushes everything and reports errors. */
int sqz_backing_local(int fd);
int sqz_durable_start(struct sqz_fs *fs);
/* Unmount: stop the thread, mark every queued file, flush so the marks are
 * durable too. Returns the first error. */
int sqz_durable_finish(struct sqz_fs *fs);
void sqz_durable_free(struct sqz_fs *fs);
/* Before a release takes io: wait while the queue is full. */
void sqz_durable_wait_room(struct sqz_fs *fs);
/* io exclusive: queue the committed container c of a closed file. 0, or
 * -errno with c still the caller's. */
int sqz_durable_defer_locked(struct sqz_fs *fs, struct sqz_inode *in,
                             sqz_ctr *c);
/* io exclusive: take a queued container back (NULL if none). */
sqz_ctr *sqz_durable_take_locked(struct sqz_inode *in);
void sqz_durable_stats(struct sqz_fs *fs, uint64_t *queued, uint64_t *marked,
                       uint64_t *batches, uint64_t *failures);

/* ---- content_sf.c / revalidate.c: views of files another mount writes ---- */
/* io exclusive: replace a read-only view of a container whose backing file
 * changed since the view was opened (*changed = 1 then). */
int sqz_content_refresh_view_locked(struct sqz_fs *fs, struct sqz_inode *in,
                                    const struct stat *bst, int *changed);
/* ---- content_pack.c: packed files (docs/FORMAT.md "Packed files") ---- */
struct sqz_pack_ptr;
/* The pack pointer of in's backing file: 1 (*p), 0 none, -EBADMSG damaged
 * (reason in err), -errno. */
int sqz_pack_ptr_of(struct sqz_inode *in, struct sqz_pack_ptr *p, char *err,
                    size_t errlen);
/* Kind of a 0-byte backing file: PLAIN (empty), PACKED (*len its length)
 * or DAMAGED (a damaged pointer, logged). Caller holds io. */
int sqz_content_probe_empty(struct sqz_fs *fs, struct sqz_inode *in,
                            enum sqz_kind *kind, uint64_t *len);
/* Load in->pbuf (io exclusive). 0, -EIO (damaged, logged), -ENODATA. */
int sqz_content_packed_load_locked(struct sqz_fs *fs, struct sqz_inode *in);
void sqz_content_packed_free_locked(struct sqz_inode *in);
/* user.squeezefs.stat of a packed file (io held). 0, -ENODATA, -EIO. */
int sqz_content_packed_stat(struct sqz_inode *in, const struct stat *bst,
                            struct sqz_ctr_stat *st);
/* A packed file of in's directory lost its entry (pack_gc.c). */
void sqz_content_note_unpacked(struct sqz_fs *fs, struct sqz_inode *in);
/* The file in is being emptied: remove its pack pointer (fd: its backing
 * file, open); its next fsync makes that durable. 0 or -errno. */
int sqz_content_empty_pointer(struct sqz_inode *in, int fd);
/* Remove the pack pointer from an open backing fd: 1 removed, 0 there
 * was none, -errno. */
int sqz_content_drop_pointer(int fd);
/* Make a packed file a container again (written, synced, then the
 * pointer removed); a no-op for other kinds. io exclusive / takes io. */
int sqz_content_unpack_locked(struct sqz_fs *fs, struct sqz_inode *in);
/* The same after probing the kind (any kind but PACKED: nothing). */
int sqz_content_unpack_if_packed_locked(struct sqz_fs *fs, struct sqz_inode *in);

/* ---- push.c: decompressed blocks pushed into the kernel's page cache ---- */
int sqz_push_init(struct sqz_inode *in);
void sqz_push_destroy(struct sqz_inode *in);
/* A content change (writable handle, truncate) begins: no push starts
 * until sqz_push_unblock, and the pushes in flight are waited for. Call
 * with no lock held. */
void sqz_push_block(struct sqz_inode *in);
void sqz_push_unblock(struct sqz_inode *in);
/* The content changed at once (a read-only view was replaced, io already
 * released): end the pushes in flight and refuse those sampled before.
 * No lock held. */
void sqz_push_fence(struct sqz_inode *in);
/* io held: 1 and *gen if the bytes read now under io may be pushed. */
int sqz_push_sample(struct sqz_fs *fs, struct sqz_inode *in, uint64_t *gen);
/* After the READ reply, with no lock held and the inode kept alive: push
 * the blocks of sp if nothing changed since the sample gen. 0 when all
 * were pushed, -EAGAIN refused, or the first error of the kernel. */
int sqz_push_store(struct sqz_fs *fs, fuse_ino_t ino, struct sqz_inode *in,
                   uint64_t gen, sqz_read_spill *sp);
/* A read-only open of a packed file on a read-write mount, before its
 * reply: push the whole content (the daemon already holds it) so that the
 * reads that follow need no READ. 1 when every page was pushed (the open
 * may keep the kernel's cache), else 0. */
int sqz_push_packed(struct sqz_fs *fs, fuse_ino_t ino, struct sqz_inode *in);

/* ---- recompress.c ---- */
/* Rewrite a regular file under spec (crash-safe temp + rename). */
int sqz_recompress(struct sqz_fs *fs, struct sqz_inode *in,
                   const sqz_spec *spec);
/* Append in to a growable array of inodes (*n used of *cap; the first
 * allocation holds `first`). 0, or -ENOMEM with nothing changed. */
static inline int sqz_inodes_push(struct sqz_inode ***v, size_t *n, size_t *cap,
                                  size_t first, struct sqz_inode *in)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : first;
        struct sqz_inode **nv = realloc(*v, nc * sizeof(**v));
        if (!nv)
            return -ENOMEM;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = in;
    return 0;
}

/* The content of in changed or may change (a write, an open for writing). */
static inline void sqz_inode_changed(struct sqz_inode *in)
{
    atomic_fetch_add_explicit(&in->wgen, 1, memory_order_acq_rel);
}

/* ---- tier_job.c / tier.c: age-based tiering (docs in tier.c) ---- */
/* getxattr user.squeezefs.tier: the file's tier status as JSON. Length
 * or -errno. */
int sqz_tier_status_json(struct sqz_fs *fs, struct sqz_inode *in, char *buf,
                         size_t n);
/* setxattr user.squeezefs.tier (value: the rate in bytes/s, "" or 0 =
 * unlimited): tier the file now, in a low-priority thread, while the
 * request waits. 0 (tiered), -EALREADY (not due), -EBUSY (open for
 * writing), -EMLINK (hard links), -ECANCELED (written meanwhile, or the
 * mount is stopping: abandoned), -EINTR (request interrupted), other
 * -errno. */
int sqz_tier_request(struct sqz_fs *fs, fuse_req_t req, struct sqz_inode *in,
                     const char *value, size_t size);
/* The same with the rate as a number (SQZ_IOC_TIER). */
int sqz_tier_request_rate(struct sqz_fs *fs, fuse_req_t req,
                          struct sqz_inode *in, uint64_t rate);
/* Start the tier state (rw mounts) and, with tier=INTERVAL, the thread. */
int sqz_tier_start(struct sqz_fs *fs);
/* Stop the thread (an interrupted file is abandoned, its temporary
 * removed; the pass resumes where it was at the next mount). Idempotent. */
void sqz_tier_stop(struct sqz_fs *fs);
/* After sqz_tier_stop: free the state. */
void sqz_tier_free(struct sqz_fs *fs);
/* The tier counters as JSON members (", \"tier_files\": N, ...") for the
 * stats xattr. Length or -ENOSPC. */
int sqz_tier_stats_json(struct sqz_fs *fs, char *buf, size_t n);

/* ---- ops_*.c: the lowlevel operations ---- */
/* Whether the caller of req may access (access(2) mask: R_OK, W_OK, X_OK)
 * the object st describes, by its mode bits. 0 or -EACCES. */
int sqz_req_may(fuse_req_t req, const struct stat *st, int mask);
void sqz_ops_entry(struct fuse_lowlevel_ops *ops);
void sqz_ops_file(struct fuse_lowlevel_ops *ops);
void sqz_ops_dir(struct fuse_lowlevel_ops *ops);
void sqz_ops_xattr(struct fuse_lowlevel_ops *ops);

#include "fuse/packing.h"

#endif
