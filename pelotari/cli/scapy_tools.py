"""`pelotari craft` and `pelotari inspect`: the scapy tools (scapy is imported only when they run)."""
import os
import signal
import sys

import click

from pelotari.cli import main
from pelotari.cli.common import AddressType, FiniteRange, plural
from pelotari.cli.service import INTERRUPTED, SignalInterrupt


class _Target(AddressType):
    """HOST:PORT for --send; HOST alone leaves the port to the packet's protocol (None here)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and ":" not in value:
            return (super().convert(value + ":0", param, ctx)[0], None)
        return super().convert(value, param, ctx)


FIELD_OPTIONS = ("sequence", "data", "length", "addr", "port", "from_seq", "to_seq", "flags", "token")


def _bad(exc):
    """A CraftError as click's one-line error: usage (exit 2), or a failed exchange (exit 1)."""
    from pelotari.craft import ExchangeError

    if isinstance(exc, ExchangeError):
        return click.ClickException(str(exc))
    return click.BadParameter(str(exc), param_hint=exc.hint)


def _note(text):
    click.echo(text, err=True)


def _show_answer(where, answer):
    click.echo(f"answer from {where}: {answer.summary()}")
    answer.show()


@main.command()
@click.argument("kind", metavar="TYPE", required=False)
@click.argument("subtype", metavar="[SUBTYPE]", required=False)
@click.option("--sequence", help="SEQUENCE (DELIVER).")
@click.option("--data", help="DATA (DELIVER, PUSH): text, or hex:... for bytes.")
@click.option("--length", help="Force LENGTH (default: computed from DATA, or a bully Text's msg; "
                                "set it to craft a lie).")
@click.option("--addr", help="ADDR (REQUEST, FORWARD, KEEPALIVE; INFO: the active's).")
@click.option("--port", "port", help="PORT field (REQUEST, FORWARD, KEEPALIVE; 0: the sender's; "
                                     "INFO: the active's; bully: the port of the message's ip).")
@click.option("--from-seq", "from_seq", help="FROM_SEQ (REQUEST, FORWARD).")
@click.option("--to-seq", "to_seq", help="TO_SEQ (REQUEST, FORWARD).")
@click.option("--flags", help="FLAGS (KEEPALIVE: NOSUBSCRIBE, NOJOURNAL, PACKED, CLUSTER; INFO: "
                              "NO_QUORUM, ACTIVE; joined with + or ,) or a number.")
