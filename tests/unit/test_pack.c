/* Unit tests of packed files (src/format/pack.c): pointer codec, append and
 * read back across algorithms and sizes, raw storage of incompressible
 * data, and damage of every kind read as an error, never as other bytes. */
#include "squeezefs/pack.h"
#include "squeezefs/codec.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static sqz_params params(sqz_alg alg, int level, int log2bs)
{
    sqz_params p = {.alg = alg, .level = level, .log2bs = log2bs,
                    .min_saving = 0, .auto_mode = 0};
    return p;
}

static void test_ptr_codec(void)
{
    sqz_pack_ptr p = {.pack_id = 0x1234, .off = 64, .length = 1000,
                      .stored_len = 300, .crc = 0xabcdef, .kind = 1,
                      .params = params(SQZ_ALG_ZSTD, 1, 17)};
    sqz_pack_ptr q;
    char err[160];
    /* version 1, and version 2 with the ctime shown */
    for (int v2 = 0; v2 < 2; v2++) {
        p.has_shown = v2;
        p.shown_ns = v2 ? 1795836060339612343LL : 0;
        p.shown_until = v2 ? 1795836061u : 0;
        uint8_t b[SQZ_PACK_PTR_MAX];
        size_t n = sqz_pack_ptr_encode(&p, b);
        CHECK_EQ_INT((int)n, v2 ? (int)SQZ_PACK_PTR_MAX : (int)SQZ_PACK_PTR_SIZE);
        CHECK_EQ_INT(sqz_pack_ptr_decode(b, n, &q, err, sizeof err), 0);
        CHECK(q.pack_id == p.pack_id && q.off == p.off && q.length == p.length &&
              q.stored_len == p.stored_len && q.crc == p.crc && q.kind == 1 &&
              q.params.alg == SQZ_ALG_ZSTD && q.params.level == 1 &&
              q.params.log2bs == 17 && q.has_shown == v2 &&
              q.shown_ns == p.shown_ns && q.shown_until == p.shown_until);
        /* every single-bit flip is caught */
        for (size_t i = 0; i < n * 8; i++) {
            b[i / 8] ^= (uint8_t)(1u << (i % 8));
            CHECK_EQ_INT(sqz_pack_ptr_decode(b, n, &q, err, sizeof err), -EBADMSG);
            b[i / 8] ^= (uint8_t)(1u << (i % 8));
        }
        CHECK_EQ_INT(sqz_pack_ptr_decode(b, n - 1, &q, err, sizeof err), -EBADMSG);
    }
    p.has_shown = 0;
    /* names */
    char name[SQZ_PACK_NAME_MAX];
    sqz_pack_name(0xfedcba9876543210ull, name);
    uint64_t id = 0;
    CHECK(sqz_pack_name_parse(name, &id) == 1 && id == 0xfedcba9876543210ull);
    CHECK(sqz_pack_name_parse(".sqz-tmp.pack.123", &id) == 0);
    CHECK(sqz_pack_name_parse(".sqz-tmp.pack.000000000000000g", &id) == 0);
    CHECK(sqz_pack_name_parse("foo", &id) == 0);
}

struct item {
    size_t len;
    int kind;
    sqz_pack_ptr ptr;
    unsigned char *data;
};

