"""Sans-IO fyrehose client: datagrams, source address and `now` in; datagrams and events out.

Client rules of the seed are cited as (C1)..(C6). Sockets live in client.py and aio.py.
"""
import logging
import os
from collections import OrderedDict, defaultdict, deque
from dataclasses import dataclass, replace
from typing import Deque, Dict, List, Optional, Tuple

from pelotari.fyrehose.journal import LOST, MESSAGE, RESET, DUPLICATE, GapTracker, Journal
from pelotari.fyrehose import codec
from pelotari.fyrehose.events import (BackboneDown, BackboneMoved, BackboneUp, Event, Lost,
                                      Message, NoQuorum, PublishConfirmed, PublishFailed,
                                      Resync)

log = logging.getLogger("pelotari.fyrehose.client")

Address = Tuple[str, int]


MAX_WAIT = 86400.0 * 365  # longest timeout a client waits: a year (threads cannot wait forever)


def check_wait(timeout: float) -> float:
    """timeout if it is a number of seconds a client can wait (0..MAX_WAIT), else ValueError."""
    if not 0 <= timeout <= MAX_WAIT:  # also refuses NaN
        raise ValueError(f"timeout must be within 0..{MAX_WAIT:g} seconds")
    return timeout


@dataclass(frozen=True)
class ClientConfig:
    """Client behaviour and limits; the defaults are documented in docs/protocols/fyrehose.md."""

    flags: int = 0  # NOSUBSCRIBE / NOJOURNAL
    keepalive_interval: float = 1.0  # (C1) at least every second
    journal_size: int = 4096  # DELIVERs kept to answer FORWARDs
    request_delay: float = 0.02  # wait this long for reordered DELIVERs before a REQUEST
    request_backoff: float = 2.0
    request_retries: int = 4  # REQUESTs after the first before a gap is reported Lost
    max_request_range: int = 1024
    max_gap: int = 65536  # a larger jump is a Resync, not a gap
    max_held: int = 65536  # messages held behind gaps before the oldest gap is given up
    max_held_bytes: int = 16 << 20  # ... and their DATA bytes
    publish_timeout: float = 2.0
    # Quiet seconds before asking peers for what may follow the highest sequence (0: never).
    # Off by default: peers' answers would then move the highest sequence (docs: Security).
    tail_probe: float = 0.0
    tail_probe_range: int = 64
    max_pending_publishes: int = 65536
    backbone_silence: float = 3.0  # seconds without ACK before BackboneDown
    # Packing extension: 0 = plain seed client. Otherwise the largest packed datagram this
    # client accepts (announced with PACKED in every KEEPALIVE) and packs publish_many() into.
    pack: int = 0
    max_pack_frames: int = 1024  # most frames publish_many() puts in one packed PUSH
    # Repair served to one requester (C4): a token bucket in bytes of DELIVERs, so neither a
    # forged FORWARD nor a greedy peer can turn this client into a firehose at one address.
    serve_rate: float = 8 << 20  # bytes per second
    serve_burst: int = 2 << 20  # bytes at once (a whole 1,024-message REQUEST of 1 KiB each)
    serve_requesters: int = 1024  # requesters whose budget is remembered (least recent go)
    # Backbone-cluster extension (docs/protocols/fyrehose-cluster.md): the members' data
    # addresses. Empty: a seed client of one backbone. Else the client follows the active one:
    # KEEPALIVEs carry CLUSTER and go every cluster_keepalive; after cluster_silence without
    # an ACK it QUERYs every member (every cluster_keepalive) and moves to the active of a
    # newer epoch once that one answers a QUERY itself.
    cluster: Tuple[Address, ...] = ()
    cluster_keepalive: float = 0.05
    cluster_silence: float = 0.15
    # After a move, the gap below the new active's first DELIVER (the old active's last
    # messages, and the part of its reservation it never used) is repaired from journals for
    # this long, then given up as Lost(reason="failover"): journals answer in a round trip.
    failover_repair: float = 0.15

    def __post_init__(self):
        check_wait(self.publish_timeout)
        if not 0 < self.keepalive_interval <= 1.0:
            raise ValueError("keepalive_interval must be within (0, 1] seconds (seed rule C1)")
        if not 0 <= self.flags < 1 << 48:
            raise ValueError("flags must fit in 48 bits")
        if self.pack and not codec.HEADER_SIZE <= self.pack <= codec.MAX_DATAGRAM:
            raise ValueError(f"pack must be 0 or within {codec.HEADER_SIZE}..{codec.MAX_DATAGRAM}")
        if self.serve_rate < 0 or self.serve_burst < 0 or self.serve_requesters < 1:
            raise ValueError("serve_rate and serve_burst must be >= 0, serve_requesters >= 1")
        if self.max_pack_frames < 1:
            raise ValueError("max_pack_frames must be at least 1")
        if len(self.cluster) > codec.MAX_MEMBERS * 2:
            raise ValueError("a cluster has at most 10 addresses here")
        check_wait(self.failover_repair)
        if not 0 < self.cluster_keepalive <= 1.0 or not self.cluster_silence > 0:
            raise ValueError("cluster_keepalive must be within (0, 1] s, cluster_silence > 0")


