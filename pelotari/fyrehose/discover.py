"""Finding a backbone cluster on a LAN with no address typed (docs/protocols/fyrehose-cluster.md,
"Discovery").

Members (`pelotari backbone --cluster NAME --discover --cluster-size N`) are ordinary prototari
nodes: they find every prototari node of the LAN by the seed's handshake, and tell their peers
what they are in a prototari DATA message, the ANNOUNCEMENT (below). A member that knows N - 1
others of its cluster fixes the member list, as if given as --peers, and starts; from then on its
announcements carry the list, so a member restarted later adopts the same one.

Clients (`pelotari pub|sub --discover [NAME]`, `find_cluster()`) are no prototari node: they
listen to the broadcasts (`pelotari?`, UDP 21451), ASK each broadcaster's cluster port, and the
members answer with their announcement (an ANSWER, never larger than the ASK).

One 128-byte layout for the three kinds (ANNOUNCE, ASK, ANSWER); big-endian:

    MAGIC "fyrehose-cluster" (16) VERSION (1) KIND (1) FLAGS (1) SIZE (1) COUNT (1)
    NAME LENGTH (1) DATA PORT (2) BULLY PORT (2) CLUSTER PORT (2) HOST (4) INCARNATION (8)
    TOKEN (16) MEMBERS (5 x 4) NAME (32) RESERVED (4) TAG (16)

Pieces: the codec (`encode`, `decode`, `encode_ask`), the member's sans-IO core
(`MemberDiscovery`), its asyncio adapter on a prototari node (`DiscoveringMember`), the client's
sans-IO core (`ClusterSearch`) and its blocking adapter (`find_cluster`).
"""
import hashlib
import hmac
import ipaddress
import logging
import secrets
import socket
import struct
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

log = logging.getLogger("pelotari.fyrehose.cluster")

MAGIC = b"fyrehose-cluster"
VERSION = 1
ANNOUNCE, ASK, ANSWER = 1, 2, 3
KINDS = {ANNOUNCE: "ANNOUNCE", ASK: "ASK", ANSWER: "ANSWER"}
F_KEYED, F_FIXED = 0x1, 0x2
MAX_MEMBERS = 5
MAX_NAME = 32
TOKEN_SIZE = 16
TAG_SIZE = 16
_LAYOUT = struct.Struct("!16sBBBBBBHHH4sQ16s20s32s4s")
BODY_SIZE = _LAYOUT.size  # 112: what the tag covers
SIZE = BODY_SIZE + TAG_SIZE  # 128, every kind
DISCOVER = b"pelotari?"  # prototari's broadcast (1a), the one datagram a client listens for
BROADCAST_PORT = 21451
CLUSTER_PORT = 2325
INTERVAL = 1.0  # a member's prototari broadcasts and announcements, this often


class BadAnnouncement(ValueError):
    """A datagram that is no valid announcement; str() is the reason counted."""


@dataclass(frozen=True)
class Announcement:
    """One ANNOUNCE, ASK or ANSWER. `members`: the fixed list (sorted), () while a member still
    discovers (and in an ASK); `keyed`: its tag is an HMAC (a member with --cluster-key-file)."""

    kind: int
    name: bytes
    host: str = "0.0.0.0"
    data_port: int = 0
    bully_port: int = 0
    cluster_port: int = 0
    size: int = 0
    incarnation: int = 0
    token: bytes = bytes(TOKEN_SIZE)
    members: tuple[str, ...] = ()
    keyed: bool = False

    @property
    def ports(self) -> tuple[int, int, int]:
        """(data, bully, cluster) ports."""
        return (self.data_port, self.bully_port, self.cluster_port)


def ip_key(host: str) -> int:
    """An IPv4 address as a number (member lists are sorted by it)."""
    return int(ipaddress.IPv4Address(host))


def sort_hosts(hosts) -> tuple[str, ...]:
    """IPv4 addresses in numeric order."""
    return tuple(sorted(hosts, key=ip_key))


def _tag(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).digest()[:TAG_SIZE]


