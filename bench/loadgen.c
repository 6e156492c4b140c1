/* loadgen.c: gpuq-loadgen, the load generator of `make bench`. One thread, raw
 * sockets and epoll, many HTTP/1.1 keep-alive connections, each running a
 * closed loop against a running gpuqd:
 *
 *   --mode submit   POST /v1/jobs, and again as soon as the answer comes:
 *                   durable submits/s and submit latency (a 2xx means the job
 *                   is committed).
 *   --mode e2e      POST /v1/jobs, then GET /v1/jobs/{id}?wait=&until=end on
 *                   the same connection until the job has ended (a head
 *                   without until answers each change: the loop covers it):
 *                   submit→succeeded
 *                   latency (one connection = low load) and completed jobs/s
 *                   (many connections = saturation). Needs an agent.
 *   --mode e2e1     the same with one request a job: POST /v1/jobs?wait=,
 *                   answered once the job has ended (then GET as above if
 *                   the wait ran out, or on a head without it).
 *
 * Bounded in count and time: it stops after --duration seconds of measurement
 * (after --warmup) or --max-jobs finished jobs, whichever comes first, and
 * abandons what is in flight then. Only what finishes inside the measurement
 * window is counted. Prints a report, or key=value lines with --kv. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_resp.h"
#include "lat.h"
#include "common/alloc.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"

#define MAX_CONNECTIONS 4096
#define MAX_INPUT (1u << 20)
#define POLL_WAIT_S 30

enum mode { MODE_SUBMIT, MODE_E2E, MODE_E2E1 };
enum op { OP_SUBMIT, OP_POLL };

struct config {
    char host[256];
    char port[16];
    const char *key;
    enum mode mode;
    int connections;
    double duration_s;
    double warmup_s;
    long long max_jobs;
    char *body;        /* the POST /v1/jobs body, owned */
    int kv;
    int idem;          /* each submit carries a new Idempotency-Key */
};

/* A connection the server closed before answering waits this long to reopen. */
#define REOPEN_DELAY_NS (100 * NS_PER_MS)

/* One connection. Invariant: at most one request in flight (no pipelining);
 * out[out_off..out.len) is what remains to be sent of it. */
struct conn {
    int fd;
    int connected;
    int want_out;       /* EPOLLOUT is registered */
    enum op op;
    struct buf out;
    size_t out_off;
    char *in;
    size_t in_len, in_cap;
    int64_t t_req;      /* when the current request was started */
    int64_t t_submit;   /* when the current job's submit was started */
    char job_id[64];
    int answered;       /* a response came on this socket */
    int64_t reopen_at;  /* parked (refused by the server) until then; 0: not parked */
};

struct stats {
    uint64_t submits_ok;      /* 2xx submits finished inside the window */
    uint64_t submits_refused; /* non-2xx submits (any time) */
    uint64_t refused_429;
    uint64_t jobs_succeeded;  /* e2e: succeeded inside the window */
    uint64_t jobs_failed;     /* e2e: failed or cancelled */
    uint64_t refused_conns; /* closed by the server before any answer (its connection limits) */
    uint64_t reconnects;
    uint64_t errors;          /* transport or parse errors */
    uint64_t finished_total;  /* jobs finished, warm-up included (for --max-jobs) */
    int last_status;
    char last_error[256];
    struct lat submit_lat;
    struct lat e2e_lat;
};

static struct config cfg;
static struct stats st;
static int epfd;
static int64_t t_window_start, t_window_end;
static char *submit_head;     /* request line and headers of a submit, without length */
static unsigned long long idem_seq; /* --idem: the submits' keys so far */
static struct addrinfo *addr;

static int in_window(int64_t t)
{
    return t >= t_window_start && t < t_window_end;
}

