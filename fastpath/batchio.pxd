cimport cython
from libc.stdint cimport uint8_t, uint64_t
from posix.uio cimport iovec
from fastpath.csocket cimport mmsghdr, sockaddr_in, MSG_TRUNC


@cython.final
cdef class RecvBatch:
    """Preallocated slots for recvmmsg: one buffer, iovec and source address per datagram."""
    cdef readonly int capacity
    cdef readonly Py_ssize_t slot_size
    cdef readonly int count
    cdef Py_ssize_t stride       # slot_size rounded up to a cache line: slots start on one
    cdef void* block             # the allocation the cache-line-aligned arena lies in
    cdef uint8_t* arena
    cdef iovec* iovs
    cdef sockaddr_in* addrs
    cdef mmsghdr* msgs
    cdef uint8_t* control        # per-slot ancillary data buffers, or NULL

    cdef int receive(self, int fd) noexcept nogil
    cdef int receive_wait(self, int fd) noexcept nogil
    cdef int _receive(self, int fd, int flags) noexcept nogil
    cdef inline const uint8_t* slot(self, int i) noexcept nogil:
        return self.arena + i * self.stride
    cdef inline Py_ssize_t length(self, int i) noexcept nogil:
        return self.msgs[i].msg_len
    cdef inline bint truncated(self, int i) noexcept nogil:
        return (self.msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0
    cdef Py_ssize_t segment_size(self, int i) noexcept nogil


@cython.final
cdef class SendBatch:
    """A queue of datagrams described by pointers (nothing copied) flushed with sendmmsg.

    The memory each entry points to must stay valid until flush() returns.
    """
    cdef readonly int capacity
    cdef readonly int count
    cdef public uint64_t sent
    cdef public uint64_t bytes_sent
    cdef public uint64_t errors
    cdef public uint64_t would_block   # datagrams dropped because the socket buffer was full
    cdef public int max_wait_ms        # how long one flush may wait for buffer space
    cdef mmsghdr* msgs

    cdef inline bint full(self) noexcept nogil:
        return self.count >= self.capacity
    cdef inline void add(self, sockaddr_in* dst, iovec* iov, int iovlen) noexcept nogil:
        self.add_control(dst, iov, iovlen, NULL, 0)
    cdef inline void add_control(self, sockaddr_in* dst, iovec* iov, int iovlen, void* control,
                                 size_t controllen) noexcept nogil:
        # Slots are reused: every field a previous send set (a GSO control message) is reset.
        cdef mmsghdr* m = &self.msgs[self.count]
        m.msg_hdr.msg_name = dst
        m.msg_hdr.msg_namelen = sizeof(sockaddr_in)
        m.msg_hdr.msg_iov = iov
        m.msg_hdr.msg_iovlen = iovlen
        m.msg_hdr.msg_control = control
        m.msg_hdr.msg_controllen = controllen
        m.msg_hdr.msg_flags = 0
        self.count += 1
    cdef int flush(self, int fd) noexcept nogil
