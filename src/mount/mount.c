/* The mount daemon: command line, validation, FUSE session, signals,
 * request loop and teardown.
 *
 *   squeezefs [-f] [-d] [-s] [-o OPT,...] BACKING MOUNTPOINT [-o OPT,...]
 *
 * Nothing is mounted unless every option, BACKING and the rule file are
 * valid. Without -f the daemon detaches only after the mount succeeded.
 * SIGINT/SIGTERM/SIGHUP (after the kernel's cached pages are flushed,
 * shutdown.c) and unmount end the loop; op_destroy commits and
 * fsyncs every open file; the exit status is 0 unless that failed. */
#include "mount/mount.h"
#include "daemon/fs.h"
#include "daemon/opts.h"
#include "daemon/mountinfo.h"
#include "node/inode.h"
#include "node/ptimes.h"
#include "node/push.h"
#include "store/pack_rd.h"
#include "pack/packing.h"
#include "content/content.h"
#include "content/durable.h"
#include "jobs/tier.h"
#include "jobs/revalidate.h"
#include "fuse/ops.h"
#include "fuse/killpriv.h"
#include "mount/mountlife.h"
#include "mount/cmdline.h"
#include "node/ident.h"
#include "common/lockorder.h"

#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <syslog.h>
#include <unistd.h>

static void log_sink(void *user, int level, const char *msg)
{
    struct sqz_fs *fs = user;
    fprintf(stderr, "squeezefs: %s\n", msg);
    if (fs && fs->syslog)
        syslog(level == SQZ_LOG_ERR    ? LOG_ERR
               : level == SQZ_LOG_WARN ? LOG_WARNING
                                       : LOG_INFO,
               "%s", msg);
}

/* ---- lifecycle ops ---- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct sqz_fs *fs = userdata;
    conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_SPLICE_READ |
                              FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
                              FUSE_CAP_POSIX_ACL | FUSE_CAP_HANDLE_KILLPRIV |
                              FUSE_CAP_DONT_MASK | FUSE_CAP_EXPORT_SUPPORT);
    if (fs->opts.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
        conn->want |= FUSE_CAP_WRITEBACK_CACHE;
    else
        fs->opts.writeback = 0; /* what open's flag handling relies on */
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    if (conn->capable & FUSE_CAP_ASYNC_READ)
        conn->want |= FUSE_CAP_ASYNC_READ;
    conn->max_write = SQZ_MAX_IO;
    if (conn->max_readahead > SQZ_MAX_IO)
        conn->max_readahead = SQZ_MAX_IO;
    sqz_killpriv_want(conn); /* libfuse >= 3.18: its own V2 */
    sqz_uring_init(fs, conn);
}

static int g_destroy_rc; /* written once by op_destroy, read after the loop */

static void op_destroy(void *userdata)
{
    struct sqz_fs *fs = userdata;
    if (!fs->engine)
        return;
    sqz_tier_stop(fs); /* its file in progress is abandoned */
    g_destroy_rc = sqz_content_sync_all(fs);
}

/* ---- command line ---- */

/* BACKING that is itself a squeezefs mount (its root answers
 * user.squeezefs.options), most often a BACKING mounted on itself: its
 * path now leads into that mount, which shows files, not containers, and
 * keeps the daemon's hidden files out. 1 (refused, said on stderr) or 0. */
static int backing_is_squeezefs(struct sqz_fs *fs)
{
    struct statfs sf;
    if (fstatfs(fs->root_dirfd, &sf) != 0 || sf.f_type != 0x65735546) /* FUSE */
        return 0;
    char buf[4096], under[4096] = "?";
    ssize_t n = fgetxattr(fs->root_dirfd, SQZ_XATTR_OPTIONS, buf, sizeof(buf) - 1);
    if (n < 0)
        return 0;
    buf[n] = '\0';
    if (strncmp(buf, "backing=", 8) == 0)
        snprintf(under, sizeof(under), "%.*s", (int)strcspn(buf + 8, "\n"), buf + 8);
    if (strcmp(under, fs->backing_real) == 0)
        fprintf(stderr, "squeezefs: BACKING %s is mounted on itself (squeezefs %s "
                "%s, in place): only that mount can reach the directory under "
                "it. Unmount %s first\n", fs->backing_real, fs->backing_real,
                fs->backing_real, fs->backing_real);
    else
        fprintf(stderr, "squeezefs: BACKING %s is a squeezefs mount (of %s): "
                "use %s as BACKING, or unmount %s first\n", fs->backing_real,
                under, under, fs->backing_real);
    return 1;
}

