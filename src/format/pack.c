/* Packed files: the pointer xattr, pack files and their entries
 * (include/squeezefs/pack.h, docs/FORMAT.md "Packed files"). */
#include "squeezefs/pack.h"
#include "squeezefs/codec.h"
#include "format/format_int.h"
#include "common/errbuf.h"
#include "common/fullio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define PTR_MAGIC 0x50505153u   /* "SQPP" little-endian */
#define ENTRY_MAGIC 0x45505153u /* "SQPE" little-endian */
static const uint8_t pack_magic[8] = {'S', 'Q', 'Z', 'P', 'A', 'C', 'K', 0};
#define PACK_VERSION 1u
#define PTR_VERSION 1u
#define PTR_VERSION_SHOWN 2u

static void put_params(uint8_t *b, const sqz_params *p)
{
    b[0] = (uint8_t)p->alg;
    b[1] = (uint8_t)(int8_t)p->level;
    b[2] = (uint8_t)p->log2bs;
    b[3] = p->auto_mode;
    sqz_put16(b + 4, (uint16_t)p->min_saving);
}

static void get_params(const uint8_t *b, sqz_params *p)
{
    memset(p, 0, sizeof *p);
    p->alg = (sqz_alg)b[0];
    p->level = (int8_t)b[1];
    p->log2bs = b[2];
    p->auto_mode = b[3];
    p->min_saving = sqz_get16(b + 4);
}

/* Pointer: magic u32, version u8, kind u8, params (6 bytes), stored_len
 * u32, pack_id u64, off u64, length u64, crc u32, checksum u32 of 0..43. */
size_t sqz_pack_ptr_encode(const sqz_pack_ptr *p, uint8_t out[SQZ_PACK_PTR_MAX])
{
    memset(out, 0, SQZ_PACK_PTR_MAX);
    sqz_put32(out, PTR_MAGIC);
    out[5] = p->kind;
    put_params(out + 6, &p->params);
    sqz_put32(out + 12, p->stored_len);
    sqz_put64(out + 16, p->pack_id);
    if (p->has_shown && p->off <= UINT32_MAX && p->length <= UINT32_MAX) {
        /* version 2: offset and length in 32 bits, the ctime shown */
        out[4] = PTR_VERSION_SHOWN;
        sqz_put32(out + 24, (uint32_t)p->off);
        sqz_put32(out + 28, (uint32_t)p->length);
        sqz_put32(out + 32, p->crc);
        sqz_put64(out + 36, (uint64_t)p->shown_ns);
        sqz_put32(out + 44, p->shown_until);
        sqz_put32(out + 52, sqz_checksum(out, 52));
        return SQZ_PACK_PTR_MAX;
    }
    out[4] = PTR_VERSION;
    sqz_put64(out + 24, p->off);
    sqz_put64(out + 32, p->length);
    sqz_put32(out + 40, p->crc);
    sqz_put32(out + 44, sqz_checksum(out, 44));
    return SQZ_PACK_PTR_SIZE;
}

static int plausible(const sqz_pack_ptr *p, char *err, size_t errlen)
{
    char why[120];
    if (sqz_params_check(&p->params, why, sizeof why) < 0) {
        sqz_errf(err, errlen, "packed: %s", why);
        return -EBADMSG;
    }
    size_t bs = (size_t)1 << p->params.log2bs;
    if ((p->kind != SQZ_KIND_COMP && p->kind != SQZ_KIND_RAW) ||
        p->length == 0 || p->length > SQZ_PACK_MAX_LENGTH || p->length > bs ||
        p->stored_len == 0 ||
        (p->kind == SQZ_KIND_RAW && p->stored_len != p->length) ||
        p->stored_len > sqz_compress_bound(p->params.alg, p->length) + 64 ||
        p->off < SQZ_PACK_HDR_SIZE || (p->off & 7) || p->pack_id == 0) {
        sqz_errf(err, errlen, "packed: implausible pointer");
        return -EBADMSG;
    }
    return 0;
}

