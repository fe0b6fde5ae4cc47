/* Shared cache of decompressed blocks, keyed by (file id, block index).
 *
 * Entries are reference-counted blocks (sqz_cblock): a lookup returns the
 * block with a reference taken, so the caller can copy from it without any
 * lock while another thread evicts or replaces it; memory is freed when the
 * last reference goes. A block's data is immutable once it is in the cache.
 *
 * The cache is bounded by the sum of the data sizes of the blocks it holds
 * (capacity in bytes); least recently used blocks are evicted first. A
 * capacity of 0 caches nothing (every lookup misses). Blocks evicted while
 * referenced stay alive (outside the bound) until released.
 *
 * Locking: sqz_cache.mu protects the hash table, the LRU list, and each
 * block's links and in-cache flag; it is held only for table operations
 * (a leaf: docs/LOCKING.md). Reference counts are atomics.
 */
#ifndef SQUEEZEFS_ENGINE_CACHE_H
#define SQUEEZEFS_ENGINE_CACHE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sqz_cblock {
    uint64_t fid, idx;             /* key (set by the owner before insert) */
    size_t size;                   /* bytes of data[] */
    atomic_uint refs;
    /* private, protected by the cache mutex: */
    int in_cache;
    struct sqz_cblock *hnext;      /* hash chain */
    struct sqz_cblock *lprev, *lnext; /* LRU list, head = most recent */
    _Alignas(16) unsigned char data[];
} sqz_cblock;

/* A new block of size data bytes (uninitialised; zeroed if zero != 0)
 * with one reference held by the caller. NULL on out of memory. */
sqz_cblock *sqz_cblock_new(size_t size, int zero);
/* Take / drop a reference; the block is freed when the last one goes. */
void sqz_cblock_ref(sqz_cblock *b);
void sqz_cblock_put(sqz_cblock *b);

typedef struct sqz_cache sqz_cache;

int sqz_cache_new(size_t capacity, sqz_cache **out);
/* Frees the cache's references (blocks held elsewhere stay valid). */
void sqz_cache_free(sqz_cache *c);

/* Look up (fid, idx); on a hit returns the block with a new reference
 * (release with sqz_cblock_put) and marks it most recently used. */
sqz_cblock *sqz_cache_get(sqz_cache *c, uint64_t fid, uint64_t idx);
/* 1 if present (does not touch the LRU order). */
int sqz_cache_contains(sqz_cache *c, uint64_t fid, uint64_t idx);
/* Insert b under its (fid, idx), replacing any block with that key. The
 * cache takes its own reference; the caller keeps its one. Evicts least
 * recently used blocks to stay within the capacity; a block larger than
 * the capacity is not kept. b must not already be in a cache. */
void sqz_cache_insert(sqz_cache *c, sqz_cblock *b);
/* Remove (fid, idx) if present. */
void sqz_cache_drop(sqz_cache *c, uint64_t fid, uint64_t idx);
/* Remove every block of fid whose index is >= from_idx. */
void sqz_cache_drop_file(sqz_cache *c, uint64_t fid, uint64_t from_idx);
/* Bytes currently held (sum of data sizes); lock-free read. */
size_t sqz_cache_bytes(sqz_cache *c);
size_t sqz_cache_count(sqz_cache *c);
size_t sqz_cache_capacity(const sqz_cache *c);

#endif
