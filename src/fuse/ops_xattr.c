/* Extended attributes.
 *  - user.* attributes are passed through to BACKING; other namespaces are
 *    not exposed (security.capability, asked before every write, is
 *    answered ENODATA without backing I/O; no ACLs).
 *  - virtual, never stored: user.squeezefs.stats (mount root: engine
 *    counters), user.squeezefs.stat (regular file: container figures),
 *    user.squeezefs.effective (any: "SPEC SOURCE WHERE"),
 *    user.squeezefs.recompress (set only: rewrite the file),
 *    user.squeezefs.tier (get: the tier status as JSON; set: tier the file
 *    now, see tier_job.c), user.squeezefs.options (mount root: the mount's
 *    options, sqz_mount_opts_describe; read by a remount, remount.c).
 *  - user.squeezefs.policy is real but validated, owner or root only.
 * And the ioctl SQZ_IOC_TIER: user.squeezefs.tier's "tier it now" on an
 * open descriptor. */
#include "daemon/fs.h"
#include "daemon/opts.h"
#include "node/inode.h"
#include "node/ptimes.h"
#include "pack/packing.h"
#include "content/content.h"
#include "content/durable.h"
#include "content/newfile_policy.h"
#include "jobs/recompress.h"
#include "jobs/tier.h"
#include "fuse/ops.h"
#include "fuse/killpriv.h"
#include "common/lockorder.h"
#include "squeezefs/shown.h"
#include "squeezefs/pack.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

static void reply_value(fuse_req_t req, size_t size, const char *val,
                        size_t len)
{
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (len > size)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, val, len);
}

/* user.* names, except the pack pointer (docs/FORMAT.md "Packed files")
 * and the kept ctime ("Shown times"):
 * the daemon's own, never shown, set or removed through the mount. */
static int is_user_ns(const char *name)
{
    return strncmp(name, "user.", 5) == 0 && strcmp(name, SQZ_PACK_XATTR) != 0 &&
           strcmp(name, SQZ_SHOWN_XATTR) != 0;
}

static int is_virtual(const char *name)
{
    return strcmp(name, SQZ_XATTR_STATS) == 0 ||
           strcmp(name, SQZ_XATTR_STAT) == 0 ||
           strcmp(name, SQZ_XATTR_EFFECTIVE) == 0 ||
           strcmp(name, SQZ_XATTR_RECOMPRESS) == 0 ||
           strcmp(name, SQZ_XATTR_TIER) == 0 ||
           strcmp(name, SQZ_XATTR_OPTIONS) == 0;
}

static int caller_owns(fuse_req_t req, struct sqz_inode *in)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    if (ctx->uid == 0)
        return 1;
    struct stat st;
    if (sqz_backing_stat(in, &st) != 0)
        return 0;
    return st.st_uid == ctx->uid;
}

