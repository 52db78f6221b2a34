# SPDX-License-Identifier: MIT
# This file is part of pelotari.
# scapy.contrib.description = bully P2P client (join, search, text, bully election, time sync)
# scapy.contrib.status = loads

"""
bully: the P2P client of p2p-bully-client.md on TCP 3333 (pelotari, docs/protocols/bully.md).

Thirteen messages; byte 0 is the tag, byte 1 the version (Entry 0, every other 1), every
multi-byte field big-endian. The message list, the versions and the field layouts are not
restated here: each Packet class is generated from `pelotari.bully.wire.TABLE`. Field names are
the seed's: ip, port, id (a peer), peers (four slots of ip/port/id; an empty slot is 8 zero
bytes), source_id, search_id, destination_id, length and msg (Text; length is computed on
build), time_ms (the seed's Time: signed 64-bit milliseconds since the epoch; not `time`, which
every scapy packet already has as its capture timestamp).

    >>> from pelotari.layers.bully import BullyNodeRequest
    >>> raw(BullyNodeRequest(ip="127.0.0.1", port=3334, id=2))

TCP is a stream: one segment may carry several messages back to back, so a payload dissects as
a chain of messages, and is built the same way:

    >>> raw(BullyIAmAlive(id=2) / BullyIAmAlive(id=3))

Bytes that are not a valid message (an unknown tag, a wrong version, a message cut short)
dissect as BullyMalformed, holding everything from there to the end of the payload, whose
summary says why; dissection never raises. (Scapy dissects a chain recursively: past a
couple of hundred messages in one payload the rest becomes a Raw layer. `split_frames` splits
any number without recursion; `pelotari inspect` uses it.)
"""

import datetime
import socket
import time

from scapy.fields import (ByteEnumField, ByteField, FieldLenField, IPField, PacketListField,
                          ShortField, SignedLongField, StrField, StrLenField)
from scapy.layers.inet import TCP
from scapy.packet import Packet, bind_layers

from pelotari.bully import wire

DEFAULT_PORT = wire.DEFAULT_PORT
DEFAULT_PORTS = (DEFAULT_PORT,)
TRANSPORT = "tcp"  # `pelotari inspect` reads this protocol from TCP segments, craft connects
FRAMING = "messages"  # inspect joins a message split over segments and shows it once whole

NAMES = {tag: name for tag, (name, _, _) in wire.TABLE.items()}


class BullyPeer(Packet):
    """One slot of a peer list: IPv4, port, ID (all zero: an empty slot)."""

    name = "bully peer"
    fields_desc = [IPField("ip", "0.0.0.0"), ShortField("port", 0), ShortField("id", 0)]

    def extract_padding(self, s):
        return b"", s

    def empty(self) -> bool:
        """Whether a receiver skips this slot (address 0.0.0.0 or port 0, as wire.decode does)."""
        return self.ip == "0.0.0.0" or self.port == 0

    def mysummary(self):
        return f"{self.id}@{self.ip}:{self.port}"


def parse_peer(text: str) -> BullyPeer:
    """'ID@IP:PORT' or 'IP:PORT' (ID 0) as a peer slot."""
    pid, _, address = text.strip().rpartition("@")
    host, sep, port = address.rpartition(":")
    try:
        socket.inet_aton(host)
        if not sep or not host.count(".") == 3:
            raise OSError
        peer = BullyPeer(ip=host, port=int(port), id=int(pid or 0))
    except (OSError, ValueError):
        raise ValueError(f"{text.strip()!r} is not ID@IP:PORT (e.g. 2@127.0.0.2:3334)") from None
    if not (0 <= peer.port <= 0xFFFF and 0 <= peer.id <= 0xFFFF):
        raise ValueError(f"{text.strip()!r}: port and ID are 0..65535")
    return peer


class PeerSlotsField(PacketListField):
    """The four peer slots of EntryResponse and NodeResponse. Fewer peers are padded with empty
    (zero) slots on build; a dissected list always holds four slots, empty ones included, so it
    rebuilds to the same bytes."""

    def __init__(self, name):
        super().__init__(name, [], BullyPeer, count_from=lambda pkt: wire.PEER_SLOTS)

    def addfield(self, pkt, s, val):
        val = list(val or [])
        if len(val) > wire.PEER_SLOTS:
            raise ValueError(f"{len(val)} peers; a peer list holds {wire.PEER_SLOTS} slots")
        return super().addfield(pkt, s, val) + bytes(wire.PEER_SIZE * (wire.PEER_SLOTS - len(val)))

    @staticmethod
    def from_cli(text: str):
        """'ID@IP:PORT,ID@IP:PORT,...' (up to four; empty: no peers) for `pelotari craft`."""
        peers = [parse_peer(part) for part in text.split(",") if part.strip()]
        if len(peers) > wire.PEER_SLOTS:
            raise ValueError(f"{len(peers)} peers; a peer list holds {wire.PEER_SLOTS} slots")
        return peers


