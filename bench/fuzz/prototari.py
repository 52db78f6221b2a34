"""prototari: the node core fed datagrams from strangers and peers on a fuzzed clock."""
from __future__ import annotations

from bench.fuzz.common import Script, Target, check, framed, mutate, tick
from pelotari.prototari import wire
from pelotari.prototari.core import Config, Message, NodeCore, PeerJoined, PeerLeft

SOURCES = [("127.0.0.%d" % h, p) for h in (2, 3, 4, 5) for p in (wire.UNICAST_PORT, 40000)]
WIRES = [wire.DISCOVER, wire.RESPOND, wire.CONFIRM, wire.PING, wire.PONG,
         wire.DATA_MAGIC + b"hello", b"garbage"]


def seeds():
    yield b"\x00" + b"".join(b"\x00" + bytes([k * 2]) + b"\x01" for k in range(7))
    yield b"\x01" + b"\x01\x10\x00" * 4 + b"\x00\x02\x01" + b"\x00\x04\x01" + b"\x01\xf0\x00"
    yield b"\x00" + b"".join(b"\x02" + s for s in framed(WIRES))


def node_input(data: bytes) -> None:
    """A node core fed a script of datagrams (the seed's five messages, DATA, garbage, mutated)
    from eight sources, local sends and clock steps: nothing escapes, peers plus reservations
    never exceed max_peers nor reservations their limit, joins and leaves pair up, DATA is only
    ever delivered from a registered peer, and no source that never became a peer is sent more
    bytes than it sent."""
    s = Script(data)
    cfg = Config(max_peers=4, broadcast_interval=1.0, inactive_peer_time=1.0,
                 heartbeat_max_wait=0.5, reservation_timeout=1.0, response_window=1.0,
                 multi_node=bool(s.byte() & 1), broadcast_address="127.255.255.255")
    now = 100.0
    core = NodeCore(now, cfg, self_addresses={("127.0.0.1", wire.UNICAST_PORT)})
    received: dict = {}
    sent: dict = {}
    ever_peers = set()
    members = set()
    while s:
        op = s.below(4)
        if op == 0:
            now += s.below(2500) / 1000
            tick(core, now)
        elif op == 1:
            source = s.pick(SOURCES)
            kind = s.below(3)
            payload = s.pick(WIRES) if kind == 0 else s.blob() if kind == 1 else mutate(s, s.pick(WIRES))
            key = core.key(source)
            received[key] = received.get(key, 0) + len(payload)
            core.receive_datagram(payload, source, now)
        elif op == 2 and core.peers:
            core.send(s.pick(sorted(core.peers)), s.blob())
        elif op == 3:
            core.send_all(s.blob(16))
        for payload, to in core.datagrams_to_send():
            sent[to] = sent.get(to, 0) + len(payload)
        while (event := core.next_event()) is not None:
            if isinstance(event, PeerJoined):
                check(event.peer not in members, "a peer joined twice without leaving")
                members.add(event.peer)
                ever_peers.add(event.peer)
            elif isinstance(event, PeerLeft):
                check(event.peer in members, "a peer left that never joined")
                members.discard(event.peer)
            elif isinstance(event, Message):
                check(event.peer in members, "DATA delivered from a stranger")
        check(set(core.peers) == members, "the peer table and the events disagree")
        check(len(core.peers) + len(core.reservations) <= cfg.max_peers, "over max_peers")
        check(len(core.reservations) <= cfg.reservation_limit, "over the reservation limit")
        check(all(v >= 0 for v in core.stats.values()), "a negative count")
    for to, n in sent.items():
        if to[0] != "127.255.255.255" and to not in ever_peers:
            check(n <= received.get(to, 0), f"{n} bytes to stranger {to}, which sent {received.get(to, 0)}")


TARGETS = [Target("prototari-node", node_input, seeds, node_input.__doc__,
                  ("pelotari.prototari.core", "pelotari.prototari.wire"))]
