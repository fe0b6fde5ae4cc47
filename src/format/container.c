/* Container lifecycle: create, open (header + replay + torn-tail repair),
 * close, by-path helpers, probing, accessors and figures (stat). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/random.h>
#include <unistd.h>

#include "format/format_int.h"
#include "common/errbuf.h"
#include "common/lockorder.h"

static int new_file_id(uint64_t *id)
{
    do {
        uint8_t b[8];
        size_t got = 0;
        while (got < sizeof b) {
            ssize_t r = getrandom(b + got, sizeof b - got, 0);
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                return -errno;
            }
            got += (size_t)r;
        }
        *id = sqz_get64(b);
    } while (*id == 0);
    return 0;
}

/* A version-2 file shorter than its header region: the torn first write of
 * a lazy creation if every byte after the header is zero (the anchor slots
 * were written as zeros with it). 0, -EBADMSG (damaged), I/O errors. */
static int torn_creation(const sqz_io *io, int fd, const sqz_header *h,
                         uint64_t fsize)
{
    if (h->version < 2)
        return -EBADMSG;
    uint8_t b[SQZ_LOG_START_V2];
    ssize_t got = io->pread(io->ctx, fd, b, (size_t)fsize, 0);
    if (got < 0)
        return (int)got;
    if ((uint64_t)got != fsize)
        return -EBADMSG;
    for (uint64_t i = SQZ_HDR_SIZE; i < fsize; i++)
        if (b[i])
            return -EBADMSG;
    return 0;
}

int sqz_ctr_open_internal(int fd, int flags, const char *label,
                          const sqz_io *io, int own_fd, sqz_ctr **out,
                          char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    *out = NULL;
    int r;
    sqz_io_head head;
    head.buf = NULL;
    if (flags != SQZ_OPEN_RDONLY && flags != SQZ_OPEN_RDWR) {
        r = -EINVAL;
        goto fail_fd;
    }
    sqz_ctr *c = calloc(1, sizeof *c);
    if (!c) {
        r = -ENOMEM;
        goto fail_fd;
    }
    c->io = *io;
    c->fd = fd;
    c->writable = flags == SQZ_OPEN_RDWR;
    c->label = sqz_label_dup(label, fd);
    if (!c->label) {
        r = -ENOMEM;
        goto fail_c;
    }
    uint64_t fsize;
    if ((r = io->size(io->ctx, fd, &fsize, NULL)) < 0)
        goto fail_c;
    /* header, anchors and a small log: one read */
    if ((r = sqz_io_head_init(&head, io, fd, fsize, SQZ_IO_HEAD_CAP)) < 0)
        goto fail_c;
    const sqz_io *rio = &head.io;
    uint8_t hb[SQZ_HDR_SIZE];
    ssize_t got = rio->pread(rio->ctx, fd, hb, sizeof hb, 0);
    if (got < 0) {
        r = (int)got;
        goto fail_c;
    }
    r = sqz_header_decode(hb, (size_t)got, &c->hdr, err, errlen);
    if (r < 0) {
        r = -EBADMSG;
        goto fail_c;
    }
    c->bs = (size_t)1 << c->hdr.params.log2bs;
    uint64_t log0 = sqz_log_start(c->hdr.version);
    if (fsize < log0) {
        /* version 2 creates lazily: its first write (header region and
         * first commit) may be torn by a crash before it was ever synced;
         * then the anchor slots are zero or missing and the file is empty */
        if ((r = torn_creation(rio, fd, &c->hdr, fsize)) < 0) {
            if (r == -EBADMSG)
                sqz_errf(err, errlen, "header region truncated");
            goto fail_c;
        }
        sqz_index_init(&c->st.ix);
        c->st.valid_end = c->st.ckpt_end = log0;
        sqz_logf(SQZ_LOG_WARN, "%s: creation torn before it was synced (%llu of "
                 "%llu header bytes): an empty file", SQZ_LBL(c->label),
                 (unsigned long long)fsize, (unsigned long long)log0);
    } else if ((r = sqz_replay(rio, fd, &c->hdr, fsize, c->label, &c->st, err,
                               errlen)) < 0) {
        goto fail_c;
    }
    sqz_io_head_free(&head);
    /* valid_end >= durable_end: only a tail after the synced log is cut */
    c->end = c->st.valid_end;
    c->marked_end = c->st.durable_end;
    c->since_ckpt = c->end - c->st.ckpt_end;
    c->file_size = fsize;
    /* (read-only opens do not look: only verify needs to know, and asks) */
    int zero_tail = c->writable && fsize > c->end &&
                    c->end >= sqz_log_start(c->hdr.version) &&
                    sqz_ctr_tail_is_zero(io, fd, c->end, fsize);
    c->end_at_sync = c->end;
    if (zero_tail) {
        /* written-ahead log space of an earlier open (its close did not
         * cut it off: a crash): zeros, kept for the next appends */
        c->phys_end = fsize;
    } else if (c->writable && fsize != c->end) {
        c->file_size = c->end;
        if (fsize > c->end)
            sqz_logf(SQZ_LOG_WARN, "%s: discarding %llu bytes of torn/uncommitted "
                     "tail", SQZ_LBL(c->label), (unsigned long long)(fsize - c->end));
        if ((r = io->truncate(io->ctx, fd, c->end)) < 0 ||
            (r = io->sync(io->ctx, fd, 1)) < 0) {
            sqz_errf(err, errlen, "cannot truncate the torn tail");
            goto fail_st;
        }
    }
    if (c->writable && !zero_tail)
        c->phys_end = c->file_size;
    if ((r = -pthread_rwlock_init(&c->lock, NULL)) < 0)
        goto fail_st;
    *out = c;
    return 0;
fail_st:
    sqz_index_free(&c->st.ix);
fail_c:
    sqz_io_head_free(&head);
    free(c->label);
    free(c);
fail_fd:
    if (own_fd)
        close(fd);
    return r;
}

