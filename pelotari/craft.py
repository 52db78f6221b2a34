"""What `pelotari craft` does with a packet: command-line values converted and range-checked for
any layer's fields, fyrehose frames packed, swarm datagrams signed, and the packet sent the way
its protocol wants (one UDP datagram, a TCP message, or a potato line after the hello handshake)
with the answers dissected.

It works on the layer modules of `pelotari.layers` (see its docstring for what a layer provides);
the CLI parses options, calls `craft` and `send`, and prints. Progress goes to a `note(text)`
callback and each answer to `on_answer(where, packet)`.
"""
import os
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Tuple

MAX_UDP_PAYLOAD = 65507  # 65,535 - 8 (UDP header) - 20 (IPv4 header)
PACK_TOKEN = b"pelotari-craft-p"  # the sign-on token of a packing publisher


class CraftError(ValueError):
    """A value, type or option craft cannot use; `hint` names the option at fault (or None)."""

    def __init__(self, message: str, hint: Optional[str] = None):
        super().__init__(message)
        self.hint = hint


class ExchangeError(CraftError):
    """Sending failed: no connection, no hello, or a hello that refused us."""


def _ignore(*_args) -> None:
    """The default note and answer callbacks: nothing."""


def parse_bytes(text: str, what: str) -> bytes:
    """'hex:0a0b' as bytes, or text taken as UTF-8."""
    if text.startswith("hex:"):
        try:
            return bytes.fromhex(text[4:])
        except ValueError:
            raise CraftError(f"{what}: {text[4:]!r} is not hex") from None
    return text.encode()


def field_value(cls, name: str, text: str):
    """A command-line value converted for field `name` of packet class cls."""
    from scapy.fields import EnumField, FlagsField, IPField, StrField

    field = next((f for f in cls.fields_desc if f.name == name), None)
    if field is None:
        names = ", ".join(f.name for f in cls.fields_desc)
        raise CraftError(f"{cls.__name__} has no field {name!r} (fields: {names})")
    if hasattr(field, "from_cli"):  # a layer's own syntax (bully: peers, time_ms=now)
        try:
            value = field.from_cli(text)
        except ValueError as exc:
            raise CraftError(f"{name}: {exc}") from None
        if isinstance(value, int):
            check_range(field, name, value)
        return value
    if isinstance(field, StrField):
        return parse_bytes(text, name)
    if isinstance(field, IPField):
        try:
            socket.inet_aton(text)
        except OSError:
            raise CraftError(f"{name}: {text!r} is not an IPv4 address") from None
        return text
    if isinstance(field, FlagsField):
        known = [n.upper() for n in field.names]
        parts = [p for p in text.replace(",", "+").split("+") if p]
        for part in parts:
            if part.upper() not in known and not part.isdigit():
                raise CraftError(f"{name}: unknown flag {part!r} ({', '.join(known[:2])}, ...)")
        return int(text) if text.isdigit() else "+".join(p.upper() for p in parts)
    if isinstance(field, EnumField) and text in getattr(field, "s2i", {}):
        return field.s2i[text]  # a type or tag by its name
    try:
        value = int(text, 0)
    except ValueError:
        raise CraftError(f"{name}: {text!r} is not a number") from None
    check_range(field, name, value)
    return value


def check_range(field, name: str, value: int) -> None:
    """Raise CraftError when value is too big or negative for the field."""
    from scapy.fields import BitField

    if isinstance(field, BitField):
        low, high = 0, (1 << field.size) - 1
    else:
        try:
            size = struct.calcsize(field.fmt)
        except (AttributeError, struct.error):
            return
        signed = field.fmt[-1:].islower()
        low = -(1 << (8 * size - 1)) if signed else 0
        high = (1 << (8 * size - 1)) - 1 if signed else (1 << (8 * size)) - 1
    if not low <= value <= high:
        raise CraftError(f"{name}: {value} outside {low}..{high}")


