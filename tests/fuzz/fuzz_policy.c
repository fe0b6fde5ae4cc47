/* libFuzzer target for the policy parsers: SPEC parsing and policies with
 * an after clause (with format -> parse round trips that must agree), rule
 * files, and glob
 * matching (first line = pattern, the rest = path). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "squeezefs/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void fuzz_spec(const char *text)
{
    sqz_spec s, back;
    char err[256];
    memset(err, 'x', sizeof err);
    if (sqz_spec_parse(text, &s, err, sizeof err) != 0) {
        /* every failure explains itself, NUL-terminated */
        if (memchr(err, 0, sizeof err) == NULL || err[0] == 0)
            abort();
        return;
    }
    if (s.log2bs != 0 && (s.log2bs < 12 || s.log2bs > 20))
        abort();
    if (sqz_level_check(s.alg, s.level, NULL, 0) != 0)
        abort();
    char canon[64];
    int len = sqz_spec_format(&s, canon, sizeof canon);
    if (len <= 0 || (size_t)len != strlen(canon))
        abort();
    if (sqz_spec_parse(canon, &back, err, sizeof err) != 0)
        abort();
    if (back.alg != s.alg || back.level != s.level ||
        back.log2bs != s.log2bs || back.auto_mode != s.auto_mode)
        abort();
    char again[64];
    if (sqz_spec_format(&back, again, sizeof again) != len ||
        strcmp(again, canon) != 0)
        abort();
}

/* SPEC [after AGE SPEC2]: a failure explains itself; a success formats
 * to a text that parses back to the same policy. */
static void fuzz_aged(const char *text)
{
    sqz_policy p, back;
    char err[256];
    memset(err, 'x', sizeof err);
    if (sqz_policy_parse(text, &p, err, sizeof err) != 0) {
        if (memchr(err, 0, sizeof err) == NULL || err[0] == 0)
            abort();
        return;
    }
    if (p.after_s < -1 || p.after_s > SQZ_AGE_MAX_S)
        abort();
    char canon[200];
    int len = sqz_policy_format(&p, canon, sizeof canon);
    if (len <= 0 || (size_t)len != strlen(canon))
        abort();
    if (sqz_policy_parse(canon, &back, err, sizeof err) != 0)
        abort();
    if (back.after_s != p.after_s || back.spec.alg != p.spec.alg ||
        back.spec.level != p.spec.level || back.spec.log2bs != p.spec.log2bs ||
        back.spec.auto_mode != p.spec.auto_mode)
        abort();
    if (p.after_s >= 0 &&
        (back.aged.alg != p.aged.alg || back.aged.level != p.aged.level ||
         back.aged.log2bs != p.aged.log2bs || back.aged.auto_mode != p.aged.auto_mode))
        abort();
    if (sqz_policy_is_aged(&p, p.after_s) != (p.after_s >= 0))
        abort();
}

static void fuzz_rules(const char *text)
{
    sqz_rules *r = NULL;
    char err[256];
    memset(err, 'x', sizeof err);
    if (sqz_rules_parse(text, "fuzz.rules", &r, err, sizeof err) != 0) {
        if (r != NULL || memchr(err, 0, sizeof err) == NULL ||
            strncmp(err, "fuzz.rules:", 11) != 0)
            abort();
        return;
    }
    sqz_spec s;
    size_t count = sqz_rules_count(r);
    int line = sqz_rules_match(r, "dir/sub/file.csv", &s);
    if (line < 0 || (count == 0 && line != 0))
        abort();
    if (sqz_rules_count_aged(r) > count)
        abort();
    sqz_policy pol;
    if (sqz_rules_match_policy(r, "dir/sub/file.csv", &pol) != line)
        abort();
    if (line && (pol.spec.alg != s.alg || pol.spec.level != s.level))
        abort();
    sqz_rules_free(r);
}

static void fuzz_glob(char *text)
{
    char *nl = strchr(text, '\n');
    const char *path = "";
    if (nl) {
        *nl = 0;
        path = nl + 1;
    }
    int m = sqz_glob_match(text, path);
    if (m != 0 && m != 1)
        abort();
    /* a pattern always matches itself when it has no special characters */
    if (!strpbrk(text, "*?[\\") && *text != '/' && strcmp(text, path) == 0 &&
        text[0] && text[strlen(text) - 1] != '/' && !strstr(text, "//") &&
        !m)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    char *text = malloc(n + 1);
    if (!text)
        return 0;
    memcpy(text, d, n);
    text[n] = 0;
    fuzz_spec(text);
    fuzz_aged(text);
    fuzz_rules(text);
    fuzz_glob(text);
    free(text);
    return 0;
}
