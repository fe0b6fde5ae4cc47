/* squeezefs I/O engine: block cache, per-file dirty blocks, parallel
 * compression, read-ahead. Sits between the FUSE front end and the
 * container library. Internal (not a public header).
 *
 * Locks (sqz_file.lock, ra_mu, ld_mu, the engine's files_lock, the cache
 * and pool mutexes, and the container's lock below them): what each
 * protects, their ranks and order are in docs/LOCKING.md; statistics are
 * atomics.
 *
 * Writes: blocks a write fills to their end are handed to the pool as an
 * in-flight batch (immutable buffers; a later write makes a new dirty
 * copy) and compressed without any lock held; finished batches are
 * committed in order by the next writer / flush / flusher (under
 * sqz_file.lock exclusive, so one committer per file). Dirty + in-flight
 * bytes count against dirty_bytes_file / dirty_bytes_max; a writer above
 * the per-file bound waits on the pool's condition variable for the
 * oldest batch.
 */
#ifndef SQUEEZEFS_ENGINE_H
#define SQUEEZEFS_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "squeezefs/container.h"

/* cache_bytes value meaning "no cache" (0 selects the default). */
#define SQZ_ENGINE_CACHE_OFF ((size_t)-1)

/* The defaults of sqz_engine_opts (a 0 field selects them); the mount
 * daemon (src/daemon .. src/mount) uses these too, so they are defined only here. */
#define SQZ_ENGINE_CACHE_DEFAULT ((size_t)256 << 20)      /* 256 MiB */
#define SQZ_ENGINE_DIRTY_FILE_DEFAULT ((size_t)8 << 20)   /* 8 MiB */
#define SQZ_ENGINE_DIRTY_MAX_DEFAULT ((size_t)256 << 20)  /* 256 MiB */
#define SQZ_ENGINE_EXPIRE_MS_DEFAULT 2000
#define SQZ_ENGINE_READAHEAD_DEFAULT 4                    /* blocks */

typedef struct sqz_engine_opts {
    int threads;             /* compression workers; 0 = number of cores */
    size_t cache_bytes;      /* decompressed block cache; 0 = default;
                                SQZ_ENGINE_CACHE_OFF = none */
    size_t dirty_bytes_file; /* per file: dirty data above this is committed
                                (0 = default) */
    size_t dirty_bytes_max;  /* all files: above this a writer commits
                                its own dirty data before returning and
                                the flusher drains the others (0 = default) */
    int dirty_expire_ms;     /* dirty data older than this is committed by a
                                background thread (0 = default) */
    int readahead_blocks;    /* blocks decompressed ahead of a sequential
                                reader at first; the window doubles while
                                the reader stays sequential, up to 8 MiB
                                and cache_bytes / 16 (0 = default;
                                negative = off; off too without a cache
                                that holds a block) */
} sqz_engine_opts;

/* Counters since start (squeezefs stats). */
typedef struct sqz_stats {
    uint64_t logical_bytes_read, logical_bytes_written;
    uint64_t backing_bytes_read, backing_bytes_written;
    uint64_t blocks_decompressed, bytes_decompressed;
    uint64_t blocks_compressed, bytes_compressed;
    uint64_t raw_blocks_stored;
    uint64_t draft_blocks;   /* stored as drafts (sqz_file_flush_draft) */
    /* blocks whose background compression overlapped a writer copying
     * data into the same file */
    uint64_t blocks_compressed_overlapped;
    uint64_t cache_hits, cache_misses, cache_bytes;
    uint64_t dirty_bytes;
} sqz_stats;

typedef struct sqz_engine sqz_engine;
typedef struct sqz_file sqz_file;

int sqz_engine_new(const sqz_engine_opts *o, sqz_engine **out);
/* Flushes nothing: close every file first. */
void sqz_engine_free(sqz_engine *e);
void sqz_engine_stats(sqz_engine *e, sqz_stats *out);
/* Commit all dirty data of all open files (not fsync). */
int sqz_engine_flush_all(sqz_engine *e);

/* Wrap an open container (takes ownership: on failure it is closed).
 * One sqz_file per backing inode; the caller (FUSE layer) shares it
 * between handles. All sqz_file_* calls may run concurrently on one file
 * except sqz_file_close, which must be the last call. */
int sqz_file_new(sqz_engine *e, sqz_ctr *c, sqz_file **out);
/* Commit dirty data, close the container, free. Returns first error. */
int sqz_file_close(sqz_file *f);
/* The same, but on success the container is not closed: it is handed to
 * the caller in *keep (everything committed; the caller closes it, e.g.
 * after marking it durable in the background). On error *keep is NULL and
 * the container was closed. */
int sqz_file_close_keep(sqz_file *f, sqz_ctr **keep);
/* A reader's view replaced after another mount changed the file: nf (just
 * opened, not used yet) keeps old's cached blocks that are stored the same
 * in both containers; call before closing old, with no reader on either. */
void sqz_file_inherit_cache(sqz_file *nf, sqz_file *old);

/* Read [off, off + n): returns the bytes read, fewer than n only at the
 * end of the file, or a negative errno. A damaged block anywhere in the
 * range fails the whole read (-EIO): never a short read inside the file. */
ssize_t sqz_file_read(sqz_file *f, void *buf, size_t n, uint64_t off);

/* The blocks a read used only in part (at most the first and the last of
 * its range), decompressed whole: the FUSE layer hands them to the kernel's
 * page cache so that the neighbours of a random read need no request. Each
 * entry holds a reference on an immutable decompressed block: data[0, len)
 * is the file's content at [off, off + len) as the read saw it (len stops
 * at the file's length). Only committed blocks (cached or decompressed by
 * the read), never dirty or in-flight ones. */
