# SPDX-License-Identifier: MIT
# This file is part of pelotari.
# scapy.contrib.description = fyrehose backbone pub/sub (sequenced UDP)
# scapy.contrib.status = loads

"""
fyrehose: a sequenced UDP pub/sub backbone (pelotari, docs/protocols/fyrehose.md).

The seed's six packet types and the backbone-cluster extension's QUERY and INFO (opt-in),
big-endian; the first byte is the type. Field names are the seed's (and the extension's, as
docs/protocols/fyrehose.md writes them).

    >>> from pelotari.layers.fyrehose import FyrehoseKeepalive
    >>> raw(FyrehoseKeepalive(token=b"0123456789abcdef"))

A datagram on the fyrehose port that is not a valid fyrehose packet dissects as
FyrehoseMalformed, whose summary says why; dissection never raises. A packed datagram (the
packing extension: several DELIVER or several PUSH frames back to back) dissects as a chain of
frames, and is built the same way:

    >>> raw(FyrehosePush(data=b"a") / FyrehosePush(data=b"b"))

An INFO's members are a list of FyrehoseMember (addr, port), given as such, as (addr, port)
pairs or as "addr:port"; COUNT is computed on build unless given:

    >>> raw(FyrehoseInfo(epoch=3, addr="10.0.0.1", port=2323, flags="ACTIVE",
    ...                  members=[("10.0.0.1", 2323), "10.0.0.2:2323"]))
"""

import socket

from scapy.fields import (BitField, ByteEnumField, ByteField, FlagsField, IPField,
                          PacketListField, ShortField, StrFixedLenField, StrLenField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, Raw, bind_layers

from fastpath import refcodec
from fastpath.errors import CodecError
from fastpath.packets import (BY_CODE, DEFAULT_PORT, DELIVER, FLAG_NAMES, FORWARD, HEADER_SIZE,
                              INFO, INFO_FLAG_NAMES, KEEPALIVE, KEEPALIVE_ACK, MAX_MEMBERS, PUSH,
                              QUERY, REQUEST, TYPE_NAMES)

DEFAULT_PORTS = (DEFAULT_PORT,)
TYPES = TYPE_NAMES


class FyrehoseMember(Packet):
    """One INFO member slot: a cluster member's data address (addr, port)."""

    name = "fyrehose member"
    fields_desc = [IPField("addr", "0.0.0.0"), ShortField("port", 0)]

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        return f"{self.addr}:{self.port}"


def parse_member(text: str) -> FyrehoseMember:
    """'ADDR:PORT' as an INFO member slot."""
    host, sep, port = text.strip().rpartition(":")
    try:
        socket.inet_aton(host)
        if not sep or host.count(".") != 3 or not 0 <= int(port) <= 0xFFFF:
            raise ValueError
    except (OSError, ValueError):
        raise ValueError(f"{text.strip()!r} is not ADDR:PORT (e.g. 10.0.0.1:2323)") from None
    return FyrehoseMember(addr=host, port=int(port))


class MembersField(PacketListField):
    """INFO's MEMBERS: 5 slots of addr(4) port(2), of which COUNT are members. Built from
    FyrehoseMember, (addr, port) or "addr:port" items, the slots past them zeroed; dissected as
    COUNT members (a receiver ignores the slots past COUNT; a dissected packet left unchanged
    still builds its bytes as they came, scapy keeping them)."""

    __slots__ = ["width"]

    def __init__(self, name, width):
        super().__init__(name, [], FyrehoseMember,
                         count_from=lambda pkt: min(pkt.count or 0, MAX_MEMBERS))
        self.width = width

    def any2i(self, pkt, x):
        items = x if isinstance(x, (list, tuple)) and not (
            len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], int)) else [x]
        out = []
        for item in items:
            if isinstance(item, str):
                item = parse_member(item)
            elif isinstance(item, tuple):
                item = FyrehoseMember(addr=item[0], port=item[1])
            out.append(item)
        return super().any2i(pkt, out)

    def getfield(self, pkt, s):
        _, members = super().getfield(pkt, s[:self.width])
        return s[self.width:], members

    def addfield(self, pkt, s, val):
        val = list(val or [])
        if len(val) > MAX_MEMBERS:
            raise ValueError(f"{len(val)} members; INFO holds {MAX_MEMBERS} slots")
        return s + b"".join(bytes(m) for m in val).ljust(self.width, b"\0")

    def i2repr(self, pkt, x):
        return ", ".join(m.mysummary() for m in x or []) or "(none)"

    @staticmethod
    def from_cli(text: str):
        """'ADDR:PORT,ADDR:PORT,...' (up to five; empty: none) for `pelotari craft`."""
        members = [parse_member(part) for part in text.split(",") if part.strip()]
        if len(members) > MAX_MEMBERS:
            raise ValueError(f"{len(members)} members; INFO holds {MAX_MEMBERS} slots")
        return members


