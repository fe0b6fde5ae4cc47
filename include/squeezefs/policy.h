/* squeezefs policy: SPEC parsing, rule files, and resolution of a path to
 * (algorithm, level, block size). Depends only on the codec layer.
 * All functions are thread-safe (no global state); a sqz_rules object is
 * immutable after loading and may be shared between threads. */
#ifndef SQUEEZEFS_POLICY_H
#define SQUEEZEFS_POLICY_H

#include <stddef.h>
#include "squeezefs/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A parsed SPEC: `ALG[:LEVEL][/BLOCK]` (e.g. zstd:3/128K, lz4hc:9/64K, gzip,
 * none, auto, auto:ratio, auto:speed, zstd/1M) or a kdb+ triple "LBS ALG
 * LEVEL" (e.g. "17 2 6"). BLOCK is 4K..1M (K/M suffix, power of two) or a
 * log2 12..20. */
typedef struct sqz_spec {
    sqz_alg alg;
    int level;       /* valid for alg; the alg's default if not given */
    int log2bs;      /* 12..20, or 0 when the spec gives no block size */
    int auto_mode;   /* 0 none; 1 auto (balanced), 2 auto:ratio, 3 auto:speed.
                        When set, alg/level are placeholders (zstd default). */
} sqz_spec;

#define SQZ_AUTO_NONE 0
#define SQZ_AUTO_BALANCED 1
#define SQZ_AUTO_RATIO 2
#define SQZ_AUTO_SPEED 3

/* Parse text into out. Returns 0, or -EINVAL with a clear message in err
 * (naming the valid algorithms / the level range / the block sizes). */
int sqz_spec_parse(const char *text, sqz_spec *out, char *err, size_t errlen);
/* Canonical text, e.g. "zstd:3/128K", "none/64K", "auto:ratio/128K",
 * "snappy" (no block part when log2bs == 0). Returns length or -ENOSPC. */
int sqz_spec_format(const sqz_spec *s, char *buf, size_t n);
/* Parse a block size: "128K", "1M", "4096", or log2 "17". -EINVAL unless
 * a power of two in 4K..1M. */
int sqz_parse_block(const char *text, int *log2bs, char *err, size_t errlen);

/* Aged policies: `SPEC after AGE SPEC2` names a second policy for files
 * whose data has not changed for AGE (a file's age is now minus its mtime,
 * as find -mtime counts it). AGE: a non-negative integer and a unit, d
 * (days), h (hours) or m (minutes), e.g. 30d, 12h, 90m; at most 36500d. */
#define SQZ_AGE_MAX_S (36500LL * 86400)
typedef struct sqz_policy {
    sqz_spec spec;      /* the policy of new (and young) files */
    long long after_s;  /* -1: no aged policy; else the age in seconds */
    sqz_spec aged;      /* the policy once older than after_s (valid when
                           after_s >= 0); log2bs 0 = no block size given */
} sqz_policy;

/* Parse AGE ("30d"). 0 or -EINVAL with a message in err. */
int sqz_age_parse(const char *text, long long *secs, char *err,
                  size_t errlen);
/* Canonical text of an age: the largest of d, h, m that divides it (a
 * multiple of 60 s, as every parsed age is). Returns length or -ENOSPC /
 * -EINVAL. */
int sqz_age_format(long long secs, char *buf, size_t n);
/* Parse `SPEC` or `SPEC after AGE SPEC2` (SPEC and SPEC2 as for
 * sqz_spec_parse; a kdb+ triple next to an after clause must be quoted).
 * The word `after` is case-insensitive. 0 or -EINVAL with a clear message
 * in err; out is untouched on failure. */
int sqz_policy_parse(const char *text, sqz_policy *out, char *err,
                     size_t errlen);
/* Canonical text: "lz4/128K after 30d zstd:19/1M", or the SPEC alone.
 * Returns length or -ENOSPC / -EINVAL. */
int sqz_policy_format(const sqz_policy *p, char *buf, size_t n);
/* Which policy applies to a file of the given age (seconds; negative ages,
 * mtimes in the future, count as 0): the aged one once age >= after_s. */
int sqz_policy_is_aged(const sqz_policy *p, long long age_s);

/* Glob match of pattern against a path relative to the mount root (no
 * leading '/'). '*' and '?' stay within one component, '[...]' classes,
 * '**' matches across components (zero or more). A pattern without '/'
 * matches the basename anywhere (as .gitignore). A leading '/' anchors the
 * pattern at the root. Returns 1 on match, 0 otherwise. */
int sqz_glob_match(const char *pattern, const char *relpath);

/* Rule files: one rule per line, `PATTERN SPEC` or `PATTERN SPEC after
 * AGE SPEC2`, '#' comments, blank lines ignored. A SPEC may contain spaces
 * only as a quoted kdb+ triple ("17 2 6"). */
