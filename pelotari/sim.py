"""A deterministic discrete-event network for sans-IO protocol cores (shape: iroh-gossip's
proto/sim.rs): nodes, links with delay, jitter, loss and asymmetry, partitions, crashes and a
seeded RNG, so elections, heartbeats and repair are tested without sleeping and large meshes are
measured in milliseconds.

A node is any core with the interface pelotari's cores share:

    receive_datagram(data, source_address, now)   handle_timer(now)   get_timer() -> float
    datagrams_to_send() -> [(data, destination_address)]   next_event() -> event or None

Nodes are known by their address, (host, port). A datagram to the simulator's broadcast host
reaches every other node listening on that port (as `255.255.255.255` or a LAN's `x.y.z.255`
would). Streams (`reliable=True` links) deliver in order and never lose: TCP's view.

A core may speak TCP connections (the bully core's interface), instead or as well:

    accept(remote, now, local) -> conn | None    connection_made(conn, local, now)
    data_received(conn, data, now)        connection_lost(conn, now)
    actions() -> [Connect(conn, address) | Send(conn, data) | Shutdown(conn) | Close(conn)]
    eof_received(conn, now) -> keep (optional: a half-close; without it, or False, the other
    end closes too)

A node may be reached at more than its address (`add(..., also=[other addresses])`: a cluster
member has a datagram port and a bully port): connections to those come to the same core,
with `local` naming the address connected to.

A connect takes one link delay there and one back; bytes on a connection arrive in order; a
close reaches the other end after the bytes sent before it. kill() ends a process as a kernel
does: the other ends of its connections see it closed (EOF), what they write to it afterwards
is answered with a reset (connection_lost(conn, now, reset=True)), and connects to it are
refused; crash() silences a machine (nothing answers; only the cores' timeouts notice), as
does a partition.
"""
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Address = tuple[str, int]


@dataclass
class LinkSpec:
    """How datagrams travel from one node to another."""

    delay: float = 0.001  # seconds, one way
    jitter: float = 0.0  # uniform extra delay in [0, jitter)
    loss: float = 0.0  # probability a datagram is dropped
    reliable: bool = False  # a stream: in order, never lost (loss is ignored)


@dataclass
class Stats:
    """What crossed the network."""

    sent: int = 0
    delivered: int = 0
    bytes_sent: int = 0
    lost: int = 0  # dropped by a link's loss
    cut: int = 0  # dropped by a partition or a crashed node
    unknown: int = 0  # to an address no node has
    connects: int = 0
    refused: int = 0
    segments: int = 0  # writes on connections


@dataclass
class SimNode:
    """A core at an address, with the events it produced (time, event)."""

    address: Address
    core: Any
    listens: set[int] = field(default_factory=set)  # extra ports it hears broadcasts on
    crashed: bool = False
    killed: bool = False  # the process is gone but the host answers: connects are refused
    events: list[tuple[float, Any]] = field(default_factory=list)

    @property
    def streams(self) -> bool:
        return hasattr(self.core, "actions")

    @property
    def datagrams(self) -> bool:
        return hasattr(self.core, "datagrams_to_send")


