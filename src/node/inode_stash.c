/* Backing version keys, and the container a probe keeps for the next
 * open (the stash), per inode. Moved out of inode.c (its size). */
#include "node/inode.h"
#include "common/lockorder.h"

#include <string.h>
#include <sys/stat.h>

/* What identifies a backing file's content version (for caches). */
void sqz_bkey_of(const struct stat *st, struct sqz_bkey *k)
{
    memset(k, 0, sizeof(*k));
    k->ino = st->st_ino;
    k->size = st->st_size;
    k->mtime = st->st_mtim;
    k->ctime = st->st_ctim;
}

int sqz_bkey_eq(const struct sqz_bkey *a, const struct sqz_bkey *b)
{
    return a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec &&
           a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* The stash: a lookup probes a container (opens it, reads its head and
 * index) for its length, and the open that usually follows would do all of
 * it again. The probe keeps the read-only container it opened, keyed by
 * the backing version it was read at; a read-only open at that same
 * version takes it (sqz_content_ensure_sf). It lives with the inode (inode.c), whose
 * teardown closes it. At most sqz_ifd_stash_max() are kept
 * per process (each holds a descriptor and an index): past that a probe
 * closes its container as before. */
static atomic_int g_stashed;
static atomic_uint_fast64_t g_stash_hits;

void sqz_inode_stash_put(struct sqz_inode *in, sqz_ctr *c,
                           const struct sqz_bkey *key)
{
    sqz_ctr *old = NULL;
    if (key->ino == 0) {
        sqz_ctr_close(c);
        return;
    }
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    if (in->stash) {
        old = in->stash; /* replaced: count unchanged */
    } else if (atomic_fetch_add(&g_stashed, 1) >= (int)sqz_ifd_stash_max()) {
        atomic_fetch_sub(&g_stashed, 1);
        SQZ_MUTEX_UNLOCK(&in->meta);
        sqz_ctr_close(c);
        return;
    }
    in->stash = c;
    in->stash_key = *key;
    SQZ_MUTEX_UNLOCK(&in->meta);
    if (old)
        sqz_ctr_close(old);
}

/* Take the stash out of the inode (caller owns it), with its key. */
static sqz_ctr *stash_grab(struct sqz_inode *in, struct sqz_bkey *key)
{
    SQZ_MUTEX_LOCK(&in->meta, SQZ_RANK_META);
    sqz_ctr *c = in->stash;
    if (c) {
        *key = in->stash_key;
        in->stash = NULL;
        atomic_fetch_sub(&g_stashed, 1);
    }
    SQZ_MUTEX_UNLOCK(&in->meta);
    return c;
}

sqz_ctr *sqz_inode_stash_take(struct sqz_inode *in, struct sqz_bkey *key)
{
    sqz_ctr *c = stash_grab(in, key);
    if (!c)
        return NULL; /* the common case past the limit: no fstat */
    struct stat st;
    struct sqz_bkey now;
    int fd = sqz_ifd_get(in); /* (not sqz_backing_stat: inode.c uses this file) */
    int ok = fd >= 0 && fstat(fd, &st) == 0;
    if (fd >= 0)
        sqz_ifd_put(in);
    if (ok) {
        sqz_bkey_of(&st, &now);
        if (sqz_bkey_eq(&now, key)) {
            atomic_fetch_add(&g_stash_hits, 1);
            return c;
        }
    }
    sqz_ctr_close(c); /* the file changed since: read it anew */
    return NULL;
}

uint64_t sqz_inode_stash_hits(void)
{
    return (uint64_t)atomic_load(&g_stash_hits);
}

void sqz_inode_stash_drop(struct sqz_inode *in)
{
    struct sqz_bkey key;
    sqz_ctr *c = stash_grab(in, &key);
    if (c)
        sqz_ctr_close(c);
}
