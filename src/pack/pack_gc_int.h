/* Reclaiming packs (pack_gc.c: the notes of directories and the runs;
 * pack_gc_dir.c: one directory's scan). Internal to src/pack. */
#ifndef SQZ_PACK_GC_INT_H
#define SQZ_PACK_GC_INT_H
#include "daemon/fs.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#define SQZ_GC_INTERVAL_S 10
#define SQZ_GC_MIN_PACK (64u << 10)
#define SQZ_GC_MAX_NOTES 4096
#define GC_AGAIN 2 /* not now: the directory changed, scan it again later */

struct note {
    dev_t dev;
    ino_t ino;
    int fd;            /* O_PATH of the directory (owned), or -1: */
    struct sqz_ifd_id *id; /* its file handle (ifd.c; owned), or NULL: */
    char *rel;         /* its path below BACKING (owned) */
    time_t last;       /* last scan (monotonic seconds), 0 never */
    int dirty;
};

/* Renames and links through the mount, counted per directory bucket
 * (started and finished): a scan is trusted only if none was in flight
 * when it began and none started before a removal it leads to. A name
 * moved during readdir may be missed by it; timestamps are too coarse to
 * tell. */
#define GC_BUCKETS 256

struct sqz_pack_gc {
    atomic_uint_fast64_t started[GC_BUCKETS], finished[GC_BUCKETS];
    pthread_mutex_t mu;
    struct note *v;
    size_t n, cap;
    size_t nfd;        /* notes holding a descriptor */
    uint64_t removed, moved; /* statistics: packs removed, entries moved */
};

static inline unsigned sqz_gc_bucket(dev_t dev, ino_t ino)
{
    uint64_t h = ((uint64_t)ino * 0x9E3779B97F4A7C15ull) ^ (uint64_t)dev;
    return (unsigned)(h >> 56) % GC_BUCKETS;
}

/* Scan the directory pathfd (O_PATH) names and reclaim its packs: 0, 1
 * the directory is gone, GC_AGAIN it changed under the scan, or -errno. */
int sqz_pack_gc_dir(struct sqz_fs *fs, int pathfd, uint64_t *removed,
                    uint64_t *moved);

#endif
