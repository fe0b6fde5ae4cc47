/* Tiering one file (user.squeezefs.tier): its status, and the online
 * rewrite under its aged policy.
 *
 * A file is due when its effective policy has an after clause, it is at
 * least that old (age = now - mtime of its data, as find -mtime), and it is
 * stored with other parameters (algorithm, level, block size; auto: another
 * auto mode) than the aged policy. Files open for writing, open as plain
 * passthrough files and files with several hard links are skipped.
 *
 * The rewrite reuses recompress' crash-safe steps (store/replace.h) but
 * does not hold the inode's io lock while the data is copied:
 *   1. io exclusive, briefly: refuse writers, commit the open file, note
 *      the change generation (sqz_inode.change_gen), open a private read-only
 *      view of the backing file and create the hidden temporary;
 *   2. no lock: copy block by block into a new container under the aged
 *      policy at the given rate, at low priority (SCHED_IDLE), yielding
 *      to foreground requests (copy_pace), giving up as soon as the
 *      generation moves (a write, a truncate, an open for writing); then
 *      a full index (checkpoint) and fsync;
 *   3. io exclusive, briefly: if nothing changed, the original's metadata
 *      and times (so the file stays old) go onto the temporary, which is
 *      renamed over the original and swapped into the inode.
 * Readers keep reading the old file through 1-2 (their cached blocks stay
 * valid) and the new one after 3. A crash leaves the old file and at most a
 * hidden temporary (before the rename) or the complete new file (after). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/kind.h"
#include "store/replace.h"
#include "content/content.h"
#include "jobs/recompress.h"
#include "jobs/tier.h"
#include "jobs/tier_int.h"
#include "common/fullio.h"
#include "common/lockorder.h"

#include <errno.h>
#include <sched.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *const state_names[] = {
    [SQZ_TS_DUE] = "due",         [SQZ_TS_YOUNG] = "young",
    [SQZ_TS_NONE] = "no-after",   [SQZ_TS_DONE] = "done",
    [SQZ_TS_WRITING] = "writing", [SQZ_TS_LINKS] = "links",
    [SQZ_TS_DAMAGED] = "damaged", [SQZ_TS_DIR] = "directory",
    [SQZ_TS_PACKED] = "packed",
};

void sqz_tier_lower_priority(void)
{
    pid_t tid = (pid_t)syscall(SYS_gettid);
    /* SCHED_IDLE: runs only when a CPU has nothing else to do; else (not
     * permitted) nice 19 */
    struct sched_param sp = {.sched_priority = 0};
    if (sched_setscheduler(0, SCHED_IDLE, &sp) != 0)
        (void)setpriority(PRIO_PROCESS, (id_t)tid, 19);
#ifdef SYS_ioprio_set
    /* IOPRIO_WHO_PROCESS, class best-effort (2), level 7 (lowest); not the
     * idle class, which a busy disk could starve forever */
    (void)syscall(SYS_ioprio_set, 1, tid, (2 << 13) | 7);
#endif
}

static void params_text(const sqz_params *p, char *buf, size_t n)
{
    sqz_spec s = {.alg = p->alg, .level = p->level, .log2bs = p->log2bs,
                  .auto_mode = SQZ_AUTO_NONE};
    if (sqz_spec_format(&s, buf, n) < 0)
        snprintf(buf, n, "?");
}

/* 1 if a container stored with p already follows spec. */
static int stored_as(const sqz_params *p, const sqz_spec *spec)
{
    if (p->log2bs != spec->log2bs)
        return 0;
    if (spec->auto_mode != SQZ_AUTO_NONE)
        return p->auto_mode == spec->auto_mode;
    return p->alg == spec->alg && p->level == spec->level;
}

