/* squeezefs: command dispatch. A known command word runs that command;
 * anything else is a mount command line for the FUSE daemon. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "mount/mount.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;
} command;

static const command commands[] = {
    {"pack", cmd_pack, "pack SRC DST [--policy SPEC] [--min-saving PCT]"},
    {"unpack", cmd_unpack, "unpack SRC DST"},
    {"cat", cmd_cat, "cat FILE..."},
    {"stat", cmd_stat, "stat [--json] PATH..."},
    {"du", cmd_du, "du [--json] [--by-dir] PATH..."},
    {"verify", cmd_verify, "verify [-v] [--json] PATH..."},
    {"stats", cmd_stats, "stats [--json] MOUNTPOINT"},
    {"policy", cmd_policy,
     "policy set PATH SPEC | unset PATH | get PATH | check FILE | "
     "test [--age AGE] FILE RELPATH..."},
    {"recompress", cmd_recompress, "recompress [--policy SPEC] PATH..."},
    {"tier", cmd_tier, "tier [--dry-run] [--max-rate MB/s] [--json] PATH..."},
    {"bench", cmd_bench,
     "bench [--lbs 12..20|LIST] [--alg LIST] [--level LIST|RANGE] [--runs N]\n"
     "        [--threads N] [--csv FILE] [--plot DIR] [--where EXPR]\n"
     "        [--recommend ratio|write|read|balanced] [--quick] [--seed N] [--tmpdir DIR]\n"
     "        FILE... | --gen GENERATOR[,GENERATOR...] [--size BYTES]"
     " [--dump FILE]"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void print_commands(FILE *out)
{
    fprintf(out, "usage: squeezefs COMMAND [ARGS...]\n"
                 "       squeezefs [MOUNT OPTIONS] BACKING MOUNTPOINT\n\n"
                 "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %s\n", commands[i].usage);
    fprintf(out, "  help [COMMAND] | COMMAND --help | --help | -h\n  --version\n");
}

static const command *find_command(const char *word)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(word, commands[i].name))
            return &commands[i];
    return NULL;
}

static int unknown_command(const char *word)
{
    cli_err("unknown command '%s'", word);
    print_commands(stderr);
    return CLI_USAGE;
}

/* help COMMAND: the command's full help; "mount" is the mount command line. */
static int help_command(const char *word)
{
    if (!strcmp(word, "mount")) {
        sqz_mount_usage(stdout);
        return CLI_OK;
    }
    if (!find_command(word) || cli_help(stdout, word) < 0)
        return unknown_command(word);
    return CLI_OK;
}

static void print_help(FILE *out)
{
    print_commands(out);
    fprintf(out, "\n");
    sqz_mount_usage(out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_help(stderr);
        return CLI_USAGE;
    }
    const char *word = argv[1];
    if (!strcmp(word, "help") && argc > 2) {
        if (argc > 3) {
            cli_err("help takes one COMMAND");
            return CLI_USAGE;
        }
        return help_command(argv[2]);
    }
    if (!strcmp(word, "help") || !strcmp(word, "--help") || !strcmp(word, "-h")) {
        print_help(stdout);
        return CLI_OK;
    }
    if (!strcmp(word, "--version")) {
        printf("squeezefs %s\n", SQZ_VERSION);
        return CLI_OK;
    }
    const command *c = find_command(word);
    if (c) {
        for (int i = 2; i < argc; i++)
            if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
                return help_command(word);
        return c->run(argc - 1, argv + 1);
    }

    /* A lone word that is neither a command nor a directory is a typo, not
     * a mount command line. */
    struct stat st;
    if (argc == 2 && word[0] != '-' && !(stat(word, &st) == 0 && S_ISDIR(st.st_mode)))
        return unknown_command(word);
    return sqz_mount_main(argc, argv);
}
