/* tier [--dry-run] [--max-rate MB/s] [--json] PATH...: one tiering pass
 * now over a mount (or a subtree of it). For every regular file the daemon
 * says is due (xattr user.squeezefs.tier: past the AGE of its policy's
 * after clause and stored otherwise than its aged policy), the daemon
 * rewrites it under the aged policy, online and crash-safely (ioctl
 * SQZ_IOC_TIER on a read-only descriptor; src/jobs/tier_job.c). --dry-run only lists what
 * would change, with a saving estimated by compressing a sample of each
 * file with its aged policy here. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cli.h"

typedef struct tier_ctx {
    bool dry_run, json;
    uint64_t rate;            /* bytes/s for the daemon; 0 = unlimited */
    unsigned long scanned, files, skipped, abandoned, failed;
    uint64_t before, after;   /* backing bytes of the tiered (or due) files */
    json_w w;
    bool not_mount;
} tier_ctx;

typedef struct status {
    char state[32], from[64], to[64];
    uint64_t length, backing;
} status;

static int get_status(const char *path, status *st)
{
    char *text;
    int r = cli_get_xattr(path, SQZ_XATTR_TIER, &text);
    if (r < 0)
        return r;
    json_flat o;
    r = json_flat_parse(text, &o, NULL, 0);
    free(text);
    if (r < 0)
        return -EPROTO;
    const json_field *f;
    memset(st, 0, sizeof *st);
    if ((f = json_flat_get(&o, "state")) && f->kind == JSON_STR)
        snprintf(st->state, sizeof st->state, "%.31s", f->str);
    if ((f = json_flat_get(&o, "stored")) && f->kind == JSON_STR)
        snprintf(st->from, sizeof st->from, "%.63s", f->str);
    if ((f = json_flat_get(&o, "target")) && f->kind == JSON_STR)
        snprintf(st->to, sizeof st->to, "%.63s", f->str);
    if ((f = json_flat_get(&o, "length")) && f->kind == JSON_NUM)
        st->length = (uint64_t)f->num;
    if ((f = json_flat_get(&o, "backing")) && f->kind == JSON_NUM)
        st->backing = (uint64_t)f->num;
    json_flat_free(&o);
    return st->state[0] ? 0 : -EPROTO;
}

/* Estimated container size of a file of st->length bytes under st->to:
 * one sample of up to SAMPLE bytes from the middle of the file (from the
 * start of a block) compressed here, stored raw when it saves less than
 * 12.5 %, scaled to the file, plus the index. */
#define SAMPLE ((size_t)256 << 10)
static int estimate(const char *path, const status *st, uint64_t *out)
{
    sqz_spec sp;
    if (sqz_spec_parse(st->to, &sp, NULL, 0) < 0 || !sp.log2bs)
        return -EINVAL;
    size_t bs = (size_t)1 << sp.log2bs;
    *out = 4096 + ((st->length + bs - 1) / bs) * 32;
    if (st->length == 0)
        return 0;
    size_t want = bs < SAMPLE ? bs : SAMPLE;
    uint64_t off = st->length / 2 / bs * bs;
    if (st->length - off < want)
        off = st->length > want ? st->length - want : 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    unsigned char *buf = malloc(want);
    unsigned char *dst = NULL;
    int r = buf ? 0 : -ENOMEM;
    ssize_t n = r ? 0 : pread(fd, buf, want, (off_t)off);
    if (n < 0)
        r = -errno;
    close(fd);
    if (r == 0 && n > 0) {
        sqz_alg alg = sp.alg;
        int lvl = sp.level;
        if (sp.auto_mode)
            sqz_auto_choose(sp.auto_mode, buf, (size_t)n, sp.log2bs, &alg, &lvl);
        size_t cap = sqz_compress_bound(alg, (size_t)n);
        dst = malloc(cap);
        ssize_t c = dst ? sqz_compress(alg, lvl, buf, (size_t)n, dst, cap) : -ENOMEM;
        if (c < 0 || (uint64_t)c > (uint64_t)n * 7 / 8)
            c = n; /* stored raw */
        *out += (uint64_t)llround((double)st->length * (double)c / (double)n);
    }
    free(buf);
    free(dst);
    return r;
}

