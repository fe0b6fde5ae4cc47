/* The debug-build lock-order checks (src/common/lockorder.h): locks taken
 * in rank order pass; a lock taken under one of an equal or higher rank,
 * a relock, a foreign unlock and a missing "caller holds" abort (each
 * tried in a child process). With SQZ_LOCKORDER 0 only the first part
 * runs. */
#include "common/lockorder.h"
#include "testutil.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t io_mu, meta_mu, cache_mu;
static pthread_rwlock_t file_lock;

/* Run fn in a child; 1 if it died of SIGABRT. */
static int aborts(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* the child's abort message is expected: keep stderr quiet */
        freopen("/dev/null", "w", stderr);
        fn();
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return 0;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void in_order(void)
{
    SQZ_MUTEX_LOCK(&io_mu, SQZ_RANK_IO);
    SQZ_ASSERT_EXCL(&io_mu);
    SQZ_WRLOCK(&file_lock, SQZ_RANK_FILE);
    SQZ_ASSERT_EXCL(&file_lock);
    SQZ_MUTEX_LOCK(&cache_mu, SQZ_RANK_CACHE);
    SQZ_MUTEX_UNLOCK(&cache_mu);
    SQZ_MUTEX_UNLOCK(&io_mu); /* not LIFO: fine */
    SQZ_RWUNLOCK(&file_lock);
    SQZ_RDLOCK(&file_lock, SQZ_RANK_FILE);
    SQZ_ASSERT_HELD(&file_lock);
    SQZ_RWUNLOCK(&file_lock);
}

static void reversed(void)
{
    SQZ_MUTEX_LOCK(&meta_mu, SQZ_RANK_META);
    SQZ_MUTEX_LOCK(&io_mu, SQZ_RANK_IO);
}

static void same_rank(void)
{
    pthread_mutex_t other;
    sqz_mutex_init(&other);
    SQZ_MUTEX_LOCK(&io_mu, SQZ_RANK_IO);
    SQZ_MUTEX_LOCK(&other, SQZ_RANK_IO);
}

static void relock(void)
{
    SQZ_MUTEX_LOCK(&io_mu, SQZ_RANK_IO);
    SQZ_MUTEX_LOCK(&io_mu, SQZ_RANK_IO);
}

static void foreign_unlock(void)
{
    SQZ_MUTEX_UNLOCK(&meta_mu);
}

static void not_held(void)
{
    SQZ_ASSERT_HELD(&file_lock);
}

static void shared_not_excl(void)
{
    SQZ_RDLOCK(&file_lock, SQZ_RANK_FILE);
    SQZ_ASSERT_EXCL(&file_lock);
}

static void try_out_of_order(void)
{
    /* try-locks never wait: allowed under a higher rank */
    SQZ_MUTEX_LOCK(&cache_mu, SQZ_RANK_CACHE);
    if (SQZ_TRYRDLOCK(&file_lock, SQZ_RANK_FILE) == 0)
        SQZ_RWUNLOCK(&file_lock);
    SQZ_MUTEX_UNLOCK(&cache_mu);
}

int main(void)
{
    REQUIRE(sqz_mutex_init(&io_mu) == 0);
    REQUIRE(sqz_mutex_init(&meta_mu) == 0);
    REQUIRE(sqz_mutex_init(&cache_mu) == 0);
    REQUIRE(pthread_rwlock_init(&file_lock, NULL) == 0);
    in_order();
    try_out_of_order();
#if SQZ_LOCKORDER
    CHECK(!aborts(in_order));
    CHECK(aborts(reversed));
    CHECK(aborts(same_rank));
    CHECK(aborts(relock));
    CHECK(aborts(foreign_unlock));
    CHECK(aborts(not_held));
    CHECK(aborts(shared_not_excl));
    CHECK(!aborts(try_out_of_order));
#else
    (void)aborts;
    (void)reversed;
    (void)same_rank;
    (void)relock;
    (void)foreign_unlock;
    (void)not_held;
    (void)shared_not_excl;
#endif
    return sqz_test_done("lockorder");
}
