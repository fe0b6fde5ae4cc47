/* Reclaiming the space of packed files that are gone (docs/FORMAT.md
 * "Packed files", "Reclaiming packs").
 *
 * Whoever removes a packed file's entry through the mount (unlink, a
 * rename over it, emptying it, unpacking it) notes its directory. The
 * durable thread then scans each noted directory (at most once per
 * SQZ_GC_INTERVAL_S, and at unmount): it adds up the entries that the
 * directory's 0-byte files still point to, per pack, and
 *   - removes a pack nothing points to any more;
 *   - moves the live entries of a pack that is more than half dead (and
 *     larger than SQZ_GC_MIN_PACK) into a new pack (the packer leaves a
 *     pack it was appending to for a new one):
 *     appended and flushed, each file's pointer swapped only if it still
 *     names the old entry, the swaps flushed, then the old pack removed.
 * A crash anywhere leaves every pointer naming a whole, durable entry: the
 * old pack goes only after the new pointers are durable. A pack with an
 * entry that cannot be read back is left alone, and so is every pack of a
 * directory holding a damaged pointer (verify reports both).
 * Readers that met a pointer just before it was swapped follow it again
 * (content_pack.c). Notes are kept in memory: a directory not touched
 * after a restart is scanned again at its next removal. A note names its
 * directory by file handle; where BACKING has none, by a descriptor (at
 * most sqz_ifd_packs_max() of them: max_fds= bounds the daemon's
 * descriptors) and past that by its path below BACKING, opened beneath
 * BACKING with no symlink in any component and taken only if it is still
 * the same directory (device and inode). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/ptimes.h"
#include "store/pack_rd.h"
#include "pack/packing.h"
#include "pack/pack_gc_int.h"
#include "common/beneath.h"
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

int sqz_pack_gc_init(struct sqz_fs *fs)
{
    struct sqz_pack_gc *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    int r = sqz_mutex_init(&g->mu);
    if (r) {
        free(g);
        return -r;
    }
    fs->pack_gc = g;
    return 0;
}

static void note_free(struct sqz_pack_gc *g, struct note *x)
{
    if (x->fd >= 0) {
        close(x->fd);
        g->nfd--;
    }
    sqz_ifd_id_free(x->id);
    free(x->rel);
}

/* The path of directory dirfd below BACKING (malloc'd), or NULL. */
static char *rel_of(struct sqz_fs *fs, int dirfd)
{
    char rel[PATH_MAX];
    return sqz_fd_relpath(fs, dirfd, rel, sizeof(rel)) == 0 ? strdup(rel) : NULL;
}

/* x's directory, opened O_PATH (the caller's), or -errno (-ESTALE: gone,
 * or its path names another directory now). Under g->mu. */
static int note_open(struct sqz_fs *fs, const struct note *x)
{
    if (x->id)
        return sqz_ifd_id_open(x->id);
    if (!x->rel) {
        int fd = dup(x->fd);
        return fd < 0 ? -errno : fd;
    }
    int fd = sqz_open_beneath(fs->root_dirfd, x->rel, O_PATH | O_DIRECTORY, 0);
    if (fd < 0)
        return -ESTALE;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_dev != x->dev || st.st_ino != x->ino) {
        close(fd);
        return -ESTALE;
    }
    return fd;
}

void sqz_pack_gc_free(struct sqz_fs *fs)
{
    struct sqz_pack_gc *g = fs->pack_gc;
    if (!g)
        return;
    for (size_t i = 0; i < g->n; i++)
        note_free(g, &g->v[i]);
    free(g->v);
    pthread_mutex_destroy(&g->mu);
    free(g);
    fs->pack_gc = NULL;
}

void sqz_pack_gc_stats(struct sqz_fs *fs, uint64_t *removed, uint64_t *moved)
{
    struct sqz_pack_gc *g = fs->pack_gc;
    *removed = *moved = 0;
    if (!g)
        return;
    SQZ_MUTEX_LOCK(&g->mu, SQZ_RANK_PACKGC);
    *removed = g->removed;
    *moved = g->moved;
    SQZ_MUTEX_UNLOCK(&g->mu);
}

void sqz_pack_gc_rename_begin(struct sqz_fs *fs, const struct sqz_inode *dir)
{
    if (fs->pack_gc)
        atomic_fetch_add(&fs->pack_gc->started[sqz_gc_bucket(dir->dev, dir->ino)], 1);
}

void sqz_pack_gc_rename_end(struct sqz_fs *fs, const struct sqz_inode *dir)
{
    if (fs->pack_gc)
        atomic_fetch_add(&fs->pack_gc->finished[sqz_gc_bucket(dir->dev, dir->ino)], 1);
}