#define SQZ_READ_SPILL_MAX 2
typedef struct sqz_read_spill {
    size_t n;
    struct {
        const void *data;
        uint64_t off;
        size_t len;
        void *ref;
    } v[SQZ_READ_SPILL_MAX];
} sqz_read_spill;
/* sqz_file_read that also fills *sp (n = 0 when nothing qualifies; on an
 * error nothing is kept). Release with sqz_read_spill_release. */
ssize_t sqz_file_read_spill(sqz_file *f, void *buf, size_t n, uint64_t off,
                            sqz_read_spill *sp);
void sqz_read_spill_release(sqz_read_spill *sp);
/* sqz_file_read_spill without copying the data: the bytes read are the
 * pieces v->iov[0..v->n) in order (for fuse_reply_iov), each an immutable
 * decompressed block's bytes held by a reference (v->ref), or zeros (a
 * hole), or a copy in v->own of a block a writer may still change (dirty
 * or in flight). Returns as sqz_file_read; on success with bytes, release
 * v with sqz_read_vec_release once the pieces have been used (on an error
 * or 0 bytes there is nothing to release). */
typedef struct sqz_read_vec {
    size_t n;
    struct iovec *iov;
    void **ref;
    unsigned char *own;
} sqz_read_vec;
ssize_t sqz_file_read_vec(sqz_file *f, size_t n, uint64_t off,
                          sqz_read_vec *v, sqz_read_spill *sp);
void sqz_read_vec_release(sqz_read_vec *v);
ssize_t sqz_file_write(sqz_file *f, const void *buf, size_t n, uint64_t off);
/* Append at the current end atomically w.r.t. other writers of this file;
 * *off_out receives the offset written at. */
ssize_t sqz_file_append(sqz_file *f, const void *buf, size_t n,
                        uint64_t *off_out);
/* Shrinking commits at once (new length + zeroed tail block); growing only
 * sets the length, committed with the next commit. */
int sqz_file_truncate(sqz_file *f, uint64_t length);
/* SEEK_DATA (hole = 0) / SEEK_HOLE (hole = 1) from off, at block
 * granularity (a block is a hole if its current content is all zeros,
 * committed or not; the end of the file is a hole): *out, or -ENXIO (off
 * at or past the end; SEEK_DATA: no data from off on). */
int sqz_file_seek(sqz_file *f, uint64_t off, int hole, uint64_t *out);
/* Zero [off, off + len) (fallocate PUNCH_HOLE / ZERO_RANGE): whole blocks
 * become holes at once (a commit of hole entries, no data written; their
 * dirty versions dropped), the partial blocks at either end are rewritten
 * with zeros as a write would (dirty). Only bytes below the length are
 * zeroed; without keep_size the length grows to off + len. Space freed
 * in the backing file is released when due (sqz_ctr_reclaim). */
int sqz_file_zero_range(sqz_file *f, uint64_t off, uint64_t len,
                        int keep_size);
/* Copying whole blocks as stored (copy_file_range, src/engine/file_copy.c)
 * between two files whose containers have the same algorithm and block
 * size. Blocks [idx, idx + n) of f (whole blocks below its length; its dirty
 * data is committed first) as stored, prepared as blocks as_idx.. of
 * another file: out[n], freed with sqz_prepared_free. 0 or -errno. */
int sqz_file_stored_get(sqz_file *f, uint64_t idx, size_t n, uint64_t as_idx,
                        sqz_prepared *out);
/* Commit p[n] (consecutive blocks from sqz_file_stored_get of a file with
 * the same coding) into f at once, replacing those blocks whatever their
 * state (dirty versions dropped); the length grows to cover them. */
int sqz_file_stored_put(sqz_file *f, sqz_prepared *p, size_t n);
/* Hand dirty data to the backing file (commit, no fsync). */
int sqz_file_flush(sqz_file *f);
/* The same for a file compressed again soon (squeezefs packs a small
 * closed file, compressing its content anew): if the file is min_len..
 * max_len bytes long (and not empty) and within its first block, its
 * dirty block is stored as a
 * draft (sqz_ctr_prepare_draft: the fastest mode of the container's
 * algorithm), so the commit costs little more than the write. Blocks
 * already compressing (sqz_file_hint_flush) keep their compression.
 * A draft that finds no room (-ENOSPC) is compressed after all.
 * Returns 1 if it stored a draft, 0 if not, or -errno. */
int sqz_file_flush_draft(sqz_file *f, uint64_t min_len, uint64_t max_len);
/* A hint that a flush is likely next: the caller wrote up to `end` the
 * last of what a writer had pending (the kernel writing back its cached
 * pages, which it does right before a close or an fsync). If end reaches
 * the file's length, every dirty block starts compressing in the
 * background now (as blocks written to their end always do), so the flush
 * waits only for what is left. Nothing else changes. */
void sqz_file_hint_flush(sqz_file *f, uint64_t end);
/* flush + make durable. */
int sqz_file_fsync(sqz_file *f, int datasync);
uint64_t sqz_file_length(sqz_file *f);
/* sqz_ctr_stat of the container, with length and blocks reporting the
 * logical length including uncommitted data. */
int sqz_file_stat(sqz_file *f, struct sqz_ctr_stat *st);
sqz_ctr *sqz_file_ctr(sqz_file *f);
/* 1 if the file has uncommitted dirty data. */
int sqz_file_dirty(sqz_file *f);
/* Drop cached blocks of this file (e.g. after recompress). */
void sqz_file_drop_cache(sqz_file *f);

#endif
