/* The inode table: one struct sqz_inode per backing object the kernel
 * knows (inode.c), what identifies a backing file's version (struct
 * sqz_bkey), the container a lookup keeps for the next open (the stash).
 * Internal header.
 *
 * Locks: sqz_inode.io, sqz_fs.itable.lock, sqz_inode.meta, push.mu:
 * docs/LOCKING.md. The fields of struct sqz_inode are grouped by the lock
 * that protects them; "const" ones are set before the inode is published.
 * The inode's O_PATH descriptor is not a field one reads: it is pinned
 * while used (sqz_ifd_get / sqz_ifd_put, node/ifd.h) and evicted from a
 * bounded cache otherwise. */
#ifndef SQZ_NODE_INODE_H
#define SQZ_NODE_INODE_H

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "daemon/fs.h"
#include "node/ifd.h"
#include "squeezefs/container.h"

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
    /* itable.lock */
    struct sqz_inode *next;
    dev_t dev;
    ino_t ino;
    uint64_t nlookup;
    uint64_t nopen;      /* open handles referencing this inode */
    unsigned nchild;     /* inodes naming this directory as their parent
                            (without file handles, ifd.c) */
    /* ifd.c's mutex: the backing object's O_PATH fd, when cached */
    struct sqz_ifd fdc;
    /* const */
    mode_t type;         /* S_IFMT bits */
    int is_root;

    /* io: a regular file's content (src/content) */
    pthread_rwlock_t io;
    enum sqz_kind kind;  /* meaningful while file_users or plain_users > 0 */
    sqz_file *file;      /* the shared engine file (CONTAINER) */
    int file_rw;         /* its container is open read-write */
    struct sqz_bkey file_key; /* backing version a read-only file was
                                 opened at */
    unsigned file_users; /* handles using file / PENDING */
    unsigned plain_users;/* handles holding their own plain fd */
    sqz_params pending;  /* PENDING: block size, min_saving, auto mode */
    unsigned writers;    /* open handles that may write (tiering skips) */
    int create_fd;       /* read-write fd of a file this mount just created,
                            for its container (make_container); -1 */
    struct {             /* io: durable marks (content/durable.c) */
        sqz_ctr *ctr;    /* closed, committed, waiting for its durable
                            mark; a reopen takes it back */
        uint64_t gen;    /* bumped whenever ctr is set */
        int queued;      /* in the durable queue (holds an open ref) */
    } durable;
    struct {             /* packing (src/pack, content_pack.c) */
        int noted;       /* waiting in the packer's notes (set and cleared
                            by the durable thread) */
        atomic_int drafted;  /* a close stored it as a draft
                                (content_io.c): packing tries it again
                                while it is open */
        atomic_int ptr_dropped; /* a pack pointer was removed (O_TRUNC,
                                   truncate to 0): the next fsync makes
                                   that durable (content_io.c) */
        void *buf;       /* io: PACKED with handles open: the content */
        uint64_t buf_len;
    } pack;
    /* atomic */
    atomic_uint_fast64_t change_gen; /* bumped by every change of the
                                        content through the mount and every
                                        open for writing: tiering abandons
                                        a copy made while it moved
                                        (tier_job.c) */

    /* meta */
    pthread_mutex_t meta;
    struct {             /* meta: what the last probe found (node/kind.c) */
        int valid;
        struct sqz_bkey key;
        enum sqz_kind kind;
        uint64_t len;    /* logical length (CONTAINER, PACKED) */
        uint32_t stored; /* PACKED: stored bytes (st_blocks) */
        int log2bs;      /* CONTAINER, PACKED: log2 of the block size (the
                            st_blksize shown: the unit of holes), 0 if not
                            known */
    } probe;
    sqz_ctr *stash;      /* the read-only container the last probe opened,
                            kept for the open that usually follows a
                            lookup (inode_stash.c); NULL if none */
    struct sqz_bkey stash_key; /* backing version stash was opened at */
    struct {             /* meta: the kernel's keep_cache at opens */
        atomic_int direct_written; /* written with direct I/O: no
                                      keep_cache (ops_file.c,
                                      content_open.c) */
        int valid;       /* key recorded at the last open/release */
        struct sqz_bkey key;
    } keep_cache;
    int wtime_set;       /* time of the newest uncommitted write */
    struct timespec wtime;
    int utimes_kept;     /* times set by the user after the last write: */
    struct timespec utimes[2]; /* re-applied after container writes that
                                  are not user data (sync mark, checkpoint) */
    struct sqz_dirpol *dirpol; /* directory: its policy chain for new files
                                  (newfile_policy.c); NULL if none cached */
    struct {             /* the times shown (node/ptimes.c): gen and
                            until_ns atomic; meta the kept ctime record's
                            cache and the kernel's times */
        atomic_uint_fast64_t gen;  /* bumped before a user's change */
        _Atomic int64_t until_ns;  /* a record this mount wrote counts
                                      until then (0: none) */
        int valid, has;  /* the record cache: read, and there is one */
        int kernel_set;  /* kmtime/kctime hold the kernel's times */
        int kc_owed;     /* kctime to be kept at the last writer's close
                            (sqz_ptimes_kernel_set; io) */
        int none;        /* a regular file with no record (read none on a
                            read-write mount, the only writer of records):
                            no xattr read until one is written (wgen) */
        uint64_t wgen;   /* records written */
        struct timespec key, ctime, until; /* the record: the backing ctime
                                              it was read at, the ctime it
                                              keeps, its bound */
        struct timespec kmtime, kctime; /* the kernel's (writeback cache) */
        /* a pack pointer the record was read from, at version ptr_key, for
         * the probe that follows (node/kind.c; used once) */
        int ptr_seen;
        struct sqz_bkey ptr_key;
        uint64_t ptr_len;
        uint32_t ptr_stored;
        int ptr_log2bs;
    } times;
    struct {             /* push.mu (push.c): blocks pushed into the
                            kernel's page cache */
        pthread_mutex_t mu;
        pthread_cond_t cv;   /* busy dropped to 0 */
        uint64_t gen;        /* bumped when a content change starts/ends */
        unsigned block;      /* writable handles + truncates in progress */
        unsigned busy;       /* pushes in flight */
    } push;
};

