/* A fixed pool of worker threads running one function per round. */
#ifndef SQZ_CLI_WORKPOOL_H
#define SQZ_CLI_WORKPOOL_H

#include <pthread.h>
#include <stdbool.h>

typedef struct workpool {
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    unsigned gen;
    int busy;
    bool quit;
    void (*fn)(void *);
    void *arg;
    pthread_t *th;
    int n; /* extra threads (threads - 1) */
} workpool;

/* threads >= 1 in total, counting the caller. 0 or -errno. */
int workpool_init(workpool *p, int threads);
/* Run fn(arg) on every thread at once (the caller too); returns when all
 * have returned. fn shares out the work itself (e.g. an atomic counter). */
void workpool_run(workpool *p, void (*fn)(void *), void *arg);
void workpool_destroy(workpool *p);

#endif
