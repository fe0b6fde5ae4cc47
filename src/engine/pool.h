/* Worker thread pool for the engine: a FIFO of job batches.
 *
 * A batch is an array of jobs (function + argument) owned by the caller.
 * sqz_pool_submit() queues it; worker threads claim its jobs one by one.
 * sqz_pool_wait() makes the calling thread claim and run the batch's
 * not-yet-started jobs itself, then waits until the jobs claimed by workers
 * have finished. Because a waiter only ever runs jobs of its own batch and
 * never blocks on a job that nobody has started, a waiter cannot deadlock
 * on the queue, and a batch of n jobs uses up to workers + 1 cores.
 *
 * A batch may be submitted and not waited for (fire and forget, used for
 * read-ahead); its owner must still call sqz_pool_wait() (or see
 * sqz_pool_done() return 1) before freeing or re-submitting it.
 *
 * Locking: sqz_pool.mu protects the queue and every queued batch's
 * next/done counters; jobs run without it and may take other locks (a
 * leaf: docs/LOCKING.md).
 */
#ifndef SQUEEZEFS_ENGINE_POOL_H
#define SQUEEZEFS_ENGINE_POOL_H

#include <stddef.h>

typedef void (*sqz_job_fn)(void *arg);

typedef struct sqz_job {
    sqz_job_fn fn;
    void *arg;
} sqz_job;

typedef struct sqz_batch {
    sqz_job *jobs;           /* caller-owned array of n jobs */
    size_t n;
    /* private, protected by the pool's mutex: */
    size_t next;             /* next job to claim */
    size_t done;             /* jobs finished */
    struct sqz_batch *qnext; /* queue link while it has unclaimed jobs */
    int queued;
} sqz_batch;

typedef struct sqz_pool sqz_pool;

/* Start nthreads (>= 1) workers. 0 or negative errno. */
int sqz_pool_new(int nthreads, sqz_pool **out);
/* Stop the workers after the queue has drained, join them, free. Every
 * submitted batch must have been waited for or be finished. */
void sqz_pool_free(sqz_pool *p);
int sqz_pool_threads(const sqz_pool *p);

/* Prepare b to run the n jobs of the array jobs (b is not yet queued). */
void sqz_batch_init(sqz_batch *b, sqz_job *jobs, size_t n);
/* Queue the batch (must be initialised and not currently running). */
void sqz_pool_submit(sqz_pool *p, sqz_batch *b);
/* Run the batch's unclaimed jobs in this thread, then wait for the rest. */
void sqz_pool_wait(sqz_pool *p, sqz_batch *b);
/* Wait until every job of a submitted batch has finished without running
 * any of them here: the caller stays off the CPU, so the pool's thread
 * count bounds the CPU that background work of a blocked writer uses
 * (threads=N). Workers never block on the caller's locks (read-ahead jobs
 * only try the file lock: file_read.c), so this always returns. */
void sqz_pool_wait_done(sqz_pool *p, sqz_batch *b);
/* 1 if every job of a submitted batch has finished, else 0 (a batch
 * initialised with n == 0 counts as finished). Does not block. */
int sqz_pool_done(sqz_pool *p, sqz_batch *b);
/* Convenience: submit and wait. */
void sqz_pool_run(sqz_pool *p, sqz_batch *b);
/* Run the n jobs of the array and return when all are done: a single job
 * in this thread, more as a batch on the pool (sqz_pool_run). */
void sqz_pool_run_jobs(sqz_pool *p, sqz_job *jobs, size_t n);

#endif
