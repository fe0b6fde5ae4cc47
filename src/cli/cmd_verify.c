/* verify [-v] PATH...: check every container under the paths (checksums,
 * decompression, index) and name each damaged file and block. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct verify_ctx {
    bool verbose;
    unsigned long checked, damaged, skipped, errors;
    const char *current;
} verify_ctx;

static void report(void *user, const char *msg)
{
    verify_ctx *x = user;
    printf("%s: %s\n", x->current, msg);
}

static int verify_file(void *user, const char *path, const char *rel,
                       const struct stat *st)
{
    (void)rel;
    verify_ctx *x = user;
    if (!S_ISREG(st->st_mode))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        cli_err("%s: %s", path, strerror(errno));
        x->errors++;
        return 0;
    }
    int pr = sqz_ctr_probe_fd(fd);
    if (pr == 0) {
        if (x->verbose)
            printf("%s: skipped (not a container)\n", path);
        x->skipped++;
        close(fd);
        return 0;
    }
    if (pr < 0 && pr != -EBADMSG) { /* -EBADMSG: damaged header, verify it */
        cli_err("%s: %s", path, strerror(-pr));
        x->errors++;
        close(fd);
        return 0;
    }
    x->current = path;
    int n = sqz_verify_fd(fd, path, report, x);
    close(fd);
    x->checked++;
    if (n < 0) {
        printf("%s: cannot be read: %s\n", path, strerror(-n));
        x->damaged++;
    } else if (n > 0) {
        printf("%s: DAMAGED (%d problem%s)\n", path, n, n == 1 ? "" : "s");
        x->damaged++;
    } else if (x->verbose) {
        printf("%s: ok\n", path);
    }
    fflush(stdout);
    return 0;
}

static void quiet_log(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    (void)msg; /* the report callback already names every problem */
}

int cmd_verify(int argc, char **argv)
{
    verify_ctx x = {0};
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "-v") || !strcmp(argv[first], "--verbose")) {
            x.verbose = true;
        } else {
            cli_err("unknown option '%s'", argv[first]);
            first = argc;
        }
    }
    if (first >= argc) {
        fprintf(stderr, "usage: squeezefs verify [-v] PATH...\n");
        return CLI_USAGE;
    }
    sqz_set_log(quiet_log, NULL);
    for (int i = first; i < argc; i++) {
        int r = tree_walk(argv[i], verify_file, NULL, &x);
        if (r < 0) {
            cli_err("%s: %s", argv[i], strerror(-r));
            x.errors++;
        }
    }
    printf("%lu file%s checked, %lu damaged", x.checked, x.checked == 1 ? "" : "s",
           x.damaged);
    if (x.skipped)
        printf(", %lu not containers (skipped)", x.skipped);
    printf("\n");
    return (x.damaged || x.errors) ? CLI_FAIL : CLI_OK;
}
