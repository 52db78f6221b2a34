"""Decoded fyrehose packets, shared by the Cython codec and the pure-Python reference."""
from typing import NamedTuple, Union

DELIVER = 0x01
PUSH = 0x02
REQUEST = 0x04
FORWARD = 0x08
KEEPALIVE = 0x10
KEEPALIVE_ACK = 0x20

PACKET_TYPES = (DELIVER, PUSH, REQUEST, FORWARD, KEEPALIVE, KEEPALIVE_ACK)
TYPE_NAMES = {
    DELIVER: "DELIVER",
    PUSH: "PUSH",
    REQUEST: "REQUEST",
    FORWARD: "FORWARD",
    KEEPALIVE: "KEEPALIVE",
    KEEPALIVE_ACK: "KEEPALIVE-ACK",
}

# KEEPALIVE FLAGS (seed: 0x1 -> NOSUBSCRIBE, 0x2 -> NOJOURNAL); other bits are reserved.
NOSUBSCRIBE = 0x1
NOJOURNAL = 0x2
# Packing extension (docs/protocols/fyrehose.md): 0x4 says "send me packed DELIVERs", and bits
# 16..31 carry the largest packed datagram the client accepts (0 = DEFAULT_PACK_LIMIT).
PACKED = 0x4
PACK_LIMIT_SHIFT = 16
DEFAULT_PACK_LIMIT = 1472  # a 1,500-byte Ethernet MTU minus the IPv4 and UDP headers

HEADER_SIZE = 9  # DELIVER/PUSH: type(1) LENGTH(2) SEQUENCE-or-UNUSED(6)
RANGE_SIZE = 19  # REQUEST/FORWARD: type(1) ADDR(4) PORT(2) FROM_SEQ(6) TO_SEQ(6)
KEEPALIVE_SIZE = 29  # type(1) ADDR(4) PORT(2) FLAGS(6) TOKEN(16)
KEEPALIVE_ACK_SIZE = 17  # type(1) TOKEN(16)
TOKEN_SIZE = 16

# 65,535 (IPv4 total length) - 20 (IP header) - 8 (UDP header) = 65,507 bytes of UDP payload,
# minus the 9-byte header. The seed's 65,526 does not fit an IPv4 datagram.
MAX_DATAGRAM = 65507
MAX_DATA = MAX_DATAGRAM - HEADER_SIZE
MAX_SEQUENCE = (1 << 48) - 1
MAX_FLAGS = (1 << 48) - 1


class Deliver(NamedTuple):
    """0x1 DELIVER: a sequenced message, backbone→client or client→requester."""

    sequence: int
    data: Union[bytes, memoryview]


class Push(NamedTuple):
    """0x2 PUSH: a message to publish, client→backbone."""

    data: Union[bytes, memoryview]


class Request(NamedTuple):
    """0x4 REQUEST: ask for sequences FROM_SEQ..TO_SEQ (inclusive) to be re-sent to ADDR:PORT."""

    addr: str
    port: int
    from_seq: int
    to_seq: int


class Forward(NamedTuple):
    """0x8 FORWARD: the backbone asks a journaling client to serve a REQUEST."""

    addr: str
    port: int
    from_seq: int
    to_seq: int


class Keepalive(NamedTuple):
    """0x10 KEEPALIVE: sign on / stay subscribed, with FLAGS and an opaque TOKEN."""

    addr: str
    port: int
    flags: int
    token: bytes


class KeepaliveAck(NamedTuple):
    """0x20 KEEPALIVE-ACK: echoes the TOKEN of a KEEPALIVE."""

    token: bytes


def packed_flags(limit=DEFAULT_PACK_LIMIT):
    """KEEPALIVE FLAGS bits asking for packed DELIVERs of at most `limit` bytes per datagram."""
    if not HEADER_SIZE <= limit <= MAX_DATAGRAM:
        raise ValueError(f"pack limit {limit} outside {HEADER_SIZE}..{MAX_DATAGRAM}")
    return PACKED | (limit << PACK_LIMIT_SHIFT)


def pack_limit(flags):
    """Largest packed datagram a client with these FLAGS accepts; 0 if it does not pack."""
    if not flags & PACKED:
        return 0
    return (flags >> PACK_LIMIT_SHIFT) & 0xFFFF or DEFAULT_PACK_LIMIT


Packet = Union[Deliver, Push, Request, Forward, Keepalive, KeepaliveAck]
