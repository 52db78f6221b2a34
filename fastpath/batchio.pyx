# cython: language_level=3
"""recvmmsg/sendmmsg batching; fan-out sends header and payload as separate iovecs."""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memset
from posix.uio cimport iovec

from fastpath.csocket cimport (mmsghdr, sockaddr_in, recvmmsg, sendmmsg, poll, pollfd, POLLOUT,
                               errno, EAGAIN, EWOULDBLOCK, EINTR, ENOBUFS, MSG_DONTWAIT,
                               MSG_WAITFORONE, AF_INET, cmsghdr, CMSG_FIRSTHDR, CMSG_NXTHDR,
                               CMSG_DATA, SOL_UDP, UDP_GRO,
                               htons, ntohs, htonl, ntohl)

import socket

from fastpath.refbatchio import enable_gro, set_buffers  # plain socket options: written once

cdef int SEND_BLOCKED_WAIT_MS = 50  # default: how long a full socket buffer may stall one flush


cdef Py_ssize_t CONTROL_SPACE = 64  # per slot: room for a UDP_GRO cmsg (an int) and more
cdef Py_ssize_t LINE = 64  # each receive slot starts on its own cache line: a header read or
# written (and copied again by every fan-out send) never straddles two lines


@cython.final
cdef class RecvBatch:
    def __cinit__(self, int capacity=64, Py_ssize_t slot_size=65536, bint control=False):
        cdef Py_ssize_t i
        if capacity < 1 or capacity > 1024:
            raise ValueError(f"capacity {capacity} outside 1..1024")
        if slot_size < 1 or slot_size > 65536:
            raise ValueError(f"slot_size {slot_size} outside 1..65536")
        self.capacity = capacity
        self.slot_size = slot_size
        self.stride = (slot_size + LINE - 1) // LINE * LINE
        if self.stride % 4096 == 0:  # a multiple of a page would put every slot's first line in
            self.stride += LINE      # one cache set (64 KiB slots: 64 lines for 12-16 ways)
        self.block = PyMem_Calloc(1, capacity * self.stride + LINE)
        self.arena = <uint8_t*>(((<size_t>self.block) + LINE - 1) // LINE * LINE)
        self.iovs = <iovec*>PyMem_Calloc(capacity, sizeof(iovec))
        self.addrs = <sockaddr_in*>PyMem_Calloc(capacity, sizeof(sockaddr_in))
        self.msgs = <mmsghdr*>PyMem_Calloc(capacity, sizeof(mmsghdr))
        if not (self.block and self.iovs and self.addrs and self.msgs):
            raise MemoryError()
        if control:  # ancillary data is read, e.g. UDP_GRO's segment size
            self.control = <uint8_t*>PyMem_Calloc(capacity, CONTROL_SPACE)
            if not self.control:
                raise MemoryError()
        for i in range(capacity):
            self.iovs[i].iov_base = self.arena + i * self.stride
            self.iovs[i].iov_len = slot_size

    def __dealloc__(self):
        PyMem_Free(self.block)
        PyMem_Free(self.iovs)
        PyMem_Free(self.addrs)
        PyMem_Free(self.msgs)
        PyMem_Free(self.control)

    cdef Py_ssize_t segment_size(self, int i) noexcept nogil:
        """UDP_GRO: the size of each datagram coalesced into slot i (the last may be shorter);
        0 when the slot holds one datagram as sent."""
        cdef cmsghdr* c
        if self.control == NULL:
            return 0
        c = CMSG_FIRSTHDR(&self.msgs[i].msg_hdr)
        while c != NULL:
            if c.cmsg_level == SOL_UDP and c.cmsg_type == UDP_GRO:
                return (<int*>CMSG_DATA(c))[0]
            c = CMSG_NXTHDR(&self.msgs[i].msg_hdr, c)
        return 0

    cdef int receive(self, int fd) noexcept nogil:
        """Non-blocking recvmmsg into the slots; return the count (0 if none) or -errno."""
        return self._receive(fd, MSG_DONTWAIT)

    cdef int receive_wait(self, int fd) noexcept nogil:
        """recvmmsg that waits for the first datagram (up to the socket's SO_RCVTIMEO on a
        blocking socket) and takes whatever else is queued; return the count or -errno."""
        return self._receive(fd, MSG_WAITFORONE)

    cdef int _receive(self, int fd, int flags) noexcept nogil:
        cdef int i, rc
        for i in range(self.capacity):
            self.msgs[i].msg_hdr.msg_name = &self.addrs[i]
            self.msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_in)
            self.msgs[i].msg_hdr.msg_iov = &self.iovs[i]
            self.msgs[i].msg_hdr.msg_iovlen = 1
            if self.control != NULL:
                self.msgs[i].msg_hdr.msg_control = self.control + i * CONTROL_SPACE
                self.msgs[i].msg_hdr.msg_controllen = CONTROL_SPACE
            else:
                self.msgs[i].msg_hdr.msg_control = NULL
                self.msgs[i].msg_hdr.msg_controllen = 0
            self.msgs[i].msg_hdr.msg_flags = 0
        while True:
            rc = recvmmsg(fd, self.msgs, self.capacity, flags, NULL)
            if rc >= 0:
                self.count = rc
                return rc
            if errno == EINTR:
                continue
            self.count = 0
            if errno == EAGAIN or errno == EWOULDBLOCK:
                return 0
            return -errno

    def _slot_address(self, int i):
        """Where slot i lies in memory (tests: each starts on a cache line)."""
        if not 0 <= i < self.capacity:
            raise IndexError(i)
        return <size_t>self.slot(i)

    def truncated_at(self, int i):
        """Whether read i of the last receive lost bytes (MSG_TRUNC; other flags, such as a
        truncated control message, do not count)."""
        if not 0 <= i < self.count:
            raise IndexError(i)
        return self.truncated(i)

    def recv(self, sock):
        """Receive up to capacity reads without blocking; return [(bytes, (host, port))], one
        per datagram as sent: a UDP_GRO read (with control=True) is split at its segment size."""
        cdef int fd = sock.fileno()
        cdef int rc, i
        cdef Py_ssize_t n, seg, off
        with nogil:
            rc = self.receive(fd)
        if rc < 0:
            raise OSError(-rc, "recvmmsg failed")
        out = []
        for i in range(rc):
            addr = _py_addr(&self.addrs[i])
            n = self.length(i)
            seg = self.segment_size(i) or n
            if seg >= n:
                out.append((PyBytes_FromStringAndSize(<const char*>self.slot(i), n), addr))
                continue
            off = 0
            while off < n:
                out.append((PyBytes_FromStringAndSize(<const char*>self.slot(i) + off,
                                                      min(seg, n - off)), addr))
                off += seg
        return out


