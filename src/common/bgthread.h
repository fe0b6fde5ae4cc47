/* A background thread of the daemon that works, then sleeps for a period
 * or until it is stopped: the durable-mark thread (src/content/durable.c),
 * tiering (src/jobs/tier.c) and the revalidation of read-only views
 * (src/jobs/revalidate.c). The thread sleeps under one mutex, mu (its
 * own, or its owner's: the durable queue's lock), of the rank given at
 * init (docs/LOCKING.md), on one condition on CLOCK_MONOTONIC
 * (timedwait.h) that wakes it, and has one stop flag.
 *
 * The owner's thread function takes mu, loops while sqz_bg_sleep says go
 * on (releasing mu around its work) and releases mu at the end; the owner
 * may keep more state under mu and wake the thread early (signal wake,
 * mu held). sqz_bg_stop sets the flag, wakes the thread and joins it. */
#ifndef SQZ_COMMON_BGTHREAD_H
#define SQZ_COMMON_BGTHREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct sqz_bgthread {
    pthread_mutex_t *mu; /* the lock it sleeps under (rank: rank) */
    pthread_mutex_t own; /* mu unless the owner gave its own */
    pthread_cond_t wake; /* the thread: stop, or the owner wakes it */
    atomic_int stop;     /* set under mu; may be read without it */
    int running;         /* the thread exists (set by start, cleared by stop) */
    int rank;            /* mu's rank (enum sqz_lock_rank) */
    pthread_t th;
} sqz_bgthread;

/* Initialise b, no thread yet: mu is the owner's initialised mutex, or
 * NULL for b's own; rank is its rank. 0 or -errno. */
int sqz_bg_init(sqz_bgthread *b, pthread_mutex_t *mu, int rank);
/* Start the thread: fn(arg). 0 or -errno (b stays initialised). */
int sqz_bg_start(sqz_bgthread *b, void *(*fn)(void *), void *arg);
/* The thread, mu held: sleep ms milliseconds, or until woken or stopped.
 * 1 to go on, 0 when stopping (then without sleeping). */
int sqz_bg_sleep(sqz_bgthread *b, uint64_t ms);
/* Stop the thread, if running: set the flag and wake it under mu (and
 * broadcast also, a condition the owner's other waiters sleep on under mu,
 * unless NULL), then join it. Called without mu. */
void sqz_bg_stop(sqz_bgthread *b, pthread_cond_t *also);
/* Free b's condition and own mutex (after sqz_bg_stop). */
void sqz_bg_destroy(sqz_bgthread *b);

#endif