int sqz_tier_status_get(struct sqz_fs *fs, struct sqz_inode *in,
                        struct sqz_tier_status *st)
{
    memset(st, 0, sizeof(*st));
    st->after = -1;
    char rel[PATH_MAX];
    int rc = sqz_inode_relpath(fs, in, rel, sizeof(rel));
    sqz_resolved r;
    if (rc == 0)
        rc = sqz_resolve(fs, rel, &r);
    if (rc)
        return rc;
    sqz_policy pol = {.spec = r.spec, .after_s = r.after_s, .aged = r.aged};
    if (sqz_policy_format(&pol, st->policy, sizeof(st->policy)) < 0)
        snprintf(st->policy, sizeof(st->policy), "?");
    st->after = r.after_s;
    if (r.after_s >= 0) {
        st->aged = r.aged;
        if (sqz_spec_format(&r.aged, st->target, sizeof(st->target)) < 0)
            snprintf(st->target, sizeof(st->target), "?");
    }
    if (in->type != S_IFREG) {
        st->state = SQZ_TS_DIR;
        return 0;
    }
    struct stat bst;
    if ((rc = sqz_backing_stat(in, &bst)) != 0)
        return rc;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    st->age = (long long)(now.tv_sec - bst.st_mtim.tv_sec);
    if (st->age < 0)
        st->age = 0;
    st->backing = (uint64_t)bst.st_size;
    st->length = (uint64_t)bst.st_size;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    int busy = in->writers > 0 || in->plain_users > 0 || in->kind == SQZ_K_PENDING;
    SQZ_RWUNLOCK(&in->io);
    struct sqz_ctr_stat cst;
    rc = sqz_content_ctr_stat(fs, in, &cst);
    int plain = rc == -ENODATA;
    if (rc == 0) {
        st->length = cst.length;
        params_text(&cst.params, st->stored, sizeof(st->stored));
    } else if (plain) {
        snprintf(st->stored, sizeof(st->stored), "plain");
    } else if (rc == -EIO) {
        snprintf(st->stored, sizeof(st->stored), "damaged");
    } else {
        return rc;
    }
    if (rc == -EIO)
        st->state = SQZ_TS_DAMAGED;
    else if (rc == 0 && cst.packed_bytes)
        st->state = SQZ_TS_PACKED;
    else if (r.after_s < 0)
        st->state = SQZ_TS_NONE;
    else if (!plain && stored_as(&cst.params, &r.aged))
        st->state = SQZ_TS_DONE;
    else if (!sqz_policy_is_aged(&pol, st->age))
        st->state = SQZ_TS_YOUNG;
    else if (busy)
        st->state = SQZ_TS_WRITING;
    else if (bst.st_nlink > 1)
        st->state = SQZ_TS_LINKS;
    else
        st->state = SQZ_TS_DUE;
    return 0;
}

int sqz_tier_status_json(struct sqz_fs *fs, struct sqz_inode *in, char *buf,
                         size_t n)
{
    struct sqz_tier_status st;
    int rc = sqz_tier_status_get(fs, in, &st);
    if (rc)
        return rc;
    /* policy, stored and target are canonical spec texts: no escaping */
    return snprintf(buf, n,
        "{\"state\": \"%s\", \"due\": %s, \"age\": %lld, \"after\": %lld"
        ", \"policy\": \"%s\", \"stored\": \"%s\", \"target\": \"%s\""
        ", \"length\": %" PRIu64 ", \"backing\": %" PRIu64 "}",
        state_names[st.state], st.state == SQZ_TS_DUE ? "true" : "false",
        st.age, st.after, st.policy, st.stored, st.target, st.length,
        st.backing);
}

/* ---- the copy (no lock held) ---- */

struct copy {
    sqz_ctr *src;           /* container source, or */
    int plain_fd;           /* a plain file */
    uint64_t len;
    unsigned char *sbuf;    /* one source block */
    uint64_t sidx;          /* which one sbuf holds (UINT64_MAX: none) */
    size_t sbs;
    struct sqz_fs *fs;
    struct sqz_inode *in;
    uint_fast64_t gen0;
    const struct sqz_tier_pace *pace;
    struct timespec t0;
    uint64_t fg_last;       /* foreground bytes at the last check */
    double last;            /* since(t0) at the end of the last check */
};