int sqz_ctr_open_fd_io(int fd, int flags, const char *label, const sqz_io *io,
                       sqz_ctr **out)
{
    char why[128] = "";
    int r = sqz_ctr_open_internal(fd, flags, label, io, 0, out, why,
                                  sizeof why);
    if (r < 0) { /* fd still open: a lazy label names it */
        if (why[0])
            sqz_logf(SQZ_LOG_ERR, "%s: %s", SQZ_LBL_FD(label, fd), why);
        close(fd);
    }
    return r;
}

int sqz_ctr_open_fd(int fd, int flags, const char *label, sqz_ctr **out)
{
    return sqz_ctr_open_fd_io(fd, flags, label, &sqz_io_syscalls, out);
}

int sqz_ctr_create_fd_ver(int fd, const sqz_params *p, uint32_t version,
                          const char *label, const sqz_io *io, sqz_ctr **out)
{
    char err[160];
    *out = NULL;
    int r = sqz_params_check(p, err, sizeof err);
    if (r == 0 && version != 1 && version != SQZ_FMT_VERSION) {
        snprintf(err, sizeof err, "unknown format version %u", version);
        r = -EINVAL;
    }
    if (r < 0) {
        sqz_logf(SQZ_LOG_ERR, "%s: %s", SQZ_LBL_FD(label, fd), err);
        close(fd);
        return r;
    }
    sqz_header h = {.params = *p, .version = version};
    if ((r = new_file_id(&h.file_id)) < 0) {
        close(fd);
        return r;
    }
    uint64_t log0 = sqz_log_start(version);
    uint8_t *region = calloc(1, log0);
    if (!region) {
        close(fd);
        return -ENOMEM;
    }
    sqz_header_encode(&h, region);
    if ((r = io->truncate(io->ctx, fd, 0)) < 0 ||
        (r = io->pwrite(io->ctx, fd, region, log0, 0)) < 0 ||
        (r = io->sync(io->ctx, fd, 0)) < 0) {
        free(region);
        close(fd);
        return r;
    }
    free(region);
    return sqz_ctr_open_fd_io(fd, SQZ_OPEN_RDWR, label, io, out);
}

int sqz_ctr_create_fd_io(int fd, const sqz_params *p, const char *label,
                         const sqz_io *io, sqz_ctr **out)
{
    return sqz_ctr_create_fd_ver(fd, p, SQZ_FMT_VERSION, label, io, out);
}

int sqz_ctr_create_fd_lazy(int fd, const sqz_params *p, const char *label,
                           sqz_ctr **out)
{
    return sqz_ctr_create_fd_lazy_io(fd, p, label, &sqz_io_syscalls, out);
}