static void test_roundtrip(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    REQUIRE(dfd >= 0);
    static const sqz_alg algs[] = {SQZ_ALG_NONE, SQZ_ALG_QIPC, SQZ_ALG_GZIP, SQZ_ALG_SNAPPY,
                                   SQZ_ALG_LZ4, SQZ_ALG_LZ4HC, SQZ_ALG_ZSTD};
    static const size_t lens[] = {1, 7, 200, 4095, 4096, 4097, 20000, 65536, 131072};
    enum { N = sizeof algs / sizeof algs[0] * sizeof lens / sizeof lens[0] * 2 };
    struct item it[N];
    size_t n = 0;
    sqz_pack_writer w;
    REQUIRE(sqz_pack_writer_open(&w, dfd) == 0);
    for (size_t a = 0; a < sizeof algs / sizeof algs[0]; a++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
            for (int k = 0; k < 2; k++) {
                struct item *x = &it[n++];
                x->len = lens[l];
                x->kind = k ? 0 : 2; /* random / text */
                x->data = malloc(x->len);
                REQUIRE(x->data);
                sqz_test_fill(x->data, x->len, x->kind, n);
                sqz_params p = params(algs[a], sqz_level_default(algs[a]), 17);
                CHECK_EQ_INT(sqz_pack_append(&w, &p, x->data, x->len, &x->ptr), 0);
                if (x->kind == 0)
                    CHECK_EQ_INT(x->ptr.kind, 2); /* random data stays raw */
                if (x->kind == 2 && x->len >= 4096 && algs[a] != SQZ_ALG_NONE)
                    CHECK_EQ_INT(x->ptr.kind, 1);
            }
    /* too long, or longer than a block */
    sqz_params small = params(SQZ_ALG_ZSTD, 1, 12);
    sqz_pack_ptr dummy;
    CHECK_EQ_INT(sqz_pack_append(&w, &small, it[0].data, 4097, &dummy), -EINVAL);
    CHECK_EQ_INT(sqz_pack_writer_flush(&w), 0);
    uint64_t id = w.id, end = 0, cid = 0;
    char err[200];
    CHECK_EQ_INT(sqz_pack_check(w.fd, &cid, &end, err, sizeof err), (long)n);
    CHECK(cid == id && end == w.end);
    sqz_pack_writer_close(&w);

    for (size_t i = 0; i < n; i++) {
        unsigned char *buf = malloc(it[i].len);
        REQUIRE(buf);
        CHECK_EQ_INT(sqz_pack_read(dfd, &it[i].ptr, buf, err, sizeof err), 0);
        CHECK(memcmp(buf, it[i].data, it[i].len) == 0);
        free(buf);
    }

    /* a pointer that names another entry of the same pack, or is off by
     * eight bytes, or has another checksum: an error, never other bytes */
    unsigned char *buf = malloc(SQZ_PACK_MAX_LENGTH);
    REQUIRE(buf);
    sqz_pack_ptr p = it[3].ptr;
    p.off = it[4].ptr.off;
    CHECK_EQ_INT(sqz_pack_read(dfd, &p, buf, err, sizeof err), -EIO);
    p = it[3].ptr;
    p.off += 8;
    CHECK_EQ_INT(sqz_pack_read(dfd, &p, buf, err, sizeof err), -EIO);
    p = it[3].ptr;
    p.crc ^= 1;
    CHECK_EQ_INT(sqz_pack_read(dfd, &p, buf, err, sizeof err), -EIO);
    p = it[3].ptr;
    p.pack_id ^= 1;
    CHECK_EQ_INT(sqz_pack_read(dfd, &p, buf, err, sizeof err), -EIO);

    /* damage every byte of one entry in turn (header and stored bytes) */
    char name[SQZ_PACK_NAME_MAX];
    sqz_pack_name(id, name);
    int pfd = openat(dfd, name, O_RDWR);
    REQUIRE(pfd >= 0);
    struct item *x = &it[13];
    size_t span = SQZ_PACK_ENTRY_HDR + x->ptr.stored_len;
    for (size_t i = 0; i < span; i++) {
        unsigned char b, f;
        REQUIRE(pread(pfd, &b, 1, (off_t)(x->ptr.off + i)) == 1);
        f = b ^ 0x40;
        REQUIRE(pwrite(pfd, &f, 1, (off_t)(x->ptr.off + i)) == 1);
        int r = sqz_pack_read(dfd, &x->ptr, buf, err, sizeof err);
        CHECK_EQ_INT(r, -EIO);
        uint64_t e2, id2;
        CHECK(sqz_pack_check(pfd, &id2, &e2, err, sizeof err) == -EBADMSG);
        REQUIRE(pwrite(pfd, &b, 1, (off_t)(x->ptr.off + i)) == 1);
    }
    /* a truncated pack: entries past the end are errors */
    struct stat st;
    REQUIRE(fstat(pfd, &st) == 0);
    REQUIRE(ftruncate(pfd, (off_t)it[n - 1].ptr.off + 10) == 0);
    CHECK_EQ_INT(sqz_pack_read(dfd, &it[n - 1].ptr, buf, err, sizeof err), -EIO);
    CHECK_EQ_INT(sqz_pack_read(dfd, &it[0].ptr, buf, err, sizeof err), 0);
    close(pfd);
    /* a missing pack */
    REQUIRE(unlinkat(dfd, name, 0) == 0);
    CHECK_EQ_INT(sqz_pack_read(dfd, &it[0].ptr, buf, err, sizeof err), -EIO);
    CHECK(strstr(err, "cannot be opened") != NULL);
    free(buf);
    for (size_t i = 0; i < n; i++)
        free(it[i].data);
    close(dfd);
}

/* The pointer xattr on a file, and sqz_pack_loadat. */
static void test_load_path(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    REQUIRE(dfd >= 0);
    sqz_pack_writer w;
    REQUIRE(sqz_pack_writer_open(&w, dfd) == 0);
    char text[3000];
    sqz_test_fill(text, sizeof text, 2, 7);
    sqz_params p = params(SQZ_ALG_ZSTD, 1, 17);
    sqz_pack_ptr ptr;
    REQUIRE(sqz_pack_append(&w, &p, text, sizeof text, &ptr) == 0);
    REQUIRE(sqz_pack_writer_flush(&w) == 0);
    sqz_pack_writer_close(&w);
    char path[4096];
    snprintf(path, sizeof path, "%s/small", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    int r = sqz_pack_ptr_set(fd, &ptr);
    if (r == -ENOTSUP || r == -EOPNOTSUPP) {
        fprintf(stderr, "no user xattrs in %s: load_path not tested\n", dir);
        close(fd);
        close(dfd);
        return;
    }
    REQUIRE(r == 0);
    sqz_pack_ptr q;
    void *buf = NULL;
    char err[200];
    CHECK_EQ_INT(sqz_pack_loadat(dfd, "small", &q, &buf, err, sizeof err), 1);
    CHECK(buf && memcmp(buf, text, sizeof text) == 0 && q.length == sizeof text);
    free(buf);
    /* a symlink to it is not followed: no pointer */
    REQUIRE(symlinkat("small", dfd, "link") == 0);
    CHECK_EQ_INT(sqz_pack_loadat(dfd, "link", &q, &buf, err, sizeof err), 0);
    CHECK_EQ_INT(sqz_pack_ptr_getat(dfd, "link", &q, err, sizeof err), 0);
    CHECK_EQ_INT(sqz_pack_ptr_getat(dfd, "small", &q, err, sizeof err), 1);
    REQUIRE(unlinkat(dfd, "link", 0) == 0);
    /* a backing file with bytes is not packed, whatever it carries */
    REQUIRE(pwrite(fd, "x", 1, 0) == 1);
    CHECK_EQ_INT(sqz_pack_loadat(dfd, "small", &q, &buf, err, sizeof err), 0);
    REQUIRE(ftruncate(fd, 0) == 0);
    /* a damaged pointer */
    uint8_t b[SQZ_PACK_PTR_MAX];
    size_t bn = sqz_pack_ptr_encode(&ptr, b);
    b[20] ^= 1;
    REQUIRE(fsetxattr(fd, SQZ_PACK_XATTR, b, bn, 0) == 0);
    CHECK_EQ_INT(sqz_pack_loadat(dfd, "small", &q, &buf, err, sizeof err), -EBADMSG);
    CHECK(buf == NULL);
    /* no pointer: an empty file */
    REQUIRE(fremovexattr(fd, SQZ_PACK_XATTR) == 0);
    CHECK_EQ_INT(sqz_pack_loadat(dfd, "small", &q, &buf, err, sizeof err), 0);
    close(fd);
    close(dfd);
}

/* sqz_pack_header_is: a pack's own header, or the start of it (a creation
 * torn by a crash), never another pack's or other bytes (rmdir through
 * the mount removes only what it tells is a pack). */
static void test_header_is(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    REQUIRE(dfd >= 0);
    sqz_pack_writer w;
    REQUIRE(sqz_pack_writer_open(&w, dfd) == 0);
    uint8_t h[SQZ_PACK_HDR_SIZE + 100];
    memset(h, 0xab, sizeof h);
    REQUIRE(pread(w.fd, h, SQZ_PACK_HDR_SIZE, 0) == SQZ_PACK_HDR_SIZE);
    CHECK_EQ_INT(sqz_pack_header_is(w.fd, w.id), 1);
    CHECK_EQ_INT(sqz_pack_header_is(w.fd, w.id ^ 1), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/hdr", dir);
    static const size_t cuts[] = {0, 1, 8, 20, 63, 64, 164};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        REQUIRE(fd >= 0);
        REQUIRE(write(fd, h, cuts[i]) == (ssize_t)cuts[i]);
        CHECK_EQ_INT(sqz_pack_header_is(fd, w.id), 1);
        if (cuts[i] > 20) { /* the id differs from byte 16 on */
            CHECK_EQ_INT(sqz_pack_header_is(fd, w.id ^ 0x100), 0);
        }
        if (cuts[i] > 0) { /* one byte changed: not a pack */
            uint8_t b = h[cuts[i] / 2] ^ 1;
            REQUIRE(pwrite(fd, &b, 1, (off_t)(cuts[i] / 2)) == 1);
            CHECK_EQ_INT(sqz_pack_header_is(fd, w.id), cuts[i] / 2 >= SQZ_PACK_HDR_SIZE);
        }
        close(fd);
    }
    sqz_pack_writer_close(&w);
    close(dfd);
}

int main(void)
{
    char *dir = sqz_test_tmpdir();
    REQUIRE(dir);
    test_ptr_codec();
    test_roundtrip(dir);
    test_load_path(dir);
    test_header_is(dir);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(dir);
    return sqz_test_done("pack");
}
