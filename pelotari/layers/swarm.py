# SPDX-License-Identifier: MIT
# This file is part of pelotari.
# scapy.contrib.description = swarm UDP peer discovery (HMAC-SHA256 signed datagrams)
# scapy.contrib.status = loads

"""
swarm: UDP peer discovery with a 32-byte HMAC on every datagram (pelotari,
docs/protocols/swarm.md) on UDP 21452.

    Type (u16) · Flags (u16: 11 reserved bits, Attempt, Ack) · MAC (32 bytes) · body

Nothing about the wire is restated here: the types, their bodies, the flag bits, the sizes, the
port and the Connections group kinds all come from `pelotari.swarm.wire` (its TABLE, KINDS and
masks). One Packet class per protocol type (SwarmConnect, SwarmReset, SwarmPing, SwarmPong,
SwarmGetConnections, SwarmConnections), SwarmUser for types 6..65535 (flags and body as raw
data, the application's) and SwarmMalformed for any datagram the wire codec refuses, whose
`reason` is the wire error's (`truncated`, `too_long`, `bad_length`, `unknown_family`,
`invalid_field`). Dissection never raises.

The MAC needs the network key, which no field can hold. As scapy's contrib layers keep their
settings (`conf.contribs["CAN"]`, `conf.contribs["GTP"]`), this one keeps a keyring in
`conf.contribs["swarm"]`, set with `set_keyring()` (or for a block, `with signing(...)`):

    >>> from pelotari.layers.swarm import SwarmPing, set_keyring
    >>> set_keyring(bytes(range(32)))               # a wire.Keyring, a 32-byte key or its hex
    >>> raw(SwarmPing(token=0x0102030405060708))    # signed in the epoch of now
    >>> set_keyring(bytes(range(32)), now=1_800_000_000)   # or as at a fixed Unix time

Building: a packet whose `mac` is unset (None) gets the MAC computed over header || body with
the keyring's primary key; without a keyring it is left as 32 zero bytes; a `mac` given is
kept as given (to craft a forgery). Dissecting: `mac_status()` is "ok" (a key verifies it in an
epoch accepted at the packet's capture time, or at the fixed `now`), "bad", or "unchecked" (no
keyring); summaries end in `mac ok|bad|unchecked`.

    >>> IP(dst="127.0.0.1") / UDP() / SwarmConnect(attempt=3, ack=1, token=7, echo=9)
"""

import contextlib
import time

