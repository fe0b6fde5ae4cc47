/* The daemon's O_PATH descriptors of inodes, bounded (ifd.c).
 * Internal header. docs/FORMAT.md "Descriptors of inodes" has the design.
 *
 * An inode the kernel knows no longer holds a descriptor for its whole
 * life: it keeps how to open its backing object again — a file handle
 * (name_to_handle_at, opened with open_by_handle_at below BACKING's file
 * system), or, where the backing file system has none (GlusterFS, NFS over
 * FUSE; or SQZ_NO_HANDLES=1), its parent inode and its name there (a
 * regular file's handle comes with that too, as a hint: inode_path.c) — and
 * a bounded LRU of open descriptors serves the hot ones (max_fds=).
 *
 * A caller pins the descriptor while it uses it: sqz_ifd_get returns it
 * (opening it again if it was evicted), sqz_ifd_put lets it be evicted
 * again. A pinned descriptor's number names the inode's backing object
 * until the put. Lock: the cache's own mutex, a leaf (docs/LOCKING.md,
 * rank 500); without handles it is held across the openat of a name. */
#ifndef SQZ_FUSE_IFD_H
#define SQZ_FUSE_IFD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

struct sqz_inode;
struct sqz_ifd_id;

/* Per inode, protected by the cache's mutex. */
struct sqz_ifd {
    int fd;                       /* cached O_PATH|O_NOFOLLOW fd, -1: none */
    unsigned pins;                /* callers using fd now */
    unsigned hold;                /* user handles open (kept while > 0
                                     without handles: an unlinked file has
                                     no name to be found by) */
    int fixed;                    /* never evicted: the root, an inode with
                                     no way to be opened again */
    struct sqz_inode *prev, *next; /* LRU of unpinned fds (head: newest) */
    struct sqz_ifd_id *id;        /* how to open it again (NULL: fixed) */
};

/* The effective max_fds= for the option's value asked (0: the default,
 * 2048; at most half of the open-file limit). */
size_t sqz_ifd_budget(size_t asked);
/* The containers the probe stash may keep open (inode_stash.c), the
 * packs the packer may keep open (pack_job.c). */
size_t sqz_ifd_stash_max(void);
size_t sqz_ifd_packs_max(void);
/* Start the cache: BACKING's root fd (O_RDONLY dir, the mount fd of the
 * handles), its device, max_fds (sqz_ifd_budget's; the cache takes what
 * the other holders leave). Handles are used if
 * name_to_handle_at works on BACKING and SQZ_NO_HANDLES is not "1".
 * 0 or -errno. */
int sqz_ifd_init(int root_fd, dev_t root_dev, size_t max);
int sqz_ifd_handles(void); /* 1: file handles in use */

/* How to open fd's object again (st: its stat): its file handle (handle
 * mode; NULL on another device than BACKING's: it keeps its descriptor),
 * with parent + name as a hint for a regular file, or parent + name
 * (name mode; NULL without a parent). NULL also when
 * there is no memory (the inode then keeps its descriptor). */
struct sqz_ifd_id *sqz_ifd_id_of(int fd, const struct stat *st,
                                 struct sqz_inode *parent, const char *name);
void sqz_ifd_id_free(struct sqz_ifd_id *id);
/* The parent an id names (name mode, a handle's hint), or NULL. */
struct sqz_inode *sqz_ifd_id_parent(const struct sqz_ifd_id *id);
/* A new inode's descriptor fd and identity id (both taken; id NULL, or
 * fixed: the fd is never evicted). The caller has counted the parent's
 * child reference of a name id. May be called under itable.lock. */
void sqz_ifd_attach(struct sqz_inode *in, int fd, struct sqz_ifd_id *id,
                    int fixed);
/* Teardown: close the fd, free the identity; returns the parent whose
 * child reference the caller must drop (name mode), or NULL. */
struct sqz_inode *sqz_ifd_detach(struct sqz_inode *in);
/* Close cached fds past the bound (after attach/found, no lock held). */
void sqz_ifd_trim(void);
/* The request loop runs up to n threads: two descriptors each are kept
 * out of the cache's share (each may hold one a lookup opened before it
 * is attached, and one pinned), so the daemon's own stay within max_fds=. */
void sqz_ifd_set_workers(unsigned n);

/* The pinned descriptor of in, or -errno (-ESTALE: the object it named is
 * gone or its name now names another file). Never -EMFILE while the cache
 * holds a descriptor it can close. */
int sqz_ifd_get(struct sqz_inode *in);
void sqz_ifd_put(struct sqz_inode *in);

/* A lookup found in again, with a fresh descriptor fd of the object
 * (dev, ino as in's) and its identity id: 1 if fd is in's object (fd and
 * id are taken: fd kept if in has none cached, id recorded as its name in
 * name mode), 0 if in is stale (no descriptor held it, and the number was
 * given to another file: its handle differs; fd and id left to the
 * caller). *old_parent: the parent whose child reference to drop when the
 * name moved to another parent (the caller counted id's). */
int sqz_ifd_found(struct sqz_inode *in, int fd, struct sqz_ifd_id *id,
                  struct sqz_inode **old_parent);
/* Name mode: in now has the name newname in np (a rename through the
 * mount). Returns the old parent whose child reference to drop (the new
 * one counted by the caller), or NULL, *moved 0 if nothing changed. */
struct sqz_inode *sqz_ifd_renamed(struct sqz_inode *in, struct sqz_inode *np,
                                  const char *newname, int *moved);
/* The backing object was renamed over (recompress, packing): in is now
 * npfd's object. The cached fd (if any) becomes a duplicate of npfd at the
 * same number; the handle is replaced. 0 or -errno (nothing changed). */
int sqz_ifd_replace(struct sqz_inode *in, int npfd);

/* An O_PATH descriptor (the caller's to close) of the directory of the
 * last name the daemon saw in by (a lookup, create, link, a rename through
 * the mount), that name copied into name (n bytes): a regular file's hint
 * in handle mode, its parent and name in name mode (only while the
 * parent's descriptor is cached); -ENOENT if none. */
int sqz_ifd_hint_dir(struct sqz_inode *in, char *name, size_t n);
/* nfd, a descriptor of in's object opened by its name (connected: its
 * /proc path is right), takes the place of fd, in's descriptor pinned by
 * the caller (the same number), if it is the same object (device, inode
 * number, handle). 0 or -ESTALE (in was swapped to another file). */
int sqz_ifd_reconnect(struct sqz_inode *in, int fd, int nfd);

/* A note kept long (pack_gc.c) names a directory by its handle: NULL
 * without handles (keep a descriptor then). Opened again O_PATH by
 * sqz_ifd_id_open (-ESTALE once it is gone). */
struct sqz_ifd_id *sqz_ifd_handle_of(int fd);
int sqz_ifd_id_open(const struct sqz_ifd_id *id);

/* User handles of in: open (+1) / released (-1). */
void sqz_ifd_hold(struct sqz_inode *in, int delta);
/* Close every unpinned cached fd (EMFILE from another open): the number
 * closed. */
size_t sqz_ifd_shrink(void);
/* Open with a retry after sqz_ifd_shrink on EMFILE/ENFILE. */
int sqz_openat_fd(int dirfd, const char *name, int flags, mode_t mode);

struct sqz_ifd_stats {
    uint64_t open_fds, max_fds, reopens, evictions, stale;
};
void sqz_ifd_stats(struct sqz_ifd_stats *st);

#endif