cdef tuple _py_addr(sockaddr_in* sa):
    cdef uint32_t a = ntohl(sa.sin_addr.s_addr)
    return (f"{a >> 24}.{(a >> 16) & 0xff}.{(a >> 8) & 0xff}.{a & 0xff}", ntohs(sa.sin_port))


cdef int _fill_addr(sockaddr_in* sa, addr) except -1:
    host, port = addr
    packed = socket.inet_aton(host)
    memset(sa, 0, sizeof(sockaddr_in))
    sa.sin_family = AF_INET
    sa.sin_port = htons(<uint16_t>port)
    sa.sin_addr.s_addr = htonl(int.from_bytes(packed, "big"))
    return 0


@cython.final
cdef class SendBatch:
    def __cinit__(self, int capacity=1024, int max_wait_ms=SEND_BLOCKED_WAIT_MS):
        if capacity < 1 or capacity > 1024:  # UIO_MAXIOV caps one sendmmsg at 1024
            raise ValueError(f"capacity {capacity} outside 1..1024")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must not be negative")
        self.capacity = capacity
        self.max_wait_ms = max_wait_ms
        self.msgs = <mmsghdr*>PyMem_Calloc(capacity, sizeof(mmsghdr))
        if not self.msgs:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.msgs)

    cdef int flush(self, int fd) noexcept nogil:
        """Send every queued datagram; return how many went. Never blocks in the kernel (even
        on a blocking socket): a full socket buffer is waited on for at most max_wait_ms in
        all, then what is left is dropped and counted in `would_block`. A datagram the kernel
        refuses is counted in `errors` and skipped."""
        cdef int off = 0, rc, waited = 0, done = 0
        cdef int i
        cdef pollfd pfd
        while off < self.count:
            rc = sendmmsg(fd, self.msgs + off, self.count - off, MSG_DONTWAIT)
            if rc > 0:
                for i in range(off, off + rc):
                    self.bytes_sent += self.msgs[i].msg_len
                off += rc
                done += rc
                self.sent += rc
                continue
            if rc < 0 and errno == EINTR:
                continue
            if rc < 0 and (errno == EAGAIN or errno == EWOULDBLOCK or errno == ENOBUFS):
                if waited < self.max_wait_ms:
                    pfd.fd = fd
                    pfd.events = POLLOUT
                    poll(&pfd, 1, 1)
                    waited += 1
                    continue
                # The buffer stays full: the rest would fail the same way (one buffer).
                self.would_block += self.count - off
                break
            # sendmmsg reports a failure of the first datagram; skip it and go on.
            self.errors += 1
            off += 1
        self.count = 0
        return done

    def send(self, sock, datagrams):
        """Send [(bytes-like, (host, port))] with as few sendmmsg calls as possible."""
        return _send_list(self, sock.fileno(), [(d, None, a) for d, a in datagrams])

    def fan_out(self, sock, header, payload, addrs):
        """Send header+payload to every address; the payload is shared, never copied."""
        return _send_list(self, sock.fileno(), [(header, payload, a) for a in addrs])