from scapy.config import conf
from scapy.fields import (BitField, ByteEnumField, FieldLenField, IP6Field, IPField,
                          PacketListField, ShortEnumField, ShortField, StrField,
                          XLongField, XShortField, XStrFixedLenField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers, bind_top_down

from pelotari.swarm import wire

DEFAULT_PORT = wire.DEFAULT_PORT
DEFAULT_PORTS = (DEFAULT_PORT,)

NAMES = {t: name for t, (name, _, _) in wire.TABLE.items()}
# kind -> "direct IPv4", ... (wire.KINDS: kind -> (family, direct, address bytes))
KIND_NAMES = {kind: f"{'direct' if direct else 'vague'} IPv{family}"
              for kind, (family, direct, _) in wire.KINDS.items()}
KIND_OF = {(family, direct): kind for kind, (family, direct, _) in wire.KINDS.items()}
PREVIEW = 8  # hex digits of a token or echo in a summary

# ---- the keyring -------------------------------------------------------------------------
conf.contribs.setdefault("swarm", {"keyring": None, "now": None})


def _as_keyring(key):
    if key is None or isinstance(key, wire.Keyring):
        return key
    if isinstance(key, str):
        return wire.Keyring.from_text(key)
    if isinstance(key, (bytes, bytearray)):
        return wire.Keyring([bytes(key)])
    return wire.Keyring(key)  # an iterable of 32-byte keys, the first signs


def set_keyring(key=None, now=None):
    """Sign built packets and check dissected ones with `key`: a wire.Keyring, a 32-byte key,
    a key file's text (hex keys, one per line) or a list of keys; None forgets it. `now` (Unix
    seconds) fixes the time both use; None: building signs in the epoch of the current time,
    checking uses each packet's capture time. Returns the previous (keyring, now)."""
    settings = conf.contribs["swarm"]
    before = (settings.get("keyring"), settings.get("now"))
    settings["keyring"] = _as_keyring(key)
    settings["now"] = now
    return before


def keyring():
    """The keyring set with set_keyring (or None)."""
    return conf.contribs["swarm"].get("keyring")


@contextlib.contextmanager
def signing(key, now=None):
    """set_keyring(key, now) for a with block; the previous setting comes back after it."""
    before = set_keyring(key, now)
    try:
        yield keyring()
    finally:
        set_keyring(*before)


def _root_time(pkt) -> float:
    while pkt.underlayer is not None:
        pkt = pkt.underlayer
    return float(pkt.time)


def check_mac(data, when: float):
    """("ok", key index) / ("bad", None) / ("unchecked", None) for a datagram's bytes under the
    keyring set, at Unix time `when` (a fixed `now` set with set_keyring wins)."""
    ring = keyring()
    if ring is None or not wire.PREFIX_SIZE <= len(data) <= wire.MAX_DATAGRAM:
        return "unchecked", None
    fixed = conf.contribs["swarm"].get("now")
    try:
        return "ok", ring.verify(bytes(data), fixed if fixed is not None else when)
    except ValueError:  # BadMac (a SwarmError is a ValueError), or a time before 1970
        return "bad", None


# ---- fields --------------------------------------------------------------------------------
def _flag_fields():
    """Reserved, Attempt and Ack as bit fields, most significant first (the doc's bit 0 is the
    u16's most significant bit), from wire's masks."""
    masks = sorted([("reserved", wire.RESERVED_MASK), ("attempt", wire.ATTEMPT_MASK),
                    ("ack", wire.ACK_BIT)], key=lambda nm: -nm[1])
    fields, covered = [], 0
    for name, mask in masks:
        width = bin(mask).count("1")
        low = (mask & -mask).bit_length() - 1
        if mask != ((1 << width) - 1) << low or covered & mask:
            raise ImportError(f"wire's {name} bits are not one run of their own")
        covered |= mask
        fields.append(BitField(name, 0, width))
    if covered != 0xFFFF or wire.ACK_BIT != 1 << 0 or wire.ATTEMPT_SHIFT != 1:
        raise ImportError("wire's flag masks do not tile the 16 bits as the layer expects")
    return fields


class MacField(XStrFixedLenField):
    """The 32-byte HMAC-SHA256; None (unset) is computed on build with the keyring set, or is
    32 zero bytes without one."""

    def __init__(self, name):
        super().__init__(name, None, wire.MAC_SIZE)

    def i2repr(self, pkt, x):
        if x is None:
            return "(computed)" if keyring() is not None else "(none: no keyring, 32 zero bytes)"
        return bytes(x).hex()

    @staticmethod
    def from_cli(text: str):
        """64 hex digits (hex: optional), or 'zero'."""
        text = text.strip()
        if text.lower() == "zero":
            return bytes(wire.MAC_SIZE)
        text = text[4:] if text.startswith("hex:") else text
        try:
            mac = bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"{text!r} is not hex") from None
        if len(mac) != wire.MAC_SIZE:
            raise ValueError(f"a MAC is {wire.MAC_SIZE} bytes, not {len(mac)}")
        return mac


class TokenField(XLongField):
    """A u64 token or echo, shown in hex."""

    @staticmethod
    def from_cli(text: str) -> int:
        """A number (0x... for hex), hex:<16 digits>, or 'random'."""
        text = text.strip()
        if text.lower() == "random":
            import secrets
            return secrets.randbits(8 * wire.TOKEN_SIZE)
        if text.startswith("hex:"):
            return int(text[4:], 16)
        return int(text, 0)