/* Source bytes [off, off + n) into dst; zeros past the end. */
static int copy_fill(struct copy *c, unsigned char *dst, uint64_t off, size_t n)
{
    memset(dst, 0, n);
    if (off >= c->len)
        return 0;
    size_t want = c->len - off < n ? (size_t)(c->len - off) : n;
    if (!c->src) {
        ssize_t r = sqz_pread_full(c->plain_fd, dst, want, off);
        return r < 0 ? (int)r : (size_t)r == want ? 0 : -EIO;
    }
    for (size_t done = 0; done < want;) {
        uint64_t pos = off + done;
        uint64_t idx = pos / c->sbs;
        if (idx != c->sidx) {
            ssize_t r = sqz_ctr_read_block(c->src, idx, c->sbuf, NULL);
            if (r < 0) {
                c->sidx = UINT64_MAX;
                return (int)r;
            }
            c->sidx = idx;
        }
        size_t in_blk = (size_t)(pos % c->sbs);
        size_t k = c->sbs - in_blk < want - done ? c->sbs - in_blk : want - done;
        memcpy(dst + done, c->sbuf + in_blk, k);
        done += k;
    }
    return 0;
}

static double since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Between blocks: give up if the file moved or we are told to stop; keep
 * to the rate; and yield to foreground requests: when the mount served
 * reads or writes while the last block was being copied, wait YIELD_FACTOR
 * times as long as that block took, so a busy mount gets the CPUs (and
 * their caches) at least 4/5 of the time the pass would otherwise take:
 * the pass slows down, to a fifth, but never stops. */
#define YIELD_FACTOR 4.0
#define YIELD_MAX 1.0 /* seconds */
static int copy_pace(struct copy *c, uint64_t done)
{
    double worked = since(&c->t0) - c->last;
    sqz_stats s;
    sqz_engine_stats(c->fs->engine, &s);
    uint64_t fg = s.logical_bytes_read + s.logical_bytes_written;
    double yield = 0;
    if (fg != c->fg_last)
        yield = worked * YIELD_FACTOR < YIELD_MAX ? worked * YIELD_FACTOR : YIELD_MAX;
    c->fg_last = fg;
    double until = since(&c->t0) + yield;
    for (;;) {
        if (atomic_load_explicit(&c->in->change_gen, memory_order_acquire) != c->gen0)
            return -EAGAIN;
        if (c->pace->stop && atomic_load(c->pace->stop))
            return -ECANCELED;
        if (c->pace->req && fuse_req_interrupted(c->pace->req))
            return -EINTR;
        double now = since(&c->t0), wait = until - now;
        if (c->pace->rate) {
            double r = (double)done / (double)c->pace->rate - now;
            if (r > wait)
                wait = r;
        }
        if (wait <= 0) {
            c->last = now;
            return 0;
        }
        double nap = wait > 0.05 ? 0.05 : wait; /* look at the flags again soon */
        struct timespec ts = {0, (long)(nap * 1e9)};
        nanosleep(&ts, NULL);
    }
}

#define BATCH 8

