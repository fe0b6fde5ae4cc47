/* The kernel's read-ahead window for a squeezefs mount.
 *
 * Buffered reads of a FUSE file reach the daemon in requests of at most the
 * backing_dev_info's read-ahead size, 128 KiB by default: one block per
 * request at the default block size, so every block costs a round trip and
 * read-ahead in the engine has little to overlap with. Raising the mount's
 * /sys/class/bdi/MAJ:MIN/read_ahead_kb to the FUSE request size (1 MiB)
 * lets the kernel ask for 8 blocks at a time, which the engine decompresses
 * in parallel. Needs root (sysfs); unprivileged mounts keep the default. */
#ifndef SQZ_FUSE_READAHEAD_H
#define SQZ_FUSE_READAHEAD_H

#include <stddef.h>

/* Find the "MAJ:MIN" device of the FUSE mount on the absolute, canonical
 * path `mnt` in the mountinfo text read from `mountinfo` (the newest mount
 * on that path wins). Returns 0, -ENOENT if there is none, -ENAMETOOLONG if
 * out is too small. Pure: unit-testable with any text. */
int sqz_mountinfo_fuse_dev(const char *mountinfo, const char *mnt, char *out,
                           size_t outlen);

/* The newest line of the mountinfo text that is a FUSE mount on `mnt`
 * (without its newline): 0, or -ENOENT. Pure. */
int sqz_mountinfo_fuse_line(const char *mountinfo, const char *mnt,
                            const char **line, size_t *len);

/* 1 if some line of the mountinfo text is a mount of the device "MAJ:MIN"
 * (any file system type, any mount point), else 0. Pure. */
int sqz_mountinfo_has_dev(const char *mountinfo, const char *dev);

/* Read a whole small (procfs) file into a malloc'd, NUL-terminated string.
 * 0 or a negative errno. */
int sqz_slurp(const char *path, char **out);

/* Set read_ahead_kb of the FUSE mount on `mnt` (found in
 * /proc/self/mountinfo) to bytes/1024. Call only after the kernel
 * processed the FUSE INIT reply (which clamps the window); any request
 * other than INIT proves that. Returns 0 or a negative errno. */
int sqz_set_mount_readahead(const char *mnt, size_t bytes);

#endif
