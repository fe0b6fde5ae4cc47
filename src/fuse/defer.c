/* Requests handed over by the ring threads of FUSE over io_uring: a
 * handler that would change a file's content (an open for writing or with
 * O_TRUNC, a truncate) or fence its pushes (an open on a read-only mount)
 * first waits until no push of the file is in flight (node/push.c). A ring
 * thread must not wait so: the push may wait for the page locks of a READ
 * queued on that very ring. When sqz_push_preblock finds a push in flight,
 * the handler queues the whole request here instead, and this thread runs
 * it (and replies; libfuse takes a reply from any thread) while the rings
 * go on serving the READs the push waits for. Rare: only a change that
 * meets a push of the same file. Also an lseek(SEEK_DATA/HOLE) of a file
 * open for writing: its invalidation of the kernel's pages waits for the
 * WRITEs of their writeback, which may be queued on its own ring. */
#include "fuse/ops.h"
#include "daemon/fs.h"
#include "common/lockorder.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct defer_job {
    struct defer_job *next;
    void (*fn)(void *);
    max_align_t arg[]; /* the copy of the caller's arguments */
};

struct sqz_defer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct defer_job *head, *tail;
    int stop, running;
    pthread_t th;
};

static void *defer_thread(void *arg)
{
    struct sqz_defer *d = arg;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DEFER);
    for (;;) {
        while (!d->head && !d->stop)
            pthread_cond_wait(&d->cv, &d->mu);
        struct defer_job *j = d->head;
        if (!j)
            break; /* stopping, all run */
        d->head = j->next;
        if (!d->head)
            d->tail = NULL;
        SQZ_MUTEX_UNLOCK(&d->mu);
        j->fn(j->arg);
        free(j);
        SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DEFER);
    }
    SQZ_MUTEX_UNLOCK(&d->mu);
    return NULL;
}

int sqz_defer_start(struct sqz_fs *fs)
{
    struct sqz_defer *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    int rc = sqz_mutex_init(&d->mu);
    if (rc) {
        free(d);
        return -rc;
    }
    pthread_cond_init(&d->cv, NULL);
    rc = pthread_create(&d->th, NULL, defer_thread, d);
    if (rc) {
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        free(d);
        return -rc;
    }
    d->running = 1;
    fs->defer = d;
    return 0;
}

void sqz_defer_stop(struct sqz_fs *fs)
{
    struct sqz_defer *d = fs->defer;
    if (!d || !d->running)
        return;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DEFER);
    d->stop = 1;
    pthread_cond_signal(&d->cv);
    SQZ_MUTEX_UNLOCK(&d->mu);
    pthread_join(d->th, NULL); /* after running what was queued */
    d->running = 0;
}

void sqz_defer_free(struct sqz_fs *fs)
{
    struct sqz_defer *d = fs->defer;
    if (!d)
        return;
    sqz_defer_stop(fs);
    fs->defer = NULL;
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

int sqz_defer(struct sqz_fs *fs, void (*fn)(void *), const void *arg,
              size_t len)
{
    struct sqz_defer *d = fs->defer;
    if (!d)
        return -ESHUTDOWN;
    struct defer_job *j = malloc(sizeof(*j) + len);
    if (!j)
        return -ENOMEM;
    j->next = NULL;
    j->fn = fn;
    memcpy(j->arg, arg, len);
    int rc = 0;
    SQZ_MUTEX_LOCK(&d->mu, SQZ_RANK_DEFER);
    if (d->stop) {
        rc = -ESHUTDOWN;
    } else {
        if (d->tail)
            d->tail->next = j;
        else
            d->head = j;
        d->tail = j;
        pthread_cond_signal(&d->cv);
    }
    SQZ_MUTEX_UNLOCK(&d->mu);
    if (rc)
        free(j);
    return rc;
}