def _iso(ms: int) -> str:
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "out of the calendar's range"
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class MillisField(SignedLongField):
    """Time: milliseconds since the Unix epoch, signed 64-bit (Java's currentTimeMillis)."""

    def i2repr(self, pkt, x):
        return f"{x} ({_iso(x)})" if isinstance(x, int) else repr(x)

    @staticmethod
    def from_cli(text: str) -> int:
        """A number of milliseconds, or 'now'."""
        if text.strip().lower() == "now":
            return int(time.time() * 1000)
        return int(text, 0)


def _fields(tag: int):
    """The scapy fields of a message, from its row of wire.TABLE."""
    _, version, kinds = wire.TABLE[tag]
    out = [ByteEnumField("tag", tag, NAMES), ByteField("version", version)]
    for kind, _, attr in (k.partition(":") for k in kinds):
        if kind == "addr":
            out += [IPField("ip", "0.0.0.0"), ShortField("port", 0)]
        elif kind == "peer":
            out += [IPField("ip", "0.0.0.0"), ShortField("port", 0), ShortField("id", 0)]
        elif kind == "peers":
            out.append(PeerSlotsField("peers"))
        elif kind == "u16":
            out.append(ShortField(attr, 0))
        elif kind == "i64":
            out.append(MillisField(attr, 0))  # time_ms: `time` is scapy's capture time
        elif kind == "text":
            out += [FieldLenField("length", None, length_of="msg", fmt="!H"),
                    StrLenField("msg", b"", length_from=lambda pkt: pkt.length)]
        else:
            raise ValueError(f"wire.TABLE field kind {kind!r} has no scapy field")
    return out


def _text(data: bytes, limit: int = 40) -> str:
    text = data.decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "…")


class _BullyMessage(Packet):
    """Common behaviour: what follows a message in the segment is the next message."""

    def extract_padding(self, s):
        return s, b""

    def guess_payload_class(self, payload):
        return Bully

    def mysummary(self):
        name, version, kinds = wire.TABLE[self.TAG]
        head, tail = [f"bully {name}"], []
        if (self.tag, self.version) != (self.TAG, version):  # crafted on purpose
            head.append(f"tag={self.tag} version={self.version}")
        for kind, _, attr in (k.partition(":") for k in kinds):
            if kind == "peer":
                head.append(f"id={self.id}")
            if kind in ("addr", "peer"):
                tail.append(f"from {self.ip}:{self.port}")
            elif kind == "u16":
                head.append(f"{attr.replace('_id', '') if attr != 'id' else 'id'}="
                            f"{self.getfieldval(attr)}")
            elif kind == "peers":
                listed = [p.mysummary() for p in self.peers if not p.empty()]
                tail.append(f"peers=[{', '.join(listed)}]")
            elif kind == "i64":
                value = self.getfieldval(attr)
                tail.append(f"time={value} ({_iso(value)})")
            elif kind == "text":
                tail.append(f"len={self.length if self.length is not None else len(self.msg)} "
                            f"{_text(self.msg)}")
        return " ".join(head + tail)


def _message(type_name: str):
    """The Packet class of wire.TABLE's message `type_name`."""
    tag = wire.TAGS[type_name]
    _, version, kinds = wire.TABLE[tag]

    class Message(_BullyMessage):
        __doc__ = f"Tag {tag}, {type_name}: {', '.join(kinds)} (version {version})."
        TAG = tag
        name = f"bully {type_name}"
        fields_desc = _fields(tag)

    Message.__name__ = Message.__qualname__ = f"Bully{type_name}"
    CLASSES[tag] = Message
    return Message


