/* The daemon's command line (cmdline.c). Internal header. */
#ifndef SQZ_MOUNT_CMDLINE_H
#define SQZ_MOUNT_CMDLINE_H

#include "daemon/opts.h"

struct cmdline {
    int foreground, debug, single;
    const char *pos[2];
    int npos;
    char *raw; /* every -o string, joined by ',' (for a remount) */
};

/* argv into cl and o (every -o string parsed as it comes, messages on
 * stderr): 1 = done (help shown), 0 = go on, -1 = error. */
int sqz_parse_cmdline(int argc, char **argv, struct cmdline *cl,
                      struct sqz_mount_opts *o);

#endif
