/* Minimal C reference fyrehose backbone: the per-datagram physical limit the pelotari backbone
 * is measured against. recvmmsg in, stamp a sequence, sendmmsg the DELIVER to each subscriber
 * (the PUSH is stamped into a DELIVER in place, one iovec, as pelotari does). With --gso, all DELIVERs of one
 * received batch go to each subscriber in one sendmsg with UDP_SEGMENT (same datagrams on
 * the wire). KEEPALIVEs are acked and subscribe for 5 s (NOSUBSCRIBE signs off); REQUESTs
 * are ignored.
 *
 *   cc -O2 -o fyrehose_ref fyrehose_ref.c
 *   fyrehose_ref PORT [--gso]        (binds 127.0.0.1:PORT; SIGINT/SIGTERM stop it)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

#define BATCH 64
#define SLOT 65536
#define MAX_SUBS 1024
#define OUT_CAP 1024
#define GSO_MAX_SEGS 64
#define WINDOW_NS 5000000000ll

struct sub { struct sockaddr_in sa; int64_t expires; };

static volatile sig_atomic_t stopping;
static struct sub subs[MAX_SUBS];
static int nsubs;
static uint8_t arena[BATCH][SLOT];
static uint8_t hdr[BATCH][32];
static struct iovec in_iov[BATCH], out_iov[BATCH][2];
static struct sockaddr_in src[BATCH];
static struct mmsghdr in_msgs[BATCH], out_msgs[OUT_CAP];
static int nout;
static uint64_t pushes, delivers;

static void on_signal(int sig) { (void)sig; stopping = 1; }

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void flush(int fd) {
    int off = 0;
    while (off < nout) {
        int rc = sendmmsg(fd, out_msgs + off, nout - off, 0);
        if (rc > 0) off += rc;
        else if (rc < 0 && errno == EINTR) continue;
        else off++;
    }
    nout = 0;
}

static void queue(int fd, struct sockaddr_in *dst, struct iovec *iov, int iovlen) {
    struct msghdr *m = &out_msgs[nout].msg_hdr;
    memset(m, 0, sizeof(*m));
    m->msg_name = dst;
    m->msg_namelen = sizeof(*dst);
    m->msg_iov = iov;
    m->msg_iovlen = iovlen;
    if (++nout == OUT_CAP) flush(fd);
}

static void keepalive(int fd, int i, int64_t now) {
    struct sockaddr_in sa = src[i];
    int k;
    for (k = 0; k < nsubs; k++)
        if (subs[k].sa.sin_addr.s_addr == sa.sin_addr.s_addr && subs[k].sa.sin_port == sa.sin_port) break;
    if (k == nsubs) {
        if (nsubs == MAX_SUBS) return;
        subs[nsubs++].sa = sa;
    }
    /* FLAGS is bytes 7..12; NOSUBSCRIBE (0x1) in the last byte signs the client off. */
    subs[k].expires = (arena[i][12] & 0x1) ? 0 : now + WINDOW_NS;
    hdr[i][0] = 0x20;
    out_iov[i][0] = (struct iovec){hdr[i], 1};
    out_iov[i][1] = (struct iovec){arena[i] + 13, 16};
    queue(fd, &src[i], out_iov[i], 2);
}

static uint64_t seq;

static void stamp(int i, size_t len) {
    (void)len;  /* a PUSH has a DELIVER's layout: type byte and UNUSED -> SEQUENCE */
    arena[i][0] = 0x01;
    for (int b = 0; b < 6; b++) arena[i][3 + b] = (uint8_t)(seq >> (8 * (5 - b)));
    seq = (seq + 1) & ((1ull << 48) - 1);
    pushes++;
}

/* Plain fan-out: one datagram per (message, subscriber). */
static void fan_out(int fd, int i, size_t len, int64_t now) {
    stamp(i, len);
    out_iov[i][0] = (struct iovec){arena[i], 9 + len};
    for (int k = 0; k < nsubs; k++)
        if (subs[k].expires > now) { queue(fd, &subs[k].sa, out_iov[i], 1); delivers++; }
}

/* GSO fan-out: the batch's PUSHes of equal size go to each subscriber in one sendmsg. */
static struct iovec gso_iov[GSO_MAX_SEGS];
static void gso_send(int fd, const int *idx, int n, size_t seg, int64_t now) {
    char control[CMSG_SPACE(sizeof(uint16_t))];
    for (int j = 0; j < n; j++) gso_iov[j] = (struct iovec){arena[idx[j]], seg};
    for (int k = 0; k < nsubs; k++) {
        if (subs[k].expires <= now) continue;
        struct msghdr m = {0};
        m.msg_name = &subs[k].sa;
        m.msg_namelen = sizeof(subs[k].sa);
        m.msg_iov = gso_iov;
        m.msg_iovlen = n;
        if (n > 1) {
            m.msg_control = control;
            m.msg_controllen = sizeof(control);
            struct cmsghdr *c = CMSG_FIRSTHDR(&m);
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            *(uint16_t *)CMSG_DATA(c) = (uint16_t)seg;
        }
        while (sendmsg(fd, &m, 0) < 0 && errno == EINTR) {}
        delivers += n;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s PORT [--gso]\n", argv[0]); return 2; }
    int gso = argc > 2 && strcmp(argv[2], "--gso") == 0;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int buf = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof(buf));
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) { perror("bind"); return 1; }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct timeval tv = {0, 200000};  /* wake up to notice a signal */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    fprintf(stderr, "fyrehose_ref listening on 127.0.0.1:%s%s\n", argv[1], gso ? " (GSO)" : "");
    for (int i = 0; i < BATCH; i++) {
        in_iov[i] = (struct iovec){arena[i], SLOT};
        in_msgs[i].msg_hdr.msg_iov = &in_iov[i];
        in_msgs[i].msg_hdr.msg_iovlen = 1;
    }
    while (!stopping) {
        for (int i = 0; i < BATCH; i++) {
            in_msgs[i].msg_hdr.msg_name = &src[i];
            in_msgs[i].msg_hdr.msg_namelen = sizeof(src[i]);
        }
        int n = recvmmsg(fd, in_msgs, BATCH, MSG_WAITFORONE, NULL);
        if (n <= 0) continue;
        int64_t now = now_ns();
        int run[GSO_MAX_SEGS], nrun = 0;
        size_t run_len = 0;
        for (int i = 0; i < n; i++) {
            uint8_t *p = arena[i];
            size_t len = in_msgs[i].msg_len;
            if (len >= 9 && p[0] == 0x02 && (size_t)((p[1] << 8) | p[2]) == len - 9) {
                if (!gso) { fan_out(fd, i, len - 9, now); continue; }
                if (nrun && (len != run_len || nrun == GSO_MAX_SEGS || (nrun + 1) * len > 65000)) {
                    gso_send(fd, run, nrun, run_len, now);
                    nrun = 0;
                }
                stamp(i, len - 9);
                run[nrun++] = i;
                run_len = len;
            } else if (len == 29 && p[0] == 0x10) {
                keepalive(fd, i, now);
            }
        }
        if (nrun) gso_send(fd, run, nrun, run_len, now);
        flush(fd);
    }
    fprintf(stderr, "fyrehose_ref stopped: %llu pushes, %llu delivers\n",
            (unsigned long long)pushes, (unsigned long long)delivers);
    return 0;
}
