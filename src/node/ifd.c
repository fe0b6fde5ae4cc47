/* The daemon's O_PATH descriptors of inodes: a bounded LRU (ifd.h; the
 * design in docs/FORMAT.md "Descriptors of inodes").
 *
 * Confinement: a handle is only ever one the daemon took itself from a
 * descriptor of an object below BACKING (sqz_ifd_attach, sqz_ifd_replace),
 * and open_by_handle_at opens exactly that object (or fails with ESTALE),
 * never a name; without handles a name is opened below its parent's
 * descriptor with O_NOFOLLOW, one component, as a lookup does. */
#include "node/ifd.h"
#include "node/ifd_int.h"
#include "node/inode.h"
#include "common/lockorder.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define IFD_DEFAULT_TOTAL 2048
#define IFD_MIN 16
/* max_fds= counts every descriptor the daemon holds on its own: the
 * durable queue's 3/8 (durable.c), the probe stash's 1/32 up to 64
 * (inode_stash.c), the packs being written (two each, 1/64 up to 32:
 * pack_job.c), the reclaim notes without handles (as many: pack_gc.c),
 * the packs kept for readers (16, pack_rd.c) and the fixed
 * ones (the FUSE device, BACKING, the writer lock, stdio): IFD_FIXED;
 * two per request thread (sqz_ifd_set_workers): a lookup's descriptor
 * before it takes its place here, and one pinned while in use; the rest
 * is this cache's */
#define IFD_FIXED 32

static atomic_size_t g_total;

size_t sqz_ifd_budget(size_t asked)
{
    size_t t = asked ? asked : IFD_DEFAULT_TOTAL;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        t > rl.rlim_cur / 2)
        t = rl.rlim_cur / 2; /* the rest: the user's open files */
    if (t < IFD_MIN)
        t = IFD_MIN;
    atomic_store(&g_total, t);
    return t;
}

size_t sqz_ifd_packs_max(void)
{
    size_t t = atomic_load(&g_total), s = (t ? t : IFD_DEFAULT_TOTAL) / 64;
    return s < 2 ? 2 : s > 32 ? 32 : s;
}

size_t sqz_ifd_stash_max(void)
{
    size_t t = atomic_load(&g_total), s = (t ? t : IFD_DEFAULT_TOTAL) / 32;
    return s > 64 ? 64 : s;
}

static struct {
    pthread_mutex_t mu;
    int inited;
    int mount_fd;
    dev_t dev;
    int handles;
    size_t max, count;
    size_t base;       /* max before the request threads' share */
    struct sqz_inode *head, *tail;
    uint64_t reopens, evictions, stale;
    uint64_t replaced; /* sqz_ifd_replace calls (a handle swapped) */
} G = {.mount_fd = -1};

#define LOCK() SQZ_MUTEX_LOCK(&G.mu, SQZ_RANK_IFD)
#define UNLOCK() SQZ_MUTEX_UNLOCK(&G.mu)

static int open_handle(const struct sqz_ifd_id *id);

int sqz_ifd_init(int root_fd, dev_t root_dev, size_t max)
{
    if (!G.inited) {
        if (sqz_mutex_init(&G.mu) != 0)
            return -ENOMEM;
        G.inited = 1;
    }
    G.mount_fd = root_fd;
    G.dev = root_dev;
    size_t t = max ? max : sqz_ifd_budget(0);
    size_t used = t * 3 / 8 + sqz_ifd_stash_max() + 3 * sqz_ifd_packs_max() +
                  IFD_FIXED;
    G.base = G.max = t > used + IFD_MIN ? t - used : IFD_MIN;
    G.count = 0;
    G.head = G.tail = NULL;
    const char *no = getenv("SQZ_NO_HANDLES");
    G.handles = 0;
    if (!(no && strcmp(no, "1") == 0)) {
        /* it must open again too (FUSE file systems may give handles
         * they cannot resolve) */
        struct sqz_ifd_id *id = sqz_ifdid_handle(root_fd);
        int fd = id ? open_handle(id) : -1;
        G.handles = fd >= 0;
        if (fd >= 0)
            close(fd);
        free(id);
    }
    return 0;
}

int sqz_ifd_handles(void)
{
    return G.handles;
}

