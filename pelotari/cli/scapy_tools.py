"""`pelotari craft` and `pelotari inspect`: the scapy tools (scapy is imported only when they run)."""
import os
import socket
import struct
import sys

import click

from pelotari.cli import main
from pelotari.cli.common import AddressType


class _Target(AddressType):
    """HOST:PORT for --send; HOST alone leaves the port to the packet's protocol (None here)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and ":" not in value:
            return (super().convert(value + ":0", param, ctx)[0], None)
        return super().convert(value, param, ctx)


def _bytes(text: str, what: str) -> bytes:
    """'hex:0a0b', or text taken as UTF-8."""
    if text.startswith("hex:"):
        try:
            return bytes.fromhex(text[4:])
        except ValueError:
            raise click.BadParameter(f"{what}: {text[4:]!r} is not hex") from None
    return text.encode()


def _field_value(cls, name: str, text: str):
    """A command-line value converted for field `name` of packet class cls."""
    from scapy.fields import EnumField, FlagsField, IPField, StrField

    field = next((f for f in cls.fields_desc if f.name == name), None)
    if field is None:
        names = ", ".join(f.name for f in cls.fields_desc)
        raise click.BadParameter(f"{cls.__name__} has no field {name!r} (fields: {names})")
    if hasattr(field, "from_cli"):  # a layer's own syntax (bully: peers, time_ms=now)
        try:
            value = field.from_cli(text)
        except ValueError as exc:
            raise click.BadParameter(f"{name}: {exc}") from None
        if isinstance(value, int):
            _check_range(field, name, value)
        return value
    if isinstance(field, StrField):
        return _bytes(text, name)
    if isinstance(field, IPField):
        try:
            socket.inet_aton(text)
        except OSError:
            raise click.BadParameter(f"{name}: {text!r} is not an IPv4 address") from None
        return text
    if isinstance(field, FlagsField):
        known = [n.upper() for n in field.names]
        parts = [p for p in text.replace(",", "+").split("+") if p]
        for part in parts:
            if part.upper() not in known and not part.isdigit():
                raise click.BadParameter(f"{name}: unknown flag {part!r} ({', '.join(known[:2])}, ...)")
        return int(text) if text.isdigit() else "+".join(p.upper() for p in parts)
    if isinstance(field, EnumField) and text in getattr(field, "s2i", {}):
        return field.s2i[text]  # a type or tag by its name
    try:
        value = int(text, 0)
    except ValueError:
        raise click.BadParameter(f"{name}: {text!r} is not a number") from None
    _check_range(field, name, value)
    return value


def _check_range(field, name, value):
    """A number too big or negative for its field is the user's error, said in one line."""
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
        raise click.BadParameter(f"{name}: {value} outside {low}..{high}")


FIELD_OPTIONS = ("sequence", "data", "length", "addr", "port", "from_seq", "to_seq", "flags", "token")


def _swarm_keyring(key_file, sign_at=None):
    """The swarm layer's keyring from --key-file, else from PELOTARI_SWARM_KEYS (None when
    neither is given), installed in the layer (set_keyring) with the time it signs at."""
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
        raise click.BadParameter(f"cannot read {key_file}: {exc.strerror or exc}",
                                 param_hint="--key-file") from None
    except swarm_wire.SwarmError as exc:
        where = "--key-file" if key_file is not None else swarm_wire.ENV_KEYS
        raise click.BadParameter(str(exc), param_hint=where) from None
    swarm_layer.set_keyring(ring, now=sign_at)
    return ring


@main.command()
@click.argument("kind", metavar="TYPE")
@click.argument("subtype", metavar="[SUBTYPE]", required=False)
@click.option("--sequence", help="SEQUENCE (DELIVER).")
@click.option("--data", help="DATA (DELIVER, PUSH): text, or hex:... for bytes.")
@click.option("--length", help="Force LENGTH (default: computed from DATA, or a bully Text's msg; "
                                "set it to craft a lie).")
