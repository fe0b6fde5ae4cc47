/* Bounded LRU cache of refcounted decompressed blocks (see cache.h). */
#include "engine/cache.h"
#include "common/lockorder.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct sqz_cache {
    pthread_mutex_t mu;        /* protects all fields but bytes/capacity */
    size_t capacity;           /* immutable */
    atomic_size_t bytes;       /* written under mu, read lock-free */
    size_t count;
    size_t nbuckets;           /* power of two */
    sqz_cblock **buckets;
    sqz_cblock *lru_head, *lru_tail; /* head = most recently used */
};

sqz_cblock *sqz_cblock_new(size_t size, int zero)
{
    sqz_cblock *b = zero ? calloc(1, sizeof *b + size)
                         : malloc(sizeof *b + size);
    if (!b)
        return NULL;
    if (!zero)
        memset(b, 0, sizeof *b);
    b->size = size;
    atomic_init(&b->refs, 1);
    return b;
}

void sqz_cblock_ref(sqz_cblock *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void sqz_cblock_put(sqz_cblock *b)
{
    if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
        free(b);
}

static size_t hash_key(uint64_t fid, uint64_t idx)
{
    uint64_t h = fid * 0x9e3779b97f4a7c15ULL ^ idx;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    return (size_t)h;
}

int sqz_cache_new(size_t capacity, sqz_cache **out)
{
    sqz_cache *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->nbuckets = 64;
    c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
    if (!c->buckets) {
        free(c);
        return -ENOMEM;
    }
    int rc = sqz_mutex_init(&c->mu);
    if (rc) {
        free(c->buckets);
        free(c);
        return -rc;
    }
    c->capacity = capacity;
    atomic_init(&c->bytes, 0);
    *out = c;
    return 0;
}

/* ---- internals, mu held ---- */

static sqz_cblock **find_slot(sqz_cache *c, uint64_t fid, uint64_t idx)
{
    sqz_cblock **pp = &c->buckets[hash_key(fid, idx) & (c->nbuckets - 1)];
    while (*pp && ((*pp)->fid != fid || (*pp)->idx != idx))
        pp = &(*pp)->hnext;
    return pp;
}

static void lru_unlink(sqz_cache *c, sqz_cblock *b)
{
    if (b->lprev)
        b->lprev->lnext = b->lnext;
    else
        c->lru_head = b->lnext;
    if (b->lnext)
        b->lnext->lprev = b->lprev;
    else
        c->lru_tail = b->lprev;
    b->lprev = b->lnext = NULL;
}

static void lru_push_front(sqz_cache *c, sqz_cblock *b)
{
    b->lprev = NULL;
    b->lnext = c->lru_head;
    if (c->lru_head)
        c->lru_head->lprev = b;
    c->lru_head = b;
    if (!c->lru_tail)
        c->lru_tail = b;
}

/* Unlink b (whose hash slot is *pp) and drop the cache's reference. */
static void remove_at(sqz_cache *c, sqz_cblock **pp)
{
    sqz_cblock *b = *pp;
    *pp = b->hnext;
    b->hnext = NULL;
    lru_unlink(c, b);
    b->in_cache = 0;
    c->count--;
    atomic_store_explicit(&c->bytes,
                          atomic_load_explicit(&c->bytes, memory_order_relaxed)
                              - b->size,
                          memory_order_relaxed);
    sqz_cblock_put(b);
}

static void grow_table(sqz_cache *c)
{
    size_t nb = c->nbuckets * 2;
    sqz_cblock **nbk = calloc(nb, sizeof *nbk);
    if (!nbk)
        return; /* keep the old table: longer chains, still correct */
    for (size_t i = 0; i < c->nbuckets; i++) {
        sqz_cblock *b = c->buckets[i];
        while (b) {
            sqz_cblock *next = b->hnext;
            size_t h = hash_key(b->fid, b->idx) & (nb - 1);
            b->hnext = nbk[h];
            nbk[h] = b;
            b = next;
        }
    }
    free(c->buckets);
    c->buckets = nbk;
    c->nbuckets = nb;
}

/* ---- public ---- */

void sqz_cache_free(sqz_cache *c)
{
    if (!c)
        return;
    sqz_cblock *b = c->lru_head;
    while (b) {
        sqz_cblock *next = b->lnext;
        b->in_cache = 0;
        b->hnext = b->lprev = b->lnext = NULL;
        sqz_cblock_put(b);
        b = next;
    }
    pthread_mutex_destroy(&c->mu);
    free(c->buckets);
    free(c);
}

sqz_cblock *sqz_cache_get(sqz_cache *c, uint64_t fid, uint64_t idx)
{
    SQZ_MUTEX_LOCK(&c->mu, SQZ_RANK_CACHE);
    sqz_cblock *b = *find_slot(c, fid, idx);
    if (b) {
        sqz_cblock_ref(b);
        if (c->lru_head != b) {
            lru_unlink(c, b);
            lru_push_front(c, b);
        }
    }
    SQZ_MUTEX_UNLOCK(&c->mu);
    return b;
}

int sqz_cache_contains(sqz_cache *c, uint64_t fid, uint64_t idx)
{
    SQZ_MUTEX_LOCK(&c->mu, SQZ_RANK_CACHE);
    int hit = *find_slot(c, fid, idx) != NULL;
    SQZ_MUTEX_UNLOCK(&c->mu);
    return hit;
}

void sqz_cache_insert(sqz_cache *c, sqz_cblock *b)
{
    SQZ_MUTEX_LOCK(&c->mu, SQZ_RANK_CACHE);
    sqz_cblock **pp = find_slot(c, b->fid, b->idx);
    if (*pp == b) { /* already there: just refresh */
        lru_unlink(c, b);
        lru_push_front(c, b);
        SQZ_MUTEX_UNLOCK(&c->mu);
        return;
    }
    if (*pp)
        remove_at(c, pp);
    if (b->size > c->capacity) {
        SQZ_MUTEX_UNLOCK(&c->mu);
        return;
    }
    /* Evict from the cold end until b fits. */
    while (c->lru_tail &&
           atomic_load_explicit(&c->bytes, memory_order_relaxed) + b->size >
               c->capacity) {
        sqz_cblock *victim = c->lru_tail;
        remove_at(c, find_slot(c, victim->fid, victim->idx));
    }
    if (c->count >= c->nbuckets)
        grow_table(c);
    pp = find_slot(c, b->fid, b->idx); /* table may have changed */
    sqz_cblock_ref(b);
    b->in_cache = 1;
    b->hnext = NULL;
    *pp = b;
    lru_push_front(c, b);
    c->count++;
    atomic_store_explicit(&c->bytes,
                          atomic_load_explicit(&c->bytes, memory_order_relaxed)
                              + b->size,
                          memory_order_relaxed);
    SQZ_MUTEX_UNLOCK(&c->mu);
}

void sqz_cache_drop(sqz_cache *c, uint64_t fid, uint64_t idx)
{
    SQZ_MUTEX_LOCK(&c->mu, SQZ_RANK_CACHE);
    sqz_cblock **pp = find_slot(c, fid, idx);
    if (*pp)
        remove_at(c, pp);
    SQZ_MUTEX_UNLOCK(&c->mu);
}

void sqz_cache_drop_file(sqz_cache *c, uint64_t fid, uint64_t from_idx)
{
    SQZ_MUTEX_LOCK(&c->mu, SQZ_RANK_CACHE);
    for (size_t i = 0; i < c->nbuckets; i++) {
        sqz_cblock **pp = &c->buckets[i];
        while (*pp) {
            if ((*pp)->fid == fid && (*pp)->idx >= from_idx)
                remove_at(c, pp);
            else
                pp = &(*pp)->hnext;
        }
    }
    SQZ_MUTEX_UNLOCK(&c->mu);
}

size_t sqz_cache_bytes(sqz_cache *c)
{
    return atomic_load_explicit(&c->bytes, memory_order_relaxed);
}

size_t sqz_cache_count(sqz_cache *c)
{
    SQZ_MUTEX_LOCK(&c->mu, SQZ_RANK_CACHE);
    size_t n = c->count;
    SQZ_MUTEX_UNLOCK(&c->mu);
    return n;
}

size_t sqz_cache_capacity(const sqz_cache *c)
{
    return c->capacity;
}
