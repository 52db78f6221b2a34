/*
 * bindshim.so - LD_PRELOAD helper for running the Java bully clients on one
 * host, each on its own 127.0.0.x address. It changes nothing in their code:
 *
 *  - bind() to the wildcard address (0.0.0.0 or ::) is turned into a bind to
 *    $BIND_IP (same port), so e.g. `new ServerSocket(3333)` listens on
 *    $BIND_IP:3333 only and several clients can each have port 3333.
 *  - connect() of a still unbound TCP socket to a 127.0.0.0/8 destination first
 *    binds the socket to $BIND_IP:0, so the peer sees the connection coming
 *    from the address the client announces (not from 127.0.0.1, the kernel's
 *    default source for loopback).
 *
 * Without $BIND_IP set it does nothing. build.sh builds it:
 *   gcc -shared -fPIC -O2 -o bindshim.so bindshim.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int (*real_bind)(int, const struct sockaddr *, socklen_t);
static int (*real_connect)(int, const struct sockaddr *, socklen_t);

static int bind_ip(struct in_addr *out) {
    const char *s = getenv("BIND_IP");
    if (!s || !*s) return 0;
    return inet_pton(AF_INET, s, out) == 1;
}

static void init(void) {
    if (!real_bind) real_bind = dlsym(RTLD_NEXT, "bind");
    if (!real_connect) real_connect = dlsym(RTLD_NEXT, "connect");
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    init();
    struct in_addr ip;
    if (addr && bind_ip(&ip)) {
        if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
            struct sockaddr_in a;
            memcpy(&a, addr, sizeof a);
            if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
                a.sin_addr = ip;
                return real_bind(fd, (struct sockaddr *)&a, sizeof a);
            }
        } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
            struct sockaddr_in6 a;
            memcpy(&a, addr, sizeof a);
            if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) {
                memset(&a.sin6_addr, 0, sizeof a.sin6_addr);
                a.sin6_addr.s6_addr[10] = 0xff;
                a.sin6_addr.s6_addr[11] = 0xff;
                memcpy(&a.sin6_addr.s6_addr[12], &ip, 4);
                return real_bind(fd, (struct sockaddr *)&a, sizeof a);
            }
        }
    }
    return real_bind(fd, addr, len);
}

static int is_tcp_unbound(int fd, int family) {
    int type = 0;
    socklen_t tl = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM) return 0;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) return 0;
    if (family == AF_INET) return ((struct sockaddr_in *)&ss)->sin_port == 0;
    return ((struct sockaddr_in6 *)&ss)->sin6_port == 0;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    init();
    struct in_addr ip;
    if (addr && bind_ip(&ip)) {
        int saved = errno;
        if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
            const struct sockaddr_in *d = (const struct sockaddr_in *)addr;
            if ((ntohl(d->sin_addr.s_addr) >> 24) == 127 && is_tcp_unbound(fd, AF_INET)) {
                struct sockaddr_in a;
                memset(&a, 0, sizeof a);
                a.sin_family = AF_INET;
                a.sin_addr = ip;
                real_bind(fd, (struct sockaddr *)&a, sizeof a);
            }
        } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
            const struct sockaddr_in6 *d = (const struct sockaddr_in6 *)addr;
            if (IN6_IS_ADDR_V4MAPPED(&d->sin6_addr) && d->sin6_addr.s6_addr[12] == 127 &&
                is_tcp_unbound(fd, AF_INET6)) {
                struct sockaddr_in6 a;
                memset(&a, 0, sizeof a);
                a.sin6_family = AF_INET6;
                a.sin6_addr.s6_addr[10] = 0xff;
                a.sin6_addr.s6_addr[11] = 0xff;
                memcpy(&a.sin6_addr.s6_addr[12], &ip, 4);
                real_bind(fd, (struct sockaddr *)&a, sizeof a);
            }
        }
        errno = saved;
    }
    return real_connect(fd, addr, len);
}