static void json_change(tier_ctx *x, const char *path, const status *st,
                        const char *result, uint64_t after, const char *after_key)
{
    json_begin_obj(&x->w);
    json_kv_str(&x->w, "path", path);
    json_kv_str(&x->w, "from", st->from);
    json_kv_str(&x->w, "to", st->to);
    json_kv_str(&x->w, "result", result);
    json_kv_u64(&x->w, "bytes_before", st->backing);
    if (after_key) {
        json_kv_u64(&x->w, after_key, after);
    }
    json_end_obj(&x->w);
}

/* One due file. */
static void tier_one(tier_ctx *x, const tree_at *at, const char *path, const status *st)
{
    if (x->dry_run) {
        uint64_t est = 0;
        int r = estimate(path, st, &est);
        if (r < 0) {
            cli_err("%s: cannot estimate: %s", path, strerror(-r));
            est = st->backing;
        }
        x->files++;
        x->before += st->backing;
        x->after += est;
        if (x->json)
            json_change(x, path, st, "would-tier", est, "estimated_bytes_after");
        else
            printf("%s: %s -> %s, %llu -> ~%llu bytes (would tier)\n", path, st->from,
                   st->to, (unsigned long long)st->backing, (unsigned long long)est);
        return;
    }
    /* an ioctl on a read-only descriptor, not setxattr: the kernel holds
     * the file's inode lock through a setxattr, so writers, truncates and
     * renames of the file would wait for the whole rewrite */
    int r = 0;
    int fd = openat(at->dirfd, at->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
    } else {
        uint64_t rate = x->rate;
        if (ioctl(fd, SQZ_IOC_TIER, &rate) < 0)
            r = -errno;
        close(fd);
    }
    status now;
    const char *what = NULL;
    if (r == 0 && get_status(path, &now) == 0) {
        x->files++;
        x->before += st->backing;
        x->after += now.backing;
        if (x->json)
            json_change(x, path, st, "tiered", now.backing, "bytes_after");
        else
            printf("%s: %s -> %s, %llu -> %llu bytes\n", path, st->from, st->to,
                   (unsigned long long)st->backing, (unsigned long long)now.backing);
        return;
    }
    if (r == -EBUSY || r == -EMLINK) {
        x->skipped++;
        what = r == -EBUSY ? "skipped" : "skipped-links";
    } else if (r == -ECANCELED || r == -EINTR) {
        x->abandoned++;
        what = "abandoned";
    } else if (r == -EALREADY) {
        return; /* no longer due (tiered by the daemon meanwhile) */
    } else {
        x->failed++;
        what = "failed";
        cli_err("%s: %s", path, strerror(r ? -r : EPROTO));
    }
    if (x->json)
        json_change(x, path, st, what, 0, NULL);
    else if (r != 0 && strcmp(what, "failed"))
        printf("%s: %s (%s)\n", path, what,
               r == -EBUSY ? "open for writing" : r == -EMLINK ? "hard links"
                                                : "written meanwhile; run again later");
}

static int visit(void *user, const char *path, const char *rel, const struct stat *st,
                 const tree_at *at)
{
    (void)rel;
    tier_ctx *x = user;
    if (!S_ISREG(st->st_mode) || x->not_mount)
        return 0;
    x->scanned++;
    status s;
    int r = get_status(path, &s);
    if (r < 0) {
        if (r == -ENODATA || r == -ENOTSUP || r == -EOPNOTSUPP) {
            cli_err("%s: not on a squeezefs mount (tier works through a mount)", path);
            x->not_mount = true;
            x->failed++;
            return 1;
        }
        cli_err("%s: %s", path, strerror(-r));
        x->failed++;
        return 0;
    }
    if (!strcmp(s.state, "due")) {
        tier_one(x, at, path, &s);
    } else if (!strcmp(s.state, "writing") || !strcmp(s.state, "links")) {
        x->skipped++;
        if (x->json)
            json_change(x, path, &s, "skipped", 0, NULL);
        else
            printf("%s: skipped (%s)\n", path,
                   s.state[0] == 'w' ? "open for writing" : "hard links");
    } else if (!strcmp(s.state, "damaged")) {
        x->failed++;
        cli_err("%s: damaged container, not tiered", path);
    }
    fflush(stdout);
    return 0;
}

