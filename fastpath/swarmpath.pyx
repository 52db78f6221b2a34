# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The swarm node's datagram path in C: a recvmmsg batch in, Pongs out by sendmmsg, with no
Python object per datagram for the one message a swarm node receives most — a Ping from an
established connection (docs/protocols/swarm.md, "C datagram path").

For each datagram of the batch, in order:

* a Ping (type 2, exactly 44 bytes, not truncated): its MAC checked (MacSet.verify_raw: every
  installed key in the accepted epochs); a bad one is counted in `dropped_bad_mac` and dropped, as
  SwarmNode does. A good one from a source the table holds as established is touched (heard
  now, to the LRU's tail) and answered by SwarmNode._answer_allowed's rules — once per slot per
  connection (`claimed`), and from a vague connection within its own GCRA bucket and the global
  `vague_pongs_per_slot` — with a Pong echoing its token, signed in place (the primary key in
  the epoch of now) and queued for sendmmsg;
* anything else (another type or size, a source with no established record): run() stops
  there and gives its index; the adapter hands it to SwarmNode.receive_datagram (take()) and
  calls run() again after it, so the core sees every datagram in arrival order and the budget
  (`vague_pongs`) is carried over both ways.

IPv4 sockets only (RecvBatch reads sockaddr_in); an IPv6 node runs the Python path.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from fastpath.csocket cimport ntohl, ntohs
from fastpath.swarmmac cimport MacSet, SWARM_HEADER, SWARM_PREFIX
from fastpath.swarmtable cimport ConnectionTable

import os

cdef uint32_t NIL = 0xFFFFFFFF
cdef uint16_t S_DIRECT = 0x0001          # pelotari.swarm.table
cdef uint16_t S_ESTABLISHED = 0x0030     # S_RECEIVED | S_ACKED

PING = SWARM_PING
PONG = SWARM_PONG
PING_SIZE = SWARM_PING_SIZE


@cython.final
cdef class PingPath:
    """Receive a batch (receive), answer its Pings from established connections (run), hand
    the rest to the core (take), send the Pongs (flush). Counters are named as SwarmNode's."""

    def __cinit__(self, *, int capacity=64, Py_ssize_t max_datagram=1024,
                  uint64_t vague_pongs_per_slot=1024, uint32_t ping_burst=3,
                  uint32_t refill_ms=4000):
        if not SWARM_PING_SIZE <= max_datagram <= 65535:
            raise ValueError("max_datagram must be within 44..65535")
        if ping_burst < 1:
            raise ValueError("ping_burst must be at least 1")
        # max_datagram + 1: a datagram past the limit is told from one at it (the core drops it)
        self.batch = RecvBatch(capacity, max_datagram + 1)
        self.out = SendBatch(capacity, 0)  # max_wait_ms 0: a full send buffer never blocks
        self.arena = <uint8_t*>PyMem_Calloc(capacity, SWARM_PING_SIZE)
        self.dst = <sockaddr_in*>PyMem_Calloc(capacity, sizeof(sockaddr_in))
        self.iov = <iovec*>PyMem_Calloc(capacity, sizeof(iovec))
        if not (self.arena and self.dst and self.iov):
            raise MemoryError()
        self.max_datagram = max_datagram
        self.vague_budget = vague_pongs_per_slot
        self.refill_ms = refill_ms
        self.burst_ms = <uint64_t>(ping_burst - 1) * refill_ms

    def __dealloc__(self):
        PyMem_Free(self.arena)
        PyMem_Free(self.dst)
        PyMem_Free(self.iov)

    @property
    def capacity(self):
        return self.batch.capacity

    def receive(self, int fd):
        """Read up to `capacity` datagrams without blocking: how many (0: none queued). OSError
        for a socket error (an ICMP error for an earlier send reads as one)."""
        cdef int rc
        with nogil:
            rc = self.batch.receive(fd)
        if rc < 0:
            self.count = 0
            raise OSError(-rc, os.strerror(-rc))
        self.count = rc
        return rc

    def run(self, ConnectionTable table not None, MacSet macs not None, int start=0):
        """Answer the batch's Pings from `start` on; the index of the first datagram left for
        the core (count when none is)."""
        cdef int i
        cdef Py_ssize_t n
        cdef const uint8_t* p
        cdef uint8_t key[18]
        cdef uint32_t pos, slot, tat, ms = self.ms
        cdef uint16_t st, port
        cdef uint8_t* pong
        cdef RecvBatch b = self.batch
        cdef ConnectionTable t = table
        if macs.count < 1:
            raise ValueError("the MacSet holds no keys")
        if start < 0:
            start = 0
        for i in range(start, self.count):
            n = b.length(i)
            p = b.slot(i)
            if b.truncated(i) or n != SWARM_PING_SIZE or p[0] != 0 or p[1] != SWARM_PING:
                return i
            if macs.verify_raw(p, n) < 0:
                self.received_bytes += n
                self.dropped_mac += 1
                continue
            # the table's key: ::ffff:a.b.c.d (s_addr is in network order already), u16 port LE
            memset(key, 0, 10)
            key[10] = 0xFF
            key[11] = 0xFF
            memcpy(key + 12, &b.addrs[i].sin_addr.s_addr, 4)
            port = ntohs(b.addrs[i].sin_port)
            key[16] = port & 0xFF
            key[17] = port >> 8
            pos = t._find(key)
            if pos == NIL:
                return i
            slot = t._index[pos]
            st = t._st[slot]
            if st & S_ESTABLISHED != S_ESTABLISHED:
                return i
            self.received_bytes += n
            self.received_ping += 1
            t._hrd[slot] = ms  # touch: heard now, to the LRU's tail (direct ones are in none)
            if not st & S_DIRECT and t._tail != slot:
                t._unlink(slot)
                t._link_tail(slot)
            # SwarmNode._answer_allowed
            if t._clm[slot] == self.mark:
                self.limited_claim += 1
                continue
            if not st & S_DIRECT:
                tat = t._bkt[slot] if t._bkt[slot] > ms else ms
                if tat - ms > self.burst_ms:
                    self.limited_own += 1
                    continue
                if self.vague_pongs >= self.vague_budget:
                    self.limited_global += 1
                    continue
                self.vague_pongs += 1
                t._bkt[slot] = <uint32_t>min(<uint64_t>tat + self.refill_ms, <uint64_t>NIL)
            t._clm[slot] = self.mark
            if self.out.full():  # (one Pong per datagram of a batch: only after a short flush)
                self.send_dropped += 1
                continue
            pong = self.arena + <size_t>self.out.count * SWARM_PING_SIZE
            pong[0] = 0
            pong[1] = SWARM_PONG
            pong[2] = 0
            pong[3] = 0
            memcpy(pong + SWARM_PREFIX, p + SWARM_PREFIX, 8)  # the echo: the Ping's token
            macs.sign_in_place(pong, SWARM_PING_SIZE)
            memcpy(&self.dst[self.out.count], &b.addrs[i], sizeof(sockaddr_in))
            self.iov[self.out.count].iov_base = pong
            self.iov[self.out.count].iov_len = SWARM_PING_SIZE
            self.out.add(&self.dst[self.out.count], &self.iov[self.out.count], 1)
            self.sent_pong += 1
            self.sent_bytes += SWARM_PING_SIZE
        return self.count

    def take(self, int i):
        """Datagram i of the batch and its source, for the core: (bytes, (host, port))."""
        if not 0 <= i < self.count:
            raise IndexError(i)
        cdef uint32_t a = ntohl(self.batch.addrs[i].sin_addr.s_addr)
        data = PyBytes_FromStringAndSize(<const char*>self.batch.slot(i), self.batch.length(i))
        return data, (f"{a >> 24}.{(a >> 16) & 0xFF}.{(a >> 8) & 0xFF}.{a & 0xFF}",
                      ntohs(self.batch.addrs[i].sin_port))

    def flush(self, int fd):
        """Send the queued Pongs (never blocking): how many went. A full socket buffer drops
        the rest (send_dropped), a refused one counts in send_errors."""
        cdef uint64_t dropped = self.out.would_block, errors = self.out.errors
        cdef int done
        if self.out.count == 0:
            return 0
        with nogil:
            done = self.out.flush(fd)
        self.send_dropped += self.out.would_block - dropped
        self.send_errors += self.out.errors - errors
        return done

    def counters(self):
        """The counters, named as SwarmNode.stats' and the adapter's."""
        return {"received_bytes": self.received_bytes, "received_Ping": self.received_ping,
                "sent_Pong": self.sent_pong, "sent_bytes": self.sent_bytes,
                "dropped_bad_mac": self.dropped_mac, "limited_claim": self.limited_claim,
                "limited_own": self.limited_own, "limited_global": self.limited_global,
                "send_dropped": self.send_dropped, "send_errors": self.send_errors}
