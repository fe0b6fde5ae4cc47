/* The ctime a file or directory shows through the mount when the
 * daemon's own work moved its backing ctime (docs/FORMAT.md "Shown
 * times"). Background work (durable marks, packing, pack files created or
 * removed in a directory) changes a backing object's ctime, which no
 * syscall can set back; the ctime the object showed before is kept in the
 * xattr SQZ_SHOWN_XATTR and counts while the backing ctime is at most the
 * record's `until` (a bound just past the daemon's last step: any later
 * change of the object moves the backing ctime past it) and not before
 * the kept ctime. Usable without FUSE; errors are negative errno values. */
#ifndef SQUEEZEFS_SHOWN_H
#define SQUEEZEFS_SHOWN_H

#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SQZ_SHOWN_XATTR "user.squeezefs.shown"
#define SQZ_SHOWN_SIZE 36u

typedef struct sqz_shown {
    struct timespec ctime; /* the ctime shown */
    struct timespec until; /* counts while the backing ctime <= until */
} sqz_shown;

void sqz_shown_encode(const sqz_shown *s, uint8_t out[SQZ_SHOWN_SIZE]);
/* 0, or -EBADMSG (damaged or unknown: the backing ctime is shown). */
int sqz_shown_decode(const void *in, size_t n, sqz_shown *s);
/* Does s count for a backing object whose ctime is bctime? */
int sqz_shown_counts(const sqz_shown *s, const struct timespec *bctime);

#ifdef __cplusplus
}
#endif
#endif