static const char *mode_name(void)
{
    return cfg.mode == MODE_SUBMIT ? "submit" : cfg.mode == MODE_E2E ? "e2e" : "e2e1";
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpuq-loadgen --url http://HOST:PORT --key KEY [--mode submit|e2e|e2e1]\n"
            "         [--connections N] [--duration S] [--warmup S] [--max-jobs N]\n"
            "         [--body JSON] [--idem] [--kv]\n"
            "  --mode submit   closed-loop submits: durable submits/s, submit latency (default)\n"
            "  --mode e2e      submit, then long-poll until the job ends: submit->succeeded\n"
            "                  latency and completed jobs/s (needs a worker)\n"
            "  --mode e2e1     as e2e, one request a job: POST /v1/jobs?wait= answers at the end\n"
            "  --connections   keep-alive connections, 1..%d (default 64)\n"
            "  --duration      seconds measured (default 10), after --warmup seconds (default 1)\n"
            "  --max-jobs      stop after this many finished jobs (default: no limit)\n"
            "  --body          the POST /v1/jobs body (default: a small image.fast job)\n"
            "  --idem          every submit with a new Idempotency-Key (its first use)\n"
            "  --kv            print key=value lines for scripts\n",
            MAX_CONNECTIONS);
}

static int parse_url(const char *url)
{
    if (strncmp(url, "http://", 7) != 0)
        return GPUQ_EINVAL;
    const char *h = url + 7;
    const char *colon = strrchr(h, ':');
    if (!colon)
        return GPUQ_EINVAL;
    size_t hl = (size_t)(colon - h);
    if (hl == 0 || hl >= sizeof cfg.host)
        return GPUQ_EINVAL;
    memcpy(cfg.host, h, hl);
    cfg.host[hl] = '\0';
    size_t pl = strcspn(colon + 1, "/");
    if (pl == 0 || pl >= sizeof cfg.port)
        return GPUQ_EINVAL;
    memcpy(cfg.port, colon + 1, pl);
    cfg.port[pl] = '\0';
    return 0;
}

static int parse_args(int argc, char **argv)
{
    const char *url = NULL;
    cfg.mode = MODE_SUBMIT;
    cfg.connections = 64;
    cfg.duration_s = 10;
    cfg.warmup_s = 1;
    cfg.max_jobs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--kv") == 0) {
            cfg.kv = 1;
            continue;
        } else if (strcmp(a, "--idem") == 0) {
            cfg.idem = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "gpuq-loadgen: %s needs a value\n", a);
            return GPUQ_EINVAL;
        }
        i++;
        char *end = NULL;
        if (strcmp(a, "--url") == 0) {
            url = v;
        } else if (strcmp(a, "--key") == 0) {
            cfg.key = v;
        } else if (strcmp(a, "--mode") == 0) {
            if (strcmp(v, "submit") == 0)
                cfg.mode = MODE_SUBMIT;
            else if (strcmp(v, "e2e") == 0)
                cfg.mode = MODE_E2E;
            else if (strcmp(v, "e2e1") == 0)
                cfg.mode = MODE_E2E1;
            else {
                fprintf(stderr, "gpuq-loadgen: --mode: submit, e2e or e2e1, got '%s'\n", v);
                return GPUQ_EINVAL;
            }
        } else if (strcmp(a, "--connections") == 0) {
            cfg.connections = (int)strtol(v, &end, 10);
            if (*end || cfg.connections < 1 || cfg.connections > MAX_CONNECTIONS) {
                fprintf(stderr, "gpuq-loadgen: --connections: 1..%d\n", MAX_CONNECTIONS);
                return GPUQ_EINVAL;
            }
        } else if (strcmp(a, "--duration") == 0 || strcmp(a, "--warmup") == 0) {
            double d = strtod(v, &end);
            if (*end || d < 0 || d > 3600 || (d == 0 && a[2] == 'd')) {
                fprintf(stderr, "gpuq-loadgen: %s: seconds in (0, 3600]\n", a);
                return GPUQ_EINVAL;
            }
            *(a[2] == 'd' ? &cfg.duration_s : &cfg.warmup_s) = d;
        } else if (strcmp(a, "--max-jobs") == 0) {
            cfg.max_jobs = strtoll(v, &end, 10);
            if (*end || cfg.max_jobs < 1) {
                fprintf(stderr, "gpuq-loadgen: --max-jobs: a positive count\n");
                return GPUQ_EINVAL;
            }
        } else if (strcmp(a, "--body") == 0) {
            free(cfg.body);
            cfg.body = xstrdup(v);
        } else {
            fprintf(stderr, "gpuq-loadgen: unknown flag '%s'\n", a);
            usage(stderr);
            return GPUQ_EINVAL;
        }
    }
    if (!url || parse_url(url) < 0) {
        fprintf(stderr, "gpuq-loadgen: --url http://HOST:PORT is required\n");
        return GPUQ_EINVAL;
    }
    if (!cfg.key || !*cfg.key) {
        fprintf(stderr, "gpuq-loadgen: --key is required (a tenant key)\n");
        return GPUQ_EINVAL;
    }
    if (!cfg.body)
        cfg.body = xstrdup("{\"capability\":\"image.fast\",\"params\":{\"prompt\":\"a fox in the "
                           "snow\",\"width\":512,\"height\":512,\"steps\":4,\"seed\":7,"
                           "\"sim_ms\":0}}");
    return 0;
}

