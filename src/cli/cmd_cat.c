/* cat FILE...: the plain bytes of containers and packed files (plain files
 * verbatim). A damaged file is named on stderr; its bytes are never
 * written (a packed file's content is checked before any is). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static int cat_one(const char *path)
{
    cli_src in;
    int r = cli_src_open(path, &in);
    if (r < 0) {
        cli_err("%s: %s", path, cli_src_why(&in, r));
        return r;
    }
    if (in.ctr) {
        r = cli_ctr_dump(in.ctr, STDOUT_FILENO, false, NULL);
    } else {
        enum { CHUNK = 1 << 20 };
        char *buf = malloc(CHUNK);
        r = buf ? 0 : -ENOMEM;
        for (uint64_t off = 0; r == 0 && off < in.len;) {
            ssize_t n = cli_src_pread(&in, buf, CHUNK, off);
            if (n <= 0) {
                r = (int)n;
                break;
            }
            for (ssize_t done = 0; done < n;) {
                ssize_t w = write(STDOUT_FILENO, buf + done, (size_t)(n - done));
                if (w < 0) {
                    if (errno == EINTR)
                        continue;
                    r = -errno;
                    break;
                }
                done += w;
            }
            off += (uint64_t)n;
        }
        free(buf);
    }
    cli_src_close(&in);
    if (r < 0)
        cli_err("%s: %s", path, strerror(-r));
    return r;
}

int cmd_cat(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: squeezefs cat FILE...\n");
        return CLI_USAGE;
    }
    int bad = 0;
    for (int i = 1; i < argc; i++)
        if (cat_one(argv[i]) < 0)
            bad = 1;
    return bad ? CLI_FAIL : CLI_OK;
}
