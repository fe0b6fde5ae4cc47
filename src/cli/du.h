/* squeezefs du (cmd_du.c): what is counted, shared with its output
 * (du_print.c). */
#ifndef SQZ_CLI_DU_H
#define SQZ_CLI_DU_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cli.h"

typedef struct du_fig {
    uint64_t files;
    uint64_t logical; /* uncompressed length (st_size through a mount) */
    uint64_t stored;  /* stored bytes of the live blocks (plain: st_size) */
    uint64_t disk;    /* allocated by the backing file: st_blocks * 512 */
    uint64_t blocks, raw_blocks, hole_blocks;
} du_fig;

typedef struct du_packs { /* pack files (.sqz-tmp.pack.*): not user files */
    uint64_t count;
    uint64_t bytes;   /* st_size */
    uint64_t disk;    /* st_blocks * 512, in the DISK totals */
} du_packs;

typedef struct du_alg {
    char name[32];
    du_fig f;
} du_alg;

typedef struct du_dir { /* --by-dir: a subdirectory of a PATH, or its top */
    char *path;
    bool top;           /* files directly in PATH (or PATH is a file) */
    bool is_file;       /* top, and PATH is a file */
    du_fig f;
    uint64_t damaged, unreadable;
} du_dir;

typedef struct du_problem {
    char *path;
    char *what;
} du_problem;

typedef struct dev_mode {
    dev_t dev;
    bool on_mount;
} dev_mode;

typedef struct ino_set { /* open addressing on (dev, ino) */
    struct { dev_t dev; ino_t ino; bool used; } *v;
    size_t cap, n;
} ino_set;

typedef struct du_ctx {
    bool json, by_dir;
    du_alg *algs;
    size_t nalgs, cap_algs;
    du_fig plain;
    du_fig packed;        /* the packed files among the containers */
    du_packs packs;
    uint64_t dirs, symlinks, other, damaged, unreadable;
    du_problem *problems;
    size_t nproblems, cap_problems;
    du_dir *dirv;
    size_t ndirs, cap_dirs;
    size_t top, sub;      /* --by-dir buckets of the current PATH */
    bool have_sub;
    dev_mode *modes;
    size_t nmodes;
    ino_set links;
    cli_progress pg;
    char why[512];        /* the container library's last message */
    bool oom;
} du_ctx;

/* du_print.c: the report. containers: all containers (packed files
 * included); total: every regular file (DISK also the packs'). */
void du_print_json(const du_ctx *x, int npaths, char **paths,
                   const du_fig *containers, const du_fig *total);
void du_print_text(const du_ctx *x, const du_fig *total);

#endif
