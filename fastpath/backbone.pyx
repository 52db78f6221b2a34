# cython: language_level=3
"""The fyrehose backbone: a sans-IO core (sequencing, subscriber table, fan-out,
REQUEST→FORWARD) and the batch I/O loop that drives it.

BackboneCore decides everything from what it is given (datagrams in its receive slots, their
sources, `now`) and hands what to send to a flush sink; BackboneLoop owns the socket and the
clock. The hot path runs without the GIL and creates no Python object per datagram. The seed's
rules are cited as (B1)..(B5) for RULES (BACKBONE).
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from cpython.pythread cimport (PyThread_allocate_lock, PyThread_free_lock, PyThread_acquire_lock,
                               PyThread_release_lock, WAIT_LOCK, NOWAIT_LOCK)
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcpy, memset
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME
from posix.fcntl cimport fcntl, F_GETFL, F_SETFL, O_NONBLOCK
from posix.uio cimport iovec

from fastpath.codec cimport (classify, count_frames, T_DELIVER, T_PUSH, T_REQUEST,
                             T_FORWARD, T_KEEPALIVE, T_KEEPALIVE_ACK, HEADER_SIZE, RANGE_SIZE,
                             TOKEN_SIZE, MAX_DATA, MAX_DATAGRAM, F_PACKED, PACK_LIMIT_SHIFT,
                             DEFAULT_PACK_LIMIT, FAULT_LENGTH_MISMATCH, DROP_TRUNCATED,
                             DROP_LENGTH_MISMATCH, DROP_UNKNOWN_TYPE, DROP_OVERSIZE,
                             DROP_INVALID_FIELD, DROP_UNEXPECTED_TYPE, DROP_FOREIGN_ADDRESS,
                             DROP_REQUEST_TOO_LARGE, DROP_NO_JOURNAL_PEER, DROP_TABLE_FULL,
                             DROP_ZERO_PORT, DROP_REQUEST_NOT_SUBSCRIBED, DROP_REPAIR_BUDGET,
                             DROP_ADDRESS_LIMIT, DROP_PACK_NOT_SIGNED_ON,
                             DROP_PACK_TOO_MANY_FRAMES, DROP_NOT_ACTIVE, T_QUERY, T_INFO,
                             INFO_SIZE, OFF_INFO_TOKEN, OFF_QUERY_TOKEN)
from fastpath.csocket cimport (sockaddr_in, AF_INET, htons, htonl, ntohs, ntohl, cmsghdr,
                               CMSG_SPACE, CMSG_LEN, CMSG_DATA, SOL_UDP, UDP_SEGMENT, SOL_SOCKET,
                               SO_RCVTIMEO, setsockopt, timeval, mmsghdr, MSG_TRUNC)
from fastpath.wire cimport get_u16, get_u32, get_u48, put_u16, put_u32, put_u48
from fastpath.batchio cimport RecvBatch, SendBatch

import socket

from fastpath import packets

DROP_REASONS = {code: name for code, name in enumerate(packets.DROP_REASONS, 1)}

cdef uint64_t SEQ_MASK = (<uint64_t>1 << 48) - 1
cdef uint64_t NOSUBSCRIBE = 0x1
cdef uint64_t NOJOURNAL = 0x2
cdef int64_t SWEEP_INTERVAL_NS = 1000000000
cdef int64_t FULL_SWEEP_INTERVAL_NS = 10000000  # a full table is swept at most every 10 ms
cdef long WAKE_INTERVAL_US = 100000  # recvmmsg timeout: sweeps and stop() are noticed by then
cdef int GSO_MAX_SEGMENTS = 64       # the kernel's UDP_MAX_SEGMENTS
cdef size_t GSO_MAX_BYTES = 65000    # one GSO send is at most one IP datagram's worth
cdef int FRAME_CAP = 8192            # frames fanned out at once (a 64-datagram batch of packs
                                     # may hold more: it is then fanned out in parts)
cdef int MAX_IOV = 1024              # the kernel's UIO_MAXIOV: iovecs in one datagram


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
    # splitmix64's finalizer: every bit of the key reaches the low bits the table uses. (A plain
    # multiply left the low bits to the port's alone: every host on one port shared a chain.)
    key ^= key >> 30
    key *= <uint64_t>0xBF58476D1CE4E5B9
    key ^= key >> 27
    key *= <uint64_t>0x94D049BB133111EB
    return key ^ (key >> 31)


def realtime_first_sequence():
    """Default first SEQUENCE: the wall clock in microseconds, modulo 2**48."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return (<uint64_t>ts.tv_sec * 1000000 + <uint64_t>ts.tv_nsec // 1000) & SEQ_MASK


cdef str dotted(uint32_t a):
    return f"{a >> 24}.{(a >> 16) & 0xff}.{(a >> 8) & 0xff}.{a & 0xff}"


