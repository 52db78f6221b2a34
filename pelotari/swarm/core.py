"""Sans-IO swarm node (swarm-peer-discovery.md): datagrams, their source and `now` in; datagrams
to send, a timer and events out (aioquic's shape; driven by pelotari.sim or a UDP adapter).

    receive_datagram(data, source, now)   handle_timer(now)   get_timer() -> float | None
    datagrams_to_send() -> [(bytes, address)]                 next_event() -> event | None
    connect(address, now)  ping(address, now)  send(address, type, data, now)  connections()

`now` is monotonic seconds; the MAC's epoch is Unix time, taken as now + wall_offset. Every rule,
timer and limit is in docs/protocols/swarm.md ("Timers and rules"); the connection state lives
in pelotari.swarm.table (fixed-width records, the Cython twin's layout).
"""
import functools
import hashlib
import ipaddress
import random
import secrets
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Deque, List, Optional, Tuple

from pelotari.swarm import wire
from pelotari.swarm.table import (
    S_ACK_SENT,
    S_ACKED,
    S_ASKED,
    S_DIRECT,
    S_ESTABLISHED,
    S_OUTBOUND,
    S_PONGED,
    S_PROMOTING,
    S_RECEIVED,
    S_RTT,
    S_SEEN,
    S_SENT,
    S_WANTED,
    ConnectionTable,
)

Address = Tuple[str, int]
REBASE_AT = 1 << 31  # ms: the table's u32 times are moved back by REBASE_SHIFT past this
REBASE_SHIFT = 1 << 30
MAX_INTERVAL = 86_400  # s: any timer or interval (the table keeps times as u32 ms below 2**31)
CONNECT, RESET, PING, PONG, GET, CONNECTIONS = range(6)