def swarm_keyring(key_file: Optional[str] = None, sign_at: Optional[float] = None):
    """The swarm keyring from key_file, else from PELOTARI_SWARM_KEYS (None when neither is
    given), installed in the swarm layer (set_keyring) with the time it signs at."""
    from pelotari.layers import swarm as swarm_layer
    from pelotari.swarm import wire as swarm_wire

    try:
        if key_file is not None:
            ring = swarm_wire.Keyring.from_file(key_file)
        elif os.environ.get(swarm_wire.ENV_KEYS, "").strip():
            ring = swarm_wire.Keyring.from_env()
        else:
            ring = None
    except OSError as exc:
        raise CraftError(f"cannot read {key_file}: {exc.strerror or exc}", "--key-file") from None
    except swarm_wire.SwarmError as exc:
        raise CraftError(str(exc), "--key-file" if key_file is not None
                         else swarm_wire.ENV_KEYS) from None
    swarm_layer.set_keyring(ring, now=sign_at)
    return ring


def packet_class(kind: str, subtype: Optional[str] = None):
    """The layer class TYPE names: "push", "swarm.ping", or ("swarm", "ping")."""
    from pelotari import layers as registry

    types = registry.craftable()
    if subtype is not None:
        if kind.lower() not in registry.LAYERS:
            raise CraftError(f"{kind!r} is not a protocol ({', '.join(registry.LAYERS)}); "
                             f"give TYPE, PROTOCOL.TYPE or PROTOCOL TYPE", "TYPE")
        kind = f"{kind}.{subtype}"
    cls = types.get(kind.lower())
    if cls is None and kind.lower() in registry.LAYERS:
        own = ", ".join(n.split(".", 1)[1] for n in types if n.startswith(kind.lower() + "."))
        raise CraftError(f"{kind}: give a type too ({own})", "TYPE")
    if cls is None:
        plain = ", ".join(n for n in types if "." not in n)
        raise CraftError(f"unknown type {kind!r}; choose from {plain} (or PROTOCOL.TYPE)", "TYPE")
    return cls


@dataclass
class Crafted:
    """A built packet: its class, layer module, scapy packet, bytes, and what to tell the user."""

    cls: type
    module: object
    pkt: object
    wire: bytes
    pack: int = 1
    notes: tuple = ()

    @property
    def transport(self) -> str:
        """The transport the protocol runs on: "udp" or "tcp"."""
        return getattr(self.module, "TRANSPORT", "udp")

    @property
    def lines(self) -> bool:
        """Whether the protocol sends one text line per message (potato)."""
        return getattr(self.module, "FRAMING", None) == "lines"

    @property
    def swarm(self) -> bool:
        """Whether this is a swarm datagram (signed, its answers' MACs checked)."""
        from pelotari import layers as registry

        return self.module.__name__ == registry.LAYERS["swarm"]

    def dissected(self):
        """The packet as a receiver reads it (every frame of a pack)."""
        return self.cls(self.wire) if self.pack == 1 else self.module.dissect(self.wire)

    def receive_now(self) -> None:
        """Check answers' MACs at the time they come in, not at the time the packet was signed."""
        if self.swarm:
            self.module.set_keyring(self.module.keyring())


