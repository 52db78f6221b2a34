"""The swarm wire format (swarm-peer-discovery.md): authenticated UDP datagrams of at most 1024
bytes.

Everything that defines the wire lives in the block below (sizes, flag bits, the type TABLE, the
Connections group KINDS, the key schedule's constants); encoding, decoding, signing and the docs'
tables derive from it. A datagram is

    Type (u16) · Flags (u16) · HMAC-SHA256 (32 bytes) · body (0..988 bytes)

big-endian, 1024 bytes at most counting all of it. The MAC is HMAC-SHA256 under the epoch key
K_e = HMAC-SHA256(network key, EPOCH_LABEL || e as u64), e = floor(now / epoch_seconds), over
header || body (the datagram without its MAC). What the seed fixes and what pelotari decided
(and why) is in docs/protocols/swarm.md.

The hot functions — `Keyring.sign`, `Keyring.verify`, `parse`, `pack` — take and return plain
bytes and ints, so that a Cython build can replace them with the same signatures. The clock is
always passed in (`now`, Unix seconds), never read here.
"""
import functools
import hashlib
import hmac
import os
import secrets
import socket
import struct
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from fastpath.implementation import compiled

# The MACs in C (fastpath/swarmmac.pyx: OpenSSL's SHA-256 on precomputed states, ≈ 7× faster);
# PELOTARI_PURE_PYTHON=1 or a missing extension keeps the hashlib states below.
MacSet = getattr(compiled("swarmmac"), "MacSet", None)
IMPLEMENTATION = "python" if MacSet is None else "cython"

# ---- the table: everything on the wire -----------------------------------------------------
DEFAULT_PORT = 21452  # UDP; next to prototari's 21450/21451
HEADER_SIZE = 4  # the seed: Type (u16) · Flags (u16)
MAC_SIZE = 32  # the seed: the HMAC extension header, right after the header
PREFIX_SIZE = HEADER_SIZE + MAC_SIZE  # 36: the smallest datagram
MAX_DATAGRAM = 1024  # the seed's limit; counts header and MAC (the whole UDP payload)
MAX_BODY = MAX_DATAGRAM - PREFIX_SIZE  # 988
TOKEN_SIZE = 8  # Connect's token and echo, Ping's token, Pong's echo (u64 each)

# Flags, numbered as the seed's table numbers them: bit 0 is the most significant bit of the
# u16 (RFC diagram order). Bits 0-10 reserved, 11-14 Attempt (bit 11 its most significant),
# bit 15 (the least significant bit of the u16, value 1) "received your Connect" (Ack).
ACK_BIT = 0x0001  # bit 15
ATTEMPT_SHIFT = 1
ATTEMPT_MASK = 0x001E  # bits 11-14
RESERVED_MASK = 0xFFE0  # bits 0-10: sent as 0, ignored (and kept) on receipt
MAX_ATTEMPT = 15  # 4 bits, counted modulo 16 (serial-number arithmetic, RFC 1982)

# Types 0-5 are the protocol's; 6..65535 are the application's (body and all 16 flag bits
# handed up as they are). type -> (name, flag fields it uses, body)
#   body: a tuple of u64 field names (a fixed body of 8 bytes each), "pad" (zero bytes: the
#   room the answer may take) or "groups" (Connections entries).
TABLE: Dict[int, Tuple[str, Tuple[str, ...], object]] = {
    0: ("Connect", ("attempt", "ack"), ("token", "echo")),
    1: ("Reset", ("attempt",), ()),
    2: ("Ping", (), ("token",)),
    3: ("Pong", (), ("echo",)),
    4: ("GetConnections", (), "pad"),
    5: ("Connections", (), "groups"),
}
TYPES = {name: t for t, (name, _, _) in TABLE.items()}
FIRST_USER_TYPE = 6
MAX_TYPE = 0xFFFF