cdef int _send_list(SendBatch batch, int fd, list items) except -1:
    cdef Py_ssize_t n = len(items), i, j, start
    cdef Py_buffer* views = <Py_buffer*>PyMem_Calloc(2 * n + 1, sizeof(Py_buffer))
    cdef iovec* iovs = <iovec*>PyMem_Calloc(2 * n + 1, sizeof(iovec))
    cdef sockaddr_in* addrs = <sockaddr_in*>PyMem_Calloc(n + 1, sizeof(sockaddr_in))
    cdef Py_ssize_t acquired = 0
    cdef int total = 0
    if not (views and iovs and addrs):
        PyMem_Free(views); PyMem_Free(iovs); PyMem_Free(addrs)
        raise MemoryError()
    try:
        # Buffers shared between items (a fan-out payload) are acquired once per item; the
        # iovecs point at the same memory, so nothing is copied.
        for i in range(n):
            first, second, addr = items[i]
            _fill_addr(&addrs[i], addr)
            PyObject_GetBuffer(first, &views[acquired], PyBUF_SIMPLE)
            iovs[2 * i].iov_base = views[acquired].buf
            iovs[2 * i].iov_len = views[acquired].len
            acquired += 1
            if second is not None:
                PyObject_GetBuffer(second, &views[acquired], PyBUF_SIMPLE)
                iovs[2 * i + 1].iov_base = views[acquired].buf
                iovs[2 * i + 1].iov_len = views[acquired].len
                acquired += 1
        start = 0
        while start < n:
            j = start
            while j < n and not batch.full():
                batch.add(&addrs[j], &iovs[2 * j], 1 if items[j][1] is None else 2)
                j += 1
            with nogil:
                total += batch.flush(fd)
            start = j
        return total
    finally:
        for i in range(acquired):
            PyBuffer_Release(&views[i])
        PyMem_Free(views)
        PyMem_Free(iovs)
        PyMem_Free(addrs)
