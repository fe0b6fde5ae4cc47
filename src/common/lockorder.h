/* Lock ranks and, in debug builds, a per-thread check of the lock order
 * documented in docs/LOCKING.md (the one place the order is written).
 *
 * Every lock of src/ has a rank (enum sqz_lock_rank). A thread may take a
 * lock only while every lock it holds has a lower rank: taking a lock of a
 * rank equal to or lower than one held aborts with both locks named. The
 * wrappers below take and release locks and keep a small thread-local
 * stack of the locks held; SQZ_ASSERT_HELD(lock) / SQZ_ASSERT_EXCL(lock)
 * check a "caller holds X (exclusive)" precondition. Try-locks never wait, so they are recorded but not
 * checked. Mutexes initialised with sqz_mutex_init are error-checking
 * mutexes in debug builds (relocking or unlocking a mutex the thread does
 * not own aborts instead of deadlocking or corrupting it).
 *
 * SQZ_LOCKORDER (0/1) switches the checks: meson -Dlockorder=true/false,
 * or by default on unless NDEBUG is defined. Off, the wrappers are the
 * bare pthread calls and the checks compile to nothing. */
#ifndef SQZ_COMMON_LOCKORDER_H
#define SQZ_COMMON_LOCKORDER_H

#include <pthread.h>

#ifndef SQZ_LOCKORDER
#ifdef NDEBUG
#define SQZ_LOCKORDER 0
#else
#define SQZ_LOCKORDER 1
#endif
#endif

/* Ranks, lowest first (docs/LOCKING.md has the table). */
enum sqz_lock_rank {
    /* the daemon (src/daemon .. src/mount) */
    SQZ_RANK_READAHEAD = 10,  /* sqz_fs.readahead.mu */
    SQZ_RANK_DEFER = 15,      /* sqz_defer.mu (src/fuse/defer.c) */
    SQZ_RANK_DIRHANDLE = 20,  /* sqz_dirhandle.lock */
    SQZ_RANK_IO = 30,         /* sqz_inode.io (rwlock) */
    SQZ_RANK_DURABLE = 40,    /* sqz_durable.mu (durable.c) */
    SQZ_RANK_REVAL = 45,      /* sqz_reval.bg.mu (revalidate.c) */
    SQZ_RANK_TIER = 47,       /* sqz_tier.bg.mu (tier.c) */
    SQZ_RANK_PACKGC = 48,     /* sqz_pack_gc.mu (pack_gc.c) */
    SQZ_RANK_ITABLE = 50,     /* sqz_fs.itable.lock */
    SQZ_RANK_META = 60,       /* sqz_inode.meta */
    SQZ_RANK_PUSH = 65,       /* sqz_inode.push.mu (push.c) */
    SQZ_RANK_PUSHQ = 66,      /* sqz_pushq.mu (pushq.c) */
    SQZ_RANK_PACKRD = 67,     /* sqz_pack_rd.mu (pack_rd.c) */
    SQZ_RANK_IDENT = 70,      /* sqz_ident.mu (ident.c) */
    /* src/engine */
    SQZ_RANK_FILE = 100,      /* sqz_file.lock (rwlock) */
    SQZ_RANK_FILE_RA = 110,   /* sqz_file.ra_mu */
    SQZ_RANK_FILE_LOAD = 120, /* sqz_file.ld_mu */
    SQZ_RANK_FILES = 130,     /* sqz_engine.files_lock */
    /* src/format */
    SQZ_RANK_CTR = 200,       /* sqz_ctr.lock (rwlock) */
    /* src/engine leaves */
    SQZ_RANK_CACHE = 300,     /* sqz_cache.mu */
    SQZ_RANK_POOL = 310,      /* sqz_pool.mu */
    /* src/cli */
    SQZ_RANK_CLI_POOL = 400,  /* workpool.mu (src/cli/workpool.h) */
    SQZ_RANK_IFD = 500,       /* the inode descriptor cache (src/fuse/ifd.c) */
};

/* Initialise a mutex (error-checking in debug builds). 0 or an errno. */
int sqz_mutex_init(pthread_mutex_t *m);

#if SQZ_LOCKORDER

void sqz_lo_check(const void *lock, int rank, const char *name,
                  const char *file, int line);
/* The same for a second lock of the same rank: allowed only above the
 * address of every held lock of that rank (two inodes' io: address
 * order). */
void sqz_lo_check_nested(const void *lock, int rank, const char *name,
                         const char *file, int line);
void sqz_lo_push(const void *lock, int rank, const char *name, int excl);
void sqz_lo_pop(const void *lock, const char *name, const char *file,
                int line);
void sqz_lo_assert_held(const void *lock, int excl, const char *name,
                        const char *file, int line);
void sqz_lo_fail_rc(int rc, const char *what, const char *name,
                    const char *file, int line);

/* Abort naming the call if a pthread lock call failed. */
static inline void sqz_lo_ok(int rc, const char *what, const char *name,
                             const char *file, int line)
{
    if (rc)
        sqz_lo_fail_rc(rc, what, name, file, line);
}

