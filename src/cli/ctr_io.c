/* Moving bytes into and out of containers: sources (container, plain file
 * or memory), parallel fill of a new container, dump and read-back. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common/fullio.h"
#include "workpool.h"

#define BATCH_BYTES (8u << 20) /* bytes of input handled per commit */

int cli_src_open(const char *path, cli_src *s)
{
    return cli_src_openat(NULL, path, s);
}

static int src_open_once(const tree_at *at, const char *path, cli_src *s);

int cli_src_openat(const tree_at *at, const char *path, cli_src *s)
{
    int r = src_open_once(at, path, s);
    /* A mount's daemon still leaving (umount returns before it is done)
     * packs a small file in place: the container this saw can be
     * truncated under it; the file now 0 bytes is the packed file. */
    for (int i = 0; (r == -EBADMSG || r == -EIO) && i < 3; i++) {
        struct stat st;
        int sr = at ? fstatat(at->dirfd, at->name, &st, AT_SYMLINK_NOFOLLOW)
                    : stat(path, &st);
        if (sr != 0 || !S_ISREG(st.st_mode) || st.st_size != 0)
            break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        r = src_open_once(at, path, s);
    }
    return r;
}

static int src_open_once(const tree_at *at, const char *path, cli_src *s)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    int fd = at ? openat(at->dirfd, at->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
                : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    }
    int pr = sqz_ctr_probe_fd(fd);
    if (pr < 0) {
        close(fd);
        return pr;
    }
    /* a packed file: its content, read and checked; so is an unpacking
     * torn by a crash (the pointer still counts) */
    if (st.st_size == 0 || cli_unpack_torn(fd, pr)) {
        void *buf;
        int r = cli_packed_load(fd, at, path, &s->ptr, &buf, s->err, sizeof s->err);
        if (r != 0)
            close(fd);
        if (r < 0)
            return r;
        if (r == 1) {
            s->packed = true;
            s->own = buf;
            s->mem = buf;
            s->len = s->ptr.length;
            return 0;
        }
    }
    if (pr == 1) {
        int r = sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, path, &s->ctr);
        if (r < 0)
            return r; /* fd closed by the library */
        s->len = sqz_ctr_length(s->ctr);
        return 0;
    }
    s->fd = fd;
    /* a torn lazy creation is an empty file: its bytes are not content */
    s->len = pr == SQZ_PROBE_TORN ? 0 : (uint64_t)st.st_size;
    return 0;
}

const char *cli_src_why(const cli_src *s, int r)
{
    return s->err[0] ? s->err : strerror(-r);
}

void cli_src_mem(cli_src *s, const void *buf, uint64_t len)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->mem = buf;
    s->len = len;
}

void cli_src_close(cli_src *s)
{
    if (s->ctr)
        sqz_ctr_close(s->ctr);
    if (s->fd >= 0)
        close(s->fd);
    free(s->own);
    s->own = NULL;
    s->ctr = NULL;
    s->fd = -1;
    s->mem = NULL;
}