# Connections: groups of compact entries (address · port, as BEP 5's compact node info without
# the node ID). A group is Kind (u8) · Count (u8, 1..255) · Count entries; kinds in increasing
# order, each at most once: direct before vague, IPv4 before IPv6.
# kind -> (family, direct, address bytes)
KINDS: Dict[int, Tuple[int, bool, int]] = {
    0x04: (4, True, 4),
    0x06: (6, True, 16),
    0x14: (4, False, 4),
    0x16: (6, False, 16),
}
GROUP_HEADER = 2
ENTRY_SIZE = {4: 4 + 2, 6: 16 + 2}  # address · port
MAX_GROUP = 255
MAX_ENTRIES_V4 = (MAX_BODY - GROUP_HEADER) // ENTRY_SIZE[4]  # 164 in one Connections
MAX_ENTRIES_V6 = (MAX_BODY - GROUP_HEADER) // ENTRY_SIZE[6]  # 54

# Keys and epochs.
KEY_SIZE = 32  # a network key: 32 random bytes
MAX_KEYS = 3  # installed at once (rotation needs 2)
EPOCH_SECONDS = 30  # the same on every node of a network
SKEW_SECONDS = 10  # accepted clock difference + transit; at most EPOCH_SECONDS / 2
EPOCH_LABEL = b"pelotari swarm v1 epoch"  # K_e = HMAC-SHA256(key, EPOCH_LABEL || u64 e)
ENV_KEYS = "PELOTARI_SWARM_KEYS"  # hex keys separated by commas or white space, primary first
# --------------------------------------------------------------------------------------------

_HDR = struct.Struct("!HH")
_U64 = struct.Struct("!Q")
_MAPPED_PREFIX = bytes(10) + b"\xff\xff"


class SwarmError(ValueError):
    """Bytes, a field value or a key that the swarm wire format does not allow."""

    reason = "malformed"


class TooLong(SwarmError):
    """A datagram past the size limit (or a Connections with more entries than allowed)."""

    reason = "too_long"


class Truncated(SwarmError):
    """Fewer bytes than the header and MAC, or a Connections group cut short."""

    reason = "truncated"


class BadMac(SwarmError):
    """No installed key verifies the MAC for an accepted epoch (forged, damaged, replayed
    from an older epoch, or from a clock further off than the skew allows)."""

    reason = "bad_mac"


class BadLength(SwarmError):
    """A body whose length is not its type's (Connect 16, Reset 0, Ping and Pong 8)."""

    reason = "bad_length"


class UnknownFamily(SwarmError):
    """A Connections group kind that names no known status and address family."""

    reason = "unknown_family"


class InvalidField(SwarmError):
    """A value outside its field: groups out of order or repeated, an empty group, port 0, an
    unspecified or IPv4-mapped address, padding that is not zero, an echo without Ack; on
    encode a value past its field's range."""

    reason = "invalid_field"


class BadKey(SwarmError):
    """Key material that is not a keyring: not 32 bytes, not hex, repeated, too many."""

    reason = "bad_key"


# The errors a received datagram can raise, and the drop counter each one increments.
DROP_ERRORS = (TooLong, Truncated, BadMac, BadLength, UnknownFamily, InvalidField)
DROP_COUNTERS = tuple("dropped_" + e.reason for e in DROP_ERRORS)


# ---- flags ---------------------------------------------------------------------------------
def make_flags(attempt: int = 0, ack: bool = False) -> int:
    """The flags word for an Attempt (0..15) and an Ack bit."""
    if not 0 <= attempt <= MAX_ATTEMPT:
        raise InvalidField(f"attempt {attempt} outside 0..{MAX_ATTEMPT}")
    return (attempt << ATTEMPT_SHIFT) | (ACK_BIT if ack else 0)


def attempt_of(flags: int) -> int:
    """The Attempt field (bits 11-14) of a flags word."""
    return (flags & ATTEMPT_MASK) >> ATTEMPT_SHIFT


def ack_of(flags: int) -> bool:
    """The Ack bit (bit 15) of a flags word."""
    return bool(flags & ACK_BIT)


def attempt_newer(a: int, b: int) -> bool:
    """Whether Attempt a is later than b, modulo 16 (RFC 1982: 1..7 steps ahead)."""
    return 0 < (a - b) % 16 < 8