class ZeroPadField(StrFixedLenField):
    """QUERY's and INFO's PADDING: sent as zeros, ignored on receipt."""

    def __init__(self, name, width):
        super().__init__(name, b"\0" * width, width)

    def i2repr(self, pkt, x):
        x = bytes(x or b"")
        size = f"{len(x)} byte{'s' * (len(x) != 1)}"
        return f"{size}, zero" if not any(x) else f"{size}, not all zero (ignored)"


def _flag_names(names, bits):
    return list(names) + [f"bit{i}" for i in range(len(names), bits)]


def _field(code, name, width):
    """The scapy field for one (name, bytes) of the wire table's layout of `code`."""
    if name == "addr":
        return IPField(name, "0.0.0.0")
    if name in ("length", "port"):
        return ShortField(name, None if name == "length" else 0)
    if name == "flags":
        names = INFO_FLAG_NAMES if code == INFO else FLAG_NAMES
        return FlagsField(name, 0, width * 8, _flag_names(names, width * 8))
    if name == "token":
        return StrFixedLenField(name, b"\0" * width, width)
    if name == "count":  # INFO's member count: computed on build unless given
        return ByteField(name, None)
    if name == "members":
        return MembersField(name, width)
    if name == "padding":
        return ZeroPadField(name, width)
    return BitField(name, 0, width * 8)


def _fields(code):
    """fields_desc of a packet type, from its row of the wire table (fastpath/packets.py)."""
    row = BY_CODE[code]
    data = [StrLenField("data", b"", length_from=lambda p: p.length)] if row.data else []
    return [ByteEnumField("type", code, TYPES)] + [_field(code, *f) for f in row.layout] + data


class _Fyrehose(Packet):
    """Common behaviour: no payload after a fyrehose packet (it fills the datagram)."""

    def extract_padding(self, s):
        return b"", s

    def guess_payload_class(self, payload):
        return Raw


class _DataPacket(_Fyrehose):
    """DELIVER or PUSH; in a packed datagram the next frame of the same type is the payload."""

    def extract_padding(self, s):
        if s[:1] == bytes([self.type]):
            return s, b""
        return b"", s

    def guess_payload_class(self, payload):
        return type(self) if payload[:1] == bytes([self.type]) else Raw

    def post_build(self, pkt, pay):
        if self.length is None:  # LENGTH: bytes of DATA
            n = len(pkt) - HEADER_SIZE
            pkt = pkt[:1] + n.to_bytes(2, "big") + pkt[3:]
        return pkt + pay


class FyrehoseDeliver(_DataPacket):
    """0x1 DELIVER: SEQUENCE and DATA."""

    name = "fyrehose DELIVER"
    fields_desc = _fields(DELIVER)

    def mysummary(self):
        return self.sprintf("fyrehose DELIVER seq=%sequence% len=%length%")


