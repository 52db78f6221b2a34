"""potato: the JSON schema (decode/encode) and the node's relay and election logic."""
from __future__ import annotations

import json

from bench.fuzz.common import Script, Target, check, mutate, tick
from pelotari.potato import wire
from pelotari.potato.core import Config, FrameChanged, PotatoNode, VoteCast
from pelotari.potato.wire import PotatoError

LIMITS = wire.Limits(max_message=4096, max_visited=8, max_participants=8, max_identifier=64,
                     max_depth=4)


def wire_seeds():
    """The shapes of docs/protocols/potato.md's examples, one per type."""
    req = {"parent": "INITIAL", "next": "f1", "originator": "a", "direct_participants": ["b"]}
    resp = {"parent": "INITIAL", "next": "f1", "vote": "YES", "yes": 1, "no": 0}
    for obj in (
        {"type": "direct", "identifier": "1", "from": "a", "to": "b", "visited": [], "body": {"x": 1}},
        {"type": "broadcast", "identifier": "2", "from": "a", "visited": ["c"], "body": "hi"},
        {"type": "broadcast", "identifier": "3", "from": "a", "visited": [],
         "body": {"frame": "f1", "parent": "INITIAL"}},
        {"type": "direct_election_request", "identifier": "4", "from": "a", "visited": [], "body": req},
        {"type": "indirect_election_request", "identifier": "5", "from": "b", "visited": [],
         "body": dict(req, deadline_ms=200)},
        {"type": "direct_election_response", "identifier": "6", "from": "b", "to": "a",
         "visited": [], "body": resp},
        {"type": "indirect_election_response", "identifier": "7", "from": "c", "to": "b",
         "visited": [], "body": dict(resp, vote="ABSTAIN", yes=0, no=0)},
    ):
        yield json.dumps(obj, separators=(",", ":")).encode()


def wire_input(data: bytes) -> None:
    """decode returns a Message or raises PotatoError, never anything else; an accepted message
    encodes to JSON that decodes to the same message and encodes to the same bytes again; an
    election's body parses as its kind."""
    for limits in (LIMITS, wire.Limits()):
        try:
            msg = wire.decode(data, limits)
        except PotatoError:
            continue
        encoded = wire.encode(msg)
        again = wire.decode(encoded, wire.Limits(max_message=max(len(encoded), 1)))
        check(again == msg, "decode(encode(m)) != m")
        check(wire.encode(again) == encoded, "encoding is not stable")
        if msg.type.endswith("_request"):
            check(wire.request_body(msg.body, limits).as_dict() is not None, "request body")
        elif msg.type.endswith("_response"):
            check(wire.response_body(msg.body, limits).vote in wire.VOTES, "response vote")


# ---- the node ---------------------------------------------------------------------------------

PEERS = ["b", "c", "d", "e"]
NAMES = ["a", "b", "c", "d", "e", "z"]
FRAMES = ["INITIAL", "f1", "f2", "f3"]
TYPES = list(wire.TYPES)


def _message(s: Script) -> bytes:
    """A schema-shaped message whose fields the script picks from small pools."""
    kind = s.pick(TYPES)
    obj = {"type": kind, "identifier": str(s.below(8)), "from": s.pick(NAMES),
           "visited": [s.pick(NAMES) for _ in range(s.below(3))]}
    if wire.TYPES[kind][0] or s.byte() & 1:
        obj["to"] = s.pick(NAMES)
    body = wire.TYPES[kind][1]
    if body == "request":
        obj["body"] = {"parent": s.pick(FRAMES), "next": s.pick(FRAMES), "originator": s.pick(NAMES),
                       "direct_participants": [s.pick(NAMES) for _ in range(s.below(3))]}
        if s.byte() & 1:
            obj["body"]["deadline_ms"] = s.below(400)
    elif body == "response":
        vote = s.pick(wire.VOTES)
        obj["body"] = {"parent": s.pick(FRAMES), "next": s.pick(FRAMES), "vote": vote,
                       "yes": s.below(3), "no": s.below(3)}
    elif s.byte() & 1:
        obj["body"] = {"frame": s.pick(FRAMES), "parent": s.pick(FRAMES)}
    return json.dumps(obj).encode()


def node_seeds():
    yield bytes([0, 0, 0, 1, 0, 2, 0, 3]) + b"\x01\x00" * 12 + b"\x04\x02\x00" * 4
    yield bytes([0, 0, 0, 1]) + b"\x05" + b"\x01\x01\x03\x00\x02\x01\x00\x00" * 6 + b"\x02\xff" * 6