def encode(ann: Announcement, key: bytes | None = None) -> bytes:
    """The 128-byte datagram of an announcement (with key: tagged, and KEYED set)."""
    name = bytes(ann.name)
    if len(name) > MAX_NAME or (not name and ann.kind != ASK):
        raise ValueError(f"a cluster name is 1 to {MAX_NAME} bytes")
    if len(ann.members) > MAX_MEMBERS or len(ann.token) != TOKEN_SIZE:
        raise ValueError("at most 5 members; a 16-byte token")
    members = sort_hosts(ann.members)
    flags = (F_KEYED if key else 0) | (F_FIXED if members else 0)
    body = _LAYOUT.pack(MAGIC, VERSION, ann.kind, flags, ann.size, len(members), len(name),
                        ann.data_port, ann.bully_port, ann.cluster_port,
                        socket.inet_aton(ann.host), ann.incarnation, bytes(ann.token),
                        b"".join(socket.inet_aton(m) for m in members).ljust(4 * MAX_MEMBERS,
                                                                             b"\0"),
                        name.ljust(MAX_NAME, b"\0"), bytes(4))
    return body + (_tag(key, body) if key else bytes(TAG_SIZE))


def encode_ask(token: bytes, name: bytes = b"") -> bytes:
    """A client's ASK (name b"": any cluster)."""
    return encode(Announcement(ASK, name, token=token))


def decode(data: bytes, key: bytes | None = None) -> Announcement:
    """The announcement in data; BadAnnouncement(reason) if it is none. With key, a tag that is
    not the key's HMAC is refused (bad_tag; an untagged one: unkeyed); without, the tag of a
    KEYED one is not checked (a client without the key cannot)."""
    data = bytes(data)
    if len(data) != SIZE:
        raise BadAnnouncement("bad_size")
    (magic, version, kind, flags, size, count, name_len, data_port, bully_port, cluster_port,
     host, incarnation, token, members, name, reserved) = _LAYOUT.unpack_from(data)
    if magic != MAGIC:
        raise BadAnnouncement("bad_magic")
    if version != VERSION:
        raise BadAnnouncement("bad_version")
    if kind not in KINDS:
        raise BadAnnouncement("bad_kind")
    body, tag = data[:BODY_SIZE], data[BODY_SIZE:]
    keyed = bool(flags & F_KEYED)
    if key is not None:
        if not keyed:
            raise BadAnnouncement("unkeyed")
        if not hmac.compare_digest(_tag(key, body), tag):
            raise BadAnnouncement("bad_tag")
    elif not keyed and tag != bytes(TAG_SIZE):
        raise BadAnnouncement("bad_field")
    if (flags & ~(F_KEYED | F_FIXED) or reserved != bytes(4) or name_len > MAX_NAME
            or name[name_len:] != bytes(MAX_NAME - name_len) or count > MAX_MEMBERS
            or members[4 * count:] != bytes(4 * (MAX_MEMBERS - count))
            or bool(flags & F_FIXED) != bool(count)):
        raise BadAnnouncement("bad_field")
    listed = tuple(socket.inet_ntoa(members[4 * i:4 * i + 4]) for i in range(count))
    host = socket.inet_ntoa(host)
    if kind == ASK:
        if (size or count or keyed or data_port or bully_port or cluster_port or incarnation
                or host != "0.0.0.0"):
            raise BadAnnouncement("bad_field")
    else:
        keys = [ip_key(m) for m in listed]
        if (not name_len or not 2 <= size <= MAX_MEMBERS or not all((data_port, bully_port,
                                                                     cluster_port))
                or host == "0.0.0.0" or keys != sorted(set(keys))
                or (count and (count != size or host not in listed))
                or (kind == ANSWER and not count)):
            raise BadAnnouncement("bad_field")
    return Announcement(kind, name[:name_len], host, data_port, bully_port, cluster_port, size,
                        incarnation, token, listed, keyed)


# ---- the member ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Heard:
    """A member of our cluster announced itself (a new one, or restarted): `count` known now."""

    host: str
    count: int


@dataclass(frozen=True)
class Fixed:
    """The member list is fixed: `members` (this one included); how: "counted" (N announced,
    for the settle time) or "adopted" (a majority of a list announced it, `source` one of them)."""

    members: tuple[str, ...]
    how: str
    source: str | None = None


@dataclass(frozen=True)
class TooMany:
    """More backbones announce our cluster than its size: no list is fixed while they do."""

    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Mismatch:
    """A backbone announces our cluster's name with another size, other ports or another key
    setting: it is not counted."""

    host: str
    what: str


