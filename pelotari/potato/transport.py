"""Potato's transports: whole messages (the bytes of one JSON object) between named peers.

The core (pelotari.potato.core) never sees this module: an adapter hands it `on_peer_up`,
`on_peer_down` and `on_message` events and calls `send`. Two transports share one interface
(`Transport`):

`TcpTransport`: one TCP connection per pair of peers, newline-delimited JSON.
  * A message is one line: its bytes, then b"\\n". `json.dumps` escapes every newline inside a
    string, so a JSON message never holds a raw newline; `send` refuses data that does (counted
    `send_dropped_newline`). An empty line is skipped.
  * Handshake: the connecting side writes `{"hello": NAME}` as its first line; the listening
    side answers `{"hello": NAME}` when it takes the connection, or `{"hello": NAME, "refused":
    REASON}` and closes. The connecting side may refuse in turn with the same refusal line
    (then the listening side, which took the connection, sees it as a line on an open
    connection). Handshake lines are at most 1,024 bytes; the whole handshake must finish
    within `handshake_timeout`. Lines that start with `{"hello"` are the transport's own at any
    time (`send` refuses such a message). A hello with an "offer" is a WebRTC node's signaling:
    refused (`wrong_transport`), so that it can say which transport we speak.
  * Liveness: a side that has written nothing for `ping_interval` writes the line
    `{"ping": 1}` (exactly those 11 bytes; `send` refuses them as a message). A peer from which
    nothing has arrived for `dead_after` is declared down and its connection aborted, so a
    stopped or black-holed peer is noticed in about `dead_after` seconds.
  * A line longer than `max_message` bytes (without its newline) closes the connection
    (counted `closed_oversize`); `send` refuses such a message (`send_dropped_oversize`).

`WebRtcTransport` (aiortc): one RTCPeerConnection per peer with one data channel "potato"
(ordered, reliable); a message is one data channel frame (sent as text when it is UTF-8, as
binary otherwise; both are accepted). Signaling is a single exchange over a short TCP
connection to the peer's listening address: the connecting side sends the line
`{"hello": NAME, "offer": SDP}`, the listening side answers `{"hello": NAME, "answer": SDP}` (or
`{"hello": NAME, "refused": REASON}`), and the connection closes; a hello without an offer is a
TCP node's and is refused (`wrong_transport`), so that it can say which transport we speak. No
trickle ICE: the SDP holds
every candidate. No STUN or TURN server (`iceServers=[]`), so host candidates only; when the
transport's host is a specific address, its ICE candidates are on that address alone (aioice
would otherwise offer every interface address but 127.0.0.1 and ::1, so two nodes on 127.0.0.1
could not meet; done by wrapping aioice's get_host_addresses, which reads a context variable
set only around our own setLocalDescription calls). Pings (`{"ping": 1}` frames) and `dead_after` work as for TCP: ICE consent
freshness would notice a dead peer only after about 30 s. A frame over `max_message` is dropped
(counted `recv_dropped_oversize`); the channel stays open.

Both: a name is 1 to 100 characters. A connection claiming our own name, or the name of a
current peer, is refused (`refused_own_name`, `refused_duplicate`), except when two nodes
connect to each other at the same time (both connections within `handshake_timeout`): then
both keep the connection opened by the smaller name, the other is refused (`refused_crossed`)
and both `connect` calls return the name; the peer is reported up once. A message sent on the
losing connection in that moment may be lost. Callbacks run in the event loop; an exception in
one is logged and counted (`callback_errors`). `close()` reports every peer down, then closes
every connection. A transport is created inside a running event loop.

Limits on what strangers and peers can do (all constructor arguments):
  * `max_per_host` (4): connections one address has opened to us, handshaking or open; one
    more is closed at once without a byte (`refused_per_host`). An incoming handshake line
    must come within `hello_timeout` (2 s; the whole handshake within `handshake_timeout`).
  * `max_peers` (64) bounds the peers that connected to us (and the handshakes under way);
    the connections we open ourselves are never refused for it.
  * Receiving: a token bucket per peer, `recv_rate` (2,000) messages and `recv_byte_rate`
    (4 MiB) a second, holding `recv_burst` (0.5) seconds of either (at least one message).
    TCP: over it, reading that connection pauses until the bucket refills (`recv_held`), so
    TCP pushes back on the sender and nothing is lost; at most RECV_BATCH (256) lines are
    taken from one connection before the loop runs other work (`recv_yielded`). WebRTC
    (aiortc cannot push back): over it, the message is dropped (`recv_dropped_rate`); pings
    never wait for the bucket.
  * Liveness: any bytes count (TCP), any SCTP packet (WebRTC, even one aiortc holds until a
    lost one is retransmitted); a connection we hold back is not judged silent, nor is
    anyone when the ping task itself ran late (`ping_loop_stalled`).
  * WebRTC SDP (offer and answer): one m=application section (`refused_bad_sdp`), and only
    ICE candidates on the address that signaled it, at most `max_candidates` (8); the others
    are removed (`ice_candidates_dropped`) so we never send checks to a third party; none
    left: refused (`refused_no_candidate`). ICE checks are answered only from the signaling
    address (from a loopback one: this host's addresses too), from at most `max_candidates`
    source addresses it did not name; the others are dropped unanswered
    (`ice_checks_dropped`), since a spoofed check would make us check a third party.

`stats` counts: messages_sent, messages_received, pings_sent, peers_up, peers_down;
send_dropped_<why> (unknown_peer, oversize, newline, reserved, empty, not_bytes, buffer_full,
closing); refused_<why> (own_name, duplicate, crossed, bad_name, bad_hello, max_peers, busy,
by_peer, per_host, bad_sdp, no_candidate, wrong_transport); closed_<why> (dead, lost, oversize, crossed);
handshake_timeout, recv_dropped_oversize, recv_dropped_rate, recv_held, recv_yielded,
ping_loop_stalled, pings_withheld, ice_candidates_dropped, replaced_crossed, callback_errors.
"""
import asyncio
import contextvars
import ipaddress
import json
import logging
import socket
from collections import Counter
from collections.abc import Callable

log = logging.getLogger("pelotari.potato.transport")

PING = b'{"ping": 1}'
HELLO = b'{"hello"'  # how every handshake line starts
WRONG_TRANSPORT = "wrong_transport"  # the refusal of a hello from the other transport
NAME_MAX = 100
HELLO_MAX = 1024  # bytes in a TCP handshake line
SIGNAL_MAX = 65536  # bytes in a WebRTC signaling line (an SDP is about 1 KB)
CHANNEL = "potato"
CLOSE_TIMEOUT = 2.0  # seconds an aiortc close() may take before it is given up
DEFAULT_MAX_BUFFER = 1 << 20  # unsent bytes per peer before send() refuses
RECV_BATCH = 256  # TCP lines taken from one connection before the loop runs other work
REASSEMBLY_MAX = 2 << 20  # bytes of unfinished data channel messages a WebRTC peer may leave
REASSEMBLY_CHUNKS = 2048  # and SCTP chunks (aiortc's are up to 1,200 bytes: 2 MiB is ~1,750)
SCTP_STREAMS = 4  # SCTP streams a WebRTC peer may use (potato's channel is one)


