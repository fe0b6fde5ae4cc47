/* How an inode's backing object is opened again (ifd_id.c), for the
 * descriptor cache (ifd.c). Internal header of node/ifd. */
#ifndef SQZ_NODE_IFD_INT_H
#define SQZ_NODE_IFD_INT_H

#include <time.h>

#include "node/ifd.h"

enum { ID_HANDLE = 1, ID_NAME = 2 };

struct sqz_ifd_id {
    unsigned char kind;
    unsigned hlen;            /* ID_HANDLE: the hint's name length, 0: none */
    struct sqz_inode *parent; /* ID_NAME: its directory; ID_HANDLE: a
                                 regular file's hint, the directory of the
                                 last name it was seen by, or NULL (the
                                 inode counts a child reference of it) */
    unsigned len;             /* handle bytes / name length (no NUL) */
    int htype;                /* ID_HANDLE: handle_type */
    struct timespec birth;    /* ID_NAME: the birth time (statx), 0 if the
                                 file system has none: an inode number
                                 given to a new file is told by it */
    char data[];              /* the handle's bytes, then the hint's name
                                 and its NUL (ID_HANDLE); the name and its
                                 NUL (ID_NAME) */
};

/* A file handle of fd's object (NULL on failure). */
struct sqz_ifd_id *sqz_ifdid_handle(int fd);
/* A name id: parent, name, the birth time. */
struct sqz_ifd_id *sqz_ifdid_name(struct sqz_inode *parent, const char *name,
                                  struct timespec birth);
/* A copy of the handle id h with the hint (parent, name); NULL: no memory. */
struct sqz_ifd_id *sqz_ifdid_hinted(const struct sqz_ifd_id *h,
                                    struct sqz_inode *parent,
                                    const char *name);
/* The hint's name of a handle id, NULL if none. */
const char *sqz_ifdid_hint(const struct sqz_ifd_id *id);
struct timespec sqz_ifdid_birth(int fd);
int sqz_ifdid_birth_differs(const struct timespec *a, const struct timespec *b);
/* The same identity (name, hint included) / the same handle. */
int sqz_ifdid_eq(const struct sqz_ifd_id *a, const struct sqz_ifd_id *b);
int sqz_ifdid_same_handle(const struct sqz_ifd_id *a,
                          const struct sqz_ifd_id *b);

#endif
