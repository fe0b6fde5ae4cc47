/* Background threads that sleep on a condition variable with a timeout
 * (the engine's flusher, the durable-mark thread, the revalidator): the
 * condition uses CLOCK_MONOTONIC, so a changed wall clock never stretches
 * or cuts a sleep. Header-only so every layer can use it. */
#ifndef SQZ_COMMON_TIMEDWAIT_H
#define SQZ_COMMON_TIMEDWAIT_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* pthread_cond_init on CLOCK_MONOTONIC. 0 or a positive errno. */
static inline int sqz_cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc)
        return rc;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

/* Wait on cv (made by sqz_cond_init_monotonic, mu held) for at most ms
 * milliseconds; returns what pthread_cond_timedwait returns. */
static inline int sqz_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu,
                                   uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(cv, mu, &ts);
}

#endif