def pack_header(type_: int, flags: int) -> bytes:
    """The 4 header bytes."""
    if not 0 <= type_ <= MAX_TYPE:
        raise InvalidField(f"type {type_} outside 0..{MAX_TYPE}")
    if not 0 <= flags <= 0xFFFF:
        raise InvalidField(f"flags {flags} outside 0..65535")
    return _HDR.pack(type_, flags)


def unpack_header(buf) -> Tuple[int, int]:
    """(type, flags) from the first 4 bytes."""
    if len(buf) < HEADER_SIZE:
        raise Truncated(f"{len(buf)} bytes; the header needs {HEADER_SIZE}")
    return _HDR.unpack_from(buf, 0)


# ---- messages ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One Connections entry: an address (IPv4 or IPv6 text), a UDP port, direct or vague."""

    host: str
    port: int
    direct: bool = True

    @functools.cached_property  # asked for every entry a node receives: made once
    def address(self) -> Tuple[str, int]:
        return (self.host, self.port)


@dataclass(frozen=True)
class Message:
    """One swarm datagram without its MAC: the type, the raw flags word and the body's fields
    (only those of its type are used)."""

    type: int
    flags: int = 0
    token: int = 0  # Connect, Ping: the value the answer echoes
    echo: int = 0  # Connect with Ack: the peer's Connect token; Pong: the Ping's token
    pad: int = 0  # GetConnections: zero bytes after the MAC (the room the answer may take)
    entries: Tuple[Entry, ...] = ()  # Connections, direct before vague
    data: bytes = b""  # user-defined types: the body as sent

    @property
    def name(self) -> str:
        spec = TABLE.get(self.type)
        return spec[0] if spec else f"User{self.type}"

    @property
    def attempt(self) -> int:
        return attempt_of(self.flags)

    @property
    def ack(self) -> bool:
        return ack_of(self.flags)

    @property
    def is_user(self) -> bool:
        return self.type >= FIRST_USER_TYPE


def connect(attempt: int, token: int, ack: bool = False, echo: int = 0) -> Message:
    """Connect (0): our Attempt and token; with Ack, the token of the peer's Connect we hold."""
    return Message(0, make_flags(attempt, ack), token=token, echo=echo)


def reset(attempt: int = 0) -> Message:
    """Reset (1): "I hold no connection for you" (our current Attempt towards the peer)."""
    return Message(1, make_flags(attempt))


def ping(token: int) -> Message:
    """Ping (2) carrying a token that the Pong echoes."""
    return Message(2, token=token)


def pong(echo: int) -> Message:
    """Pong (3) echoing a Ping's token."""
    return Message(3, echo=echo)


def get_connections(room: int = MAX_DATAGRAM) -> Message:
    """GetConnections (4) padded to `room` bytes: the largest Connections it may be answered by."""
    if not PREFIX_SIZE <= room <= MAX_DATAGRAM:
        raise InvalidField(f"room {room} outside {PREFIX_SIZE}..{MAX_DATAGRAM}")
    return Message(4, pad=room - PREFIX_SIZE)


def connections(entries: Iterable[Entry]) -> Message:
    """Connections (5) listing entries, put in wire order (direct before vague, IPv4 first)."""
    return Message(5, entries=_canonical(entries))


def user(type_: int, data: bytes = b"", flags: int = 0) -> Message:
    """A user-defined message (type 6..65535): body and flags are the application's."""
    if not FIRST_USER_TYPE <= type_ <= MAX_TYPE:
        raise InvalidField(f"user types are {FIRST_USER_TYPE}..{MAX_TYPE}, not {type_}")
    return Message(type_, flags, data=bytes(data))


@dataclass(frozen=True)
class Limits:
    """Every bound on a datagram, sent or received."""

    max_datagram: int = MAX_DATAGRAM  # bytes, header and MAC included; at most the seed's 1024
    max_entries: int = MAX_ENTRIES_V4  # Connections entries in one datagram

    def __post_init__(self):
        if not PREFIX_SIZE <= self.max_datagram <= MAX_DATAGRAM:
            raise ValueError(f"max_datagram must be within {PREFIX_SIZE}..{MAX_DATAGRAM}")
        if self.max_entries < 0:
            raise ValueError("max_entries must be at least 0")


LIMITS = Limits()


