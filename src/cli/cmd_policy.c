/* policy set|unset|get|check|test: per-file/directory compression policy
 * (xattr user.squeezefs.policy) and rule files. */
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
    sqz_spec s;
    if (cli_spec_parse(text, &s) < 0)
        return CLI_USAGE;
    char canon[64];
    if (sqz_spec_format(&s, canon, sizeof canon) < 0) {
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
    print_effective(spec, source, where ? where : "");
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
    char spec[64];
    if (sqz_spec_format(&res.spec, spec, sizeof spec) < 0) {
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
    size_t n = sqz_rules_count(rules);
    printf("%s: %zu rule%s, ok\n", file, n, n == 1 ? "" : "s");
    sqz_rules_free(rules);
    return CLI_OK;
}

static int policy_test(const char *file, int n, char **paths)
{
    sqz_rules *rules;
    int r = load_rules(file, &rules);
    if (r < 0)
        return r == -EINVAL || r == -EBADMSG ? CLI_USAGE : CLI_FAIL;
    for (int i = 0; i < n; i++) {
        const char *rel = paths[i];
        while (rel[0] == '/')
            rel++;
        sqz_spec s;
        int line = sqz_rules_match(rules, rel, &s);
        if (line <= 0) {
            printf("%s: no rule matches\n", paths[i]);
            continue;
        }
        char spec[64];
        if (sqz_spec_format(&s, spec, sizeof spec) < 0)
            snprintf(spec, sizeof spec, "?");
        printf("%s: %s (rule %s:%d)\n", paths[i], spec, file, line);
    }
    sqz_rules_free(rules);
    return CLI_OK;
}

static int usage(void)
{
    fprintf(stderr, "usage: squeezefs policy set PATH SPEC\n"
                    "       squeezefs policy unset PATH\n"
                    "       squeezefs policy get PATH\n"
                    "       squeezefs policy check FILE\n"
                    "       squeezefs policy test FILE RELPATH...\n");
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
    if (!strcmp(sub, "test") && argc >= 4)
        return policy_test(argv[2], argc - 3, argv + 3);
    return usage();
}
