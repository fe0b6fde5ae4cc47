/* Checksums of the container format: XXH3-64 truncated to its low 32 bits. */
#include <xxhash.h>

#include "format/format_int.h"

uint32_t sqz_checksum(const void *p, size_t n)
{
    return (uint32_t)XXH3_64bits(p, n);
}

uint32_t sqz_checksum2(const void *hdr, size_t hn, const void *payload,
                       size_t plen)
{
    XXH64_hash_t seed = XXH3_64bits(hdr, hn);
    return (uint32_t)XXH3_64bits_withSeed(payload, plen, seed);
}
