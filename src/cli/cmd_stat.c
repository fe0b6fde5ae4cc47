/* stat [--json] PATH...: a container's figures, as kdb+'s -21!. On a mount
 * they come from the daemon (xattr user.squeezefs.stat), else from opening
 * the path as a container. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct file_stat {
    uint64_t compressed, uncompressed;
    char algorithm[256];
    int level, log2bs;
    uint64_t blocks, raw_blocks, hole_blocks;
    double ratio;
    uint64_t backing_size, backing_alloc;
    bool is_auto;
} file_stat;

static int from_container(const char *path, file_stat *fs)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int pr = sqz_ctr_probe_fd(fd);
    if (pr <= 0) {
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
    fs->blocks = st.blocks;
    fs->raw_blocks = st.raw_blocks;
    fs->hole_blocks = st.hole_blocks;
    fs->backing_size = st.backing_size;
    fs->backing_alloc = st.backing_alloc;
    fs->ratio = fs->compressed ? (double)fs->uncompressed / (double)fs->compressed : 0;
    fs->is_auto = st.params.auto_mode != 0;
    return 0;
}

static int need(const json_flat *o, const char *key, json_kind kind,
                const json_field **f)
{
    *f = json_flat_get(o, key);
    if (!*f || (*f)->kind != kind) {
        cli_err("the daemon's stat has no %s '%s'",
                kind == JSON_NUM ? "number" : kind == JSON_STR ? "string" : "bool", key);
        return -EBADMSG;
    }
    return 0;
}

static int from_mount(const char *path, file_stat *fs)
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
        return r;
    }
    const json_field *f;
    struct { const char *key; uint64_t *dst; } nums[] = {
        {"compressedLength", &fs->compressed}, {"uncompressedLength", &fs->uncompressed},
        {"blocks", &fs->blocks}, {"rawBlocks", &fs->raw_blocks},
        {"holeBlocks", &fs->hole_blocks}, {"backingSize", &fs->backing_size},
        {"backingAlloc", &fs->backing_alloc},
    };
    for (size_t i = 0; r == 0 && i < sizeof nums / sizeof nums[0]; i++)
        if ((r = need(&o, nums[i].key, JSON_NUM, &f)) == 0)
            *nums[i].dst = strtoull(f->str, NULL, 10);
    if (r == 0 && (r = need(&o, "algorithm", JSON_STR, &f)) == 0)
        snprintf(fs->algorithm, sizeof fs->algorithm, "%s", f->str);
    if (r == 0 && (r = need(&o, "zipLevel", JSON_NUM, &f)) == 0)
        fs->level = (int)f->num;
    if (r == 0 && (r = need(&o, "logicalBlockSize", JSON_NUM, &f)) == 0)
        fs->log2bs = (int)f->num;
    if (r == 0 && (r = need(&o, "ratio", JSON_NUM, &f)) == 0)
        fs->ratio = f->num;
    if (r == 0 && (r = need(&o, "auto", JSON_BOOL, &f)) == 0)
        fs->is_auto = f->b;
    json_flat_free(&o);
    return r;
}

static void print_json(json_w *w, const char *path, const file_stat *fs)
{
    json_begin_obj(w);
    json_key(w, "path"); json_str(w, path);
    json_key(w, "compressedLength"); json_u64(w, fs->compressed);
    json_key(w, "uncompressedLength"); json_u64(w, fs->uncompressed);
    json_key(w, "algorithm"); json_str(w, fs->algorithm);
    json_key(w, "zipLevel"); json_i64(w, fs->level);
    json_key(w, "logicalBlockSize"); json_i64(w, fs->log2bs);
    json_key(w, "blocks"); json_u64(w, fs->blocks);
    json_key(w, "rawBlocks"); json_u64(w, fs->raw_blocks);
    json_key(w, "holeBlocks"); json_u64(w, fs->hole_blocks);
    json_key(w, "ratio"); json_double(w, fs->ratio);
    json_key(w, "backingSize"); json_u64(w, fs->backing_size);
    json_key(w, "backingAlloc"); json_u64(w, fs->backing_alloc);
    json_key(w, "auto"); json_bool(w, fs->is_auto);
    json_end_obj(w);
}

static void print_text(const char *path, const file_stat *fs, bool first)
{
    if (!first)
        printf("\n");
    printf("%s\n", path);
    printf("  compressedLength:   %llu\n", (unsigned long long)fs->compressed);
    printf("  uncompressedLength: %llu\n", (unsigned long long)fs->uncompressed);
    printf("  algorithm:          %s\n", fs->algorithm);
    printf("  zipLevel:           %d\n", fs->level);
    printf("  logicalBlockSize:   %d\n", fs->log2bs);
    printf("  blocks:             %llu\n", (unsigned long long)fs->blocks);
    printf("  rawBlocks:          %llu\n", (unsigned long long)fs->raw_blocks);
    printf("  holeBlocks:         %llu\n", (unsigned long long)fs->hole_blocks);
    printf("  ratio:              %.3f\n", fs->ratio);
    printf("  backingSize:        %llu\n", (unsigned long long)fs->backing_size);
    printf("  backingAlloc:       %llu\n", (unsigned long long)fs->backing_alloc);
    printf("  auto:               %s\n", fs->is_auto ? "true" : "false");
}

int cmd_stat(int argc, char **argv)
{
    bool json = false;
    int first = 1;
    if (argc > 1 && !strcmp(argv[1], "--json")) {
        json = true;
        first = 2;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: squeezefs stat [--json] PATH...\n");
        return CLI_USAGE;
    }
    int n = argc - first;
    json_w w;
    json_init(&w, stdout, true);
    if (json && n > 1)
        json_begin_arr(&w);
    int bad = 0, shown = 0;
    for (int i = first; i < argc; i++) {
        const char *path = argv[i];
        file_stat fs;
        memset(&fs, 0, sizeof fs);
        int r = cli_on_mount(path) ? from_mount(path, &fs) : from_container(path, &fs);
        if (r == -EMEDIUMTYPE) {
            cli_err("%s: not a squeezefs container", path);
            bad = 1;
            continue;
        }
        if (r < 0) {
            if (r != -EBADMSG)
                cli_err("%s: %s", path, strerror(-r));
            else
                cli_err("%s: damaged container", path);
            bad = 1;
            continue;
        }
        if (json)
            print_json(&w, path, &fs);
        else
            print_text(path, &fs, shown == 0);
        shown++;
    }
    if (json && n > 1)
        json_end_arr(&w);
    fflush(stdout);
    return bad ? CLI_FAIL : CLI_OK;
}
