"""The fyrehose wire table: everything that defines the protocol, once (h11 `_state.py`'s rule).

The Cython codec (through the generated `packets.pxi`), the reference codec, the scapy layer, the
load generator and the CLI all derive from this module; a new packet type is one TABLE row plus
its handling. `setup.py` writes `packets.pxi` from `cython_constants()`; tests/test_codec.py fails
when the file is out of date.
"""
from typing import NamedTuple, Tuple, Union

DEFAULT_PORT = 2323  # UDP port a backbone binds unless told otherwise

DELIVER = 0x01
PUSH = 0x02
REQUEST = 0x04
FORWARD = 0x08
KEEPALIVE = 0x10
KEEPALIVE_ACK = 0x20
# Backbone-cluster extension (opt-in; docs/protocols/fyrehose.md): a client asks any cluster
# member for the cluster's state (QUERY) and is told (INFO). A backbone without --cluster never
# sends them and counts a received one as unexpected_type.
QUERY = 0x40
INFO = 0x80


class PacketType(NamedTuple):
    """One row of the wire table: type byte, name, and the fields after the type byte."""

    code: int
    name: str
    layout: Tuple[Tuple[str, int], ...]  # (field, bytes), big-endian, in wire order
    data: bool = False  # DATA (LENGTH bytes) follows the layout
    extension: bool = False  # not the seed's: an opt-in extension's (plain seed peers never send it)

    @property
    def size(self) -> int:
        """Bytes of a packet without DATA: the type byte plus the layout."""
        return 1 + sum(width for _, width in self.layout)

    def offset(self, field: str) -> int:
        """Byte offset of `field` in the datagram."""
        at = 1
        for name, width in self.layout:
            if name == field:
                return at
            at += width
        raise KeyError(field)


_RANGE = (("addr", 4), ("port", 2), ("from_seq", 6), ("to_seq", 6))
TABLE: Tuple[PacketType, ...] = (
    PacketType(DELIVER, "DELIVER", (("length", 2), ("sequence", 6)), data=True),
    PacketType(PUSH, "PUSH", (("length", 2), ("unused", 6)), data=True),
    PacketType(REQUEST, "REQUEST", _RANGE),
    PacketType(FORWARD, "FORWARD", _RANGE),
    PacketType(KEEPALIVE, "KEEPALIVE", (("addr", 4), ("port", 2), ("flags", 6), ("token", 16))),
    PacketType(KEEPALIVE_ACK, "KEEPALIVE-ACK", (("token", 16),)),
    # Both exactly 64 bytes: an INFO answering a QUERY is never larger than it (anti-amplification).
    PacketType(QUERY, "QUERY", (("token", 16), ("padding", 47)), extension=True),
    PacketType(INFO, "INFO", (("token", 16), ("epoch", 8), ("addr", 4), ("port", 2), ("flags", 1),
                              ("count", 1), ("members", 30), ("padding", 1)), extension=True),
)
BY_CODE = {t.code: t for t in TABLE}
PACKET_TYPES = tuple(BY_CODE)
TYPE_NAMES = {t.code: t.name for t in TABLE}
# Fixed-size types: their exact datagram size (a DELIVER/PUSH is HEADER_SIZE + LENGTH).
FIXED_SIZES = {t.code: t.size for t in TABLE if not t.data}

# KEEPALIVE FLAGS (seed: 0x1 -> NOSUBSCRIBE, 0x2 -> NOJOURNAL); other bits are reserved.
NOSUBSCRIBE = 0x1
NOJOURNAL = 0x2
# Packing extension (docs/protocols/fyrehose.md): 0x4 says "send me packed DELIVERs", and bits
# 16..31 carry the largest packed datagram the client accepts (0 = DEFAULT_PACK_LIMIT).
PACKED = 0x4
# Backbone-cluster extension: "this client follows a cluster" (a reserved bit a seed backbone ignores).
CLUSTER = 0x8
FLAG_NAMES = ("NOSUBSCRIBE", "NOJOURNAL", "PACKED", "CLUSTER")  # bit 0, 1, 2, 3
PACK_LIMIT_SHIFT = 16
DEFAULT_PACK_LIMIT = 1472  # a 1,500-byte Ethernet MTU minus the IPv4 and UDP headers

