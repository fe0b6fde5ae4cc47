/* squeezefs container: the on-disk layout of one backing file (docs/FORMAT.md).
 *
 * A container stores a file of logical length L as independently compressed
 * logical blocks of 2^log2bs bytes. It is log-structured: changed blocks are
 * appended as new DATA records and become visible through an appended COMMIT
 * record; a CHECKPOINT (full index) is appended now and then and located by
 * one of two anchor slots in the header. Opening loads the newest valid
 * checkpoint and replays the valid records after it. Space of dead blocks
 * before the newest durable checkpoint is released with hole punching.
 *
 * Usable without FUSE. Errors are values: negative errno.
 *   -EBADMSG  not a container / damaged header or index (message via log)
 *   -EIO      a block's checksum or decompression failed (message via log)
 *   -EFBIG    length beyond SQZ_MAX_LENGTH
 *   -EROFS    write to a container opened read-only
 *   others    from the backing file system (ENOSPC, EIO, ...)
 *
 * Thread safety: a sqz_ctr may be used from several threads at once.
 * Reads (sqz_ctr_read_block, sqz_ctr_read) run concurrently with each other;
 * mutating calls (write, commit, truncate, sync, checkpoint) are serialised
 * by the container's internal rwlock (its rank among squeezefs' locks:
 * docs/LOCKING.md). Two sqz_ctr objects must never be open for writing on
 * one backing file at the same time.
 */
#ifndef SQUEEZEFS_CONTAINER_H
#define SQUEEZEFS_CONTAINER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "squeezefs/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SQZ_LOG2BS_MIN 12
#define SQZ_LOG2BS_MAX 20
#define SQZ_LOG2BS_DEFAULT 17
#define SQZ_MAX_LENGTH (1ULL << 44) /* 16 TiB logical */
/* The largest logical length of a file with 2^log2bs-byte blocks: its full
 * index must fit one CHECKPOINT record (payload < 4 GiB: 178,956,969
 * blocks), so 682.7 GiB at 4K blocks, 1.33 TiB at 8K, ... and
 * SQZ_MAX_LENGTH from 128K blocks on. Writes and truncates past it fail
 * with -EFBIG up front (never a file that can no longer be synced). */
uint64_t sqz_max_length(int log2bs);
/* Most entries one COMMIT can carry (sqz_ctr_commit: -E2BIG beyond). */
#define SQZ_COMMIT_MAX_ENTRIES ((0xFFFFFFFFull - 16) / 24)
#define SQZ_MIN_SAVING_DEFAULT 125  /* permille: 12.5% */

/* Compression parameters of one file; recorded in its header. */
typedef struct sqz_params {
    sqz_alg alg;
    int level;
    int log2bs;                /* 12..20 */
    unsigned min_saving;       /* permille 0..1000; a block is stored raw when
                                  compression saves less than this */
    uint8_t auto_mode;         /* 0 = chosen by the user; 1 auto, 2 auto:ratio,
                                  3 auto:speed = chosen by trial (recorded) */
} sqz_params;

/* Figures of one container (as kdb+'s -21!). Used as `struct sqz_ctr_stat`
 * (the name sqz_ctr_stat alone is the function below). */
struct sqz_ctr_stat {
    sqz_params params;
    uint64_t length;           /* logical (uncompressed) length */
    uint64_t backing_size;     /* st_size of the backing file */
    uint64_t backing_alloc;    /* st_blocks*512 of the backing file */
    uint64_t blocks;           /* ceil(length / block size) */
    uint64_t stored_blocks;    /* blocks with data (compressed or raw) */
    uint64_t raw_blocks;       /* stored uncompressed */
    uint64_t hole_blocks;      /* all-zero, no space */
    uint64_t compressed_bytes; /* sum of stored bytes of live blocks */
    uint64_t dead_bytes;       /* stored bytes no longer referenced */
    uint32_t format_version;   /* docs/FORMAT.md: 1 (log at 4096) or 2 */
    uint64_t packed_bytes;     /* a packed file (include/squeezefs/pack.h):
                                  the bytes of its pack entry; 0 otherwise */
};