/* Copy everything into dst (a fresh container), then index and sync. */
static int copy_all(struct copy *c, sqz_ctr *dst)
{
    size_t dbs = sqz_ctr_block_size(dst);
    unsigned char *buf = malloc(dbs);
    sqz_prepared prep[BATCH];
    size_t np = 0;
    int rc = buf ? 0 : -ENOMEM;
    uint64_t nblk = (c->len + dbs - 1) / dbs, committed = 0;
    for (uint64_t idx = 0; rc == 0 && idx < nblk; idx++) {
        rc = copy_pace(c, idx * dbs);
        if (rc == 0)
            rc = copy_fill(c, buf, idx * dbs, dbs);
        if (rc)
            break;
        int zero = 1;
        for (size_t i = 0; i < dbs && zero; i += 8) {
            uint64_t w;
            memcpy(&w, buf + i, 8);
            zero = w == 0;
        }
        if (!zero) {
            rc = sqz_ctr_prepare(dst, idx, buf, &prep[np]);
            if (rc)
                break;
            np++;
        }
        uint64_t end = (idx + 1) * dbs < c->len ? (idx + 1) * dbs : c->len;
        if (np == BATCH || idx + 1 == nblk) {
            rc = sqz_ctr_commit(dst, prep, np, end);
            for (size_t i = 0; i < np; i++)
                sqz_prepared_free(&prep[i]);
            np = 0;
            committed = end;
        }
    }
    for (size_t i = 0; i < np; i++)
        sqz_prepared_free(&prep[i]);
    free(buf);
    if (rc == 0 && committed != c->len)
        rc = sqz_ctr_commit(dst, NULL, 0, c->len);
    if (rc == 0)
        rc = sqz_ctr_checkpoint(dst); /* a full index, as recompress writes */
    if (rc == 0)
        rc = sqz_ctr_sync(dst, 0);
    return rc;
}

/* auto: pick the algorithm from the first blocks of the source. */
static int choose_auto(struct copy *c, sqz_params *p)
{
    size_t n = (size_t)4 << p->log2bs;
    if (c->len < n)
        n = (size_t)c->len;
    if (n == 0) {
        p->alg = SQZ_ALG_ZSTD;
        p->level = sqz_level_default(SQZ_ALG_ZSTD);
        return 0;
    }
    unsigned char *buf = malloc(n);
    if (!buf)
        return -ENOMEM;
    int rc = copy_fill(c, buf, 0, n);
    if (rc == 0)
        rc = sqz_auto_choose(p->auto_mode, buf, n, p->log2bs, &p->alg, &p->level);
    free(buf);
    return rc;
}

/* Phase 1 under io exclusive: checks, generation, source, temporary. */
static int prepare_locked(struct sqz_fs *fs, struct sqz_inode *in, struct copy *c,
                          struct stat *bst, struct sqz_replace_temp *t)
{
    SQZ_ASSERT_EXCL(&in->io);
    int rc = sqz_backing_stat(in, bst);
    if (rc)
        return rc;
    if (bst->st_nlink > 1)
        return -EMLINK;
    if (in->writers > 0 || in->plain_users > 0)
        return -EBUSY;
    enum sqz_kind kind;
    uint64_t len;
    rc = sqz_content_kind_locked(fs, in, bst, &kind, &len);
    if (rc)
        return rc;
    if (kind == SQZ_K_DAMAGED)
        return -EIO;
    /* a packed file is not tiered: it stays packed (docs/FORMAT.md) */
    if (kind == SQZ_K_PENDING || kind == SQZ_K_PACKED)
        return -EBUSY;
    if (in->file && (rc = sqz_file_flush(in->file)) != 0)
        return rc;
    c->gen0 = atomic_load_explicit(&in->change_gen, memory_order_acquire);
    char label[PATH_MAX];
    sqz_inode_label(fs, in, label, sizeof(label));
    int fd = sqz_inode_reopen(in, O_RDONLY | O_NOATIME);
    if (fd < 0)
        return fd;
    if (kind == SQZ_K_CONTAINER) {
        rc = sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, label, &c->src);
        if (rc)
            return rc;
        c->len = sqz_ctr_length(c->src);
        c->sbs = sqz_ctr_block_size(c->src);
        c->sbuf = malloc(c->sbs);
        if (!c->sbuf)
            return -ENOMEM;
    } else {
        c->plain_fd = fd;
        c->len = (uint64_t)bst->st_size;
    }
    return sqz_replace_temp_create(fs, in, bst, t);
}

