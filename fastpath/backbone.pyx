# cython: language_level=3
"""The fyrehose backbone loop: sequencing, subscriber table, fan-out, REQUEST→FORWARD.

Runs entirely without the GIL and creates no Python object per datagram. The seed's rules
are cited as (B1)..(B5) for RULES (BACKBONE).
"""
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcpy, memset
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME
from posix.unistd cimport pipe, read, write, close
from posix.fcntl cimport fcntl, F_SETFL, O_NONBLOCK
from posix.uio cimport iovec

from fastpath.codec cimport (classify, write_deliver_header, T_DELIVER, T_PUSH, T_REQUEST,
                             T_FORWARD, T_KEEPALIVE, T_KEEPALIVE_ACK, HEADER_SIZE, RANGE_SIZE,
                             TOKEN_SIZE, MAX_DATA)
from fastpath.csocket cimport (sockaddr_in, pollfd, poll, POLLIN, AF_INET, htons, htonl, ntohs,
                               ntohl, cmsghdr, CMSG_SPACE, CMSG_LEN, CMSG_DATA, SOL_UDP,
                               UDP_SEGMENT)
from fastpath.wire cimport get_u16, get_u32, get_u48, put_u16, put_u32, put_u48
from fastpath.batchio cimport RecvBatch, SendBatch

import socket

DROP_REASONS = {
    DROP_TRUNCATED: "truncated",
    DROP_LENGTH_MISMATCH: "length_mismatch",
    DROP_UNKNOWN_TYPE: "unknown_type",
    DROP_OVERSIZE: "oversize",
    DROP_INVALID_FIELD: "invalid_field",
    DROP_UNEXPECTED_TYPE: "unexpected_type",
    DROP_FOREIGN_ADDRESS: "foreign_address",
    DROP_REQUEST_TOO_LARGE: "request_too_large",
    DROP_NO_JOURNAL_PEER: "no_journal_peer",
    DROP_TABLE_FULL: "table_full",
    DROP_ZERO_PORT: "zero_port",
}

cdef uint64_t SEQ_MASK = (<uint64_t>1 << 48) - 1
cdef uint64_t NOSUBSCRIBE = 0x1
cdef uint64_t NOJOURNAL = 0x2
cdef int64_t SWEEP_INTERVAL_NS = 1000000000
cdef int GSO_MAX_SEGMENTS = 64       # the kernel's UDP_MAX_SEGMENTS
cdef size_t GSO_MAX_BYTES = 65000    # one GSO send is at most one IP datagram's worth


def gso_supported():
    """Whether this kernel accepts UDP_SEGMENT (Linux >= 4.18); probed on a throwaway socket."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.IPPROTO_UDP, 103, 1400)
        return True
    except OSError:
        return False
    finally:
        s.close()


cdef inline int64_t monotonic_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef inline uint64_t hash_key(uint64_t key) noexcept nogil:
    return key * <uint64_t>0x9E3779B97F4A7C15


def realtime_first_sequence():
    """Default first SEQUENCE: the wall clock in microseconds, modulo 2**48."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return (<uint64_t>ts.tv_sec * 1000000 + <uint64_t>ts.tv_nsec // 1000) & SEQ_MASK