HEADER_SIZE = BY_CODE[DELIVER].size  # 9: type(1) LENGTH(2) SEQUENCE-or-UNUSED(6)
RANGE_SIZE = BY_CODE[REQUEST].size  # 19: type(1) ADDR(4) PORT(2) FROM_SEQ(6) TO_SEQ(6)
KEEPALIVE_SIZE = BY_CODE[KEEPALIVE].size  # 29: type(1) ADDR(4) PORT(2) FLAGS(6) TOKEN(16)
KEEPALIVE_ACK_SIZE = BY_CODE[KEEPALIVE_ACK].size  # 17: type(1) TOKEN(16)
TOKEN_SIZE = dict(BY_CODE[KEEPALIVE_ACK].layout)["token"]
QUERY_SIZE = BY_CODE[QUERY].size  # 64: type(1) TOKEN(16) PADDING(47)
INFO_SIZE = BY_CODE[INFO].size  # 64: type(1) TOKEN(16) EPOCH(8) ADDR(4) PORT(2) FLAGS(1) COUNT(1)
#                                      MEMBERS(30) PADDING(1)
MEMBER_SIZE = 6  # one INFO member slot: addr(4) port(2)
MAX_MEMBERS = dict(BY_CODE[INFO].layout)["members"] // MEMBER_SIZE  # 5 slots; COUNT > 5 is invalid
# INFO FLAGS: the sender's side has no active (no quorum); the sender is the active. Other bits
# are reserved: sent as 0, ignored on receipt.
INFO_NO_QUORUM = 0x1
INFO_ACTIVE = 0x2
INFO_FLAG_NAMES = ("NO_QUORUM", "ACTIVE")  # bit 0, 1
MAX_EPOCH = (1 << 64) - 1

# 65,535 (IPv4 total length) - 20 (IP header) - 8 (UDP header) = 65,507 bytes of UDP payload,
# minus the 9-byte header. The seed's 65,526 does not fit an IPv4 datagram.
MAX_DATAGRAM = 65507
MAX_DATA = MAX_DATAGRAM - HEADER_SIZE
MAX_SEQUENCE = (1 << 48) - 1
MAX_FLAGS = (1 << 48) - 1



def _offsets():
    """OFF_<FIELD> for a field at one offset in every seed layout naming it, else
    OFF_<TYPE>_<FIELD>; an extension's fields are always OFF_<TYPE>_<FIELD>, so adding one never
    renames a seed constant (INFO's ADDR is OFF_INFO_ADDR; OFF_ADDR stays the seed types')."""
    seen = {}
    for t in TABLE:
        if not t.extension:
            for field, _ in t.layout:
                seen.setdefault(field, {})[t.name.replace("-", "_")] = t.offset(field)
    out = {}
    for field, at in seen.items():
        if len(set(at.values())) == 1:
            out[f"OFF_{field.upper()}"] = next(iter(at.values()))
        else:
            out.update((f"OFF_{name}_{field.upper()}", o) for name, o in at.items())
    for t in TABLE:
        if t.extension:
            out.update((f"OFF_{t.name.replace('-', '_')}_{field.upper()}", t.offset(field))
                       for field, _ in t.layout)
    return out


OFFSETS = _offsets()  # e.g. OFF_SEQUENCE = 3, OFF_KEEPALIVE_TOKEN = 13


