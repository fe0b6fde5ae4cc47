/* Tiny test helpers shared by the C unit tests. */
#ifndef SQZ_TESTUTIL_H
#define SQZ_TESTUTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern int sqz_test_failures;

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    sqz_test_failures++; } } while (0)
#define CHECK_EQ_INT(a, b) do { long long _a = (long long)(a), _b = (long long)(b); \
    if (_a != _b) { fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
        __FILE__, __LINE__, #a, _a, #b, _b); sqz_test_failures++; } } while (0)
#define REQUIRE(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
    exit(1); } } while (0)
/* Exit status for main(): prints a summary line. */
int sqz_test_done(const char *name);

/* Deterministic PRNG (splitmix64). */
uint64_t sqz_test_rand(uint64_t *state);
/* Fill buf with data of a kind: 0 random, 1 sorted int64, 2 text,
 * 3 zeros, 4 runs (compressible). */
void sqz_test_fill(void *buf, size_t n, int kind, uint64_t seed);
/* A fresh temporary directory (mkdtemp under $TMPDIR or /tmp); caller frees. */
char *sqz_test_tmpdir(void);
#endif
