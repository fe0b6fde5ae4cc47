/* Verification of a container: header, anchor slots and their checkpoints,
 * damage replay skipped in the synced part of the log, the log's valid end,
 * and every live block (checksum + decompression). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "format/format_int.h"
#include "common/lockorder.h"

typedef struct vctx {
    sqz_ctr *c;
    sqz_report_fn report;
    void *user;
    int problems;
    unsigned warnings;
    unsigned char *buf;
} vctx;

static void problem(vctx *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void problem(vctx *v, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    v->problems++;
    if (v->report)
        v->report(v->user, msg);
}

static int check_block(void *u, uint64_t idx, const sqz_entry *e)
{
    vctx *v = u;
    char why[64] = "";
    int r = sqz_block_load(v->c, e, v->buf, why, sizeof why);
    if (r == -ENOMEM)
        return r;
    if (r < 0)
        problem(v, "block %llu at offset %llu: %s", (unsigned long long)idx,
                (unsigned long long)e->off, why[0] ? why : "I/O error");
    return 0;
}

/* Anchor policy (docs/FORMAT.md): the newest valid anchor must lead to a
 * valid checkpoint. An older anchor's checkpoint may be gone (its space is
 * reclaimed once a newer one is durable). A damaged slot next to a valid
 * one, or next to an empty (never written) one, is what a torn anchor write
 * leaves: a warning, not a problem. Both slots damaged is a problem. */
static int check_anchors(vctx *v, uint64_t fsize)
{
    sqz_ctr *c = v->c;
    sqz_anchor a[2];
    int st[2];
    for (unsigned s = 0; s < 2; s++) {
        uint8_t b[SQZ_ANCHOR_SIZE] = {0};
        ssize_t r = c->io.pread(c->io.ctx, c->fd, b, sizeof b, SQZ_ANCHOR_OFF(s));
        if (r < 0)
            return (int)r;
        /* a torn lazy creation ends inside the (zero) header region */
        int torn = fsize < sqz_log_start(c->hdr.version);
        st[s] = (size_t)r == sizeof b || torn
                    ? sqz_anchor_decode(b, s, c->hdr.file_id,
                                        sqz_log_start(c->hdr.version), &a[s])
                    : -EBADMSG;
    }
    if (st[0] < 0 && st[1] < 0) {
        problem(v, "both anchor slots are damaged");
        return 0;
    }
    for (unsigned s = 0; s < 2; s++)
        if (st[s] < 0 && st[!s] == 0) {
            /* the other slot was never written: what a torn first anchor
             * write leaves (the log is replayed from its start), or damage
             * of the one anchor a small file has */
            char msg[160];
            snprintf(msg, sizeof msg, "warning: anchor slot %u is damaged (a "
                     "torn first anchor write or damage); slot %u is empty, "
                     "the log is read from its start", s, !s);
            v->warnings++;
            if (v->report)
                v->report(v->user, msg);
        }
    for (unsigned s = 0; s < 2; s++)
        if (st[s] < 0 && st[!s] == 1) {
            /* what a torn anchor write leaves after a crash, or damage:
             * nothing synced is lost (the other slot is used), but the
             * file is not clean either */
            char msg[160];
            snprintf(msg, sizeof msg, "warning: anchor slot %u is damaged (a "
                     "torn write or damage); slot %u is in use", s, !s);
            v->warnings++;
            if (v->report)
                v->report(v->user, msg);
        }
    int newest = -1;
    for (int s = 0; s < 2; s++)
        if (st[s] == 1 && (newest < 0 || a[s].seq > a[newest].seq))
            newest = s;
    if (newest >= 0) {
        int r = sqz_anchor_check(&c->io, c->fd, &c->hdr, fsize, &a[newest]);
        if (r == -EBADMSG)
            problem(v, "anchor slot %d (seq %llu): checkpoint at offset %llu "
                       "is damaged", newest, (unsigned long long)a[newest].seq,
                    (unsigned long long)a[newest].ckpt_off);
        else if (r < 0)
            return r;
    }
    return 0;
}