class Simulator:
    """The network and the clock. Deterministic for a given seed and sequence of calls."""

    def __init__(self, seed: int = 0, default: LinkSpec | None = None,
                 broadcast_host: str = "255.255.255.255", keep_events: bool = True):
        self.now = 0.0
        self.keep_events = keep_events  # False: events are taken from the cores and dropped
        self.rng = random.Random(seed)
        self.default = default or LinkSpec()
        self.broadcast_host = broadcast_host
        self.nodes: dict[Address, SimNode] = {}
        self._also: dict[Address, Address] = {}  # another address of a node -> its address
        self.links: dict[tuple[str, str], LinkSpec] = {}
        self.stats = Stats()
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._groups: list[set[str]] | None = None
        self._stream_clock: dict[tuple[str, str], float] = {}
        self._timers: dict[Address, float] = {}
        # Connections: (node, conn) <-> (node, conn), and the last arrival time per direction.
        self._pairs: dict[tuple[Address, int], tuple[Address, int]] = {}
        self._closed: set[tuple[Address, int]] = set()
        self._dead_ends: set[tuple[Address, int]] = set()  # connections to a killed process
        self._ephemeral = itertools.count(40000)

    # ---- building ---------------------------------------------------------------------------

    def add(self, address: Address, make_core: Callable[[float], Any],
            listens: tuple[int, ...] = (), also: tuple[Address, ...] = ()) -> SimNode:
        """Add a node: make_core(now) builds its core; it also hears broadcasts to `listens`,
        and connections to the addresses `also` reach it too."""
        node = SimNode(address, make_core(self.now), set(listens))
        self.nodes[address] = node
        for a in also:
            self._also[(a[0], int(a[1]))] = address
        self._pump(node)
        return node

    def link(self, a: str, b: str, spec: LinkSpec, both_ways: bool = True) -> None:
        """Datagrams from host a to host b travel by spec (and back, unless both_ways=False:
        give the other direction its own spec for an asymmetric link)."""
        self.links[(a, b)] = spec
        if both_ways:
            self.links[(b, a)] = spec

    def partition(self, *groups) -> None:
        """Only hosts in the same group reach each other until heal()."""
        self._groups = [set(g) for g in groups]

    def heal(self) -> None:
        """Every host reaches every other again."""
        self._groups = None

    def crash(self, address: Address) -> None:
        """The node stops: it sends, receives and times nothing until restart()."""
        self.nodes[address].crashed = True

    def kill(self, address: Address) -> None:
        """The node's process dies: like crash(), but its host resets its connections and
        refuses new ones (what killing a real process does)."""
        node = self.nodes[address]
        node.crashed = node.killed = True
        for (a, conn), (b, other) in list(self._pairs.items()):
            if a == address:
                if self._pairs.pop((a, conn), None) is None:
                    continue  # (its other end, on this node too: connected to itself)
                self._pairs.pop((b, other), None)
                self._dead_ends.add((b, other))
                self._later(address, b, lambda b=b, o=other: self._lost(b, o))

    def restart(self, address: Address, make_core: Callable[[float], Any]) -> None:
        """The node comes back with a new core (its state is gone, as after a real crash)."""
        node = self.nodes[address]
        node.crashed = node.killed = False
        for key in [k for k in self._pairs if k[0] == address]:
            other = self._pairs.pop(key, None)  # (gone already: connected to itself)
            if other is not None:
                self._pairs.pop(other, None)
        # The new core numbers its connections afresh: forget the old one's.
        self._closed = {k for k in self._closed if k[0] != address}
        self._stream_clock = {k: v for k, v in self._stream_clock.items() if k[0] != address}
        node.core = make_core(self.now)
        self._pump(node)

    # ---- running ----------------------------------------------------------------------------

    def call_at(self, when: float, fn: Callable[[], None]) -> None:
        """Run fn at simulated time `when`."""
        heapq.heappush(self._queue, (max(when, self.now), next(self._seq), fn))

    def run(self, until: float) -> None:
        """Process everything due up to `until` seconds, then stop the clock there."""
        while self._queue and self._queue[0][0] <= until:
            when, _, fn = heapq.heappop(self._queue)
            self.now = when
            fn()
        self.now = max(self.now, until)

    def run_until(self, predicate: Callable[[], bool], limit: float) -> bool:
        """Run until predicate() holds (checked after every step) or `limit`; whether it held."""
        while self._queue and self._queue[0][0] <= limit:
            if predicate():
                return True
            when, _, fn = heapq.heappop(self._queue)
            self.now = when
            fn()
        return predicate()

    def do(self, address: Address, fn: Callable[[Any, float], Any]) -> Any:
        """Call fn(core, now) from outside (a user's command), then send what it queued."""
        node = self.nodes[address]
        result = fn(node.core, self.now)
        self._pump(node)
        return result

    def events(self, address: Address, kind: type | None = None) -> list[Any]:
        """Events a node produced, optionally of one type."""
        return [e for _, e in self.nodes[address].events if kind is None or isinstance(e, kind)]

    # ---- plumbing ---------------------------------------------------------------------------

    def _reachable(self, a: str, b: str) -> bool:
        return self._groups is None or any(a in g and b in g for g in self._groups)

    def _pump(self, node: SimNode, fired: bool = False) -> None:
        """Collect what a core wants sent and its events, and (re)arm its timer (fired: right
        after handle_timer(), which must have moved it past now)."""
        if node.crashed:
            return
        core = node.core
        if node.streams:
            for action in core.actions():
                self._stream_action(node, action)
        if node.datagrams:
            for data, dst in core.datagrams_to_send():
                self._send(node.address, (dst[0], int(dst[1])), bytes(data))
        while (ev := core.next_event()) is not None:
            if self.keep_events:
                node.events.append((self.now, ev))
        when = core.get_timer()
        if fired and when is not None and when <= self.now:
            # A core whose timer stays due after handle_timer() would spin a real event loop
            # (until the clock moves) and this one for ever: that is the core's bug.
            raise RuntimeError(f"{node.address}: get_timer() is still due after "
                               f"handle_timer({self.now!r})")
        if when is not None and self._timers.get(node.address) != when:
            self._timers[node.address] = when
            self.call_at(when, lambda n=node, w=when: self._fire(n, w))

    def _fire(self, node: SimNode, when: float) -> None:
        if node.crashed or self._timers.get(node.address) != when:
            return  # stale: the timer moved
        del self._timers[node.address]
        due = node.core.get_timer()
        if due is not None and due <= self.now:
            node.core.handle_timer(self.now)
            self._pump(node, fired=True)
        else:
            self._pump(node)

    def _send(self, src: Address, dst: Address, data: bytes) -> None:
        self.stats.sent += 1
        self.stats.bytes_sent += len(data)
        if dst[0] == self.broadcast_host:
            targets = [n for n in self.nodes.values()
                       if n.address != src and (dst[1] == n.address[1] or dst[1] in n.listens)]
        else:
            target = self.nodes.get(dst)
            if target is None:
                self.stats.unknown += 1
                return
            targets = [target]
        links = self.links
        for t in targets:
            spec = links.get((src[0], t.address[0]), self.default) if links else self.default
            if not spec.reliable and spec.loss and self.rng.random() < spec.loss:
                self.stats.lost += 1
                continue
            arrive = self.now + spec.delay + (self.rng.random() * spec.jitter if spec.jitter else 0)
            if spec.reliable:  # a stream never reorders
                key = (src[0], t.address[0])
                arrive = max(arrive, self._stream_clock.get(key, 0.0))
                self._stream_clock[key] = arrive
            self.call_at(arrive, lambda t=t, d=data: self._deliver(src, t, d))

    def _deliver(self, src: Address, node: SimNode, data: bytes) -> None:
        if node.crashed or (self._groups is not None
                            and not self._reachable(src[0], node.address[0])):
            self.stats.cut += 1
            return
        self.stats.delivered += 1
        node.core.receive_datagram(data, src, self.now)
        self._pump(node)

    # ---- connections ------------------------------------------------------------------------

    def _spec(self, a: str, b: str) -> LinkSpec:
        return self.links.get((a, b), self.default)

    def _delay(self, a: str, b: str) -> float:
        spec = self._spec(a, b)
        return spec.delay + (self.rng.random() * spec.jitter if spec.jitter else 0.0)

    def _later(self, src: Address, dst: Address, fn: Callable[[], None],
               ordered: tuple | None = None) -> None:
        arrive = self.now + self._delay(src[0], dst[0])
        if ordered is not None:  # bytes on a connection never overtake each other
            arrive = max(arrive, self._stream_clock.get(ordered, 0.0))
            self._stream_clock[ordered] = arrive
        self.call_at(arrive, fn)

    def _alive(self, address: Address) -> SimNode | None:
        node = self.nodes.get(address)
        return node if node is not None and not node.crashed else None

    def _stream_action(self, node: SimNode, action: Any) -> None:
        kind = type(action).__name__
        key = (node.address, action.conn)
        if kind == "Connect":
            self.stats.connects += 1
            self._later(node.address, action.address,
                        lambda: self._syn(node.address, action.conn, tuple(action.address)))
        elif kind == "Send":
            self.stats.sent += 1
            self.stats.segments += 1
            self.stats.bytes_sent += len(action.data)
            other = self._pairs.get(key)
            if other is not None:
                data = bytes(action.data)
                self._later(node.address, other[0],
                            lambda: self._segment(node.address, other, data), ordered=key)
            elif key in self._dead_ends:  # written to a killed process: its kernel resets
                self._dead_ends.discard(key)
                self.call_at(self.now + 2 * self.default.delay,
                             lambda: self._lost(node.address, action.conn, reset=True))
        elif kind == "Shutdown":
            other = self._pairs.get(key)
            if other is not None:
                self._later(node.address, other[0], lambda: self._eof(key, other), ordered=key)
        elif kind == "Continue":  # messages left unread: handled next, before more arrive
            self.call_at(self.now, lambda: self._segment(
                self._pairs.get(key, (node.address, 0))[0], key, b""))
        elif kind == "Close":
            self._closed.add(key)
            self._dead_ends.discard(key)
            other = self._pairs.pop(key, None)
            if other is not None:
                self._pairs.pop(other, None)
                self._later(node.address, other[0], lambda: self._lost(*other), ordered=key)
        else:
            raise TypeError(f"unknown action {action!r}")

    def _syn(self, src: Address, conn: int, dst: Address) -> None:
        local = dst
        dst = self._also.get(dst, dst)
        target = self.nodes.get(dst)
        if not self._reachable(src[0], dst[0]) or (
                target is not None and target.crashed and not target.killed):
            self.stats.cut += 1
            return  # silence: the connect times out
        if target is None or target.killed or not target.streams:
            self.stats.refused += 1
            self._later(dst, src, lambda: self._lost(src, conn))  # RST: refused
            return
        remote = (src[0], next(self._ephemeral))
        theirs = target.core.accept(remote, self.now, local)
        self._pump(target)
        if theirs is None:
            self.stats.refused += 1
            self._later(dst, src, lambda: self._lost(src, conn))
            return
        self._pairs[(src, conn)] = (dst, theirs)
        self._pairs[(dst, theirs)] = (src, conn)
        self._later(dst, src, lambda: self._established(src, conn, remote, (dst, theirs)))

    def _established(self, src: Address, conn: int, local: Address, other: tuple) -> None:
        node = self._alive(src)
        if node is None or (src, conn) in self._closed or self._pairs.get((src, conn)) != other:
            if self._pairs.pop(other, None) is not None:  # we gave up: the other end gets EOF
                self._pairs.pop((src, conn), None)
                self._later(src, other[0], lambda: self._lost(*other))
            return
        node.core.connection_made(conn, local, self.now)
        self._pump(node)

    def _segment(self, src: Address, dst: tuple[Address, int], data: bytes) -> None:
        node = self._alive(dst[0])
        if node is None or not self._reachable(src[0], dst[0][0]):
            self.stats.cut += 1
            return
        self.stats.delivered += 1
        node.core.data_received(dst[1], data, self.now)
        self._pump(node)

    def _eof(self, src: tuple[Address, int], dst: tuple[Address, int]) -> None:
        """A half-close reached dst: it keeps its side open, or closes it (src sees EOF)."""
        node = self._alive(dst[0])
        if node is None or dst in self._closed or self._pairs.get(dst) != src:
            return
        eof = getattr(node.core, "eof_received", None)
        keep = eof(dst[1], self.now) if eof is not None else False
        if not keep:
            self._pairs.pop(dst, None)
            self._pairs.pop(src, None)
            self._closed.add(dst)
            node.core.connection_lost(dst[1], self.now)
            self._later(dst[0], src[0], lambda: self._lost(*src), ordered=dst)
        self._pump(node)

    def _lost(self, address: Address, conn: int, reset: bool = False) -> None:
        node = self._alive(address)
        if node is None or (address, conn) in self._closed:
            return
        self._closed.add((address, conn))
        if reset:
            node.core.connection_lost(conn, self.now, reset=True)
        else:
            node.core.connection_lost(conn, self.now)
        self._pump(node)
