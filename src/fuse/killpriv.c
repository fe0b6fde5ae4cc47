/* FUSE_HANDLE_KILLPRIV_V2 on libfuse 3.14 (which has no API for it).
 *
 * Without it the kernel asks the daemon for the "security.capability"
 * xattr before every write(2) (file_remove_privs -> cap_inode_need_killpriv
 * -> GETXATTR): one extra round trip per write, which halves the rate of
 * small writes (PostgreSQL writes 8 KiB at a time). With it the kernel
 * sets SB_NOSEC, checks once per inode, and leaves killing the set-user-ID
 * and set-group-ID bits to the daemon, telling it when in the request:
 *   WRITE    write_flags & FUSE_WRITE_KILL_SUIDGID (writer lacks CAP_FSETID)
 *   SETATTR  valid & FATTR_KILL_SUIDGID             (truncate, same)
 *   OPEN     open_flags & FUSE_OPEN_KILL_SUIDGID    (O_TRUNC, same)
 * (a direct write carries the WRITE flag too). FALLOCATE and
 * COPY_FILE_RANGE (its destination) carry no such flag: the kernel's
 * file_modified() hands the clearing to the daemon and says nothing, so
 * the daemon asks the caller's CAP_FSETID itself
 * (/proc/PID/status), as the VFS's should_remove_suid does for a local
 * file system's fallocate.
 * squeezefs stores no security.* xattrs (setxattr refuses them), so there
 * is never a capability to remove; chown(2) on BACKING clears the bits
 * itself.
 *
 * How: a custom I/O (fuse_session_custom_io) on the session's own
 * /dev/fuse descriptor. read() looks at each request before libfuse
 * dispatches it: it remembers which INIT flags the kernel offered and
 * kills the bits of the request's inode (as the VFS does: set-user-ID
 * always, set-group-ID only with group execute) before the operation
 * runs. writev() adds FUSE_HANDLE_KILLPRIV_V2 to the INIT reply if the
 * kernel offered it. Every other message passes through unchanged.
 * CREATE of a name that already exists (a race; op_create then opens it)
 * with O_TRUNC: op_create asks sqz_killpriv_create_trunc (the kernel's
 * flag for it is not passed on by libfuse 3.14).
 * With libfuse >= 3.18: no custom I/O, see sqz_killpriv_want below. */
#include "fuse/killpriv.h"
#include "daemon/fs.h"
#include "node/inode.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* INIT is the first request and is answered before any other is read;
 * these are written by the loop thread that reads it and read by the
 * thread that sends the reply (the same one in libfuse 3.14). */
static _Atomic uint64_t g_init_unique;
static atomic_int g_kernel_v2;
static atomic_int g_enabled;
static atomic_int g_native; /* libfuse's own V2 (over io_uring), below */

int sqz_killpriv_active(void)
{
    return atomic_load(&g_enabled);
}

/* /proc/PID/status of the caller into buf (n bytes, NUL-terminated): its
 * length, or -1 (pid 0: a caller in another pid namespace; gone). */
static ssize_t caller_status(uint32_t pid, char *buf, size_t n)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%u/status", (unsigned)pid);
    int fd = pid ? open(p, O_RDONLY | O_CLOEXEC) : -1;
    ssize_t r = fd >= 0 ? read(fd, buf, n - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (r >= 0)
        buf[r] = '\0';
    return r;
}

/* Whether the caller of a request (its thread pid, uid) has CAP_FSETID in
 * the daemon's user namespace. Unknown (pid 0: a caller in another pid
 * namespace; gone meanwhile): root has it. */
