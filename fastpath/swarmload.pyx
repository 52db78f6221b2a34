# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The swarm load generator: many distinct peers against one swarm node over loopback, in C
(the fyrehose one, fastpath/loadgen.pyx, is the precedent). docs/protocols/swarm.md, "Measured
(scale, sockets)".

Peers are addresses x ports: `addresses` consecutive IPv4 addresses from `base` (all inside
127.0.0.0/8) times `ports` UDP sockets. Each socket is bound to 0.0.0.0 on a free port **with
SO_BINDTODEVICE "lo"**, so only loopback traffic ever reaches it (nothing listens on another
interface), and sends with IP_PKTINFO's ipi_spec_dst set to the peer's 127.a.b.c address; on
receipt IP_PKTINFO's ipi_addr says which address a reply went to. Peer p is socket p // addresses
and address base + p % addresses: 16 sockets give 16 x 4,096 = 65,536 peers.

Every peer does the real handshake (docs: "The handshake"): Connect (Attempt 0, its token) ->
the node's stateless Connect with Ack echoing it -> Connect with Ack echoing the node's token,
then a Ping; it is *ready* when that Ping's Pong comes. Then run() sends signed Pings, paced
(open loop) in sendmmsg batches, round robin over the ready peers, and counts the Pongs that
pass the MAC and echo a Ping that peer sent (one of its last 4 not answered yet: each Ping's
Pong counts once; a duplicate, a replay or a Pong to an older Ping is not counted), with
their round trip. The node's own Pings (its vague checks) are
answered; a Reset takes the peer out of the ready set.

