"""The fyrehose scapy layer against the fastpath codec: exact bytes both ways, every type,
random field values, and malformed input that must dissect without raising."""
import socket

import pytest
from hypothesis import given, settings

scapy_all = pytest.importorskip("scapy.all")
from scapy.all import IP, UDP, raw  # noqa: E402

from pelotari.fyrehose import codec  # noqa: E402
from fastpath.errors import LengthMismatch  # noqa: E402
from fastpath.packets import Deliver, Forward, Info, Keepalive, Push, Query, Request  # noqa: E402
from pelotari.layers import fyrehose as fl  # noqa: E402

from test_codec import MALFORMED, VECTORS  # noqa: E402
from test_codec_crosscheck import packets  # noqa: E402


def to_scapy(packet):
    """The scapy packet with the same fields as a decoded codec packet."""
    kind = type(packet)
    if kind is Deliver:
        return fl.FyrehoseDeliver(sequence=packet.sequence, data=bytes(packet.data))
    if kind is Push:
        return fl.FyrehosePush(data=bytes(packet.data))
    if kind in (Request, Forward):
        cls = fl.FyrehoseRequest if kind is Request else fl.FyrehoseForward
        return cls(addr=packet.addr, port=packet.port, from_seq=packet.from_seq, to_seq=packet.to_seq)
    if kind is Keepalive:
        return fl.FyrehoseKeepalive(addr=packet.addr, port=packet.port, flags=packet.flags,
                                    token=packet.token)
    if kind is Query:
        return fl.FyrehoseQuery(token=packet.token)
    if kind is Info:
        return fl.FyrehoseInfo(token=packet.token, epoch=packet.epoch, addr=packet.addr,
                               port=packet.port, flags=packet.flags, members=list(packet.members))
    return fl.FyrehoseKeepaliveAck(token=packet.token)


def fields(layer):
    """A scapy packet's field values (defaults included), as the codec would report them."""
    f = {fd.name: layer.getfieldval(fd.name) for fd in layer.fields_desc
         if fd.name not in ("type", "length", "unused", "count", "padding")}
    if "flags" in f:
        f["flags"] = int(f["flags"])
    if "members" in f:
        f["members"] = [(m.addr, m.port) for m in f["members"]]
    return f


@pytest.mark.parametrize("packet,wire", VECTORS, ids=[type(p).__name__ for p, _ in VECTORS])
def test_layers_build_and_dissect_the_seed_vectors_exactly(packet, wire):
    assert raw(to_scapy(packet)) == wire
    dissected = fl.Fyrehose(wire)
    assert type(dissected) is type(to_scapy(packet))
    assert fields(dissected) == fields(to_scapy(packet))
    assert raw(dissected) == wire


@settings(max_examples=300, deadline=None)
@given(packets)
def test_scapy_and_codec_agree_on_random_packets(packet):
    wire = codec.encode(packet)
    assert raw(to_scapy(packet)) == wire        # scapy builds the codec's bytes
    assert codec.decode(raw(to_scapy(packet))) == packet  # and the codec reads scapy's
    assert fields(fl.Fyrehose(wire)) == fields(to_scapy(packet))  # scapy reads the codec's


def test_length_is_computed_on_build_unless_given():
    assert raw(fl.FyrehosePush(data=b"abc"))[1:3] == b"\x00\x03"
    forced = raw(fl.FyrehosePush(data=b"abc", length=9))  # crafting a lie on purpose
    assert forced[1:3] == b"\x00\x09"
    with pytest.raises(LengthMismatch):
        codec.decode(forced)


# Every malformed datagram that fits in an IP packet (an empty one and one past 65,507 bytes
# are covered just below).
ON_THE_WIRE = [m for m in MALFORMED if 0 < len(m[0]) <= 65507]


@pytest.mark.parametrize("datagram,error,why", ON_THE_WIRE, ids=[m[2] for m in ON_THE_WIRE])
def test_malformed_datagrams_dissect_as_malformed_with_the_reason(datagram, error, why):
    pkt = IP(raw(IP() / UDP(sport=40000, dport=fl.DEFAULT_PORT) / datagram))
    layer = pkt[UDP].payload
    assert isinstance(layer, fl.FyrehoseMalformed)
    assert error.__name__ in pkt.summary() and layer.load == datagram


