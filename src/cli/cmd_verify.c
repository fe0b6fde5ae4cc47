/* verify [-v] [--json] PATH...: check every container under the paths
 * (header, anchors, index, every block's checksum and decompression), every
 * packed file (its pointer, and its entry read, checked and decompressed)
 * and every pack file (each entry's header and checksum), and name each
 * damaged file and block, and every uncommitted tail.
 * Hidden files (.sqz-tmp.*) other than packs, the writer lock and the tier
 * state are listed as leftovers with their size (a warning).
 * Exit status: 0 clean, 1 damaged (or unreadable), 3 no damage but an
 * uncommitted tail (bytes after the last valid commit: left by a crash
 * before the data was synced, or damage that cannot be told apart from
 * that) or a warning (a damaged anchor slot next to a valid one, a
 * leftover hidden file) in at least one file, 2 usage. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define VERIFY_TAIL 3

typedef struct verify_ctx {
    bool verbose, json;
    unsigned long checked, damaged, tails, skipped, errors, leftovers;
    uint64_t leftover_bytes;
    const char *current;
    int quiet;       /* a first pass: problems not reported (verify_fd) */
    unsigned retries; /* passes of the current file it changed during */
    json_w jw;
    /* problems of the current file (JSON mode) */
    char **msgs;
    size_t nmsgs, capmsgs;
} verify_ctx;

static void report(void *user, const char *msg)
{
    verify_ctx *x = user;
    if (x->quiet)
        return;
    if (!x->json) {
        printf("%s: %s\n", x->current, msg);
        return;
    }
    if (x->nmsgs == x->capmsgs) {
        size_t nc = x->capmsgs ? 2 * x->capmsgs : 8;
        char **nv = realloc(x->msgs, nc * sizeof(*nv));
        if (!nv)
            return;
        x->msgs = nv;
        x->capmsgs = nc;
    }
    char *d = strdup(msg);
    if (d)
        x->msgs[x->nmsgs++] = d;
}

static void json_file(verify_ctx *x, const char *path, const char *status,
                      uint64_t tail, const char *error)
{
    json_begin_obj(&x->jw);
    json_kv_str(&x->jw, "path", path);
    json_kv_str(&x->jw, "status", status);
    json_key(&x->jw, "problems");
    json_begin_arr(&x->jw);
    for (size_t i = 0; i < x->nmsgs; i++)
        json_str(&x->jw, x->msgs[i]);
    json_end_arr(&x->jw);
    json_kv_u64(&x->jw, "uncommitted_tail_bytes", tail);
    if (error) {
        json_kv_str(&x->jw, "error", error);
    }
    json_end_obj(&x->jw);
    for (size_t i = 0; i < x->nmsgs; i++)
        free(x->msgs[i]);
    x->nmsgs = 0;
}

static void file_error(verify_ctx *x, const char *path, int err)
{
    cli_err("%s: %s", path, strerror(err));
    if (x->json)
        json_file(x, path, "error", 0, strerror(err));
    x->errors++;
}

/* One damaged file with one problem. */
static void damaged_one(verify_ctx *x, const char *path, const char *why)
{
    x->current = path;
    report(x, why);
    if (x->json)
        json_file(x, path, "damaged", 0, NULL);
    else
        printf("%s: DAMAGED (1 problem)\n", path);
    x->checked++;
    x->damaged++;
}

/* A pack file (.sqz-tmp.pack.*): every entry's header and checksum. */
static void verify_pack(verify_ctx *x, const tree_at *at, const char *path, int fd)
{
    long entries;
    uint64_t end, tail;
    char err[256] = "";
    int r;
    /* a pack a running mount appends to while it is read: checked anew */
    for (int i = 0;; i++) {
        struct stat a, b;
        int had = fstat(fd, &a) == 0;
        err[0] = '\0';
        r = cli_pack_check(fd, at, path, &entries, &end, &tail, err, sizeof err);
        if (r == 0 || i >= 3 || !had || fstat(fd, &b) != 0 ||
            (a.st_size == b.st_size && a.st_mtim.tv_sec == b.st_mtim.tv_sec &&
             a.st_mtim.tv_nsec == b.st_mtim.tv_nsec))
            break;
    }
    if (r == -EBADMSG) {
        damaged_one(x, path, err[0] ? err : "damaged pack");
        return;
    }
    if (r < 0) {
        file_error(x, path, -r);
        return;
    }
    x->checked++;
    if (r == 1) {
        x->tails++;
        if (x->json)
            json_file(x, path, "tail", tail, NULL);
        else
            printf("%s: uncommitted tail, %" PRIu64 " bytes (from offset %" PRIu64
                   " of this pack no entry can be read, and no packed file points "
                   "there: an append torn by a crash, or damage that cannot be "
                   "told from one)\n", path, tail, end);
    } else if (x->json) {
        json_file(x, path, "ok", 0, NULL);
    } else if (x->verbose) {
        printf("%s: ok (pack, %ld entr%s)\n", path, entries,
               entries == 1 ? "y" : "ies");
    }
}