/* ---- the LRU (G.mu held) ---- */
static void lru_unlink(struct sqz_inode *in)
{
    struct sqz_ifd *s = &in->fdc;
    if (s->prev)
        s->prev->fdc.next = s->next;
    else if (G.head == in)
        G.head = s->next;
    if (s->next)
        s->next->fdc.prev = s->prev;
    else if (G.tail == in)
        G.tail = s->prev;
    s->prev = s->next = NULL;
}

static void lru_push(struct sqz_inode *in)
{
    struct sqz_ifd *s = &in->fdc;
    s->prev = NULL;
    s->next = G.head;
    if (G.head)
        G.head->fdc.prev = in;
    G.head = in;
    if (!G.tail)
        G.tail = in;
}

static int evictable(const struct sqz_inode *in)
{
    const struct sqz_ifd *s = &in->fdc;
    return s->fd >= 0 && s->pins == 0 && !s->fixed &&
           !(s->hold > 0 && s->id && s->id->kind == ID_NAME);
}

/* Take fds to close (at most n) from the LRU's tail while over the bound
 * (all: force). */
static size_t evict_locked(int *out, size_t n, int force)
{
    size_t k = 0;
    struct sqz_inode *in = G.tail;
    while (in && k < n && (force || G.count > G.max)) {
        struct sqz_inode *prev = in->fdc.prev;
        if (evictable(in)) {
            lru_unlink(in);
            out[k++] = in->fdc.fd;
            in->fdc.fd = -1;
            G.count--;
            G.evictions++;
        }
        in = prev;
    }
    return k;
}

static void close_all(int *v, size_t k)
{
    for (size_t i = 0; i < k; i++)
        close(v[i]);
}

static void trim(void)
{
    int v[64];
    size_t k;
    do {
        LOCK();
        k = evict_locked(v, 64, 0);
        UNLOCK();
        close_all(v, k);
    } while (k == 64);
}

size_t sqz_ifd_shrink(void)
{
    int v[256];
    size_t k, total = 0;
    do {
        LOCK();
        k = evict_locked(v, 256, 1);
        UNLOCK();
        close_all(v, k);
        total += k;
    } while (k == 256);
    return total;
}

int sqz_openat_fd(int dirfd, const char *name, int flags, mode_t mode)
{
    int fd = openat(dirfd, name, flags, mode);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && sqz_ifd_shrink())
        fd = openat(dirfd, name, flags, mode);
    return fd < 0 ? -errno : fd;
}

/* A cached fd enters the table, unpinned, or pinned (the caller's). */
static void install_locked(struct sqz_inode *in, int fd, int pinned)
{
    in->fdc.fd = fd;
    G.count++;
    if (pinned)
        in->fdc.pins++;
    else if (!in->fdc.fixed)
        lru_push(in);
}

struct sqz_ifd_id *sqz_ifd_id_of(int fd, const struct stat *st,
                                 struct sqz_inode *parent, const char *name)
{
    if (G.handles) {
        struct sqz_ifd_id *h = st->st_dev == G.dev ? sqz_ifdid_handle(fd) : NULL;
        if (!h || !S_ISREG(st->st_mode) || !parent || !name)
            return h;
        /* a regular file's hint: a file reopened disconnected is found
         * through it (sqz_ifd_hint_dir, inode_path.c) */
        struct sqz_ifd_id *hinted = sqz_ifdid_hinted(h, parent, name);
        free(h);
        return hinted;
    }
    return parent && name ? sqz_ifdid_name(parent, name, sqz_ifdid_birth(fd)) : NULL;
}

void sqz_ifd_id_free(struct sqz_ifd_id *id)
{
    free(id);
}

struct sqz_inode *sqz_ifd_id_parent(const struct sqz_ifd_id *id)
{
    return id ? id->parent : NULL;
}

void sqz_ifd_attach(struct sqz_inode *in, int fd, struct sqz_ifd_id *id,
                    int fixed)
{
    struct sqz_ifd *s = &in->fdc;
    s->fd = -1;
    s->pins = s->hold = 0;
    s->prev = s->next = NULL;
    s->id = id;
    s->fixed = fixed || id == NULL;
    LOCK();
    install_locked(in, fd, 0);
    UNLOCK();
}

void sqz_ifd_trim(void)
{
    trim();
}

