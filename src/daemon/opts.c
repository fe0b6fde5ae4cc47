/* Mount option parsing (see opts.h). Pure: no I/O, no globals. */
#include "daemon/opts.h"

#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"

#include "squeezefs/container.h"

void sqz_mount_opts_init(struct sqz_mount_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->spec.alg = SQZ_ALG_ZSTD;
    o->spec.level = 1;
    o->spec.log2bs = SQZ_LOG2BS_DEFAULT;
    o->spec.auto_mode = SQZ_AUTO_NONE;
    o->cache_bytes = SQZ_DEFAULT_CACHE_BYTES;
    o->readahead_bytes = SQZ_DEFAULT_READAHEAD_BYTES;
    o->revalidate_s = SQZ_DEFAULT_REVALIDATE_S;
    o->wait_writer_s = SQZ_DEFAULT_WAIT_WRITER_S;
    o->min_saving = SQZ_MIN_SAVING_DEFAULT;
    o->tier_rate = SQZ_DEFAULT_TIER_RATE;
    o->writeback = 1; /* the kernel writeback cache; never with ro */
    o->pack = 1;      /* small closed files are packed */
}

void sqz_mount_opts_free(struct sqz_mount_opts *o)
{
    free(o->policy_file);
    o->policy_file = NULL;
    free(o->fuse_opts);
    o->fuse_opts = NULL;
    free(o->mnt_flags);
    o->mnt_flags = NULL;
}

void sqz_mount_opts_finish(struct sqz_mount_opts *o)
{
    if (o->block_log2)
        o->spec.log2bs = o->block_log2;
    else if (o->spec.log2bs == 0)
        o->spec.log2bs = SQZ_LOG2BS_DEFAULT;
    /* A read-only mount follows another mount's writes: the kernel must
     * take sizes from the daemon, which it does not with the cache. */
    if (o->ro)
        o->writeback = 0;
}

int sqz_parse_size(const char *text, size_t *out)
{
    if (!text || !*text || *text == '-' || *text == '+')
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text)
        return -EINVAL;
    unsigned shift = 0;
    if (*end) {
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        case 't': case 'T': shift = 40; break;
        default: return -EINVAL;
        }
        end++;
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
        if (*end)
            return -EINVAL;
    }
    if (shift && v > (SIZE_MAX >> shift))
        return -EINVAL;
    *out = (size_t)(v << shift);
    return 0;
}

/* Options libfuse understands (mount or session options), passed through.
 * Entries ending in '=' take a value. */
static const char *const fuse_known[] = {
    "allow_root", "auto_unmount", "fsname=", "subtype=", "rw", "suid",
    "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync", "dirsync",
    "atime", "noatime", "context=", "fscontext=", "defcontext=",
    "rootcontext=", "debug", NULL,
};

/* fstab-only options that mean nothing to a FUSE daemon: accepted and
 * dropped. */
static const char *const fstab_dropped[] = {
    "defaults", "auto", "noauto", "user", "nouser", "users", "owner",
    "_netdev", "nofail", "group", "nonempty", NULL,
};

/* Mount flags libfuse does not know (relatime is what it mounts with):
 * set on the mount once it is made (sqz_mount_set_flags, remount.c). */
static const char *const mnt_flag_opts[] = {
    "relatime", "norelatime", "strictatime", "nostrictatime", "lazytime",
    "nolazytime", "nodiratime", "diratime", NULL,
};

static int in_list(const char *const *list, const char *key, int has_val)
{
    for (size_t i = 0; list[i]; i++) {
        size_t n = strlen(list[i]);
        int takes_val = n > 0 && list[i][n - 1] == '=';
        if (takes_val != has_val)
            continue;
        if (takes_val ? strncmp(list[i], key, n - 1) == 0 && key[n - 1] == '\0'
                      : strcmp(list[i], key) == 0)
            return 1;
    }
    return 0;
}