@click.option("--addr", help="ADDR (REQUEST, FORWARD, KEEPALIVE).")
@click.option("--port", "port", help="PORT field (REQUEST, FORWARD, KEEPALIVE; 0: the sender's; "
                                     "bully: the port of the message's ip).")
@click.option("--from-seq", "from_seq", help="FROM_SEQ (REQUEST, FORWARD).")
@click.option("--to-seq", "to_seq", help="TO_SEQ (REQUEST, FORWARD).")
@click.option("--flags", help="FLAGS (KEEPALIVE): NOSUBSCRIBE, NOJOURNAL (joined with + or ,) or a number.")
@click.option("--token", help="TOKEN (KEEPALIVE, KEEPALIVE-ACK): 16 bytes of text or hex:<32 digits>.")
@click.option("-F", "--field", "fields", multiple=True, metavar="NAME=VALUE",
              help="Set any field of TYPE by its name (repeatable); for every protocol's layers.")
@click.option("--send", "target", type=_Target(None), default=None,
              help="Send the packet to HOST:PORT (a fyrehose backbone: 2323; prototari: 21451 "
                   "for discovery, 21450 for the rest; bully: a TCP connection to 3333; potato: "
                   "no default port, a TCP connection with the hello handshake first; swarm: "
                   "21452, answers' MACs checked with the --key-file keys).")
@click.option("--name", "client", default=None, metavar="NAME",
              help="potato: the client name --send says hello with [default: the message's last "
                   "`visited` name, else its `from`].")
@click.option("--src", type=AddressType(0), default=None,
              help="Send from this address (UDP: a raw socket, needs root; bully, potato: the "
                   "local address the TCP connection is bound to).")
@click.option("--wait", type=click.FloatRange(0, 60), default=0.0,
              help="After sending, wait this many seconds for answers and dissect them (bully: "
                   "up to this long for the answer on the same connection; potato: every line "
                   "that comes in this long, pings counted, while we ping to stay a peer).")
@click.option("--pack", type=click.IntRange(1, 7278), default=1, show_default=True,
              help="fyrehose packing extension: N copies of the DELIVER or PUSH frame back to "
                   "back in one datagram (a DELIVER's SEQUENCE counts up).")
@click.option("--sign-on/--no-sign-on", default=True, show_default=True,
              help="With --send and a packed PUSH: first sign on from the same socket as a "
                   "NOSUBSCRIBE NOJOURNAL PACKED client, since a backbone takes packs only from "
                   "such clients (--no-sign-on sends the pack alone, as a stranger would).")
@click.option("--key-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="swarm: sign with this key file's first key (64 hex digits a line) and check "
                   "the answers' MACs with all its keys [default: $PELOTARI_SWARM_KEYS; without "
                   "either the MAC is left zero, or as -F mac= gives it].")
@click.option("--sign-at", type=click.FloatRange(0), default=None, metavar="UNIX_TIME",
              help="swarm: sign as at this Unix time (default: now), e.g. to craft a datagram "
                   "from a past epoch.")
