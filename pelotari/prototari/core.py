"""Sans-IO prototari node: datagrams, their source and `now` in; datagrams, timers and events out.

Sections of the seed (prototari.md) are cited as 1a (broadcasting), 1b (responding),
1c (handshake) and 2 (heartbeat). Decisions the seed leaves open, and the security bounds,
are in docs/protocols/prototari.md.

A peer is its IP address (Config.multi_node opts into (IP, port)), written as the address
everything for it goes to: (IP, unicast_port).
"""
import logging
from collections import defaultdict, deque
from dataclasses import dataclass

from pelotari.prototari.wire import (BROADCAST_PORT, CONFIRM, CONTROL, DATA_MAGIC,  # noqa: F401
                                     DISCOVER, MAX_DATA, MAX_DATAGRAM, PING, PONG, RESPOND,
                                     UNICAST_PORT)

log = logging.getLogger("pelotari.prototari")

Address = tuple[str, int]

SEED_BROADCAST_INTERVAL = 5.0  # 1a step 2: "configurable; defaults to 5 seconds"


@dataclass(frozen=True)
class Config:
    """Node settings: the seed's four, plus what it leaves open (defaults documented)."""

    max_peers: int = 64
    broadcast_interval: float = 5.0
    inactive_peer_time: float = 5.0
    heartbeat_max_wait: float = 1.0
    reservation_timeout: float = 2.0
    missed_heartbeats_limit: int = 3
    # None: the adapter uses the interface's (NodeCore alone falls back to 255.255.255.255).
    broadcast_address: str | None = None
    broadcast_port: int = BROADCAST_PORT
    unicast_port: int = UNICAST_PORT
    # An `aupa!` counts only this long after our last `pelotari?` (it answers a broadcast).
    response_window: float = 2.0
    # Spots that reservations for strangers' broadcasts may hold at once (None: half the table).
    max_reservations: int | None = None
    # Opt-in: several nodes per host. Peers are (address, port) and replies go to the source
    # port. Off by default: a peer is its address and everything goes to its unicast port.
    multi_node: bool = False
    # At most one `hemen nago!` per peer per this many seconds: `hor?` is 4 bytes and its
    # answer 11, and a forger can send `hor?` from a peer's IP. A peer's own heartbeat asks at
    # most once per min(inactive_peer_time, heartbeat_max_wait) (0.01 s at the CLI's floor, 1 s
    # by default), so its answers are never dropped unless those are set below this. 0: no limit.
    pong_interval: float = 0.1
    # A peer that never sent `hor?` or `hemen nago!` but repeats its broadcasts (the Go
    # implementation has no heartbeat) is removed only after missing missed_heartbeats_limit of
    # them as well, at the shortest gap seen between two of them, at most this (the seed's
    # default). 0: every peer is removed by the heartbeat alone.
    peer_broadcast_interval: float = SEED_BROADCAST_INTERVAL

    def __post_init__(self):
        if self.max_peers < 1:
            raise ValueError("max_peers must be at least 1")
        for name in ("broadcast_interval", "inactive_peer_time", "heartbeat_max_wait",
                     "reservation_timeout", "response_window"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("pong_interval", "peer_broadcast_interval"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.missed_heartbeats_limit < 1:
            raise ValueError("missed_heartbeats_limit must be at least 1")
        if self.max_reservations is not None and self.max_reservations < 1:
            raise ValueError("max_reservations must be at least 1")

    @property
    def reservation_limit(self) -> int:
        """How many reservations may be outstanding at once: max_reservations, or by default
        half the table (at least one), so that a flood of `pelotari?` from strangers leaves the
        other half for our own discovery."""
        if self.max_reservations is not None:
            return self.max_reservations
        return max(1, self.max_peers // 2)


@dataclass(frozen=True)
class PeerJoined:
    """A peer was registered: by our handshake (`dale!` sent) or by its confirmation."""

    peer: Address
    via: str  # "handshake" (we broadcast, it answered) or "confirmation" (we answered, it confirmed)


@dataclass(frozen=True)
class PeerLeft:
    """A peer was removed from the list (its spot is free again)."""

    peer: Address
    reason: str


@dataclass(frozen=True)
class Message:
    """Data from a registered peer."""

    peer: Address
    data: bytes


@dataclass
class Peer:
    last_seen: float
    missed: int = 0
    heartbeat_deadline: float | None = None  # a `hor?` is out and unanswered until then
    pongs: int = 0  # `hemen nago!` received from it
    reconfirmed_for: float | None = None  # the broadcast our last `dale!` to it answered
    last_pong: float | None = None  # when we last answered its `hor?`
    messages: int = 0  # DATA received from it
    heartbeats: bool = False  # it sent `hor?` or `hemen nago!`: it runs the heartbeat (2)
    mute: bool = False  # dropped before without ever speaking heartbeat, and came back
    last_discover: float | None = None  # when its last `pelotari?` arrived
    discover_interval: float | None = None  # the shortest gap seen between two of them

    @property
    def kept_by_broadcasts(self) -> bool:
        """Whether only its broadcasts, seen repeating or known to, show it is there."""
        return not self.heartbeats and (self.discover_interval is not None or self.mute)


class NodeCore:
    """The protocol state of one prototari node, free of sockets and clocks."""

    def __init__(self, now: float, config: Config | None = None,
                 self_addresses: set[Address] = frozenset()):
        self.config = config or Config()
        # Our own broadcasts come back: ignore datagrams from these (by address alone unless
        # multi_node, where another node on this host is a peer).
        self.self_addresses = {self.key(a) for a in self_addresses}
        self.peers: dict[Address, Peer] = {}
        self.reservations: dict[Address, float] = {}  # broadcaster -> when the spot frees (1b)
        # Peers removed for missed heartbeats that never spoke heartbeat, oldest first (at most
        # max_peers): if one registers again it was alive, so it does not answer `hor?`, and
        # is kept by its broadcasts before a second one shows their interval.
        self.mute: dict[Address, float] = {}
        self._out: list[tuple[bytes, Address]] = []
        self._events: deque[object] = deque()
        self._next_broadcast = now
        self.last_broadcast: float | None = None
        self.stats: dict[str, int] = defaultdict(int)

    def key(self, address: Address) -> Address:
        """The peer an address belongs to, as the address everything for it is sent to.

        By default a peer is its IP address, whatever port a datagram came from, and is
        written (IP, unicast_port); with multi_node it is the (IP, port) the datagram came from.
        """
        if self.config.multi_node:
            return (address[0], int(address[1]))
        return (address[0], self.config.unicast_port)

    @property
    def full(self) -> bool:
        """Whether every spot is taken by a peer or a reservation."""
        return len(self.peers) + len(self.reservations) >= self.config.max_peers

    # ---- input ---------------------------------------------------------------------------

    def receive_datagram(self, data: bytes, source: Address, now: float) -> None:
        """Handle one datagram from source (either socket); unexpected ones are counted."""
        source = self.key(source)
        if source in self.self_addresses:
            self.stats["own_datagrams"] += 1
            return
        self.stats["datagrams_in"] += 1
        peer = self.peers.get(source)
        if peer is not None:  # any message from a peer shows it is there (2)
            peer.last_seen = now
            peer.missed = 0
            peer.heartbeat_deadline = None
        if data.startswith(DATA_MAGIC):
            self._on_data(data, source, peer)
        elif data == DISCOVER:
            self._on_discover(source, now)
        elif data == RESPOND:
            self._on_respond(source, now)
        elif data == CONFIRM:
            self._on_confirm(source, now)
        elif data == PING:
            self._on_ping(source, peer, now)
        elif data == PONG:
            self._on_pong(source, peer)
        else:
            self._drop("unknown", source, f"{len(data)}-byte datagram")

    def _drop(self, reason: str, source: Address, what: str = "") -> None:
        self.stats["dropped_" + reason] += 1
        log.debug("dropped %s from %s:%s (%s)", what or reason, source[0], source[1], reason)

    def _on_discover(self, source: Address, now: float) -> None:  # 1b
        peer = self.peers.get(source)
        if peer is not None:
            if peer.last_discover is not None and now > peer.last_discover:
                gap = now - peer.last_discover
                if peer.discover_interval is None or gap < peer.discover_interval:
                    peer.discover_interval = gap
            peer.last_discover = now
            self._drop("discover_from_peer", source)
        elif source in self.reservations:
            self._drop("discover_already_reserved", source)
        elif self.full:
            self._drop("discover_while_full", source)
        elif len(self.reservations) >= self.config.reservation_limit:
            self._drop("discover_reservations_full", source)  # a flood cannot hold every spot
        else:
            self._send(RESPOND, source)
            self.reservations[source] = now + self.config.reservation_timeout

    def in_response_window(self, now: float) -> bool:
        """Whether an `aupa!` arriving now can answer our last broadcast."""
        return (self.last_broadcast is not None
                and now < self.last_broadcast + self.config.response_window)

    def _on_respond(self, source: Address, now: float) -> None:  # 1c
        if not self.in_response_window(now):  # we did not ask: nobody is registered unasked
            self._drop("respond_outside_window", source)
            return
        peer = self.peers.get(source)
        if peer is not None:
            # It answered our broadcast, so it does not have us: our `dale!` was lost. Confirm
            # again (its reservation is fresh), or the two would disagree for ever; once per
            # broadcast.
            if peer.reconfirmed_for == self.last_broadcast:
                self._drop("respond_repeated", source)
                return
            peer.reconfirmed_for = self.last_broadcast
            self._send(CONFIRM, source)
            self.stats["reconfirmed"] += 1
            return
        self.reservations.pop(source, None)  # both sides discovered each other: keep one spot
        if self.full:
            self._drop("respond_while_full", source)
            return
        self._register(source, now, "handshake")
        self.peers[source].reconfirmed_for = self.last_broadcast  # one `dale!` per broadcast
        self._send(CONFIRM, source)

    def _on_confirm(self, source: Address, now: float) -> None:  # 1b step 5
        expires = self.reservations.pop(source, None)
        if source in self.peers:
            self._drop("confirm_from_peer", source)
        elif expires is None or now >= expires:
            self._drop("confirm_without_reservation", source)  # never reserved, or too late
        else:
            self._register(source, now, "confirmation")
            # the `pelotari?` that made the reservation: its next broadcast gives its interval
            self.peers[source].last_discover = expires - self.config.reservation_timeout

    def _on_ping(self, source: Address, peer: Peer | None, now: float) -> None:
        if peer is None:  # answering strangers would make us a reflector
            self._drop("ping_from_stranger", source)
            return
        self._heard_heartbeat(source, peer)
        if peer.last_pong is not None and now - peer.last_pong < self.config.pong_interval:
            self._drop("ping_rate_limited", source)  # an amplifier toward the peer otherwise
            return
        peer.last_pong = now
        self._send(PONG, source)

    def _on_pong(self, source: Address, peer: Peer | None) -> None:  # 2 step 4
        if peer is None:
            self._drop("pong_from_stranger", source)
            return
        self.stats["pongs_in"] += 1  # last seen and the missed count were reset above
        peer.pongs += 1
        self._heard_heartbeat(source, peer)

    def _heard_heartbeat(self, source: Address, peer: Peer) -> None:
        peer.heartbeats = True
        self.mute.pop(source, None)

    def _on_data(self, data: bytes, source: Address, peer: Peer | None) -> None:
        if peer is None:
            self._drop("data_from_stranger", source)
            return
        self.stats["messages_in"] += 1
        peer.messages += 1
        self._events.append(Message(source, bytes(data[len(DATA_MAGIC):])))

    def _register(self, peer: Address, now: float, via: str) -> None:
        self.peers[peer] = Peer(last_seen=now, mute=peer in self.mute)
        self.stats["joined"] += 1
        self._events.append(PeerJoined(peer, via))

    # ---- commands ------------------------------------------------------------------------

    def send(self, peer: Address, data: bytes) -> None:
        """Queue data for one registered peer; raises KeyError for a stranger."""
        peer = self.key(peer)
        if peer not in self.peers:
            raise KeyError(f"{peer[0]}:{peer[1]} is not a registered peer")
        if len(data) > MAX_DATA:
            raise ValueError(f"{len(data)} bytes of data; at most {MAX_DATA} fit a datagram")
        self._send(DATA_MAGIC + bytes(data), peer)

    def send_all(self, data: bytes) -> int:
        """Queue data for every registered peer; return how many."""
        for peer in list(self.peers):
            self.send(peer, data)
        return len(self.peers)

    # ---- timers --------------------------------------------------------------------------

    def get_timer(self) -> float:
        """When handle_timer() next has work."""
        when = self._next_broadcast
        for expires in self.reservations.values():
            when = min(when, expires)
        cfg = self.config
        for peer in self.peers.values():
            if peer.heartbeat_deadline is not None:
                due = peer.heartbeat_deadline
            elif peer.missed >= cfg.missed_heartbeats_limit:
                due = self._removal_time(peer)
            else:
                due = peer.last_seen + cfg.inactive_peer_time
            when = min(when, due)
        return when

    def _removal_time(self, peer: Peer) -> float:
        # A peer that missed every heartbeat goes at once, unless kept by its broadcasts: then
        # when it has also missed missed_heartbeats_limit of them, the last given
        # heartbeat_max_wait to arrive (1a promises one per interval while not full).
        cfg = self.config
        if not peer.kept_by_broadcasts or not cfg.peer_broadcast_interval:
            return peer.last_seen  # already passed: removed at the miss
        interval = cfg.peer_broadcast_interval  # learned gaps only shorten it: a forger
        if peer.discover_interval is not None:  # spacing its broadcasts cannot stretch it
            interval = min(interval, peer.discover_interval)
        return (peer.last_seen + cfg.missed_heartbeats_limit * interval
                + cfg.heartbeat_max_wait)

    def handle_timer(self, now: float) -> None:
        """Broadcast, expire reservations, and run the heartbeat."""
        cfg = self.config
        for source, expires in list(self.reservations.items()):
            if now >= expires:  # 1b step 5: the spot is free again
                del self.reservations[source]
                self.stats["reservations_expired"] += 1
        for address, peer in list(self.peers.items()):  # 2
            if peer.heartbeat_deadline is not None and now >= peer.heartbeat_deadline:
                peer.heartbeat_deadline = None
                peer.missed += 1
                self.stats["heartbeats_missed"] += 1
            if peer.missed >= cfg.missed_heartbeats_limit:
                if now >= self._removal_time(peer):
                    self._remove(address, peer)
                continue  # kept by its broadcasts: no more `hor?` until it is heard again
            if peer.heartbeat_deadline is None and now >= peer.last_seen + cfg.inactive_peer_time:
                self._send(PING, address)
                peer.heartbeat_deadline = now + cfg.heartbeat_max_wait
        if now >= self._next_broadcast:  # 1a: paused while the list is full
            if not self.full:
                self._send(DISCOVER, (cfg.broadcast_address or "255.255.255.255",
                                      cfg.broadcast_port))
                self.stats["broadcasts"] += 1
                self.last_broadcast = now
            self._next_broadcast = now + cfg.broadcast_interval

    def _remove(self, address: Address, peer: Peer) -> None:
        del self.peers[address]
        self.stats["left"] += 1
        if not peer.heartbeats:  # should it come back, it was there and ignored our `hor?`
            self.mute.pop(address, None)
            self.mute[address] = peer.last_seen
            while len(self.mute) > self.config.max_peers:
                del self.mute[next(iter(self.mute))]
        self._events.append(PeerLeft(address, f"{peer.missed} missed heartbeats"))

    # ---- output --------------------------------------------------------------------------

    def _send(self, data: bytes, to: Address) -> None:
        self._out.append((data, to))

    def datagrams_to_send(self) -> list[tuple[bytes, Address]]:
        """Datagrams queued since the last call, with their destinations."""
        out, self._out = self._out, []
        return out

    def next_event(self) -> object | None:
        """The oldest undelivered event, or None."""
        return self._events.popleft() if self._events else None