class PadField(StrField):
    """GetConnections' padding: zero bytes, the room the answer may take (a dissected datagram
    keeps its bytes; non-zero padding dissects as SwarmMalformed)."""

    def i2repr(self, pkt, x):
        x = bytes(x or b"")
        room = wire.PREFIX_SIZE + len(x)
        what = "zero bytes" if not any(x) else "bytes, NOT all zero"
        return f"{len(x)} {what} (room {room})"

    @staticmethod
    def from_cli(text: str) -> bytes:
        """N (that many zero bytes), room=N (padding to a datagram of N bytes), or hex:..."""
        text = text.strip()
        if text.startswith("hex:"):
            return bytes.fromhex(text[4:])
        if text.startswith("room="):
            room = int(text[5:], 0)
            if room < wire.PREFIX_SIZE:
                raise ValueError(f"room {room} is less than {wire.PREFIX_SIZE}")
            return bytes(room - wire.PREFIX_SIZE)
        n = int(text, 0)
        if n < 0:
            raise ValueError("padding is 0 bytes or more")
        return bytes(n)


class SwarmEntry4(Packet):
    """A compact IPv4 entry: address · port."""

    name = "swarm entry IPv4"
    fields_desc = [IPField("host", "127.0.0.1"), ShortField("port", DEFAULT_PORT)]

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        return f"{self.host}:{self.port}"


class SwarmEntry6(Packet):
    """A compact IPv6 entry: address · port."""

    name = "swarm entry IPv6"
    fields_desc = [IP6Field("host", "::1"), ShortField("port", DEFAULT_PORT)]

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        return f"[{self.host}]:{self.port}"


ENTRY_CLASSES = {4: SwarmEntry4, 6: SwarmEntry6}
for _family, _cls in ENTRY_CLASSES.items():
    if len(bytes(_cls())) != wire.ENTRY_SIZE[_family]:
        raise ImportError(f"the IPv{_family} entry is not wire.ENTRY_SIZE[{_family}] bytes")


def _family(kind: int) -> int:
    """The address family of a group kind; a kind wire does not know (crafted on purpose) is
    laid out as its low nibble says, IPv4 unless 6."""
    spec = wire.KINDS.get(kind)
    if spec is not None:
        return spec[0]
    return 6 if kind & 0x0F == 6 else 4


def _group_fields(entry_cls):
    return [ByteEnumField("kind", 0x04, KIND_NAMES),
            FieldLenField("count", None, count_of="entries", fmt="B"),
            PacketListField("entries", [], entry_cls, count_from=lambda p: p.count)]


class SwarmGroup(Packet):
    """A Connections group: Kind (u8) · Count (u8) · entries. SwarmGroup(kind=...) or bytes
    become SwarmGroup4 or SwarmGroup6 by the kind's family."""

    name = "swarm group"
    fields_desc = _group_fields(SwarmEntry4)

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):
        kind = _pkt[0] if _pkt else kargs.get("kind", 0x04)
        return SwarmGroup6 if _family(kind) == 6 else SwarmGroup4

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        listed = ", ".join(e.mysummary() for e in self.entries)
        return f"{KIND_NAMES.get(self.kind, f'kind 0x{self.kind:02x}')}: {listed}"


class SwarmGroup4(SwarmGroup):
    name = "swarm group IPv4"


class SwarmGroup6(SwarmGroup):
    name = "swarm group IPv6"
    fields_desc = _group_fields(SwarmEntry6)