# Why the backbone drops a datagram: its `drops` counters by name, numbered from 1 in this order
# (DROP_<NAME> in Cython). The first five are the codec's faults, whose negatives classify()
# returns (codec.pxd FAULT_*), so a fault indexes the counters directly.
DROP_REASONS = (
    "truncated", "length_mismatch", "unknown_type", "oversize", "invalid_field",
    "unexpected_type",         # a type the backbone never receives (DELIVER, FORWARD, ACK, INFO;
                               # QUERY at a backbone that is no cluster member)
    "foreign_address",         # KEEPALIVE/REQUEST naming an address:port other than its source
    "request_too_large",       # REQUEST of more than max_request_range sequences
    "no_journal_peer",         # REQUEST with no live journaling subscriber to FORWARD to
    "table_full",              # new client while max_subscribers entries are live
    "zero_port",               # the address resolved to port 0
    "request_not_subscribed",  # REQUEST from (or for) an address that is no live subscriber
    "repair_budget",           # REQUEST past the requester's repair budget
    "address_limit",           # new client from a host already holding max_per_address entries
    "pack_not_signed_on",      # packed PUSH from a source that is no live PACKED client
    "pack_too_many_frames",    # packed PUSH of more than max_pack_frames frames
    "not_active",              # (cluster member) PUSH, KEEPALIVE or REQUEST while it may not
                               # sequence: a standby, or its lease or reservation ran out
)


def cython_constants() -> str:
    """The text of `fastpath/packets.pxi`: this table as Cython compile-time constants."""
    groups = [
        ("packet types", [(f"T_{t.name.replace('-', '_')}", f"0x{t.code:02x}") for t in TABLE]),
        ("sizes and limits", [(n, globals()[n]) for n in (
            "HEADER_SIZE", "RANGE_SIZE", "KEEPALIVE_SIZE", "KEEPALIVE_ACK_SIZE", "TOKEN_SIZE",
            "MAX_DATA", "MAX_DATAGRAM", "QUERY_SIZE", "INFO_SIZE", "MEMBER_SIZE", "MAX_MEMBERS")]),
        ("field offsets", list(OFFSETS.items())),
        ("KEEPALIVE FLAGS and the packing extension", [
            ("F_NOSUBSCRIBE", NOSUBSCRIBE), ("F_NOJOURNAL", NOJOURNAL), ("F_PACKED", PACKED),
            ("PACK_LIMIT_SHIFT", PACK_LIMIT_SHIFT), ("DEFAULT_PACK_LIMIT", DEFAULT_PACK_LIMIT),
            ("DEFAULT_PORT", DEFAULT_PORT)]),
        ("the backbone-cluster extension: KEEPALIVE's CLUSTER, INFO FLAGS", [
            ("F_CLUSTER", CLUSTER), ("F_INFO_NO_QUORUM", INFO_NO_QUORUM),
            ("F_INFO_ACTIVE", INFO_ACTIVE)]),
        ("backbone drop reasons (drops[] indexes)",
         [(f"DROP_{name.upper()}", i) for i, name in enumerate(DROP_REASONS, 1)]
         + [("N_DROPS", len(DROP_REASONS) + 1)]),
    ]
    lines = ["# Generated by setup.py from fastpath/packets.py (cython_constants()); do not edit.",
             "# tests/test_codec.py fails when this file is out of date."]
    for title, names in groups:
        lines += ["", f"# {title}", "cdef enum:"] + [f"    {n} = {v}" for n, v in names]
    return "\n".join(lines) + "\n"


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


class Query(NamedTuple):
    """0x40 QUERY (cluster extension): ask a cluster member for an INFO, with a TOKEN to echo."""

    token: bytes


class Info(NamedTuple):
    """0x80 INFO (cluster extension): a member tells a client the epoch, the active's address and
    the members' ((addr, port), ...); TOKEN is the QUERY's, or zeros when sent unasked."""

    token: bytes
    epoch: int
    addr: str  # the active backbone's data address; 0.0.0.0 = none known
    port: int
    flags: int  # INFO_NO_QUORUM, INFO_ACTIVE (other bits reserved: carried, not rejected)
    members: Tuple[Tuple[str, int], ...]  # at most MAX_MEMBERS; COUNT on the wire is its length


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


Packet = Union[Deliver, Push, Request, Forward, Keepalive, KeepaliveAck, Query, Info]
