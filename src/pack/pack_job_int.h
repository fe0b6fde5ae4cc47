/* pack_job.c's packer: the packs it keeps open and its notes. Internal
 * to pack_job.c (a header of its own for the file's size). */
#ifndef SQZ_FUSE_PACK_JOB_INT_H
#define SQZ_FUSE_PACK_JOB_INT_H

#include "node/inode.h"
#include "squeezefs/pack.h"

/* packs open (two fds each; a candidate needing one more waits) */
#define SQZ_PACK_OPEN_MAX sqz_ifd_packs_max()

struct open_pack {
    dev_t dev;
    ino_t ino;            /* the directory */
    int dirfd;            /* owned */
    sqz_pack_writer w;
    uint64_t used;        /* batch number it was last used in (LRU) */
    int touched;          /* appended to in this batch */
};

struct sqz_packer {
    struct open_pack *p;  /* at most SQZ_PACK_OPEN_MAX open (pack_for) */
    size_t n, cap;
    uint64_t batch;
    atomic_int disabled;  /* the backing file system refused the pointer
                             (read by closing threads) */
    struct sqz_inode **pend; /* marked small files waiting for a quiet
                                moment, each with an open reference */
    size_t npend, pcap;
    atomic_size_t npend_seen; /* npend, for other threads (stats) */
    struct sqz_inode **retry; /* drafts that were open when tried: noted
                                 again by sqz_pack_retry (open references) */
    size_t nretry, rcap;
    /* statistics (read by other threads) */
    atomic_uint_fast64_t packed, skipped, failed;
};

#endif