int sqz_ctr_verify(sqz_ctr *c, sqz_report_fn report, void *user)
{
    vctx v = {.c = c, .report = report, .user = user};
    v.buf = malloc(c->bs);
    if (!v.buf)
        return -ENOMEM;
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    uint64_t fsize = 0;
    int r = c->io.size(c->io.ctx, c->fd, &fsize, NULL);
    if (r == 0) {
        uint8_t hb[SQZ_HDR_SIZE];
        sqz_header h;
        char why[64] = "header unreadable";
        ssize_t got = c->io.pread(c->io.ctx, c->fd, hb, sizeof hb, 0);
        if (got < 0)
            r = (int)got;
        else if (sqz_header_decode(hb, (size_t)got, &h, why, sizeof why) < 0)
            problem(&v, "%s", why);
        else if (h.file_id != c->hdr.file_id)
            problem(&v, "header changed since the container was opened");
    }
    if (r == 0)
        r = check_anchors(&v, fsize);
    if (r == 0) {
        /* damage inside the synced part of the log, skipped by replay */
        const sqz_state *st = &c->st;
        for (unsigned i = 0; i < st->ndamage && i < SQZ_DAMAGE_MAX; i++)
            problem(&v, "damaged log at offset %llu: %llu bytes of synced "
                        "records are unreadable",
                    (unsigned long long)st->damage[i].off,
                    (unsigned long long)st->damage[i].len);
        if (st->ndamage > SQZ_DAMAGE_MAX)
            problem(&v, "%u more damaged regions in the log",
                    st->ndamage - SQZ_DAMAGE_MAX);
        if (st->lost_commits)
            problem(&v, "%llu commit record(s) lost in the damaged log: their "
                        "length changes and holes could not be recovered",
                    (unsigned long long)st->lost_commits);
    }
    /* Past the durable mark, an invalid record with no intact later commit
     * after it (the replay's evidence rule) cannot be told apart from
     * writes lost or reordered by a crash before their fsync: it is not
     * counted as damage here; the caller reports it with
     * sqz_ctr_tail_bytes as an uncommitted tail (never "ok"). */
    if (r == 0 && fsize > c->end &&
        !sqz_ctr_tail_is_zero(&c->io, c->fd, c->end, fsize)) /* preallocated */
        sqz_logf(SQZ_LOG_WARN, "%s: uncommitted tail, %llu bytes after offset %llu%s",
                 SQZ_LBL(c->label), (unsigned long long)(fsize - c->end),
                 (unsigned long long)c->end,
                 c->st.tail_commits ? " (holding later commits that cannot "
                                      "be applied)"
                                    : "");
    if (r == 0)
        r = sqz_index_each(&c->st.ix, check_block, &v);
    c->verify_warnings = v.warnings;
    SQZ_RWUNLOCK(&c->lock);
    free(v.buf);
    return r < 0 ? r : v.problems;
}

uint64_t sqz_ctr_tail_bytes(sqz_ctr *c)
{
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    uint64_t t = c->file_size > c->end ? c->file_size - c->end : 0;
    if (t && sqz_ctr_tail_is_zero(&c->io, c->fd, c->end, c->file_size))
        t = 0; /* preallocated log space (prealloc.c), no uncommitted tail */
    if (c->file_size < sqz_log_start(c->hdr.version))
        t = c->file_size; /* a torn creation (an empty file) */
    SQZ_RWUNLOCK(&c->lock);
    return t;
}

int sqz_verify_fd(int fd, const char *label, sqz_report_fn report, void *user)
{
    return sqz_verify_fd_ex(fd, label, report, user, NULL);
}

int sqz_verify_fd_ex(int fd, const char *label, sqz_report_fn report,
                     void *user, sqz_verify_extra *ex)
{
    if (ex)
        memset(ex, 0, sizeof *ex);
    int dfd = dup(fd);
    if (dfd < 0)
        return -errno;
    sqz_ctr *c;
    char why[128] = "";
    int r = sqz_ctr_open_internal(dfd, SQZ_OPEN_RDONLY, label, &sqz_io_syscalls,
                                  1, &c, why, sizeof why);
    if (r == -EBADMSG) {
        if (report)
            report(user, why[0] ? why : "not a valid container");
        return 1;
    }
    if (r < 0)
        return r;
    r = sqz_ctr_verify(c, report, user);
    if (ex) {
        ex->tail_bytes = sqz_ctr_tail_bytes(c);
        ex->warnings = c->verify_warnings;
    }
    sqz_ctr_close(c);
    return r;
}
