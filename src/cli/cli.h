/* squeezefs command-line tool: shared declarations of the cli/ files.
 * Each command lives in its own cmd_*.c; helpers are grouped by concern. */
#ifndef SQZ_CLI_H
#define SQZ_CLI_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "squeezefs/container.h"
#include "squeezefs/pack.h"
#include "squeezefs/policy.h"

/* An entry of a tree walk (tree.c) as the walk reached it: the directory
 * holding it (AT_FDCWD for the walk's root) and its name there. The
 * helpers below that take one open the entry with *at calls and O_NOFOLLOW
 * (and find a packed file's pack in dirfd); given NULL they use the path
 * as the user gave it. */
typedef struct tree_at {
    int dirfd;
    const char *name;
} tree_at;

/* ---- commands (argv[0] is the command word) ---- */
int cmd_pack(int argc, char **argv);
int cmd_unpack(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_verify(int argc, char **argv);
/* stats_prom.c: `stats --prometheus`: the counters of nmnt mounts in
 * Prometheus' text format on stdout. CLI_OK, or CLI_FAIL if a mount's
 * could not be read (the others are printed). */
int stats_prometheus(int nmnt, char **mnts);
int cmd_stats(int argc, char **argv);
int cmd_policy(int argc, char **argv);
int cmd_recompress(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_du(int argc, char **argv);
int cmd_tier(int argc, char **argv);

/* help.c: the full help of command (usage, options, examples, exit
 * status) on out. 0, or -ENOENT for a word that is not a command. */
int cli_help(FILE *out, const char *command);

/* Exit statuses shared by all commands. */
#define CLI_OK 0
#define CLI_FAIL 1  /* an operation failed / something is damaged */
#define CLI_USAGE 2 /* bad command line or bad spec */

/* Print "squeezefs: " + message to stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Default number of worker threads (online CPUs, 1..8). */
int cli_default_threads(void);
/* Monotonic clock in seconds. */
double cli_now(void);
/* Parse a size such as "64K", "8M", "1G", "4096" into *out. 0 or -EINVAL. */
int cli_parse_size(const char *text, uint64_t *out);
/* "128K", "1M", "4096" for a power of two size. */
void cli_format_block(int log2bs, char *buf, size_t n);
/* Parse a spec; prints "squeezefs: bad spec 'X': MESSAGE" on error.
 * Returns 0 or -EINVAL. */
int cli_spec_parse(const char *text, sqz_spec *out);
/* Canonical text of params as a spec (e.g. "zstd:3/128K"). */
void cli_params_spec(const sqz_params *p, char *buf, size_t n);

/* ---- progress.c: "label  done/total  MB/s  ETA" on stderr, tty only ---- */
typedef struct cli_progress {
    bool enabled;
    const char *label;
    uint64_t total;
    uint64_t done;
    double start;
    double last_draw;
    bool walk;      /* progress_init_walk: files and bytes, no total */
    uint64_t items;
    double delay;   /* seconds before the first draw */
    bool drawn;
} cli_progress;
void progress_init(cli_progress *p, const char *label, uint64_t total);
/* For a walk of unknown size: "label  N files  X MiB", drawn (tty only) once
 * delay seconds have passed, so short walks show nothing; progress_finish
 * erases the line. Count with progress_item. */
void progress_init_walk(cli_progress *p, const char *label, double delay);
void progress_add(cli_progress *p, uint64_t n);
/* One more item (file) of n bytes. */
void progress_item(cli_progress *p, uint64_t n);
void progress_set_total(cli_progress *p, uint64_t total);
void progress_finish(cli_progress *p);

/* squeezefs' own hidden files in a BACKING directory (recompress
 * temporaries, the writer lock; src/daemon/fs.h SQZ_TMP_PREFIX): the mount
 * never shows them, so the tree commands skip them too. path: a file's
 * path; 1 if its base name has the prefix. */
#define CLI_TMP_PREFIX ".sqz-tmp."
/* BACKING's directory of kept inode numbers (src/node/ident.c): the tree
 * walk goes into it only if cli_walk_ids (verify) */
#define CLI_IDS_DIR CLI_TMP_PREFIX "ids"
extern bool cli_walk_ids;
int cli_is_own_hidden(const char *path);

/* ---- packed.c: packed files and packs in a BACKING directory ---- */
/* 1 if the base name of path is a pack's (SQZ_PACK_PREFIX + 16 hex). */
int cli_is_pack_name(const char *path);
/* The content of a packed file, open as fd at path: its pointer (xattr
 * SQZ_PACK_XATTR), then its entry in the pack of its directory, checked.
 * Callers ask only for a 0-byte file or a torn unpacking (a pointer on
 * another file with bytes counts for nothing). 1 (*p filled, *buf malloc'd,
 * p->length bytes), 0 no pointer, -EBADMSG a damaged pointer or -EIO a
 * damaged or missing entry ("damaged packed file: why" in err), other
 * -errno. */
int cli_packed_load(int fd, const tree_at *at, const char *path, sqz_pack_ptr *p,
                    void **buf, char *err, size_t errlen);
/* A file with bytes whose pack pointer still counts: an unpacking torn by
 * a crash (docs/FORMAT.md "Unpacking"), i.e. a file with a pointer that
 * probes (pr) as the start of a container header (SQZ_PROBE_TORN) or as a
 * container holding nothing yet (no commit). Then cli_packed_load gives
 * its content. */
bool cli_unpack_torn(int fd, int pr);
/* Check the pack file open as fd at path (sqz_pack_check, and its id
 * against its name). 0 clean (*entries set); 1 bytes from *end on are no
 * readable entries but no packed file of the directory points there (an
 * append or a creation torn by a crash, or damage that cannot be told
 * from one; *tail bytes); -EBADMSG damaged (reason in err); other -errno. */
int cli_pack_check(int fd, const tree_at *at, const char *path, long *entries,
                   uint64_t *end, uint64_t *tail, char *err, size_t errlen);

/* ---- json.c: a tiny streaming JSON writer ---- */
typedef struct json_w {
    FILE *out;
    int depth;
    bool need_comma[32];
    bool pretty;
    bool after_key; /* next value follows a key: no comma/indent */
} json_w;
void json_init(json_w *w, FILE *out, bool pretty);
void json_begin_obj(json_w *w);
void json_end_obj(json_w *w);
void json_begin_arr(json_w *w);
void json_end_arr(json_w *w);
void json_key(json_w *w, const char *key);
void json_str(json_w *w, const char *s);
void json_u64(json_w *w, uint64_t v);
void json_i64(json_w *w, int64_t v);
void json_double(json_w *w, double v);
void json_bool(json_w *w, bool v);
/* A key and its value in one call. */
void json_kv_u64(json_w *w, const char *key, uint64_t v);
void json_kv_str(json_w *w, const char *key, const char *s);
/* Write s as a quoted JSON string with escapes. */
void json_write_string(FILE *out, const char *s);

/* ---- json_read.c: parse a flat JSON object {"k": number|string|bool} ---- */
typedef enum json_kind { JSON_NUM, JSON_STR, JSON_BOOL, JSON_NULL } json_kind;
typedef struct json_field {
    char key[64];
    json_kind kind;
    double num;
    char str[256];
    bool b;
} json_field;
typedef struct json_flat {
    json_field *fields;
    size_t n;
} json_flat;
/* 0, -EBADMSG (not a flat object; message in err) or -ENOMEM. */
int json_flat_parse(const char *text, json_flat *out, char *err, size_t errlen);
void json_flat_free(json_flat *o);
const json_field *json_flat_get(const json_flat *o, const char *key);

/* ---- mountinfo.c: talking to a running daemon through xattrs ---- */
#define SQZ_XATTR_STAT "user.squeezefs.stat"
#define SQZ_XATTR_STATS "user.squeezefs.stats"
#define SQZ_XATTR_EFFECTIVE "user.squeezefs.effective"
#define SQZ_XATTR_RECOMPRESS "user.squeezefs.recompress"
/* tiering (src/jobs/tier_job.c): get = the file's tier status as JSON,
 * set = tier it now */
#define SQZ_XATTR_TIER "user.squeezefs.tier"
/* src/daemon/fs.h: tier the open file now (argument: bytes/s, uint64_t) */
#define SQZ_IOC_TIER _IOW('Q', 0x16, uint64_t)
/* and recompress: the SPEC text, NUL-terminated (src/daemon/fs.h) */
#define SQZ_IOC_SPEC_MAX 64
#define SQZ_IOC_RECOMPRESS _IOW('Q', 0x17, char[SQZ_IOC_SPEC_MAX])
/* 1 if path is inside a squeezefs mount (FUSE and the daemon answers the
 * virtual xattrs), 0 if not. */
int cli_on_mount(const char *path);
/* Read an xattr (not following a final symlink) into a malloc'd
 * NUL-terminated string. 0 or negative errno. */
int cli_get_xattr(const char *path, const char *name, char **out);

/* ---- ctr_stat.c: the figures of one container (stat, du) ---- */
typedef struct cli_ctr_figures {
    uint64_t compressed;   /* compressedLength: size of the backing file (kdb+) */
    uint64_t uncompressed; /* logical length */
    uint64_t stored;       /* storedBytes: stored bytes of the live blocks */
    char algorithm[32];
    int level, log2bs;
    uint64_t blocks, raw_blocks, hole_blocks;
    double ratio;          /* uncompressed / compressed */
    uint64_t backing_size, backing_alloc; /* st_size, st_blocks*512 */
    bool is_auto;
    /* a packed file (include/squeezefs/pack.h): compressed is the size of
     * its pack entry (header and stored bytes, as the daemon counts it),
     * stored its stored bytes, backing_* the 0-byte backing file's */
    bool packed;
    char pack[SQZ_PACK_NAME_MAX]; /* its pack's file name (off a mount) */
    char why[256];         /* what is damaged, when known (else "") */
} cli_ctr_figures;
/* Figures of the container or packed file at path: from the daemon
 * (on_mount, see cli_on_mount) or by opening the file (a packed file's
 * entry is read and checked). 0; -EMEDIUMTYPE: not a container (a plain
 * file); a damaged container or packed file: -EBADMSG off a mount (reason
 * in out->why when known), -EIO on one; -EPROTO: the daemon's answer lacks
 * a figure (message printed); other negative errno from the file system. */
int cli_ctr_figures_get(const tree_at *at, const char *path, bool on_mount,
                        cli_ctr_figures *out);

/* ---- ctr_io.c: moving bytes into and out of containers ---- */
/* A source of logical bytes: a container, a packed file, a plain file (or
 * memory). */
typedef struct cli_src {
    int fd;          /* plain file, or -1 */
    sqz_ctr *ctr;    /* container, or NULL */
    const unsigned char *mem; /* memory buffer, or NULL */
    uint64_t len;    /* logical length */
    bool packed;     /* a packed file: mem holds its checked content */
    sqz_pack_ptr ptr;          /* its pointer (packed only) */
    unsigned char *own;        /* malloc'd content freed by close */
    char err[256];   /* after a failed open: what is damaged, or "" */
} cli_src;
/* Open path as a source (a container if it probes as one, a packed file's
 * content when it is one). 0 or -errno; a damaged packed file: -EBADMSG or
 * -EIO with the reason in s->err. */
int cli_src_open(const char *path, cli_src *s);
/* The same for the entry at of a walk (path for messages). */
int cli_src_openat(const tree_at *at, const char *path, cli_src *s);
/* The message for a failed cli_src_open: s->err, else strerror(-r). */
const char *cli_src_why(const cli_src *s, int r);
void cli_src_mem(cli_src *s, const void *buf, uint64_t len);
void cli_src_close(cli_src *s);
/* Read n bytes at off (short only at EOF). Returns bytes or -errno. */
ssize_t cli_src_pread(cli_src *s, void *buf, size_t n, uint64_t off);
/* Fill the empty container dst with all bytes of src: blocks prepared in
 * parallel on `threads` workers, committed in batches; all-zero blocks are
 * left as holes. Does not sync. 0 or -errno. */
int cli_ctr_fill(sqz_ctr *dst, cli_src *src, int threads, cli_progress *pg);
/* cli_ctr_fill, then a full index at the end (blocks are then checked one
 * by one, and found without replaying the log), sync, the metadata of st
 * (the entry at of a walk, cli_copy_meta_at) and close dst, which is
 * closed in every case. 0 or -errno. */
int cli_ctr_write(sqz_ctr *dst, cli_src *src, int threads, cli_progress *pg,
                  const tree_at *at, const struct stat *st);
/* Write all logical bytes of c to fd. sparse: fd is a fresh regular file;
 * zero blocks become holes (ftruncate to the length). 0 or -errno. */
int cli_ctr_dump(sqz_ctr *c, int fd, bool sparse, cli_progress *pg);
/* Read every block of c on `threads` workers into buf (length bytes, may
 * be NULL to discard). 0 or -errno. */
int cli_ctr_read_all(sqz_ctr *c, void *buf, int threads);
/* Fill params from a spec: a spec without a block size takes log2bs_dflt;
 * auto specs are decided by sqz_auto_choose on the first blocks of src. */
int cli_params_for(const sqz_spec *spec, int log2bs_dflt, unsigned min_saving,
                   cli_src *src, sqz_params *out);

/* ---- fsmeta.c: copying file metadata ---- */
/* Copy mode, owner (if root), atime/mtime and user.* xattrs of st/from_path
 * onto to_fd (or to_path when to_fd < 0, not following symlinks). Times
 * are applied last. 0 or -errno (xattr copy failures are ignored). */
int cli_copy_meta(const char *from_path, const struct stat *st, int to_fd,
                  const char *to_path);
/* The same from the entry from of a walk. */
int cli_copy_meta_at(const tree_at *from, const struct stat *st, int to_fd,
                     const char *to_path);
/* Set only the times (not following symlinks). */
int cli_set_times(const char *path, const struct stat *st);

/* ---- tree.c: walking a directory tree ---- */
/* Visit every entry under root (root itself first, as relpath "").
 * pre is called before a directory's children, post after them (dirs only,
 * may be NULL). A nonzero return from a callback stops the walk and is
 * returned. Entries of each directory are visited in name order. No
 * symlink is followed: each directory is opened O_NOFOLLOW below the one
 * before. A callback reaches its entry through at (the directory holding
 * it, AT_FDCWD for root, and its name there): *at calls with O_NOFOLLOW on
 * it name the entry that was examined, whatever was renamed meanwhile, and
 * path is for messages. */
typedef int (*tree_fn)(void *user, const char *path, const char *relpath,
                       const struct stat *st, const tree_at *at);
int tree_walk(const char *root, tree_fn pre, tree_fn post, void *user);
/* The same, but an entry that cannot be examined (lstat fails) or a
 * directory that cannot be listed is handed to on_err with the negative
 * errno instead of ending the walk: 0 from on_err goes on (skipping that
 * entry or the directory's children; its post callback still runs), nonzero
 * stops the walk and is returned. Running out of memory always stops it. */
typedef int (*tree_err_fn)(void *user, const char *path, const char *relpath,
                           int err);
int tree_walk_err(const char *root, tree_fn pre, tree_fn post, tree_err_fn on_err,
                  void *user);
/* Join a and b with '/' into a malloc'd string (NULL on ENOMEM). */
char *path_join(const char *a, const char *b);

/* ---- bench_gen.c: deterministic data generators ---- */
typedef struct bench_buf {
    unsigned char *data;
    size_t len;
    char name[128];
} bench_buf;
/* Generate `spec` ("longs:1000:100", "taq-trade.price", ...) of about size
 * bytes with seed. 0, -EINVAL (message in err) or -ENOMEM. */
int bench_gen(const char *spec, uint64_t size, uint64_t seed, bench_buf *out,
              char *err, size_t errlen);
/* Print the list of generators with one line of description each. */
void bench_gen_list(FILE *out);

/* ---- bench_sweep.c: measuring combinations ---- */
typedef struct bench_row {
    char input[128];
    uint64_t size;
    int lbs;
    sqz_alg alg;
    int lvl;
    double comp_factor;
    double write_ms;
    double read_ms;
    double write_mbps;
    double read_mbps;
} bench_row;
typedef struct bench_combo {
    int lbs;
    sqz_alg alg;
    int lvl;
} bench_combo;
typedef struct bench_opts {
    int runs;
    int threads;
    const char *tmpdir;
    bool progress;
} bench_opts;
/* Measure every combo on input; appends rows to *rows (realloc'd).
 * 0 or -errno (message printed). */
int bench_sweep(const bench_buf *input, const bench_combo *combos,
                size_t ncombos, const bench_opts *o, cli_progress *pg,
                bench_row **rows, size_t *nrows);

/* ---- bench_report.c: csv, table, --where, --recommend ---- */
#define BENCH_CSV_HEADER \
    "input,size,lbs,alg,lvl,compFactor,writeTime,readTime,writeMBps,readMBps"
int bench_write_csv(const char *path, const bench_row *rows, size_t n);
void bench_print_table(FILE *out, const bench_row *rows, size_t n);
/* Keep only rows matching expr, sorted by compFactor descending.
 * 0 or -EINVAL with a message in err. */
int bench_where(const char *expr, bench_row *rows, size_t *n, char *err,
                size_t errlen);
/* Print the best spec for goal (ratio|write|read|balanced) with one line
 * of why. 0, or -EINVAL for an unknown goal / no rows. */
int bench_recommend(FILE *out, const char *goal, const bench_row *rows,
                    size_t n);

/* Directory dfd opened anew for reading its entries (an offset of its
 * own), or NULL with errno set (tree.c). */
DIR *cli_opendir_at(int dfd);

#endif