@dataclass(frozen=True)
class Waiting:
    """Members announce a fixed list, but not yet a majority of it: we wait for them."""

    lists: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class NotAMember:
    """A majority of the cluster announce a fixed list without us: we cannot join (fatal)."""

    members: tuple[str, ...]


@dataclass(frozen=True)
class Stranger:
    """After the list was fixed, a backbone not in it announces our cluster (said once)."""

    host: str


@dataclass
class _Entry:
    ann: Announcement
    heard: float


@dataclass
class _Peer:
    next_due: float
    unanswered: int = 0
    last_prompt: float = float("-inf")


class MemberDiscovery:
    """A member's discovery, free of sockets and clocks. Its prototari node's events go in
    (peer_joined, peer_left, receive: a DATA message's bytes); announcements to send come out
    (datagrams_to_send: (bytes, peer IP)), with events (next_event) and one timer
    (get_timer / handle_timer). `fixed` is the member list once fixed. `answer` is a client's
    ASK on the cluster port in, the ANSWER (or None) out."""

    def __init__(self, name: bytes, host: str, size: int, ports: tuple[int, int, int], now: float,
                 *, key: bytes | None = None, incarnation: int | None = None,
                 interval: float = INTERVAL, tries: int = 3, expire: float | None = None,
                 settle: float | None = None, max_entries: int = 64,
                 answer_rate: float = 200.0, answer_gap: float = 0.05):
        if not 2 <= size <= MAX_MEMBERS:
            raise ValueError(f"a cluster has 2 to {MAX_MEMBERS} members")
        self.name = bytes(name)
        self.host = host
        self.size = size
        self.ports = tuple(ports)
        self.key = key
        self.incarnation = secrets.randbits(64) if incarnation is None else incarnation
        self.interval = interval
        self.tries = tries
        self.expire = 5 * interval if expire is None else expire
        self.settle = interval if settle is None else settle
        self.max_entries = max_entries
        self.fixed: tuple[str, ...] | None = None
        self.refused: NotAMember | None = None
        self.members: dict[str, _Entry] = {}  # compatible announcers of our cluster (not us)
        self.peers: dict[str, _Peer] = {}  # our prototari peers, by IP
        self.stats: Counter = Counter()
        self._out: list[tuple[bytes, str]] = []
        self._events: deque = deque()
        self._warned: set = set()
        self._set: frozenset = frozenset()
        self._set_since = now
        self._answer_rate = answer_rate
        self._answer_gap = answer_gap
        self._bucket = answer_rate / 2  # (burst: half a second's worth)
        self._bucket_at = now
        self._answered: OrderedDict[str, float] = OrderedDict()

    @property
    def majority(self) -> int:
        return self.size // 2 + 1

    def announcement(self, kind: int = ANNOUNCE, token: bytes = bytes(TOKEN_SIZE)) -> bytes:
        """Our announcement (the fixed list once there is one)."""
        return encode(Announcement(kind, self.name, self.host, *self.ports, self.size,
                                   self.incarnation, token, self.fixed or ()), self.key)

    # ---- the prototari node's events -----------------------------------------------------------

    def peer_joined(self, ip: str, now: float) -> None:
        """A prototari peer registered: announce ourselves to it (now, then `tries` times in
        all unless it announces back: then every interval)."""
        if ip not in self.peers and len(self.peers) >= self.max_entries:
            self.stats["dropped_peers_full"] += 1
            return
        self.peers[ip] = _Peer(next_due=now)

    def peer_left(self, ip: str, now: float) -> None:
        """A prototari peer was removed: forget it (and its announcement)."""
        self.peers.pop(ip, None)
        if self.members.pop(ip, None) is not None:
            self._evaluate(now)

    def receive(self, data: bytes, ip: str, now: float) -> None:
        """A prototari DATA message's bytes from the peer at ip."""
        if not bytes(data[:len(MAGIC)]) == MAGIC:
            self.stats["not_announcement"] += 1  # another application's data: not ours
            return
        try:
            ann = decode(data, self.key)
        except BadAnnouncement as exc:
            self.stats[f"dropped_{exc}"] += 1
            return
        if ann.kind != ANNOUNCE:
            self.stats["dropped_bad_kind"] += 1
        elif ann.host != ip:
            self.stats["dropped_host_mismatch"] += 1  # it speaks for another host
        elif ann.name != self.name:
            self.stats["dropped_other_cluster"] += 1
        elif ann.size != self.size or ann.ports != self.ports or ann.keyed != bool(self.key):
            self.stats["dropped_mismatch"] += 1
            what = (f"--cluster-size {ann.size}" if ann.size != self.size else
                    "ports {}/{}/{}".format(*ann.ports) if ann.ports != self.ports else
                    "a --cluster-key-file" if ann.keyed else "no --cluster-key-file")
            self._warn(("mismatch", ip, what), Mismatch(ip, what))
        else:
            self._accept(ann, ip, now)

    def _accept(self, ann: Announcement, ip: str, now: float) -> None:
        entry = self.members.get(ip)
        if entry is None and len(self.members) >= self.max_entries:
            self.stats["dropped_table_full"] += 1
            return
        self.stats["announcements_in"] += 1
        new = entry is None or entry.ann.incarnation != ann.incarnation
        self.members[ip] = _Entry(ann, now)
        peer = self.peers.get(ip)
        if peer is not None:
            peer.unanswered = 0
            if new and now - peer.last_prompt >= self.interval / 4:
                peer.last_prompt = now  # a new one (or restarted) hears from us at once
                peer.next_due = now
            elif peer.next_due == float("inf"):
                peer.next_due = now + self.interval
        if new:
            self._events.append(Heard(ip, len(self.members)))
        if self.fixed is not None and ip not in self.fixed:
            self._warn(("stranger", ip), Stranger(ip))
        self._evaluate(now)

    def _warn(self, what, event) -> None:
        if what in self._warned:
            return
        if len(self._warned) >= 256:  # (bounded: past it, counted only)
            self.stats["warnings_dropped"] += 1
            return
        self._warned.add(what)
        self._events.append(event)

    # ---- fixing the list ------------------------------------------------------------------------

    def _evaluate(self, now: float) -> None:
        if self.fixed is not None or self.refused is not None:
            return
        lists: dict[tuple[str, ...], set[str]] = {}
        for ip, entry in self.members.items():
            if entry.ann.members:
                lists.setdefault(entry.ann.members, set()).add(ip)
        if lists:  # a list fixed already decides: adopt it, or we are not a member
            self._set = frozenset()  # (no counting, so no settle time, while one is announced)
            affirmed = [m for m, who in lists.items()
                        if len(who) + (self.host in m) >= self.majority]
            mine = [m for m in affirmed if self.host in m]
            if len(mine) == 1:
                self._fix(mine[0], "adopted", min(lists[mine[0]], key=ip_key), now)
            elif mine:
                self._warn(("conflict", tuple(sorted(mine))), Waiting(tuple(sorted(mine))))
            elif affirmed:
                self.refused = NotAMember(affirmed[0])
                self._events.append(self.refused)
            else:
                self._warn(("waiting", tuple(sorted(lists))), Waiting(tuple(sorted(lists))))
            return
        hosts = frozenset(self.members)
        if hosts != self._set:
            self._set, self._set_since = hosts, now
        if len(hosts) + 1 > self.size:
            self._warn(("too_many", hosts), TooMany(sort_hosts(hosts | {self.host})))
        elif len(hosts) + 1 == self.size and now >= self._set_since + self.settle:
            self._fix(sort_hosts(hosts | {self.host}), "counted", None, now)

    def _fix(self, members: tuple[str, ...], how: str, source: str | None, now: float) -> None:
        self.fixed = members
        self._events.append(Fixed(members, how, source))
        for ip, peer in self.peers.items():  # every member hears the list at once
            if ip in self.members:
                peer.next_due = now

    # ---- timers ---------------------------------------------------------------------------------

    def get_timer(self) -> float:
        """When handle_timer() next has work."""
        when = float("inf")
        for peer in self.peers.values():
            when = min(when, peer.next_due)
        for entry in self.members.values():
            when = min(when, entry.heard + self.expire)
        if (self.fixed is None and self.refused is None
                and len(self._set) + 1 == self.size):
            when = min(when, self._set_since + self.settle)
        return when

    def handle_timer(self, now: float) -> None:
        """Announce to the peers due, forget announcements gone quiet, fix the list if due."""
        for ip, entry in list(self.members.items()):
            if now >= entry.heard + self.expire:
                del self.members[ip]
                self.stats["expired"] += 1
        self._evaluate(now)  # (first: a list fixed now goes out in this round)
        for ip, peer in self.peers.items():
            if now < peer.next_due:
                continue
            known = ip in self.members
            if known or peer.unanswered < self.tries:
                self._out.append((self.announcement(), ip))
                self.stats["announcements_out"] += 1
                peer.unanswered += not known
                peer.next_due = now + self.interval
            else:  # not a backbone of ours: it has been told enough
                peer.next_due = float("inf")

    # ---- clients' ASKs (on the cluster port) -------------------------------------------------

    def answer(self, data: bytes, source: tuple[str, int], now: float) -> bytes | None:
        """The ANSWER to a client's ASK (as large as it), or None: nothing fixed yet, not an
        ASK, another cluster's name, or over the rate (one per source per answer_gap, and
        answer_rate in all)."""
        if self.fixed is None:
            self.stats["asks_before_fixed"] += 1
            return None
        self._bucket = min(self._answer_rate / 2,
                           self._bucket + (now - self._bucket_at) * self._answer_rate)
        self._bucket_at = now
        last = self._answered.get(source[0])
        if self._bucket < 1 or (last is not None and now - last < self._answer_gap):
            self.stats["asks_rate_limited"] += 1
            return None
        try:
            ask = decode(data)
        except BadAnnouncement as exc:
            self.stats[f"asks_dropped_{exc}"] += 1
            return None
        if ask.kind != ASK:
            self.stats["asks_dropped_bad_kind"] += 1
            return None
        if ask.name and ask.name != self.name:
            self.stats["asks_other_cluster"] += 1
            return None
        self._bucket -= 1
        self._answered[source[0]] = now
        self._answered.move_to_end(source[0])
        while len(self._answered) > 1024:
            self._answered.popitem(last=False)
        self.stats["asks_answered"] += 1
        return self.announcement(ANSWER, ask.token)

    # ---- output -------------------------------------------------------------------------------

    def datagrams_to_send(self) -> list[tuple[bytes, str]]:
        """Announcements queued since the last call: (bytes, peer IP)."""
        out, self._out = self._out, []
        return out

    def next_event(self):
        """The oldest undelivered event, or None."""
        return self._events.popleft() if self._events else None


