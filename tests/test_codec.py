"""The fyrehose codec, byte-exact to the seed's tables, run against both implementations."""
import pytest

from fastpath.errors import (BufferTooSmall, CodecError, InvalidField, LengthMismatch,
                             OversizePacket, TruncatedPacket, UnknownPacketType)
from fastpath.packets import (INFO_ACTIVE, INFO_NO_QUORUM, MAX_DATA, MAX_EPOCH, MAX_SEQUENCE,
                              Deliver, Forward, Info, Keepalive, KeepaliveAck, Push, Query, Request)

TOKEN = bytes(range(16))

# Test vectors written by hand from the seed's tables (fyrehose.txt, "### 0x1" .. "### 0x20").
VECTORS = [
    (Deliver(0x010203040506, b"hi"),
     b"\x01" b"\x00\x02" b"\x01\x02\x03\x04\x05\x06" b"hi"),
    (Push(b"abc"),
     b"\x02" b"\x00\x03" b"\x00\x00\x00\x00\x00\x00" b"abc"),
    (Request("10.0.0.1", 2323, 5, 9),
     b"\x04" b"\x0a\x00\x00\x01" b"\x09\x13" b"\x00\x00\x00\x00\x00\x05" b"\x00\x00\x00\x00\x00\x09"),
    (Forward("127.0.0.1", 65535, 0, MAX_SEQUENCE),
     b"\x08" + b"\x7f\x00\x00\x01" + b"\xff\xff" + b"\x00" * 6 + b"\xff" * 6),
    (Keepalive("0.0.0.0", 0, 0x3, TOKEN),
     b"\x10" b"\x00\x00\x00\x00" b"\x00\x00" b"\x00\x00\x00\x00\x00\x03" + TOKEN),
    (KeepaliveAck(TOKEN), b"\x20" + TOKEN),
    # The backbone-cluster extension (docs/protocols/fyrehose.md), both exactly 64 bytes.
    (Query(TOKEN), b"\x40" + TOKEN + b"\x00" * 47),
    (Info(TOKEN, 0x0102030405060708, "10.0.0.1", 2323, INFO_ACTIVE,
          (("10.0.0.1", 2323), ("10.0.0.2", 2323), ("192.168.1.9", 65535))),
     b"\x80" + TOKEN + b"\x01\x02\x03\x04\x05\x06\x07\x08"  # TOKEN, EPOCH
     b"\x0a\x00\x00\x01" b"\x09\x13" b"\x02" b"\x03"  # ADDR, PORT, FLAGS (ACTIVE), COUNT
     b"\x0a\x00\x00\x01\x09\x13" b"\x0a\x00\x00\x02\x09\x13" b"\xc0\xa8\x01\x09\xff\xff"
     + b"\x00" * 12  # two empty slots
     + b"\x00"),  # PADDING
    (Info(bytes(16), MAX_EPOCH, "0.0.0.0", 0, INFO_NO_QUORUM, ()),  # unasked, no active known
     b"\x80" + b"\x00" * 16 + b"\xff" * 8 + b"\x00\x00\x00\x00" b"\x00\x00" b"\x01" b"\x00"
     + b"\x00" * 30 + b"\x00"),
]


@pytest.mark.parametrize("packet,wire", VECTORS, ids=[type(p).__name__ for p, _ in VECTORS])
def test_vectors_encode_and_decode_exactly(codec, packet, wire):
    assert codec.encode(packet) == wire
    assert codec.decode(wire) == packet
    assert codec.packet_type(wire) == wire[0]


def test_typed_encoders_match_vectors(codec):
    assert codec.encode_deliver(0x010203040506, b"hi") == VECTORS[0][1]
    assert codec.encode_push(b"abc") == VECTORS[1][1]
    assert codec.encode_request("10.0.0.1", 2323, 5, 9) == VECTORS[2][1]
    assert codec.encode_forward("127.0.0.1", 65535, 0, MAX_SEQUENCE) == VECTORS[3][1]
    assert codec.encode_keepalive("", 0, 3, TOKEN) == VECTORS[4][1]
    assert codec.encode_keepalive_ack(TOKEN) == VECTORS[5][1]
    assert codec.encode_query(TOKEN) == VECTORS[6][1]
    assert codec.encode_info(TOKEN, 0x0102030405060708, "10.0.0.1", 2323, INFO_ACTIVE,
                             [("10.0.0.1", 2323), ("10.0.0.2", 2323), ("192.168.1.9", 65535)]) \
        == VECTORS[7][1]
    assert codec.encode_info(bytes(16), MAX_EPOCH, "", 0, INFO_NO_QUORUM) == VECTORS[8][1]


