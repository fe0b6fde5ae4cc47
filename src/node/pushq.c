/* The pusher thread over io_uring (-o io_uring): a READ handler on a ring
 * thread must not push itself (push.c: its reply reaches the kernel only
 * after its ring thread has handled the whole batch, so the push could
 * wait for its own pages). It queues the push here after its reply, with
 * the fence generation sampled under io, the blocks (references) and an
 * open reference of the inode; this thread stores it with sqz_push_store,
 * which checks the fence exactly as a /dev/fuse READ does. The queue is
 * bounded: a push is an optimisation, and when the queue is full it is
 * dropped (counted in push_skipped). A ring thread never waits for the
 * pusher: changers that find a push in flight hand their request to
 * src/fuse/defer.c. */
#include "node/push.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "common/lockorder.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Pushes queued at most (each holds up to SQZ_READ_SPILL_MAX blocks of
 * the cache, at most 1 MiB each). */
#define SQZ_PUSHQ_MAX 32

struct pushq_job {
    fuse_ino_t ino;
    struct sqz_inode *in; /* an open reference */
    uint64_t gen;
    sqz_read_spill sp;
};

struct sqz_pushq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct pushq_job job[SQZ_PUSHQ_MAX]; /* a ring: head, n */
    unsigned head, n;
    atomic_int stop;
    pthread_t th;
};

static void job_drop(struct sqz_fs *fs, struct pushq_job *j)
{
    sqz_read_spill_release(&j->sp);
    sqz_inode_open_unref(fs, j->in);
}

static void *pusher(void *arg)
{
    struct sqz_fs *fs = arg;
    struct sqz_pushq *q = fs->push.q;
    SQZ_MUTEX_LOCK(&q->mu, SQZ_RANK_PUSHQ);
    for (;;) {
        while (q->n == 0 && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->n == 0)
            break; /* stopping, all done */
        struct pushq_job j = q->job[q->head];
        q->head = (q->head + 1) % SQZ_PUSHQ_MAX;
        q->n--;
        int stop = q->stop;
        SQZ_MUTEX_UNLOCK(&q->mu);
        if (stop) /* unmounting: drop what is left */
            atomic_fetch_add(&fs->push.skipped, j.sp.n);
        else
            sqz_push_store(fs, j.ino, j.in, j.gen, &j.sp);
        job_drop(fs, &j);
        SQZ_MUTEX_LOCK(&q->mu, SQZ_RANK_PUSHQ);
    }
    SQZ_MUTEX_UNLOCK(&q->mu);
    return NULL;
}

int sqz_pushq_start(struct sqz_fs *fs)
{
    struct sqz_pushq *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    int rc = sqz_mutex_init(&q->mu);
    if (rc) {
        free(q);
        return -rc;
    }
    pthread_cond_init(&q->cv, NULL);
    fs->push.q = q;
    rc = pthread_create(&q->th, NULL, pusher, fs);
    if (rc) {
        fs->push.q = NULL;
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        free(q);
        return -rc;
    }
    atomic_store(&fs->push.queue_on, 1);
    return 0;
}

void sqz_pushq_stop(struct sqz_fs *fs)
{
    struct sqz_pushq *q = fs->push.q;
    if (!q || atomic_load(&q->stop))
        return;
    atomic_store(&fs->push.queue_on, 0); /* no READ samples for a push */
    SQZ_MUTEX_LOCK(&q->mu, SQZ_RANK_PUSHQ);
    atomic_store(&q->stop, 1);
    pthread_cond_signal(&q->cv);
    SQZ_MUTEX_UNLOCK(&q->mu);
    pthread_join(q->th, NULL);
}

void sqz_pushq_free(struct sqz_fs *fs)
{
    struct sqz_pushq *q = fs->push.q;
    if (!q)
        return;
    sqz_pushq_stop(fs);
    fs->push.q = NULL;
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}


void sqz_pushq_add(struct sqz_fs *fs, fuse_ino_t ino, struct sqz_inode *in,
                   uint64_t gen, sqz_read_spill *sp)
{
    struct pushq_job j = {.ino = ino, .in = in, .gen = gen, .sp = *sp};
    sp->n = 0; /* taken over */
    struct sqz_pushq *q = fs->push.q;
    int queued = 0;
    if (q && j.sp.n > 0) {
        SQZ_MUTEX_LOCK(&q->mu, SQZ_RANK_PUSHQ);
        if (!q->stop && q->n < SQZ_PUSHQ_MAX) {
            q->job[(q->head + q->n) % SQZ_PUSHQ_MAX] = j;
            q->n++;
            queued = 1;
            pthread_cond_signal(&q->cv);
        }
        SQZ_MUTEX_UNLOCK(&q->mu);
    }
    if (!queued) {
        atomic_fetch_add(&fs->push.skipped, j.sp.n);
        job_drop(fs, &j);
    }
}
