/* Internal interfaces of the container library (src/format/): on-disk
 * layout constants (docs/FORMAT.md), byte codecs of the header, anchors and
 * records, the in-memory block index, replay, and the container object.
 * Not installed. */
#ifndef SQUEEZEFS_FORMAT_INT_H
#define SQUEEZEFS_FORMAT_INT_H

#include <pthread.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "squeezefs/container.h"
#include "format/io.h"

/* ---- layout (docs/FORMAT.md) ---- */
#define SQZ_FMT_VERSION 2u        /* written by create; 1 still read/written */
#define SQZ_LOG_START_V1 4096u    /* version 1: records start here */
#define SQZ_LOG_START_V2 1536u    /* version 2: right after the anchor slots */
#define SQZ_LOG_START_MIN SQZ_LOG_START_V2
/* Where the log starts: the end of the header region of that version. */
static inline uint64_t sqz_log_start(uint32_t version)
{
    return version >= 2 ? SQZ_LOG_START_V2 : SQZ_LOG_START_V1;
}
#define SQZ_HDR_SIZE 64u          /* used bytes of sector 0 */
#define SQZ_ANCHOR_SIZE 56u
#define SQZ_ANCHOR_OFF(slot) (512u + 512u * (unsigned)(slot))
/* Length extension of an anchor slot (docs/FORMAT.md): at byte 64 of the
 * slot's sector, ignored by readers that only know the 56-byte anchor. */
#define SQZ_ANCHOR_EXT_OFF 64u
#define SQZ_ANCHOR_EXT_SIZE 32u
#define SQZ_ANCHOR_READ (SQZ_ANCHOR_EXT_OFF + SQZ_ANCHOR_EXT_SIZE)
#define SQZ_REC_HDR 32u           /* record header */
#define SQZ_DATA_PREFIX 16u       /* DATA payload before the stored bytes */
#define SQZ_DATA_SKIP (SQZ_REC_HDR + SQZ_DATA_PREFIX)
#define SQZ_LIST_PREFIX 16u       /* COMMIT / CHECKPOINT payload prefix */
#define SQZ_ENTRY_WIRE 24u        /* one index entry in COMMIT/CHECKPOINT */
#define SQZ_SCAN_CHUNK (1u << 20) /* replay read size */

extern const unsigned char sqz_hdr_magic[8];
#define SQZ_ANCHOR_MAGIC 0x41435153u /* "SQCA" little-endian */
#define SQZ_ANCHOR_EXT_MAGIC 0x54435153u /* "SQCT" little-endian */
#define SQZ_REC_MAGIC 0x52435153u    /* "SQCR" little-endian */

enum { SQZ_REC_DATA = 1, SQZ_REC_COMMIT = 2, SQZ_REC_CHECKPOINT = 3 };
enum { SQZ_KIND_HOLE = 0, SQZ_KIND_COMP = 1, SQZ_KIND_RAW = 2 };

/* ---- little-endian helpers ---- */
static inline void sqz_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8);
}
static inline void sqz_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void sqz_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t sqz_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t sqz_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t sqz_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t sqz_align8(uint64_t v) { return (v + 7) & ~(uint64_t)7; }

/* ---- checksum.c ---- */
/* Low 32 bits of XXH3_64bits(p, n). */
uint32_t sqz_checksum(const void *p, size_t n);
/* Checksum of a record: low 32 bits of
 * XXH3_64bits_withSeed(payload, plen, XXH3_64bits(hdr, 28)). */
uint32_t sqz_checksum2(const void *hdr, size_t hn, const void *payload,
                       size_t plen);

/* ---- header.c: sector 0 and the anchor slots ---- */
typedef struct sqz_header {
    sqz_params params;
    uint32_t version;
    uint32_t flags;
    uint64_t create_length;
    uint64_t file_id;
} sqz_header;

void sqz_header_encode(const sqz_header *h, uint8_t out[SQZ_HDR_SIZE]);
/* 0, -ENOENT (magic wrong: not a container), -EBADMSG (damaged),
 * -EPROTONOSUPPORT (other format version); a short reason goes to
 * (err, errlen) (common/errbuf.h). */
int sqz_header_decode(const uint8_t *in, size_t n, sqz_header *h,
                      char *err, size_t errlen);

typedef struct sqz_anchor {
    uint64_t seq;         /* 0 = unused slot */
    uint64_t ckpt_off;    /* offset of the CHECKPOINT record (0: none yet) */
    uint64_t ckpt_len;    /* its size on disk (padded; 0 with ckpt_off 0) */
    uint64_t durable_end; /* the log before it was fdatasync'ed */
} sqz_anchor;

