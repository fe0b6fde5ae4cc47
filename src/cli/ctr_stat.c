/* The figures of one container or packed file, as `squeezefs stat` shows
 * them and `squeezefs du` adds them up. On a mount they come from the
 * daemon (xattr user.squeezefs.stat, which also commits the file's dirty
 * blocks first), else from opening the path as a container or reading a
 * packed file's pointer and entry. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* A packed file's figures: 1, 0 not packed, or -errno (-EBADMSG: damaged,
 * fs->why says what). Its entry is read and checked, so a missing pack
 * or a damaged entry is never shown as a file. */
static int from_packed(int fd, const tree_at *at, const char *path,
                       const struct stat *bst, cli_ctr_figures *fs)
{
    sqz_pack_ptr p;
    void *buf;
    int r = cli_packed_load(fd, at, path, &p, &buf, fs->why, sizeof fs->why);
    if (r <= 0)
        return r == -EIO ? -EBADMSG : r;
    free(buf);
    const char *name = sqz_alg_name(p.params.alg);
    snprintf(fs->algorithm, sizeof fs->algorithm, "%s", name ? name : "?");
    fs->level = p.params.level;
    fs->log2bs = p.params.log2bs;
    fs->uncompressed = p.length;
    /* as the daemon counts it: the bytes its entry takes in the pack */
    fs->compressed = SQZ_PACK_ENTRY_HDR + p.stored_len;
    fs->stored = p.stored_len;
    fs->blocks = 1;
    fs->raw_blocks = p.kind == 2; /* pack.h: 1 compressed, 2 raw */
    fs->backing_size = (uint64_t)bst->st_size;
    fs->backing_alloc = (uint64_t)bst->st_blocks * 512;
    fs->ratio = (double)fs->uncompressed / (double)fs->compressed;
    fs->is_auto = p.params.auto_mode != 0;
    fs->packed = true;
    sqz_pack_name(p.pack_id, fs->pack);
    return 1;
}

static int from_container(const tree_at *at, const char *path, cli_ctr_figures *fs)
{
    int fd = at ? openat(at->dirfd, at->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
                : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int pr = sqz_ctr_probe_fd(fd);
    struct stat bst;
    if (pr >= 0 && fstat(fd, &bst) == 0 && S_ISREG(bst.st_mode) &&
        (bst.st_size == 0 || cli_unpack_torn(fd, pr))) {
        int r = from_packed(fd, at, path, &bst, fs);
        if (r != 0) {
            close(fd);
            return r < 0 ? r : 0;
        }
    }
    if (pr <= 0 || pr == SQZ_PROBE_TORN) {
        close(fd);
        return pr < 0 ? pr : -EMEDIUMTYPE;
    }
    sqz_ctr *c;
    int r = sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, path, &c);
    if (r < 0)
        return r;
    struct sqz_ctr_stat st;
    r = sqz_ctr_stat(c, &st);
    sqz_ctr_close(c);
    if (r < 0)
        return r;
    const char *name = sqz_alg_name(st.params.alg);
    snprintf(fs->algorithm, sizeof fs->algorithm, "%s", name ? name : "?");
    fs->level = st.params.level;
    fs->log2bs = st.params.log2bs;
    fs->uncompressed = st.length;
    /* as kdb+: the compressed length is the size of the file on disk */
    fs->compressed = st.backing_size;
    fs->stored = st.compressed_bytes;
    fs->blocks = st.blocks;
    fs->raw_blocks = st.raw_blocks;
    fs->hole_blocks = st.hole_blocks;
    fs->backing_size = st.backing_size;
    fs->backing_alloc = st.backing_alloc;
    fs->ratio = fs->compressed ? (double)fs->uncompressed / (double)fs->compressed : 0;
    fs->is_auto = st.params.auto_mode != 0;
    return 0;
}

static int need(const char *path, const json_flat *o, const char *key,
                json_kind kind, const json_field **f)
{
    *f = json_flat_get(o, key);
    if (!*f || (*f)->kind != kind) {
        cli_err("%s: the daemon's stat has no %s '%s'", path,
                kind == JSON_NUM ? "number" : kind == JSON_STR ? "string" : "bool", key);
        return -EPROTO;
    }
    return 0;
}

static int from_mount(const char *path, cli_ctr_figures *fs)
{
    char *text;
    int r = cli_get_xattr(path, SQZ_XATTR_STAT, &text);
    if (r < 0)
        return r == -ENODATA ? -EMEDIUMTYPE : r;
    json_flat o;
    char err[128];
    r = json_flat_parse(text, &o, err, sizeof err);
    free(text);
    if (r < 0) {
        cli_err("%s: %s", path, err);
        return r == -EBADMSG ? -EPROTO : r;
    }
    const json_field *f;
    struct { const char *key; uint64_t *dst; } nums[] = {
        {"compressedLength", &fs->compressed}, {"uncompressedLength", &fs->uncompressed},
        {"storedBytes", &fs->stored},
        {"blocks", &fs->blocks}, {"rawBlocks", &fs->raw_blocks},
        {"holeBlocks", &fs->hole_blocks}, {"backingSize", &fs->backing_size},
        {"backingAlloc", &fs->backing_alloc},
    };
    for (size_t i = 0; r == 0 && i < sizeof nums / sizeof nums[0]; i++)
        if ((r = need(path, &o, nums[i].key, JSON_NUM, &f)) == 0)
            *nums[i].dst = strtoull(f->str, NULL, 10);
    if (r == 0 && (r = need(path, &o, "algorithm", JSON_STR, &f)) == 0)
        snprintf(fs->algorithm, sizeof fs->algorithm, "%.31s", f->str);
    if (r == 0 && (r = need(path, &o, "zipLevel", JSON_NUM, &f)) == 0)
        fs->level = (int)f->num;
    if (r == 0 && (r = need(path, &o, "logicalBlockSize", JSON_NUM, &f)) == 0)
        fs->log2bs = (int)f->num;
    if (r == 0 && (r = need(path, &o, "ratio", JSON_NUM, &f)) == 0)
        fs->ratio = f->num;
    if (r == 0 && (r = need(path, &o, "auto", JSON_BOOL, &f)) == 0)
        fs->is_auto = f->b;
    /* "packed": daemons that pack files say so (older ones do not) */
    if (r == 0 && (f = json_flat_get(&o, "packed")) && f->kind == JSON_BOOL)
        fs->packed = f->b;
    json_flat_free(&o);
    return r;
}

int cli_ctr_figures_get(const tree_at *at, const char *path, bool on_mount,
                        cli_ctr_figures *out)
{
    memset(out, 0, sizeof *out);
    return on_mount ? from_mount(path, out) : from_container(at, path, out);
}
