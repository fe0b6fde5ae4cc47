/* policy set|unset|get|check|test: per-file/directory compression policy
 * (xattr user.squeezefs.policy, `SPEC [after AGE SPEC2]`) and rule files. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cli.h"

static const char *source_name(sqz_policy_source s)
{
    switch (s) {
    case SQZ_SRC_FILE: return "file";
    case SQZ_SRC_DIRECTORY: return "directory";
    case SQZ_SRC_RULE: return "rule";
    case SQZ_SRC_DEFAULT: return "default";
    }
    return "?";
}

static void print_effective(const char *spec, const char *source, const char *where)
{
    if (!strcmp(source, "default") || !where[0])
        printf("%s (from %s)\n", spec, source);
    else
        printf("%s (from %s %s)\n", spec, source, where);
}

static int policy_set(const char *path, const char *text)
{
    sqz_policy s;
    char err[256] = "";
    if (sqz_policy_parse(text, &s, err, sizeof err) < 0) {
        cli_err("bad policy '%s': %s", text, err);
        return CLI_USAGE;
    }
    char canon[160];
    if (sqz_policy_format(&s, canon, sizeof canon) < 0) {
        cli_err("cannot format spec '%s'", text);
        return CLI_FAIL;
    }
    if (setxattr(path, SQZ_POLICY_XATTR, canon, strlen(canon), 0) < 0) {
        cli_err("%s: cannot set %s: %s", path, SQZ_POLICY_XATTR, strerror(errno));
        return CLI_FAIL;
    }
    return CLI_OK;
}

static int policy_unset(const char *path)
{
    if (removexattr(path, SQZ_POLICY_XATTR) < 0 && errno != ENODATA) {
        cli_err("%s: cannot remove %s: %s", path, SQZ_POLICY_XATTR, strerror(errno));
        return CLI_FAIL;
    }
    return CLI_OK;
}

static int get_on_mount(const char *path)
{
    char *text;
    int r = cli_get_xattr(path, SQZ_XATTR_EFFECTIVE, &text);
    if (r < 0) {
        cli_err("%s: cannot read %s: %s", path, SQZ_XATTR_EFFECTIVE, strerror(-r));
        return CLI_FAIL;
    }
    /* "SPEC SOURCE WHERE" (WHERE may be empty for the default) */
    char *save = NULL;
    char *spec = strtok_r(text, " \n", &save);
    char *source = strtok_r(NULL, " \n", &save);
    char *where = save ? save + strspn(save, " ") : NULL;
    if (!spec || !source) {
        cli_err("%s: unexpected %s value", path, SQZ_XATTR_EFFECTIVE);
        free(text);
        return CLI_FAIL;
    }
    if (where)
        where[strcspn(where, "\n")] = '\0';
    /* the whole policy (with its after clause) from the tier status */
    char *tier = NULL;
    json_flat o = {0};
    const json_field *f = NULL;
    if (cli_get_xattr(path, SQZ_XATTR_TIER, &tier) == 0 &&
        json_flat_parse(tier, &o, NULL, 0) == 0)
        f = json_flat_get(&o, "policy");
    print_effective(f && f->kind == JSON_STR ? f->str : spec, source,
                    where ? where : "");
    json_flat_free(&o);
    free(tier);
    free(text);
    return CLI_OK;
}

static int policy_get(const char *path)
{
    if (cli_on_mount(path))
        return get_on_mount(path);
    char abs[PATH_MAX];
    if (!realpath(path, abs)) {
        cli_err("%s: %s", path, strerror(errno));
        return CLI_FAIL;
    }
    int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        cli_err("/: %s", strerror(errno));
        return CLI_FAIL;
    }
    sqz_spec deflt;
    if (cli_spec_parse("zstd:1/128K", &deflt) < 0) {
        close(root);
        return CLI_FAIL;
    }
    sqz_resolved res;
    int r = sqz_policy_resolve(root, abs + 1, NULL, NULL, &deflt, &res);
    close(root);
    if (r < 0) {
        cli_err("%s: %s", path, strerror(-r));
        return CLI_FAIL;
    }
    char spec[160];
    sqz_policy pol = {.spec = res.spec, .after_s = res.after_s, .aged = res.aged};
    if (sqz_policy_format(&pol, spec, sizeof spec) < 0) {
        cli_err("%s: cannot format the effective spec", path);
        return CLI_FAIL;
    }
    print_effective(spec, source_name(res.source),
                    res.source == SQZ_SRC_DEFAULT ? "" : res.where);
    return CLI_OK;
}