static int caller_has_fsetid(uint32_t pid, uint32_t uid)
{
    char p[64], buf[8192];
    const char *c = NULL;
    if (caller_status(pid, buf, sizeof(buf)) > 0)
        c = strstr(buf, "\nCapEff:");
    if (!c)
        return uid == 0;
    if (!(strtoull(c + 8, NULL, 16) & (1ull << CAP_FSETID)))
        return 0;
    struct stat a, b;
    snprintf(p, sizeof(p), "/proc/%u/ns/user", (unsigned)pid);
    if (stat(p, &a) != 0 || stat("/proc/self/ns/user", &b) != 0)
        return uid == 0;
    return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* Whether the caller (thread pid) has gid as its file system group or
 * among its supplementary groups (in_group_p). Unknown: yes. */
static int caller_in_group(uint32_t pid, gid_t gid)
{
    char buf[8192];
    if (caller_status(pid, buf, sizeof(buf)) <= 0)
        return 1;
    const char *g = strstr(buf, "\nGid:"), *s = strstr(buf, "\nGroups:");
    if (!g || !s)
        return 1;
    char *e;
    unsigned long v[4];
    g += 5;
    for (int i = 0; i < 4; i++, g = e)
        v[i] = strtoul(g, &e, 10);
    if (v[3] == gid) /* the fs gid */
        return 1;
    for (s += 8; *s && *s != '\n'; s = e) {
        unsigned long x = strtoul(s, &e, 10);
        if (e == s)
            break;
        if (x == gid)
            return 1;
    }
    return 0;
}

/* Clear S_ISUID, and S_ISGID if group-executable or the caller is not in
 * the file's group, of in's backing file
 * (ask: only if the caller pid/uid lacks CAP_FSETID, asked only when there
 * are bits to clear). */
static void kill_suidgid(struct sqz_fs *fs, struct sqz_inode *in,
                         uint32_t pid, uint32_t uid, int ask)
{
    if (!in || in->type != S_IFREG)
        return;
    struct stat st;
    if (sqz_backing_stat(in, &st) != 0)
        return;
    mode_t kill = st.st_mode & S_ISUID;
    /* set-group-ID without group execute too when the caller is not in
     * the file's group (setattr_should_drop_sgid; xfstests generic/683) */
    if ((st.st_mode & S_ISGID) &&
        ((st.st_mode & S_IXGRP) ||
         (!caller_in_group(pid, st.st_gid) && !caller_has_fsetid(pid, uid))))
        kill |= S_ISGID;
    if (!kill || (ask && caller_has_fsetid(pid, uid)))
        return;
    char pp[64];
    int fd = sqz_ifd_get(in);
    if (fd < 0)
        return;
    sqz_proc_path(fd, pp, sizeof(pp));
    int rc = fchmodat(AT_FDCWD, pp, st.st_mode & 07777 & ~kill, 0);
    sqz_ifd_put(in);
    if (rc != 0) {
        sqz_logf(SQZ_LOG_WARN, "cannot clear set-ID bits after a write: %s",
                 strerror(errno));
        return;
    }
    /* the kernel keeps the mode it had (its attributes are valid for the
     * attribute timeout) and learns of no change from a WRITE's or a
     * FALLOCATE's reply: drop them (offset -1: attributes only, no page
     * locks; xfstests generic/355, 683) */
    if (fs->se)
        fuse_lowlevel_notify_inval_inode(fs->se, sqz_nodeid(fs, in), -1, 0);
}

static void inspect(struct sqz_fs *fs, const unsigned char *buf, size_t n)
{
    struct fuse_in_header h;
    if (n < sizeof h)
        return;
    memcpy(&h, buf, sizeof h);
    const unsigned char *arg = buf + sizeof h;
    size_t an = n - sizeof h;
    uint64_t node = h.nodeid;
    int kill = 0;
    switch (h.opcode) {
    case FUSE_INIT: {
        struct fuse_init_in in;
        if (an < offsetof(struct fuse_init_in, flags) + sizeof in.flags)
            return;
        memcpy(&in, arg, an < sizeof in ? an : sizeof in);
        atomic_store(&g_init_unique, h.unique);
        atomic_store(&g_kernel_v2, (in.flags & FUSE_HANDLE_KILLPRIV_V2) != 0);
        return;
    }
    case FUSE_WRITE: {
        struct fuse_write_in w;
        if (an >= sizeof w) {
            memcpy(&w, arg, sizeof w);
            kill = (w.write_flags & FUSE_WRITE_KILL_SUIDGID) != 0;
        }
        break;
    }
    case FUSE_SETATTR: {
        struct fuse_setattr_in s;
        if (an >= sizeof s) {
            memcpy(&s, arg, sizeof s);
            kill = (s.valid & FATTR_KILL_SUIDGID) != 0;
        }
        break;
    }
    case FUSE_OPEN: {
        struct fuse_open_in o;
        if (an >= sizeof o) {
            memcpy(&o, arg, sizeof o);
            kill = (o.open_flags & FUSE_OPEN_KILL_SUIDGID) != 0;
        }
        break;
    }
    case FUSE_FALLOCATE: {
        /* only the modes that succeed (content_io.c: allocate, KEEP_SIZE,
         * PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE with or without KEEP_SIZE) */
        struct fuse_fallocate_in f;
        if (an >= sizeof f) {
            memcpy(&f, arg, sizeof f);
            uint32_t m = f.mode & ~(uint32_t)FALLOC_FL_KEEP_SIZE;
            int ok = m == 0 || m == FALLOC_FL_ZERO_RANGE ||
                     (m == FALLOC_FL_PUNCH_HOLE &&
                      (f.mode & FALLOC_FL_KEEP_SIZE));
            /* 2: if the caller lacks CAP_FSETID (asked of /proc) */
            kill = ok ? 2 : 0;
        }
        break;
    }
    case FUSE_COPY_FILE_RANGE: {
        /* the destination, told nothing either (file_modified) */
        struct fuse_copy_file_range_in c;
        if (an >= sizeof c) {
            memcpy(&c, arg, sizeof c);
            node = c.nodeid_out;
            kill = c.flags == 0 ? 2 : 0;
        }
        break;
    }
    default:
        return;
    }
    if (kill && atomic_load(&g_enabled) && !fs->opts.ro)
        kill_suidgid(fs, sqz_inode_of(fs, (fuse_ino_t)node), h.pid, h.uid,
                     kill == 2);
}

void sqz_killpriv_create_trunc(struct sqz_fs *fs, fuse_req_t req,
                               struct sqz_inode *in)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    if (atomic_load(&g_enabled) && !fs->opts.ro)
        kill_suidgid(fs, in, (uint32_t)ctx->pid, (uint32_t)ctx->uid, 1);
}