int sqz_ctr_create_fd_lazy_io(int fd, const sqz_params *p, const char *label,
                              const sqz_io *io, sqz_ctr **out)
{
    char err[160];
    *out = NULL;
    int r = sqz_params_check(p, err, sizeof err);
    if (r < 0) {
        sqz_logf(SQZ_LOG_ERR, "%s: %s", SQZ_LBL_FD(label, fd), err);
        close(fd);
        return r;
    }
    uint64_t size;
    sqz_ctr *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return -ENOMEM;
    }
    c->hdr = (sqz_header){.params = *p, .version = SQZ_FMT_VERSION};
    c->label = sqz_label_dup(label, fd);
    if (!c->label)
        r = -ENOMEM;
    else if ((r = new_file_id(&c->hdr.file_id)) == 0 &&
             (r = io->size(io->ctx, fd, &size, NULL)) == 0 && size != 0)
        r = io->truncate(io->ctx, fd, 0); /* it was meant to be empty */
    if (r == 0)
        r = -pthread_rwlock_init(&c->lock, NULL);
    if (r < 0) {
        free(c->label);
        free(c);
        close(fd);
        return r;
    }
    c->io = *io;
    c->fd = fd;
    c->writable = 1;
    c->bs = (size_t)1 << p->log2bs;
    sqz_index_init(&c->st.ix);
    c->end = c->st.valid_end = c->st.ckpt_end = sqz_log_start(c->hdr.version);
    c->end_at_sync = c->end;
    c->hdr_pending = 1;
    *out = c;
    return 0;
}

int sqz_ctr_create_fd(int fd, const sqz_params *p, const char *label,
                      sqz_ctr **out)
{
    return sqz_ctr_create_fd_io(fd, p, label, &sqz_io_syscalls, out);
}

int sqz_ctr_open_path(const char *path, int flags, sqz_ctr **out)
{
    *out = NULL;
    int oflags = (flags == SQZ_OPEN_RDWR ? O_RDWR : O_RDONLY) | O_NOFOLLOW |
                 O_CLOEXEC;
    int fd = open(path, oflags);
    if (fd < 0)
        return -errno;
    return sqz_ctr_open_fd(fd, flags, path, out);
}

int sqz_ctr_create_path(const char *path, const sqz_params *p, mode_t mode,
                        sqz_ctr **out)
{
    *out = NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                  mode);
    if (fd < 0)
        return -errno;
    return sqz_ctr_create_fd(fd, p, path, out);
}

/* A file whose header does not decode is a plain file, unless the rest of
 * it is unmistakably a container (header magic, an anchor slot magic at
 * 512/1024, or a record magic where the log of either version starts):
 * then its header is damaged and serving its bytes as plain data would
 * return wrong bytes. */
int sqz_ctr_probe_fd(int fd)
{
    uint8_t hb[SQZ_HDR_SIZE];
    ssize_t got = sqz_io_syscalls.pread(NULL, fd, hb, sizeof hb, 0);
    if (got < 0)
        return (int)got;
    sqz_header h;
    if (sqz_header_decode(hb, (size_t)got, &h, NULL, 0) == 0)
        return 1;
    /* shorter than a header and the start of a version-2 one (the whole
     * 8-byte magic, then the version): a lazy creation's first write, torn
     * before it was synced. A shorter prefix of the magic ("S", "SQZ") is
     * a plain file with those bytes, kept as they are: a device does not
     * tear a write inside a file's first sector, and a user's small file
     * must never be taken for a torn creation and emptied. */
    uint8_t v2[12];
    memcpy(v2, sqz_hdr_magic, 8);
    sqz_put32(v2 + 8, 2);
    if ((size_t)got >= sizeof sqz_hdr_magic && (size_t)got < SQZ_HDR_SIZE &&
        memcmp(hb, v2, (size_t)got < sizeof v2 ? (size_t)got : sizeof v2) == 0)
        return SQZ_PROBE_TORN;
    if ((size_t)got >= sizeof sqz_hdr_magic &&
        memcmp(hb, sqz_hdr_magic, sizeof sqz_hdr_magic) == 0)
        return -EBADMSG;
    static const uint64_t marks[] = {SQZ_ANCHOR_OFF(0), SQZ_ANCHOR_OFF(1),
                                     SQZ_LOG_START_V2, SQZ_LOG_START_V1};
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        uint8_t m[4];
        ssize_t r = sqz_io_syscalls.pread(NULL, fd, m, sizeof m, marks[i]);
        if (r < 0)
            return (int)r;
        uint32_t want = i < 2 ? SQZ_ANCHOR_MAGIC : SQZ_REC_MAGIC;
        if (r == (ssize_t)sizeof m && sqz_get32(m) == want)
            return -EBADMSG;
    }
    return 0;
}

