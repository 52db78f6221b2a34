"""fyrehose: the codec (compiled and reference, single and packed), the client core, the
backbone core (compiled against its twin)."""
from __future__ import annotations

import array

from bench.fuzz.common import Script, Target, check, framed, mutate, tick
from fastpath import refcodec
from fastpath.errors import CodecError
from fastpath.implementation import compiled
from fastpath.packets import (BY_CODE, MAX_DATA, MEMBER_SIZE, Deliver, Forward, Info, Push,
                              Query)
from pelotari.fyrehose import backbone_core
from pelotari.fyrehose.core import ClientConfig, ClientCore
from pelotari.fyrehose.events import Lost, Message, Resync

CODECS = [c for c in (compiled("codec"), refcodec) if c is not None]
TOKEN = bytes(range(16))


def codec_seeds():
    """The seed's test vectors (tests/test_codec.py), the cluster extension's QUERY and INFO, a
    packed DELIVER and a packed PUSH."""
    c = refcodec
    yield c.encode_deliver(0x010203040506, b"hi")
    yield c.encode_push(b"abc")
    yield c.encode_request("10.0.0.1", 2323, 5, 9)
    yield c.encode_forward("127.0.0.1", 65535, 0, (1 << 48) - 1)
    yield c.encode_keepalive("0.0.0.0", 0, 3, TOKEN)
    yield c.encode_keepalive_ack(TOKEN)
    yield c.encode_query(TOKEN)
    yield c.encode_info(TOKEN, 7, "10.0.0.1", 2323, 0x2, [("10.0.0.1", 2323), ("10.0.0.2", 2323)])
    yield c.encode_pack([Deliver(7, b"a"), Deliver(8, b""), Deliver(9, b"xyz")])
    yield c.encode_pack([Push(b"p"), Push(b"qq")])


def _plain(packet):
    """A packet with its DATA as bytes, for comparing implementations."""
    if hasattr(packet, "data"):
        return packet._replace(data=bytes(packet.data))
    return packet


def _outcome(call, *args):
    """(True, value) or (False, the CodecError's class name); anything else propagates."""
    try:
        return True, call(*args)
    except CodecError as exc:
        return False, type(exc).__name__


def canonical(frames, data: bytes) -> bytes:
    """data with the bytes ignored on receipt zeroed (fyrehose.md): every PUSH frame's UNUSED
    field, a QUERY's or INFO's PADDING and an INFO's member slots past COUNT."""
    out, off = bytearray(data), 0
    for frame in frames:
        if type(frame) is Push:
            out[off + 3:off + 9] = bytes(6)
        elif type(frame) in (Query, Info):
            row = BY_CODE[data[0]]
            unused = (row.offset("padding") if type(frame) is Query
                      else row.offset("members") + len(frame.members) * MEMBER_SIZE)
            out[unused:] = bytes(len(out) - unused)
        off += len(refcodec.encode(frame)) if type(frame) in (Push, Deliver) else len(data)
    return bytes(out)


def _decode_all(codec, data: bytes, max_data: int):
    single = _outcome(codec.decode, data, max_data)
    if single[0]:
        packet = single[1]
        check(codec.encode(packet, max_data) == canonical([packet], data),
              f"{codec.__name__}: decode/encode round trip")
        single = (True, _plain(packet))
    pack = _outcome(codec.decode_pack, data, max_data)
    if pack[0]:
        frames = pack[1]
        again = codec.encode(frames[0], max_data) if len(frames) == 1 else codec.encode_pack(frames)
        check(again == canonical(frames, data), f"{codec.__name__}: decode_pack/encode_pack round trip")
        check(not single[0] or [single[1]] == [_plain(f) for f in frames], "pack of one != decode")
        pack = (True, [_plain(f) for f in frames])
    kind = _outcome(codec.packet_type, data)
    check(kind[0] == single[0] or max_data != MAX_DATA,  # packet_type checks against MAX_DATA
          f"{codec.__name__}: packet_type and decode disagree")
    seqs, offs, lens = array.array("Q", [0] * 8), array.array("I", [0] * 8), array.array("I", [0] * 8)
    index = _outcome(codec.unpack_into, data, seqs, offs, lens, max_data)
    if index[0]:
        n = index[1]
        frames = pack[1]
        check(pack[0] and n == len(frames) and all(type(f) is Deliver for f in frames),
              "unpack_into accepted what decode_pack did not")
        check([(seqs[k], data[offs[k]:offs[k] + lens[k]]) for k in range(n)] ==
              [(f.sequence, f.data) for f in frames], "unpack_into indexes other frames")
    return single, pack, kind, index


