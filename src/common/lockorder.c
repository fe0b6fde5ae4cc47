/* The debug-build lock-order check of lockorder.h: a thread-local stack of
 * the locks the thread holds. Off (SQZ_LOCKORDER 0), only sqz_mutex_init
 * is left (plain default mutexes). */
#include "common/lockorder.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if SQZ_LOCKORDER

int sqz_mutex_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    int rc = pthread_mutexattr_init(&a);
    if (rc)
        return rc;
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return rc;
}

/* Deepest nesting in src/ is 4 (io, file.lock, ra_mu, cache); room for
 * more. */
#define SQZ_LO_MAX 16

struct held {
    const void *lock;
    int rank;
    int excl;  /* a mutex, or an rwlock taken for writing */
    const char *name;
};

static _Thread_local struct held lo_held[SQZ_LO_MAX];
static _Thread_local int lo_n;

static void lo_dump(void)
{
    for (int i = 0; i < lo_n; i++)
        fprintf(stderr, "squeezefs:   held: %s (rank %d)\n", lo_held[i].name,
                lo_held[i].rank);
}

void sqz_lo_check(const void *lock, int rank, const char *name,
                  const char *file, int line)
{
    for (int i = 0; i < lo_n; i++) {
        if (lo_held[i].lock == lock || lo_held[i].rank >= rank) {
            fprintf(stderr,
                    "squeezefs: lock order violation at %s:%d: taking %s "
                    "(rank %d) while holding %s (rank %d); see "
                    "docs/LOCKING.md\n",
                    file, line, name, rank, lo_held[i].name, lo_held[i].rank);
            lo_dump();
            abort();
        }
    }
}

void sqz_lo_check_nested(const void *lock, int rank, const char *name,
                         const char *file, int line)
{
    for (int i = 0; i < lo_n; i++) {
        if (lo_held[i].lock == lock || lo_held[i].rank > rank ||
            (lo_held[i].rank == rank &&
             (uintptr_t)lo_held[i].lock >= (uintptr_t)lock)) {
            fprintf(stderr,
                    "squeezefs: lock order violation at %s:%d: taking %s "
                    "(rank %d, nested: same rank only in address order) while "
                    "holding %s (rank %d); see docs/LOCKING.md\n",
                    file, line, name, rank, lo_held[i].name, lo_held[i].rank);
            lo_dump();
            abort();
        }
    }
}

void sqz_lo_push(const void *lock, int rank, const char *name, int excl)
{
    if (lo_n == SQZ_LO_MAX) {
        fprintf(stderr, "squeezefs: more than %d locks held (taking %s)\n",
                SQZ_LO_MAX, name);
        lo_dump();
        abort();
    }
    lo_held[lo_n++] = (struct held){lock, rank, excl, name};
}

void sqz_lo_pop(const void *lock, const char *name, const char *file,
                int line)
{
    for (int i = lo_n - 1; i >= 0; i--) {
        if (lo_held[i].lock == lock) {
            memmove(&lo_held[i], &lo_held[i + 1],
                    (size_t)(lo_n - i - 1) * sizeof lo_held[0]);
            lo_n--;
            return;
        }
    }
    fprintf(stderr, "squeezefs: releasing %s at %s:%d, which this thread "
                    "does not hold\n", name, file, line);
    lo_dump();
    abort();
}

void sqz_lo_assert_held(const void *lock, int excl, const char *name,
                        const char *file, int line)
{
    for (int i = 0; i < lo_n; i++)
        if (lo_held[i].lock == lock && (lo_held[i].excl || !excl))
            return;
    fprintf(stderr, "squeezefs: %s:%d expects the caller to hold %s%s\n",
            file, line, name, excl ? " exclusive" : "");
    lo_dump();
    abort();
}

void sqz_lo_fail_rc(int rc, const char *what, const char *name,
                    const char *file, int line)
{
    fprintf(stderr, "squeezefs: %s(%s) at %s:%d failed: %s\n", what, name,
            file, line, strerror(rc));
    lo_dump();
    abort();
}

#else

int sqz_mutex_init(pthread_mutex_t *m)
{
    return pthread_mutex_init(m, NULL);
}

#endif