@click.option("--hexdump", is_flag=True, help="Show a hexdump instead of the field view.")
@click.option("-q", "--quiet", is_flag=True, help="Do not show the packet; only send and answers.")
@click.option("--list", "list_types", is_flag=True, help="List the packet types and their fields.")
def craft(kind, subtype, fields, target, client, src, wait, pack, sign_on, key_file, sign_at,
          hexdump, quiet, list_types, **named):
    """Build any pelotari packet, show it, and optionally send it and dissect the answer.

    TYPE is a packet type of any of pelotari's scapy layers (see --list), e.g. keepalive,
    push, request, NodeRequest; PROTOCOL.TYPE or PROTOCOL TYPE (swarm ping) names one
    protocol's. Unset fields keep the protocol's defaults; lengths are computed.

    \b
      pelotari craft keepalive --send 127.0.0.1:2323 --wait 1     sign on; prints the ACK
      pelotari craft push --data hello --send 127.0.0.1:2323      publish "hello"
      pelotari craft request --from-seq 5 --to-seq 9 --hexdump    just show the bytes
      pelotari craft push --data abc --length 99 --send ...       a LENGTH that lies
      pelotari craft push --data abc --pack 3 --send ...          three PUSHes, one datagram
      pelotari craft NodeRequest -F ip=127.0.0.1 -F port=3334 -F id=2 \\
          --send 127.0.0.1:3333 --wait 2                          bully over TCP; prints the answer
      pelotari craft NodeResponse -F peers=2@127.0.0.2:3334,3@127.0.0.3:3335 --hexdump
      pelotari craft direct -F from=A -F to=B -F body=hello --send 127.0.0.1:PORT
                                  potato: hello as A, then the message (one JSON line)
      pelotari craft potato -F type=broadcast -F body='{"frame": "f1", "parent": "INITIAL"}'
      pelotari craft swarm ping -F token=random --key-file swarm.keys \\
          --send 127.0.0.1:21452 --wait 1         swarm: a signed Ping; the Pong, MAC checked
      pelotari craft swarm connect -F attempt=3 -F ack=1 -F token=7 -F echo=9 --hexdump
      pelotari craft swarm connections -F entries=10.0.0.1:21452,vague:[2001:db8::1]:21452
      pelotari craft swarm user -F type=100 -F flags=0x8000 -F data=hello
    """
    from scapy.all import hexdump as scapy_hexdump, raw

    from pelotari import layers as registry

    types = registry.craftable()
    if list_types:
        for name, cls in types.items():
            click.echo(f"{name:<24} {', '.join(f.name for f in cls.fields_desc)}")
        return
    if subtype is not None:  # `pelotari craft swarm ping`: PROTOCOL TYPE
        if kind.lower() not in registry.LAYERS:
            raise click.BadParameter(f"{kind!r} is not a protocol ({', '.join(registry.LAYERS)}); "
                                     f"give TYPE, PROTOCOL.TYPE or PROTOCOL TYPE", param_hint="TYPE")
        kind = f"{kind}.{subtype}"
    cls = types.get(kind.lower())
    if cls is None and kind.lower() in registry.LAYERS:
        own = ", ".join(n.split(".", 1)[1] for n in types if n.startswith(kind.lower() + "."))
        raise click.BadParameter(f"{kind}: give a type too ({own})", param_hint="TYPE")
    if cls is None:
        plain = ", ".join(n for n in types if "." not in n)
        raise click.BadParameter(f"unknown type {kind!r}; choose from {plain} (or PROTOCOL.TYPE)",
                                 param_hint="TYPE")
    aliases = getattr(sys.modules[cls.__module__], "ALIASES", {})
    values = {}
    for name in FIELD_OPTIONS:
        if named.get(name) is not None:
            values[name] = named[name]
    for item in fields:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--field")
        values[aliases.get(name.strip(), name.strip())] = value
    converted = {name: _field_value(cls, name, text) for name, text in values.items()}
    if isinstance(converted.get("token"), bytes) and len(converted["token"]) != 16:
        raise click.BadParameter(f"TOKEN must be 16 bytes, got {len(converted['token'])}",
                                 param_hint="--token")
    module = sys.modules[cls.__module__]
    tcp = getattr(module, "TRANSPORT", "udp") == "tcp"
    swarm = module.__name__ == registry.LAYERS["swarm"]
    if (key_file is not None or sign_at is not None) and not swarm:
        raise click.BadParameter("only swarm datagrams are signed",
                                 param_hint="--key-file" if key_file is not None else "--sign-at")
    if swarm:
        ring = _swarm_keyring(key_file, sign_at)
        if ring is None and converted.get("mac") is None:
            click.echo("note: unsigned (no --key-file or $PELOTARI_SWARM_KEYS): the MAC is 32 "
                       "zero bytes; a swarm node drops it (bad_mac)", err=True)
    pkt = cls(**converted)
    if pack > 1:
        from pelotari.layers.fyrehose import FyrehoseDeliver, FyrehosePush

        if not issubclass(cls, (FyrehoseDeliver, FyrehosePush)):
            raise click.BadParameter("only fyrehose DELIVER and PUSH frames can be packed",
                                     param_hint="--pack")
        first = pkt
        for k in range(1, pack):
            more = cls(**converted)
            if issubclass(cls, FyrehoseDeliver):
                more.sequence = (first.sequence + k) % (1 << 48)
            pkt = pkt / more
    try:
        wire = raw(pkt)
    except ValueError as exc:  # a value the field cannot hold (scapy says why on its first line)
        raise click.BadParameter(f"cannot build {kind}: {str(exc).splitlines()[0]}") from None
    if not tcp and len(wire) > 65507:
        raise click.BadParameter(f"{len(wire)} bytes do not fit in one UDP datagram (65,507)",
                                 param_hint="--pack")
    lines = getattr(module, "FRAMING", None) == "lines"
    if not quiet:
        if hexdump:
            scapy_hexdump(wire)
        else:
            cls(wire).show() if pack == 1 else module.dissect(wire).show()
    if lines and module.problem(wire) is not None:  # a lie on purpose, or a slip: say so
        click.echo(f"note: a receiver drops this line ({module.problem(wire)})", err=True)
    if swarm and module.problem(wire) is not None:
        exc = module.problem(wire)
        click.echo(f"note: a swarm node drops this datagram ({exc.reason}: {exc})", err=True)
    if swarm:  # answers are checked at the time they come in, not at --sign-at
        module.set_keyring(module.keyring())
    if target is None:
        return
    if target[1] is None:
        target = (target[0], getattr(module, "DEFAULT_PORT", None))
        if target[1] is None:
            raise click.BadParameter("this protocol has no default port: give HOST:PORT",
                                     param_hint="--send")
    if lines:
        _line_exchange(target, pkt, wire, wait, module, src, client)
        return
    if tcp:
        _tcp_exchange(target, wire, wait, module, src)
        return
    first = []
    from fastpath.packets import MAX_DATAGRAM, NOJOURNAL, NOSUBSCRIBE, PUSH, packed_flags
    if pack > 1 and sign_on and src is None and wire[:1] == bytes([PUSH]):
        from pelotari.fyrehose.codec import encode_keepalive

        first = [encode_keepalive("", 0, NOSUBSCRIBE | NOJOURNAL | packed_flags(MAX_DATAGRAM),
                                  b"pelotari-craft-p")]
    sock = _sender(src, target, wire, before=first)
    if first:
        click.echo("signed on as a packing publisher first (--no-sign-on: send the pack alone)",
                   err=True)
    click.echo(f"sent {len(wire)} bytes to {target[0]}:{target[1]}", err=True)
    if wait and sock is not None:
        _answers(sock, wait, module.dissect)


