"""The Cython codec against the pure-Python reference, on every packet type and random input.

Fuzz invariant (as h11's fuzz/afl-server.py states its own): for ANY bytes, decode() either
returns a packet that re-encodes to exactly those bytes (but for the bytes a receiver ignores,
which are sent as zeros: PUSH's UNUSED, QUERY's and INFO's PADDING, INFO's slots past COUNT), or
raises a CodecError (a ValueError); both implementations make the same choice, and every prefix
of a valid datagram obeys the same rule.
"""
import socket

import pytest
from hypothesis import given, settings, strategies as st

from fastpath import refcodec as py
from fastpath.implementation import compiled

if compiled("codec") is None:
    pytest.skip("compares the compiled codec with the reference: the Cython build only",
                allow_module_level=True)
cy = compiled("codec")
from fastpath.errors import CodecError
from fastpath.packets import (BY_CODE, INFO, MAX_EPOCH, MAX_MEMBERS, MAX_SEQUENCE, MEMBER_SIZE,
                              PACKET_TYPES, PUSH, QUERY, Deliver, Forward, Info, Keepalive,
                              KeepaliveAck, Push, Query, Request)

seqs = st.integers(0, MAX_SEQUENCE)
ports = st.integers(0, 65535)
addrs = st.integers(0, 2**32 - 1).map(lambda a: socket.inet_ntoa(a.to_bytes(4, "big")))
tokens = st.binary(min_size=16, max_size=16)
payloads = st.binary(max_size=2048)
ranges = st.tuples(seqs, seqs).map(sorted)

packets = st.one_of(
    st.builds(Deliver, seqs, payloads),
    st.builds(Push, payloads),
    st.builds(lambda a, p, r: Request(a, p, *r), addrs, ports, ranges),
    st.builds(lambda a, p, r: Forward(a, p, *r), addrs, ports, ranges),
    st.builds(Keepalive, addrs, ports, seqs, tokens),
    st.builds(KeepaliveAck, tokens),
    st.builds(Query, tokens),
    st.builds(Info, tokens, st.integers(0, MAX_EPOCH), addrs, ports, st.integers(0, 255),
              st.lists(st.tuples(addrs, ports), max_size=MAX_MEMBERS).map(tuple)),
)


def sent_as(data):
    """data with the bytes a receiver ignores zeroed, as encode() sends them."""
    out = bytearray(data)
    if data[:1] == bytes([PUSH]):
        out[3:9] = bytes(len(out[3:9]))
    elif data[:1] == bytes([QUERY]):
        out[BY_CODE[QUERY].offset("padding"):] = bytes(len(out) - BY_CODE[QUERY].offset("padding"))
    elif data[:1] == bytes([INFO]):
        unused = BY_CODE[INFO].offset("members") + data[BY_CODE[INFO].offset("count")] * MEMBER_SIZE
        out[unused:] = bytes(len(out) - unused)
    return bytes(out)


def outcome(impl, data):
    """What decode() does with data: ('ok', packet) or ('error', error class)."""
    try:
        return "ok", impl.decode(data)
    except CodecError as exc:
        return "error", type(exc)


@settings(max_examples=400, deadline=None)
@given(packets)
def test_both_codecs_encode_identically_and_decode_each_other(packet):
    wire = cy.encode(packet)
    assert py.encode(packet) == wire
    assert cy.decode(wire) == packet
    assert py.decode(wire) == packet
    assert cy.encode(py.decode(wire)) == wire


# The extension's 64-byte types, near their size; an INFO's COUNT around its limit of 5.
extension_bytes = st.one_of(
    st.tuples(st.sampled_from((QUERY, INFO)), st.binary(min_size=62, max_size=64))
    .map(lambda t: bytes([t[0]]) + t[1]),
    st.tuples(st.binary(min_size=31, max_size=31), st.integers(0, 7),
              st.binary(min_size=31, max_size=31))
    .map(lambda t: bytes([INFO]) + t[0] + bytes([t[1]]) + t[2]))


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.binary(max_size=64),
                 st.tuples(st.sampled_from(PACKET_TYPES), st.binary(max_size=40))
                 .map(lambda t: bytes([t[0]]) + t[1]),
                 extension_bytes))
def test_random_bytes_obey_the_invariant_in_both_codecs(data):
    a, b = outcome(cy, data), outcome(py, data)
    assert a == b
    if a[0] == "ok":
        assert cy.encode(a[1]) == sent_as(data)


@settings(max_examples=200, deadline=None)
@given(packets)
def test_every_prefix_of_a_datagram_obeys_the_invariant(packet):
    wire = cy.encode(packet)
    for cut in range(len(wire) + 1):  # whole, then byte by byte from nothing
        prefix = wire[:cut]
        a = outcome(cy, prefix)
        assert a == outcome(py, prefix)
        if a[0] == "ok":
            assert cy.encode(a[1]) == sent_as(prefix)


@settings(max_examples=300, deadline=None)
@given(packets, st.integers(0, 64), st.binary(min_size=1, max_size=3))
def test_bit_flips_and_trailing_bytes_are_handled_alike(packet, position, junk):
    wire = bytearray(cy.encode(packet))
    wire[position % len(wire)] ^= junk[0]
    for data in (bytes(wire), bytes(wire) + junk):
        assert outcome(cy, data) == outcome(py, data)


def pack_outcome(impl, data):
    """What decode_pack() does with data: ('ok', packets) or ('error', error class)."""
    try:
        return "ok", impl.decode_pack(data)
    except CodecError as exc:
        return "error", type(exc)


data_frames = st.one_of(st.lists(st.builds(Deliver, seqs, st.binary(max_size=40)), min_size=1,
                                 max_size=8),
                        st.lists(st.builds(Push, st.binary(max_size=40)), min_size=1, max_size=8))


@settings(max_examples=400, deadline=None)
@given(data_frames)
def test_packs_encode_identically_and_decode_to_their_frames(frames):
    pack = cy.encode_pack(frames)
    assert py.encode_pack(frames) == pack == b"".join(cy.encode(f) for f in frames)
    assert cy.decode_pack(pack) == frames == py.decode_pack(pack)


@settings(max_examples=1500, deadline=None)
@given(data_frames, st.data())
def test_damaged_packs_obey_the_invariant_in_both_codecs(frames, draw):
    """Invariant for packs: decode_pack either returns frames that re-pack to exactly the input
    (PUSH: but for UNUSED) or raises a CodecError; both codecs agree. Damage: a cut, an inserted byte or a flipped one."""
    pack = bytearray(cy.encode_pack(frames))
    where = draw.draw(st.integers(0, len(pack)))
    how = draw.draw(st.sampled_from(["cut", "insert", "flip"]))
    if how == "cut":
        pack = pack[:where]
    elif how == "insert":
        pack[where:where] = bytes([draw.draw(st.integers(0, 255))])
    elif where < len(pack):
        pack[where] ^= 1 << draw.draw(st.integers(0, 7))
    a, b = pack_outcome(cy, bytes(pack)), pack_outcome(py, bytes(pack))
    assert a == b
    if a[0] == "ok":
        again = b"".join(cy.encode(f) for f in a[1])
        if pack[0] == 0x01:
            assert again == bytes(pack)
        else:  # a PUSH's UNUSED bytes are ignored on receipt and sent as zero
            assert len(again) == len(pack) and again[:1] == pack[:1]
