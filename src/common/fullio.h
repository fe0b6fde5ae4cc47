/* pread until n bytes, end of file or an error; pwrite until n bytes or an
 * error. Header-only so every layer can use them without a dependency. */
#ifndef SQZ_COMMON_FULLIO_H
#define SQZ_COMMON_FULLIO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

/* Read [off, off + n) of fd, retrying after EINTR and short reads. Returns
 * the bytes read (less than n only at end of file) or -errno: an error
 * after partial progress is still an error, never a silent short read. */
static inline ssize_t sqz_pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* Write [off, off + n) of fd, retrying after EINTR and short writes.
 * Returns 0 or -errno; a write that makes no progress (returns 0) is -EIO,
 * never a loop. An error after partial progress is still an error. */
static inline int sqz_pwrite_full(int fd, const void *buf, size_t n,
                                  uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pwrite(fd, (const char *)buf + done, n - done,
                           (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EIO;
        done += (size_t)r;
    }
    return 0;
}

#endif
