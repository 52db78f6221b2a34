"""Sans-IO core of a fyrehose backbone cluster member (docs/protocols/fyrehose-cluster.md):
which member may sequence, in which epoch, and up to which sequence.

It composes a bully node (pelotari.bully.core.BullyNode: who may *claim* the active role) with
the cluster protocol (a majority grants an epoch; an active sequences only within a reservation
a majority confirmed, and only while a majority confirms its lease). Interfaces, as the other
cores (pelotari.sim drives them):

    datagrams (the cluster port):  receive_datagram(data, src, now)   datagrams_to_send()
    connections (bully's port, and the watch connections on the cluster port):
        accept(remote, now, local)  connection_made  data_received  eof_received
        connection_lost  actions()
    handle_timer(now) / get_timer()     next_event()
    the data plane:  may_issue(now) -> the highest position it may sequence now (or None)
                     issued(next_position, now)   holding(high)  (a standby's highest held)

Positions are unwrapped sequence numbers (the wire's sequence is position mod 2^48).
"""
import hashlib
import hmac
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pelotari.bully.core import BullyNode, Close, Connect, JoinFailed, NewLeader
from pelotari.bully.core import Config as BullyConfig

Address = tuple[str, int]

LEASE, LEASE_OK, RESERVE, RESERVED, STALE, CLAIM, GRANT, REFUSE, PRECLAIM, PREGRANT, TABLE = \
    range(1, 12)
NAMES = {LEASE: "LEASE", LEASE_OK: "LEASE-OK", RESERVE: "RESERVE", RESERVED: "RESERVED",
         STALE: "STALE", CLAIM: "CLAIM", GRANT: "GRANT", REFUSE: "REFUSE",
         PRECLAIM: "PRECLAIM", PREGRANT: "PREGRANT", TABLE: "TABLE"}
# After the header (type, name length, name, incarnation u64): the fields, each u64. TABLE's
# are an epoch, then 1..TABLE_ENTRIES entries of three: (IPv4 << 16 | port), flags, ms left.
FIELDS = {LEASE: 4, LEASE_OK: 4, RESERVE: 2, RESERVED: 2, STALE: 1, CLAIM: 1, GRANT: 4,
          REFUSE: 1, PRECLAIM: 1, PREGRANT: 1, TABLE: None}
TABLE_ENTRIES = 48  # per TABLE datagram (1,177 bytes with a 32-byte name and a tag)
JOIN_ATTEMPTS = 20  # bully joins of one member, JOIN_RETRY apart, before the next is tried
JOIN_RETRY = 0.5
TAG_SIZE = 16  # with a key: HMAC-SHA256 of the datagram, truncated
MAX_FIELD = 1 << 62  # every field is below (epochs ~ wall-clock ms, positions ~ wall-clock µs)
MAX_RESERVE_STEP = 1 << 32  # a reservation never moves further ahead of what we knew
WATCH_BASE = 1 << 60  # watch connections' numbers (bully's are below: each of its nodes
BULLY_GENERATION = 1 << 40  # numbers from its generation times this)


class ClusterError(ValueError):
    """A cluster datagram that is not one (counted and dropped)."""