class PeerRefused(ValueError):
    """A handshake was refused (by us or by the peer); `reason` names why, `peer` is the name
    the other side gave (None if it gave none)."""

    def __init__(self, message: str, reason: str, peer: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.peer = peer if _valid_name(peer) else None


def _valid_name(name) -> bool:
    if not (isinstance(name, str) and 1 <= len(name) <= NAME_MAX):
        return False
    try:
        name.encode()  # no lone surrogate ("\\ud800" in a hello): it could be sent nowhere
    except UnicodeEncodeError:
        return False
    return True


def _wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def _nodelay(sock) -> None:
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class _Link:
    """What the base class knows of one connection to one peer (either transport)."""

    outgoing: bool
    name: str | None = None
    is_open = False  # messages can flow
    retired = False  # no longer the peer's connection (dropped, refused or replaced)
    claimed_at = 0.0
    remote_host: str | None = None  # the other end's IP address
    last_rx = 0.0
    last_tx = 0.0
    held = False  # we stopped taking its messages for now (rate limit): not judged silent
    tokens = 0.0  # the receive token bucket: messages,
    token_bytes = 0.0  # bytes,
    tokens_at = 0.0  # as of this loop time
    rx_bytes = 0  # bytes it sent us (since the handshake; WebRTC: its offer or answer too)
    spent = 0  # bytes it made us send it: replies (send(reply=True)) and TCP pings to it

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def buffered(self) -> int:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError


class Transport:
    """The interface both transports share (and their name registry, pings and callbacks)."""

    def __init__(self, name: str, host: str, port: int, *, on_peer_up: Callable[[str], None],
                 on_peer_down: Callable[[str], None],
                 on_message: Callable[[str, bytes], None], max_message: int = 65536,
                 max_peers: int = 64, ping_interval: float = 0.25, dead_after: float = 1.0,
                 handshake_timeout: float = 5.0, max_buffer: int = DEFAULT_MAX_BUFFER,
                 max_per_host: int = 4, hello_timeout: float = 2.0,
                 recv_rate: float = 2000.0, recv_byte_rate: float = 4 << 20,
                 recv_burst: float = 0.5):
        if not _valid_name(name):
            raise ValueError(f"a node name is 1 to {NAME_MAX} characters, not {name!r}")
        if max_message < len(PING) or max_peers < 1 or max_buffer < 1 or max_per_host < 1:
            raise ValueError("max_message, max_peers, max_buffer and max_per_host must be "
                             "positive")
        if not 0 < ping_interval < dead_after or handshake_timeout <= 0 or hello_timeout <= 0:
            raise ValueError("need 0 < ping_interval < dead_after, handshake_timeout > 0 and "
                             "hello_timeout > 0")
        if recv_rate <= 0 or recv_byte_rate <= 0 or recv_burst <= 0:
            raise ValueError("recv_rate, recv_byte_rate and recv_burst must be positive")
        self.name, self.host, self.port = name, host, port
        self.on_peer_up, self.on_peer_down, self.on_message = on_peer_up, on_peer_down, on_message
        self.max_message, self.max_peers, self.max_buffer = max_message, max_peers, max_buffer
        self.max_per_host = max_per_host
        self.ping_interval, self.dead_after = ping_interval, dead_after
        self.handshake_timeout = handshake_timeout
        self.hello_timeout = min(hello_timeout, handshake_timeout)
        self.recv_rate, self.recv_byte_rate = recv_rate, recv_byte_rate
        self._burst = max(1.0, recv_rate * recv_burst)  # the bucket's size: messages,
        self._burst_bytes = max(float(max_message + 1), recv_byte_rate * recv_burst)  # bytes
        self.stats: Counter = Counter()
        self._loop = asyncio.get_running_loop()
        self._peers: dict[str, _Link] = {}  # name -> its connection (open or opening)
        self._announced: set[str] = set()  # names given to on_peer_up and not yet to on_peer_down
        self._handshakes: set = set()  # handshakes under way (bounded by max_peers)
        self._tasks: set[asyncio.Task] = set()
        self._keepalive: asyncio.Task | None = None
        self._crossing: dict[str, asyncio.TimerHandle] = {}  # see _crossed()
        self._closed = False
        # Whether another transport of the same node holds this name (a node with browsers
        # has two): a name is one peer, whichever way it came. yield_name(name): that other
        # transport drops its connection of that name, if a peer opened it (True if it did).
        self.taken: Callable[[str], bool] = lambda name: False
        self.yield_name: Callable[[str], bool] = lambda name: False

    async def start(self) -> None:
        """Listen on host:port for peers that connect to us (port 0: any; self.port is set)."""
        raise NotImplementedError

    async def connect(self, host: str, port: int) -> str:
        """Become peers with the node at host:port and return its name."""
        raise NotImplementedError

    def peers(self) -> list[str]:
        """The names of the peers messages can be sent to now."""
        return [name for name, link in self._peers.items() if link.is_open]

    def send(self, peer: str, data: bytes, reply: bool = False) -> bool:
        """Queue one message to a peer without blocking; False (counted) if it cannot be.
        reply=True: the message answers that peer (an election response); it is sent only
        while what the peer made us send stays within what it sent us (`send_dropped_credit`
        otherwise), so no stranger gets more bytes out of us than it put in."""
        link = self._peers.get(peer)
        if link is None or not link.is_open or self._closed:
            self.stats["send_dropped_unknown_peer"] += 1
            return False
        reason = self._refuse_data(data)
        if reason:
            self.stats[f"send_dropped_{reason}"] += 1
            return False
        if link.buffered() > self.max_buffer:
            self.stats["send_dropped_buffer_full"] += 1
            return False
        if reply and link.spent + len(data) + 1 > link.rx_bytes:
            self.stats["send_dropped_credit"] += 1
            return False
        try:
            link.write(data)
        except ValueError:  # over what the peer's SCTP takes (its a=max-message-size)
            self.stats["send_dropped_oversize"] += 1
            return False
        except Exception as exc:  # the connection is going away under us
            log.debug("send to %s failed: %r", peer, exc)
            self.stats["send_dropped_closing"] += 1
            return False
        if reply:
            link.spent += len(data) + 1
        self.stats["messages_sent"] += 1
        return True

    # -- shared machinery --------------------------------------------------------------------

    def _refuse_data(self, data) -> str:
        if not isinstance(data, (bytes, bytearray)):
            return "not_bytes"
        if not data:
            return "empty"
        if len(data) > self.max_message:
            return "oversize"
        if data == PING or data.startswith(HELLO):
            return "reserved"
        return ""

    def _decide(self, name, outgoing: bool, host: str | None = None) -> str:
        """'' to take a connection claiming `name`, 'swap' to take it in place of the current
        one, else the reason it is refused."""
        if not _valid_name(name):
            return "bad_name"
        if name == self.name:
            return "own_name"
        if self._closed:
            return "closing"
        old = self._peers.get(name)
        if old is None and self.taken(name) and not (outgoing and self.yield_name(name)):
            # (A connection we open, to a --connect target, is sure of its place: a page that
            # took the name while the target was away gives it up.)
            return "duplicate"
        if old is None:
            # Only connections peers opened count: the ones we open (--connect) are never
            # refused because strangers took the incoming places.
            if not outgoing and sum(not link.outgoing for link in self._peers.values()) >= \
                    self.max_peers:
                return "max_peers"
            return ""
        if (old.outgoing != outgoing and host is not None and old.remote_host == host
                and self._loop.time() - old.claimed_at < self.handshake_timeout):
            # (Only from the host we know that name at: a stranger elsewhere claiming a peer's
            # name never replaces its connection.)
            # Both nodes connected to each other at once: both keep the smaller name's.
            opener = self.name if outgoing else name
            return "swap" if opener == min(self.name, name) else "crossed"
        return "duplicate"

    def _claim(self, link: _Link, name: str, swap: bool) -> None:
        """Make `link` the connection of peer `name` (replacing the current one if swap)."""
        link.name = name
        link.claimed_at = link.last_rx = link.last_tx = link.tokens_at = self._loop.time()
        link.tokens, link.token_bytes = self._burst, self._burst_bytes
        old = self._peers.get(name)
        self._peers[name] = link
        if name in self._crossing:
            self._crossing.pop(name).cancel()
        if swap and old is not None:
            self.stats["replaced_crossed"] += 1
            old.retired = True
            old.shutdown()
        if self._keepalive is None and not self._closed:
            self._keepalive = self._loop.create_task(self._ping_loop())
        if link.is_open:
            self._opened(link)

    def _opened(self, link: _Link) -> None:
        """The link can carry messages: announce its peer if it is new."""
        link.last_rx = link.last_tx = self._loop.time()
        if self._peers.get(link.name) is link and link.name not in self._announced:
            self._announced.add(link.name)
            self.stats["peers_up"] += 1
            self._call(self.on_peer_up, link.name)

    def _drop(self, link: _Link, reason: str) -> None:
        """The link is gone (or must go): forget it, report its peer down, close it."""
        if link.retired:
            return
        link.retired = True
        link.is_open = False
        if reason:
            self.stats[f"closed_{reason}"] += 1
        if link.name is not None and self._peers.get(link.name) is link:
            del self._peers[link.name]
            if link.name in self._announced:
                self._announced.discard(link.name)
                self.stats["peers_down"] += 1
                self._call(self.on_peer_down, link.name)
        link.shutdown()

    def _crossed(self, link: _Link) -> None:
        """The peer refused this (open) link as the losing one of two crossed connections: it
        keeps the other, whose hello is on its way. Wait for it (up to handshake_timeout)
        rather than report the peer down and up again."""
        name = link.name
        if link.retired or self._peers.get(name) is not link:
            return
        link.retired, link.is_open = True, False
        del self._peers[name]
        self.stats["closed_crossed"] += 1
        if name in self._announced:
            self._crossing[name] = self._loop.call_later(self.handshake_timeout,
                                                         self._crossing_over, name)
        link.shutdown()

    def _crossing_over(self, name: str) -> None:
        self._crossing.pop(name, None)
        if name in self._announced and name not in self._peers:
            self._announced.discard(name)
            self.stats["peers_down"] += 1
            self._call(self.on_peer_down, name)

    def _received(self, link: _Link, data: bytes) -> None:
        """One message from a peer (pings and empty lines are the transport's own)."""
        if data == PING or not data:
            return
        self.stats["messages_received"] += 1
        self._call(self.on_message, link.name, data)

    def _admit(self, link: _Link, size: int) -> float:
        """Take one message of `size` bytes from the link's token bucket: 0.0 if taken, else
        the seconds until it could be."""
        now = self._loop.time()
        elapsed, link.tokens_at = now - link.tokens_at, now
        link.tokens = min(self._burst, link.tokens + elapsed * self.recv_rate)
        link.token_bytes = min(self._burst_bytes, link.token_bytes + elapsed * self.recv_byte_rate)
        if link.tokens >= 1.0 and link.token_bytes >= size:
            link.tokens -= 1.0
            link.token_bytes -= size
            return 0.0
        return max((1.0 - link.tokens) / self.recv_rate,
                   (size - link.token_bytes) / self.recv_byte_rate, 0.001)

    def _incoming_from(self, host: str | None) -> int:
        """Connections (handshaking or open) that `host` opened to us."""
        raise NotImplementedError

    def _call(self, callback, *args) -> None:
        try:
            callback(*args)
        except Exception:
            self.stats["callback_errors"] += 1
            log.exception("potato transport callback %s%r failed", callback, args)

    async def _ping_loop(self) -> None:
        tick = min(self.ping_interval, self.dead_after) / 2
        last = self._loop.time()
        while True:
            await asyncio.sleep(tick)
            now = self._loop.time()
            # A tick this late means the loop itself was busy: what peers sent meanwhile may
            # be waiting unread, so nobody is judged silent until we have listened again.
            stalled, last = now - last > 2 * tick, now
            if stalled:
                self.stats["ping_loop_stalled"] += 1
            for link in list(self._peers.values()):
                if not link.is_open or link.retired:
                    continue
                if not (link.held or stalled) and now - link.last_rx > self.dead_after:
                    log.info("%s: peer %s silent for %.2f s: down", self.name, link.name,
                             now - link.last_rx)
                    self._drop(link, "dead")
                elif now - link.last_tx >= self.ping_interval:
                    budgeted = self._ping_budgeted(link)
                    if budgeted and link.rx_bytes < link.spent + len(PING) + 1:
                        self.stats["pings_withheld"] += 1
                        continue
                    try:
                        link.write(PING)
                        if budgeted:
                            link.spent += len(PING) + 1
                        self.stats["pings_sent"] += 1
                    except Exception as exc:
                        log.debug("ping to %s failed: %r", link.name, exc)

    def _ping_budgeted(self, link: _Link) -> bool:
        """Whether pings to this peer count against what it sent us (see TcpTransport)."""
        return False

    def _spawn(self, coro) -> asyncio.Task:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Report every peer down, close every connection and the listening socket, and stop
        every task."""
        if self._server is not None:
            self._server.close()
        await self._close_common()
        for link in list(self._links):
            link.shutdown()
        await self._close_links()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _close_links(self) -> None:
        """Wait for the links close() shut down (each transport its own way)."""
        raise NotImplementedError

    async def _close_common(self) -> None:
        """Mark closed, drop every link (reporting peers down), stop the ping task."""
        self._closed = True
        for link in list(self._peers.values()):
            self._drop(link, "")
        for name in list(self._crossing):
            self._crossing[name].cancel()
            self._crossing_over(name)
        if self._keepalive is not None:
            self._keepalive.cancel()
            await asyncio.gather(self._keepalive, return_exceptions=True)
            self._keepalive = None

    def _remaining(self, deadline: float) -> float:
        return max(0.0, deadline - self._loop.time())


# -- TCP -------------------------------------------------------------------------------------


class _TcpLink(asyncio.Protocol, _Link):
    """One TCP connection: handshake, then newline-delimited messages and pings."""

    def __init__(self, owner: "TcpTransport", outgoing: bool):
        self.owner, self.outgoing = owner, outgoing
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.limit = HELLO_MAX
        self.loop = owner._loop
        self.result = self.loop.create_future()  # the handshake: the peer's name or an error
        self.lost = self.loop.create_future()
        self.timer: asyncio.TimerHandle | None = None
        self.hold_timer: asyncio.Handle | None = None
        self.paused = False  # reading paused by us (see _hold)
        self.eof = False  # the peer closed its side while we held lines
        self.peer_address = ""

    # asyncio.Protocol

    def connection_made(self, transport) -> None:
        self.transport = transport
        owner = self.owner
        _nodelay(transport.get_extra_info("socket"))
        peer = transport.get_extra_info("peername")
        self.peer_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.remote_host = peer[0] if peer else None
        if not self.outgoing and not owner._closed and \
                owner._incoming_from(self.remote_host) >= owner.max_per_host:
            # Closed without a byte: it sent nothing, it gets nothing.
            owner.stats["refused_per_host"] += 1
            self.retired = True
            self._fail(ConnectionError("too many connections from that address"))
            transport.abort()
            return
        owner._links.add(self)
        if owner._closed or (not self.outgoing and len(owner._handshakes) >= owner.max_peers):
            owner.stats["refused_busy"] += 1
            self._fail(ConnectionError("transport closing or busy"))
            transport.abort()
            return
        owner._handshakes.add(self)
        self.timer = self.loop.call_later(
            owner.handshake_timeout if self.outgoing else owner.hello_timeout,
            self._handshake_timeout)
        if self.outgoing:
            self._line_out({"hello": owner.name})

    def data_received(self, data: bytes) -> None:
        if self.retired and self.result.done():
            return
        self.last_rx = self.loop.time()  # any bytes: the peer is alive
        if self.is_open:
            self.rx_bytes += len(data)
        self.buf += data
        if not self.held:
            self._process()

    def _process(self) -> None:
        """Take the complete lines in buf: at most RECV_BATCH per call and, once open, as many
        as the token bucket allows. What is left waits with reading paused (TCP pushes back
        on the peer), so what we hold is at most one read."""
        owner, buf, pos, batch = self.owner, self.buf, 0, RECV_BATCH
        while True:
            end = buf.find(b"\n", pos)
            if end < 0:
                break
            if end - pos > self.limit:
                self._oversize()
                return
            if self.is_open:
                wait = 0.0 if batch else -1.0
                if batch:
                    wait = owner._admit(self, end - pos)
                if wait:
                    self._hold(wait)
                    break
                batch -= 1
            line = bytes(buf[pos:end])
            pos = end + 1
            if not self.is_open:
                self._hello(line)
            elif line.startswith(HELLO):
                self._late_hello(line)
            else:
                owner._received(self, line)
            if self.retired or self.transport.is_closing():
                return
        del buf[:pos]
        if not self.held:
            if len(buf) > self.limit:
                self._oversize()
            elif self.eof:
                self.transport.close()

    def _hold(self, wait: float) -> None:
        """Stop taking lines for `wait` seconds (< 0: until the loop has run once)."""
        self.held = True
        self.owner.stats["recv_held" if wait > 0 else "recv_yielded"] += 1
        if not self.paused and not self.transport.is_closing():
            self.transport.pause_reading()
            self.paused = True
        if wait > 0:
            self.hold_timer = self.loop.call_later(wait, self._release)
        else:
            self.hold_timer = self.loop.call_soon(self._release)

    def _release(self) -> None:
        self.held = False
        self.hold_timer = None
        if self.retired or self.transport.is_closing():
            return
        self.last_rx = self.loop.time()  # the time we did not listen does not count
        self._process()
        if not self.held and self.paused and not self.transport.is_closing():
            self.paused = False
            self.transport.resume_reading()

    def eof_received(self):
        if self.held:  # lines still to take: close once they are taken
            self.eof = True
            return True
        return False

    def connection_lost(self, exc) -> None:
        owner = self.owner
        owner._links.discard(self)
        owner._handshakes.discard(self)
        if self.timer:
            self.timer.cancel()
        if self.hold_timer:
            self.hold_timer.cancel()
        self._fail(ConnectionError(f"{self.peer_address} closed the connection during the "
                                   "handshake"))
        owner._drop(self, "lost" if self.is_open else "")
        if not self.lost.done():
            self.lost.set_result(None)

    # _Link

    def write(self, data: bytes) -> None:
        self.transport.write(data + b"\n")
        self.last_tx = self.loop.time()

    def buffered(self) -> int:
        return self.transport.get_write_buffer_size()

    def shutdown(self) -> None:
        self.retired = True
        self.is_open = False
        if self.transport is not None and not self.transport.is_closing():
            if self.transport.get_write_buffer_size():
                self.transport.abort()
            else:
                self.transport.close()

    # handshake

    def _line_out(self, obj: dict) -> None:
        self.transport.write(json.dumps(obj).encode() + b"\n")
        self.last_tx = self.loop.time()

    def _fail(self, exc: Exception) -> None:
        if not self.result.done():
            self.result.set_exception(exc)
            self.result.exception()  # retrieved: nobody may be waiting (an incoming link)

    def _refuse(self, reason: str, name=None) -> None:
        owner = self.owner
        owner.stats[f"refused_{reason}"] += 1
        owner._handshakes.discard(self)
        self._line_out({"hello": owner.name, "refused": reason})
        if reason == "crossed":  # we are peers through the other connection
            self.result.set_result(name)
        else:
            self._fail(PeerRefused(f"refused {self.peer_address} claiming {name!r}: {reason}",
                                   reason, name))
        self.shutdown()

    def _hello(self, line: bytes) -> None:
        owner = self.owner
        try:
            hello = json.loads(line)
            name = hello["hello"]
            refused = hello.get("refused")
            if not isinstance(name, str):
                raise TypeError("the name is not a string")
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            owner.stats["refused_bad_hello"] += 1
            owner._handshakes.discard(self)
            self._fail(PeerRefused(f"{self.peer_address} sent no hello: {bytes(line[:80])!r}",
                                   "bad_hello"))
            self.shutdown()
            return
        if refused is not None:
            owner.stats["refused_by_peer"] += 1
            owner._handshakes.discard(self)
            if refused == "crossed" and name in owner._peers:
                self.result.set_result(name)
            elif refused == WRONG_TRANSPORT:
                self._fail(PeerRefused(f"{self.peer_address} ({str(name)[:NAME_MAX]!r}) speaks "
                                       "WebRTC, not TCP: both ends need the same transport",
                                       "refused_by_peer", name))
            else:
                self._fail(PeerRefused(f"{self.peer_address} ({str(name)[:NAME_MAX]!r}) "
                                       f"refused us: {str(refused)[:100]}", "refused_by_peer",
                                       name))
            self.shutdown()
            return
        if not self.outgoing and "offer" in hello:  # a WebRTC node's signaling line
            self._refuse(WRONG_TRANSPORT, name)
            return
        reason = owner._decide(name, self.outgoing, self.remote_host)
        if reason not in ("", "swap"):
            self._refuse(reason, name)
            return
        owner._handshakes.discard(self)
        self.timer.cancel()
        if not self.outgoing:
            self._line_out({"hello": owner.name})
        self.limit = owner.max_message
        self.is_open = True
        owner._claim(self, name, swap=reason == "swap")
        if not self.result.done():
            self.result.set_result(name)

    def _late_hello(self, line: bytes) -> None:
        """A handshake line on an open connection: the peer refuses it after all."""
        try:
            reason = json.loads(line).get("refused")
        except (ValueError, AttributeError, TypeError, RecursionError):
            reason = None
        if reason == "crossed":
            self.owner._crossed(self)
        elif reason is not None:
            self.owner._drop(self, "refused_by_peer")
        else:
            self.owner.stats["late_hello_ignored"] += 1

    def _handshake_timeout(self) -> None:
        if self.result.done():
            return
        self.owner.stats["handshake_timeout"] += 1
        self.owner._handshakes.discard(self)
        timeout = self.owner.handshake_timeout if self.outgoing else self.owner.hello_timeout
        self._fail(TimeoutError(f"no hello from {self.peer_address} within {timeout} s"))
        self.shutdown()

    def _oversize(self) -> None:
        if self.is_open:
            log.info("%s: a line over %d bytes from %s: closing", self.owner.name, self.limit,
                     self.name)
            self.owner._drop(self, "oversize")
            if self.transport is not None:
                self.transport.abort()
        else:
            self.owner.stats["refused_bad_hello"] += 1
            self.owner._handshakes.discard(self)
            self._fail(PeerRefused(f"{self.peer_address}: hello line over {self.limit} bytes",
                                   "bad_hello"))
            self.retired = True
            self.transport.abort()


class TcpTransport(Transport):
    """Potato over TCP: one connection per peer pair, newline-delimited JSON (see the module)."""

    def __init__(self, name: str, host: str, port: int, **kwargs):
        super().__init__(name, host, port, **kwargs)
        self._server: asyncio.AbstractServer | None = None
        self._links: set[_TcpLink] = set()  # every connection with a socket, until it is lost

    def _refuse_data(self, data) -> str:
        return super()._refuse_data(data) or ("newline" if b"\n" in data else "")

    def _ping_budgeted(self, link: _Link) -> bool:
        # To a peer that connected to us, pings never total more bytes than it sent since the
        # handshake: a stranger sending one byte a second ("\n") to stay alive got 48 bytes
        # of pings for it. A pelotari peer pings us as often as we ping it (the side that
        # connected pings freely), so this waits at most for its first ping. (WebRTC: not
        # budgeted; a peer that never pings, as a seed client, answers each with an SCTP SACK
        # of about the same size, and that is how we know it is alive.)
        return not link.outgoing

    def _incoming_from(self, host: str | None) -> int:
        return sum(1 for link in self._links
                   if not link.outgoing and not link.retired and link.remote_host == host)

    async def start(self) -> None:
        """Listen on host:port (port 0: any; self.port is set to the port taken)."""
        if self._closed:
            raise RuntimeError("transport closed")
        self._server = await self._loop.create_server(
            lambda: _TcpLink(self, outgoing=False), self.host, self.port, backlog=128,
            reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def connect(self, host: str, port: int) -> str:
        """Open a connection to host:port, exchange hellos and return the peer's name."""
        if self._closed:
            raise RuntimeError("transport closed")
        deadline = self._loop.time() + self.handshake_timeout
        local = None if _wildcard(self.host) else (self.host, 0)
        try:
            _, link = await asyncio.wait_for(self._loop.create_connection(
                lambda: _TcpLink(self, outgoing=True), host, port, local_addr=local),
                self.handshake_timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"cannot connect to {host}:{port}: no answer within "
                               f"{self.handshake_timeout} s") from None
        except OSError as exc:
            raise OSError(exc.errno, f"cannot connect to {host}:{port}: "
                                     f"{exc.strerror or exc}") from None
        try:
            return await asyncio.wait_for(asyncio.shield(link.result),
                                          self._remaining(deadline))
        except asyncio.TimeoutError:
            link._handshake_timeout()
            raise TimeoutError(f"no hello from {host}:{port} within "
                               f"{self.handshake_timeout} s") from None

    async def _close_links(self) -> None:
        for _ in range(2):  # closed (flushed) first, then aborted
            if self._links:
                await asyncio.wait([link.lost for link in self._links], timeout=1.0)
            for link in list(self._links):
                link.transport.abort()


# -- WebRTC ----------------------------------------------------------------------------------

# The addresses aioice may offer as host candidates in the current context (None: its own
# choice). Set around setLocalDescription(); read by the wrapper installed over
# aioice.ice.get_host_addresses (which falls through to the original when unset).
_CANDIDATE_HOSTS: contextvars.ContextVar = contextvars.ContextVar("potato_ice_hosts",
                                                                  default=None)
# The _IceGuard of the ICE connection aiortc creates in the current context (None: no guard).
# Set around createDataChannel (offers) and setRemoteDescription (answers), where aiortc makes
# its aioice.Connection; read by the wrapper installed over Connection.__init__.
_ICE_GUARD: contextvars.ContextVar = contextvars.ContextVar("potato_ice_guard", default=None)
_patched = False
_host_addresses = None  # aioice's own get_host_addresses (this host's interface addresses)
_OWN_TTL = 10.0  # seconds this host's addresses are cached (_IceGuard)


def _aiortc():
    """Import aiortc (slow, and only the WebRTC transport needs it); install the wrappers."""
    global _patched, _host_addresses
    import aioice.ice
    import aiortc

    if not _patched:
        original = _host_addresses = aioice.ice.get_host_addresses

        def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
            hosts = _CANDIDATE_HOSTS.get()
            return list(hosts) if hosts is not None else original(use_ipv4, use_ipv6)

        aioice.ice.get_host_addresses = get_host_addresses
        connection = aioice.ice.Connection
        init, request_received = connection.__init__, connection.request_received

        def guarded_init(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self._potato_guard = _ICE_GUARD.get()

        def guarded_request_received(self, message, addr, protocol):
            guard = getattr(self, "_potato_guard", None)
            if guard is not None and not guard.admits(self, addr):
                return  # unanswered
            request_received(self, message, addr, protocol)

        connection.__init__ = guarded_init
        connection.request_received = guarded_request_received
        _patched = True
    return aiortc


class _IceGuard:
    """Whose ICE checks one RTCPeerConnection answers: those from the address that signaled
    it — when that is a loopback address, from this host's own addresses too (a browser here
    may send from its LAN address; a packet from one of them cannot come from elsewhere) —
    and from at most `cap` source addresses it did not name (peer-reflexive candidates).
    Others are dropped unanswered (`ice_checks_dropped`). Whoever signaled knows our ICE
    credentials, and a STUN check (UDP) can carry any source address: aioice answered a check
    from anywhere and then checked the source itself, so a check spoofed from a third party
    brought it five datagrams, 4.7 times the check's bytes (attack review)."""

    _own: tuple[float, frozenset] = (-_OWN_TTL, frozenset())

    def __init__(self, owner: "WebRtcTransport", host: str | None = None):
        self.owner, self.cap = owner, owner.max_candidates
        self.hosts: set = set()
        self.local = False  # the signaling address is a loopback one
        if host is not None:
            self.allow(host)

    def allow(self, host: str) -> None:
        """Checks from `host` (the signaling address) are answered."""
        ip = _ip(host)
        if ip is not None:
            self.hosts.add(ip)
            self.local = self.local or ip.is_loopback

    @classmethod
    def own_addresses(cls, now: float) -> frozenset:
        at, own = cls._own
        if now - at >= _OWN_TTL:
            try:
                own = frozenset(filter(None, map(_ip, _host_addresses(True, True))))
            except Exception as exc:  # (no interfaces to read: loopback only)
                log.debug("cannot list this host's addresses: %r", exc)
                own = frozenset()
            cls._own = (now, own)
        return own

    def admits(self, connection, addr) -> bool:
        ip = _ip(addr[0])
        if ip not in self.hosts and not (
                self.local and ip in self.own_addresses(self.owner._loop.time())):
            self.owner.stats["ice_checks_dropped"] += 1
            return False
        remote = connection._remote_candidates
        known = any(getattr(c, "_network_host", c.host) == addr[0] and c.port == addr[1]
                    for c in remote)
        if not known and sum(c.type == "prflx" for c in remote) >= self.cap:
            self.owner.stats["ice_checks_dropped"] += 1
            return False
        return True


def _ip(text) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(str(text).split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


MID_MAX = 32  # characters in an SDP's a=mid (browsers and aiortc write "0")


def _screen_sdp(sdp: str, host: str, cap: int) -> tuple[str, int, int]:
    """The SDP with only its ICE candidates on `host` (the address that signaled it), at most
    `cap` of them: (sdp, kept, dropped). Anything else could make us send connectivity checks
    to a third party. ValueError unless it has exactly one media section, m=application (a
    data channel is all potato uses), a DTLS fingerprint (without one aiortc failed an assert
    in a task of its own, logged as an error) and an a=mid of at most MID_MAX characters (our
    answer repeats it twice: 10,904 bytes answered 5,905)."""
    want = _ip(host)
    out, kept, dropped, media, fingerprint = [], 0, 0, 0, False
    for line in sdp.splitlines(keepends=True):
        text = line.rstrip("\r\n")
        if text.startswith("m="):
            media += 1
            if media > 1 or not text.startswith("m=application "):
                raise ValueError("one m=application section only")
        elif text.startswith("a=fingerprint:"):
            fingerprint = True
        elif text.startswith("a=mid:") and len(text) > len("a=mid:") + MID_MAX:
            raise ValueError(f"an a=mid over {MID_MAX} characters")
        elif text.startswith("a=candidate:"):
            fields = text.split()
            if want is None or kept >= cap or len(fields) < 8 or _ip(fields[4]) != want:
                dropped += 1
                continue
            kept += 1
        out.append(line)
    if not media:
        raise ValueError("no m=application section")
    if not fingerprint:
        raise ValueError("no DTLS fingerprint")
    return "".join(out), kept, dropped


class _RtcLink(_Link):
    """One RTCPeerConnection and its "potato" data channel."""

    def __init__(self, owner: "WebRtcTransport", outgoing: bool, pc):
        self.owner, self.outgoing, self.pc = owner, outgoing, pc
        self.channel = None
        self.opened = owner._loop.create_future()  # set when the channel opens
        self.closing: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.ice_guard: _IceGuard | None = None
        self.on_gone: Callable[[], None] | None = None  # called once, when it is shut down
        owner._links.add(self)
        pc.on("connectionstatechange", self._state)
        if outgoing:
            self._attach(pc.createDataChannel(CHANNEL, ordered=True))
        else:
            pc.on("datachannel", self._datachannel)

    def _datachannel(self, channel) -> None:
        if channel.label != CHANNEL or self.channel is not None:
            self.owner.stats["refused_channel"] += 1
            channel.close()
            return
        self._attach(channel)
        if channel.readyState == "open":
            self._open()

    def _attach(self, channel) -> None:
        self.channel = channel
        self._watch(getattr(channel, "transport", None))
        channel.on("open", self._open)
        channel.on("close", lambda: self.owner._drop(self, "lost" if self.is_open else ""))
        channel.on("message", self._message)

    def _watch(self, sctp) -> None:
        """Any SCTP packet from the peer (decrypted by DTLS: it is the peer's) is a sign of
        life, even one aiortc holds back: a lost ping waits for its retransmission (1 s or
        more) before the data channel gives it to us, while later packets keep arriving.
        And a peer with more than REASSEMBLY_MAX bytes or REASSEMBLY_CHUNKS chunks waiting
        in aiortc's reassembly (the fragments of messages not whole yet: aiortc keeps them
        without limit, and scans them all for each chunk that comes; its own sender does not
        heed our receive window), or sending on more than SCTP_STREAMS streams, is dropped
        (`closed_oversize`)."""
        handle = getattr(sctp, "_handle_data", None)
        if handle is None or getattr(sctp, "_potato_watched", False):
            return
        link, loop = self, self.owner._loop
        window = getattr(sctp, "_advertised_rwnd", None)  # (aiortc's: less what it holds)

        async def handle_data(data: bytes) -> None:
            link.last_rx = loop.time()
            await handle(data)
            held = window - getattr(sctp, "_advertised_rwnd", window) if window else 0
            streams = getattr(sctp, "_inbound_streams", {})
            if held > REASSEMBLY_MAX or len(streams) > SCTP_STREAMS or sum(
                    len(getattr(s, "reassembly", ())) for s in streams.values()
            ) > REASSEMBLY_CHUNKS:
                if not link.retired:
                    log.info("%s: %s sent messages that do not end (%d bytes, %d streams): "
                             "dropped", link.owner.name, link.name, held, len(streams))
                    link.owner._drop(link, "oversize")

        sctp._handle_data = handle_data
        sctp._potato_watched = True

    def _open(self) -> None:
        if self.retired or self.is_open:
            return
        self.is_open = True
        if self.timer:
            self.timer.cancel()
        if not self.opened.done():
            self.opened.set_result(True)
        self.owner._opened(self)

    def _state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self.owner._drop(self, f"ice_{self.pc.connectionState}" if not self.retired else "")

    def _message(self, message) -> None:
        if self.retired:
            return
        owner = self.owner
        self.last_rx = owner._loop.time()  # any message, even one dropped: the peer is alive
        data = message.encode() if isinstance(message, str) else message
        self.rx_bytes += len(data)
        if data == PING:  # liveness first: never behind the rate limit
            return
        if len(data) > owner.max_message:
            owner.stats["recv_dropped_oversize"] += 1
            return
        if owner._admit(self, len(data)):
            # No way to push back on an SCTP stream from aiortc: over the rate, dropped.
            owner.stats["recv_dropped_rate"] += 1
            return
        owner._received(self, data)

    def write(self, data: bytes) -> None:
        try:
            self.channel.send(data.decode())
        except UnicodeDecodeError:
            self.channel.send(bytes(data))
        self.last_tx = self.owner._loop.time()

    def buffered(self) -> int:
        return self.channel.bufferedAmount if self.channel is not None else 0

    def shutdown(self) -> None:
        self.retired = True
        self.is_open = False
        if self.timer:
            self.timer.cancel()
        if not self.opened.done():
            self.opened.set_exception(ConnectionError("the peer connection closed"))
            self.opened.exception()
        if self.closing is None:
            self.closing = self.owner._spawn(self._close())
        if self.on_gone is not None:
            gone, self.on_gone = self.on_gone, None
            self.owner._call(gone)

    async def _close(self) -> None:
        try:
            await asyncio.wait_for(self.pc.close(), CLOSE_TIMEOUT)
        except asyncio.TimeoutError:
            self.owner.stats["close_timeouts"] += 1
            log.warning("%s: closing the connection to %s took over %s s", self.owner.name,
                        self.name, CLOSE_TIMEOUT)
        except Exception as exc:
            log.debug("closing the connection to %s: %r", self.name, exc)
        finally:
            self.owner._links.discard(self)

    def open_timeout(self) -> None:
        self.owner.stats["handshake_timeout"] += 1
        self.owner._drop(self, "")


class WebRtcTransport(Transport):
    """Potato over WebRTC data channels (aiortc), signaled over one short TCP exchange."""

    def __init__(self, name: str, host: str, port: int, *, max_candidates: int = 8, **kwargs):
        super().__init__(name, host, port, **kwargs)
        if max_candidates < 1:
            raise ValueError("max_candidates must be at least 1")
        self.max_candidates = max_candidates
        if _wildcard(host):
            self._ice_hosts = None
        else:
            try:
                self._ice_hosts = [str(ipaddress.ip_address(host))]
            except ValueError:
                raise ValueError(f"WebRtcTransport needs a numeric address (or 0.0.0.0), not "
                                 f"{host!r}") from None
        self._rtc = _aiortc()
        self._server: asyncio.AbstractServer | None = None
        self._links: set[_RtcLink] = set()  # every RTCPeerConnection until it is closed
        # incoming signaling connections -> the address they came from (None once it has a
        # link, which counts for that address instead)
        self._answering: dict[asyncio.Task, str | None] = {}

    def _incoming_from(self, host: str | None) -> int:
        return (sum(1 for h in self._answering.values() if h == host)
                + sum(1 for link in self._links
                      if not link.outgoing and not link.retired and link.remote_host == host))

    def _screen(self, sdp: str, host: str) -> str:
        """_screen_sdp, counted; PeerRefused if nothing usable is left."""
        try:
            sdp, kept, dropped = _screen_sdp(sdp, host, self.max_candidates)
        except ValueError:
            self.stats["refused_bad_sdp"] += 1
            raise PeerRefused(f"{host}: the SDP is not one data channel section (with its "
                              "fingerprint and a short mid)", "bad_sdp") from None
        self.stats["ice_candidates_dropped"] += dropped
        return sdp if kept else self._no_candidate(sdp, host)

    def _no_candidate(self, sdp: str, host: str) -> str:
        """An SDP left with no candidate: refused (a node always offers one)."""
        self.stats["refused_no_candidate"] += 1
        raise PeerRefused(f"{host}: no ICE candidate on the address that signaled",
                          "no_candidate")

    async def start(self) -> None:
        """Listen for signaling on TCP host:port (port 0: any; self.port is set)."""
        if self._closed:
            raise RuntimeError("transport closed")
        self._server = await asyncio.start_server(self._answer, self.host, self.port,
                                                  limit=SIGNAL_MAX, backlog=128,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    def _new_pc(self):
        rtc = self._rtc
        return rtc.RTCPeerConnection(rtc.RTCConfiguration(iceServers=[]))

    async def _describe(self, pc, offer: bool) -> str:
        """Our SDP, with every candidate gathered (on our host only, when it is specific)."""
        token = _CANDIDATE_HOSTS.set(self._ice_hosts)
        try:
            await pc.setLocalDescription(await (pc.createOffer() if offer else
                                                pc.createAnswer()))
        finally:
            _CANDIDATE_HOSTS.reset(token)
        sdp = pc.localDescription.sdp
        if "a=candidate:" not in sdp:
            raise OSError(f"no ICE host candidate on {self.host} (aioice leaves 127.0.0.1 and "
                          "::1 out when it chooses)")
        return sdp

    async def connect(self, host: str, port: int) -> str:
        """Offer a connection to the node whose signaling listens at host:port; return its
        name once the data channel is open."""
        if self._closed:
            raise RuntimeError("transport closed")
        deadline = self._loop.time() + self.handshake_timeout
        guard = _IceGuard(self)  # (the peer's address once the signaling connection is open)
        token = _ICE_GUARD.set(guard)
        try:
            link = _RtcLink(self, True, self._new_pc())
        finally:
            _ICE_GUARD.reset(token)
        link.ice_guard = guard
        self._handshakes.add(link)
        try:
            try:
                reply, signaled = await asyncio.wait_for(self._signal(link, host, port),
                                                         self.handshake_timeout)
            except asyncio.TimeoutError:
                self.stats["handshake_timeout"] += 1
                raise TimeoutError(f"no signaling answer from {host}:{port} within "
                                   f"{self.handshake_timeout} s") from None
            except (ConnectionError, OSError) as exc:
                raise OSError(getattr(exc, "errno", None),
                              f"cannot signal to {host}:{port}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
            name, refused = reply.get("hello"), reply.get("refused")
            if refused is not None:
                self.stats["refused_by_peer"] += 1
                if refused == "crossed" and name in self._peers:
                    return await self._await_open(self._peers[name], deadline, host, port)
                if refused == WRONG_TRANSPORT:
                    raise PeerRefused(f"{host}:{port} ({str(name)[:NAME_MAX]!r}) speaks TCP, not "
                                      "WebRTC: both ends need the same transport",
                                      "refused_by_peer", name)
                raise PeerRefused(f"{host}:{port} ({str(name)[:NAME_MAX]!r}) refused us: "
                                  f"{str(refused)[:100]}", "refused_by_peer", name)
            link.remote_host = host
            reason = self._decide(name, outgoing=True, host=host)
            if reason == "crossed":
                self.stats["refused_crossed"] += 1
                return await self._await_open(self._peers[name], deadline, host, port)
            if reason not in ("", "swap"):
                self.stats[f"refused_{reason}"] += 1
                raise PeerRefused(f"refused {host}:{port} claiming {name!r}: {reason}", reason,
                                  name)
            answer = reply.get("answer")
            if not isinstance(answer, str):
                self.stats["refused_bad_hello"] += 1
                raise PeerRefused(f"{host}:{port} sent no answer", "bad_hello")
            answer = self._screen(answer, signaled)
            self._handshakes.discard(link)
            self._claim(link, name, swap=reason == "swap")
            await link.pc.setRemoteDescription(self._rtc.RTCSessionDescription(answer,
                                                                                 "answer"))
            return await self._await_open(link, deadline, host, port)
        finally:
            self._handshakes.discard(link)
            if not link.is_open:
                self._drop(link, "")

    async def _await_open(self, link: _RtcLink, deadline: float, host: str, port: int) -> str:
        try:
            await asyncio.wait_for(asyncio.shield(link.opened), self._remaining(deadline))
        except asyncio.TimeoutError:
            self.stats["handshake_timeout"] += 1
            raise TimeoutError(f"the data channel to {host}:{port} did not open within "
                               f"{self.handshake_timeout} s") from None
        except ConnectionError as exc:
            raise ConnectionError(f"the connection to {host}:{port} closed while opening: "
                                  f"{exc}") from None
        return link.name

    async def _signal(self, link: _RtcLink, host: str, port: int) -> dict:
        offer = await self._describe(link.pc, offer=True)
        local = None if _wildcard(self.host) else (self.host, 0)
        reader, writer = await asyncio.open_connection(host, port, limit=SIGNAL_MAX,
                                                       local_addr=local)
        peer = writer.get_extra_info("peername")
        link.ice_guard.allow(peer[0] if peer else host)
        try:
            writer.write(json.dumps({"hello": self.name, "offer": offer}).encode() + b"\n")
            line = await reader.readline()
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
        try:
            reply = json.loads(line)
            if not isinstance(reply, dict) or "hello" not in reply:
                raise ValueError
        except ValueError:
            self.stats["refused_bad_hello"] += 1
            raise PeerRefused(f"{host}:{port} answered no hello: {line[:80]!r}",
                              "bad_hello") from None
        return reply, (peer[0] if peer else host)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One incoming signaling connection: an offer in, an answer (or a refusal) out."""
        task = asyncio.current_task()
        peer = writer.get_extra_info("peername")
        source = peer[0] if peer else None

        def reply(obj):
            writer.write(json.dumps({"hello": self.name, **obj}).encode() + b"\n")

        self._answering[task] = None
        try:
            if not self._closed and self._incoming_from(source) >= self.max_per_host:
                self.stats["refused_per_host"] += 1  # closed without a byte
                return
            self._answering[task] = source
            if self._closed or len(self._handshakes) >= self.max_peers:
                self.stats["refused_busy"] += 1
                return
            marker = object()
            self._handshakes.add(marker)
            try:
                line = await asyncio.wait_for(reader.readline(), self.hello_timeout)
                hello = json.loads(line)
                name = hello["hello"]
                if not isinstance(name, str):
                    raise TypeError
                if "offer" not in hello and "refused" not in hello:  # a TCP node's hello
                    self.stats[f"refused_{WRONG_TRANSPORT}"] += 1
                    reply({"refused": WRONG_TRANSPORT})
                    return
                offer = hello["offer"]
                if not isinstance(offer, str):
                    raise TypeError
            except asyncio.TimeoutError:
                self.stats["handshake_timeout"] += 1
                return
            except (ValueError, TypeError, KeyError, OSError, RecursionError):
                self.stats["refused_bad_hello"] += 1
                return
            finally:
                self._handshakes.discard(marker)
            self._answering[task] = None  # a link, if any, counts for `source` from now on
            reply(await self._offered(name, offer, source))
        finally:
            self._answering.pop(task, None)
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            except (OSError, asyncio.TimeoutError, asyncio.CancelledError):
                pass

    async def _offered(self, name: str, offer: str, source: str | None) -> dict:
        """An offer from `name` (signaled from `source`): {"answer": SDP}, or {"refused": why}."""
        reason = self._decide(name, outgoing=False, host=source)
        if reason not in ("", "swap"):
            self.stats[f"refused_{reason}"] += 1
            return {"refused": reason}
        try:
            offer = self._screen(offer, source)
        except PeerRefused as exc:
            return {"refused": exc.reason}
        link = _RtcLink(self, False, self._new_pc())
        link.remote_host = source
        try:
            self._claim(link, name, swap=reason == "swap")
            link.timer = self._loop.call_later(self.handshake_timeout, link.open_timeout)
            # (an offer without candidates makes aiortc gather here, at end-of-candidates:
            # on our host only, as in _describe)
            token = _CANDIDATE_HOSTS.set(self._ice_hosts)
            guard = _ICE_GUARD.set(_IceGuard(self, source))  # (aiortc makes its ICE here)
            try:
                await link.pc.setRemoteDescription(self._rtc.RTCSessionDescription(offer,
                                                                                     "offer"))
            finally:
                _ICE_GUARD.reset(guard)
                _CANDIDATE_HOSTS.reset(token)
            answer = await self._describe(link.pc, offer=False)
            if link.retired:  # replaced or closed meanwhile
                return {"refused": "crossed" if self._peers.get(name) else "closing"}
            return {"answer": answer}
        except asyncio.CancelledError:
            self._drop(link, "")
            raise
        except Exception as exc:
            if link.retired and self._peers.get(link.name):
                return {"refused": "crossed"}  # replaced while we answered
            self.stats["signaling_errors"] += 1
            log.info("%s: signaling with %s failed: %r", self.name, link.name, exc)
            self._drop(link, "")
            return {"refused": "error"}

    async def _close_links(self) -> None:
        # (the listening socket is the signaling one: answers under way are cancelled)
        for task in list(self._answering):
            task.cancel()
        while self._answering or self._tasks:
            await asyncio.gather(*self._answering, *self._tasks, return_exceptions=True)


class BrowserTransport(WebRtcTransport):
    """Potato over WebRTC data channels with pages: the same links as WebRtcTransport, signaled
    over the page's WebSocket (pelotari.potato.page) instead of a TCP exchange.

    A browser hides its addresses behind mDNS names (`<uuid>.local`), which are dropped with
    every candidate not on the signaling address (we never resolve names on the LAN); an offer
    left with none is still answered: the browser, the controlling side, sends its checks to
    our candidate, and ICE learns its address from them (a peer-reflexive candidate); only
    checks from the signaling address are answered (_IceGuard), so our checks never go to a
    third party that a spoofed check named. Pings
    and `dead_after` are those of the other transports, but a hidden tab's timers run at most
    once a second, so `dead_after` defaults to 3 s here."""

    def __init__(self, name: str, host: str, *, dead_after: float = 3.0,
                 ping_interval: float = 0.5, **kwargs):
        super().__init__(name, host, 0, dead_after=dead_after, ping_interval=ping_interval,
                         **kwargs)

    async def start(self) -> None:
        """Nothing to listen on: offers come from the page server."""
        if self._closed:
            raise RuntimeError("transport closed")

    async def connect(self, host: str, port: int) -> str:
        raise NotImplementedError("pages connect to us, over their WebSocket")

    def _no_candidate(self, sdp: str, host: str) -> str:
        # A browser's candidates are mDNS names, all dropped. No end of candidates then:
        # aioice would fail at once with nothing to pair, and the page's checks, which bring
        # its address, come after our answer.
        return "".join(line for line in sdp.splitlines(keepends=True)
                       if line.rstrip("\r\n") != "a=end-of-candidates")

    def incoming_from(self, host: str | None) -> int:
        """Links (opening or open) with pages at `host`."""
        return self._incoming_from(host)

    def give_up(self, name: str) -> bool:
        """Drop the page link of that name (the node connected to a peer of that name): True
        if there was one (`closed_evicted`)."""
        link = self._peers.get(name)
        if link is None or link.outgoing:
            return False
        self._drop(link, "evicted")
        return True

    async def answer(self, name, offer, source: str,
                     on_gone: Callable[[], None] | None = None
                     ) -> tuple[dict, Callable[[], None] | None]:
        """A page's offer: ({"answer": SDP}, hang_up) or ({"refused": why}, None) (counted).
        A link goes with its page's signaling (pelotari.potato.page): hang_up() ends it (when
        the WebSocket closes), and on_gone() is called when it ends (closed, silent, or not
        open within handshake_timeout), so that the WebSocket closes with it."""
        if not isinstance(offer, str) or len(offer) > SIGNAL_MAX:
            self.stats["refused_bad_hello"] += 1
            return {"refused": "bad_hello"}, None
        if self._closed or len(self._handshakes) >= self.max_peers:
            self.stats["refused_busy"] += 1
            return {"refused": "busy"}, None
        marker = object()
        self._handshakes.add(marker)
        try:
            reply = await self._offered(name, offer, source)
        finally:
            self._handshakes.discard(marker)
        link = self._peers.get(name)
        if "answer" not in reply or not isinstance(link, _RtcLink) or link.retired:
            return reply, None
        link.on_gone = on_gone
        return reply, lambda: self._drop(link, "signaling")