int sqz_pack_ptr_decode(const void *in, size_t n, sqz_pack_ptr *p, char *err,
                        size_t errlen)
{
    const uint8_t *b = in;
    int v2 = n == SQZ_PACK_PTR_MAX;
    if ((n != SQZ_PACK_PTR_SIZE && !v2) || sqz_get32(b) != PTR_MAGIC ||
        (v2 ? sqz_get32(b + 52) != sqz_checksum(b, 52)
            : sqz_get32(b + 44) != sqz_checksum(b, 44))) {
        sqz_errf(err, errlen, "packed: damaged pointer");
        return -EBADMSG;
    }
    if (b[4] != (v2 ? PTR_VERSION_SHOWN : PTR_VERSION) ||
        (v2 && sqz_get32(b + 48) != 0)) {
        sqz_errf(err, errlen, "packed: pointer version %u unknown", b[4]);
        return -EBADMSG;
    }
    memset(p, 0, sizeof *p);
    p->kind = b[5];
    get_params(b + 6, &p->params);
    p->stored_len = sqz_get32(b + 12);
    p->pack_id = sqz_get64(b + 16);
    if (v2) {
        p->off = sqz_get32(b + 24);
        p->length = sqz_get32(b + 28);
        p->crc = sqz_get32(b + 32);
        p->has_shown = 1;
        p->shown_ns = (int64_t)sqz_get64(b + 36);
        p->shown_until = sqz_get32(b + 44);
    } else {
        p->off = sqz_get64(b + 24);
        p->length = sqz_get64(b + 32);
        p->crc = sqz_get32(b + 40);
    }
    return plausible(p, err, errlen);
}

/* The pointer from an xattr read that returned n (errno e when n < 0). */
static int ptr_of_xattr(ssize_t n, int e, const uint8_t *b, sqz_pack_ptr *p,
                        char *err, size_t errlen)
{
    if (n < 0) {
        if (e == ENODATA || e == ENOTSUP)
            return 0;
        if (e == ERANGE) {
            sqz_errf(err, errlen, "packed: damaged pointer (too long)");
            return -EBADMSG;
        }
        return -e;
    }
    int r = sqz_pack_ptr_decode(b, (size_t)n, p, err, errlen);
    return r < 0 ? r : 1;
}

/* name of dirfd opened O_PATH | O_NOFOLLOW (no symlink followed, no
 * device opened), *st its stat: an fd or -errno. */
static int open_entry(int dirfd, const char *name, struct stat *st)
{
    int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstat(fd, st) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* The pointer of an O_PATH descriptor's file, through its magic link. */
static int ptr_of_opath(int fd, sqz_pack_ptr *p, char *err, size_t errlen)
{
    char pp[48];
    snprintf(pp, sizeof pp, "/proc/self/fd/%d", fd);
    return sqz_pack_ptr_get_follow(pp, p, err, errlen);
}

int sqz_pack_ptr_getat(int dirfd, const char *name, sqz_pack_ptr *p,
                       char *err, size_t errlen)
{
    struct stat st;
    int fd = open_entry(dirfd, name, &st);
    if (fd < 0)
        return fd;
    int r = S_ISREG(st.st_mode) ? ptr_of_opath(fd, p, err, errlen) : 0;
    close(fd);
    return r;
}

int sqz_pack_ptr_get_follow(const char *path, sqz_pack_ptr *p, char *err,
                            size_t errlen)
{
    uint8_t b[SQZ_PACK_PTR_MAX + 1];
    ssize_t n = getxattr(path, SQZ_PACK_XATTR, b, sizeof b);
    return ptr_of_xattr(n, errno, b, p, err, errlen);
}

int sqz_pack_ptr_fget(int fd, sqz_pack_ptr *p, char *err, size_t errlen)
{
    uint8_t b[SQZ_PACK_PTR_MAX + 1];
    ssize_t n = fgetxattr(fd, SQZ_PACK_XATTR, b, sizeof b);
    return ptr_of_xattr(n, errno, b, p, err, errlen);
}

int sqz_pack_ptr_set(int fd, const sqz_pack_ptr *p)
{
    uint8_t b[SQZ_PACK_PTR_MAX];
    size_t n = sqz_pack_ptr_encode(p, b);
    return fsetxattr(fd, SQZ_PACK_XATTR, b, n, 0) == 0 ? 0 : -errno;
}

void sqz_pack_name(uint64_t pack_id, char out[SQZ_PACK_NAME_MAX])
{
    snprintf(out, SQZ_PACK_NAME_MAX, SQZ_PACK_PREFIX "%016" PRIx64, pack_id);
}

int sqz_name_hex16(const char *name, const char *prefix, uint64_t *id)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0 || strlen(name) != pl + 16)
        return 0;
    uint64_t v = 0;
    for (const char *s = name + pl; *s; s++) {
        int d = (*s >= '0' && *s <= '9') ? *s - '0'
              : (*s >= 'a' && *s <= 'f') ? *s - 'a' + 10 : -1;
        if (d < 0)
            return 0;
        v = (v << 4) | (uint64_t)d;
    }
    *id = v;
    return 1;
}

