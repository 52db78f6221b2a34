# cython: language_level=3
"""The bench's load generator: paced sendmmsg publishers and recvmmsg subscribers for fyrehose,
with per-publisher stream counting and a latency histogram kept in C (include/loadstats.h)."""
cimport cython
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memset
from posix.time cimport nanosleep, timespec
from posix.uio cimport iovec

from fastpath.csocket cimport (mmsghdr, sockaddr_in, sendmmsg, AF_INET,
                               htons, htonl, errno, EINTR)
from fastpath.wire cimport get_u16, put_u16
from fastpath.batchio cimport RecvBatch
from fastpath.codec cimport (T_DELIVER, T_PUSH, T_KEEPALIVE_ACK, HEADER_SIZE, MAX_DATA,
                             MAX_DATAGRAM, OFF_LENGTH, OFF_KEEPALIVE_TOKEN, TOKEN_SIZE)

import socket

from fastpath.batchio import enable_gro, set_buffers
from fastpath.codec import encode_keepalive
from fastpath.packets import NOJOURNAL, NOSUBSCRIBE, packed_flags

cdef extern from "<sys/socket.h>" nogil:
    ssize_t sendto(int fd, const void* buf, size_t n, int flags, const void* addr, unsigned int addrlen)

cdef extern from "<sys/epoll.h>" nogil:
    ctypedef union epoll_data_t:
        uint32_t u32
    cdef struct epoll_event:
        uint32_t events
        epoll_data_t data
    int epoll_create1(int flags)
    int epoll_ctl(int epfd, int op, int fd, epoll_event* event)
    int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout)
    enum:
        EPOLLIN
        EPOLL_CTL_ADD
        EPOLL_CLOEXEC

cdef extern from "<sys/mman.h>" nogil:
    void* mmap(void* addr, size_t length, int prot, int flags, int fd, long offset)
    int munmap(void* addr, size_t length)
    void* MAP_FAILED
    enum:
        PROT_READ
        PROT_WRITE
        MAP_PRIVATE
        MAP_ANONYMOUS

cdef extern from "<unistd.h>" nogil:
    int close(int fd)

STAMP_SIZE = LS_STAMP_SIZE
MAX_PUBLISHERS = LS_MAX_PUBLISHERS
DEFAULT_BATCH = 64
MAX_SUBSCRIBERS = 16384  # sockets one SubscriberGroup holds (each needs a file descriptor)
MAX_TIMELINE = 1_000_000  # slices a measure(timeline=...) keeps: 8 MB
cdef int RECV_BATCH = 64
cdef int RECV_SLOT = 65536
cdef int MAX_EVENTS = 1024  # ready sockets taken per epoll_wait
cdef uint64_t KEEPALIVE_SPREAD_NS = 500000000
cdef bytes _ACK = bytes([T_KEEPALIVE_ACK])  # a KEEPALIVE-ACK's first byte


