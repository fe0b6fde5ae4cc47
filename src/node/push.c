/* Pushing whole decompressed blocks into the kernel's page cache
 * (fuse_lowlevel_notify_store), so that the neighbours of a random read are
 * served by the kernel as on a kernel file system, and the fence that keeps
 * the pushed pages from ever being stale.
 *
 * A read that used a block only in part (a 4 KiB read of a 128 KiB block)
 * replies with its bytes and then stores the whole block. The ordering
 * against everything that changes a file's content (docs/LOCKING.md,
 * "Pages pushed into the kernel"):
 *
 *  - push.block counts the content changers of the inode: every open
 *    writable handle (from its open to its release) and every truncate in
 *    progress. No block is pushed while it is non-zero, so data written
 *    through the kernel (whose pages the kernel updates before the daemon
 *    sees the WRITE) is never overwritten by an older block.
 *  - A changer bumps push.gen and waits until no push is in flight
 *    (push.busy == 0) before it starts, and bumps push.gen again when it
 *    ends. A reader samples push.gen under io (shared), with the bytes it
 *    reads, and pushes only if push.gen is still that value and no changer
 *    is in at the moment its push starts (checked under push.mu, where the
 *    push also counts itself in push.busy). So a push either finishes
 *    before a change begins, or carries data read after the change ended.
 *  - A read-only view replaced because another mount wrote the file is a
 *    change that happened at once: after the replacement (and after
 *    releasing io) sqz_push_fence blocks and unblocks, so the pushes of
 *    the old view still in flight end, and those not started are refused,
 *    before the open returns or the revalidator drops the kernel's pages.
 *  - Nothing waits for a push while holding io: a push can wait for page
 *    locks of another READ of the same file, whose handler needs io
 *    (shared). Pushes run after the reply, holding no lock, so a READ's
 *    own pages are never waited for by its own thread. At most
 *    SQZ_PUSH_MAX_INFLIGHT pushes run at once per mount, so that READs
 *    they may wait for always find request threads.
 *  - With the kernel writeback cache (the default on read-write mounts)
 *    the kernel's pages may hold data the daemon has not seen yet, but
 *    only while a writable handle is open: the kernel writes every dirty
 *    page back before it sends the RELEASE of a writable file (and dirty
 *    pages need a writable file), and a truncate(2) without a handle is a
 *    changer here too. So the same fence covers it.
 *  - Over io_uring (-o io_uring) each ring has one thread, and a READ's
 *    reply reaches the kernel only when its thread has handled the whole
 *    batch of requests it got with it: a push there could wait for its own
 *    READ, or for one queued behind it. So the READ handler queues the push
 *    (pushq.c) and one pusher thread stores it, under the same fence; and a
 *    ring thread never waits for a push: a handler that would change the
 *    content (open, truncate) first blocks pushes at once if none is in
 *    flight (sqz_push_preblock), else hands the whole request to a thread
 *    that may wait (src/fuse/defer.c).
 *  - A push never extends the file in the kernel: blocks end at the
 *    file's length as the read saw it, and no change (truncate) can have
 *    happened since.
 */
#include "node/push.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "common/lockorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Pushes in flight at once per mount (the request loop has at least 16
 * threads; see mount.c). */
#define SQZ_PUSH_MAX_INFLIGHT 4

int sqz_push_init(struct sqz_inode *in)
{
    int rc = sqz_mutex_init(&in->push.mu);
    if (rc)
        return -rc;
    rc = pthread_cond_init(&in->push.cv, NULL);
    if (rc) {
        pthread_mutex_destroy(&in->push.mu);
        return -rc;
    }
    return 0;
}

void sqz_push_destroy(struct sqz_inode *in)
{
    pthread_cond_destroy(&in->push.cv);
    pthread_mutex_destroy(&in->push.mu);
}

/* The block this thread took ahead of its handler (sqz_push_preblock),
 * which the handler's first sqz_push_block of that inode takes over. */
static _Thread_local struct sqz_inode *g_pre;

int sqz_push_preblock(struct sqz_fs *fs, struct sqz_inode *in)
{
    if (!fs->opts.io_uring || !fs->se)
        return 0;
    SQZ_MUTEX_LOCK(&in->push.mu, SQZ_RANK_PUSH);
    int busy = in->push.busy > 0;
    if (!busy) { /* as sqz_push_block, with nothing to wait for */
        in->push.block++;
        in->push.gen++;
    }
    SQZ_MUTEX_UNLOCK(&in->push.mu);
    if (busy)
        return -EWOULDBLOCK;
    g_pre = in;
    return 0;
}

void sqz_push_preblock_end(struct sqz_inode *in)
{
    if (g_pre != in)
        return; /* taken over by the handler, or none taken */
    g_pre = NULL;
    sqz_push_unblock(in);
}

void sqz_push_block(struct sqz_inode *in)
{
    if (g_pre == in) { /* already counted: no push has entered since */
        g_pre = NULL;
        return;
    }
    SQZ_MUTEX_LOCK(&in->push.mu, SQZ_RANK_PUSH);
    in->push.block++;
    in->push.gen++;
    while (in->push.busy > 0)
        pthread_cond_wait(&in->push.cv, &in->push.mu);
    SQZ_MUTEX_UNLOCK(&in->push.mu);
}

