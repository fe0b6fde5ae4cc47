/* Engine internals shared by engine.c (engine object, open-file set,
 * background flusher) and file*.c (per-file I/O). Not for other layers.
 *
 * Locks: sqz_engine.files_lock (the open-file set and the flusher's
 * flags; a user of a file taken from the set holds a reference, link.refs,
 * and sqz_file_close waits until those are gone) and the file's locks in
 * file_int.h. Ranks, order and rules: docs/LOCKING.md.
 */
#ifndef SQUEEZEFS_ENGINE_INT_H
#define SQUEEZEFS_ENGINE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/bgthread.h"
#include "common/lockorder.h"
#include "engine/cache.h"
#include "engine/engine.h"
#include "engine/pool.h"

typedef _Atomic uint64_t sqz_counter;

/* Live counters; same fields as sqz_stats minus the two gauges derived
 * from the cache and dirty_total. */
typedef struct sqz_stats_live {
    sqz_counter logical_bytes_read, logical_bytes_written;
    sqz_counter backing_bytes_read, backing_bytes_written;
    sqz_counter blocks_decompressed, bytes_decompressed;
    sqz_counter blocks_compressed, bytes_compressed;
    sqz_counter raw_blocks_stored;
    sqz_counter draft_blocks;
    sqz_counter compress_overlapped;
    sqz_counter cache_hits, cache_misses;
} sqz_stats_live;

/* Membership of a file in its engine's open set. The file layer
 * registers its write-back callback here, so the flusher (engine.c) never
 * calls into file code by name. */
typedef struct sqz_file_link {
    /* files_lock: */
    struct sqz_file_link *prev, *next;
    unsigned refs;   /* flusher / flush_all users of this file */
    /* const after sqz_engine_attach: */
    sqz_file *file;
    /* Commit the file if it became dirty at or before cutoff_ms
     * (UINT64_MAX = whenever dirty). 0 or negative errno (the data then
     * stays dirty). Called without files_lock, with a reference held. */
    int (*writeback)(sqz_file *f, uint64_t cutoff_ms);
    /* Monotonic ms when the file became dirty, 0 if clean: written by the
     * file under its lock, read lock-free by the flusher. */
    sqz_counter dirty_since;
} sqz_file_link;

struct sqz_engine {
    /* immutable after sqz_engine_new: */
    int threads;
    size_t cache_bytes;
    size_t dirty_bytes_file;
    size_t dirty_bytes_max;
    int dirty_expire_ms;
    int readahead_blocks;    /* 0 = off */
    sqz_pool *pool;
    sqz_cache *cache;

    sqz_stats_live st;       /* atomics */
    sqz_counter dirty_total; /* dirty bytes of all files (atomic) */
    sqz_counter next_fid;    /* atomic */

    pthread_mutex_t files_lock; /* see above */
    pthread_cond_t files_cv;    /* a link's refs dropped */
    sqz_bgthread flusher;       /* sleeps under files_lock; flusher.wake:
                                 * stop / pressure */
    sqz_file_link *files;
    int pressure;
};

/* Monotonic clock in ms (never 0). */
uint64_t sqz_engine_now_ms(void);

/* engine.c: open-file set. l->file and l->writeback must be set. */
void sqz_engine_attach(sqz_engine *e, sqz_file_link *l);
/* Remove from the set and wait until no flusher/flush_all uses it. */
void sqz_engine_detach(sqz_engine *e, sqz_file_link *l);
/* Ask the flusher to commit other files now (total dirty above max). */
void sqz_engine_pressure(sqz_engine *e);

#endif