def test_empty_and_oversize_datagrams_never_raise():
    empty = IP(raw(IP() / UDP(sport=40000, dport=fl.DEFAULT_PORT)))
    assert not empty.haslayer(fl.Fyrehose) and empty[UDP].len == 8
    oversize = fl.Fyrehose(b"\x01\xff\xe3" + b"\0" * 6 + b"x" * 65499)
    assert isinstance(oversize, fl.FyrehoseMalformed) and "OversizePacket" in oversize.summary()


def test_dissection_is_bound_to_the_default_port_both_ways_and_to_any_named_port():
    wire = codec.encode_deliver(9, b"x")
    to_bb = IP(raw(IP() / UDP(sport=40000, dport=2323) / wire))
    from_bb = IP(raw(IP() / UDP(sport=2323, dport=40000) / wire))
    assert to_bb.haslayer(fl.FyrehoseDeliver) and from_bb.haslayer(fl.FyrehoseDeliver)
    other = IP(raw(IP() / UDP(sport=40000, dport=24555) / wire))
    assert not other.haslayer(fl.FyrehoseDeliver)
    fl.bind_port(24555)
    assert IP(raw(IP() / UDP(sport=40000, dport=24555) / wire))[fl.FyrehoseDeliver].sequence == 9


def test_registry_loads_every_protocol_module():
    from pelotari.layers import LAYERS, load

    modules = load()
    assert set(modules) == set(LAYERS) and modules["fyrehose"] is fl


def test_flags_show_their_names():
    assert "NOSUBSCRIBE+NOJOURNAL" in fl.FyrehoseKeepalive(flags=3).summary()
    assert socket.inet_aton(fl.FyrehoseKeepalive(addr="10.0.0.1").addr)


def test_describe_reports_our_packets_and_declines_others():
    from scapy.all import Raw

    assert fl.describe(fl.Fyrehose(codec.encode_deliver(3, b"x")))["sequence"] == 3
    assert fl.describe(fl.Fyrehose(codec.encode_forward("1.2.3.4", 5, 6, 7)))["to_seq"] == 7
    assert fl.describe(fl.Fyrehose(b"\x77"))["type"] == "MALFORMED"
    assert fl.describe(Raw(b"something else")) is None


def test_a_gso_super_datagram_splits_into_its_delivers():
    frames = [codec.encode_deliver(7 + i, b"x" * 16) for i in range(3)]
    assert fl.split_gso(b"".join(frames)) == frames
    last_short = frames[:2] + [codec.encode_deliver(9, b"y")]
    assert fl.split_gso(b"".join(last_short)) == last_short
    assert fl.split_gso(frames[0]) is None  # one datagram is not a GSO send
    assert fl.split_gso(frames[0] + b"\x01\x00") is None  # a torn frame
    assert fl.split_gso(codec.encode_push(b"a") + codec.encode_push(b"b")) is None
    assert fl.split_gso(codec.encode_deliver(1, b"short") + codec.encode_deliver(2, b"longer")) is None


# ---- packing extension -----------------------------------------------------------------------

def test_a_packed_datagram_builds_and_dissects_as_a_chain_of_frames():
    built = fl.FyrehoseDeliver(sequence=5, data=b"ab") / fl.FyrehoseDeliver(sequence=6, data=b"") \
        / fl.FyrehoseDeliver(sequence=9, data=b"xyz")
    want = codec.encode_pack([Deliver(5, b"ab"), Deliver(6, b""), Deliver(9, b"xyz")])
    assert raw(built) == want
    got = fl.Fyrehose(want)
    frames = []
    while isinstance(got, fl.FyrehoseDeliver):
        frames.append((got.sequence, got.data))
        got = got.payload
    assert frames == [(5, b"ab"), (6, b""), (9, b"xyz")]
    pushes = fl.Fyrehose(codec.pack_pushes([b"a", b"bc"])[0])
    assert isinstance(pushes, fl.FyrehosePush) and isinstance(pushes.payload, fl.FyrehosePush)
    assert pushes.payload.data == b"bc"


