"""The Cython codec against the pure-Python reference, on every packet type and random input.

Fuzz invariant (as h11's fuzz/afl-server.py states its own): for ANY bytes, decode() either
returns a packet that re-encodes to exactly those bytes, or raises a CodecError (a ValueError);
both implementations make the same choice, and every prefix of a valid datagram obeys the same
rule.
"""
import socket

from hypothesis import given, settings, strategies as st

from fastpath import codec as cy
from fastpath import refcodec as py
from fastpath.errors import CodecError
from fastpath.packets import (MAX_SEQUENCE, PACKET_TYPES, Deliver, Forward, Keepalive,
                              KeepaliveAck, Push, Request)

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
)


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


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.binary(max_size=64),
                 st.tuples(st.sampled_from(PACKET_TYPES), st.binary(max_size=40))
                 .map(lambda t: bytes([t[0]]) + t[1])))
def test_random_bytes_obey_the_invariant_in_both_codecs(data):
    a, b = outcome(cy, data), outcome(py, data)
    assert a == b
    if a[0] == "ok":
        assert cy.encode(a[1]) == data


@settings(max_examples=200, deadline=None)
@given(packets)
def test_every_prefix_of_a_datagram_obeys_the_invariant(packet):
    wire = cy.encode(packet)
    for cut in range(len(wire) + 1):  # whole, then byte by byte from nothing
        prefix = wire[:cut]
        a = outcome(cy, prefix)
        assert a == outcome(py, prefix)
        if a[0] == "ok":
            assert cy.encode(a[1]) == prefix


@settings(max_examples=300, deadline=None)
@given(packets, st.integers(0, 64), st.binary(min_size=1, max_size=3))
def test_bit_flips_and_trailing_bytes_are_handled_alike(packet, position, junk):
    wire = bytearray(cy.encode(packet))
    wire[position % len(wire)] ^= junk[0]
    for data in (bytes(wire), bytes(wire) + junk):
        assert outcome(cy, data) == outcome(py, data)