CLASSES = {}  # tag -> Packet class
BullyEntry = _message("Entry")
BullyEntryResponse = _message("EntryResponse")
BullyNodeRequest = _message("NodeRequest")
BullyNodeResponse = _message("NodeResponse")
BullyIAmAlive = _message("IAmAlive")
BullyNodeSearch = _message("NodeSearch")
BullyIAmFound = _message("IAmFound")
BullyText = _message("Text")
BullyAreYouAlive = _message("AreYouAlive")
BullyIAmLeader = _message("IAmLeader")
BullyTellMeYourTime = _message("TellMeYourTime")
BullyHereIsMyTime = _message("HereIsMyTime")
BullyHereIsYourNewTime = _message("HereIsYourNewTime")
if set(CLASSES) != set(wire.TABLE):  # a tag added to the table needs its line above
    raise ImportError(f"bully layer lacks classes for tags {sorted(set(wire.TABLE) - set(CLASSES))}")

# What `pelotari craft TYPE` can build (TYPE is matched case-insensitively: NodeRequest works).
CRAFT = {NAMES[tag].lower(): cls for tag, cls in sorted(CLASSES.items())}


def problem(data):
    """Why the bytes at the start of data are not one complete, valid message (a
    wire.BullyError), or None when they are."""
    try:
        size = wire.message_size(data)
    except wire.BullyError as exc:
        return exc
    if size is None or len(data) < size:
        if not len(data):
            return wire.Truncated("no bytes")
        return wire.Truncated(f"{len(data)} bytes; {NAMES[data[0]]} needs "
                              f"{size if size is not None else 'more'}")
    return None


class BullyMalformed(Packet):
    """Bytes on a bully port that are not a valid message: everything from the first fault to
    the end of the payload (a stream cannot be resynchronised past it)."""

    name = "bully malformed"
    fields_desc = [StrField("load", b"")]

    @property
    def reason(self) -> str:
        exc = problem(self.load)
        return "valid" if exc is None else f"{type(exc).__name__}: {exc}"

    def mysummary(self):
        return f"bully malformed ({self.reason}), {len(self.load)} bytes"


class Bully(Packet):
    """Dispatches the bytes of a TCP payload to the message they start with (or BullyMalformed),
    after checking them the way wire.Framer does."""

    name = "bully"

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):
        if _pkt is None:
            return cls
        if problem(_pkt) is not None:
            return BullyMalformed
        return CLASSES[_pkt[0]]


def dissect(data: bytes):
    """A TCP payload of this protocol -> its chain of packets (never raises)."""
    return Bully(bytes(data))


def split_frames(data: bytes):
    """The messages of a payload that holds more than one, as bytes each (a malformed rest is
    the last item), or None for a payload of one message (or one malformed piece)."""
    view = memoryview(bytes(data))
    frames, offset = [], 0
    while offset < len(view):
        rest = view[offset:]
        if problem(rest) is not None:
            frames.append(bytes(rest))
            break
        size = wire.message_size(rest)
        frames.append(bytes(rest[:size]))
        offset += size
    return frames if len(frames) > 1 else None


def unfinished(data: bytes) -> bytes:
    """The last message of a payload when it is valid so far but not whole yet (peerbox writes
    one message over several TCP segments): `pelotari inspect` joins it to the same
    direction's next segment."""
    view = memoryview(bytes(data))
    offset = 0
    while offset < len(view):
        rest = view[offset:]
        exc = problem(rest)
        if exc is not None:
            return bytes(rest) if isinstance(exc, wire.Truncated) else b""
        offset += wire.message_size(rest)
    return b""


def messages(pkt):
    """The layers of a dissected chain, in order, each without its payload."""
    out = []
    while isinstance(pkt, (_BullyMessage, BullyMalformed)):
        one = pkt.copy()
        one.remove_payload()
        out.append(one)
        pkt = pkt.payload
    return out


def describe(layer):
    """What `pelotari inspect` shows of one dissected TCP payload (or its bytes), or None if it
    is not ours. For a chain, the first message; "types" then names every message in it."""
    if isinstance(layer, (bytes, bytearray, memoryview)):
        layer = dissect(layer)
    chain = messages(layer)
    if not chain:
        return None
    first = chain[0]
    if isinstance(first, BullyMalformed):
        row = {"protocol": "bully", "type": "MALFORMED", "reason": first.reason}
    else:
        row = {"protocol": "bully", "type": NAMES.get(first.tag, str(first.tag))}
    if len(chain) > 1:
        row["types"] = ["MALFORMED" if isinstance(m, BullyMalformed) else NAMES.get(m.tag)
                        for m in chain]
    row["summary"] = first.summary()
    return row


def bind_port(port: int) -> None:
    """Dissect TCP segments to or from `port` as bully."""
    bind_layers(TCP, Bully, dport=port)
    bind_layers(TCP, Bully, sport=port)


bind_port(DEFAULT_PORT)
