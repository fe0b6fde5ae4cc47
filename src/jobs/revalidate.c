/* Read-only mounts of a BACKING that another mount writes (shared storage:
 * one writer, many readers). Every open already sees the writer's last
 * close or fsync (content_sf.c replaces a stale read-only view). For
 * descriptors that stay open, this thread checks the views of open files
 * every revalidate=N seconds (the backing file's size, mtime and ctime, one
 * fstat each), replaces the changed ones and drops the kernel's cached
 * pages and attributes of those files (fuse_lowlevel_notify_inval_inode,
 * outside every lock and outside request handlers). So an open descriptor
 * shows a change at most about N seconds late; never a mix of old and new
 * within one view (a view is one replay of the log). */
#include "jobs/revalidate.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/push.h"
#include "content/content.h"
#include "common/bgthread.h"
#include "common/lockorder.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sqz_reval {
    sqz_bgthread bg;    /* bg.mu: the sleep, the stop flag, refreshed */
    uint64_t refreshed; /* views replaced (statistics) */
};

struct changed_list {
    fuse_ino_t *v;
    size_t n, cap;
};

/* foreach callback (no table lock held; the inode is kept alive) */
static void check_one(struct sqz_fs *fs, struct sqz_inode *in, void *user)
{
    struct changed_list *l = user;
    if (in->type != S_IFREG)
        return;
    SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
    int ro_view = in->file && !in->file_rw;
    struct stat bst;
    int stale = 0;
    if (ro_view && sqz_backing_stat(in, &bst) == 0) {
        struct sqz_bkey now;
        sqz_bkey_of(&bst, &now);
        stale = !sqz_bkey_eq(&now, &in->file_key);
    }
    SQZ_RWUNLOCK(&in->io);
    if (!stale)
        return;
    int changed = 0;
    SQZ_WRLOCK(&in->io, SQZ_RANK_IO);
    if (sqz_backing_stat(in, &bst) == 0 &&
        sqz_content_refresh_view_locked(fs, in, &bst, &changed) != 0)
        changed = 0; /* the old view stays; tried again next time */
    SQZ_RWUNLOCK(&in->io);
    if (!changed)
        return;
    /* old-view blocks pushed into the kernel end before its pages are
     * dropped (push.c) */
    sqz_push_fence(in);
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 16;
        fuse_ino_t *nv = realloc(l->v, nc * sizeof(*nv));
        if (!nv)
            return; /* the next open still drops the pages */
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = sqz_nodeid(fs, in);
}

static void *reval_main(void *arg)
{
    struct sqz_fs *fs = arg;
    struct sqz_reval *r = fs->reval;
    SQZ_MUTEX_LOCK(r->bg.mu, SQZ_RANK_REVAL);
    while (sqz_bg_sleep(&r->bg, (uint64_t)fs->opts.revalidate_s * 1000)) {
        SQZ_MUTEX_UNLOCK(r->bg.mu);
        struct changed_list l = {0};
        (void)sqz_itable_foreach(fs, check_one, &l);
        for (size_t i = 0; i < l.n; i++)
            fuse_lowlevel_notify_inval_inode(fs->se, l.v[i], 0, 0);
        free(l.v);
        SQZ_MUTEX_LOCK(r->bg.mu, SQZ_RANK_REVAL);
        r->refreshed += l.n;
    }
    SQZ_MUTEX_UNLOCK(r->bg.mu);
    return NULL;
}

/* The file system type of the mount holding path (the longest mount point
 * that is a prefix of it, from /proc/self/mountinfo), or "" if unknown. */
static void backing_fstype(const char *path, char *out, size_t outlen)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    char line[4096];
    size_t best = 0;
    while (fgets(line, sizeof(line), f)) {
        char mp[PATH_MAX], type[64];
        const char *sep = strstr(line, " - ");
        /* field 5 is the mount point (octal escapes: paths with spaces
         * just do not match, which only costs the note below) */
        if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1 ||
            sscanf(sep + 3, "%63s", type) != 1)
            continue;
        size_t l = strlen(mp);
        int under = strcmp(mp, "/") == 0 ||
                    (strncmp(path, mp, l) == 0 && (path[l] == '/' || path[l] == '\0'));
        if (under && l >= best) {
            best = l;
            snprintf(out, outlen, "%s", type);
        }
    }
    fclose(f);
}

/* A reader's freshness also depends on the caches of the network file
 * system under BACKING, which squeezefs cannot see: say so once. */
static void note_network_backing(struct sqz_fs *fs)
{
    char type[64];
    if (!fs->backing_real)
        return;
    backing_fstype(fs->backing_real, type, sizeof(type));
    if (strcmp(type, "fuse.glusterfs") == 0)
        sqz_logf(SQZ_LOG_INFO,
                 "%s is on GlusterFS: this read-only mount sees the writer's close or fsync at "
                 "its next open only if this host's GlusterFS client caches no attributes "
                 "(mount it with -o attribute-timeout=0,entry-timeout=0,negative-timeout=0 and "
                 "set performance.stat-prefetch, quick-read, io-cache and open-behind off on "
                 "the volume); otherwise up to the client's cache timeouts later",
                 fs->backing_real);
}

int sqz_revalidate_start(struct sqz_fs *fs)
{
    if (fs->opts.ro)
        note_network_backing(fs);
    if (!fs->opts.ro || fs->opts.revalidate_s <= 0 || !fs->se)
        return 0;
    struct sqz_reval *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    int rc = sqz_bg_init(&r->bg, NULL, SQZ_RANK_REVAL);
    if (rc < 0) {
        free(r);
        return rc;
    }
    fs->reval = r;
    if ((rc = sqz_bg_start(&r->bg, reval_main, fs)) < 0) {
        fs->reval = NULL;
        sqz_bg_destroy(&r->bg);
        free(r);
        return rc;
    }
    return 0;
}

void sqz_revalidate_stop(struct sqz_fs *fs)
{
    struct sqz_reval *r = fs->reval;
    if (!r)
        return;
    sqz_bg_stop(&r->bg, NULL);
    fs->reval = NULL;
    sqz_bg_destroy(&r->bg);
    free(r);
}