cdef class BackboneLoop:
    """Owns a bound UDP socket's file descriptor and serves fyrehose on it until stopped."""

    def __cinit__(self, int fd, *, double window=5.0, int max_subscribers=4096,
                  Py_ssize_t max_data=MAX_DATA, uint64_t max_request_range=1024,
                  bint allow_foreign_addresses=False, first_sequence=None, int batch=64,
                  uint64_t seed=0, gso=None, Py_ssize_t gso_max_segment=1472):
        cdef int fds[2]
        cdef uint64_t cap = 1
        if max_subscribers < 1:
            raise ValueError("max_subscribers must be at least 1")
        if not 0 <= max_data <= MAX_DATA:
            raise ValueError(f"max_data must be within 0..{MAX_DATA}")
        if window <= 0:
            raise ValueError("window must be positive")
        if max_request_range < 1:
            raise ValueError("max_request_range must be at least 1")
        self.fd = fd
        self.window_ns = <int64_t>(window * 1e9)
        self.max_data = max_data
        self.max_request_range = max_request_range
        self.allow_foreign = allow_foreign_addresses
        if first_sequence is None:
            first_sequence = realtime_first_sequence()
        if not 0 <= first_sequence <= SEQ_MASK:
            raise ValueError("first_sequence must fit in 48 bits")
        self.next_seq = first_sequence
        self.rng = seed or (<uint64_t>monotonic_ns() ^ <uint64_t>0xD1B54A32D192ED03) | 1
        self.rx = RecvBatch(batch, HEADER_SIZE + max_data + 1)  # +1 so oversize shows as such
        self.tx = SendBatch(1024)
        self.max_subs = max_subscribers
        while cap < <uint64_t>max_subscribers * 2:
            cap <<= 1
        self.index_mask = cap - 1
        self.slots = <Slot*>PyMem_Calloc(batch, sizeof(Slot))
        self.subs = <Subscriber*>PyMem_Calloc(max_subscribers, sizeof(Subscriber))
        self.index = <int*>PyMem_Calloc(cap, sizeof(int))
        if not (self.slots and self.subs and self.index):
            raise MemoryError()
        # GSO: runs of equal-size DELIVERs go to a subscriber in one send. Segments are kept
        # within a standard Ethernet MTU (1500 - 28) by default so any path can carry them.
        self.gso = gso_supported() if gso is None else bool(gso)
        self.gso_max_segment = gso_max_segment
        self.ctrl_space = CMSG_SPACE(sizeof(uint16_t))
        self.pend = <int*>PyMem_Calloc(batch, sizeof(int))
        self.gso_iov = <iovec*>PyMem_Calloc(2 * batch, sizeof(iovec))
        self.gso_ctrl = <uint8_t*>PyMem_Calloc(batch, self.ctrl_space)
        if not (self.pend and self.gso_iov and self.gso_ctrl):
            raise MemoryError()
        if pipe(fds) != 0:
            raise OSError("pipe() failed")
        self.wake_r, self.wake_w = fds[0], fds[1]
        fcntl(self.wake_r, F_SETFL, O_NONBLOCK)
        fcntl(self.wake_w, F_SETFL, O_NONBLOCK)

    def __dealloc__(self):
        PyMem_Free(self.slots)
        PyMem_Free(self.subs)
        PyMem_Free(self.index)
        PyMem_Free(self.pend)
        PyMem_Free(self.gso_iov)
        PyMem_Free(self.gso_ctrl)
        if self.wake_r > 0:
            close(self.wake_r)
            close(self.wake_w)

    @property
    def next_sequence(self):
        """SEQUENCE the next PUSH will get."""
        return self.next_seq

    def stop(self):
        """Ask serve() to return; safe to call from any thread."""
        cdef char b = 1
        self.stopping = 1
        write(self.wake_w, &b, 1)

    def serve(self):
        """Run the loop (GIL released) until stop() is called."""
        cdef int rc, i, timeout_ms
        cdef int64_t now
        cdef pollfd pfds[2]
        cdef char drain[64]
        if self.running:
            raise RuntimeError("the loop is already running")
        self.running = True
        try:
            with nogil:
                self.next_sweep_ns = monotonic_ns() + SWEEP_INTERVAL_NS
                while not self.stopping:
                    rc = self.rx.receive(self.fd)
                    now = monotonic_ns()
                    if now >= self.next_sweep_ns:
                        self.sweep(now)
                    if rc <= 0:
                        if rc < 0:
                            self.c.receive_errors += 1
                        pfds[0].fd = self.fd
                        pfds[0].events = POLLIN
                        pfds[1].fd = self.wake_r
                        pfds[1].events = POLLIN
                        timeout_ms = <int>((self.next_sweep_ns - now) // 1000000) + 1
                        poll(pfds, 2, timeout_ms)
                        continue
                    self.c.batches += 1
                    for i in range(rc):
                        self.handle(i, now)
                    self.fan_out_pending(now)
                    # Every queued datagram points into rx's slots: flush before they are reused.
                    self.tx.flush(self.fd)
                while read(self.wake_r, drain, 64) > 0:
                    pass
        finally:
            self.stopping = 0
            self.running = False

    cdef void queue(self, sockaddr_in* dst, iovec* iov, int iovlen, void* control=NULL,
                    size_t controllen=0) noexcept nogil:
        self.tx.add_control(dst, iov, iovlen, control, controllen)
        if self.tx.full():
            if self.dry:
                self.tx.count = 0
            else:
                self.tx.flush(self.fd)

    cdef void handle(self, int i, int64_t now) noexcept nogil:
        cdef const uint8_t* p = self.rx.slot(i)
        cdef Py_ssize_t n = self.rx.length(i)
        cdef int t
        self.c.datagrams_in += 1
        self.c.bytes_in += n
        if self.rx.truncated(i):
            self.c.drops[DROP_OVERSIZE] += 1
            return
        t = classify(p, n, self.max_data)
        if t < 0:
            self.c.drops[-t] += 1
        elif t == T_PUSH:
            self.on_push(i, p, n, now)
        elif t == T_KEEPALIVE:
            self.on_keepalive(i, p, now)
        elif t == T_REQUEST:
            self.on_request(i, p, now)
        else:
            self.c.drops[DROP_UNEXPECTED_TYPE] += 1

    cdef void on_push(self, int i, const uint8_t* p, Py_ssize_t n, int64_t now) noexcept nogil:
        # (B3) assign a sequence number and DELIVER to every subscriber; (B5) from anyone.
        cdef Slot* slot = &self.slots[i]
        cdef Subscriber* s
        cdef int k
        write_deliver_header(slot.scratch, self.next_seq, n - HEADER_SIZE)
        self.next_seq = (self.next_seq + 1) & SEQ_MASK
        self.c.pushes += 1
        slot.iov[0].iov_base = slot.scratch
        slot.iov[0].iov_len = HEADER_SIZE
        slot.iov[1].iov_base = <void*>(p + HEADER_SIZE)
        slot.iov[1].iov_len = n - HEADER_SIZE
        if self.gso:
            self.pend[self.npend] = i  # fanned out with the rest of the batch
            self.npend += 1
        else:
            self.fan_out(i, now)

    cdef void fan_out(self, int i, int64_t now) noexcept nogil:
        """One DELIVER to every live subscriber, one datagram each."""
        cdef Slot* slot = &self.slots[i]
        cdef Subscriber* s
        cdef int k
        for k in range(self.nsubs):
            s = &self.subs[k]
            if s.expires_ns > now and not (s.flags & NOSUBSCRIBE):
                self.c.delivers += 1
                self.queue(&s.sa, slot.iov, 2)

    cdef void fan_out_pending(self, int64_t now) noexcept nogil:
        """This batch's DELIVERs: runs of equal size go to each subscriber in one UDP_SEGMENT
        send (identical datagrams on the wire); a lone or oversized one goes the plain way."""
        cdef int k = 0, start, count, m, j, runs = 0, used = 0
        cdef size_t size
        cdef iovec* iov
        cdef uint8_t* ctrl
        cdef cmsghdr* c
        cdef Subscriber* s
        while k < self.npend:
            start = k
            size = self.slots[self.pend[k]].iov[1].iov_len + HEADER_SIZE
            k += 1
            while (k < self.npend and k - start < GSO_MAX_SEGMENTS
                   and self.slots[self.pend[k]].iov[1].iov_len + HEADER_SIZE == size
                   and <size_t>(k - start + 1) * size <= GSO_MAX_BYTES):
                k += 1
            count = k - start
            if count == 1 or size > <size_t>self.gso_max_segment:
                for j in range(start, k):
                    self.fan_out(self.pend[j], now)
                continue
            iov = &self.gso_iov[used]
            used += 2 * count
            for m in range(count):
                iov[2 * m] = self.slots[self.pend[start + m]].iov[0]
                iov[2 * m + 1] = self.slots[self.pend[start + m]].iov[1]
            ctrl = self.gso_ctrl + runs * self.ctrl_space
            runs += 1
            memset(ctrl, 0, self.ctrl_space)
            c = <cmsghdr*>ctrl
            c.cmsg_level = SOL_UDP
            c.cmsg_type = UDP_SEGMENT
            c.cmsg_len = CMSG_LEN(sizeof(uint16_t))
            (<uint16_t*>CMSG_DATA(c))[0] = <uint16_t>size
            for j in range(self.nsubs):
                s = &self.subs[j]
                if s.expires_ns > now and not (s.flags & NOSUBSCRIBE):
                    self.c.delivers += count
                    self.gso_sends += 1
                    self.gso_segments += count
                    self.queue(&s.sa, iov, 2 * count, ctrl, self.ctrl_space)
        self.npend = 0

    cdef bint resolve_addr(self, int i, const uint8_t* p, uint32_t* addr, uint32_t* port) noexcept nogil:
        # ADDR/PORT of zero mean "the packet's source"; a foreign ADDR is refused by default so
        # that nobody can make the backbone (or a peer) send traffic to a host that never asked.
        cdef sockaddr_in* src = &self.rx.addrs[i]
        cdef uint32_t src_addr = ntohl(src.sin_addr.s_addr)
        addr[0] = get_u32(p + 1)
        port[0] = get_u16(p + 5)
        if addr[0] == 0:
            addr[0] = src_addr
        elif addr[0] != src_addr and not self.allow_foreign:
            self.c.drops[DROP_FOREIGN_ADDRESS] += 1
            return False
        if port[0] == 0:
            port[0] = ntohs(src.sin_port)
        if port[0] == 0:
            self.c.drops[DROP_ZERO_PORT] += 1
            return False
        return True

    cdef void on_keepalive(self, int i, const uint8_t* p, int64_t now) noexcept nogil:
        # (B1) answer with KEEPALIVE-ACK echoing TOKEN; (B2) subscriber for `window` seconds.
        cdef uint32_t addr, port
        cdef Subscriber* s
        cdef Slot* slot = &self.slots[i]
        self.c.keepalives += 1
        if not self.resolve_addr(i, p, &addr, &port):
            return
        s = self.upsert((<uint64_t>addr << 16) | port, now)
        if s == NULL:
            self.c.drops[DROP_TABLE_FULL] += 1
            return
        s.flags = get_u48(p + 7)
        s.expires_ns = now + self.window_ns
        slot.scratch[0] = T_KEEPALIVE_ACK
        slot.iov[0].iov_base = slot.scratch
        slot.iov[0].iov_len = 1
        slot.iov[1].iov_base = <void*>(p + 13)  # TOKEN, straight from the KEEPALIVE
        slot.iov[1].iov_len = TOKEN_SIZE
        self.queue(&self.rx.addrs[i], slot.iov, 2)

    cdef void on_request(self, int i, const uint8_t* p, int64_t now) noexcept nogil:
        # (B4) FORWARD to one randomly chosen journaling subscriber other than the requester.
        cdef uint32_t addr, port
        cdef uint64_t lo = get_u48(p + 7), hi = get_u48(p + 13), key
        cdef Subscriber* s
        cdef Subscriber* chosen = NULL
        cdef uint64_t seen = 0, x
        cdef Slot* slot = &self.slots[i]
        cdef int k
        self.c.requests += 1
        if not self.resolve_addr(i, p, &addr, &port):
            return
        if hi - lo >= self.max_request_range:
            self.c.drops[DROP_REQUEST_TOO_LARGE] += 1
            return
        key = (<uint64_t>addr << 16) | port
        for k in range(self.nsubs):
            s = &self.subs[k]
            if s.expires_ns <= now or (s.flags & (NOSUBSCRIBE | NOJOURNAL)) or s.key == key:
                continue
            seen += 1
            # xorshift64; reservoir sampling keeps each candidate with probability 1/seen.
            x = self.rng
            x ^= x << 13
            x ^= x >> 7
            x ^= x << 17
            self.rng = x
            if x % seen == 0:
                chosen = s
        if chosen == NULL:
            self.c.drops[DROP_NO_JOURNAL_PEER] += 1
            return
        slot.scratch[0] = T_FORWARD
        put_u32(slot.scratch + 1, addr)
        put_u16(slot.scratch + 5, <uint16_t>port)
        put_u48(slot.scratch + 7, lo)
        put_u48(slot.scratch + 13, hi)
        slot.iov[0].iov_base = slot.scratch
        slot.iov[0].iov_len = RANGE_SIZE
        self.c.forwards += 1
        self.queue(&chosen.sa, slot.iov, 1)

    cdef Subscriber* upsert(self, uint64_t key, int64_t now) noexcept nogil:
        cdef uint64_t h = hash_key(key) & self.index_mask
        cdef int idx
        cdef Subscriber* s
        while self.index[h] != 0:
            s = &self.subs[self.index[h] - 1]
            if s.key == key:
                return s
            h = (h + 1) & self.index_mask
        if self.nsubs == self.max_subs:
            # Queued sends point at table entries: flush them before the sweep moves entries.
            self.tx.flush(self.fd)
            self.sweep(now)
            if self.nsubs == self.max_subs:
                return NULL
            h = hash_key(key) & self.index_mask
            while self.index[h] != 0:
                h = (h + 1) & self.index_mask
        idx = self.nsubs
        self.nsubs += 1
        self.index[h] = idx + 1
        s = &self.subs[idx]
        memset(s, 0, sizeof(Subscriber))
        s.key = key
        s.sa.sin_family = AF_INET
        s.sa.sin_addr.s_addr = htonl(<uint32_t>(key >> 16))
        s.sa.sin_port = htons(<uint16_t>(key & 0xffff))
        return s

    cdef void sweep(self, int64_t now) noexcept nogil:
        """Drop expired subscribers and rebuild the index (called only with nothing queued)."""
        cdef int k, kept = 0
        cdef uint64_t h
        for k in range(self.nsubs):
            if self.subs[k].expires_ns > now:
                if kept != k:
                    self.subs[kept] = self.subs[k]
                kept += 1
        self.nsubs = kept
        memset(self.index, 0, (self.index_mask + 1) * sizeof(int))
        for k in range(kept):
            h = hash_key(self.subs[k].key) & self.index_mask
            while self.index[h] != 0:
                h = (h + 1) & self.index_mask
            self.index[h] = k + 1
        self.next_sweep_ns = now + SWEEP_INTERVAL_NS

    def dry_run(self, datagrams, int repeat=1):
        """Benchmark hook: run [(datagram, (host, port))] through the real receive path
        `repeat` times, as if received in batches, with every queued send discarded. Measures
        sequencing, the table and fan-out without the kernel. Not while serve() runs."""
        cdef int i = 0, k, n = len(datagrams)
        cdef int64_t now = monotonic_ns()
        cdef bytes data
        if self.running:
            raise RuntimeError("dry_run() cannot run while the loop serves")
        if n > self.rx.capacity:
            raise ValueError(f"at most {self.rx.capacity} datagrams (one receive batch)")
        for i in range(n):
            data, (host, port) = datagrams[i]
            if len(data) > self.rx.slot_size:
                raise ValueError("datagram larger than a receive slot")
            memcpy(<void*>self.rx.slot(i), <const char*>data, len(data))
            self.rx.msgs[i].msg_len = len(data)
            self.rx.msgs[i].msg_hdr.msg_flags = 0
            packed = socket.inet_aton(host)
            self.rx.addrs[i].sin_family = AF_INET
            self.rx.addrs[i].sin_addr.s_addr = htonl(int.from_bytes(packed, "big"))
            self.rx.addrs[i].sin_port = htons(port)
        self.dry = True
        try:
            with nogil:
                for k in range(repeat):
                    for i in range(n):
                        self.handle(i, now)
                    self.fan_out_pending(now)
                    self.tx.count = 0
        finally:
            self.dry = False
        return self.c.delivers

    def stats(self):
        """Counters and table size as a dict (read without stopping the loop)."""
        cdef int64_t now = monotonic_ns()
        cdef int k, live = 0, subscribers = 0, journaling = 0
        for k in range(self.nsubs):
            if self.subs[k].expires_ns > now:
                live += 1
                if not (self.subs[k].flags & NOSUBSCRIBE):
                    subscribers += 1
                    if not (self.subs[k].flags & NOJOURNAL):
                        journaling += 1
        return {
            "datagrams_in": self.c.datagrams_in,
            "bytes_in": self.c.bytes_in,
            "datagrams_out": self.tx.sent,
            "bytes_out": self.tx.bytes_sent,
            "send_errors": self.tx.errors,
            "receive_errors": self.c.receive_errors,
            "pushes": self.c.pushes,
            "delivers": self.c.delivers,
            "keepalives": self.c.keepalives,
            "requests": self.c.requests,
            "forwards": self.c.forwards,
            "batches": self.c.batches,
            "gso": bool(self.gso),
            "gso_sends": self.gso_sends,
            "gso_segments": self.gso_segments,
            "clients": live,
            "subscribers": subscribers,
            "journaling": journaling,
            "next_sequence": self.next_seq,
            "drops": {name: self.c.drops[code] for code, name in DROP_REASONS.items()},
        }

    def subscribers(self):
        """Live table entries as [(host, port, flags, seconds_left)]."""
        cdef int64_t now = monotonic_ns()
        cdef Subscriber s
        cdef uint64_t a
        out = []
        for k in range(self.nsubs):
            s = self.subs[k]
            if s.expires_ns > now:
                a = s.key >> 16
                out.append((f"{a >> 24}.{(a >> 16) & 0xff}.{(a >> 8) & 0xff}.{a & 0xff}",
                            s.key & 0xffff, s.flags, (s.expires_ns - now) / 1e9))
        return out