def test_a_pack_that_does_not_tile_is_malformed_and_a_mixed_one_too():
    torn = codec.encode_push(b"a") + b"\x02\x00\x05"
    mixed = codec.encode_push(b"a") + codec.encode_deliver(1, b"b")
    for bad in (torn, mixed):
        pkt = fl.Fyrehose(bad)
        assert isinstance(pkt, fl.FyrehoseMalformed) and "LengthMismatch" in pkt.summary()


def test_split_frames_and_describe_give_one_row_per_frame():
    pack = codec.encode_pack([Deliver(1, b"a"), Deliver(2, b"bbb")])
    frames = fl.split_frames(pack)
    assert frames == [codec.encode_deliver(1, b"a"), codec.encode_deliver(2, b"bbb")]
    assert fl.split_gso(pack) is None  # a short frame before a long one: not a GSO send
    assert fl.split_frames(frames[0]) is None
    row = fl.describe(fl.dissect(pack))
    assert row["type"] == "DELIVER" and row["sequence"] == 1 and "seq=1" in row["summary"]


def test_keepalive_flags_name_the_packed_bit():
    from fastpath.packets import NOJOURNAL, packed_flags

    ka = fl.FyrehoseKeepalive(flags=NOJOURNAL | packed_flags(1472), token=b"t" * 16)
    assert "PACKED" in ka.sprintf("%flags%")
    assert raw(ka) == codec.encode_keepalive("", 0, NOJOURNAL | packed_flags(1472), b"t" * 16)


def test_layer_types_fields_and_sizes_come_from_the_wire_table():
    from fastpath.packets import BY_CODE, DEFAULT_PORT
    assert set(fl.CLASSES) == set(BY_CODE) and fl.DEFAULT_PORTS == (DEFAULT_PORT,)
    for code, row in BY_CODE.items():
        cls = fl.CLASSES[code]
        assert cls().name == f"fyrehose {row.name}" and fl.TYPES[code] == row.name
        names = [f.name for f in cls.fields_desc]
        assert names == ["type"] + [n for n, _ in row.layout] + (["data"] if row.data else [])
        assert len(raw(cls())) == row.size, row.name
        assert raw(cls())[0] == code


# ---- the backbone-cluster extension: QUERY, INFO, KEEPALIVE's CLUSTER ------------------------

INFO_WIRE = (b"\x80" + bytes(range(16)) + b"\x00\x00\x00\x00\x00\x00\x00\x07"
             + b"\x0a\x00\x00\x01\x09\x13" + b"\x02" + b"\x02"
             + b"\x0a\x00\x00\x01\x09\x13" + b"\x0a\x00\x00\x02\x09\x14" + b"\x00" * 18 + b"\x00")


def test_info_builds_from_members_given_any_way_and_dissects_to_the_exact_bytes():
    built = fl.FyrehoseInfo(token=bytes(range(16)), epoch=7, addr="10.0.0.1", port=2323,
                            flags="ACTIVE",
                            members=[fl.FyrehoseMember(addr="10.0.0.1", port=2323),
                                     "10.0.0.2:2324"])
    assert raw(built) == INFO_WIRE  # COUNT computed: 2
    assert raw(fl.FyrehoseInfo(token=bytes(range(16)), epoch=7, addr="10.0.0.1", port=2323,
                               flags=2, members=[("10.0.0.1", 2323), ("10.0.0.2", 2324)])) \
        == INFO_WIRE
    got = fl.Fyrehose(INFO_WIRE)
    assert type(got) is fl.FyrehoseInfo and raw(got) == INFO_WIRE
    assert (got.epoch, got.addr, got.port, int(got.flags), got.count) == (7, "10.0.0.1", 2323, 2, 2)
    assert [(m.addr, m.port) for m in got.members] == [("10.0.0.1", 2323), ("10.0.0.2", 2324)]
    assert got.summary() == ("fyrehose INFO epoch=7 active=10.0.0.1:2323 flags=ACTIVE "
                             "members=10.0.0.1:2323,10.0.0.2:2324 token=" + bytes(range(16)).hex())
    assert codec.decode(INFO_WIRE) == Info(bytes(range(16)), 7, "10.0.0.1", 2323, 2,
                                           (("10.0.0.1", 2323), ("10.0.0.2", 2324)))