def groups_of(entries):
    """wire.Entry items (or (host, port[, direct]) tuples) as SwarmGroups in wire order (direct
    before vague, IPv4 before IPv6), addresses checked by wire (InvalidField)."""
    entries = [e if isinstance(e, wire.Entry) else wire.Entry(*e) for e in entries]
    canonical = wire.connections(entries).entries
    grouped = {}
    for e in canonical:
        kind = KIND_OF[(6 if ":" in e.host else 4, e.direct)]
        grouped.setdefault(kind, []).append(ENTRY_CLASSES[_family(kind)](host=e.host, port=e.port))
    out = []
    for kind in sorted(grouped):
        if len(grouped[kind]) > wire.MAX_GROUP:
            raise wire.InvalidField(f"{len(grouped[kind])} entries of one kind; a group holds "
                                    f"{wire.MAX_GROUP}")
        out.append(SwarmGroup(kind=kind, entries=grouped[kind]))
    return out


def parse_entry(text: str) -> wire.Entry:
    """'HOST:PORT' or '[IPV6]:PORT', optionally prefixed 'vague:' or 'direct:' (the default)."""
    text = text.strip()
    direct = True
    for word, value in (("vague:", False), ("direct:", True)):
        if text.lower().startswith(word):
            text, direct = text[len(word):], value
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        if not sep:
            raise ValueError
        return wire.Entry(host, int(port), direct)
    except ValueError:
        raise ValueError(f"{text!r} is not HOST:PORT or [IPV6]:PORT") from None


class GroupsField(PacketListField):
    """Connections' groups, to the end of the datagram."""

    def __init__(self, name):
        super().__init__(name, [], SwarmGroup)

    @staticmethod
    def from_cli(text: str):
        """'HOST:PORT,vague:[V6]:PORT,...' (empty: no entries) for `pelotari craft`."""
        entries = [parse_entry(part) for part in text.split(",") if part.strip()]
        try:
            return groups_of(entries)
        except wire.SwarmError as exc:
            raise ValueError(str(exc)) from None


# ---- messages ------------------------------------------------------------------------------
def _prefix(value: int) -> str:
    """A token in hex: whole when short, else its first PREVIEW digits."""
    text = f"{value:x}"
    return text if len(text) <= PREVIEW else f"{value:016x}"[:PREVIEW] + "…"


class _SwarmMessage(Packet):
    """Common behaviour: a swarm message fills its datagram; its MAC is computed on build when
    unset and a keyring is set."""

    TYPE = None

    def extract_padding(self, s):
        return b"", s

    def post_build(self, pkt, pay):
        data = pkt + pay
        if self.mac is None:
            ring = keyring()
            if ring is not None:
                fixed = conf.contribs["swarm"].get("now")
                now = fixed if fixed is not None else time.time()
                content = data[:wire.HEADER_SIZE] + data[wire.PREFIX_SIZE:]
                data = ring.sign(content, now)
        return data

    # -- what it says
    @property
    def type_name(self) -> str:
        return wire.Message(self.type).name

    def mac_status(self):
        """("ok", key index) / ("bad", None) / ("unchecked", None): the MAC checked under the
        keyring set, at the packet's capture time (or the fixed `now`)."""
        return check_mac(bytes(self), _root_time(self))

    def _flag_parts(self):
        used = wire.TABLE[self.TYPE][1]
        parts = []
        if "attempt" in used or self.attempt:
            parts.append(f"attempt={self.attempt}")
        if "ack" in used or self.ack:
            parts.append(f"ack={self.ack}")
        if self.reserved:
            parts.append(f"reserved=0x{self.reserved:03x}")
        return parts

    def _body_parts(self):
        return []

    def mysummary(self):
        status, index = self.mac_status()
        mac = f"mac {status}" + (f" (key {index})" if index else "")
        return " ".join([f"swarm {self.type_name}"] + self._flag_parts() + self._body_parts()
                        + [mac])


def _header_fields(type_: int):
    return [ShortEnumField("type", type_, NAMES)] + _flag_fields() + [MacField("mac")]


class _Tokens(_SwarmMessage):
    def _body_parts(self):
        return [f"{f}={_prefix(self.getfieldval(f))}" for f in wire.TABLE[self.TYPE][2]]


class _Pad(_SwarmMessage):
    def _body_parts(self):
        pad = bytes(self.pad or b"")
        return [f"room={wire.PREFIX_SIZE + len(pad)}"] + (["pad-not-zero"] if any(pad) else [])


