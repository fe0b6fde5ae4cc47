/* Unit tests of the policy layer: SPEC parsing and formatting, block sizes,
 * globs, rule files, resolution precedence with xattrs, auto selection. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "squeezefs/policy.h"
#include "testutil.h"

/* ---- specs ---- */

static void check_spec(const char *text, sqz_alg alg, int level, int log2bs,
                       int auto_mode)
{
    sqz_spec s;
    char err[256] = "";
    int r = sqz_spec_parse(text, &s, err, sizeof err);
    if (r != 0) {
        fprintf(stderr, "spec '%s' rejected: %s\n", text, err);
        sqz_test_failures++;
        return;
    }
    if (s.alg != alg || s.level != level || s.log2bs != log2bs ||
        s.auto_mode != auto_mode) {
        fprintf(stderr, "spec '%s' -> alg %d level %d log2bs %d auto %d\n",
                text, (int)s.alg, s.level, s.log2bs, s.auto_mode);
        sqz_test_failures++;
    }
}

/* Rejected with -EINVAL and a message containing `want`. */
static void check_bad_spec(const char *text, const char *want)
{
    sqz_spec s = {.alg = SQZ_ALG_LZ4, .level = 0, .log2bs = 13, .auto_mode = 0};
    char err[256] = "";
    int r = sqz_spec_parse(text, &s, err, sizeof err);
    if (r != -EINVAL || !strstr(err, want)) {
        fprintf(stderr, "bad spec '%s': r=%d err='%s' (want '%s')\n",
                text ? text : "(null)", r, err, want);
        sqz_test_failures++;
    }
    /* out untouched on failure */
    CHECK(s.alg == SQZ_ALG_LZ4 && s.log2bs == 13);
}

static void test_specs(void)
{
    const int Z = SQZ_ALG_ZSTD;
    check_spec("zstd:3/128K", SQZ_ALG_ZSTD, 3, 17, 0);
    check_spec("lz4hc:9/64K", SQZ_ALG_LZ4HC, 9, 16, 0);
    check_spec("gzip", SQZ_ALG_GZIP, 6, 0, 0);
    check_spec("zlib:1", SQZ_ALG_GZIP, 1, 0, 0);
    check_spec("none", SQZ_ALG_NONE, 0, 0, 0);
    check_spec("none/4K", SQZ_ALG_NONE, 0, 12, 0);
    check_spec("snappy", SQZ_ALG_SNAPPY, 0, 0, 0);
    check_spec("lz4", SQZ_ALG_LZ4, 0, 0, 0);
    check_spec("lz4:0/1M", SQZ_ALG_LZ4, 0, 20, 0);
    check_spec("lz4hc", SQZ_ALG_LZ4HC, 9, 0, 0);
    check_spec("zstd/1M", SQZ_ALG_ZSTD, 3, 20, 0);
    check_spec("ZSTD:-7/4k", SQZ_ALG_ZSTD, -7, 12, 0);
    check_spec("zstd:22/65536", SQZ_ALG_ZSTD, 22, 16, 0);
    check_spec("zstd:+5/17", SQZ_ALG_ZSTD, 5, 17, 0);
    check_spec("gzip:0/4KiB", SQZ_ALG_GZIP, 0, 12, 0);
    check_spec("gzip:9/1MiB", SQZ_ALG_GZIP, 9, 20, 0);
    check_spec("  zstd:1  \n", SQZ_ALG_ZSTD, 1, 0, 0);
    check_spec("auto", Z, 3, 0, SQZ_AUTO_BALANCED);
    check_spec("auto:balanced", Z, 3, 0, SQZ_AUTO_BALANCED);
    check_spec("auto:ratio", Z, 3, 0, SQZ_AUTO_RATIO);
    check_spec("AUTO:Speed/64K", Z, 3, 16, SQZ_AUTO_SPEED);
    check_spec("auto/256K", Z, 3, 18, SQZ_AUTO_BALANCED);
    /* kdb+ triples */
    check_spec("17 2 6", SQZ_ALG_GZIP, 6, 17, 0);
    check_spec("\"17 2 6\"", SQZ_ALG_GZIP, 6, 17, 0);
    check_spec("' 16 5 9 '", SQZ_ALG_ZSTD, 9, 16, 0);
    check_spec("12 5 -7", SQZ_ALG_ZSTD, -7, 12, 0);
    check_spec("20 0 0", SQZ_ALG_NONE, 0, 20, 0);
    check_spec("14\t3  0", SQZ_ALG_SNAPPY, 0, 14, 0);
    check_spec("18 4 12", SQZ_ALG_LZ4HC, 12, 18, 0);
    check_spec("17 1 0", SQZ_ALG_QIPC, 0, 17, 0);
    check_spec("\"17 1 0\"", SQZ_ALG_QIPC, 0, 17, 0);
    check_spec("qipc/128K", SQZ_ALG_QIPC, 0, 17, 0);
    check_spec("QIPC", SQZ_ALG_QIPC, 0, 0, 0);
    check_spec("\"zstd:3\"", SQZ_ALG_ZSTD, 3, 0, 0);

    check_bad_spec("zsdt", "unknown algorithm 'zsdt'");
    check_bad_spec("zsdt:3/64K", "valid: none, gzip");
    check_bad_spec("zstd:23", "zstd level 23 is out of range -7..22");
    check_bad_spec("zstd:-8", "-7..22");
    check_bad_spec("gzip:10", "gzip level 10 is out of range 0..9");
    check_bad_spec("gzip:-1", "0..9");
    check_bad_spec("lz4hc:0", "lz4hc level 0 is out of range 1..12");
    check_bad_spec("lz4hc:13", "1..12");
    check_bad_spec("snappy:1", "snappy level 1 is out of range 0..0");
    check_bad_spec("lz4:1", "lz4 level 1");
    check_bad_spec("none:2", "none level 2");
    check_bad_spec("zstd:", "invalid zstd level ''");
    check_bad_spec("zstd:x", "expected an integer in -7..22");
    check_bad_spec("zstd:3.5", "invalid zstd level");
    check_bad_spec("zstd:99999999999999999999", "invalid zstd level");
    check_bad_spec(":3", "missing algorithm");
    check_bad_spec("", "empty spec");
    check_bad_spec("   ", "empty spec");
    check_bad_spec("\"\"", "empty spec");
    check_bad_spec(NULL, "missing spec");
    check_bad_spec("auto:fast", "unknown auto mode 'fast'");
    check_bad_spec("auto:3", "auto:ratio");
    check_bad_spec("zstd:3/3K", "invalid block size '3K'");
    check_bad_spec("zstd:3/2M", "power of two from 4K to 1M");
    check_bad_spec("zstd/1K", "invalid block size");
    check_bad_spec("zstd/", "invalid block size ''");
    check_bad_spec("zstd:3/128K/x", "invalid block size");
    check_bad_spec("zstd:3:4", "invalid zstd level");
    check_bad_spec("zstd : 3", "kdb+ logical block size");
    check_bad_spec("zstd:3 junk", "kdb+");
    check_bad_spec("17 1 1", "qipc level 1 is out of range 0..0");
    check_bad_spec("17 7 0", "use 0 none, 1 qipc, 2 gzip, 3 snappy, 4 lz4hc or 5 zstd");
    check_bad_spec("21 2 6", "out of range 12..20");
    check_bad_spec("11 2 6", "out of range 12..20");
    check_bad_spec("17 2 10", "gzip level 10 is out of range 0..9");
    check_bad_spec("17 5 23", "zstd level 23");
    check_bad_spec("17 4 0", "lz4hc level 0");
    check_bad_spec("17 3 1", "snappy level 1");
    check_bad_spec("17 6 0", "unknown kdb+ algorithm 6");
    check_bad_spec("17 x 0", "not a number");
    check_bad_spec("17 2", "expected ALG[:LEVEL][/BLOCK]");
    check_bad_spec("17 2 6 1", "kdb+ triple");
    check_bad_spec("\"17 2 6", "kdb+ logical block size");
    char longspec[400];
    memset(longspec, 'a', sizeof longspec - 1);
    longspec[sizeof longspec - 1] = 0;
    check_bad_spec(longspec, "too long");

    /* NULL out / NULL err are allowed */
    CHECK_EQ_INT(sqz_spec_parse("zstd", NULL, NULL, 0), 0);
    CHECK_EQ_INT(sqz_spec_parse("bogus", NULL, NULL, 0), -EINVAL);
    /* truncated message is NUL-terminated */
    char small[10];
    CHECK_EQ_INT(sqz_spec_parse("bogus", NULL, small, sizeof small), -EINVAL);
    CHECK(strlen(small) == sizeof small - 1);
}