def _tcp_exchange(target, wire, wait, module, src=None):
    """Connect to target, send wire, print what comes back on the same connection within `wait`
    seconds (dissected, one message at a time), close. Returns the messages' bytes."""
    import time

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
            raise click.ClickException(f"cannot send to {where} over TCP: "
                                       f"{exc.strerror or exc}") from None
        local = sock.getsockname()
        click.echo(f"sent {len(wire)} bytes to {where} over TCP (from {local[0]}:{local[1]})",
                   err=True)
        if not wait:
            return []
        deadline = time.monotonic() + wait
        buf, got, closed = b"", [], False
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
                click.echo(f"connection to {where} failed: {exc.strerror or exc}", err=True)
                break
            closed = not data
            buf += data
        for frame in frames:
            answer = module.dissect(frame)
            click.echo(f"answer from {where}: {answer.summary()}")
            answer.show()
            got.append(frame)
        if not frames:
            click.echo(f"{where} closed the connection without an answer" if closed
                       else f"no answer within {wait:g}s", err=True)
        return got
    finally:
        sock.close()


def _line_exchange(target, pkt, wire, wait, module, src=None, name=None):
    """Potato over TCP: connect to target, say hello as `name` (a crafted hello is sent as the
    handshake itself), send wire once the peer's hello came back, then for `wait` seconds print
    every line that comes in (pings counted) while pinging it as a peer does (it drops a peer
    silent for a second). Closes gracefully (our side first, then we read to its end), so the
    peer has read the line before we leave. Returns the lines received (with newlines)."""
    import time

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
            raise click.ClickException(f"no hello from {where} within 5 s") from None
        except OSError as exc:
            raise click.ClickException(f"cannot send to {where} over TCP: "
                                       f"{exc.strerror or exc}") from None
        line, eol, buf = buf.partition(module.EOL)
        answer = module.dissect(line + eol)
        if not isinstance(answer, module.PotatoHello):
            raise click.ClickException(f"{where} answered no hello: {answer.summary()}" if line
                                       else f"{where} closed the connection without a hello")
        if answer.refused is not None:
            raise click.ClickException(f"{where} ({answer.hello}) refused {name!r}: "
                                       f"{answer.refused}")
        local = sock.getsockname()
        click.echo(f"{where} is {answer.hello!r}; we are {name!r} (from {local[0]}:{local[1]})",
                   err=True)
        if not hello:
            try:
                sock.sendall(wire)
            except OSError as exc:
                raise click.ClickException(f"cannot send to {where} over TCP: "
                                           f"{exc.strerror or exc}") from None
            click.echo(f"sent {len(wire)} bytes to {where} over TCP", err=True)
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
                click.echo(f"answer from {where}: {shown.summary()}")
                shown.show()
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
                click.echo(f"connection to {where} failed: {exc.strerror or exc}", err=True)
                break
            closed = not data
            buf += data
        if wait:
            click.echo(f"{len(got)} lines and {pings} pings from {where} in {wait:g}s"
                       + (" (it closed the connection)" if closed else ""), err=True)
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


