/* Age-based tiering in the background (mount option tier=INTERVAL, off by
 * default): every INTERVAL after the previous pass ended, one thread walks
 * BACKING in name order and tiers each due file (tier_job.c), one file at a
 * time, at low CPU and I/O priority, at most tier_rate= bytes of file data
 * per second, stepping back while foreground requests are served.
 *
 * Resumable: the path of the last file the pass got to is kept in
 * BACKING/.sqz-tmp.tier-state (hidden from the mount, like every
 * SQZ_TMP_PREFIX name), so a pass stopped by an unmount goes on after it
 * at the next pass, also after a remount; a completed pass starts over.
 * The file also records when the last pass completed.
 *
 * Files skipped (open for writing) or abandoned (written meanwhile) are
 * simply met again by a later pass. The counters (since the mount) are in
 * the stats xattr (squeezefs stats). Read-only mounts have no tiering. */
#include "jobs/tier.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "content/content.h"
#include "jobs/tier_int.h"
#include "common/lockorder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STATE_NAME SQZ_TMP_PREFIX "tier-state"
#define STATE_MAGIC "squeezefs-tier 1\n"

struct pass {
    struct sqz_fs *fs;
    struct sqz_tier *t;
    char resume[PATH_MAX];  /* skip files up to this path ("" none) */
    char cur[PATH_MAX];     /* the last file reached */
    long long last_end;     /* unix time of the last complete pass */
    struct sqz_tier_pace pace;
    struct timespec saved;  /* when the state was last written */
};

/* ---- the state file ---- */

