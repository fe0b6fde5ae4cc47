/* ACCESS and the permission check by mode bits (sqz_req_may) that
 * CREATE uses too. Split from ops_entry.c (its size). */
#include "daemon/fs.h"
#include "node/inode.h"
#include "fuse/ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Is gid one of the caller's supplementary groups? All of them count (a
 * user may be in hundreds: NGROUPS_MAX is 65536). */
static int in_supplementary_groups(fuse_req_t req, gid_t gid)
{
    gid_t small[64];
    gid_t *g = small;
    int n = fuse_req_getgroups(req, 64, small);
    if (n > 64) {
        g = malloc((size_t)n * sizeof(*g));
        if (!g)
            return 0;
        int m = fuse_req_getgroups(req, n, g);
        n = m < n ? m : n; /* the list may have changed meanwhile */
    }
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        found = g[i] == gid;
    if (g != small)
        free(g);
    return found;
}

/* ACCESS is only reached without default_permissions (then only the
 * mounting user can use the mount); CREATE of a name made meanwhile asks
 * too (ops_file.c). */
int sqz_req_may(fuse_req_t req, const struct stat *st, int mask)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    if (mask == F_OK)
        return 0;
    if (ctx->uid == 0) {
        /* root: X needs at least one x bit (or a directory). */
        int ok = !(mask & X_OK) || S_ISDIR(st->st_mode) ||
                 (st->st_mode & (S_IXUSR | S_IXGRP | S_IXOTH));
        return ok ? 0 : -EACCES;
    }
    mode_t bits;
    if (ctx->uid == st->st_uid) {
        bits = (st->st_mode >> 6) & 7;
    } else {
        int ingroup = ctx->gid == st->st_gid;
        if (!ingroup)
            ingroup = in_supplementary_groups(req, st->st_gid);
        bits = ingroup ? (st->st_mode >> 3) & 7 : st->st_mode & 7;
    }
    int need = ((mask & R_OK) ? 4 : 0) | ((mask & W_OK) ? 2 : 0) |
               ((mask & X_OK) ? 1 : 0);
    return ((int)bits & need) == need ? 0 : -EACCES;
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    struct stat st;
    int rc = sqz_backing_stat(in, &st);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    if ((mask & W_OK) && fs->opts.ro) {
        fuse_reply_err(req, EROFS);
        return;
    }
    fuse_reply_err(req, -sqz_req_may(req, &st, mask));
}

void sqz_ops_access(struct fuse_lowlevel_ops *ops)
{
    ops->access = op_access;
}