def test_decode_does_not_copy_data(codec):
    buf = bytearray(codec.encode_deliver(7, b"xyz"))
    packet = codec.decode(buf)
    assert isinstance(packet.data, memoryview)
    buf[-1] = ord("Z")
    assert bytes(packet.data) == b"xyZ"


def test_encode_into_writes_at_offset(codec):
    buf = bytearray(b"\xee" * 40)
    n = codec.encode_deliver_into(buf, 3, 1, b"ab")
    assert n == 11
    assert buf[:3] == b"\xee" * 3 and buf[14:] == b"\xee" * 26
    assert codec.decode(bytes(buf[3:3 + n])) == Deliver(1, b"ab")
    assert codec.encode_keepalive_ack_into(buf, 23, TOKEN) == 17 and bytes(buf[23:40]) == b"\x20" + TOKEN
    assert codec.encode_request_into(buf, 0, "1.2.3.4", 1, 2, 3) == 19
    assert codec.encode_forward_into(buf, 0, "1.2.3.4", 1, 2, 3) == 19
    assert codec.encode_keepalive_into(buf, 0, "1.2.3.4", 1, 2, TOKEN) == 29
    assert codec.encode_push_into(buf, 0, b"") == 9
    big = bytearray(b"\xee" * 70)
    assert codec.encode_query_into(big, 3, TOKEN) == 64 and bytes(big[3:67]) == VECTORS[6][1]
    assert big[:3] == b"\xee" * 3 and big[67:] == b"\xee" * 3  # PADDING written as zeros
    big[:] = b"\xee" * 70
    info = VECTORS[7][0]
    assert codec.encode_info_into(big, 6, info.token, info.epoch, info.addr, info.port,
                                  info.flags, info.members) == 64
    assert bytes(big[6:]) == VECTORS[7][1] and big[:6] == b"\xee" * 6  # empty slots zeroed
    with pytest.raises(BufferTooSmall):
        codec.encode_query_into(bytearray(64), 1, TOKEN)
    with pytest.raises(BufferTooSmall):
        codec.encode_info_into(bytearray(63), 0, TOKEN, 0, "", 0, 0)


def test_encode_into_rejects_small_buffer_at_and_past_limit(codec):
    buf = bytearray(19)
    assert codec.encode_request_into(buf, 0, "", 0, 0, 0) == 19  # exactly fits
    with pytest.raises(BufferTooSmall):
        codec.encode_request_into(buf, 1, "", 0, 0, 0)  # one byte past
    with pytest.raises(BufferTooSmall):
        codec.encode_deliver_into(bytearray(10), 0, 0, b"ab")
    with pytest.raises(BufferTooSmall):
        codec.encode_keepalive_ack_into(bytearray(17), -1, TOKEN)


# ---- every field at its limits --------------------------------------------------------------

def test_sequence_limits(codec):
    assert codec.decode(codec.encode_deliver(0, b"")).sequence == 0
    assert codec.decode(codec.encode_deliver(MAX_SEQUENCE, b"")).sequence == MAX_SEQUENCE
    with pytest.raises(InvalidField):
        codec.encode_deliver(MAX_SEQUENCE + 1, b"")
    with pytest.raises(InvalidField):
        codec.encode_deliver(-1, b"")


def test_data_limits(codec):
    assert len(codec.decode(codec.encode_push(b"x" * MAX_DATA)).data) == MAX_DATA
    assert len(codec.encode_deliver(1, b"x" * MAX_DATA)) == 65507  # the IPv4 UDP maximum
    with pytest.raises(OversizePacket):
        codec.encode_push(b"x" * (MAX_DATA + 1))
    with pytest.raises(OversizePacket):
        codec.encode_deliver(1, b"x" * (MAX_DATA + 1))
    # A lower limit is a constructor-style argument too: at it, and one past it.
    assert codec.encode_push(b"x" * 100, max_data=100)
    with pytest.raises(OversizePacket):
        codec.encode_push(b"x" * 101, max_data=100)
    wire = codec.encode_push(b"x" * 101)
    assert len(codec.decode(wire, max_data=101).data) == 101
    with pytest.raises(OversizePacket):
        codec.decode(wire, max_data=100)