MAX_HOLD = 8192  # DELIVERs from another member kept until it answers as the new active
HOLD_FOR = 0.5  # ... for at most this long (seconds): a new active answers in a round trip


class ClientCore:
    """The protocol state of one fyrehose client, free of sockets and clocks."""

    def __init__(self, backbone: Address, now: float, config: Optional[ClientConfig] = None):
        self.backbone = (backbone[0], int(backbone[1]))
        # Where the backbone's datagrams come from: its address, until a KEEPALIVE-ACK carrying
        # one of our unguessable tokens arrives from another (a multi-homed host, or a backbone
        # reached at 0.0.0.0 that answers from 127.0.0.1).
        self.backbone_source: Address = self.backbone
        self.config = cfg = config or ClientConfig()
        self.journal = Journal(cfg.journal_size)
        self.tracker = GapTracker(
            max_gap=cfg.max_gap, max_held=cfg.max_held,
            max_held_bytes=cfg.max_held_bytes, max_request_range=cfg.max_request_range,
            request_delay=cfg.request_delay, backoff=cfg.request_backoff,
            retries=cfg.request_retries)
        self._out: List[Tuple[bytes, Address]] = []
        self._events: Deque[Event] = deque()
        self._client_id = os.urandom(8)
        self._keepalive_count = 0
        self._keepalives_sent: Dict[bytes, float] = {}
        self._next_keepalive = now
        self._last_ack: Optional[float] = None
        self._started = now
        self._up: Optional[bool] = None  # unknown until the first ACK or silence
        self.rtt: Optional[float] = None
        self._next_publish_id = 1
        self._pending_by_data: Dict[bytes, Deque[int]] = defaultdict(deque)
        self._pending: Dict[int, Tuple[float, bytes]] = {}
        self._deadlines: Deque[Tuple[float, int]] = deque()
        self._next_probe: Optional[float] = None
        self._probes = 0
        self._probe_range: Optional[Tuple[int, int]] = None  # last tail probe, still answerable
        self._serve_budget: "OrderedDict[Address, List[float]]" = OrderedDict()
        self.stats: Dict[str, int] = defaultdict(int)
        # The backbone cluster (cfg.cluster): the epoch followed; the QUERY round under way
        # (its token, unguessable: an INFO is believed only with it).
        self.members = tuple((a[0], int(a[1])) for a in cfg.cluster)
        self.epoch = 0
        # The last rounds' (late answers count: a client behind on its socket reads them after
        # it sent newer rounds).
        self._query_tokens: Deque[bytes] = deque(maxlen=16)
        self._next_query: Optional[float] = now if self.members else None
        self._last_query = float("-inf")
        self._queries = 0
        # A failover's gap: the highest SEQUENCE before the move (until the new active's first
        # DELIVER), the gap (first, last, give up at) being repaired, the range given up.
        self._moved_from: Optional[int] = None
        self._failover_gap: Optional[Tuple[int, int, float]] = None
        self._failover_lost: Optional[Tuple[int, int]] = None
        # DELIVERs from another member, kept until it proves to be the new active (_hold).
        self._held: List[Tuple[int, bytes, float]] = []  # (sequence, data, when)
        self._held_from: Optional[Address] = None
        self._said_no_quorum = False

    @property
    def clustered(self) -> bool:
        """Whether this client follows a backbone cluster."""
        return bool(self.members)

    @property
    def subscribed(self) -> bool:
        """Whether this client asks the backbone for DELIVERs."""
        return not self.config.flags & codec.NOSUBSCRIBE

    @property
    def journaling(self) -> bool:
        """Whether this client keeps a journal and serves FORWARDs."""
        return not self.config.flags & codec.NOJOURNAL

    # ---- input ---------------------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None:
        """Handle one datagram from addr; malformed ones are counted and dropped."""
        self.stats["datagrams_in"] += 1
        try:
            # Only a client that asked for packed DELIVERs reads more than one frame.
            packets = codec.decode_pack(data) if self.config.pack else (codec.decode(data),)
        except codec.CodecError as exc:
            self.stats["dropped_" + exc.reason] += 1
            log.debug("dropped datagram from %s:%s: %s", addr[0], addr[1], exc)
            return
        live = addr == self.backbone_source  # live DELIVERs come from the backbone alone
        if len(packets) > 1:
            if type(packets[0]) is not codec.Deliver:  # a pack of PUSHes belongs to the backbone
                self.stats["dropped_unexpected_type"] += 1
                log.debug("dropped a pack of PUSHes from %s:%s", addr[0], addr[1])
                return
            self.stats["packs_in"] += 1
            for packet in packets:
                self._on_deliver(packet.sequence, bytes(packet.data), now, live, addr)
            return
        packet = packets[0]
        kind = type(packet)
        if kind is codec.Deliver:
            self._on_deliver(packet.sequence, bytes(packet.data), now, live, addr)
        elif kind is codec.Forward:
            self._on_forward(packet, addr, now)
        elif kind is codec.KeepaliveAck:
            self._on_ack(packet.token, addr, now)
        elif kind is codec.Info and self.clustered:
            self._on_info(packet, (addr[0], int(addr[1])), now)
        else:
            self.stats["dropped_unexpected_type"] += 1
            log.debug("dropped unexpected %s from %s:%s", kind.__name__, addr[0], addr[1])

    def _solicited(self, seq: int) -> bool:
        """Whether a DELIVER from a peer may be believed: only for a sequence we REQUESTed and
        still miss (so never past the highest seen), or in the last tail probe's range."""
        if self.tracker.requested(seq):
            return True
        probe = self._probe_range
        return probe is not None and (seq - probe[0]) % (1 << 48) <= (probe[1] - probe[0])

    def _on_deliver(self, seq: int, data: bytes, now: float, live: bool = True,
                    src: Optional[Address] = None) -> None:
        if not live and self.members and src is not None and not self._solicited(seq) and \
                (src[0], int(src[1])) in self.members:
            self._hold((src[0], int(src[1])), seq, data, now)
            return
        if not live and not self._solicited(seq):
            # Anyone can send a DELIVER: believed from elsewhere, it could replace a real
            # message or fake a jump that turns real messages into Lost ones.
            self.stats["dropped_unsolicited_deliver"] += 1
            return
        self.stats["delivers_in"] += 1
        if live:
            self._probe_range = None
        if self._pending:
            ids = self._pending_by_data.get(data)
            if ids:
                pid = ids.popleft()
                if not ids:
                    del self._pending_by_data[data]
                del self._pending[pid]
                self._events.append(PublishConfirmed(pid, seq))
        if not self.subscribed:
            return
        status = self.tracker.offer(seq, data, now)
        if status == DUPLICATE:  # (C3) any one copy will do
            self.stats["duplicates"] += 1
            return
        if self.config.tail_probe > 0:
            self._probes = 0
            self._next_probe = now + self.config.tail_probe
        if self.journaling:
            self.journal.store(seq, data)
        if live and self._moved_from is not None:
            self._note_failover_gap(seq, now)
        self._drain_tracker()

    def _hold(self, src: Address, seq: int, data: bytes, now: float) -> None:
        """A DELIVER from another member: a new active that took over our table entry sends
        before we know it is one. Kept (MAX_HOLD, from one member at a time) until that member
        answers our QUERY as the active of a newer epoch (then they are ours, in order), and a
        reason to ask (paced as any QUERY round)."""
        if src != self._held_from or (self._held and now - self._held[0][2] > HOLD_FOR):
            # Another member, or ours grew stale: what a stranger forging a member's address
            # sent long before a failover is never taken for the new active's first messages.
            self.stats["hold_dropped"] += len(self._held)
            self._held.clear()
            self._held_from = src
            self._query(now)  # (once per member: then the QUERY timer's rounds)
        if len(self._held) >= MAX_HOLD:
            self.stats["hold_dropped"] += 1
        else:
            self._held.append((seq, data, now))
            self.stats["hold_kept"] += 1
        if self._next_query is None:
            self._next_query = now + self.config.cluster_keepalive

    def _note_failover_gap(self, seq: int, now: float) -> None:
        """The new active's first DELIVER: below it, down to what we held, is the failover's
        gap (repaired for failover_repair, then Lost "failover")."""
        high, self._moved_from = self._moved_from, None
        first = (high + 1) % (1 << 48)
        if (seq - first) % (1 << 48) < self.config.max_gap and seq != first:
            self._failover_gap = (first, (seq - 1) % (1 << 48),
                                  now + self.config.failover_repair)

    def _drain_tracker(self) -> None:
        for kind, a, b in self.tracker.ready():
            if kind == MESSAGE:
                self._events.append(Message(a, b))
            elif kind == LOST:
                count = (b - a) % (1 << 48) + 1
                self.stats["lost"] += count
                within = self._failover_lost
                if within is not None and (b - within[0]) % (1 << 48) <= \
                        (within[1] - within[0]) % (1 << 48) and \
                        (a - within[0]) % (1 << 48) <= (b - within[0]) % (1 << 48):
                    self.stats["lost_failover"] += count
                    self._events.append(Lost(a, b, "failover"))
                else:
                    self._events.append(Lost(a, b))
            elif kind == RESET:
                self.stats["resyncs"] += 1
                self._events.append(Resync(a, b))

    def _on_forward(self, fwd, addr: Address, now: float) -> None:
        # (C4) serve what the journal holds straight to the requester. Only the backbone may
        # ask: otherwise anyone could aim our DELIVERs at a third host.
        if addr != self.backbone_source:
            self.stats["dropped_forward_not_from_backbone"] += 1
            return
        if not self.journaling:
            self.stats["dropped_forward_nojournal"] += 1
            return
        self.stats["forwards_in"] += 1
        target = (fwd.addr, fwd.port)
        cfg = self.config
        budget = self._serve_budget.pop(target, None)
        if budget is None:
            budget = [float(cfg.serve_burst), now]
            while len(self._serve_budget) >= cfg.serve_requesters:
                self._serve_budget.popitem(last=False)
        self._serve_budget[target] = budget  # most recent last
        budget[0] = min(float(cfg.serve_burst), budget[0] + (now - budget[1]) * cfg.serve_rate)
        budget[1] = now
        for datagram in self.journal.serve(fwd.from_seq, fwd.to_seq, cfg.max_request_range):
            if len(datagram) > budget[0]:
                self.stats["forward_budget_exhausted"] += 1
                break
            budget[0] -= len(datagram)
            self._out.append((datagram, target))
            self.stats["forwarded_delivers"] += 1

    def _on_ack(self, token: bytes, addr: Address, now: float) -> None:
        sent = self._keepalives_sent.pop(token, None)
        if sent is None:  # not a token we sent (they hold 8 random bytes: not guessable)
            self.stats["dropped_unknown_ack"] += 1
            return
        if addr != self.backbone_source:
            # Only the backbone can echo our token: this is where it answers from.
            log.info("backbone %s:%s answers from %s:%s", *self.backbone, *addr)
            self.backbone_source = (addr[0], int(addr[1]))
            self.stats["backbone_source_changes"] += 1
        self.stats["acks_in"] += 1
        self._last_ack = now
        self._said_no_quorum = False
        self.rtt = now - sent
        if self._up is not True:
            self._up = True
            self._events.append(BackboneUp(self.rtt))

    # ---- the backbone cluster -------------------------------------------------------------

    def _silent(self, now: float) -> bool:
        return now - (self._last_ack if self._last_ack is not None else self._started) > \
            self.config.cluster_silence

    def _query(self, now: float, targets=None) -> None:
        """A QUERY round: to every member (or targets), with a fresh token. At most one round
        to every member per cluster_keepalive / 4 (nothing an answer says makes more); one to
        an active a member named (an answer to our token) goes at once."""
        if targets is None and now < self._last_query + self.config.cluster_keepalive / 4:
            self._next_query = self._last_query + self.config.cluster_keepalive / 4
            return
        self._queries += 1
        self._last_query = now
        token = self._client_id + (1 << 63 | self._queries).to_bytes(8, "big")
        self._query_tokens.append(token)
        for member in targets or self.members:
            self._out.append((codec.encode_query(token), member))
            self.stats["queries"] += 1
        self._next_query = now + self.config.cluster_keepalive

    def _on_info(self, info, addr: Address, now: float) -> None:
        if info.token not in self._query_tokens:
            # Unasked (a new active telling its subscribers) or not ours: only a hint to ask.
            self.stats["info_unasked"] += 1
            if info.epoch > self.epoch and addr in self.members:
                self._query(now)
            return
        if addr not in self.members:
            self.stats["dropped_info_not_member"] += 1
            return
        self.stats["infos"] += 1
        if info.flags & codec.INFO_NO_QUORUM and self._silent(now) and not self._said_no_quorum:
            self._said_no_quorum = True  # (once per silence: an ACK or a move resets it)
            self._events.append(NoQuorum(addr, info.epoch))
        active = (info.addr, int(info.port))
        if info.epoch <= self.epoch or not info.port:
            return  # nothing newer (or this member knows no active)
        if active not in self.members:
            self.stats["dropped_info_unknown_active"] += 1
            return
        if addr != active or not info.flags & codec.INFO_ACTIVE:
            self._query(now, [active])  # the active itself must say so (to our token)
            return
        self._move(active, info.epoch, now)

    def _move(self, active: Address, epoch: int, now: float) -> None:
        """Follow the active of a newer epoch: sign on there, and re-send what the old one
        did not confirm (at least once)."""
        old, first, self.epoch = self.backbone, not self.epoch, epoch
        self._said_no_quorum = False
        self._query_tokens.clear()
        self._next_query = None
        if active != self.backbone:
            self.backbone = self.backbone_source = active
        if not first:  # (finding the active at start is no failover)
            self.stats["moves"] += 1
            if self.subscribed and self.tracker.highest_sequence is not None:
                self._moved_from = self.tracker.highest_sequence
        self._keepalives_sent.clear()
        self._last_ack = None
        self._started = now
        self._send_keepalive(now)  # first: signed on before the re-sends, their DELIVERs
        resent = 0  # come back to us (the confirmations)
        for _deadline, data in list(self._pending.values()):
            self._out.append((codec.encode_push(data), active))
            resent += 1
        self.stats["resent"] += resent
        self._events.append(BackboneMoved(old, active, epoch, resent))
        held, self._held = self._held, []
        fresh = [(seq, data) for seq, data, t in held if now - t <= HOLD_FOR]
        if self._held_from == active:  # the new active's first DELIVERs, now believed
            for seq, data in fresh:
                self._on_deliver(seq, data, now, True)
            self.stats["hold_dropped"] += len(held) - len(fresh)
        else:
            self.stats["hold_dropped"] += len(held)
        self._held_from = None

    # ---- commands ------------------------------------------------------------------------

    def publish(self, data: bytes, now: float) -> Optional[int]:
        """Queue a PUSH; returns the id PublishConfirmed/PublishFailed will carry, or None
        for a NOSUBSCRIBE client, which never sees its DELIVER (fire-and-forget)."""
        self._out.append((codec.encode_push(data), self.backbone))
        return self._track(data, now)

    def publish_many(self, datas, now: float) -> List[Optional[int]]:
        """Queue several PUSHes at once; with `pack` set they share datagrams (the packing
        extension; the backbone must support it). Returns one id (or None) per message."""
        if not self.config.pack:
            return [self.publish(d, now) for d in datas]
        datas = list(datas)
        for datagram in codec.pack_pushes(datas, self.config.pack,
                                          max_frames=self.config.max_pack_frames):
            self._out.append((datagram, self.backbone))
        return [self._track(d, now) for d in datas]

    def _track(self, data: bytes, now: float) -> Optional[int]:
        self.stats["pushes"] += 1
        if not self.subscribed:
            return None
        if len(self._pending) >= self.config.max_pending_publishes:
            raise OverflowError(f"{len(self._pending)} publishes already await confirmation")
        pid = self._next_publish_id
        self._next_publish_id += 1
        key = bytes(data)
        self._pending[pid] = (now + self.config.publish_timeout, key)
        self._pending_by_data[key].append(pid)
        self._deadlines.append((now + self.config.publish_timeout, pid))
        return pid

    def set_flags(self, flags: int, now: float) -> None:
        """Change FLAGS (NOSUBSCRIBE/NOJOURNAL); a KEEPALIVE carrying them goes out at once."""
        self.config = replace(self.config, flags=flags)
        self._send_keepalive(now)

    # ---- timers --------------------------------------------------------------------------

    def get_timer(self) -> float:
        """When handle_timer() next has work."""
        when = self._next_keepalive
        gap = self.tracker.next_deadline()
        if gap is not None and gap < when:
            when = gap
        if self._next_probe is not None and self._next_probe < when:
            when = self._next_probe
        if self._next_query is not None and self._next_query < when:
            when = self._next_query
        if self._failover_gap is not None and self._failover_gap[2] < when:
            when = self._failover_gap[2]
        while self._deadlines and self._deadlines[0][1] not in self._pending:
            self._deadlines.popleft()
        if self._deadlines and self._deadlines[0][0] < when:
            when = self._deadlines[0][0]
        return when

    def handle_timer(self, now: float) -> None:
        """Send KEEPALIVEs and REQUESTs that are due; expire publishes and dead gaps."""
        if now >= self._next_keepalive:
            self._send_keepalive(now)
        if self._next_query is not None and now >= self._next_query:
            if self.epoch == 0 or self._silent(now) or self._held:
                self._query(now)
            else:
                self._next_query = None  # the active answers: nothing to ask
        gap = self._failover_gap
        if gap is not None and now >= gap[2]:
            self._failover_gap = None
            self._failover_lost = gap[:2]
            self.tracker.give_up(gap[0], gap[1])
        for lo, hi in self.tracker.due(now):
            # ADDR/PORT zero: "reply to the address this REQUEST came from" (our one socket).
            self._out.append((codec.encode_request("", 0, lo, hi), self.backbone))
            self.stats["requests"] += 1
        if self._next_probe is not None and now >= self._next_probe:
            self._probe_tail(now)
        self._drain_tracker()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, pid = self._deadlines.popleft()
            entry = self._pending.pop(pid, None)
            if entry is None:
                continue
            ids = self._pending_by_data[entry[1]]
            ids.remove(pid)
            if not ids:
                del self._pending_by_data[entry[1]]
            self._events.append(PublishFailed(pid, "timeout"))

    def _probe_tail(self, now: float) -> None:
        # A lost DELIVER is only noticed when a later one arrives, so the last message of a burst
        # could wait forever. After a quiet spell, ask peers for whatever follows the highest
        # sequence seen; they serve only what exists. Backs off, and stops after the retries.
        cfg = self.config
        if self._probes > cfg.request_retries:
            self._next_probe = None  # the last probe's range stays answerable until a live DELIVER
            return
        first = (self.tracker.highest_sequence + 1) % (1 << 48)
        last = (first + min(cfg.tail_probe_range, cfg.max_request_range) - 1) % (1 << 48)
        if last < first:  # do not straddle the 48-bit wrap
            last = (1 << 48) - 1
        self._out.append((codec.encode_request("", 0, first, last), self.backbone))
        self._probe_range = (first, last)
        self.stats["tail_probes"] += 1
        self._probes += 1
        self._next_probe = now + cfg.tail_probe * (cfg.request_backoff ** self._probes)

    def _send_keepalive(self, now: float) -> None:
        self._keepalive_count += 1
        token = self._client_id + self._keepalive_count.to_bytes(8, "big")
        self._keepalives_sent[token] = now
        if len(self._keepalives_sent) > 16:  # forget ACKs that will never come
            self._keepalives_sent.pop(next(iter(self._keepalives_sent)))
        flags = self.config.flags
        if self.config.pack:
            flags |= codec.packed_flags(self.config.pack)
        if self.clustered:
            flags |= codec.CLUSTER
        self._out.append((codec.encode_keepalive("", 0, flags, token), self.backbone))
        self.stats["keepalives"] += 1
        self._next_keepalive = now + (self.config.cluster_keepalive if self.clustered
                                      else self.config.keepalive_interval)
        if self.clustered and self._next_query is None and self._silent(now):
            self._query(now)  # silent: which member is active now?
        since = now - (self._last_ack if self._last_ack is not None else self._started)
        if since > self.config.backbone_silence and self._up is not False:
            self._up = False
            self._events.append(BackboneDown(since))

    # ---- output --------------------------------------------------------------------------

    def datagrams_to_send(self) -> List[Tuple[bytes, Address]]:
        """Datagrams queued since the last call, with their destinations."""
        out, self._out = self._out, []
        return out

    def next_event(self) -> Optional[Event]:
        """The oldest undelivered event, or None."""
        return self._events.popleft() if self._events else None