static void set_error(const char *what)
{
    st.errors++;
    snprintf(st.last_error, sizeof st.last_error, "%s", what);
}

static void conn_watch(struct conn *c, int want_out)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->want_out = want_out;
}

static int conn_open(struct conn *c)
{
    c->fd = socket(addr->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return GPUQ_EIO;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->connected = 0;
    if (connect(c->fd, addr->ai_addr, addr->ai_addrlen) < 0 && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return GPUQ_EIO;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        close(c->fd);
        c->fd = -1;
        return GPUQ_EIO;
    }
    c->want_out = 1;
    c->in_len = 0;
    c->answered = 0;
    return 0;
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
}

/* Writes what remains of the request; registers EPOLLOUT if it did not all go. */
static int conn_flush(struct conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!c->want_out)
                    conn_watch(c, 1);
                return 0;
            }
            if (errno == EINTR)
                continue;
            return GPUQ_EIO;
        }
        c->out_off += (size_t)n;
    }
    if (c->want_out)
        conn_watch(c, 0);
    return 0;
}

static int conn_send_submit(struct conn *c)
{
    buf_reset(&c->out);
    buf_puts(&c->out, submit_head);
    if (cfg.idem) /* the process id and start time keep keys of other runs apart */
        buf_printf(&c->out, "Idempotency-Key: lg-%d-%lld-%llu\r\n", (int)getpid(),
                   (long long)t_window_start, ++idem_seq);
    buf_printf(&c->out, "Content-Length: %zu\r\n\r\n%s", strlen(cfg.body), cfg.body);
    c->out_off = 0;
    c->op = OP_SUBMIT;
    c->t_req = c->t_submit = clock_mono_ns();
    c->job_id[0] = '\0';
    return c->connected ? conn_flush(c) : 0;
}

static int conn_send_poll(struct conn *c)
{
    buf_reset(&c->out);
    buf_printf(&c->out,
               "GET /v1/jobs/%s?wait=%d&until=end HTTP/1.1\r\nHost: %s:%s\r\n"
               "Authorization: Bearer %s\r\n\r\n",
               c->job_id, POLL_WAIT_S, cfg.host, cfg.port, cfg.key);
    c->out_off = 0;
    c->op = OP_POLL;
    c->t_req = clock_mono_ns();
    return conn_flush(c);
}

/* Copies the string value of top-level-looking "key":"value" (or a number)
 * from a JSON body into out. Good enough for the job object, whose first
 * "id" and "state" are its own. */
static int json_scan(const char *body, size_t len, const char *key, char *out, size_t outlen)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = memmem(body, len, pat, strlen(pat));
    if (!p)
        return GPUQ_ENOENT;
    const char *end = body + len;
    p += strlen(pat);
    while (p < end && (*p == ' ' || *p == ':'))
        p++;
    int quoted = p < end && *p == '"';
    p += quoted;
    size_t n = 0;
    while (p < end && n + 1 < outlen &&
           (quoted ? *p != '"' : (*p != ',' && *p != '}' && *p != ' ')))
        out[n++] = *p++;
    out[n] = '\0';
    return n ? 0 : GPUQ_ENOENT;
}