def test_port_and_addr_limits(codec):
    assert codec.decode(codec.encode_request("255.255.255.255", 65535, 0, 0)).port == 65535
    assert codec.decode(codec.encode_request("", 0, 0, 0)).addr == "0.0.0.0"
    with pytest.raises(InvalidField):
        codec.encode_request("", 65536, 0, 0)
    with pytest.raises(InvalidField):
        codec.encode_keepalive("", -1, 0, TOKEN)
    with pytest.raises(InvalidField):
        codec.encode_keepalive("not-an-address", 1, 0, TOKEN)


def test_range_limits(codec):
    assert codec.decode(codec.encode_request("", 0, 9, 9)) == Request("0.0.0.0", 0, 9, 9)
    assert codec.decode(codec.encode_forward("", 0, 0, MAX_SEQUENCE)).to_seq == MAX_SEQUENCE
    with pytest.raises(InvalidField):
        codec.encode_request("", 0, 10, 9)
    with pytest.raises(InvalidField):
        codec.encode_forward("", 0, 0, MAX_SEQUENCE + 1)


def test_flags_and_token_limits(codec):
    assert codec.decode(codec.encode_keepalive("", 0, MAX_SEQUENCE, TOKEN)).flags == MAX_SEQUENCE
    with pytest.raises(InvalidField):
        codec.encode_keepalive("", 0, MAX_SEQUENCE + 1, TOKEN)
    for bad in (b"x" * 15, b"x" * 17, b""):
        with pytest.raises(InvalidField):
            codec.encode_keepalive("", 0, 0, bad)
        with pytest.raises(InvalidField):
            codec.encode_keepalive_ack(bad)


# ---- malformed datagrams, pinned as bytes literals --------------------------------------------

MALFORMED = [
    # (datagram, error, why)
    (b"", TruncatedPacket, "an empty datagram"),
    (b"\x01\x00\x00\x00\x00\x00\x00\x00", TruncatedPacket, "a DELIVER one byte short of its header"),
    (b"\x02\x00", TruncatedPacket, "a PUSH cut inside LENGTH"),
    (b"\x01\x00\x05\x00\x00\x00\x00\x00\x01abcd", LengthMismatch, "LENGTH 5 but 4 data bytes"),
    (b"\x02\x00\x01\x00\x00\x00\x00\x00\x00ab", LengthMismatch, "LENGTH 1 but 2 data bytes"),
    (b"\x02\xff\xff\x00\x00\x00\x00\x00\x00", LengthMismatch, "LENGTH 65535 with no data"),
    (b"\x04" + b"\x00" * 17, TruncatedPacket, "a REQUEST one byte short"),
    (b"\x08" + b"\x00" * 19, LengthMismatch, "a FORWARD with a trailing byte"),
    (b"\x04" + b"\x00" * 6 + b"\x00\x00\x00\x00\x00\x02" + b"\x00\x00\x00\x00\x00\x01",
     InvalidField, "a REQUEST whose FROM_SEQ is after TO_SEQ"),
    (b"\x10" + b"\x00" * 27, TruncatedPacket, "a KEEPALIVE one byte short"),
    (b"\x10" + b"\x00" * 29, LengthMismatch, "a KEEPALIVE with a trailing byte"),
    (b"\x20" + b"\x00" * 15, TruncatedPacket, "a KEEPALIVE-ACK one byte short"),
    (b"\x20" + b"\x00" * 17, LengthMismatch, "a KEEPALIVE-ACK with a trailing byte"),
    (b"\x00" + b"\x00" * 28, UnknownPacketType, "type 0x00"),
    (b"\x03" + b"\x00" * 8, UnknownPacketType, "type 0x03 (DELIVER|PUSH bits)"),
    (b"\x41" + b"\x00" * 63, UnknownPacketType, "type 0x41 (QUERY|DELIVER bits)"),
    (b"\x40" + b"\x00" * 16, TruncatedPacket, "a QUERY of TOKEN alone"),
    (b"\x40" + b"\x00" * 62, TruncatedPacket, "a QUERY one byte short"),
    (b"\x40" + b"\x00" * 64, LengthMismatch, "a QUERY with a trailing byte"),
    (b"\x80" + b"\x00" * 62, TruncatedPacket, "an INFO one byte short"),
    (b"\x80" + b"\x00" * 64, LengthMismatch, "an INFO with a trailing byte"),
    (b"\x80" + b"\x00" * 31 + b"\x06" + b"\x00" * 31, InvalidField, "an INFO whose COUNT is 6"),
    (b"\x80" + b"\x00" * 31 + b"\xff" + b"\x00" * 31, InvalidField, "an INFO whose COUNT is 255"),
    (b"\xff", UnknownPacketType, "a lone 0xff"),
    (b"GET / HTTP/1.1\r\n\r\n", UnknownPacketType, "an HTTP request"),
    (b"\x01\xff\xe3" + b"\x00" * 6 + b"x" * (MAX_DATA + 1), OversizePacket,
     "DELIVER with one byte more DATA than fits an IPv4 datagram"),
]


