/* stat [--json] PATH...: a container's (or packed file's) figures, as
 * kdb+'s -21!. On a mount they come from the daemon (xattr
 * user.squeezefs.stat), else from opening the path as a container or a
 * packed file (ctr_stat.c). */
#include <errno.h>
#include <string.h>

#include "cli.h"

static void print_json(json_w *w, const char *path, const cli_ctr_figures *fs)
{
    json_begin_obj(w);
    json_kv_str(w, "path", path);
    json_kv_u64(w, "compressedLength", fs->compressed);
    json_kv_u64(w, "uncompressedLength", fs->uncompressed);
    json_kv_u64(w, "storedBytes", fs->stored);
    json_kv_str(w, "algorithm", fs->algorithm);
    json_key(w, "zipLevel"); json_i64(w, fs->level);
    json_key(w, "logicalBlockSize"); json_i64(w, fs->log2bs);
    json_kv_u64(w, "blocks", fs->blocks);
    json_kv_u64(w, "rawBlocks", fs->raw_blocks);
    json_kv_u64(w, "holeBlocks", fs->hole_blocks);
    json_key(w, "ratio"); json_double(w, fs->ratio);
    json_kv_u64(w, "backingSize", fs->backing_size);
    json_kv_u64(w, "backingAlloc", fs->backing_alloc);
    json_key(w, "auto"); json_bool(w, fs->is_auto);
    json_key(w, "packed"); json_bool(w, fs->packed);
    if (fs->pack[0]) {
        json_kv_str(w, "pack", fs->pack);
    }
    json_end_obj(w);
}

static void print_text(const char *path, const cli_ctr_figures *fs, bool first)
{
    if (!first)
        printf("\n");
    printf("%s\n", path);
    printf("  compressedLength:   %llu\n", (unsigned long long)fs->compressed);
    printf("  uncompressedLength: %llu\n", (unsigned long long)fs->uncompressed);
    printf("  storedBytes:        %llu\n", (unsigned long long)fs->stored);
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
    printf("  packed:             %s\n", fs->packed ? "true" : "false");
    if (fs->pack[0])
        printf("  pack:               %s\n", fs->pack);
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
        cli_ctr_figures fs;
        int r = cli_ctr_figures_get(NULL, path, cli_on_mount(path), &fs);
        if (r == -EMEDIUMTYPE) {
            cli_err("%s: not a squeezefs container", path);
            bad = 1;
            continue;
        }
        if (r < 0) {
            if (r == -EBADMSG && fs.why[0])
                cli_err("%s: %s", path, fs.why);
            else if (r == -EBADMSG)
                cli_err("%s: damaged container", path);
            else if (r != -EPROTO) /* -EPROTO: already said */
                cli_err("%s: %s", path, strerror(-r));
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