/* A 0-byte file or a torn unpacking (torn: its size) with a pack pointer:
 * its entry read and checked. 1 done, 0 no pointer (not packed). */
static int verify_packed(verify_ctx *x, const tree_at *at, const char *path, int fd,
                         uint64_t torn)
{
    sqz_pack_ptr p;
    void *buf;
    char err[256] = "";
    int r = cli_packed_load(fd, at, path, &p, &buf, err, sizeof err);
    if (r == 0)
        return 0;
    if (r == -EBADMSG || r == -EIO) {
        damaged_one(x, path, err);
        return 1;
    }
    if (r < 0) {
        file_error(x, path, -r);
        return 1;
    }
    free(buf);
    x->checked++;
    char name[SQZ_PACK_NAME_MAX];
    sqz_pack_name(p.pack_id, name);
    if (torn) {
        x->tails++;
        if (x->json)
            json_file(x, path, "tail", torn, NULL);
        else
            printf("%s: uncommitted tail, %" PRIu64 " bytes (an unpacking torn by "
                   "a crash: the packed content in %s counts)\n", path, torn, name);
    } else if (x->json) {
        json_file(x, path, "ok", 0, NULL);
    } else if (x->verbose) {
        printf("%s: ok (packed in %s)\n", path, name);
    }
    return 1;
}

/* 1 if base is SQZ_TMP_PREFIX + 16 hex digits and the file 0 bytes or a
 * container (or its start): a temporary of the daemon's recompress,
 * tiering or packing (src/store/replace.c, leftover.c). */
static int daemon_temp(const tree_at *at, const char *base, const struct stat *st)
{
    size_t pl = sizeof CLI_TMP_PREFIX - 1;
    if (strlen(base) != pl + 16 || st->st_nlink != 1)
        return 0;
    for (size_t i = pl; i < pl + 16; i++)
        if (!strchr("0123456789abcdef", base[i]))
            return 0;
    if (st->st_size == 0)
        return 1;
    int fd = openat(at->dirfd, at->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    int p = sqz_ctr_probe_fd(fd);
    close(fd);
    return p == 1 || p == SQZ_PROBE_TORN || p == -EBADMSG;
}

/* Report path (st) as a leftover hidden file (a warning), what it is. */
static void report_leftover(verify_ctx *x, const char *path,
                            const struct stat *st, const char *what)
{
    char msg[320];
    snprintf(msg, sizeof msg, "leftover hidden file, %lld bytes (%s)",
             (long long)st->st_size, what);
    x->current = path;
    report(x, msg);
    if (x->json)
        json_file(x, path, "leftover", 0, NULL);
    x->leftovers++;
    x->leftover_bytes += (uint64_t)st->st_size;
    fflush(stdout);
}

/* A hidden file that is not a pack: the writer lock and the tier state of
 * a mount are skipped, anything else is a leftover (a warning): the mount
 * never shows it, so its space is otherwise lost unseen. */
static void verify_hidden(verify_ctx *x, const char *path, const struct stat *st,
                          const tree_at *at)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!strcmp(base, CLI_TMP_PREFIX "writer-lock") ||
        !strcmp(base, CLI_TMP_PREFIX "tier-state"))
        return;
    const char *what = daemon_temp(at, base, st)
        ? "a temporary of the daemon's recompress, tiering or packing, left "
          "by a crash (or in use by a running mount): a read-write mount "
          "removes it when it lists this directory"
        : "not shown through the mount and not removed by it: a temporary of "
          "squeezefs recompress stopped by a crash, or a file put here by hand";
    report_leftover(x, path, st, what);
}