@pytest.mark.parametrize("datagram,error,why", MALFORMED, ids=[m[2] for m in MALFORMED])
def test_malformed_datagrams_raise_typed_errors(codec, datagram, error, why):
    with pytest.raises(error) as info:
        codec.decode(datagram)
    assert isinstance(info.value, CodecError) and isinstance(info.value, ValueError)
    assert str(info.value)  # a message a human can read


def test_errors_carry_drop_reasons():
    reasons = {cls.reason for cls in (TruncatedPacket, LengthMismatch, UnknownPacketType,
                                      OversizePacket, InvalidField, BufferTooSmall)}
    assert len(reasons) == 6


def test_implementations_agree_on_error_messages():
    from conftest import CODECS

    if len(CODECS) < 2:
        pytest.skip("compares the compiled codec with the reference: the Cython build only")
    for datagram, error, _ in MALFORMED:
        messages = []
        for impl in CODECS.values():
            with pytest.raises(error) as info:
                impl.decode(datagram)
            messages.append(str(info.value))
        assert messages[0] == messages[1]


def test_push_unused_field_is_sent_as_zero_and_ignored_on_receipt(codec):
    assert codec.encode_push(b"a")[3:9] == b"\0" * 6
    wire = b"\x02\x00\x01" + b"\xde\xad\xbe\xef\x00\x01" + b"a"
    assert codec.decode(wire) == Push(b"a")


def test_keepalive_reserved_flag_bits_are_carried_not_rejected(codec):
    assert codec.decode(codec.encode_keepalive("", 0, 0x4 | 0x2, TOKEN)).flags == 0x6


# ---- the backbone-cluster extension: QUERY, INFO, KEEPALIVE's CLUSTER -------------------------

def test_the_cluster_flag_is_keepalive_bit_3_named_after_packed():
    from fastpath.packets import CLUSTER, FLAG_NAMES, PACKED

    assert CLUSTER == 0x8 and FLAG_NAMES.index("CLUSTER") == 3 and FLAG_NAMES[2] == "PACKED"
    assert CLUSTER & PACKED == 0


def test_cluster_flag_travels_in_a_keepalive(codec):
    from fastpath.packets import CLUSTER, NOJOURNAL, packed_flags

    wire = codec.encode_keepalive("", 0, CLUSTER | NOJOURNAL, TOKEN)
    assert wire[7:13] == b"\x00\x00\x00\x00\x00\x0a"
    flags = CLUSTER | packed_flags(1472)
    assert codec.decode(codec.encode_keepalive("", 0, flags, TOKEN)).flags == flags


def test_query_and_info_are_exactly_64_bytes_so_an_answer_is_never_larger(codec):
    from fastpath.packets import INFO_SIZE, QUERY_SIZE

    assert QUERY_SIZE == INFO_SIZE == 64
    assert len(codec.encode_query(TOKEN)) == 64
    for n in range(6):
        assert len(codec.encode_info(TOKEN, 1, "10.0.0.1", 1, 0, [("10.0.0.9", 9)] * n)) == 64


