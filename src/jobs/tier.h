/* Age-based tiering: the tier request of one file (tier_job.c) and the
 * background pass (tier.c); docs in tier.c. Internal header. */
#ifndef SQZ_JOBS_TIER_H
#define SQZ_JOBS_TIER_H

#include "node/inode.h"

/* getxattr user.squeezefs.tier: the file's tier status as JSON. Length
 * or -errno. */
int sqz_tier_status_json(struct sqz_fs *fs, struct sqz_inode *in, char *buf,
                         size_t n);
/* setxattr user.squeezefs.tier (value: the rate in bytes/s, "" or 0 =
 * unlimited): tier the file now, in a low-priority thread, while the
 * request waits. 0 (tiered), -EALREADY (not due), -EBUSY (open for
 * writing), -EMLINK (hard links), -ECANCELED (written meanwhile, or the
 * mount is stopping: abandoned), -EINTR (request interrupted), other
 * -errno. */
int sqz_tier_request(struct sqz_fs *fs, fuse_req_t req, struct sqz_inode *in,
                     const char *value, size_t size);
/* The same with the rate as a number (SQZ_IOC_TIER). */
int sqz_tier_request_rate(struct sqz_fs *fs, fuse_req_t req,
                          struct sqz_inode *in, uint64_t rate);
/* Start the tier state (rw mounts) and, with tier=INTERVAL, the thread. */
int sqz_tier_start(struct sqz_fs *fs);
/* Stop the thread (an interrupted file is abandoned, its temporary
 * removed; the pass resumes where it was at the next mount). Idempotent. */
void sqz_tier_stop(struct sqz_fs *fs);
/* After sqz_tier_stop: free the state. */
void sqz_tier_free(struct sqz_fs *fs);
/* The tier counters as JSON members (", \"tier_files\": N, ...") for the
 * stats xattr. Length or -ENOSPC. */
int sqz_tier_stats_json(struct sqz_fs *fs, char *buf, size_t n);

#endif
