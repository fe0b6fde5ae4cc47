/* Opening a path below a directory descriptor without leaving it: no
 * component may be a symlink (nor "..", nor a magic link), so what is
 * opened is inside the directory whatever a user renames meanwhile. The
 * daemon runs as root over a tree its users write: every multi-component
 * path it opens in BACKING goes through here (CONTRIBUTING.md,
 * "Confinement"). */
#ifndef SQZ_COMMON_BENEATH_H
#define SQZ_COMMON_BENEATH_H

#include <sys/types.h>

/* openat(dirfd, rel, flags, mode) resolved beneath dirfd with no symlink
 * in any component (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS; on a
 * kernel without openat2, a walk of O_NOFOLLOW opens of one component
 * each). rel "" or "." opens dirfd's directory itself. An fd, or -errno:
 * -ELOOP (or -ENOTDIR) a symlink on the way, -EXDEV a ".." or an
 * absolute rel. A symlink as the last component is opened itself only by
 * O_PATH | O_NOFOLLOW, as openat(2) would; otherwise -ELOOP. */
int sqz_open_beneath(int dirfd, const char *rel, int flags, mode_t mode);
/* Its fallback walk alone (what a kernel without openat2 gets; for the
 * unit test). */
int sqz_open_beneath_walk(int dirfd, const char *rel, int flags, mode_t mode);

#endif
