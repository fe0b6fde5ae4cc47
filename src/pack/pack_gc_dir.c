/* One directory's scan of reclaiming packs (pack_gc.c has the design):
 * the live entries per pack, removing dead packs, moving the live entries
 * of mostly dead ones. */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/ptimes.h"
#include "store/pack_rd.h"
#include "pack/packing.h"
#include "pack/pack_gc_int.h"
#include "common/beneath.h"
#include "common/fdpath.h"
#include "common/lockorder.h"
#include "squeezefs/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* ---- one directory ---- */

struct live {
    char *name;
    sqz_pack_ptr ptr;
};

struct pack_info {
    uint64_t id;
    uint64_t size;   /* st_size */
    uint64_t live;   /* bytes of entries still pointed to */
    struct live *files;
    size_t nfiles, cap;
};

static void infos_free(struct pack_info *pi, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < pi[i].nfiles; j++)
            free(pi[i].files[j].name);
        free(pi[i].files);
    }
    free(pi);
}

static struct pack_info *info_of(struct pack_info *pi, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (pi[i].id == id)
            return &pi[i];
    return NULL;
}

/* Scan: every pack of the directory and the live entries in each. */
/* The file name of directory dfd, opened O_PATH | O_NOFOLLOW (no symlink
 * followed, no device opened) if it is a regular file: an fd, or -1 with
 * errno set (ENODATA: not a regular file, so no pointer). */
static int open_reg(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    int e = fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? ENODATA : 0;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* The pointer xattr of open_reg's fd, through its own magic link: read
 * into b (v NULL), or replaced by v (XATTR_REPLACE); n bytes. The xattr
 * call's result, errno set. */
static ssize_t ptr_xattr(int fd, void *b, const void *v, size_t n)
{
    char pp[64];
    sqz_proc_path(fd, pp, sizeof(pp));
    return v ? setxattr(pp, SQZ_PACK_XATTR, v, n, XATTR_REPLACE)
             : getxattr(pp, SQZ_PACK_XATTR, b, n);
}

static int scan(int dfd, struct pack_info **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    int d2 = dup(dfd);
    DIR *dp = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!dp) {
        if (d2 >= 0)
            close(d2);
        return -errno;
    }
    struct pack_info *pi = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    /* first the packs, then the pointers (a pointer to a pack not listed
     * keeps nothing alive here: that file reads as damaged anyway) */
    while ((de = readdir(dp)) != NULL) {
        uint64_t id;
        struct stat st;
        if (!sqz_pack_name_parse(de->d_name, &id) ||
            fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            struct pack_info *np = realloc(pi, nc * sizeof(*np));
            if (!np) {
                rc = -ENOMEM;
                break;
            }
            pi = np;
            cap = nc;
        }
        pi[n++] = (struct pack_info){.id = id, .size = (uint64_t)st.st_size};
    }
    rewinddir(dp);
    while (rc == 0 && n > 0 && (de = readdir(dp)) != NULL) {
        if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN)
            continue;
        if (sqz_name_hidden(de->d_name))
            continue;
        /* Every regular file counts, whatever its size: a file being
         * unpacked has its container's bytes and still its pointer (and a
         * torn unpacking falls back on it). Anything but "no such file"
         * and "no pointer" keeps every pack of the directory. */
        struct stat st;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT)
                continue; /* removed meanwhile (the directory changed:
                             nothing is removed this round) */
            rc = -errno;
            break;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        uint8_t b[SQZ_PACK_PTR_MAX];
        int fd = open_reg(dfd, de->d_name);
        ssize_t got = fd < 0 ? -1 : ptr_xattr(fd, b, NULL, sizeof(b));
        if (fd >= 0) {
            int e = errno;
            close(fd);
            errno = e;
        }
        sqz_pack_ptr p;
        if (got < 0 && (errno == ENODATA || errno == ENOTSUP || errno == ENOENT))
            continue; /* no pointer */
        if (got < 0 && errno != ERANGE) {
            rc = -errno;
            break;
        }
        if (got <= 0 || sqz_pack_ptr_decode(b, (size_t)got, &p, NULL, 0) != 0) {
            /* a damaged pointer: which pack it named is unknown, so no
             * pack of this directory is removed (its data may still be
             * recovered by hand) */
            rc = -EBADMSG;
            break;
        }
        struct pack_info *x = info_of(pi, n, p.pack_id);
        if (!x)
            continue;
        x->live += SQZ_PACK_ENTRY_HDR + p.stored_len;
        if (x->nfiles == x->cap) {
            size_t nc = x->cap ? x->cap * 2 : 16;
            struct live *nl = realloc(x->files, nc * sizeof(*nl));
            if (!nl) {
                rc = -ENOMEM;
                break;
            }
            x->files = nl;
            x->cap = nc;
        }
        char *nm = strdup(de->d_name);
        if (!nm) {
            rc = -ENOMEM;
            break;
        }
        x->files[x->nfiles++] = (struct live){.name = nm, .ptr = p};
    }
    closedir(dp);
    if (rc) {
        infos_free(pi, n);
        return rc;
    }
    *out = pi;
    *nout = n;
    return 0;
}