/* Validate BACKING, load rules, open the root. Messages on stderr. */
static int prepare_fs(struct sqz_fs *fs, const char *backing)
{
    struct stat st;
    if (stat(backing, &st) != 0) {
        fprintf(stderr, "squeezefs: BACKING %s: %s\n", backing, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "squeezefs: BACKING %s is not a directory\n", backing);
        return -1;
    }
    fs->backing_real = realpath(backing, NULL);
    if (!fs->backing_real) {
        fprintf(stderr, "squeezefs: BACKING %s: %s\n", backing, strerror(errno));
        return -1;
    }
    fs->backing_len = strlen(fs->backing_real);
    /* log lines name containers by their path inside the mount */
    if (sqz_set_label_root(fs->backing_real) != 0) {
        fprintf(stderr, "squeezefs: out of memory\n");
        return -1;
    }
    if (fs->opts.policy_file) {
        char err[512] = "";
        int rc = sqz_rules_load(fs->opts.policy_file, &fs->rules, err, sizeof(err));
        if (rc) {
            fprintf(stderr, "squeezefs: %s\n", err[0] ? err : strerror(-rc));
            return -1;
        }
        const char *b = strrchr(fs->opts.policy_file, '/');
        snprintf(fs->rules_name, sizeof(fs->rules_name), "%s",
                 b ? b + 1 : fs->opts.policy_file);
    }
    /* Opened before mounting: BACKING may be the mount point (in place) */
    fs->root_dirfd = open(fs->backing_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fs->root_dirfd < 0) {
        fprintf(stderr, "squeezefs: BACKING %s: %s\n", backing, strerror(errno));
        return -1;
    }
    if (backing_is_squeezefs(fs))
        return -1;
    int rc = sqz_itable_init(fs);
    if (rc) {
        fprintf(stderr, "squeezefs: BACKING %s: %s\n", backing, strerror(-rc));
        return -1;
    }
    /* A container written ahead (docs/FORMAT.md "Preallocated log space")
     * no longer changes size with every commit: readers (read-only mounts
     * of this BACKING) then see new versions by the times alone. Only a
     * local file system with nanosecond times shows every write there; a
     * network one (GlusterFS, NFS: cached, coarse times) does not. */
    struct stat rst;
    /* Packing in place truncates a container that read-only mounts of a
     * shared BACKING may hold open and whose size and attributes their
     * clients cache: there, packing exchanges a new file in (pack_job.c) */
    fs->pack_in_place = sqz_backing_local(fs->root_dirfd);
    fs->prealloc_ok = sqz_backing_local(fs->root_dirfd) &&
                      fstat(fs->root_dirfd, &rst) == 0 &&
                      (rst.st_mtim.tv_nsec != 0 || rst.st_ctim.tv_nsec != 0);
    return 0;
}

/* libfuse arguments: program name, -d, and one -o with our defaults plus
 * the pass-through options. */
static int build_fuse_args(struct sqz_fs *fs, const char *prog, int debug,
                           struct fuse_args *args)
{
    if (fuse_opt_add_arg(args, prog) != 0)
        return -1;
    if (debug && fuse_opt_add_arg(args, "-d") != 0)
        return -1;
    char *o = NULL;
    int rc = 0;
    if (!fs->opts.user_fsname) {
        size_t n = strlen(fs->backing_real) + 8;
        char *v = malloc(n);
        if (!v)
            return -1;
        snprintf(v, n, "fsname=%s", fs->backing_real);
        rc |= fuse_opt_add_opt_escaped(&o, v);
        free(v);
    }
    if (!fs->opts.user_subtype)
        rc |= fuse_opt_add_opt(&o, "subtype=squeezefs");
    if (fs->opts.default_permissions || fs->opts.allow_other)
        rc |= fuse_opt_add_opt(&o, "default_permissions");
    if (fs->opts.allow_other)
        rc |= fuse_opt_add_opt(&o, "allow_other");
    if (fs->opts.ro)
        rc |= fuse_opt_add_opt(&o, "ro");
    if (fs->opts.fuse_opts && fs->opts.fuse_opts[0])
        rc |= fuse_opt_add_opt(&o, fs->opts.fuse_opts);
    if (rc == 0 && o)
        rc = fuse_opt_add_arg(args, "-o") | fuse_opt_add_arg(args, o);
    free(o);
    if (rc == 0)
        rc = sqz_uring_args(fs, args);
    return rc ? -1 : 0;
}

