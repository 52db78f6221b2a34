# Linux socket declarations the fast path needs (Cython ships none for sockets).
# _GNU_SOURCE is defined by setup.py so <sys/socket.h> declares recvmmsg/sendmmsg.
from libc.stdint cimport uint16_t, uint32_t
from posix.uio cimport iovec
from posix.time cimport timespec

cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    ctypedef unsigned short sa_family_t
    struct sockaddr:
        sa_family_t sa_family
    struct msghdr:
        void* msg_name
        socklen_t msg_namelen
        iovec* msg_iov
        size_t msg_iovlen
        void* msg_control
        size_t msg_controllen
        int msg_flags
    struct mmsghdr:
        msghdr msg_hdr
        unsigned int msg_len
    int recvmmsg(int fd, mmsghdr* vmessages, unsigned int vlen, int flags, timespec* tmo)
    int sendmmsg(int fd, mmsghdr* vmessages, unsigned int vlen, int flags)
    int AF_INET
    int SOL_SOCKET
    int SO_RCVTIMEO
    int MSG_DONTWAIT
    int MSG_WAITFORONE
    int setsockopt(int fd, int level, int optname, const void* optval, socklen_t optlen)
    int MSG_TRUNC
    struct cmsghdr:
        size_t cmsg_len
        int cmsg_level
        int cmsg_type
    size_t CMSG_SPACE(size_t length)
    size_t CMSG_LEN(size_t length)
    unsigned char* CMSG_DATA(cmsghdr* c)
    cmsghdr* CMSG_FIRSTHDR(msghdr* m)
    cmsghdr* CMSG_NXTHDR(msghdr* m, cmsghdr* c)

cdef extern from "<netinet/udp.h>" nogil:
    """
    #ifndef UDP_SEGMENT
    #define UDP_SEGMENT 103
    #endif
    #ifndef SOL_UDP
    #define SOL_UDP 17
    #endif
    #ifndef UDP_GRO
    #define UDP_GRO 104
    #endif
    """
    int UDP_SEGMENT
    int UDP_GRO
    int SOL_UDP

cdef extern from "<netinet/in.h>" nogil:
    struct in_addr:
        uint32_t s_addr
    struct sockaddr_in:
        sa_family_t sin_family
        uint16_t sin_port
        in_addr sin_addr
    uint16_t htons(uint16_t)
    uint16_t ntohs(uint16_t)
    uint32_t htonl(uint32_t)
    uint32_t ntohl(uint32_t)

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    ctypedef unsigned long nfds_t
    int poll(pollfd* fds, nfds_t nfds, int timeout)
    short POLLIN
    short POLLOUT

cdef extern from "<errno.h>" nogil:
    int errno
    int EAGAIN
    int EWOULDBLOCK
    int EINTR
    int ENOBUFS

cdef extern from "<sys/time.h>" nogil:
    struct timeval:
        long tv_sec
        long tv_usec
