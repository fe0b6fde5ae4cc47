/* A fixed pool of worker threads that all run one function per round
 * (the caller's thread joins in); used for parallel block work. */
#include <errno.h>
#include <stdlib.h>

#include "workpool.h"
#include "common/lockorder.h"

static void *worker(void *arg)
{
    workpool *p = arg;
    unsigned seen = 0;
    SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_CLI_POOL);
    for (;;) {
        while (p->gen == seen && !p->quit)
            pthread_cond_wait(&p->cv_start, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        void (*fn)(void *) = p->fn;
        void *a = p->arg;
        SQZ_MUTEX_UNLOCK(&p->mu);
        fn(a);
        SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_CLI_POOL);
        if (--p->busy == 0)
            pthread_cond_signal(&p->cv_done);
    }
    SQZ_MUTEX_UNLOCK(&p->mu);
    return NULL;
}

int workpool_init(workpool *p, int threads)
{
    p->n = threads > 1 ? threads - 1 : 0; /* the caller is one worker */
    p->gen = 0;
    p->busy = 0;
    p->quit = false;
    p->th = NULL;
    if (sqz_mutex_init(&p->mu))
        return -ENOMEM;
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (p->n == 0)
        return 0;
    p->th = calloc((size_t)p->n, sizeof *p->th);
    if (!p->th) {
        p->n = 0;
        workpool_destroy(p);
        return -ENOMEM;
    }
    for (int i = 0; i < p->n; i++) {
        int e = pthread_create(&p->th[i], NULL, worker, p);
        if (e) {
            p->n = i;
            workpool_destroy(p);
            return -e;
        }
    }
    return 0;
}

void workpool_run(workpool *p, void (*fn)(void *), void *arg)
{
    if (p->n > 0) {
        SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_CLI_POOL);
        p->fn = fn;
        p->arg = arg;
        p->busy = p->n;
        p->gen++;
        pthread_cond_broadcast(&p->cv_start);
        SQZ_MUTEX_UNLOCK(&p->mu);
    }
    fn(arg);
    if (p->n > 0) {
        SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_CLI_POOL);
        while (p->busy > 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        SQZ_MUTEX_UNLOCK(&p->mu);
    }
}

void workpool_destroy(workpool *p)
{
    SQZ_MUTEX_LOCK(&p->mu, SQZ_RANK_CLI_POOL);
    p->quit = true;
    pthread_cond_broadcast(&p->cv_start);
    SQZ_MUTEX_UNLOCK(&p->mu);
    for (int i = 0; i < p->n; i++)
        pthread_join(p->th[i], NULL);
    free(p->th);
    p->th = NULL;
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
}