static int load_rules(const char *file, sqz_rules **rules)
{
    char err[512] = "";
    int r = sqz_rules_load(file, rules, err, sizeof err);
    if (r < 0) {
        if (err[0])
            fprintf(stderr, "%s\n", err);
        else
            cli_err("%s: %s", file, strerror(-r));
        return r;
    }
    return 0;
}

static int policy_check(const char *file)
{
    sqz_rules *rules;
    int r = load_rules(file, &rules);
    if (r < 0)
        return r == -EINVAL || r == -EBADMSG ? CLI_USAGE : CLI_FAIL;
    size_t n = sqz_rules_count(rules), aged = sqz_rules_count_aged(rules);
    if (aged == 0)
        printf("%s: %zu rule%s, ok\n", file, n, n == 1 ? "" : "s");
    else
        printf("%s: %zu rule%s, ok; %zu with an aged policy:\n", file, n,
               n == 1 ? "" : "s", aged);
    for (size_t i = 0; i < n && aged; i++) {
        const char *pat;
        sqz_policy p;
        int line;
        char a[32], sp[64], ag[64];
        if (sqz_rules_get(rules, i, &pat, &p, &line) < 0 || p.after_s < 0)
            continue;
        if (sqz_age_format(p.after_s, a, sizeof a) < 0 ||
            sqz_spec_format(&p.spec, sp, sizeof sp) < 0 ||
            sqz_spec_format(&p.aged, ag, sizeof ag) < 0)
            continue;
        printf("  line %d: %s: %s, files older than %s: %s\n", line, pat, sp, a, ag);
    }
    sqz_rules_free(rules);
    return CLI_OK;
}

static int policy_test(const char *file, long long age, int n, char **paths)
{
    sqz_rules *rules;
    int r = load_rules(file, &rules);
    if (r < 0)
        return r == -EINVAL || r == -EBADMSG ? CLI_USAGE : CLI_FAIL;
    for (int i = 0; i < n; i++) {
        const char *rel = paths[i];
        while (rel[0] == '/')
            rel++;
        sqz_policy p;
        int line = sqz_rules_match_policy(rules, rel, &p);
        if (line <= 0) {
            printf("%s: no rule matches\n", paths[i]);
            continue;
        }
        char spec[160], a[32], b[32], aged[64];
        if (sqz_policy_format(&p, spec, sizeof spec) < 0)
            snprintf(spec, sizeof spec, "?");
        if (age < 0 || p.after_s < 0) {
            printf("%s: %s (rule %s:%d)\n", paths[i], spec, file, line);
            continue;
        }
        if (sqz_age_format(age - age % 60, a, sizeof a) < 0 ||
            sqz_age_format(p.after_s, b, sizeof b) < 0)
            snprintf(a, sizeof a, "?");
        int old = sqz_policy_is_aged(&p, age);
        if (sqz_spec_format(old ? &p.aged : &p.spec, aged, sizeof aged) < 0)
            snprintf(aged, sizeof aged, "?");
        printf("%s: %s at age %s (%s %s; rule %s:%d: %s)\n", paths[i], aged, a,
               old ? "aged, >=" : "young, <", b, file, line, spec);
    }
    sqz_rules_free(rules);
    return CLI_OK;
}

static int usage(void)
{
    fprintf(stderr, "usage: squeezefs policy set PATH 'SPEC [after AGE SPEC2]'\n"
                    "       squeezefs policy unset PATH\n"
                    "       squeezefs policy get PATH\n"
                    "       squeezefs policy check FILE\n"
                    "       squeezefs policy test [--age AGE] FILE RELPATH...\n");
    return CLI_USAGE;
}

int cmd_policy(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    const char *sub = argv[1];
    if (!strcmp(sub, "set") && argc == 4)
        return policy_set(argv[2], argv[3]);
    if (!strcmp(sub, "unset") && argc == 3)
        return policy_unset(argv[2]);
    if (!strcmp(sub, "get") && argc == 3)
        return policy_get(argv[2]);
    if (!strcmp(sub, "check") && argc == 3)
        return policy_check(argv[2]);
    if (!strcmp(sub, "test") && argc >= 6 && !strcmp(argv[2], "--age")) {
        long long age;
        char err[256] = "";
        if (sqz_age_parse(argv[3], &age, err, sizeof err) < 0) {
            cli_err("--age: %s", err);
            return CLI_USAGE;
        }
        return policy_test(argv[4], age, argc - 5, argv + 5);
    }
    if (!strcmp(sub, "test") && argc >= 4 && strcmp(argv[2], "--age"))
        return policy_test(argv[2], -1, argc - 3, argv + 3);
    return usage();
}