def test_query_builds_and_dissects_the_exact_bytes():
    wire = b"\x40" + b"t" * 16 + b"\x00" * 47
    assert raw(fl.FyrehoseQuery(token=b"t" * 16)) == wire
    got = fl.Fyrehose(wire)
    assert type(got) is fl.FyrehoseQuery and got.token == b"t" * 16 and raw(got) == wire
    assert got.summary() == "fyrehose QUERY token=" + (b"t" * 16).hex()
    odd = b"\x40" + b"t" * 16 + b"\x01" * 47  # PADDING is ignored on receipt: still a QUERY
    got = fl.Fyrehose(odd)
    assert type(got) is fl.FyrehoseQuery and raw(got) == odd
    assert got.sprintf("%padding%") == "47 bytes, not all zero (ignored)"


def test_an_unasked_info_with_no_quorum_and_no_members():
    wire = codec.encode_info(bytes(16), 3, "", 0, 0x1)
    got = fl.Fyrehose(wire)
    assert got.members == [] and got.count == 0 and raw(got) == wire
    assert got.summary() == ("fyrehose INFO epoch=3 active=0.0.0.0:0 flags=NO_QUORUM "
                             "members=none token=unasked")
    assert raw(fl.FyrehoseInfo(epoch=3, flags="NO_QUORUM")) == wire


def test_an_info_past_five_members_is_malformed_and_cannot_be_built_by_accident():
    bad = INFO_WIRE[:32] + b"\x06" + INFO_WIRE[33:]
    pkt = fl.Fyrehose(bad)
    assert isinstance(pkt, fl.FyrehoseMalformed) and "InvalidField" in pkt.summary()
    assert "COUNT 6" in pkt.summary()
    with pytest.raises(ValueError, match="6 members"):
        raw(fl.FyrehoseInfo(members=["10.0.0.1:1"] * 6))
    with pytest.raises(ValueError, match="not ADDR:PORT"):
        fl.FyrehoseInfo(members=["10.0.0.1"])
    lie = raw(fl.FyrehoseInfo(count=6))  # crafting a lie on purpose: the codec refuses it
    assert lie[32] == 6 and isinstance(fl.Fyrehose(lie), fl.FyrehoseMalformed)


def test_an_info_rebuilds_its_ignored_bytes_as_they_came():
    odd = bytearray(INFO_WIRE)
    odd[33 + 2 * 6:] = b"\xa5" * 19  # the slots past COUNT and PADDING: ignored on receipt
    got = fl.Fyrehose(bytes(odd))
    assert type(got) is fl.FyrehoseInfo and len(got.members) == 2 and raw(got) == bytes(odd)


def test_describe_gives_query_and_info_rows_with_their_fields():
    assert fl.describe(fl.Fyrehose(codec.encode_query(b"q" * 16))) == {
        "protocol": "fyrehose", "type": "QUERY", "token": (b"q" * 16).hex(),
        "summary": "fyrehose QUERY token=" + (b"q" * 16).hex()}
    row = fl.describe(fl.Fyrehose(INFO_WIRE))
    assert {k: v for k, v in row.items() if k != "summary"} == {
        "protocol": "fyrehose", "type": "INFO", "token": bytes(range(16)).hex(), "epoch": 7,
        "active": "10.0.0.1:2323", "flags": ["ACTIVE"],
        "members": ["10.0.0.1:2323", "10.0.0.2:2324"]}


def test_keepalive_flags_name_the_cluster_bit_and_info_flags_their_own():
    from fastpath.packets import CLUSTER

    ka = fl.FyrehoseKeepalive(flags=CLUSTER | 0x2, token=b"t" * 16)
    assert ka.sprintf("%flags%") == "NOJOURNAL+CLUSTER"
    assert raw(ka) == codec.encode_keepalive("", 0, CLUSTER | 0x2, b"t" * 16)
    assert fl.FyrehoseInfo(flags=3).sprintf("%flags%") == "NO_QUORUM+ACTIVE"