static int stats_json(struct sqz_fs *fs, char *buf, size_t n)
{
    sqz_stats s;
    sqz_engine_stats(fs->engine, &s);
    uint64_t packed, pfail, premoved, pmoved;
    sqz_packer_stats(fs, &packed, &pfail);
    sqz_pack_gc_stats(fs, &premoved, &pmoved);
    uint64_t dqueued, dmarked, dbatches, dfailures;
    sqz_durable_stats(fs, &dqueued, &dmarked, &dbatches, &dfailures);
    struct sqz_ifd_stats fd;
    sqz_ifd_stats(&fd);
    char tier[1024];
    if (sqz_tier_stats_json(fs, tier, sizeof(tier)) < 0)
        tier[0] = '\0';
    return snprintf(buf, n,
        "{\"logical_bytes_read\": %" PRIu64 ", \"logical_bytes_written\": %" PRIu64
        ", \"backing_bytes_read\": %" PRIu64 ", \"backing_bytes_written\": %" PRIu64
        ", \"blocks_decompressed\": %" PRIu64 ", \"bytes_decompressed\": %" PRIu64
        ", \"blocks_compressed\": %" PRIu64 ", \"bytes_compressed\": %" PRIu64
        ", \"raw_blocks_stored\": %" PRIu64 ", \"draft_blocks\": %" PRIu64
        ", \"cache_hits\": %" PRIu64
        ", \"cache_misses\": %" PRIu64 ", \"cache_bytes\": %" PRIu64
        ", \"dirty_bytes\": %" PRIu64 ", \"pushed_blocks\": %" PRIu64
        ", \"pushed_bytes\": %" PRIu64 ", \"push_skipped\": %" PRIu64
        ", \"opens_from_lookup\": %" PRIu64
        ", \"files_packed\": %" PRIu64 ", \"pack_failures\": %" PRIu64
        ", \"packs_removed\": %" PRIu64 ", \"pack_entries_moved\": %" PRIu64
        ", \"packed_bytes_read\": %" PRIu64 ", \"pack_pending\": %zu"
        ", \"read_errors\": %" PRIu64 ", \"durable_queued\": %" PRIu64
        ", \"durable_marked\": %" PRIu64 ", \"durable_batches\": %" PRIu64
        ", \"durable_failures\": %" PRIu64
        ", \"security_xattr_gets\": %lu"
        ", \"killpriv_v2\": %d, \"writeback_cache\": %d"
        ", \"fd_handles\": %d, \"fd_cached\": %" PRIu64 ", \"fd_cache_max\": %" PRIu64
        ", \"fd_reopens\": %" PRIu64 ", \"fd_evictions\": %" PRIu64
        ", \"fd_stale\": %" PRIu64 ", \"max_fds\": %zu, \"inodes\": %zu%s}",
        s.logical_bytes_read, s.logical_bytes_written, s.backing_bytes_read,
        s.backing_bytes_written, s.blocks_decompressed, s.bytes_decompressed,
        s.blocks_compressed, s.bytes_compressed, s.raw_blocks_stored, s.draft_blocks,
        s.cache_hits, s.cache_misses, s.cache_bytes, s.dirty_bytes,
        (uint64_t)atomic_load(&fs->push.blocks),
        (uint64_t)atomic_load(&fs->push.bytes),
        (uint64_t)atomic_load(&fs->push.skipped),
        sqz_inode_stash_hits(), packed, pfail, premoved, pmoved,
        (uint64_t)atomic_load(&fs->packed_bytes_read), sqz_pack_npending(fs),
        (uint64_t)atomic_load(&fs->read_errors), dqueued, dmarked, dbatches,
        dfailures,
        atomic_load(&fs->sec_xattr_gets), sqz_killpriv_active(),
        fs->opts.writeback, sqz_ifd_handles(), fd.open_fds, fd.max_fds,
        fd.reopens, fd.evictions, fd.stale, fs->opts.max_fds,
        sqz_inode_count(fs), tier);
}

static int stat_json(const struct sqz_ctr_stat *st, char *buf, size_t n)
{
    const char *alg = sqz_alg_name(st->params.alg);
    /* As kdb+ (-21!) and `squeezefs stat` on BACKING: the compressed
     * length is the size of the backing file; storedBytes are the stored
     * (compressed or raw) bytes of the live blocks alone. */
    uint64_t clen = st->packed_bytes ? st->packed_bytes : st->backing_size;
    double ratio = clen ? (double)st->length / (double)clen : 0.0;
    return snprintf(buf, n,
        "{\"compressedLength\": %" PRIu64 ", \"uncompressedLength\": %" PRIu64
        ", \"storedBytes\": %" PRIu64
        ", \"algorithm\": \"%s\", \"zipLevel\": %d, \"logicalBlockSize\": %d"
        ", \"blocks\": %" PRIu64 ", \"rawBlocks\": %" PRIu64
        ", \"holeBlocks\": %" PRIu64 ", \"ratio\": %.4f"
        ", \"backingSize\": %" PRIu64 ", \"backingAlloc\": %" PRIu64
        ", \"auto\": %s, \"packed\": %s}",
        clen, st->length, st->compressed_bytes, alg ? alg : "unknown",
        st->params.level, st->params.log2bs, st->blocks, st->raw_blocks,
        st->hole_blocks, ratio, st->backing_size, st->backing_alloc,
        st->params.auto_mode ? "true" : "false",
        st->packed_bytes ? "true" : "false");
}

static const char *source_name(sqz_policy_source s)
{
    switch (s) {
    case SQZ_SRC_FILE: return "file";
    case SQZ_SRC_DIRECTORY: return "directory";
    case SQZ_SRC_RULE: return "rule";
    default: return "default";
    }
}