def _tag(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()[:TAG_SIZE]


def encode(kind: int, name: bytes, incarnation: int, *fields: int,
           key: bytes | None = None) -> bytes:
    """One cluster datagram (with key: followed by its tag)."""
    if len(fields) != (FIELDS[kind] or _table_fields(len(fields))):
        raise ValueError(f"{NAMES[kind]} has {FIELDS[kind]} fields")
    data = struct.pack(f"!BB{len(name)}sQ{len(fields)}Q", kind, len(name), name, incarnation,
                       *fields)
    return data + _tag(key, data) if key else data


def decode(data: bytes, key: bytes | None = None) -> tuple[int, bytes, int, tuple[int, ...]]:
    """(kind, name, incarnation, fields) of a cluster datagram; ClusterError if it is none
    (with key: if its tag is not the key's)."""
    extra = TAG_SIZE if key else 0
    if len(data) < 2:
        raise ClusterError("truncated")
    kind, n = data[0], data[1]
    if kind not in FIELDS:
        raise ClusterError("unknown type")
    count = FIELDS[kind] or _table_fields((len(data) - 2 - n - 8 - extra) // 8)
    if not count or len(data) != 2 + n + 8 + 8 * count + extra:
        raise ClusterError("bad size")
    if key and not hmac.compare_digest(_tag(key, bytes(data[:-TAG_SIZE])), data[-TAG_SIZE:]):
        raise ClusterError("bad tag")
    name = data[2:2 + n]
    incarnation, *fields = struct.unpack_from(f"!Q{count}Q", data, 2 + n)
    if any(f >= MAX_FIELD for f in fields):
        raise ClusterError("out of range")
    return kind, bytes(name), incarnation, tuple(fields)


def _table_fields(count: int) -> int:
    """count if it is a TABLE's field count (an epoch and 1..TABLE_ENTRIES entries), else 0."""
    entries, rest = divmod(count - 1, 3)
    return count if count > 0 and not rest and 1 <= entries <= TABLE_ENTRIES else 0


def _order(address: Address) -> tuple:
    """A member's rank among claimants of one epoch: its IPv4 address, then its port."""
    return (*map(int, address[0].split(".")), address[1])


@dataclass(frozen=True)
class Config:
    """A member's settings (defaults: docs/protocols/fyrehose-cluster.md)."""

    cluster_size: int = 3
    lease: float = 0.3  # an active sequences this long after the LEASE a majority confirmed
    lease_interval: float = 0.05  # LEASE this often
    drift: float = 0.01  # clock rate difference covered
    margin: float = 0.02  # ... and this much more before a member grants a new epoch
    claim_retry: float = 0.1  # a claim not won by then is made again (a higher epoch),
    claim_backoff: float = 1.0  # ... each time twice as late, up to this
    watch_timeout: float = 0.5  # a watch connection not up by then is given up (silence,
    watch_retry: float = 0.05  # not death) and tried again this much later
    # Sequences reserved ahead: at least reserve_min, or reserve_ahead seconds of the current
    # rate, at most reserve_max (a quarter of a client's max_gap: the unused part of a dead
    # active's reservation is a gap, never a Resync). Renewed when half is left: a majority
    # whose control loops stall for less than half of it (a loaded host) never stops the
    # data plane.
    reserve_min: int = 1024
    reserve_ahead: float = 0.5
    reserve_max: int = 16384
    # A new epoch's first reservation: this many seconds of the rate the old active had (seen
    # in its LEASEs), so that the clients' re-sends of what it never confirmed (a failover's
    # worth of traffic, at once) are sequenced, not dropped past the reservation.
    reserve_first: float = 1.0
    witness: bool = False  # votes, never claims
    fresh_wait: float = 0.65  # a member without stored state votes after a LEASE, or this long
    # The active's subscriber table (its cluster clients) goes to the standbys every
    # table_interval; a new active adopts what it was told, so its first DELIVERs reach them
    # (they believe them once the new active answers their QUERY). At most max_table kept.
    table_interval: float = 0.1
    max_table: int = 4096

    def __post_init__(self):
        if not 1 <= self.cluster_size <= 9:
            raise ValueError("cluster_size must be within 1..9")
        if self.lease_interval * 3 > self.lease:
            raise ValueError("lease must be at least 3 lease intervals")
        if not 1 <= self.reserve_min <= self.reserve_max:
            raise ValueError("reserve_min must be within 1..reserve_max")

    @property
    def majority(self) -> int:
        return self.cluster_size // 2 + 1

    @property
    def silence(self) -> float:
        """How long a member waits without the active before it grants a new epoch."""
        return self.lease * (1 + self.drift) + self.margin


@dataclass(frozen=True)
class BecameActive:
    """This member sequences from `first` (a position) in `epoch`."""

    epoch: int
    first: int


@dataclass(frozen=True)
class SteppedDown:
    """This member stopped sequencing (why: "lost quorum", "a newer epoch")."""

    epoch: int
    why: str


@dataclass(frozen=True)
class MembersDiffer:
    """A member of our cluster's name was started with another member list (--peers)."""

    address: Address


@dataclass(frozen=True)
class Following:
    """The active of `epoch` is the member at `active` (its cluster address)."""

    epoch: int
    active: Address


@dataclass
class State:
    """What a member must not forget across a restart (Raft's term and vote): the highest
    epoch it promised, and the highest reservation it confirmed. `save` is called with it
    before any message that depends on a change is queued."""

    promised: int = 0
    reserved: int = 0


@dataclass
class _Peer:
    address: Address
    incarnation: int = 0
    heard: float = float("-inf")


@dataclass
class _Claim:
    epoch: int
    deadline: float
    grants: dict[Address, tuple[int, int, int]] = field(default_factory=dict)  # reserved,
    # high, fresh (a member without stored state that has not heard a LEASE)
    pre: bool = True  # asking whether a majority would grant (nobody promises anything yet)
    pregrants: set[Address] = field(default_factory=set)


class ClusterCore:
    """One member at `address` (host, cluster port) of a cluster whose other members are at
    `peers`; its bully node listens on (host, bully_port) and joins `bully_leader` (None: it
    founds the bully network, as the first member)."""

    def __init__(self, address: Address, peers: list[Address], now: float, *,
                 bully_port: int, bully_leader: Address | None = None,
                 bully_id: int | None = None, config: Config | None = None,
                 bully_config: BullyConfig | None = None, name: bytes = b"fyrehose",
                 incarnation: int = 0, wall: Callable[[], float] = time.time,
                 state: State | None = None, save: Callable[[State], None] | None = None,
                 key: bytes | None = None):
        self.config = cfg = config or Config()
        if len(peers) + 1 > cfg.cluster_size:
            raise ValueError("more members listed than cluster_size")
        self.address = (address[0], int(address[1]))
        self.name = name
        self.key = key or None  # HMAC key of every cluster datagram (None: unauthenticated)
        self.incarnation = incarnation
        self._wall = wall
        self.peers = {(p[0], int(p[1])): _Peer((p[0], int(p[1]))) for p in peers}
        self.bully_port = bully_port
        self._bully_config = bully_config or BullyConfig(
            heartbeat=1.0, peer_timeout=65.0, connect_timeout=0.15, reply_timeout=0.15,
            sync_interval=0)
        self._bully_id = bully_id
        self._bully_gen = 0
        self._joins_tried: list[str] = []  # hosts whose bully network we failed to join
        self.bully = self._new_bully(bully_leader, now)
        self.stats: dict[str, int] = {}
        self.role = "standby"
        self.epoch = 0  # the epoch we serve (active) or follow
        # Without stored state (a new member, or one whose state is gone) we may have promised
        # or confirmed something before: we vote once a LEASE told us where the cluster is, or
        # after fresh_wait (a whole cluster starting), and our grants say so.
        self.fresh = state is None
        self.state = state if state is not None else State()
        self._save = save or (lambda st: None)
        self.active: Address | None = None  # the active we follow
        self.active_dead = False  # its watch connection was reset, closed or refused
        self.heard_active = float("-inf")  # when we last confirmed its lease (standby)
        self.high = 0  # the highest position we hold
        self.active_next = 0  # (standby) the active's next position, from its last LEASE
        self.next = 0  # (active) the next position to issue
        self._asking: int | None = None  # (active) the reservation being confirmed
        self._confirmed_by: dict[Address, int] = {}  # reservation confirmations per member
        self._rounds: dict[int, float] = {}  # (active) LEASE round -> when we sent it
        self._round = 0
        self._confirmed: dict[Address, float] = {}  # member -> send time of its latest round
        self.lease_until = float("-inf")
        self._next_lease: float | None = None
        self._claim: _Claim | None = None
        self._claim_wait = cfg.claim_retry
        self._seen_epoch = 0  # the highest epoch any member told us of
        self._noted_silence: float | None = None  # the heard_active whose silence we acted on
        self._rate = 0.0  # positions/s: ours while active, the active's (its LEASEs) otherwise
        self._first_reservation = False
        self._table: dict[int, tuple[int, float]] = {}  # (standby) the active's clients
        self._next_table = now
        self._rate_epoch = 0  # (the epoch whose LEASEs _rate_from came from)
        self._rate_at = now
        self._rate_from = 0
        self._out: list[tuple[bytes, Address]] = []
        self._events: deque = deque()
        self._actions: list = []
        self._watch: dict[int, Address] = {}  # our watch connections: conn -> the active
        self._watch_up: set[int] = set()
        self._watch_opened: dict[int, float] = {}
        self._watched: dict[int, str] = {}  # (active) watch connections we accepted: host
        self._watch_ids = iter(range(WATCH_BASE, 2 * WATCH_BASE))
        self._next_watch: float | None = None
        self._started = now
        self._differs: set[Address] = set()
        self._rejoin_at: float | None = None
        # (Bully's leader, no active) when to claim again: a claim refused or unanswered, or
        # ours not possible yet (fresh_wait)
        self._next_claim: float | None = None

    # ---- the state kept across restarts ----------------------------------------------------

    @property
    def promised(self) -> int:
        """The highest epoch we granted or served."""
        return self.state.promised

    @promised.setter
    def promised(self, value: int) -> None:
        if value != self.state.promised:
            self.state.promised = value
            self._save(self.state)

    @property
    def reserved(self) -> int:
        """The highest reservation we confirmed (active: that a majority confirmed)."""
        return self.state.reserved

    @reserved.setter
    def reserved(self, value: int) -> None:
        if value != self.state.reserved:
            self.state.reserved = value
            self._save(self.state)

    # ---- counters ---------------------------------------------------------------------------

    def _count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    # ---- the data plane ---------------------------------------------------------------------

    def may_issue(self, now: float) -> int | None:
        """The highest position this member may sequence at `now` (None: none, not active or
        its lease lapsed)."""
        if self.role != "active" or now >= self.lease_until or self.reserved < self.next:
            return None  # (a new epoch's first reservation not confirmed yet: nothing)
        return self.reserved

    def issued(self, next_position: int, now: float) -> None:
        """(Active) the data plane's next position: reservations follow its rate."""
        if next_position > self.next:
            self.next = next_position
            self.high = max(self.high, next_position - 1)
        if now - self._rate_at >= 0.1:
            self._rate = (self.next - self._rate_from) / (now - self._rate_at)
            self._rate_at, self._rate_from = now, self.next
        self._reserve_ahead(now)

    def holding(self, high: int) -> None:
        """(Standby) the highest position our journal holds."""
        self.high = max(self.high, high)

    # ---- datagrams --------------------------------------------------------------------------

    def receive_datagram(self, data: bytes, src: Address, now: float) -> None:
        """A cluster datagram from src."""
        self._bully_events(now)
        try:
            kind, name, inc, fields = decode(data, self.key)
        except ClusterError as exc:
            self._count(f"dropped_{str(exc).replace(' ', '_')}")
            return
        if name != self.name:
            self._count("dropped_other_cluster")
            src = (src[0], int(src[1]))
            if src in self.peers and name.split(b"#")[0] == self.name.split(b"#")[0] and \
                    src not in self._differs:
                self._differs.add(src)  # (said once per member)
                self._events.append(MembersDiffer(src))
            return
        src = (src[0], int(src[1]))
        peer = self.peers.get(src)
        if peer is None:
            self._count("dropped_not_member")
            return
        if not self._plausible(kind, fields):
            self._count("dropped_implausible")
            return
        peer.incarnation, peer.heard = inc, now
        handler = {LEASE: self._on_lease, LEASE_OK: self._on_lease_ok, RESERVE: self._on_reserve,
                   RESERVED: self._on_reserved, STALE: self._on_stale, CLAIM: self._on_claim,
                   GRANT: self._on_grant, REFUSE: self._on_refuse,
                   PRECLAIM: self._on_preclaim, PREGRANT: self._on_pregrant,
                   TABLE: self._on_table}[kind]
        self._count(f"received_{NAMES[kind]}")
        handler(src, fields, now)

    def _plausible(self, kind: int, fields: tuple[int, ...]) -> bool:
        """Epochs are about the wall clock in ms, positions in µs: no field names one past
        twice today's; and a reservation (LEASE's, RESERVE's) never runs more than
        MAX_RESERVE_STEP ahead of what we knew (a forged one must not make a later epoch
        start where it would reuse sequences, nor a forged epoch block every claim)."""
        wall = self._wall()
        epochs = {LEASE: (0,), LEASE_OK: (0, 2), RESERVE: (0,), RESERVED: (0,), STALE: (0,),
                  CLAIM: (0,), GRANT: (0,), REFUSE: (0,), PRECLAIM: (0,), PREGRANT: (0,),
                  TABLE: (0,)}[kind]
        if any(fields[i] > 2 * wall * 1000 for i in epochs):
            return False
        positions = {LEASE: (2, 3), LEASE_OK: (3,), RESERVE: (1,), RESERVED: (1,),
                     GRANT: (1, 2)}.get(kind, ())
        if any(fields[i] > 2 * wall * 1e6 for i in positions):
            return False
        reservation = {LEASE: 2, RESERVE: 1, GRANT: 1}.get(kind)
        if reservation is not None:
            known = max(self.reserved, self.active_next, self.high)
            if known and fields[reservation] > known + MAX_RESERVE_STEP:
                return False
        return True

    def datagrams_to_send(self) -> list[tuple[bytes, Address]]:
        """Cluster datagrams queued since the last call."""
        out, self._out = self._out, []
        return out

    def _send(self, dst: Address, kind: int, *fields: int) -> None:
        self._out.append((encode(kind, self.name, self.incarnation, *fields, key=self.key), dst))
        self._count(f"sent_{NAMES[kind]}")

    def _to_all(self, kind: int, *fields: int) -> None:
        for p in self.peers:
            self._send(p, kind, *fields)

    # ---- the subscriber table (a new active's first DELIVERs reach the old one's clients) ---

    def table_due(self, now: float) -> bool:
        """(Active) whether the data plane's table should be given to publish_table() now."""
        return self.role == "active" and now >= self._next_table

    def publish_table(self, entries: list[tuple[str, int, int, float]], now: float) -> None:
        """(Active) tell the standbys who our clients are: [(host, port, flags, seconds
        left)], in TABLE datagrams of TABLE_ENTRIES."""
        self._next_table = now + self.config.table_interval
        if self.role != "active" or not self.key:
            return  # (without a key a forged TABLE could aim a new active at anyone: none)
        flat = []
        for host, port, flags, left in entries[:self.config.max_table]:
            try:
                addr = int.from_bytes(socket.inet_aton(host), "big")
            except OSError:
                continue
            ms = int(left * 1000)
            if ms > 0 and 0 < port < 65536:
                flat.append((addr << 16 | port, flags & 0xFFFFFFFFFFFF, min(ms, 60_000)))
        for k in range(0, len(flat), TABLE_ENTRIES):
            chunk = flat[k:k + TABLE_ENTRIES]
            self._to_all(TABLE, self.epoch, *(f for entry in chunk for f in entry))

    def _on_table(self, src: Address, f: tuple[int, ...], now: float) -> None:
        if not self.key:
            # Whoever can forge the active's address could make the next active send DELIVERs
            # to any address for 5 s, or fill its table: without a key, nothing is adopted.
            self._count("dropped_table_unkeyed")
            return
        if self.role != "standby" or src != self.active or f[0] != self.epoch:
            self._count("dropped_table_not_active")
            return
        table = self._table
        for k in range(1, len(f), 3):
            key, flags, ms = f[k], f[k + 1], f[k + 2]
            if key not in table and len(table) >= self.config.max_table:
                for old in [a for a, (_, until) in table.items() if until <= now]:
                    del table[old]
                if len(table) >= self.config.max_table:
                    self._count("dropped_table_full")
                    continue
            table[key] = (flags, now + min(ms, 60_000) / 1000)

    def adoptable(self, now: float) -> list[tuple[str, int, int, float]]:
        """(New active) the old active's clients as it last told us, [(host, port, flags,
        seconds left)], once (the table is cleared)."""
        table, self._table = self._table, {}
        return [(socket.inet_ntoa((key >> 16).to_bytes(4, "big")), key & 0xffff, flags,
                 until - now) for key, (flags, until) in table.items() if until > now]

    # ---- standby: following the active ------------------------------------------------------

    def _follow(self, active: Address, epoch: int, now: float) -> None:
        if self.role == "active" and epoch > self.epoch:
            self._step_down("a newer epoch", now)
        if (active, epoch) != (self.active, self.epoch) or self.role == "candidate":
            self.role = "standby"
            self._claim = None
            self.active, self.epoch, self.active_dead = active, epoch, False
            self._close_watches()  # (watched again once it leads: its first LEASE)
            self._events.append(Following(epoch, active))

    def _on_lease(self, src: Address, f: tuple[int, ...], now: float) -> None:
        epoch, rnd, reserved, nxt = f
        if epoch < self.promised:
            self._send(src, STALE, self.promised)
            return
        self.promised = epoch
        self._seen_epoch = max(self._seen_epoch, epoch)
        if src != self.active or epoch != self.epoch or self.role != "standby":
            self._follow(src, epoch, now)
        self.heard_active = now  # (we grant nobody else until `silence` after this)
        if epoch != self._rate_epoch or nxt < self._rate_from:
            self._rate_epoch, self._rate_at, self._rate_from = epoch, now, nxt  # (measure afresh)
        elif now - self._rate_at >= 0.1:
            self._rate = (nxt - self._rate_from) / (now - self._rate_at)
            self._rate_at, self._rate_from = now, nxt
        self.active_next = nxt  # its next position: how far behind our journal is
        self.active_dead = False  # it lives (whatever its watch connection did)
        if not self._watch and self._next_watch is None:
            self._rewatch(now)
        self.reserved = max(self.reserved, reserved)
        self.fresh = False  # we know where the cluster is
        self._send(src, LEASE_OK, epoch, rnd, self.promised, self.high)

    def _on_reserve(self, src: Address, f: tuple[int, ...], now: float) -> None:
        epoch, r = f
        if epoch != self.promised or src != self.active:
            self._send(src, STALE, self.promised)
            return
        self.reserved = max(self.reserved, r)
        self._send(src, RESERVED, epoch, r)

    def _grantable(self, src: Address, now: float) -> bool:
        """Whether we would let src start a new epoch now: our active is gone (its process
        died, or it was silent past the lease, or we have none)."""
        if self.role == "active" and now < self.lease_until:
            return False  # we serve
        if self.fresh and now < self._started + self.config.fresh_wait:
            return False  # we may have promised something before a restart
        if self.active is None or self.active_dead or self.active == src:
            return True
        return now >= self.heard_active + self.config.silence  # (as _silence_due adds)

    def _on_preclaim(self, src: Address, f: tuple[int, ...], now: float) -> None:
        (epoch,) = f
        if epoch <= self.promised or not self._grantable(src, now):
            self._count("preclaims_refused")
            self._send(src, REFUSE, self.promised)
            return
        self._send(src, PREGRANT, epoch)  # (nothing promised: we would grant it now)

    def _on_claim(self, src: Address, f: tuple[int, ...], now: float) -> None:
        (epoch,) = f
        self._seen_epoch = max(self._seen_epoch, epoch)
        c = self._claim
        if c is not None and not c.pre and c.epoch == epoch and _order(src) < _order(self.address):
            # Two bully leaders at once (bully's transitions) claiming the same epoch: each
            # would grant the other's and drop its own, and nobody win. The higher address
            # keeps its claim; the lower one grants it (below).
            self._count("claims_refused")
            self._send(src, REFUSE, self.promised)
            return
        if epoch <= self.promised or not self._grantable(src, now):
            self._count("claims_refused")
            self._send(src, REFUSE, self.promised)
            return
        if self.role == "active":
            self._step_down("a newer epoch", now)  # (our lease lapsed: we stopped already)
        self.promised = epoch
        if self.role == "candidate":
            self.role, self._claim = "standby", None
        # The claimant is our active from now: nobody else gets a grant from us for `silence`
        # (its lease counts from when it sent the claim, before we got it).
        self._follow(src, epoch, now)
        self.heard_active = now
        self._send(src, GRANT, epoch, self.reserved, self.high, int(self.fresh))

    # ---- claiming ---------------------------------------------------------------------------

    def _should_claim(self, now: float) -> bool:
        if self.config.witness or self.role != "standby" or not self.bully.is_leader:
            return False
        return self._grantable(self.address, now) and (
            self.active is None or self.active_dead or
            now >= self.heard_active + self.config.silence)

    def _start_claim(self, now: float) -> None:
        # First a pre-claim (Raft's pre-vote): nobody promises anything until a majority says
        # it would grant. A minority that claims again and again raises no member's epoch (the
        # majority's active would be told STALE when the partition heals: a second outage).
        # Our own promise, too, is made only when we win.
        epoch = max(self.promised, self._seen_epoch) + 1
        epoch = max(epoch, int(self._wall() * 1000))  # above a restarted cluster's epochs
        self.role = "candidate"
        self._claim = _Claim(epoch, now + self._claim_wait,
                             {self.address: (self.reserved, self.high, int(self.fresh))},
                             pregrants={self.address})
        self._count("claims")
        self._to_all(PRECLAIM, epoch)
        self._check_pre(now)

    def _on_pregrant(self, src: Address, f: tuple[int, ...], now: float) -> None:
        (epoch,) = f
        c = self._claim
        if c is not None and c.pre and epoch == c.epoch:
            c.pregrants.add(src)
            self._check_pre(now)

    def _check_pre(self, now: float) -> None:
        c = self._claim
        if c is None or not c.pre or len(c.pregrants) < self.config.majority:
            return
        c.pre, c.deadline = False, now + self._claim_wait
        self._claim_sent = now
        self._to_all(CLAIM, c.epoch)
        self._check_claim(now)

    def _on_grant(self, src: Address, f: tuple[int, ...], now: float) -> None:
        epoch, reserved, high, fresh = f
        c = self._claim
        if c is None or c.pre or epoch != c.epoch:
            return
        c.grants[src] = (reserved, high, fresh)
        self._check_claim(now)

    def _on_refuse(self, src: Address, f: tuple[int, ...], now: float) -> None:
        (promised,) = f
        self._seen_epoch = max(self._seen_epoch, promised)

    def _check_claim(self, now: float) -> None:
        c = self._claim
        if c is None or c.pre or len(c.grants) < self.config.majority:
            return
        self._claim = None
        self._claim_wait = self.config.claim_retry
        top = max(r for r, _, _ in c.grants.values())
        high = max(h for _, h, _ in c.grants.values())
        first = top + 1
        if not top or any(fresh for _, _, fresh in c.grants.values()):
            # A fresh cluster, or a grant from a member that may have forgotten a reservation:
            # at least where a lone backbone would start (the wall clock in microseconds).
            first = max(first, int(self._wall() * 1e6))
        self.role, self.epoch, self.active = "active", c.epoch, self.address
        self.promised = c.epoch
        self.reserved = first - 1
        self.next, self.high = first, max(high, first - 1)
        self.fresh = False
        # (the old active's rate, from its LEASEs, stays: the first reservation follows it)
        self._rate_at, self._rate_from = now, first
        self._first_reservation = True
        self._confirmed_by = {}
        self._asking = None
        self._close_watches()
        self._joins_tried = []
        # Each grant answered the claim: the lease counts from when the claim was sent.
        self._confirmed = {a: self._claim_sent for a in c.grants}
        self.lease_until = self._claim_sent + self.config.lease
        self._events.append(BecameActive(c.epoch, first))
        self._send_lease(now)
        self._reserve_ahead(now)

    # ---- active: lease and reservations -------------------------------------------------

    def _send_lease(self, now: float) -> None:
        self._next_lease = now + self.config.lease_interval
        self._round += 1
        self._rounds[self._round] = now
        self._rounds.pop(self._round - 64, None)
        self._confirmed[self.address] = now
        self._to_all(LEASE, self.epoch, self._round, self.reserved, self.next)
        if self._asking is not None:  # (a RESERVE or its answer may have been lost)
            for p in self.peers:
                if p not in self._confirmed_by:
                    self._send(p, RESERVE, self.epoch, self._asking)

    def _on_lease_ok(self, src: Address, f: tuple[int, ...], now: float) -> None:
        epoch, rnd, promised, high = f
        if self.role != "active":
            return
        if promised > self.epoch:
            self._seen_epoch = max(self._seen_epoch, promised)
            self._step_down("a newer epoch", now)
            return
        sent = self._rounds.get(rnd)
        if epoch != self.epoch or sent is None:
            return
        # A member confirms a round: it grants nobody else until `silence` after it got it,
        # which is after we sent it. The lease runs from the send time of the latest round a
        # majority (ourselves included) confirmed.
        self._confirmed[src] = max(self._confirmed.get(src, sent), sent)
        times = sorted(self._confirmed.values(), reverse=True)
        if len(times) >= self.config.majority:
            self.lease_until = max(self.lease_until,
                                   times[self.config.majority - 1] + self.config.lease)

    def _reserve_ahead(self, now: float) -> None:
        """(Active) ask a majority to confirm the next reservation once less than half of
        `ahead` (reserve_min, or reserve_ahead seconds of the current rate) is left."""
        if self.role != "active" or self._asking is not None:
            return
        cfg = self.config
        seconds = cfg.reserve_first if self._first_reservation else cfg.reserve_ahead
        ahead = min(cfg.reserve_max, max(cfg.reserve_min, int(self._rate * seconds)))
        if self.reserved - self.next + 1 >= ahead // 2:
            return
        self._asking = self.next + ahead
        self._confirmed_by = {self.address: self._asking}
        self._to_all(RESERVE, self.epoch, self._asking)
        self._check_reserved(now)

    def _on_reserved(self, src: Address, f: tuple[int, ...], now: float) -> None:
        epoch, r = f
        if self.role != "active" or epoch != self.epoch or r != self._asking:
            return
        self._confirmed_by[src] = r
        self._check_reserved(now)

    def _check_reserved(self, now: float) -> None:
        if self._asking is not None and len(self._confirmed_by) >= self.config.majority:
            self.reserved, self._asking = self._asking, None
            self._first_reservation = False
            self._reserve_ahead(now)

    def _on_stale(self, src: Address, f: tuple[int, ...], now: float) -> None:
        (promised,) = f
        if promised > self.promised:
            self.promised = promised
        if self.role == "active" and promised > self.epoch:
            self._step_down("a newer epoch", now)

    def _step_down(self, why: str, now: float) -> None:
        if self.role != "active":
            return
        # Sequencing stops first (may_issue is None from here), then the watchers are let go.
        self.role = "standby"
        self.lease_until = float("-inf")
        self._asking = None
        self.active = None
        self._next_lease = None
        self._count("stepped_down")
        self._events.append(SteppedDown(self.epoch, why))
        for conn in list(self._watched):
            self._actions.append(Close(conn))
        self._watched.clear()
        self._maybe_claim(now)  # (bully's leader claims again, once the others allow it)

    # ---- watch connections ------------------------------------------------------------------

    def _rewatch(self, now: float) -> None:
        """A watch connection to the active: its process's death resets or closes it."""
        self._close_watches()
        if self.active is not None and self.active != self.address and not self.active_dead:
            conn = next(self._watch_ids)
            self._watch[conn] = self.active
            self._watch_opened[conn] = now
            self._actions.append(Connect(conn, self.active))

    def _close_watches(self) -> None:
        for conn in self._watch:
            self._actions.append(Close(conn))
        self._watch.clear()
        self._watch_up.clear()
        self._watch_opened.clear()
        self._next_watch = None

    def _watch_timer(self, now: float) -> float | None:
        due = [t + self.config.watch_timeout for c, t in self._watch_opened.items()
               if c not in self._watch_up]
        if self._next_watch is not None:
            due.append(self._next_watch)
        return min(due) if due else None

    def _watch_timeouts(self, now: float) -> None:
        for conn, t in list(self._watch_opened.items()):
            if conn not in self._watch_up and now >= t + self.config.watch_timeout:
                # Not connected in time: silence (a cut link), not death; the lease decides.
                self._count("watch_timeouts")
                self._close_watches()
                self._next_watch = now + self.config.watch_retry
        if self._next_watch is not None and now >= self._next_watch:
            self._next_watch = None
            self._rewatch(now)

    def _watch_lost(self, conn: int, now: float, up: bool) -> None:
        active = self._watch.pop(conn)
        self._watch_up.discard(conn)
        self._watch_opened.pop(conn, None)
        if active != self.active:
            return
        # Reset, closed or refused: the active's process is gone (a backbone stops sequencing
        # before it closes its watch connections). Not connected in time: only silence.
        self.active_dead = True
        self._count("active_dead")
        if self.bully.is_leader:
            self._maybe_claim(now)
        elif self.bully.id and self.bully.election is None:
            self.bully.elect(now)
            self._bully_events(now)

    # ---- connections: bully's, and the watch connections ---------------------------------

    def accept(self, remote: Address, now: float, local: Address | None = None) -> int | None:
        """An incoming connection: to bully's port, or a watch connection (to our cluster port,
        from a member's host, while we are active)."""
        if local is not None and int(local[1]) == self.bully_port:
            conn = self.bully.accept(remote, now, local)
            return conn
        if self.role != "active" or remote[0] not in {p[0] for p in self.peers}:
            self._count("watch_refused")
            return None
        mine = [c for c, host in self._watched.items() if host == remote[0]]
        if len(mine) >= 2:  # a member needs one: its oldest makes room (never a pile)
            self._count("watch_evicted")
            del self._watched[mine[0]]
            self._actions.append(Close(mine[0]))
        conn = next(self._watch_ids)
        self._watched[conn] = remote[0]
        return conn

    def connection_made(self, conn: int, local: Address, now: float) -> None:
        if conn >= WATCH_BASE:
            if conn in self._watch:
                self._watch_up.add(conn)
            return
        self.bully.connection_made(conn, local, now)
        self._bully_events(now)

    def data_received(self, conn: int, data: bytes, now: float) -> None:
        if conn >= WATCH_BASE:
            return  # nothing is said on a watch connection
        self.bully.data_received(conn, data, now)
        self._bully_events(now)

    def eof_received(self, conn: int, now: float) -> bool:
        if conn >= WATCH_BASE:
            return False
        return self.bully.eof_received(conn, now)

    def connection_lost(self, conn: int, now: float, reset: bool = False) -> None:
        if conn >= WATCH_BASE:
            if conn in self._watch:
                self._watch_lost(conn, now, conn in self._watch_up)
            self._watched.pop(conn, None)
            return
        self.bully.connection_lost(conn, now, reset)
        self._bully_events(now)

    def actions(self) -> list:
        """Connect, Send, Shutdown and Close actions: bully's and the watch connections'."""
        out = self.bully.actions() + self._actions
        self._actions = []
        return out

    # ---- bully ------------------------------------------------------------------------------

    def _new_bully(self, leader: Address | None, now: float) -> BullyNode:
        base = (self._bully_gen % (WATCH_BASE // BULLY_GENERATION)) * BULLY_GENERATION
        return BullyNode(self.address[0], self.bully_port, now, leader=leader,
                         node_id=self._bully_id, config=self._bully_config, conn_base=base)

    def _rejoin(self, now: float) -> None:
        """Joining failed: join another member's bully network, or, when every member failed,
        found one (a partition's sides merge when it heals, bully's way)."""
        self._bully_gen += 1
        leader = self.bully.leader_address
        if leader is not None:
            self._joins_tried.append(leader[0])
        if leader is None or self._joins_tried.count(leader[0]) >= JOIN_ATTEMPTS:
            # (Before that, the same one again: members started together, the one that
            # founds may not listen yet, and a second founder would split bully's network.)
            left = [p[0] for p in sorted(self.peers) if p[0] not in self._joins_tried]
            if left:
                leader = (left[0], self.bully_port)
            else:
                leader, self._joins_tried = None, []
                self._count("bully_founded")
        self._count("bully_rejoins")
        self._actions += self.bully.actions()  # (what the failed node still had to say)
        self.bully = self._new_bully(leader, now)

    def _bully_events(self, now: float) -> None:
        """Bully's events are ours (passed on); a new bully leader that is us may claim."""
        while (ev := self.bully.next_event()) is not None:
            self._events.append(ev)
            if isinstance(ev, NewLeader) and ev.me:
                self._maybe_claim(now)
            elif isinstance(ev, JoinFailed):
                self._rejoin_at = now + JOIN_RETRY  # (a member starting may not listen yet)

    def _maybe_claim(self, now: float) -> None:
        if self._should_claim(now):
            self._next_claim = None
            self._start_claim(now)
        elif self._wants_claim():
            self._next_claim = max(now + self._claim_wait, self._started +
                                   (self.config.fresh_wait if self.fresh else 0.0))

    def _wants_claim(self) -> bool:
        """Bully's leader with no live active to follow (a claim may be possible later)."""
        return (not self.config.witness and self.role == "standby" and self._claim is None
                and self.bully.is_leader and (self.active is None or self.active_dead))

    # ---- timers -----------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When handle_timer() next has work, or None."""
        due = [self.bully.get_timer(), self._watch_timer(0.0), self._rejoin_at]
        if self.role == "active":
            due += [self._next_lease, self.lease_until]
        elif self._claim is not None:
            due.append(self._claim.deadline)
        elif self._next_claim is not None and self._wants_claim():
            due.append(self._next_claim)
        elif self._silence_due() is not None:
            due.append(self._silence_due())
        due = [d for d in due if d is not None]
        return min(due) if due else None

    def handle_timer(self, now: float) -> None:
        """Leases, claims, silences, and bully's timers."""
        b = self.bully.get_timer()
        if b is not None and now >= b:
            self.bully.handle_timer(now)
        self._bully_events(now)
        if self._rejoin_at is not None and now >= self._rejoin_at:
            self._rejoin_at = None
            self._rejoin(now)
            self._bully_events(now)
        self._watch_timeouts(now)
        cfg = self.config
        if self.role == "active":
            if now >= self.lease_until:
                self._step_down("lost quorum", now)
            elif self._next_lease is not None and now >= self._next_lease:
                self._send_lease(now)
        if self._claim is not None and now >= self._claim.deadline:
            self._claim = None
            self.role = "standby"
            self._count("claims_unanswered")
            self._claim_wait = min(2 * self._claim_wait, cfg.claim_backoff)
            self._maybe_claim(now)
        if self._next_claim is not None and now >= self._next_claim:
            self._next_claim = None
            if self._wants_claim():
                self._maybe_claim(now)
        due = self._silence_due()
        if due is not None and now >= due:
            # The active went silent: whoever is bully's leader of our side claims; if that
            # was the active, bully elects another first.
            self._noted_silence = self.heard_active
            self._count("active_silent")
            if self.bully.is_leader:
                self._maybe_claim(now)
            elif self.bully.id and self.bully.election is None:
                self.bully.elect(now)
                self._bully_events(now)
        b = self.bully.get_timer()  # what ran above may have made bully's timer due now
        if b is not None and now >= b:
            self.bully.handle_timer(now)
            self._bully_events(now)

    def _silence_due(self) -> float | None:
        """(Standby) when the active we follow counts as silent, if we have not acted on it."""
        if self.role != "standby" or self.active is None or self.active_dead or \
                self._noted_silence == self.heard_active:
            return None
        return self.heard_active + self.config.silence

    def next_event(self) -> object | None:
        """The next event (ours and bully's), or None."""
        return self._events.popleft() if self._events else None