/* The path of descriptor fd's object below BACKING now (read back from
 * /proc: a label, or a path to open beneath BACKING and check by device
 * and inode, never one to follow), into buf (n bytes). 0 or -errno
 * (-ENOENT: not below BACKING). */
int sqz_fd_relpath(struct sqz_fs *fs, int fd, char *buf, size_t n);

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
/* A rename through the mount gave the object now at newname in np that
 * name: the inode remembers it (without file handles, ifd.c). */
void sqz_inode_renamed(struct sqz_fs *fs, struct sqz_inode *np,
                       const char *newname);
void sqz_inode_forget(struct sqz_fs *fs, struct sqz_inode *in, uint64_t n);
void sqz_inode_open_ref(struct sqz_fs *fs, struct sqz_inode *in);
void sqz_inode_open_unref(struct sqz_fs *fs, struct sqz_inode *in);
/* The inode of backing object (dev, ino) if the table has it, with an
 * open reference (sqz_inode_open_unref), else NULL. */
struct sqz_inode *sqz_inode_find_ref(struct sqz_fs *fs, dev_t dev, ino_t ino);
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
/* After the backing object was renamed over (recompress, packing): make
 * in's cached descriptor (if any) a copy of npfd, the new object's O_PATH
 * fd, at the same number, take npfd's file handle (sqz_ifd_replace), and
 * key the inode by (dev, ino), in one critical section of the table. Caller holds io
 * exclusive. 0 or -errno (nothing changed). */
int sqz_inode_swap(struct sqz_fs *fs, struct sqz_inode *in, int npfd,
                   dev_t dev, ino_t ino);
/* Call fn on every inode of the table, with no lock held: the inodes are
 * collected under itable.lock, each kept alive by an open reference, and
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

/* What identifies a backing file's version (inode.c). */
void sqz_bkey_of(const struct stat *st, struct sqz_bkey *k);
int sqz_bkey_eq(const struct sqz_bkey *a, const struct sqz_bkey *b);
/* The container a probe opened (read-only), kept for the next
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
    atomic_fetch_add_explicit(&in->change_gen, 1, memory_order_acq_rel);
}

#endif