int sqz_pack_name_parse(const char *name, uint64_t *id)
{
    uint64_t v;
    if (!sqz_name_hex16(name, SQZ_PACK_PREFIX, &v) || v == 0)
        return 0;
    *id = v;
    return 1;
}

/* Entry header: magic u32, kind u8, params (6 bytes), pad u8,
 * stored_len u32, crc u32, pack_id u64, length u64, off u64 (its own
 * offset), reserved u32, checksum u32 of 0..43. Then the stored bytes,
 * padded to 8. */
static void entry_encode(const sqz_pack_ptr *p, uint8_t h[SQZ_PACK_ENTRY_HDR])
{
    memset(h, 0, SQZ_PACK_ENTRY_HDR);
    sqz_put32(h, ENTRY_MAGIC);
    h[4] = p->kind;
    put_params(h + 5, &p->params);
    sqz_put32(h + 12, p->stored_len);
    sqz_put32(h + 16, p->crc);
    sqz_put64(h + 20, p->pack_id);
    sqz_put64(h + 28, p->length);
    sqz_put64(h + 36, p->off);
    sqz_put32(h + 44, sqz_checksum(h, 44));
}

static int entry_decode(const uint8_t *h, sqz_pack_ptr *p)
{
    if (sqz_get32(h) != ENTRY_MAGIC || sqz_get32(h + 44) != sqz_checksum(h, 44))
        return -EBADMSG;
    memset(p, 0, sizeof *p);
    p->kind = h[4];
    get_params(h + 5, &p->params);
    p->stored_len = sqz_get32(h + 12);
    p->crc = sqz_get32(h + 16);
    p->pack_id = sqz_get64(h + 20);
    p->length = sqz_get64(h + 28);
    p->off = sqz_get64(h + 36);
    return plausible(p, NULL, 0);
}

static int same_entry(const sqz_pack_ptr *a, const sqz_pack_ptr *b)
{
    return a->pack_id == b->pack_id && a->off == b->off &&
           a->length == b->length && a->stored_len == b->stored_len &&
           a->crc == b->crc && a->kind == b->kind &&
           a->params.alg == b->params.alg && a->params.level == b->params.level &&
           a->params.log2bs == b->params.log2bs;
}

int sqz_pack_open(int dirfd, uint64_t pack_id, char *err, size_t errlen)
{
    char name[SQZ_PACK_NAME_MAX];
    sqz_pack_name(pack_id, name);
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOMEM)
            return -ENOMEM;
        sqz_errf(err, errlen, "packed: its pack %s cannot be opened: %s", name,
                 strerror(e));
        return -EIO;
    }
    return fd;
}

int sqz_pack_read(int dirfd, const sqz_pack_ptr *p, void *buf, char *err,
                  size_t errlen)
{
    int fd = sqz_pack_open(dirfd, p->pack_id, err, errlen);
    if (fd < 0)
        return fd;
    int r = sqz_pack_read_fd(fd, p, buf, err, errlen);
    close(fd);
    return r;
}

int sqz_pack_read_fd(int fd, const sqz_pack_ptr *p, void *buf, char *err,
                     size_t errlen)
{
    char name[SQZ_PACK_NAME_MAX];
    sqz_pack_name(p->pack_id, name);
    size_t n = SQZ_PACK_ENTRY_HDR + p->stored_len;
    uint8_t *e = malloc(n);
    if (!e)
        return -ENOMEM;
    int r = 0;
    ssize_t got = sqz_pread_full(fd, e, n, p->off);
    sqz_pack_ptr at;
    if (got < 0) {
        r = -EIO;
        sqz_errf(err, errlen, "packed: read error in %s: %s", name,
                 strerror((int)-got));
    } else if ((size_t)got != n) {
        r = -EIO;
        sqz_errf(err, errlen, "packed: entry lies outside its pack %s", name);
    } else if (entry_decode(e, &at) < 0 || !same_entry(&at, p)) {
        r = -EIO;
        sqz_errf(err, errlen, "packed: the entry in %s is damaged or not the "
                 "one the pointer names", name);
    } else if (sqz_checksum(e + SQZ_PACK_ENTRY_HDR, p->stored_len) != p->crc) {
        r = -EIO;
        sqz_errf(err, errlen, "packed: checksum mismatch in %s", name);
    } else if (p->kind == SQZ_KIND_RAW) {
        memcpy(buf, e + SQZ_PACK_ENTRY_HDR, p->length);
    } else {
        ssize_t d = sqz_decompress(p->params.alg, e + SQZ_PACK_ENTRY_HDR,
                                   p->stored_len, buf, p->length);
        if (d == -ENOMEM) {
            r = -ENOMEM;
        } else if (d != (ssize_t)p->length) {
            r = -EIO;
            sqz_errf(err, errlen, "packed: decompression failed (%s)", name);
        }
    }
    free(e);
    return r;
}

