/* The engine object: options, statistics, the set of open files and the
 * background flusher thread that commits dirty data after dirty_expire_ms
 * (or at once when the total dirty data is above dirty_bytes_max). */
#include "engine/engine_int.h"
#include "common/lockorder.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

uint64_t sqz_engine_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u + 1;
}

/* ---- open-file set ---- */

void sqz_engine_attach(sqz_engine *e, sqz_file_link *l)
{
    SQZ_MUTEX_LOCK(&e->files_lock, SQZ_RANK_FILES);
    l->prev = NULL;
    l->next = e->files;
    if (e->files)
        e->files->prev = l;
    e->files = l;
    l->refs = 0;
    SQZ_MUTEX_UNLOCK(&e->files_lock);
}

void sqz_engine_detach(sqz_engine *e, sqz_file_link *l)
{
    SQZ_MUTEX_LOCK(&e->files_lock, SQZ_RANK_FILES);
    if (l->prev)
        l->prev->next = l->next;
    else
        e->files = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->prev = l->next = NULL;
    while (l->refs > 0)
        pthread_cond_wait(&e->files_cv, &e->files_lock);
    SQZ_MUTEX_UNLOCK(&e->files_lock);
}

void sqz_engine_pressure(sqz_engine *e)
{
    SQZ_MUTEX_LOCK(&e->files_lock, SQZ_RANK_FILES);
    if (!e->pressure) {
        e->pressure = 1;
        pthread_cond_signal(&e->flusher.wake);
    }
    SQZ_MUTEX_UNLOCK(&e->files_lock);
}

/* Commit every file that became dirty at or before cutoff. The candidates
 * are snapshotted with a reference each (so files_lock is not held while
 * a file is written back, and a closing file waits for us). Returns the
 * first error. files_lock held on entry and exit. */
static int writeback_pass(sqz_engine *e, uint64_t cutoff)
{
    SQZ_ASSERT_EXCL(&e->files_lock);
    size_t n = 0;
    for (sqz_file_link *l = e->files; l; l = l->next) {
        uint64_t since = atomic_load(&l->dirty_since);
        if (since != 0 && since <= cutoff)
            n++;
    }
    if (n == 0)
        return 0;
    sqz_file_link **v = malloc(n * sizeof *v);
    if (!v)
        return -ENOMEM;
    size_t k = 0;
    for (sqz_file_link *l = e->files; l && k < n; l = l->next) {
        uint64_t since = atomic_load(&l->dirty_since);
        if (since != 0 && since <= cutoff) {
            l->refs++;
            v[k++] = l;
        }
    }
    SQZ_MUTEX_UNLOCK(&e->files_lock);
    int first_err = 0;
    for (size_t i = 0; i < k; i++) {
        int rc = v[i]->writeback(v[i]->file, cutoff);
        if (rc < 0 && !first_err)
            first_err = rc;
    }
    SQZ_MUTEX_LOCK(&e->files_lock, SQZ_RANK_FILES);
    for (size_t i = 0; i < k; i++)
        if (--v[i]->refs == 0)
            pthread_cond_broadcast(&e->files_cv);
    free(v);
    return first_err;
}

static void *flusher_main(void *arg)
{
    sqz_engine *e = arg;
    uint64_t tick = (uint64_t)e->dirty_expire_ms / 4;
    if (tick < 5)
        tick = 5;
    if (tick > 1000)
        tick = 1000;
    SQZ_MUTEX_LOCK(&e->files_lock, SQZ_RANK_FILES);
    while (!e->flusher.stop) {
        if (!e->pressure && !sqz_bg_sleep(&e->flusher, tick))
            break;
        uint64_t cutoff;
        if (e->pressure) {
            e->pressure = 0;
            cutoff = UINT64_MAX;
        } else {
            uint64_t now = sqz_engine_now_ms();
            uint64_t exp = (uint64_t)e->dirty_expire_ms;
            cutoff = now > exp ? now - exp : 0;
        }
        /* Errors leave the data dirty; it is retried on the next pass and
         * reported by the owner's own flush/fsync/close. */
        (void)writeback_pass(e, cutoff);
    }
    SQZ_MUTEX_UNLOCK(&e->files_lock);
    return NULL;
}

/* ---- engine ---- */