/* The daemon's own descriptors stay within max_fds= (ifd.c), at most half
 * of the limit; the rest is for the user's open files: take the hard
 * limit, as other FUSE file systems do, instead of the default 1024. */
static void raise_fd_limit(struct sqz_fs *fs)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            sqz_logf(SQZ_LOG_WARN, "cannot raise the open file limit: %s",
                     strerror(errno));
    }
    /* READDIRPLUS gives every listed entry an inode (memory, and a
     * descriptor in the bounded cache, ifd.c): up to a million inodes
     * (ops_dir.c); the packing notes below keep their bound of half the
     * limit */
    fs->plus_max_inodes = (size_t)1 << 20;
    size_t pm = (size_t)1 << 20;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        pm = (size_t)rl.rlim_cur / 2;
    /* Small files closed in a stream (`cp -r`) wait to be packed until the
     * stream ends; their notes keep inodes the kernel held a moment ago,
     * at most half of the limit too (a tree of 8,000 files packed in the
     * middle of its copy made the copy 1.3x slower) */
    fs->pack_pending_max = pm < SQZ_PACK_PENDING_MIN ? SQZ_PACK_PENDING_MIN
                           : pm > SQZ_PACK_PENDING_MAX ? SQZ_PACK_PENDING_MAX : pm;
}

/* The kernel grows a process's fd table by doubling it, and while other
 * threads share the table each growth waits for an RCU grace period
 * (expand_fdtable: synchronize_rcu, 10-16 ms on a 2-core VM). An O_PATH fd
 * per inode made a copy of 1,400 entries cross 64, 128, ... 1024: one
 * LOOKUP or CREATE stalled ~10 ms at each. Grown here, while this is the
 * only thread, it costs nothing (the table never shrinks): up to the fd
 * limit, at most SQZ_FD_TABLE_MAX entries (512 KiB of kernel memory); past
 * that, a doubling is rare next to the files that filled it. */
#define SQZ_FD_TABLE_MAX 65536

static void presize_fd_table(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = rl.rlim_cur < SQZ_FD_TABLE_MAX ? rl.rlim_cur : SQZ_FD_TABLE_MAX;
    if (want <= 64)
        return;
    int fd = open("/", O_PATH | O_CLOEXEC);
    if (fd < 0)
        return;
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, (int)(want - 1));
    if (hi >= 0)
        close(hi);
    close(fd);
}

static int ncores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void teardown(struct sqz_fs *fs)
{
    sqz_tier_free(fs);
    sqz_revalidate_stop(fs);
    sqz_durable_free(fs);
    sqz_packer_free(fs);
    sqz_pack_gc_free(fs);
    int rc = sqz_itable_free(fs);
    if (rc && g_destroy_rc == 0)
        g_destroy_rc = rc;
    sqz_ident_free(fs);
    sqz_pack_rd_free(fs);
    if (fs->engine)
        sqz_engine_free(fs->engine);
    fs->engine = NULL;
    if (fs->rules)
        sqz_rules_free(fs->rules);
    fs->rules = NULL;
    sqz_writer_unlock(fs); /* every write to BACKING is done */
    if (fs->root_dirfd >= 0)
        close(fs->root_dirfd);
    fs->root_dirfd = -1;
    free(fs->backing_real);
    fs->backing_real = NULL;
    free(fs->mnt_real);
    fs->mnt_real = NULL;
    sqz_mount_opts_free(&fs->opts);
}

/* The FUSE session with squeezefs' operations and the FUSE options of
 * the command line (messages on stderr), or NULL. */
static struct fuse_session *new_session(struct sqz_fs *fs, const char *prog,
                                        int debug)
{
    struct fuse_lowlevel_ops ops;
    memset(&ops, 0, sizeof(ops));
    ops.init = op_init;
    ops.destroy = op_destroy;
    sqz_ops_entry(&ops);
    sqz_ops_dir(&ops);
    sqz_ops_file(&ops);
    sqz_ops_xattr(&ops);

    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    if (build_fuse_args(fs, prog, debug, &args)) {
        fprintf(stderr, "squeezefs: out of memory\n");
        fuse_opt_free_args(&args);
        return NULL;
    }
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof(ops), fs);
    fs->se = se;
    fuse_opt_free_args(&args);
    if (!se)
        fprintf(stderr, "squeezefs: bad FUSE options (see --help)\n");
    return se;
}