int sqz_ctr_close(sqz_ctr *c)
{
    if (!c)
        return 0;
    int r = c->broken ? -EIO : 0;
    /* a lazy creation's first write must be durable before anything a
     * later open appends (the daemon's batch normally flushed it) */
    if (r == 0 && c->first_unsynced)
        r = c->io.sync(c->io.ctx, c->fd, 1);
    /* written-ahead zeros go (a failure leaves them: zeros after the log
     * are no torn tail, the next open keeps or cuts them) */
    if (r == 0 && sqz_ctr_trim(c) < 0)
        sqz_logf(SQZ_LOG_WARN, "%s: cannot cut preallocated log space", SQZ_LBL(c->label));
    pthread_rwlock_destroy(&c->lock);
    sqz_index_free(&c->st.ix);
    if (close(c->fd) < 0 && r == 0)
        r = -errno;
    free(c->label);
    free(c);
    return r;
}

const sqz_params *sqz_ctr_params(const sqz_ctr *c)
{
    return &c->hdr.params;
}

uint64_t sqz_ctr_length(sqz_ctr *c)
{
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    uint64_t len = c->st.length;
    SQZ_RWUNLOCK(&c->lock);
    return len;
}

int sqz_ctr_committed(sqz_ctr *c)
{
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    int r = c->st.txn != 0;
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

int sqz_ctr_fd(const sqz_ctr *c)
{
    return c->fd;
}

size_t sqz_ctr_block_size(const sqz_ctr *c)
{
    return c->bs;
}

uint64_t sqz_ctr_nblocks(sqz_ctr *c)
{
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    uint64_t n = (c->st.length + c->bs - 1) >> c->hdr.params.log2bs;
    SQZ_RWUNLOCK(&c->lock);
    return n;
}

int sqz_ctr_stat(sqz_ctr *c, struct sqz_ctr_stat *st)
{
    memset(st, 0, sizeof *st);
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    int r = c->io.size(c->io.ctx, c->fd, &st->backing_size, &st->backing_alloc);
    st->params = c->hdr.params;
    st->length = c->st.length;
    st->blocks = (c->st.length + c->bs - 1) >> c->hdr.params.log2bs;
    st->stored_blocks = c->st.ix.stored_blocks;
    st->raw_blocks = c->st.ix.raw_blocks;
    st->hole_blocks = st->blocks - st->stored_blocks;
    st->compressed_bytes = c->st.ix.stored_bytes;
    st->dead_bytes = c->st.dead_bytes;
    st->format_version = c->hdr.version;
    SQZ_RWUNLOCK(&c->lock);
    return r;
}

void sqz_ctr_space(sqz_ctr *c, uint64_t *live, uint64_t *dead)
{
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    *live = c->st.ix.stored_bytes;
    *dead = c->st.dead_bytes;
    SQZ_RWUNLOCK(&c->lock);
}

int sqz_ctr_marked_length_fd(int fd, uint64_t *length)
{
    int found = 0;
    uint64_t best_end = 0;
    for (unsigned s = 0; s < 2; s++) {
        uint8_t b[SQZ_ANCHOR_READ];
        ssize_t r = sqz_io_syscalls.pread(NULL, fd, b, sizeof b,
                                          SQZ_ANCHOR_OFF(s));
        if (r < 0)
            return (int)r;
        if ((size_t)r != sizeof b)
            break;
        /* the header may be the damaged part: take the slot's own file id
         * (the extension's checksum chains the whole anchor) */
        sqz_anchor a;
        uint64_t len, txn;
        /* (the version is in the header: take the lowest log start) */
        if (sqz_anchor_decode(b, s, sqz_get64(b + 8), SQZ_LOG_START_MIN,
                              &a) != 1 ||
            sqz_anchor_ext_decode(b, &len, &txn) != 1)
            continue;
        if (!found || a.durable_end > best_end) {
            found = 1;
            best_end = a.durable_end;
            *length = len;
        }
    }
    return found ? 0 : -ENODATA;
}