def codec_input(data: bytes) -> None:
    """Every entry point returns or raises CodecError; what is accepted re-encodes to the same
    bytes (those ignored on receipt zeroed: PUSH's UNUSED, QUERY/INFO padding); the compiled codec and the reference agree (value or error class) on every input."""
    for max_data in (MAX_DATA, len(data) // 2):
        results = [_decode_all(c, data, max_data) for c in CODECS]
        check(all(r == results[0] for r in results), "the compiled codec and the reference differ")


# ---- the client core ------------------------------------------------------------------------

BACKBONE = ("127.0.0.1", 4000)
SOURCES = [BACKBONE, ("127.0.0.2", 5000), ("127.0.0.1", 4001), ("10.0.0.9", 7)]


def client_seeds():
    c = refcodec
    wires = [c.encode_deliver(1, b"a"), c.encode_deliver(3, b"c"), c.encode_deliver(2, b"b"),
             c.encode_keepalive_ack(TOKEN), c.encode_forward("127.0.0.2", 5000, 1, 3),
             c.encode_request("127.0.0.2", 5000, 1, 2),
             c.encode_pack([Deliver(4, b"d"), Deliver(5, b"e")])]
    yield b"".join(b"\x00\x00" + s for s in framed(wires))
    yield b"\x01\x10" * 20
    yield b"\x03\x00hello" + b"\x02\x40" * 8


def client_input(data: bytes) -> None:
    """A client core fed a script of datagrams from the backbone and strangers, publishes and
    clock steps: nothing but its own errors escapes, delivered sequences only move forward
    (or are a Resync), counts never go negative, held messages stay within max_held and
    max_held_bytes, it never sends a stranger more bytes than that stranger sent it, and a
    requester the backbone FORWARDs to gets at most the repair budget (burst + rate x time)."""
    s = Script(data)
    flags = s.below(4)
    cfg = ClientConfig(flags=flags, max_held=16, max_held_bytes=256, journal_size=16,
                       max_pending_publishes=8, serve_burst=512, serve_rate=1024,
                       serve_requesters=1024, tail_probe=s.pick((0.0, 0.1)))
    now = 1000.0
    core = ClientCore(BACKBONE, now, cfg)
    sent_by: dict = {}
    got_from: dict = {}
    named: dict = {}  # requester -> when the backbone first FORWARDed to it
    expected = None  # the next sequence the application should see
    while s:
        op = s.below(4)
        if op == 0:
            source = s.pick(SOURCES)
            wire = s.blob()
            if s.byte() & 1:
                wire = mutate(s, s.pick(list(client_seeds_wires())))
            sent_by[source] = sent_by.get(source, 0) + len(wire)
            if source == core.backbone_source:
                try:
                    fwd = refcodec.decode(wire)
                except ValueError:
                    fwd = None
                if isinstance(fwd, Forward):
                    named.setdefault((fwd.addr, fwd.port), now)
            core.receive_datagram(wire, source, now)
        elif op == 1:
            now += s.below(3000) / 1000
            tick(core, now)
        elif op == 2:
            try:
                core.publish(s.blob(), now)
            except (ValueError, OverflowError):  # the documented refusals: too big, too many
                pass
        else:
            core.set_flags(s.below(4), now)
        for wire, to in core.datagrams_to_send():
            got_from[to] = n = got_from.get(to, 0) + len(wire)
            if to == BACKBONE:
                continue
            # Repairs the backbone asked for (C4) are bounded by the budget, whoever the
            # requester; anything else to an address is bounded by what that address sent.
            budget = 512 + 1024 * (now - named[to]) if to in named else 0
            check(n <= sent_by.get(to, 0) + budget,
                  f"{n} bytes to {to}, which sent {sent_by.get(to, 0)} (repair budget {budget:.0f})")
        while (event := core.next_event()) is not None:
            if isinstance(event, Message):
                check(expected is None or event.sequence == expected, "a message out of order")
                expected = (event.sequence + 1) % (1 << 48)
            elif isinstance(event, Lost):
                check(expected is None or event.first == expected, "a loss out of order")
                expected = (event.last + 1) % (1 << 48)
            elif isinstance(event, Resync):
                expected = event.received
        check(core.tracker.held_count <= 16 and core.tracker.held_bytes <= 256 + 255,
              "held beyond its limits")
        check(all(v >= 0 for v in core.stats.values()), "a negative count")


def client_seeds_wires():
    c = refcodec
    return (c.encode_deliver(5, b"x"), c.encode_keepalive_ack(TOKEN),
            c.encode_forward("127.0.0.2", 5000, 0, 9), c.encode_request("127.0.0.1", 4001, 0, 9),
            c.encode_pack([Deliver(6, b"a"), Deliver(7, b"b")]))


# ---- the backbone core: compiled against twin -----------------------------------------------

def backbone_input(data: bytes) -> None:
    """The compiled backbone core and its twin, fed the same script of datagrams from a few
    sources and clock steps, send the same bytes and report the same stats and table; the table
    stays within max_subscribers and max_per_address, counts never go negative, and a source
    that never sent a KEEPALIVE gets nothing but ACK-free silence or the DELIVERs of its PUSHes."""
    twin = backbone_core.BackboneCore
    native = compiled("backbone")
    options = dict(first_sequence=(1 << 48) - 20, seed=7, window=1.0, max_subscribers=4,
                   max_per_address=2, repair_rate=200.0, repair_burst=400.0,
                   max_request_range=16, batch=8, max_pack=2000, max_pack_frames=8,
                   allow_foreign_addresses=False)
    s = Script(data)
    options["packing"] = bool(s.byte() & 1)
    cores = [twin(**options)] + ([native.BackboneCore(**options)] if native else [])
    sources = [("127.0.0.%d" % h, 4000 + p) for h in (1, 2, 3) for p in range(2)]
    wires = [refcodec.encode_keepalive("", 0, s_flags, TOKEN) for s_flags in (0, 1, 2, 3)] + [
        refcodec.encode_push(b"hello"), refcodec.encode_request("", 0, 0, 30),
        refcodec.encode_pack([Push(b"a"), Push(b"bc")]),
        refcodec.encode_keepalive("127.0.0.1", 4001, 0, TOKEN)]
    now = 50 * 10**9  # the cores' clock is integer ns
    while s:
        if s.below(4) == 0:
            now += s.below(2000) * 10**6
            for core in cores:
                tick(core, now)
        else:
            batch = []
            for _ in range(1 + s.below(4)):
                wire = s.blob() if s.byte() & 1 else mutate(s, s.pick(wires))
                batch.append((wire, s.pick(sources)))
            for core in cores:
                core.receive_datagrams(batch, now)
        sends = [core.datagrams_to_send() for core in cores]
        check(all(x == sends[0] for x in sends), "the compiled core and its twin sent differently")
        stats = [core.stats(now) for core in cores]
        check(all(x == stats[0] for x in stats), "the compiled core and its twin count differently")
        tables = [core.table(now) for core in cores]
        check(all(x == tables[0] for x in tables), "the compiled core and its twin hold different tables")
        check(stats[0]["subscribers"] <= 4, "more subscribers than max_subscribers")
        check(all(v >= 0 for v in stats[0]["drops"].values()), "a negative drop count")


TARGETS = [
    Target("fyrehose-codec", codec_input, codec_seeds, codec_input.__doc__,
           ("fastpath.refcodec", "fastpath.codec"), goal=10_000_000),
    Target("fyrehose-client", client_input, client_seeds, client_input.__doc__,
           ("pelotari.fyrehose.core", "fastpath.refjournal")),
    Target("fyrehose-backbone", backbone_input, lambda: [b"\x01" + bytes(range(64)) * 4],
           backbone_input.__doc__, ("pelotari.fyrehose.backbone_core",)),
]