/* Append key[=val] to o->fuse_opts, escaping ',' and '\'. */
static int add_fuse_opt(struct sqz_mount_opts *o, const char *key,
                        const char *val)
{
    size_t old = o->fuse_opts ? strlen(o->fuse_opts) : 0;
    size_t need = old + 1 + 2 * strlen(key) + (val ? 1 + 2 * strlen(val) : 0) + 1;
    char *s = realloc(o->fuse_opts, need);
    if (!s)
        return -ENOMEM;
    o->fuse_opts = s;
    char *p = s + old;
    if (old)
        *p++ = ',';
    for (const char *q = key; *q; q++) {
        if (*q == ',' || *q == '\\')
            *p++ = '\\';
        *p++ = *q;
    }
    if (val) {
        *p++ = '=';
        for (const char *q = val; *q; q++) {
            if (*q == ',' || *q == '\\')
                *p++ = '\\';
            *p++ = *q;
        }
    }
    *p = '\0';
    return 0;
}

int sqz_parse_interval(const char *text, long long *secs)
{
    if (!text || !*text || *text == '-' || *text == '+')
        return -EINVAL;
    if (strcmp(text, "off") == 0) {
        *secs = 0;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text)
        return -EINVAL;
    long long mult = 1;
    if (*end) {
        switch (*end) {
        case 's': mult = 1; break;
        case 'm': mult = 60; break;
        case 'h': mult = 3600; break;
        case 'd': mult = 86400; break;
        default: return -EINVAL;
        }
        if (end[1])
            return -EINVAL;
    }
    if (v > (unsigned long long)(SQZ_MAX_TIER_S / mult))
        return -EINVAL;
    *secs = (long long)v * mult;
    return 0;
}

static int parse_min_saving(const char *v, unsigned *out)
{
    if (!*v)
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v)
        return -EINVAL;
    if (*end == '%')
        end++;
    if (*end || !isfinite(d) || d < 0.0 || d > 100.0)
        return -EINVAL;
    *out = (unsigned)lround(d * 10.0);
    return 0;
}

static int parse_threads(const char *v, int *out)
{
    if (!*v || *v == '-' || *v == '+')
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || n < 1 || n > 1024)
        return -EINVAL;
    *out = (int)n;
    return 0;
}

/* Whole seconds 0..max (val may be NULL: no value). 0 or -EINVAL. */
static int parse_seconds(const char *val, long max, int *out)
{
    if (!val || !*val || *val == '-' || *val == '+')
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    long n = strtol(val, &end, 10);
    if (errno || *end || n < 0 || n > max)
        return -EINVAL;
    *out = (int)n;
    return 0;
}

/* ---- options with a value: one parser each (val may be NULL: none) ---- */

typedef int opt_fn(struct sqz_mount_opts *o, const char *val, char *err,
                   size_t errlen);

static const char *shown(const char *val)
{
    return val ? val : "";
}

static int opt_compress(struct sqz_mount_opts *o, const char *val, char *err,
                        size_t errlen)
{
    char msg[256] = "";
    if (!val || !*val) {
        sqz_errf(err, errlen, "option compress= needs a SPEC (e.g. zstd:3/128K)");
        return -EINVAL;
    }
    sqz_spec s;
    if (sqz_spec_parse(val, &s, msg, sizeof(msg)) != 0) {
        sqz_errf(err, errlen, "compress=%s: %s", val, msg[0] ? msg : "invalid SPEC");
        return -EINVAL;
    }
    o->spec = s;
    return 0;
}

static int opt_block(struct sqz_mount_opts *o, const char *val, char *err,
                     size_t errlen)
{
    char msg[256] = "";
    int l2 = 0;
    if (!val || sqz_parse_block(val, &l2, msg, sizeof(msg)) != 0 ||
        l2 < SQZ_LOG2BS_MIN || l2 > SQZ_LOG2BS_MAX) {
        sqz_errf(err, errlen, "block=%s: %s", shown(val),
                 msg[0] ? msg : "block size must be a power of two 4K..1M or 12..20");
        return -EINVAL;
    }
    o->block_log2 = l2;
    return 0;
}

static int opt_cache(struct sqz_mount_opts *o, const char *val, char *err,
                     size_t errlen)
{
    size_t b = 0;
    if (!val || sqz_parse_size(val, &b) != 0) {
        sqz_errf(err, errlen, "cache=%s: expected a size such as 256M or 1G", shown(val));
        return -EINVAL;
    }
    o->cache_bytes = b;
    return 0;
}