# ---- Connections entries -------------------------------------------------------------------
def _pack_host(host) -> Tuple[bytes, str]:
    """(packed address, its text as decoded) of an entry's host; an IPv4-mapped IPv6 address
    is packed as IPv4."""
    try:
        packed = socket.inet_pton(socket.AF_INET, host)
    except (OSError, TypeError, ValueError):
        try:
            packed = socket.inet_pton(socket.AF_INET6, host)
        except (OSError, TypeError, ValueError):
            raise InvalidField(f"{host!r} is not an IPv4 or IPv6 address") from None
        if packed.startswith(_MAPPED_PREFIX):
            packed = packed[12:]
    if not any(packed):
        raise InvalidField(f"{host!r} is the unspecified address")
    return packed, socket.inet_ntop(socket.AF_INET if len(packed) == 4 else socket.AF_INET6,
                                    packed)


# A node packs the same few thousand addresses again and again (every Connections it answers):
# parsed once (errors are not cached: they raise every time).
_pack_host_cached = functools.lru_cache(maxsize=1 << 16)(_pack_host)


def _host(host) -> Tuple[bytes, str]:
    return _pack_host_cached(host) if type(host) is str else _pack_host(host)


def _kind(e: Entry) -> Tuple[int, bytes]:
    """(group kind, packed address) of an entry; an IPv4-mapped IPv6 address goes as IPv4."""
    if not isinstance(e.port, int) or not 1 <= e.port <= 0xFFFF:
        raise InvalidField(f"port {e.port!r} outside 1..65535")
    packed = _host(e.host)[0]
    if len(packed) == 4:
        return (0x04 if e.direct else 0x14), packed
    return (0x06 if e.direct else 0x16), packed


def _canonical(entries: Iterable[Entry]) -> Tuple[Entry, ...]:
    """Entries in wire order (stable within a group), addresses in their decoded text form."""
    keyed = []
    for e in entries:
        kind = _kind(e)[0]
        host = _host(e.host)[1]
        keyed.append((kind, e if host == e.host and type(e) is Entry
                      and type(e.port) is int and type(e.direct) is bool
                      else Entry(host, e.port, e.direct)))
    keyed.sort(key=lambda ke: ke[0])
    return tuple(e for _, e in keyed)


def entries_size(entries: Iterable[Entry]) -> int:
    """Bytes the entries take in a Connections body."""
    sizes: Dict[int, int] = {}
    for e in entries:
        kind, packed = _kind(e)
        sizes[kind] = sizes.get(kind, 0) + len(packed) + 2
    return sum(GROUP_HEADER + s for s in sizes.values())


def encode_entries(entries: Iterable[Entry]) -> bytes:
    """A Connections body: the entries in groups, direct before vague, IPv4 before IPv6."""
    groups: Dict[int, List[bytes]] = {}
    for e in entries:
        kind, packed = _kind(e)
        groups.setdefault(kind, []).append(packed + e.port.to_bytes(2, "big"))
    out = []
    for kind in sorted(groups):
        items = groups[kind]
        if len(items) > MAX_GROUP:
            raise InvalidField(f"{len(items)} entries of one kind; a group holds {MAX_GROUP}")
        out.append(bytes((kind, len(items))))
        out.extend(items)
    return b"".join(out)


# Decoded entries by their bytes, one dict per group kind: a node decodes the same addresses in
# answer after answer (and in the simulator, thousands of nodes do), so each is checked and made
# once and then shared (Entry is immutable). Bounded: emptied when it reaches _ENTRIES_MAX.
_ENTRIES: Dict[int, Dict[bytes, Entry]] = {kind: {} for kind in KINDS}
_ENTRIES_MAX = 1 << 16