static int job_done(void)
{
    st.finished_total++;
    return cfg.max_jobs > 0 && (long long)st.finished_total >= cfg.max_jobs;
}

/* Handles one complete response; returns 0 to go on, 1 to stop the run, or
 * GPUQ_EIO to drop the connection. */
static int on_response(struct conn *c, const struct http_resp *r)
{
    int64_t now = clock_mono_ns();
    st.last_status = r->status;
    if (c->op == OP_SUBMIT) {
        if (r->status < 200 || r->status >= 300) {
            st.submits_refused++;
            if (r->status == 429)
                st.refused_429++;
            snprintf(st.last_error, sizeof st.last_error, "submit HTTP %d: %.*s", r->status,
                     (int)(r->body_len < 160 ? r->body_len : 160), r->body);
            if (st.submits_refused > 1000 && st.submits_ok == 0)
                return 1; /* nothing works: stop early and report why */
            return conn_send_submit(c);
        }
        if (in_window(now)) {
            st.submits_ok++;
            lat_add(&st.submit_lat, now - c->t_req);
        }
        if (cfg.mode == MODE_SUBMIT)
            return job_done() ? 1 : conn_send_submit(c);
        if (json_scan(r->body, r->body_len, "id", c->job_id, sizeof c->job_id) < 0) {
            set_error("submit answer without an id");
            return conn_send_submit(c);
        }
    } else if (r->status != 200) {
        set_error(r->status == 404 ? "poll answered HTTP 404" : "poll answered non-200");
        return job_done() ? 1 : conn_send_submit(c);
    }
    /* e2e: look at the job's state. */
    char state[32] = "";
    json_scan(r->body, r->body_len, "state", state, sizeof state);
    if (strcmp(state, "succeeded") == 0) {
        if (in_window(now)) {
            st.jobs_succeeded++;
            lat_add(&st.e2e_lat, now - c->t_submit);
        }
        return job_done() ? 1 : conn_send_submit(c);
    }
    if (strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0) {
        st.jobs_failed++;
        return job_done() ? 1 : conn_send_submit(c);
    }
    return conn_send_poll(c);
}

/* Reads what arrived and handles complete responses. */
static int conn_read(struct conn *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < 4096) {
            if (c->in_cap >= MAX_INPUT) {
                set_error("response larger than 1 MiB");
                return GPUQ_EIO;
            }
            c->in_cap = c->in_cap ? c->in_cap * 2 : 16384;
            c->in = xrealloc(c->in, c->in_cap);
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n == 0)
            return GPUQ_EIO; /* the server closed */
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == EINTR)
                continue;
            return GPUQ_EIO;
        }
        c->in_len += (size_t)n;
    }
    for (;;) {
        struct http_resp r;
        http_resp_init(&r);
        int rc = http_resp_parse(c->in, c->in_len, &r);
        if (rc <= 0) {
            http_resp_fini(&r);
            if (rc < 0)
                set_error("malformed response");
            return rc < 0 ? GPUQ_EIO : 0;
        }
        int closing = r.close;
        c->answered = 1;
        int ret = on_response(c, &r);
        size_t used = r.consumed;
        http_resp_fini(&r);
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
        if (ret != 0)
            return ret;
        if (closing)
            return GPUQ_EIO;
    }
}

/* Reopens a dropped connection and starts a fresh job on it. */
static int conn_restart(struct conn *c)
{
    conn_close(c);
    st.reconnects++;
    if (conn_open(c) < 0)
        return GPUQ_EIO;
    return conn_send_submit(c);
}