ssize_t cli_src_pread(cli_src *s, void *buf, size_t n, uint64_t off)
{
    if (off >= s->len)
        return 0;
    if (n > s->len - off)
        n = (size_t)(s->len - off);
    if (s->mem) {
        memcpy(buf, s->mem + off, n);
        return (ssize_t)n;
    }
    if (!s->ctr)
        return sqz_pread_full(s->fd, buf, n, off);
    size_t got = 0;
    while (got < n) {
        ssize_t r = sqz_ctr_pread(s->ctr, (char *)buf + got, n - got, off + got);
        if (r < 0)
            return r;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static bool all_zero(const unsigned char *p, size_t n)
{
    /* word-wise check; block sizes are multiples of 8 */
    const unsigned char *end = p + n;
    while (p < end && ((uintptr_t)p & 7))
        if (*p++)
            return false;
    while (p + 8 <= end) {
        uint64_t w;
        memcpy(&w, p, 8);
        if (w)
            return false;
        p += 8;
    }
    while (p < end)
        if (*p++)
            return false;
    return true;
}

/* ---- fill ---- */

typedef struct fill_job {
    sqz_ctr *dst;
    const unsigned char *buf;
    size_t bs;
    uint64_t first;
    size_t n;
    sqz_prepared *prep;
    unsigned char *used; /* 1 if prep[i] holds a block to commit */
    atomic_size_t next;
    atomic_int err;
} fill_job;

static void fill_worker(void *arg)
{
    fill_job *j = arg;
    size_t i;
    while ((i = atomic_fetch_add(&j->next, 1)) < j->n) {
        const unsigned char *data = j->buf + i * j->bs;
        if (all_zero(data, j->bs)) {
            j->used[i] = 0;
            continue;
        }
        memset(&j->prep[i], 0, sizeof j->prep[i]);
        int r = sqz_ctr_prepare(j->dst, j->first + i, data, &j->prep[i]);
        if (r < 0) {
            j->used[i] = 0;
            int zero = 0;
            atomic_compare_exchange_strong(&j->err, &zero, r);
            continue;
        }
        j->used[i] = 1;
    }
}

/* 1 if src has no data in [off, off+n) (a hole of a sparse plain file). */
static bool src_hole(cli_src *s, uint64_t off, uint64_t n)
{
    if (s->fd < 0)
        return false;
    off_t d = lseek(s->fd, (off_t)off, SEEK_DATA);
    if (d < 0)
        return errno == ENXIO; /* no data after off */
    return (uint64_t)d >= off + n;
}

int cli_ctr_fill(sqz_ctr *dst, cli_src *src, int threads, cli_progress *pg)
{
    size_t bs = sqz_ctr_block_size(dst);
    size_t per = BATCH_BYTES / bs;
    if (per < (size_t)threads * 4)
        per = (size_t)threads * 4;
    unsigned char *buf = malloc(per * bs);
    sqz_prepared *prep = calloc(per, sizeof *prep);
    sqz_prepared *commit = calloc(per, sizeof *commit);
    unsigned char *used = calloc(per, 1);
    workpool pool;
    int r = (buf && prep && commit && used) ? workpool_init(&pool, threads) : -ENOMEM;
    if (r < 0) {
        free(buf); free(prep); free(commit); free(used);
        return r;
    }
    uint64_t len = src->len;
    uint64_t nblocks = (len + bs - 1) / bs;
    fill_job job = {.dst = dst, .buf = buf, .bs = bs, .prep = prep, .used = used};
    for (uint64_t first = 0; first < nblocks && r == 0; first += per) {
        size_t n = (size_t)(nblocks - first < per ? nblocks - first : per);
        uint64_t off = first * bs;
        uint64_t want = len - off < (uint64_t)n * bs ? len - off : (uint64_t)n * bs;
        uint64_t end = off + want;
        size_t ncommit = 0;
        if (!src_hole(src, off, want)) {
            ssize_t got = cli_src_pread(src, buf, (size_t)want, off);
            if (got < 0) {
                r = (int)got;
                break;
            }
            if ((uint64_t)got != want) {
                r = -EIO; /* the source shrank under us */
                break;
            }
            memset(buf + want, 0, (size_t)n * bs - want);
            job.first = first;
            job.n = n;
            atomic_store(&job.next, 0);
            atomic_store(&job.err, 0);
            workpool_run(&pool, fill_worker, &job);
            for (size_t i = 0; i < n; i++)
                if (used[i])
                    commit[ncommit++] = prep[i];
            r = atomic_load(&job.err);
        }
        if (r == 0)
            r = sqz_ctr_commit(dst, commit, ncommit, end);
        for (size_t i = 0; i < ncommit; i++)
            sqz_prepared_free(&commit[i]);
        progress_add(pg, want);
    }
    workpool_destroy(&pool);
    free(buf);
    free(prep);
    free(commit);
    free(used);
    return r;
}

int cli_ctr_write(sqz_ctr *dst, cli_src *src, int threads, cli_progress *pg,
                  const tree_at *at, const struct stat *st)
{
    int r = cli_ctr_fill(dst, src, threads, pg);
    if (r == 0)
        r = sqz_ctr_checkpoint(dst);
    if (r == 0)
        r = sqz_ctr_sync(dst, 0);
    if (r == 0)
        r = cli_copy_meta_at(at, st, sqz_ctr_fd(dst), NULL);
    int rc = sqz_ctr_close(dst);
    return r == 0 ? rc : r;
}

/* ---- read back ---- */

typedef struct read_job {
    sqz_ctr *c;
    unsigned char *buf; /* n blocks of bs bytes */
    size_t bs;
    uint64_t first;
    size_t n;
    ssize_t *valid;     /* per block: valid bytes; or NULL */
    size_t *stored;     /* per block: stored length; or NULL */
    atomic_size_t next;
    atomic_int err;
} read_job;

static void read_worker(void *arg)
{
    read_job *j = arg;
    size_t i;
    while ((i = atomic_fetch_add(&j->next, 1)) < j->n) {
        size_t stored = 0;
        ssize_t v = sqz_ctr_read_block(j->c, j->first + i, j->buf + i * j->bs, &stored);
        if (v < 0) {
            int zero = 0;
            atomic_compare_exchange_strong(&j->err, &zero, (int)v);
        }
        if (j->valid)
            j->valid[i] = v;
        if (j->stored)
            j->stored[i] = stored;
    }
}

static int write_full(int fd, const void *buf, size_t n, uint64_t off, bool at)
{
    if (at)
        return sqz_pwrite_full(fd, buf, n, off);
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)buf + done, n - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (w == 0)
            return -EIO; /* no progress: never a loop */
        done += (size_t)w;
    }
    return 0;
}

