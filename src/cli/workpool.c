/* A fixed pool of worker threads that all run one function per round
 * (the caller's thread joins in); used for parallel block work. */
#include <errno.h>
#include <stdlib.h>

#include "workpool.h"

static void *worker(void *arg)
{
    workpool *p = arg;
    unsigned seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->quit)
            pthread_cond_wait(&p->cv_start, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        void (*fn)(void *) = p->fn;
        void *a = p->arg;
        pthread_mutex_unlock(&p->mu);
        fn(a);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int workpool_init(workpool *p, int threads)
{
    p->n = threads > 1 ? threads - 1 : 0; /* the caller is one worker */
    p->gen = 0;
    p->busy = 0;
    p->quit = false;
    p->th = NULL;
    if (pthread_mutex_init(&p->mu, NULL))
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
        pthread_mutex_lock(&p->mu);
        p->fn = fn;
        p->arg = arg;
        p->busy = p->n;
        p->gen++;
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg);
    if (p->n > 0) {
        pthread_mutex_lock(&p->mu);
        while (p->busy > 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

void workpool_destroy(workpool *p)
{
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++)
        pthread_join(p->th[i], NULL);
    free(p->th);
    p->th = NULL;
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
}
