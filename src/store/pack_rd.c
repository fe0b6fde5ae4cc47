/* Packs kept open for readers of packed files (content_pack.c). A tree
 * of small files is read from a few packs, and opening each one per file
 * (its directory first) costs more than the read. Keyed by pack id alone:
 * an entry read through a kept pack is used only if it passes every check
 * of the pointer, so a pack with the same id elsewhere (a copied
 * directory) can at most cost a fallback to the file's own directory. A
 * pack that reclaiming removes is dropped (pack_gc.c), so its space is
 * freed. Locks: docs/LOCKING.md (pack_rd.mu, a leaf). */
#include "store/pack_rd.h"
#include "daemon/fs.h"
#include "common/lockorder.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#define PACK_RD_SLOTS 16

struct sqz_pack_rd {
    pthread_mutex_t mu;
    uint64_t id[PACK_RD_SLOTS];
    int fd[PACK_RD_SLOTS];
    unsigned next;
};

int sqz_pack_rd_init(struct sqz_fs *fs)
{
    struct sqz_pack_rd *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    int e = sqz_mutex_init(&r->mu);
    if (e) {
        free(r);
        return -e;
    }
    for (unsigned i = 0; i < PACK_RD_SLOTS; i++)
        r->fd[i] = -1;
    fs->pack_rd = r;
    return 0;
}

void sqz_pack_rd_free(struct sqz_fs *fs)
{
    struct sqz_pack_rd *r = fs->pack_rd;
    if (!r)
        return;
    for (unsigned i = 0; i < PACK_RD_SLOTS; i++)
        if (r->fd[i] >= 0)
            close(r->fd[i]);
    pthread_mutex_destroy(&r->mu);
    free(r);
    fs->pack_rd = NULL;
}

int sqz_pack_rd_get(struct sqz_fs *fs, uint64_t id)
{
    struct sqz_pack_rd *r = fs->pack_rd;
    int fd = -1;
    if (!r)
        return -1;
    SQZ_MUTEX_LOCK(&r->mu, SQZ_RANK_PACKRD);
    for (unsigned i = 0; i < PACK_RD_SLOTS && fd < 0; i++)
        if (r->fd[i] >= 0 && r->id[i] == id)
            fd = fcntl(r->fd[i], F_DUPFD_CLOEXEC, 0);
    SQZ_MUTEX_UNLOCK(&r->mu);
    return fd;
}

void sqz_pack_rd_put(struct sqz_fs *fs, uint64_t id, int fd)
{
    struct sqz_pack_rd *r = fs->pack_rd;
    if (!r) {
        close(fd);
        return;
    }
    int old;
    SQZ_MUTEX_LOCK(&r->mu, SQZ_RANK_PACKRD);
    unsigned i = r->next++ % PACK_RD_SLOTS;
    old = r->fd[i];
    r->fd[i] = fd;
    r->id[i] = id;
    SQZ_MUTEX_UNLOCK(&r->mu);
    if (old >= 0)
        close(old);
}

void sqz_pack_rd_forget(struct sqz_fs *fs, uint64_t id)
{
    struct sqz_pack_rd *r = fs->pack_rd;
    if (!r)
        return;
    int fds[PACK_RD_SLOTS], n = 0;
    SQZ_MUTEX_LOCK(&r->mu, SQZ_RANK_PACKRD);
    for (unsigned i = 0; i < PACK_RD_SLOTS; i++) {
        if (r->fd[i] >= 0 && r->id[i] == id) {
            fds[n++] = r->fd[i];
            r->fd[i] = -1;
        }
    }
    SQZ_MUTEX_UNLOCK(&r->mu);
    while (n > 0)
        close(fds[--n]);
}