def test_info_field_limits(codec):
    five = [(f"10.0.0.{k}", 2323 + k) for k in range(1, 6)]
    at_limits = Info(b"\xff" * 16, MAX_EPOCH, "255.255.255.255", 65535, 0xFF,
                     tuple(five))
    wire = codec.encode(at_limits)
    assert wire[32] == 5 and wire[33:63] == b"".join(
        bytes([10, 0, 0, k]) + (2323 + k).to_bytes(2, "big") for k in range(1, 6))
    assert codec.decode(wire) == at_limits  # reserved FLAGS bits are carried, not rejected
    for bad in (
        lambda: codec.encode_info(TOKEN, MAX_EPOCH + 1, "", 0, 0),
        lambda: codec.encode_info(TOKEN, -1, "", 0, 0),
        lambda: codec.encode_info(TOKEN, 0, "", 0, 0x100),
        lambda: codec.encode_info(TOKEN, 0, "", 65536, 0),
        lambda: codec.encode_info(TOKEN, 0, "nowhere", 0, 0),
        lambda: codec.encode_info(TOKEN, 0, "", 0, 0, five + [("10.0.0.6", 1)]),  # one past
        lambda: codec.encode_info(TOKEN, 0, "", 0, 0, [("10.0.0.1", 65536)]),
        lambda: codec.encode_info(TOKEN, 0, "", 0, 0, [("not-an-address", 1)]),
        lambda: codec.encode_info(TOKEN, 0, "", 0, 0, [("10.0.0.1", 1, 2)]),
        lambda: codec.encode_info(TOKEN, 0, "", 0, 0, ["10.0.0.1"]),
        lambda: codec.encode_info(b"short", 0, "", 0, 0),
        lambda: codec.encode_query(b"x" * 17),
    ):
        with pytest.raises(InvalidField):
            bad()


def test_query_padding_and_info_slots_past_count_are_ignored_on_receipt(codec):
    query = b"\x40" + TOKEN + b"\xa5" * 47
    assert codec.decode(query) == Query(TOKEN)
    assert codec.encode(codec.decode(query)) == VECTORS[6][1]  # sent again as zeros
    info = bytearray(VECTORS[7][1])
    info[33 + 3 * 6:] = b"\xa5" * 13  # the two slots past COUNT 3, and PADDING
    assert codec.decode(bytes(info)) == VECTORS[7][0]


def test_the_wire_table_rows_of_the_extension():
    from fastpath.packets import BY_CODE, INFO, MAX_MEMBERS, OFFSETS, QUERY

    assert BY_CODE[QUERY].extension and BY_CODE[INFO].extension
    assert not any(BY_CODE[c].extension for c in (0x01, 0x02, 0x04, 0x08, 0x10, 0x20))
    assert [(f, BY_CODE[INFO].offset(f)) for f, _ in BY_CODE[INFO].layout] == [
        ("token", 1), ("epoch", 17), ("addr", 25), ("port", 29), ("flags", 31), ("count", 32),
        ("members", 33), ("padding", 63)]
    assert BY_CODE[QUERY].offset("padding") == 17 and MAX_MEMBERS == 5
    # An extension's fields never rename the seed's constants (the Cython cores use these).
    assert (OFFSETS["OFF_ADDR"], OFFSETS["OFF_PORT"], OFFSETS["OFF_FLAGS"]) == (1, 5, 7)
    assert OFFSETS["OFF_KEEPALIVE_ACK_TOKEN"] == 1 and OFFSETS["OFF_INFO_ADDR"] == 25


def test_both_codecs_have_the_same_public_names():
    from conftest import CODECS

    if len(CODECS) < 2:
        pytest.skip("compares the compiled codec with the reference: the Cython build only")
    names = [{n for n in dir(impl) if n.startswith(("encode", "decode"))} for impl in CODECS.values()]
    assert names[0] == names[1] and {"encode_query", "encode_info_into"} <= names[0]


def test_pack_pushes_fills_each_datagram_up_to_the_limit_and_not_one_byte_past(codec):
    # Five 20-byte frames (11 bytes of DATA): 100 bytes fit a limit of 100, not one of 99.
    datas = [b"x" * 11] * 5
    assert [len(d) for d in codec.pack_pushes(datas, limit=100)] == [100]
    assert [len(d) for d in codec.pack_pushes(datas, limit=99)] == [80, 20]
    assert codec.pack_pushes([b"y" * 500], limit=100) == [codec.encode_push(b"y" * 500)]
    assert codec.pack_pushes([]) == []


