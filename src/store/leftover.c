/* The daemon's own hidden files in BACKING (docs/FORMAT.md "Hidden
 * files"): which hidden names it made (packs, the temporaries of
 * replace.c), which of those a job of this daemon uses now, and removing a
 * temporary a crash left behind when a read-write mount lists its
 * directory. Everything else named SQZ_TMP_PREFIX* (a user's file, the
 * writer lock, the tier state) is never removed here. No locks: the table
 * of temporaries in use is a fixed array of atomics. */
#include "store/leftover.h"
#include "daemon/fs.h"
#include "node/inode.h"
#include "node/ptimes.h"
#include "store/pack_rd.h"
#include "squeezefs/pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* Temporaries in use (their id | 1: 0 is a free slot; two ids that differ
 * only in bit 0 look alike, which only keeps a leftover longer). More jobs
 * than slots at once: every temporary counts as in use. */
#define LIVE_SLOTS 64
static _Atomic uint64_t g_live[LIVE_SLOTS];
static atomic_int g_live_overflow;

int sqz_tmp_name_parse(const char *name, uint64_t *id)
{
    return sqz_name_hex16(name, SQZ_TMP_PREFIX, id);
}

void sqz_tmp_live_begin(const char *name)
{
    uint64_t id;
    if (!sqz_tmp_name_parse(name, &id))
        return;
    for (int i = 0; i < LIVE_SLOTS; i++) {
        uint64_t free_slot = 0;
        if (atomic_compare_exchange_strong(&g_live[i], &free_slot, id | 1))
            return;
    }
    atomic_fetch_add(&g_live_overflow, 1);
}

void sqz_tmp_live_end(const char *name)
{
    uint64_t id;
    if (!name[0] || !sqz_tmp_name_parse(name, &id))
        return;
    for (int i = 0; i < LIVE_SLOTS; i++) {
        uint64_t v = id | 1;
        if (atomic_compare_exchange_strong(&g_live[i], &v, 0))
            return;
    }
    atomic_fetch_sub(&g_live_overflow, 1);
}

static int tmp_live(uint64_t id)
{
    if (atomic_load(&g_live_overflow) > 0)
        return 1;
    for (int i = 0; i < LIVE_SLOTS; i++)
        if (atomic_load(&g_live[i]) == (id | 1))
            return 1;
    return 0;
}

int sqz_hidden_kind(int dfd, const char *name, off_t *size)
{
    uint64_t id;
    int pack = sqz_pack_name_parse(name, &id);
    if (!pack && !sqz_tmp_name_parse(name, &id))
        return SQZ_HIDDEN_OTHER;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
                    O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? SQZ_HIDDEN_GONE : SQZ_HIDDEN_OTHER;
    int kind = SQZ_HIDDEN_OTHER;
    struct stat st;
    /* neither a pack nor a temporary ever has a second link */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1) {
        if (size)
            *size = st.st_size;
        if (pack) {
            if (sqz_pack_header_is(fd, id) == 1)
                kind = SQZ_HIDDEN_PACK;
        } else {
            /* packing's is 0 bytes, recompress's and tiering's a container
             * (or the start of one) */
            int p = st.st_size == 0 ? 1 : sqz_ctr_probe_fd(fd);
            if (p == 1 || p == SQZ_PROBE_TORN || p == -EBADMSG)
                kind = tmp_live(id) ? SQZ_HIDDEN_TEMP_LIVE : SQZ_HIDDEN_TEMP;
        }
    }
    close(fd);
    return kind;
}

void sqz_leftover_meet(struct sqz_fs *fs, struct sqz_inode *dir, int dfd,
                       const char *name)
{
    uint64_t id;
    if (fs->opts.ro || !sqz_tmp_name_parse(name, &id))
        return;
    off_t size = 0;
    if (sqz_hidden_kind(dfd, name, &size) != SQZ_HIDDEN_TEMP)
        return;
    char rel[PATH_MAX];
    if (sqz_inode_relpath(fs, dir, rel, sizeof(rel)) != 0)
        rel[0] = '\0';
    const char *sep = rel[0] ? "/" : "";
    struct sqz_ptimes_dir t; /* the directory shows the times it had */
    sqz_ptimes_dir_begin(fs, dfd, &t);
    int rc = unlinkat(dfd, name, 0) == 0 ? 0 : -errno;
    sqz_ptimes_dir_end(fs, dfd, &t);
    errno = -rc;
    if (rc == 0)
        sqz_logf(SQZ_LOG_INFO, "%s%s%s: removed, a temporary left by a crash "
                 "(%lld bytes)", rel, sep, name, (long long)size);
    else if (errno != ENOENT)
        sqz_logf(SQZ_LOG_WARN, "%s%s%s: a temporary left by a crash, cannot "
                 "be removed: %s", rel, sep, name, strerror(errno));
}

int sqz_hidden_clear(struct sqz_fs *fs, struct sqz_inode *p, const char *name)
{
    int pfd = sqz_ifd_get(p);
    if (pfd < 0)
        return pfd;
    int dfd = sqz_openat_fd(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
    sqz_ifd_put(p);
    if (dfd < 0)
        return dfd;
    int d2 = dup(dfd);
    DIR *dp = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!dp) {
        if (d2 >= 0)
            close(d2);
        close(dfd);
        return -ENOTEMPTY;
    }
    int rc = 0;
    struct dirent *de;
    for (int pass = 0; pass < 2 && rc == 0; pass++) { /* check, then remove */
        rewinddir(dp);
        while ((de = readdir(dp)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            int k = de->d_type == DT_DIR ? SQZ_HIDDEN_OTHER
                    : sqz_hidden_kind(dfd, de->d_name, NULL);
            if (k == SQZ_HIDDEN_GONE)
                continue;
            if (k == SQZ_HIDDEN_OTHER) {
                rc = -ENOTEMPTY;
                break;
            }
            if (pass == 1 && unlinkat(dfd, de->d_name, 0) != 0 && errno != ENOENT) {
                rc = -errno;
                break;
            }
            uint64_t id;
            if (pass == 1 && sqz_pack_name_parse(de->d_name, &id))
                sqz_pack_rd_forget(fs, id); /* its space is freed */
        }
    }
    closedir(dp);
    close(dfd);
    return rc;
}
