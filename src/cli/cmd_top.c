/* cmd_top.c: `gpuq top` — the fleet in a terminal (GET /v1/fleet): a table of
 * GPUs (state, temperature, utilization, power, VRAM, loaded models, the job
 * running and its progress), the queues with their backlog, and the recent
 * placement decisions with their reasons. Interactive, it redraws every
 * --interval seconds on the alternate screen with the terminal in raw mode;
 * `q` or Ctrl-C leave, and every way out (a key, SIGINT, SIGTERM, SIGHUP, an
 * error) restores the terminal as it was. --once prints one frame and exits,
 * for scripts. Plain ANSI sequences only, so it works over SSH. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/buf.h"

#define TOP_DECISIONS 8

static struct opt top_opts[] = {
    {.name = "once", .help = "print one frame and exit (no terminal needed)"},
    {.name = "interval", .arg = "S", .help = "seconds between redraws (default 1)"},
    {0},
};

/* The terminal as we found it; saved is true while ours is in force. */
static struct termios term_saved;
static volatile sig_atomic_t term_raw;
static volatile sig_atomic_t top_stop;
static volatile sig_atomic_t top_resized;

static void term_restore(void)
{
    if (!term_raw)
        return;
    term_raw = 0;
    static const char leave[] = "\x1b[?25h\x1b[?1049l";
    ssize_t w = write(STDOUT_FILENO, leave, sizeof leave - 1);
    (void)w;
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &term_saved);
}

static void on_signal(int sig)
{
    if (sig == SIGWINCH)
        top_resized = 1;
    else
        top_stop = 1;
}

static int term_enter(void)
{
    if (tcgetattr(STDIN_FILENO, &term_saved))
        return -1;
    struct termios raw = term_saved;
    /* Keys one by one, unechoed; Ctrl-C arrives as a byte (ISIG off). Output
     * processing stays on, so "\n" still returns the carriage. */
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO | ISIG | IEXTEN);
    raw.c_iflag &= ~(tcflag_t)(IXON | ICRNL);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw))
        return -1;
    term_raw = 1;
    atexit(term_restore);
    static const char enter[] = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
    ssize_t w = write(STDOUT_FILENO, enter, sizeof enter - 1);
    (void)w;
    return 0;
}

static int term_width(void)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
        return ws.ws_col;
    return 120;
}

/* One frame, built in memory and written at once. Lines are cut at width
 * (counting bytes outside escape sequences; names are ASCII in practice). */
struct frame {
    struct buf b;
    int width;
    int color;
    int col;            /* visible columns on the current line */
    int in_escape;
    int interactive;    /* erase to the end of each line */
};

static void put(struct frame *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\n') {
            if (f->interactive)
                buf_puts(&f->b, "\x1b[K");
            buf_append(&f->b, "\n", 1);
            f->col = 0;
            continue;
        }
        if (*s == '\x1b')
            f->in_escape = 1;
        if (f->in_escape) {
            buf_append(&f->b, s, 1);
            if (*s == 'm')
                f->in_escape = 0;
            continue;
        }
        if (f->col >= f->width)
            continue;
        if (((unsigned char)*s & 0xc0) != 0x80)
            f->col++;
        buf_append(&f->b, s, 1);
    }
}

