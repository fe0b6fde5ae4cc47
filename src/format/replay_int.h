/* Private to the replay rooms of the format layer (loading a container's
 * state at open):
 *
 *   replay_anchor.c    the anchor slots and the checkpoint they point to
 *   replay_scan.c      buffered reading of log records, resynchronising
 *                      after damage
 *   replay.c           one replay of the log after the checkpoint:
 *                      transactions, damage accounting, the durable mark
 *   replay_evidence.c  sqz_replay: a second, lenient pass when valid later
 *                      commits are evidence of damage (not a torn tail)
 */
#ifndef SQUEEZEFS_FORMAT_REPLAY_INT_H
#define SQUEEZEFS_FORMAT_REPLAY_INT_H

#include "format/format_int.h"

/* A window of the file read with large buffered reads. */
typedef struct scanner {
    const sqz_io *io;
    int fd;
    uint64_t fsize;
    uint8_t *buf;
    size_t cap;
    uint64_t boff;
    size_t blen;
} scanner;

/* replay_scan.c */
/* Make [off, off+n) available at *p (caller guarantees off+n <= fsize). */
int sqz_scan_get(scanner *s, uint64_t off, uint64_t n, const uint8_t **p);
/* Read the record at pos, which must end at or before limit: 1 valid (rec,
 * rh, total set), 0 invalid, <0 error. */
int sqz_scan_record(scanner *sc, uint64_t pos, uint64_t limit,
                    uint64_t file_id, sqz_rec_hdr *rh, const uint8_t **rec,
                    uint64_t *total);
/* After damage at pos: the offset of the next valid record of this file
 * before durable, or durable (bounded by *budget). */
int sqz_scan_resync(scanner *sc, uint64_t pos, uint64_t durable, uint64_t fid,
                    uint64_t *budget, uint64_t *next);

/* replay_anchor.c: pick the newest valid anchor and load its checkpoint
 * into st (or start after the header when none was written). 0,
 * -EBADMSG with the reason in err, -ENOMEM, I/O errors. */
int sqz_replay_load_checkpoint(const sqz_io *io, int fd, const sqz_header *h,
                               uint64_t fsize, sqz_state *st, char *err,
                               size_t errlen);

/* replay.c: one replay (lenient_to > the durable mark: treat the log up to
 * it like the synced part). *applied: the end of the last record applied. */
int sqz_replay_pass(const sqz_io *io, int fd, const sqz_header *h,
                    uint64_t file_size, const char *label, sqz_state *st,
                    char *err, size_t errlen, uint64_t lenient_to,
                    uint64_t *applied);

#endif