static void state_load(struct pass *ps)
{
    ps->resume[0] = '\0';
    int fd = openat(ps->fs->root_dirfd, STATE_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[PATH_MAX + 64];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    size_t ml = sizeof(STATE_MAGIC) - 1;
    char *nl;
    if (strncmp(buf, STATE_MAGIC, ml) != 0 || !(nl = strchr(buf + ml, '\n')))
        return; /* not ours or torn: start over */
    *nl = '\0';
    ps->last_end = strtoll(buf + ml, NULL, 10);
    if (strlen(nl + 1) < sizeof(ps->resume))
        snprintf(ps->resume, sizeof(ps->resume), "%s", nl + 1);
}

static void state_save(struct pass *ps)
{
    static const char tmpn[] = STATE_NAME ".new";
    int dfd = ps->fs->root_dirfd;
    int fd = openat(dfd, tmpn, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                    0600);
    if (fd < 0)
        return;
    char head[64];
    int hl = snprintf(head, sizeof(head), STATE_MAGIC "%lld\n", ps->last_end);
    size_t cl = strlen(ps->cur);
    int ok = write(fd, head, (size_t)hl) == hl &&
             write(fd, ps->cur, cl) == (ssize_t)cl;
    close(fd);
    /* not synced: after a power loss a pass only redoes some of its walk */
    if (!ok || renameat(dfd, tmpn, dfd, STATE_NAME) != 0)
        unlinkat(dfd, tmpn, 0);
    clock_gettime(CLOCK_MONOTONIC, &ps->saved);
}

/* ---- the walk ---- */

/* Compare two relative paths in walk order (component by component, a
 * directory before what it contains). */
static int path_cmp(const char *a, const char *b)
{
    for (;;) {
        size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
        int c = memcmp(a, b, la < lb ? la : lb);
        if (c)
            return c;
        if (la != lb)
            return la < lb ? -1 : 1;
        a += la;
        b += lb;
        if (!*a || !*b)
            return (*a != 0) - (*b != 0);
        a++;
        b++;
    }
}

static int name_cmp(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static int stopped(struct pass *ps)
{
    return atomic_load(&ps->t->bg.stop) != 0;
}

/* A file the walk reached: tier it when its policy says it is old. */
static void consider(struct pass *ps, int dfd, const char *name, const char *rel,
                     const struct stat *st)
{
    sqz_resolved r;
    if (sqz_resolve(ps->fs, rel, &r) != 0 || r.after_s < 0)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long age = (long long)(now.tv_sec - st->st_mtim.tv_sec);
    if (age < r.after_s)
        return;
    struct sqz_inode *in = NULL;
    struct stat ist;
    if (sqz_inode_lookup_at(ps->fs, dfd, name, &ist, &in) != 0)
        return;
    struct sqz_tier_result res;
    if (ist.st_ino == st->st_ino && S_ISREG(ist.st_mode))
        (void)sqz_tier_file(ps->fs, in, &ps->pace, &res); /* counted there */
    sqz_inode_forget(ps->fs, in, 1);
}

/* Walk the directory dfd (path rel, "" for the root). 0, or -ECANCELED
 * when stopped. */
static int walk_dir(struct pass *ps, int dfd, const char *rel)
{
    int dup_fd = dup(dfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return 0; /* unreadable: nothing to tier here */
    }
    rewinddir(d); /* the dup shares the offset the last pass left at the end */
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!sqz_name_ok(de->d_name) || sqz_name_hidden(de->d_name))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char **nv = realloc(names, nc * sizeof(*nv));
            if (!nv)
                break;
            names = nv;
            cap = nc;
        }
        if (!(names[n] = strdup(de->d_name)))
            break;
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof(*names), name_cmp);
    int rc = 0;
    char child[PATH_MAX];
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (stopped(ps)) {
            rc = -ECANCELED;
            break;
        }
        int l = snprintf(child, sizeof(child), "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
        struct stat st;
        if (l < 0 || (size_t)l >= sizeof(child) ||
            fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        int before = ps->resume[0] && path_cmp(child, ps->resume) <= 0;
        if (S_ISDIR(st.st_mode)) {
            size_t cl = (size_t)l;
            int holds = strncmp(ps->resume, child, cl) == 0 && ps->resume[cl] == '/';
            if (before && !holds)
                continue; /* done in an earlier pass */
            int cfd = openat(dfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (cfd >= 0) {
                rc = walk_dir(ps, cfd, child);
                close(cfd);
            }
        } else if (S_ISREG(st.st_mode) && !before) {
            ps->resume[0] = '\0'; /* past it */
            consider(ps, dfd, names[i], child, &st);
            if (stopped(ps)) { /* that file was not finished */
                rc = -ECANCELED;
                break;
            }
            snprintf(ps->cur, sizeof(ps->cur), "%s", child);
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - ps->saved.tv_sec >= 2)
                state_save(ps);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

static void run_pass(struct pass *ps)
{
    struct sqz_tier *t = ps->t;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    atomic_store(&t->in_pass, 1);
    snprintf(ps->cur, sizeof(ps->cur), "%s", ps->resume);
    int rc = walk_dir(ps, ps->fs->root_dirfd, "");
    if (rc == 0) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ps->last_end = (long long)time(NULL);
        ps->cur[0] = '\0';
        atomic_fetch_add(&t->passes, 1);
        atomic_store(&t->last_pass_end, ps->last_end);
        atomic_store(&t->last_pass_ms, (long long)((t1.tv_sec - t0.tv_sec) * 1000 +
                                                   (t1.tv_nsec - t0.tv_nsec) / 1000000));
    }
    state_save(ps); /* complete: start over next time; else resume */
    snprintf(ps->resume, sizeof(ps->resume), "%s", ps->cur);
    atomic_store(&t->in_pass, 0);
}

static void *tier_main(void *arg)
{
    struct sqz_fs *fs = arg;
    struct sqz_tier *t = fs->tier;
    sqz_tier_lower_priority();
    struct pass *ps = calloc(1, sizeof(*ps));
    if (!ps) {
        sqz_logf(SQZ_LOG_ERR, "tier: out of memory; no background tiering");
        return NULL;
    }
    ps->fs = fs;
    ps->t = t;
    ps->pace.rate = t->rate;
    ps->pace.stop = &t->bg.stop;
    state_load(ps);
    atomic_store(&t->last_pass_end, ps->last_end);
    SQZ_MUTEX_LOCK(t->bg.mu, SQZ_RANK_TIER);
    while (sqz_bg_sleep(&t->bg, (uint64_t)t->interval_s * 1000)) {
        SQZ_MUTEX_UNLOCK(t->bg.mu);
        run_pass(ps);
        SQZ_MUTEX_LOCK(t->bg.mu, SQZ_RANK_TIER);
    }
    SQZ_MUTEX_UNLOCK(t->bg.mu);
    free(ps);
    return NULL;
}

int sqz_tier_start(struct sqz_fs *fs)
{
    if (fs->opts.ro)
        return 0;
    struct sqz_tier *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->interval_s = fs->opts.tier_s;
    t->rate = fs->opts.tier_rate;
    int rc = sqz_bg_init(&t->bg, NULL, SQZ_RANK_TIER);
    if (rc < 0) {
        free(t);
        return rc;
    }
    fs->tier = t;
    if (t->interval_s <= 0)
        return 0;
    /* on failure the state stays for the counters; freed at teardown */
    return sqz_bg_start(&t->bg, tier_main, fs);
}

void sqz_tier_stop(struct sqz_fs *fs)
{
    struct sqz_tier *t = fs->tier;
    if (t)
        sqz_bg_stop(&t->bg, NULL);
}

void sqz_tier_free(struct sqz_fs *fs)
{
    struct sqz_tier *t = fs->tier;
    if (!t)
        return;
    sqz_tier_stop(fs);
    fs->tier = NULL;
    sqz_bg_destroy(&t->bg);
    free(t);
}

int sqz_tier_stats_json(struct sqz_fs *fs, char *buf, size_t n)
{
    struct sqz_tier *t = fs->tier;
    if (!t)
        return snprintf(buf, n, "%s", "");
    int len = snprintf(buf, n,
        ", \"tier_interval\": %lld, \"tier_rate\": %" PRIu64
        ", \"tier_files\": %" PRIu64 ", \"tier_bytes_before\": %" PRIu64
        ", \"tier_bytes_after\": %" PRIu64 ", \"tier_logical_bytes\": %" PRIu64
        ", \"tier_skipped\": %" PRIu64 ", \"tier_abandoned\": %" PRIu64
        ", \"tier_failed\": %" PRIu64 ", \"tier_passes\": %" PRIu64
        ", \"tier_running\": %d, \"tier_last_pass\": %lld"
        ", \"tier_last_pass_seconds\": %.3f",
        t->interval_s, t->rate, (uint64_t)atomic_load(&t->files),
        (uint64_t)atomic_load(&t->before), (uint64_t)atomic_load(&t->after),
        (uint64_t)atomic_load(&t->logical), (uint64_t)atomic_load(&t->skipped),
        (uint64_t)atomic_load(&t->abandoned), (uint64_t)atomic_load(&t->failed),
        (uint64_t)atomic_load(&t->passes), atomic_load(&t->in_pass),
        (long long)atomic_load(&t->last_pass_end),
        (double)atomic_load(&t->last_pass_ms) / 1000.0);
    return len < 0 ? -EINVAL : (size_t)len >= n ? -ENOSPC : len;
}