static int effective_line(struct sqz_fs *fs, struct sqz_inode *in, char *buf,
                          size_t n)
{
    sqz_resolved r;
    int rc = sqz_resolve_inode(fs, in, &r);
    if (rc)
        return rc;
    char spec[64];
    if (sqz_spec_format(&r.spec, spec, sizeof(spec)) < 0)
        return -EIO;
    const char *where = r.where;
    if (r.source == SQZ_SRC_DEFAULT || !where[0])
        where = "-";
    return snprintf(buf, n, "%s %s %s", spec, source_name(r.source), where);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                        size_t size)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    if (!is_user_ns(name)) {
        atomic_fetch_add(&fs->sec_xattr_gets, 1);
        fuse_reply_err(req, ENODATA);
        return;
    }
    char buf[4096];
    int len = -ENODATA;
    if (strcmp(name, SQZ_XATTR_STATS) == 0) {
        if (in->is_root)
            len = stats_json(fs, buf, sizeof(buf));
    } else if (strcmp(name, SQZ_XATTR_OPTIONS) == 0) {
        if (in->is_root) {
            int n = snprintf(buf, sizeof(buf), "backing=%s\n", fs->backing_real);
            len = n < 0 || (size_t)n >= sizeof(buf) ? -ENOSPC
                  : sqz_mount_opts_describe(&fs->opts, buf + n, sizeof(buf) - (size_t)n);
            if (len >= 0)
                len += n;
        }
    } else if (strcmp(name, SQZ_XATTR_STAT) == 0) {
        struct sqz_ctr_stat st;
        len = sqz_content_ctr_stat(fs, in, &st);
        if (len == 0)
            len = stat_json(&st, buf, sizeof(buf));
    } else if (strcmp(name, SQZ_XATTR_EFFECTIVE) == 0) {
        len = effective_line(fs, in, buf, sizeof(buf));
    } else if (strcmp(name, SQZ_XATTR_RECOMPRESS) == 0) {
        len = -ENODATA;
    } else if (strcmp(name, SQZ_XATTR_TIER) == 0) {
        len = in->type == S_IFREG || in->type == S_IFDIR
                  ? sqz_tier_status_json(fs, in, buf, sizeof(buf)) : -ENODATA;
    } else {
        if (in->type == S_IFLNK) {
            fuse_reply_err(req, ENODATA);
            return;
        }
        char pp[64];
        int ifd = sqz_ifd_get(in);
        if (ifd < 0) {
            fuse_reply_err(req, -ifd);
            return;
        }
        sqz_proc_path(ifd, pp, sizeof(pp));
        char *v = size ? malloc(size) : NULL;
        ssize_t r = size && !v ? (errno = ENOMEM, -1) : getxattr(pp, name, v, size);
        int e = errno;
        sqz_ifd_put(in);
        if (r < 0)
            fuse_reply_err(req, e);
        else if (size == 0)
            fuse_reply_xattr(req, (size_t)r);
        else
            fuse_reply_buf(req, v, (size_t)r);
        free(v);
        return;
    }
    if (len < 0) {
        fuse_reply_err(req, -len);
        return;
    }
    if ((size_t)len >= sizeof(buf)) {
        fuse_reply_err(req, E2BIG);
        return;
    }
    reply_value(req, size, buf, (size_t)len);
}

/* Copy value (not NUL-terminated) trimmed of surrounding white space. */
static char *trimmed(const char *value, size_t size)
{
    while (size > 0 && isspace((unsigned char)value[0])) {
        value++;
        size--;
    }
    while (size > 0 && (isspace((unsigned char)value[size - 1]) ||
                        value[size - 1] == '\0'))
        size--;
    char *s = malloc(size + 1);
    if (!s)
        return NULL;
    memcpy(s, value, size);
    s[size] = '\0';
    return s;
}

/* A regular file's xattrs change under its io, shared: a replace
 * (recompress, tiering; io exclusive) copies them to the new file and
 * exchanges it in with none changing in between (replace.c). */
static void xattr_lock(struct sqz_inode *in)
{
    if (in->type == S_IFREG)
        SQZ_RDLOCK(&in->io, SQZ_RANK_IO);
}

