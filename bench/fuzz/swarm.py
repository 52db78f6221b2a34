"""swarm: the datagram path (size, MAC, header, flags, Connections) and the node core."""
from __future__ import annotations


from bench.fuzz.common import Script, Target, check, mutate, tick
from pelotari.swarm import wire
from pelotari.swarm.core import Config, SwarmNode
from pelotari.swarm.wire import Entry, Keyring, SwarmError

KEYS = Keyring([bytes(range(32))])
STRANGER = Keyring([bytes(range(1, 33))])
WALL = 1_800_000_000.0  # an epoch starts here (EPOCH_SECONDS divides it)
LIMITS = [wire.LIMITS, wire.Limits(max_datagram=128, max_entries=4)]


def _contents():
    """header || body of each message kind (tests/test_swarm_wire.py's shapes)."""
    yield wire.pack(wire.connect(3, 0x0102030405060708))
    yield wire.pack(wire.connect(4, 7, ack=True, echo=9))
    yield wire.pack(wire.reset(2))
    yield wire.pack(wire.ping(5))
    yield wire.pack(wire.pong(5))
    yield wire.pack(wire.get_connections(64))
    yield wire.pack(wire.connections([Entry("127.0.0.2", 9000, True), Entry("127.0.0.3", 9001, True),
                                      Entry("::1", 9002, False), Entry("10.0.0.1", 1, False)]))
    yield wire.pack(wire.user(7, b"application data", 0xFFFF))


CONTENTS = list(_contents())


def datagram_seeds():
    return CONTENTS


def datagram_input(data: bytes) -> None:
    """Signed with the network key, any header || body goes through decode (size, MAC, parse) to
    a Message or a SwarmError, never anything else; decode and the MAC-less parse agree; what is
    accepted packs back to the same header || body (reserved flag bits kept); the same datagram
    under another key, with a MAC bit flipped or outside the accepted epochs is BadMac."""
    if len(data) < wire.HEADER_SIZE:
        data = data.ljust(wire.HEADER_SIZE, b"\0")
    datagram = KEYS.sign(data, WALL)
    for limits in LIMITS:
        try:
            msg = wire.decode(datagram, KEYS, WALL, limits)
        except SwarmError as exc:
            try:
                wire.parse(datagram, limits)
                check(isinstance(exc, wire.BadMac), f"decode refused what parse took: {exc!r}")
            except SwarmError as again:
                check(type(again) is type(exc), "decode and parse refuse differently")
            continue
        check(wire.parse(datagram, limits) == msg, "decode and parse disagree")
        check(wire.pack(msg, limits) == data, "pack(decode(d)) != d")
        for bad, when in ((STRANGER.sign(data, WALL), WALL), (datagram, WALL + 3600),
                          (datagram[:8] + bytes([datagram[8] ^ 1]) + datagram[9:], WALL)):
            try:
                wire.decode(bad, KEYS, when, limits)
                raise AssertionError("a datagram with a wrong MAC was accepted")
            except wire.BadMac:
                pass


# ---- the node -------------------------------------------------------------------------------

ME = ("127.0.0.1", 9000)
PEERS = [("127.0.0.%d" % h, 9000) for h in (2, 3, 4)] + [("127.0.0.2", 9001)]
# ops of a node script: 0-2 a datagram from a peer's address (signed, mutated, wrongly keyed or
# garbage), 3 the clock, 4 the node dials, 5 the node sends, 6 the honest peers and the node
# exchange what they queued, 7 an honest peer dials the node
INJECT, CLOCK, DIAL, SEND, DELIVER, PEER_DIAL, OPS = 2, 3, 4, 5, 6, 7, 8


def node_seeds():
    ops = []
    for c in CONTENTS:
        ops.append(b"\x00\x00" + bytes([len(c)]) + c)
    yield b"".join(ops) + b"\x03\x20" * 6
    # handshakes with honest peers both ways, then Pings, Pongs and promotion as the clock runs
    yield (bytes([DIAL, 0, PEER_DIAL, 1, PEER_DIAL, 3]) + bytes([DELIVER, 0xFF]) * 4
           + (bytes([CLOCK, 0x07, 0xD0]) + bytes([DELIVER, 0xFF]) * 3) * 12)
    yield (bytes([DIAL, 0, DIAL, 1, DIAL, 2, DIAL, 3]) + bytes([DELIVER, 0xFF]) * 4
           + (bytes([CLOCK, 0x0F, 0xA0]) + bytes([DELIVER, 0x7F]) * 2 + bytes([SEND, 1, 0, 4]) + b"data") * 10)