/* The I/O engine with the mount's options (*threads: its workers). */
static int start_engine(struct sqz_fs *fs, int *threads)
{
    sqz_engine_opts eo;
    memset(&eo, 0, sizeof(eo));
    eo.threads = fs->opts.threads ? fs->opts.threads : ncores();
    eo.cache_bytes = fs->opts.cache_bytes ? fs->opts.cache_bytes
                                          : SQZ_ENGINE_CACHE_OFF;
    eo.dirty_bytes_file = SQZ_ENGINE_DIRTY_FILE_DEFAULT;
    eo.dirty_bytes_max = SQZ_ENGINE_DIRTY_MAX_DEFAULT;
    eo.dirty_expire_ms = SQZ_ENGINE_EXPIRE_MS_DEFAULT;
    *threads = eo.threads;
    int rc = sqz_engine_new(&eo, &fs->engine);
    if (rc) {
        sqz_logf(SQZ_LOG_ERR, "cannot start the I/O engine: %s", strerror(-rc));
        fs->engine = NULL;
    }
    return rc;
}

/* Shown times, kept inode numbers (before serving), packing, the durable
 * thread, tiering, revalidation and the signal handling. 0 or -errno
 * (logged). */
static int start_jobs(struct sqz_fs *fs, struct fuse_session *se)
{
    int rc;
    sqz_ptimes_mount(fs);
    sqz_ident_init(fs);
    if ((rc = sqz_packer_init(fs)) < 0 || (rc = sqz_pack_gc_init(fs)) < 0 ||
        (rc = sqz_pack_rd_init(fs)) < 0 ||
        (rc = sqz_durable_start(fs)) < 0) {
        sqz_logf(SQZ_LOG_ERR, "cannot start the durability thread: %s", strerror(-rc));
        return rc;
    }
    if ((rc = sqz_tier_start(fs)) < 0) {
        sqz_logf(SQZ_LOG_ERR, "cannot start tiering: %s", strerror(-rc));
        return rc;
    }
    if ((rc = sqz_revalidate_start(fs)) < 0) {
        sqz_logf(SQZ_LOG_ERR, "cannot start the revalidation thread: %s",
                 strerror(-rc));
        return rc;
    }
    if (fs->opts.io_uring &&
        ((rc = sqz_pushq_start(fs)) < 0 || (rc = sqz_defer_start(fs)) < 0)) {
        sqz_logf(SQZ_LOG_ERR, "cannot start the pusher thread: %s",
                 strerror(-rc));
        return rc;
    }
    if ((rc = sqz_shutdown_start(fs, se)) < 0) {
        sqz_logf(SQZ_LOG_ERR, "cannot set up the signal handling: %s",
                 strerror(-rc));
        return rc;
    }
    return 0;
}

/* The request loop: one thread (-s), else up to 4 per engine worker. */
static int run_loop(struct fuse_session *se, int single, int threads)
{
    if (single) {
        sqz_ifd_set_workers(1);
        return fuse_session_loop(se);
    }
    struct fuse_loop_config *lc = fuse_loop_cfg_create();
    if (!lc) {
        sqz_logf(SQZ_LOG_ERR, "out of memory");
        return -ENOMEM;
    }
    fuse_loop_cfg_set_clone_fd(lc, 0);
    fuse_loop_cfg_set_idle_threads(lc, 10);
    unsigned workers = (unsigned)(threads * 4 > 16 ? threads * 4 : 16);
    sqz_ifd_set_workers(workers);
    fuse_loop_cfg_set_max_threads(lc, workers);
    int rc = fuse_session_loop_mt(se, lc);
    fuse_loop_cfg_destroy(lc);
    return rc;
}