def decode_entries(body, limits: Limits = LIMITS) -> Tuple[Entry, ...]:
    """The entries of a Connections body, checked (order, counts, addresses, ports)."""
    if type(body) is not bytes:
        body = bytes(body)
    out: List[Entry] = []
    n = len(body)
    off = 0
    last = -1
    while off < n:
        if n - off < GROUP_HEADER:
            raise Truncated(f"a group header at offset {off} needs 2 bytes; {n - off} left")
        kind, count = body[off], body[off + 1]
        spec = KINDS.get(kind)
        if spec is None:
            raise UnknownFamily(f"group kind 0x{kind:02x} at offset {off}")
        if kind <= last:
            raise InvalidField(f"group kind 0x{kind:02x} after 0x{last:02x}: out of order or repeated")
        if count == 0:
            raise InvalidField(f"an empty group (kind 0x{kind:02x})")
        if len(out) + count > limits.max_entries:
            raise TooLong(f"more than {limits.max_entries} entries")
        family, direct, alen = spec
        size = alen + 2
        end = off + GROUP_HEADER + count * size
        if end > n:
            raise Truncated(f"{count} entries of {size} bytes at offset {off} overrun the "
                            f"body of {n} bytes")
        af = socket.AF_INET if family == 4 else socket.AF_INET6
        cache = _ENTRIES[kind]
        for p in range(off + GROUP_HEADER, end, size):
            e = cache.get(body[p:p + size])
            if e is None:
                addr = body[p:p + alen]
                port = (body[p + alen] << 8) | body[p + alen + 1]
                if port == 0:
                    raise InvalidField(f"port 0 at offset {p + alen}")
                if not any(addr):
                    raise InvalidField(f"the unspecified address at offset {p}")
                if family == 6 and addr.startswith(_MAPPED_PREFIX):
                    raise InvalidField(f"an IPv4-mapped address in an IPv6 group at offset {p}")
                e = Entry(socket.inet_ntop(af, addr), port, direct)
                if len(cache) >= _ENTRIES_MAX:
                    cache.clear()
                cache[body[p:p + size]] = e
            out.append(e)
        last = kind
        off = end
    return tuple(out)


def fit_connections(entries: Sequence[Entry], room: int = MAX_DATAGRAM,
                    limits: Limits = LIMITS) -> Tuple[Entry, ...]:
    """The entries (in wire order) of the largest Connections of at most `room` bytes taken
    greedily: every direct entry in the order given, then the vague ones."""
    budget = min(room, limits.max_datagram) - PREFIX_SIZE
    taken: List[Entry] = []
    kinds = set()
    for e in [e for e in entries if e.direct] + [e for e in entries if not e.direct]:
        if len(taken) >= limits.max_entries:
            break
        kind, packed = _kind(e)
        cost = len(packed) + 2 + (0 if kind in kinds else GROUP_HEADER)
        if cost <= budget:
            budget -= cost
            kinds.add(kind)
            taken.append(e)
    return _canonical(taken)


# ---- message <-> bytes ---------------------------------------------------------------------
def _u64(value: int, what: str) -> bytes:
    if not isinstance(value, int) or not 0 <= value < (1 << 64):
        raise InvalidField(f"{what} {value!r} outside 0..2**64-1")
    return _U64.pack(value)


def pack_body(msg: Message) -> bytes:
    """The body of a message (what follows the MAC)."""
    spec = TABLE.get(msg.type)
    if spec is None:
        if not FIRST_USER_TYPE <= msg.type <= MAX_TYPE:
            raise InvalidField(f"type {msg.type} outside 0..{MAX_TYPE}")
        return bytes(msg.data)
    name, _, body = spec
    if body == "pad":
        if not 0 <= msg.pad <= MAX_BODY:
            raise TooLong(f"{msg.pad} bytes of padding; at most {MAX_BODY}")
        return bytes(msg.pad)
    if body == "groups":
        return encode_entries(msg.entries)
    if msg.type == 0 and not msg.ack and msg.echo:
        raise InvalidField("a Connect without Ack carries echo 0")
    return b"".join(_u64(getattr(msg, f), f) for f in body)


def pack(msg: Message, limits: Limits = LIMITS) -> bytes:
    """Header || body: the datagram without its MAC, which is exactly what the MAC covers."""
    data = pack_header(msg.type, msg.flags) + pack_body(msg)
    if len(data) + MAC_SIZE > limits.max_datagram:
        raise TooLong(f"{len(data) + MAC_SIZE} bytes; at most {limits.max_datagram}")
    return data


def body_size(type_: int) -> Optional[int]:
    """Bytes of a type's body when fixed (Connect 16, Reset 0, Ping 8, Pong 8), else None."""
    spec = TABLE.get(type_)
    if spec is None or isinstance(spec[2], str):
        return None
    return TOKEN_SIZE * len(spec[2])