static int opt_readahead(struct sqz_mount_opts *o, const char *val, char *err,
                         size_t errlen)
{
    size_t b = 0;
    if (!val || sqz_parse_size(val, &b) != 0 ||
        (b != 0 && (b < 4096 || b > SQZ_MAX_READAHEAD_BYTES))) {
        sqz_errf(err, errlen,
                 "readahead=%s: expected 0 (kernel default) or a size 4K..64M", shown(val));
        return -EINVAL;
    }
    o->readahead_bytes = b;
    return 0;
}

static int opt_revalidate(struct sqz_mount_opts *o, const char *val,
                          char *err, size_t errlen)
{
    if (parse_seconds(val, SQZ_MAX_REVALIDATE_S, &o->revalidate_s) != 0) {
        sqz_errf(err, errlen, "revalidate=%s: expected seconds 0..86400 "
                 "(0: only at open)", shown(val));
        return -EINVAL;
    }
    return 0;
}

static int opt_wait_writer(struct sqz_mount_opts *o, const char *val,
                           char *err, size_t errlen)
{
    if (parse_seconds(val, SQZ_MAX_WAIT_WRITER_S, &o->wait_writer_s) != 0) {
        sqz_errf(err, errlen, "wait_writer=%s: expected seconds 0..3600 "
                 "(0: do not wait)", shown(val));
        return -EINVAL;
    }
    return 0;
}

static int opt_tier(struct sqz_mount_opts *o, const char *val, char *err,
                    size_t errlen)
{
    if (!val || sqz_parse_interval(val, &o->tier_s) != 0) {
        sqz_errf(err, errlen, "tier=%s: expected an interval such as 30s, 10m, 1h, "
                 "1d (at most 365d), or off", shown(val));
        return -EINVAL;
    }
    return 0;
}

static int opt_tier_rate(struct sqz_mount_opts *o, const char *val, char *err,
                         size_t errlen)
{
    size_t b = 0;
    if (!val || sqz_parse_size(val, &b) != 0) {
        sqz_errf(err, errlen, "tier_rate=%s: expected bytes per second such as 50M "
                 "(0: unlimited)", shown(val));
        return -EINVAL;
    }
    o->tier_rate = b;
    return 0;
}

static int opt_threads(struct sqz_mount_opts *o, const char *val, char *err,
                       size_t errlen)
{
    if (!val || parse_threads(val, &o->threads) != 0) {
        sqz_errf(err, errlen, "threads=%s: expected a number 1..1024", shown(val));
        return -EINVAL;
    }
    return 0;
}

static int opt_max_fds(struct sqz_mount_opts *o, const char *val, char *err,
                       size_t errlen)
{
    char *end = NULL;
    unsigned long long n = 0;
    errno = 0;
    if (val && *val && *val != '-' && *val != '+')
        n = strtoull(val, &end, 10);
    if (!end || errno || *end || n < 16 || n > (1u << 24)) {
        sqz_errf(err, errlen, "max_fds=%s: expected a number 16..16777216", shown(val));
        return -EINVAL;
    }
    o->max_fds = (size_t)n;
    return 0;
}

static int opt_min_saving(struct sqz_mount_opts *o, const char *val,
                          char *err, size_t errlen)
{
    if (!val || parse_min_saving(val, &o->min_saving) != 0) {
        sqz_errf(err, errlen, "min_saving=%s: expected a percentage 0..100 (e.g. 12.5)",
                 shown(val));
        return -EINVAL;
    }
    return 0;
}

static int opt_policy(struct sqz_mount_opts *o, const char *val, char *err,
                      size_t errlen)
{
    if (!val || !*val) {
        sqz_errf(err, errlen, "option policy= needs a rule file path");
        return -EINVAL;
    }
    char *p = strdup(val);
    if (!p)
        return -ENOMEM;
    free(o->policy_file);
    o->policy_file = p;
    return 0;
}

