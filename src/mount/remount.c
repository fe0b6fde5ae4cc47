/* `mount -o remount,OPTS MOUNTPOINT` of a live squeezefs mount.
 *
 * mount(8) runs the helper (mount.fuse.squeezefs, or mount.fuse) with the
 * mount's current flags, the fstab line's options and the new ones, plus
 * "remount"; mount.fuse3 hands them to `squeezefs BACKING MOUNTPOINT -o
 * ...`, which ends up here instead of mounting. Kernel flags (ro/rw,
 * nosuid, nodev, noexec, the atime options, sync, dirsync, lazytime) are
 * changed by the kernel: mount(2) with MS_REMOUNT on the mount point, from
 * the mount's current flags with the given ones applied (as mount(8)
 * does). squeezefs' own options and the ones passed to FUSE cannot change
 * on a live mount: each given one is compared with the daemon's value
 * (getxattr user.squeezefs.options on the mount root), and any that
 * differs fails the remount, before anything changed, with a message
 * naming it. The same value again (fstab lines are repeated) is fine. A
 * mount made read-only by squeezefs (-o ro: no writer lock, a reader's
 * caches) cannot become read-write. */
#include "daemon/fs.h"
#include "daemon/opts.h"
#include "daemon/mountinfo.h"
#include "mount/mountlife.h"
#include "common/errbuf.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/xattr.h>

/* Options only mount(8) reads (as on a mount, opts.c). */
static const char *const fstab_only[] = {
    "defaults", "auto", "noauto", "user", "nouser", "users", "owner",
    "group", "_netdev", "nofail", "nonempty", "remount", NULL,
};

/* Append "key[=val]" to a comma-separated option list (escaped), or to a
 * plain ", "-separated list for messages (esc 0). */
static int append(char **s, const char *key, const char *val, int esc)
{
    size_t old = *s ? strlen(*s) : 0;
    size_t need = old + 2 + 2 * strlen(key) + (val ? 1 + 2 * strlen(val) : 0) + 1;
    char *n = realloc(*s, need);
    if (!n)
        return -ENOMEM;
    *s = n;
    char *p = n + old;
    if (old) {
        *p++ = ',';
        if (!esc)
            *p++ = ' ';
    }
    for (int part = 0; part < 2; part++) {
        const char *q = part ? val : key;
        if (!q)
            break;
        if (part)
            *p++ = '=';
        for (; *q; q++) {
            if (esc && (*q == ',' || *q == '\\'))
                *p++ = '\\';
            *p++ = *q;
        }
    }
    *p = '\0';
    return 0;
}

struct given {
    unsigned long flags;  /* the mount's flags with the given ones applied */
    int want_rw;          /* rw given last of ro/rw */
    int want_ro;
    char *own;            /* squeezefs and FUSE options, escaped */
};

static int classify(void *arg, const char *key, const char *val)
{
    struct given *g = arg;
    if (!*key || strncmp(key, "x-", 2) == 0 || strcmp(key, "comment") == 0)
        return 0;
    const struct sqz_kflag *k = val ? NULL : sqz_mount_kflag(key);
    if (k) {
        g->flags = (g->flags & ~k->clear) | k->set;
        if (strcmp(key, "rw") == 0 || strcmp(key, "ro") == 0) {
            g->want_rw = key[1] == 'w';
            g->want_ro = !g->want_rw;
        }
        return 0;
    }
    for (size_t i = 0; !val && fstab_only[i]; i++)
        if (strcmp(fstab_only[i], key) == 0)
            return 0;
    return append(&g->own, key, val, 1);
}

/* The value of describe's line "key=..." in text, into out ("" if none). */
static void line_of(const char *text, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    out[0] = '\0';
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            snprintf(out, n, "%.*s", (int)strcspn(p + kl + 1, "\n"), p + kl + 1);
            return;
        }
}

struct compare {
    const struct sqz_mount_opts *mine;
    const char *theirs;  /* the daemon's describe text */
    char mine_text[4096];
    char *fuse_theirs;   /* the daemon's FUSE options, escaped */
    char *differ;        /* for the message */
    int found;           /* fuse_has: the option is among the daemon's */
    const char *fkey, *fval;
};

static int fuse_has(void *arg, const char *key, const char *val)
{
    struct compare *c = arg;
    if (strcmp(key, c->fkey) == 0 &&
        ((!val && !c->fval) || (val && c->fval && strcmp(val, c->fval) == 0)))
        c->found = 1;
    return 0;
}

static int compare_one(void *arg, const char *key, const char *val)
{
    struct compare *c = arg;
    const char *k = sqz_mount_opt_key(key);
    char a[1024], b[1024], note[2200];
    if (k) {
        line_of(c->mine_text, k, a, sizeof(a));
        line_of(c->theirs, k, b, sizeof(b));
        if (strcmp(a, b) == 0)
            return 0;
        snprintf(note, sizeof(note), "%s%s%s (the mount has %s=%s)", key,
                 val ? "=" : "", val ? val : "", k, b);
    } else {
        c->found = 0;
        c->fkey = key;
        c->fval = val;
        if (c->fuse_theirs[0])
            sqz_mount_opts_each(c->fuse_theirs, fuse_has, c);
        if (c->found)
            return 0;
        snprintf(note, sizeof(note), "%s%s%s (a FUSE option the mount was "
                 "not made with)", key, val ? "=" : "", val ? val : "");
    }
    return append(&c->differ, note, NULL, 0);
}

