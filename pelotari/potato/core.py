"""Sans-IO potato node (potato.md): peers' messages and `now` in; messages to peers, timers and
events out. The transports (TCP, WebRTC) and the simulator carry the bytes; the core never knows
which. Decisions the seed leaves open are in docs/protocols/potato.md.

    peer_up(name, now) / peer_down(name, now)    a peer connected / went away
    receive(peer, data, now)                     one message's bytes from a peer
    send_direct(to, body, now) / broadcast(body, now) / propose(now)
    handle_timer(now) / get_timer()              monotonic seconds
    messages_to_send() -> [(peer, bytes)]        next_event() -> event or None
"""
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from pelotari.potato import wire
from pelotari.potato.wire import INITIAL, Message, PotatoError, Request, Response


@dataclass(frozen=True)
class Config:
    """A node's timers and limits (defaults documented in docs/protocols/potato.md)."""

    cache_lifetime: float = 5.0  # a message identifier is remembered this long (per entry)
    max_cache: int = 65536  # identifiers remembered at most (oldest forgotten first)
    direct_timeout: float = 0.3  # the seed: direct participants answer within 300 ms
    hop_margin_ms: int = 10  # each indirect hop answers this much before its requester must
    min_budget_ms: int = 10  # below this a request is answered at once, without asking further
    indirect_budget_ms: int = 250  # assumed for an indirect request without deadline_ms
    originator_weight: float = 1.5
    max_elections: int = 256  # elections (parent, next) remembered at once
    request_burst: int = 16  # election requests taken from one peer: a token bucket
    request_rate: float = 8.0  # per second (the seed: one direct election per client at once)
    max_seen_elections: int = 4096  # (parent, next) -> originator heard, for taking frames
    frame_history: int = 4096  # frames we had, so an old one is never taken again
    limits: wire.Limits = field(default_factory=wire.Limits)

    def __post_init__(self):
        if self.cache_lifetime <= 0 or self.direct_timeout <= 0:
            raise ValueError("cache_lifetime and direct_timeout must be positive")
        if min(self.max_cache, self.max_seen_elections, self.frame_history) < 1:
            raise ValueError("max_cache, max_seen_elections and frame_history must be at least 1")
        if self.max_elections < 2:
            raise ValueError("max_elections must be at least 2 (one place is kept for our own)")
        if self.max_seen_elections < self.max_elections:
            raise ValueError("max_seen_elections must be at least max_elections (it outlives "
                             "them, so a forgotten election is not voted on twice)")


# ---- events ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Delivered:
    """A direct message for us, or a broadcast (kind says which). `sender` is the message's
    `from`, which its originator wrote and nobody checks; `via` is the connected peer that
    handed it to us (named by the transport's handshake)."""

    kind: str
    sender: str
    body: Any
    identifier: str
    hops: int = 0  # links it crossed: the relays named in `visited` and `via`, plus one
    via: str = ""


@dataclass(frozen=True)
class Undeliverable:
    """A direct message we originated could go nowhere: we have no peers."""

    to: str
    identifier: str


@dataclass(frozen=True)
class PeerUp:
    peer: str


@dataclass(frozen=True)
class PeerDown:
    peer: str


@dataclass(frozen=True)
class ElectionStarted:
    """We proposed `next` on top of `parent`."""

    parent: str
    next: str
    participants: tuple[str, ...]


@dataclass(frozen=True)
class VoteCast:
    """Our internal vote in an election (someone else's, or NO while ours is open)."""

    parent: str
    next: str
    originator: str
    vote: str


@dataclass(frozen=True)
class ElectionResult:
    """Our election ended: the tallies (ours weighs 1.5) and whether YES won."""

    parent: str
    next: str
    yes: float
    no: int
    won: bool
    abstained: tuple[str, ...]


@dataclass(frozen=True)
class FrameChanged:
    """The mesh's frame moved on (a winner's broadcast, or our own win): `by` is the election's
    originator, `via` the peer that handed us the broadcast ("" for our own win)."""

    frame: str
    parent: str
    by: str
    via: str = ""
    picture: list | None = None  # its stroke list (None: it carried none, or a bad one)


# ---- state -------------------------------------------------------------------------------

@dataclass
class _Vote:
    """Our part in one election (parent, next): whom we answer, whom we wait for."""

    request: Request
    requester: str | None  # None: we originated it
    kind: str  # "direct" or "indirect" (the request we answer)
    deadline: float
    yes: int = 0
    no: int = 0
    internal: str = "ABSTAIN"  # our own vote in it
    waiting: set = field(default_factory=set)
    abstained: list = field(default_factory=list)
    done: bool = False