static int walk_error(void *user, const char *path, const char *rel, int err)
{
    (void)rel;
    tier_ctx *x = user;
    cli_err("%s: %s", path, strerror(-err));
    x->failed++;
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: squeezefs tier [--dry-run] [--max-rate MB/s] [--json] PATH...\n");
    return CLI_USAGE;
}

int cmd_tier(int argc, char **argv)
{
    tier_ctx x = {0};
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        const char *a = argv[first];
        if (!strcmp(a, "--dry-run")) {
            x.dry_run = true;
        } else if (!strcmp(a, "--json")) {
            x.json = true;
        } else if (!strcmp(a, "--max-rate") && first + 1 < argc) {
            char *end;
            double v = strtod(argv[++first], &end);
            if (*end || !isfinite(v) || v < 0 || v > 1e9) {
                cli_err("--max-rate %s: expected MB/s (MiB per second, e.g. 50; 0 = "
                        "unlimited)", argv[first]);
                return CLI_USAGE;
            }
            x.rate = (uint64_t)llround(v * 1048576.0);
        } else if (!strcmp(a, "--")) {
            first++;
            break;
        } else {
            cli_err("unknown option '%s'", a);
            return usage();
        }
    }
    if (first >= argc)
        return usage();
    if (x.json) {
        json_init(&x.w, stdout, true);
        json_begin_obj(&x.w);
        json_key(&x.w, "changes");
        json_begin_arr(&x.w);
    }
    double t0 = cli_now();
    for (int i = first; i < argc && !x.not_mount; i++) {
        if (!cli_on_mount(argv[i])) {
            cli_err("%s: not on a squeezefs mount (tier works through a mount)", argv[i]);
            x.failed++;
            x.not_mount = true;
            break;
        }
        int r = tree_walk_err(argv[i], visit, NULL, walk_error, &x);
        if (r < 0 && !x.not_mount) {
            cli_err("%s: %s", argv[i], strerror(-r));
            x.failed++;
        }
    }
    double secs = cli_now() - t0;
    if (x.json) {
        json_end_arr(&x.w);
        json_key(&x.w, "dry_run");
        json_bool(&x.w, x.dry_run);
        json_kv_u64(&x.w, "scanned", x.scanned);
        json_kv_u64(&x.w, "files", x.files);
        json_kv_u64(&x.w, "bytes_before", x.before);
        json_kv_u64(&x.w, x.dry_run ? "estimated_bytes_after" : "bytes_after", x.after);
        json_kv_u64(&x.w, "skipped", x.skipped);
        json_kv_u64(&x.w, "abandoned", x.abandoned);
        json_kv_u64(&x.w, "failed", x.failed);
        json_key(&x.w, "seconds");
        json_double(&x.w, secs);
        json_end_obj(&x.w);
        fputc('\n', stdout);
    } else {
        printf("%s: %lu file%s %s of %lu, %llu -> %s%llu bytes", x.dry_run ? "tier --dry-run" : "tier",
               x.files, x.files == 1 ? "" : "s", x.dry_run ? "would be tiered" : "tiered",
               x.scanned, (unsigned long long)x.before, x.dry_run ? "~" : "",
               (unsigned long long)x.after);
        if (x.before)
            printf(" (%ssaving %.1f%%)", x.dry_run ? "estimated " : "",
                   100.0 * ((double)x.before - (double)x.after) / (double)x.before);
        printf(", %lu skipped, %lu abandoned, %lu failed, %.2f s\n", x.skipped, x.abandoned,
               x.failed, secs);
    }
    if (x.failed)
        return CLI_FAIL;
    return !x.dry_run && (x.skipped || x.abandoned) ? 3 : CLI_OK;
}