static void test_blocks(void)
{
    static const struct { const char *t; int l; } ok[] = {
        {"4K", 12}, {"4k", 12}, {"4KiB", 12}, {"4kb", 12}, {"8K", 13},
        {"64K", 16}, {"128K", 17}, {"512k", 19}, {"1M", 20}, {"1m", 20},
        {"1MiB", 20}, {"1024K", 20}, {"4096", 12}, {"65536", 16},
        {"1048576", 20}, {"12", 12}, {"17", 17}, {"20", 20}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int l = 0;
        char err[200] = "";
        CHECK_EQ_INT(sqz_parse_block(ok[i].t, &l, err, sizeof err), 0);
        CHECK_EQ_INT(l, ok[i].l);
    }
    static const char *bad[] = {"3K", "2M", "1K", "2K", "0", "", "K", "11",
                                "21", "8191", "8193", "1G", "-4K", "4 K",
                                "4K ", "0x1000", "4Kx", "99999999999999999999K",
                                "3M", "12.0", "100000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int l = 99;
        char err[200] = "";
        CHECK_EQ_INT(sqz_parse_block(bad[i], &l, err, sizeof err), -EINVAL);
        CHECK_EQ_INT(l, 99);
        CHECK(strstr(err, "invalid block size") != NULL);
        CHECK(strstr(err, "4K to 1M") != NULL);
    }
    CHECK_EQ_INT(sqz_parse_block(NULL, NULL, NULL, 0), -EINVAL);
}