@click.option("--token", help="TOKEN (KEEPALIVE, KEEPALIVE-ACK, QUERY, INFO): 16 bytes of text or "
                              "hex:<32 digits>.")
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
@click.option("--wait", type=FiniteRange(0, 60), default=0.0,
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
@click.option("--sign-at", type=FiniteRange(0), default=None, metavar="UNIX_TIME",
              help="swarm: sign as at this Unix time (default: now), e.g. to craft a datagram "
                   "from a past epoch.")
@click.option("-w", "--write", "out", type=click.Path(dir_okay=False), default=None,
              metavar="FILE",
              help="Also write the packet to this pcap file, as a capture of --send would show "
                   "it (IP and UDP or TCP headers made up: to the --send address, else the "
                   "protocol's port on 127.0.0.1; potato: after its hello line), for `pelotari "
                   "inspect`; no root needed.")
@click.option("--hexdump", is_flag=True, help="Show a hexdump instead of the field view.")
@click.option("-q", "--quiet", is_flag=True, help="Do not show the packet; only send and answers.")
@click.option("--list", "list_types", is_flag=True, help="List the packet types and their fields.")
def craft(kind, subtype, fields, target, client, src, wait, pack, sign_on, key_file, sign_at,
          out, hexdump, quiet, list_types, **named):
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
      pelotari craft query --send 127.0.0.1:2323 --wait 1         ask a cluster member for INFO
      pelotari craft info -F epoch=3 --addr 10.0.0.1 --port 2323 --flags ACTIVE \\
          -F members=10.0.0.1:2323,10.0.0.2:2323 --hexdump       an INFO (COUNT computed)
      pelotari craft NodeRequest -F ip=127.0.0.1 -F port=3334 -F id=2 \\
          --send 127.0.0.1:3333 --wait 2                          bully over TCP; prints the answer
      pelotari craft NodeResponse -F peers=2@127.0.0.2:3334,3@127.0.0.3:3335 --hexdump
      pelotari craft direct -F from=A -F to=B -F body=hello --send 127.0.0.1:PORT
                                  potato: hello as A, then the message (one JSON line)
      pelotari craft push --data hi -w push.pcap  a capture of it, for `pelotari inspect`
      pelotari craft potato -F type=broadcast -F body='{"frame": "f1", "parent": "INITIAL"}'
      pelotari craft swarm ping -F token=random --key-file swarm.keys \\
          --send 127.0.0.1:21452 --wait 1         swarm: a signed Ping; the Pong, MAC checked
      pelotari craft swarm connect -F attempt=3 -F ack=1 -F token=7 -F echo=9 --hexdump
      pelotari craft swarm connections -F entries=10.0.0.1:21452,vague:[2001:db8::1]:21452
      pelotari craft swarm user -F type=100 -F flags=0x8000 -F data=hello
    """
    from scapy.all import hexdump as scapy_hexdump

    from pelotari import craft as crafting
    from pelotari import layers as registry

    if list_types:
        for name, cls in registry.craftable().items():
            click.echo(f"{name:<24} {', '.join(f.name for f in cls.fields_desc)}")
        return
    if kind is None:
        raise click.UsageError("give a packet TYPE (pelotari craft --list shows them)")
    pairs = [(name, named[name]) for name in FIELD_OPTIONS if named.get(name) is not None]
    for item in fields:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--field")
        pairs.append((name, value))
    try:
        crafted = crafting.craft(kind, subtype, pairs, pack, key_file, sign_at)
    except crafting.CraftError as exc:
        raise _bad(exc) from None
    if not quiet:
        if hexdump:
            scapy_hexdump(crafted.wire)
        else:
            crafted.dissected().show()
    for text in crafted.notes:
        click.echo(f"note: {text}", err=True)
    if out is not None:
        from scapy.all import wrpcap

        try:
            where = crafting.default_target(crafted, *(target or ("127.0.0.1", None)))
        except crafting.CraftError as exc:
            raise _bad(exc) from None
        packets = crafting.captured(crafted, where, src, client)
        wrpcap(out, packets)
        _note(f"wrote {len(packets)} packet{'s' * (len(packets) != 1)} to {out} "
              f"(to {where[0]}:{where[1]}/{crafted.transport})")
    if target is None:
        return
    try:
        target = crafting.default_target(crafted, *target)
        crafting.send(crafted, target, wait, src, client, sign_on, _note, _show_answer)
    except crafting.CraftError as exc:
        raise _bad(exc) from None


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
@click.option("-t", "--timeout", type=FiniteRange(0.1), default=None, help="Stop live capture after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per packet, then a summary object.")
@click.option("--follow-gaps", is_flag=True, help="Report missing DELIVER sequence numbers per stream.")
@click.option("-w", "--write", "out", type=click.Path(dir_okay=False), default=None,
              help="Also write the packets shown to this pcap file.")
def inspect(pcap, interface, bpf, ports, count, timeout, as_json, follow_gaps, out, key_file):
    """Decode pelotari traffic from a pcap file or a live interface, one line per packet.

    Each line: time, source → destination, type, sequence (DELIVER) or range (REQUEST/FORWARD),
    length and summary; malformed datagrams say why. bully and potato (TCP) show one line per
    message, several for a segment that carries several; a potato line or a bully message split
    over segments is read whole. A per-type count closes the output (after Ctrl-C: then "interrupted", status
    130).

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
    from scapy.all import PcapReader, PcapWriter, Scapy_Exception, conf, sniff

    from pelotari import layers as registry

    conf.verb = 0
    modules = registry.load()
    from pelotari.craft import CraftError, swarm_keyring

    try:
        swarm_keyring(key_file)
    except CraftError as exc:
        raise _bad(exc) from None
    try:
        bound = bind_ports(modules, ports)
    except PortSpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--port") from None
    inspection = Inspection(modules, bound)
    writer = PcapWriter(out, sync=True) if out else None
    start = None

    def handle(pkt):
        found = inspection.read(pkt)
        if writer and inspection.claimed:
            writer.write(pkt)
        show(found)

    def show(found):
        nonlocal start
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

    # Ctrl-C ends the reading (scapy's sniff swallows the KeyboardInterrupt: `came` says it
    # came); the summary is still printed, then "interrupted" and status 130.
    interrupts = SignalInterrupt(signal.SIGINT)
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
    except Scapy_Exception as exc:  # not a capture file, or a damaged one
        if pcap and os.path.getsize(pcap) == 0:
            raise click.ClickException(f"{pcap}: an empty file, not a capture") from None
        raise click.ClickException(f"{pcap or interface}: {exc}") from None
    finally:
        if writer:
            writer.close()
    show(inspection.finish())  # messages the capture ended in the middle of
    summary = inspection.summary(follow_gaps)
    if as_json:
        click.echo(json.dumps({"summary": summary}))
    else:
        counts = summary["counts"]
        click.echo(f"{plural(summary['packets'], 'packet')}: "
                   + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"),
                   err=True)
        for gap in summary.get("gaps", ()):
            text = ", ".join(f"{a}" if a == b else f"{a}..{b}"
                             for a, b in gap["missing"]) or "none"
            click.echo(f"stream {gap['src']} > {gap['dst']}: missing {text}", err=True)
    if interrupts.came:
        click.echo("interrupted", err=True)
        sys.exit(INTERRUPTED)