/* Write buf[0..n) at off, leaving all-zero 4 KiB pages as holes. */
static int write_sparse(int fd, const unsigned char *buf, size_t n, uint64_t off)
{
    enum { PAGE = 4096 };
    size_t run = 0, start = 0; /* pending run of non-zero pages */
    for (size_t i = 0; i < n; i += PAGE) {
        size_t k = n - i < PAGE ? n - i : PAGE;
        if (all_zero(buf + i, k)) {
            if (run) {
                int r = write_full(fd, buf + start, run, off + start, true);
                if (r < 0)
                    return r;
                run = 0;
            }
            continue;
        }
        if (!run)
            start = i;
        run += k;
    }
    return run ? write_full(fd, buf + start, run, off + start, true) : 0;
}

int cli_ctr_dump(sqz_ctr *c, int fd, bool sparse, cli_progress *pg)
{
    size_t bs = sqz_ctr_block_size(c);
    uint64_t len = sqz_ctr_length(c);
    uint64_t nblocks = sqz_ctr_nblocks(c);
    size_t per = BATCH_BYTES / bs;
    int threads = cli_default_threads();
    if (per < (size_t)threads * 2)
        per = (size_t)threads * 2;
    unsigned char *buf = malloc(per * bs);
    ssize_t *valid = calloc(per, sizeof *valid);
    size_t *stored = calloc(per, sizeof *stored);
    workpool pool;
    int r = (buf && valid && stored) ? workpool_init(&pool, threads) : -ENOMEM;
    if (r < 0) {
        free(buf); free(valid); free(stored);
        return r;
    }
    read_job job = {.c = c, .buf = buf, .bs = bs, .valid = valid, .stored = stored};
    for (uint64_t first = 0; first < nblocks && r == 0; first += per) {
        job.first = first;
        job.n = (size_t)(nblocks - first < per ? nblocks - first : per);
        atomic_store(&job.next, 0);
        atomic_store(&job.err, 0);
        workpool_run(&pool, read_worker, &job);
        if ((r = atomic_load(&job.err)) < 0)
            break;
        for (size_t i = 0; i < job.n && r == 0; i++) {
            uint64_t off = (first + i) * bs;
            size_t v = (size_t)(len - off < bs ? len - off : bs);
            unsigned char *b = buf + i * bs;
            if (sparse)
                r = stored[i] == 0 ? 0 : write_sparse(fd, b, v, off);
            else
                r = write_full(fd, b, v, off, false);
        }
        uint64_t chunk = (uint64_t)job.n * bs;
        progress_add(pg, chunk < len - first * bs ? chunk : len - first * bs);
    }
    if (r == 0 && sparse && ftruncate(fd, (off_t)len) < 0)
        r = -errno;
    workpool_destroy(&pool);
    free(buf);
    free(valid);
    free(stored);
    return r;
}

int cli_ctr_read_all(sqz_ctr *c, void *out, int threads)
{
    size_t bs = sqz_ctr_block_size(c);
    uint64_t nblocks = sqz_ctr_nblocks(c);
    uint64_t len = sqz_ctr_length(c);
    size_t per = BATCH_BYTES / bs;
    if (per < (size_t)threads * 2)
        per = (size_t)threads * 2;
    unsigned char *buf = malloc(per * bs);
    workpool pool;
    int r = buf ? workpool_init(&pool, threads) : -ENOMEM;
    if (r < 0) {
        free(buf);
        return r;
    }
    read_job job = {.c = c, .buf = buf, .bs = bs};
    for (uint64_t first = 0; first < nblocks && r == 0; first += per) {
        job.first = first;
        job.n = (size_t)(nblocks - first < per ? nblocks - first : per);
        atomic_store(&job.next, 0);
        atomic_store(&job.err, 0);
        workpool_run(&pool, read_worker, &job);
        r = atomic_load(&job.err);
        if (r == 0 && out) {
            uint64_t off = first * bs;
            uint64_t n = (uint64_t)job.n * bs;
            if (n > len - off)
                n = len - off;
            memcpy((unsigned char *)out + off, buf, (size_t)n);
        }
    }
    workpool_destroy(&pool);
    free(buf);
    return r;
}

int cli_params_for(const sqz_spec *spec, int log2bs_dflt, unsigned min_saving,
                   cli_src *src, sqz_params *out)
{
    memset(out, 0, sizeof *out);
    out->alg = spec->alg;
    out->level = spec->level;
    out->log2bs = spec->log2bs ? spec->log2bs : log2bs_dflt;
    out->min_saving = min_saving;
    out->auto_mode = (uint8_t)spec->auto_mode;
    if (spec->auto_mode == SQZ_AUTO_NONE || !src || src->len == 0)
        return 0;
    size_t bs = (size_t)1 << out->log2bs;
    size_t n = 4 * bs > (1u << 20) ? 4 * bs : (1u << 20);
    if (n > src->len)
        n = (size_t)src->len;
    unsigned char *sample = malloc(n);
    if (!sample)
        return -ENOMEM;
    ssize_t got = cli_src_pread(src, sample, n, 0);
    int r = got < 0 ? (int)got : 0;
    if (r == 0)
        r = sqz_auto_choose(spec->auto_mode, sample, (size_t)got, out->log2bs,
                            &out->alg, &out->level);
    free(sample);
    return r;
}