def _hops(msg: Message, peer: str) -> int:
    """Links a message crossed to reach us: its relays plus one. A broadcast's relays all add
    themselves to `visited`; a direct message's last relay hands it over without (the seed), so
    the peer that handed it over counts too."""
    return len((set(msg.visited) | {peer}) - {msg.sender}) + 1


class PotatoNode:
    """One client of the mesh."""

    def __init__(self, name: str, now: float, config: Config | None = None,
                 frame: str = INITIAL):
        if not wire.is_name(name):
            raise ValueError(f"a name is 1..{wire.MAX_NAME} characters")
        self.name = name
        self.config = config or Config()
        self.frame = frame
        self.peers: set[str] = set()
        self.stats: Counter = Counter()
        self._out: list[tuple[str, bytes]] = []
        self._events: deque = deque()
        self._cache: OrderedDict[str, float] = OrderedDict()  # identifier -> forget at
        self._votes: OrderedDict[tuple[str, str], _Vote] = OrderedDict()
        # parent -> (the first next we voted on, until when that binds)
        self._voted_on: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._mine: _Vote | None = None  # our own open election
        self._buckets: dict[str, tuple[float, float]] = {}  # peer -> (tokens, when)
        # Every election request heard, (parent, next) -> originator, and the frames we had:
        # a frame broadcast is taken only for an election we heard, never an old frame.
        self._seen: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._history: OrderedDict[str, None] = OrderedDict({frame: None})
        # The picture our frame broadcast carries when we win (body["strokes"]; None: only
        # the seed's frame and parent). The application sets it (a page: its canvas); taking
        # a frame with a picture sets it to that picture.
        self.picture: list | None = None

    # ---- peers ---------------------------------------------------------------------------

    def peer_up(self, peer: str, now: float) -> None:
        """A transport connected a peer."""
        if peer != self.name and peer not in self.peers:
            self.peers.add(peer)
            self._events.append(PeerUp(peer))

    def peer_down(self, peer: str, now: float) -> None:
        """A peer went away: anything we wait for from it is an ABSTAIN (the seed)."""
        if peer in self.peers:
            self.peers.discard(peer)
            self._buckets.pop(peer, None)
            self._events.append(PeerDown(peer))
            for v in list(self._votes.values()):
                if peer in v.waiting:
                    v.waiting.discard(peer)
                    v.abstained.append(peer)
                    self._maybe_answer(v, now)

    # ---- sending -------------------------------------------------------------------------

    def _send(self, peer: str, msg: Message) -> None:
        self._out.append((peer, wire.encode(msg)))
        self.stats[f"sent_{msg.type}"] += 1

    def _remember(self, identifier: str, now: float) -> None:
        self._cache[identifier] = now + self.config.cache_lifetime
        self._cache.move_to_end(identifier)
        while len(self._cache) > self.config.max_cache:
            self._cache.popitem(last=False)
            self.stats["cache_evicted"] += 1

    def _relay(self, msg: Message, now: float, exclude: str | None = None) -> int:
        """Direct to the recipient if it is a peer; else add ourselves to `visited` and send to
        every peer not in it. How many copies went."""
        if msg.type == "direct" and msg.to in self.peers:
            self._send(msg.to, msg)
            return 1
        visited = msg.visited if self.name in msg.visited else msg.visited + (self.name,)
        out = Message(msg.type, msg.identifier, msg.sender, visited, msg.to, msg.body)
        sent = 0
        for p in sorted(self.peers):
            if p not in visited and p != exclude:
                self._send(p, out)
                sent += 1
        return sent

    def send_direct(self, to: str, body: Any, now: float) -> str:
        """A direct message to a client by name; its identifier."""
        if not wire.is_name(to):
            raise ValueError(f"a name is 1..{wire.MAX_NAME} characters")
        msg = Message("direct", wire.new_identifier(), self.name, (), to, body)
        self._remember(msg.identifier, now)
        if self._relay(msg, now) == 0:
            self._events.append(Undeliverable(to, msg.identifier))
        return msg.identifier

    def broadcast(self, body: Any, now: float) -> str:
        """A broadcast to the whole mesh; its identifier."""
        msg = Message("broadcast", wire.new_identifier(), self.name, (), None, body)
        self._remember(msg.identifier, now)
        self._relay(msg, now)
        return msg.identifier

    # ---- receiving -----------------------------------------------------------------------

    def receive(self, peer: str, data: bytes, now: float) -> None:
        """One message's bytes from a peer: checked, then relayed, delivered or voted on."""
        if peer not in self.peers:
            self.stats["dropped_not_a_peer"] += 1
            return
        try:
            msg = wire.decode(data, self.config.limits)
        except PotatoError as e:
            self.stats[f"dropped_{e.reason}"] += 1
            return
        self.stats[f"received_{msg.type}"] += 1
        if msg.type in ("direct", "broadcast"):
            self._on_relayed(peer, msg, now)
        elif msg.type.endswith("_request"):
            self._on_request(peer, msg, wire.request_body(msg.body, self.config.limits), now)
        else:
            self._on_response(peer, msg, wire.response_body(msg.body, self.config.limits), now)

    def _on_relayed(self, peer: str, msg: Message, now: float) -> None:
        if msg.identifier in self._cache:
            self.stats["duplicate"] += 1  # a loop or a second path: neither used nor relayed
            return
        if msg.sender == self.name:
            self.stats["own_message_back"] += 1
            self._remember(msg.identifier, now)
            return
        self._remember(msg.identifier, now)
        if msg.type == "direct":
            if msg.to == self.name:
                self._events.append(Delivered("direct", msg.sender, msg.body, msg.identifier,
                                              _hops(msg, peer), peer))
                return
            self._relay(msg, now, exclude=peer)
            return
        frame = msg.body.get("frame") if isinstance(msg.body, dict) else None
        if isinstance(frame, str) and frame:  # a winner's frame: FrameChanged tells it
            parent = msg.body.get("parent")
            why = self._frame_refused(frame, parent, msg.sender)
            if why:
                self.stats[f"frame_refused_{why}"] += 1
            else:
                self._take_frame(frame, parent, msg.sender, peer, self._picture(msg.body))
        else:
            self._events.append(Delivered("broadcast", msg.sender, msg.body, msg.identifier,
                                          _hops(msg, peer), peer))
        # Relayed whatever we make of it: relaying is the seed's rule, taking a frame our own.
        self._relay(msg, now, exclude=peer)

    def _picture(self, body: dict) -> list | None:
        """A frame broadcast's stroke list if it keeps the picture rules, else None (counted:
        the frame is still taken, the seed's rule; its picture is not)."""
        if "strokes" not in body:
            return None
        try:
            return wire.strokes(body["strokes"])
        except PotatoError as e:
            self.stats[f"picture_refused_{e.reason}"] += 1
            return None

    def _frame_refused(self, frame: str, parent, sender: str) -> str | None:
        """Why a frame broadcast is not taken, or None. Taken: a frame we never had, on our
        frame or on one we never had (we missed a frame: catch up), from the originator of an
        election for it that we heard. So a broadcast alone, with no election before it, moves
        nobody, an old frame is never taken back, and no frame forks our history."""
        if not isinstance(parent, str) or parent == frame:
            return "malformed"
        if frame in self._history:
            return "old"
        if parent != self.frame and parent in self._history:
            return "fork"
        if self._seen.get((parent, frame)) != sender:
            return "no_election"
        return None

    # ---- elections -------------------------------------------------------------------------

    def propose(self, now: float) -> str | None:
        """Start a direct election for a new frame on top of ours; `next`, or None when one of
        ours is still open (the seed: one at a time)."""
        if self._mine is not None:
            return None
        nxt = wire.frame_id(self.name)
        req = Request(self.frame, nxt, self.name, tuple(sorted(self.peers)))
        v = _Vote(req, None, "direct", now + self.config.direct_timeout,
                  waiting=set(req.direct_participants))
        self._mine = v
        self._room(own=True)  # always true: others leave one place, and our last one is done
        self._track((req.parent, req.next), v)
        self._heard(req)
        self._note_vote(req, now)
        self._events.append(ElectionStarted(req.parent, req.next, req.direct_participants))
        for p in req.direct_participants:
            self._send(p, Message("direct_election_request", wire.new_identifier(), self.name,
                                  (), None, req.as_dict()))
        self._maybe_answer(v, now)
        return nxt

    def _room(self, own: bool = False) -> bool:
        """Forget finished elections past the limit; whether there is room for another. An
        open one is never forgotten (its copies still travelling would look new). Other nodes'
        elections get max_elections - 1 places, so ours always finds one: strangers filling
        the table cannot stop this node from proposing, nor push it past max_elections."""
        limit = self.config.max_elections - (0 if own else 1)
        if len(self._votes) < limit:
            return True
        for key in [k for k, v in self._votes.items() if v.done]:
            if len(self._votes) < limit:
                break
            del self._votes[key]
        return len(self._votes) < limit

    def _track(self, key: tuple[str, str], v: _Vote) -> None:
        self._votes[key] = v

    def _note_vote(self, req: Request, now: float) -> None:
        first = self._voted_on.get(req.parent)
        if first is None or now >= first[1]:
            # Binding while that election can still be won: its originator's deadline, twice.
            self._voted_on[req.parent] = (req.next, now + 2 * self.config.direct_timeout)
        while len(self._voted_on) > self.config.max_elections:
            self._voted_on.popitem(last=False)

    def _internal_vote(self, req: Request, now: float) -> str:
        """YES iff the proposal builds on our frame and we have voted on nothing else on top of
        that parent; NO otherwise, and always NO while our own election is open."""
        if self._mine is not None:
            return "NO"
        first = self._voted_on.get(req.parent)
        if first is not None and now >= first[1]:
            first = None  # that election is over without a frame: the parent is open again
        if req.parent == self.frame and (first is None or first[0] == req.next):
            return "YES"
        return "NO"

    def _respond(self, to: str, kind: str, req: Request, vote: str, yes: int, no: int) -> None:
        if to not in self.peers:  # the requester went away while we waited for answers
            self.stats["answer_requester_gone"] += 1
            return
        body = Response(req.parent, req.next, vote, yes, no).as_dict()
        self._send(to, Message(f"{kind}_election_response", wire.new_identifier(), self.name,
                               (), to, body))

    def _bucket_ok(self, peer: str, now: float) -> bool:
        cfg = self.config
        tokens, at = self._buckets.get(peer, (float(cfg.request_burst), now))
        tokens = min(cfg.request_burst, tokens + (now - at) * cfg.request_rate)
        ok = tokens >= 1
        self._buckets[peer] = (tokens - 1 if ok else tokens, now)
        return ok

    def _heard(self, req: Request) -> None:
        key = (req.parent, req.next)
        if key not in self._seen:  # the first originator named for it stands
            self._seen[key] = req.originator
            self.stats["elections_heard"] += 1
            while len(self._seen) > self.config.max_seen_elections:
                self._seen.popitem(last=False)

    def _on_request(self, peer: str, msg: Message, req: Request, now: float) -> None:
        kind = "direct" if msg.type.startswith("direct") else "indirect"
        key = (req.parent, req.next)
        forgotten = key in self._seen and key not in self._votes
        self._heard(req)
        if forgotten:
            # A late copy of an election we answered (or refused) and have since let go to
            # make room: voting now would be a second vote in it. `_seen` outlives `_votes`.
            self.stats["abstained_forgotten"] += 1
            self._respond(peer, kind, req, "ABSTAIN", 0, 0)
            return
        if key not in self._votes and (not self._bucket_ok(peer, now) or not self._room()):
            # Too many new elections from this peer, or too many open at once: ABSTAIN, and
            # spread nothing (each request we spread costs the mesh a message per edge).
            self.stats["abstained_limit"] += 1
            self._respond(peer, kind, req, "ABSTAIN", 0, 0)
            return
        if key in self._votes:
            # We take part already (or started it): ABSTAIN, and we ask this peer nothing.
            # A request from a peer we asked ourselves stands for its answer (the seed's
            # example: "D sent it a discarded indirect election request").
            v = self._votes[key]
            self._respond(peer, kind, req, "ABSTAIN", 0, 0)
            self.stats["abstained_repeat"] += 1
            if peer in v.waiting:
                v.waiting.discard(peer)
                v.abstained.append(peer)
                self._maybe_answer(v, now)
            return
        if self._mine is not None:
            # Our own election is open: NO, at once, and we do not spread theirs.
            self._track(key, _Vote(req, peer, kind, now, done=True))
            self._events.append(VoteCast(req.parent, req.next, req.originator, "NO"))
            self._respond(peer, kind, req, "NO", 0, 1)
            return
        vote = self._internal_vote(req, now)
        self._note_vote(req, now)
        self._events.append(VoteCast(req.parent, req.next, req.originator, vote))
        if kind == "direct":  # answered a margin before the originator stops waiting
            budget_ms = int(self.config.direct_timeout * 1000) - self.config.hop_margin_ms
        else:
            budget_ms = req.deadline_ms if req.deadline_ms is not None else \
                self.config.indirect_budget_ms
        v = _Vote(req, peer, kind, now + budget_ms / 1000, internal=vote,
                  yes=1 if vote == "YES" else 0, no=1 if vote == "NO" else 0)
        self._track(key, v)
        ask_budget = budget_ms - self.config.hop_margin_ms
        if ask_budget >= self.config.min_budget_ms:
            skip = {req.originator, peer, *req.direct_participants}
            ask = sorted(p for p in self.peers if p not in skip)
            fwd = Request(req.parent, req.next, req.originator, req.direct_participants,
                          ask_budget)
            for p in ask:
                self._send(p, Message("indirect_election_request", wire.new_identifier(),
                                      self.name, (), None, fwd.as_dict()))
            v.waiting = set(ask)
        self._maybe_answer(v, now)

    def _on_response(self, peer: str, msg: Message, resp: Response, now: float) -> None:
        v = self._votes.get((resp.parent, resp.next))
        if v is None or v.done or peer not in v.waiting:
            self.stats["dropped_unexpected_response"] += 1
            return
        v.waiting.discard(peer)
        if resp.vote == "ABSTAIN":
            v.abstained.append(peer)
        else:
            v.yes += resp.yes
            v.no += resp.no
        self._maybe_answer(v, now)

    def _maybe_answer(self, v: _Vote, now: float, timed_out: bool = False) -> None:
        """Answer our requester (or tally our own) once everybody we asked has answered, or the
        time is up (the rest count as ABSTAIN)."""
        if v.done or (v.waiting and not timed_out):
            return
        if timed_out:
            v.abstained.extend(sorted(v.waiting))
            self.stats["abstained_timeout"] += len(v.waiting)
            v.waiting.clear()
        v.done = True
        req = v.request
        if v.requester is not None:
            # `vote` sums the counts up for clients that read only it: the majority, a tie
            # going our own way.
            vote = "ABSTAIN" if v.yes + v.no == 0 else "YES" if v.yes > v.no else \
                "NO" if v.no > v.yes else v.internal
            self._respond(v.requester, v.kind, req, vote, v.yes, v.no)
            return
        self._mine = None
        yes = self.config.originator_weight + v.yes
        won = yes > v.no
        self._events.append(ElectionResult(req.parent, req.next, yes, v.no, won,
                                           tuple(v.abstained)))
        if won and self.frame == req.parent:
            body = {"frame": req.next, "parent": req.parent}
            if self.picture is not None:
                body["strokes"] = self.picture
            self.broadcast(body, now)
            self._take_frame(req.next, req.parent, self.name, picture=self.picture)

    def _take_frame(self, frame: str, parent: str, by: str, via: str = "",
                    picture: list | None = None) -> None:
        """A frame was broadcast: every open election ends without a result (the seed)."""
        if frame == self.frame:
            return
        self.frame = frame
        if picture is not None:
            self.picture = picture
        self._history[frame] = None
        while len(self._history) > self.config.frame_history:
            self._history.popitem(last=False)
        for v in self._votes.values():
            if not v.done:
                v.done = True
                self.stats["elections_ended_by_frame"] += 1
        self._mine = None
        self._events.append(FrameChanged(frame, parent, by, via, picture))

    # ---- timers --------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When handle_timer() next has work."""
        due = [v.deadline for v in self._votes.values() if not v.done]
        if self._cache:
            due.append(next(iter(self._cache.values())))
        return min(due) if due else None

    def handle_timer(self, now: float) -> None:
        """Deadlines of elections; the identifier cache's expiry."""
        for v in list(self._votes.values()):
            if not v.done and now >= v.deadline:
                self._maybe_answer(v, now, timed_out=True)
        while self._cache and next(iter(self._cache.values())) <= now:
            self._cache.popitem(last=False)

    # ---- output --------------------------------------------------------------------------

    def messages_to_send(self) -> list[tuple[str, bytes]]:
        """(peer, bytes) queued since the last call."""
        out, self._out = self._out, []
        return out

    def next_event(self) -> object | None:
        """The oldest undelivered event, or None."""
        return self._events.popleft() if self._events else None
