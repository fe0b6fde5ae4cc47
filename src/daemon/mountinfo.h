/* The mount table (mountinfo.c): the line and device of a FUSE mount in
 * /proc/self/mountinfo, a mount's flags and setting them (remounts, the
 * atime options), and the kernel's read-ahead window for a squeezefs
 * mount:
 *
 * Buffered reads of a FUSE file reach the daemon in requests of at most the
 * backing_dev_info's read-ahead size, 128 KiB by default: one block per
 * request at the default block size, so every block costs a round trip and
 * read-ahead in the engine has little to overlap with. Raising the mount's
 * /sys/class/bdi/MAJ:MIN/read_ahead_kb to the FUSE request size (1 MiB)
 * lets the kernel ask for 8 blocks at a time, which the engine decompresses
 * in parallel. Needs root (sysfs); unprivileged mounts keep the default. */
#ifndef SQZ_DAEMON_MOUNTINFO_H
#define SQZ_DAEMON_MOUNTINFO_H

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

/* A kernel mount flag by its option name (ro, nosuid, noatime, ...):
 * the MS_* bits it sets and clears, or NULL. */
struct sqz_kflag {
    const char *name;
    unsigned long set, clear;
};
const struct sqz_kflag *sqz_mount_kflag(const char *name);
/* The flags of a mountinfo line (its per-mount options, field 6, and the
 * super block's), with MS_STRICTATIME where neither noatime nor relatime
 * is set; 0 if the line cannot be copied. */
unsigned long sqz_mountinfo_flags(const char *line, size_t len);
/* The flags of the FUSE mount at mnt (MS_*, with MS_STRICTATIME where
 * neither noatime nor relatime is set, and MS_MGC_VAL), or 0 if none. */
unsigned long sqz_mount_flags_of(const char *mnt);
/* Set the mount flags of opts (strictatime, nodiratime, ... : the ones
 * libfuse does not pass) on the mount at mnt, keeping the others. 0 or
 * -errno with a message in err. */
int sqz_mount_set_flags(const char *mnt, const char *opts, char *err,
                        size_t errlen);

#endif