static void putf(struct frame *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void putf(struct frame *f, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    put(f, line);
}

static void paint(struct frame *f, const char *sgr)
{
    if (f->color)
        putf(f, "\x1b[%sm", sgr);
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static double num(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

static void fmt_seconds(char *out, size_t n, double s)
{
    if (s < 60)
        snprintf(out, n, "%.1fs", s);
    else if (s < 3600)
        snprintf(out, n, "%.1fm", s / 60);
    else
        snprintf(out, n, "%.1fh", s / 3600);
}

static void render_gpus(struct frame *f, const json_t *gpus)
{
    paint(f, "1");
    putf(f, "%-18s %-11s %5s %5s %6s %-15s %-22s %s\n", "GPU", "STATE", "TEMP", "UTIL", "POWER",
         "VRAM", "MODELS", "JOB");
    paint(f, "0");
    size_t i;
    const json_t *g;
    json_array_foreach(gpus, i, g) {
        const char *state = str(g, "state");
        putf(f, "%-18.18s ", str(g, "id"));
        paint(f, !strcmp(state, "ready") ? "32" : !strcmp(state, "warming") ? "36" : "31");
        putf(f, "%-11.11s ", state);
        paint(f, "0");
        double t = num(g, "temp_c");
        paint(f, t >= 80 ? "31" : t >= 65 ? "33" : "32");
        putf(f, "%4.0fC ", t);
        paint(f, "0");
        putf(f, "%4.0f%% %5.0fW %5.1f/%-5.1fGB   ", num(g, "util_pct"), num(g, "power_w"),
             num(g, "vram_used_mb") / 1024.0, num(g, "vram_total_mb") / 1024.0);
        char models[256] = "";
        size_t k;
        const json_t *m;
        json_array_foreach(json_object_get(g, "models"), k, m) {
            size_t used = strlen(models);
            snprintf(models + used, sizeof models - used, "%s%s", k ? "," : "", str(m, "name"));
        }
        putf(f, "%-22.22s ", models[0] ? models : "-");
        const json_t *jobs = json_object_get(g, "jobs");
        if (json_array_size(jobs) == 0) {
            put(f, "idle\n");
            continue;
        }
        const json_t *j;
        json_array_foreach(jobs, k, j) {
            if (k)
                putf(f, "%-90s", "");
            const char *id = str(j, "id");
            if (*id)
                putf(f, "#%s %s/%s", id, str(j, "capability"), str(j, "model"));
            else
                put(f, "(another tenant's job)");
            putf(f, " %s %.0f%%\n", str(j, "phase"), 100 * num(j, "progress"));
        }
    }
}

static void render_queues(struct frame *f, const json_t *queues)
{
    paint(f, "1");
    putf(f, "%-24s %-12s %7s %8s %9s\n", "QUEUE", "LANE", "QUEUED", "RUNNING", "BACKLOG");
    paint(f, "0");
    if (json_array_size(queues) == 0)
        put(f, "(nothing queued or running)\n");
    size_t i;
    const json_t *q;
    json_array_foreach(queues, i, q) {
        char backlog[32];
        fmt_seconds(backlog, sizeof backlog, num(q, "backlog_s"));
        putf(f, "%-24.24s %-12s %7.0f %8.0f %9s\n", str(q, "capability"), str(q, "lane"),
             num(q, "queued"), num(q, "running"), backlog);
    }
}

static void render_decisions(struct frame *f, const json_t *decisions)
{
    paint(f, "1");
    put(f, "RECENT DECISIONS\n");
    paint(f, "0");
    if (json_array_size(decisions) == 0)
        put(f, "(no placement yet)\n");
    size_t i;
    const json_t *d;
    json_array_foreach(decisions, i, d) {
        if (i == TOP_DECISIONS)
            break;
        time_t t = (time_t)(num(d, "time_ms") / 1000);
        struct tm tm;
        char when[16];
        localtime_r(&t, &tm);
        strftime(when, sizeof when, "%H:%M:%S", &tm);
        putf(f, "%s  job %s -> %s  (%s, est %.1fs)  %s\n", when, str(d, "job"), str(d, "worker"),
             json_is_true(json_object_get(d, "warm")) ? "warm" : "cold", num(d, "score_s"),
             str(d, "reason"));
    }
}

static void render_frame(struct frame *f, const struct cli *c, const json_t *v)
{
    const json_t *gpus = json_object_get(v, "gpus");
    const json_t *tot = json_object_get(v, "totals");
    size_t busy = 0, i;
    const json_t *g;
    json_array_foreach(gpus, i, g) busy += json_array_size(json_object_get(g, "jobs")) > 0;
    time_t now = time(NULL);
    struct tm tm;
    char clock[16], backlog[32];
    localtime_r(&now, &tm);
    strftime(clock, sizeof clock, "%H:%M:%S", &tm);
    fmt_seconds(backlog, sizeof backlog, num(tot, "backlog_s"));
    paint(f, "1");
    putf(f, "gpuq top  %.200s  (%s view)  %s", c->url, str(v, "scope"), clock);
    paint(f, "0");
    put(f, f->interactive ? "   q: quit\n" : "\n");
    putf(f, "GPUs %zu (%zu busy)   queued %.0f   running %.0f   backlog %s GPU\n\n",
         json_array_size(gpus), busy, num(tot, "queued"), num(tot, "running"), backlog);
    render_gpus(f, gpus);
    put(f, "\n");
    render_queues(f, json_object_get(v, "queues"));
    put(f, "\n");
    render_decisions(f, json_object_get(v, "decisions"));
}

/* GET /v1/fleet; on failure *why says so (the interactive screen shows it). */
static json_t *fetch(struct cli *c, char *why, size_t n)
{
    struct client_resp r;
    client_resp_init(&r);
    json_t *v = NULL;
    why[0] = '\0';
    if (client_request(&c->http, c->cmd, "GET", "/v1/fleet", NULL, 10, &r)) {
        snprintf(why, n, "cannot reach %.200s", c->url);
    } else if (r.status != 200) {
        json_t *e = client_json(c->cmd, &r);
        const json_t *err = json_object_get(e, "error");
        snprintf(why, n, "HTTP %ld: %s", r.status, str(err, "message"));
        json_decref(e);
    } else {
        v = client_json(c->cmd, &r);
        if (!v)
            snprintf(why, n, "the answer is not JSON");
    }
    client_resp_fini(&r);
    return v;
}

static int top_once(struct cli *c)
{
    char why[300];
    json_t *v = fetch(c, why, sizeof why);
    if (!v) {
        fprintf(stderr, "gpuq top: %s\n", why);
        return CLI_EREFUSED;
    }
    if (c->json) {
        cli_print_json(v);
    } else {
        struct frame f = {.width = isatty(STDOUT_FILENO) ? term_width() : 1000,
                          .color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR")};
        buf_init(&f.b);
        render_frame(&f, c, v);
        fwrite(f.b.data, 1, f.b.len, stdout);
        buf_fini(&f.b);
    }
    json_decref(v);
    return CLI_OK;
}

/* Waits up to ms for a key; true when it says to leave (q, Q, Ctrl-C, Ctrl-D). */
static int wait_key(int ms)
{
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int n = poll(&p, 1, ms);
    if (n <= 0)
        return 0;
    char keys[32];
    ssize_t got = read(STDIN_FILENO, keys, sizeof keys);
    if (got == 0)
        return 1; /* the terminal went away */
    for (ssize_t i = 0; i < got; i++)
        if (keys[i] == 'q' || keys[i] == 'Q' || keys[i] == 3 || keys[i] == 4)
            return 1;
    return 0;
}

static int top_live(struct cli *c, int interval_ms)
{
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "gpuq top: not a terminal (use --once to print one frame)\n");
        return CLI_EUSAGE;
    }
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: poll wakes */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGWINCH, &sa, NULL);
    if (term_enter()) {
        fprintf(stderr, "gpuq top: cannot set up the terminal: %s\n", strerror(errno));
        return CLI_EUSAGE;
    }
    /* client errors go to stderr: keep them off the screen while we own it. */
    FILE *quiet = fopen("/dev/null", "w");
    int saved_err = dup(STDERR_FILENO);
    if (quiet)
        dup2(fileno(quiet), STDERR_FILENO);
    while (!top_stop) {
        char why[300];
        json_t *v = fetch(c, why, sizeof why);
        struct frame f = {.width = term_width(), .color = !getenv("NO_COLOR"), .interactive = 1};
        buf_init(&f.b);
        buf_puts(&f.b, "\x1b[H");
        if (v)
            render_frame(&f, c, v);
        else
            putf(&f, "gpuq top  %.200s\n\n%s; retrying   q: quit\n", c->url, why);
        buf_puts(&f.b, "\x1b[J");
        ssize_t w = write(STDOUT_FILENO, f.b.data, f.b.len);
        (void)w;
        buf_fini(&f.b);
        json_decref(v);
        int64_t left = interval_ms;
        while (left > 0 && !top_stop && !top_resized) {
            int step = left > 200 ? 200 : (int)left;
            if (wait_key(step))
                top_stop = 1;
            left -= step;
        }
        top_resized = 0;
    }
    term_restore();
    if (saved_err >= 0) {
        dup2(saved_err, STDERR_FILENO);
        close(saved_err);
    }
    if (quiet)
        fclose(quiet);
    return CLI_OK;
}

int cmd_top(int argc, char **argv)
{
    struct cli c = {0};
    c.admin = 1; /* an operator's view: may use DATA/admin.key; a tenant key works too */
    int rc = cli_start(&c, "top", "top [--once] [--interval S]",
                       "Shows the fleet live: GPUs (state, temperature, utilization, VRAM, "
                       "models, the job running and its progress), queues and recent "
                       "placement decisions. q or Ctrl-C quits.",
                       top_opts, argc, argv);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    long long interval = 1;
    if (c.npos) {
        fprintf(stderr, "gpuq top: unexpected argument '%s' (usage: gpuq top [--once])\n",
                c.pos[0]);
        rc = CLI_EUSAGE;
    } else if (opts_given(opts_find(top_opts, "interval")) &&
               opts_int("top", opts_find(top_opts, "interval"), 1, 3600, &interval)) {
        rc = CLI_EUSAGE;
    } else if (opts_given(opts_find(top_opts, "once"))) {
        rc = top_once(&c);
    } else {
        rc = top_live(&c, (int)interval * 1000);
    }
    cli_finish(&c);
    return rc;
}
