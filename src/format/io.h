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

/* sqz_ctr_create_fd / sqz_ctr_open_fd with a given I/O implementation
 * (copied into the container; io->ctx must outlive it). */
int sqz_ctr_create_fd_io(int fd, const sqz_params *p, const char *label,
                         const sqz_io *io, sqz_ctr **out);
int sqz_ctr_open_fd_io(int fd, int flags, const char *label, const sqz_io *io,
                       sqz_ctr **out);

#endif
