"""The bully P2P client's wire format (p2p-bully-client.md), byte-compatible with the Java clients.

Everything that defines the wire lives in TABLE: each tag's name, version byte and fields.
Encoding, decoding, the stream framer and the docs' tables derive from it. Every multi-byte
field is big-endian; an address is IPv4 (4 octets) + port (2); a peer is address + ID (2); Time
is milliseconds since the Unix epoch as a signed 64-bit integer; text is a 2-byte length and
that many bytes of UTF-8. Decisions the seed leaves open are in docs/protocols/bully.md.
"""
import socket
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

DEFAULT_PORT = 3333
MAX_ID = 25  # the leader gives IDs 1..25
ID_FIELD_MAX = 0xFFFF  # what an ID field's 2 bytes can say (IDs from other implementations)
PEER_SLOTS = 4  # peer lists hold exactly four entries; an empty one is PEER_SIZE zero bytes
ADDR_SIZE = 6  # IPv4 (4) + port (2)
PEER_SIZE = ADDR_SIZE + 2  # an address + ID (2)
MAX_TEXT = 65535  # what the 2-byte length can say


class BullyError(ValueError):
    """Bytes or a field value that the bully wire format does not allow."""

    reason = "malformed"


class UnknownTag(BullyError):
    """The first byte is not one of the 13 tags."""

    reason = "unknown_tag"


class BadVersion(BullyError):
    """The version byte is not the tag's (0 for EntryMsg, 1 for every other)."""

    reason = "bad_version"


class Truncated(BullyError):
    """The bytes end before the message does."""

    reason = "truncated"


class TooLong(BullyError):
    """A text longer than the configured limit."""

    reason = "too_long"


class InvalidField(BullyError):
    """A value outside its field (a port past 65535, five peers, a non-IPv4 address, ...)."""

    reason = "invalid_field"


@dataclass(frozen=True)
class Peer:
    """A node as the wire names it: IPv4 address, TCP port, ID (0 where unknown)."""

    host: str
    port: int
    id: int = 0

    @property
    def address(self) -> Tuple[str, int]:
        return (self.host, self.port)


@dataclass(frozen=True)
class Message:
    """One bully message: its tag, the peer it names and the fields its tag carries."""

    tag: int
    peer: Optional[Peer] = None  # the sender's (or, in 1 and 6, the searcher's) address
    id: int = 0  # EntryResponse: the ID given to the new peer
    peers: Tuple[Peer, ...] = ()  # EntryResponse, NodeResponse: up to four, empty slots left out
    source_id: int = 0  # NodeSearch
    search_id: int = 0  # NodeSearch, IAmFound
    destination_id: int = 0  # NodeSearch
    time_ms: int = 0  # HereIsMyTime, HereIsYourNewTime
    data: bytes = b""  # Text, as sent (UTF-8 by the seed)

    @property
    def name(self) -> str:
        return TABLE[self.tag][0]

    @property
    def text(self) -> str:
        """Text's data as a string (undecodable bytes replaced)."""
        return self.data.decode("utf-8", "replace")


# Field kinds: "addr" = IPv4 + port (6 B; the peer's host/port, ID 0), "peer" = IPv4 + port + ID
# (8 B), "peers" = four peer slots (32 B), "u16:<attr>", "i64:<attr>", "text" (2 B + N).
# tag: (name, version, fields)
TABLE: Dict[int, Tuple[str, int, Tuple[str, ...]]] = {
    1: ("Entry", 0, ("addr",)),
    2: ("EntryResponse", 1, ("u16:id", "peers")),
    3: ("NodeRequest", 1, ("peer",)),
    4: ("NodeResponse", 1, ("peers",)),
    5: ("IAmAlive", 1, ("peer",)),
    6: ("NodeSearch", 1, ("addr", "u16:source_id", "u16:search_id", "u16:destination_id")),
    7: ("IAmFound", 1, ("peer", "u16:search_id")),
    8: ("Text", 1, ("peer", "text")),
    9: ("AreYouAlive", 1, ("peer",)),
    10: ("IAmLeader", 1, ("peer",)),
    11: ("TellMeYourTime", 1, ("peer",)),
    12: ("HereIsMyTime", 1, ("peer", "i64:time_ms")),
    13: ("HereIsYourNewTime", 1, ("peer", "i64:time_ms")),
}
TAGS = {name: tag for tag, (name, _, _) in TABLE.items()}
_SIZES = {"addr": ADDR_SIZE, "peer": PEER_SIZE, "peers": PEER_SIZE * PEER_SLOTS, "u16": 2, "i64": 8,
          "text": 2}


def fixed_size(tag: int) -> int:
    """Bytes of a message with this tag (for Text: without its N bytes of text)."""
    return 2 + sum(_SIZES[f.split(":")[0]] for f in TABLE[tag][2])


def _pack_addr(host: str, port: int) -> bytes:
    try:
        octets = socket.inet_aton(host)
    except OSError:
        raise InvalidField(f"{host!r} is not an IPv4 address") from None
    if not 0 <= port <= 0xFFFF:
        raise InvalidField(f"port {port} outside 0..65535")
    return octets + struct.pack("!H", port)


def _pack_peer(p: Peer) -> bytes:
    if not 0 <= p.id <= ID_FIELD_MAX:
        raise InvalidField(f"ID {p.id} outside 0..{ID_FIELD_MAX}")
    return _pack_addr(p.host, p.port) + struct.pack("!H", p.id)