@dataclass(frozen=True)
class Config:
    """A node's timers and limits (docs/protocols/swarm.md, "Timers and rules")."""

    slot: float = 1.0  # s: the rate limits' time slot, and the tick of the vague timer
    connect_backoff: Tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)  # s after each Connect send; then give up
    redial: float = 30.0  # s: a wanted peer that never answered is dialled again (Attempt + 1)
    half_open: float = 30.0  # s: an inbound handshake not completed by then is forgotten
    ping_interval: float = 5.0  # s: every direct connection is pinged this often...
    ping_jitter: float = 0.1  # ... +- this fraction
    max_missed: int = 3  # unanswered Pings in a row that demote a direct connection
    vague_batch: int = 8  # vague connections checked per slot (a Ping each)
    vague_probe: int = 64  # table slots looked at per slot to find them (O(work), not O(table))
    vague_check_interval: float = 5.0  # s: a vague connection is checked at most this often
    vague_max_missed: int = 3  # unanswered checks in a row that forget a vague connection
    vague_pongs_per_slot: int = 1024  # global: Pings from vague connections answered per slot
    ping_burst: int = 3  # per connection: Pings (and GetConnections) answered at once...
    ping_refill: float = 4.0  # ... and one more every this many seconds
    get_interval: float = 60.0  # s: GetConnections to each direct connection...
    get_jitter: float = 0.2  # ... +- this fraction
    vague_get_interval: float = 30.0  # s: one GetConnections to one vague connection, in all
    get_room: int = wire.MAX_DATAGRAM  # bytes our GetConnections is padded to
    share_probe: int = 512  # table slots looked at for vague entries to put in a Connections
    target_direct: int = 16  # direct connections wanted
    max_direct: int = 32  # direct connections at most
    promote_rtt: float = 0.050  # s: a vague connection answering this fast is promoted
    promote_pings_per_slot: int = 4
    spare_dials: int = 2  # dials unanswered past their first resend that hold no place
    max_known: int = 4096  # known peers (heard of, never contacted) kept; oldest dropped
    resets_per_slot: int = 256  # global; and one per source address per slot
    connect_answers_per_slot: int = 1024  # Connects answered to sources we hold nothing for
    capacity: int = 100_000  # connections in the table
    limits: wire.Limits = field(default_factory=wire.Limits)

    def __post_init__(self):
        for name in ("slot", "redial", "half_open", "ping_interval", "get_interval",
                     "vague_get_interval", "promote_rtt", "ping_refill", "vague_check_interval"):
            if not 0 < getattr(self, name) <= MAX_INTERVAL:
                raise ValueError(f"{name} must be positive and at most {MAX_INTERVAL:,} s")
        if max(self.connect_backoff, default=0) > MAX_INTERVAL:
            raise ValueError(f"connect_backoff delays are at most {MAX_INTERVAL:,} s")
        if not self.connect_backoff or min(self.connect_backoff) <= 0 or len(
                self.connect_backoff) > 255:
            raise ValueError("connect_backoff must be 1..255 positive delays")
        for name in ("ping_jitter", "get_jitter"):
            if not 0 <= getattr(self, name) < 0.5:
                raise ValueError(f"{name} must be within 0..0.5")
        for name in ("max_missed", "vague_batch", "vague_probe", "vague_max_missed",
                     "ping_burst", "capacity", "share_probe"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_missed > 255 or self.vague_max_missed > 255:
            raise ValueError("max_missed and vague_max_missed must be at most 255 (u8)")
        for name in ("vague_pongs_per_slot", "promote_pings_per_slot", "max_known",
                     "resets_per_slot", "connect_answers_per_slot", "target_direct",
                     "spare_dials"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0")
        if self.max_direct < max(1, self.target_direct):
            raise ValueError("max_direct must be at least target_direct (and 1)")
        if not wire.PREFIX_SIZE <= self.get_room <= self.limits.max_datagram:
            raise ValueError(f"get_room must be within {wire.PREFIX_SIZE}..max_datagram")
        if self.slot * 1000 < 1:
            raise ValueError("slot must be at least 1 ms")


@functools.lru_cache(maxsize=65536)  # every Connections entry asks: ipaddress is slow
def unicast(host: str) -> bool:
    """Whether host is an address a node may dial: not multicast, broadcast, reserved (240/4),
    unspecified or in 0/8 (a Connections entry naming one would make a node send to a group)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.version == 4 and ip.packed[0] == 0:
        return False
    if ip.is_loopback:  # (::1 lies in ::/8, which ipaddress counts as reserved)
        return True
    return not (ip.is_multicast or ip.is_unspecified or ip.is_reserved)


def listen_problem(host: str) -> Optional[str]:
    """Why no node can be reached at address host, or None: multicast, broadcast or reserved
    (its answers would go to a group), IPv4-mapped IPv6 (it would learn its peers as IPv4
    addresses and could not dial them from an IPv6 socket), IPv6 link-local (a Connections
    entry cannot carry its peers' scope)."""
    ip = ipaddress.ip_address(host)
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return f"an IPv4-mapped IPv6 address; listen on {ip.ipv4_mapped} instead"
    if not unicast(host):
        return ("not a unicast address (multicast, broadcast or reserved): give the address "
                "this node is reached at")
    if ip.version == 6 and ip.is_link_local:
        return ("a link-local address: its peers would be link-local too, and a Connections "
                "answer cannot carry their scope; listen on a global or loopback address")
    return None


@functools.lru_cache(maxsize=65536)
def shareable(host: str) -> bool:
    """Whether a Connections entry can carry host: a scoped IPv6 address (fe80::1%eth0, a
    link-local peer's source) cannot, and is left out of what a node shares."""
    try:
        wire.entries_size([wire.Entry(host, 1, False)])
    except wire.SwarmError:
        return False
    return True


def _status(st: int) -> str:
    """A record's status by its state bits: direct, vague, connecting (we dialled) or half_open."""
    if st & S_ESTABLISHED == S_ESTABLISHED:
        return "direct" if st & S_DIRECT else "vague"
    return "connecting" if st & S_OUTBOUND else "half_open"


# ---- events ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Connected:
    """A handshake completed: both hold each other's Connect."""

    address: Address
    direct: bool  # we hold it as direct (we dialled it); inbound ones start vague
    inbound: bool  # the peer dialled us


@dataclass(frozen=True)
class Promoted:
    """A vague connection answered a promotion Ping fast enough and is direct now."""

    address: Address
    rtt: float  # s


@dataclass(frozen=True)
class Demoted:
    """A direct connection left max_missed Pings in a row unanswered and is vague now."""

    address: Address


@dataclass(frozen=True)
class Reset:
    """The peer holds no connection for us: our state for it is gone (redialled if wanted)."""

    address: Address
    redial: bool


@dataclass(frozen=True)
class ConnectionsLearned:
    """A Connections answer: `learned` are the new known peers it gave."""

    address: Address
    learned: Tuple[Address, ...]
    entries: int  # entries in the answer


@dataclass(frozen=True)
class UserMessage:
    """A user-defined datagram (type 6..65535) from an established connection."""

    address: Address
    type: int
    flags: int
    data: bytes


@dataclass(frozen=True)
class Unanswered:
    """A dial got no answer to any of its Connects: redialled in `redial` s (a wanted peer,
    connect()), or given up (None: a known peer; Forgotten follows)."""

    address: Address
    connects: int
    redial: Optional[float]


@dataclass(frozen=True)
class Forgotten:
    """A connection left the table: reason is evicted, silent, half_open, unanswered or reset."""

    address: Address
    reason: str


@dataclass(frozen=True)
class ConnectionInfo:
    """One row of connections()."""

    address: Address
    status: str  # direct, vague, connecting (we dialled), half_open (inbound, unfinished)
    rtt: Optional[float]  # s, the last Pong's round trip (None before any)
    missed: int


class SwarmNode:
    """One swarm node's protocol state, without sockets or clocks of its own."""

    def __init__(self, address: Address, keyring: wire.Keyring, now: float,
                 config: Optional[Config] = None, *, wall_offset: Optional[float] = None,
                 secret: Optional[bytes] = None, seed: Optional[int] = None):
        self.address = (address[0], int(address[1]))
        self.keyring = keyring
        self.config = cfg = config or Config()
        self.wall_offset = time.time() - now if wall_offset is None else wall_offset
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self.rng = random.Random(seed if seed is not None else self._secret)
        self.table = ConnectionTable(cfg.capacity)
        self.stats: Counter = Counter()
        self._out: List[Tuple[bytes, Address]] = []
        self._events: Deque[Any] = deque()
        self._known: "OrderedDict[Address, None]" = OrderedDict()
        self._dialing: set = set()  # addresses we dialled, not yet established
        self._base = now - 1.0  # ms since base: never 0, so 0 can mean "none"
        self._slot_ms = int(round(cfg.slot * 1000))
        self._slot_start = -1
        self.vague_pongs = self._resets = self._connect_answers = self._promotions = 0
        self._reset_sources: set = set()
        self._connect_sources: set = set()  # sources a Connect went to in answer, this slot
        self._cur_check = self._cur_promote = self._cur_share = self._cur_get = 0
        self._share_slot = -1
        self._shared: Tuple[wire.Entry, ...] = ()
        self._shared_content = b""
        ms = self.advance(now)
        self._next_tick = self._slot_start + self._slot_ms
        self._next_vague_get = ms + int(cfg.vague_get_interval * 1000)
        self._ping_ms = int(cfg.ping_interval * 1000)
        self._refill_ms = int(round(cfg.ping_refill * 1000))
        self._vague_check_ms = int(round(cfg.vague_check_interval * 1000))

    # ---- clock ---------------------------------------------------------------------------------

    def _ms(self, now: float) -> int:
        ms = int(round((now - self._base) * 1000))
        if ms >= REBASE_AT:
            shift = REBASE_SHIFT
            self._base += shift / 1000
            self.table.rebase(shift)
            self._slot_start -= shift
            self._next_tick -= shift
            self._next_vague_get = max(1, self._next_vague_get - shift)
            ms -= shift
        self._last_ms = ms
        return ms

    def advance(self, now: float) -> int:
        """Move the clock to `now` (a new slot starts the per-slot budgets again) and give the
        table's ms: for a datagram path outside the core (fastpath.swarmpath), which answers
        Pings by _answer_allowed's rules with `slot_mark` and `vague_pongs`."""
        ms = self._ms(now)
        self._roll(ms)
        return ms

    def _roll(self, ms: int) -> None:
        """A new time slot: the per-slot budgets start again."""
        start = ms - ms % self._slot_ms
        if start != self._slot_start:
            self._slot_start = start
            self.slot_mark = (start // self._slot_ms) % 255 + 1  # the table's u8 `claimed`
            self.vague_pongs = self._resets = self._connect_answers = self._promotions = 0
            self._reset_sources.clear()
            self._connect_sources.clear()

    def _wall(self, now: float) -> float:
        return now + self.wall_offset

    def _jitter(self, ms: float, fraction: float) -> int:
        return max(1, int(ms * (1 + fraction * (2 * self.rng.random() - 1))))

    # ---- tokens (stateless: recomputed, never stored) ------------------------------------------

    def _connect_token(self, address: Address, attempt: int) -> int:
        """Our Connect token towards address at an Attempt: a keyed hash of both (never 0)."""
        h = hashlib.blake2b(f"{address[0]}|{address[1]}|{attempt}".encode(), digest_size=8,
                            key=self._secret, person=b"swarm-connect")
        return int.from_bytes(h.digest(), "big") or 1

    def _ping_mask(self, address: Address) -> int:
        h = hashlib.blake2b(f"{address[0]}|{address[1]}".encode(), digest_size=8,
                            key=self._secret, person=b"swarm-ping")
        return int.from_bytes(h.digest(), "big")

    # ---- sending -------------------------------------------------------------------------------

    def _send(self, msg: wire.Message, to: Address, now: float) -> None:
        data = wire.encode(msg, self.keyring, self._wall(now), self.config.limits)
        self._out.append((data, to))
        self.stats[f"sent_{msg.name}"] += 1
        self.stats["sent_bytes"] += len(data)

    def _send_connect(self, slot: int, now: float) -> None:
        t = self.table
        address = t.addresses[slot]
        ours = t.ours(slot)
        st = t.state[slot]
        token = self._connect_token(address, ours)
        if st & S_RECEIVED:
            self._send(wire.connect(ours, token, ack=True, echo=t.their[slot]), address, now)
            st |= S_ACK_SENT
        else:
            self._send(wire.connect(ours, token), address, now)
        t.state[slot] = st | S_SENT

    def _send_reset(self, to: Address, attempt: int, now: float) -> None:
        """Reset, within its limits: one per source per slot, resets_per_slot in all."""
        if to in self._reset_sources or self._resets >= self.config.resets_per_slot:
            self.stats["limited_reset"] += 1
            return
        self._reset_sources.add(to)
        self._resets += 1
        self._send(wire.reset(attempt), to, now)

    def _send_ping(self, slot: int, ms: int, now: float) -> None:
        t = self.table
        address = t.addresses[slot]
        t.pinged[slot] = ms
        t.state[slot] &= ~S_PONGED
        self._send(wire.ping(self._ping_mask(address) ^ ms), address, now)

    def _send_get(self, slot: int, now: float) -> None:
        t = self.table
        t.state[slot] |= S_ASKED
        self._send(wire.get_connections(self.config.get_room), t.addresses[slot], now)
        self.stats["sent_bytes_GetConnections"] += len(self._out[-1][0])

    # ---- table housekeeping --------------------------------------------------------------------

    def _new_record(self, address: Address, ms: int, now: float) -> int:
        """A fresh record, evicting the least recently heard non-direct one if full; -1 when
        the table holds only direct connections."""
        t = self.table
        if t.count >= t.capacity:
            victim = t.evictable()
            if victim < 0:
                self.stats["refused_full"] += 1
                return -1
            if t.state[victim] & S_ESTABLISHED == S_ESTABLISHED:
                self._send_reset(t.addresses[victim], t.ours(victim), now)
            self._forget(victim, "evicted")
        return t.add(address, ms)

    def _forget(self, slot: int, reason: str) -> None:
        address = self.table.addresses[slot]
        self._dialing.discard(address)
        self.table.remove(slot)
        self.stats[f"forgotten_{reason}"] += 1
        self._events.append(Forgotten(address, reason))

    def _dial(self, slot: int, ms: int, now: float) -> None:
        """Start our handshake: Connect Sent, resent by the backoff until answered."""
        t = self.table
        t.state[slot] = (t.state[slot] & (S_WANTED | S_DIRECT)) | S_OUTBOUND
        t.missed[slot] = 1
        t.pinged[slot] = 0
        self._dialing.add(t.addresses[slot])
        self._send_connect(slot, now)
        t.set_due(slot, ms + int(self.config.connect_backoff[0] * 1000))

    def _make_direct(self, slot: int, ms: int, now: float, ask_now: bool) -> None:
        """Direct from now on: pinged, and asked for its connections at once (a promoted one)
        or with its first Ping one slot later (a handshake just completed: our last Connect
        must not be overtaken by the request, or the peer, holding nothing yet, resets us)."""
        t = self.table
        cfg = self.config
        t.set_direct(slot, True)
        t.missed[slot] = 0
        if ask_now:
            t.bucket[slot] = ms + self._jitter(cfg.get_interval * 1000, cfg.get_jitter)
            t.set_due(slot, ms + self._jitter(self._ping_ms, cfg.ping_jitter))
            self._send_get(slot, now)
        else:
            t.bucket[slot] = ms
            t.set_due(slot, ms + min(self._slot_ms, self._ping_ms))

    def _established(self, slot: int, ms: int, now: float) -> None:
        t = self.table
        address = t.addresses[slot]
        st = t.state[slot]
        self._dialing.discard(address)
        self._known.pop(address, None)  # a connection now, no longer only heard of
        t.missed[slot] = 0
        self.stats["connected"] += 1
        if st & S_DIRECT:
            t.set_due(slot, ms + self._jitter(self._ping_ms, self.config.ping_jitter))
            self._events.append(Connected(address, True, False))
        elif st & S_OUTBOUND and len(t.direct) < self.config.max_direct:
            self._make_direct(slot, ms, now, False)
            self._events.append(Connected(address, True, False))
        else:
            t.set_due(slot, 0)
            t.bucket[slot] = 0
            self._events.append(Connected(address, False, not st & S_OUTBOUND))

    # ---- the receive path ----------------------------------------------------------------------

    def receive_datagram(self, data, source: Address, now: float) -> None:
        """One UDP payload from source."""
        ms = self.advance(now)
        self.stats["received_bytes"] += len(data)
        try:
            msg = wire.decode(data, self.keyring, self._wall(now), self.config.limits)
        except wire.SwarmError as e:
            self.stats[f"dropped_{e.reason}"] += 1
            return
        source = (source[0], int(source[1]))
        self.stats[f"received_{msg.name}"] += 1
        t = self.table
        slot = t.lookup(source)
        if slot >= 0:
            t.touch(slot, ms)
        kind = msg.type
        if kind == CONNECT:
            self._on_connect(msg, source, slot, ms, now)
        elif kind == RESET:
            self._on_reset(msg, source, slot, ms, now)
        elif slot < 0:  # we hold no connection for it
            self.stats["no_connection"] += 1
            self._send_reset(source, 0, now)
        elif t.state[slot] & S_ESTABLISHED != S_ESTABLISHED:
            self.stats["not_established"] += 1
            if not t.state[slot] & S_OUTBOUND:  # a half-open inbound one: we hold nothing yet
                self._send_reset(source, t.ours(slot), now)
        elif kind == PING:
            if self._answer_allowed(slot):
                self._send(wire.pong(msg.token), source, now)
        elif kind == PONG:
            self._on_pong(msg, slot, ms, now)
        elif kind == GET:
            if self._answer_allowed(slot):
                self._answer_get(slot, len(data), source, now)
        elif kind == CONNECTIONS:
            self._on_connections(msg, slot, source)
        else:
            self._events.append(UserMessage(source, msg.type, msg.flags, msg.data))

    def _on_connect(self, msg: wire.Message, source: Address, slot: int, ms: int,
                    now: float) -> None:
        t = self.table
        if slot < 0:
            # No record: answer statelessly (our Attempt 0, a token recomputed when it is echoed);
            # the record is made only when the peer echoes it, so a spoofed source makes none.
            if msg.ack:
                if msg.echo != self._connect_token(source, 0):
                    self.stats["ignored_bad_echo"] += 1
                    return
                slot = self._new_record(source, ms, now)
                if slot < 0:
                    return
                t.set_attempts(slot, 0, msg.attempt)
                t.their[slot] = msg.token
                t.state[slot] = S_SENT | S_ACK_SENT | S_RECEIVED | S_ACKED | S_SEEN
                self._established(slot, ms, now)
                return
            if self._connect_answers >= self.config.connect_answers_per_slot:
                self.stats["limited_connect_answer"] += 1
                return
            if source in self._connect_sources:  # a replay (a sender resends 1 s later at once)
                self.stats["limited_connect_source"] += 1
                return
            self._connect_answers += 1
            self._connect_sources.add(source)
            self._send(wire.connect(0, self._connect_token(source, 0), ack=True, echo=msg.token),
                       source, now)
            return
        st = t.state[slot]
        seen = t.seen(slot)
        if st & S_SEEN and wire.attempt_newer(seen, msg.attempt):
            self.stats["ignored_old_attempt"] += 1  # duplicated, reordered or replayed
            return
        ours = t.ours(slot)
        if msg.ack and msg.echo != self._connect_token(source, ours):
            self.stats["ignored_bad_echo"] += 1
            return
        was = st & S_ESTABLISHED == S_ESTABLISHED
        if not st & S_SEEN or msg.attempt != seen or msg.token != t.their[slot]:
            # The peer's new handshake: it holds our Connect again only once it echoes it.
            if st & S_SEEN:
                self.stats["peer_new_attempt"] += 1
            t.their[slot] = msg.token
            t.set_attempts(slot, ours, msg.attempt)
            st = (st | S_SEEN | S_RECEIVED) & ~(S_ACK_SENT | S_ACKED)
        if msg.ack:
            st |= S_ACKED
        t.state[slot] = st
        if not msg.ack or not st & S_ACK_SENT:
            # It lost ours (no Ack), or has not had our Ack yet: ours, with the Ack. At most once
            # per source per slot: a replayed Connect from a spoofed source is not reflected
            # more often than that (a peer resends its own at 1 s at the soonest).
            if source in self._connect_sources:
                self.stats["limited_connect_source"] += 1
            else:
                self._connect_sources.add(source)
                self._send_connect(slot, now)
        now_established = t.state[slot] & S_ESTABLISHED == S_ESTABLISHED
        if now_established and not was:
            self._established(slot, ms, now)
        elif was and not now_established and not st & S_DIRECT:
            t.set_due(slot, ms + int(self.config.half_open * 1000))

    def _on_reset(self, msg: wire.Message, source: Address, slot: int, ms: int,
                  now: float) -> None:
        t = self.table
        if slot < 0:
            self.stats["ignored_reset_unknown"] += 1
            return
        st = t.state[slot]
        outstanding = self._outstanding(slot)
        if not outstanding and not st & S_ASKED:
            # A Reset answers a request of ours (docs: "When it may be sent"); none is out (we
            # are dialling it, or its Pong came): a replay, which would make us send Connects
            # (52 B, resent) for every 36 B replayed, or one that crossed our Pong.
            self.stats["ignored_reset_unasked"] += 1
            return
        if st & S_SEEN and wire.attempt_newer(t.seen(slot), msg.attempt) and not outstanding:
            self.stats["ignored_old_reset"] += 1
            return
        self.stats["reset"] += 1
        if st & (S_DIRECT | S_OUTBOUND | S_WANTED):
            t.set_direct(slot, False)
            t.set_attempts(slot, t.ours(slot) + 1, 0)
            t.state[slot] &= S_WANTED
            self._events.append(Reset(source, True))
            self._dial(slot, ms, now)
        else:
            self._events.append(Reset(source, False))
            self._forget(slot, "reset")

    def _answer_allowed(self, slot: int) -> bool:
        """Whether a Ping (or GetConnections) from an established connection is answered: once
        per slot from a direct one; from a vague one once per slot, within its own GCRA bucket,
        and while the global budget lasts."""
        t = self.table
        if t.claimed[slot] == self.slot_mark:
            self.stats["limited_claim"] += 1
            return False
        if t.state[slot] & S_DIRECT:
            # Once per slot (a peer sends one request per connection per slot): a Ping replayed
            # from a direct peer's spoofed address is reflected once a slot, not at line rate.
            t.claimed[slot] = self.slot_mark
            return True
        ms = self._last_ms
        tat = max(t.bucket[slot], ms)
        if tat - ms > (self.config.ping_burst - 1) * self._refill_ms:
            self.stats["limited_own"] += 1
            return False
        if self.vague_pongs >= self.config.vague_pongs_per_slot:
            self.stats["limited_global"] += 1
            return False
        self.vague_pongs += 1
        t.bucket[slot] = tat + self._refill_ms
        t.claimed[slot] = self.slot_mark
        return True

    def _outstanding(self, slot: int) -> bool:
        """Our last Ping to it is unanswered."""
        return bool(self.table.pinged[slot]) and not self.table.state[slot] & S_PONGED

    def _on_pong(self, msg: wire.Message, slot: int, ms: int, now: float) -> None:
        t = self.table
        sent = msg.echo ^ self._ping_mask(t.addresses[slot])
        if sent != t.pinged[slot] or not self._outstanding(slot):
            self.stats["ignored_pong"] += 1  # replayed, not ours, or not for our last Ping
            return
        t.state[slot] |= S_PONGED | S_RTT
        t.missed[slot] = 0
        rtt = ms - sent
        t.rtt[slot] = min(rtt, 0xFFFF)
        st = t.state[slot]
        if st & S_PROMOTING:
            t.state[slot] = st & ~S_PROMOTING
            if (not st & S_DIRECT and rtt <= self.config.promote_rtt * 1000
                    and len(t.direct) < self.config.target_direct):
                self._make_direct(slot, ms, now, True)
                self.stats["promoted"] += 1
                self._events.append(Promoted(t.addresses[slot], rtt / 1000))

    def _share(self, room: int, exclude: int = -1) -> Tuple[wire.Entry, ...]:
        """The entries of a Connections of at most `room` bytes: our direct connections, then
        vague ones from a rotating cursor (established ones), as many as fit."""
        t = self.table
        limits = self.config.limits
        entries = [wire.Entry(*t.addresses[s], True) for s in t.direct
                   if s != exclude and shareable(t.addresses[s][0])]
        want = limits.max_entries - len(entries)
        if want > 0:
            slots, self._cur_share = t.scan(self._cur_share, want + 1, self.config.share_probe,
                                            S_DIRECT | S_ESTABLISHED, S_ESTABLISHED)
            entries += [wire.Entry(*t.addresses[s], False) for s in slots
                        if s != exclude and shareable(t.addresses[s][0])]
        return wire.fit_connections(entries, room, limits)

    def _answer_get(self, slot: int, size: int, source: Address, now: float) -> None:
        """Connections, never longer than the request, leaving out the requester. The full-size
        list is computed once per slot (the cursor moves on each slot) and reused."""
        room = wire.answer_room(size, self.config.limits)
        if room < self.config.limits.max_datagram:
            entries = self._share(room, slot)
            content = None
        else:
            if self._share_slot != self._slot_start:
                self._share_slot = self._slot_start
                self._shared = self._share(room)
                self._shared_content = wire.pack(wire.Message(CONNECTIONS, entries=self._shared))
            entries = self._shared
            content = self._shared_content
        if any(e.address == source for e in entries):
            entries = tuple(e for e in entries if e.address != source)  # still in wire order
            content = None
        if content is None:
            content = wire.pack(wire.Message(CONNECTIONS, entries=entries), self.config.limits)
        data = self.keyring.sign(content, self._wall(now))
        self._out.append((data, source))
        self.stats["sent_Connections"] += 1
        self.stats["sent_bytes"] += len(data)
        self.stats["sent_bytes_Connections"] += len(data)

    def _on_connections(self, msg: wire.Message, slot: int, source: Address) -> None:
        t = self.table
        if not t.state[slot] & S_ASKED:
            self.stats["ignored_unasked"] += 1
            return
        t.state[slot] &= ~S_ASKED
        t.missed[slot] = 0  # an answer: as live as a Pong says
        new = {}
        known = self._known
        me = self.address
        for e in msg.entries:
            a = e.address
            if a == me or a in t or a in known or a in new:
                continue
            if not unicast(a[0]):
                self.stats["ignored_not_unicast"] += 1
                continue
            new[a] = None
        learned = list(new)
        # Queued in random order (docs, "Timers and rules": known peers): every answer lists
        # the answerer's direct connections first, so dialling in the order given made every
        # node that joined through a bootstrap dial that bootstrap's 16 direct peers, which
        # filled their tables at 4,096 nodes and were evicting and resetting at 10,000.
        if len(learned) > 1:
            self.rng.shuffle(learned)
        for a in learned:
            known[a] = None
            if len(known) > self.config.max_known:
                known.popitem(last=False)
                self.stats["known_dropped"] += 1
        self.stats["learned"] += len(learned)
        self._events.append(ConnectionsLearned(source, tuple(learned), len(msg.entries)))

    # ---- timers --------------------------------------------------------------------------------

    def get_timer(self) -> Optional[float]:
        """When handle_timer() is next due (monotonic seconds)."""
        due = self.table.next_due()
        when = self._next_tick if due is None else min(due, self._next_tick)
        return self._base + when / 1000

    def handle_timer(self, now: float) -> None:
        """Run what is due: the per-slot tick and the records' timers."""
        ms = self.advance(now)
        if ms >= self._next_tick:
            self._tick(ms, now)
            self._next_tick = self._slot_start + self._slot_ms
        t = self.table
        for address in [t.addresses[s] for s in t.pop_due(ms)]:
            slot = t.lookup(address)
            if slot >= 0:
                self._record_due(slot, ms, now)

    def _record_due(self, slot: int, ms: int, now: float) -> None:
        t = self.table
        cfg = self.config
        st = t.state[slot]
        established = st & S_ESTABLISHED == S_ESTABLISHED
        if st & S_OUTBOUND and not established:
            if not st & S_SENT:  # a wanted peer's redial
                t.set_attempts(slot, t.ours(slot) + 1, t.seen(slot))
                self._dial(slot, ms, now)
            elif t.missed[slot] < len(cfg.connect_backoff):  # Connect Sent: the same Connect
                self._send_connect(slot, now)
                t.set_due(slot, ms + int(cfg.connect_backoff[t.missed[slot]] * 1000))
                t.missed[slot] += 1
                self.stats["connect_resent"] += 1
            elif st & S_WANTED:
                self.stats["connect_gave_up"] += 1
                t.state[slot] = st & (S_WANTED | S_OUTBOUND | S_DIRECT)
                t.set_due(slot, ms + int(cfg.redial * 1000))
                self._events.append(Unanswered(t.addresses[slot], t.missed[slot], cfg.redial))
            else:
                self.stats["connect_gave_up"] += 1
                self._events.append(Unanswered(t.addresses[slot], t.missed[slot], None))
                self._forget(slot, "unanswered")
        elif st & S_DIRECT:
            if self._outstanding(slot):
                t.missed[slot] += 1
            if t.missed[slot] >= cfg.max_missed:
                t.set_direct(slot, False)
                t.bucket[slot] = 0
                t.missed[slot] = 0
                self.stats["demoted"] += 1
                self._events.append(Demoted(t.addresses[slot]))
                return
            t.set_due(slot, ms + self._jitter(self._ping_ms, cfg.ping_jitter))
            if ms >= t.bucket[slot] and established:
                # One request per connection per slot (the peer may hold us as vague, and answers
                # a vague connection once per slot): this round's request is the GetConnections,
                # and its answer counts as the Pong would.
                t.bucket[slot] = ms + self._jitter(cfg.get_interval * 1000, cfg.get_jitter)
                self._send_get(slot, now)
            else:
                self._send_ping(slot, ms, now)
        elif not established:
            self._forget(slot, "half_open")

    def _check_vague(self, s: int, ms: int, now: float, promoting: bool) -> bool:
        """Ping vague connection s unless it was pinged less than vague_check_interval ago (a
        node with few vague connections meets them again every slot, in its check and its
        promotion scans); an unanswered Ping before counts as a miss, and vague_max_missed of
        them in a row forget it. `promoting` (we are short of direct connections): a fast
        Pong to this Ping promotes it. Whether a Ping went."""
        t = self.table
        if t.pinged[s] and 0 <= ms - t.pinged[s] < self._vague_check_ms:
            return False
        self.stats["vague_checked"] += 1
        if self._outstanding(s):
            t.missed[s] += 1
            if t.missed[s] >= self.config.vague_max_missed:
                self._forget(s, "silent")
                return False
        self._send_ping(s, ms, now)
        if promoting:
            t.state[s] |= S_PROMOTING
        return True

    def _tick(self, ms: int, now: float) -> None:
        """Once per slot: check some vague connections, promote, dial known peers, and ask one
        vague connection for its connections now and then."""
        t = self.table
        cfg = self.config
        vague = (S_DIRECT | S_ESTABLISHED, S_ESTABLISHED)
        slots, self._cur_check = t.scan(self._cur_check, cfg.vague_batch, cfg.vague_probe,
                                        *vague)
        short = len(t.direct) < cfg.target_direct and cfg.promote_pings_per_slot > 0
        for address in [t.addresses[s] for s in slots]:
            self._check_vague(t.lookup(address), ms, now, short)
        if short:
            slots, self._cur_promote = t.scan(self._cur_promote, cfg.promote_pings_per_slot,
                                              cfg.vague_probe, *vague)
            for address in [t.addresses[s] for s in slots]:
                s = t.lookup(address)
                if t.pinged[s] != ms and not self._check_vague(s, ms, now, True):
                    continue  # its last Ping (a promotion one) is recent, or it is gone
                self.stats["promotion_pings"] += 1
        # A dial still unanswered after its first resend (a live peer answers within a round
        # trip) holds no place, up to spare_dials of them: a known peer that is gone takes 15 s
        # to give up on, and dialled one after another such peers made the recovery from a crash
        # of 20 % take 98 s at 10,000 nodes (docs: "known peers").
        spare = 0
        if self._known and cfg.spare_dials and len(t.direct) < cfg.target_direct:
            for address in self._dialing:
                s = t.lookup(address)
                if s >= 0 and t.missed[s] > 1:
                    spare += 1
            spare = min(spare, cfg.spare_dials)
        while self._known and len(t.direct) + len(self._dialing) < cfg.target_direct + spare:
            address, _ = self._known.popitem(last=False)
            if address in t:
                continue
            slot = self._new_record(address, ms, now)
            if slot < 0:
                break
            self._dial(slot, ms, now)
        if ms >= self._next_vague_get:
            self._next_vague_get = ms + int(cfg.vague_get_interval * 1000)
            slots, self._cur_get = t.scan(self._cur_get, 1, cfg.vague_probe, *vague)
            for s in slots:
                if t.pinged[s] != ms:  # one request per connection per slot
                    self._send_get(s, now)

    # ---- output --------------------------------------------------------------------------------

    def datagrams_to_send(self) -> List[Tuple[bytes, Address]]:
        """What to send, as (datagram, destination); the list is handed over and cleared."""
        out, self._out = self._out, []
        return out

    def next_event(self) -> Any:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    # ---- commands ------------------------------------------------------------------------------

    def connect(self, address: Address, now: float) -> None:
        """Dial address and keep it as direct (redialled after a give-up until it answers)."""
        address = (address[0], int(address[1]))
        if address == self.address:
            raise ValueError("a node does not connect to itself")
        if not unicast(address[0]):
            raise ValueError(f"{address[0]} is not a unicast address (multicast, broadcast, "
                             "reserved or unspecified)")
        ms = self.advance(now)
        t = self.table
        self._known.pop(address, None)
        slot = t.lookup(address)
        if slot >= 0:
            st = t.state[slot]
            t.state[slot] = st | S_WANTED
            if st & S_ESTABLISHED == S_ESTABLISHED:
                if not st & S_DIRECT and len(t.direct) < self.config.max_direct:
                    self._make_direct(slot, ms, now, True)
                return
            if not st & S_OUTBOUND:
                t.state[slot] |= S_OUTBOUND
                self._dial(slot, ms, now)
            return
        slot = self._new_record(address, ms, now)
        if slot < 0:
            raise RuntimeError("the connection table is full of direct connections")
        t.state[slot] = S_WANTED
        self._dial(slot, ms, now)

    def _established_slot(self, address: Address) -> int:
        slot = self.table.lookup((address[0], int(address[1])))
        if slot < 0 or self.table.state[slot] & S_ESTABLISHED != S_ESTABLISHED:
            raise KeyError(f"no established connection to {address}")
        return slot

    def ping(self, address: Address, now: float) -> None:
        """Ping an established connection now (its Pong counts as any other)."""
        slot = self._established_slot(address)
        ms = self._ms(now)
        self._send_ping(slot, ms, now)

    def send(self, address: Address, type_: int, data: bytes, now: float, flags: int = 0) -> None:
        """A user-defined datagram (type 6..65535) to an established connection: ValueError
        for a bad type, flags or size (checked first), KeyError without the connection."""
        msg = wire.user(type_, data, flags)
        wire.pack(msg, self.config.limits)  # the size, before anything is looked up
        slot = self._established_slot(address)
        self._send(msg, self.table.addresses[slot], now)

    def connections(self) -> List[ConnectionInfo]:
        """Every connection in the table."""
        t = self.table
        out = []
        for s in range(t.count):
            st = t.state[s]
            out.append(ConnectionInfo(t.addresses[s], _status(st),
                                      t.rtt[s] / 1000 if st & S_RTT else None, t.missed[s]))
        return out

    def status(self, address: Address) -> Optional[str]:
        """One connection's status as connections() names it (direct, vague, connecting,
        half_open), or None without a record."""
        t = self.table
        s = t.lookup((address[0], int(address[1])))
        if s < 0:
            return None
        return _status(t.state[s])

    def last_ping(self, address: Address) -> Optional[Tuple[int, bool]]:
        """(when our last Ping to it went, in the table's ms; whether its Pong counted), or
        None without a record: how an adapter learns that a ping() was answered."""
        slot = self.table.lookup((address[0], int(address[1])))
        if slot < 0:
            return None
        return self.table.pinged[slot], bool(self.table.state[slot] & S_PONGED)

    def direct(self) -> List[Address]:
        """The direct connections."""
        return [self.table.addresses[s] for s in self.table.direct]

    def known(self) -> List[Address]:
        """Known peers: heard of in Connections, never contacted; oldest first."""
        return list(self._known)
