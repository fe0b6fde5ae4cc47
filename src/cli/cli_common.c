/* Small helpers shared by the commands: messages, clocks, sizes, specs. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

void cli_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("squeezefs: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 8)
        n = 8;
    return (int)n;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_parse_size(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || text[0] == '-')
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end || v > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

void cli_format_block(int log2bs, char *buf, size_t n)
{
    if (log2bs >= 20)
        snprintf(buf, n, "%dM", 1 << (log2bs - 20));
    else if (log2bs >= 10)
        snprintf(buf, n, "%dK", 1 << (log2bs - 10));
    else
        snprintf(buf, n, "%d", 1 << log2bs);
}

int cli_spec_parse(const char *text, sqz_spec *out)
{
    char err[256] = "";
    int r = sqz_spec_parse(text, out, err, sizeof err);
    if (r < 0) {
        cli_err("bad spec '%s': %s", text, err[0] ? err : strerror(-r));
        return -EINVAL;
    }
    return 0;
}

void cli_params_spec(const sqz_params *p, char *buf, size_t n)
{
    sqz_spec s = {.alg = p->alg, .level = p->level, .log2bs = p->log2bs,
                  .auto_mode = SQZ_AUTO_NONE};
    if (sqz_spec_format(&s, buf, n) < 0) {
        char bs[16];
        cli_format_block(p->log2bs, bs, sizeof bs);
        const char *name = sqz_alg_name(p->alg);
        snprintf(buf, n, "%s:%d/%s", name ? name : "?", p->level, bs);
    }
}

int cli_is_own_hidden(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, CLI_TMP_PREFIX, sizeof CLI_TMP_PREFIX - 1) == 0;
}