typedef struct sqz_rules sqz_rules;
/* Errors name the line: "policy.rules:3: unknown algorithm 'zsdt' ...". */
int sqz_rules_parse(const char *text, const char *source_name,
                    sqz_rules **out, char *err, size_t errlen);
int sqz_rules_load(const char *path, sqz_rules **out, char *err,
                   size_t errlen);
void sqz_rules_free(sqz_rules *r);
size_t sqz_rules_count(const sqz_rules *r);
/* First matching rule: returns its 1-based line number and sets *out,
 * or 0 if none matches. */
int sqz_rules_match(const sqz_rules *r, const char *relpath, sqz_spec *out);
/* The same with the whole policy of the rule (its after clause). */
int sqz_rules_match_policy(const sqz_rules *r, const char *relpath,
                           sqz_policy *out);
/* Number of rules with an after clause. */
size_t sqz_rules_count_aged(const sqz_rules *r);
/* Rule i (0-based, in file order): its pattern, policy and line. 0 or
 * -ERANGE. */
int sqz_rules_get(const sqz_rules *r, size_t i, const char **pattern,
                  sqz_policy *pol, int *line);

/* Where an effective policy came from. */
typedef enum sqz_policy_source {
    SQZ_SRC_FILE = 0,      /* xattr on the file itself */
    SQZ_SRC_DIRECTORY = 1, /* xattr on an ancestor directory (or itself) */
    SQZ_SRC_RULE = 2,      /* a line of the rule file */
    SQZ_SRC_DEFAULT = 3,   /* mount default */
} sqz_policy_source;

/* The persistent per-file / per-directory policy lives in BACKING as the
 * xattr below (value: policy text, `SPEC [after AGE SPEC2]`). */
#define SQZ_POLICY_XATTR "user.squeezefs.policy"

typedef struct sqz_resolved {
    sqz_spec spec;              /* block size filled in (never 0) */
    sqz_policy_source source;
    char where[512];            /* relpath of the file/dir, or
                                   "FILE:LINE", or "default" */
    long long after_s;          /* the winning source's after clause: -1
                                   none, else the age in seconds */
    sqz_spec aged;              /* its aged policy (block size filled in:
                                   without one, spec's) */
} sqz_resolved;

/* Resolve relpath (relative to the backing root dirfd, no leading '/',
 * "" for the root) to its effective policy:
 *   1. SQZ_POLICY_XATTR on the file itself (if it exists and is not a dir),
 *   2. on the nearest ancestor directory (a directory's own xattr counts
 *      for the directory itself),
 *   3. first matching rule (rules may be NULL),
 *   4. deflt.
 * A spec without a block size takes the block size of the next source down
 * (ultimately deflt->log2bs, which must be set). The after clause belongs
 * to the winning source's policy (a directory's plain SPEC overrides a
 * rule's after clause as it overrides its SPEC); the mount default has
 * none. Path components are
 * opened with O_NOFOLLOW relative to root_fd (never escapes the root).
 * An unparsable xattr value is skipped (logged by the caller if wanted).
 * Returns 0 or negative errno (only for I/O errors other than ENOENT/ENODATA). */
int sqz_policy_resolve(int root_fd, const char *relpath,
                       const sqz_rules *rules, const char *rules_name,
                       const sqz_spec *deflt, sqz_resolved *out);

/* Resolution in two steps, for callers that resolve many new files of one
 * directory (the daemon caches the first step per directory):
 * the xattr policies of a directory and its ancestors, deepest valid one
 * winning (sqz_policy_walk_dir; "" is the root; a missing component ends
 * the walk as in sqz_policy_resolve; -ENOTDIR if reldir names a regular
 * file), then rules and default for relpath, a file in that directory
 * without a policy xattr of its own (sqz_policy_resolve_found). Together
 * they give what sqz_policy_resolve gives for such a file. */
typedef struct sqz_policy_found {
    int found;                  /* an xattr policy applies */
    sqz_policy pol;             /* the deepest valid one */
    sqz_policy_source source;
    int xattr_bs;               /* block size of the deepest spec having one */
    char where[sizeof(((sqz_resolved *)0)->where)];
} sqz_policy_found;
int sqz_policy_walk_dir(int root_fd, const char *reldir, sqz_policy_found *out);
int sqz_policy_resolve_found(const sqz_policy_found *found, const char *relpath,
                             const sqz_rules *rules, const char *rules_name,
                             const sqz_spec *deflt, sqz_resolved *out);

/* auto: pick an algorithm and level by trial compression of sample (the
 * first blocks of a file), within a budget of a few milliseconds.
 * mode: SQZ_AUTO_BALANCED / RATIO / SPEED. Random data gives SQZ_ALG_NONE.
 * Returns 0 and sets *alg, *level. */
int sqz_auto_choose(int mode, const void *sample, size_t len, int log2bs,
                    sqz_alg *alg, int *level);

#ifdef __cplusplus
}
#endif
#endif