static void test_format(void)
{
    static const struct { sqz_spec s; const char *want; } cases[] = {
        {{SQZ_ALG_ZSTD, 3, 17, 0}, "zstd:3/128K"},
        {{SQZ_ALG_NONE, 0, 16, 0}, "none/64K"},
        {{SQZ_ALG_ZSTD, 3, 17, SQZ_AUTO_RATIO}, "auto:ratio/128K"},
        {{SQZ_ALG_ZSTD, 3, 0, SQZ_AUTO_BALANCED}, "auto"},
        {{SQZ_ALG_ZSTD, 3, 12, SQZ_AUTO_SPEED}, "auto:speed/4K"},
        {{SQZ_ALG_SNAPPY, 0, 0, 0}, "snappy"},
        {{SQZ_ALG_GZIP, 6, 0, 0}, "gzip:6"},
        {{SQZ_ALG_LZ4HC, 9, 16, 0}, "lz4hc:9/64K"},
        {{SQZ_ALG_ZSTD, -7, 12, 0}, "zstd:-7/4K"},
        {{SQZ_ALG_LZ4, 0, 20, 0}, "lz4/1M"},
        {{SQZ_ALG_QIPC, 0, 17, 0}, "qipc/128K"},
        {{SQZ_ALG_GZIP, 0, 19, 0}, "gzip:0/512K"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = sqz_spec_format(&cases[i].s, buf, sizeof buf);
        CHECK_EQ_INT(n, (int)strlen(cases[i].want));
        CHECK(n > 0 && strcmp(buf, cases[i].want) == 0);
    }
    /* buffer too small (needs room for the NUL) */
    sqz_spec s = {SQZ_ALG_ZSTD, 3, 17, 0};
    CHECK_EQ_INT(sqz_spec_format(&s, buf, 11), -ENOSPC);
    CHECK_EQ_INT(sqz_spec_format(&s, buf, 12), 11);
    CHECK_EQ_INT(sqz_spec_format(&s, NULL, 0), -ENOSPC);
    /* invalid specs are not formatted */
    sqz_spec bad1 = {SQZ_ALG_ZSTD, 23, 17, 0};
    sqz_spec bad2 = {SQZ_ALG_ZSTD, 3, 21, 0};
    sqz_spec bad3 = {(sqz_alg)7, 0, 17, 0};
    sqz_spec bad4 = {SQZ_ALG_ZSTD, 3, 17, 4};
    CHECK_EQ_INT(sqz_spec_format(&bad1, buf, sizeof buf), -EINVAL);
    CHECK_EQ_INT(sqz_spec_format(&bad2, buf, sizeof buf), -EINVAL);
    CHECK_EQ_INT(sqz_spec_format(&bad3, buf, sizeof buf), -EINVAL);
    CHECK_EQ_INT(sqz_spec_format(&bad4, buf, sizeof buf), -EINVAL);

    /* round trip: every alg x level x block size, and the auto modes */
    int n = 0;
    for (int i = 0; i < SQZ_ALG_COUNT; i++) {
        sqz_alg a = sqz_all_algs[i];
        for (int l = sqz_level_min(a); l <= sqz_level_max(a); l++) {
            for (int bs = 11; bs <= 20; bs++) {
                sqz_spec in = {a, l, bs == 11 ? 0 : bs, 0}, back;
                REQUIRE(sqz_spec_format(&in, buf, sizeof buf) > 0);
                CHECK_EQ_INT(sqz_spec_parse(buf, &back, NULL, 0), 0);
                CHECK(back.alg == in.alg && back.level == in.level &&
                      back.log2bs == in.log2bs && back.auto_mode == 0);
                n++;
            }
        }
    }
    for (int m = 1; m <= 3; m++) {
        for (int bs = 11; bs <= 20; bs++) {
            sqz_spec in, back;
            REQUIRE(sqz_spec_parse(m == 1 ? "auto" : m == 2 ? "auto:ratio"
                                                            : "auto:speed",
                                   &in, NULL, 0) == 0);
            in.log2bs = bs == 11 ? 0 : bs;
            REQUIRE(sqz_spec_format(&in, buf, sizeof buf) > 0);
            CHECK_EQ_INT(sqz_spec_parse(buf, &back, NULL, 0), 0);
            CHECK(memcmp(&in, &back, sizeof in) == 0);
        }
    }
    CHECK(n > 500);
}

/* ---- globs ---- */

static void test_glob(void)
{
    static const struct { const char *p, *s; int m; } g[] = {
        {"*.csv", "a.csv", 1},
        {"*.csv", "dir/sub/a.csv", 1},
        {"*.csv", "a.csv/b", 0},
        {"*.csv", "a.csvx", 0},
        {"*.csv", ".csv", 1},
        {"a?c", "abc", 1},
        {"a?c", "ac", 0},
        {"a?c", "x/abc", 1},
        {"*", "anything/at/all", 1},
        {"*", "", 1},
        {"data/*.bin", "data/x.bin", 1},
        {"data/*.bin", "data/sub/x.bin", 0},
        {"data/*.bin", "other/data/x.bin", 0},
        {"/data/*.bin", "data/x.bin", 1},
        {"/top", "top", 1},
        {"/top", "a/top", 0},
        {"**/x", "x", 1},
        {"**/x", "a/x", 1},
        {"**/x", "a/b/c/x", 1},
        {"**/x", "a/b/c/xy", 0},
        {"**/x", "x/y", 0},
        {"a/**", "a/b", 1},
        {"a/**", "a/b/c/d", 1},
        {"a/**", "a", 0},
        {"a/**", "ab/c", 0},
        {"a/**", "b/a/c", 0},
        {"a/**/b", "a/b", 1},
        {"a/**/b", "a/x/y/b", 1},
        {"a/**/b", "a/x/y/c", 0},
        {"a/**/b/**/c", "a/1/b/2/3/c", 1},
        {"a/**/b/**/c", "a/b/c", 1},
        {"a/**/b/**/c", "a/c/b", 0},
        {"**/*.log", "logs/2024/app.log", 1},
        {"**/*.log", "app.log", 1},
        {"**", "", 1},
        {"**", "a/b", 1},
        {"**/**", "a", 1},
        {"logs/", "logs/a", 1},
        {"logs/", "logs/a/b", 1},
        {"logs/", "logs", 0},
        {"[abc].txt", "b.txt", 1},
        {"[abc].txt", "d.txt", 0},
        {"[a-c]x", "cx", 1},
        {"[!a-c]x", "cx", 0},
        {"[!a-c]x", "dx", 1},
        {"[^a-c]x", "dx", 1},
        {"[]]x", "]x", 1},
        {"[a-]x", "-x", 1},
        {"[/]x", "a/x", 0},
        {"[abc", "[abc", 1},
        {"[abc", "a", 0},
        {"\\*x", "*x", 1},
        {"\\*x", "ax", 0},
        {"*a*b*c", "xaybzc", 1},
        {"*a*b*c", "xaybzcd", 0},
        {"a*", "a", 1},
        {"*x*", "p/q/abxcd", 1},
        {"dir/*", "dir/f", 1},
        {"dir/*", "dir/f/g", 0},
        {"dir//f", "dir/f", 1},
        {"dir/f", "dir//f", 1},
        {"2024.??.?" "?/*.csv", "2024.01.05/t.csv", 1},
        {"2024.??.?" "?/*.csv", "2024.1.05/t.csv", 0},
        {"hdb/*/trade/*", "hdb/2024.01.02/trade/price", 1},
        {"hdb/*/trade/*", "hdb/2024.01.02/quote/price", 0},
        {"", "", 1},
        {"", "a", 0},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        int m = sqz_glob_match(g[i].p, g[i].s);
        if (m != g[i].m) {
            fprintf(stderr, "glob '%s' vs '%s' = %d, expected %d\n", g[i].p,
                    g[i].s, m, g[i].m);
            sqz_test_failures++;
        }
    }
    CHECK_EQ_INT(sqz_glob_match(NULL, "a"), 0);
    CHECK_EQ_INT(sqz_glob_match("a", NULL), 0);

    /* adversarial backtracking stays fast */
    char pat[320], path[4200];
    size_t k = 0;
    for (int i = 0; i < 60; i++) {
        pat[k++] = '*';
        pat[k++] = 'a';
    }
    pat[k++] = 'b';
    pat[k] = 0;
    memset(path, 'a', 4000);
    path[4000] = 0;
    clock_t t0 = clock();
    CHECK_EQ_INT(sqz_glob_match(pat, path), 0);
    k = 0;
    for (int i = 0; i < 60; i++) {
        memcpy(pat + k, "**/a/", 5);
        k += 5;
    }
    memcpy(pat + k, "b", 2);
    for (int i = 0; i < 2000; i++) {
        path[2 * i] = 'a';
        path[2 * i + 1] = '/';
    }
    path[3999] = 0;
    CHECK_EQ_INT(sqz_glob_match(pat, path), 0);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(secs < 2.0);
}

/* ---- rules ---- */

static void test_rules(void)
{
    const char *text =
        "# squeezefs rules\n"
        "\n"
        "*.csv      zstd:9/128K   # text tables\n"
        "   \t\n"
        "hdb/**     \"17 2 6\"\r\n"
        "  # indented comment\n"
        "**/*.log   lz4\n"
        "a#b        snappy\n"
        "/raw/*     none/64K\n"
        "*          auto:speed";
    sqz_rules *r = NULL;
    char err[256] = "";
    int rc = sqz_rules_parse(text, "rules.txt", &r, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "rules: %s\n", err);
    REQUIRE(rc == 0 && r);
    CHECK_EQ_INT(sqz_rules_count(r), 6);
    sqz_spec s;
    CHECK_EQ_INT(sqz_rules_match(r, "x/y.csv", &s), 3);
    CHECK(s.alg == SQZ_ALG_ZSTD && s.level == 9 && s.log2bs == 17);
    CHECK_EQ_INT(sqz_rules_match(r, "hdb/2024.01.02/trade/price", &s), 5);
    CHECK(s.alg == SQZ_ALG_GZIP && s.level == 6 && s.log2bs == 17);
    CHECK_EQ_INT(sqz_rules_match(r, "hdb/t.csv", &s), 3); /* first match */
    CHECK_EQ_INT(sqz_rules_match(r, "var/log/app.log", &s), 7);
    CHECK(s.alg == SQZ_ALG_LZ4 && s.log2bs == 0);
    CHECK_EQ_INT(sqz_rules_match(r, "q/a#b", &s), 8);
    CHECK(s.alg == SQZ_ALG_SNAPPY);
    CHECK_EQ_INT(sqz_rules_match(r, "raw/blob", &s), 9);
    CHECK(s.alg == SQZ_ALG_NONE && s.log2bs == 16);
    CHECK_EQ_INT(sqz_rules_match(r, "other", &s), 10);
    CHECK(s.auto_mode == SQZ_AUTO_SPEED);
    CHECK_EQ_INT(sqz_rules_match(r, "other", NULL), 10);
    sqz_rules_free(r);

    /* no match, empty file, comments only */
    CHECK_EQ_INT(sqz_rules_parse("# nothing\n\n  # more\n", "e", &r, err,
                                 sizeof err), 0);
    CHECK_EQ_INT(sqz_rules_count(r), 0);
    CHECK_EQ_INT(sqz_rules_match(r, "a.csv", &s), 0);
    sqz_rules_free(r);
    CHECK_EQ_INT(sqz_rules_parse("", "e", &r, err, sizeof err), 0);
    CHECK_EQ_INT(sqz_rules_count(r), 0);
    sqz_rules_free(r);
    CHECK_EQ_INT(sqz_rules_match(NULL, "a", &s), 0);
    CHECK_EQ_INT(sqz_rules_count(NULL), 0);
    sqz_rules_free(NULL);

    /* errors name source and line */
    static const struct { const char *text, *want; } bad[] = {
        {"*.csv zstd\n# c\n*.bin zsdt:3\n",
         "rules.txt:3: unknown algorithm 'zsdt'"},
        {"a zstd\nb\n", "rules.txt:2: missing SPEC after pattern 'b'"},
        {"a 17 2 6\n", "rules.txt:1: unexpected text after the spec"},
        {"a zstd:3 extra\n", "rules.txt:1: unexpected text"},
        {"\n\n\n\na zstd:30\n", "rules.txt:5: zstd level 30 is out of range"},
        {"a \"17 7 0\"\n", "rules.txt:1: unknown kdb+ algorithm 7"},
        {"a zstd/3K\n", "rules.txt:1: invalid block size '3K'"},
        {"x zstd\r\ny gzip:11\r\n", "rules.txt:2: gzip level 11"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = (sqz_rules *)&err; /* must be reset to NULL */
        err[0] = 0;
        rc = sqz_rules_parse(bad[i].text, "rules.txt", &r, err, sizeof err);
        CHECK_EQ_INT(rc, -EINVAL);
        CHECK(r == NULL);
        if (strncmp(err, bad[i].want, strlen(bad[i].want)) != 0) {
            fprintf(stderr, "rule error '%s', expected prefix '%s'\n", err,
                    bad[i].want);
            sqz_test_failures++;
        }
    }
    CHECK_EQ_INT(sqz_rules_parse(NULL, "x", &r, err, sizeof err), -EINVAL);

    /* loading from a file */
    char *dir = sqz_test_tmpdir();
    REQUIRE(dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/policy.rules", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("*.csv zstd:9\n*.txt gzip:11\n", f);
    fclose(f);
    err[0] = 0;
    CHECK_EQ_INT(sqz_rules_load(path, &r, err, sizeof err), -EINVAL);
    char want[4300];
    snprintf(want, sizeof want, "%s:2: gzip level 11", path);
    CHECK(strncmp(err, want, strlen(want)) == 0);
    f = fopen(path, "w");
    REQUIRE(f);
    fputs("*.csv zstd:9\n*.txt gzip:1/64K\n", f);
    fclose(f);
    CHECK_EQ_INT(sqz_rules_load(path, &r, err, sizeof err), 0);
    CHECK_EQ_INT(sqz_rules_count(r), 2);
    CHECK_EQ_INT(sqz_rules_match(r, "a/b.txt", &s), 2);
    CHECK(s.alg == SQZ_ALG_GZIP && s.level == 1 && s.log2bs == 16);
    sqz_rules_free(r);
    unlink(path);
    err[0] = 0;
    CHECK_EQ_INT(sqz_rules_load(path, &r, err, sizeof err), -ENOENT);
    CHECK(strstr(err, path) != NULL);
    CHECK_EQ_INT(sqz_rules_load(dir, &r, err, sizeof err), -EINVAL);
    rmdir(dir);
    free(dir);
}

/* ---- resolve ---- */

static int xattr_dir_ok(const char *dir)
{
    return setxattr(dir, "user.squeezefs.probe", "1", 1, 0) == 0 &&
           removexattr(dir, "user.squeezefs.probe") == 0;
}

static void mk(const char *root, const char *rel, int is_dir, const char *spec)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    if (is_dir) {
        REQUIRE(mkdir(p, 0755) == 0);
    } else {
        int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        REQUIRE(fd >= 0);
        REQUIRE(write(fd, "x", 1) == 1);
        close(fd);
    }
    if (spec)
        REQUIRE(setxattr(p, SQZ_POLICY_XATTR, spec, strlen(spec), 0) == 0);
}

static void check_res(int root_fd, const char *rel, const sqz_rules *rules,
                      const sqz_spec *deflt, const char *spec,
                      sqz_policy_source src, const char *where)
{
    sqz_resolved res;
    memset(&res, 0x55, sizeof res);
    int rc = sqz_policy_resolve(root_fd, rel, rules, "rules.txt", deflt, &res);
    char got[64] = "?";
    if (rc == 0)
        sqz_spec_format(&res.spec, got, sizeof got);
    if (rc != 0 || strcmp(got, spec) != 0 || res.source != src ||
        strcmp(res.where, where) != 0) {
        fprintf(stderr,
                "resolve '%s': rc=%d spec=%s source=%d where='%.64s' "
                "(expected %s %d '%s')\n",
                rel, rc, got, (int)res.source, rc == 0 ? res.where : "",
                spec, (int)src, where);
        sqz_test_failures++;
    }
    /* the two steps the daemon takes for a new file (the directory's
     * chain, cached, then rules and default) give the same, unless the
     * file's own xattr decided */
    const char *slash = strrchr(rel, '/');
    struct stat est;
    if (rc != 0 || res.source == SQZ_SRC_FILE || !rel[0] ||
        (slash && !slash[1]) ||
        (fstatat(root_fd, rel[0] == '/' ? rel + 1 : rel, &est,
                 AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(est.st_mode)))
        return; /* not a file name: a directory's own xattr counts */
    char dir[4200] = "";
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - rel), rel);
    sqz_policy_found f;
    memset(&f, 0x55, sizeof f);
    if (sqz_policy_walk_dir(root_fd, dir, &f) != 0)
        return; /* a regular file named as a directory with its own xattr */
    sqz_resolved two;
    memset(&two, 0x55, sizeof two);
    int rc2 = sqz_policy_resolve_found(&f, rel, rules, "rules.txt", deflt, &two);
    char got2[64] = "?";
    if (rc2 == 0)
        sqz_spec_format(&two.spec, got2, sizeof got2);
    if (rc2 != 0 || strcmp(got2, got) != 0 || two.source != res.source ||
        strcmp(two.where, res.where) != 0 || two.after_s != res.after_s) {
        fprintf(stderr, "two-step resolve '%s' (dir '%s'): rc=%d spec=%s "
                "source=%d where='%.64s' (one step: %s %d '%.64s')\n",
                rel, dir, rc2, got2, (int)two.source, rc2 == 0 ? two.where : "",
                got, (int)res.source, res.where);
        sqz_test_failures++;
    }
}

static char *xattr_tmpdir(void)
{
    char *d = sqz_test_tmpdir();
    if (d && xattr_dir_ok(d))
        return d;
    if (d) {
        rmdir(d);
        free(d);
    }
    static const char *alts[] = {"/var/tmp", "/dev/shm", "."};
    for (size_t i = 0; i < sizeof alts / sizeof alts[0]; i++) {
        char tmpl[256];
        snprintf(tmpl, sizeof tmpl, "%s/sqztest.XXXXXX", alts[i]);
        if (!mkdtemp(tmpl))
            continue;
        if (xattr_dir_ok(tmpl))
            return strdup(tmpl);
        rmdir(tmpl);
    }
    return NULL;
}

static void test_resolve(void)
{
    char *root = xattr_tmpdir();
    if (!root) {
        printf("SKIP resolve tests: no temporary directory accepts user "
               "xattrs (tried $TMPDIR or /tmp, /var/tmp, /dev/shm, .)\n");
        return;
    }
    mk(root, "a", 1, "zstd:5/256K");
    mk(root, "a/b", 1, "lz4hc:9");
    mk(root, "a/b/f.txt", 0, "gzip:9/64K");
    mk(root, "a/b/g.txt", 0, "gzip:1");
    mk(root, "a/b/h.txt", 0, NULL);
    mk(root, "a/b/bad.txt", 0, "not a spec at all");
    mk(root, "c", 1, NULL);
    mk(root, "c/h.csv", 0, NULL);
    mk(root, "c/k.log", 0, NULL);
    mk(root, "d.txt", 0, NULL);
    mk(root, "e", 1, "auto");
    mk(root, "e/z.csv", 0, NULL);
    mk(root, "e/z.dat", 0, NULL);
    mk(root, "f", 1, "zstd:99");
    mk(root, "f/q.txt", 0, NULL);
    mk(root, "t", 1, "\"16 2 6\"");
    mk(root, "t/q.txt", 0, NULL);
    char p[4200], q[4200];
    snprintf(p, sizeof p, "%s/s", root);
    REQUIRE(symlink("a", p) == 0);
    snprintf(p, sizeof p, "%s/out", root);
    REQUIRE(symlink("/", p) == 0);
    snprintf(p, sizeof p, "%s/fifo", root);
    REQUIRE(mkfifo(p, 0644) == 0);

    sqz_rules *rules = NULL;
    char err[256];
    REQUIRE(sqz_rules_parse("*.csv zstd:19/1M\nc/** snappy\n", "rules.txt",
                            &rules, err, sizeof err) == 0);
    sqz_spec deflt;
    REQUIRE(sqz_spec_parse("zstd:3/128K", &deflt, NULL, 0) == 0);
    int root_fd = open(root, O_RDONLY | O_DIRECTORY);
    REQUIRE(root_fd >= 0);

    const sqz_policy_source F = SQZ_SRC_FILE, D = SQZ_SRC_DIRECTORY,
                            R = SQZ_SRC_RULE, T = SQZ_SRC_DEFAULT;
    /* file xattr wins, its own block size */
    check_res(root_fd, "a/b/f.txt", rules, &deflt, "gzip:9/64K", F, "a/b/f.txt");
    /* file xattr without block: from the nearest source having one (a) */
    check_res(root_fd, "a/b/g.txt", rules, &deflt, "gzip:1/256K", F, "a/b/g.txt");
    /* nearest directory */
    check_res(root_fd, "a/b/h.txt", rules, &deflt, "lz4hc:9/256K", D, "a/b");
    /* unparsable file xattr is skipped */
    check_res(root_fd, "a/b/bad.txt", rules, &deflt, "lz4hc:9/256K", D, "a/b");
    /* a new file resolves from its parent */
    check_res(root_fd, "a/b/new.txt", rules, &deflt, "lz4hc:9/256K", D, "a/b");
    /* missing intermediate directories: from the deepest existing one */
    check_res(root_fd, "a/x/y/new", rules, &deflt, "zstd:5/256K", D, "a");
    /* a directory's own xattr counts for itself */
    check_res(root_fd, "a/b", rules, &deflt, "lz4hc:9/256K", D, "a/b");
    check_res(root_fd, "a", rules, &deflt, "zstd:5/256K", D, "a");
    /* dir xattr beats a matching rule */
    check_res(root_fd, "a/b/new.csv", rules, &deflt, "lz4hc:9/256K", D, "a/b");
    /* rules */
    check_res(root_fd, "c/h.csv", rules, &deflt, "zstd:19/1M", R, "rules.txt:1");
    check_res(root_fd, "c/k.log", rules, &deflt, "snappy/128K", R,
              "rules.txt:2");
    /* default */
    check_res(root_fd, "d.txt", rules, &deflt, "zstd:3/128K", T, "default");
    check_res(root_fd, "d.txt", NULL, &deflt, "zstd:3/128K", T, "default");
    check_res(root_fd, "c/h.csv", NULL, &deflt, "zstd:3/128K", T, "default");
    check_res(root_fd, "", rules, &deflt, "zstd:3/128K", T, "default");
    /* a dir spec without block size takes the matching rule's */
    check_res(root_fd, "e/z.csv", rules, &deflt, "auto/1M", D, "e");
    check_res(root_fd, "e/z.dat", rules, &deflt, "auto/128K", D, "e");
    /* bad dir xattr skipped; kdb+ triple in an xattr */
    check_res(root_fd, "f/q.txt", rules, &deflt, "zstd:3/128K", T, "default");
    check_res(root_fd, "t/q.txt", rules, &deflt, "gzip:6/64K", D, "t");
    /* symlinks are not followed, special files carry no policy */
    check_res(root_fd, "s/b/h.txt", rules, &deflt, "zstd:3/128K", T, "default");
    check_res(root_fd, "out/etc/passwd", rules, &deflt, "zstd:3/128K", T,
              "default");
    check_res(root_fd, "fifo", rules, &deflt, "zstd:3/128K", T, "default");
    /* a file used as a directory */
    check_res(root_fd, "d.txt/x", rules, &deflt, "zstd:3/128K", T, "default");
    /* leading slash, "." and doubled slashes tolerated */
    check_res(root_fd, "/a//b/./h.txt", rules, &deflt, "lz4hc:9/256K", D,
              "a//b");
    /* ".." is refused */
    sqz_resolved res;
    CHECK_EQ_INT(sqz_policy_resolve(root_fd, "a/../d.txt", rules, "r", &deflt,
                                    &res), -EINVAL);
    CHECK_EQ_INT(sqz_policy_resolve(root_fd, "..", rules, "r", &deflt, &res),
                 -EINVAL);
    /* default must carry a block size */
    sqz_spec nobs = deflt;
    nobs.log2bs = 0;
    CHECK_EQ_INT(sqz_policy_resolve(root_fd, "d.txt", rules, "r", &nobs, &res),
                 -EINVAL);
    /* rules name defaults to "rules" */
    CHECK_EQ_INT(sqz_policy_resolve(root_fd, "c/h.csv", rules, NULL, &deflt,
                                    &res), 0);
    CHECK(strcmp(res.where, "rules:1") == 0);
    /* an unreadable directory is still walked (O_PATH) when not root */
    if (geteuid() != 0) {
        snprintf(q, sizeof q, "%s/a/b", root);
        REQUIRE(chmod(q, 0311) == 0);
        check_res(root_fd, "a/b/h.txt", rules, &deflt, "lz4hc:9/256K", D,
                  "a/b");
        REQUIRE(chmod(q, 0755) == 0);
    }
    /* after clauses: the winning source's, the aged block size from its
     * own spec or the resolved one */
    {
        sqz_rules *ar = NULL;
        REQUIRE(sqz_rules_parse("*.csv lz4/64K after 30d zstd:19\n", "ar", &ar,
                                err, sizeof err) == 0);
        mk(root, "g", 1, "lz4 after 2h gzip:9/1M");
        mk(root, "g/x.csv", 0, NULL);
        sqz_resolved rs;
        char a[64] = "";
        REQUIRE(sqz_policy_resolve(root_fd, "c/h.csv", ar, "ar", &deflt, &rs) == 0);
        sqz_spec_format(&rs.aged, a, sizeof a);
        CHECK(rs.after_s == 30LL * 86400 && !strcmp(a, "zstd:19/64K"));
        REQUIRE(sqz_policy_resolve(root_fd, "g/x.csv", ar, "ar", &deflt, &rs) == 0);
        sqz_spec_format(&rs.aged, a, sizeof a);
        CHECK(rs.after_s == 7200 && !strcmp(a, "gzip:9/1M") && rs.source == D);
        /* a directory's plain SPEC overrides the rule's after clause */
        REQUIRE(sqz_policy_resolve(root_fd, "a/b/new.csv", ar, "ar", &deflt, &rs) == 0);
        CHECK_EQ_INT(rs.after_s, -1);
        REQUIRE(sqz_policy_resolve(root_fd, "d.txt", ar, "ar", &deflt, &rs) == 0);
        CHECK_EQ_INT(rs.after_s, -1);
        sqz_rules_free(ar);
    }
    /* root xattr */
    REQUIRE(setxattr(root, SQZ_POLICY_XATTR, "zstd:7", 6, 0) == 0);
    check_res(root_fd, "d.txt", rules, &deflt, "zstd:7/128K", D, "/");
    check_res(root_fd, "c/h.csv", rules, &deflt, "zstd:7/1M", D, "/");
    check_res(root_fd, "", rules, &deflt, "zstd:7/128K", D, "/");
    check_res(root_fd, "a/b/h.txt", rules, &deflt, "lz4hc:9/256K", D, "a/b");
    /* an O_PATH root descriptor works too (xattr read via /proc/self/fd) */
    int path_fd = open(root, O_PATH | O_DIRECTORY);
    REQUIRE(path_fd >= 0);
    if (access("/proc/self/fd", F_OK) == 0)
        check_res(path_fd, "d.txt", rules, &deflt, "zstd:7/128K", D, "/");
    check_res(path_fd, "a/b/f.txt", rules, &deflt, "gzip:9/64K", F,
              "a/b/f.txt");
    close(path_fd);

    close(root_fd);
    sqz_rules_free(rules);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    free(root);
}


/* ---- aged policies: SPEC after AGE SPEC2 ---- */

static void check_policy(const char *text, const char *canon, long long after)
{
    sqz_policy p;
    char err[256] = "", got[160] = "?";
    int r = sqz_policy_parse(text, &p, err, sizeof err);
    if (r == 0)
        sqz_policy_format(&p, got, sizeof got);
    if (r != 0 || strcmp(got, canon) != 0 || p.after_s != after) {
        fprintf(stderr, "policy '%s': r=%d err='%s' -> '%s' after %lld "
                "(want '%s' after %lld)\n", text, r, err, got,
                r == 0 ? p.after_s : -2, canon, after);
        sqz_test_failures++;
        return;
    }
    /* the canonical text parses back to itself */
    sqz_policy back;
    char again[160] = "";
    CHECK_EQ_INT(sqz_policy_parse(got, &back, err, sizeof err), 0);
    sqz_policy_format(&back, again, sizeof again);
    CHECK(strcmp(again, got) == 0);
}

static void check_bad_policy(const char *text, const char *want)
{
    sqz_policy p = {.after_s = 77};
    char err[256] = "";
    int r = sqz_policy_parse(text, &p, err, sizeof err);
    if (r != -EINVAL || !strstr(err, want)) {
        fprintf(stderr, "bad policy '%s': r=%d err='%s' (want '%s')\n", text, r,
                err, want);
        sqz_test_failures++;
    }
    CHECK_EQ_INT(p.after_s, 77); /* untouched */
}

static void test_aged(void)
{
    long long s = 0;
    CHECK_EQ_INT(sqz_age_parse("30d", &s, NULL, 0), 0);
    CHECK_EQ_INT(s, 30LL * 86400);
    CHECK_EQ_INT(sqz_age_parse("12h", &s, NULL, 0), 0);
    CHECK_EQ_INT(s, 12 * 3600);
    CHECK_EQ_INT(sqz_age_parse("90m", &s, NULL, 0), 0);
    CHECK_EQ_INT(s, 5400);
    CHECK_EQ_INT(sqz_age_parse("0d", &s, NULL, 0), 0);
    CHECK_EQ_INT(s, 0);
    CHECK_EQ_INT(sqz_age_parse("36500d", &s, NULL, 0), 0);
    char err[256];
    const char *bad[] = {"", "d", "30", "30s", "30D", "-1d", "+1d", "1.5d",
                         "30dd", " 30d", "36501d", "99999999999999999999d"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        if (sqz_age_parse(bad[i], &s, err, sizeof err) != -EINVAL || !err[0]) {
            fprintf(stderr, "age '%s' accepted\n", bad[i]);
            sqz_test_failures++;
        }
    }
    char buf[32];
    CHECK(sqz_age_format(30LL * 86400, buf, sizeof buf) > 0 && !strcmp(buf, "30d"));
    CHECK(sqz_age_format(36 * 3600, buf, sizeof buf) > 0 && !strcmp(buf, "36h"));
    CHECK(sqz_age_format(90 * 60, buf, sizeof buf) > 0 && !strcmp(buf, "90m"));
    CHECK(sqz_age_format(0, buf, sizeof buf) > 0 && !strcmp(buf, "0d"));
    CHECK_EQ_INT(sqz_age_format(61, buf, sizeof buf), -EINVAL);
    CHECK_EQ_INT(sqz_age_format(-60, buf, sizeof buf), -EINVAL);
    CHECK_EQ_INT(sqz_age_format(86400, buf, 2), -ENOSPC);

    check_policy("lz4/128K after 30d zstd:19/1M", "lz4/128K after 30d zstd:19/1M",
                 30LL * 86400);
    check_policy("  lz4   AFTER 48h   zstd:19 ", "lz4 after 2d zstd:19", 2 * 86400);
    check_policy("lz4 after 90m gzip:9", "lz4 after 90m gzip:9", 5400);
    check_policy("\"17 1 0\" after 7d \"20 5 19\"", "qipc/128K after 7d zstd:19/1M",
                 7 * 86400);
    check_policy("zstd:1", "zstd:1", -1);
    check_policy("17 2 6", "gzip:6/128K", -1); /* a bare triple as before */
    check_policy("auto after 1d auto:ratio", "auto after 1d auto:ratio", 86400);
    check_bad_policy("after 30d zstd", "missing SPEC before 'after'");
    check_bad_policy("lz4 after", "missing AGE");
    check_bad_policy("lz4 after 30d", "missing SPEC2");
    check_bad_policy("lz4 after 30x zstd", "invalid age '30x'");
    check_bad_policy("lz4 after 30d zsdt:3", "after 30d: unknown algorithm 'zsdt'");
    check_bad_policy("lz5 after 30d zstd", "unknown algorithm 'lz5'");
    check_bad_policy("lz4 after 30d zstd after 60d gzip", "only one 'after'");
    check_bad_policy("lz4 after 30d zstd:99", "level");

    sqz_policy p;
    REQUIRE(sqz_policy_parse("lz4 after 1h zstd", &p, NULL, 0) == 0);
    CHECK_EQ_INT(sqz_policy_is_aged(&p, 3599), 0);
    CHECK_EQ_INT(sqz_policy_is_aged(&p, 3600), 1);
    CHECK_EQ_INT(sqz_policy_is_aged(&p, -5), 0);
    REQUIRE(sqz_policy_parse("lz4", &p, NULL, 0) == 0);
    CHECK_EQ_INT(sqz_policy_is_aged(&p, 1LL << 40), 0);

    /* rule files */
    sqz_rules *r = NULL;
    err[0] = 0;
    int rc = sqz_rules_parse("/hdb/*/trade/** lz4/128K after 30d zstd:19/1M\n"
                             "*.log \"17 2 6\" after 12h \"20 5 19\" # old logs\n"
                             "* zstd:1\n", "r", &r, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "rules: %s\n", err);
    REQUIRE(rc == 0);
    CHECK_EQ_INT(sqz_rules_count(r), 3);
    CHECK_EQ_INT(sqz_rules_count_aged(r), 2);
    CHECK_EQ_INT(sqz_rules_match_policy(r, "hdb/2024.01.02/trade/price", &p), 1);
    char got[160];
    sqz_policy_format(&p, got, sizeof got);
    CHECK(strcmp(got, "lz4/128K after 30d zstd:19/1M") == 0);
    sqz_spec sp;
    CHECK_EQ_INT(sqz_rules_match(r, "hdb/2024.01.02/trade/price", &sp), 1);
    CHECK(sp.alg == SQZ_ALG_LZ4 && sp.log2bs == 17);
    CHECK_EQ_INT(sqz_rules_match_policy(r, "x/a.log", &p), 2);
    CHECK(p.after_s == 12 * 3600 && p.aged.alg == SQZ_ALG_ZSTD && p.aged.level == 19);
    CHECK_EQ_INT(sqz_rules_match_policy(r, "x/a.txt", &p), 3);
    CHECK_EQ_INT(p.after_s, -1);
    sqz_rules_free(r);
    const char *badrules[][2] = {
        {"* lz4 after 30d\n", "r:1: unexpected text after the spec"},
        {"* lz4 after 30d zstd gzip\n", "r:1: unexpected text"},
        {"* lz4 before 30d zstd\n", "r:1: unexpected text"},
        {"* lz4 after 3O zstd\n", "r:1: invalid age '3O'"},
        {"ok lz4\n* lz4 after 1d 17 2 6\n", "r:2: unexpected text"},
        {"* lz4 after 1d bogus\n", "r:1: after 1d: unknown algorithm 'bogus'"},
    };
    for (size_t i = 0; i < sizeof badrules / sizeof badrules[0]; i++) {
        r = NULL;
        err[0] = 0;
        rc = sqz_rules_parse(badrules[i][0], "r", &r, err, sizeof err);
        if (rc != -EINVAL || r || !strstr(err, badrules[i][1])) {
            fprintf(stderr, "bad rules '%s': rc=%d err='%s'\n", badrules[i][0], rc, err);
            sqz_test_failures++;
        }
        sqz_rules_free(r);
    }
}

/* ---- auto ---- */

static void test_auto(void)
{
    size_t n = 256u << 10;
    unsigned char *buf = malloc(n);
    REQUIRE(buf);
    sqz_alg a;
    int l;
    for (int mode = 1; mode <= 3; mode++) {
        for (int log2bs = 12; log2bs <= 20; log2bs += 4) {
            sqz_test_fill(buf, n, 0, 7);
            CHECK_EQ_INT(sqz_auto_choose(mode, buf, n, log2bs, &a, &l), 0);
            CHECK_EQ_INT(a, SQZ_ALG_NONE);
            CHECK_EQ_INT(l, 0);
            for (int kind = 1; kind <= 4; kind++) {
                sqz_test_fill(buf, n, kind, 7);
                clock_t t0 = clock();
                CHECK_EQ_INT(sqz_auto_choose(mode, buf, n, log2bs, &a, &l), 0);
                double ms = (double)(clock() - t0) * 1000 / CLOCKS_PER_SEC;
                CHECK(ms < 500); /* a few ms normally; generous for ASan */
                CHECK(a != SQZ_ALG_NONE);
                CHECK_EQ_INT(sqz_level_check(a, l, NULL, 0), 0);
                if (mode == SQZ_AUTO_SPEED)
                    CHECK(a == SQZ_ALG_LZ4 || (a == SQZ_ALG_ZSTD && l <= 1));
                if (mode == SQZ_AUTO_RATIO)
                    CHECK((a == SQZ_ALG_ZSTD && l >= 9) || a == SQZ_ALG_GZIP);
                if (mode == SQZ_AUTO_BALANCED)
                    CHECK(a == SQZ_ALG_ZSTD && l >= 1 && l <= 9);
                /* deterministic */
                sqz_alg a2;
                int l2;
                CHECK_EQ_INT(sqz_auto_choose(mode, buf, n, log2bs, &a2, &l2), 0);
                CHECK(a2 == a && l2 == l);
            }
        }
    }
    /* a small text sample, no block size given */
    sqz_test_fill(buf, 3000, 2, 1);
    CHECK_EQ_INT(sqz_auto_choose(SQZ_AUTO_BALANCED, buf, 3000, 0, &a, &l), 0);
    CHECK(a == SQZ_ALG_ZSTD);
    sqz_test_fill(buf, 3000, 0, 1);
    CHECK_EQ_INT(sqz_auto_choose(SQZ_AUTO_BALANCED, buf, 3000, 0, &a, &l), 0);
    CHECK(a == SQZ_ALG_NONE);
    /* empty sample: a valid choice */
    CHECK_EQ_INT(sqz_auto_choose(SQZ_AUTO_SPEED, NULL, 0, 17, &a, &l), 0);
    CHECK_EQ_INT(sqz_level_check(a, l, NULL, 0), 0);
    /* bad arguments */
    CHECK_EQ_INT(sqz_auto_choose(0, buf, n, 17, &a, &l), -EINVAL);
    CHECK_EQ_INT(sqz_auto_choose(4, buf, n, 17, &a, &l), -EINVAL);
    CHECK_EQ_INT(sqz_auto_choose(1, buf, n, 21, &a, &l), -EINVAL);
    CHECK_EQ_INT(sqz_auto_choose(1, NULL, 10, 17, &a, &l), -EINVAL);
    CHECK_EQ_INT(sqz_auto_choose(1, buf, n, 17, NULL, &l), -EINVAL);
    free(buf);
}

int main(void)
{
    test_specs();
    test_blocks();
    test_format();
    test_glob();
    test_rules();
    test_aged();
    test_resolve();
    test_auto();
    return sqz_test_done("test_policy");
}
