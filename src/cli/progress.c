/* Progress line on stderr (only when stderr is a terminal):
 *   label  12.0/100.0 MiB  350.2 MB/s  ETA 0:03
 * or, for a walk of unknown size (progress_init_walk), after a delay:
 *   label  1234 files  5.6 GiB */
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
    p->walk = false;
    p->items = 0;
    p->delay = 0;
    p->drawn = false;
}

void progress_init_walk(cli_progress *p, const char *label, double delay)
{
    progress_init(p, label, 0);
    p->walk = true;
    p->delay = delay;
}

void progress_set_total(cli_progress *p, uint64_t total)
{
    p->total = total;
}

static void draw_walk(cli_progress *p)
{
    double mib = (double)p->done / 1048576.0;
    fprintf(stderr, "\r%s  %llu file%s  ", p->label ? p->label : "",
            (unsigned long long)p->items, p->items == 1 ? "" : "s");
    if (mib >= 1024)
        fprintf(stderr, "%.1f GiB", mib / 1024);
    else
        fprintf(stderr, "%.1f MiB", mib);
}

static void draw(cli_progress *p, double now)
{
    if (p->walk) {
        draw_walk(p);
    } else {
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
    }
    fprintf(stderr, "\033[K");
    fflush(stderr);
    p->last_draw = now;
    p->drawn = true;
}

void progress_add(cli_progress *p, uint64_t n)
{
    if (!p)
        return;
    p->done += n;
    if (!p->enabled)
        return;
    double now = cli_now();
    if (now - p->start >= p->delay && now - p->last_draw >= 0.2)
        draw(p, now);
}

void progress_item(cli_progress *p, uint64_t n)
{
    if (!p)
        return;
    p->items++;
    progress_add(p, n);
}

void progress_finish(cli_progress *p)
{
    if (!p || !p->enabled)
        return;
    if (p->walk) {
        if (p->drawn) { /* erase the line: the results follow */
            fputs("\r\033[K", stderr);
            fflush(stderr);
        }
        return;
    }
    draw(p, cli_now());
    fputc('\n', stderr);
}