class FyrehosePush(_DataPacket):
    """0x2 PUSH: DATA to publish."""

    name = "fyrehose PUSH"
    fields_desc = _fields(PUSH)

    def mysummary(self):
        return self.sprintf("fyrehose PUSH len=%length%")


class _RangePacket(_Fyrehose):
    def mysummary(self):
        return self.sprintf(f"fyrehose {TYPES[self.type]} %addr%:%port% seq %from_seq%..%to_seq%")


class FyrehoseRequest(_RangePacket):
    """0x4 REQUEST: re-send FROM_SEQ..TO_SEQ (inclusive) to ADDR:PORT (0 = the sender)."""

    name = "fyrehose REQUEST"
    fields_desc = _fields(REQUEST)


class FyrehoseForward(_RangePacket):
    """0x8 FORWARD: the backbone asks a journaling client to serve a REQUEST."""

    name = "fyrehose FORWARD"
    fields_desc = _fields(FORWARD)


class FyrehoseKeepalive(_Fyrehose):
    """0x10 KEEPALIVE: sign on for the subscriber window, with FLAGS and a TOKEN to echo."""

    name = "fyrehose KEEPALIVE"
    fields_desc = _fields(KEEPALIVE)

    def mysummary(self):
        return self.sprintf("fyrehose KEEPALIVE %addr%:%port% flags=%flags%")


class FyrehoseKeepaliveAck(_Fyrehose):
    """0x20 KEEPALIVE-ACK: the TOKEN of the KEEPALIVE it answers."""

    name = "fyrehose KEEPALIVE-ACK"
    fields_desc = _fields(KEEPALIVE_ACK)

    def mysummary(self):
        return "fyrehose KEEPALIVE-ACK token=" + self.token.hex()


class FyrehoseQuery(_Fyrehose):
    """0x40 QUERY (cluster extension): ask any cluster member for an INFO; TOKEN to echo."""

    name = "fyrehose QUERY"
    fields_desc = _fields(QUERY)

    def mysummary(self):
        return "fyrehose QUERY token=" + self.token.hex()


class FyrehoseInfo(_Fyrehose):
    """0x80 INFO (cluster extension): epoch, the active's address, FLAGS and the members."""

    name = "fyrehose INFO"
    fields_desc = _fields(INFO)

    def post_build(self, pkt, pay):
        if self.count is None:  # COUNT: the members listed
            at = BY_CODE[INFO].offset("count")
            pkt = pkt[:at] + bytes([len(self.members or [])]) + pkt[at + 1:]
        return pkt + pay

    def mysummary(self):
        token = "unasked" if not any(self.token) else self.token.hex()
        members = ",".join(m.mysummary() for m in self.members) or "none"
        return (f"fyrehose INFO epoch={self.epoch} active={self.addr}:{self.port} "
                f"flags={self.sprintf('%flags%') or 0} members={members} token={token}")


class FyrehoseMalformed(Packet):
    """A datagram on a fyrehose port that is not a valid fyrehose packet."""

    name = "fyrehose malformed"
    fields_desc = [StrLenField("load", b"", length_from=lambda p: None)]

    def do_dissect(self, s):
        self.load = s
        try:
            refcodec.packet_type(s)
            self.reason = "valid"  # only reached when dissected directly
        except CodecError as exc:
            self.reason = f"{type(exc).__name__}: {exc}"
        return b""

    def mysummary(self):
        return f"fyrehose malformed ({getattr(self, 'reason', 'unknown')}), {len(self.load)} bytes"


# What `pelotari craft TYPE` can build.
CRAFT = {"deliver": FyrehoseDeliver, "push": FyrehosePush, "request": FyrehoseRequest,
         "forward": FyrehoseForward, "keepalive": FyrehoseKeepalive,
         "keepalive-ack": FyrehoseKeepaliveAck, "query": FyrehoseQuery, "info": FyrehoseInfo}

