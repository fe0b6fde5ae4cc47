/* The identity an inode's descriptor is opened again by (ifd_int.h): a
 * file handle, with, for a regular file, the last name it was seen by as
 * a hint (inode_path.c finds a file reopened disconnected through it), or
 * without handles its parent inode and its name. */
#include "node/ifd_int.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct sqz_ifd_id *sqz_ifdid_handle(int fd)
{
    struct {
        struct file_handle h;
        unsigned char b[MAX_HANDLE_SZ];
    } fh;
    fh.h.handle_bytes = MAX_HANDLE_SZ;
    int mid;
    if (name_to_handle_at(fd, "", &fh.h, &mid, AT_EMPTY_PATH) != 0)
        return NULL;
    struct sqz_ifd_id *id = calloc(1, sizeof(*id) + fh.h.handle_bytes);
    if (!id)
        return NULL;
    id->kind = ID_HANDLE;
    id->len = fh.h.handle_bytes;
    id->htype = fh.h.handle_type;
    memcpy(id->data, fh.h.f_handle, fh.h.handle_bytes);
    return id;
}

struct sqz_ifd_id *sqz_ifdid_hinted(const struct sqz_ifd_id *h,
                                    struct sqz_inode *parent, const char *name)
{
    size_t n = strlen(name);
    struct sqz_ifd_id *id = malloc(sizeof(*id) + h->len + n + 1);
    if (!id)
        return NULL;
    memcpy(id, h, sizeof(*id) + h->len);
    id->parent = parent;
    id->hlen = (unsigned)n;
    memcpy(id->data + h->len, name, n + 1);
    return id;
}

const char *sqz_ifdid_hint(const struct sqz_ifd_id *id)
{
    return id && id->kind == ID_HANDLE && id->hlen ? id->data + id->len : NULL;
}

struct timespec sqz_ifdid_birth(int fd)
{
    struct statx sx;
    struct timespec t = {0, 0};
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) == 0 &&
        (sx.stx_mask & STATX_BTIME)) {
        t.tv_sec = sx.stx_btime.tv_sec;
        t.tv_nsec = sx.stx_btime.tv_nsec;
    }
    return t;
}

int sqz_ifdid_birth_differs(const struct timespec *a, const struct timespec *b)
{
    return (a->tv_sec || a->tv_nsec) && (b->tv_sec || b->tv_nsec) &&
           (a->tv_sec != b->tv_sec || a->tv_nsec != b->tv_nsec);
}

struct sqz_ifd_id *sqz_ifdid_name(struct sqz_inode *parent, const char *name,
                                  struct timespec birth)
{
    size_t n = strlen(name);
    struct sqz_ifd_id *id = calloc(1, sizeof(*id) + n + 1);
    if (!id)
        return NULL;
    id->kind = ID_NAME;
    id->parent = parent;
    id->len = (unsigned)n;
    id->birth = birth;
    memcpy(id->data, name, n + 1);
    return id;
}

int sqz_ifdid_same_handle(const struct sqz_ifd_id *a,
                          const struct sqz_ifd_id *b)
{
    return a->kind == ID_HANDLE && b->kind == ID_HANDLE && a->len == b->len &&
           a->htype == b->htype && memcmp(a->data, b->data, a->len) == 0;
}

int sqz_ifdid_eq(const struct sqz_ifd_id *a, const struct sqz_ifd_id *b)
{
    return a->kind == b->kind && a->parent == b->parent && a->len == b->len &&
           a->hlen == b->hlen && a->htype == b->htype &&
           memcmp(a->data, b->data, a->len + (a->hlen ? a->hlen + 1 : 0)) == 0;
}