A Ping token is (peer index << 40) | (send time in us since the generator started, + 1): the
Pong says which peer and which Ping it answers with no lookup. State per peer is one C record
(72 bytes): no Python object per peer or per datagram. The MACs are fastpath.swarmmac's MacSet,
fetched from the Keyring (Keyring.macset(time.time())) at least every 50 ms, so an epoch
change is followed. Sends never block: a full socket buffer drops the batch's rest, counted in
`send_dropped`. The loop runs without the GIL in slices of 50 ms (Ctrl-C is checked between).
"""
cimport cython
from cpython.exc cimport PyErr_CheckSignals
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memset, memcpy
from posix.uio cimport iovec
from posix.time cimport timespec

from fastpath.csocket cimport (mmsghdr, msghdr, sockaddr_in, in_addr, recvmmsg, sendmmsg,
                               pollfd, POLLIN, AF_INET, htons, htonl, ntohl, ntohs, errno,
                               EINTR, EAGAIN, EWOULDBLOCK, ENOBUFS, MSG_DONTWAIT, MSG_TRUNC,
                               cmsghdr, CMSG_FIRSTHDR, CMSG_NXTHDR, CMSG_DATA, CMSG_SPACE,
                               CMSG_LEN)
from fastpath.swarmmac cimport MacSet
from fastpath.loadgen cimport LatencyHistogram, ls_now_ns, ls_hist_record

import os
import socket
import time

from fastpath.batchio import set_buffers

cdef extern from "<netinet/in.h>" nogil:
    struct in_pktinfo:
        int ipi_ifindex
        in_addr ipi_spec_dst
        in_addr ipi_addr
    int IPPROTO_IP
    int IP_PKTINFO

cdef extern from "<signal.h>" nogil:
    ctypedef struct sigset_t:
        pass

cdef extern from "<poll.h>" nogil:
    int ppoll(pollfd* fds, unsigned long nfds, const timespec* tmo, const sigset_t* mask)

# ---- the wire (docs/protocols/swarm.md) ------------------------------------------------------
cdef enum:
    T_CONNECT = 0
    T_RESET = 1
    T_PING = 2
    T_PONG = 3
    HEADER = 4
    PREFIX = 36             # header + MAC
    CONNECT_SIZE = 52
    PING_SIZE = 44          # Ping and Pong
    RESET_SIZE = 36
    MAX_DATAGRAM = 1024

# ---- limits ----------------------------------------------------------------------------------
MAX_PEERS = 1 << 20         # 72 MB of peer records at most
MAX_PORTS = 256
MAX_BATCH = 1024            # UIO_MAXIOV caps one sendmmsg/recvmmsg
cdef enum:
    OUT_SLOT = 64           # bytes per queued datagram (Connect 52, Ping/Pong 44)
    IN_SLOT = 1040          # a read: max_datagram + 1, rounded (a longer one is MSG_TRUNC)
    CONTROL = 64            # cmsg room per datagram (IP_PKTINFO: 28)
    SLICE_NS = 50000000     # the GIL is taken (MacSet refresh, Ctrl-C) between slices
    TIME_BITS = 40          # a Ping token: peer index << 40 | send time (us) + 1
    MAX_BURST = 4096        # Pings due at once at most (catching up after a stall)
    RING = 4                # a Pong counts if it answers one of its peer's last 4 Pings

cdef uint64_t TIME_MASK = (<uint64_t>1 << TIME_BITS) - 1

# peer states
cdef enum:
    IDLE = 0                # nothing sent (or Reset: start again)
    CONNECTING = 1          # our Connect is out
    ACKED = 2               # our Connect with Ack and a first Ping are out
    READY = 3               # that Ping's (or a later one's) Pong came: established


cdef struct Peer:
    uint64_t ours           # our Connect token (never 0)
    uint64_t theirs         # the node's Connect token (what our Ack echoes)
    uint64_t sent           # send time (token's low bits) of our last Ping; 0: none
    uint64_t since          # us: when the handshake step in `state` was last sent
    uint64_t out[RING]      # send times of our last RING Pings still unanswered (0: none)
    uint8_t head            # where the next one goes
    uint8_t state


cdef struct Counters:
    uint64_t pings_sent     # our Pings that left (sendmmsg took them)
    uint64_t pongs          # counted: MAC good, echo of one of the peer's last RING Pings, once
    uint64_t pongs_unmatched  # MAC good but the echo is none of them (or answered already)
    uint64_t bad_mac        # no installed key verifies it in an accepted epoch
    uint64_t foreign        # not from the node's address:port, or to no peer of ours
    uint64_t malformed      # longer than 1,024 B, or a size wrong for its type, or truncated
    uint64_t resets         # Resets from the node (the peer leaves the ready set)
    uint64_t node_pings     # the node's own Pings (vague checks), answered
    uint64_t pongs_sent     # our Pongs to them
    uint64_t connects_sent  # Connect (Attempt 0, no Ack), first sends and resends
    uint64_t connect_answers  # the node's Connect with Ack echoing our token
    uint64_t acks_sent      # our Connect with Ack
    uint64_t other          # anything else that passed the MAC (a GetConnections...)
    uint64_t send_dropped   # a socket's send buffer full: dropped, never waited for
    uint64_t send_errors
    uint64_t recv_errors
    uint64_t datagrams_in
    uint64_t sendmmsg_calls
    uint64_t recvmmsg_calls


COUNTERS = ("pings_sent", "pongs", "pongs_unmatched", "bad_mac", "foreign", "malformed", "resets",
            "node_pings", "pongs_sent", "connects_sent", "connect_answers", "acks_sent", "other",
            "send_dropped", "send_errors", "recv_errors", "datagrams_in", "sendmmsg_calls",
            "recvmmsg_calls")


cdef inline uint16_t _u16(const uint8_t* p) noexcept nogil:
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline uint64_t _u64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return v


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(7, -1, -1):
        p[i] = <uint8_t>v
        v >>= 8


cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    """splitmix64's finaliser: our Connect tokens."""
    x += <uint64_t>0x9E3779B97F4A7C15
    x = (x ^ (x >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    x = (x ^ (x >> 27)) * <uint64_t>0x94D049BB133111EB
    return x ^ (x >> 31)


def _ipv4(text, what):
    try:
        packed = socket.inet_aton(text)
    except (OSError, TypeError):
        raise ValueError(f"{what} {text!r} is not an IPv4 address") from None
    if socket.inet_ntoa(packed) != text:
        raise ValueError(f"{what} {text!r} is not a dotted-quad IPv4 address")
    return int.from_bytes(packed, "big")


@cython.final
cdef class SwarmLoad:
    """`peers` distinct peers (addresses x ports in 127.0.0.0/8) against the swarm node at
    host:port (an address in 127.0.0.0/8). connect() brings them (the real handshake), run()
    offers Pings; close() (or `with`) closes the sockets. ValueError for limits (peers more
    than addresses x ports or MAX_PEERS, an address outside 127.0.0.0/8); OSError when a
    socket cannot be made (SO_BINDTODEVICE refused: then no socket is left listening)."""

    cdef readonly int peers
    cdef readonly int addresses
    cdef readonly int nports
    cdef readonly int batch
    cdef readonly int ready
    cdef readonly int inflight       # peers CONNECTING or ACKED (connect()'s window)
    cdef uint32_t base               # host order
    cdef sockaddr_in node
    cdef object keyring
    cdef MacSet mac
    cdef list socks
    cdef int* fds
    cdef pollfd* pfds
    cdef Peer* p
    cdef Counters c
    cdef uint64_t t0                 # ls_now_ns() at start: tokens' time origin
    cdef LatencyHistogram latency
    # out: one batch for one socket at a time
    cdef uint8_t* out
    cdef uint8_t* out_ctl
    cdef iovec* out_iov
    cdef mmsghdr* out_msg
    cdef uint8_t* out_type
    cdef int out_n
    cdef int out_k
    # in
    cdef uint8_t* inb
    cdef uint8_t* in_ctl
    cdef iovec* in_iov
    cdef sockaddr_in* in_src
    cdef mmsghdr* in_msg

    def __cinit__(self, host, int port, keyring, int peers, *, base="127.2.0.1",
                  int addresses=0, int ports=16, int batch=64, int buffer=4 << 20, seed=None):
        cdef int i
        self.fds = NULL
        self.socks = []
        if not 1 <= peers <= MAX_PEERS:
            raise ValueError(f"peers must be within 1..{MAX_PEERS:,}, not {peers:,}")
        if not 1 <= ports <= MAX_PORTS:
            raise ValueError(f"ports must be within 1..{MAX_PORTS}")
        if not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"batch must be within 1..{MAX_BATCH}")
        if addresses == 0:
            addresses = (peers + ports - 1) // ports
        if addresses < 1:
            raise ValueError("addresses must be at least 1")
        if peers > <int64_t>addresses * ports:
            raise ValueError(f"{peers:,} peers need more than {addresses:,} addresses x "
                             f"{ports} ports ({addresses * ports:,})")
        first = _ipv4(base, "base")
        if first >> 24 != 127 or first == 0x7F000000 or \
                first + addresses - 1 > 0x7FFFFFFE:
            raise ValueError("the peers' addresses must lie within 127.0.0.1..127.255.255.254 "
                             f"({addresses:,} from {base})")
        node_ip = _ipv4(host, "host")
        if node_ip >> 24 != 127:
            raise ValueError(f"the node must be on a loopback address (127.0.0.0/8), not {host}")
        if not 1 <= port <= 65535:
            raise ValueError("port must be within 1..65535")
        if keyring.macset(time.time()) is None:
            raise ValueError("the keyring has no C MacSet (fastpath.swarmmac not built?)")
        self.peers, self.addresses, self.nports, self.batch = peers, addresses, ports, batch
        self.base = first
        self.keyring = keyring
        memset(&self.node, 0, sizeof(sockaddr_in))
        self.node.sin_family = AF_INET
        self.node.sin_port = htons(<uint16_t>port)
        self.node.sin_addr.s_addr = htonl(<uint32_t>node_ip)
        self.p = <Peer*>PyMem_Calloc(peers, sizeof(Peer))
        self.fds = <int*>PyMem_Calloc(ports, sizeof(int))
        self.pfds = <pollfd*>PyMem_Calloc(ports, sizeof(pollfd))
        self.out = <uint8_t*>PyMem_Calloc(batch, OUT_SLOT)
        self.out_ctl = <uint8_t*>PyMem_Calloc(batch, CONTROL)
        self.out_iov = <iovec*>PyMem_Calloc(batch, sizeof(iovec))
        self.out_msg = <mmsghdr*>PyMem_Calloc(batch, sizeof(mmsghdr))
        self.out_type = <uint8_t*>PyMem_Calloc(batch, 1)
        self.inb = <uint8_t*>PyMem_Calloc(batch, IN_SLOT)
        self.in_ctl = <uint8_t*>PyMem_Calloc(batch, CONTROL)
        self.in_iov = <iovec*>PyMem_Calloc(batch, sizeof(iovec))
        self.in_src = <sockaddr_in*>PyMem_Calloc(batch, sizeof(sockaddr_in))
        self.in_msg = <mmsghdr*>PyMem_Calloc(batch, sizeof(mmsghdr))
        if not (self.p and self.fds and self.pfds and self.out and self.out_ctl and self.out_iov
                and self.out_msg and self.out_type and self.inb and self.in_ctl and self.in_iov
                and self.in_src and self.in_msg):
            raise MemoryError()  # __dealloc__ frees what was allocated
        secret = int.from_bytes(os.urandom(8), "big") if seed is None else int(seed)
        cdef uint64_t s = <uint64_t>(secret & 0xFFFFFFFFFFFFFFFF)
        for i in range(peers):
            self.p[i].ours = _mix(s ^ <uint64_t>i) | 1
        for i in range(batch):
            self.out_iov[i].iov_base = self.out + i * OUT_SLOT
            self.out_msg[i].msg_hdr.msg_name = &self.node
            self.out_msg[i].msg_hdr.msg_namelen = sizeof(sockaddr_in)
            self.out_msg[i].msg_hdr.msg_iov = &self.out_iov[i]
            self.out_msg[i].msg_hdr.msg_iovlen = 1
            self.in_iov[i].iov_base = self.inb + i * IN_SLOT
            self.in_iov[i].iov_len = IN_SLOT
        self.out_k = -1
        self.latency = LatencyHistogram()
        self.t0 = ls_now_ns()
        try:
            for i in range(ports):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self.socks.append(sock)
                try:
                    # Before bind: the port is then free on lo, and nothing else reaches it.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
                except OSError as exc:
                    raise OSError(exc.errno, "SO_BINDTODEVICE lo refused (" +
                                  (exc.strerror or "") + "): the load generator binds its "
                                  "sockets to 0.0.0.0 only when they are tied to loopback "
                                  "(Linux >= 5.7 allows it unprivileged)") from None
                sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
                set_buffers(sock, buffer)
                sock.setblocking(False)
                sock.bind(("0.0.0.0", 0))
                self.fds[i] = sock.fileno()
                self.pfds[i].fd = self.fds[i]
                self.pfds[i].events = POLLIN
        except BaseException:
            self.close()
            raise

    def __dealloc__(self):
        for sock in self.socks or ():
            sock.close()
        PyMem_Free(self.p)
        PyMem_Free(self.fds)
        PyMem_Free(self.pfds)
        PyMem_Free(self.out)
        PyMem_Free(self.out_ctl)
        PyMem_Free(self.out_iov)
        PyMem_Free(self.out_msg)
        PyMem_Free(self.out_type)
        PyMem_Free(self.inb)
        PyMem_Free(self.in_ctl)
        PyMem_Free(self.in_iov)
        PyMem_Free(self.in_src)
        PyMem_Free(self.in_msg)

    def close(self):
        """Close the sockets (the memory goes with the object)."""
        for sock in self.socks:
            sock.close()
        self.socks = []
        self.nports = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def ports(self):
        """The UDP ports of the sockets (peer p uses ports[p // addresses])."""
        return [s.getsockname()[1] for s in self.socks]

    @property
    def bound(self):
        """[(host, port, device)] of every socket: ("0.0.0.0", port, "lo")."""
        return [(*s.getsockname(), s.getsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE,
                                                 16).rstrip(b"\0").decode())
                for s in self.socks]

    def address(self, int peer):
        """(host, port) of peer `peer`."""
        if not 0 <= peer < self.peers:
            raise IndexError(peer)
        if not self.socks:
            raise ValueError("closed")
        a = self.base + peer % self.addresses
        return (socket.inet_ntoa(a.to_bytes(4, "big")),
                self.socks[peer // self.addresses].getsockname()[1])

    def counters(self):
        """The counters of the last phase (connect() or run())."""
        cdef uint64_t* v = <uint64_t*>&self.c
        return {name: v[i] for i, name in enumerate(COUNTERS)}

    # ---- sending ---------------------------------------------------------------------------

    cdef inline uint64_t _us(self, uint64_t now) noexcept nogil:
        return (now - self.t0) // 1000 + 1

    cdef uint8_t* _queue(self, int peer, uint8_t kind, int size) noexcept nogil:
        """Room for one datagram from `peer` to the node (flushing first if the batch is for
        another socket or full); the caller writes header and body, then _seal()s it."""
        cdef int k = peer // self.addresses
        cdef uint32_t a = self.base + <uint32_t>(peer % self.addresses)
        cdef int i
        cdef msghdr* h
        cdef cmsghdr* cm
        cdef in_pktinfo* pi
        if self.out_n and (self.out_k != k or self.out_n >= self.batch):
            self._flush()
        self.out_k = k
        i = self.out_n
        self.out_n += 1
        h = &self.out_msg[i].msg_hdr
        h.msg_control = self.out_ctl + i * CONTROL
        h.msg_controllen = CMSG_SPACE(sizeof(in_pktinfo))
        h.msg_flags = 0
        cm = CMSG_FIRSTHDR(h)
        cm.cmsg_level = IPPROTO_IP
        cm.cmsg_type = IP_PKTINFO
        cm.cmsg_len = CMSG_LEN(sizeof(in_pktinfo))
        pi = <in_pktinfo*>CMSG_DATA(cm)
        pi.ipi_ifindex = 0
        pi.ipi_spec_dst.s_addr = htonl(a)
        pi.ipi_addr.s_addr = 0
        self.out_iov[i].iov_len = size
        self.out_type[i] = kind
        return self.out + i * OUT_SLOT

    cdef void _flush(self) noexcept nogil:
        """sendmmsg the batch; never waits: a full buffer drops the rest (send_dropped)."""
        cdef int off = 0, rc, i, n = self.out_n
        cdef int fd
        if n == 0:
            return
        fd = self.fds[self.out_k]
        while off < n:
            rc = sendmmsg(fd, self.out_msg + off, n - off, MSG_DONTWAIT)
            self.c.sendmmsg_calls += 1
            if rc > 0:
                for i in range(off, off + rc):
                    if self.out_type[i] == T_PING:
                        self.c.pings_sent += 1
                    elif self.out_type[i] == T_PONG:
                        self.c.pongs_sent += 1
                off += rc
                continue
            if rc < 0 and errno == EINTR:
                continue
            if rc < 0 and (errno == EAGAIN or errno == EWOULDBLOCK or errno == ENOBUFS):
                self.c.send_dropped += n - off
                break
            self.c.send_errors += 1
            off += 1
        self.out_n = 0

    cdef void _connect(self, int peer, bint ack) noexcept nogil:
        cdef uint8_t* d = self._queue(peer, T_CONNECT, CONNECT_SIZE)
        d[0] = 0; d[1] = T_CONNECT; d[2] = 0; d[3] = 1 if ack else 0   # Attempt 0
        _put64(d + PREFIX, self.p[peer].ours)
        _put64(d + PREFIX + 8, self.p[peer].theirs if ack else 0)
        self.mac.sign_in_place(d, CONNECT_SIZE)
        if ack:
            self.c.acks_sent += 1
        else:
            self.c.connects_sent += 1

    cdef void _ping(self, int peer, uint64_t now) noexcept nogil:
        cdef Peer* q = &self.p[peer]
        cdef uint64_t t = self._us(now)
        cdef uint8_t* d
        if t <= q.sent:  # two Pings of a peer in one microsecond: keep tokens distinct
            t = q.sent + 1
        d = self._queue(peer, T_PING, PING_SIZE)
        d[0] = 0; d[1] = T_PING; d[2] = 0; d[3] = 0
        _put64(d + PREFIX, (<uint64_t>peer << TIME_BITS) | (t & TIME_MASK))
        self.mac.sign_in_place(d, PING_SIZE)
        q.sent = t
        q.out[q.head] = t
        q.head = (q.head + 1) % RING

    # ---- receiving -------------------------------------------------------------------------

    cdef void _receive(self, int k, uint64_t now) noexcept nogil:
        """Everything waiting on socket k, in batches."""
        cdef int rc, i, n = self.batch
        cdef msghdr* h
        while True:
            for i in range(n):
                h = &self.in_msg[i].msg_hdr
                h.msg_name = &self.in_src[i]
                h.msg_namelen = sizeof(sockaddr_in)
                h.msg_iov = &self.in_iov[i]
                h.msg_iovlen = 1
                h.msg_control = self.in_ctl + i * CONTROL
                h.msg_controllen = CONTROL
                h.msg_flags = 0
            rc = recvmmsg(self.fds[k], self.in_msg, n, MSG_DONTWAIT, NULL)
            self.c.recvmmsg_calls += 1
            if rc < 0:
                if errno == EINTR:
                    continue
                if errno != EAGAIN and errno != EWOULDBLOCK:
                    self.c.recv_errors += 1  # an ICMP error for an earlier send: go on
                    continue
                return
            for i in range(rc):
                self._datagram(k, i, now)
            if rc < n:
                return

    cdef void _datagram(self, int k, int i, uint64_t now) noexcept nogil:
        cdef msghdr* h = &self.in_msg[i].msg_hdr
        cdef const uint8_t* d = self.inb + i * IN_SLOT
        cdef Py_ssize_t n = self.in_msg[i].msg_len
        cdef cmsghdr* cm
        cdef uint32_t to = 0
        cdef int64_t a, peer
        cdef uint16_t kind, flags
        cdef uint64_t echo, t
        cdef Peer* q
        cdef uint8_t* r
        cdef int j
        self.c.datagrams_in += 1
        if (self.in_src[i].sin_addr.s_addr != self.node.sin_addr.s_addr
                or self.in_src[i].sin_port != self.node.sin_port):
            self.c.foreign += 1
            return
        cm = CMSG_FIRSTHDR(h)
        while cm != NULL:
            if cm.cmsg_level == IPPROTO_IP and cm.cmsg_type == IP_PKTINFO:
                to = ntohl((<in_pktinfo*>CMSG_DATA(cm)).ipi_addr.s_addr)
                break
            cm = CMSG_NXTHDR(h, cm)
        a = <int64_t>to - <int64_t>self.base
        if cm == NULL or a < 0 or a >= self.addresses:
            self.c.foreign += 1
            return
        peer = <int64_t>k * self.addresses + a
        if peer >= self.peers:
            self.c.foreign += 1
            return
        if h.msg_flags & MSG_TRUNC or n > MAX_DATAGRAM:
            self.c.malformed += 1
            return
        if self.mac.verify_raw(d, n) < 0:  # also below header + MAC
            self.c.bad_mac += 1
            return
        q = &self.p[peer]
        kind = _u16(d)
        flags = _u16(d + 2)
        if kind == T_PONG:
            if n != PING_SIZE:
                self.c.malformed += 1
                return
            echo = _u64(d + PREFIX)
            t = echo & TIME_MASK
            j = -1
            if (echo >> TIME_BITS) == <uint64_t>peer and t != 0:
                for i in range(RING):
                    if q.out[i] == t:
                        j = i
                        break
            if j < 0:  # no Ping of this peer's last RING, or its Pong already counted
                self.c.pongs_unmatched += 1
                return
            q.out[j] = 0
            self.c.pongs += 1
            ls_hist_record(&self.latency.h, (self._us(now) - t) * 1000)
            if q.state == ACKED:
                q.state = READY
                self.ready += 1
                self.inflight -= 1
        elif kind == T_PING:
            if n != PING_SIZE:
                self.c.malformed += 1
                return
            self.c.node_pings += 1
            r = self._queue(<int>peer, T_PONG, PING_SIZE)
            r[0] = 0; r[1] = T_PONG; r[2] = 0; r[3] = 0
            memcpy(r + PREFIX, d + PREFIX, 8)
            self.mac.sign_in_place(r, PING_SIZE)
        elif kind == T_CONNECT:
            if n != CONNECT_SIZE:
                self.c.malformed += 1
                return
            # Ack set; its Echo ours: the node's stateless answer (any Attempt it chose)
            if flags & 1 and _u64(d + PREFIX + 8) == q.ours and q.state == CONNECTING:
                self.c.connect_answers += 1
                q.theirs = _u64(d + PREFIX)
                q.state = ACKED
                q.since = self._us(now)
                self._connect(<int>peer, True)
                self._ping(<int>peer, now)  # the same socket: it arrives after the Ack
            else:
                self.c.other += 1
        elif kind == T_RESET:
            self.c.resets += 1
            if q.state == READY:
                self.ready -= 1
            elif q.state != IDLE:
                self.inflight -= 1
            q.state = IDLE
        else:
            self.c.other += 1

    cdef void _poll(self, uint64_t now, int64_t wait_ns) noexcept nogil:
        """Wait up to wait_ns for a datagram (0: just look), then read every socket that has
        some, answering what needs answering; flush."""
        cdef timespec ts
        cdef int k, rc
        if wait_ns < 0:
            wait_ns = 0
        ts.tv_sec = wait_ns // 1000000000
        ts.tv_nsec = wait_ns % 1000000000
        rc = ppoll(self.pfds, self.nports, &ts, NULL)
        if rc > 0:
            now = ls_now_ns()
            for k in range(self.nports):
                if self.pfds[k].revents & POLLIN:
                    self._receive(k, now)
        self._flush()

    cdef void _refresh(self) except *:
        m = self.keyring.macset(time.time())
        if m is None:
            raise ValueError("the keyring gives no C MacSet")
        self.mac = m

    cdef void _start(self) except *:
        if not self.socks:
            raise ValueError("the load generator is closed")
        memset(&self.c, 0, sizeof(Counters))
        self.latency = LatencyHistogram()
        self._refresh()

    # ---- phases ----------------------------------------------------------------------------

    def connect(self, double rate=10000.0, double timeout=60.0, double retry=1.0,
                int window=4096):
        """Bring every peer: Connect, and on the node's answer Connect with Ack and a first
        Ping; a peer is ready when that Ping's Pong comes. `rate`: handshakes started (and
        resends) per second, paced, with at most `window` peers between their first Connect
        and ready (so a slow node is not flooded); a step unanswered after `retry` s is sent
        again (a Connect again; a Ping only: `retry` must be more than the node's slot); a
        Reset starts a peer over. Until every peer is ready or `timeout`. Returns the
        counters and `ready`."""
        if not rate > 0 or not timeout > 0 or not retry > 0 or window < 1:
            raise ValueError("rate, timeout and retry must be positive, window at least 1")
        self._start()
        cdef uint64_t start = ls_now_ns(), now, slice_end
        cdef uint64_t deadline = start + <uint64_t>(timeout * 1e9)
        cdef uint64_t retry_us = <uint64_t>(retry * 1e6)
        cdef uint64_t started = 0, due, us, behind = 0
        cdef int cursor = 0, scanned, peer
        cdef int64_t wait
        cdef Peer* q
        cdef double per_ns = rate / 1e9
        while self.ready < self.peers:
            PyErr_CheckSignals()
            self._refresh()
            now = ls_now_ns()
            if now >= deadline:
                break
            slice_end = min(now + SLICE_NS, deadline)
            with nogil:
                while self.ready < self.peers:
                    now = ls_now_ns()
                    if now >= slice_end:
                        break
                    due = <uint64_t>((now - start) * per_ns) + 1 - behind
                    if due > started + <uint64_t>self.batch:  # no credit piles up while
                        behind += due - started - self.batch  # peers wait for a retry
                        due = started + self.batch
                    us = self._us(now)
                    scanned = 0
                    # Look at most at every peer once per round; send what is due.
                    while started < due and scanned < self.peers:
                        peer = cursor
                        cursor = cursor + 1 if cursor + 1 < self.peers else 0
                        scanned += 1
                        q = &self.p[peer]
                        if q.state == IDLE:
                            if self.inflight >= window:
                                continue
                            q.state = CONNECTING
                            self.inflight += 1
                        elif q.state == READY or us - q.since < retry_us:
                            continue
                        q.since = us
                        started += 1
                        if q.state == CONNECTING:
                            self._connect(peer, False)
                        else:
                            self._ping(peer, now)
                    self._flush()
                    wait = <int64_t>(<double>(started + behind + 1) / per_ns) - \
                        <int64_t>(now - start)
                    if scanned >= self.peers and wait < 1000000:
                        wait = 1000000  # nothing due among all peers: do not spin
                    self._poll(now, min(wait, <int64_t>(slice_end - now)))
        out = self.counters()
        out.update(peers=self.peers, ready=self.ready, inflight=self.inflight,
                   seconds=(ls_now_ns() - start) / 1e9)
        return out

    def run(self, double rate, double seconds, double drain=0.5, double min_gap=0.0):
        """Offer Pings at `rate` per second for `seconds` (open loop, paced, sendmmsg batches),
        round robin over the ready peers, then read Pongs for `drain` seconds more. Every
        ready peer's Pings are at least ready / rate s apart: ValueError if that is less than
        `min_gap` (a node answers a connection once per slot). Returns the counters, the
        offered and answered rates and the Pongs' round trip (ns)."""
        if not rate > 0 or not seconds > 0 or drain < 0:
            raise ValueError("rate and seconds must be positive, drain at least 0")
        if self.ready == 0:
            raise ValueError("no peer is ready (connect() first)")
        if self.ready / rate < min_gap:
            raise ValueError(f"{rate:,.0f} Pings/s over {self.ready:,} peers is one every "
                             f"{self.ready / rate:.3f} s a peer, under {min_gap} s")
        self._start()
        cdef uint64_t start = ls_now_ns(), now, slice_end, sent = 0, due
        cdef uint64_t stop = start + <uint64_t>(seconds * 1e9)
        cdef uint64_t end = stop + <uint64_t>(drain * 1e9)
        cdef uint64_t send_end = 0, skipped = 0, behind = 0
        cdef int cursor = 0, scanned, peer
        cdef int64_t wait
        cdef double per_ns = rate / 1e9
        # Batches of at most 1 ms of Pings (and at most `batch`): sendmmsg amortised at high
        # rates, no Ping held back long at low ones.
        cdef int chunk = max(1, min(self.batch, <int>(rate / 1000)))
        while True:
            PyErr_CheckSignals()
            self._refresh()
            now = ls_now_ns()
            if now >= end:
                break
            slice_end = min(now + SLICE_NS, end)
            with nogil:
                while True:
                    now = ls_now_ns()
                    if now >= slice_end:
                        break
                    if now < stop:
                        due = <uint64_t>((now - start) * per_ns) + 1 - behind
                        if due > sent + MAX_BURST:  # behind (this core was busy): the
                            behind += due - sent - MAX_BURST  # rest is not offered, later
                            due = sent + MAX_BURST
                        if due - sent >= <uint64_t>chunk:
                            scanned = 0
                            while sent < due and scanned < self.peers:
                                peer = cursor
                                cursor = cursor + 1 if cursor + 1 < self.peers else 0
                                scanned += 1
                                if self.p[peer].state != READY:
                                    skipped += 1
                                    continue
                                self._ping(peer, now)
                                sent += 1
                            self._flush()
                        # Next: when a batch is due.
                        wait = <int64_t>(<double>(sent + behind + chunk) / per_ns) - \
                            <int64_t>(now - start)
                        wait = min(wait, <int64_t>(stop - now))
                        send_end = now
                    else:
                        wait = <int64_t>(slice_end - now)
                    self._poll(now, min(wait, <int64_t>(slice_end - now)))
        cdef double took = (send_end - start) / 1e9 if send_end > start else seconds
        out = self.counters()
        out.update(peers=self.peers, ready=self.ready, rate=rate, seconds=took, drain=drain,
                   pings_queued=sent, not_ready_skipped=skipped, behind=behind,
                   offered_per_second=<double>self.c.pings_sent / took,
                   pongs_per_second=<double>self.c.pongs / took,
                   loss=(1.0 - <double>self.c.pongs / <double>self.c.pings_sent
                         if self.c.pings_sent else 0.0),
                   latency=self.latency.summary())
        return out
