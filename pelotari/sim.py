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
"""
import heapq
import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

Address = Tuple[str, int]


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


@dataclass
class SimNode:
    """A core at an address, with the events it produced (time, event)."""

    address: Address
    core: Any
    listens: Set[int] = field(default_factory=set)  # extra ports it hears broadcasts on
    crashed: bool = False
    events: List[Tuple[float, Any]] = field(default_factory=list)


class Simulator:
    """The network and the clock. Deterministic for a given seed and sequence of calls."""

    def __init__(self, seed: int = 0, default: Optional[LinkSpec] = None,
                 broadcast_host: str = "255.255.255.255"):
        self.now = 0.0
        self.rng = random.Random(seed)
        self.default = default or LinkSpec()
        self.broadcast_host = broadcast_host
        self.nodes: Dict[Address, SimNode] = {}
        self.links: Dict[Tuple[str, str], LinkSpec] = {}
        self.stats = Stats()
        self._queue: List[Tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._groups: Optional[List[Set[str]]] = None
        self._stream_clock: Dict[Tuple[str, str], float] = {}
        self._timers: Dict[Address, float] = {}

    # ---- building ---------------------------------------------------------------------------

    def add(self, address: Address, make_core: Callable[[float], Any],
            listens: Tuple[int, ...] = ()) -> SimNode:
        """Add a node: make_core(now) builds its core; it also hears broadcasts to `listens`."""
        node = SimNode(address, make_core(self.now), set(listens))
        self.nodes[address] = node
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

    def restart(self, address: Address, make_core: Callable[[float], Any]) -> None:
        """The node comes back with a new core (its state is gone, as after a real crash)."""
        node = self.nodes[address]
        node.crashed = False
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

    def events(self, address: Address, kind: Optional[type] = None) -> List[Any]:
        """Events a node produced, optionally of one type."""
        return [e for _, e in self.nodes[address].events if kind is None or isinstance(e, kind)]

    # ---- plumbing ---------------------------------------------------------------------------

    def _reachable(self, a: str, b: str) -> bool:
        return self._groups is None or any(a in g and b in g for g in self._groups)

    def _pump(self, node: SimNode) -> None:
        """Collect what a core wants sent and its events, and (re)arm its timer."""
        if node.crashed:
            return
        core = node.core
        for data, dst in core.datagrams_to_send():
            self._send(node.address, (dst[0], int(dst[1])), bytes(data))
        while (ev := core.next_event()) is not None:
            node.events.append((self.now, ev))
        when = core.get_timer()
        if when is not None and self._timers.get(node.address) != when:
            self._timers[node.address] = when
            self.call_at(when, lambda n=node, w=when: self._fire(n, w))

    def _fire(self, node: SimNode, when: float) -> None:
        if node.crashed or self._timers.get(node.address) != when:
            return  # stale: the timer moved
        del self._timers[node.address]
        if node.core.get_timer() <= self.now:
            node.core.handle_timer(self.now)
            if node.core.get_timer() <= self.now:
                # A core whose timer stays due after handle_timer() would spin a real event loop
                # (until the clock moves) and this one for ever: that is the core's bug.
                raise RuntimeError(f"{node.address}: get_timer() is still due after "
                                   f"handle_timer({self.now!r})")
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
        for t in targets:
            spec = self.links.get((src[0], t.address[0]), self.default)
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
        if node.crashed or not self._reachable(src[0], node.address[0]):
            self.stats.cut += 1
            return
        self.stats.delivered += 1
        node.core.receive_datagram(data, src, self.now)
        self._pump(node)
