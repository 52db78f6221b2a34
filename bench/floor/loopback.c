/* The loopback floor: one-way latency of a message through the kernel on this machine, with no
 * server in the way. A ping-pong between two processes over UDP or TCP on 127.0.0.1: the
 * parent sends a small message at a fixed rate, the child echoes it, and half of each round
 * trip is one way. Prints one JSON object: p50/p90/p99/max in ns.
 *
 *   loopback udp|tcp COUNT RATE SIZE
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int read_full(int fd, char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s udp|tcp COUNT RATE SIZE\n", argv[0]);
        return 2;
    }
    int tcp = strcmp(argv[1], "tcp") == 0;
    long count = atol(argv[2]);
    double rate = atof(argv[3]);
    size_t size = (size_t)atol(argv[4]);
    if (count < 1 || rate <= 0 || size < 8 || size > 65000) {
        fprintf(stderr, "COUNT >= 1, RATE > 0, 8 <= SIZE <= 65000\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    int listener = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, len) < 0 ||
        getsockname(listener, (struct sockaddr *)&addr, &len) < 0 || (tcp && listen(listener, 1) < 0)) {
        perror("listen");
        return 1;
    }
    char *buf = calloc(1, size);
    pid_t child = fork();
    if (child == 0) { /* the echo */
        if (tcp) {
            int c = accept(listener, NULL, NULL);
            int one = 1;
            setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            while (read_full(c, buf, size) == 0)
                if (write(c, buf, size) != (ssize_t)size) break;
        } else {
            struct sockaddr_in from;
            for (;;) {
                socklen_t fl = sizeof from;
                ssize_t r = recvfrom(listener, buf, size, 0, (struct sockaddr *)&from, &fl);
                if (r <= 0) break;
                if (r == 8 && memcmp(buf, "finished", 8) == 0) break;
                sendto(listener, buf, (size_t)r, 0, (struct sockaddr *)&from, fl);
            }
        }
        _exit(0);
    }
    int s = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
    if (connect(s, (struct sockaddr *)&addr, sizeof addr) < 0) {
        perror("connect");
        kill(child, SIGKILL);
        return 1;
    }
    if (tcp) {
        int one = 1;
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    } else {
        struct timeval tv = {.tv_sec = 1};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    uint64_t *one_way = calloc((size_t)count, sizeof *one_way);
    long got = 0, lost = 0;
    uint64_t gap = (uint64_t)(1e9 / rate), next = now_ns();
    for (long i = 0; i < count; i++) {
        while (now_ns() < next) {} /* spin: a sleep's wake-up would be measured too */
        next += gap;
        uint64_t t0 = now_ns();
        memcpy(buf, &t0, sizeof t0);
        if (write(s, buf, size) != (ssize_t)size) { lost++; continue; }
        if (tcp ? read_full(s, buf, size) : (read(s, buf, size) <= 0 ? -1 : 0)) { lost++; continue; }
        one_way[got++] = (now_ns() - t0) / 2;
    }
    if (!tcp) { (void)!write(s, "finished", 8); }
    close(s);
    kill(child, SIGTERM);
    waitpid(child, NULL, 0);
    if (!got) {
        fprintf(stderr, "no answer\n");
        return 1;
    }
    qsort(one_way, (size_t)got, sizeof *one_way, cmp);
#define AT(q) one_way[(size_t)((got - 1) * (q))]
    printf("{\"transport\": \"%s\", \"count\": %ld, \"lost\": %ld, \"rate\": %.0f, \"size\": %zu, "
           "\"p50_ns\": %llu, \"p90_ns\": %llu, \"p99_ns\": %llu, \"max_ns\": %llu}\n",
           tcp ? "tcp" : "udp", got, lost, rate, size, (unsigned long long)AT(0.5),
           (unsigned long long)AT(0.9), (unsigned long long)AT(0.99),
           (unsigned long long)one_way[got - 1]);
    return 0;
}