/* squeezefs' options with a value (as fuse_opt's templates do: one row
 * per name). */
static const struct {
    const char *name;
    opt_fn *set;
} valued[] = {
    {"compress", opt_compress},
    {"block", opt_block},
    {"cache", opt_cache},
    {"readahead", opt_readahead},
    {"revalidate", opt_revalidate},
    {"wait_writer", opt_wait_writer},
    {"tier", opt_tier},
    {"tier_rate", opt_tier_rate},
    {"threads", opt_threads},
    {"max_fds", opt_max_fds},
    {"min_saving", opt_min_saving},
    {"policy", opt_policy},
};

/* squeezefs' options without a value: the int field each sets, and to
 * what. */
static const struct {
    const char *name;
    size_t field;
    int value;
} flags[] = {
    {"writeback", offsetof(struct sqz_mount_opts, writeback), 1},
    {"writeback_cache", offsetof(struct sqz_mount_opts, writeback), 1},
    {"nowriteback", offsetof(struct sqz_mount_opts, writeback), 0},
    {"no_writeback_cache", offsetof(struct sqz_mount_opts, writeback), 0},
    {"pack", offsetof(struct sqz_mount_opts, pack), 1},
    {"nopack", offsetof(struct sqz_mount_opts, pack), 0},
    /* io_uring: whether it can work, mount.c asks uring.c */
    {"io_uring", offsetof(struct sqz_mount_opts, io_uring), 1},
    /* remount: mount.c hands the whole command to remount.c */
    {"remount", offsetof(struct sqz_mount_opts, remount), 1},
    {"ro", offsetof(struct sqz_mount_opts, ro), 1},
    {"rw", offsetof(struct sqz_mount_opts, ro), 0},
    /* allow_other also sets default_permissions (one_option) */
    {"allow_other", offsetof(struct sqz_mount_opts, allow_other), 1},
    {"default_permissions", offsetof(struct sqz_mount_opts, default_permissions), 1},
};

/* Options kept for mount(8), the kernel or FUSE (fstab's, the mount flags
 * set after mounting, libfuse's). 1 taken, 0 not one of them, -errno. */
static int other_option(struct sqz_mount_opts *o, const char *key,
                        const char *val)
{
    int has_val = val != NULL;
    if (in_list(fstab_dropped, key, has_val) || strncmp(key, "x-", 2) == 0 ||
        strcmp(key, "comment") == 0)
        return 1;
    if (in_list(mnt_flag_opts, key, has_val)) {
        size_t old = o->mnt_flags ? strlen(o->mnt_flags) : 0;
        char *m = realloc(o->mnt_flags, old + strlen(key) + 2);
        if (!m)
            return -ENOMEM;
        if (old)
            m[old++] = ',';
        strcpy(m + old, key);
        o->mnt_flags = m;
        return 1;
    }
    if (in_list(fuse_known, key, has_val)) {
        if (strcmp(key, "fsname") == 0)
            o->user_fsname = 1;
        if (strcmp(key, "subtype") == 0)
            o->user_subtype = 1;
        int rc = add_fuse_opt(o, key, val);
        return rc < 0 ? rc : 1;
    }
    return 0;
}

/* Handle one option (key, val; val NULL when there is no '='). */
static int one_option(struct sqz_mount_opts *o, const char *key,
                      const char *val, char *err, size_t errlen)
{
    if (!*key) {
        if (!val)
            return 0; /* empty element (",,") */
        sqz_errf(err, errlen, "option '=%s' has no name", val);
        return -EINVAL;
    }
    for (size_t i = 0; i < sizeof(valued) / sizeof(valued[0]); i++)
        if (strcmp(key, valued[i].name) == 0)
            return valued[i].set(o, val, err, errlen);
    for (size_t i = 0; !val && i < sizeof(flags) / sizeof(flags[0]); i++)
        if (strcmp(key, flags[i].name) == 0) {
            *(int *)((char *)o + flags[i].field) = flags[i].value;
            if (strcmp(key, "allow_other") == 0)
                o->default_permissions = 1;
            return 0;
        }
    int rc = other_option(o, key, val);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    if (val)
        sqz_errf(err, errlen, "unknown option '%s=%s'", key, val);
    else
        sqz_errf(err, errlen, "unknown option '%s'", key);
    return -EINVAL;
}

