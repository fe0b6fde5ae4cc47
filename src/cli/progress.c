/* Progress line on stderr (only when stderr is a terminal):
 *   label  12.0/100.0 MiB  350.2 MB/s  ETA 0:03 */
#include <stdio.h>
#include <unistd.h>

#include "cli.h"

void progress_init(cli_progress *p, const char *label, uint64_t total)
{
    p->enabled = isatty(STDERR_FILENO) == 1;
    p->label = label;
    p->total = total;
    p->done = 0;
    p->start = cli_now();
    p->last_draw = 0;
}

void progress_set_total(cli_progress *p, uint64_t total)
{
    p->total = total;
}

static void draw(cli_progress *p, double now)
{
    double el = now - p->start;
    double mbps = el > 0 ? (double)p->done / el / 1e6 : 0;
    fprintf(stderr, "\r%s  %.1f/%.1f MiB", p->label ? p->label : "",
            (double)p->done / 1048576.0, (double)p->total / 1048576.0);
    if (p->total > 0)
        fprintf(stderr, " %3d%%", (int)(100.0 * (double)p->done / (double)p->total));
    fprintf(stderr, "  %.1f MB/s", mbps);
    if (p->done > 0 && p->total > p->done && el > 0) {
        double eta = el * (double)(p->total - p->done) / (double)p->done;
        unsigned s = (unsigned)(eta + 0.5);
        fprintf(stderr, "  ETA %u:%02u", s / 60, s % 60);
    } else {
        fprintf(stderr, "           ");
    }
    fprintf(stderr, "\033[K");
    fflush(stderr);
    p->last_draw = now;
}

void progress_add(cli_progress *p, uint64_t n)
{
    if (!p)
        return;
    p->done += n;
    if (!p->enabled)
        return;
    double now = cli_now();
    if (now - p->last_draw >= 0.2)
        draw(p, now);
}

void progress_finish(cli_progress *p)
{
    if (!p || !p->enabled)
        return;
    draw(p, cli_now());
    fputc('\n', stderr);
}