static void xattr_unlock(struct sqz_inode *in)
{
    if (in->type == S_IFREG)
        SQZ_RWUNLOCK(&in->io);
}

/* setxattr (flags >= 0) or removexattr (flags -1) on in's backing
 * object, under xattr_lock. 0 or -errno. */
static int set_x(struct sqz_inode *in, const char *name, const void *value,
                 size_t size, int flags)
{
    char pp[64];
    int ifd = sqz_ifd_get(in);
    if (ifd < 0)
        return ifd;
    sqz_proc_path(ifd, pp, sizeof(pp));
    xattr_lock(in);
    int rc = flags < 0 ? removexattr(pp, name) : setxattr(pp, name, value, size, flags);
    rc = rc ? -errno : 0;
    xattr_unlock(in);
    sqz_ifd_put(in);
    return rc;
}

static int set_policy(fuse_req_t req, struct sqz_fs *fs, struct sqz_inode *in,
                      const char *value, size_t size, int flags)
{
    if (!caller_owns(req, in))
        return -EPERM;
    if (in->type != S_IFREG && in->type != S_IFDIR)
        return -EPERM;
    char *text = trimmed(value, size);
    if (!text)
        return -ENOMEM;
    sqz_policy pol;
    char err[256] = "";
    int rc = sqz_policy_parse(text, &pol, err, sizeof(err));
    if (rc) {
        char rel[PATH_MAX];
        if (sqz_inode_relpath(fs, in, rel, sizeof(rel)) != 0)
            rel[0] = '\0';
        sqz_logf(SQZ_LOG_WARN, "%s: rejected %s '%s': %s", rel[0] ? rel : "/",
                 SQZ_POLICY_XATTR, text, err);
        free(text);
        return -EINVAL;
    }
    rc = set_x(in, SQZ_POLICY_XATTR, text, strlen(text), flags);
    free(text);
    if (rc == 0)
        sqz_policy_changed(fs); /* new files below it take it */
    return rc;
}

static int do_recompress(fuse_req_t req, struct sqz_fs *fs,
                         struct sqz_inode *in, const char *value, size_t size)
{
    if (in->type != S_IFREG)
        return -EINVAL;
    if (!caller_owns(req, in))
        return -EPERM;
    char *text = trimmed(value, size);
    if (!text)
        return -ENOMEM;
    char rel[PATH_MAX];
    int rc = sqz_inode_relpath(fs, in, rel, sizeof(rel));
    sqz_spec spec;
    if (rc == 0 && text[0]) {
        char err[256] = "";
        if (sqz_spec_parse(text, &spec, err, sizeof(err)) != 0) {
            sqz_logf(SQZ_LOG_WARN, "%s: recompress: bad SPEC '%s': %s", rel, text, err);
            rc = -EINVAL;
        }
        /* without a block size, recompress keeps the file's own */
    } else if (rc == 0) {
        sqz_resolved r;
        rc = sqz_resolve(fs, rel, &r);
        spec = r.spec;
    }
    free(text);
    if (rc == 0)
        rc = sqz_recompress(fs, in, &spec);
    if (rc && rc != -EINVAL)
        sqz_logf(SQZ_LOG_ERR, "%s: recompress failed: %s", rel, strerror(-rc));
    return rc;
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                        const char *value, size_t size, int flags)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    int rc;
    if (is_user_ns(name) && !fs->opts.ro && !is_virtual(name))
        sqz_ptimes_user(fs, in);
    if (!is_user_ns(name))
        rc = -EOPNOTSUPP;
    else if (fs->opts.ro)
        rc = -EROFS;
    else if (strcmp(name, SQZ_XATTR_RECOMPRESS) == 0)
        rc = do_recompress(req, fs, in, value, size);
    else if (strcmp(name, SQZ_XATTR_TIER) == 0)
        rc = caller_owns(req, in) ? sqz_tier_request(fs, req, in, value, size) : -EPERM;
    else if (is_virtual(name))
        rc = -EPERM;
    else if (strcmp(name, SQZ_POLICY_XATTR) == 0)
        rc = set_policy(req, fs, in, value, size, flags);
    else if (in->type == S_IFLNK)
        rc = -EPERM;
    else {
        rc = set_x(in, name, value, size, flags);
    }
    fuse_reply_err(req, -rc);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    int rc;
    if (is_user_ns(name) && !fs->opts.ro && !is_virtual(name))
        sqz_ptimes_user(fs, in);
    if (!is_user_ns(name))
        rc = -ENODATA;
    else if (fs->opts.ro)
        rc = -EROFS;
    else if (is_virtual(name))
        rc = -EPERM;
    else if (strcmp(name, SQZ_POLICY_XATTR) == 0 && !caller_owns(req, in))
        rc = -EPERM;
    else if (in->type == S_IFLNK)
        rc = -ENODATA;
    else {
        rc = set_x(in, name, NULL, 0, -1);
        if (rc == 0 && strcmp(name, SQZ_POLICY_XATTR) == 0)
            sqz_policy_changed(fs);
    }
    fuse_reply_err(req, -rc);
}