def node_input(data: bytes) -> None:
    """A node fed a script of schema-shaped, mutated and garbage messages from peers that come
    and go, proposals, broadcasts and clock steps: nothing escapes, every message goes to a
    current peer and never to one its `visited` names (but a direct to its `to`), no election
    (parent, next) gets two votes cast or two non-ABSTAIN answers while the node can remember
    it (max_seen_elections newer ones heard), a frame once left is never taken again while
    it is among the last frame_history, and every table stays within its limit."""
    s = Script(data)
    cfg = Config(max_cache=16, max_elections=6, max_seen_elections=10, frame_history=4,
                 request_burst=4, limits=LIMITS)
    now = 10.0
    node = PotatoNode("a", now, cfg)
    frames = ["INITIAL"]
    voted: dict = {}  # election -> elections heard when we last voted in it
    rounds: dict = {}  # election -> votes cast in it (a second once it was forgotten)
    answered: dict = {}  # election -> the round its non-ABSTAIN answer went out in

    while s:
        op = s.below(8)
        if op == 0:
            node.peer_up(s.pick(PEERS), now)
        elif op == 1:
            node.peer_down(s.pick(PEERS), now)
        elif op in (2, 3):
            payload = _message(s)
            node.receive(s.pick(PEERS), mutate(s, payload) if op == 3 else payload, now)
        elif op == 4:
            now += s.below(1000) / 1000
            tick(node, now)
        elif op == 5:
            node.propose(now)
        elif op == 6:
            node.broadcast({"n": s.byte()}, now)
        else:
            node.receive(s.pick(PEERS), s.blob(), now)
        while (event := node.next_event()) is not None:
            if isinstance(event, VoteCast):
                key = (event.parent, event.next)
                heard = node.stats["elections_heard"]
                check(key not in voted or heard - voted[key] >= cfg.max_seen_elections,
                      f"two votes cast in election {key}")
                voted[key], rounds[key] = heard, rounds.get(key, 0) + 1
            elif isinstance(event, FrameChanged):
                check(event.frame not in frames[-cfg.frame_history:],  # as far as it remembers
                      f"frame {event.frame} taken again")
                frames.append(event.frame)
        for peer, payload in node.messages_to_send():
            check(peer in node.peers, f"sent to {peer}, not a peer")
            msg = wire.decode(payload)
            check(peer not in msg.visited or (msg.type == "direct" and msg.to == peer),
                  f"relayed to {peer}, which `visited` names")  # (a direct goes to its `to`)
            if msg.type.endswith("_response") and msg.body["vote"] != "ABSTAIN":
                key = (msg.body["parent"], msg.body["next"])
                check(key in rounds and answered.get(key) != rounds[key],
                      f"election {key} answered twice, or without a vote")
                answered[key] = rounds[key]
        check(len(node._cache) <= cfg.max_cache and len(node._votes) <= cfg.max_elections
              and len(node._seen) <= cfg.max_seen_elections
              and len(node._history) <= cfg.frame_history, "a table over its limit")
        check(all(v >= 0 for v in node.stats.values()), "a negative count")


# JSON's words and the schema's: byte mutations alone seldom make `"type":{` or `1e400` (the
# first million-input run missed a `type` that was an object)
WORDS = ([b'"%s"' % f.encode() for f in wire.FIELDS] + [b'"%s"' % t.encode() for t in wire.TYPES]
         + [b'"%s"' % k for k in (b"parent", b"next", b"originator", b"direct_participants",
                                   b"deadline_ms", b"vote", b"yes", b"no", b"frame", b"INITIAL")]
         + [b'"%s"' % v.encode() for v in wire.VOTES]
         + [b"{", b"}", b"[", b"]", b":", b",", b'""', b"null", b"true", b"false", b"-0", b"1e400",
            b"2147483648", b"NaN", b"Infinity", b'"\\ud800"', b'"\\u0000"', b"\xed\xa0\x80"])

TARGETS = [
    Target("potato-wire", wire_input, wire_seeds, wire_input.__doc__, ("pelotari.potato.wire",),
           dictionary=WORDS),
    Target("potato-node", node_input, node_seeds, node_input.__doc__,
           ("pelotari.potato.core", "pelotari.potato.wire")),
]
