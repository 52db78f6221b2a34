"""asyncio adapter for the swarm core (pelotari.swarm.core.SwarmNode): one UDP socket, the
core's timer, its datagrams and its events.

    node = await Node.start("127.0.0.1", 21452, Keyring.from_file("swarm.key"))
    node.connect(("127.0.0.2", 21452))
    while (ev := await node.next_event(timeout=1.0)) is not None: ...
    await node.close()

How it drives the core (aioquic's asyncio/protocol.py shape):

* `now` is the event loop's monotonic clock (loop.time()), never going back between calls; the
  MAC's wall clock is time.time(), given to the core as `wall_offset` before every call, so a
  stepped system clock is followed at once.
* The timer is re-armed only when the core's get_timer() changes (one TimerHandle at a time).
* The socket is non-blocking and read directly (loop.add_reader): up to READ_BATCH datagrams per
  wake-up, each read into max_datagram + 1 bytes (so a datagram past the limit is told from one
  at it), then one flush: datagrams out, events queued, timer re-armed.
* With the Cython build and an IPv4 socket, the socket is read by recvmmsg batches through
  fastpath.swarmpath.PingPath: Pings from established connections are verified, answered and
  the Pongs sent by sendmmsg in C (the core's rules, its budget carried in and out); every
  other datagram goes to the core in arrival order. `fast_path=False` reads with recvfrom.
* Sends never block and never queue: a full socket send buffer drops the datagram (UDP loses it
  on the wire as well), counted in `send_dropped`.
* Socket errors are counted (`send_errors`, `receive_errors`) and each kind (direction and errno)
  is reported once, as a NodeWarning event and a log warning.
* Events wait in a bounded queue (`max_events`); when the consumer falls behind, new events are
  dropped and counted (`events_dropped`), so a slow consumer costs memory up to that bound only.
"""
import asyncio
import logging
import socket
import time
from collections import Counter
from typing import List, Optional

from pelotari.adapter import MAX_EVENTS, READ_BATCH, DatagramNode, NodeWarning
from pelotari.swarm import wire
from pelotari.swarm.core import Address, Config, ConnectionInfo, SwarmNode

log = logging.getLogger("pelotari.swarm")

FAST_ROUNDS = 16  # recvmmsg batches of READ_BATCH per wake-up on the C path
PING_TIMEOUT = 2.0  # s: ping()'s future gives None when no Pong came by then
PING_SIZE = wire.PREFIX_SIZE + wire.body_size(wire.TYPES["Ping"])  # 44 (swarmpath.PING_SIZE)
RECEIVE_BUFFER = 4 << 20  # SO_RCVBUF asked for (the kernel caps it at net.core.rmem_max)


def _address(address) -> Address:
    return (str(address[0]), int(address[1]))


def fast_path_available() -> bool:
    """Whether the C datagram path can run: the Cython table, MACs and path are built and
    PELOTARI_PURE_PYTHON is not set."""
    from fastpath.implementation import compiled
    from pelotari.swarm import table
    if wire.IMPLEMENTATION != "cython" or table.IMPLEMENTATION != "cython":
        return False
    return compiled("swarmpath") is not None


def _ping_path(config: Config):
    from fastpath.swarmpath import PingPath
    return PingPath(capacity=READ_BATCH, max_datagram=config.limits.max_datagram,
                    vague_pongs_per_slot=config.vague_pongs_per_slot,
                    ping_burst=config.ping_burst, refill_ms=int(round(config.ping_refill * 1000)))


