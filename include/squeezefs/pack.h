/* squeezefs packed files (docs/FORMAT.md, "Packed files").
 *
 * A small file can be stored packed: its backing file is empty (0 bytes,
 * no data block) and carries the xattr SQZ_PACK_XATTR, a pointer to one
 * entry of a pack file in the same directory. A pack file
 * (SQZ_PACK_PREFIX + 16 hex digits) holds the stored bytes of many small
 * files, each entry checksummed and tagged with the pack's id. Packs are
 * append-only: an entry is never rewritten in place, so a reader that
 * follows a pointer gets the bytes that pointer was written for, or an
 * error (never other bytes). A pointer counts only on a 0-byte backing
 * file: a backing file with bytes is a container or a plain file, whatever
 * xattrs it carries.
 *
 * The pointer is written only after the entry it points to is durable, so
 * a pointer that does not match its entry is damage (EIO), never a torn
 * write. Usable without FUSE; errors are negative errno values. */
#ifndef SQUEEZEFS_PACK_H
#define SQUEEZEFS_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "squeezefs/container.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SQZ_PACK_XATTR "user.squeezefs.packed"
#define SQZ_PACK_PREFIX ".sqz-tmp.pack."
#define SQZ_PACK_NAME_MAX 40
#define SQZ_PACK_PTR_SIZE 48u /* version 1 */
#define SQZ_PACK_PTR_MAX 56u  /* version 2: with the ctime the file shows
                                 (56 bytes: still in an ext4 inode) */
#define SQZ_PACK_HDR_SIZE 64u
#define SQZ_PACK_ENTRY_HDR 48u
/* Files of at most this logical length (and of one block) are packed. */
#define SQZ_PACK_MAX_LENGTH 131072u
/* A pack is closed for appends at this size; the next one is started. */
#define SQZ_PACK_MAX_SIZE (8u << 20)

typedef struct sqz_pack_ptr {
    uint64_t pack_id;     /* the pack's id (its name) */
    uint64_t off;         /* the entry's offset in the pack */
    uint64_t length;      /* logical length of the file */
    uint32_t stored_len;  /* stored bytes of the entry */
    uint32_t crc;         /* checksum of the stored bytes */
    uint8_t kind;         /* 1 compressed, 2 raw */
    sqz_params params;    /* the policy the file was written with */
    /* version 2: the ctime the file shows (docs/FORMAT.md "Shown times":
     * kept here rather than in a second xattr, which would not fit in an
     * ext4 inode beside the pointer and cost a 4 KiB block per file) */
    int has_shown;
    int64_t shown_ns;     /* the ctime shown, ns since the epoch */
    uint32_t shown_until; /* counts while the backing ctime is at most
                             this (seconds since the epoch) */
} sqz_pack_ptr;

/* Encode p (version 1, or 2 with has_shown): the size written (48 or 56). */
size_t sqz_pack_ptr_encode(const sqz_pack_ptr *p, uint8_t out[SQZ_PACK_PTR_MAX]);
/* 0, or -EBADMSG with the reason in err (damaged or unknown). */
int sqz_pack_ptr_decode(const void *in, size_t n, sqz_pack_ptr *p, char *err,
                        size_t errlen);
/* The pointer of the file name of directory dirfd (one component, no
 * symlink followed; anything but a regular file has none): 1 packed (*p
 * filled), 0 no pointer (or a file system without xattrs), -EBADMSG a
 * damaged pointer (reason in err), other -errno. Does not look at the
 * file's size. */
int sqz_pack_ptr_getat(int dirfd, const char *name, sqz_pack_ptr *p,
                       char *err, size_t errlen);
/* The same on a path, following symlinks: only for /proc/self/fd/N of an
 * O_PATH descriptor (the daemon's inodes), whose magic link resolves to
 * that very file. */
int sqz_pack_ptr_get_follow(const char *path, sqz_pack_ptr *p, char *err,
                            size_t errlen);