def node_input(data: bytes) -> None:
    """A node fed a script of signed, mutated, wrongly keyed and garbage datagrams from a few
    sources, dials, sends, clock steps and exchanges with honest peers (cores of their own,
    which dial it and answer it): nothing escapes; a datagram under the wrong key or malformed
    is answered with nothing; no source is ever sent more bytes than it sent, but the node's
    own dials, Pings and GetConnections to connections it holds; the table stays within its
    capacity and the counters non-negative."""
    s = Script(data)
    cfg = Config(capacity=8, max_known=8, target_direct=2, max_direct=3, resets_per_slot=4,
                 connect_answers_per_slot=4, vague_pongs_per_slot=4)
    now = 0.0
    node = SwarmNode(ME, KEYS, now, cfg, wall_offset=WALL, secret=b"s" * 32, seed=1)
    peers = {a: SwarmNode(a, KEYS, now, Config(capacity=8, max_known=8, target_direct=1, max_direct=2),
                          wall_offset=WALL, secret=bytes([k]) * 32, seed=2 + k)
             for k, a in enumerate(PEERS)}
    contents = CONTENTS
    received: dict = {}
    sent: dict = {}
    queued: list = []  # what the node sent to the honest peers, not yet delivered
    initiated = set()  # addresses the node talks to on its own (dials, held connections)

    def receive(datagram: bytes, source) -> None:
        received[source] = received.get(source, 0) + len(datagram)
        before = len(node._out)
        node.receive_datagram(datagram, source, now)
        try:
            wire.decode(datagram, KEYS, WALL + now, cfg.limits)
        except SwarmError:
            check(len(node._out) == before, "answered a datagram it dropped")

    while s:
        op = s.below(OPS)
        if op <= INJECT:
            source = s.pick(PEERS)
            kind = s.below(4)
            content = s.blob() if kind == 0 else mutate(s, s.pick(contents))
            if len(content) < wire.HEADER_SIZE:
                content = content.ljust(wire.HEADER_SIZE, b"\0")
            keys = STRANGER if kind == 3 else KEYS
            receive(keys.sign(content, WALL + now) if s.byte() & 3 else content + bytes(32), source)
        elif op == CLOCK:
            now += s.below(5000) / 1000
            tick(node, now)
            for peer in peers.values():
                tick(peer, now)
        elif op == DIAL:
            address = s.pick(PEERS)
            initiated.add(address)
            try:
                node.connect(address, now)
            except RuntimeError:  # the table is full of direct connections: documented
                pass
        elif op == SEND:
            address = s.pick(PEERS)
            try:
                node.send(address, 6 + s.byte(), s.blob(32), now)
                initiated.add(address)
            except (KeyError, ValueError):  # not connected / too long: the documented refusals
                pass
        elif op == DELIVER:
            keep = s.byte()  # bit k: the k-th datagram each way arrives (of the first 8)
            for k, (datagram, to) in enumerate(queued):
                if keep >> (k % 8) & 1:
                    peers[to].receive_datagram(datagram, ME, now)
            queued = []
            for address, peer in peers.items():
                for k, (datagram, to) in enumerate(peer.datagrams_to_send()):
                    if to == ME and keep >> (k % 8) & 1:
                        receive(datagram, address)
                while peer.next_event() is not None:
                    pass
        else:
            try:
                s.pick(list(peers.values())).connect(ME, now)
            except RuntimeError:
                pass
        for datagram, to in node.datagrams_to_send():
            sent[to] = sent.get(to, 0) + len(datagram)
            if to in peers:
                queued.append((datagram, to))
        for info in node.connections():
            initiated.add(info.address)  # held connections are checked on the node's own
        while node.next_event() is not None:
            pass
        check(len(node.table) <= cfg.capacity, "the table is over its capacity")
        check(all(v >= 0 for v in node.stats.values()), "a negative count")
    for to, n in sent.items():
        if to not in initiated:
            check(n <= received.get(to, 0), f"{n} bytes to {to}, which sent {received.get(to, 0)}")


# ---- the C datagram path against the core --------------------------------------------------

def path_seeds():
    yield b"\x00\x00\x00\x03\x01\x00\x00\x00" + b"\x40\x02\x00\x00\x05" * 6


def path_input(data: bytes) -> None:
    """The same datagrams (signed Pings, mutated ones, the core's own messages, garbage) from
    four peers, some holding vague and some direct connections, reach the C path over real
    loopback sockets and the Python core in memory: both send the same datagrams, count the
    same and leave the same table. (Without the Cython build there is no C path: nothing.)"""
    from fastpath.implementation import compiled

    if compiled("swarmpath") is None:
        return
    from bench.fuzz.swarmpath import Pair, table_state

    s = Script(data)
    cfg = Config(vague_pongs_per_slot=1 + s.below(4), ping_burst=1 + s.below(3),
                 ping_refill=0.5 + s.below(4), capacity=16)
    contents = CONTENTS
    p = Pair(cfg)
    try:
        for k in range(s.below(5)):
            p.establish(k, 0.0, direct=bool(s.byte() & 1))
        now = 1.0
        while s:
            now += s.below(3000) / 1000
            items = []
            for _ in range(1 + s.below(6)):
                k, kind = s.below(4), s.below(4)
                if kind == 0:
                    datagram = p.sign(wire.ping(s.below(1 << 16)), now)
                elif kind == 1:
                    datagram = mutate(s, p.sign(wire.ping(s.byte()), now))
                elif kind == 2:
                    datagram = KEYS.sign(s.pick(contents), WALL + now)
                else:
                    datagram = s.blob()
                items.append((k, datagram))
            p.feed(items, now)
            check(sorted(p.c_sent()) == sorted(p.to_py), "the C path and the core sent differently")
            p.to_py = []
            check(p.stats() == p.py.stats, "the C path and the core count differently")
            check(table_state(p.c) == table_state(p.py), "the C path and the core hold different tables")
    finally:
        p.close()


TARGETS = [
    Target("swarm-datagram", datagram_input, datagram_seeds, datagram_input.__doc__,
           ("pelotari.swarm.wire",), goal=10_000_000),
    Target("swarm-node", node_input, node_seeds, node_input.__doc__,
           ("pelotari.swarm.core", "pelotari.swarm.wire", "pelotari.swarm.table")),
    # Every input opens a socket pair: scripts past 1 KiB only repeat steps, at a quarter the pace.
    Target("swarm-path", path_input, path_seeds, path_input.__doc__,
           ("pelotari.swarm.core", "pelotari.swarm.wire", "fastpath.swarmpath"), max_len=1024),
]