@cython.final
cdef class BackboneCore:
    """The backbone's every rule, limit and counter, driven only by datagrams and `now` (ns)."""

    def __cinit__(self, *, double window=5.0, int max_subscribers=4096,
                  Py_ssize_t max_data=MAX_DATA, uint64_t max_request_range=1024,
                  bint allow_foreign_addresses=False, first_sequence=None, int batch=64,
                  uint64_t seed=0, bint gso=False, Py_ssize_t gso_max_segment=1472,
                  bint packing=True, Py_ssize_t max_pack=MAX_DATAGRAM, int max_per_address=256,
                  double repair_rate=16384, double repair_burst=16384,
                  Py_ssize_t max_pack_frames=1024, bint keep_sends=True):
        cdef uint64_t cap = 1
        if max_subscribers < 1:
            raise ValueError("max_subscribers must be at least 1")
        if not 0 <= max_data <= MAX_DATA:
            raise ValueError(f"max_data must be within 0..{MAX_DATA}")
        if window <= 0:
            raise ValueError("window must be positive")
        if max_request_range < 1:
            raise ValueError("max_request_range must be at least 1")
        if not HEADER_SIZE <= max_pack <= MAX_DATAGRAM:
            raise ValueError(f"max_pack must be within {HEADER_SIZE}..{MAX_DATAGRAM}")
        if max_per_address < 0:
            raise ValueError("max_per_address must be 0 (no limit) or positive")
        if repair_rate < 0 or repair_burst < 1:
            raise ValueError("repair_rate must be >= 0 and repair_burst >= 1")
        if max_pack_frames < 2:
            raise ValueError("max_pack_frames must be at least 2")
        self.max_per_address = max_per_address
        self.repair_rate = repair_rate
        self.repair_burst = repair_burst
        self.max_pack_frames = max_pack_frames
        self.sink_fd = -1
        self.keep_sends = keep_sends
        self.outbox = []
        self.window_ns = <int64_t>(window * 1e9)
        self.max_data = max_data
        self.max_request_range = max_request_range
        self.allow_foreign = allow_foreign_addresses
        if first_sequence is None:
            first_sequence = realtime_first_sequence()
        if not 0 <= first_sequence <= SEQ_MASK:
            raise ValueError("first_sequence must fit in 48 bits")
        self.next_seq = first_sequence
        self.epoch_start = first_sequence
        self.rng = seed or (<uint64_t>monotonic_ns() ^ <uint64_t>0xD1B54A32D192ED03) | 1
        self.rx = RecvBatch(batch, HEADER_SIZE + max_data + 1)  # +1 so oversize shows as such
        self.tx = SendBatch(1024, 0)  # never wait for buffer space: drop and count
        self.max_subs = max_subscribers
        while cap < <uint64_t>max_subscribers * 2:
            cap <<= 1
        self.index_mask = cap - 1
        self.slots = <Slot*>PyMem_Calloc(batch, sizeof(Slot))
        self.subs = <Subscriber*>PyMem_Calloc(max_subscribers, sizeof(Subscriber))
        self.plain = <Subscriber**>PyMem_Calloc(max_subscribers, sizeof(Subscriber*))
        self.index = <int*>PyMem_Calloc(cap, sizeof(int))
        self.host_keys = <uint64_t*>PyMem_Calloc(cap, sizeof(uint64_t))
        self.host_counts = <int*>PyMem_Calloc(cap, sizeof(int))
        if not (self.slots and self.subs and self.index and self.plain and self.host_keys
                and self.host_counts):
            raise MemoryError()
        # Touch the indexes now (every sweep rewrites them whole): resident memory is then
        # what it will stay, instead of growing at the first sweep under load.
        memset(self.index, 0, cap * sizeof(int))
        memset(self.host_keys, 0, cap * sizeof(uint64_t))
        memset(self.host_counts, 0, cap * sizeof(int))
        # GSO: runs of equal-size DELIVERs go to a subscriber in one send. Segments are kept
        # within a standard Ethernet MTU (1500 - 28) by default so any path can carry them.
        self.gso = gso
        self.gso_max_segment = gso_max_segment
        self.ctrl_space = CMSG_SPACE(sizeof(uint16_t))
        self.packing = packing
        self.max_pack = max_pack
        self.frames = <iovec*>PyMem_Calloc(FRAME_CAP, sizeof(iovec))
        self.run_start = <int*>PyMem_Calloc(FRAME_CAP, sizeof(int))
        self.run_count = <int*>PyMem_Calloc(FRAME_CAP, sizeof(int))
        self.gso_ctrl = <uint8_t*>PyMem_Calloc(FRAME_CAP, self.ctrl_space)
        self.pack_iov = <iovec*>PyMem_Calloc(FRAME_CAP, sizeof(iovec))
        self.packs = <Pack*>PyMem_Calloc(FRAME_CAP, sizeof(Pack))
        self.adopt_lock = PyThread_allocate_lock()
        self.adoptions = <Adoption*>PyMem_Calloc(max_subscribers, sizeof(Adoption))
        if not (self.frames and self.run_start and self.run_count and self.gso_ctrl
                and self.pack_iov and self.packs and self.adopt_lock and self.adoptions):
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.slots)
        PyMem_Free(self.subs)
        PyMem_Free(self.plain)
        PyMem_Free(self.index)
        PyMem_Free(self.host_keys)
        PyMem_Free(self.host_counts)
        PyMem_Free(self.frames)
        PyMem_Free(self.run_start)
        PyMem_Free(self.run_count)
        PyMem_Free(self.gso_ctrl)
        PyMem_Free(self.pack_iov)
        PyMem_Free(self.packs)
        PyMem_Free(self.adoptions)
        if self.adopt_lock:
            PyThread_free_lock(self.adopt_lock)

    @property
    def next_sequence(self):
        """SEQUENCE the next PUSH will get."""
        return self.next_seq

    def gate(self, uint64_t limit, int64_t until_ns):
        """(Cluster member) sequence only up to SEQUENCE `limit` (mod 2^48) and only while
        now < `until_ns`; else PUSH, KEEPALIVE and REQUEST are dropped (`not_active`)."""
        # (Plain stores the loop thread reads per datagram: each is one aligned word.)
        self.until_ns = until_ns
        self.limit_seq = limit & SEQ_MASK
        self.gated = True

    def set_next_sequence(self, uint64_t sequence):
        """(Cluster member, gated closed) the SEQUENCE the next PUSH gets: a new epoch's first."""
        cdef Py_ssize_t k
        if sequence > SEQ_MASK:
            raise ValueError("sequence must fit in 48 bits")
        self.next_seq = sequence
        self.epoch_start = sequence
        for k in range(self.nsubs):  # (signed on before our first: they get all of it)
            self.subs[k].since_seq = sequence

    def set_info(self, info):
        """(Cluster member) the 64-byte INFO a QUERY is answered with (TOKEN replaced by the
        QUERY's); None: QUERY is unexpected (a lone backbone)."""
        cdef const uint8_t[::1] view
        if info is None:
            self.has_info = False
            return
        view = bytes(info)
        if view.shape[0] != INFO_SIZE:
            raise ValueError(f"an INFO is {INFO_SIZE} bytes")
        self.has_info = False  # (the loop never answers with half of an old one and a new one)
        memcpy(self.info, &view[0], INFO_SIZE)
        self.has_info = True

    def adopt(self, entries):
        """(Cluster member, a new active) take over table entries of the old active's:
        [(host, port, flags, expires_ns)] (the core's clock), each at most `window` ahead.
        Safe from any thread: the loop applies them at its next on_timer (handle_timer), as a
        KEEPALIVE would, but unanswered and without extending what the old one granted; at
        most max_subscribers wait at once (more are dropped, `table_full`)."""
        cdef list items = []
        cdef Py_ssize_t k
        for host, port, flags, expires in entries:
            addr = int.from_bytes(socket.inet_aton(host), "big")
            items.append(((addr << 16) | (int(port) & 0xffff), int(flags) & SEQ_MASK,
                          int(expires)))
        with nogil:
            PyThread_acquire_lock(self.adopt_lock, WAIT_LOCK)
        try:
            for key, flags, expires in items:
                if self.nadoptions == self.max_subs:
                    self.c.drops[DROP_TABLE_FULL] += 1
                    continue
                k = self.nadoptions
                self.adoptions[k].key = key
                self.adoptions[k].flags = flags
                self.adoptions[k].expires_ns = expires
                self.nadoptions += 1
            self.adopt_pending = self.nadoptions > 0
        finally:
            PyThread_release_lock(self.adopt_lock)

    cdef void apply_adoptions(self, int64_t now) noexcept nogil:
        cdef Py_ssize_t k
        cdef Adoption* a
        cdef Subscriber* s
        cdef int64_t expires
        if not PyThread_acquire_lock(self.adopt_lock, NOWAIT_LOCK):
            return  # (being written: the next wake-up applies it)
        for k in range(self.nadoptions):
            a = &self.adoptions[k]
            if a.expires_ns <= now or not a.key & 0xffff:
                continue
            expires = a.expires_ns
            if expires > now + self.window_ns:
                expires = now + self.window_ns
            s = self.upsert(a.key, now)
            if s == NULL:
                self.c.drops[self.refused] += 1
                continue
            if s.expires_ns >= expires:
                continue  # its own KEEPALIVE reached us: fresher than the old active's word
            if s.keepalives == 0:  # (made here) the old active's client: it holds what it had
                s.since_seq = self.epoch_start
            self.c.adopted += 1
            self.set_flags(s, a.flags)
            s.expires_ns = expires
        self.nadoptions = 0
        self.adopt_pending = False
        PyThread_release_lock(self.adopt_lock)

    cdef void set_flags(self, Subscriber* s, uint64_t flags) noexcept nogil:
        s.flags = flags
        s.pack_limit = 0
        if self.packing and s.flags & F_PACKED:
            s.pack_limit = (s.flags >> PACK_LIMIT_SHIFT) & 0xffff or DEFAULT_PACK_LIMIT
            if s.pack_limit < HEADER_SIZE:
                s.pack_limit = HEADER_SIZE  # still one frame per datagram, never less
            if s.pack_limit > self.max_pack:
                s.pack_limit = <uint32_t>self.max_pack

    cdef bint closed(self, Py_ssize_t count, int64_t now) noexcept nogil:
        """Whether the gate refuses `count` more sequences now (never, ungated)."""
        cdef uint64_t avail
        if not self.gated:
            return False
        if now >= self.until_ns:
            return True
        avail = (self.limit_seq - self.next_seq + 1) & SEQ_MASK
        return avail >= (<uint64_t>1 << 47) or <uint64_t>count > avail

    cdef void on_query(self, int i, const uint8_t* p) noexcept nogil:
        # As large as the QUERY: never more bytes out than in.
        cdef Slot* slot = &self.slots[i]
        memcpy(slot.scratch, self.info, INFO_SIZE)
        slot.scratch[0] = T_INFO
        memcpy(slot.scratch + OFF_INFO_TOKEN, p + OFF_QUERY_TOKEN, TOKEN_SIZE)
        slot.iov[0].iov_base = slot.scratch
        slot.iov[0].iov_len = INFO_SIZE
        self.queue(&self.rx.addrs[i], slot.iov, 1)

    cdef void receive_batch(self, int count, int64_t now) noexcept nogil:
        """Handle the first `count` receive slots, all received at `now`, and flush the sends
        they set off (every queued send points into the slots, which the next batch reuses)."""
        cdef int i
        self.count_batch(count)
        for i in range(count):
            self.handle(i, now)
        self.end_batch(now)

    cdef void count_batch(self, int count) noexcept nogil:
        """Count one receive batch of `count` datagrams, and its batch-size histogram bucket
        (at most 1, 2, 4 ... 64 datagrams, or more)."""
        cdef int k = 0
        self.c.batches += 1
        while k < 7 and count > (1 << k):
            k += 1
        self.c.batch_sizes[k] += 1

    cdef void end_batch(self, int64_t now) noexcept nogil:
        self.fan_out_pending(now)
        self.flush()

    cdef void on_timer(self, int64_t now) noexcept nogil:
        if self.adopt_pending:
            self.apply_adoptions(now)
        if now >= self.next_sweep_ns:
            self.sweep(now)

    cdef void queue(self, sockaddr_in* dst, iovec* iov, int iovlen, void* control=NULL,
                    size_t controllen=0) noexcept nogil:
        self.tx.add_control(dst, iov, iovlen, control, controllen)
        if self.tx.full():
            self.flush()

    cdef void handle(self, int i, int64_t now) noexcept nogil:
        cdef uint8_t* p = <uint8_t*>self.rx.slot(i)  # PUSH frames are stamped in place
        cdef Py_ssize_t n = self.rx.length(i), count
        cdef int t
        self.c.datagrams_in += 1
        self.c.bytes_in += n
        if self.rx.truncated(i):
            self.c.drops[DROP_OVERSIZE] += 1
            return
        t = classify(p, n, self.max_data)
        if t == T_PUSH:
            if self.closed(1, now):
                self.c.drops[DROP_NOT_ACTIVE] += 1
            else:
                self.on_push(p, n, 1, now)
        elif t == -FAULT_LENGTH_MISMATCH and p[0] == T_PUSH and self.packing:
            # Packing extension: several PUSH frames back to back, or a malformed PUSH.
            count = count_frames(p, n, self.max_data)
            if count < 0:
                self.c.drops[-count] += 1
            elif count > self.max_pack_frames:
                self.c.drops[DROP_PACK_TOO_MANY_FRAMES] += 1
            elif not self.packer(i, now):
                self.c.drops[DROP_PACK_NOT_SIGNED_ON] += 1
            elif self.closed(count, now):
                self.c.drops[DROP_NOT_ACTIVE] += 1
            else:
                self.c.packs_in += 1
                self.on_push(p, n, count, now)
        elif t < 0:
            self.c.drops[-t] += 1
        elif t == T_QUERY and self.has_info:
            self.on_query(i, p)
        elif (t == T_KEEPALIVE or t == T_REQUEST) and self.gated and now >= self.until_ns:
            self.c.drops[DROP_NOT_ACTIVE] += 1
        elif t == T_KEEPALIVE:
            self.on_keepalive(i, p, now)
        elif t == T_REQUEST:
            self.on_request(i, p, now)
        else:
            self.c.drops[DROP_UNEXPECTED_TYPE] += 1

    cdef void on_push(self, uint8_t* p, Py_ssize_t n, Py_ssize_t count, int64_t now) noexcept nogil:
        # (B3) each frame gets the next sequence number and goes to every subscriber; (B5) from
        # anyone. A PUSH frame has a DELIVER's layout, so it becomes one where it lies: type byte
        # and UNUSED -> SEQUENCE. Fan-out happens once the batch is read (fan_out_pending).
        cdef Py_ssize_t off = 0, size
        if self.nframes + count > FRAME_CAP:
            self.fan_out_pending(now)
        while off < n:
            size = HEADER_SIZE + get_u16(p + off + 1)
            p[off] = T_DELIVER
            put_u48(p + off + 3, self.next_seq)
            self.next_seq = (self.next_seq + 1) & SEQ_MASK
            self.frames[self.nframes].iov_base = p + off
            self.frames[self.nframes].iov_len = size
            self.nframes += 1
            off += size
        self.c.pushes += count

    cdef void fan_out_pending(self, int64_t now) noexcept nogil:
        """Send this batch's DELIVERs to every live subscriber: plain ones get one datagram per
        frame (equal-size runs in one UDP_SEGMENT send when GSO is on), packing ones get the
        frames packed up to their limit. Every queued send points into the receive slots and
        these arrays, so the queue is flushed before they are reused."""
        cdef int k, start
        cdef size_t size
        cdef cmsghdr* c
        cdef uint8_t* ctrl
        cdef Subscriber* s
        if self.nframes == 0:
            return
        self.nruns = 0
        if self.gso:
            k = 0
            while k < self.nframes:
                start = k
                size = self.frames[k].iov_len
                k += 1
                while (k < self.nframes and k - start < GSO_MAX_SEGMENTS
                       and self.frames[k].iov_len == size
                       and <size_t>(k - start + 1) * size <= GSO_MAX_BYTES):
                    k += 1
                if k - start > 1 and size > <size_t>self.gso_max_segment:
                    k = start + 1  # too large to segment: one plain send each
                self.run_start[self.nruns] = start
                self.run_count[self.nruns] = k - start
                if k - start > 1:
                    ctrl = self.gso_ctrl + self.nruns * self.ctrl_space
                    memset(ctrl, 0, self.ctrl_space)
                    c = <cmsghdr*>ctrl
                    c.cmsg_level = SOL_UDP
                    c.cmsg_type = UDP_SEGMENT
                    c.cmsg_len = CMSG_LEN(sizeof(uint16_t))
                    (<uint16_t*>CMSG_DATA(c))[0] = <uint16_t>size
                self.nruns += 1
        self.packs_limit = 0
        # Plain subscribers message by message (run by run with GSO), as the payload is then
        # copied N times while it is still in cache; packing ones subscriber by subscriber.
        self.nplain = 0
        for k in range(self.nsubs):
            s = &self.subs[k]
            if s.expires_ns > now and not (s.flags & NOSUBSCRIBE):
                self.c.delivers += self.nframes
                s.delivered += self.nframes
                if s.pack_limit:
                    self.fan_out_packed(s)
                else:
                    s.datagrams += self.nframes
                    self.plain[self.nplain] = s
                    self.nplain += 1
        if self.nplain:
            self.fan_out_plain()
        self.flush()
        self.nframes = 0

    cdef void fan_out_plain(self) noexcept nogil:
        cdef int j, r, k
        if not self.gso:
            for j in range(self.nframes):
                for k in range(self.nplain):
                    self.queue(&self.plain[k].sa, &self.frames[j], 1)
            return
        for r in range(self.nruns):
            for k in range(self.nplain):
                if self.run_count[r] == 1:
                    self.queue(&self.plain[k].sa, &self.frames[self.run_start[r]], 1)
                else:
                    self.c.gso_sends += 1
                    self.c.gso_segments += self.run_count[r]
                    self.queue(&self.plain[k].sa, &self.frames[self.run_start[r]],
                               self.run_count[r], self.gso_ctrl + r * self.ctrl_space,
                               self.ctrl_space)

    cdef void fan_out_packed(self, Subscriber* s) noexcept nogil:
        cdef int j
        if self.packs_limit != s.pack_limit:
            if self.packs_limit != 0:
                self.flush()  # queued sends point at the packs about to be rebuilt
            self.build_packs(s.pack_limit)
        s.datagrams += self.npacks
        for j in range(self.npacks):
            self.c.packs_out += 1
            self.queue(&s.sa, &self.pack_iov[self.packs[j].iov_start], self.packs[j].iov_count)

    cdef void build_packs(self, Py_ssize_t limit) noexcept nogil:
        """Group the frames, in order, into datagrams of at most `limit` bytes (a larger frame
        goes alone); frames adjacent in memory (from one packed PUSH) share an iovec."""
        cdef int j = 0, niov = 0, start
        cdef Pack* pk
        cdef size_t used, size
        cdef iovec* last
        self.npacks = 0
        while j < self.nframes:
            pk = &self.packs[self.npacks]
            self.npacks += 1
            pk.iov_start = niov
            pk.frames = 0
            used = 0
            while j < self.nframes:
                size = self.frames[j].iov_len
                if pk.frames and used + size > <size_t>limit:
                    break
                last = &self.pack_iov[niov - 1] if niov else NULL
                if pk.frames and <uint8_t*>last.iov_base + last.iov_len == <uint8_t*>self.frames[j].iov_base:
                    last.iov_len += size
                elif pk.frames and niov - pk.iov_start == MAX_IOV:
                    break
                else:
                    self.pack_iov[niov] = self.frames[j]
                    niov += 1
                used += size
                pk.frames += 1
                j += 1
            pk.iov_count = niov - pk.iov_start
        self.packs_limit = limit

    cdef void flush(self) noexcept nogil:
        """Hand the queued sends to the sink: the adapter's socket, else the in-memory outbox
        (or, with keep_sends off, only the count)."""
        if self.sink_fd >= 0:
            self.tx.flush(self.sink_fd)
        elif self.tx.count == 0:
            return
        elif self.keep_sends:
            with gil:
                self.collect()
        else:
            self.tx.sent += self.tx.count
            self.tx.count = 0

    cdef void collect(self) noexcept:
        # The in-memory sink: each queued send as the datagrams the kernel would put on the
        # wire (a UDP_SEGMENT send cut into its segments).
        cdef mmsghdr* m
        cdef sockaddr_in* sa
        cdef cmsghdr* cm
        cdef Py_ssize_t seg, off
        cdef size_t j
        cdef int k
        for k in range(self.tx.count):
            m = &self.tx.msgs[k]
            sa = <sockaddr_in*>m.msg_hdr.msg_name
            dst = (dotted(ntohl(sa.sin_addr.s_addr)), ntohs(sa.sin_port))
            data = b"".join([PyBytes_FromStringAndSize(<char*>m.msg_hdr.msg_iov[j].iov_base,
                                                       m.msg_hdr.msg_iov[j].iov_len)
                             for j in range(m.msg_hdr.msg_iovlen)])
            seg = 0
            cm = <cmsghdr*>m.msg_hdr.msg_control
            if cm != NULL and cm.cmsg_level == SOL_UDP and cm.cmsg_type == UDP_SEGMENT:
                seg = (<uint16_t*>CMSG_DATA(cm))[0]
            if seg:
                for off in range(0, len(data), seg):
                    self.outbox.append((data[off:off + seg], dst))
            else:
                self.outbox.append((data, dst))
            self.tx.bytes_sent += len(data)
        self.tx.sent += self.tx.count
        self.tx.count = 0

    cdef bint resolve_addr(self, int i, const uint8_t* p, uint32_t* addr, uint32_t* port) noexcept nogil:
        # ADDR/PORT of zero mean "the packet's source". Anything else must *be* the source
        # (unless allow_foreign): then every address:port the backbone sends DELIVERs or repair
        # to has itself asked for them, and nobody can aim the backbone (or, through FORWARD, a
        # peer) at an address:port that never sent a KEEPALIVE.
        cdef sockaddr_in* src = &self.rx.addrs[i]
        cdef uint32_t src_addr = ntohl(src.sin_addr.s_addr)
        cdef uint32_t src_port = ntohs(src.sin_port)
        addr[0] = get_u32(p + 1)
        port[0] = get_u16(p + 5)
        if addr[0] == 0:
            addr[0] = src_addr
        if port[0] == 0:
            port[0] = src_port
        if (addr[0] != src_addr or port[0] != src_port) and not self.allow_foreign:
            self.c.drops[DROP_FOREIGN_ADDRESS] += 1
            return False
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
            self.c.drops[self.refused] += 1
            return
        s.keepalives += 1
        self.set_flags(s, get_u48(p + 7))
        s.expires_ns = now + self.window_ns
        slot.scratch[0] = T_KEEPALIVE_ACK
        slot.iov[0].iov_base = slot.scratch
        slot.iov[0].iov_len = 1
        slot.iov[1].iov_base = <void*>(p + 13)  # TOKEN, straight from the KEEPALIVE
        slot.iov[1].iov_len = TOKEN_SIZE
        self.queue(&self.rx.addrs[i], slot.iov, 2)

    cdef void on_request(self, int i, const uint8_t* p, int64_t now) noexcept nogil:
        # (B4) FORWARD to one randomly chosen journaling subscriber other than the requester.
        # Only a live subscriber may REQUEST, within its repair budget: the DELIVERs a FORWARD
        # sets off go to the requester, so nobody can aim them at an address:port that never
        # subscribed, and toward a subscriber they are bounded (docs: Security).
        cdef uint32_t addr, port
        cdef uint64_t lo = get_u48(p + 7), hi = get_u48(p + 13), key
        cdef uint64_t given = (self.next_seq - self.epoch_start) & SEQ_MASK
        cdef uint64_t need = SEQ_MASK  # (no journal is left out)
        cdef Subscriber* s
        cdef Subscriber* chosen = NULL
        cdef Subscriber* requester
        cdef uint64_t x
        cdef double weight, total = 0.0
        cdef int* hosts
        cdef Slot* slot = &self.slots[i]
        cdef int k
        self.c.requests += 1
        if not self.resolve_addr(i, p, &addr, &port):
            return
        if hi - lo >= self.max_request_range:
            self.c.drops[DROP_REQUEST_TOO_LARGE] += 1
            return
        key = (<uint64_t>addr << 16) | port
        requester = self.find(key)
        if requester == NULL or requester.expires_ns <= now or requester.flags & NOSUBSCRIBE:
            self.c.drops[DROP_REQUEST_NOT_SUBSCRIBED] += 1
            return
        requester.requested += hi - lo + 1
        requester.repair_tokens += (now - requester.repair_ns) * 1e-9 * self.repair_rate
        if requester.repair_tokens > self.repair_burst:
            requester.repair_tokens = self.repair_burst
        requester.repair_ns = now
        if requester.repair_tokens < <double>(hi - lo + 1):
            requester.refused += 1
            self.c.drops[DROP_REPAIR_BUDGET] += 1
            return
        requester.repair_tokens -= <double>(hi - lo + 1)
        # A range that reaches what we gave ourselves goes only to journals signed on before we
        # gave its first part (a new active's first messages: not to a client that signed on
        # again after them, which cannot hold them).
        if ((hi - self.epoch_start) & SEQ_MASK) < given:
            need = (lo - self.epoch_start) & SEQ_MASK
            if need >= given:
                need = 0  # (it begins before our first: journals there from our first on)
        for k in range(self.nsubs):
            s = &self.subs[k]
            if s.expires_ns <= now or (s.flags & (NOSUBSCRIBE | NOJOURNAL)) or s.key == key:
                continue
            if need < ((s.since_seq - self.epoch_start) & SEQ_MASK):
                continue  # signed on after we gave part of the range: it cannot hold it
            if s.keepalives == 0:
                continue  # adopted, not heard from yet: perhaps gone with the old active
            # Weighted reservoir sampling: each entry weighs 1 / (entries its host holds), so
            # every host is as likely to be asked as any other, however many sockets it opens.
            hosts = self.host_slot(<uint32_t>(s.key >> 16), False)
            weight = 1.0 / (hosts[0] if hosts != NULL and hosts[0] > 0 else 1)
            total += weight
            # xorshift64
            x = self.rng
            x ^= x << 13
            x ^= x >> 7
            x ^= x << 17
            self.rng = x
            if <double>(x >> 11) * (1.0 / 9007199254740992.0) * total < weight:
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
        chosen.forwarded += 1
        self.queue(&chosen.sa, slot.iov, 1)

    cdef Subscriber* find(self, uint64_t key) noexcept nogil:
        cdef uint64_t h = hash_key(key) & self.index_mask
        cdef Subscriber* s
        while self.index[h] != 0:
            s = &self.subs[self.index[h] - 1]
            if s.key == key:
                return s
            h = (h + 1) & self.index_mask
        return NULL

    cdef int* host_slot(self, uint32_t addr, bint insert) noexcept nogil:
        """The entry count of a source host; NULL if absent (and not insert)."""
        cdef uint64_t want = <uint64_t>addr + 1
        cdef uint64_t h = hash_key(want) & self.index_mask
        while self.host_keys[h] != 0:
            if self.host_keys[h] == want:
                return &self.host_counts[h]
            h = (h + 1) & self.index_mask
        if not insert:
            return NULL
        self.host_keys[h] = want
        self.host_counts[h] = 0
        return &self.host_counts[h]

    cdef bint packer(self, int i, int64_t now) noexcept nogil:
        """Whether datagram i comes from a live client that announced PACKED (packing
        extension): only such a client may send packed PUSHes."""
        cdef sockaddr_in* src = &self.rx.addrs[i]
        cdef Subscriber* s = self.find((<uint64_t>ntohl(src.sin_addr.s_addr) << 16)
                                       | ntohs(src.sin_port))
        return s != NULL and s.expires_ns > now and s.pack_limit != 0

    cdef Subscriber* upsert(self, uint64_t key, int64_t now) noexcept nogil:
        cdef uint64_t h
        cdef int idx
        cdef int* hosts
        cdef Subscriber* s = self.find(key)
        if s != NULL:
            return s
        hosts = self.host_slot(<uint32_t>(key >> 16), False)
        if self.nsubs == self.max_subs or (
                self.max_per_address and hosts != NULL and hosts[0] >= self.max_per_address):
            # Entries expire only in a sweep. Queued sends point at table entries: flush them
            # before the sweep moves entries. Swept at most every 10 ms, so a flood of new
            # clients cannot make every datagram cost a sweep of the whole table.
            if now < self.next_full_sweep_ns:
                self.refused = DROP_TABLE_FULL if self.nsubs == self.max_subs else DROP_ADDRESS_LIMIT
                return NULL
            self.flush()
            self.sweep(now)
            self.next_full_sweep_ns = now + FULL_SWEEP_INTERVAL_NS
            if self.nsubs == self.max_subs:
                self.refused = DROP_TABLE_FULL
                return NULL
            hosts = self.host_slot(<uint32_t>(key >> 16), False)
            if self.max_per_address and hosts != NULL and hosts[0] >= self.max_per_address:
                self.refused = DROP_ADDRESS_LIMIT
                return NULL
        h = hash_key(key) & self.index_mask
        while self.index[h] != 0:
            h = (h + 1) & self.index_mask
        idx = self.nsubs
        self.nsubs += 1
        self.index[h] = idx + 1
        self.host_slot(<uint32_t>(key >> 16), True)[0] += 1
        s = &self.subs[idx]
        memset(s, 0, sizeof(Subscriber))
        s.key = key
        s.sa.sin_family = AF_INET
        s.sa.sin_addr.s_addr = htonl(<uint32_t>(key >> 16))
        s.sa.sin_port = htons(<uint16_t>(key & 0xffff))
        s.repair_tokens = self.repair_burst
        s.repair_ns = now
        s.since_ns = now
        s.since_seq = self.next_seq
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
        memset(self.host_keys, 0, (self.index_mask + 1) * sizeof(uint64_t))
        for k in range(kept):
            h = hash_key(self.subs[k].key) & self.index_mask
            while self.index[h] != 0:
                h = (h + 1) & self.index_mask
            self.index[h] = k + 1
            self.host_slot(<uint32_t>(self.subs[k].key >> 16), True)[0] += 1
        self.next_sweep_ns = now + SWEEP_INTERVAL_NS

    def receive_datagrams(self, datagrams, int64_t now, int repeat=1):
        """Handle [(datagram, (host, port))] received at `now` (ns), in receive batches of
        `batch`, as the kernel would fill the slots (a datagram past a slot is truncated); the
        sends go to the sink. `repeat` feeds the same datagrams that many times (benchmarks)."""
        cdef int i, k, start, count, n = len(datagrams)
        cdef list originals = [bytes(d) for d, _ in datagrams]
        cdef const char** src
        cdef Py_ssize_t* lens
        cdef sockaddr_in* sas
        if self.sink_fd >= 0:
            raise RuntimeError("the core is driven by its socket loop")
        src = <const char**>PyMem_Calloc(n + 1, sizeof(char*))
        lens = <Py_ssize_t*>PyMem_Calloc(n + 1, sizeof(Py_ssize_t))
        sas = <sockaddr_in*>PyMem_Calloc(n + 1, sizeof(sockaddr_in))
        try:
            if not (src and lens and sas):
                raise MemoryError()
            for i in range(n):
                host, port = datagrams[i][1]
                sas[i].sin_family = AF_INET
                sas[i].sin_addr.s_addr = htonl(int.from_bytes(socket.inet_aton(host), "big"))
                sas[i].sin_port = htons(port)
                src[i] = <const char*>(<bytes>originals[i])
                lens[i] = len(originals[i])
            with nogil:
                for k in range(repeat):
                    start = 0
                    while start < n:
                        # receive_batch(), each datagram handled as it is put in its slot
                        count = min(n - start, self.rx.capacity)
                        self.count_batch(count)
                        for i in range(count):
                            if k == 0 or n > self.rx.capacity:
                                self.fill_slot(i, src[start + i], lens[start + i], &sas[start + i])
                            else:  # the same slot again: only the bytes (PUSHes were stamped)
                                memcpy(<void*>self.rx.slot(i), src[i], self.rx.msgs[i].msg_len)
                            self.handle(i, now)
                        self.end_batch(now)
                        start += count
        finally:
            PyMem_Free(src)
            PyMem_Free(lens)
            PyMem_Free(sas)

    cdef void fill_slot(self, int i, const char* data, Py_ssize_t n, sockaddr_in* sa) noexcept nogil:
        self.rx.msgs[i].msg_hdr.msg_flags = 0
        if n > self.rx.slot_size:
            n = self.rx.slot_size
            self.rx.msgs[i].msg_hdr.msg_flags = MSG_TRUNC
        memcpy(<void*>self.rx.slot(i), data, n)
        self.rx.msgs[i].msg_len = <unsigned int>n
        self.rx.addrs[i] = sa[0]

    def datagrams_to_send(self):
        """What the handled datagrams and timers set off since the last call, as
        [(datagram, (host, port))] in sending order (empty with keep_sends off)."""
        out, self.outbox = self.outbox, []
        return out

    def get_timer(self):
        """When (ns) handle_timer() next has work: the sweep of expired table entries."""
        return self.next_sweep_ns

    def handle_timer(self, int64_t now):
        """Sweep expired entries out of the table if the sweep is due at `now` (ns)."""
        with nogil:
            self.on_timer(now)

    def stats(self, int64_t now):
        """Counters, and the table's live entries at `now` (ns), as a dict."""
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
            "send_would_block": self.tx.would_block,
            "receive_errors": self.c.receive_errors,
            "pushes": self.c.pushes,
            "delivers": self.c.delivers,
            "keepalives": self.c.keepalives,
            "requests": self.c.requests,
            "forwards": self.c.forwards,
            "batches": self.c.batches,
            "batch_sizes": [self.c.batch_sizes[k] for k in range(8)],
            "gso": bool(self.gso),
            "gso_sends": self.c.gso_sends,
            "gso_segments": self.c.gso_segments,
            "packing": bool(self.packing),
            "packs_in": self.c.packs_in,
            "packs_out": self.c.packs_out,
            "adopted": self.c.adopted,
            "clients": live,
            "subscribers": subscribers,
            "journaling": journaling,
            "next_sequence": self.next_seq,
            "drops": {name: self.c.drops[code] for code, name in DROP_REASONS.items()},
        }

    def table(self, int64_t now):
        """Live table entries at `now` (ns) as dicts with their per-entry counters."""
        cdef Subscriber s
        cdef int k
        out = []
        for k in range(self.nsubs):
            s = self.subs[k]
            if s.expires_ns > now:
                out.append({
                    "host": dotted(<uint32_t>(s.key >> 16)), "port": s.key & 0xffff,
                    "flags": s.flags, "pack_limit": s.pack_limit,
                    "seconds_left": (s.expires_ns - now) / 1e9, "age": (now - s.since_ns) / 1e9,
                    "delivered": s.delivered, "datagrams": s.datagrams,
                    "keepalives": s.keepalives, "requested": s.requested, "refused": s.refused,
                    "forwarded": s.forwarded})
        return out

    def probe_lengths(self):
        """(longest, mean) probe distance in the subscriber index: how far lookups walk."""
        cdef uint64_t i, ideal, dist, longest = 0, total = 0, n = 0
        for i in range(self.index_mask + 1):
            if self.index[i]:
                ideal = hash_key(self.subs[self.index[i] - 1].key) & self.index_mask
                dist = (i - ideal) & self.index_mask
                longest = max(longest, dist)
                total += dist
                n += 1
        return longest, (total / n if n else 0.0)

    def subscribers(self, int64_t now):
        """Table entries live at `now` (ns) as [(host, port, flags, seconds_left)]."""
        cdef Subscriber s
        out = []
        for k in range(self.nsubs):
            s = self.subs[k]
            if s.expires_ns > now:
                out.append((dotted(<uint32_t>(s.key >> 16)), s.key & 0xffff, s.flags,
                            (s.expires_ns - now) / 1e9))
        return out


