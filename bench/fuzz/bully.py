"""bully: the TCP stream framing of the 13 messages, and the node core."""
from __future__ import annotations

from bench.fuzz.common import Script, Target, check, mutate, tick
from pelotari.bully import wire
from pelotari.bully.core import BullyNode, Close, Config, Connect, Send
from pelotari.bully.wire import BullyError, Framer, Message, Peer

ME = Peer("127.0.0.1", 3333, 25)


def _messages():
    """One of each of the 13 (the Java clients' shapes, tests/test_bully_wire.py)."""
    others = (Peer("127.0.0.2", 3334, 3), Peer("127.0.0.3", 3335, 7))
    yield wire.entry("127.0.0.2", 3334)
    yield Message(2, ME, id=3, peers=others)
    for name in ("NodeRequest", "IAmAlive", "AreYouAlive", "IAmLeader", "TellMeYourTime"):
        yield wire.with_peer(name, ME)
    yield Message(4, ME, peers=others)
    yield Message(6, Peer("127.0.0.2", 3334), source_id=3, search_id=1, destination_id=7)
    yield Message(7, ME, search_id=1)
    yield Message(8, ME, data="héllo".encode())
    yield Message(12, ME, time_ms=1_800_000_000_000)
    yield Message(13, ME, time_ms=-5)


def framing_seeds():
    stream = b"".join(wire.encode(m) for m in _messages())
    yield b"\x03" + stream
    yield b"\x01" + wire.encode(Message(8, ME, data=b"x" * 300))


def framing_input(data: bytes) -> None:
    """A stream cut into pieces (sizes from the first byte, at most ~32 of them) gives the same
    messages, in order, and the same error as the stream fed whole; the framer never raises
    anything but a BullyError nor holds more than one message's bytes; every message decodes
    alone from its own bytes and encodes to bytes that decode to it again (exactly its bytes
    when its peer slots are canonical)."""
    if not data:
        return
    stream = data[1:]
    step = max(1 + data[0] % 64, len(stream) // 32)  # at most ~32 pieces: a few µs each
    whole, whole_error = [], None
    try:
        whole = Framer(1024).feed(stream)
    except BullyError as exc:
        whole_error = type(exc)
    framer, pieces, piece_error = Framer(1024), [], None
    for off in range(0, len(stream), step):
        try:
            pieces += framer.feed(stream[off:off + step])
        except BullyError as exc:
            piece_error = type(exc)
            break
        check(framer.pending <= wire.fixed_size(8) + 1024, "the framer holds more than a message")
    check(piece_error is whole_error, "pieces and the whole stream end differently")
    if whole_error is None:
        check(pieces == whole, "pieces and the whole stream give different messages")
    off = 0
    for msg in pieces:
        size = wire.message_size(stream[off:], 1024)
        raw = stream[off:off + size]
        check(wire.decode(raw, 1024) == msg, "decode alone differs from the framer")
        again = wire.encode(msg)
        check(wire.decode(again) == msg and len(again) == len(raw), "encode/decode round trip")
        check(again == raw or msg.peers != () or wire.TABLE[msg.tag][2][-1] == "peers"
              or "peers" in wire.TABLE[msg.tag][2], "encode(decode(raw)) != raw")
        off += size


# ---- the node -------------------------------------------------------------------------------

HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


def node_seeds():
    msgs = [wire.encode(m) for m in _messages()]
    yield b"\x00\x00" + b"".join(b"\x01\x00" + bytes([len(m)]) + m for m in msgs) + b"\x03\x80" * 4


def node_input(data: bytes) -> None:
    """A leader (or a joining node) fed a script of connections from a few hosts, their bytes
    (the 13 messages, mutated, garbage), outgoing connections that come up or fail, elections,
    searches, texts, clock syncs and clock steps: nothing escapes; every Send and Close names a
    connection the core opened or accepted and has not closed; incoming connections stay within
    max_connections and max_connections_per_host; the member table, the book, the neighbours
    and the remembered searches within their limits; counts never negative."""
    s = Script(data)
    cfg = Config(max_connections=6, max_connections_per_host=2, max_book=6, max_searches=8,
                 max_outgoing=6, max_id=8, max_ids_per_host=2, answer_burst=2)
    now = 1000.0
    joining = bool(s.byte() & 1)
    node = BullyNode("127.0.0.1", 3333, now, config=cfg, system=lambda: 1.8e9,
                     leader=("127.0.0.2", 3333) if joining else None)
    wires = [wire.encode(m) for m in _messages()]
    live: dict = {}  # conn -> (outgoing, up)
    while s:
        op = s.below(8)
        if op == 0:
            conn = node.accept((s.pick(HOSTS), 40000 + s.below(4)), now, ("127.0.0.1", 3333))
            if conn is not None:
                check(conn not in live, "a connection number reused")
                live[conn] = (False, True)
        elif op in (1, 2) and live:
            conn = s.pick(sorted(live))
            kind = s.below(3)
            payload = s.pick(wires) if kind == 0 else mutate(s, s.pick(wires)) if kind == 1 else s.blob()
            node.data_received(conn, payload, now)
        elif op == 3:
            now += s.below(4000) / 1000
            tick(node, now)
        elif op == 4 and live:
            conn = s.pick(sorted(live))
            if s.byte() & 1 and live[conn] == (True, False):
                node.connection_made(conn, ("127.0.0.1", 50000), now)
                live[conn] = (True, True)
            else:
                node.connection_lost(conn, now)
                live.pop(conn, None)
        elif op == 5:
            try:
                node.elect(now)
            except ValueError:  # not joined: documented
                pass
        elif op == 6:
            try:
                if s.byte() & 1:
                    node.search(1 + s.below(10), now)
                else:
                    node.text(1 + s.below(10), s.blob(16), now)
            except ValueError:  # not joined, our own ID: the documented refusals
                pass
        else:
            try:
                node.start_sync(now)
            except ValueError:  # NotLeader: documented
                pass
        for action in node.actions():
            if isinstance(action, Connect):
                check(action.conn not in live, "a connection number reused")
                live[action.conn] = (True, False)
            elif isinstance(action, Send):
                check(action.conn in live, f"a Send on connection {action.conn}, not open")
            elif isinstance(action, Close):
                check(action.conn in live, f"a Close of connection {action.conn}, not open")
                live.pop(action.conn)
        while node.next_event() is not None:
            pass
        incoming = [c for c in node._conns.values() if not c.outgoing]
        check(len(incoming) <= cfg.max_connections, "over max_connections")
        check(all(sum(1 for c in incoming if c.remote[0] == h) <= cfg.max_connections_per_host
                  for h in HOSTS), "over max_connections_per_host")
        check(len(node.members) <= cfg.max_id and len(node.book) <= cfg.max_book
              and len(node.neighbours) <= cfg.max_peers and len(node._seen) <= cfg.max_searches,
              "a table over its limit")
        check(all(v >= 0 for v in node.stats.values()), "a negative count")


TARGETS = [
    Target("bully-framing", framing_input, framing_seeds, framing_input.__doc__,
           ("pelotari.bully.wire",), goal=10_000_000, max_len=600),
    Target("bully-node", node_input, node_seeds, node_input.__doc__,
           ("pelotari.bully.core", "pelotari.bully.wire", "pelotari.bully.clock")),
]
