/* The daemon's command line: its usage text (squeezefs help mount,
 * --help) and parsing, the -o strings parsed as they come (opts.c).
 *
 *   squeezefs [-f] [-d] [-s] [-o OPT,...] BACKING MOUNTPOINT [-o OPT,...] */
#include "mount/cmdline.h"
#include "mount/mount.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sqz_mount_usage(FILE *out)
{
    fprintf(out,
        "usage: squeezefs [-f] [-d] [-s] [-o OPT,...] BACKING MOUNTPOINT\n"
        "\n"
        "Mount BACKING on MOUNTPOINT; regular files are stored in BACKING as\n"
        "compressed containers.\n"
        "\n"
        "  -f                 stay in the foreground\n"
        "  -d                 debug output (implies -f)\n"
        "  -s                 single-threaded request loop\n"
        "  -h, --help         this help\n"
        "  -o OPT[,OPT...]    mount options:\n"
        "     compress=SPEC       default policy (default " SQZ_DEFAULT_SPEC "),\n"
        "                         SPEC = ALG[:LEVEL][/BLOCK] | auto[:ratio|:speed]\n"
        "                         | \"LBS ALG LEVEL\" (kdb+)\n"
        "                         ALG: %s\n"
        "                         kdb+ ALG: %s\n"
        "     block=SIZE          block size 4K..1M (or log2 12..20)\n"
        "     cache=SIZE          decompressed block cache (default 256M)\n"
        "     readahead=SIZE      kernel read-ahead window, 0 or 4K..64M\n"
        "                         (default 1M; needs root, else 128K)\n"
        "     threads=N           compression threads (default: cores)\n"
        "     max_fds=N           descriptors the daemon holds on its own\n"
        "                         (default 2048, at most half the fd limit)\n"
        "     min_saving=PCT      store a block raw unless compression saves\n"
        "                         PCT percent (default 12.5)\n"
        "     policy=FILE         rule file (lines: PATTERN SPEC\n"
        "                         [after AGE SPEC2])\n"
        "     tier=INTERVAL       background tiering pass every INTERVAL\n"
        "                         (30s, 10m, 1h, 1d; default off): files older\n"
        "                         than their policy's AGE are rewritten with SPEC2\n"
        "     tier_rate=SIZE      file data a tiering job rewrites per second\n"
        "                         (default 50M; 0 = unlimited)\n"
        "     writeback, nowriteback  the kernel writeback cache (default on,\n"
        "                         never with ro); nowriteback: every write(2)\n"
        "                         reaches the daemon at once (slower)\n"
        "     pack, nopack        pack small closed files into a pack file of\n"
        "                         their directory (default pack)\n"
        "     wait_writer=SECS    wait at most SECS (default 30; 0: not at\n"
        "                         all) for the previous writer of BACKING to\n"
        "                         finish its unmount\n"
        "     ro, rw              read-only (no writer lock), read-write\n"
        "     revalidate=SECS     ro mounts: how late an open descriptor may\n"
        "                         show the writer's change (default 1)\n"
        "     remount             change the live mount on MOUNTPOINT (mount -o\n"
        "                         remount): ro/rw, nosuid, nodev, noexec, the\n"
        "                         atime options; other options keep its values\n"
        "     allow_other         let other users in (implies\n"
        "                         default_permissions)\n"
        "     default_permissions let the kernel check permissions\n"
        "     io_uring            FUSE over io_uring instead of /dev/fuse\n"
        "                         (libfuse >= 3.18, kernel enable_uring=Y)\n"
        "     fsname=, subtype=, nosuid, nodev, noexec, noatime, auto_unmount,\n"
        "     allow_root, ...\n"
        "                         passed to FUSE\n"
        "\n"
        "fstab: BACKING MOUNTPOINT fuse.squeezefs defaults,compress=zstd:3 0 0\n",
        sqz_alg_names(), sqz_alg_kdb_names());
}

/* ---- logging ---- */


static int add_opts(struct cmdline *cl, struct sqz_mount_opts *o, const char *s)
{
    size_t old = cl->raw ? strlen(cl->raw) : 0;
    char *r = realloc(cl->raw, old + strlen(s) + 2);
    if (!r) {
        fprintf(stderr, "squeezefs: out of memory\n");
        return -1;
    }
    cl->raw = r;
    snprintf(r + old, strlen(s) + 2, "%s%s", old ? "," : "", s);
    char err[512];
    int rc = sqz_parse_mount_options(s, o, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "squeezefs: %s\n", err[0] ? err : strerror(-rc));
        return -1;
    }
    return 0;
}

int sqz_parse_cmdline(int argc, char **argv, struct cmdline *cl,
                         struct sqz_mount_opts *o)
{
    int only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && a[0] == '-' && a[1]) {
            if (strcmp(a, "--") == 0) {
                only_pos = 1;
            } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
                sqz_mount_usage(stdout);
                return 1;
            } else if (strcmp(a, "-f") == 0) {
                cl->foreground = 1;
            } else if (strcmp(a, "-d") == 0 || strcmp(a, "--debug") == 0) {
                cl->debug = 1;
                cl->foreground = 1;
            } else if (strcmp(a, "-s") == 0) {
                cl->single = 1;
            } else if (strcmp(a, "-o") == 0) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "squeezefs: -o needs an argument\n");
                    return -1;
                }
                if (add_opts(cl, o, argv[++i]))
                    return -1;
            } else if (strncmp(a, "-o", 2) == 0) {
                if (add_opts(cl, o, a + 2))
                    return -1;
            } else {
                fprintf(stderr, "squeezefs: unknown option '%s' (see --help)\n", a);
                return -1;
            }
            continue;
        }
        if (cl->npos >= 2) {
            fprintf(stderr, "squeezefs: unexpected argument '%s'\n", a);
            return -1;
        }
        cl->pos[cl->npos++] = a;
    }
    if (cl->npos != 2) {
        fprintf(stderr, "squeezefs: expected BACKING and MOUNTPOINT (see --help)\n");
        return -1;
    }
    sqz_mount_opts_finish(o);
    return 0;
}
