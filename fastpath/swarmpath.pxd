cimport cython
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from posix.uio cimport iovec

from fastpath.batchio cimport RecvBatch, SendBatch
from fastpath.csocket cimport sockaddr_in

cdef enum:
    SWARM_PING = 2         # pelotari.swarm.wire.TABLE (tests/test_swarm_path.py holds them equal)
    SWARM_PONG = 3
    SWARM_PING_SIZE = 44   # header 4 + MAC 32 + token 8; a Pong is as long (echo 8)


@cython.final
cdef class PingPath:
    """One node's Ping → Pong path in C (see swarmpath.pyx)."""
    cdef readonly RecvBatch batch
    cdef SendBatch out
    cdef uint8_t* arena                  # Pongs being sent: PING_SIZE bytes each
    cdef sockaddr_in* dst
    cdef iovec* iov
    cdef readonly int count              # datagrams of the last receive
    # the core's clock and budget, set by the adapter around run() (SwarmNode.advance)
    cdef public uint32_t ms
    cdef public uint8_t mark
    cdef public uint64_t vague_pongs
    # its Config, fixed
    cdef readonly uint64_t vague_budget
    cdef readonly uint64_t burst_ms
    cdef readonly uint32_t refill_ms
    cdef readonly Py_ssize_t max_datagram
    # counters, named as the core's (SwarmNode.stats)
    cdef readonly uint64_t received_bytes, received_ping, sent_pong, sent_bytes, dropped_mac
    cdef readonly uint64_t limited_claim, limited_own, limited_global, send_dropped, send_errors