int sqz_mount_main(int argc, char **argv)
{
    static struct sqz_fs fs_storage; /* one mount per process */
    struct sqz_fs *fs = &fs_storage;
    /* Block buffers are allocated and freed by many request and worker
     * threads; glibc's default of 8 arenas per core keeps freed buffers in
     * per-thread arenas and pushed the daemon's RSS to twice the cache size
     * (docs/BENCHMARKS.md); with two arenas it still peaked 13 MiB over
     * cache + 64 MiB. One arena keeps it near cache + dirty data; the
     * malloc lock is not a bottleneck next to (de)compression. */
    mallopt(M_ARENA_MAX, 1);
    memset(fs, 0, sizeof(*fs));
    raise_fd_limit(fs);
    sqz_mutex_init(&fs->readahead.mu); /* cannot fail with glibc */
    fs->root_dirfd = -1;
    fs->wlock.fd = -1;
    sqz_mount_opts_init(&fs->opts);
    struct cmdline cl;
    memset(&cl, 0, sizeof(cl));

    int pr = sqz_parse_cmdline(argc, argv, &cl, &fs->opts);
    if (pr == 0 && fs->opts.remount) /* mount -o remount: no new mount */
        pr = sqz_remount(cl.raw, cl.pos[0], cl.pos[1]) ? -1 : 1;
    free(cl.raw);
    if (pr != 0) {
        sqz_mount_opts_free(&fs->opts);
        return pr > 0 ? 0 : 1;
    }
    sqz_set_log(log_sink, fs);
    char uerr[512];
    if (fs->opts.io_uring && sqz_uring_check(uerr, sizeof(uerr)) != 0) {
        fprintf(stderr, "squeezefs: %s\n", uerr);
        sqz_mount_opts_free(&fs->opts);
        return 1;
    }
    if (prepare_fs(fs, cl.pos[0]) != 0) {
        teardown(fs);
        return 1;
    }
    fs->timeout = 1.0;
    fs->uid = geteuid();
    fs->gid = getegid();

    struct fuse_session *se = new_session(fs, argv[0] ? argv[0] : "squeezefs",
                                          cl.debug);
    if (!se) {
        teardown(fs);
        return 1;
    }
    int status = 1;
    if (fuse_set_signal_handlers(se) != 0) {
        fprintf(stderr, "squeezefs: cannot install signal handlers\n");
        goto out_session;
    }
    fs->mnt_real = realpath(cl.pos[1], NULL); /* NULL: no readahead= */
    char lerr[1024];
    if (sqz_writer_lock(fs, lerr, sizeof(lerr)) != 0) {
        fprintf(stderr, "squeezefs: %s\n", lerr);
        goto out_signals;
    }
    if (fuse_session_mount(se, cl.pos[1]) != 0) {
        fprintf(stderr, "squeezefs: cannot mount on %s\n", cl.pos[1]);
        goto out_signals;
    }
    if (fs->opts.mnt_flags && fs->mnt_real) {
        char merr[512];
        if (sqz_mount_set_flags(fs->mnt_real, fs->opts.mnt_flags, merr,
                                sizeof(merr)) != 0) {
            fprintf(stderr, "squeezefs: %s\n", merr);
            goto out_unmount;
        }
    }
    /* One GETXATTR round trip less per write (killpriv.c). */
    int kp = sqz_killpriv_install(se);
    if (kp < 0)
        sqz_logf(SQZ_LOG_WARN, "FUSE_HANDLE_KILLPRIV_V2 not set up: %s", strerror(-kp));
    /* Created files get exactly the mode the kernel passes (the kernel has
     * applied the caller's umask already). */
    umask(0);
    if (fuse_daemonize(cl.foreground) != 0) {
        fprintf(stderr, "squeezefs: cannot daemonize\n");
        goto out_unmount;
    }
    if (!cl.foreground) {
        openlog("squeezefs", LOG_PID, LOG_DAEMON);
        fs->syslog = 1;
    }
    if (sqz_writer_lock_own(fs) != 0)
        goto out_unmount;
    /* Threads are started after fuse_daemonize (fork keeps one thread). */
    presize_fd_table();
    int threads = 0;
    int rc = start_engine(fs, &threads);
    if (rc == 0)
        rc = start_jobs(fs, se);
    if (rc)
        goto out_unmount;
    rc = run_loop(se, cl.single, threads);
    status = rc < 0 ? 1 : 0;
    if (rc < 0)
        sqz_logf(SQZ_LOG_ERR, "request loop failed: %s", strerror(-rc));

out_unmount:
    sqz_writer_leaving(fs); /* the next mount waits for this one */
    sqz_tier_stop(fs);
    sqz_revalidate_stop(fs); /* it notifies the kernel through se */
    fuse_session_unmount(se);
    /* the pusher first: the requests the defer thread runs may wait for
     * its pushes (ring threads may go on until the session is destroyed) */
    sqz_pushq_stop(fs);
    sqz_defer_stop(fs);
    sqz_shutdown_stop(fs);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se); /* calls op_destroy if the kernel did not */
    sqz_pushq_free(fs);
    sqz_defer_free(fs);
    teardown(fs);
    if (g_destroy_rc) {
        sqz_logf(SQZ_LOG_ERR, "flushing at unmount failed: %s", strerror(-g_destroy_rc));
        status = 1;
    }
    if (fs->syslog)
        closelog();
    return status;
}