/* libfuse >= 3.18 (FUSE_CAP_HANDLE_KILLPRIV_V2) asks for V2 itself, and
 * has no custom I/O unless built with it (Debian's is not), nor would its
 * io_uring requests pass one: there the handlers call sqz_killpriv_req
 * before they act, deciding as the kernel's flags would (libfuse passes
 * SETATTR's; WRITE's, OPEN's with O_TRUNC and FALLOCATE's are the
 * caller's lack of CAP_FSETID, asked of /proc: a write-back WRITE comes
 * from a kernel thread, which has it). */
void sqz_killpriv_want(struct fuse_conn_info *conn)
{
#ifdef FUSE_CAP_HANDLE_KILLPRIV_V2
    if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV_V2) {
        conn->want |= FUSE_CAP_HANDLE_KILLPRIV_V2;
        atomic_store(&g_native, 1);
        atomic_store(&g_enabled, 1);
    }
#else
    (void)conn;
#endif
}

void sqz_killpriv_req(struct sqz_fs *fs, fuse_req_t req, fuse_ino_t ino,
                      int ask)
{
    if (!atomic_load(&g_native) || fs->opts.ro)
        return;
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    kill_suidgid(fs, sqz_inode_of(fs, ino), (uint32_t)ctx->pid,
                 (uint32_t)ctx->uid, ask);
}

static ssize_t kp_read(int fd, void *buf, size_t len, void *userdata)
{
    ssize_t r = read(fd, buf, len);
    if (r > 0) {
        int saved = errno;
        inspect(userdata, buf, (size_t)r);
        errno = saved;
    }
    return r;
}

static ssize_t kp_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    (void)userdata;
    struct fuse_out_header oh;
    uint64_t unique = atomic_load(&g_init_unique);
    if (unique == 0 || count < 2 || iov[0].iov_len != sizeof oh)
        return writev(fd, iov, count);
    memcpy(&oh, iov[0].iov_base, sizeof oh);
    size_t need = offsetof(struct fuse_init_out, flags) + sizeof(uint32_t);
    if (oh.unique != unique || oh.error != 0 || iov[1].iov_len < need ||
        iov[1].iov_len > sizeof(struct fuse_init_out))
        return writev(fd, iov, count);
    /* The INIT reply: the only message changed. */
    atomic_store(&g_init_unique, 0);
    struct fuse_init_out out;
    memset(&out, 0, sizeof out);
    memcpy(&out, iov[1].iov_base, iov[1].iov_len);
    if (atomic_load(&g_kernel_v2)) {
        out.flags |= FUSE_HANDLE_KILLPRIV_V2;
        atomic_store(&g_enabled, 1);
    }
    struct iovec v[2] = {iov[0], {.iov_base = &out, .iov_len = iov[1].iov_len}};
    if (count == 2)
        return writev(fd, v, 2);
    return writev(fd, iov, count); /* not libfuse 3.14's INIT reply */
}

int sqz_killpriv_install(struct fuse_session *se)
{
#ifdef FUSE_CAP_HANDLE_KILLPRIV_V2
    (void)se;
    return 0; /* libfuse's own V2: sqz_killpriv_want */
#endif
    static const struct fuse_custom_io io = {.read = kp_read,
                                             .writev = kp_writev};
    int fd = fuse_session_fd(se);
    if (fd < 0)
        return -EBADF;
    return fuse_session_custom_io(se, &io, fd);
}
