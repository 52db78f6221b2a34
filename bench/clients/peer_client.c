/* Load-generator client for the peer brokers pelotari is measured against: Redis pub/sub
 * (pipelined PUBLISH), NATS (pipelined PUB) and ZeroMQ (PUB/SUB through an XSUB/XPUB proxy).
 * It speaks the same JSON-lines agent protocol as `python -m pelotari.harness.agent` and counts
 * with the same fastpath/include/loadstats.h, so every system is measured the same way.
 *
 *   peer_client sub --system redis|nats|zeromq --port P [--subscribers N]
 *   peer_client pub --system redis|nats|zeromq --port P [--pub-id K]
 *
 * Built by `pelotari bench`: cc -O2 -I fastpath/include [-DWITH_ZMQ ... -lzmq]. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <unistd.h>
#ifdef WITH_ZMQ
#include <zmq.h>
#endif
#include "loadstats.h"

enum { REDIS, NATS, ZEROMQ };
#define MAX_SUBS 256
#define BUF (4 << 20)
static const char CHANNEL[] = "bench";

typedef struct {
    int fd;
    void *zsock;
    uint8_t *buf;
    size_t len;
    ls_counter counter;
} conn;

static int system_kind, port, nsubs = 1, pub_id;
static const char *host = "127.0.0.1";
static conn *conns;
#ifdef WITH_ZMQ
static void *zctx;
#endif

static void die(const char *what) {
    printf("{\"error\": \"%s: %s\"}\n", what, strerror(errno));
    fflush(stdout);
    exit(1);
}

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double json_num(const char *line, const char *key, double fallback) {
    char pattern[64];
    snprintf(pattern, sizeof(pattern), "\"%s\":", key);
    const char *p = strstr(line, pattern);
    return p ? strtod(p + strlen(pattern), NULL) : fallback;
}

static void write_all(int fd, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) { struct pollfd pf = {fd, POLLOUT, 0}; poll(&pf, 1, 100); continue; }
            die("write");
        }
        p += w;
        n -= (size_t)w;
    }
}

static int tcp_connect(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) die("connect");
    int one = 1, big = 8 << 20;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    return fd;
}

/* Read until `needle` has arrived (handshakes only). */
static void expect(int fd, const char *needle) {
    char buf[4096];
    size_t len = 0;
    while (len < sizeof(buf) - 1) {
        ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (r <= 0) die("handshake");
        len += (size_t)r;
        buf[len] = 0;
        if (strstr(buf, needle)) return;
    }
    errno = EPROTO;
    die("handshake");
}

/* ---- parsing what subscribers receive ----------------------------------------------------- */

static long parse_int(const uint8_t *p, const uint8_t *end, const uint8_t **next) {
    long v = 0;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    while (p < end && *p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
    *next = p;
    return neg ? -v : v;
}

/* Redis: frames are arrays; "message" frames are *3 $7 message $N channel $N payload. Returns
 * bytes consumed (0: incomplete). */
static size_t redis_frame(conn *c, const uint8_t *p, const uint8_t *end, uint64_t now) {
    const uint8_t *start = p, *q;
    if (p >= end) return 0;
    if (*p != '*') {  /* simple replies (+OK, :n) outside arrays */
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        return nl ? (size_t)(nl + 1 - p) : 0;
    }
    long n = parse_int(p + 1, end, &q);
    if (q + 2 > end) return 0;
    p = q + 2;
    const uint8_t *elem[8];
    long elen[8];
    for (long i = 0; i < n && i < 8; i++) {
        if (p >= end) return 0;
        if (*p == ':') {
            const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl) return 0;
            elem[i] = NULL;
            elen[i] = 0;
            p = nl + 1;
            continue;
        }
        long len = parse_int(p + 1, end, &q);
        if (q + 2 > end || q + 2 + len + 2 > end) return 0;
        elem[i] = q + 2;
        elen[i] = len;
        p = q + 2 + len + 2;
    }
    if (n == 3 && elen[0] == 7 && memcmp(elem[0], "message", 7) == 0)
        ls_counter_record(&c->counter, elem[2], (size_t)elen[2], now);
    return (size_t)(p - start);
}