def _check_size(n: int, limits: Limits) -> None:
    if n > limits.max_datagram:
        raise TooLong(f"{n} bytes; at most {limits.max_datagram}")
    if n < PREFIX_SIZE:
        raise Truncated(f"{n} bytes; header and MAC need {PREFIX_SIZE}")


def parse(datagram, limits: Limits = LIMITS) -> Message:
    """The message in a datagram, WITHOUT checking its MAC (for inspection and tests; a
    receiver uses `decode`). Raises a SwarmError subclass and nothing else."""
    _check_size(len(datagram), limits)
    type_, flags = _HDR.unpack_from(datagram, 0)
    body = datagram[PREFIX_SIZE:]
    spec = TABLE.get(type_)
    if spec is None:
        return Message(type_, flags, data=bytes(body))
    name, _, kind = spec
    if kind == "pad":
        if any(body):
            raise InvalidField("GetConnections padding that is not zero")
        return Message(type_, flags, pad=len(body))
    if kind == "groups":
        return Message(type_, flags, entries=decode_entries(body, limits))
    if len(body) != TOKEN_SIZE * len(kind):
        raise BadLength(f"{name} has a body of {TOKEN_SIZE * len(kind)} bytes, not {len(body)}")
    values = {f: _U64.unpack_from(body, TOKEN_SIZE * k)[0] for k, f in enumerate(kind)}
    if type_ == 0 and not flags & ACK_BIT and values["echo"]:
        raise InvalidField("a Connect without Ack carries echo 0")
    return Message(type_, flags, **values)


# ---- keys, epochs, MACs --------------------------------------------------------------------
def _hmac_states(key: bytes) -> Tuple["hashlib._Hash", "hashlib._Hash"]:
    """HMAC-SHA256's precomputed inner and outer states for a key of at most 64 bytes
    (RFC 2104: H((K ^ opad) || H((K ^ ipad) || m)))."""
    block = key.ljust(64, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))
    return inner, outer


def epoch_key(key: bytes, epoch: int) -> bytes:
    """K_e = HMAC-SHA256(network key, EPOCH_LABEL || u64 e)."""
    if epoch < 0:
        raise ValueError("epochs start at the Unix epoch")
    return hmac.digest(key, EPOCH_LABEL + _U64.pack(epoch), "sha256")


def _parse_key(text: str, where: str) -> bytes:
    text = text.strip()
    if len(text) != 2 * KEY_SIZE:
        raise BadKey(f"{where}: a key is {2 * KEY_SIZE} hex digits, not {len(text)} characters")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise BadKey(f"{where}: not hex") from None


FINGERPRINT_LABEL = b"pelotari swarm key fingerprint\0"  # never on the wire: names a key in logs


