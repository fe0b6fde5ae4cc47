/* Telling damage from a torn tail at open: when the replay stops past
 * the durable mark and valid later commits of this file follow the bad
 * bytes, they are evidence of damage, and the log up to the last of them
 * is replayed again like the synced part (sqz_replay). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/replay_int.h"

/* After the log stopped at from (past the durable mark): the end of the
 * last valid COMMIT or CHECKPOINT record of this file with a transaction
 * after txn, walking valid records and resynchronising over invalid bytes
 * up to the end of the file (bounded like resync). 0 if there is none.
 * *commits counts them. */
static int find_evidence(const sqz_io *io, int fd, const sqz_header *h,
                         uint64_t file_size, uint64_t from, uint64_t txn,
                         uint64_t *ev, uint64_t *commits)
{
    scanner sc = {.io = io, .fd = fd, .fsize = file_size};
    uint64_t budget = 4 * file_size + (64u << 20);
    uint64_t pos = from;
    int r = 0;
    *ev = 0;
    *commits = 0;
    while (pos <= file_size && file_size - pos >= SQZ_REC_HDR) {
        const uint8_t *rec;
        sqz_rec_hdr rh;
        uint64_t total = 0;
        int ok = sqz_scan_record(&sc, pos, file_size, h->file_id, &rh, &rec,
                             &total);
        if (ok < 0) {
            r = ok;
            break;
        }
        if (ok) {
            if (rh.type != SQZ_REC_DATA && rh.seq > txn) {
                *ev = pos + total;
                (*commits)++;
            }
            pos += total;
            continue;
        }
        uint64_t next = file_size;
        if ((r = sqz_scan_resync(&sc, pos, file_size, h->file_id, &budget, &next)) < 0)
            break;
        pos = next;
    }
    free(sc.buf);
    return r;
}

/* The log is replayed once with the durable mark deciding what is damage.
 * If that stops before the end of the file (past the mark), and valid,
 * later commits of this file follow the bad bytes, they are evidence that
 * the bad record was damage, not a torn tail: the log up to the last such
 * commit is replayed again like the synced part. That second result is
 * taken only if it applied that commit and lost no commit record (only
 * DATA records listed by valid commits were damaged: their blocks read as
 * EIO, the file keeps its length); otherwise the first stands (a crash's
 * torn tail; verify reports the unusable commits after it). */
int sqz_replay(const sqz_io *io, int fd, const sqz_header *h,
               uint64_t file_size, const char *label, sqz_state *st,
               char *err, size_t errlen)
{
    uint64_t applied = 0;
    int r = sqz_replay_pass(io, fd, h, file_size, label, st, err, errlen, 0,
                            &applied);
    if (r < 0 || st->valid_end >= file_size ||
        file_size - st->valid_end < SQZ_REC_HDR)
        return r;
    uint64_t ev = 0, commits = 0;
    r = find_evidence(io, fd, h, file_size, st->valid_end, st->txn, &ev,
                      &commits);
    if (r < 0) {
        sqz_index_free(&st->ix);
        return r;
    }
    if (ev == 0)
        return 0;
    sqz_state st2;
    uint64_t applied2 = 0;
    int r2 = sqz_replay_pass(io, fd, h, file_size, label, &st2, NULL, 0, ev,
                         &applied2);
    if (r2 == -ENOMEM) {
        sqz_index_free(&st->ix);
        return r2;
    }
    if (r2 < 0 || applied2 != ev || st2.lost_commits != st->lost_commits ||
        st2.ndamage == 0) {
        if (r2 == 0)
            sqz_index_free(&st2.ix);
        st->tail_commits = commits;
        sqz_logf(SQZ_LOG_ERR, "%s: the log after offset %llu is unreadable although "
                    "%llu later commit record(s) follow; treated as an "
                    "uncommitted tail (a crash before the data was synced, "
                    "or damage that cannot be told apart from one)",
                 SQZ_LBL(label),
                 (unsigned long long)st->valid_end,
                 (unsigned long long)commits);
        return 0;
    }
    sqz_logf(SQZ_LOG_ERR, "%s: damaged log records after the durable mark (offset "
                "%llu): later commits up to offset %llu are intact, so the "
                "damaged blocks read as errors and the file keeps its length",
             SQZ_LBL(label),
             (unsigned long long)st->valid_end, (unsigned long long)ev);
    sqz_index_free(&st->ix);
    *st = st2;
    st->evidence = 1;
    return 0;
}
