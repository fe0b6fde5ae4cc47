/* squeezefs mount options: parsing of the `-o` option string into a struct.
 * Pure (no I/O, no global state): the fuzzer calls sqz_parse_mount_options
 * directly. Options that are not squeezefs' own are collected, in order, into
 * `fuse_opts` and handed to libfuse (fsname, subtype, max_read, ...). */
#ifndef SQZ_DAEMON_OPTS_H
#define SQZ_DAEMON_OPTS_H

#include <stddef.h>

#include "engine/engine.h"
#include "squeezefs/policy.h"

#define SQZ_DEFAULT_SPEC "zstd:1/128K"
#define SQZ_DEFAULT_CACHE_BYTES SQZ_ENGINE_CACHE_DEFAULT
#define SQZ_DEFAULT_READAHEAD_BYTES (1024u * 1024u)
#define SQZ_MAX_READAHEAD_BYTES (64u * 1024u * 1024u)
#define SQZ_DEFAULT_REVALIDATE_S 1
#define SQZ_MAX_REVALIDATE_S 86400
#define SQZ_DEFAULT_WAIT_WRITER_S 30
#define SQZ_MAX_WAIT_WRITER_S 3600
#define SQZ_DEFAULT_TIER_RATE (50ull << 20) /* tier_rate= 50M */
#define SQZ_MAX_TIER_S (365LL * 86400)

struct sqz_mount_opts {
    sqz_spec spec;          /* compress= (default zstd:1/128K); block size
                               always set after sqz_mount_opts_finish */
    int block_log2;         /* block= override, 0 if not given */
    size_t cache_bytes;     /* cache= */
    size_t readahead_bytes; /* readahead= kernel read-ahead window (default
                               1M; 0 = leave the kernel's default) */
    int threads;            /* threads= (0 = number of cores) */
    size_t max_fds;         /* max_fds= the daemon's own descriptors (ifd.c;
                               0 = the default, 2048, at most half of the
                               open-file limit); the effective bound after
                               start */
    int revalidate_s;       /* revalidate= seconds (read-only mounts: how
                               long an open descriptor may show a file
                               another mount changed; 0 = only at open) */
    int wait_writer_s;      /* wait_writer= seconds a read-write mount waits
                               for the previous writer of BACKING to finish
                               its unmount (default 30; 0 = refuse at once) */
    unsigned min_saving;    /* min_saving= in permille (default 125) */
    long long tier_s;       /* tier= background tiering pass every N
                               seconds (0 = off, the default) */
    unsigned long long tier_rate; /* tier_rate= bytes of file data per
                               second a tiering job rewrites (default 50M;
                               0 = unlimited) */
    char *policy_file;      /* policy= (malloc'd) or NULL */
    int writeback;          /* kernel writeback cache: on unless nowriteback
                             * (never with ro) */
    int pack;               /* pack small closed files into pack files
                               (docs/FORMAT.md "Packed files"); nopack */
    int io_uring;           /* -o io_uring: FUSE over io_uring (libfuse
                               >= 3.18 and the kernel's enable_uring;
                               src/mount/uring.c), else /dev/fuse */
    int ro;                 /* -o ro */
    int remount;            /* -o remount: change a live mount (remount.c) */
    int allow_other;        /* -o allow_other (forces default_permissions) */
    int default_permissions;
    int user_fsname;        /* fsname= given by the user */
    int user_subtype;       /* subtype= given by the user */
    char *fuse_opts;        /* pass-through options for libfuse, comma
                               separated (commas inside values escaped with
                               '\'), malloc'd, or NULL */
    char *mnt_flags;        /* atime options libfuse does not know
                               (strictatime, nodiratime, lazytime, ...),
                               set on the mount after it is made
                               (remount.c), comma separated, or NULL */
};

/* Defaults: compress=zstd:1/128K, cache=256M, readahead=1M, threads=0,
 * min_saving=12.5, wait_writer=30. */
void sqz_mount_opts_init(struct sqz_mount_opts *o);
/* Free what the struct owns (policy_file, fuse_opts, mnt_flags); safe to
 * call twice. */
void sqz_mount_opts_free(struct sqz_mount_opts *o);

/* Parse one comma-separated option string (the argument of one -o) and add
 * it to *out, which must have been initialised with sqz_mount_opts_init
 * (several -o accumulate; later values override earlier ones). A backslash
 * escapes the next character (e.g. a comma inside fsname=). Returns 0, or
 * -EINVAL with a clear message in err (naming the option), or -ENOMEM. On
 * error *out stays valid (free it with sqz_mount_opts_free). */
int sqz_parse_mount_options(const char *optstring, struct sqz_mount_opts *out,
                            char *err, size_t errlen);

/* Call fn(arg, key, val) for each element of a comma-separated option
 * string, unescaped (val NULL when there is no '='), until fn returns
 * non-zero; returns that, 0, or -ENOMEM. */
int sqz_mount_opts_each(const char *optstring,
                        int (*fn)(void *arg, const char *key, const char *val),
                        void *arg);

/* The options of a mount as text, one "key=value" line each, in canonical
 * form (the value of getxattr user.squeezefs.options on the mount root):
 * compress, cache, readahead, threads, min_saving, policy, tier (seconds),
 * tier_rate, revalidate, wait_writer, writeback, pack, ro, allow_other,
 * default_permissions (0/1), fuse (the options passed to FUSE). Returns
 * the length, or -ENOSPC. */
int sqz_mount_opts_describe(const struct sqz_mount_opts *o, char *buf, size_t n);

/* The key of describe's line that squeezefs option `name` sets (block= sets
 * "compress", nopack "pack", ...), or NULL if name is no squeezefs option
 * of describe (ro, rw, FUSE and fstab options). */
const char *sqz_mount_opt_key(const char *name);

/* Apply the block= override to the spec. Call once after all -o. */
void sqz_mount_opts_finish(struct sqz_mount_opts *o);

/* Parse an interval: N, Ns, Nm, Nh or Nd (seconds, minutes, hours,
 * days), or "off" / "0" (0). 0 or -EINVAL. */
int sqz_parse_interval(const char *text, long long *secs);

/* Parse a size with optional K/M/G/T suffix (binary) into bytes. */
int sqz_parse_size(const char *text, size_t *out);

#endif