/* NATS: "MSG subject sid N\r\n<payload>\r\n"; PING must be answered with PONG. */
static size_t nats_frame(conn *c, const uint8_t *p, const uint8_t *end, uint64_t now) {
    const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) return 0;
    if (end - p >= 4 && memcmp(p, "MSG ", 4) == 0) {
        const uint8_t *sp = nl;
        while (sp > p && *sp != ' ') sp--;  /* the last field of the line is the size */
        const uint8_t *q;
        long len = parse_int(sp + 1, nl, &q);
        const uint8_t *payload = nl + 1;
        if (payload + len + 2 > end) return 0;
        ls_counter_record(&c->counter, payload, (size_t)len, now);
        return (size_t)(payload + len + 2 - p);
    }
    if (end - p >= 4 && memcmp(p, "PING", 4) == 0) write_all(c->fd, "PONG\r\n", 6);
    return (size_t)(nl + 1 - p);
}

static void drain(conn *c, uint64_t now) {
    size_t off = 0, used;
    while (off < c->len) {
        used = system_kind == REDIS ? redis_frame(c, c->buf + off, c->buf + c->len, now)
                                    : nats_frame(c, c->buf + off, c->buf + c->len, now);
        if (!used) break;
        off += used;
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
}

/* ---- subscriber ---------------------------------------------------------------------------- */

static void sub_sign_on(void) {
    conns = calloc((size_t)nsubs, sizeof(conn));
    for (int i = 0; i < nsubs; i++) {
        conn *c = &conns[i];
        ls_counter_init(&c->counter);
        c->buf = malloc(BUF);
        if (system_kind == ZEROMQ) {
#ifdef WITH_ZMQ
            char url[64];
            int hwm = 0;  /* no high-water mark: losses are the broker's, not a client setting */
            snprintf(url, sizeof(url), "tcp://%s:%d", host, port);
            c->zsock = zmq_socket(zctx, ZMQ_SUB);
            zmq_setsockopt(c->zsock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
            zmq_setsockopt(c->zsock, ZMQ_SUBSCRIBE, "", 0);
            if (zmq_connect(c->zsock, url) != 0) die("zmq_connect");
#endif
            continue;
        }
        c->fd = tcp_connect();
        if (system_kind == REDIS) {
            write_all(c->fd, "SUBSCRIBE bench\r\n", 17);
            expect(c->fd, ":1\r\n");
        } else {
            expect(c->fd, "INFO");
            const char *hello = "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nSUB bench 1\r\nPING\r\n";
            write_all(c->fd, hello, strlen(hello));
            expect(c->fd, "PONG");
        }
        fcntl(c->fd, F_SETFL, O_NONBLOCK);
    }
    if (system_kind == ZEROMQ) usleep(300000);  /* subscriptions reach the proxy asynchronously */
}

static void sub_measure(double max_duration, double idle) {
    double cpu0 = cpu_now();
    for (int i = 0; i < nsubs; i++) ls_counter_init(&conns[i].counter);
    printf("{\"armed\": true}\n");
    fflush(stdout);
    uint64_t start = ls_now_ns(), deadline = start + (uint64_t)(max_duration * 1e9), last = 0;
    uint64_t idle_ns = (uint64_t)(idle * 1e9), now;
    struct pollfd pfds[MAX_SUBS];
    while (1) {
        now = ls_now_ns();
        if (now >= deadline || (last && now - last > idle_ns)) break;
        int got = 0;
        if (system_kind == ZEROMQ) {
#ifdef WITH_ZMQ
            zmq_pollitem_t items[MAX_SUBS];
            for (int i = 0; i < nsubs; i++) items[i] = (zmq_pollitem_t){conns[i].zsock, 0, ZMQ_POLLIN, 0};
            if (zmq_poll(items, nsubs, 50) <= 0) continue;
            for (int i = 0; i < nsubs; i++) {
                for (int k = 0; k < 4096; k++) {
                    int n = zmq_recv(conns[i].zsock, conns[i].buf, BUF, ZMQ_DONTWAIT);
                    if (n < 0) break;
                    now = ls_now_ns();
                    ls_counter_record(&conns[i].counter, conns[i].buf, (size_t)n, now);
                    got = 1;
                }
            }
#endif
        } else {
            for (int i = 0; i < nsubs; i++) pfds[i] = (struct pollfd){conns[i].fd, POLLIN, 0};
            if (poll(pfds, (nfds_t)nsubs, 50) <= 0) continue;
            for (int i = 0; i < nsubs; i++) {
                if (!(pfds[i].revents & POLLIN)) continue;
                conn *c = &conns[i];
                ssize_t r;
                while ((r = read(c->fd, c->buf + c->len, BUF - c->len)) > 0) {
                    c->len += (size_t)r;
                    now = ls_now_ns();
                    drain(c, now);
                    got = 1;
                }
            }
        }
        if (got) last = ls_now_ns();
    }
    ls_histogram h;
    ls_hist_init(&h);
    uint64_t unique = 0, dups = 0, reord = 0;
    for (int i = 0; i < nsubs; i++) {
        for (int p = 0; p < LS_MAX_PUBLISHERS; p++) {
            unique += conns[i].counter.streams[p].unique;
            dups += conns[i].counter.streams[p].duplicates;
            reord += conns[i].counter.streams[p].reordered;
        }
        ls_hist_merge(&h, &conns[i].counter.latency);
    }
    printf("{\"unique\": %llu, \"duplicates\": %llu, \"reordered\": %llu, \"cpu\": %.6f, "
           "\"active\": %.6f, "
           "\"latency\": {\"count\": %llu, \"mean_ns\": %.1f, \"p50_ns\": %llu, \"p90_ns\": %llu, "
           "\"p99_ns\": %llu, \"max_ns\": %llu}}\n",
           (unsigned long long)unique, (unsigned long long)dups, (unsigned long long)reord,
           cpu_now() - cpu0, last ? (last - start) / 1e9 : 0.0, (unsigned long long)h.total, h.total ? h.sum / h.total : 0.0,
           (unsigned long long)ls_hist_quantile(&h, 0.5), (unsigned long long)ls_hist_quantile(&h, 0.9),
           (unsigned long long)ls_hist_quantile(&h, 0.99), (unsigned long long)(h.total ? h.max : 0));
    fflush(stdout);
}

/* ---- publisher ----------------------------------------------------------------------------- */

static int pub_fd;
static void *pub_zsock;

static void pub_sign_on(void) {
    if (system_kind == ZEROMQ) {
#ifdef WITH_ZMQ
        char url[64];
        int hwm = 0;
        snprintf(url, sizeof(url), "tcp://%s:%d", host, port);
        pub_zsock = zmq_socket(zctx, ZMQ_PUB);
        zmq_setsockopt(pub_zsock, ZMQ_SNDHWM, &hwm, sizeof(hwm));
        if (zmq_connect(pub_zsock, url) != 0) die("zmq_connect");
        usleep(200000);
#endif
        return;
    }
    pub_fd = tcp_connect();
    if (system_kind == NATS) {
        expect(pub_fd, "INFO");
        const char *hello = "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPING\r\n";
        write_all(pub_fd, hello, strlen(hello));
        expect(pub_fd, "PONG");
    }
    fcntl(pub_fd, F_SETFL, O_NONBLOCK);
}

/* Replies (Redis ":n", NATS PING) are read and dropped so the connection never stalls. */
static void pub_discard_replies(void) {
    static char sink[65536];
    ssize_t r;
    while ((r = read(pub_fd, sink, sizeof(sink))) > 0)
        if (system_kind == NATS && memmem(sink, (size_t)r, "PING", 4)) write_all(pub_fd, "PONG\r\n", 6);
}

static void pub_publish(size_t payload, double duration, double rate) {
    double cpu0 = cpu_now();
    enum { BATCH = 64 };
    char head[64];
    int head_len = system_kind == REDIS
        ? snprintf(head, sizeof(head), "*3\r\n$7\r\nPUBLISH\r\n$5\r\n%s\r\n$%zu\r\n", CHANNEL, payload)
        : snprintf(head, sizeof(head), "PUB %s %zu\r\n", CHANNEL, payload);
    size_t frame = (system_kind == ZEROMQ ? 0 : (size_t)head_len + 2) + payload;
    uint8_t *batch = calloc(BATCH, frame);
    for (int i = 0; i < BATCH && system_kind != ZEROMQ; i++) {
        memcpy(batch + i * frame, head, (size_t)head_len);
        memcpy(batch + i * frame + head_len + payload, "\r\n", 2);
    }
    size_t off = system_kind == ZEROMQ ? 0 : (size_t)head_len;
    uint64_t sent = 0, start = ls_now_ns(), deadline = start + (uint64_t)(duration * 1e9), now;
    double interval = rate > 0 ? 1e9 / rate : 0;
    while ((now = ls_now_ns()) < deadline) {
        uint64_t n = BATCH;
        if (rate > 0) {
            uint64_t due = (uint64_t)((now - start) / interval) + 1;
            if (due <= sent) {
                int64_t ahead = (int64_t)(sent * interval) - (int64_t)(now - start);
                struct timespec ts = {0, ahead > 1000 ? ahead : 1000};
                if (ts.tv_nsec >= 1000000000) { ts.tv_sec = ts.tv_nsec / 1000000000; ts.tv_nsec %= 1000000000; }
                nanosleep(&ts, NULL);
                continue;
            }
            if (due - sent < n) n = due - sent;
        }
        for (uint64_t i = 0; i < n; i++) ls_stamp(batch + i * frame + off, (uint16_t)pub_id, sent + i, now);
        if (system_kind == ZEROMQ) {
#ifdef WITH_ZMQ
            for (uint64_t i = 0; i < n; i++) zmq_send(pub_zsock, batch + i * frame, payload, 0);
#endif
        } else {
            write_all(pub_fd, batch, n * frame);
            pub_discard_replies();
        }
        sent += n;
    }
    double elapsed = (ls_now_ns() - start) / 1e9;
    free(batch);
    printf("{\"sent\": %llu, \"elapsed\": %.6f, \"cpu\": %.6f, \"pub_id\": %d}\n",
           (unsigned long long)sent, elapsed, cpu_now() - cpu0, pub_id);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: peer_client sub|pub --system S --port P ...\n"); return 2; }
    int is_sub = strcmp(argv[1], "sub") == 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--system"))
            system_kind = !strcmp(argv[i + 1], "redis") ? REDIS : !strcmp(argv[i + 1], "nats") ? NATS : ZEROMQ;
        else if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--host")) host = argv[i + 1];
        else if (!strcmp(argv[i], "--subscribers")) nsubs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pub-id")) pub_id = atoi(argv[i + 1]);
    }
    if (nsubs < 1 || nsubs > MAX_SUBS) { fprintf(stderr, "1..%d subscribers\n", MAX_SUBS); return 2; }
#ifdef WITH_ZMQ
    zctx = zmq_ctx_new();
#else
    if (system_kind == ZEROMQ) { printf("{\"error\": \"built without ZeroMQ\"}\n"); return 1; }
#endif
    if (is_sub) sub_sign_on(); else pub_sign_on();
    printf("{\"ready\": true}\n");
    fflush(stdout);
    char line[4096];
    while (fgets(line, sizeof(line), stdin)) {
        if (strstr(line, "\"quit\"")) break;
        if (is_sub && strstr(line, "\"measure\""))
            sub_measure(json_num(line, "max_duration", 30.0), json_num(line, "idle", 0.5));
        else if (!is_sub && strstr(line, "\"publish\""))
            pub_publish((size_t)json_num(line, "payload_size", 16), json_num(line, "duration", 1.0),
                        json_num(line, "rate", 0.0));
    }
    return 0;
}