class Node(DatagramNode):
    """A running swarm node. Use `await Node.start(...)`; then connect(), ping(), send(),
    connections(), next_event() or events() (Connected, Promoted, Demoted, Reset,
    ConnectionsLearned, UserMessage, Forgotten, Unanswered: pelotari.swarm.core; and
    NodeWarning), stats; and `await close()`."""

    def __init__(self, sock: socket.socket, keyring: wire.Keyring,
                 config: Optional[Config] = None, max_events: int = MAX_EVENTS,
                 fast_path: Optional[bool] = None):
        loop = asyncio.get_running_loop()
        bound = sock.getsockname()
        self.address: Address = (bound[0], bound[1])
        self._last = loop.time()
        self.core = SwarmNode(self.address, keyring, self._last, config,
                              wall_offset=time.time() - self._last)
        self._own: Counter = Counter()  # the adapter's counters (the core keeps its own)
        self._pings: List[list] = []  # see ping()
        # (a Ping is 44 bytes: with a lower max_datagram every one is too long, the core's)
        can = (sock.family == socket.AF_INET and fast_path_available()
               and self.core.config.limits.max_datagram >= PING_SIZE)
        if fast_path is None:
            fast_path = can
        elif fast_path and not can:
            raise ValueError("the C datagram path needs the Cython build, an IPv4 socket and "
                             f"max_datagram >= {PING_SIZE}")
        self._fast = _ping_path(self.core.config) if fast_path else None
        # (max_datagram + 1 bytes read: a datagram past the limit is told from one at it)
        self._attach(loop, [sock], self._own, log, self.core.config.limits.max_datagram + 1,
                     max_events=max_events,
                     readers=[self._readable_fast] if fast_path else None)
        self._process_events(self._last)

    @classmethod
    async def start(cls, host: str, port: int, keyring: wire.Keyring,
                    config: Optional[Config] = None, *, max_events: int = MAX_EVENTS,
                    fast_path: Optional[bool] = None) -> "Node":
        """Bind a UDP socket to (host, port) — port 0 takes a free one, see `address` — and run
        the node on the running loop. OSError if the address cannot be bound.

        Bind a specific address: the core knows itself by it, and leaves it out of what it
        learns; with a wildcard address (0.0.0.0) it cannot tell its own address in a peer's
        Connections from another node's.

        fast_path: None runs the C datagram path where it can (Cython build, IPv4), False
        never, True or ValueError."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            except OSError:
                pass
            sock.bind((host, port))
            return cls(sock, keyring, config, max_events, fast_path)
        except BaseException:
            sock.close()
            raise

    # ---- clock ---------------------------------------------------------------------------------

    def _live(self) -> float:
        """_now() for a command; RuntimeError once closed."""
        if self._closed:
            raise RuntimeError("the node is closed")
        return self._now()

    def _now(self) -> float:
        """The loop's monotonic time, never earlier than the last one given to the core; and the
        core's wall clock set from time.time() for it."""
        now = self._loop.time()
        if now < self._last:
            now = self._last
        self._last = now
        self.core.wall_offset = time.time() - now
        return now

    # ---- the socket ----------------------------------------------------------------------------

    def _readable_fast(self, sock: socket.socket) -> None:
        fp = self._fast
        core = self.core
        fd = self._sock.fileno()
        now = self._now()
        ms = core.advance(now)
        table = core.table
        macs = core.keyring.macset(now + core.wall_offset)
        for _ in range(FAST_ROUNDS):
            try:
                n = fp.receive(fd)
            except OSError as exc:  # an ICMP error for an earlier send (ECONNREFUSED...)
                self._trouble.socket_error("receive", exc)
                continue
            if not n:
                break
            fp.ms = ms
            fp.mark = core.slot_mark
            fp.vague_pongs = core.vague_pongs
            i = fp.run(table, macs, 0)
            while i < n:  # the core's datagram, in arrival order; the budget carried over
                core.vague_pongs = fp.vague_pongs
                data, source = fp.take(i)
                self._receive(data, source, now)
                fp.vague_pongs = core.vague_pongs
                i = fp.run(table, macs, i + 1)
            core.vague_pongs = fp.vague_pongs
            fp.flush(fd)
            if fp.send_dropped or fp.send_errors:
                self._trouble.warn_once("send Pong", "cannot send Pongs: the socket's send buffer is "
                                "full or the send was refused (counted in send_dropped and "
                                "send_errors; not reported again)")
            if n < fp.capacity:
                break
        self._process_events(now)

    def _receive(self, data: bytes, source: Address, now: float) -> None:
        """core.receive_datagram; a bug in the core costs that one datagram: counted in
        `internal_errors`, each exception type reported once (a NodeWarning, and a log warning
        with the traceback), never raised out of the socket's callback, where it would drop the
        rest of a batch already read and leave its Pongs unsent."""
        try:
            self.core.receive_datagram(data, source, now)
        except Exception as exc:  # noqa: BLE001 (any bug: the node goes on)
            self._own["internal_errors"] += 1
            kind = f"internal {type(exc).__name__}"
            if kind not in self._trouble.reported:
                self._trouble.warn_once(
                    kind, f"a datagram from {source[0]}:{source[1]} failed in the swarm core "
                    f"({type(exc).__name__}: {exc}); dropped (counted in internal_errors; "
                    f"further {type(exc).__name__} failures are not reported)", exc_info=True)

    def _process_events(self, now: float) -> None:
        """DatagramNode's (send, events, timer), and ping() futures settled."""
        super()._process_events(now)
        if self._pings:
            self._check_pings(now)

    def _on_timer(self, when: float) -> None:
        now = self._now()
        if when > now:  # the loop woke a hair early: take the due time
            now = self._last = when
            self.core.wall_offset = time.time() - now
        self.core.handle_timer(now)
        self._process_events(now)

    # ---- commands ------------------------------------------------------------------------------

    def connect(self, address: Address) -> None:
        """Dial address and keep it as a direct connection (redialled until it answers).
        ValueError for our own address."""
        now = self._live()
        self.core.connect(_address(address), now)
        self._process_events(now)

    def ping(self, address: Address, timeout: float = PING_TIMEOUT) -> "asyncio.Future":
        """Ping an established connection now (KeyError otherwise). The future gives the round
        trip in seconds when its Pong (or a later one) has counted, or None after timeout.

        A peer answers one request per connection per slot: a Ping that follows one of the
        node's own too closely goes unanswered, so it is sent again each slot (+10 %) until
        answered or timed out. The round trip is that of the Pong that counted: this call's
        last Ping's (measured by the loop's clock), or, when the Pong to one of the core's own
        later Pings counted first, that one's (the core's, in whole ms)."""
        address = _address(address)
        now = self._live()
        self.core.ping(address, now)
        fut = self._loop.create_future()
        mark = self._ping_marks(address)[0]
        # [address, first mark, last sent at, future, timeout handle, last mark]
        entry = [address, mark, now, fut, None, mark]
        entry[4] = self._loop.call_later(timeout, self._ping_timeout, entry)
        self._pings.append(entry)
        self._loop.call_later(self.core.config.slot * 1.1, self._ping_again, entry)
        self._process_events(now)
        return fut

    def _ping_again(self, entry: list) -> None:
        if entry not in self._pings or entry[3].done() or self._closed:
            return
        now = self._now()
        try:
            self.core.ping(entry[0], now)
        except KeyError:  # the connection is gone: the timeout will tell
            return
        entry[2] = now
        entry[5] = self._ping_marks(entry[0])[0]
        self._loop.call_later(self.core.config.slot * 1.1, self._ping_again, entry)
        self._process_events(now)

    def _ping_marks(self, address: Address):
        """When our last Ping to address went (the core's table ms) and whether its Pong
        counted; (None, False) without a record."""
        return self.core.last_ping(address) or (None, False)

    def _check_pings(self, now: float) -> None:
        left = []
        for entry in self._pings:
            address, mark, sent, fut, handle, last = entry
            pinged, answered = self._ping_marks(address)
            if fut.done():
                handle.cancel()
            elif mark is not None and pinged is not None and answered and pinged >= mark:
                handle.cancel()  # our Ping's Pong, or a later one's, counted
                if pinged == last:
                    fut.set_result(now - sent)
                else:  # the Pong to a routine Ping sent after ours: its round trip, not ours
                    t = self.core.table
                    fut.set_result(t.rtt[t.lookup(address)] / 1000)
            else:
                left.append(entry)
        self._pings = left

    def _ping_timeout(self, entry: list) -> None:
        if entry in self._pings:
            self._pings.remove(entry)
        if not entry[3].done():
            entry[3].set_result(None)

    def send(self, address: Address, type_: int, data: bytes, flags: int = 0) -> None:
        """A user-defined datagram (type 6..65535, at most 988 bytes of data) to an established
        connection: KeyError if there is none, ValueError for a bad type or size."""
        now = self._live()
        self.core.send(_address(address), type_, bytes(data), now, flags)
        self._process_events(now)

    def connections(self) -> List[ConnectionInfo]:
        """Every connection in the table: address, status (direct, vague, connecting,
        half_open), rtt, missed."""
        return self.core.connections()

    def direct(self) -> List[Address]:
        return self.core.direct()

    def known(self) -> List[Address]:
        """Peers heard of in Connections and not contacted yet."""
        return self.core.known()

    @property
    def stats(self) -> Counter:
        """The core's counters (docs/protocols/swarm.md, "Events") and the adapter's:
        send_errors, receive_errors, send_dropped, events_dropped, internal_errors (the C
        path's counted in with the same names)."""
        out = Counter(self.core.stats)
        out.update(self._own)
        if self._fast is not None:
            out.update({k: v for k, v in self._fast.counters().items() if v})
        return out

    @property
    def fast_path(self) -> bool:
        """Whether the C datagram path reads the socket."""
        return self._fast is not None

    async def close(self) -> None:
        """Stop reading, cancel the timer and the pings (their futures give None), close the
        socket; next_event() gives None and events() ends from now on. Peers notice by their
        unanswered Pings."""
        for _, _, _, fut, handle, _ in self._pings:
            handle.cancel()
            if not fut.done():
                fut.set_result(None)
        self._pings = []
        await super().close()


__all__ = ["MAX_EVENTS", "READ_BATCH", "Node", "NodeWarning", "fast_path_available"]