int sqz_mount_opts_each(const char *optstring,
                        int (*fn)(void *arg, const char *key, const char *val),
                        void *arg)
{
    size_t len = strlen(optstring);
    char *buf = malloc(len + 1);
    if (!buf)
        return -ENOMEM;
    const char *p = optstring;
    int rc = 0;
    while (rc == 0) {
        /* Unescape one element into buf; remember where '=' is. */
        size_t n = 0;
        long eq = -1;
        while (*p && *p != ',') {
            if (*p == '\\' && p[1]) {
                p++;
                buf[n++] = *p++;
                continue;
            }
            if (*p == '=' && eq < 0)
                eq = (long)n;
            buf[n++] = *p++;
        }
        buf[n] = '\0';
        const char *val = NULL;
        if (eq >= 0) {
            buf[eq] = '\0';
            val = buf + eq + 1;
        }
        rc = fn(arg, buf, val);
        if (*p != ',')
            break;
        p++;
    }
    free(buf);
    return rc;
}

struct parse_ctx {
    struct sqz_mount_opts *o;
    char *err;
    size_t errlen;
};

static int parse_one(void *arg, const char *key, const char *val)
{
    struct parse_ctx *c = arg;
    return one_option(c->o, key, val, c->err, c->errlen);
}

int sqz_parse_mount_options(const char *optstring, struct sqz_mount_opts *out,
                            char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!optstring || !out) {
        sqz_errf(err, errlen, "no option string");
        return -EINVAL;
    }
    struct parse_ctx c = {out, err, errlen};
    int rc = sqz_mount_opts_each(optstring, parse_one, &c);
    if (rc == -ENOMEM)
        sqz_errf(err, errlen, "out of memory");
    return rc;
}

const char *sqz_mount_opt_key(const char *name)
{
    static const char *const own[] = {
        "cache", "readahead", "threads", "max_fds", "min_saving", "policy", "tier",
        "tier_rate", "revalidate", "wait_writer", "allow_other",
        "default_permissions", "io_uring", NULL,
    };
    if (strcmp(name, "compress") == 0 || strcmp(name, "block") == 0)
        return "compress";
    if (strcmp(name, "writeback") == 0 || strcmp(name, "nowriteback") == 0 ||
        strcmp(name, "writeback_cache") == 0 ||
        strcmp(name, "no_writeback_cache") == 0)
        return "writeback";
    if (strcmp(name, "pack") == 0 || strcmp(name, "nopack") == 0)
        return "pack";
    for (size_t i = 0; own[i]; i++)
        if (strcmp(name, own[i]) == 0)
            return own[i];
    return NULL;
}

int sqz_mount_opts_describe(const struct sqz_mount_opts *o, char *buf, size_t n)
{
    char spec[128];
    if (sqz_spec_format(&o->spec, spec, sizeof(spec)) < 0)
        snprintf(spec, sizeof(spec), "?");
    int len = snprintf(buf, n,
        "compress=%s\ncache=%zu\nreadahead=%zu\nthreads=%d\nmax_fds=%zu\n"
        "min_saving=%u.%u\n"
        "policy=%s\ntier=%lld\ntier_rate=%llu\nrevalidate=%d\nwait_writer=%d\n"
        "writeback=%d\npack=%d\nro=%d\nallow_other=%d\ndefault_permissions=%d\n"
        "io_uring=%d\nfuse=%s\n",
        spec, o->cache_bytes, o->readahead_bytes, o->threads, o->max_fds,
        o->min_saving / 10, o->min_saving % 10,
        o->policy_file ? o->policy_file : "", o->tier_s, o->tier_rate,
        o->revalidate_s, o->wait_writer_s, o->writeback, o->pack, o->ro,
        o->allow_other, o->default_permissions, o->io_uring,
        o->fuse_opts ? o->fuse_opts : "");
    return len < 0 ? -EINVAL : (size_t)len >= n ? -ENOSPC : len;
}