def craft(kind: str, subtype: Optional[str] = None, fields: Iterable[Tuple[str, str]] = (),
          pack: int = 1, key_file: Optional[str] = None,
          sign_at: Optional[float] = None) -> Crafted:
    """Build TYPE from (field or alias, command-line text) pairs, a field's last text winning;
    `pack` > 1 packs copies of a fyrehose DELIVER (SEQUENCE counting up) or PUSH into one
    datagram; swarm datagrams are signed with key_file's keys (or $PELOTARI_SWARM_KEYS) as at
    sign_at."""
    cls = packet_class(kind, subtype)
    module = sys.modules[cls.__module__]
    aliases = getattr(module, "ALIASES", {})
    texts = {aliases.get(name.strip(), name.strip()): text for name, text in fields}
    converted = {name: field_value(cls, name, text) for name, text in texts.items()}
    if isinstance(converted.get("token"), bytes) and len(converted["token"]) != 16:
        raise CraftError(f"TOKEN must be 16 bytes, got {len(converted['token'])}", "--token")
    crafted = Crafted(cls, module, None, b"", pack)
    notes = []
    if (key_file is not None or sign_at is not None) and not crafted.swarm:
        raise CraftError("only swarm datagrams are signed",
                         "--key-file" if key_file is not None else "--sign-at")
    if crafted.swarm and swarm_keyring(key_file, sign_at) is None and converted.get("mac") is None:
        notes.append("unsigned (no --key-file or $PELOTARI_SWARM_KEYS): the MAC is 32 zero bytes; "
                     "a swarm node drops it (bad_mac)")
    pkt = cls(**converted)
    if pack > 1:
        from pelotari.layers.fyrehose import FyrehoseDeliver, FyrehosePush

        if not issubclass(cls, (FyrehoseDeliver, FyrehosePush)):
            raise CraftError("only fyrehose DELIVER and PUSH frames can be packed", "--pack")
        first = pkt
        for k in range(1, pack):
            more = cls(**converted)
            if issubclass(cls, FyrehoseDeliver):
                more.sequence = (first.sequence + k) % (1 << 48)
            pkt = pkt / more
    try:
        wire = bytes(pkt)
    except ValueError as exc:  # a value the field cannot hold (scapy says why on its first line)
        raise CraftError(f"cannot build {kind}: {str(exc).splitlines()[0]}") from None
    if crafted.transport != "tcp" and len(wire) > MAX_UDP_PAYLOAD:
        raise CraftError(f"{len(wire)} bytes do not fit in one UDP datagram (65,507)", "--pack")
    problem = module.problem(wire) if (crafted.lines or crafted.swarm) else None
    if problem is not None and crafted.lines:  # a lie on purpose, or a slip: say so
        notes.append(f"a receiver drops this line ({problem})")
    elif problem is not None:
        notes.append(f"a swarm node drops this datagram ({problem.reason}: {problem})")
    crafted.pkt, crafted.wire, crafted.notes = pkt, wire, tuple(notes)
    return crafted


def default_target(crafted: Crafted, host: str, port: Optional[int]):
    """(host, port), the port defaulting to the protocol's own (its wire table's DEFAULT_PORT)."""
    if port is None:
        port = getattr(crafted.module, "DEFAULT_PORT", None)
        if port is None:
            raise CraftError("this protocol has no default port: give HOST:PORT", "--send")
    return (host, port)


SEGMENT = 16384  # TCP payload bytes per captured segment


def captured(crafted: Crafted, target, src=None, name: Optional[str] = None) -> list:
    """What a capture of sending it to target shows (made-up IP, UDP or TCP; potato: hello first)."""
    from scapy.all import IP, TCP, UDP

    ip = IP(src="127.0.0.1" if src is None or src[0] == "0.0.0.0" else src[0], dst=target[0])
    sport = src[1] if src is not None and src[1] else 40000
    if crafted.transport != "tcp":
        return [ip / UDP(sport=sport, dport=target[1]) / crafted.wire]
    sent = [crafted.wire]
    if crafted.lines and not isinstance(crafted.pkt, crafted.module.PotatoHello):
        sent.insert(0, crafted.module.hello_line(name or crafted.module.client_name(crafted.pkt)))
    packets, seq = [], 1
    for data in sent:
        for k in range(0, len(data), SEGMENT):
            packets.append(ip / TCP(sport=sport, dport=target[1], flags="PA", seq=seq, ack=1)
                           / data[k:k + SEGMENT])
            seq += len(data[k:k + SEGMENT])
    return packets