class DiscoveringMember:
    """A member's discovery on a prototari node (pelotari.prototari.Node): `await
    DiscoveringMember.start(core, interface=..., host=...)`, `await wait_fixed()`, then it keeps
    announcing (the fixed list) until `await close()`. `answer` is for the cluster port's
    ASKs. Events go to on_event (the core's, and the node's NodeWarning)."""

    def __init__(self, core: MemberDiscovery, node, on_event: Callable[[object], None]):
        import asyncio

        self.core = core
        self.node = node
        self.on_event = on_event
        self.done = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    @classmethod
    async def start(cls, core: MemberDiscovery, *, interface: str | None = None,
                    host: str | None = None,
                    on_event: Callable[[object], None] = lambda ev: None,
                    prototari=None) -> "DiscoveringMember":
        """Start the prototari node (broadcasting every core.interval; `prototari`: a
        pelotari.prototari.Config to start from) and the discovery."""
        from pelotari.prototari import node as pnode
        from pelotari.prototari.core import Config

        cfg = replace(prototari or Config(), broadcast_interval=core.interval)
        node = await pnode.Node.start(cfg, interface=interface, host=host)
        return cls(core, node, on_event)

    async def _run(self) -> None:
        from pelotari.prototari.core import Message, PeerJoined, PeerLeft

        core, node = self.core, self.node
        try:
            while not node.closed:
                now = time.monotonic()
                wait = max(0.0, min(core.get_timer() - now, 3600.0))
                ev = await node.next_event(wait)
                now = time.monotonic()
                if isinstance(ev, PeerJoined):
                    core.peer_joined(ev.peer[0], now)
                elif isinstance(ev, PeerLeft):
                    core.peer_left(ev.peer[0], now)
                elif isinstance(ev, Message):
                    core.receive(ev.data, ev.peer[0], now)
                elif ev is not None:
                    self.on_event(ev)  # a NodeWarning
                core.handle_timer(now)
                for data, ip in core.datagrams_to_send():
                    try:
                        node.send((ip, node.config.unicast_port), data)
                    except KeyError:
                        core.stats["send_not_peer"] += 1  # it left meanwhile
                while (out := core.next_event()) is not None:
                    self.on_event(out)
                if core.fixed is not None or core.refused is not None:
                    self.done.set()
        except Exception:  # noqa: BLE001 (a bug: said, not silent; wait_fixed raises it)
            log.exception("discovery stopped")
            raise
        finally:
            self.done.set()

    async def wait_fixed(self) -> tuple[str, ...]:
        """The member list, once fixed; NotAMember's members as ValueError if we are not one,
        RuntimeError if the node stopped first."""
        await self.done.wait()
        if self.core.refused is not None:
            members = ", ".join(self.core.refused.members)
            raise ValueError(f"cluster {self.core.name.decode(errors='replace')!r} has fixed "
                             f"its members ({members}) and this host ({self.core.host}) is not "
                             "one of them")
        if self.core.fixed is None:
            if (self._task.done() and not self._task.cancelled()
                    and self._task.exception() is not None):
                raise self._task.exception()
            raise RuntimeError("discovery stopped")
        return self.core.fixed

    def answer(self, data: bytes, source: tuple[str, int]) -> bytes | None:
        """The ANSWER to an ASK that came to the cluster port (or None)."""
        return self.core.answer(data, source, time.monotonic())

    async def close(self) -> None:
        """Stop announcing; close the prototari node."""
        self._task.cancel()
        await self.node.close()
        try:
            await self._task
        except BaseException:  # noqa: BLE001 (cancelled, or what it ended with)
            pass