class _Groups(_SwarmMessage):
    def entries(self):
        """The entries as wire.Entry items, in wire order."""
        out = []
        for g in self.groups:
            direct = wire.KINDS.get(g.kind, (0, True, 0))[1]
            out.extend(wire.Entry(e.host, e.port, direct) for e in g.entries)
        return tuple(out)

    def counts(self):
        """{group name: entries} in wire order."""
        out = {}
        for g in self.groups:
            name = KIND_NAMES.get(g.kind, f"kind 0x{g.kind:02x}")
            out[name] = out.get(name, 0) + len(g.entries)
        return out

    def _body_parts(self):
        counts = self.counts()
        if not counts:
            return ["no entries"]
        total = sum(counts.values())
        return [f"{total} entr{'y' if total == 1 else 'ies'} ("
                + ", ".join(f"{n} {name}" for name, n in counts.items()) + ")"]


BODY_BASES = {"pad": _Pad, "groups": _Groups}
CLASSES = {}  # type -> Packet class


def _message(type_: int):
    """The Packet class of wire.TABLE's row `type_`."""
    name, flag_fields, body = wire.TABLE[type_]
    if body == "pad":
        fields, base = [PadField("pad", bytes(wire.MAX_BODY))], _Pad
    elif body == "groups":
        fields, base = [GroupsField("groups")], _Groups
    elif isinstance(body, tuple):
        fields, base = [TokenField(f, 0) for f in body], _Tokens
    else:
        raise ImportError(f"wire.TABLE body {body!r} of type {type_} has no scapy field")

    class Message(base):
        __doc__ = (f"Type {type_}, {name}: flags {', '.join(flag_fields) or 'none'}; body "
                   f"{body if isinstance(body, str) else ', '.join(body) or 'none'}.")
        TYPE = type_
        fields_desc = _header_fields(type_) + fields

    Message.name = f"swarm {name}"
    Message.__name__ = Message.__qualname__ = f"Swarm{name}"
    CLASSES[type_] = Message
    return Message


SwarmConnect = _message(wire.TYPES["Connect"])
SwarmReset = _message(wire.TYPES["Reset"])
SwarmPing = _message(wire.TYPES["Ping"])
SwarmPong = _message(wire.TYPES["Pong"])
SwarmGetConnections = _message(wire.TYPES["GetConnections"])
SwarmConnections = _message(wire.TYPES["Connections"])
if set(CLASSES) != set(wire.TABLE):  # a type added to the table needs its line above
    raise ImportError(f"swarm layer lacks classes for types {sorted(set(wire.TABLE) - set(CLASSES))}")


class SwarmUser(_SwarmMessage):
    """A user-defined type (6..65535): all 16 flag bits and the body are the application's."""

    name = "swarm user"
    fields_desc = [ShortField("type", wire.FIRST_USER_TYPE), XShortField("flags", 0),
                   MacField("mac"), StrField("data", b"")]

    def _flag_parts(self):
        return [f"flags=0x{self.flags:04x}"]

    def _body_parts(self):
        data = bytes(self.data or b"")
        shown = data[:16].hex() + ("…" if len(data) > 16 else "")
        return [f"len={len(data)}"] + ([shown] if data else [])


# What `pelotari craft TYPE` builds (also as `swarm.TYPE`, or `pelotari craft swarm TYPE`).
CRAFT = {**{name.lower(): CLASSES[t] for t, name in sorted(NAMES.items())}, "user": SwarmUser}
ALIASES = {"entries": "groups"}  # craft -F entries=... sets Connections' groups


def problem(data):
    """Why a receiver's codec refuses these bytes (a wire.SwarmError), or None when it would
    read them (the MAC aside)."""
    try:
        wire.parse(bytes(data))
    except wire.SwarmError as exc:
        return exc
    except Exception as exc:  # pragma: no cover - wire promises SwarmErrors only
        return wire.SwarmError(f"{type(exc).__name__}: {exc}")
    return None