def send(crafted: Crafted, target, wait: float = 0.0, src=None, name: Optional[str] = None,
         sign_on: bool = True, note: Callable[[str], None] = _ignore,
         on_answer: Callable[[str, object], None] = _ignore) -> list:
    """Send the packet to target as its protocol does and dissect what comes back within `wait`
    seconds (each answer to on_answer(where, packet)); returns the answers' bytes. A packed PUSH
    signs on first as a packing publisher (a backbone takes packs only from such clients)
    unless sign_on is False or src asks for a raw socket."""
    crafted.receive_now()
    if crafted.lines:
        return line_exchange(target, crafted.pkt, crafted.wire, wait, crafted.module, src, name,
                             note, on_answer)
    if crafted.transport == "tcp":
        return tcp_exchange(target, crafted.wire, wait, crafted.module, src, note, on_answer)
    from fastpath.packets import MAX_DATAGRAM, NOJOURNAL, NOSUBSCRIBE, PUSH, packed_flags

    first = []
    if crafted.pack > 1 and sign_on and src is None and crafted.wire[:1] == bytes([PUSH]):
        from pelotari.fyrehose.codec import encode_keepalive

        first = [encode_keepalive("", 0, NOSUBSCRIBE | NOJOURNAL | packed_flags(MAX_DATAGRAM),
                                  PACK_TOKEN)]
    sock = sender(src, target, crafted.wire, before=first, note=note)
    try:
        if first:
            note("signed on as a packing publisher first (--no-sign-on: send the pack alone)")
        note(f"sent {len(crafted.wire)} bytes to {target[0]}:{target[1]}")
        if wait and sock is not None:
            return answers(sock, wait, crafted.module.dissect, on_answer, note)
        return []
    finally:
        if sock is not None:
            sock.close()


def tcp_exchange(target, wire: bytes, wait: float, module, src=None,
                 note: Callable[[str], None] = _ignore,
                 on_answer: Callable[[str, object], None] = _ignore) -> List[bytes]:
    """Connect to target, send wire, dissect what comes back on the same connection within
    `wait` seconds (one message at a time), close. Returns the messages' bytes."""
    where = f"{target[0]}:{target[1]}"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(wait, 5.0))
        try:
            if src is not None:
                sock.bind(src)
            sock.connect(target)
            sock.sendall(wire)
        except OSError as exc:
            raise ExchangeError(f"cannot send to {where} over TCP: {exc.strerror or exc}") from None
        local = sock.getsockname()
        note(f"sent {len(wire)} bytes to {where} over TCP (from {local[0]}:{local[1]})")
        if not wait:
            return []
        deadline = time.monotonic() + wait
        buf, closed = b"", False
        while True:
            frames = module.split_frames(buf) or ([buf] if buf else [])
            last = module.problem(frames[-1]) if frames else None
            # Done when the bytes read so far are whole messages, or never can be (a bad tag or
            # version: the stream cannot be resynchronised), or the peer closed.
            if (frames and last is None) or closed or (
                    last is not None and last.reason != "truncated"):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                data = sock.recv(65536)
            except socket.timeout:
                break
            except OSError as exc:
                note(f"connection to {where} failed: {exc.strerror or exc}")
                break
            closed = not data
            buf += data
        for frame in frames:
            on_answer(where, module.dissect(frame))
        if not frames:
            note(f"{where} closed the connection without an answer" if closed
                 else f"no answer within {wait:g}s")
        return frames
    finally:
        sock.close()