# ---- the client ---------------------------------------------------------------------------------

class DiscoverError(Exception):
    """No cluster found (or several, with no name to choose): one line saying why."""


@dataclass
class _Found:
    ann: Announcement
    hosts: set = field(default_factory=set)


class ClusterSearch:
    """A client's search, free of sockets and clocks: prototari broadcasts heard (`heard`) and
    answers to our ASKs (`answered`) in; ASKs out (datagrams_to_send: (bytes, (ip, port)));
    `result` is the members' data addresses once a majority of one cluster's members answered
    with the same list (`name` None: any cluster, DiscoverError if several answer)."""

    def __init__(self, name: bytes | None, now: float, *, key: bytes | None = None,
                 cluster_port: int = CLUSTER_PORT, ask_interval: float = 0.5,
                 max_hosts: int = 256):
        self.name = bytes(name) if name else None
        self.key = key
        self.cluster_port = cluster_port
        self.ask_interval = ask_interval
        self.max_hosts = max_hosts
        self.token = secrets.token_bytes(TOKEN_SIZE)
        self.asked: OrderedDict[str, float] = OrderedDict()
        self.found: dict[tuple, _Found] = {}
        self.names: set[bytes] = set()
        self.result: tuple[tuple[str, int], ...] | None = None
        self.stats: Counter = Counter()
        self._out: list[tuple[bytes, tuple[str, int]]] = []

    def heard(self, data: bytes, ip: str, now: float) -> None:
        """A datagram on prototari's broadcast port: a `pelotari?` gets its sender an ASK (at
        most one per ask_interval)."""
        if bytes(data) != DISCOVER:
            self.stats["dropped_not_discover"] += 1
            return
        self.stats["broadcasts"] += 1
        last = self.asked.get(ip)
        if last is not None and now - last < self.ask_interval:
            return
        self.asked[ip] = now
        self.asked.move_to_end(ip)
        while len(self.asked) > self.max_hosts:
            self.asked.popitem(last=False)
        self._out.append((encode_ask(self.token, self.name or b""), (ip, self.cluster_port)))
        self.stats["asks"] += 1

    def answered(self, data: bytes, source: tuple[str, int], now: float) -> None:
        """A datagram on our ASK socket."""
        if source[0] not in self.asked or source[1] != self.cluster_port:
            self.stats["dropped_not_asked"] += 1
            return
        try:
            ann = decode(data, self.key)
        except BadAnnouncement as exc:
            self.stats[f"dropped_{exc}"] += 1
            return
        if ann.kind != ANSWER or not hmac.compare_digest(ann.token, self.token):
            self.stats["dropped_not_ours"] += 1
            return
        if ann.host != source[0]:
            self.stats["dropped_host_mismatch"] += 1
            return
        if self.name is not None and ann.name != self.name:
            self.stats["dropped_other_cluster"] += 1
            return
        self.stats["answers"] += 1
        group = (ann.name, ann.members, ann.data_port)
        found = self.found.get(group)
        if found is None:
            if len(self.found) >= 64:
                self.stats["dropped_too_many_clusters"] += 1
                return
            found = self.found[group] = _Found(ann)
            self.names.add(ann.name)
        found.hosts.add(ann.host)
        if self.result is None and len(found.hosts) >= ann.size // 2 + 1:
            if self.name is None and len(self.names) > 1:
                names = ", ".join(sorted(repr(n.decode(errors="replace")) for n in self.names))
                raise DiscoverError(f"several backbone clusters answer on this LAN ({names}): "
                                    "give --discover NAME")
            self.result = tuple((m, ann.data_port) for m in ann.members)
            self.cluster = ann.name

    def datagrams_to_send(self) -> list[tuple[bytes, tuple[str, int]]]:
        """ASKs queued since the last call."""
        out, self._out = self._out, []
        return out