void sqz_pack_gc_note(struct sqz_fs *fs, int dirfd)
{
    struct sqz_pack_gc *g = fs->pack_gc;
    struct stat st;
    if (!g || fs->opts.ro || fstat(dirfd, &st) != 0 || !S_ISDIR(st.st_mode))
        return;
    SQZ_MUTEX_LOCK(&g->mu, SQZ_RANK_PACKGC);
    for (size_t i = 0; i < g->n; i++) {
        if (g->v[i].dev == st.st_dev && g->v[i].ino == st.st_ino) {
            g->v[i].dirty = 1;
            SQZ_MUTEX_UNLOCK(&g->mu);
            return;
        }
    }
    if (g->n == g->cap && g->n < SQZ_GC_MAX_NOTES) {
        size_t nc = g->cap ? g->cap * 2 : 16;
        struct note *nv = realloc(g->v, nc * sizeof(*nv));
        if (nv) {
            g->v = nv;
            g->cap = nc;
        }
    }
    if (g->n < g->cap) {
        /* a handle where BACKING has them: notes hold no descriptor */
        struct sqz_ifd_id *id = sqz_ifd_handle_of(dirfd);
        int fd = -1;
        char *rel = NULL;
        if (!id && g->nfd < sqz_ifd_packs_max())
            fd = openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        else if (!id)
            rel = rel_of(fs, dirfd);
        if (fd >= 0 || id || rel) {
            g->v[g->n++] = (struct note){.dev = st.st_dev, .ino = st.st_ino,
                                         .fd = fd, .id = id, .rel = rel,
                                         .dirty = 1};
            g->nfd += fd >= 0;
        }
    }
    SQZ_MUTEX_UNLOCK(&g->mu);
}

void sqz_pack_gc_run(struct sqz_fs *fs, int final)
{
    struct sqz_pack_gc *g = fs->pack_gc;
    if (!g)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    for (;;) {
        /* take one due directory at a time (removals go on meanwhile) */
        int fd = -1;
        SQZ_MUTEX_LOCK(&g->mu, SQZ_RANK_PACKGC);
        for (size_t i = 0; i < g->n && fd < 0; i++) {
            struct note *x = &g->v[i];
            if (x->dirty && (final || x->last == 0 ||
                             now.tv_sec - x->last >= SQZ_GC_INTERVAL_S)) {
                x->dirty = 0;
                x->last = now.tv_sec;
                fd = note_open(fs, x);
                if (fd == -ESTALE) { /* the directory is gone */
                    note_free(g, x);
                    *x = g->v[--g->n];
                    i--;
                }
            }
        }
        SQZ_MUTEX_UNLOCK(&g->mu);
        if (fd < 0)
            break;
        uint64_t removed = 0, moved = 0;
        /* the directory shows the times it had (packs added, removed) */
        char pp[64];
        sqz_proc_path(fd, pp, sizeof(pp));
        int tfd = open(pp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct sqz_ptimes_dir t;
        if (tfd >= 0)
            sqz_ptimes_dir_begin(fs, tfd, &t);
        int rc = sqz_pack_gc_dir(fs, fd, &removed, &moved);
        if (tfd >= 0) {
            sqz_ptimes_dir_end(fs, tfd, &t);
            close(tfd);
        }
        if (rc == GC_AGAIN) { /* it changed under the scan: later again */
            struct stat st;
            int have = fstat(fd, &st) == 0;
            SQZ_MUTEX_LOCK(&g->mu, SQZ_RANK_PACKGC);
            for (size_t i = 0; have && i < g->n; i++)
                if (g->v[i].dev == st.st_dev && g->v[i].ino == st.st_ino)
                    g->v[i].dirty = 1;
            SQZ_MUTEX_UNLOCK(&g->mu);
            rc = 0;
        }
        if (rc == 1) { /* the directory is gone */
            struct stat st;
            int have = fstat(fd, &st) == 0;
            SQZ_MUTEX_LOCK(&g->mu, SQZ_RANK_PACKGC);
            for (size_t i = 0; have && i < g->n; i++) {
                if (g->v[i].dev == st.st_dev && g->v[i].ino == st.st_ino) {
                    note_free(g, &g->v[i]);
                    g->v[i] = g->v[--g->n];
                    break;
                }
            }
            SQZ_MUTEX_UNLOCK(&g->mu);
            rc = 0;
        }
        close(fd);
        if (rc < 0)
            sqz_logf(SQZ_LOG_WARN, "squeezefs: reclaiming packed space: %s "
                     "(tried again at the next removal)", strerror(-rc));
        SQZ_MUTEX_LOCK(&g->mu, SQZ_RANK_PACKGC);
        g->removed += removed;
        g->moved += moved;
        SQZ_MUTEX_UNLOCK(&g->mu);
    }
}