@cython.final
cdef class BackboneLoop:
    """Serves a BackboneCore on a bound UDP socket's file descriptor until stopped: the socket,
    recvmmsg/sendmmsg and CLOCK_MONOTONIC; every decision is the core's."""

    def __cinit__(self, int fd, *, gso=None, **options):
        self.fd = fd
        self.core = BackboneCore(gso=gso_supported() if gso is None else bool(gso), **options)
        self.core.sink_fd = fd

    def stop(self):
        """Ask serve() to return; safe to call from any thread. An empty datagram to the socket
        wakes the loop at once (otherwise it notices within WAKE_INTERVAL)."""
        self.stopping = 1
        if not self.running:
            return
        try:
            with socket.fromfd(self.fd, socket.AF_INET, socket.SOCK_DGRAM) as own:
                host, port = own.getsockname()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"", ("127.0.0.1" if host == "0.0.0.0" else host, port))
        except OSError:
            pass

    def serve(self):
        """Run the loop (GIL released) until stop() is called. Makes the socket blocking: the
        loop sleeps in recvmmsg (one system call per wake-up) with a WAKE_INTERVAL timeout."""
        cdef int rc
        cdef int64_t now
        cdef timeval tv
        cdef BackboneCore core = self.core
        if self.running:
            raise RuntimeError("the loop is already running")
        fcntl(self.fd, F_SETFL, fcntl(self.fd, F_GETFL, 0) & ~O_NONBLOCK)
        tv.tv_sec = 0
        tv.tv_usec = WAKE_INTERVAL_US
        setsockopt(self.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv))
        self.running = True
        try:
            with nogil:
                core.next_sweep_ns = monotonic_ns() + SWEEP_INTERVAL_NS
                while not self.stopping:
                    rc = core.rx.receive_wait(self.fd)
                    now = monotonic_ns()
                    core.on_timer(now)
                    if self.stopping:
                        break  # stop()'s wake-up (and whatever came with it) is not served
                    if rc <= 0:
                        if rc < 0:
                            core.c.receive_errors += 1
                        continue
                    core.receive_batch(rc, now)
        finally:
            self.stopping = 0
            self.running = False

    def stats(self):
        """The core's counters and table size now (read without stopping the loop)."""
        return self.core.stats(monotonic_ns())

    def subscribers(self):
        """Live table entries as [(host, port, flags, seconds_left)]."""
        return self.core.subscribers(monotonic_ns())

    def table(self):
        """Live table entries with their per-entry counters (BackboneCore.table)."""
        return self.core.table(monotonic_ns())

    def probe_lengths(self):
        """(longest, mean) probe distance in the subscriber index."""
        return self.core.probe_lengths()
