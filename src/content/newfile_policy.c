/* The policy of a file created through the mount. A new file carries no
 * policy xattr of its own, so its policy is that of its directory chain
 * (the deepest valid directory xattr), else the rule file's, else the
 * mount default. The chain's part is the same for every file created in a
 * directory: it is cached in the directory's inode (under meta), so a
 * `cp -r` walks the chain once per directory, not once per file (a walk
 * is a readlink of the directory, then an open and an fgetxattr per
 * level).
 *
 * A cached chain is used while
 *   - no policy xattr was set or removed and no directory renamed through
 *     the mount since it was read (fs->policy_gen, bumped after each such
 *     change: sqz_policy_changed), and
 *   - it is younger than the entry timeout (fs->timeout): a policy set on
 *     BACKING behind the mount's back is seen by files created a second
 *     later, as a name created there is.
 * A directory made through the mount has no policy xattr of its own: it
 * takes its parent's cached chain, with the parent's walk time
 * (sqz_policy_seed_dir), so a copied tree walks no new directory.
 * The rule file is matched against the new file's path as before. */
#include "content/newfile_policy.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "common/lockorder.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sqz_dirpol {
    sqz_policy_found found;
    uint64_t gen;            /* fs->policy_gen read before the walk */
    struct timespec at;      /* CLOCK_MONOTONIC_COARSE of the walk */
};

static struct timespec now_coarse(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &t) != 0)
        clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
}

static double seconds_between(struct timespec a, struct timespec b)
{
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

void sqz_policy_changed(struct sqz_fs *fs)
{
    atomic_fetch_add(&fs->policy_gen, 1);
}

/* The cached chain of dir, if still valid: 1, *out and the time of its
 * walk, else 0. */
static int cached(struct sqz_fs *fs, struct sqz_inode *dir, uint64_t gen,
                  sqz_policy_found *out, struct timespec *at)
{
    int hit = 0;
    SQZ_MUTEX_LOCK(&dir->meta, SQZ_RANK_META);
    struct sqz_dirpol *d = dir->dirpol;
    if (d && d->gen == gen) {
        double age = seconds_between(d->at, now_coarse());
        if (age >= 0 && age < fs->timeout) {
            *out = d->found;
            *at = d->at;
            hit = 1;
        }
    }
    SQZ_MUTEX_UNLOCK(&dir->meta);
    return hit;
}

static void remember(struct sqz_inode *dir, uint64_t gen,
                     struct timespec at, const sqz_policy_found *f)
{
    SQZ_MUTEX_LOCK(&dir->meta, SQZ_RANK_META);
    if (!dir->dirpol)
        dir->dirpol = malloc(sizeof(*dir->dirpol));
    if (dir->dirpol) { /* without memory the next create walks again */
        dir->dirpol->found = *f;
        dir->dirpol->gen = gen;
        dir->dirpol->at = at;
    }
    SQZ_MUTEX_UNLOCK(&dir->meta);
}

void sqz_policy_seed_dir(struct sqz_fs *fs, struct sqz_inode *parent,
                         struct sqz_inode *dir)
{
    if (dir == parent)
        return;
    uint64_t gen = atomic_load(&fs->policy_gen);
    sqz_policy_found f;
    struct timespec at;
    if (cached(fs, parent, gen, &f, &at)) /* expires with the parent's */
        remember(dir, gen, at, &f);
}

static int child_path(const char *dir, const char *name, char *buf, size_t n)
{
    int w = snprintf(buf, n, "%s%s%s", dir, dir[0] ? "/" : "", name);
    return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

int sqz_resolve_new(struct sqz_fs *fs, struct sqz_inode *dir,
                    const char *name, sqz_resolved *out)
{
    char rel[PATH_MAX];
    int have_rel = 0, rc;
    sqz_policy_found f;
    uint64_t gen = atomic_load(&fs->policy_gen);
    struct timespec at;
    if (!cached(fs, dir, gen, &f, &at)) {
        at = now_coarse();
        rc = sqz_inode_relpath(fs, dir, rel, sizeof(rel));
        if (rc)
            return rc;
        have_rel = 1;
        rc = sqz_policy_walk_dir(fs->root_dirfd, rel, &f);
        if (rc)
            return rc;
        remember(dir, gen, at, &f);
    }
    char path[PATH_MAX];
    if (fs->rules) { /* rules match the file's whole path */
        if (!have_rel && (rc = sqz_inode_relpath(fs, dir, rel, sizeof(rel))) != 0)
            return rc;
        rc = child_path(rel, name, path, sizeof(path));
    } else {
        rc = child_path("", name, path, sizeof(path)); /* matched by nothing */
    }
    if (rc)
        return rc;
    return sqz_policy_resolve_found(&f, path, fs->rules, fs->rules_name,
                                    &fs->opts.spec, out);
}