/* Phase 3 under io exclusive: swap the new file in unless the old one
 * changed. Takes dst over. */
static int install_locked(struct sqz_fs *fs, struct sqz_inode *in, struct copy *c,
                          ino_t ino0, sqz_ctr *dst, struct sqz_replace_temp *t,
                          uint64_t *after)
{
    SQZ_ASSERT_EXCL(&in->io);
    struct stat bst, nst;
    int rc = 0;
    if (atomic_load_explicit(&in->change_gen, memory_order_acquire) != c->gen0 ||
        in->ino != ino0 || in->writers > 0 || in->plain_users > 0)
        rc = -EAGAIN;
    if (rc == 0)
        rc = sqz_backing_stat(in, &bst);
    if (rc == 0)
        rc = sqz_replace_temp_meta(in, &bst, sqz_ctr_fd(dst));
    if (rc == 0 && fstat(sqz_ctr_fd(dst), &nst) != 0)
        rc = -errno;
    if (rc) {
        sqz_ctr_close(dst);
        return rc;
    }
    *after = (uint64_t)nst.st_size;
    sqz_file *nsf = NULL;
    rc = sqz_file_new(fs->engine, dst, &nsf); /* closes dst on failure */
    if (rc)
        return rc;
    rc = sqz_recompress_install_locked(fs, in, t, nsf);
    return rc == -ESTALE ? -EAGAIN : rc; /* renamed or removed meanwhile */
}

static void count(struct sqz_fs *fs, int rc, const struct sqz_tier_result *res)
{
    struct sqz_tier *t = fs->tier;
    if (!t)
        return;
    if (rc == 0) {
        atomic_fetch_add(&t->files, 1);
        atomic_fetch_add(&t->before, res->before);
        atomic_fetch_add(&t->after, res->after);
        atomic_fetch_add(&t->logical, res->logical);
    } else if (rc == -EBUSY || rc == -EMLINK) {
        atomic_fetch_add(&t->skipped, 1);
    } else if (rc == -EAGAIN || rc == -ECANCELED || rc == -EINTR) {
        atomic_fetch_add(&t->abandoned, 1);
    } else if (rc != -EALREADY) {
        atomic_fetch_add(&t->failed, 1);
    }
}