/* The same on an open descriptor (not O_PATH; a symlink's target). */
int sqz_pack_ptr_fget(int fd, sqz_pack_ptr *p, char *err, size_t errlen);
/* Set the pointer on an open descriptor (not O_PATH). 0 or -errno. */
int sqz_pack_ptr_set(int fd, const sqz_pack_ptr *p);

/* The pack's file name (SQZ_PACK_PREFIX + 16 hex digits). */
void sqz_pack_name(uint64_t pack_id, char out[SQZ_PACK_NAME_MAX]);
/* 1 if name is prefix followed by 16 lowercase hex digits (*id their
 * value), else 0. */
int sqz_name_hex16(const char *name, const char *prefix, uint64_t *id);
/* 1 if name is a pack's name (and *id its id), else 0. */
int sqz_pack_name_parse(const char *name, uint64_t *id);

/* Read and check the entry p points to, in the pack of directory dirfd,
 * into buf (p->length bytes). 0; -EIO with the reason in err when the
 * pack is missing or the entry damaged or not the one p points to;
 * -ENOMEM. */
int sqz_pack_read(int dirfd, const sqz_pack_ptr *p, void *buf, char *err,
                  size_t errlen);
/* The pack pack_id names, in directory dirfd, opened read-only: an fd,
 * -EIO (missing or unreadable: reason in err) or -ENOMEM. */
int sqz_pack_open(int dirfd, uint64_t pack_id, char *err, size_t errlen);
/* sqz_pack_read on an open pack (any pack whose entry at p->off passes
 * every check p makes holds exactly the bytes p was written for). */
int sqz_pack_read_fd(int fd, const sqz_pack_ptr *p, void *buf, char *err,
                     size_t errlen);
/* sqz_pack_read of the pack of directory dirfd into a new buffer (*buf,
 * p->length bytes; free it). 0 or a negative errno. */
int sqz_pack_read_alloc(int dirfd, const sqz_pack_ptr *p, void **buf,
                        char *err, size_t errlen);
/* The same for the file name of directory dirfd (one component, no
 * symlink followed): reads its pointer and its pack. 1 read (*p filled,
 * *buf malloc'd, p->length bytes; free it), 0 not packed (a backing file
 * with bytes, not a regular file, or no pointer), or a negative errno
 * (-EIO or -EBADMSG: damaged, reason in err). */
int sqz_pack_loadat(int dirfd, const char *name, sqz_pack_ptr *p, void **buf,
                    char *err, size_t errlen);

/* Appending to a pack (one writer per directory). */
typedef struct sqz_pack_writer {
    int dirfd;     /* not owned */
    int fd;        /* the pack, O_RDWR; -1 when none is open */
    uint64_t id;
    uint64_t end;  /* append position */
    int dirty;     /* appended since the last flush */
} sqz_pack_writer;

/* Start a new pack in dirfd (a fresh random id, O_EXCL; the directory
 * is fsync'ed, so the pack's name is durable). 0 or -errno. */
int sqz_pack_writer_open(sqz_pack_writer *w, int dirfd);
/* Compress data (len bytes, at most one block of p and at most
 * SQZ_PACK_MAX_LENGTH) with p and append it; *out receives the pointer.
 * Not durable until sqz_pack_writer_flush. 0 or -errno (-EFBIG: the pack
 * is full, start another). */
int sqz_pack_append(sqz_pack_writer *w, const sqz_params *p, const void *data,
                    size_t len, sqz_pack_ptr *out);
/* fdatasync the pack if something was appended. 0 or -errno. */
int sqz_pack_writer_flush(sqz_pack_writer *w);
/* Close the pack (no flush). */
void sqz_pack_writer_close(sqz_pack_writer *w);

/* 1 if the file open as fd starts with the header of pack id, or is
 * shorter than a header and holds its first bytes (the creation of the
 * pack torn by a crash: 0 bytes included); 0 if not; -errno. */
int sqz_pack_header_is(int fd, uint64_t id);

/* Check a whole pack file: header, every entry's header and checksum.
 * Returns the number of entries found, or -EBADMSG (reason in err) at the
 * first damage; *end receives where the checked entries end. */
long sqz_pack_check(int fd, uint64_t *id, uint64_t *end, char *err,
                    size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