void sqz_anchor_encode(const sqz_anchor *a, unsigned slot, uint64_t file_id,
                       uint8_t out[SQZ_ANCHOR_SIZE]);
/* 1 valid, 0 empty (all zero), -EBADMSG damaged. log0: where the log
 * starts (sqz_log_start; the lowest valid durable_end without checkpoint). */
int sqz_anchor_decode(const uint8_t *in, unsigned slot, uint64_t file_id,
                      uint64_t log0, sqz_anchor *a);
/* The length extension: the logical length and the last transaction of
 * the log up to the anchor's durable_end. Encode into a sector whose first
 * 56 bytes already hold the encoded anchor; decode: 1 present and valid
 * for the anchor in the same bytes, 0 absent (zero), -EBADMSG damaged.
 * in must hold SQZ_ANCHOR_READ bytes. */
void sqz_anchor_ext_encode(uint8_t *sector, uint64_t length, uint64_t txn);
int sqz_anchor_ext_decode(const uint8_t *in, uint64_t *length, uint64_t *txn);

/* ---- index.c: in-memory block index (two-level radix) ---- */
typedef struct sqz_entry {
    uint64_t off;   /* offset of the DATA record; 0 = hole */
    uint32_t len;   /* stored bytes */
    uint32_t crc;   /* checksum of the stored bytes */
    uint8_t kind;   /* SQZ_KIND_COMP / SQZ_KIND_RAW (HOLE when off == 0) */
} sqz_entry;

#define SQZ_CHUNK_SHIFT 10
#define SQZ_CHUNK_ENTRIES (1u << SQZ_CHUNK_SHIFT)

typedef struct sqz_index {
    sqz_entry **chunks;      /* top array, NULL = chunk of holes */
    uint64_t nchunks;        /* size of the top array */
    uint32_t *chunk_used;    /* live entries per chunk */
    uint64_t stored_blocks;
    uint64_t raw_blocks;
    uint64_t stored_bytes;   /* sum of len */
    uint64_t record_bytes;   /* sum of DATA record sizes */
} sqz_index;

void sqz_index_init(sqz_index *ix);
void sqz_index_free(sqz_index *ix);
/* Entry of block idx, or NULL for a hole. O(1). */
const sqz_entry *sqz_index_get(const sqz_index *ix, uint64_t idx);
/* Set block idx (kind HOLE clears it). *replaced receives the DATA record
 * size of the entry it replaced (0 if none). 0 or -ENOMEM. */
int sqz_index_set(sqz_index *ix, uint64_t idx, const sqz_entry *e,
                  uint64_t *replaced);
/* Make sure block idx has its chunk allocated, so a later sqz_index_set
 * of it cannot fail. 0 or -ENOMEM. */
int sqz_index_reserve(sqz_index *ix, uint64_t idx);
/* Remove all blocks >= first; returns the DATA record bytes removed. */
uint64_t sqz_index_drop_from(sqz_index *ix, uint64_t first);
/* The first block >= from that is stored (stored = 1; UINT64_MAX if none)
 * or a hole (stored = 0; always one). Skips whole chunks. */
uint64_t sqz_index_next(const sqz_index *ix, uint64_t from, int stored);
/* Call fn for each stored block in ascending block order; stops at and
 * returns the first nonzero result. */
int sqz_index_each(const sqz_index *ix,
                   int (*fn)(void *u, uint64_t idx, const sqz_entry *e),
                   void *u);

/* ---- record.c: record codecs ---- */
typedef struct sqz_rec_hdr {
    uint8_t type;
    uint64_t seq;
    uint32_t plen;
    uint32_t csum;
} sqz_rec_hdr;

/* Size on disk of a record with a payload of plen bytes (padded to 8). */
static inline uint64_t sqz_rec_size(uint64_t plen)
{
    return sqz_align8(SQZ_REC_HDR + plen);
}
/* Write the header for a payload already placed at rec+32, the checksum
 * and zero padding. */
void sqz_rec_seal(uint8_t *rec, uint8_t type, uint64_t file_id, uint64_t seq,
                  uint32_t plen);
/* Parse a record header (magic, type, file id). 0 or -EBADMSG. */
int sqz_rec_parse(const uint8_t *rec, uint64_t file_id, sqz_rec_hdr *h);
/* 1 if the checksum over header+payload matches. */
int sqz_rec_verify(const uint8_t *rec, const sqz_rec_hdr *h);

