/* Worker thread pool: a FIFO of job batches (see pool.h). */
#include "engine/pool.h"
#include "common/lockorder.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct sqz_pool {
    pthread_mutex_t mu;       /* protects everything below + batch counters */
    pthread_cond_t work_cv;   /* queue became non-empty, or stopping */
    pthread_cond_t done_cv;   /* some batch finished a job */
    sqz_batch *head, *tail;   /* batches with unclaimed jobs */
    int stopping;
    int nthreads;
    pthread_t *threads;
};

/* Remove the head batch of the queue once all its jobs are claimed. */
static void dequeue_if_claimed(sqz_pool *p, sqz_batch *b)
{
    if (b->next < b->n || !b->queued)
        return;
    /* b is claimed out; unlink it (it may be anywhere in the queue when a
     * waiter claimed its jobs). */
    sqz_batch **pp = &p->head;
    sqz_batch *prev = NULL;
    while (*pp && *pp != b) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (*pp) {
        *pp = b->qnext;
        if (p->tail == b)
            p->tail = prev;
    }
    b->qnext = NULL;
    b->queued = 0;
}

/* Claim one job of b (mu held). Returns the job index or b->n if none. */
static size_t claim(sqz_pool *p, sqz_batch *b)
{
    if (b->next >= b->n)
        return b->n;
    size_t i = b->next++;
    dequeue_if_claimed(p, b);
    return i;
}

static void finish(sqz_pool *p, sqz_batch *b)
{
    b->done++;
    if (b->done == b->n)
        pthread_cond_broadcast(&p->done_cv);
}

static void *worker(void *arg)
{
    sqz_pool *p = arg;
    SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_POOL);
    for (;;) {
        while (!p->head && !p->stopping)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (!p->head)
            break; /* stopping and drained */
        sqz_batch *b = p->head;
        size_t i = claim(p, b);
        SQZ_MUTEX_UNLOCK(&p->mu);
        b->jobs[i].fn(b->jobs[i].arg);
        SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_POOL);
        finish(p, b);
    }
    SQZ_MUTEX_UNLOCK(&p->mu);
    return NULL;
}

int sqz_pool_new(int nthreads, sqz_pool **out)
{
    if (nthreads < 1)
        return -EINVAL;
    sqz_pool *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return -ENOMEM;
    }
    int rc = sqz_mutex_init(&p->mu);
    if (rc) {
        free(p->threads);
        free(p);
        return -rc;
    }
    if ((rc = pthread_cond_init(&p->work_cv, NULL)) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p->threads);
        free(p);
        return -rc;
    }
    if ((rc = pthread_cond_init(&p->done_cv, NULL)) != 0) {
        pthread_cond_destroy(&p->work_cv);
        pthread_mutex_destroy(&p->mu);
        free(p->threads);
        free(p);
        return -rc;
    }
    for (int i = 0; i < nthreads; i++) {
        rc = pthread_create(&p->threads[i], NULL, worker, p);
        if (rc) {
            p->nthreads = i; /* free() joins the ones started */
            sqz_pool_free(p);
            return -rc;
        }
    }
    p->nthreads = nthreads;
    *out = p;
    return 0;
}

void sqz_pool_free(sqz_pool *p)
{
    if (!p)
        return;
    SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_POOL);
    p->stopping = 1;
    pthread_cond_broadcast(&p->work_cv);
    SQZ_MUTEX_UNLOCK(&p->mu);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->work_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int sqz_pool_threads(const sqz_pool *p)
{
    return p->nthreads;
}

void sqz_batch_init(sqz_batch *b, sqz_job *jobs, size_t n)
{
    b->jobs = jobs;
    b->n = n;
    b->next = 0;
    b->done = 0;
    b->qnext = NULL;
    b->queued = 0;
}

void sqz_pool_submit(sqz_pool *p, sqz_batch *b)
{
    SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_POOL);
    b->next = 0;
    b->done = 0;
    b->qnext = NULL;
    if (b->n > 0) {
        b->queued = 1;
        if (p->tail)
            p->tail->qnext = b;
        else
            p->head = b;
        p->tail = b;
        if (b->n == 1)
            pthread_cond_signal(&p->work_cv);
        else
            pthread_cond_broadcast(&p->work_cv);
    }
    SQZ_MUTEX_UNLOCK(&p->mu);
}

void sqz_pool_wait(sqz_pool *p, sqz_batch *b)
{
    SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_POOL);
    for (;;) {
        size_t i = claim(p, b);
        if (i >= b->n)
            break;
        SQZ_MUTEX_UNLOCK(&p->mu);
        b->jobs[i].fn(b->jobs[i].arg);
        SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_POOL);
        finish(p, b);
    }
    while (b->done < b->n)
        pthread_cond_wait(&p->done_cv, &p->mu);
    SQZ_MUTEX_UNLOCK(&p->mu);
}

void sqz_pool_wait_done(sqz_pool *p, sqz_batch *b)
{
    SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_POOL);
    while (b->done < b->n)
        pthread_cond_wait(&p->done_cv, &p->mu);
    SQZ_MUTEX_UNLOCK(&p->mu);
}

int sqz_pool_done(sqz_pool *p, sqz_batch *b)
{
    SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_POOL);
    int done = b->done >= b->n;
    SQZ_MUTEX_UNLOCK(&p->mu);
    return done;
}

void sqz_pool_run(sqz_pool *p, sqz_batch *b)
{
    sqz_pool_submit(p, b);
    sqz_pool_wait(p, b);
}

void sqz_pool_run_jobs(sqz_pool *p, sqz_job *jobs, size_t n)
{
    if (n == 1) {
        jobs[0].fn(jobs[0].arg);
    } else if (n > 1) {
        sqz_batch batch;
        sqz_batch_init(&batch, jobs, n);
        sqz_pool_run(p, &batch);
    }
}