static void list_x(fuse_req_t req, const char *pp, size_t size);

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    if (in->type == S_IFLNK) {
        reply_value(req, size, "", 0);
        return;
    }
    char pp[64];
    int ifd = sqz_ifd_get(in);
    if (ifd < 0) {
        fuse_reply_err(req, -ifd);
        return;
    }
    sqz_proc_path(ifd, pp, sizeof(pp));
    list_x(req, pp, size);
    sqz_ifd_put(in);
}

/* LISTXATTR of the object at pp (user.* names only). */
static void list_x(fuse_req_t req, const char *pp, size_t size)
{
    ssize_t n = listxattr(pp, NULL, 0);
    if (n < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    char *all = NULL;
    for (int tries = 0; tries < 4; tries++) {
        free(all);
        all = malloc((size_t)n + 1);
        if (!all) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
        ssize_t r = listxattr(pp, all, (size_t)n + 1);
        if (r >= 0) {
            n = r;
            break;
        }
        if (errno != ERANGE || tries == 3) {
            int e = errno;
            free(all);
            fuse_reply_err(req, e);
            return;
        }
        n = listxattr(pp, NULL, 0);
        if (n < 0) {
            int e = errno;
            free(all);
            fuse_reply_err(req, e);
            return;
        }
    }
    /* Keep the user.* names only (compacting in place). */
    size_t out = 0;
    for (size_t i = 0; i < (size_t)n;) {
        size_t l = strnlen(all + i, (size_t)n - i);
        if (is_user_ns(all + i)) {
            memmove(all + out, all + i, l);
            all[out + l] = '\0';
            out += l + 1;
        }
        i += l + 1;
    }
    reply_value(req, size, all, out);
    free(all);
}

static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
                     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
                     size_t in_bufsz, size_t out_bufsz)
{
    (void)arg;
    (void)fi;
    (void)out_bufsz;
    struct sqz_fs *fs = sqz_fs_of(req);
    struct sqz_inode *in = sqz_inode_of(fs, ino);
    int rc;
    uint64_t rate;
    int tier = cmd == (unsigned)SQZ_IOC_TIER && in_bufsz == sizeof(rate);
    int rec = cmd == (unsigned)SQZ_IOC_RECOMPRESS && in_bufsz == SQZ_IOC_SPEC_MAX;
    if ((!tier && !rec) || (flags & FUSE_IOCTL_COMPAT))
        rc = -ENOTTY;
    else if (fs->opts.ro)
        rc = -EROFS;
    else if (rec) /* (checks the caller itself) */
        rc = do_recompress(req, fs, in, in_buf,
                           strnlen(in_buf, SQZ_IOC_SPEC_MAX));
    else if (!caller_owns(req, in))
        rc = -EPERM;
    else {
        memcpy(&rate, in_buf, sizeof(rate));
        rc = sqz_tier_request_rate(fs, req, in, rate);
    }
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_ioctl(req, 0, NULL, 0);
}

void sqz_ops_xattr(struct fuse_lowlevel_ops *ops)
{
    ops->ioctl = op_ioctl;
    ops->getxattr = op_getxattr;
    ops->setxattr = op_setxattr;
    ops->listxattr = op_listxattr;
    ops->removexattr = op_removexattr;
}