void sqz_ifd_set_workers(unsigned n)
{
    LOCK();
    G.max = G.base > 2 * (size_t)n + IFD_MIN ? G.base - 2 * (size_t)n : IFD_MIN;
    UNLOCK();
    trim();
}

struct sqz_inode *sqz_ifd_detach(struct sqz_inode *in)
{
    struct sqz_ifd *s = &in->fdc;
    struct sqz_inode *parent = NULL;
    LOCK();
    int fd = s->fd;
    if (fd >= 0) {
        if (!s->fixed && s->pins == 0)
            lru_unlink(in);
        s->fd = -1;
        G.count--;
    }
    if (s->id)
        parent = s->id->parent;
    free(s->id);
    s->id = NULL;
    UNLOCK();
    if (fd >= 0)
        close(fd);
    return parent;
}

/* Open in's object again from its handle (no lock held). */
static int open_handle(const struct sqz_ifd_id *id)
{
    struct {
        struct file_handle h;
        unsigned char b[MAX_HANDLE_SZ];
    } fh;
    fh.h.handle_bytes = id->len;
    fh.h.handle_type = id->htype;
    memcpy(fh.h.f_handle, id->data, id->len);
    int flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
    int fd = open_by_handle_at(G.mount_fd, &fh.h, flags);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && sqz_ifd_shrink())
        fd = open_by_handle_at(G.mount_fd, &fh.h, flags);
    return fd < 0 ? -errno : fd;
}

struct sqz_ifd_id *sqz_ifd_handle_of(int fd)
{
    struct stat st;
    if (!G.handles || fstat(fd, &st) != 0 || st.st_dev != G.dev)
        return NULL;
    return sqz_ifdid_handle(fd);
}

int sqz_ifd_id_open(const struct sqz_ifd_id *id)
{
    return open_handle(id);
}

static int check_same(struct sqz_inode *in, int fd)
{
    struct stat st;
    if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if (st.st_dev != in->dev || st.st_ino != in->ino ||
        (st.st_mode & S_IFMT) != in->type)
        return -ESTALE;
    return 0;
}

/* Name mode, G.mu held: a new descriptor of in, through its parents'
 * (opened again the same way, put in the cache unpinned). */