int sqz_engine_new(const sqz_engine_opts *o, sqz_engine **out)
{
    sqz_engine_opts def = {0};
    if (!o)
        o = &def;
    if (o->threads < 0 || o->dirty_expire_ms < 0)
        return -EINVAL;
    sqz_engine *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->threads = o->threads;
    if (e->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        e->threads = n > 0 ? (n > 256 ? 256 : (int)n) : 1;
    }
    e->cache_bytes = o->cache_bytes == SQZ_ENGINE_CACHE_OFF ? 0
                     : o->cache_bytes ? o->cache_bytes
                                      : SQZ_ENGINE_CACHE_DEFAULT;
    e->dirty_bytes_file = o->dirty_bytes_file ? o->dirty_bytes_file
                                              : SQZ_ENGINE_DIRTY_FILE_DEFAULT;
    e->dirty_bytes_max = o->dirty_bytes_max ? o->dirty_bytes_max
                                            : SQZ_ENGINE_DIRTY_MAX_DEFAULT;
    e->dirty_expire_ms = o->dirty_expire_ms ? o->dirty_expire_ms
                                            : SQZ_ENGINE_EXPIRE_MS_DEFAULT;
    e->readahead_blocks = o->readahead_blocks < 0 ? 0
                          : o->readahead_blocks ? o->readahead_blocks
                                                : SQZ_ENGINE_READAHEAD_DEFAULT;
    atomic_init(&e->dirty_total, 0);
    atomic_init(&e->next_fid, 1);

    int rc = sqz_pool_new(e->threads, &e->pool);
    if (rc < 0)
        goto fail_free;
    rc = sqz_cache_new(e->cache_bytes, &e->cache);
    if (rc < 0)
        goto fail_pool;
    if ((rc = -sqz_mutex_init(&e->files_lock)) < 0)
        goto fail_cache;
    if ((rc = -pthread_cond_init(&e->files_cv, NULL)) < 0)
        goto fail_mutex;
    if ((rc = sqz_bg_init(&e->flusher, &e->files_lock, SQZ_RANK_FILES)) < 0)
        goto fail_cv;
    if ((rc = sqz_bg_start(&e->flusher, flusher_main, e)) < 0)
        goto fail_fcv;
    *out = e;
    return 0;

fail_fcv:
    sqz_bg_destroy(&e->flusher);
fail_cv:
    pthread_cond_destroy(&e->files_cv);
fail_mutex:
    pthread_mutex_destroy(&e->files_lock);
fail_cache:
    sqz_cache_free(e->cache);
fail_pool:
    sqz_pool_free(e->pool);
fail_free:
    free(e);
    return rc;
}

void sqz_engine_free(sqz_engine *e)
{
    if (!e)
        return;
    sqz_bg_stop(&e->flusher, NULL);
    sqz_bg_destroy(&e->flusher);
    pthread_cond_destroy(&e->files_cv);
    pthread_mutex_destroy(&e->files_lock);
    sqz_pool_free(e->pool);
    sqz_cache_free(e->cache);
    free(e);
}

void sqz_engine_stats(sqz_engine *e, sqz_stats *out)
{
    const sqz_stats_live *s = &e->st;
    out->logical_bytes_read = atomic_load(&s->logical_bytes_read);
    out->logical_bytes_written = atomic_load(&s->logical_bytes_written);
    out->backing_bytes_read = atomic_load(&s->backing_bytes_read);
    out->backing_bytes_written = atomic_load(&s->backing_bytes_written);
    out->blocks_decompressed = atomic_load(&s->blocks_decompressed);
    out->bytes_decompressed = atomic_load(&s->bytes_decompressed);
    out->blocks_compressed = atomic_load(&s->blocks_compressed);
    out->bytes_compressed = atomic_load(&s->bytes_compressed);
    out->raw_blocks_stored = atomic_load(&s->raw_blocks_stored);
    out->draft_blocks = atomic_load(&s->draft_blocks);
    out->blocks_compressed_overlapped =
        atomic_load(&s->compress_overlapped);
    out->cache_hits = atomic_load(&s->cache_hits);
    out->cache_misses = atomic_load(&s->cache_misses);
    out->cache_bytes = sqz_cache_bytes(e->cache);
    out->dirty_bytes = atomic_load(&e->dirty_total);
}

int sqz_engine_flush_all(sqz_engine *e)
{
    SQZ_MUTEX_LOCK(&e->files_lock, SQZ_RANK_FILES);
    int rc = writeback_pass(e, UINT64_MAX);
    SQZ_MUTEX_UNLOCK(&e->files_lock);
    return rc;
}