/* Log levels of sqz_logf and of the sink's level argument. */
#define SQZ_LOG_ERR 0  /* an operation failed or data is damaged */
#define SQZ_LOG_WARN 1 /* degraded, but the operation went on */
#define SQZ_LOG_INFO 2 /* for the record */

/* Callback for log lines (damaged blocks, repaired tails). level: one of
 * SQZ_LOG_ERR, SQZ_LOG_WARN, SQZ_LOG_INFO. May be called from any
 * thread. */
typedef void (*sqz_log_fn)(void *user, int level, const char *msg);
/* Set the process-wide log sink (default: stderr). Not thread-safe against
 * concurrent logging: call once at start-up. */
void sqz_set_log(sqz_log_fn fn, void *user);
/* A label (the `label` argument of the open and create calls) that names
 * a container by the path of its file descriptor, made only when a log
 * line prints it (one readlink), instead of a text made for every open
 * that is rarely printed. The path is relative to the directory set with
 * sqz_set_label_root (absolute when none is set or it is elsewhere). */
extern const char SQZ_LABEL_FROM_FD[];
/* Set once at start-up, like sqz_set_log: the absolute directory that
 * SQZ_LABEL_FROM_FD labels are relative to (copied; NULL: none). */
int sqz_set_label_root(const char *dir);
void sqz_logf(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef struct sqz_ctr sqz_ctr;

#define SQZ_OPEN_RDONLY 0
#define SQZ_OPEN_RDWR 1

/* Validate params (alg, level range, log2bs, min_saving). 0 or -EINVAL with
 * a message in err. */
int sqz_params_check(const sqz_params *p, char *err, size_t errlen);

/* Write a fresh empty container header (the current format version) into
 * fd (which must be an empty or to-be-truncated regular file opened
 * O_RDWR), fsync it, and open it.
 * The label is an informational path used in log messages (may be NULL).
 * Takes ownership of fd on success and on failure (closes it). */
int sqz_ctr_create_fd(int fd, const sqz_params *p, const char *label,
                      sqz_ctr **out);
/* Lazy creation (docs/FORMAT.md "Creation"): the same without any I/O
 * but truncating a non-empty fd; the header region is written with the
 * first commit in one pwrite, without an fsync of its own (the first sync
 * or flush of the file makes it durable, and nothing else is written to
 * the file before that). A container closed before its first commit leaves
 * an empty file. */
int sqz_ctr_create_fd_lazy(int fd, const sqz_params *p, const char *label,
                           sqz_ctr **out);
/* Open an existing container. flags: SQZ_OPEN_RDONLY or SQZ_OPEN_RDWR.
 * RDWR repairs a torn tail (ftruncate to the last valid commit). Takes
 * ownership of fd (closed on failure and by sqz_ctr_close). */
int sqz_ctr_open_fd(int fd, int flags, const char *label, sqz_ctr **out);
/* Convenience: open/create by path (O_NOFOLLOW). create: 0 or 1 (O_CREAT|
 * O_TRUNC, mode 0644 & ~umask). */
int sqz_ctr_open_path(const char *path, int flags, sqz_ctr **out);
int sqz_ctr_create_path(const char *path, const sqz_params *p, mode_t mode,
                        sqz_ctr **out);

/* 1 if the first bytes of fd are a valid container header (magic + header
 * checksum), 0 if the file is not a container (a plain file), -EBADMSG if
 * it is a container whose header is damaged (header magic, anchor or
 * record magics present), SQZ_PROBE_TORN if it is the start of a version-2
 * header shorter than a header (a lazy creation torn by a crash before it
 * was ever synced: an empty file, whose bytes must not be shown), other
 * negative errno on I/O error. Does not move the file offset. */
#define SQZ_PROBE_TORN 2
int sqz_ctr_probe_fd(int fd);

/* Close: writes pending commits (not fsync) and frees. Returns the first
 * error seen while finishing (the object is freed anyway). */
int sqz_ctr_close(sqz_ctr *c);

const sqz_params *sqz_ctr_params(const sqz_ctr *c);
uint64_t sqz_ctr_length(sqz_ctr *c);
/* 1 if a commit of c was applied (read from its log or its checkpoint),
 * 0 if it holds nothing yet: a creation whose first commit never reached
 * the file (torn by a crash, docs/FORMAT.md "Creation"). A container
 * truncated to 0 bytes has a commit. */
int sqz_ctr_committed(sqz_ctr *c);
int sqz_ctr_fd(const sqz_ctr *c); /* for fstat/fchmod/xattrs by the owner */
int sqz_ctr_stat(sqz_ctr *c, struct sqz_ctr_stat *st);
/* The stored bytes of c's live blocks and of those no longer referenced
 * (sqz_ctr_stat's compressed_bytes and dead_bytes), without the backing
 * file's figures: no system call. */
void sqz_ctr_space(sqz_ctr *c, uint64_t *live, uint64_t *dead);

/* ---- block level (what the engine uses) ---- */
size_t sqz_ctr_block_size(const sqz_ctr *c);
uint64_t sqz_ctr_nblocks(sqz_ctr *c); /* ceil(length / block size) */
/* Read logical block idx into buf (block size bytes; bytes past the logical
 * length read as zero). Holes and blocks beyond the end read as zeros.
 * Returns the number of valid bytes in the block (0..block size), or -EIO
 * for a damaged block (logged with label and block number). *compressed_len
 * (may be NULL) receives the stored size (0 for holes). */
ssize_t sqz_ctr_read_block(sqz_ctr *c, uint64_t idx, void *buf,
                           size_t *stored_len);

/* A run of consecutive blocks read from the backing file with few reads
 * (a sequential reader's read-ahead, a read that misses several blocks):
 * sqz_ctr_run_read takes the entries of blocks idx, idx+1, ... and reads
 * their stored bytes, sorted by offset, one backing read per cluster of
 * extents at most SQZ_RUN_GAP bytes apart (record headers, commit records
 * or other blocks between them; a file written in order is one cluster;
 * holes take no bytes); sqz_ctr_run_block then checks and decompresses
 * one of them, lock-free and from any thread, so the blocks of a run
 * decompress in parallel. A damaged block fails only its own
 * sqz_ctr_run_block (-EIO, logged like sqz_ctr_read_block). The run keeps
 * the entries as they were at sqz_ctr_run_read: a later commit does not
 * change what it returns (the caller discards results for blocks changed
 * since). */
#define SQZ_RUN_GAP 16384u
typedef struct sqz_ctr_run {
    uint64_t idx;            /* first block */
    size_t n;                /* blocks in the run (>= 1 on success) */
    unsigned char *buf;      /* their stored bytes, cluster after cluster */
    size_t len;              /* bytes of buf */
    uint64_t length;         /* the container's length at the read */
    struct sqz_run_ent {
        uint64_t off;        /* backing offset of the stored bytes; 0: hole */
        size_t boff;         /* where they are in buf */
        uint32_t len, crc;
        uint8_t kind;
        uint8_t unread;      /* its cluster's read failed */
    } *ent;                  /* n entries (malloc'd) */
} sqz_ctr_run;
/* Read blocks idx.. (at most nmax of them, their stored bytes at most
 * max_bytes unless the first block alone is larger). 0 (run->n >= 1), or
 * a negative errno (nothing to free). */
int sqz_ctr_run_read(sqz_ctr *c, uint64_t idx, size_t nmax, size_t max_bytes,
                     sqz_ctr_run *run);
/* Block run->idx + i of a run into buf (block size bytes), as
 * sqz_ctr_read_block returns it: the valid bytes (0..block size, the rest
 * zero) or -EIO for a damaged block; *stored_len as there. -EAGAIN: the
 * backing read of its cluster failed (read it alone, sqz_ctr_read_block,
 * so that a bad spot of the backing file fails only its own block). */
ssize_t sqz_ctr_run_block(const sqz_ctr *c, const sqz_ctr_run *run, size_t i,
                          void *buf, size_t *stored_len);
void sqz_ctr_run_free(sqz_ctr_run *run);

/* A block prepared for a commit. Prepare (compress, checksum) runs without
 * any container lock, so callers may prepare many blocks in parallel on
 * worker threads; sqz_ctr_commit then appends them in one transaction. */
typedef struct sqz_prepared {
    uint64_t idx;       /* logical block number */
    uint8_t kind;       /* set by prepare: 0 hole, 1 compressed, 2 raw */
    uint32_t stored_len;
    uint32_t crc;       /* checksum of the stored bytes */
    void *stored;       /* malloc'd stored bytes (NULL for holes) */
} sqz_prepared;

/* Compress one full block (data is block size bytes; bytes past the file's
 * length must be zero). Thread-safe, lock-free. Returns 0 or -ENOMEM. */
int sqz_ctr_prepare(const sqz_ctr *c, uint64_t idx, const void *data,
                    sqz_prepared *out);
/* The same with a draft of the container's algorithm (sqz_compress_draft)
 * instead of its level: for a block compressed again soon. The block reads
 * like any other; the header keeps the container's level. */
int sqz_ctr_prepare_draft(const sqz_ctr *c, uint64_t idx, const void *data,
                          sqz_prepared *out);
void sqz_prepared_free(sqz_prepared *p);

/* Append the prepared blocks and a COMMIT record setting the new logical
 * length (blocks at or past ceil(new_length/bs) are dropped; the caller
 * must pass the block containing the new end with its tail zeroed if it
 * changed). Atomic: after a crash either all of it or none of it is
 * visible. Not durable until sqz_ctr_sync. On error nothing changes in
 * memory and the file stays consistent. */
int sqz_ctr_commit(sqz_ctr *c, sqz_prepared *blocks, size_t n,
                   uint64_t new_length);
/* Make everything committed so far durable (fdatasync; fsync if full). May
 * write a checkpoint (amortised) and reclaim dead space. */
int sqz_ctr_sync(sqz_ctr *c, int datasync);
/* Allow writing the log ahead as zeros when the owner syncs often with
 * little appended in between (docs/FORMAT.md "Preallocated log space").
 * Commits then stop changing the backing file's size: allow it only where
 * every reader of the file tells versions apart by its times (a local file
 * system with nanosecond timestamps). Off by default. */
void sqz_ctr_allow_prealloc(sqz_ctr *c, int allow);

/* Batched durability (a daemon marking many closed files with one flush of
 * the whole file system). sqz_ctr_mark_begin takes a ticket for the log as
 * committed now: 1 (a mark is due), 0 (nothing new since the last mark),
 * or a negative errno. The caller then makes the backing file durable up to
 * at least that point by its own means (fdatasync of sqz_ctr_fd, or
 * syncfs of the file system holding it) and calls sqz_ctr_mark_end, which
 * writes the durable mark (one 512-byte anchor write, not flushed: the
 * caller's next flush makes the mark itself durable). The mark is skipped
 * if the container was synced, checkpointed or committed to in between.
 * sqz_ctr_unmarked: 1 if commits exist beyond the durable mark. */
typedef struct sqz_mark_ticket {
    uint64_t end;   /* 0: nothing to mark */
    uint64_t seq;
} sqz_mark_ticket;
int sqz_ctr_mark_begin(sqz_ctr *c, sqz_mark_ticket *t);
int sqz_ctr_mark_end(sqz_ctr *c, const sqz_mark_ticket *t);
int sqz_ctr_unmarked(sqz_ctr *c);

/* What a clean close or unmount needs for a file that could not be opened
 * (damaged header or index): the logical length recorded with its newest
 * durable mark (the anchors' length extension), read without trusting the
 * header. 0 and *length, or -ENODATA if no anchor slot records one. */
int sqz_ctr_marked_length_fd(int fd, uint64_t *length);

/* The figures verify reports besides problems (after sqz_ctr_verify):
 * bytes after the last valid commit (an uncommitted or torn tail left by a
 * crash: not damage to synced data, but data that was never made durable
 * or was lost). */
uint64_t sqz_ctr_tail_bytes(sqz_ctr *c);

/* Two containers opened on the same file at different times (a reader's
 * old and new view): 1 if block idx is stored identically in both (same
 * file id and block size, same DATA record, or a hole in both), so a copy
 * of it decompressed from one is valid for the other. */
int sqz_ctr_block_same(sqz_ctr *a, sqz_ctr *b, uint64_t idx);

/* ---- holes and stored blocks (src/format/sparse.c) ---- */
/* The first block >= from that holds data (data = 1; UINT64_MAX if none)
 * or is a hole (data = 0; blocks past the end are holes), as committed. */
uint64_t sqz_ctr_next_block(sqz_ctr *c, uint64_t from, int data);
/* After blocks were made holes (a punch): if the dead bytes reach a
 * quarter of the live records (at least 64 KiB), write a checkpoint now,
 * which releases their space in the backing file (st_blocks drops). 1 if
 * it did, 0 if not due, or a negative errno. */
int sqz_ctr_reclaim(sqz_ctr *c);
/* Block idx of c as it is stored (no decompression; the checksum is
 * checked: -EIO if damaged), prepared as block as_idx for a commit of a
 * container of the same algorithm and block size (the level may differ). A hole gives kind 0. Free with
 * sqz_prepared_free. */
int sqz_ctr_stored_get(sqz_ctr *c, uint64_t idx, uint64_t as_idx,
                       sqz_prepared *out);

/* ---- byte level (CLI, tests; simple, not for the hot path) ---- */
/* Read up to n bytes at off; returns bytes read (0 at/after EOF) or -errno. */
ssize_t sqz_ctr_pread(sqz_ctr *c, void *buf, size_t n, uint64_t off);
/* Write n bytes at off (read-modify-write of partial blocks, extends the
 * length; gaps read as zeros), committed in one transaction. */
ssize_t sqz_ctr_pwrite(sqz_ctr *c, const void *buf, size_t n, uint64_t off);
/* Shrink or grow the logical length (zeroing the tail of the last block). */
int sqz_ctr_truncate(sqz_ctr *c, uint64_t length);

/* ---- maintenance ---- */
/* Write a checkpoint now and reclaim dead space (punch holes). */
int sqz_ctr_checkpoint(sqz_ctr *c);
/* Check everything: header, anchors, index, every live block's checksum
 * and decompression. Calls report(user, msg) for every problem found
 * (naming the block) and returns the number of problems (0 = clean) or a
 * negative errno if the file could not be read at all. */
typedef void (*sqz_report_fn)(void *user, const char *msg);
int sqz_ctr_verify(sqz_ctr *c, sqz_report_fn report, void *user);
/* Verify by fd without a prior successful open (reports a header/index
 * error as a problem instead of failing). Does not take ownership. */
int sqz_verify_fd(int fd, const char *label, sqz_report_fn report, void *user);
/* The same, also giving what is not damage but not clean either: the
 * uncommitted tail (sqz_ctr_tail_bytes) and warnings (a damaged anchor
 * slot next to a valid one), both also named through report. 0 when the
 * file could not be opened. */
typedef struct sqz_verify_extra {
    uint64_t tail_bytes;
    unsigned warnings;
} sqz_verify_extra;
int sqz_verify_fd_ex(int fd, const char *label, sqz_report_fn report,
                     void *user, sqz_verify_extra *ex);

#ifdef __cplusplus
}
#endif
#endif