/* 0 if every given squeezefs and FUSE option has the mount's value; else
 * -EINVAL with the message in err. */
static int check_own(const char *own, const char *theirs, char *err, size_t errlen)
{
    struct sqz_mount_opts mine;
    sqz_mount_opts_init(&mine);
    int rc = sqz_parse_mount_options(own, &mine, err, errlen);
    if (rc) {
        sqz_mount_opts_free(&mine);
        return rc;
    }
    sqz_mount_opts_finish(&mine);
    struct compare c;
    memset(&c, 0, sizeof(c));
    c.mine = &mine;
    c.theirs = theirs;
    char fuse[2048];
    line_of(theirs, "fuse", fuse, sizeof(fuse));
    c.fuse_theirs = fuse;
    if (sqz_mount_opts_describe(&mine, c.mine_text, sizeof(c.mine_text)) < 0)
        rc = -ENOMEM;
    if (rc == 0)
        rc = sqz_mount_opts_each(own, compare_one, &c);
    if (rc == 0 && c.differ) {
        sqz_errf(err, errlen, "these options differ from the mount's and take "
                 "effect only on a new mount (unmount, then mount with them): "
                 "%s. A remount changes only ro/rw, nosuid, nodev, noexec, "
                 "the atime options, sync/async, dirsync and lazytime",
                 c.differ);
        rc = -EINVAL;
    }
    free(c.differ);
    sqz_mount_opts_free(&mine);
    return rc;
}

/* The daemon's options text (getxattr on the mount root), malloc'd. */
static char *daemon_options(const char *mnt)
{
    char *buf = malloc(8192);
    if (!buf)
        return NULL;
    ssize_t n = getxattr(mnt, SQZ_XATTR_OPTIONS, buf, 8191);
    if (n < 0) {
        int e = errno;
        free(buf);
        errno = e;
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static int remount(const char *raw, const char *backing, const char *mnt,
                   char *err, size_t errlen)
{
    char m[PATH_MAX], *info = NULL, *theirs = NULL;
    if (!realpath(mnt, m)) {
        sqz_errf(err, errlen, "%s: %s", mnt, strerror(errno));
        return -1;
    }
    const char *line;
    size_t len;
    if (sqz_slurp("/proc/self/mountinfo", &info) != 0 ||
        sqz_mountinfo_fuse_line(info, m, &line, &len) != 0) {
        sqz_errf(err, errlen, "%s is not a FUSE mount: nothing to remount", m);
        free(info);
        return -1;
    }
    int rc = -1;
    struct given g = {sqz_mountinfo_flags(line, len), 0, 0, NULL};
    if (!(theirs = daemon_options(m))) {
        sqz_errf(err, errlen, "%s is not a squeezefs mount, or one of a squeezefs "
                 "without remount (no %s: %s)", m, SQZ_XATTR_OPTIONS, strerror(errno));
        goto out;
    }
    /* BACKING: the mount's (mount(8) passes the mount's source, which is
     * BACKING unless fsname= was given) */
    char b[PATH_MAX], src[PATH_MAX + 16], ours[PATH_MAX];
    line_of(theirs, "backing", ours, sizeof(ours));
    const char *s = strstr(line, " - ");
    src[0] = '\0';
    if (s && s < line + len)
        sscanf(s + 3, "%*s %4095s", src);
    if (strcmp(backing, src) != 0 && !(realpath(backing, b) && strcmp(b, ours) == 0)) {
        sqz_errf(err, errlen, "%s is a squeezefs mount of %s, not of %s", m, ours,
                 backing);
        goto out;
    }
    if (sqz_mount_opts_each(raw, classify, &g) != 0) {
        sqz_errf(err, errlen, "out of memory");
        goto out;
    }
    char ro[8];
    line_of(theirs, "ro", ro, sizeof(ro));
    if (g.want_rw && strcmp(ro, "1") == 0) {
        sqz_errf(err, errlen, "%s was mounted read-only (-o ro): a read-only "
                 "squeezefs mount takes no writer lock and cannot become "
                 "read-write; unmount it and mount it without ro", m);
        goto out;
    }
    if (g.own && check_own(g.own, theirs, err, errlen) != 0)
        goto out;
    if (mount(NULL, m, NULL, MS_REMOUNT | g.flags, NULL) != 0) {
        sqz_errf(err, errlen, "remount of %s failed: %s%s", m, strerror(errno),
                 errno == EBUSY && g.want_ro
                     ? " (files are open for writing)" : "");
        goto out;
    }
    rc = 0;
out:
    free(g.own);
    free(theirs);
    free(info);
    return rc;
}

int sqz_remount(const char *raw, const char *backing, const char *mnt)
{
    char err[4096] = "";
    if (remount(raw ? raw : "", backing, mnt, err, sizeof(err)) == 0)
        return 0;
    fprintf(stderr, "squeezefs: %s\n", err);
    return 1;
}