static int conn_event(struct conn *c, uint32_t events)
{
    if (!c->connected) {
        if (events & (EPOLLERR | EPOLLHUP)) {
            set_error("cannot connect to the server");
            return GPUQ_EIO;
        }
        if (!(events & EPOLLOUT))
            return 0;
        c->connected = 1;
        c->t_req = c->t_submit = clock_mono_ns();
        if (conn_flush(c) < 0)
            return GPUQ_EIO;
    }
    if ((events & EPOLLOUT) && c->out_off < c->out.len && conn_flush(c) < 0)
        return GPUQ_EIO;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        return conn_read(c);
    return 0;
}

static void report(double window_s)
{
    double submit_rate = (double)st.submits_ok / window_s;
    double done_rate = (double)st.jobs_succeeded / window_s;
    double s50 = (double)lat_pct(&st.submit_lat, 50) / 1e6;
    double s99 = (double)lat_pct(&st.submit_lat, 99) / 1e6;
    double s999 = (double)lat_pct(&st.submit_lat, 99.9) / 1e6;
    double e50 = (double)lat_pct(&st.e2e_lat, 50) / 1e6;
    double e99 = (double)lat_pct(&st.e2e_lat, 99) / 1e6;
    if (cfg.kv) {
        printf("mode=%s\nconnections=%d\nwindow_s=%.3f\n", mode_name(),
               cfg.connections, window_s);
        printf("submits_ok=%llu\nsubmits_per_s=%.0f\nsubmit_p50_ms=%.3f\nsubmit_p99_ms=%.3f\n"
               "submit_p999_ms=%.3f\n",
               (unsigned long long)st.submits_ok, submit_rate, s50, s99, s999);
        printf("submits_refused=%llu\nrefused_429=%llu\nerrors=%llu\nreconnects=%llu\n"
               "refused_connections=%llu\n",
               (unsigned long long)st.submits_refused, (unsigned long long)st.refused_429,
               (unsigned long long)st.errors, (unsigned long long)st.reconnects,
               (unsigned long long)st.refused_conns);
        if (cfg.mode != MODE_SUBMIT)
            printf("jobs_succeeded=%llu\njobs_failed=%llu\njobs_per_s=%.0f\ne2e_p50_ms=%.3f\n"
                   "e2e_p99_ms=%.3f\n",
                   (unsigned long long)st.jobs_succeeded, (unsigned long long)st.jobs_failed,
                   done_rate, e50, e99);
        if (st.last_error[0])
            printf("last_error=%s\n", st.last_error);
        return;
    }
    printf("gpuq-loadgen: mode %s, %d connections, %.1f s measured\n",
           mode_name(), cfg.connections, window_s);
    printf("  durable submits      %llu (%.0f/s)\n", (unsigned long long)st.submits_ok,
           submit_rate);
    printf("  submit latency       p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms\n", s50, s99, s999);
    if (cfg.mode != MODE_SUBMIT) {
        printf("  jobs succeeded       %llu (%.0f/s), failed %llu\n",
               (unsigned long long)st.jobs_succeeded, done_rate,
               (unsigned long long)st.jobs_failed);
        printf("  submit->succeeded    p50 %.3f ms, p99 %.3f ms\n", e50, e99);
    }
    if (st.submits_refused || st.errors || st.reconnects)
        printf("  refused %llu (429: %llu), errors %llu, reconnects %llu (%llu connections "
               "closed unanswered)\n",
               (unsigned long long)st.submits_refused, (unsigned long long)st.refused_429,
               (unsigned long long)st.errors, (unsigned long long)st.reconnects,
               (unsigned long long)st.refused_conns);
    if (st.last_error[0])
        printf("  last error: %s\n", st.last_error);
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) < 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int gai = getaddrinfo(cfg.host, cfg.port, &hints, &addr);
    if (gai != 0) {
        fprintf(stderr, "gpuq-loadgen: %s:%s: %s\n", cfg.host, cfg.port, gai_strerror(gai));
        return 2;
    }
    struct buf head;
    buf_init(&head);
    buf_puts(&head, "POST /v1/jobs");
    if (cfg.mode == MODE_E2E1)
        buf_printf(&head, "?wait=%d", POLL_WAIT_S);
    buf_printf(&head,
               " HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n"
               "Content-Type: application/json\r\n",
               cfg.host, cfg.port, cfg.key);
    submit_head = buf_steal(&head);
    lat_init(&st.submit_lat);
    lat_init(&st.e2e_lat);

    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct conn *conns = xcalloc((size_t)cfg.connections, sizeof *conns);
    int64_t t0 = clock_mono_ns();
    t_window_start = t0 + (int64_t)(cfg.warmup_s * 1e9);
    t_window_end = t_window_start + (int64_t)(cfg.duration_s * 1e9);
    int rc = 0;
    for (int i = 0; i < cfg.connections; i++) {
        buf_init(&conns[i].out);
        if (conn_open(&conns[i]) < 0 || conn_send_submit(&conns[i]) < 0) {
            fprintf(stderr, "gpuq-loadgen: cannot open connection %d: %m\n", i);
            rc = 1;
            goto out;
        }
    }
    struct epoll_event evs[256];
    int stop = 0;
    int live = cfg.connections;
    while (!stop && live > 0) {
        int64_t now = clock_mono_ns();
        if (now >= t_window_end)
            break;
        int64_t wake = t_window_end;
        for (int i = 0; i < cfg.connections; i++) {
            struct conn *c = &conns[i];
            if (!c->reopen_at)
                continue;
            if (now < c->reopen_at) {
                wake = c->reopen_at < wake ? c->reopen_at : wake;
                continue;
            }
            c->reopen_at = 0;
            st.reconnects++;
            if (conn_open(c) < 0 || conn_send_submit(c) < 0) {
                conn_close(c);
                live--;
            }
        }
        int timeout_ms = (int)((wake - now) / NS_PER_MS) + 1;
        int n = epoll_wait(epfd, evs, 256, timeout_ms);
        if (n < 0 && errno != EINTR) {
            perror("gpuq-loadgen: epoll_wait");
            rc = 1;
            break;
        }
        for (int i = 0; i < n && !stop; i++) {
            struct conn *c = evs[i].data.ptr;
            int r = conn_event(c, evs[i].events);
            if (r == 1) {
                stop = 1;
            } else if (r < 0) {
                if (c->connected && !c->answered) {
                    /* Closed before any answer: the server's connection limit
                     * (e.g. per address) refused it. Retrying at once would
                     * spin both sides; this connection waits and tries again. */
                    conn_close(c);
                    st.refused_conns++;
                    c->reopen_at = clock_mono_ns() + REOPEN_DELAY_NS;
                } else if (!c->connected || conn_restart(c) < 0) {
                    conn_close(c);
                    live--;
                }
            }
        }
    }
    int64_t t_end = clock_mono_ns();
    if (t_end > t_window_end)
        t_end = t_window_end;
    double window_s = (double)(t_end - t_window_start) / 1e9;
    if (window_s <= 0) {
        fprintf(stderr, "gpuq-loadgen: stopped before the measurement window began (%s)\n",
                st.last_error[0] ? st.last_error : "no error recorded");
        rc = 1;
        goto out;
    }
    report(window_s);
    if ((cfg.mode == MODE_SUBMIT ? st.submits_ok : st.jobs_succeeded) == 0) {
        fprintf(stderr, "gpuq-loadgen: no %s inside the measurement window%s%s\n",
                cfg.mode == MODE_SUBMIT ? "submit succeeded" : "job succeeded",
                st.last_error[0] ? ": " : "", st.last_error);
        rc = 1;
    }
out:
    for (int i = 0; i < cfg.connections; i++) {
        conn_close(&conns[i]);
        buf_fini(&conns[i].out);
        free(conns[i].in);
    }
    free(conns);
    close(epfd);
    freeaddrinfo(addr);
    free(submit_head);
    free(cfg.body);
    lat_fini(&st.submit_lat);
    lat_fini(&st.e2e_lat);
    return rc;
}