int sqz_pack_read_alloc(int dirfd, const sqz_pack_ptr *p, void **buf,
                        char *err, size_t errlen)
{
    *buf = NULL;
    void *b = malloc(p->length);
    if (!b)
        return -ENOMEM;
    int r = sqz_pack_read(dirfd, p, b, err, errlen);
    if (r < 0) {
        free(b);
        return r;
    }
    *buf = b;
    return 0;
}

int sqz_pack_loadat(int dirfd, const char *name, sqz_pack_ptr *p, void **buf,
                    char *err, size_t errlen)
{
    *buf = NULL;
    struct stat st;
    int fd = open_entry(dirfd, name, &st);
    if (fd < 0)
        return fd;
    int r = S_ISREG(st.st_mode) && st.st_size == 0
                ? ptr_of_opath(fd, p, err, errlen)
                : 0;
    close(fd);
    if (r <= 0)
        return r;
    r = sqz_pack_read_alloc(dirfd, p, buf, err, errlen);
    return r < 0 ? r : 1;
}

static int new_id(uint64_t *id)
{
    do {
        if (getrandom(id, sizeof *id, 0) != (ssize_t)sizeof *id)
            return errno ? -errno : -EIO;
    } while (*id == 0);
    return 0;
}

/* The header of pack id (it depends on the id alone). */
static void hdr_encode(uint64_t id, uint8_t h[SQZ_PACK_HDR_SIZE])
{
    memset(h, 0, SQZ_PACK_HDR_SIZE);
    memcpy(h, pack_magic, sizeof pack_magic);
    sqz_put32(h + 8, PACK_VERSION);
    sqz_put64(h + 16, id);
    sqz_put32(h + 60, sqz_checksum(h, 60));
}

int sqz_pack_header_is(int fd, uint64_t id)
{
    uint8_t want[SQZ_PACK_HDR_SIZE], got[SQZ_PACK_HDR_SIZE];
    hdr_encode(id, want);
    ssize_t n = sqz_pread_full(fd, got, sizeof got, 0);
    if (n < 0)
        return (int)n;
    return memcmp(got, want, (size_t)n) == 0;
}

int sqz_pack_writer_open(sqz_pack_writer *w, int dirfd)
{
    w->dirfd = dirfd;
    w->fd = -1;
    w->end = 0;
    w->dirty = 0;
    for (int tries = 0; tries < 8; tries++) {
        int r = new_id(&w->id);
        if (r < 0)
            return r;
        char name[SQZ_PACK_NAME_MAX];
        sqz_pack_name(w->id, name);
        int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
                        O_CLOEXEC, 0600);
        if (fd < 0) {
            if (errno == EEXIST)
                continue;
            return -errno;
        }
        uint8_t h[SQZ_PACK_HDR_SIZE];
        hdr_encode(w->id, h);
        r = sqz_pwrite_full(fd, h, sizeof h, 0);
        if (r < 0) {
            close(fd);
            unlinkat(dirfd, name, 0);
            return r;
        }
        /* the pack's name is durable before any pointer can name it */
        if (fsync(dirfd) != 0) {
            r = -errno;
            close(fd);
            unlinkat(dirfd, name, 0);
            return r;
        }
        w->fd = fd;
        w->end = SQZ_PACK_HDR_SIZE;
        w->dirty = 1;
        return 0;
    }
    return -EEXIST;
}