def find_cluster(name: str | bytes | None = None, timeout: float = 10.0, *,
                 key: bytes | None = None, cluster_port: int = CLUSTER_PORT,
                 broadcast_port: int = BROADCAST_PORT) -> tuple[tuple[str, int], ...]:
    """The data addresses ((host, port), ...) of a backbone cluster's members on this LAN
    (`name` None: the one cluster that answers); DiscoverError after timeout seconds.

    Passive: it listens to prototari's broadcasts (UDP broadcast_port, shared with any
    prototari node of this host) and ASKs each broadcaster's cluster port; it is never a
    prototari node."""
    if isinstance(name, str):
        name = name.encode()
    now = time.monotonic()
    search = ClusterSearch(name or None, now, key=key, cluster_port=cluster_port)
    listen = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ask = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            listen.bind(("", broadcast_port))
        except OSError as exc:
            raise DiscoverError(f"cannot listen for prototari broadcasts on UDP port "
                                f"{broadcast_port}: {exc.strerror or exc} (a program holds it "
                                "without sharing it): give the members' addresses (-b)") from None
        ask.bind(("", 0))
        return _search(search, listen, ask, now + timeout, name, timeout)
    finally:
        listen.close()
        ask.close()


def _search(search: ClusterSearch, listen, ask, deadline: float, name, timeout) -> tuple:
    import select

    while search.result is None:
        now = time.monotonic()
        if now >= deadline:
            what = f"cluster {name.decode(errors='replace')!r}" if name else "cluster"
            if not search.stats["broadcasts"]:
                why = "no prototari broadcast (`pelotari?`) reached this host"
            elif not search.stats["answers"]:
                why = (f"{len(search.asked)} host(s) broadcast, none answered as a member on UDP "
                       f"port {search.cluster_port}")
            else:
                why = "the members that answered are not a majority of their cluster"
            raise DiscoverError(f"no backbone {what} found on this LAN within {timeout:g} s "
                                f"({why}; members run `pelotari backbone --cluster NAME "
                                "--discover`)")
        ready, _, _ = select.select([listen, ask], [], [], deadline - now)
        for sock in ready:
            try:
                data, source = sock.recvfrom(2048)
            except OSError:  # an ICMP error for an ASK to a host with no member
                search.stats["receive_errors"] += 1
                continue
            if sock is listen:
                search.heard(data, source[0], time.monotonic())
            else:
                search.answered(data, source[:2], time.monotonic())
        for data, to in search.datagrams_to_send():
            try:
                ask.sendto(data, to)
            except OSError:
                search.stats["send_errors"] += 1
    return search.result


def read_key(path: str) -> bytes:
    """A --cluster-key-file's key (stripped; at least 16 bytes): ValueError with the reason."""
    try:
        with open(path, "rb") as f:
            key = f.read().strip()
    except OSError as exc:
        raise ValueError(f"{exc.strerror}: {path}") from None
    if len(key) < 16:
        raise ValueError("the key is at least 16 bytes")
    return key


__all__ = ["ANNOUNCE", "ANSWER", "ASK", "Announcement", "BadAnnouncement", "ClusterSearch",
           "DiscoverError", "DiscoveringMember", "Fixed", "Heard", "MemberDiscovery", "Mismatch",
           "NotAMember", "Stranger", "TooMany", "Waiting", "decode", "encode", "encode_ask",
           "find_cluster", "read_key"]
