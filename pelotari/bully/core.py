"""Sans-IO bully node (p2p-bully-client.md): connections' bytes, their addresses and `now` in;
connections to open, bytes to send, connections to close, timers and events out.

The adapter (pelotari.bully.node) or the simulator (pelotari.sim) owns the sockets. Every
connection is known by a number the core gives it: the adapter calls accept() for an incoming
connection (None: refuse it), and opens one when the core asks with Connect. Then:

    connection_made(conn, local, now)   an outgoing connection is up (local: our end)
    data_received(conn, data, now)      bytes arrived
    eof_received(conn, now) -> keep     the other end half-closed: True keeps our side open
                                        (else the adapter closes, then reports it lost)
    connection_lost(conn, now, reset)   closed (reset: an RST), or a connect that failed
    handle_timer(now) / get_timer()     monotonic seconds
    actions() -> [Connect | Send | Shutdown | Close]   next_event() -> event or None

Close(conn) means: flush what was sent, then close; the adapter does not report
connection_lost() for a connection the core closed. Shutdown(conn): flush, then half-close
(our side sends no more; the connection is still read). Decisions the seed leaves open (IDs, the 26th
joiner, timers, how the address book and elections work) are in docs/protocols/bully.md.
"""
import itertools
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pelotari.bully import clock as clk
from pelotari.bully.wire import (
    MAX_ID,
    MAX_TEXT,
    PEER_SLOTS,
    TAGS,
    BullyError,
    Framer,
    Message,
    Peer,
    encode,
)

Address = tuple[str, int]
WILDCARD = "0.0.0.0"
_SHUTDOWN = object()  # queued on a connection not yet up: half-close it once written


PEER_TIMEOUT_BEATS = 3.2  # a peer silent this many heartbeats is dropped (16 s at 5 s)