/* Move the live entries of x into w, swap the pointers, flush them. 0 when
 * the old pack is free to go. */
static int move_live(struct sqz_fs *fs, int dfd, struct pack_info *x,
                     sqz_pack_writer *w, uint64_t *moved)
{
    sqz_pack_ptr *np = calloc(x->nfiles ? x->nfiles : 1, sizeof(*np));
    if (!np)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < x->nfiles && rc == 0; i++) {
        const sqz_pack_ptr *op = &x->files[i].ptr;
        void *buf = malloc(op->length);
        char err[200] = "";
        rc = buf ? sqz_pack_read(dfd, op, buf, err, sizeof(err)) : -ENOMEM;
        if (rc == 0)
            rc = sqz_pack_append(w, &op->params, buf, op->length, &np[i]);
        else if (err[0])
            sqz_logf(SQZ_LOG_WARN, "%s: %s (its pack is kept)", x->files[i].name, err);
        free(buf);
    }
    if (rc == 0)
        rc = sqz_pack_writer_flush(w);
    /* Swap each pointer that still names the old entry (XATTR_REPLACE: a
     * pointer removed meanwhile, by O_TRUNC or an unpacking, stays
     * removed). Every file listed must be swapped, or be found holding
     * another pointer or none: a file that cannot be checked (gone by
     * that name: perhaps renamed) keeps the old pack. */
    int all = 1;
    for (size_t i = 0; i < x->nfiles && rc == 0; i++) {
        uint8_t b[SQZ_PACK_PTR_MAX];
        sqz_pack_ptr cur;
        int fd = open_reg(dfd, x->files[i].name);
        ssize_t got = fd < 0 ? -1 : ptr_xattr(fd, b, NULL, sizeof(b));
        if (got < 0 && (errno == ENODATA || errno == ENOTSUP)) {
            if (fd >= 0)
                close(fd);
            continue; /* no pointer any more: its entry is dead */
        }
        if (got <= 0 || sqz_pack_ptr_decode(b, (size_t)got, &cur, NULL, 0) != 0) {
            if (fd >= 0)
                close(fd);
            all = 0;
            continue;
        }
        if (cur.pack_id != x->files[i].ptr.pack_id ||
            cur.off != x->files[i].ptr.off) {
            close(fd);
            continue; /* repacked meanwhile: not this entry any more */
        }
        uint8_t nb[SQZ_PACK_PTR_MAX];
        size_t nn = sqz_pack_ptr_encode(&np[i], nb);
        if (ptr_xattr(fd, NULL, nb, nn) == 0)
            (*moved)++; /* times stay (only the ctime changes) */
        else if (errno != ENODATA)
            all = 0;
        close(fd);
    }
    free(np);
    if (rc == 0 && !all)
        rc = GC_AGAIN;
    if (rc)
        return rc;
    (void)fs;
    /* the new pointers are durable before the old pack goes */
    return syncfs(dfd) == 0 ? 0 : -errno;
}

/* 1 if the directory's entries are as they were when *seen was taken (no
 * name added, removed or renamed: its mtime and ctime are the same). A
 * scan of a directory that changed meanwhile may have missed a file (a
 * name renamed during readdir), and a pack it seems to leave unreferenced
 * may not be: nothing is removed then, the directory is scanned again
 * later. */
struct gc_dir {
    int dfd;
    struct stat seen;      /* the directory as last seen */
    struct sqz_pack_gc *g;
    unsigned b;            /* its bucket */
    uint64_t started0;     /* renames and links started before the scan */
};