def encode(msg: Message, max_text: int = MAX_TEXT) -> bytes:
    """The bytes of one message."""
    spec = TABLE.get(msg.tag)
    if spec is None:
        raise UnknownTag(f"no tag {msg.tag}")
    _, version, fields = spec
    out = [bytes((msg.tag, version))]
    for f in fields:
        kind, _, attr = f.partition(":")
        if kind in ("addr", "peer"):
            if msg.peer is None:
                raise InvalidField(f"{spec[0]} needs a peer")
            out.append(_pack_addr(msg.peer.host, msg.peer.port) if kind == "addr"
                       else _pack_peer(msg.peer))
        elif kind == "peers":
            if len(msg.peers) > PEER_SLOTS:
                raise InvalidField(f"{len(msg.peers)} peers; a list holds {PEER_SLOTS}")
            out.extend(_pack_peer(p) for p in msg.peers)
            out.append(bytes(PEER_SIZE * (PEER_SLOTS - len(msg.peers))))
        elif kind == "u16":
            value = getattr(msg, attr)
            if not 0 <= value <= 0xFFFF:
                raise InvalidField(f"{attr} {value} outside 0..65535")
            out.append(struct.pack("!H", value))
        elif kind == "i64":
            value = getattr(msg, attr)
            if not -(1 << 63) <= value < (1 << 63):
                raise InvalidField(f"{attr} {value} outside a signed 64-bit integer")
            out.append(struct.pack("!q", value))
        else:  # text
            if len(msg.data) > max_text:
                raise TooLong(f"{len(msg.data)} bytes of text; at most {max_text}")
            out.append(struct.pack("!H", len(msg.data)) + msg.data)
    return b"".join(out)


def message_size(buf, max_text: int = MAX_TEXT) -> Optional[int]:
    """Bytes of the message at the start of buf, or None when buf does not yet say (too short
    to know). Raises UnknownTag, BadVersion or TooLong as soon as the bytes show it."""
    if len(buf) < 1:
        return None
    spec = TABLE.get(buf[0])
    if spec is None:
        raise UnknownTag(f"unknown tag {buf[0]}")
    if len(buf) < 2:
        return None
    if buf[1] != spec[1]:
        raise BadVersion(f"{spec[0]} has version {spec[1]}, not {buf[1]}")
    size = fixed_size(buf[0])
    if spec[2][-1] == "text":
        if len(buf) < size:
            return None
        n = struct.unpack_from("!H", buf, size - 2)[0]
        if n > max_text:
            raise TooLong(f"{n} bytes of text; at most {max_text}")
        size += n
    return size


def decode(buf, max_text: int = MAX_TEXT) -> Message:
    """One message that fills buf exactly."""
    size = message_size(buf, max_text)
    if size is None or len(buf) < size:
        raise Truncated(f"{len(buf)} bytes; the message needs {size or 'more'}")
    if len(buf) > size:
        raise InvalidField(f"{len(buf) - size} bytes past the end of the message")
    return _parse(bytes(buf))


def _peer_at(b: bytes, off: int) -> Peer:
    host = socket.inet_ntoa(b[off:off + 4])
    port, pid = struct.unpack_from("!HH", b, off + 4)
    return Peer(host, port, pid)


def _parse(b: bytes) -> Message:
    tag = b[0]
    values = {}
    off = 2
    for f in TABLE[tag][2]:
        kind, _, attr = f.partition(":")
        if kind == "addr":
            values["peer"] = Peer(socket.inet_ntoa(b[off:off + 4]),
                                  struct.unpack_from("!H", b, off + 4)[0])
        elif kind == "peer":
            values["peer"] = _peer_at(b, off)
        elif kind == "peers":
            slots = [_peer_at(b, off + PEER_SIZE * k) for k in range(PEER_SLOTS)]
            # An empty slot is 8 zero bytes; receivers skip 0.0.0.0 or port 0.
            values["peers"] = tuple(p for p in slots if p.host != "0.0.0.0" and p.port != 0)
        elif kind == "u16":
            values[attr] = struct.unpack_from("!H", b, off)[0]
        elif kind == "i64":
            values[attr] = struct.unpack_from("!q", b, off)[0]
        else:  # text
            n = struct.unpack_from("!H", b, off)[0]
            values["data"] = b[off + 2:off + 2 + n]
            off += n
        off += _SIZES[kind]
    return Message(tag, **values)


class Framer:
    """Splits one TCP connection's bytes into messages: a message may arrive in pieces and
    several may share a read; nothing relies on the peer closing. Holds at most one
    incomplete message (bounded by max_text). A BullyError means: count it, close."""

    def __init__(self, max_text: int = MAX_TEXT):
        if not 0 <= max_text <= MAX_TEXT:
            raise ValueError(f"max_text must be within 0..{MAX_TEXT}")
        self.max_text = max_text
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message held."""
        return len(self._buf)

    def feed(self, data, limit: int | None = None) -> List[Message]:
        """Messages completed by data, in order: at most `limit` (the rest stay held: feed
        b"" for them; `ready` says whether one is)."""
        self._buf += data
        out = []
        at, buf = 0, self._buf
        try:
            while limit is None or len(out) < limit:
                size = message_size(buf[at:at + 64], self.max_text)  # (every header fits)
                if size is None or len(buf) - at < size:
                    break
                out.append(_parse(bytes(buf[at:at + size])))
                at += size
        finally:
            del buf[:at]  # once: a read of many small messages is not quadratic
        return out

    @property
    def ready(self) -> bool:
        """Whether a whole message is held (feed(b"") returns it)."""
        size = message_size(self._buf, self.max_text)
        return size is not None and len(self._buf) >= size


def entry(host: str, port: int) -> Message:
    """EntryMsg (1): a new peer asks the leader to join, naming where it listens."""
    return Message(1, Peer(host, port))


def with_peer(name: str, me: Peer, **fields) -> Message:
    """Any message by name, from `me`."""
    return Message(TAGS[name], me, **fields)