/* An entry of BACKING/.sqz-tmp.ids (src/node/ident.c, docs/FORMAT.md
 * "Kept inode numbers"): a kept inode (S.Y) is 0 bytes; one with bytes, or
 * a replace's intent (n.S.B.Y), is what a crash left, finished or removed
 * by the next read-write mount: a leftover (a warning). 1 if it was one. */
static int verify_ids_entry(verify_ctx *x, const char *path, const char *rel,
                            const struct stat *st)
{
    size_t dl = sizeof CLI_IDS_DIR - 1;
    if (strncmp(rel, CLI_IDS_DIR "/", dl + 1) != 0 || strchr(rel + dl + 1, '/'))
        return 0;
    const char *base = rel + dl + 1;
    if (cli_is_own_hidden(base))
        return 0; /* a temporary: as everywhere */
    const char *what;
    if (!strncmp(base, "n.", 2))
        what = "a replace's temporary or the file it replaced, left by a crash: "
               "the next read-write mount finishes or removes it";
    else if (st->st_size > 0)
        what = "an inode number kept for a replaced file, not yet emptied: the "
               "next read-write mount empties it";
    else
        return 1;
    report_leftover(x, path, st, what);
    return 1;
}

/* Verify a container (fd; st: its stat from the walk). A file a running
 * mount changes while it is read (packed in place: truncated to 0 bytes
 * under the reader) looks damaged: a pass with problems is kept quiet
 * first, and if the file changed since st (its size or times, or the
 * file opened is not the one listed) VERIFY_CHANGED says to check it
 * anew (at most 3 times);
 * else the pass is run again, reporting. */
#define VERIFY_CHANGED 1000000
static int verify_fd(verify_ctx *x, int fd, const struct stat *st,
                     sqz_verify_extra *ex)
{
    if (x->retries >= 3)
        return sqz_verify_fd_ex(fd, x->current, report, x, ex);
    x->quiet = 1;
    int n = sqz_verify_fd_ex(fd, x->current, report, x, ex);
    x->quiet = 0;
    if (n == 0 && ex->tail_bytes == 0 && ex->warnings == 0)
        return 0;
    struct stat now;
    if (fstat(fd, &now) != 0 || now.st_size != st->st_size ||
        now.st_ino != st->st_ino ||
        now.st_mtim.tv_sec != st->st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != st->st_mtim.tv_nsec ||
        now.st_ctim.tv_sec != st->st_ctim.tv_sec ||
        now.st_ctim.tv_nsec != st->st_ctim.tv_nsec)
        return VERIFY_CHANGED;
    return sqz_verify_fd_ex(fd, x->current, report, x, ex);
}

static int verify_file(void *user, const char *path, const char *rel,
                       const struct stat *st, const tree_at *at)
{
    verify_ctx *x = user;
    if (!S_ISREG(st->st_mode))
        return 0;
    if (verify_ids_entry(x, path, rel, st))
        return 0;
    bool pack = cli_is_pack_name(path);
    /* hidden files of a mount other than packs */
    if (!pack && cli_is_own_hidden(path) && rel[0]) {
        verify_hidden(x, path, st, at);
        return 0;
    }
    int fd = openat(at->dirfd, at->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        file_error(x, path, errno);
        return 0;
    }
    if (pack) {
        verify_pack(x, at, path, fd);
        close(fd);
        fflush(stdout);
        return 0;
    }
    int pr = sqz_ctr_probe_fd(fd);
    if ((st->st_size == 0 || cli_unpack_torn(fd, pr)) &&
        verify_packed(x, at, path, fd, (uint64_t)st->st_size)) {
        close(fd);
        fflush(stdout);
        return 0;
    }
    if (pr == SQZ_PROBE_TORN) {
        uint64_t n = (uint64_t)st->st_size;
        if (x->json)
            json_file(x, path, "tail", n, NULL);
        else
            printf("%s: uncommitted tail, %" PRIu64 " bytes (the creation was "
                   "torn by a crash before it was synced: an empty file)\n",
                   path, n);
        x->checked++;
        x->tails++;
        close(fd);
        return 0;
    }
    if (pr == 0) {
        if (x->json && x->verbose)
            json_file(x, path, "skipped", 0, NULL);
        else if (x->verbose)
            printf("%s: skipped (not a container)\n", path);
        x->skipped++;
        close(fd);
        return 0;
    }
    if (pr < 0 && pr != -EBADMSG) { /* -EBADMSG: damaged header, verify it */
        cli_err("%s: %s", path, strerror(-pr));
        if (x->json)
            json_file(x, path, "error", 0, strerror(-pr));
        x->errors++;
        close(fd);
        return 0;
    }
    x->current = path;
    sqz_verify_extra ex;
    int n = verify_fd(x, fd, st, &ex);
    if (n == VERIFY_CHANGED) { /* by a mount meanwhile: checked anew */
        struct stat now;
        int again = fstatat(at->dirfd, at->name, &now, AT_SYMLINK_NOFOLLOW) == 0;
        close(fd);
        x->retries++;
        int r = again ? verify_file(user, path, rel, &now, at) : 0;
        x->retries = 0;
        return r;
    }
    uint64_t tail = ex.tail_bytes;
    close(fd);
    x->checked++;
    const char *status = "ok";
    if (n < 0) {
        if (!x->json)
            printf("%s: cannot be read: %s\n", path, strerror(-n));
        status = "damaged";
        x->damaged++;
    } else if (n > 0) {
        if (!x->json)
            printf("%s: DAMAGED (%d problem%s)\n", path, n, n == 1 ? "" : "s");
        status = "damaged";
        x->damaged++;
    } else if (tail > 0) {
        status = "tail";
        x->tails++;
    } else if (ex.warnings > 0) {
        status = "warning";
        x->tails++;
    }
    if (tail > 0 && !x->json)
        printf("%s: uncommitted tail, %" PRIu64 " bytes (after the last valid "
               "commit: a crash before the data was synced, or damage that "
               "cannot be told from one; removed at the next write)\n",
               path, tail);
    if (x->json)
        json_file(x, path, status, tail, n < 0 ? strerror(-n) : NULL);
    else if (x->verbose && n == 0 && tail == 0 && ex.warnings == 0)
        printf("%s: ok\n", path);
    fflush(stdout);
    return 0;
}