def test_encode_pack_limits_and_types(codec):
    from fastpath.packets import MAX_DATAGRAM, Deliver, Keepalive, Push

    assert len(codec.encode_pack([Push(b"")] * (MAX_DATAGRAM // 9))) == 65502
    with pytest.raises(OversizePacket):
        codec.encode_pack([Push(b"")] * (MAX_DATAGRAM // 9 + 1))
    with pytest.raises(InvalidField):
        codec.encode_pack([])
    with pytest.raises(InvalidField):
        codec.encode_pack([Push(b"a"), Deliver(1, b"b")])
    with pytest.raises(InvalidField):
        codec.encode_pack([Keepalive("", 0, 0, b"t" * 16)])


@pytest.mark.parametrize("bad, error", [
    (b"\x02\x00\x01" + bytes(6) + b"a" + b"\x02\x00", LengthMismatch),
    (b"\x01\x00\x00" + bytes(6) + b"\x02\x00\x00" + bytes(6), LengthMismatch),
    (b"\x10" + bytes(40), LengthMismatch),
    (b"\x77" + bytes(40), UnknownPacketType),
    (b"\x02\x00", TruncatedPacket),
])
def test_decode_pack_rejects_what_does_not_tile(codec, bad, error):
    with pytest.raises(error):
        codec.decode_pack(bad)


def test_decode_strictly_refuses_a_pack(codec):
    with pytest.raises(LengthMismatch):
        codec.decode(codec.encode_push(b"a") * 2)


def test_unpack_into_indexes_frames_without_an_object_per_message(codec):
    import numpy as np

    from fastpath.errors import BufferTooSmall

    frames = [(7, b"ab"), (8, b""), (9, b"xyz")]
    pack = b"".join(codec.encode_deliver(s, d) for s, d in frames)
    seqs, offs, lens = np.zeros(3, np.uint64), np.zeros(3, np.uint32), np.zeros(3, np.uint32)
    assert codec.unpack_into(pack, seqs, offs, lens) == 3
    assert seqs.tolist() == [7, 8, 9]
    assert [pack[o:o + n] for o, n in zip(offs.tolist(), lens.tolist())] == [b"ab", b"", b"xyz"]
    assert codec.unpack_into(codec.encode_deliver(5, b"one"), seqs, offs, lens) == 1
    assert (seqs[0], offs[0], lens[0]) == (5, 9, 3)
    with pytest.raises(BufferTooSmall):  # at the limit it fits; one frame more does not
        codec.unpack_into(pack + codec.encode_deliver(10, b""), seqs, offs, lens)
    with pytest.raises(InvalidField):
        codec.unpack_into(codec.encode_push(b"a"), seqs, offs, lens)
    with pytest.raises(InvalidField):  # a valid pack, but of PUSHes: both codecs agree
        codec.unpack_into(codec.encode_push(b"a") * 2, seqs, offs, lens)
    with pytest.raises(LengthMismatch):
        codec.unpack_into(pack[:-1], seqs, offs, lens)


def test_generated_cython_constants_match_the_wire_table():
    # setup.py writes packets.pxi from the table; a table edit without a rebuild fails here.
    from pathlib import Path

    from fastpath import packets
    pxi = Path(packets.__file__).with_name("packets.pxi")
    assert pxi.read_text() == packets.cython_constants(), "stale: run setup.py build_ext"


def test_codec_types_and_sizes_come_from_the_wire_table(codec):
    from fastpath.packets import BY_CODE
    for code, row in BY_CODE.items():
        smallest = bytes([code]) + bytes(row.size - 1)  # LENGTH 0, FROM_SEQ = TO_SEQ: valid
        assert codec.packet_type(smallest) == code, row.name
        with pytest.raises(TruncatedPacket):
            codec.packet_type(smallest[:-1])
        with pytest.raises(LengthMismatch):
            codec.packet_type(smallest + b"\0")
    for code in set(range(256)) - set(BY_CODE):
        with pytest.raises(UnknownPacketType):
            codec.packet_type(bytes([code]) + bytes(40))


def test_buffers_other_than_bytes_are_read_and_written(codec):
    import array
    wire = codec.encode_deliver(5, b"abcd")
    for buf in (bytearray(wire), memoryview(wire), array.array("B", wire)):
        assert codec.decode(buf) == Deliver(5, b"abcd")
        assert codec.packet_type(buf) == 0x01
        assert codec.decode_pack(buf) == [Deliver(5, b"abcd")]
    out = array.array("B", bytes(20))
    assert codec.encode_push_into(out, 1, memoryview(b"xy")) == 11
    assert out.tobytes()[1:12] == codec.encode_push(b"xy")
    assert codec.encode_keepalive_ack(bytearray(TOKEN)) == b"\x20" + TOKEN
    with pytest.raises((TypeError, BufferError, ValueError)):
        codec.encode_push_into(bytes(20), 0, b"")  # read-only