/* one wire index entry (COMMIT / CHECKPOINT) */
typedef struct sqz_wire_entry {
    uint64_t idx;
    uint8_t kind;
    sqz_entry e;
} sqz_wire_entry;
void sqz_wire_put(uint8_t *p, uint64_t idx, uint8_t kind, const sqz_entry *e);
void sqz_wire_get(const uint8_t *p, sqz_wire_entry *w);

/* Check an entry read from disk: kind, block number below max_blocks,
 * record offset >= log0 (where the log starts), 8-aligned, its DATA record
 * ending at or before limit, stored length plausible for block size bs.
 * 0 or -EBADMSG. */
int sqz_entry_check(const sqz_wire_entry *w, uint64_t max_blocks, size_t bs,
                    uint64_t log0, uint64_t limit);

/* Build a CHECKPOINT record of ix (txn, length) in a malloc'd buffer. */
int sqz_ckpt_build(const sqz_index *ix, uint64_t file_id, uint64_t txn,
                   uint64_t length, uint8_t **out, uint64_t *outlen);
/* Parse the payload of a verified CHECKPOINT record at rec_off into a fresh
 * index. 0 or -EBADMSG / -ENOMEM. */
int sqz_ckpt_parse(const uint8_t *payload, uint32_t plen, uint64_t rec_off,
                   int log2bs, uint64_t log0, sqz_index *ix, uint64_t *length);

/* ---- replay*.c (replay_int.h) ---- */
#define SQZ_DAMAGE_MAX 8
typedef struct sqz_damage {
    uint64_t off, len;        /* bytes of the synced log that were skipped */
} sqz_damage;

typedef struct sqz_state {
    sqz_index ix;
    uint64_t length;
    uint64_t txn;             /* last applied commit */
    uint64_t valid_end;       /* end of the applied log (>= durable_end) */
    uint64_t anchor_seq;      /* seq of the newest anchor (0 none) */
    uint64_t ckpt_off;        /* newest checkpoint (0 none) */
    uint64_t ckpt_end;        /* end of it (the log start if none) */
    uint64_t durable_end;     /* durable mark of the anchors (<= file size) */
    uint64_t dead_bytes;
    /* damage met inside the durable part of the log (replay skipped it) */
    unsigned ndamage;         /* regions found (the first SQZ_DAMAGE_MAX kept) */
    sqz_damage damage[SQZ_DAMAGE_MAX];
    uint64_t lost_commits;    /* transactions whose COMMIT record was lost */
    /* the anchors' length extension for durable_end (mark_known 0: none) */
    int mark_known;
    uint64_t mark_len, mark_txn;
    /* valid records of this file (commits) found after a bad record past
     * the durable mark, that could not be applied (an uncommitted tail
     * that still holds later commits: verify reports it) */
    uint64_t tail_commits;
    /* damage after the durable mark, recognised by later valid commits */
    int evidence;
} sqz_state;

/* Labels (log.c): a copy of label for a container on fd (SQZ_LABEL_FROM_FD
 * becomes "\001<fd>", resolved when printed; NULL: "(container)"), and
 * the text of such a copy for a log line (buf, n: room to make it). */
char *sqz_label_dup(const char *label, int fd);
const char *sqz_label_text(const char *label, char *buf, size_t n);
/* The same for a label as given to an open or create call on fd. */
const char *sqz_label_text_fd(const char *label, int fd, char *buf, size_t n);
/* The text of a label inside one log statement. */
#define SQZ_LBL(label) sqz_label_text((label), (char[PATH_MAX]){0}, PATH_MAX)
#define SQZ_LBL_FD(label, fd) \
    sqz_label_text_fd((label), (fd), (char[PATH_MAX]){0}, PATH_MAX)

/* Load the state of the container: anchors, checkpoint, replay. file_size
 * is the backing file's size; label names the file in log lines. 0,
 * -EBADMSG (reason in err), -ENOMEM, I/O errors. */
int sqz_replay(const sqz_io *io, int fd, const sqz_header *h,
               uint64_t file_size, const char *label, sqz_state *st,
               char *err, size_t errlen);

/* Load and drop the checkpoint anchor a points to: 0 valid, -EBADMSG,
 * -ENOMEM or an I/O error. */
int sqz_anchor_check(const sqz_io *io, int fd, const sqz_header *h,
                     uint64_t fsize, const sqz_anchor *a);