CLASSES = {cls.fields_desc[0].default: cls for cls in CRAFT.values()}  # type byte -> class
assert set(CLASSES) == set(BY_CODE), "a packet type of the wire table has no layer class"


class Fyrehose(Packet):
    """Dispatches a datagram to its packet class after checking it the way the codec does."""

    name = "fyrehose"

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):
        if _pkt is None:
            return cls
        try:
            return CLASSES[refcodec.packet_type(_pkt)]
        except (CodecError, KeyError):
            pass
        try:  # the packing extension: frames back to back
            return CLASSES[refcodec.decode_pack(_pkt) and _pkt[0]]
        except (CodecError, KeyError):
            return FyrehoseMalformed


dissect = Fyrehose  # a datagram of this protocol -> its packet


def split_frames(data: bytes):
    """The frames of a datagram holding several DELIVER or several PUSH frames back to back
    (a packed datagram, or a GSO send captured before segmentation), or None."""
    if len(data) < 2 * HEADER_SIZE or data[0] not in (DELIVER, PUSH):
        return None
    try:
        packets = refcodec.decode_pack(data)
    except CodecError:
        return None
    if len(packets) < 2:
        return None
    frames, offset = [], 0
    for p in packets:
        end = offset + HEADER_SIZE + len(p.data)
        frames.append(data[offset:end])
        offset = end
    return frames


def split_gso(data: bytes):
    """The DELIVER datagrams a UDP GSO send carried, or None.

    A capture taken where no segmentation happened yet (on `lo`, whose device does GSO itself)
    shows one UDP datagram holding several DELIVERs back to back, all of one size but perhaps
    the last; the receiving sockets get them as separate datagrams.
    """
    frames, offset = [], 0
    while offset + HEADER_SIZE <= len(data):
        if data[offset] != DELIVER:
            return None
        end = offset + HEADER_SIZE + int.from_bytes(data[offset + 1:offset + 3], "big")
        if end > len(data):
            return None
        frames.append(data[offset:end])
        offset = end
    if offset != len(data) or len(frames) < 2:
        return None
    if any(len(f) != len(frames[0]) for f in frames[:-1]) or len(frames[-1]) > len(frames[0]):
        return None
    return frames


def describe(layer):
    """What `pelotari inspect` shows of one dissected UDP payload, or None if it is not ours."""
    if isinstance(layer, FyrehoseMalformed):
        return {"protocol": "fyrehose", "type": "MALFORMED", "reason": getattr(layer, "reason", ""),
                "summary": layer.summary()}
    if not isinstance(layer, tuple(CLASSES.values())):
        return None
    if isinstance(layer, _DataPacket) and isinstance(layer.payload, _DataPacket):
        layer = layer.copy()
        layer.remove_payload()  # one row per frame of a packed datagram
    row = {"protocol": "fyrehose", "type": TYPES[layer.type]}
    if isinstance(layer, FyrehoseDeliver):
        row["sequence"] = layer.sequence
    elif isinstance(layer, (FyrehoseRequest, FyrehoseForward)):
        row.update(from_seq=layer.from_seq, to_seq=layer.to_seq)
    elif isinstance(layer, FyrehoseQuery):
        row["token"] = layer.token.hex()
    elif isinstance(layer, FyrehoseInfo):
        row.update(token=layer.token.hex(), epoch=layer.epoch, active=f"{layer.addr}:{layer.port}",
                   flags=[n for bit, n in enumerate(INFO_FLAG_NAMES) if int(layer.flags) >> bit & 1],
                   members=[m.mysummary() for m in layer.members])
    row["summary"] = layer.summary()
    return row


def bind_port(port: int) -> None:
    """Dissect UDP datagrams to or from `port` as fyrehose."""
    bind_layers(UDP, Fyrehose, dport=port)
    bind_layers(UDP, Fyrehose, sport=port)


bind_port(DEFAULT_PORT)