static int tier_file(struct sqz_fs *fs, struct sqz_inode *in,
                     const struct sqz_tier_pace *pace, struct sqz_tier_result *res)
{
    struct sqz_tier_status st;
    int rc = sqz_tier_status_get(fs, in, &st);
    if (rc)
        return rc;
    snprintf(res->from, sizeof(res->from), "%s", st.stored);
    snprintf(res->to, sizeof(res->to), "%s", st.target);
    switch (st.state) {
    case SQZ_TS_DUE: break;
    case SQZ_TS_WRITING: return -EBUSY;
    case SQZ_TS_LINKS: return -EMLINK;
    case SQZ_TS_DAMAGED: return -EIO;
    case SQZ_TS_DIR: return -EISDIR;
    default: return -EALREADY;
    }
    struct copy c = {.plain_fd = -1, .sidx = UINT64_MAX, .fs = fs, .in = in,
                     .pace = pace};
    struct sqz_replace_temp t = {.dirfd = -1};
    struct stat bst;
    sqz_params p;
    sqz_params_from_spec(fs, &st.aged, &p);
    sqz_ctr *dst = NULL;
    char label[PATH_MAX];
    sqz_inode_label(fs, in, label, sizeof(label));

    SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
    int tfd = prepare_locked(fs, in, &c, &bst, &t);
    ino_t ino0 = in->ino;
    SQZ_RWUNLOCK(&in->io);
    rc = tfd < 0 ? tfd : 0;
    if (rc == 0 && p.auto_mode != SQZ_AUTO_NONE)
        rc = choose_auto(&c, &p);
    if (rc == 0) {
        char err[256] = "";
        if (sqz_params_check(&p, err, sizeof(err)) != 0) {
            sqz_logf(SQZ_LOG_ERR, "%s: tier: %s", label, err);
            rc = -EINVAL;
        }
    }
    if (rc == 0) {
        rc = sqz_ctr_create_fd(tfd, &p, label, &dst);
        tfd = -1;
    }
    if (tfd >= 0)
        close(tfd);
    if (rc == 0) {
        clock_gettime(CLOCK_MONOTONIC, &c.t0);
        rc = copy_all(&c, dst);
        /* a read error is only the file moving under us if it moved */
        if (rc && rc != -EAGAIN &&
            atomic_load_explicit(&in->change_gen, memory_order_acquire) != c.gen0)
            rc = -EAGAIN;
    }
    if (rc == 0) {
        res->logical = c.len;
        res->before = (uint64_t)bst.st_size;
        SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
        rc = install_locked(fs, in, &c, ino0, dst, &t, &res->after);
        dst = NULL;
        SQZ_RWUNLOCK(&in->io);
    }
    if (dst)
        sqz_ctr_close(dst);
    sqz_replace_temp_discard(&t);
    if (c.src)
        sqz_ctr_close(c.src);
    else if (c.plain_fd >= 0)
        close(c.plain_fd);
    free(c.sbuf);
    if (rc == 0)
        sqz_logf(SQZ_LOG_INFO, "%s: tiered %s -> %s (%" PRIu64 " -> %" PRIu64 " bytes)",
                 label, res->from, res->to, res->before, res->after);
    else if (rc == -EAGAIN)
        sqz_logf(SQZ_LOG_INFO, "%s: tiering abandoned: written meanwhile (retried later)",
                 label);
    return rc;
}

int sqz_tier_file(struct sqz_fs *fs, struct sqz_inode *in,
                  const struct sqz_tier_pace *pace, struct sqz_tier_result *res)
{
    memset(res, 0, sizeof(*res));
    if (fs->opts.ro)
        return -EROFS;
    int rc = tier_file(fs, in, pace, res);
    count(fs, rc, res);
    return rc;
}

/* ---- setxattr user.squeezefs.tier, ioctl SQZ_IOC_TIER: a job in its own
 * low-priority thread while the request waits ---- */

struct job {
    struct sqz_fs *fs;
    struct sqz_inode *in;
    struct sqz_tier_pace pace;
    struct sqz_tier_result res;
    int rc;
};

static void *job_main(void *arg)
{
    struct job *j = arg;
    sqz_tier_lower_priority();
    j->rc = sqz_tier_file(j->fs, j->in, &j->pace, &j->res);
    return NULL;
}

int sqz_tier_request(struct sqz_fs *fs, fuse_req_t req, struct sqz_inode *in,
                     const char *value, size_t size)
{
    if (in->type != S_IFREG)
        return -EISDIR;
    char buf[32];
    if (size >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, value, size);
    buf[size] = '\0';
    uint64_t rate = 0;
    if (buf[0]) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(buf, &end, 10);
        if (errno || *end || buf[0] == '-')
            return -EINVAL;
        rate = v;
    }
    return sqz_tier_request_rate(fs, req, in, rate);
}

int sqz_tier_request_rate(struct sqz_fs *fs, fuse_req_t req,
                          struct sqz_inode *in, uint64_t rate)
{
    if (in->type != S_IFREG)
        return -EISDIR;
    struct job j = {.fs = fs, .in = in, .pace = {.rate = rate, .req = req}};
    if (fs->tier)
        j.pace.stop = &fs->tier->bg.stop;
    pthread_t th;
    int rc = pthread_create(&th, NULL, job_main, &j);
    if (rc)
        return -rc;
    pthread_join(th, NULL);
    /* the kernel turns EAGAIN from setxattr into EOPNOTSUPP */
    return j.rc == -EAGAIN ? -ECANCELED : j.rc;
}