static inline void sqz_lo_mutex_lock(pthread_mutex_t *m, int rank,
                                     const char *name, const char *file,
                                     int line)
{
    sqz_lo_check(m, rank, name, file, line);
    sqz_lo_ok(pthread_mutex_lock(m), "pthread_mutex_lock", name, file, line);
    sqz_lo_push(m, rank, name, 1);
}

static inline void sqz_lo_mutex_unlock(pthread_mutex_t *m, const char *name,
                                       const char *file, int line)
{
    sqz_lo_pop(m, name, file, line);
    sqz_lo_ok(pthread_mutex_unlock(m), "pthread_mutex_unlock", name, file,
              line);
}

/* write: taken for writing (exclusive). */
static inline void sqz_lo_rwlock(pthread_rwlock_t *l, int rank, int write,
                                 const char *name, const char *file, int line)
{
    sqz_lo_check(l, rank, name, file, line);
    sqz_lo_ok(write ? pthread_rwlock_wrlock(l) : pthread_rwlock_rdlock(l),
              write ? "pthread_rwlock_wrlock" : "pthread_rwlock_rdlock", name,
              file, line);
    sqz_lo_push(l, rank, name, write);
}

static inline int sqz_lo_tryrdlock(pthread_rwlock_t *l, int rank,
                                   const char *name)
{
    int rc = pthread_rwlock_tryrdlock(l);
    if (rc == 0)
        sqz_lo_push(l, rank, name, 0);
    return rc;
}

static inline int sqz_lo_trywrlock(pthread_rwlock_t *l, int rank,
                                   const char *name)
{
    int rc = pthread_rwlock_trywrlock(l);
    if (rc == 0)
        sqz_lo_push(l, rank, name, 1);
    return rc;
}

static inline void sqz_lo_rwunlock(pthread_rwlock_t *l, const char *name,
                                   const char *file, int line)
{
    sqz_lo_pop(l, name, file, line);
    sqz_lo_ok(pthread_rwlock_unlock(l), "pthread_rwlock_unlock", name, file,
              line);
}

#define SQZ_MUTEX_LOCK(m, rank) \
    sqz_lo_mutex_lock((m), (rank), #m, __FILE__, __LINE__)
#define SQZ_MUTEX_UNLOCK(m) sqz_lo_mutex_unlock((m), #m, __FILE__, __LINE__)
#define SQZ_RDLOCK(l, rank) \
    sqz_lo_rwlock((l), (rank), 0, #l, __FILE__, __LINE__)
#define SQZ_WRLOCK(l, rank) \
    sqz_lo_rwlock((l), (rank), 1, #l, __FILE__, __LINE__)
#define SQZ_TRYRDLOCK(l, rank) sqz_lo_tryrdlock((l), (rank), #l)
#define SQZ_TRYWRLOCK(l, rank) sqz_lo_trywrlock((l), (rank), #l)
#define SQZ_RWUNLOCK(l) sqz_lo_rwunlock((l), #l, __FILE__, __LINE__)
/* A second rwlock of a rank already held, taken for writing in address
 * order (docs/LOCKING.md). */
#define SQZ_WRLOCK_NESTED(l, rank)                                           \
    do {                                                                     \
        sqz_lo_check_nested((l), (rank), #l, __FILE__, __LINE__);            \
        sqz_lo_ok(pthread_rwlock_wrlock(l), "pthread_rwlock_wrlock", #l,     \
                  __FILE__, __LINE__);                                       \
        sqz_lo_push((l), (rank), #l, 1);                                     \
    } while (0)
/* The caller holds l (shared or exclusive) / l exclusive (a mutex, or an
 * rwlock taken for writing). */
#define SQZ_ASSERT_HELD(l) sqz_lo_assert_held((l), 0, #l, __FILE__, __LINE__)
#define SQZ_ASSERT_EXCL(l) sqz_lo_assert_held((l), 1, #l, __FILE__, __LINE__)

#else /* !SQZ_LOCKORDER */

#define SQZ_MUTEX_LOCK(m, rank) ((void)pthread_mutex_lock(m))
#define SQZ_MUTEX_UNLOCK(m) ((void)pthread_mutex_unlock(m))
#define SQZ_RDLOCK(l, rank) ((void)pthread_rwlock_rdlock(l))
#define SQZ_WRLOCK(l, rank) ((void)pthread_rwlock_wrlock(l))
#define SQZ_WRLOCK_NESTED(l, rank) ((void)pthread_rwlock_wrlock(l))
#define SQZ_TRYRDLOCK(l, rank) pthread_rwlock_tryrdlock(l)
#define SQZ_TRYWRLOCK(l, rank) pthread_rwlock_trywrlock(l)
#define SQZ_RWUNLOCK(l) ((void)pthread_rwlock_unlock(l))
#define SQZ_ASSERT_HELD(l) ((void)0)
#define SQZ_ASSERT_EXCL(l) ((void)0)

#endif

#endif
