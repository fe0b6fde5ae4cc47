/* Deterministic data generators for `squeezefs bench --gen`: the seed
 * article's long/boolean/symbol/float lists and NYSE-TAQ-like columns.
 * All values are little-endian, as kdb+ writes them on x86. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ---- random numbers: splitmix64 seeding a xoshiro256** ---- */
typedef struct rng { uint64_t s[4]; } rng;

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed, const char *salt)
{
    uint64_t x = seed;
    for (const char *p = salt; *p; p++)
        x = (x ^ (unsigned char)*p) * 0x100000001b3ULL;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}

static uint64_t below(rng *r, uint64_t n) { return n ? next(r) % n : 0; }
static double unit(rng *r) { return (double)(next(r) >> 11) * 0x1.0p-53; }

/* ---- little-endian stores ---- */
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void putf64(unsigned char *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    put64(p, v);
}

/* ---- argument parsing: "name:a:b" ---- */
static int parse_args(const char *args, uint64_t *a, uint64_t *b)
{
    if (!args || !*args)
        return 0;
    char *end;
    *a = strtoull(args, &end, 10);
    if (end == args || (*end && *end != ':'))
        return -EINVAL;
    if (*end == ':') {
        const char *q = end + 1;
        *b = strtoull(q, &end, 10);
        if (end == q || *end)
            return -EINVAL;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef enum long_order { ORDER_RANDOM, ORDER_SORTED, ORDER_CONTIGUOUS } long_order;

/* n?max, optionally sorted (asc) or grouped by first appearance (raze group). */
static int gen_longs(rng *r, uint64_t n, uint64_t max, long_order order, bench_buf *out)
{
    uint64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    for (uint64_t i = 0; i < n; i++)
        v[i] = below(r, max);
    if (order == ORDER_SORTED) {
        qsort(v, (size_t)n, sizeof *v, cmp_u64);
    } else if (order == ORDER_CONTIGUOUS) {
        /* counts per value and first-appearance rank, then write the groups */
        uint64_t *cnt = calloc((size_t)max, sizeof *cnt);
        uint64_t *firsts = malloc((size_t)(max < n ? max : n ? n : 1) * sizeof *firsts);
        if (!cnt || !firsts) {
            free(cnt); free(firsts); free(v);
            return -ENOMEM;
        }
        size_t nf = 0;
        for (uint64_t i = 0; i < n; i++)
            if (cnt[v[i]]++ == 0)
                firsts[nf++] = v[i];
        uint64_t k = 0;
        for (size_t f = 0; f < nf; f++)
            for (uint64_t c = cnt[firsts[f]]; c > 0; c--)
                v[k++] = firsts[f];
        free(cnt);
        free(firsts);
    }
    out->len = (size_t)n * 8;
    out->data = malloc(out->len ? out->len : 1);
    if (!out->data) {
        free(v);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < n; i++)
        put64(out->data + i * 8, v[i]);
    free(v);
    return 0;
}

static int gen_booleans(rng *r, uint64_t n, bench_buf *out)
{
    out->len = (size_t)n;
    out->data = malloc(n ? n : 1);
    if (!out->data)
        return -ENOMEM;
    for (uint64_t i = 0; i < n; i += 64) {
        uint64_t bits = next(r);
        for (uint64_t j = 0; j < 64 && i + j < n; j++)
            out->data[i + j] = (unsigned char)((bits >> j) & 1);
    }
    return 0;
}

/* n?`K: random K-char symbols (letters a..p, as kdb+), stored enumerated:
 * int32 index into the sym list in order of first appearance. */
static int gen_symbols(rng *r, uint64_t n, unsigned k, bench_buf *out)
{
    size_t space = (size_t)1 << (4 * k);
    int32_t *index = malloc(space * sizeof *index);
    out->len = (size_t)n * 4;
    out->data = malloc(out->len ? out->len : 1);
    if (!index || !out->data) {
        free(index);
        free(out->data);
        out->data = NULL;
        return -ENOMEM;
    }
    memset(index, 0xff, space * sizeof *index);
    int32_t nsyms = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t s = (size_t)below(r, space); /* K letters of 4 bits each */
        if (index[s] < 0)
            index[s] = nsyms++;
        put32(out->data + i * 4, (uint32_t)index[s]);
    }
    free(index);
    return 0;
}

static int gen_floats(rng *r, uint64_t n, bench_buf *out)
{
    out->len = (size_t)n * 8;
    out->data = malloc(out->len ? out->len : 1);
    if (!out->data)
        return -ENOMEM;
    for (uint64_t i = 0; i < n; i++)
        putf64(out->data + i * 8, unit(r) * 100.0); /* n?100f */
    return 0;
}

/* ---- TAQ-like tables ---- */
typedef struct taq_col {
    const char *name;
    unsigned width;
} taq_col;

static const taq_col trade_cols[] = {
    {"time", 8}, {"sym", 4}, {"price", 8}, {"size", 4},
    {"ex", 1}, {"cond", 4}, {"seq", 8}, {"stop", 1},
};
static const taq_col quote_cols[] = {
    {"time", 8}, {"sym", 4}, {"bid", 8}, {"ask", 8}, {"bsize", 4},
    {"asize", 4}, {"ex", 1}, {"cond", 1}, {"seq", 8},
};
#define NTRADE (sizeof trade_cols / sizeof trade_cols[0])
#define NQUOTE (sizeof quote_cols / sizeof quote_cols[0])
#define TAQ_SYMS 64

/* exchange codes, weighted as a busy day: Q and N most common */
static unsigned char pick_exchange(rng *r)
{
    static const char ex[] = "QQQQNNNPPZZKKJYBXAM";
    return (unsigned char)ex[below(r, sizeof ex - 1)];
}

static double round_cents(double p) { return floor(p * 100.0 + 0.5) / 100.0; }

/* Generate a table of nrows rows sorted by sym (kdb+'s parted attribute),
 * time ascending within each sym; write the selected column (or all,
 * concatenated, when col < 0). */
static int gen_taq(rng *r, bool quote, int col, uint64_t nrows, bench_buf *out)
{
    const taq_col *cols = quote ? quote_cols : trade_cols;
    size_t ncols = quote ? NQUOTE : NTRADE;
    size_t off[16], width = 0;
    for (size_t c = 0; c < ncols; c++) {
        off[c] = (size_t)(width * nrows);
        if (col < 0 || (size_t)col == c)
            width += cols[c].width;
        else
            off[c] = SIZE_MAX;
    }
    if (col >= 0)
        off[col] = 0;
    out->len = (size_t)(width * nrows);
    out->data = malloc(out->len ? out->len : 1);
    if (!out->data)
        return -ENOMEM;
    /* rows per sym: zipf-like weights 1/(i+1) */
    double wsum = 0;
    for (int s = 0; s < TAQ_SYMS; s++)
        wsum += 1.0 / (s + 1);
    const uint64_t day = 8767ULL * 86400ULL * 1000000000ULL; /* 2024.01.02 */
    const uint64_t open = day + 34200ULL * 1000000000ULL;    /* 09:30 */
    const double session_ns = 23400e9;                       /* 6.5 hours */
    uint64_t row = 0, seq = 1000;
    for (int s = 0; s < TAQ_SYMS && row < nrows; s++) {
        uint64_t rows = (uint64_t)((double)nrows * (1.0 / (s + 1)) / wsum);
        if (s == TAQ_SYMS - 1 || rows > nrows - row)
            rows = nrows - row;
        if (rows == 0)
            continue;
        double price = round_cents(10.0 + unit(r) * 490.0);
        double spread = 0.01 * (double)(1 + below(r, 4));
        double mean_gap = session_ns / (double)rows;
        double t = (double)open + unit(r) * mean_gap;
        for (uint64_t i = 0; i < rows; i++, row++) {
            t += -log(1.0 - unit(r)) * mean_gap;     /* Poisson arrivals */
            uint64_t ts = (uint64_t)t;
            uint64_t step = below(r, 16);             /* small random walk */
            if (step == 0)
                price += 0.01;
            else if (step == 1 && price > 0.02)
                price -= 0.01;
            else if (step == 2)
                price += 0.01 * (double)(1 + below(r, 5)) * (below(r, 2) ? 1 : -1);
            if (price < 0.01)
                price = 0.01;
            price = round_cents(price);
            seq += below(r, 3); /* increasing with repetitions */
            for (size_t c = 0; c < ncols; c++) {
                if (off[c] == SIZE_MAX)
                    continue;
                unsigned char *p = out->data + off[c] + (size_t)row * cols[c].width;
                const char *n = cols[c].name;
                if (!strcmp(n, "time")) {
                    put64(p, ts);
                } else if (!strcmp(n, "sym")) {
                    put32(p, (uint32_t)s);
                } else if (!strcmp(n, "price")) {
                    putf64(p, price);
                } else if (!strcmp(n, "bid")) {
                    putf64(p, round_cents(price - spread / 2));
                } else if (!strcmp(n, "ask")) {
                    putf64(p, round_cents(price + spread / 2));
                } else if (!strcmp(n, "size") || !strcmp(n, "bsize") || !strcmp(n, "asize")) {
                    uint32_t sz = below(r, 5) ? 100 * (uint32_t)(1 + below(r, 10))
                                              : (uint32_t)(1 + below(r, 99));
                    put32(p, sz);
                } else if (!strcmp(n, "ex")) {
                    *p = pick_exchange(r);
                } else if (!strcmp(n, "cond")) {
                    if (quote) {
                        *p = below(r, 20) ? 'R' : 'O';
                    } else {
                        static const char conds[][5] = {"@   ", "@ I ", "@F  ", "@ T ", "@4 I"};
                        uint64_t k = below(r, 8);
                        memcpy(p, conds[k < 4 ? 0 : k - 3], 4);
                    }
                } else if (!strcmp(n, "seq")) {
                    put64(p, seq);
                } else if (!strcmp(n, "stop")) {
                    *p = below(r, 500) == 0;
                }
            }
        }
    }
    return 0;
}

static int taq_column(bool quote, const char *name)
{
    const taq_col *cols = quote ? quote_cols : trade_cols;
    size_t n = quote ? NQUOTE : NTRADE;
    for (size_t c = 0; c < n; c++)
        if (!strcmp(cols[c].name, name))
            return (int)c;
    return -1;
}

static uint64_t taq_row_width(bool quote, int col)
{
    const taq_col *cols = quote ? quote_cols : trade_cols;
    size_t n = quote ? NQUOTE : NTRADE;
    if (col >= 0)
        return cols[col].width;
    uint64_t w = 0;
    for (size_t c = 0; c < n; c++)
        w += cols[c].width;
    return w;
}

static void list_cols(FILE *out, bool quote)
{
    const taq_col *cols = quote ? quote_cols : trade_cols;
    size_t n = quote ? NQUOTE : NTRADE;
    for (size_t c = 0; c < n; c++)
        fprintf(out, "%s%s", c ? "," : "", cols[c].name);
}

void bench_gen_list(FILE *out)
{
    fprintf(out,
        "longs[:N[:MAX]]            N random longs in 0..MAX-1 (N?MAX; default MAX 1000)\n"
        "sorted-longs[:N[:MAX]]     the same, sorted ascending (asc N?MAX)\n"
        "contiguous-longs[:N[:MAX]] the same, equal values grouped (raze group)\n"
        "booleans[:N]               N random booleans, one byte each\n"
        "symbols[:K]                random K-char symbols (K 1..5, default 3), enumerated int32\n"
        "floats[:N]                 N random floats in 0..100 (N?100f)\n"
        "taq-trade                  a TAQ-like trade table, columns concatenated\n"
        "taq-trade.COLUMN           one trade column: ");
    list_cols(out, false);
    fprintf(out,
        "\ntaq-quote                  a TAQ-like quote table, columns concatenated\n"
        "taq-quote.COLUMN           one quote column: ");
    list_cols(out, true);
    fprintf(out, "\n(N defaults to what fits --size; tables are sorted by sym, time"
                 " ascending within a sym)\n");
}

int bench_gen(const char *spec, uint64_t size, uint64_t seed, bench_buf *out,
              char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", spec);
    char name[64];
    const char *colon = strchr(spec, ':');
    size_t nl = colon ? (size_t)(colon - spec) : strlen(spec);
    if (nl >= sizeof name)
        goto unknown;
    memcpy(name, spec, nl);
    name[nl] = '\0';
    const char *args = colon ? colon + 1 : NULL;
    rng r;
    rng_seed(&r, seed, name);
    uint64_t a = 0, b = 0;
    if (parse_args(args, &a, &b) < 0) {
        snprintf(err, errlen, "generator '%s': bad arguments '%s'", name, args);
        return -EINVAL;
    }
    if (!strcmp(name, "longs") || !strcmp(name, "sorted-longs") ||
        !strcmp(name, "contiguous-longs")) {
        uint64_t n = a ? a : size / 8, max = b ? b : 1000;
        long_order o = name[0] == 's' ? ORDER_SORTED
                     : name[0] == 'c' ? ORDER_CONTIGUOUS : ORDER_RANDOM;
        if (max > (1u << 26)) {
            snprintf(err, errlen, "generator '%s': MAX up to %u", name, 1u << 26);
            return -EINVAL;
        }
        return gen_longs(&r, n, max, o, out);
    }
    if (!strcmp(name, "booleans"))
        return gen_booleans(&r, a ? a : size, out);
    if (!strcmp(name, "symbols")) {
        uint64_t k = a ? a : 3;
        if (k < 1 || k > 5 || b) {
            snprintf(err, errlen, "generator 'symbols:K': K is 1..5");
            return -EINVAL;
        }
        return gen_symbols(&r, size / 4, (unsigned)k, out);
    }
    if (!strcmp(name, "floats"))
        return gen_floats(&r, a ? a : size / 8, out);
    if (!strncmp(name, "taq-trade", 9) || !strncmp(name, "taq-quote", 9)) {
        bool quote = name[4] == 'q';
        int col = -1;
        if (name[9] == '.') {
            col = taq_column(quote, name + 10);
            if (col < 0) {
                snprintf(err, errlen, "generator '%s': no such column (see --gen list)", name);
                return -EINVAL;
            }
        } else if (name[9]) {
            goto unknown;
        }
        if (args) {
            snprintf(err, errlen, "generator '%s' takes no arguments", name);
            return -EINVAL;
        }
        return gen_taq(&r, quote, col, size / taq_row_width(quote, col), out);
    }
unknown:
    snprintf(err, errlen, "unknown generator '%s' (squeezefs bench --gen list)", spec);
    return -EINVAL;
}