def _sender(src, target, wire, root=None, before=()):
    """Send wire to target; return the socket answers will come back to (None for raw sends).
    `root` says whether raw sockets are allowed (default: whether we run as root). Datagrams in
    `before` go first from the same socket, each waiting up to a second for an answer."""
    root = os.geteuid() == 0 if root is None else root
    if src is not None:
        if not root:
            click.echo("--src needs a raw socket, which needs root: sending from an ordinary UDP "
                       "socket instead", err=True)
        else:
            from scapy.all import IP, UDP, conf, send

            conf.verb = 0
            send(IP(src=src[0], dst=target[0]) / UDP(sport=src[1] or 40000, dport=target[1]) / wire)
            return None
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 0))
    for datagram in before:
        sock.sendto(datagram, target)
        sock.settimeout(1.0)
        try:
            sock.recv(65536)
        except socket.timeout:
            click.echo(f"no answer from {target[0]}:{target[1]} to the sign-on", err=True)
    sock.sendto(wire, target)
    return sock


def _answers(sock, wait, dissect):
    """Print every datagram that comes back within `wait` seconds, dissected."""
    import time

    deadline = time.monotonic() + wait
    got = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            data, addr = sock.recvfrom(70000)
        except socket.timeout:
            break
        got += 1
        answer = dissect(data)
        click.echo(f"answer from {addr[0]}:{addr[1]}: {answer.summary()}")
        answer.show()
    if not got:
        click.echo(f"no answer within {wait:g}s", err=True)


@main.command()
@click.argument("pcap", type=click.Path(exists=True, dir_okay=False), required=False)
@click.option("-i", "--interface", default=None,
              help="Capture live on this interface (e.g. lo) instead of reading a pcap; needs root.")
@click.option("-f", "--filter", "bpf", default=None,
              help='BPF filter for live capture [default: every protocol\'s ports, e.g. "udp port '
                   '2323 or tcp port 3333", and any --port; on lo add "and inbound": loopback '
                   'shows every packet twice].')
@click.option("-p", "--port", "ports", multiple=True, metavar="[PROTOCOL:]PORT",
              help="Also decode this port, as PROTOCOL (fyrehose, prototari, swarm: UDP; bully, "
                   "potato: TCP) or as whichever recognises each packet (repeatable; default ports "
                   "always are). potato has no default port: name each client's, e.g. -p "
                   "potato:34440; a connection whose first line is a potato hello is read as "
                   "potato anyway.")