void sqz_push_unblock(struct sqz_inode *in)
{
    SQZ_MUTEX_LOCK(&in->push.mu, SQZ_RANK_PUSH);
    in->push.gen++;
    if (in->push.block > 0)
        in->push.block--;
    SQZ_MUTEX_UNLOCK(&in->push.mu);
}

void sqz_push_fence(struct sqz_inode *in)
{
    sqz_push_block(in);
    sqz_push_unblock(in);
}

int sqz_push_sample(struct sqz_fs *fs, struct sqz_inode *in, uint64_t *gen)
{
    SQZ_ASSERT_HELD(&in->io);
    /* Over io_uring only through the pusher thread (pushq.c): a push on a
     * ring thread can wait for the page locks of a READ queued behind it
     * on its own ring, and never end (a deadlock seen in test_posix). */
    if (!fs->se || (fs->opts.io_uring && !atomic_load(&fs->push.queue_on)))
        return 0;
    SQZ_MUTEX_LOCK(&in->push.mu, SQZ_RANK_PUSH);
    int ok = in->push.block == 0;
    *gen = in->push.gen;
    SQZ_MUTEX_UNLOCK(&in->push.mu);
    return ok;
}

/* Count a push in (0) or refuse it (-EAGAIN): a changer came in or was
 * there since the sample, or too many pushes run. */
static int push_enter(struct sqz_fs *fs, struct sqz_inode *in, uint64_t gen)
{
    if (atomic_fetch_add(&fs->push.inflight, 1) >= SQZ_PUSH_MAX_INFLIGHT) {
        atomic_fetch_sub(&fs->push.inflight, 1);
        return -EAGAIN;
    }
    SQZ_MUTEX_LOCK(&in->push.mu, SQZ_RANK_PUSH);
    int ok = in->push.block == 0 && in->push.gen == gen;
    if (ok)
        in->push.busy++;
    SQZ_MUTEX_UNLOCK(&in->push.mu);
    if (!ok) {
        atomic_fetch_sub(&fs->push.inflight, 1);
        return -EAGAIN;
    }
    return 0;
}

static void push_leave(struct sqz_fs *fs, struct sqz_inode *in)
{
    SQZ_MUTEX_LOCK(&in->push.mu, SQZ_RANK_PUSH);
    if (--in->push.busy == 0)
        pthread_cond_broadcast(&in->push.cv);
    SQZ_MUTEX_UNLOCK(&in->push.mu);
    atomic_fetch_sub(&fs->push.inflight, 1);
}

int sqz_push_store(struct sqz_fs *fs, fuse_ino_t ino, struct sqz_inode *in,
                   uint64_t gen, sqz_read_spill *sp)
{
    if (sp->n == 0)
        return 0;
    if (push_enter(fs, in, gen) != 0) {
        atomic_fetch_add(&fs->push.skipped, sp->n);
        return -EAGAIN;
    }
    int first = 0;
    for (size_t i = 0; i < sp->n; i++) {
        struct fuse_bufvec bv = FUSE_BUFVEC_INIT(sp->v[i].len);
        bv.buf[0].mem = (void *)sp->v[i].data;
        int rc = fuse_lowlevel_notify_store(fs->se, ino, (off_t)sp->v[i].off,
                                            &bv, 0);
        if (rc == 0) {
            atomic_fetch_add(&fs->push.blocks, 1);
            atomic_fetch_add(&fs->push.bytes, sp->v[i].len);
        } else {
            /* -ENOENT: the kernel forgot the inode; nothing to fill */
            atomic_fetch_add(&fs->push.skipped, 1);
            if (!first)
                first = rc < 0 ? rc : -EIO;
        }
    }
    push_leave(fs, in);
    return first;
}

/* The content is copied under io with the sample (the inode's buffer may
 * go once io is released), and pushed holding no lock, under the same
 * fence as a READ's blocks. Only on read-write mounts: there this mount
 * is the only writer, so the kernel's idea of the file's size is the
 * file's, and every page the kernel may hold for the file is replaced. */
int sqz_push_packed(struct sqz_fs *fs, fuse_ino_t ino, struct sqz_inode *in)
{
    /* (not over io_uring: the open's ring thread would wait for it) */
    if (fs->opts.ro || !fs->se || fs->opts.io_uring)
        return 0;
    void *copy = NULL;
    size_t len = 0;
    uint64_t gen = 0;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    if (in->kind == SQZ_K_PACKED && in->pack.buf && in->pack.buf_len > 0 &&
        sqz_push_sample(fs, in, &gen)) { /* no writable handle, no truncate */
        copy = malloc(in->pack.buf_len);
        if (copy) {
            len = in->pack.buf_len;
            memcpy(copy, in->pack.buf, len);
        }
    }
    SQZ_RWUNLOCK(&in->io);
    if (!copy)
        return 0;
    sqz_read_spill sp = {.n = 1};
    sp.v[0].data = copy;
    sp.v[0].off = 0;
    sp.v[0].len = len;
    sp.v[0].ref = NULL;
    int rc = sqz_push_store(fs, ino, in, gen, &sp);
    free(copy);
    return rc == 0;
}
