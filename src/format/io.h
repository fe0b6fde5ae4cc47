/* The I/O seam of the container library: every access to a backing file
 * (read, write, sync, truncate, hole punching, size) goes through one of
 * these function pointers, so tests can install a simulated disk that
 * records unsynced writes and crashes at will. Internal to squeezefs (not
 * installed); the unit tests include it through the "src" include path.
 *
 * All functions return 0 / a byte count on success or a negative errno.
 * pread/pwrite transfer the whole range or fail (short reads only at end of
 * file: pread returns fewer bytes only when the file ends). */
#ifndef SQUEEZEFS_FORMAT_IO_H
#define SQUEEZEFS_FORMAT_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "squeezefs/container.h"

typedef struct sqz_io {
    ssize_t (*pread)(void *ctx, int fd, void *buf, size_t n, uint64_t off);
    int (*pwrite)(void *ctx, int fd, const void *buf, size_t n, uint64_t off);
    int (*sync)(void *ctx, int fd, int datasync);
    int (*truncate)(void *ctx, int fd, uint64_t len);
    /* Deallocate [off, off+len), keeping the size; -EOPNOTSUPP if the file
     * system cannot. */
    int (*punch)(void *ctx, int fd, uint64_t off, uint64_t len);
    /* st_size and st_blocks*512 */
    int (*size)(void *ctx, int fd, uint64_t *size, uint64_t *alloc);
    void *ctx;
} sqz_io;

/* The default: plain system calls (EINTR retried, short transfers looped). */
extern const sqz_io sqz_io_syscalls;

/* The start of a file read once, for an open: header, anchor slots and
 * (for a small file) the whole log come from one pread instead of four or
 * more. io serves reads inside the first len bytes from memory (and, when
 * the file ends there, reads past it as end of file); everything else goes
 * to base. */
typedef struct sqz_io_head {
    sqz_io io;          /* the wrapper; ctx = this struct */
    const sqz_io *base;
    int fd;
    unsigned char *buf;
    size_t len;
    int whole;          /* the file ends at len */
} sqz_io_head;
#define SQZ_IO_HEAD_CAP (32u << 10)
/* Read min(fsize, cap) bytes from offset 0. 0 or a negative errno. */
int sqz_io_head_init(sqz_io_head *h, const sqz_io *base, int fd,
                     uint64_t fsize, size_t cap);
void sqz_io_head_free(sqz_io_head *h);

/* sqz_ctr_create_fd / sqz_ctr_open_fd with a given I/O implementation
 * (copied into the container; io->ctx must outlive it). */
int sqz_ctr_create_fd_io(int fd, const sqz_params *p, const char *label,
                         const sqz_io *io, sqz_ctr **out);
/* The same, writing format version 1 or 2 (docs/FORMAT.md); tests make
 * version-1 files with it (readers and writers of version 1 are kept). */
int sqz_ctr_create_fd_ver(int fd, const sqz_params *p, uint32_t version,
                          const char *label, const sqz_io *io, sqz_ctr **out);
int sqz_ctr_create_fd_lazy_io(int fd, const sqz_params *p, const char *label,
                              const sqz_io *io, sqz_ctr **out);
int sqz_ctr_open_fd_io(int fd, int flags, const char *label, const sqz_io *io,
                       sqz_ctr **out);

#endif