def line_exchange(target, pkt, wire: bytes, wait: float, module, src=None,
                  name: Optional[str] = None, note: Callable[[str], None] = _ignore,
                  on_answer: Callable[[str, object], None] = _ignore) -> List[bytes]:
    """Potato over TCP: connect to target, say hello as `name` (a crafted hello is sent as the
    handshake itself), send wire once the peer's hello came back, then for `wait` seconds
    dissect every line that comes in (pings counted, not answered on) while pinging it as a
    peer does (it drops a peer silent for a second). Closes gracefully (our side first, then
    we read to its end), so the peer has read the line before we leave. Returns the lines
    received (with newlines)."""
    where = f"{target[0]}:{target[1]}"
    hello = isinstance(pkt, module.PotatoHello)
    name = pkt.hello if hello else (name or module.client_name(pkt))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    got, pings = [], 0
    try:
        sock.settimeout(5.0)
        try:
            if src is not None:
                sock.bind(src)
            sock.connect(target)
            sock.sendall(wire if hello else module.hello_line(name))
            buf = b""
            while module.EOL not in buf and len(buf) <= module.SIGNAL_MAX:
                data = sock.recv(65536)
                if not data:
                    break
                buf += data
        except socket.timeout:
            raise ExchangeError(f"no hello from {where} within 5 s") from None
        except OSError as exc:
            raise ExchangeError(f"cannot send to {where} over TCP: {exc.strerror or exc}") from None
        line, eol, buf = buf.partition(module.EOL)
        answer = module.dissect(line + eol)
        if not isinstance(answer, module.PotatoHello):
            raise ExchangeError(f"{where} answered no hello: {answer.summary()}" if line
                                else f"{where} closed the connection without a hello")
        if answer.refused is not None:
            raise ExchangeError(f"{where} ({answer.hello}) refused {name!r}: {answer.refused}")
        local = sock.getsockname()
        note(f"{where} is {answer.hello!r}; we are {name!r} (from {local[0]}:{local[1]})")
        if not hello:
            try:
                sock.sendall(wire)
            except OSError as exc:
                raise ExchangeError(f"cannot send to {where} over TCP: "
                                    f"{exc.strerror or exc}") from None
            note(f"sent {len(wire)} bytes to {where} over TCP")
        deadline = last_tx = time.monotonic()
        deadline += wait
        closed = False
        while not closed:
            *lines, buf = buf.split(module.EOL)
            for line in lines:
                shown = module.dissect(line + module.EOL)
                if isinstance(shown, module.PotatoPing):
                    pings += 1
                    continue
                on_answer(where, shown)
                got.append(line + module.EOL)
            now = time.monotonic()
            if now >= deadline:
                break
            try:
                if now - last_tx >= 0.25:
                    sock.sendall(module.PING + module.EOL)
                    last_tx = now
                sock.settimeout(max(0.01, min(deadline, last_tx + 0.25) - now))
                data = sock.recv(65536)
            except socket.timeout:
                continue
            except OSError as exc:
                note(f"connection to {where} failed: {exc.strerror or exc}")
                break
            closed = not data
            buf += data
        if wait:
            note(f"{len(got)} line{'s' * (len(got) != 1)} and {pings} ping{'s' * (pings != 1)} "
                 f"from {where} in {wait:g}s"
                 + (" (it closed the connection)" if closed else ""))
        if not closed:
            try:  # our end first; the peer reads our line, then closes its end
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(2.0)
                while sock.recv(65536):
                    pass
            except OSError:
                pass
        return got
    finally:
        sock.close()


def sender(src, target, wire: bytes, root: Optional[bool] = None, before=(),
           note: Callable[[str], None] = _ignore):
    """Send wire to target; return the socket answers will come back to (None for raw sends).
    `root` says whether raw sockets are allowed (default: whether we run as root). Datagrams in
    `before` go first from the same socket, each waiting up to a second for an answer."""
    root = os.geteuid() == 0 if root is None else root
    if src is not None:
        if not root:
            note("--src needs a raw socket, which needs root: sending from an ordinary UDP "
                 "socket instead")
        else:
            from scapy.all import IP, UDP, conf, send as scapy_send

            conf.verb = 0
            scapy_send(IP(src=src[0], dst=target[0])
                       / UDP(sport=src[1] or 40000, dport=target[1]) / wire)
            return None
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 0))
    for datagram in before:
        sock.sendto(datagram, target)
        sock.settimeout(1.0)
        try:
            sock.recv(65536)
        except socket.timeout:
            note(f"no answer from {target[0]}:{target[1]} to the sign-on")
    sock.sendto(wire, target)
    return sock


def answers(sock, wait: float, dissect, on_answer: Callable[[str, object], None] = _ignore,
            note: Callable[[str], None] = _ignore) -> List[bytes]:
    """Dissect every datagram that comes back within `wait` seconds; returns their bytes."""
    deadline = time.monotonic() + wait
    got = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            data, addr = sock.recvfrom(70000)
        except socket.timeout:
            break
        got.append(data)
        on_answer(f"{addr[0]}:{addr[1]}", dissect(data))
    if not got:
        note(f"no answer within {wait:g}s")
    return got