@click.option("--key-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="swarm: check each datagram's MAC with this key file's keys at its capture "
                   "time (rows say mac ok, bad or unchecked) [default: $PELOTARI_SWARM_KEYS; "
                   "without either, unchecked].")
@click.option("-c", "--count", type=click.IntRange(1), default=None, help="Stop after this many packets.")
@click.option("-t", "--timeout", type=click.FloatRange(0.1), default=None, help="Stop live capture after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per packet, then a summary object.")
@click.option("--follow-gaps", is_flag=True, help="Report missing DELIVER sequence numbers per stream.")
@click.option("-w", "--write", "out", type=click.Path(dir_okay=False), default=None,
              help="Also write the packets shown to this pcap file.")
def inspect(pcap, interface, bpf, ports, count, timeout, as_json, follow_gaps, out, key_file):
    """Decode pelotari traffic from a pcap file or a live interface, one line per packet.

    Each line: time, source → destination, type, sequence (DELIVER) or range (REQUEST/FORWARD),
    length and summary; malformed datagrams say why. bully and potato (TCP) show one line per
    message, several for a segment that carries several; a potato line split over segments is
    read whole. A per-type count closes the output.

    \b
      pelotari inspect capture.pcap --follow-gaps
      sudo pelotari inspect -i lo -f "udp port 2323 and inbound" --json
      pelotari inspect bully.pcap -p bully:3334
      pelotari inspect mesh.pcap -p potato:34440     potato: its type, from→to, id, hops, vote
      pelotari inspect swarm.pcap --key-file swarm.keys -p swarm:21460
                                  swarm: type, attempt, ack, tokens, entries, mac ok/bad
    """
    import json

    from pelotari.inspect import Inspection, PortSpecError, bind_ports, capture_filter

    if (pcap is None) == (interface is None):
        raise click.UsageError("give a PCAP file or --interface (not both)")
    if interface is not None and os.geteuid() != 0:
        raise click.ClickException("live capture needs root (raw packet sockets): run it with sudo")
    from scapy.all import PcapReader, PcapWriter, conf, sniff

    from pelotari import layers as registry

    conf.verb = 0
    modules = registry.load()
    _swarm_keyring(key_file)
    try:
        bound = bind_ports(modules, ports)
    except PortSpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--port") from None
    inspection = Inspection(modules, bound)
    writer = PcapWriter(out, sync=True) if out else None
    start = None

    def handle(pkt):
        nonlocal start
        found = inspection.read(pkt)
        if writer and found:
            writer.write(pkt)
        for row in found:
            if as_json:
                click.echo(json.dumps(row))
                continue
            start = start if start is not None else row["time"]
            seq = row.get("sequence", "")
            if "from_seq" in row:
                seq = f"{row['from_seq']}..{row['to_seq']}"
            click.echo(f"{row['time'] - start:10.6f}  {row['src']:>21} > {row['dst']:<21} "
                       f"{row['type']:<13} {seq!s:>15} {row['length']:>6}  {row['summary']}")

    try:
        if pcap:
            with PcapReader(pcap) as reader:
                for pkt in reader:
                    handle(pkt)
                    if count and inspection.rows >= count:
                        break
        else:
            expr = bpf or capture_filter(modules, bound)
            click.echo(f"capturing on {interface} ({expr}); Ctrl-C to stop", err=True)
            sniff(iface=interface, filter=expr, prn=handle, store=False, timeout=timeout,
                  stop_filter=lambda _: bool(count) and inspection.rows >= count)
    except KeyboardInterrupt:
        pass
    finally:
        if writer:
            writer.close()
    summary = inspection.summary(follow_gaps)
    if as_json:
        click.echo(json.dumps({"summary": summary}))
        return
    counts = summary["counts"]
    click.echo(f"{summary['packets']} packets: "
               + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"), err=True)
    for gap in summary.get("gaps", ()):
        text = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in gap["missing"]) or "none"
        click.echo(f"stream {gap['src']} > {gap['dst']}: missing {text}", err=True)
