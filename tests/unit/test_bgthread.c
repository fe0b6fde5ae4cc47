/* The background-thread helper (src/common/bgthread.h): a thread sleeps
 * its period between rounds; a stop wakes a long sleep at once and joins;
 * the owner's other waiters are woken by the stop; the thread can sleep
 * under the owner's mutex; a stop of a thread never started does nothing. */
#include "common/bgthread.h"
#include "common/lockorder.h"
#include "common/timedwait.h"
#include "testutil.h"

#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct owner {
    sqz_bgthread bg;
    pthread_mutex_t mu;   /* the owner's own lock (shared variant) */
    pthread_cond_t room;  /* another waiter's condition */
    uint64_t period_ms;
    int rounds;           /* under bg.mu */
};

static void *loop(void *arg)
{
    struct owner *o = arg;
    SQZ_MUTEX_LOCK(o->bg.mu, SQZ_RANK_TIER);
    while (sqz_bg_sleep(&o->bg, o->period_ms))
        o->rounds++;
    SQZ_MUTEX_UNLOCK(o->bg.mu);
    return NULL;
}

/* Rounds every period; counted under the thread's own mutex. */
static void test_rounds(void)
{
    struct owner o = {.period_ms = 10};
    REQUIRE(sqz_bg_init(&o.bg, NULL, SQZ_RANK_TIER) == 0);
    CHECK(o.bg.mu == &o.bg.own);
    REQUIRE(sqz_bg_start(&o.bg, loop, &o) == 0);
    CHECK(o.bg.running);
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL);
    sqz_bg_stop(&o.bg, NULL);
    CHECK(!o.bg.running);
    CHECK(o.rounds >= 3);
    CHECK(o.rounds <= 25);
    sqz_bg_destroy(&o.bg);
}

static int room_woken;

static void *room_waiter(void *arg)
{
    struct owner *o = arg;
    SQZ_MUTEX_LOCK(&o->mu, SQZ_RANK_TIER);
    /* not woken by the stop: out after 3 s, too late for the check */
    while (!atomic_load(&o->bg.stop))
        sqz_cond_wait_ms(&o->room, &o->mu, 3000);
    room_woken = 1;
    SQZ_MUTEX_UNLOCK(&o->mu);
    return NULL;
}

/* A stop wakes a 5 s sleep at once, under the owner's mutex, and
 * broadcasts the owner's other condition. */
static void test_stop_wakes(void)
{
    struct owner o = {.period_ms = 5000};
    REQUIRE(sqz_mutex_init(&o.mu) == 0);
    REQUIRE(sqz_cond_init_monotonic(&o.room) == 0);
    REQUIRE(sqz_bg_init(&o.bg, &o.mu, SQZ_RANK_TIER) == 0);
    CHECK(o.bg.mu == &o.mu);
    REQUIRE(sqz_bg_start(&o.bg, loop, &o) == 0);
    pthread_t w;
    REQUIRE(pthread_create(&w, NULL, room_waiter, &o) == 0);
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    double t0 = now_s();
    sqz_bg_stop(&o.bg, &o.room);
    pthread_join(w, NULL);
    double took = now_s() - t0;
    CHECK(took < 2.0);
    CHECK_EQ_INT(o.rounds, 0);
    CHECK_EQ_INT(room_woken, 1);
    sqz_bg_stop(&o.bg, &o.room); /* again: nothing */
    sqz_bg_destroy(&o.bg);
    pthread_cond_destroy(&o.room);
    pthread_mutex_destroy(&o.mu);
}

/* Never started: stop does nothing, destroy frees. */
static void test_not_started(void)
{
    sqz_bgthread bg;
    REQUIRE(sqz_bg_init(&bg, NULL, SQZ_RANK_TIER) == 0);
    CHECK(!bg.running);
    sqz_bg_stop(&bg, NULL);
    CHECK(!atomic_load(&bg.stop));
    sqz_bg_destroy(&bg);
}

int main(void)
{
    test_rounds();
    test_stop_wakes();
    test_not_started();
    return sqz_test_done("bgthread");
}