@cython.final
cdef class LatencyHistogram:
    """Log-linear histogram of nanosecond values (16 sub-buckets per power of two)."""

    def __cinit__(self):
        ls_hist_init(&self.h)

    def record(self, uint64_t value):
        """Count one value."""
        ls_hist_record(&self.h, value)

    def quantile(self, double q):
        """Upper bound of the bucket holding quantile q, capped at the maximum; 0 if empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError("q must be within 0..1")
        return ls_hist_quantile(&self.h, q)

    @property
    def total(self):
        return self.h.total

    @property
    def max(self):
        return self.h.max if self.h.total else 0

    @property
    def mean(self):
        return self.h.sum / self.h.total if self.h.total else 0.0

    def buckets(self):
        """Sparse {bucket upper bound: count}, for merging histograms across processes."""
        return {ls_bucket_high(b): self.h.counts[b] for b in range(LS_BUCKETS) if self.h.counts[b]}

    def summary(self):
        """Count, mean, p50/p90/p99/max in nanoseconds."""
        return {"count": self.total, "mean_ns": self.mean, "p50_ns": self.quantile(0.5),
                "p90_ns": self.quantile(0.9), "p99_ns": self.quantile(0.99), "max_ns": self.max}


@cython.final
cdef class StreamCounter:
    """Per-publisher accounting of received payloads: unique, duplicates, reordered, latency."""

    def __cinit__(self):
        # Mapped, not calloc'd: its pages (about 530 KB, mostly windows of publishers that
        # never send) stay untouched until used, so 10,000 subscribers cost ~20 KB each.
        cdef void* mem = mmap(NULL, sizeof(ls_counter), PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if mem == MAP_FAILED:
            raise MemoryError()
        self.c = <ls_counter*>mem
        ls_counter_init_zeroed(self.c)

    def __dealloc__(self):
        if self.c != NULL:
            munmap(self.c, sizeof(ls_counter))

    def record(self, payload, uint64_t now_ns):
        """Account one received payload (as a subscriber received it) at time now_ns; return
        its latency in ns, or -1 (too short, or an unknown publisher)."""
        cdef const uint8_t[::1] view = payload
        return ls_counter_record(self.c, &view[0] if len(view) else NULL, len(view), now_ns)

    def summary(self):
        """Totals over publishers, and the latency summary."""
        cdef int p
        cdef ls_stream* s
        out = {"unique": 0, "duplicates": 0, "reordered": 0, "too_old": 0,
               "foreign": self.c.foreign, "publishers": {}}
        for p in range(LS_MAX_PUBLISHERS):
            s = &self.c.streams[p]
            if not s.started:
                continue
            out["unique"] += s.unique
            out["duplicates"] += s.duplicates
            out["reordered"] += s.reordered
            out["too_old"] += s.too_old
            out["publishers"][p] = {"unique": s.unique, "highest": s.highest,
                                    "missing_below_highest": s.highest + 1 - s.unique
                                    if s.unique <= s.highest + 1 else 0}
        hist = LatencyHistogram()
        ls_hist_merge(&hist.h, &self.c.latency)
        out["latency"] = hist.summary()
        out["latency_buckets"] = hist.buckets()
        return out


def stamp(int pub_id, uint64_t counter, uint64_t now_ns, Py_ssize_t size=STAMP_SIZE):
    """A payload as the publisher sends it (for tests and tools)."""
    if size < LS_STAMP_SIZE:
        raise ValueError(f"payloads are at least {LS_STAMP_SIZE} bytes")
    out = bytearray(size)
    cdef uint8_t[::1] view = out
    ls_stamp(&view[0], <uint16_t>pub_id, counter, now_ns)
    return bytes(out)


def now_ns():
    """CLOCK_MONOTONIC in nanoseconds, the clock payload timestamps use."""
    return ls_now_ns()


cdef void _fill_sockaddr(sockaddr_in* sa, host, int port) except *:
    packed = socket.inet_aton(host)
    memset(sa, 0, sizeof(sockaddr_in))
    sa.sin_family = AF_INET
    sa.sin_port = htons(<uint16_t>port)
    sa.sin_addr.s_addr = htonl(int.from_bytes(packed, "big"))


cdef inline void _sleep_ns(int64_t ns) noexcept nogil:
    cdef timespec ts
    ts.tv_sec = ns // 1000000000
    ts.tv_nsec = ns % 1000000000
    nanosleep(&ts, NULL)


def _udp_socket(int buffer):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    set_buffers(sock, buffer)
    sock.bind(("127.0.0.1", 0))
    return sock


@cython.final
cdef class _SendArena:
    """The publisher's datagrams, iovecs and message headers; freed with the object, so an
    allocation that fails (or any later error) leaks nothing."""
    cdef uint8_t* arena
    cdef mmsghdr* msgs
    cdef iovec* iovs

    def __cinit__(self, size_t batch, size_t dgram):
        self.arena = <uint8_t*>PyMem_Calloc(batch, dgram)
        self.msgs = <mmsghdr*>PyMem_Calloc(batch, sizeof(mmsghdr))
        self.iovs = <iovec*>PyMem_Calloc(batch, sizeof(iovec))
        if not (self.arena and self.msgs and self.iovs):
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.arena)
        PyMem_Free(self.msgs)
        PyMem_Free(self.iovs)


def publish_fyrehose(host, int port, *, Py_ssize_t payload_size=16, double duration=1.0,
                     double rate=0.0, int pub_id=0, uint64_t count=0, int batch=DEFAULT_BATCH,
                     Py_ssize_t pack=0, Py_ssize_t max_frames=1024, double interval=0.0):
    """Send stamped PUSHes for `duration` seconds (or `count` messages) at `rate` per second
    (0: as fast as possible), in sendmmsg batches; return what was sent. With `pack` > 0, as
    many PUSH frames as fit in `pack` bytes (at most `max_frames`) share a datagram (the
    packing extension): the socket then signs on first as a NOSUBSCRIBE NOJOURNAL PACKED client
    and keeps that alive every second, since the backbone takes packs only from such clients.
    With `interval` > 0 (seconds, with a rate) the publisher sends at most once per interval,
    everything due by then: a pack then holds rate x interval messages (each is stamped when
    it is sent, so the wait is not in the latency measured)."""
    if payload_size < LS_STAMP_SIZE or payload_size > MAX_DATA:
        raise ValueError(f"payload_size must be within {LS_STAMP_SIZE}..{MAX_DATA}")
    if not 0 <= pub_id < LS_MAX_PUBLISHERS:
        raise ValueError(f"pub_id must be within 0..{LS_MAX_PUBLISHERS - 1}")
    if batch < 1 or batch > 1024:
        raise ValueError("batch must be within 1..1024")
    if pack and not HEADER_SIZE <= pack <= MAX_DATAGRAM:
        raise ValueError(f"pack must be 0 or within {HEADER_SIZE}..{MAX_DATAGRAM}")
    if max_frames < 1:
        raise ValueError("max_frames must be at least 1")
    if not 0.0 <= interval <= 10.0:
        raise ValueError("interval must be within 0..10 seconds")
    with _udp_socket(4 << 20) as sock:  # closed on every way out
        return _publish(sock, host, port, payload_size, duration, rate, pub_id, count, batch,
                        pack, max_frames, interval)


def _publish(sock, host, int port, Py_ssize_t payload_size, double duration, double rate,
             int pub_id, uint64_t count, int batch, Py_ssize_t pack, Py_ssize_t max_frames,
             double interval):
    cdef int fd = sock.fileno()
    cdef sockaddr_in dst
    _fill_sockaddr(&dst, host, port)
    cdef Py_ssize_t frame = HEADER_SIZE + payload_size
    cdef Py_ssize_t per = min(max(1, pack // frame), max_frames) if pack else 1  # frames/datagram
    cdef bytes keepalive = encode_keepalive("", 0, NOSUBSCRIBE | NOJOURNAL | packed_flags(pack),
                                            b"pelotari-loadpub") if pack else b""
    cdef const uint8_t* ka = keepalive
    cdef Py_ssize_t ka_len = len(keepalive)
    cdef uint64_t next_keepalive = 0
    if pack:
        _sign_on_publisher(sock, host, port, keepalive)
    cdef Py_ssize_t dgram = per * frame
    cdef _SendArena mem = _SendArena(batch, dgram)
    cdef uint8_t* arena = mem.arena
    cdef mmsghdr* msgs = mem.msgs
    cdef iovec* iovs = mem.iovs
    cdef int i, j, n, nd, rc, off
    cdef Py_ssize_t m
    cdef uint64_t sent = 0, failed = 0, calls = 0, due, datagrams = 0
    cdef uint64_t start, now, deadline
    cdef int64_t ahead
    cdef double interval_ns = 1e9 / rate if rate > 0 else 0.0
    cdef uint64_t tick_ns = <uint64_t>(interval * 1e9) if rate > 0 else 0
    cdef uint64_t next_tick = 0
    for i in range(batch):
        for j in range(per):
            arena[i * dgram + j * frame] = T_PUSH
            put_u16(arena + i * dgram + j * frame + OFF_LENGTH, <uint16_t>payload_size)
        iovs[i].iov_base = arena + i * dgram
        iovs[i].iov_len = dgram
        msgs[i].msg_hdr.msg_name = &dst
        msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_in)
        msgs[i].msg_hdr.msg_iov = &iovs[i]
        msgs[i].msg_hdr.msg_iovlen = 1
    with nogil:
        start = ls_now_ns()
        deadline = start + <uint64_t>(duration * 1e9)
        next_keepalive = start + 1000000000
        while True:
            now = ls_now_ns()
            if now >= deadline or (count and sent >= count):
                break
            if ka_len and now >= next_keepalive:  # (C1) the sign-on packs depend on
                sendto(fd, ka, ka_len, 0, &dst, sizeof(sockaddr_in))
                next_keepalive = now + 1000000000
            n = batch * per  # messages this round
            if tick_ns and now < next_tick:
                _sleep_ns(<int64_t>(next_tick - now))
                continue
            if rate > 0:
                due = <uint64_t>((now - start) / interval_ns) + 1
                if due <= sent:
                    # Always sleep, never spin: the subscribers may share this core.
                    ahead = <int64_t>((sent * interval_ns) - (now - start))
                    _sleep_ns(ahead if ahead > 1000 else 1000)
                    continue
                if due - sent < <uint64_t>n:
                    n = <int>(due - sent)
            if count and count - sent < <uint64_t>n:
                n = <int>(count - sent)
            nd = <int>((n + per - 1) // per)
            for i in range(nd):
                m = per if (i + 1) * per <= n else n - i * per
                for j in range(m):
                    ls_stamp(arena + i * dgram + j * frame + HEADER_SIZE, <uint16_t>pub_id,
                             sent + i * per + j, now)
                iovs[i].iov_len = m * frame
            datagrams += nd
            off = 0
            while off < nd:
                rc = sendmmsg(fd, msgs + off, nd - off, 0)
                calls += 1
                if rc > 0:
                    off += rc
                elif rc < 0 and errno == EINTR:
                    continue
                else:
                    failed += 1
                    off += 1
            sent += n
            if tick_ns and (rate <= 0 or sent >= due):  # what was due is out: wait a tick
                next_tick = now + tick_ns
        now = ls_now_ns()
    return {"sent": sent, "datagrams": datagrams, "send_failures": failed,
            "sendmmsg_calls": calls, "elapsed": (now - start) / 1e9, "pub_id": pub_id}


def _sign_on_publisher(sock, host, int port, bytes keepalive, double timeout=3.0):
    """KEEPALIVE until the backbone ACKs (it then takes this socket's packs)."""
    deadline = ls_now_ns() + <uint64_t>(timeout * 1e9)
    sock.settimeout(0.2)
    try:
        while ls_now_ns() < deadline:
            sock.sendto(keepalive, (host, port))
            try:
                while True:
                    data = sock.recv(64)
                    if data[:1] == _ACK and data[1:] == keepalive[
                            OFF_KEEPALIVE_TOKEN:OFF_KEEPALIVE_TOKEN + TOKEN_SIZE]:
                        return
            except socket.timeout:
                continue
        raise TimeoutError(f"no KEEPALIVE-ACK from {host}:{port}")
    finally:
        sock.setblocking(False)


cdef inline bint _count_delivers(ls_counter* c, const uint8_t* p, Py_ssize_t n, uint64_t now,
                                 uint64_t* frames, uint64_t* worst) noexcept nogil:
    """Count one datagram's DELIVER frames (one, or several packed back to back); return
    whether it was all DELIVERs of the load generator's stamps (a malformed tail, or a frame
    the counter refuses, makes the datagram the caller's "other")."""
    cdef Py_ssize_t off = 0, size
    cdef int64_t latency
    cdef bint all_ours = True
    if n < HEADER_SIZE or p[0] != T_DELIVER:
        return False
    while n - off >= HEADER_SIZE and p[off] == T_DELIVER:
        size = HEADER_SIZE + get_u16(p + off + OFF_LENGTH)
        if size > n - off:
            break
        latency = ls_counter_record(c, p + off + HEADER_SIZE, size - HEADER_SIZE, now)
        if latency >= 0:
            if <uint64_t>latency > worst[0]:
                worst[0] = <uint64_t>latency
            frames[0] += 1
        else:
            all_ours = False  # too short, or a publisher id no load generator uses
        off += size
    return off == n and all_ours


@cython.final
cdef class SubscriberGroup:
    """`subscribers` UDP sockets signed on to a fyrehose backbone, counting DELIVERs in trials.

    sign_on() sends NOJOURNAL KEEPALIVEs and waits for the ACKs; measure() runs one trial;
    sign_off() sends NOSUBSCRIBE so the backbone stops fanning out to these sockets at once.
    With `gro`, the sockets set UDP_GRO: a GSO send from the backbone (a run of DELIVERs to one
    subscriber) arrives as one read and is split here at the segment size the kernel reports.
    """
    cdef list socks
    cdef object host
    cdef int port
    cdef int nsub
    cdef bytes keepalive
    cdef int epfd
    cdef int* fds
    cdef RecvBatch rx
    cdef sockaddr_in bb
    cdef readonly bint gro

    def __cinit__(self, host, int port, int subscribers=1, int buffer=32 << 20,
                  Py_ssize_t pack=0, bint gro=False):
        self.epfd = -1
        if subscribers < 1 or subscribers > MAX_SUBSCRIBERS:
            raise ValueError(f"subscribers must be within 1..{MAX_SUBSCRIBERS}")
        self.host, self.port, self.nsub = host, port, subscribers
        self.socks = []
        for _ in range(subscribers):
            self.socks.append(_udp_socket(buffer))
        self.gro = gro
        if gro:
            for sock in self.socks:
                enable_gro(sock)
        # NOJOURNAL; with `pack`, also PACKED and the largest packed datagram accepted.
        flags = NOJOURNAL | (packed_flags(pack) if pack else 0)
        self.keepalive = encode_keepalive("", 0, flags, b"pelotari-loadgen")
        _fill_sockaddr(&self.bb, host, port)
        self.fds = <int*>PyMem_Calloc(subscribers, sizeof(int))
        if not self.fds:
            raise MemoryError()
        self.rx = RecvBatch(RECV_BATCH, RECV_SLOT, gro)
        # epoll, not poll: a wake-up costs the sockets that are ready, not all of them.
        self.epfd = epoll_create1(EPOLL_CLOEXEC)
        if self.epfd < 0:
            raise OSError(errno, "epoll_create1")
        cdef int k
        cdef epoll_event ev
        for k in range(subscribers):
            self.fds[k] = self.socks[k].fileno()
            ev.events = EPOLLIN
            ev.data.u32 = <uint32_t>k
            if epoll_ctl(self.epfd, EPOLL_CTL_ADD, self.fds[k], &ev) < 0:
                raise OSError(errno, "epoll_ctl")

    def __dealloc__(self):
        PyMem_Free(self.fds)
        if self.epfd >= 0:
            close(self.epfd)
        for sock in self.socks or ():  # a sign_off() never called, or __cinit__ failing
            sock.close()

    def sign_on(self, double ack_timeout=3.0):
        """KEEPALIVE from every socket; raise TimeoutError if the backbone does not ACK."""
        for s in self.socks:
            s.setblocking(True)
            s.settimeout(ack_timeout)
            s.sendto(self.keepalive, (self.host, self.port))
        for s in self.socks:
            try:
                while s.recvfrom(65536)[0][:1] != _ACK:  # skip DELIVERs still in flight
                    pass
            except socket.timeout:
                raise TimeoutError(f"no KEEPALIVE-ACK from {self.host}:{self.port}") from None
            s.setblocking(False)

    def addresses(self):
        """The sockets' (host, port), in order."""
        return [sock.getsockname() for sock in self.socks]

    def sign_off(self):
        """NOSUBSCRIBE from every socket, then close them."""
        bye = encode_keepalive("", 0, NOSUBSCRIBE | NOJOURNAL, b"pelotari-loadgen")
        for s in self.socks:
            try:
                s.sendto(bye, (self.host, self.port))
            except OSError:
                pass
            s.close()

    def measure(self, double max_duration=30.0, double idle=0.5, double timeline=0.0,
                ready=None):
        """Renew every subscription, call ready() (publishing may start then), and count
        DELIVERs until `idle` seconds pass without one (after the first) or `max_duration`
        ends; return the counts and latency summary. With `timeline` > 0 (in
        seconds, at least 1 ms), also the worst latency (ns) of each `timeline`-long slice of
        the trial, by arrival time (at most MAX_TIMELINE slices: the last takes any later ones)."""
        if timeline < 0 or (timeline and timeline < 1e-3):
            raise ValueError("timeline must be 0 or at least 0.001 s")
        counters = [StreamCounter() for _ in range(self.nsub)]
        cdef Py_ssize_t slices = min(<Py_ssize_t>(max_duration / timeline) + 1, MAX_TIMELINE) \
            if timeline else 1
        cdef uint64_t slice_ns = <uint64_t>(timeline * 1e9) if timeline else 0
        cdef uint64_t* worst = <uint64_t*>PyMem_Calloc(slices, sizeof(uint64_t))
        if worst == NULL:
            raise MemoryError()
        cdef Py_ssize_t at = 0
        cdef int target
        timeline_ns = []
        cdef int nsub = self.nsub
        cdef ls_counter** cs = <ls_counter**>PyMem_Calloc(nsub, sizeof(ls_counter*))
        if cs == NULL:
            PyMem_Free(worst)
            raise MemoryError()
        cdef int k
        for k in range(nsub):
            cs[k] = (<StreamCounter>counters[k]).c
            ls_counter_prefault(cs[k])
        cdef const uint8_t* ka = self.keepalive
        cdef Py_ssize_t ka_len = len(self.keepalive)
        cdef uint64_t start, now, last_rx = 0, next_keepalive, deadline
        cdef uint64_t idle_ns = <uint64_t>(idle * 1e9)
        cdef uint64_t other = 0, datagrams = 0, frames = 0, reads = 0
        cdef int rc, i, e, ready_n, fd
        cdef const uint8_t* p
        cdef int* fds = self.fds
        cdef int epfd = self.epfd
        cdef int ka_next
        cdef uint64_t ka_round
        cdef epoll_event* evs = <epoll_event*>PyMem_Calloc(MAX_EVENTS, sizeof(epoll_event))
        if evs == NULL:
            PyMem_Free(cs)
            PyMem_Free(worst)
            raise MemoryError()
        cdef RecvBatch rx = self.rx
        cdef Py_ssize_t n, off, seg
        try:
            with nogil:  # (C1) subscribed again, all at once, before publishing may start
                for k in range(nsub):
                    sendto(fds[k], ka, ka_len, 0, &self.bb, sizeof(sockaddr_in))
            if ready is not None:
                ready()
            with nogil:
                start = ls_now_ns()
                deadline = start + <uint64_t>(max_duration * 1e9)
                # (C1) stay subscribed: a KEEPALIVE from every socket once a second, spread
                # over KEEPALIVE_SPREAD so that 10,000 sockets never hold up receiving for
                # the time 10,000 sends take.
                ka_round = start
                ka_next = nsub
                while True:
                    now = ls_now_ns()
                    if now >= deadline or (last_rx and now - last_rx > idle_ns):
                        break
                    if ka_next < nsub:
                        target = nsub if now - ka_round >= KEEPALIVE_SPREAD_NS else \
                            1 + <int>((nsub - 1) * (now - ka_round) // KEEPALIVE_SPREAD_NS)
                        while ka_next < target:
                            sendto(fds[ka_next], ka, ka_len, 0, &self.bb, sizeof(sockaddr_in))
                            ka_next += 1
                    elif now - ka_round >= 1000000000:
                        ka_round = now
                        ka_next = 0
                        continue
                    ready_n = epoll_wait(epfd, evs, MAX_EVENTS, 10)
                    for e in range(ready_n):
                        k = <int>evs[e].data.u32
                        fd = fds[k]
                        while True:
                            rc = rx.receive(fd)
                            if rc <= 0:
                                break
                            now = ls_now_ns()
                            if slice_ns:
                                at = <Py_ssize_t>((now - start) // slice_ns)
                                if at >= slices:
                                    at = slices - 1  # (bounded) the last slice takes the rest
                            reads += rc
                            for i in range(rc):
                                p = rx.slot(i)
                                n = rx.length(i)
                                # With GRO a read may hold several datagrams of `seg` bytes
                                # each (the last may be shorter); without, seg is the whole.
                                seg = rx.segment_size(i) or n
                                if n == 0 or (rx.addrs[i].sin_port != self.bb.sin_port
                                              or rx.addrs[i].sin_addr.s_addr
                                              != self.bb.sin_addr.s_addr):
                                    # Empty, or not from the backbone (the only source of
                                    # DELIVERs): counted, never believed.
                                    datagrams += 1
                                    other += 1
                                    continue
                                off = 0
                                while off < n:
                                    datagrams += 1
                                    if _count_delivers(cs[k], p + off, min(seg, n - off), now,
                                                       &frames, &worst[at]):
                                        last_rx = now
                                    else:
                                        other += 1
                                    off += seg
                            if rc < RECV_BATCH:
                                break
                now = ls_now_ns()
            if slice_ns:
                last = (last_rx - start) // slice_ns + 1 if last_rx > start else 0
                timeline_ns = [worst[i] for i in range(min(<Py_ssize_t>last, slices))]
        finally:
            PyMem_Free(cs)
            PyMem_Free(worst)
            PyMem_Free(evs)
        merged = LatencyHistogram()
        per_sub = []
        for c in counters:
            per_sub.append(c.summary())
            ls_hist_merge(&merged.h, &(<StreamCounter>c).c.latency)
        return {
            "subscribers": per_sub,
            "unique": sum(s["unique"] for s in per_sub),
            "duplicates": sum(s["duplicates"] for s in per_sub),
            "reordered": sum(s["reordered"] for s in per_sub),
            "datagrams": datagrams,
            "reads": reads,
            "frames": frames,
            "other_datagrams": other,
            "latency": merged.summary(),
            "latency_buckets": merged.buckets(),
            "elapsed": (now - start) / 1e9,
            "active": ((last_rx - start) / 1e9) if last_rx else 0.0,
            **({"timeline_s": timeline, "timeline_worst_ns": timeline_ns,
                "timeline_start_ns": start} if slice_ns else {}),
        }


def subscribe_fyrehose(host, int port, *, int subscribers=1, double max_duration=30.0,
                       double idle=0.5, double ack_timeout=3.0, ready=None, int buffer=32 << 20,
                       Py_ssize_t pack=0, bint gro=False, double timeline=0.0):
    """One trial: sign `subscribers` sockets on, measure (ready() is called once every socket
    is subscribed and counting can start), sign off."""
    group = SubscriberGroup(host, port, subscribers, buffer, pack, gro)
    try:
        group.sign_on(ack_timeout)
        return group.measure(max_duration, idle, timeline, ready=ready)
    finally:
        group.sign_off()
