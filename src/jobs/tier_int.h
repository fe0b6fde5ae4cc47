/* Age-based tiering, shared between tier_job.c (one file: its status, the
 * online rewrite) and tier.c (the background pass, the counters).
 * Internal header; docs in tier.c. Locks: sqz_tier.bg.mu (docs/LOCKING.md)
 * guards only the thread's stop flag and sleep; counters are atomics. */
#ifndef SQZ_JOBS_TIER_INT_H
#define SQZ_JOBS_TIER_INT_H

#include "jobs/tier.h"
#include "common/bgthread.h"

/* Where a file stands (sqz_tier_status.state). */
enum sqz_tier_state {
    SQZ_TS_DUE,      /* past its age, stored differently: to be tiered */
    SQZ_TS_YOUNG,    /* has an aged policy, not old enough */
    SQZ_TS_NONE,     /* its policy has no after clause */
    SQZ_TS_DONE,     /* already stored as its aged policy says */
    SQZ_TS_WRITING,  /* open for writing (or as a plain file): skipped */
    SQZ_TS_LINKS,    /* several hard links: never tiered */
    SQZ_TS_DAMAGED,  /* container cannot be opened */
    SQZ_TS_DIR,      /* a directory: policy only */
    SQZ_TS_PACKED,   /* a packed small file: stays packed, never tiered */
};

struct sqz_tier_status {
    enum sqz_tier_state state;
    long long age;          /* seconds since the last data change (mtime) */
    long long after;        /* the after clause, -1 none */
    char policy[160];       /* the effective policy, canonical */
    char stored[64];        /* the file's stored parameters, or "plain" */
    char target[64];        /* its aged policy ("" without) */
    sqz_spec aged;          /* the aged policy (block size filled in) */
    uint64_t length;        /* logical bytes */
    uint64_t backing;       /* bytes of the backing file */
};

/* What one job did (sizes of the backing file before and after). */
struct sqz_tier_result {
    uint64_t logical, before, after;
    char from[64], to[64];
};

/* Pacing of one job. */
struct sqz_tier_pace {
    uint64_t rate;          /* logical bytes per second; 0 = unlimited */
    atomic_int *stop;       /* nonzero: give up (unmount); may be NULL */
    fuse_req_t req;         /* interrupted: give up; may be NULL */
};

struct sqz_tier {
    /* the background pass's thread (bg.mu: its sleep and stop); jobs
     * read bg.stop without the mutex */
    sqz_bgthread bg;
    /* const after start */
    long long interval_s;   /* tier= (0: no background pass) */
    uint64_t rate;          /* tier_rate= bytes/s (0: unlimited) */
    /* counters (atomics), since the mount */
    atomic_uint_fast64_t files, before, after, logical, skipped, abandoned,
        failed, passes;
    atomic_llong last_pass_end; /* unix time of the last complete pass */
    atomic_llong last_pass_ms;  /* its duration */
    atomic_int in_pass;
};

/* The file's tier status (takes io shared, briefly). 0 or -errno. */
int sqz_tier_status_get(struct sqz_fs *fs, struct sqz_inode *in,
                        struct sqz_tier_status *st);
/* Tier one file now in the calling thread: when due, rewrite it under its
 * aged policy without holding io while the data is copied (readers go on
 * reading the old file), then swap it in under io exclusive unless it
 * changed meanwhile. Returns as sqz_tier_request (-ECANCELED on stop) and
 * counts the outcome in fs->tier. */
int sqz_tier_file(struct sqz_fs *fs, struct sqz_inode *in,
                  const struct sqz_tier_pace *pace, struct sqz_tier_result *res);
/* Lower the calling thread's CPU and I/O priority (SCHED_IDLE, else nice
 * 19; the lowest best-effort I/O priority); best effort. */
void sqz_tier_lower_priority(void);

#endif
