#include "testutil.h"

#include <stdlib.h>
#include <string.h>

int sqz_test_failures;

int sqz_test_done(const char *name)
{
    if (sqz_test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, sqz_test_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

uint64_t sqz_test_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void sqz_test_fill(void *buf, size_t n, int kind, uint64_t seed)
{
    unsigned char *p = buf;
    uint64_t s = seed;
    static const char *words[] = {"trade", "quote", "price", "size ", "AAPL ",
                                  "MSFT ", "\n", "2026.11.23 ", "bid ", "ask "};
    switch (kind) {
    case 0:
        for (size_t i = 0; i < n; i++) {
            if ((i & 7) == 0) s = sqz_test_rand(&s) ^ seed;
            p[i] = (unsigned char)(s >> ((i & 7) * 8));
        }
        break;
    case 1: {
        int64_t v = (int64_t)(seed % 1000);
        for (size_t i = 0; i < n; i++) {
            if (i % 8 == 0) v += (int64_t)(sqz_test_rand(&s) % 16);
            p[i] = (unsigned char)((uint64_t)v >> ((i % 8) * 8));
        }
        break;
    }
    case 2: {
        size_t i = 0;
        while (i < n) {
            const char *w = words[sqz_test_rand(&s) % 10];
            for (size_t j = 0; w[j] && i < n; j++) p[i++] = (unsigned char)w[j];
        }
        break;
    }
    case 3:
        memset(p, 0, n);
        break;
    default: {
        size_t i = 0;
        while (i < n) {
            size_t run = 1 + sqz_test_rand(&s) % 200;
            unsigned char c = (unsigned char)sqz_test_rand(&s);
            for (size_t j = 0; j < run && i < n; j++) p[i++] = c;
        }
    }
    }
}

char *sqz_test_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/sqztest.XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}