int sqz_pack_append(sqz_pack_writer *w, const sqz_params *p, const void *data,
                    size_t len, sqz_pack_ptr *out)
{
    size_t bs = (size_t)1 << p->log2bs;
    if (len == 0 || len > SQZ_PACK_MAX_LENGTH || len > bs)
        return -EINVAL;
    if (w->fd < 0)
        return -EBADF;
    if (w->end >= SQZ_PACK_MAX_SIZE)
        return -EFBIG;
    size_t cap = sqz_compress_bound(p->alg, len);
    uint8_t *e = malloc(SQZ_PACK_ENTRY_HDR + (cap > len ? cap : len) + 8);
    if (!e)
        return -ENOMEM;
    uint8_t *s = e + SQZ_PACK_ENTRY_HDR;
    memset(out, 0, sizeof *out);
    out->params = *p;
    out->length = len;
    out->pack_id = w->id;
    out->off = w->end;
    /* stored raw when compression saves less than min_saving permille */
    size_t want = len - (len * p->min_saving) / 1000;
    ssize_t c = p->alg == SQZ_ALG_NONE ? -ENOSPC
                                       : sqz_compress(p->alg, p->level, data, len, s, cap);
    if (c > 0 && (size_t)c < len && (size_t)c <= want) {
        out->kind = SQZ_KIND_COMP;
        out->stored_len = (uint32_t)c;
    } else if (c < 0 && c != -ENOSPC) {
        free(e);
        return (int)c;
    } else {
        out->kind = SQZ_KIND_RAW;
        out->stored_len = (uint32_t)len;
        memcpy(s, data, len);
    }
    out->crc = sqz_checksum(s, out->stored_len);
    entry_encode(out, e);
    size_t total = sqz_align8(SQZ_PACK_ENTRY_HDR + out->stored_len);
    memset(e + SQZ_PACK_ENTRY_HDR + out->stored_len, 0,
           total - SQZ_PACK_ENTRY_HDR - out->stored_len);
    int wr = sqz_pwrite_full(w->fd, e, total, w->end);
    free(e);
    if (wr < 0)
        return wr;
    w->end += total;
    w->dirty = 1;
    return 0;
}

int sqz_pack_writer_flush(sqz_pack_writer *w)
{
    if (w->fd < 0 || !w->dirty)
        return 0;
    if (fdatasync(w->fd) != 0)
        return -errno;
    w->dirty = 0;
    return 0;
}

void sqz_pack_writer_close(sqz_pack_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}

long sqz_pack_check(int fd, uint64_t *id, uint64_t *end, char *err,
                    size_t errlen)
{
    uint8_t h[SQZ_PACK_HDR_SIZE];
    *end = 0;
    ssize_t got = sqz_pread_full(fd, h, sizeof h, 0);
    if (got < 0)
        return got;
    if (got != (ssize_t)sizeof h || memcmp(h, pack_magic, sizeof pack_magic) ||
        sqz_get32(h + 60) != sqz_checksum(h, 60) ||
        sqz_get32(h + 8) != PACK_VERSION) {
        sqz_errf(err, errlen, "pack: damaged header");
        return -EBADMSG;
    }
    *id = sqz_get64(h + 16);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    uint64_t off = SQZ_PACK_HDR_SIZE;
    long count = 0;
    uint8_t *buf = NULL;
    size_t cap = 0;
    while (off < (uint64_t)st.st_size) {
        uint8_t eh[SQZ_PACK_ENTRY_HDR];
        sqz_pack_ptr p;
        got = sqz_pread_full(fd, eh, sizeof eh, off);
        if (got != (ssize_t)sizeof eh || entry_decode(eh, &p) < 0 ||
            p.off != off || p.pack_id != *id) {
            free(buf);
            *end = off;
            sqz_errf(err, errlen, "pack: damaged entry at offset %" PRIu64, off);
            return -EBADMSG;
        }
        if (cap < p.stored_len) {
            free(buf);
            cap = p.stored_len;
            buf = malloc(cap);
            if (!buf)
                return -ENOMEM;
        }
        got = sqz_pread_full(fd, buf, p.stored_len, off + SQZ_PACK_ENTRY_HDR);
        if (got != (ssize_t)p.stored_len ||
            sqz_checksum(buf, p.stored_len) != p.crc) {
            free(buf);
            *end = off;
            sqz_errf(err, errlen, "pack: checksum mismatch in the entry at "
                     "offset %" PRIu64, off);
            return -EBADMSG;
        }
        off += sqz_align8(SQZ_PACK_ENTRY_HDR + p.stored_len);
        count++;
    }
    free(buf);
    *end = off;
    return count;
}
