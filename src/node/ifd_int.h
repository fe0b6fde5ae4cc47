/* How an inode's backing object is opened again (ifd_id.c), for the
 * descriptor cache (ifd.c). Internal header of node/ifd. */
#ifndef SQZ_NODE_IFD_INT_H
#define SQZ_NODE_IFD_INT_H

#include <time.h>

#include "node/ifd.h"

enum { ID_HANDLE = 1, ID_NAME = 2 };

struct sqz_ifd_id {
    unsigned char kind;
    struct sqz_inode *parent; /* ID_NAME */
    unsigned len;             /* handle bytes / name length (no NUL) */
    int htype;                /* ID_HANDLE: handle_type */
    struct timespec birth;    /* ID_NAME: the birth time (statx), 0 if the
                                 file system has none: an inode number
                                 given to a new file is told by it */
    char data[];              /* handle bytes, or the name and its NUL */
};

/* A file handle of fd's object (NULL on failure). */
struct sqz_ifd_id *sqz_ifdid_handle(int fd);
/* A name id: parent, name, the birth time. */
struct sqz_ifd_id *sqz_ifdid_name(struct sqz_inode *parent, const char *name,
                                  struct timespec birth);
struct timespec sqz_ifdid_birth(int fd);
int sqz_ifdid_birth_differs(const struct timespec *a, const struct timespec *b);
/* The same identity / the same handle. */
int sqz_ifdid_eq(const struct sqz_ifd_id *a, const struct sqz_ifd_id *b);
int sqz_ifdid_same_handle(const struct sqz_ifd_id *a,
                          const struct sqz_ifd_id *b);

#endif