class Keyring:
    """The network keys: the first (primary) signs, every installed one verifies (memberlist's
    keyring). Epoch keys and their HMAC states are derived once per (key, epoch) and cached,
    so verifying costs one HMAC per (key, epoch) tried: at most 2 × keys."""

    def __init__(self, keys: Iterable[bytes], epoch_seconds: int = EPOCH_SECONDS,
                 skew_seconds: float = SKEW_SECONDS, max_keys: int = MAX_KEYS):
        if not isinstance(epoch_seconds, int) or epoch_seconds < 1:
            raise ValueError("epoch_seconds must be a positive integer")
        if not 0 <= skew_seconds <= epoch_seconds / 2:
            raise ValueError("skew_seconds must be within 0..epoch_seconds / 2")
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self.epoch_seconds = epoch_seconds
        self.skew_seconds = skew_seconds
        self.max_keys = max_keys
        self._keys: List[bytes] = []
        self._cache: Dict[int, tuple] = {}
        self._fast: Dict[Tuple[int, ...], object] = {}  # window -> its MacSet
        self._last: Tuple[Optional[float], object] = (None, None)  # (now, its MacSet)
        self._epoch_keys: Dict[int, Tuple[bytes, ...]] = {}  # epoch -> every key's K_e
        for k in keys:
            self.install(k)
        if not self._keys:
            raise BadKey("a keyring needs at least one key")

    # -- construction
    @staticmethod
    def generate() -> bytes:
        """A new random network key."""
        return secrets.token_bytes(KEY_SIZE)

    @classmethod
    def from_text(cls, text: str, **kw) -> "Keyring":
        """A key file's text: one key per line (64 hex digits), the first signs; blank lines
        and lines starting with # are skipped."""
        keys = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):
                keys.append(_parse_key(line, f"line {n}"))
        return cls(keys, **kw)

    def fingerprint(self) -> str:
        """A short name for the signing key, to tell at a glance whether two nodes share it."""
        return hashlib.sha256(FINGERPRINT_LABEL + self.primary).hexdigest()[:16]

    @classmethod
    def from_file(cls, path, **kw) -> "Keyring":
        """A key file (see from_text)."""
        with open(path, encoding="ascii", errors="replace") as f:
            return cls.from_text(f.read(), **kw)

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, name: str = ENV_KEYS,
                 **kw) -> "Keyring":
        """Keys from an environment variable: hex keys separated by commas or white space,
        the first signs."""
        environ = os.environ if environ is None else environ
        value = environ.get(name, "")
        keys = [_parse_key(k, f"{name} key {i}")
                for i, k in enumerate(value.replace(",", " ").split(), 1)]
        if not keys:
            raise BadKey(f"{name} holds no key")
        return cls(keys, **kw)

    def to_text(self) -> str:
        """The key file's text for this keyring."""
        return ("# pelotari swarm keys: the first line signs, every line verifies\n"
                + "".join(k.hex() + "\n" for k in self._keys))

    # -- rotation (install, use, remove)
    @property
    def keys(self) -> Tuple[bytes, ...]:
        return tuple(self._keys)

    @property
    def primary(self) -> bytes:
        return self._keys[0]

    def install(self, key: bytes) -> None:
        """Add a key that verifies (the primary still signs)."""
        key = bytes(key)
        if len(key) != KEY_SIZE:
            raise BadKey(f"a key is {KEY_SIZE} bytes, not {len(key)}")
        if key in self._keys:
            raise BadKey("that key is already installed")
        if len(self._keys) >= self.max_keys:
            raise BadKey(f"at most {self.max_keys} keys are installed at once")
        self._keys.append(key)
        self._cache.clear()
        self._fast.clear()
        self._last = (None, None)
        self._epoch_keys.clear()

    def use(self, key: bytes) -> None:
        """Make an installed key the primary."""
        if key not in self._keys:
            raise BadKey("only an installed key can become the primary")
        self._keys.remove(key)
        self._keys.insert(0, bytes(key))
        self._cache.clear()
        self._fast.clear()
        self._last = (None, None)
        self._epoch_keys.clear()

    def remove(self, key: bytes) -> None:
        """Remove an installed key other than the primary."""
        if key not in self._keys:
            raise BadKey("that key is not installed")
        if key == self._keys[0]:
            raise BadKey("the primary key cannot be removed; use another first")
        self._keys.remove(key)
        self._cache.clear()
        self._fast.clear()
        self._last = (None, None)
        self._epoch_keys.clear()

    # -- epochs
    def epoch(self, now: float) -> int:
        """The epoch a datagram sent at `now` is signed in."""
        if now < 0:
            raise ValueError("now is Unix time, not before 1970")
        return int(now // self.epoch_seconds)

    def window(self, now: float) -> Tuple[int, ...]:
        """The epochs accepted at `now`, nearest first: those that meet
        [now - skew, now + skew] — the current one and at most one neighbour."""
        e = self.epoch(now)
        into = now - e * self.epoch_seconds
        if into < self.skew_seconds and e > 0:
            return (e, e - 1)
        if self.epoch_seconds - into <= self.skew_seconds:
            return (e, e + 1)
        return (e,)

    def _states(self, epoch: int) -> tuple:
        states = self._cache.get(epoch)
        if states is None:
            if len(self._cache) >= 4:  # only the epochs around now are ever asked for
                for old in [x for x in self._cache if abs(x - epoch) > 1]:
                    del self._cache[old]
            states = tuple(_hmac_states(k) for k in self._keys_of(epoch))
            self._cache[epoch] = states
        return states

    # -- the hot path
    def mac(self, content, epoch: int, index: int = 0) -> bytes:
        """HMAC-SHA256 under key `index`'s epoch key over content = header || body."""
        inner, outer = self._states(epoch)[index]
        i = inner.copy()
        i.update(content)
        o = outer.copy()
        o.update(i.digest())
        return o.digest()

    def _keys_of(self, epoch: int) -> Tuple[bytes, ...]:
        """Every installed key's epoch key, derived once per epoch."""
        keys = self._epoch_keys.get(epoch)
        if keys is None:
            if len(self._epoch_keys) >= 4:  # only the epochs around now are ever asked for
                for old in [x for x in self._epoch_keys if abs(x - epoch) > 1]:
                    del self._epoch_keys[old]
            keys = self._epoch_keys[epoch] = tuple(epoch_key(k, epoch) for k in self._keys)
        return keys

    def macset(self, now: float):
        """The C MacSet for the epochs accepted at `now` (None without the extension): every
        key of the nearest epoch first, then of the other; state 0, the primary in the epoch of
        `now`, signs; a state's key index is its index modulo the number of keys."""
        if MacSet is None:
            return None
        last, m = self._last
        if now == last:  # an answer is signed at the time its request was verified
            return m
        window = self.window(now)
        m = self._fast.get(window)
        if m is None:
            if len(self._fast) >= 4:
                self._fast.clear()
            m = MacSet()
            m.load([k for e in window for k in self._keys_of(e)], 0)
            self._fast[window] = m
        self._last = (now, m)
        return m

    def sign(self, content, now: float) -> bytes:
        """The datagram for content = header || body: the MAC inserted after the header,
        under the primary key in the epoch of `now`."""
        content = bytes(content)
        if len(content) < HEADER_SIZE:
            raise Truncated(f"{len(content)} bytes; the header needs {HEADER_SIZE}")
        if MacSet is not None:
            return self.macset(now).sign(content)
        return content[:HEADER_SIZE] + self.mac(content, self.epoch(now)) + content[HEADER_SIZE:]

    def verify(self, datagram, now: float) -> int:
        """The index of the installed key that verifies the datagram in an accepted epoch
        (0 = the primary); BadMac when none does, Truncated below header + MAC."""
        if len(datagram) < PREFIX_SIZE:
            raise Truncated(f"{len(datagram)} bytes; header and MAC need {PREFIX_SIZE}")
        datagram = bytes(datagram)
        if MacSet is not None:
            index = self.macset(now).verify(datagram)
            if index < 0:
                raise BadMac("no installed key verifies it in an accepted epoch")
            return index % len(self._keys)
        header = datagram[:HEADER_SIZE]
        tag = datagram[HEADER_SIZE:PREFIX_SIZE]
        body = datagram[PREFIX_SIZE:]
        for epoch in self.window(now):
            for index, (inner, outer) in enumerate(self._states(epoch)):
                i = inner.copy()
                i.update(header)
                i.update(body)
                o = outer.copy()
                o.update(i.digest())
                if hmac.compare_digest(o.digest(), tag):
                    return index
        raise BadMac("no installed key verifies it in an accepted epoch")


# ---- the receive and send paths ------------------------------------------------------------
def encode(msg: Message, keyring: Keyring, now: float, limits: Limits = LIMITS) -> bytes:
    """The signed datagram of a message."""
    return keyring.sign(pack(msg, limits), now)


def decode(datagram, keyring: Keyring, now: float, limits: Limits = LIMITS) -> Message:
    """The message in a received datagram: size checked, then the MAC, then the body. Raises
    one of DROP_ERRORS (count `dropped_<reason>`, answer nothing) and nothing else."""
    _check_size(len(datagram), limits)
    keyring.verify(datagram, now)
    return parse(datagram, limits)


def answer_room(request_size: int, limits: Limits = LIMITS) -> int:
    """The most bytes an answer to a datagram of request_size bytes may take (never more than
    it: nothing a sender does makes a node send more than it received)."""
    return min(request_size, limits.max_datagram)