static void quiet_log(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    (void)msg; /* the report callback already names every problem */
}

int cmd_verify(int argc, char **argv)
{
    verify_ctx x = {0};
    int first = 1;
    bool bad = false;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "-v") || !strcmp(argv[first], "--verbose")) {
            x.verbose = true;
        } else if (!strcmp(argv[first], "--json")) {
            x.json = true;
        } else {
            cli_err("unknown option '%s'", argv[first]);
            bad = true;
        }
    }
    if (bad || first >= argc) {
        fprintf(stderr, "usage: squeezefs verify [-v] [--json] PATH...\n");
        return CLI_USAGE;
    }
    sqz_set_log(quiet_log, NULL);
    if (x.json) {
        json_init(&x.jw, stdout, true);
        json_begin_obj(&x.jw);
        json_key(&x.jw, "files");
        json_begin_arr(&x.jw);
    }
    for (int i = first; i < argc; i++) {
        cli_walk_ids = true;
        int r = tree_walk(argv[i], verify_file, NULL, &x);
        if (r < 0) {
            cli_err("%s: %s", argv[i], strerror(-r));
            x.errors++;
        }
    }
    int rc = (x.damaged || x.errors)  ? CLI_FAIL
             : x.tails || x.leftovers ? VERIFY_TAIL
                                      : CLI_OK;
    if (x.json) {
        json_end_arr(&x.jw);
        json_kv_u64(&x.jw, "checked", x.checked);
        json_kv_u64(&x.jw, "damaged", x.damaged);
        json_kv_u64(&x.jw, "uncommitted_tails", x.tails);
        json_kv_u64(&x.jw, "skipped", x.skipped);
        json_kv_u64(&x.jw, "leftovers", x.leftovers);
        json_kv_u64(&x.jw, "leftover_bytes", x.leftover_bytes);
        json_kv_u64(&x.jw, "errors", x.errors);
        json_key(&x.jw, "exit_status");
        json_i64(&x.jw, rc);
        json_end_obj(&x.jw);
        printf("\n");
    } else {
        printf("%lu file%s checked, %lu damaged", x.checked,
               x.checked == 1 ? "" : "s", x.damaged);
        if (x.tails)
            printf(", %lu with an uncommitted tail or a warning", x.tails);
        if (x.skipped)
            printf(", %lu not containers (skipped)", x.skipped);
        if (x.leftovers)
            printf(", %lu leftover hidden file%s (%" PRIu64 " bytes)", x.leftovers,
                   x.leftovers == 1 ? "" : "s", x.leftover_bytes);
        printf("\n");
    }
    free(x.msgs);
    return rc;
}