static int dir_unchanged(const struct gc_dir *c)
{
    const struct stat *seen = &c->seen;
    struct stat now;
    if (atomic_load(&c->g->started[c->b]) != c->started0)
        return 0;
    return fstat(c->dfd, &now) == 0 &&
           now.st_mtim.tv_sec == seen->st_mtim.tv_sec &&
           now.st_mtim.tv_nsec == seen->st_mtim.tv_nsec &&
           now.st_ctim.tv_sec == seen->st_ctim.tv_sec &&
           now.st_ctim.tv_nsec == seen->st_ctim.tv_nsec;
}

/* Remove pack name (after checking the directory did not change since
 * *seen), then take *seen anew (the removal changed it). 0, GC_AGAIN or
 * -errno. */
static int remove_pack(struct sqz_fs *fs, struct gc_dir *c, uint64_t id,
                       uint64_t *removed)
{
    char name[SQZ_PACK_NAME_MAX];
    sqz_pack_name(id, name);
    if (!dir_unchanged(c))
        return GC_AGAIN;
    if (unlinkat(c->dfd, name, 0) != 0)
        return errno == ENOENT ? 0 : -errno;
    (*removed)++;
    sqz_pack_rd_forget(fs, id);
    return fstat(c->dfd, &c->seen) == 0 ? 0 : -errno;
}

int sqz_pack_gc_dir(struct sqz_fs *fs, int pathfd, uint64_t *removed,
                    uint64_t *moved)
{
    char pp[64];
    sqz_proc_path(pathfd, pp, sizeof(pp));
    int dfd = open(pp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -errno;
    struct stat ds;
    if (fstat(dfd, &ds) != 0 || ds.st_nlink == 0) {
        close(dfd);
        return 1; /* removed: its note goes */
    }
    /* no rename or link of this directory in flight, or the scan could
     * miss a name */
    struct gc_dir cx = {.dfd = dfd, .seen = ds, .g = fs->pack_gc,
                        .b = sqz_gc_bucket(ds.st_dev, ds.st_ino)};
    cx.started0 = atomic_load(&cx.g->started[cx.b]);
    if (atomic_load(&cx.g->finished[cx.b]) != cx.started0) {
        close(dfd);
        return GC_AGAIN;
    }
    struct pack_info *pi;
    size_t n;
    int rc = scan(dfd, &pi, &n);
    if (rc) {
        close(dfd);
        if (rc == -EBADMSG)
            sqz_logf(SQZ_LOG_WARN, "squeezefs: a damaged pack pointer in a directory: "
                     "its packs are kept (squeezefs verify names the file)");
        return rc == -EBADMSG ? 0 : rc;
    }
    if (!dir_unchanged(&cx)) { /* changed during the scan */
        infos_free(pi, n);
        close(dfd);
        return GC_AGAIN;
    }
    uint64_t busy = sqz_packer_current(fs, &ds);
    sqz_pack_writer w = {.fd = -1};
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct pack_info *x = &pi[i];
        if (x->nfiles == 0) {
            if (!dir_unchanged(&cx)) {
                rc = GC_AGAIN;
                break;
            }
            if (x->id == busy)
                sqz_packer_forget(fs, &ds);
            rc = remove_pack(fs, &cx, x->id, removed);
            continue;
        }
        if (x->size < SQZ_GC_MIN_PACK || x->live * 2 > x->size)
            continue;
        if (x->id == busy) { /* the packer starts a new one (same thread) */
            sqz_packer_forget(fs, &ds);
            busy = 0;
        }
        if (w.fd < 0) {
            if (!dir_unchanged(&cx)) {
                rc = GC_AGAIN;
                break;
            }
            if ((rc = sqz_pack_writer_open(&w, dfd)) != 0 ||
                (rc = fstat(dfd, &cx.seen) == 0 ? 0 : -errno) != 0)
                break;
        }
        rc = move_live(fs, dfd, x, &w, moved);
        if (rc == 0)
            rc = remove_pack(fs, &cx, x->id, removed);
    }
    if (w.fd >= 0) {
        /* a fresh pack that got nothing (every file went meanwhile) */
        int empty = w.end == SQZ_PACK_HDR_SIZE;
        char name[SQZ_PACK_NAME_MAX];
        sqz_pack_name(w.id, name);
        sqz_pack_writer_close(&w);
        if (empty)
            unlinkat(dfd, name, 0);
    }
    infos_free(pi, n);
    close(dfd);
    return rc;
}

