/* Test helper (tests/test_cli.py): make packed files offline, as the
 * daemon's durable thread does (docs/FORMAT.md "Packed files").
 *
 *   mkpacked [-a ALG] [-l LEVEL] [-b LOG2BS] [-m MIN_SAVING] FILE...
 *
 * Every FILE (plain files of 1..65536 bytes, all in one directory) is
 * appended to a new pack of that directory, the pack is synced, then each
 * FILE is truncated to 0 bytes and given the pointer. Prints the pack's
 * file name. Defaults: zstd, its default level, log2 block size 17,
 * min_saving 125 permille. */
#include "squeezefs/codec.h"
#include "squeezefs/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int die(const char *what, const char *why)
{
    fprintf(stderr, "mkpacked: %s: %s\n", what, why);
    return 1;
}

static char *dir_of(const char *path)
{
    const char *s = strrchr(path, '/');
    if (!s)
        return strdup(".");
    if (s == path)
        return strdup("/");
    return strndup(path, (size_t)(s - path));
}

int main(int argc, char **argv)
{
    sqz_params p = {.alg = SQZ_ALG_ZSTD, .level = -1000, .log2bs = 17,
                    .min_saving = 125, .auto_mode = 0};
    int o;
    char err[160];
    while ((o = getopt(argc, argv, "a:l:b:m:")) != -1) {
        if (o == 'a' && sqz_alg_from_name(optarg, &p.alg, err, sizeof err) < 0)
            return die(optarg, err);
        if (o == 'l')
            p.level = atoi(optarg);
        if (o == 'b')
            p.log2bs = (uint8_t)atoi(optarg);
        if (o == 'm')
            p.min_saving = (unsigned)atoi(optarg);
        if (o == '?')
            return 2;
    }
    if (optind >= argc) {
        fprintf(stderr, "usage: mkpacked [-a ALG] [-l LEVEL] [-b LOG2BS] "
                        "[-m MIN_SAVING] FILE...\n");
        return 2;
    }
    if (p.level == -1000)
        p.level = sqz_level_default(p.alg);
    if (sqz_params_check(&p, err, sizeof err) < 0)
        return die("params", err);
    char *dir = dir_of(argv[optind]);
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd < 0)
        return die(dir ? dir : "dir", strerror(errno));
    sqz_pack_writer w;
    int r = sqz_pack_writer_open(&w, dfd);
    if (r < 0)
        return die("pack", strerror(-r));
    int n = argc - optind;
    sqz_pack_ptr *ptrs = calloc((size_t)n, sizeof *ptrs);
    unsigned char *buf = malloc(SQZ_PACK_MAX_LENGTH + 1);
    if (!ptrs || !buf)
        return die("memory", strerror(ENOMEM));
    for (int i = 0; i < n; i++) {
        const char *f = argv[optind + i];
        int fd = open(f, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return die(f, strerror(errno));
        ssize_t got = read(fd, buf, SQZ_PACK_MAX_LENGTH + 1);
        close(fd);
        if (got < 0)
            return die(f, strerror(errno));
        r = sqz_pack_append(&w, &p, buf, (size_t)got, &ptrs[i]);
        if (r < 0)
            return die(f, strerror(-r));
    }
    if ((r = sqz_pack_writer_flush(&w)) < 0)
        return die("flush", strerror(-r));
    for (int i = 0; i < n; i++) {
        const char *f = argv[optind + i];
        int fd = open(f, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (fd < 0)
            return die(f, strerror(errno));
        if ((r = sqz_pack_ptr_set(fd, &ptrs[i])) < 0)
            return die(f, strerror(-r));
        close(fd);
    }
    char name[SQZ_PACK_NAME_MAX];
    sqz_pack_name(w.id, name);
    printf("%s\n", name);
    sqz_pack_writer_close(&w);
    close(dfd);
    free(ptrs);
    free(buf);
    free(dir);
    return 0;
}
