"""The bully wire format: every message byte-exact (as the Java clients send them), the stream
framer on split and coalesced reads, and every class of bad input at and past its limit."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from pelotari.bully import wire
from pelotari.bully.wire import Message, Peer

ME = Peer("10.0.0.7", 3333, 5)
P = [Peer("10.0.0.%d" % k, 4000 + k, k) for k in range(1, 5)]
ME_BYTES = bytes([10, 0, 0, 7]) + struct.pack("!HH", 3333, 5)


def peer_bytes(p):
    return bytes(int(o) for o in p.host.split(".")) + struct.pack("!HH", p.port, p.id)


VECTORS = [
    (wire.entry("10.0.0.7", 3333), b"\x01\x00" + bytes([10, 0, 0, 7]) + b"\x0d\x05"),
    (Message(2, id=5, peers=tuple(P[:2])),
     b"\x02\x01\x00\x05" + peer_bytes(P[0]) + peer_bytes(P[1]) + bytes(16)),
    (Message(3, ME), b"\x03\x01" + ME_BYTES),
    (Message(4, peers=tuple(P)), b"\x04\x01" + b"".join(peer_bytes(p) for p in P)),
    (Message(5, ME), b"\x05\x01" + ME_BYTES),
    (Message(6, Peer("10.0.0.7", 3333), source_id=5, search_id=9, destination_id=17),
     b"\x06\x01" + bytes([10, 0, 0, 7]) + b"\x0d\x05" + b"\x00\x05\x00\x09\x00\x11"),
    (Message(7, ME, search_id=9), b"\x07\x01" + ME_BYTES + b"\x00\x09"),
    (Message(8, ME, data="¡hola!".encode()), b"\x08\x01" + ME_BYTES + b"\x00\x07" + "¡hola!".encode()),
    (Message(9, ME), b"\x09\x01" + ME_BYTES),
    (Message(10, ME), b"\x0a\x01" + ME_BYTES),
    (Message(11, ME), b"\x0b\x01" + ME_BYTES),
    (Message(12, ME, time_ms=1_795_000_000_123), b"\x0c\x01" + ME_BYTES + struct.pack("!q", 1_795_000_000_123)),
    (Message(13, ME, time_ms=-5), b"\x0d\x01" + ME_BYTES + b"\xff" * 7 + b"\xfb"),
]


@pytest.mark.parametrize("msg, data", VECTORS, ids=[wire.TABLE[m.tag][0] for m, _ in VECTORS])
def test_every_message_encodes_and_decodes_byte_exact(msg, data):
    assert wire.encode(msg) == data
    assert wire.decode(data) == msg


def test_sizes_are_the_seeds():
    sizes = {1: 8, 2: 36, 3: 10, 4: 34, 5: 10, 6: 14, 7: 12, 8: 12, 9: 10, 10: 10, 11: 10,
             12: 18, 13: 18}
    assert {tag: wire.fixed_size(tag) for tag in wire.TABLE} == sizes
    assert [m.tag for m, _ in VECTORS] == list(range(1, 14))


def test_empty_slots_are_skipped_on_receipt():
    slots = peer_bytes(P[0]) + bytes(8) + bytes([0, 0, 0, 0]) + b"\x10\x00\x00\x01" \
        + bytes([10, 0, 0, 9]) + b"\x00\x00\x00\x03"
    assert wire.decode(b"\x04\x01" + slots).peers == (P[0],)  # 0.0.0.0 or port 0: no peer


def test_the_framer_takes_a_message_split_byte_by_byte_and_several_in_one_read():
    stream = b"".join(data for _, data in VECTORS)
    f = wire.Framer()
    got = []
    for i in range(len(stream)):
        got += f.feed(stream[i:i + 1])
    assert got == [m for m, _ in VECTORS] and f.pending == 0
    assert wire.Framer().feed(stream) == [m for m, _ in VECTORS]
    f = wire.Framer()
    assert f.feed(stream[:5]) == [] and f.pending == 5  # a partial message waits


@pytest.mark.parametrize("data, error", [
    (b"\x00\x01" + bytes(8), wire.UnknownTag),
    (b"\x0e\x01" + bytes(8), wire.UnknownTag),
    (b"\xff", wire.UnknownTag),
    (b"\x01\x01" + bytes(6), wire.BadVersion),  # Entry is version 0
    (b"\x05\x00" + bytes(8), wire.BadVersion),  # everything else 1
])
def test_bad_tags_and_versions_are_refused_as_soon_as_seen(data, error):
    with pytest.raises(error):
        wire.Framer().feed(data[:2])
    with pytest.raises(error) as exc:
        wire.decode(data)
    assert isinstance(exc.value, ValueError) and exc.value.reason


def test_truncated_and_trailing_bytes_are_refused_by_decode():
    for _, data in VECTORS:
        with pytest.raises(wire.Truncated):
            wire.decode(data[:-1] if len(data) > 1 else b"")
        with pytest.raises(wire.InvalidField):
            wire.decode(data + b"\x00")


def test_text_length_at_the_limit_and_one_past():
    at = Message(8, ME, data=b"x" * 100)
    past = Message(8, ME, data=b"x" * 101)
    assert wire.decode(wire.encode(at), max_text=100) == at
    with pytest.raises(wire.TooLong):
        wire.encode(past, max_text=100)
    f = wire.Framer(max_text=100)
    with pytest.raises(wire.TooLong):  # refused from its length field, before the text arrives
        f.feed(wire.encode(past)[:12])
    assert wire.Framer(max_text=100).feed(wire.encode(at)) == [at]
    assert len(wire.encode(Message(8, ME, data=b"y" * 65535))) == 12 + 65535
    with pytest.raises(wire.TooLong):
        wire.encode(Message(8, ME, data=b"y" * 65536))


def test_fields_out_of_range_are_refused_on_encode():
    for bad in (Message(3, Peer("10.0.0.1", 70000, 1)), Message(3, Peer("::1", 1, 1)),
                Message(3, Peer("10.0.0.1", 1, -1)), Message(4, peers=tuple(P) + (ME,)),
                Message(7, ME, search_id=1 << 16), Message(12, ME, time_ms=1 << 63),
                Message(5), Message(99, ME)):
        with pytest.raises(wire.BullyError):
            wire.encode(bad)


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_decode_to_a_message_or_a_bully_error(data):
    # Invariant: decoding never raises anything but BullyError (a ValueError), and whatever it
    # accepts encodes to bytes that decode to the same message.
    try:
        msg = wire.decode(data)
    except wire.BullyError:
        return
    assert wire.decode(wire.encode(msg)) == msg


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([d for _, d in VECTORS]), max_size=8),
       st.lists(st.integers(1, 40), max_size=20))
def test_any_split_of_a_stream_gives_the_same_messages(datas, cuts):
    stream = b"".join(datas)
    f, got, pos = wire.Framer(), [], 0
    for c in cuts:
        got += f.feed(stream[pos:pos + c])
        pos += c
    got += f.feed(stream[pos:])
    assert got == [wire.decode(d) for d in datas] and f.pending == 0