/* ---- container object ---- */
struct sqz_ctr {
    pthread_rwlock_t lock;
    sqz_io io;
    int fd;
    int writable;
    char *label;
    sqz_header hdr;
    size_t bs;
    sqz_state st;
    uint64_t end;            /* append position (= valid end of the log) */
    uint64_t since_ckpt;     /* bytes appended since the newest checkpoint */
    uint64_t marked_end;     /* durable end last written to an anchor slot */
    uint64_t file_size;      /* backing size at open (verify: the tail) */
    /* prealloc.c: [end, phys_end) of the backing file are written zeros */
    uint64_t phys_end;       /* backing size as written by this object */
    uint64_t end_at_sync;    /* end at the last sync */
    int prealloc;            /* write log space ahead (frequent small syncs) */
    int prealloc_ok;         /* the owner allows it (sqz_ctr_allow_prealloc) */
    unsigned verify_warnings;/* of the last sqz_ctr_verify */
    int broken;              /* a failed append could not be undone */
    int punch_unsupported;   /* logged once */
    /* Lazy creation (sqz_ctr_create_fd_lazy, docs/FORMAT.md "Creation"):
     * hdr_pending: the file is still empty; the first append writes the
     * header region and its records in one pwrite from offset 0.
     * first_unsynced: that first write is not known to be durable yet;
     * anything else written to the file must wait for a flush of it. */
    int hdr_pending;
    int first_unsynced;
};

/* ---- prealloc.c: log space written ahead as zeros ---- */
/* 1 if the bytes [from, to) of fd are all zeros (and at most 16 MiB). */
int sqz_ctr_tail_is_zero(const sqz_io *io, int fd, uint64_t from, uint64_t to);
/* Before appending need bytes at c->end (lock exclusive): extend the
 * written-ahead zeros if preallocating. 0 or a negative errno (only when
 * the file could not be put back: c->broken). */
int sqz_ctr_room(sqz_ctr *c, uint64_t need);
/* After an append moved c->end. */
void sqz_ctr_appended(sqz_ctr *c);
/* After a successful sync of the log up to c->end. */
void sqz_ctr_synced(sqz_ctr *c);
/* Cut the zeros after the log end off (the last close). 0 or -errno. */
int sqz_ctr_trim(sqz_ctr *c);

/* The header region of c (header in sector 0, zero anchor slots) into
 * out (sqz_log_start bytes). */
void sqz_ctr_header_region(const sqz_ctr *c, uint8_t *out);
/* Before anything but the first write reaches the file: make the first
 * write durable (lazy creation). Caller holds the lock exclusively.
 * 0 or a negative errno. */
int sqz_ctr_order_first(sqz_ctr *c);

/* read one block; caller holds the lock (shared or exclusive) */
ssize_t sqz_ctr_read_block_locked(sqz_ctr *c, uint64_t idx, void *buf,
                                  size_t *stored_len);
/* commit; caller holds the lock exclusively */
int sqz_ctr_commit_locked(sqz_ctr *c, sqz_prepared *blocks, size_t n,
                          uint64_t new_length);
int sqz_ctr_checkpoint_locked(sqz_ctr *c);
/* Read and check the stored bytes of entry e into a block-sized buf
 * (decompressed). 0, -EIO with the reason in err (damaged or outside the
 * file), -ENOMEM or another I/O error. */
int sqz_block_load(const sqz_ctr *c, const sqz_entry *e, void *buf,
                   char *err, size_t errlen);
/* Check the stored bytes src of entry e (its len bytes, already read) and
 * decode them into a block-sized buf (src may equal buf for a raw block).
 * 0, -EIO with the reason in err, or -ENOMEM. Lock-free. */
int sqz_block_decode(const sqz_ctr *c, const sqz_entry *e, const void *src,
                     void *buf, char *err, size_t errlen);
/* Open with an explicit I/O; on failure err receives the reason (empty if
 * none); never takes ownership of fd when own_fd == 0. */
int sqz_ctr_open_internal(int fd, int flags, const char *label,
                          const sqz_io *io, int own_fd, sqz_ctr **out,
                          char *err, size_t errlen);
/* The sync threshold: bytes appended since the last checkpoint that make
 * sqz_ctr_sync write one. */
uint64_t sqz_ckpt_threshold(const sqz_ctr *c);
static inline uint64_t sqz_max_blocks(int log2bs)
{
    return SQZ_MAX_LENGTH >> log2bs;
}

#endif
