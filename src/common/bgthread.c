/* A background thread that sleeps between rounds of work (bgthread.h). */
#include "common/bgthread.h"
#include "common/lockorder.h"
#include "common/timedwait.h"

int sqz_bg_init(sqz_bgthread *b, pthread_mutex_t *mu, int rank)
{
    b->mu = mu ? mu : &b->own;
    b->rank = rank;
    b->running = 0;
    atomic_init(&b->stop, 0);
    int rc = sqz_cond_init_monotonic(&b->wake);
    if (rc == 0 && !mu && (rc = sqz_mutex_init(&b->own)) != 0)
        pthread_cond_destroy(&b->wake);
    return -rc;
}

int sqz_bg_start(sqz_bgthread *b, void *(*fn)(void *), void *arg)
{
    int rc = pthread_create(&b->th, NULL, fn, arg);
    if (rc != 0)
        return -rc;
    b->running = 1;
    return 0;
}

int sqz_bg_sleep(sqz_bgthread *b, uint64_t ms)
{
    SQZ_ASSERT_EXCL(b->mu);
    if (atomic_load(&b->stop))
        return 0;
    sqz_cond_wait_ms(&b->wake, b->mu, ms);
    return !atomic_load(&b->stop);
}

void sqz_bg_stop(sqz_bgthread *b, pthread_cond_t *also)
{
    if (!b->running)
        return;
    SQZ_MUTEX_LOCK(b->mu, b->rank);
    atomic_store(&b->stop, 1);
    pthread_cond_signal(&b->wake);
    if (also)
        pthread_cond_broadcast(also);
    SQZ_MUTEX_UNLOCK(b->mu);
    pthread_join(b->th, NULL);
    b->running = 0;
}

void sqz_bg_destroy(sqz_bgthread *b)
{
    if (b->mu == &b->own)
        pthread_mutex_destroy(&b->own);
    pthread_cond_destroy(&b->wake);
}