class SwarmMalformed(Packet):
    """A datagram on a swarm port that the wire codec refuses; `reason` is wire's."""

    name = "swarm malformed"
    fields_desc = [StrField("load", b"")]

    def _error(self):
        return problem(self.load)

    @property
    def reason(self) -> str:
        """The wire error's reason (drop counter without dropped_), or 'valid'."""
        exc = self._error()
        return "valid" if exc is None else exc.reason

    @property
    def detail(self) -> str:
        exc = self._error()
        return "" if exc is None else str(exc)

    def mac_status(self):
        return check_mac(bytes(self.load), _root_time(self))

    def mysummary(self):
        load = bytes(self.load)
        what = ""
        if len(load) >= wire.HEADER_SIZE:
            what = " " + wire.Message(int.from_bytes(load[:2], "big")).name
        status, _ = self.mac_status()
        mac = f", mac {status}" if status != "unchecked" else ""
        return f"swarm malformed{what} ({self.reason}: {self.detail}), {len(load)} bytes{mac}"


class Swarm(Packet):
    """Dispatches a datagram to its message class after checking it as wire.parse does (the
    MAC aside: a datagram with a bad MAC dissects as its type; mac_status() says bad)."""

    name = "swarm"

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):
        if _pkt is None:
            return cls
        if problem(_pkt) is not None:
            return SwarmMalformed
        type_ = int.from_bytes(bytes(_pkt[:2]), "big")
        return CLASSES.get(type_, SwarmUser)


def dissect(data: bytes):
    """A UDP payload of this protocol -> its packet (never raises)."""
    return Swarm(bytes(data))


MESSAGE_CLASSES = tuple(CLASSES.values()) + (SwarmUser,)


def describe(layer):
    """What `pelotari inspect` shows of one dissected UDP payload (or its bytes), or None if it
    is not ours."""
    if isinstance(layer, (bytes, bytearray, memoryview)):
        layer = dissect(layer)
    if isinstance(layer, SwarmMalformed):
        status, _ = layer.mac_status()
        return {"protocol": "swarm", "type": "MALFORMED", "reason": layer.reason,
                "detail": layer.detail, "mac": status, "summary": layer.summary()}
    if not isinstance(layer, MESSAGE_CLASSES):
        return None
    status, index = layer.mac_status()
    row = {"protocol": "swarm", "type": layer.type_name, "mac": status}
    if status == "ok":
        row["mac_key"] = index
    if isinstance(layer, SwarmUser):
        row.update(flags=layer.flags, data_len=len(bytes(layer.data or b"")))
    else:
        used = wire.TABLE[layer.TYPE][1]
        if "attempt" in used:
            row["attempt"] = layer.attempt
        if "ack" in used:
            row["ack"] = bool(layer.ack)
        if layer.reserved:
            row["reserved"] = layer.reserved
    if isinstance(layer, _Tokens):
        row.update({f: f"{layer.getfieldval(f):016x}" for f in wire.TABLE[layer.TYPE][2]})
    elif isinstance(layer, _Pad):
        row["room"] = wire.PREFIX_SIZE + len(bytes(layer.pad or b""))
    elif isinstance(layer, _Groups):
        counts = layer.counts()
        row.update(entries=sum(counts.values()), groups=counts)
    row["summary"] = layer.summary()
    return row


def bind_port(port: int) -> None:
    """Dissect UDP datagrams to or from `port` as swarm."""
    bind_layers(UDP, Swarm, dport=port)
    bind_layers(UDP, Swarm, sport=port)


bind_port(DEFAULT_PORT)
# Building IP()/UDP()/SwarmPing() fills both UDP ports with the default port.
for _cls in MESSAGE_CLASSES:
    bind_top_down(UDP, _cls, sport=DEFAULT_PORT, dport=DEFAULT_PORT)