@dataclass(frozen=True)
class Config:
    """A node's settings; every limit is here (defaults documented in docs/protocols/bully.md)."""

    max_id: int = MAX_ID  # the leader gives IDs 1..max_id
    max_peers: int = PEER_SLOTS  # neighbours kept (the seed: 4)
    heartbeat: float = 5.0  # IAmAlive (+ NodeRequest, the liveness probe) to the leader
    # The leader drops a peer silent this long: longer than the seed's minute, so a peer that
    # heartbeats once a minute (as the seed allows, and Java clients do) is never dropped.
    peer_timeout: float = 65.0
    id_quarantine: float = 600.0  # a dropped peer's ID goes to nobody else for this long
    reply_timeout: float = 1.0  # an answer (2, 4, 5, 7, 12) not back by then never comes
    connect_timeout: float = 1.0
    election_step: float = 0.02  # an election waits this long per live higher ID it knows of
    leader_wait: float = 2.0  # after an answer to AreYouAlive, wait this long for IAmLeader
    search_timeout: float = 2.0  # our own search gives up after this
    search_memory: float = 30.0  # (SourceID, SearchID) pairs remembered this long
    max_searches: int = 4096  # pairs remembered at most (oldest forgotten first)
    forward_burst: int = 64  # searches forwarded: a token bucket
    forward_rate: float = 32.0
    max_own_searches: int = 64
    sync_interval: float = 60.0  # the leader syncs clocks this often (0: only when asked)
    sync_probes: int = 8  # TellMeYourTime per peer per round; the tightest bounds win
    sync_timeout: float = 2.0  # a round's probes end by then
    sync_parallel: int = 2  # peers probed at once
    sync_gap: float = 0.001  # new times are sent this far apart
    lost_probe: float = 10.0  # a leader we lost (a partition, a crash) is asked this often...
    max_outgoing: int = 128  # our connections under way or open at once
    # ... to one host: half what a pelotari receiver takes from a host (16), so a burst (an
    # election's searches) waits its turn here instead of being refused there
    max_outgoing_per_host: int = 8
    max_waiting_per_host: int = 32  # ... and at most this many waiting their turn per host
    max_messages_per_read: int = 64  # messages handled per data_received (then Continue)
    answer_burst: int = 16  # answers on new connections (IAmLeader, IAmFound) per source
    answer_rate: float = 4.0  # host: a token bucket
    max_answer_hosts: int = 256  # source hosts whose buckets are kept
    text_burst: int = 64  # Texts taken from one source host: a token bucket
    text_rate: float = 32.0
    texts_per_destination: int = 8  # our Text connections to one address at once (the rest
    max_queued_texts: int = 1024  # wait, at most this many: the receiver's host limit is 16)
    election_holdoff: float = 2.0  # elections started by others' messages: at most one per this
    lost_memory: float = 600.0  # ... for this long
    outlier_bound: float = 1.0  # seconds from the leader's clock past which one is an outlier
    max_correction: float = 60.0  # no clock is moved further: a wilder one is left out
    probe_tolerance: float = 0.05  # probes whose bounds miss each other by more contradict
    align: float = 0.000125  # a new Time is sent when it is this close to a whole millisecond
    align_for: float = 0.05  # ... tried for this long, then sent rounded
    step_threshold: float = clk.STEP_THRESHOLD
    max_slew: float = clk.MAX_SLEW
    rtt_blind: bool = False  # measure only: the Java clients' averaging (no RTT, no outliers)
    max_connections: int = 256
    max_connections_per_host: int = 16
    idle_timeout: float = 70.0  # a connection closes after this long without a whole message
    linger: float = 1.0  # ... or this long after one, once it carried one (_Conn.lingers)
    max_ids_per_host: int = 4  # IDs the leader gives one IPv4 address
    max_book: int = 64  # peers remembered by ID
    max_text: int = MAX_TEXT
    check_source: bool = True  # a message naming its sender must come from that host

    @classmethod
    def for_heartbeat(cls, heartbeat: float, peer_timeout: float | None = None, **kw) -> "Config":
        """A Config with this heartbeat; peer_timeout defaults to the default's (longer than
        the seed's minute), or PEER_TIMEOUT_BEATS of them if that is longer."""
        if peer_timeout is None:
            peer_timeout = max(cls.peer_timeout, PEER_TIMEOUT_BEATS * heartbeat)
        return cls(heartbeat=heartbeat, peer_timeout=peer_timeout, **kw)

    def __post_init__(self):
        for name in ("heartbeat", "peer_timeout", "reply_timeout", "connect_timeout",
                     "leader_wait", "search_timeout", "search_memory", "sync_timeout",
                     "idle_timeout", "linger", "align_for", "lost_probe", "lost_memory",
                     "max_correction", "probe_tolerance"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.heartbeat > 60:
            raise ValueError("heartbeat must be at most 60 s (the seed: at least once a minute)")
        if self.peer_timeout <= self.heartbeat:
            raise ValueError("peer_timeout must be longer than heartbeat")
        if not 1 <= self.max_id <= 0xFFFF:
            raise ValueError("max_id must be within 1..65535")
        for name in ("max_peers", "max_searches", "forward_burst", "max_own_searches",
                     "text_burst", "texts_per_destination", "max_queued_texts",
                     "sync_probes", "sync_parallel", "max_connections", "max_outgoing",
                     "max_outgoing_per_host", "max_waiting_per_host", "max_messages_per_read",
                     "answer_burst", "max_answer_hosts", "max_connections_per_host",
                     "max_ids_per_host", "max_book"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_peers > PEER_SLOTS:
            raise ValueError(f"max_peers must be at most {PEER_SLOTS}")
        if min(self.election_step, self.sync_interval, self.forward_rate, self.align,
               self.id_quarantine) < 0:
            raise ValueError("election_step, sync_interval, forward_rate, align, id_quarantine "
                             "must be >= 0")


# ---- actions (core -> adapter) --------------------------------------------------------------

@dataclass(frozen=True)
class Connect:
    """Open a TCP connection to address; it is known as conn from now on."""

    conn: int
    address: Address


@dataclass(frozen=True)
class Send:
    """Write data on conn (buffered by the adapter until the connection is up)."""

    conn: int
    data: bytes


@dataclass(frozen=True)
class Close:
    """Flush what was sent on conn, then close it."""

    conn: int


@dataclass(frozen=True)
class Shutdown:
    """Flush what was sent on conn, then half-close it (send EOF); it is still read."""

    conn: int


@dataclass(frozen=True)
class Continue:
    """conn holds whole messages not handled yet (max_messages_per_read): call
    data_received(conn, b"", now) again soon, reading nothing more from it meanwhile (other
    connections and timers go first: a flood on one connection cannot stall the node)."""

    conn: int


# ---- events (core -> application) -----------------------------------------------------------

@dataclass(frozen=True)
class Joined:
    """The leader gave us an ID (and up to four peers)."""

    id: int
    leader: Peer
    peers: tuple[Peer, ...]


@dataclass(frozen=True)
class JoinFailed:
    """Joining did not work: the leader is unreachable, silent, or out of IDs."""

    reason: str


@dataclass(frozen=True)
class PeerJoined:
    """(Leader) a new peer got an ID."""

    peer: Peer


@dataclass(frozen=True)
class PeerLeft:
    """(Leader) a peer's heartbeat stopped; its ID is free again."""

    peer: Peer
    reason: str


@dataclass(frozen=True)
class PeersChanged:
    """Our neighbour list changed."""

    peers: tuple[Peer, ...]


@dataclass(frozen=True)
class Found:
    """A search (ours) was answered by the node with that ID."""

    peer: Peer
    search_id: int


@dataclass(frozen=True)
class NotFound:
    """Our search for an ID got no answer in time."""

    destination_id: int
    search_id: int


@dataclass(frozen=True)
class TextReceived:
    """A Text message from a peer."""

    peer: Peer
    text: str


@dataclass(frozen=True)
class TextSent:
    """A Text we were asked to send went out to the peer with that ID."""

    peer: Peer


@dataclass(frozen=True)
class TextFailed:
    """A Text could not be sent: nobody answered to that ID."""

    destination_id: int
    reason: str


@dataclass(frozen=True)
class ElectionStarted:
    """We started a bully election."""

    reason: str


@dataclass(frozen=True)
class NewLeader:
    """A leader was elected (us, if me is true)."""

    leader: Peer
    me: bool


@dataclass(frozen=True)
class LeaderKept:
    """An election ended with the leader we had."""

    leader: Peer


@dataclass(frozen=True)
class SyncDone:
    """(Leader) a sync round ended: each clock's offset from ours (seconds), the average
    everybody was moved to, the clocks left out of it (outliers: still told their time), those
    that did not answer, and those left alone, with why (contradictory probes, or a correction
    past max_correction)."""

    offsets: dict[int, float]
    average: float
    outliers: tuple[int, ...]
    unanswered: tuple[int, ...]
    left_out: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClockRefused:
    """Our leader told us a time that would move our clock past max_correction: not taken."""

    delta: float
    leader: Peer


@dataclass(frozen=True)
class ClockAdjusted:
    """Our logical clock was corrected by delta seconds (stepped, or slewing at max_slew)."""

    delta: float
    stepped: bool
    offset: float  # the logical clock's target offset from the system clock


class NotLeader(ValueError):
    """Only the leader can do that."""


class NotJoined(ValueError):
    """The node has no ID yet."""


# ---- state -------------------------------------------------------------------------------

@dataclass
class _Conn:
    id: int
    remote: Address
    outgoing: bool
    purpose: str  # in, beat, join, leader, probe, ask, sync, elect, search, forward, send
    opened: float
    framer: Framer
    up: bool = False
    local: Address | None = None
    last_message: float = 0.0
    peer_id: int = 0  # the peer this outgoing connection is for
    queued: list[Message] = field(default_factory=list)  # sent once the connection is up
    close_when_up: bool = False
    messages: int = 0  # whole messages received on it
    relay: tuple[int, Address] | None = None  # a forwarded search: (SearchID, the searcher)
    search: int = 0  # our own search's SearchID, on a connection that carries it
    held: bool = False  # a member's heartbeat connection it half-closed: kept open

    def lingers(self) -> bool:
        """Closed `linger` after its last message, not `idle_timeout`: an incoming connection
        that carried a whole message (the Java clients send one per connection and never
        close; P2P-Client reads until EOF), or ours that carried a search (an answer may come
        back on it)."""
        if self.outgoing:  # (an answer not back within linger is not coming)
            return self.purpose in ("search", "forward", "ask", "askleader", "elect",
                                    "lostprobe")
        return self.messages > 0 and not self.held and not self.framer.pending


@dataclass
class _Member:
    peer: Peer
    last_seen: float
    cursor: int = 0  # NodeResponse rotation: the last ID given to this peer
    told: set[int] = field(default_factory=set)  # IDs this peer has been given
    beat: int | None = None  # the connection its last IAmAlive came on (kept open)


@dataclass
class _Known:
    peer: Peer
    heard: float  # when the peer itself last spoke, or our leader named it (or we heard of it)
    first_hand: bool  # it spoke to us itself, or our leader named it (which vouches for it)


@dataclass
class _Election:
    started: float
    phase: str  # backoff, asking, waiting
    deadline: float
    asked: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    answered: set[int] = field(default_factory=set)
    askers: set[int] = field(default_factory=set)
    searches: set[int] = field(default_factory=set)  # search IDs for higher IDs we do not know
    manual: bool = False


@dataclass
class _Search:
    destination: int
    deadline: float
    text: bytes | None = None  # a Text to send once found
    for_election: bool = False


@dataclass
class _SyncPeer:
    peer: Peer
    conn: int | None = None
    probes: list[clk.Probe] = field(default_factory=list)
    sent_at: float | None = None  # our logical time when the outstanding probe went
    done: bool = False
    reconnects: int = 0
    started: bool = False


@dataclass
class _Sync:
    deadline: float
    peers: dict[int, _SyncPeer]


@dataclass
class _NewTime:
    peer: Peer
    add: float  # their new time = our reference clock + add
    give_up: float
    conn: int | None = None  # a new connection for it, opened when the round ends


class BullyNode:
    """One bully node: the founding leader (leader=None) or a peer joining through a leader."""

    def __init__(self, host: str, port: int, now: float, *, leader: Address | None = None,
                 node_id: int | None = None, config: Config | None = None,
                 system: Callable[[], float] = time.time, clock_offset: float = 0.0,
                 conn_base: int = 0):
        self.config = cfg = config or Config()
        self.host, self.port = host, port
        self.clock = clk.LogicalClock(now, system, clock_offset, cfg.max_slew, cfg.step_threshold)
        self.stats: Counter = Counter()  # drops by reason, and what happened
        self.sent: Counter = Counter()  # messages sent, by name
        self._conns: dict[int, _Conn] = {}
        self._ids = itertools.count(conn_base + 1)  # (a successor node numbers past ours)
        self._actions: list[object] = []
        self._events: deque[object] = deque()
        self.book: OrderedDict[int, _Known] = OrderedDict()  # peers by ID, least recent first
        self.neighbours: dict[int, Peer] = {}
        self.members: dict[int, _Member] = {}  # the leader's table
        # IDs of dropped peers: ID -> (its holder's address, until when nobody else gets it)
        self._quarantine: dict[int, tuple[Address, float]] = {}
        self.leader: Peer | None = None
        self.leader_address: Address | None = None
        self.book_complete = False  # a whole NodeResponse rotation seen (pelotari leaders)
        self._asks_left = 0  # NodeRequests to the leader that may follow an answer at once
        self._leader_conn: int | None = None
        # A liveness probe of the leader is under way: its connection, and when it is alive
        # (its connection up and not reset by then)
        self._leader_probe: float | None = None
        self._probe_conn: int | None = None
        self._next_heartbeat: float | None = None
        self._join_deadline: float | None = None
        self._join_conn: int | None = None
        self._joins_left = 0
        self._dead_leader: int | None = None
        self.election: _Election | None = None
        self._search_ids = itertools.count(1)
        self._searches: dict[int, _Search] = {}
        self._seen: OrderedDict[tuple[int, int], float] = OrderedDict()
        self._tokens = float(cfg.forward_burst)
        self._tokens_at = now
        self.sync: _Sync | None = None
        self._new_times: list[_NewTime] = []
        self._new_time_ref = 0.0  # our clock's offset when the round's average was taken
        self._new_time_due: float | None = None
        self._sync_done: SyncDone | None = None
        self._new_time_not_before = 0.0
        self._lost_leaders: dict[int, tuple[Peer, float]] = {}  # (peer, when to forget it)
        self._next_lost_probe: float | None = None
        self._texts: dict[int, Peer] = {}  # Text connections under way: to whom
        self._pending_claim: tuple[Peer, float] | None = None  # a lower IAmLeader, until
        self._answer_buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._text_buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._text_queue: dict[Address, deque[tuple[Peer, bytes]]] = {}  # texts waiting
        # Connections not opened yet: their host has max_outgoing_per_host of ours already
        self._waiting: OrderedDict[str, deque[_Conn]] = OrderedDict()
        self._no_shows: dict[int, float] = {}  # answered AreYouAlive, never led: until then
        self._last_asked_election = float("-inf")
        self._join_refused = False
        self._next_sync: float | None = None
        if leader is None:
            self.id = node_id if node_id is not None else cfg.max_id
            if not 1 <= self.id <= 0xFFFF:
                raise ValueError("node_id must be within 1..65535")
            self._become_leader(now, announce=False)
        else:
            self.id = 0
            self.leader_address = (leader[0], int(leader[1]))
            self._joins_left = 3
            self._join(now)

    # ---- who we are ----------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader is not None and self.leader.id == self.id and self.id != 0

    def me(self, conn: _Conn | None = None) -> Peer:
        """Our Peer as the wire names it: on a wildcard bind, the address the connection uses."""
        host = self.host
        if host == WILDCARD and conn is not None and conn.local is not None:
            host = conn.local[0]
        return Peer(host, self.port, self.id)

    def peers(self) -> tuple[Peer, ...]:
        """Our neighbours (at most max_peers)."""
        return tuple(self.neighbours[i] for i in sorted(self.neighbours))

    def known(self) -> dict[int, Peer]:
        """Every peer we know of, by ID."""
        return {i: k.peer for i, k in sorted(self.book.items())}

    def time_ms(self, now: float) -> int:
        """Our logical clock, as the wire's Time."""
        return self.clock.read_ms(now)

    # ---- connections -------------------------------------------------------------------

    def accept(self, remote: Address, now: float, local: Address | None = None) -> int | None:
        """An incoming connection from remote to our end `local`: its number, or None to
        refuse it (limits). On a wildcard bind, `local` is the address we are known by on it."""
        cfg = self.config
        incoming = [c for c in self._conns.values() if not c.outgoing]
        mine = [c for c in incoming if c.remote[0] == remote[0]]
        if len(mine) >= cfg.max_connections_per_host:
            # The host's oldest connection with nothing half-read makes room (clients that
            # send one message per connection and never close must not lock their host out);
            # a host whose every connection is mid-message is refused.
            # (One that carried nothing yet may hold a message we have not read: it has a
            # moment's grace before it counts as idle.)
            idle = [c for c in mine if not c.framer.pending and (
                c.messages or now - c.opened >= cfg.linger)]
            if not idle:
                self.stats["connections_refused_host_limit"] += 1
                return None
            self.stats["connections_evicted_host_limit"] += 1
            # Those that carried a message go first (VSP2P opens its heartbeat connection 50 s
            # before it writes on it), then the longest idle.
            victim = min(idle, key=lambda c: (c.messages == 0, c.last_message))
            self._close(victim)
            incoming.remove(victim)
        if len(incoming) >= cfg.max_connections:
            # Full: the host holding the most connections gives up its quietest one, if it
            # holds more than the newcomer's host would then (a few hosts cannot hold every
            # slot against a new one).
            per_host = Counter(c.remote[0] for c in incoming)
            host, most = per_host.most_common(1)[0]
            known = {k.peer.host for k in self.book.values()} | {
                m.peer.host for m in self.members.values()}
            strangers = [c for c in incoming if c.remote[0] not in known]
            if remote[0] in known and strangers:
                # A peer we know (its heartbeat, an IAmLeader) before hosts we know nothing of.
                victim = min(strangers, key=lambda c: c.last_message)
            elif most <= per_host.get(remote[0], 0) + 1:
                self.stats["connections_refused_limit"] += 1
                return None
            else:
                victim = min((c for c in incoming if c.remote[0] == host),
                             key=lambda c: c.last_message)
            self.stats["connections_evicted"] += 1
            self._close(victim)
        conn = _Conn(next(self._ids), (remote[0], int(remote[1])), False, "in", now,
                     Framer(cfg.max_text), up=True, last_message=now,
                     local=(local[0], int(local[1])) if local else None)
        self._conns[conn.id] = conn
        self.stats["connections_accepted"] += 1
        return conn.id

    def connection_made(self, conn_id: int, local: Address, now: float) -> None:
        """Our outgoing connection is up; local is our end of it."""
        conn = self._conns.get(conn_id)
        if conn is None:
            return
        conn.up, conn.local, conn.last_message = True, (local[0], int(local[1])), now
        queued, conn.queued = conn.queued, []
        for msg in queued:
            if msg is _SHUTDOWN:
                self._actions.append(Shutdown(conn.id))
            else:
                self._write(conn, msg(now) if callable(msg) else msg, now)
        if conn.purpose == "leader":
            self._heard_leader(now)
        if conn.purpose == "text":  # written: reported, then closed
            self._events.append(TextSent(self._texts.pop(conn.id)))
            self._close(conn)
            self._next_text(conn.remote, now)
        elif conn.close_when_up:
            self._close(conn)  # a one-message send
        elif conn.purpose == "newtime" and self._new_times:
            self._send_new_times(now)

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        """Bytes from a connection: framed, checked, dispatched; bad input closes it."""
        conn = self._conns.get(conn_id)
        if conn is None:
            return
        try:
            messages = conn.framer.feed(data, self.config.max_messages_per_read)
        except BullyError as e:
            self.stats[f"dropped_{e.reason}"] += 1
            self._close(conn)
            if conn.id == self._join_conn and self._join_deadline is not None:
                self._join_deadline, self._join_conn, self._joins_left = None, None, 0
                self._events.append(JoinFailed(
                    f"{conn.remote[0]}:{conn.remote[1]} is not a bully leader (it answered "
                    f"with bytes that are no bully message: {e})"))
            return
        for msg in messages:
            conn.last_message = now
            conn.messages += 1
            self.stats[f"received_{msg.name}"] += 1
            self._dispatch(conn, msg, now)
            if conn.id not in self._conns:
                return
        try:
            more = conn.framer.ready
        except BullyError:
            more = True  # (the next call counts it and closes)
        if more:
            self._actions.append(Continue(conn.id))

    def eof_received(self, conn_id: int, now: float) -> bool:
        """The other end will send no more. True: keep our side open (a pelotari peer
        half-closes its heartbeat connection and waits for it to close: our process's death
        closes it at once); False: the adapter closes it and reports connection_lost()."""
        conn = self._conns.get(conn_id)
        if conn is None or conn.outgoing or conn.purpose != "beat":
            return False
        conn.held = True
        return True

    def connection_lost(self, conn_id: int, now: float, reset: bool = False) -> None:
        """The other end closed (reset: it reset the connection, as a dead process's kernel
        does to what is written to it), or our connect failed."""
        conn = self._conns.pop(conn_id, None)
        if conn is None:
            return
        if conn.framer.pending:
            self.stats["dropped_truncated"] += 1
        self._lost(conn, now, reset=reset)

    def _connect(self, address: Address, purpose: str, now: float, peer_id: int = 0,
                 paced: bool = False) -> _Conn:
        conn = _Conn(next(self._ids), (address[0], int(address[1])), True, purpose, now,
                     Framer(self.config.max_text), peer_id=peer_id, last_message=now)
        if paced and (address[0] in self._waiting or self._busy(address[0]) >=
                      self.config.max_outgoing_per_host):
            # Opened when one of ours to that host ends (handle_timer): written and closed
            # as if it were open (its messages wait in conn.queued).
            self._waiting.setdefault(address[0], deque()).append(conn)
            self.stats["sends_paced"] += 1
            return conn
        self._conns[conn.id] = conn
        self._actions.append(Connect(conn.id, conn.remote))
        return conn

    def _busy(self, host: str) -> int:
        return sum(1 for c in self._conns.values() if c.outgoing and c.remote[0] == host)

    def _open_waiting(self, now: float) -> None:
        """Paced connections whose host has room now are opened, oldest first."""
        for host in list(self._waiting):
            waiting, room = self._waiting[host], \
                self.config.max_outgoing_per_host - self._busy(host)
            while waiting and room > 0:
                conn = waiting.popleft()
                room -= 1
                conn.opened = conn.last_message = now
                s = self._searches.get(conn.search) if conn.search else None
                if s is not None:  # its time counts from when it goes
                    s.deadline = max(s.deadline, now + self.config.search_timeout)
                self._conns[conn.id] = conn
                self._actions.append(Connect(conn.id, conn.remote))
            if not waiting:
                del self._waiting[host]

    def _room_waiting(self) -> float | None:
        """When the oldest paced connection whose host has room was asked for (due now)."""
        if not self._waiting:
            return None
        busy = Counter(c.remote[0] for c in self._conns.values() if c.outgoing)
        due = [w[0].opened for h, w in self._waiting.items()
               if busy[h] < self.config.max_outgoing_per_host]
        return min(due) if due else None

    def _write(self, conn: _Conn, msg: Message, now: float) -> None:
        if not conn.up:
            conn.queued.append(msg)
            return
        if msg.peer is not None and msg.peer.host == WILDCARD:  # bound to any: name our end
            msg = replace(msg, peer=replace(msg.peer, host=self.me(conn).host))
        if msg.tag == 11 and self.sync is not None:  # the probe's t0: when it really goes
            sp = self.sync.peers.get(conn.peer_id)
            if sp is not None and sp.conn == conn.id:
                sp.sent_at = self.clock.read(now)
        self._actions.append(Send(conn.id, encode(msg, self.config.max_text)))
        self.sent[msg.name] += 1

    def _answer(self, conn: _Conn, msg: Message, now: float) -> None:
        """Answer a request (1, 3, 9) on its connection, then close an incoming one: the
        exchange is over, and clients that read an answer until EOF are not kept waiting."""
        self._write(conn, msg, now)
        if not conn.outgoing:
            self._close(conn)

    def _send_to(self, address: Address, msg: Message, now: float, purpose: str = "send",
                 peer_id: int = 0) -> _Conn | None:
        """One message on a new connection, closed once it is written (None: too many of our
        connections are open already; counted)."""
        outgoing = [c for c in self._conns.values() if c.outgoing]
        if len(outgoing) >= self.config.max_outgoing:
            waiting = [c for c in outgoing if c.up and c.lingers()]
            if not waiting:
                self.stats["dropped_outgoing_limit"] += 1
                return None
            # A search's connection only waits in case an answer comes back on it: the
            # oldest makes room.
            self.stats["outgoing_lingering_closed"] += 1
            self._close(min(waiting, key=lambda c: c.last_message))
        flood = purpose in ("search", "forward")  # bursts (an election searches ~20 IDs)
        if flood and (len(self._waiting.get(address[0], ())) >= self.config.max_waiting_per_host
                      or sum(map(len, self._waiting.values())) >= self.config.max_outgoing):
            # A host that does not take them as fast as they come (or a stranger's ports
            # that never read) holds back only searches to itself: nothing else waits here.
            self.stats["dropped_paced_backlog"] += 1
            return None
        conn = self._connect(address, purpose, now, peer_id, paced=flood)
        self._write(conn, msg, now)
        if purpose == "send":
            self._close(conn, flush=True)
        elif flood:
            # Half-closed once written: a pelotari peer closes at the EOF (its slot, and ours,
            # free at once); VSP2P's answer on this connection still reaches us.
            conn.queued.append(_SHUTDOWN)
        return conn

    def _close(self, conn: _Conn, flush: bool = True) -> None:
        if conn.outgoing and not conn.up:  # not up yet: close once the queue is written
            conn.close_when_up = True
            return
        self._conns.pop(conn.id, None)
        self._actions.append(Close(conn.id))

    def _msg(self, name: str, **fields) -> Message:
        return Message(TAGS[name], Peer(self.host, self.port, self.id), **fields)

    # ---- what arrives ------------------------------------------------------------------

    def _dispatch(self, conn: _Conn, msg: Message, now: float) -> None:
        tag = msg.tag
        if conn.outgoing and (tag in (1, 3, 6, 8, 11, 13) or (
                tag == 9 and conn.purpose not in ("elect", "lostprobe"))):
            # Our own connections carry answers (2, 4, 5, 7, 10, 12, peerbox's echoed 9): a
            # request on one is not answered (it would make us send more than we were sent,
            # on a connection we may have half-closed).
            self.stats["dropped_request_on_own_connection"] += 1
            return
        if tag == 9 and msg.peer.port == self.port and msg.peer.id == self.id and self.id != 0:
            self._are_you_alive_naming_us(conn, now)
            return
        if tag in (3, 5, 8, 9, 10, 11, 12, 13) or (tag == 1 and not conn.outgoing):
            if self.config.check_source and msg.peer.host != conn.remote[0]:
                seen = replace(msg.peer, host=conn.remote[0])
                known = self.book.get(msg.peer.id)
                if tag == 1:
                    # A client that names an address it is not connecting from (peerbox names
                    # getLocalHost(), 127.0.1.1 on Debian): it joins at the host it came from.
                    self.stats["entry_address_rewritten"] += 1
                elif known is not None and known.peer.address == seen.address:
                    self.stats["sender_address_rewritten"] += 1  # that peer, as we know it
                else:
                    # The message names a sender on another host than the one that sent it.
                    self.stats["dropped_forged_source"] += 1
                    return
                msg = replace(msg, peer=seen)
            if tag != 1 and msg.peer.id == self.id and self.id != 0:
                self.stats["dropped_own_id"] += 1
                return
            if tag in (5, 8, 9, 10, 12) and not self._valid_id(msg.peer.id) and \
                    not self._is_leader_zero(msg.peer):
                self.stats["dropped_invalid_id"] += 1
                return
        handler = _HANDLERS[tag]
        handler(self, conn, msg, now)

    def _on_entry(self, conn: _Conn, msg: Message, now: float) -> None:  # 1 -> 2
        if not self.is_leader:
            self.stats["dropped_not_leader"] += 1
            return
        address = msg.peer.address
        member = next((m for m in self.members.values() if m.peer.address == address), None)
        if member is None:
            new_id = self._free_id(address[0], now, address)
            if new_id is None:
                # The 26th joiner: ID 0 (outside 1..25) and no peers means "the network is full".
                self.stats["entry_refused_full"] += 1
                self._answer(conn, Message(2, id=0), now)
                return
            member = _Member(Peer(address[0], address[1], new_id), now)
            self._untell(new_id)
            self.members[new_id] = member
            self._learn(member.peer, now, first_hand=True)
            self._events.append(PeerJoined(member.peer))
        member.last_seen = now
        others = [self.me(conn)] + [m.peer for i, m in sorted(self.members.items())
                                    if i != member.peer.id]
        self._answer(conn, Message(2, id=member.peer.id, peers=tuple(others[:PEER_SLOTS])), now)

    def _is_leader_zero(self, peer: Peer) -> bool:
        """peerbox's and P2P-Client's leaders take ID 0: our leader may speak as 0."""
        return peer.id == 0 and self.leader is not None and self.leader.id == 0 and \
            peer.host == self.leader.host

    def _valid_id(self, peer_id: int) -> bool:
        """IDs are 1..max_id (the seed's 1-25): a message naming another is not believed."""
        return 1 <= peer_id <= self.config.max_id

    def _answer_ok(self, host: str, now: float) -> bool:
        """May a message from `host` make us open a new connection (an answer)?"""
        cfg = self.config
        return self._per_host(self._answer_buckets, host, cfg.answer_burst, cfg.answer_rate,
                              now, "dropped_answer_rate")

    def _take_text_token(self, host: str, now: float) -> bool:
        """May one more Text from `host` be shown?"""
        cfg = self.config
        return self._per_host(self._text_buckets, host, cfg.text_burst, cfg.text_rate, now,
                              "dropped_text_rate")

    def _per_host(self, buckets: OrderedDict, host: str, burst: int, rate: float, now: float,
                  dropped: str) -> bool:
        """A token bucket per host (its use counted under `dropped` when empty); past
        max_answer_hosts hosts, the least recently used are forgotten."""
        tokens, at = buckets.pop(host, (float(burst), now))
        tokens = min(burst, tokens + (now - at) * rate)
        ok = tokens >= 1
        buckets[host] = (tokens - 1 if ok else tokens, now)
        while len(buckets) > self.config.max_answer_hosts:
            buckets.popitem(last=False)
        if not ok:
            self.stats[dropped] += 1
        return ok

    def _untell(self, peer_id: int) -> None:
        """The ID changed hands (or left): every member is to hear of it again."""
        for m in self.members.values():
            m.told.discard(peer_id)

    def _quarantined(self, peer_id: int, address: Address, now: float) -> bool:
        """Whether a dropped peer's ID is still kept for its holder (at another address)."""
        held = self._quarantine.get(peer_id)
        if held is None:
            return False
        if now >= held[1]:
            del self._quarantine[peer_id]
            return False
        return held[0] != address

    def _free_id(self, host: str, now: float, address: Address) -> int | None:
        # A host's dropped peers' IDs (quarantined) count toward its share, but the one it
        # would get back.
        held = sum(1 for i, (a, until) in self._quarantine.items()
                   if a[0] == host and a != address and now < until)
        if sum(1 for m in self.members.values() if m.peer.host == host) + held >= \
                self.config.max_ids_per_host:
            return None
        for i, (held, _until) in list(self._quarantine.items()):
            if held == address and not self._quarantined(i, address, now) and i not in \
                    self.members and i != self.id:
                del self._quarantine[i]
                return i  # a dropped peer joining again gets its own ID back
        # Never an ID its holder may still use: a member's, a dropped peer's (quarantined), or
        # one we heard first-hand lately (a peer that joined another leader).
        # (Claims heard first-hand count at most max_ids_per_host per host: one host naming
        # every ID in Texts would otherwise make the network full.)
        claims: dict[str, list[int]] = {}
        for i, k in reversed(self.book.items()):
            if k.first_hand and now - k.heard < self.config.peer_timeout:
                mine = claims.setdefault(k.peer.host, [])
                if len(mine) < self.config.max_ids_per_host:
                    mine.append(i)
        taken = set(self.members) | {self.id} | {
            i for i in list(self._quarantine) if self._quarantined(i, address, now)} | {
            i for ids in claims.values() for i in ids}
        # IDs below ours first, so the leader stays the highest (as bully wants).
        for candidate in list(range(1, self.id)) + list(range(self.id + 1,
                                                              self.config.max_id + 1)):
            if candidate not in taken:
                return candidate
        return None

    def _on_entry_response(self, conn: _Conn, msg: Message, now: float) -> None:  # 2
        if self._join_deadline is None or conn.remote[0] != self.leader_address[0]:
            self.stats["dropped_unexpected"] += 1
            return
        self._join_deadline = None
        if conn.id == self._join_conn:
            self._close(conn)
        self._join_conn = None
        if msg.id == 0 or msg.id > 0xFFFF:
            self._events.append(JoinFailed("the leader gave no ID: the network is full (or this "
                                           "host holds as many IDs as the leader allows)"))
            return
        self.id = msg.id
        leader = next((p for p in msg.peers if p.address == self.leader_address), None)
        self.leader = leader or Peer(self.leader_address[0], self.leader_address[1], 0)
        for p in msg.peers:
            if p.id != self.id and p.id != 0:
                self._learn(p, now, first_hand=p is leader, vouched=True)
                if p is not leader and len(self.neighbours) < self.config.max_peers:
                    self.neighbours[p.id] = p  # reported by Joined, not PeersChanged
        self._events.append(Joined(self.id, self.leader, self.peers()))
        self._next_heartbeat = now  # the first heartbeat, and NodeRequest, go now
        for p in list(self.neighbours.values()):  # introduce ourselves (they add us)
            self._request_nodes(p, now)

    def _on_node_request(self, conn: _Conn, msg: Message, now: float) -> None:  # 3 -> 4
        if conn.purpose == "stale":
            return
        asker = msg.peer
        self._learn(asker, now, first_hand=True)
        if asker.id not in self.neighbours and len(self.neighbours) < self.config.max_peers \
                and asker.id != 0 and not (self.leader and asker.id == self.leader.id):
            self._add_neighbour(asker)  # it knows us now; we know it
        if self.is_leader:
            m = self.members.get(asker.id)
            if m is not None and m.peer.address != asker.address:
                m = None
            if m is not None:
                m.last_seen = now
            peers = self._rotation(m, asker.id)
        else:
            peers = [p for i, p in sorted(self.neighbours.items()) if i != asker.id]
        self._answer(conn, Message(4, self.me(conn), peers=tuple(peers[:PEER_SLOTS])), now)

    def _rotation(self, member: _Member | None, asker: int) -> list[Peer]:
        """The leader answers a member's NodeRequest with four members it has not told that
        member of yet, highest IDs first (they are the ones an election asks), then the next
        in ID order (wrapping): a peer that keeps asking learns everybody, and new members
        reach it with its next heartbeat."""
        ids = sorted(i for i in self.members if i != asker)
        if member is None or not ids:
            return [self.members[i].peer for i in ids[-PEER_SLOTS:]]
        chosen = sorted((i for i in ids if i not in member.told), reverse=True)[:PEER_SLOTS]
        if len(chosen) < PEER_SLOTS:
            order = [i for i in ids if i > member.cursor] + [i for i in ids if i <= member.cursor]
            fill = [i for i in order if i not in chosen][:PEER_SLOTS - len(chosen)]
            if fill:
                member.cursor = fill[-1]
            chosen += fill
        member.told.update(chosen)
        return [self.members[i].peer for i in chosen]

    def _on_node_response(self, conn: _Conn, msg: Message, now: float) -> None:  # 4
        if not conn.outgoing or conn.purpose not in ("ask", "askleader", "probe"):
            # Only the answer to our own NodeRequest: an unasked peer list is not believed.
            self.stats["dropped_unexpected"] += 1
            return
        from_leader = self.leader_address is not None and conn.outgoing and \
            conn.remote == self.leader_address
        news = any(p.id != self.id and p.id != 0 and (
            p.id not in self.book or self.book[p.id].peer.address != p.address)
            for p in msg.peers)
        for p in msg.peers:
            if p.id != self.id and p.id != 0:
                if not self._learn(p, now, first_hand=False, vouched=from_leader):
                    continue
                if len(self.neighbours) < self.config.max_peers and not (
                        self.leader is not None and p.address == self.leader.address):
                    self._add_neighbour(p)
        if from_leader:
            self._leader_alive(now)
            if conn.purpose == "askleader":
                # A pelotari leader names members we have not heard of first: an answer with
                # nothing new means we know everybody it knows.
                self.book_complete = not news
                if news and self._asks_left > 0:
                    self._asks_left -= 1
                    self._ask_leader(now)  # keep learning, now (one message per connection)
        if conn.outgoing and conn.id in self._conns and conn.purpose in ("ask", "askleader"):
            self._close(conn)

    def _on_alive(self, conn: _Conn, msg: Message, now: float) -> None:  # 5
        sender = msg.peer
        e = self.election
        if e is not None and sender.id in e.asked:  # the answer to our AreYouAlive
            e.answered.add(sender.id)
            self._learn(sender, now, first_hand=True)
            if e.phase == "asking":
                e.phase, e.deadline = "waiting", now + self.config.leader_wait
            if conn.outgoing:
                self._close(conn)
            return
        if conn.purpose == "lostprobe":  # a lost higher ID lives: its IAmLeader follows
            self._lost_leaders.pop(sender.id, None)
            self._close(conn)
            return
        if not self.is_leader:
            # A heartbeat for a leader we are not (any more): no NodeResponse on this
            # connection, so its sender finds out and looks for the leader.
            self.stats["heartbeat_to_non_leader"] += 1
            conn.purpose = "stale"
            self._close(conn)
            return
        m = self.members.get(sender.id)
        if m is not None and m.peer.address == sender.address:
            m.last_seen = now
        elif m is None and 1 <= sender.id <= 0xFFFF and self._register(sender, now):
            m = self.members[sender.id]
        else:
            self.stats["dropped_id_conflict"] += 1
            return
        self._learn(sender, now, first_hand=True)
        if not conn.outgoing and m.beat != conn.id:
            # Kept open (a pelotari peer learns of our death by its closing); a member holds
            # one such connection: the one before is closed.
            old = self._conns.get(m.beat) if m.beat is not None else None
            if old is not None and old.purpose == "beat":
                self._close(old)
            m.beat, conn.purpose = conn.id, "beat"

    def _register(self, peer: Peer, now: float) -> bool:
        """A heartbeat from a peer we did not give an ID (we took over, or it joined a Java
        leader): take it in if its ID is free and its host has room."""
        if any(m.peer.address == peer.address for m in self.members.values()) or \
                sum(1 for m in self.members.values() if m.peer.host == peer.host) >= \
                self.config.max_ids_per_host or len(self.members) >= self.config.max_id + 8 or \
                self._quarantined(peer.id, peer.address, now):
            return False
        self._quarantine.pop(peer.id, None)
        self._untell(peer.id)
        self.members[peer.id] = _Member(peer, now)
        self._events.append(PeerJoined(peer))
        return True

    def _on_search(self, conn: _Conn, msg: Message, now: float) -> None:  # 6
        key = (msg.source_id, msg.search_id)
        if key in self._seen:  # case 1: this search was here already
            self.stats["search_seen"] += 1
            return
        self._remember(key, now)
        searcher = msg.peer
        known = self.book.get(msg.source_id)
        if msg.destination_id == self.id and self.id != 0:  # 2.1: answer the searcher
            direct = searcher.host == conn.remote[0]
            vouched = known is not None and known.peer.address == searcher.address
            # Forwarded by a peer we know, for a searcher we have not heard of yet (a new
            # member): answered too, at most answer_rate per searcher host.
            forwarded = known is None and conn.remote[0] in {
                k.peer.host for k in self.book.values()} | (
                {self.leader.host} if self.leader is not None else set())
            if not (direct or vouched or forwarded):
                # Nobody we know sent it, and the address is not the sender's: a stranger
                # could aim our answer at anyone. Counted, not answered.
                self.stats["dropped_unverified_searcher"] += 1
            elif self._answer_ok(conn.remote[0], now) and (
                    direct or self._answer_ok(searcher.host, now)):
                self._send_to(searcher.address, self._msg("IAmFound", search_id=msg.search_id),
                              now)
            return
        if not (searcher.host == conn.remote[0] or (
                known is not None and known.peer.address == searcher.address)):
            # 2.2 for a searcher that neither sent it nor is known at that address: forwarded,
            # it would aim others' answers at whatever address it names.
            self.stats["search_not_forwarded_unverified"] += 1
            return
        if not self._take_token(now):  # 2.2: forward, at a bounded rate
            self.stats["search_not_forwarded_rate"] += 1
            return
        targets = list(self.neighbours.values())
        if self.is_leader:
            # Neighbour lists are at most four and need not link everybody; the leader knows
            # every member, so a search that reaches it reaches all.
            targets += [m.peer for i, m in self.members.items() if i not in self.neighbours]
        for p in targets:
            if p.address != searcher.address and p.id != msg.source_id:  # not back to the searcher
                c = self._send_to(p.address, msg, now, "forward", p.id)
                if c is not None:
                    c.relay = (msg.search_id, searcher.address)
        self.stats["searches_forwarded"] += 1

    def _remember(self, key: tuple[int, int], now: float) -> None:
        self._seen[key] = now + self.config.search_memory
        while len(self._seen) > self.config.max_searches:
            self._seen.popitem(last=False)
            self.stats["search_memory_evicted"] += 1

    def _take_token(self, now: float) -> bool:
        cfg = self.config
        self._tokens = min(cfg.forward_burst,
                           self._tokens + (now - self._tokens_at) * cfg.forward_rate)
        self._tokens_at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    def _on_found(self, conn: _Conn, msg: Message, now: float) -> None:  # 7
        if conn.relay is not None and conn.relay[0] == msg.search_id and \
                msg.peer.host == conn.remote[0]:
            # VSP2P answers a search on the connection it came on: to us, who forwarded it.
            # Passed on to the searcher (an answer no larger than the search we forwarded).
            target, conn.relay = conn.relay[1], None
            self._close(conn)
            if self._answer_ok(target[0], now):
                self.stats["found_relayed"] += 1
                self._send_to(target, msg, now)
            return
        s = self._searches.get(msg.search_id)
        # From the found node's host, or relayed by a peer we know (hearsay, then).
        relayed = msg.peer.host != conn.remote[0] and self.config.check_source
        if s is None or msg.peer.id != s.destination or (relayed and conn.remote[0] not in {
                k.peer.host for k in self.book.values()} | (
                {self.leader.host} if self.leader is not None else set())):
            self.stats["dropped_unexpected"] += 1
            return
        k = self.book.get(msg.peer.id)
        if k is not None and k.peer.address != msg.peer.address and k.first_hand and \
                now - k.heard < self.config.peer_timeout:
            # That ID lives elsewhere (we heard it there first-hand, lately): the answer is
            # not believed (search IDs are easy to guess).
            self.stats["dropped_id_conflict"] += 1
            return
        del self._searches[msg.search_id]
        self._learn(msg.peer, now, first_hand=not relayed)
        if conn.outgoing and conn.purpose == "search":
            self._close(conn)
        if s.for_election:
            e = self.election
            if e is not None and e.phase == "asking":
                self._ask(msg.peer, now)
            return
        self._events.append(Found(msg.peer, msg.search_id))
        if s.text is not None:
            self._send_text(msg.peer, s.text, now)

    def _on_text(self, conn: _Conn, msg: Message, now: float) -> None:  # 8
        if not self._learn(msg.peer, now, first_hand=True) and msg.peer.id in self.book and \
                self.book[msg.peer.id].peer.address != msg.peer.address:
            self.stats["dropped_id_conflict"] += 1  # another holds that ID: not believed
            return
        if not self._take_text_token(conn.remote[0], now):
            return
        self._events.append(TextReceived(msg.peer, msg.text))

    def _are_you_alive_naming_us(self, conn: _Conn, now: float) -> None:
        """A 9 that names us, not its sender. On our own AreYouAlive's connection: peerbox
        echoing it, which says the same as an IAmAlive from the ID we asked. On a connection
        to us: VSP2P names its receiver; it is answered (on its connection) all the same."""
        if conn.outgoing:
            if conn.purpose in ("elect", "lostprobe") and conn.peer_id:
                self.stats["are_you_alive_echo"] += 1
                k = self.book.get(conn.peer_id)
                asked = k.peer if k is not None else Peer(conn.remote[0], conn.remote[1],
                                                          conn.peer_id)
                self._on_alive(conn, Message(5, asked), now)
            else:
                self.stats["dropped_unexpected"] += 1
            return
        self.stats["are_you_alive_naming_us"] += 1
        self._answer(conn, self._msg("IAmAlive"), now)
        self._asked_election("asked by an unnamed node at " + conn.remote[0], now, 0)

    def _asked_election(self, reason: str, now: float, asker: int) -> None:
        if self.election is not None:
            if asker:
                self.election.askers.add(asker)
        elif self.is_leader and not self._higher_ids():
            return  # nobody above us: we stay
        elif now - self._last_asked_election >= self.config.election_holdoff:
            self._last_asked_election = now
            self._start_election(reason, now, asker=asker)
        else:
            self.stats["election_holdoff"] += 1

    def _on_are_you_alive(self, conn: _Conn, msg: Message, now: float) -> None:  # 9 -> 5
        self._learn(msg.peer, now, first_hand=True)
        self._answer(conn, self._msg("IAmAlive"), now)  # tag 5, never an echo of 9
        self.stats["answered_are_you_alive"] += 1
        if self.is_leader and not self._higher_ids():
            # Nobody above us: the election it starts ends with us; tell the asker so.
            if self._answer_ok(conn.remote[0], now):
                self._send_to(msg.peer.address, self._msg("IAmLeader"), now)
            return
        self._asked_election(f"asked by ID {msg.peer.id}", now, msg.peer.id)

    def _on_leader(self, conn: _Conn, msg: Message, now: float) -> None:  # 10
        new = msg.peer
        self._learn(new, now, first_hand=True)
        if new.id < self.id:
            # Bully: a lower ID claims the lead while we live; we take it (if nobody higher).
            self.stats["leader_claim_lower_id"] += 1
            if self.election is None and \
                    now - self._last_asked_election >= self.config.election_holdoff:
                self._last_asked_election = now
                self._start_election(f"ID {new.id} claimed the lead", now)
            return
        if self.leader is not None and self.election is None and self._dead_leader is None and \
                not self.is_leader and (new.id < self.leader.id or (
                    new.id == self.leader.id and new.address != self.leader.address)):
            # Either elections overlapped (a lower ID announced after a higher one won) or our
            # leader just died and the news of it is still on its way to us. Ask the leader
            # now: if it answers, the claim is ignored; if not, we follow the claim.
            self.stats["leader_claim_below_leader"] += 1
            self._pending_claim = (new, now + self.config.leader_wait)
            if self._leader_probe is None:
                self._probe_leader(now)
            return
        self._follow(new, now)

    def _on_tell_time(self, conn: _Conn, msg: Message, now: float) -> None:  # 11 -> 12
        if self.leader is None or msg.peer.host != self.leader.host:
            self.stats["dropped_not_leader"] += 1
            return
        self._write(conn, self._msg("HereIsMyTime", time_ms=self.clock.read_ms(now)), now)

    def _on_my_time(self, conn: _Conn, msg: Message, now: float) -> None:  # 12
        s = self.sync
        sp = s.peers.get(msg.peer.id) if s is not None else None
        if sp is None or sp.done or sp.sent_at is None or \
                sp.peer.host != msg.peer.host:
            self.stats["dropped_unexpected"] += 1
            return
        sp.probes.append(clk.Probe(sp.sent_at, self.clock.read(now), msg.time_ms))
        sp.sent_at = None
        c = self._conns.get(sp.conn) if sp.conn is not None else None
        if c is not None and c.id != conn.id:
            # Answered on another connection (peerbox does, and then no longer reads ours):
            # the next probe goes on a new one.
            self._close(c)
            c = None
        if len(sp.probes) >= self.config.sync_probes:
            sp.done = True
            if c is not None:
                self._close(c)
            sp.conn = None
            self._sync_next(now)
            return
        if c is None:  # ours was closed (the answer came on a new connection): a new one
            sp.reconnects += 1
            if sp.reconnects > self.config.sync_probes:
                sp.done = True
                self._sync_next(now)
                return
            c = self._connect(sp.peer.address, "sync", now, sp.peer.id)
            sp.conn = c.id
        self._write(c, self._msg("TellMeYourTime"), now)

    def _on_new_time(self, conn: _Conn, msg: Message, now: float) -> None:  # 13
        if self.leader is None or msg.peer.host != self.leader.host or self.is_leader:
            self.stats["dropped_not_leader"] += 1
            return
        delta = msg.time_ms / 1000 - self.clock.read(now)
        if abs(delta) > self.config.max_correction or \
                abs(self.clock.offset(now) + delta) > self.config.max_correction:
            # A wild value (a broken leader, or a Java leader sending a relative time) never
            # moves our clock by more than the sanity bound.
            self.stats["dropped_wild_time"] += 1
            self._events.append(ClockRefused(delta, msg.peer))
            return
        delta, stepped = self.clock.set_to(msg.time_ms / 1000, now)
        self._events.append(ClockAdjusted(delta, stepped, self.clock.target))

    # ---- address book and neighbours ----------------------------------------------------

    def _learn(self, peer: Peer, now: float, first_hand: bool, vouched: bool = False) -> bool:
        """Remember where an ID lives; whether it is believed. A first-hand claim (the peer's
        own message, or our leader naming it: `vouched`) never displaces a live first-hand
        entry at another address (the first owner keeps its ID); hearsay never displaces one,
        nor refreshes it."""
        if not self._valid_id(peer.id) or peer.id == self.id or peer.port == 0:
            return False
        first_hand = first_hand or vouched
        k = self.book.get(peer.id)
        if k is not None and k.peer.address != peer.address:
            live = now - k.heard < self.config.peer_timeout
            if (k.first_hand and live) or not first_hand:
                self.stats["id_conflict"] += 1
                return False
        if k is not None and k.peer.address == peer.address and not first_hand:
            self.book.move_to_end(peer.id)
            return True
        if k is None and len(self.book) >= self.config.max_book:
            protect = set(self.neighbours) | ({self.leader.id} if self.leader else set())
            victim = next((i for i in self.book if i not in protect), None)
            if victim is None:
                return False
            del self.book[victim]
        self.book[peer.id] = _Known(peer, now, first_hand or (k is not None and k.first_hand))
        self.book.move_to_end(peer.id)
        return True

    def _add_neighbour(self, p: Peer) -> None:
        if p.id in self.neighbours or p.id == self.id or p.id == 0:
            return
        if len(self.neighbours) < self.config.max_peers:
            self.neighbours[p.id] = p
            self._events.append(PeersChanged(self.peers()))

    def _drop_neighbour(self, peer_id: int, now: float) -> None:
        if self.neighbours.pop(peer_id, None) is not None:
            for i, k in reversed(self.book.items()):  # refill from the book
                if len(self.neighbours) >= self.config.max_peers:
                    break
                if i not in self.neighbours and i != peer_id and (
                        self.leader is None or i != self.leader.id):
                    self.neighbours[i] = k.peer
            self._events.append(PeersChanged(self.peers()))

    def _request_nodes(self, p: Peer, now: float) -> None:
        conn = self._connect(p.address, "ask", now, p.id)
        self._write(conn, self._msg("NodeRequest"), now)

    # ---- joining and the leader ---------------------------------------------------------

    def _join(self, now: float) -> None:
        conn = self._connect(self.leader_address, "join", now)
        self._write(conn, Message(1, Peer(self.host, self.port)), now)
        self._join_conn = conn.id
        self._join_deadline = now + self.config.connect_timeout + self.config.reply_timeout

    def _heartbeat(self, now: float) -> None:
        """IAmAlive on a connection of its own (kept open until the next, so that a leader's
        death shows at once), and a NodeRequest on another: some leaders read one message per
        connection. Only the IAmAlive says whether the leader lives; the NodeResponse, if
        any, brings news of the members."""
        cfg = self.config
        self._next_heartbeat = now + cfg.heartbeat
        old = self._conns.get(self._leader_conn) if self._leader_conn else None
        if old is not None and not old.up:
            return  # the last one is still connecting: its connect timeout decides
        if old is not None:
            self._close(old)
        conn = self._connect(self.leader.address, "leader", now, self.leader.id)
        self._leader_conn = conn.id
        self._write(conn, self._msg("IAmAlive"), now)
        # Half-closed: a pelotari leader keeps it open while it lives, and closes any other
        # connection soon (P2P-Client reads until EOF).
        conn.queued.append(_SHUTDOWN)  # (a new connection: written once it is up)
        self._asks_left = cfg.max_id // PEER_SLOTS + 2
        self._ask_leader(now)

    def _ask_leader(self, now: float) -> None:
        if sum(1 for c in self._conns.values() if c.purpose == "askleader") < 2:
            conn = self._connect(self.leader.address, "askleader", now, self.leader.id)
            self._write(conn, self._msg("NodeRequest"), now)

    def _probe_leader(self, now: float) -> None:
        """Is the leader alive? IAmAlive on a new connection: refused, not connected in time,
        or reset (what a dead process's kernel answers) means dead; connected and not reset
        within reply_timeout, or any answer, means alive (the seed defines no answer to
        IAmAlive: a leader that keeps it unanswered, or closes, lives)."""
        if self._probe_conn is not None and self._probe_conn in self._conns:
            return
        c = self._connect(self.leader.address, "probe", now, self.leader.id)
        self._write(c, self._msg("IAmAlive"), now)
        c.queued.append(_SHUTDOWN)
        self._probe_conn = c.id
        self._leader_probe = now + self.config.connect_timeout + self.config.reply_timeout

    def _heard_leader(self, now: float) -> None:
        """Our leader lives: its book entry is fresh (not a stranger's to take)."""
        k = self.book.get(self.leader.id) if self.leader is not None else None
        if k is not None and k.peer.address == self.leader.address:
            k.heard = now

    def _leader_alive(self, now: float) -> None:
        """The leader answered or a probe's connection held: it lives."""
        self._heard_leader(now)
        self._leader_probe = None
        self._pending_claim = None  # a lower claim stays ignored
        c = self._conns.get(self._probe_conn) if self._probe_conn is not None else None
        self._probe_conn = None
        if c is not None:
            self._close(c)

    def _leader_failed(self, why: str, now: float) -> None:
        if self.leader is None or self.is_leader:
            return
        self.stats["leader_failed"] += 1
        self._dead_leader = self.leader.id
        if self.leader.id and self.leader.port:
            # Remembered, and asked now and then: a partition that heals, or a leader started
            # again, brings back the highest ID, and bully wants it to lead.
            self._lost_leaders[self.leader.id] = (self.leader, now + self.config.lost_memory)
            self._next_lost_probe = now + self.config.lost_probe
        self._leader_probe, self._probe_conn = None, None
        self._next_heartbeat = None
        c = self._conns.get(self._leader_conn) if self._leader_conn else None
        if c is not None:
            self._close(c)
        self._leader_conn = None
        claim, self._pending_claim = self._pending_claim, None
        if claim is not None and now < claim[1] and claim[0].id > self.id:
            self._follow(claim[0], now)  # the election is over already: its winner told us
            return
        if self.election is None:
            self._start_election(f"the leader {why}", now)

    def _probe_lost(self, now: float) -> None:
        """AreYouAlive to each lost leader above the one we have: one that answers is alive
        (and, leading or not, will announce itself: it is the higher ID)."""
        ours = self.leader.id if self.leader is not None else 0
        for c in [c for c in self._conns.values() if c.purpose == "lostprobe"]:
            self._close(c)  # the last round's, unanswered
        for i, (p, forget) in list(self._lost_leaders.items()):
            if now >= forget or i <= ours or i == self.id:
                del self._lost_leaders[i]
            else:
                self._send_to(p.address, self._msg("AreYouAlive"), now, "lostprobe", i)
        self._next_lost_probe = now + self.config.lost_probe if self._lost_leaders else None

    def _follow(self, new: Peer, now: float) -> None:
        e = self.election
        old = self.leader
        self.election = None
        for sid in (e.searches if e else ()):
            self._searches.pop(sid, None)
        if old is not None and old.address == new.address and old.id == new.id:
            self.leader = new
            if e is not None:
                self._events.append(LeaderKept(new))
            return
        if old is not None and old.id > new.id and old.id != self.id and old.port:
            # Replaced by a lower ID: it may only be cut off from us. Asked now and then.
            self._lost_leaders[old.id] = (old, now + self.config.lost_memory)
            self._next_lost_probe = self._next_lost_probe or now + self.config.lost_probe
        if self.is_leader:
            self.members.clear()
            self.sync = None
            self._new_times.clear()
            self._next_sync = None
        self.leader, self.leader_address = new, new.address
        self._lost_leaders.pop(new.id, None)
        self._no_shows.pop(new.id, None)
        if self._dead_leader is not None and self._dead_leader != new.id:
            self.book.pop(self._dead_leader, None)
        self._dead_leader = None
        self.neighbours.pop(new.id, None)
        c = self._conns.get(self._leader_conn) if self._leader_conn else None
        if c is not None:
            self._close(c)
        self._leader_conn, self._leader_probe, self._probe_conn = None, None, None
        self._next_heartbeat = now  # tell the new leader we are here
        self._events.append(NewLeader(new, False))

    def _become_leader(self, now: float, announce: bool) -> None:
        me = Peer(self.host, self.port, self.id)
        was_leader = self.is_leader
        askers = self.election.askers if self.election else set()
        manual = self.election.manual if self.election else False
        self.election = None
        self.leader, self.leader_address = me, (self.host, self.port)
        self._next_heartbeat, self._leader_probe, self._probe_conn = None, None, None
        c = self._conns.get(self._leader_conn) if self._leader_conn else None
        if c is not None:
            self._close(c)
        self._leader_conn = None
        if not was_leader:
            # Take over the leader's duties: everybody we know is a member, until their
            # heartbeats (which now come to us) stop.
            self.members = {i: _Member(k.peer, now) for i, k in self.book.items()
                            if i != self._dead_leader}
            self._next_sync = now + self.config.sync_interval if self.config.sync_interval \
                else None
        if announce:
            # A new leader tells everybody; a leader re-elected tells those who asked (or, in
            # an election started by hand, everybody again).
            everybody = not was_leader or manual or any(a not in self.members for a in askers)
            targets = [k.peer for i, k in self.book.items() if i != self._dead_leader] \
                if everybody else [self.book[i].peer for i in askers if i in self.book]
            for p in targets:
                self._send_to(p.address, self._msg("IAmLeader"), now)
        if self._dead_leader is not None:
            self.book.pop(self._dead_leader, None)
        self._dead_leader = None
        if not was_leader:
            self._events.append(NewLeader(me, True))

    # ---- election -----------------------------------------------------------------------

    def elect(self, now: float) -> None:
        """Start a bully election by hand."""
        if self.id == 0:
            raise NotJoined("not joined yet")
        if self.election is None:
            self._start_election("asked by hand", now)
            if self.election is not None:
                self.election.manual = True

    def _higher_ids(self, now: float | None = None) -> list[int]:
        shows = {i for i, until in self._no_shows.items() if now is None or now < until}
        return [i for i in self.book if i > self.id and i != self._dead_leader
                and i not in shows]

    def _start_election(self, reason: str, now: float, asker: int = 0) -> None:
        delay = self.config.election_step * len(self._higher_ids(now))  # the highest asks first
        self.election = _Election(now, "backoff", now + delay)
        if asker:
            self.election.askers.add(asker)
        self.stats["elections"] += 1
        self._events.append(ElectionStarted(reason))
        if delay == 0:
            self._ask_higher(now)

    def _ask_higher(self, now: float) -> None:
        e = self.election
        e.phase, e.deadline = "asking", now + self.config.connect_timeout + \
            self.config.reply_timeout
        for i in self._higher_ids(now):
            self._ask(self.book[i].peer, now)
        if not self.book_complete:
            # Higher IDs we do not know may exist: search for them (the seed's way).
            for i in range(self.id + 1, self.config.max_id + 1):
                if i not in self.book and i != self._dead_leader and \
                        now >= self._no_shows.get(i, 0.0) and \
                        len(self._searches) < self.config.max_own_searches:
                    sid = self._search(i, now, for_election=True)
                    if sid is not None:
                        e.searches.add(sid)
        if not e.asked and not e.searches:
            self._become_leader(now, announce=True)

    def _ask(self, p: Peer, now: float) -> None:
        e = self.election
        if p.id in e.asked:
            return
        e.asked.add(p.id)
        if self._send_to(p.address, self._msg("AreYouAlive"), now, "elect", p.id) is None:
            e.failed.add(p.id)

    def _election_timer(self, now: float) -> None:
        e = self.election
        if e.phase == "backoff":
            self._ask_higher(now)
        elif e.phase == "asking":  # nobody higher answered: we lead
            later = [self._searches[i].deadline for i in e.searches if i in self._searches]
            if later and max(later) > now:  # searches still waiting their turn (paced)
                e.deadline = max(later)
                return
            self._become_leader(now, announce=True)
        else:  # a higher ID answered but never announced itself: again, without it
            self.election = None
            for i in e.answered:
                self._no_shows[i] = now + self.config.lost_memory
            self.stats["election_restarted"] += 1
            self._start_election("the higher ID that answered never took the lead", now)

    # ---- search and text ----------------------------------------------------------------

    def search(self, destination_id: int, now: float) -> int | None:
        """Flood a NodeSearch for an ID; its search ID (a Found or NotFound event follows)."""
        if self.id == 0:
            raise NotJoined("not joined yet")
        self._check_destination(destination_id)
        if destination_id == self.id:
            raise ValueError(f"{destination_id} is our own ID")
        return self._search(destination_id, now)

    def _check_destination(self, peer_id: int) -> None:
        if not self._valid_id(peer_id) and not self._leader_is(peer_id):
            # (an answer naming another ID would not be believed)
            raise ValueError(f"an ID is within 1..{self.config.max_id} (0: only a leader "
                             "whose ID is 0)")

    def _leader_is(self, peer_id: int) -> bool:
        return self.leader is not None and self.leader.id == peer_id

    def _search(self, destination: int, now: float, text: bytes | None = None,
                for_election: bool = False) -> int | None:
        if len(self._searches) >= self.config.max_own_searches:
            self.stats["search_refused_limit"] += 1
            return None
        sid = next(self._search_ids) & 0xFFFF or next(self._search_ids) & 0xFFFF
        self._searches[sid] = _Search(destination, now + self.config.search_timeout, text,
                                      for_election)
        self._remember((self.id, sid), now)
        msg = Message(6, Peer(self.host, self.port), source_id=self.id, search_id=sid,
                      destination_id=destination)
        targets = {p.id: p for p in self.neighbours.values()}
        if self.leader is not None and not self.is_leader:
            targets.setdefault(self.leader.id, self.leader)
        if self.is_leader:
            # A leader's neighbours need not link everybody (a founding leader has none); it
            # knows every member, as when it forwards a search.
            for i, m in self.members.items():
                targets.setdefault(i, m.peer)
        k = self.book.get(destination)
        if k is not None:  # known: asked too (it answers if it lives there)
            targets.setdefault(destination, k.peer)
        for p in targets.values():
            c = self._send_to(p.address, msg, now, "search", p.id)  # kept a moment: _on_found
            if c is not None:
                c.search = sid
        if not targets:
            self.stats["search_nobody_to_ask"] += 1
        return sid

    def text(self, destination_id: int, data: bytes, now: float) -> None:
        """Send a Text to the node with that ID (searched for first when not known)."""
        if self.id == 0:
            raise NotJoined("not joined yet")
        if destination_id == self.id:
            raise ValueError(f"{destination_id} is our own ID")
        self._check_destination(destination_id)
        if len(data) > self.config.max_text:
            raise ValueError(f"a text is at most {self.config.max_text} bytes")
        k = self.book.get(destination_id)
        if k is not None:
            self._send_text(k.peer, data, now)
        elif self._leader_is(destination_id) and not self.is_leader:
            self._send_text(self.leader, data, now)  # ID 0: a Java leader, not in the book
        elif self._search(destination_id, now, text=data) is None:
            self._events.append(TextFailed(destination_id, "too many searches under way"))

    def _send_text(self, p: Peer, data: bytes, now: float) -> None:
        busy = sum(1 for c in self._conns.values() if c.purpose == "text" and c.remote == p.address)
        if busy >= self.config.texts_per_destination:
            # The receiver holds at most 16 connections per host: the rest wait their turn.
            if sum(map(len, self._text_queue.values())) >= self.config.max_queued_texts:
                self._events.append(TextFailed(p.id, "too many texts waiting to be sent"))
                return
            self._text_queue.setdefault(p.address, deque()).append((p, data))
            return
        conn = self._send_to(p.address, self._msg("Text", data=data), now, "text", p.id)
        if conn is None:
            self._events.append(TextFailed(p.id, "too many connections open"))
            return
        self._texts[conn.id] = p

    def _next_text(self, address: Address, now: float) -> None:
        """A Text connection to address is done: the next waiting Text goes."""
        waiting = self._text_queue.get(address)
        if waiting:
            p, data = waiting.popleft()
            if not waiting:
                del self._text_queue[address]
            self._send_text(p, data, now)

    # ---- time ---------------------------------------------------------------------------

    def start_sync(self, now: float) -> None:
        """(Leader) poll every member's clock, then tell each its new time."""
        if not self.is_leader:
            raise NotLeader("only the leader synchronises clocks")
        if self.sync is not None:
            return
        peers = {i: _SyncPeer(m.peer) for i, m in self.members.items()}
        if self._next_sync is not None:  # the periodic round counts from this one
            self._next_sync = now + self.config.sync_interval
        self.sync = _Sync(now + self.config.sync_timeout, peers)
        self.stats["sync_rounds"] += 1
        self._sync_next(now)

    def _sync_next(self, now: float) -> None:
        """Probe the next peers, at most sync_parallel at once (answers are timed best when we
        are not busy with others'); end the round when every peer is done."""
        s = self.sync
        busy = sum(1 for sp in s.peers.values() if sp.started and not sp.done)
        for sp in s.peers.values():
            if busy >= self.config.sync_parallel:
                break
            if not sp.started:
                sp.started = True
                busy += 1
                c = self._connect(sp.peer.address, "sync", now, sp.peer.id)
                sp.conn = c.id
                self._write(c, self._msg("TellMeYourTime"), now)
        if all(sp.done for sp in s.peers.values()):
            self._finish_sync(now)

    def _finish_sync(self, now: float) -> None:
        s, self.sync = self.sync, None
        cfg = self.config
        for sp in s.peers.values():
            c = self._conns.get(sp.conn) if sp.conn is not None else None
            if c is not None:
                self._close(c)
        est = {}
        for i, sp in s.peers.items():
            if not sp.probes:
                continue
            if cfg.rtt_blind:  # the Java clients: the answer's time against ours on arrival
                p = sp.probes[0]
                est[i] = clk.Estimate(p.remote_ms / 1000 - p.t1, 0.0, 0.0)
            else:
                e = clk.estimate_offset(sp.probes)
                if e is not None:
                    est[i] = e
        left_out, measured = {}, {i: e.offset for i, e in est.items()}
        if not cfg.rtt_blind:
            for i, e in est.items():
                if e.gap > cfg.probe_tolerance:  # answers at random, or a clock jumping
                    left_out[i] = "contradictory"
                elif abs(e.offset) > cfg.max_correction:
                    left_out[i] = "beyond_max_correction"
                else:
                    continue
                self.stats[f"sync_left_out_{left_out[i]}"] += 1
            est = {i: e for i, e in est.items() if i not in left_out}
        offsets = {self.id: 0.0, **{i: e.offset for i, e in est.items()}}
        if cfg.rtt_blind:
            average, kept = sum(offsets.values()) / len(offsets), set(offsets)
        else:
            # Centred on our own clock: the leader is never the outlier of its own round (with
            # two clocks, a peer further than outlier_bound is told our time, not averaged).
            average, kept = clk.fault_tolerant_average(offsets, cfg.outlier_bound, self.id)
            for i, e in list(est.items()):  # the correction a peer is told, bounded too
                if abs(average - e.offset) > cfg.max_correction:
                    left_out[i] = "beyond_max_correction"
                    self.stats["sync_left_out_beyond_max_correction"] += 1
                    del est[i]
        self._new_time_ref = self.clock.offset(now)
        give_up = now + cfg.align_for
        # Everybody moves to our reference clock + average; a peer's new time is what that
        # will read when the message arrives (half the least round trip from now).
        # Each on a new connection (as the Java clients send it, and read it), opened now so
        # that it is up when its time is due.
        self._new_times = [
            _NewTime(s.peers[i].peer, average + (0.0 if cfg.rtt_blind else e.rtt / 2), give_up,
                     self._connect(s.peers[i].peer.address, "newtime", now, i).id)
            for i, e in est.items()]
        delta_self = average
        if abs(self.clock.offset(now) + delta_self) > cfg.max_correction and not cfg.rtt_blind:
            # Rounds that each move us a little must not add up past the bound either.
            self.stats["sync_own_correction_refused"] += 1
        else:
            stepped = self.clock.correct(delta_self, now)
            self._events.append(ClockAdjusted(delta_self, stepped, self.clock.target))
        # Reported once every peer has been sent its new time.
        self._sync_done = SyncDone(
            {i: round(v, 6) for i, v in {**measured, **offsets}.items()}, average,
            tuple(sorted(set(offsets) - kept - set(left_out))),
            tuple(sorted(i for i in s.peers if i not in est and i not in left_out)),
            dict(sorted(left_out.items())))
        self._send_new_times(now)

    def _reference(self, now: float) -> float:
        """Our clock as it read when the round's average was taken (before our own correction)."""
        return self.clock.system() + self._new_time_ref

    def _send_new_times(self, now: float) -> None:
        """Send the peers their new Time one at a time, sync_gap apart (so that each is read
        by a peer that is not waiting for the CPU behind the others), each when it falls near
        a whole millisecond (the wire has no finer unit), or rounded once align_for has
        passed."""
        cfg = self.config
        ref = self._reference(now)
        while self._new_times and now >= self._new_time_not_before:
            nt = self._new_times[0]
            c = self._conns.get(nt.conn)
            if c is None:  # refused, or timed out: that peer is not told
                self._new_times.pop(0)
                continue
            if not c.up:
                if now < nt.give_up:
                    break  # connection_made() comes back here
                nt.give_up = now + cfg.connect_timeout  # late: sent as soon as it is up
                break
            value = (ref + nt.add) * 1000
            if not (cfg.rtt_blind or abs(value - round(value)) <= cfg.align * 1000
                    or now >= nt.give_up):
                break
            self._new_times.pop(0)
            self._write(c, self._msg("HereIsYourNewTime", time_ms=int(round(value))), now)
            self._close(c)
            if not cfg.rtt_blind:
                self._new_time_not_before = now + cfg.sync_gap
                if self._new_times:
                    self._new_times[0].give_up = now + cfg.sync_gap + cfg.align_for
        self._new_time_due = self._next_new_time(now)
        if not self._new_times and self._sync_done is not None:
            self._events.append(self._sync_done)
            self._sync_done = None

    def _next_new_time(self, now: float) -> float | None:
        if not self._new_times:
            return None
        nt = self._new_times[0]
        c = self._conns.get(nt.conn)
        if c is not None and not c.up:  # connection_made() or its loss comes back first
            return max(nt.give_up, now + 1e-6)
        at = max(now, self._new_time_not_before)
        value = (self._reference(now) + (at - now) + nt.add) * 1000
        crossing = at + (1.0 - (value - value // 1)) / 1000
        return max(min(crossing, nt.give_up), now + 1e-6)  # never due now: time must move

    # ---- timers -------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When handle_timer() next has work (monotonic seconds), or None."""
        cfg = self.config
        due = [self._next_heartbeat, self._leader_probe, self._join_deadline, self._next_sync,
               self._next_lost_probe]
        if self.election is not None:
            due.append(self.election.deadline)
        if self.sync is not None:
            due.append(self.sync.deadline)
        if self._searches:
            due.append(min(s.deadline for s in self._searches.values()))
        if self._seen:
            due.append(next(iter(self._seen.values())))
        if self.is_leader and self.members:
            due.append(min(m.last_seen for m in self.members.values()) + cfg.peer_timeout)
        for c in self._conns.values():
            due.append(c.opened + cfg.connect_timeout if not c.up and c.outgoing
                       else c.last_message + (cfg.linger if c.lingers() else cfg.idle_timeout))
        if self._new_times:
            due.append(self._new_time_due)
        due.append(self._room_waiting())
        due = [d for d in due if d is not None]
        return min(due) if due else None

    def handle_timer(self, now: float) -> None:
        """Everything due by now: heartbeats, timeouts, elections, sync, expiry."""
        cfg = self.config
        if self._join_deadline is not None and now >= self._join_deadline:
            self._join_deadline = None
            c = self._conns.get(self._join_conn) if self._join_conn else None
            if c is not None:
                self._close(c)
            self._joins_left -= 1
            if self._joins_left > 0:
                self._join(now)
            else:
                how = "refused the connection" if self._join_refused else "did not answer"
                self._events.append(JoinFailed(f"the leader at {self.leader_address[0]}:"
                                               f"{self.leader_address[1]} {how}"))
        if self._leader_probe is not None and now >= self._leader_probe:
            c = self._conns.get(self._probe_conn) if self._probe_conn is not None else None
            if c is not None and c.up:
                self._leader_alive(now)  # connected, and no reset since
            else:
                self._leader_failed("did not answer", now)
        if self.election is not None and now >= self.election.deadline:
            self._election_timer(now)
        if self._next_lost_probe is not None and now >= self._next_lost_probe:
            self._probe_lost(now)
        if self._waiting:
            self._open_waiting(now)
        waiting = {c.search for q in self._waiting.values() for c in q if c.search}
        for sid, s in list(self._searches.items()):
            if now >= s.deadline and sid in waiting:
                s.deadline = now + cfg.search_timeout  # not gone yet: it counts from then
            elif now >= s.deadline:
                del self._searches[sid]
                if s.for_election:
                    if self.election is not None:
                        self.election.searches.discard(sid)
                elif s.text is not None:
                    self._events.append(TextFailed(s.destination, "no node answered the search"))
                else:
                    self._events.append(NotFound(s.destination, sid))
        while self._seen and next(iter(self._seen.values())) <= now:
            self._seen.popitem(last=False)
        if self.is_leader:
            for i, m in list(self.members.items()):
                if now >= m.last_seen + cfg.peer_timeout:
                    del self.members[i]
                    if cfg.id_quarantine:
                        self._quarantine[i] = (m.peer.address, now + cfg.id_quarantine)
                        while len(self._quarantine) > cfg.max_book:
                            del self._quarantine[next(iter(self._quarantine))]
                    self._untell(i)
                    self.book.pop(i, None)
                    self.neighbours.pop(i, None)
                    self._events.append(PeerLeft(m.peer, f"no heartbeat for {cfg.peer_timeout:g} s"))
            if self._next_sync is not None and now >= self._next_sync:
                self._next_sync = now + cfg.sync_interval
                if self.sync is None:
                    self.start_sync(now)
        if self.sync is not None and now >= self.sync.deadline:
            self._finish_sync(now)
        if self._new_times and now >= self._new_time_due:
            self._send_new_times(now)
        for c in list(self._conns.values()):
            if not c.up and c.outgoing and now >= c.opened + cfg.connect_timeout:
                self.stats["connect_timeouts"] += 1
                self._conns.pop(c.id)
                self._actions.append(Close(c.id))
                self._lost(c, now, timed_out=True)
            elif c.up and now >= c.last_message + (cfg.linger if c.lingers()
                                                   else cfg.idle_timeout):
                self.stats["connections_linger_closed" if c.lingers()
                           else "connections_idle_closed"] += 1
                self._close(c)
                self._conns.pop(c.id, None)
                self._lost(c, now, idle=True)
        if self._waiting:
            self._open_waiting(now)
        # Last: what ran above may have just given us a leader to greet (_follow).
        if self._next_heartbeat is not None and now >= self._next_heartbeat and \
                self.leader is not None and not self.is_leader:
            self._heartbeat(now)

    def _lost(self, conn: _Conn, now: float, idle: bool = False, timed_out: bool = False,
              reset: bool = False) -> None:
        """A connection ended without our closing it: what that means for its purpose."""
        if conn.purpose == "text" and conn.id in self._texts:
            p = self._texts.pop(conn.id)
            self._events.append(TextFailed(p.id, "timed out connecting" if timed_out
                                           else "the connection was refused"))
            self._next_text(conn.remote, now)
        if conn.id == self._leader_conn:
            self._leader_conn = None
            if not idle and not conn.up and self.leader is not None:
                self._leader_failed("timed out" if timed_out else "refused the connection", now)
            elif not idle and self.leader is not None and not self.is_leader:
                # The leader closed or reset our heartbeat connection: a killed process's
                # kernel does, and so do leaders that read one message and close. A probe
                # on a new connection tells which.
                self._probe_leader(now)
            return
        if conn.purpose == "probe":
            if conn.id == self._probe_conn:
                self._probe_conn = None
                if self.leader is None or self.is_leader or self._leader_probe is None:
                    return
                if not conn.up or reset:
                    # Refused, or reset: a dying process's kernel may still complete the
                    # handshake, then resets what is written.
                    self._leader_failed("refused the connection" if not conn.up
                                        else "reset the connection", now)
                else:
                    self._leader_alive(now)  # read and closed: the leader lives
            return
        if conn.id == self._join_conn and not conn.up:
            self._join_conn = None
            self._join_deadline = now  # failed: the timer retries or gives up
            self._join_refused = not timed_out
            return
        if conn.purpose == "elect" and self.election is not None:
            e = self.election
            if conn.peer_id not in e.answered:
                e.failed.add(conn.peer_id)
                if e.phase == "asking" and e.asked <= e.failed and not e.searches:
                    self._become_leader(now, announce=True)
            return
        if conn.purpose == "newtime" and self._new_times:
            self._send_new_times(now)  # that one is not told; the next may be due
            return
        if conn.purpose == "sync" and self.sync is not None:
            sp = self.sync.peers.get(conn.peer_id)
            if sp is not None and sp.conn == conn.id and not sp.done:
                # A peer that reads one message per connection and closes: its answer may come
                # on a new connection (the round's timeout bounds the wait); once answered,
                # the next probe goes on a new connection.
                sp.conn = None
                if sp.sent_at is not None and conn.up:
                    return
                if conn.up and sp.reconnects < self.config.sync_probes:
                    sp.reconnects += 1
                    c = self._connect(sp.peer.address, "sync", now, sp.peer.id)
                    sp.conn = c.id
                    self._write(c, self._msg("TellMeYourTime"), now)
                else:
                    sp.done = True
                    self._sync_next(now)
            return
        if conn.outgoing and not conn.up and conn.peer_id:
            # A peer we wrote to is gone: it is no neighbour of ours, and, refused (nobody
            # listens there), not where that ID lives (a neighbour refilled from the book
            # would be it again).
            k = self.book.get(conn.peer_id)
            if not timed_out and k is not None and k.peer.address == conn.remote and not (
                    self.leader is not None and self.leader.id == conn.peer_id):
                del self.book[conn.peer_id]
                self.stats["unreachable_forgotten"] += 1
            self._drop_neighbour(conn.peer_id, now)

    # ---- output -------------------------------------------------------------------------

    def actions(self) -> list[object]:
        """Connect, Send and Close actions queued since the last call, in order."""
        out, self._actions = self._actions, []
        return out

    def next_event(self) -> object | None:
        """The oldest undelivered event, or None."""
        return self._events.popleft() if self._events else None


_HANDLERS = {
    1: BullyNode._on_entry, 2: BullyNode._on_entry_response, 3: BullyNode._on_node_request,
    4: BullyNode._on_node_response, 5: BullyNode._on_alive, 6: BullyNode._on_search,
    7: BullyNode._on_found, 8: BullyNode._on_text, 9: BullyNode._on_are_you_alive,
    10: BullyNode._on_leader, 11: BullyNode._on_tell_time, 12: BullyNode._on_my_time,
    13: BullyNode._on_new_time,
}