static int open_name_locked(struct sqz_inode *in, int depth)
{
    struct sqz_ifd *s = &in->fdc;
    if (s->fd >= 0)
        return s->fd;
    if (!s->id || s->id->kind != ID_NAME || depth > 4096)
        return -ESTALE;
    struct sqz_inode *p = s->id->parent;
    int pfd = open_name_locked(p, depth + 1);
    if (pfd < 0)
        return pfd;
    if (p->fdc.fd < 0) /* a new fd of p: cached for the next child */
        install_locked(p, pfd, 0);
    /* p stays cached: nothing is evicted while G.mu is held */
    int fd = openat(pfd, s->id->data, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        int v[256];
        size_t k = evict_locked(v, 256, 1); /* p was just pinned? no: */
        close_all(v, k);
        if (p->fdc.fd < 0) /* p itself went: open it again */
            return -EAGAIN;
        fd = openat(p->fdc.fd, s->id->data, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0)
        return errno == ENOENT ? -ESTALE : -errno;
    G.reopens++;
    int rc = check_same(in, fd);
    struct timespec born = sqz_ifdid_birth(fd);
    if (rc == 0 && sqz_ifdid_birth_differs(&s->id->birth, &born))
        rc = -ESTALE; /* its number was given to the file at that name */
    if (rc) {
        close(fd);
        G.stale++;
        return rc;
    }
    return fd;
}

int sqz_ifd_get(struct sqz_inode *in)
{
    struct sqz_ifd *s = &in->fdc;
    LOCK();
    if (s->fd >= 0) {
        if (s->pins++ == 0 && !s->fixed)
            lru_unlink(in);
        int fd = s->fd;
        UNLOCK();
        return fd;
    }
    if (!s->id) {
        UNLOCK();
        return -ESTALE;
    }
    if (s->id->kind == ID_NAME) {
        int fd = -EAGAIN;
        for (int i = 0; i < 3 && fd == -EAGAIN; i++)
            fd = open_name_locked(in, 0);
        if (fd >= 0)
            install_locked(in, fd, 1);
        UNLOCK();
        if (fd >= 0)
            trim();
        return fd == -EAGAIN ? -EMFILE : fd;
    }
    for (int tries = 0;; tries++) {
        /* by handle, without the lock; the handle is checked to be still
         * the inode's after (sqz_ifd_replace may swap it meanwhile) */
        const struct sqz_ifd_id *was = s->id;
        uint64_t gen = G.replaced;
        struct sqz_ifd_id *id = malloc(sizeof(*id) + was->len);
        if (!id) {
            UNLOCK();
            return -ENOMEM;
        }
        memcpy(id, was, sizeof(*id) + was->len);
        UNLOCK();
        int fd = open_handle(id);
        free(id);
        if (fd >= 0) {
            int rc = check_same(in, fd);
            if (rc) {
                close(fd);
                fd = rc;
            }
        }
        LOCK();
        if (s->fd >= 0) { /* opened (or replaced) meanwhile: that one */
            if (s->pins++ == 0 && !s->fixed)
                lru_unlink(in);
            int mine = fd;
            fd = s->fd;
            UNLOCK();
            if (mine >= 0)
                close(mine);
            return fd;
        }
        if (G.replaced != gen && tries < 3) { /* maybe another object */
            if (fd >= 0)
                close(fd);
            continue;
        }
        if (fd < 0) {
            if (fd == -ESTALE)
                G.stale++;
            UNLOCK();
            return fd;
        }
        G.reopens++;
        install_locked(in, fd, 1);
        UNLOCK();
        trim();
        return fd;
    }
}

void sqz_ifd_put(struct sqz_inode *in)
{
    struct sqz_ifd *s = &in->fdc;
    int over;
    LOCK();
    if (s->pins > 0 && --s->pins == 0 && s->fd >= 0 && !s->fixed)
        lru_push(in);
    over = G.count > G.max;
    UNLOCK();
    if (over)
        trim();
}

void sqz_ifd_hold(struct sqz_inode *in, int delta)
{
    struct sqz_ifd *s = &in->fdc;
    /* without handles, a held inode keeps a descriptor: open it now */
    int fd = delta > 0 && !G.handles ? sqz_ifd_get(in) : -1;
    LOCK();
    if (delta > 0)
        s->hold++;
    else if (s->hold > 0)
        s->hold--;
    UNLOCK();
    if (fd >= 0)
        sqz_ifd_put(in);
}

int sqz_ifd_found(struct sqz_inode *in, int fd, struct sqz_ifd_id *id,
                  struct sqz_inode **old_parent)
{
    struct sqz_ifd *s = &in->fdc;
    *old_parent = NULL;
    LOCK();
    if (s->fd < 0 && s->id && s->id->kind == ID_HANDLE &&
        !(id && sqz_ifdid_same_handle(id, s->id))) {
        /* no descriptor held it: its number may have been given to a new
         * file since; the handle (with its generation) tells */
        G.stale++;
        UNLOCK();
        return 0;
    }
    if (s->fd < 0 && id && id->kind == ID_NAME && s->id &&
        s->id->kind == ID_NAME && sqz_ifdid_birth_differs(&id->birth, &s->id->birth)) {
        G.stale++; /* the same, told by the birth time */
        UNLOCK();
        return 0;
    }
    if (id && id->kind == ID_NAME && !s->id && !in->is_root) {
        /* first known by a walk of BACKING (the tier pass): now it has a
         * name, and its descriptor may be evicted */
        s->id = id;
        id = NULL;
        s->fixed = 0;
        if (s->fd >= 0 && s->pins == 0)
            lru_push(in);
    } else if (id && s->id && id->kind == s->id->kind &&
               (id->kind == ID_NAME ||
                (sqz_ifdid_hint(id) && sqz_ifdid_same_handle(id, s->id))) &&
               !sqz_ifdid_eq(id, s->id)) {
        /* the name the kernel used last (a handle's hint): it follows
         * renames made behind the mount and a hard link's other names */
        struct sqz_ifd_id *old = s->id;
        s->id = id;
        id = old;
    }
    *old_parent = sqz_ifd_id_parent(id);
    free(id);
    int spare = fd;
    if (s->fd < 0) {
        install_locked(in, fd, 0);
        spare = -1;
    }
    UNLOCK();
    if (spare >= 0)
        close(spare);
    return 1;
}

struct sqz_inode *sqz_ifd_renamed(struct sqz_inode *in, struct sqz_inode *np,
                                  const char *newname, int *moved)
{
    struct sqz_ifd *s = &in->fdc;
    *moved = 0;
    struct sqz_ifd_id *nid = NULL;
    LOCK();
    if (s->id && s->id->kind == ID_NAME)
        nid = sqz_ifdid_name(np, newname, s->id->birth);
    else if (s->id && s->id->kind == ID_HANDLE && in->type == S_IFREG)
        nid = sqz_ifdid_hinted(s->id, np, newname); /* the new hint */
    if (!nid) {
        UNLOCK();
        return NULL; /* keeps the old name: it may fail with ESTALE */
    }
    struct sqz_inode *old = s->id->parent;
    free(s->id);
    s->id = nid;
    UNLOCK();
    *moved = 1;
    return old;
}

int sqz_ifd_replace(struct sqz_inode *in, int npfd)
{
    struct sqz_ifd *s = &in->fdc;
    struct sqz_ifd_id *nid = NULL;
    if (G.handles && s->id && s->id->kind == ID_HANDLE) {
        nid = sqz_ifdid_handle(npfd);
        if (!nid)
            return errno ? -errno : -ENOMEM;
    }
    LOCK();
    const char *hint = nid ? sqz_ifdid_hint(s->id) : NULL;
    if (hint) { /* the same name: the hint (and its reference) carries over */
        struct sqz_ifd_id *h = sqz_ifdid_hinted(nid, s->id->parent, hint);
        free(nid);
        nid = h;
        if (!nid) {
            UNLOCK();
            return -ENOMEM;
        }
    }
    if (s->fd >= 0 && dup3(npfd, s->fd, O_CLOEXEC) < 0) {
        int e = -errno;
        UNLOCK();
        free(nid);
        return e;
    }
    if (nid) {
        free(s->id);
        s->id = nid;
    }
    G.replaced++;
    UNLOCK();
    return 0;
}

int sqz_ifd_hint_dir(struct sqz_inode *in, char *name, size_t n)
{
    struct sqz_ifd_id *pid = NULL;
    int dfd = -ENOENT;
    LOCK(); /* the hint's directory lives while the hint names it */
    const struct sqz_ifd_id *id = in->fdc.id;
    const char *h = sqz_ifdid_hint(id);
    size_t hl = h ? id->hlen : 0;
    if (!h && id && id->kind == ID_NAME) { /* its parent and name */
        h = id->data;
        hl = id->len;
    }
    struct sqz_inode *p = h && hl < n ? id->parent : NULL;
    if (p) {
        memcpy(name, h, hl + 1);
        if (p->fdc.fd >= 0)
            dfd = fcntl(p->fdc.fd, F_DUPFD_CLOEXEC, 0);
        else if (p->fdc.id && p->fdc.id->kind == ID_HANDLE &&
                 (pid = malloc(sizeof(*pid) + p->fdc.id->len)))
            memcpy(pid, p->fdc.id, sizeof(*pid) + p->fdc.id->len);
    }
    UNLOCK();
    if (pid) { /* a directory opened by handle is connected */
        dfd = open_handle(pid);
        free(pid);
    }
    return dfd < 0 ? -ENOENT : dfd;
}

int sqz_ifd_reconnect(struct sqz_inode *in, int fd, int nfd)
{
    struct sqz_ifd *s = &in->fdc;
    struct sqz_ifd_id *h = check_same(in, nfd) == 0 ? sqz_ifdid_handle(nfd) : NULL;
    int rc = -ESTALE;
    LOCK();
    if (h && s->fd == fd && s->id && sqz_ifdid_same_handle(h, s->id))
        rc = dup3(nfd, fd, O_CLOEXEC) < 0 ? -errno : 0;
    UNLOCK();
    free(h);
    return rc;
}

void sqz_ifd_stats(struct sqz_ifd_stats *st)
{
    LOCK();
    st->open_fds = G.count;
    st->max_fds = G.max;
    st->reopens = G.reopens;
    st->evictions = G.evictions;
    st->stale = G.stale;
    UNLOCK();
}
