"""`pelotari backbone`, `pelotari pub` and `pelotari sub`."""
import base64
import json
import os
import signal
import sys
import threading
import time

import click

from pelotari.cli import main, ready
from pelotari.cli.service import INTERRUPTED, SignalInterrupt, exit_if_interrupted
from pelotari.cli.common import (AddressType, FiniteRange, StatusLine, escape_text,
                                 human_rate, metrics_option, plural, start_metrics)

from fastpath.packets import DEFAULT_PORT, HEADER_SIZE, MAX_DATAGRAM  # the wire table (light)
class BackbonesType(AddressType):
    """HOST[:PORT][,HOST[:PORT]...]: one backbone, or a cluster's members."""

    name = "HOST:PORT[,...]"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        parts = [p.strip() for p in str(value).split(",") if p.strip()]
        if not parts:
            self.fail("no address", param, ctx)
        return [super(BackbonesType, self).convert(p, param, ctx) for p in parts]


BACKBONE_OPTION = click.option(
    "-b", "--backbone", type=BackbonesType(DEFAULT_PORT), default=f"127.0.0.1:{DEFAULT_PORT}",
    show_default=True,
    help="Backbone address (HOST:PORT or HOST); several, comma-separated, are a backbone "
         "cluster's members (pelotari backbone --cluster): the client follows the active one "
         "through failovers, and a publisher sends again what the old one had not confirmed.")


@main.command()
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to bind.")
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="UDP port to bind (0 picks a free one and prints it).")
@click.option("--window", type=FiniteRange(0.1, 3600), default=5.0, show_default=True,
              help="Seconds a client stays subscribed after each KEEPALIVE.")
@click.option("--max-subscribers", type=click.IntRange(1, 1 << 20), default=4096, show_default=True,
              help="Size of the subscriber table; KEEPALIVEs past it are dropped.")
@click.option("--max-request-range", type=click.IntRange(1, 1 << 20), default=1024,
              show_default=True, help="Most sequences one REQUEST may name.")
@click.option("--allow-foreign-addresses", is_flag=True,
              help="Honour KEEPALIVE/REQUEST ADDR/PORT fields naming anything but the packet's "
                   "source (off: such packets are dropped, so nobody can aim the backbone, or "
                   "through FORWARD a peer, at an address that never asked).")
@click.option("--first-sequence", type=click.IntRange(0, (1 << 48) - 1), default=None,
              help="First SEQUENCE to assign [default: the clock in microseconds].")
@click.option("--stats-interval", type=FiniteRange(0.1, 3600), default=None,
              help="Seconds between stats lines [default: 1 on a terminal, 10 otherwise].")
@click.option("--json-stats", is_flag=True, help="Print stats as JSON lines on stdout.")
@click.option("--no-gso", is_flag=True,
              help="Send every DELIVER as its own datagram, never batched with UDP GSO "
                   "(GSO is used when the kernel supports it; the datagrams are the same).")
@click.option("--no-packing", is_flag=True,
              help="Refuse the packing extension: drop packed PUSHes (length_mismatch) and send "
                   "one DELIVER per datagram even to clients that set PACKED.")
@click.option("--max-pack", type=click.IntRange(HEADER_SIZE, MAX_DATAGRAM), default=MAX_DATAGRAM,
              show_default=True,
              help="Largest packed DELIVER datagram sent, whatever a client asks for (1472 keeps "
                   "packs within a 1,500-byte Ethernet MTU).")
@click.option("--max-pack-frames", type=click.IntRange(2, 65507), default=1024, show_default=True,
              help="Most messages one packed PUSH may hold (packs come only from live clients "
                   "that announced PACKED).")
@click.option("--max-per-address", type=click.IntRange(0, 1 << 20), default=256,
              show_default=True,
              help="Most table entries one source host may hold, so one host cannot fill the "
                   "table (0: no limit).")
@click.option("--repair-rate", type=FiniteRange(0), default=16384, show_default=True,
              help="Sequences per second each subscriber may REQUEST (its budget's refill).")
@click.option("--repair-burst", type=FiniteRange(1), default=None, metavar="FLOAT",
              help="Sequences one subscriber may REQUEST at once (its budget refills at "
                   "--repair-rate).  [default: 16384; with --cluster 65536: after a failover "
                   "a seed client REQUESTs the old active's unused reservation, up to half a "
                   "second of its rate, five times, before it gives it up]")
@click.option("--cluster", "cluster", default=None, metavar="NAME",
              help="Be one member of a highly available backbone cluster NAME (an extension: "
                   "docs/protocols/fyrehose-cluster.md): the members elect one active backbone "
                   "(bully, then a majority grants it an epoch); the others stand by, "
                   "subscribed to it, and one takes over when it dies. Needs --host (this "
                   "member's own address) and --peers, or --discover --cluster-size N "
                   "(find them on the LAN).")
@click.option("--peers", default=None, metavar="HOST,HOST",
              help="(--cluster) The other members' addresses; every member uses the same "
                   "--port, --bully-port and --cluster-port.")
@click.option("--discover", is_flag=True,
              help="(--cluster, instead of --peers) Find the other members on the LAN with no "
                   "address typed: this member runs a prototari node (UDP 21450/21451) and tells "
                   "its peers, in a prototari message, that it is a backbone of cluster NAME; once "
                   "it knows --cluster-size - 1 others it fixes the member list and starts as "
                   "with --peers (a member started later adopts the list the others announce). "
                   "--host defaults to the LAN interface's address (prototari's choice: the one "
                   "private interface). Clients find it with `pub|sub --discover NAME`.")
@click.option("--cluster-size", type=click.IntRange(2, 5), default=None, metavar="N",
              help="(--cluster) The number of members, this one included (needed with "
                   "--discover: configured, never inferred, since discovery may see one side of "
                   "a partition; the majority is N // 2 + 1). With --peers: the list's length + 1.")
@click.option("--discover-interval", type=FiniteRange(0.1, 60), default=1.0, show_default=True,
              help="(--discover) Seconds between this member's prototari broadcasts and its "
                   "announcements (clients hear a member within one).")
@click.option("--bully-port", type=click.IntRange(1, 65535), default=2324, show_default=True,
              help="(--cluster) TCP port of the members' bully election.")
@click.option("--cluster-port", type=click.IntRange(1, 65535), default=2325, show_default=True,
              help="(--cluster) UDP port of the members' leases and epochs (and TCP, watched "
                   "by the standbys: a killed active is noticed at once).")
@click.option("--cluster-key-file", default=None, metavar="FILE",
              help="(--cluster) A secret shared by every member (at least 16 bytes): each "
                   "cluster datagram carries its HMAC, and those without are dropped. Without "
                   "it the cluster port is unauthenticated: a host that can forge a member's "
                   "address can force elections, and during a partition keep a cut-off active "
                   "sequencing.")
@click.option("--state-dir", default=None, metavar="DIR",
              help="(--cluster) Where this member keeps the epoch it promised and the sequences "
                   "it confirmed, across restarts [default: ~/.local/state/pelotari].")
@click.option("--floating-address", default=None, metavar="ADDR/PREFIX",
              help="(--cluster, with --floating-dev; root or CAP_NET_ADMIN) An address for "
                   "seed clients that know one backbone: the active member holds it as a "
                   "secondary address of --floating-dev, DNATs it to --host with an nftables "
                   "table of its own (pelotari_float_PORT) and announces it with gratuitous "
                   "ARP; a new active takes it over, a stopped one removes it. Every member "
                   "gets the same.")
@click.option("--floating-dev", default=None, metavar="DEV",
              help="(--floating-address) The Ethernet device on the clients' LAN that holds "
                   "the floating address.")
@metrics_option
def backbone(host, port, window, max_subscribers, max_request_range, allow_foreign_addresses,
             first_sequence, stats_interval, json_stats, no_gso, no_packing, max_pack,
             max_pack_frames, max_per_address, repair_rate, repair_burst, cluster, peers,
             discover, cluster_size, discover_interval, bully_port, cluster_port,
             cluster_key_file, state_dir, floating_address, floating_dev, metrics):
    """Run a fyrehose backbone until Ctrl-C or SIGTERM.

    The backbone numbers every PUSH it receives with a continuous 48-bit SEQUENCE and DELIVERs
    it to every client that sent a KEEPALIVE in the last --window seconds; REQUESTs for lost
    messages are FORWARDed to a random journaling client. A live stats line shows rates,
    subscribers and dropped datagrams; --metrics serves them to Prometheus, with the subscriber
    table and each subscriber's counters as JSON at /status. It stops with a line of totals;
    exit status 130 after Ctrl-C, 0 after SIGTERM.
    """
    host, members, interface = _cluster_members(cluster, host, peers, port, first_sequence,
                                                discover, cluster_size)
    key = _cluster_key(cluster, cluster_key_file, port, bully_port, cluster_port, state_dir,
                       discover)
    floating = _floating(cluster, floating_address, floating_dev, host, members, port)
    if cluster and key is None:
        _unkeyed_warning(discover)
    discovery = (interface, cluster_size, discover_interval) if discover else None
    try:
        _backbone(floating, host, port, window, max_subscribers, max_request_range,
                  allow_foreign_addresses, first_sequence, stats_interval, json_stats, no_gso,
                  no_packing, max_pack, max_pack_frames, max_per_address, repair_rate,
                  repair_burst, cluster, bully_port, cluster_port, state_dir, metrics, members,
                  key, discovery)
    finally:
        if floating is not None:
            floating.close()  # (released already, unless the member never ran)


def _backbone(floating, host, port, window, max_subscribers, max_request_range,
              allow_foreign_addresses, first_sequence, stats_interval, json_stats, no_gso,
              no_packing, max_pack, max_pack_frames, max_per_address, repair_rate, repair_burst,
              cluster, bully_port, cluster_port, state_dir, metrics, members, key, discovery):
    """`backbone` once its options are checked (`discovery`: --discover's interface, cluster
    size and interval, or None)."""
    from pelotari.fyrehose import Backbone
    from pelotari.fyrehose.metrics import BackboneMetrics

    bb = Backbone(host=host, port=port, window=window, max_subscribers=max_subscribers,
                  max_request_range=max_request_range,
                  allow_foreign_addresses=allow_foreign_addresses, first_sequence=first_sequence,
                  gso=False if no_gso else None, packing=not no_packing, max_pack=max_pack,
                  max_pack_frames=max_pack_frames, max_per_address=max_per_address,
                  repair_rate=repair_rate,
                  repair_burst=repair_burst or (65536 if cluster else 16384),
                  gated=bool(cluster))
    try:
        bb.start()
    except OSError as exc:
        raise click.ClickException(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
    bound = bb.address
    status = StatusLine(interval=stats_interval or 1.0, plain_interval=stats_interval or 10.0)
    last = {"t": time.monotonic(), "in": 0, "out": 0, "push": 0, "delivers": 0}
    roles = []  # (--cluster) this member's role, for the status line

    def tick(stats):
        now = time.monotonic()
        dt = max(now - last["t"], 1e-9)
        rate_in = (stats["datagrams_in"] - last["in"]) / dt
        rate_out = (stats["datagrams_out"] - last["out"]) / dt
        pushes = (stats["pushes"] - last["push"]) / dt
        delivers = (stats["delivers"] - last["delivers"]) / dt
        last.update(t=now, **{"in": stats["datagrams_in"], "out": stats["datagrams_out"],
                              "push": stats["pushes"], "delivers": stats["delivers"]})
        drops = sum(stats["drops"].values())
        if json_stats:
            click.echo(json.dumps({"time": time.time(), **stats, "rate_in": rate_in,
                                   "rate_out": rate_out, "push_rate": pushes,
                                   "deliver_rate": delivers}))
            sys.stdout.flush()  # a line at a time, also into a pipe or a log
            return
        # deliver/s counts DELIVER messages (one per message per subscriber), however they
        # went out (a GSO send or a pack carries several); datagrams in/s counts every type.
        role = f"{roles[0]:<7}  " if roles else ""
        status.update(
            f"{role}subs {stats['subscribers']:>4}  push/s {human_rate(pushes):>7}  "
            f"deliver/s {human_rate(delivers):>7}  datagrams in/s {human_rate(rate_in):>7}  "
            f"seq {stats['next_sequence']}  req {stats['requests']}  dropped {drops}",
            force=True)

    exporter = None
    try:  # from the line that says it listens, Ctrl-C ends it with its closing line
        if cluster:
            click.echo(f"fyrehose backbone listening on {bound[0]}:{bound[1]}/udp, cluster "
                       f"{cluster!r} member (standing by until elected)", err=True)
        else:
            click.echo(f"fyrehose backbone listening on {bound[0]}:{bound[1]}/udp, "
                       f"first sequence {bb.next_sequence}", err=True)
        try:
            source = BackboneMetrics(bb)
            exporter = start_metrics(metrics, source)
        except KeyboardInterrupt:
            raise
        except BaseException:
            bb.stop()
            raise
        ready.announce()  # its socket and metrics listen: `pelotari wait` may go on
        if cluster:
            stopped_by = _serve_cluster(bb, cluster, host, members, bound[1], bully_port,
                                        cluster_port, state_dir, tick,
                                        stats_interval or status.interval, status, roles,
                                        source, key, floating, discovery)
        else:
            stopped_by = bb.serve_forever(on_tick=tick,
                                          interval=stats_interval or status.interval)
    except KeyboardInterrupt:  # Ctrl-C before the loop took SIGINT over: the same stop
        stopped_by = signal.SIGINT
        bb.stop()
    finally:
        if exporter is not None:
            exporter.stop()
    status.finish()
    stats = bb.stats()
    click.echo(f"stopped after {stats['uptime']:.1f}s: "
               f"{plural(stats['pushes'], 'push', 'pushes')}, "
               f"{plural(stats['delivers'], 'deliver')}, "
               f"{plural(stats['datagrams_in'], 'datagram')} in, "
               f"dropped {drop_summary(stats['drops'])}; next sequence "
               f"{stats['next_sequence']}" + ("" if cluster else (
                   " (--first-sequence for a restart that clients see as a gap)")), err=True)
    exit_if_interrupted(signal.Signals(stopped_by).name if stopped_by else None)


def _cluster_members(cluster, host, peers, port, first_sequence, discover=False, size=None):
    """--cluster's checks (one clear line for a user's error): (this member's address, the
    other members' addresses ([] with --discover), the interface --discover runs on)."""
    import ipaddress

    if cluster is None:
        for given, option in ((peers, "--peers"), (discover, "--discover"),
                              (size, "--cluster-size")):
            if given:
                raise click.UsageError(f"{option} needs --cluster NAME")
        return host, [], None
    if discover and peers:
        raise click.UsageError("--discover and --peers exclude each other (the members are "
                               "found, or listed)")
    if discover and size is None:
        raise click.UsageError("--discover needs --cluster-size N: the number of members (the "
                               "size is configured, never inferred from what answers)")
    try:
        name_size = len(cluster.encode())
    except UnicodeEncodeError:
        raise click.UsageError("--cluster NAME must be text (UTF-8)") from None
    if not 1 <= name_size <= 32:
        raise click.UsageError("--cluster NAME is 1 to 32 bytes")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise click.UsageError(f"--host {host}: --cluster needs this member's IPv4 "
                               "address") from None
    if host in ("0.0.0.0", "") and not discover:
        raise click.UsageError("--cluster needs --host: this member's own address (the others "
                               "know it by it)")
    if not peers and not discover:
        raise click.UsageError("--cluster needs --peers HOST,HOST (the other members) or "
                               "--discover --cluster-size N (find them on the LAN)")
    if first_sequence is not None:
        raise click.UsageError("--first-sequence is the cluster's to choose (each epoch starts "
                               "past every sequence the last one may have used)")
    if port == 0:
        raise click.UsageError("--cluster needs a fixed --port (every member uses the same)")
    if discover:
        host, interface = _discover_interface(host)
        return host, [], interface
    out = []
    for text in peers.split(","):
        text = text.strip()
        try:
            ipaddress.IPv4Address(text)
        except ValueError:
            raise click.UsageError(f"--peers: {text!r} is not an IPv4 address") from None
        if text == host or text in out:
            raise click.UsageError(f"--peers: {text} twice (or this member's own --host)")
        out.append(text)
    if len(out) + 1 > 5:
        raise click.UsageError("a cluster has at most 5 members")
    if size is not None and size != len(out) + 1:
        raise click.UsageError(f"--cluster-size {size}, but --peers lists {len(out)} other "
                               f"members ({len(out) + 1} in all)")
    return host, out, None


def _discover_interface(host):
    """(--discover) This member's address and the interface its prototari node runs on: the
    one with --host's address, or prototari's default choice (one line if none or several)."""
    from pelotari.prototari.node import choose_interface, interfaces

    found = interfaces()
    if host not in ("0.0.0.0", ""):
        named = [i for i in found if i.address == host]
        if not named or not named[0].broadcast:
            raise click.UsageError(f"--host {host}: --discover needs the primary address of an "
                                   "interface with a broadcast address (prototari broadcasts "
                                   "on it)")
        return host, named[0].name
    try:
        chosen = choose_interface(found)
    except ValueError as exc:
        raise click.UsageError(f"--discover: {str(exc).replace('-i/--interface', '--host')}"
                               ) from None
    return chosen.address, chosen.name


def _cluster_key(cluster, path, port, bully_port, cluster_port, state_dir, discover=False):
    """--cluster's other checks (before anything binds); the key's bytes, or None."""
    if cluster is None:
        if path:
            raise click.UsageError("--cluster-key-file needs --cluster NAME")
        return None
    if len({port, bully_port, cluster_port}) < 3:
        raise click.UsageError("--port, --bully-port and --cluster-port must differ")
    if state_dir and os.path.exists(state_dir) and not os.path.isdir(state_dir):
        raise click.UsageError(f"--state-dir {state_dir}: not a directory")
    if path is None:
        return None  # (warned once every check passed: _unkeyed_warning)
    from pelotari.fyrehose.discover import read_key

    try:
        return read_key(path)
    except ValueError as exc:
        raise click.UsageError(f"--cluster-key-file: {exc}") from None


def _unkeyed_warning(discover):
    click.echo("warning: the cluster port is not authenticated (no --cluster-key-file): a "
               "host that can forge a member's address can force elections"
               + (", and a stranger announcing itself can make a starting member fix another "
                  "member list" if discover else "")
               + "; a new active will not take over the old one's clients (they move after "
                 "their own silence)", err=True)


def _floating(cluster, address, dev, host, members, port):
    """--floating-address's checks, its leftovers removed (before anything binds): a prepared
    FloatingAddress, or None."""
    if address is None and dev is None:
        return None
    if cluster is None:
        raise click.UsageError("--floating-address needs --cluster NAME")
    if address is None or dev is None:
        raise click.UsageError("--floating-address and --floating-dev go together")
    from pelotari.fyrehose.floating import FloatingAddress, FloatingError

    try:
        floating = FloatingAddress(address, dev, host, port)
        if floating.address in (host, *members):
            raise FloatingError(f"--floating-address {address}: a member's own address")
        floating.prepare(on_leftover=lambda what: click.echo(what, err=True))
    except FloatingError as exc:
        raise click.UsageError(str(exc)) from None
    return floating


def _serve_cluster(bb, name, host, peers, port, bully_port, cluster_port, state_dir, tick,
                   interval, status, roles, metrics_source, key, floating, discover=None):
    """Run this member until SIGINT or SIGTERM; the signal that stopped it. `discover`:
    (interface, cluster size, interval) to find the members first (--discover)."""
    import asyncio

    from pelotari.bully.node import BindError
    from pelotari.cli.service import Stopper
    from pelotari.fyrehose.cluster import (BecameActive, Following, MembersDiffer,
                                           SteppedDown)
    from pelotari.fyrehose.cluster_backbone import ClusterBackbone
    from pelotari.fyrehose.floating import FloatingFailed, FloatingReleased, FloatingTaken

    state_dir = state_dir or os.path.join(os.path.expanduser("~"), ".local", "state",
                                          "pelotari")

    def say(text):
        status.finish()
        click.echo(f"{time.strftime('%H:%M:%S')} {text}", err=True)

    def on_event(ev):
        if isinstance(ev, BecameActive):
            say(f"active: epoch {ev.epoch}, sequencing from {ev.first % (1 << 48)}")
        elif isinstance(ev, Following):
            say(f"standby: following the active at {ev.active[0]}:{port} (epoch {ev.epoch})")
        elif isinstance(ev, SteppedDown):
            say(f"stepped down ({ev.why}): sequencing stopped")
        elif isinstance(ev, MembersDiffer):
            say(f"warning: the member at {ev.address[0]} was given other --peers (or another "
                "--cluster-key-file): its datagrams are not counted; give every member the "
                "same list")
        elif isinstance(ev, FloatingTaken):
            say(f"floating address {ev.address} taken (gratuitous ARP on {ev.dev})")
        elif isinstance(ev, FloatingReleased):
            say(f"floating address {ev.address} released")
        elif isinstance(ev, FloatingFailed):
            say(f"warning: floating address {ev.address} on {ev.dev}: {ev.what}")

    async def run():
        stopper = Stopper()
        finder = None
        try:
            if discover is not None:
                finder = await _discover_members(name, host, port, bully_port, cluster_port,
                                                 key, discover, stopper, say)
                if finder is None:  # stopped while discovering
                    stopper.close()
                    return stopper.why
                others = [h for h in finder.core.fixed if h != host]
            else:
                others = peers
            member = ClusterBackbone(bb, host, peers=others, data_port=port,
                                     bully_port=bully_port, cluster_port=cluster_port,
                                     state_dir=state_dir, name=name.encode(), on_event=on_event,
                                     key=key, answer=finder.answer if finder else None,
                                     floating=floating)
            try:
                await member.start()
            except (BindError, OSError, ValueError) as exc:
                raise click.ClickException(str(exc)) from None
        except BaseException:
            stopper.close()
            if finder is not None:
                await finder.close()
            raise
        def status_of():
            out = member.status()
            if finder is not None:  # /status: the list found, and the discovery's counters
                core = finder.core
                out["discovery"] = {"members": list(core.fixed), "peers": len(core.peers),
                                    "stats": dict(core.stats)}
            return out
        metrics_source.cluster = status_of
        ready.announce()
        try:
            while not stopper.stopped.is_set():
                try:
                    await asyncio.wait_for(stopper.stopped.wait(), interval)
                except asyncio.TimeoutError:
                    roles[:] = [member.node.core.role]
                    tick({**bb.stats(), "cluster": member.status()})  # (--json-stats has it)
        finally:
            metrics_source.cluster = None
            stopper.close()
            await member.close()
            if finder is not None:
                await finder.close()
        return stopper.why

    why = asyncio.run(run())
    bb.stop()
    return getattr(signal, why, None) if why else None


async def _discover_members(name, host, port, bully_port, cluster_port, key, discover,
                            stopper, say):
    """(--discover) Find the members on the LAN: the running DiscoveringMember once the list
    is fixed, None if stopped first; one clear line (ClickException) if it cannot be."""
    import asyncio

    from pelotari.fyrehose import discover as found

    interface, size, every = discover

    def on_event(ev):
        if isinstance(ev, found.Heard):
            say(f"discovered: member at {ev.host} ({min(ev.count + 1, size)} of {size} known)")
        elif isinstance(ev, found.Fixed):
            how = (f"adopted from {ev.source} and a majority" if ev.how == "adopted"
                   else "counted")
            say(f"members fixed ({how}): {', '.join(ev.members)}")
        elif isinstance(ev, found.TooMany):
            say(f"warning: {len(ev.hosts)} backbones announce cluster {name!r} "
                f"({', '.join(ev.hosts)}) and --cluster-size is {size}: no member list is fixed "
                "while they do (stop the extra ones)")
        elif isinstance(ev, found.Mismatch):
            say(f"warning: the backbone at {ev.host} announces cluster {name!r} with {ev.what}: "
                "not counted (give every member the same options)")
        elif isinstance(ev, found.Waiting):
            lists = "; ".join(", ".join(m) for m in ev.lists)
            say(f"waiting: members announce the fixed list(s) {lists}, not yet a majority of "
                "one that names this member")
        elif isinstance(ev, found.Stranger):
            say(f"warning: the backbone at {ev.host} announces cluster {name!r} but is not one "
                "of its fixed members: ignored")
        elif isinstance(ev, found.NotAMember):
            pass  # (wait_fixed says it)
        else:  # a prototari NodeWarning
            say(f"warning: discovery: {getattr(ev, 'message', ev)}")

    core = found.MemberDiscovery(name.encode(), host, size, (port, bully_port, cluster_port),
                                 time.monotonic(), key=key, interval=every)
    try:
        finder = await found.DiscoveringMember.start(core, interface=interface, host=host,
                                                     on_event=on_event)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise click.ClickException(f"--discover: cannot start prototari on {interface} "
                                   f"({host}, UDP 21450/21451): {why}") from None
    say(f"discovering: cluster {name!r} of {size} members, on {interface} ({host}), "
        "prototari broadcasts every " + f"{every:g} s")
    fixed = asyncio.ensure_future(finder.wait_fixed())
    stop = asyncio.ensure_future(stopper.stopped.wait())
    try:
        await asyncio.wait({fixed, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if not fixed.done():
        fixed.cancel()
        await finder.close()
        return None
    try:
        fixed.result()
    except (ValueError, RuntimeError) as exc:
        await finder.close()
        raise click.ClickException(str(exc)) from None
    return finder


def drop_summary(drops: dict) -> str:
    """{'truncated': 2, 'table_full': 0, 'oversize': 1} -> 'truncated 2, oversize 1' ('none')."""
    return ", ".join(f"{reason} {count}" for reason, count in drops.items() if count) or "none"


class Backbones(list):
    """-b's addresses, and what --discover asked for (resolved by _backbones)."""

    discover = None  # None, or (NAME or "", timeout, cluster port, key file) with --discover


def _discover_options(fn):
    """--discover [NAME] and its settings; they become the `backbone` argument's (Backbones)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, discover, discover_timeout, cluster_port, cluster_key_file, **kwargs):
        from click.core import ParameterSource

        found = Backbones(kwargs["backbone"])
        ctx = click.get_current_context()
        if discover is not None:
            if ctx.get_parameter_source("backbone") != ParameterSource.DEFAULT:
                raise click.UsageError("give -b (the members' addresses) or --discover, not both")
            found.discover = (discover, discover_timeout, cluster_port, cluster_key_file)
        elif cluster_key_file or ctx.get_parameter_source("cluster_port") != \
                ParameterSource.DEFAULT:
            raise click.UsageError("--cluster-port and --cluster-key-file need --discover")
        kwargs["backbone"] = found
        return fn(*args, **kwargs)

    for option in reversed((
        click.option("--discover", "discover", is_flag=False, flag_value="", default=None,
                     metavar="[NAME]",
                     help="Find the backbone cluster NAME (pelotari backbone --cluster NAME "
                          "--discover) on the LAN, with no address typed, then behave as with -b "
                          "and every member's address. Passive: it listens to prototari's "
                          "broadcasts (UDP 21451) and asks each broadcaster's cluster port; it "
                          "is no prototari node. Without NAME: the one cluster that answers. "
                          "(Put it after MESSAGES, or write --discover=NAME: a word after it is "
                          "taken as NAME.)"),
        click.option("--discover-timeout", type=FiniteRange(0.1, 3600), default=10.0,
                     show_default=True,
                     help="(--discover) Seconds to search before giving up with one line."),
        click.option("--cluster-port", type=click.IntRange(1, 65535), default=2325,
                     show_default=True,
                     help="(--discover) The members' --cluster-port, where they are asked."),
        click.option("--cluster-key-file", default=None, metavar="FILE",
                     help="(--discover) The members' secret: believe only answers that carry "
                          "its HMAC (without it, an answer from a keyed cluster is believed "
                          "unchecked)."),
    )):
        wrapper = option(wrapper)
    return wrapper


def _client_options(fn):
    fn = _discover_options(fn)
    fn = click.option("--keepalive", type=FiniteRange(0.01, 1.0), default=1.0,
                      show_default=True, metavar="SECONDS",
                      help="Seconds between KEEPALIVEs to a single backbone (at most 1: the "
                           "seed's rule). Behind a cluster's floating address a new active "
                           "learns this client only from its next KEEPALIVE, so this bounds "
                           "the failover a subscriber sees. (A cluster's members, -b A,B,C, "
                           "get one every 0.05 s.)")(fn)
    fn = click.option("--bind", type=AddressType(0), default="0.0.0.0:0", show_default=True,
                      help="Local address for this client's socket.")(fn)
    fn = click.option("--pack", type=click.IntRange(0, MAX_DATAGRAM), default=0, show_default=True,
                      metavar="BYTES",
                      help="Packing extension: accept (and, publishing, send) several messages "
                           "per datagram, up to BYTES each (1472 fits an Ethernet MTU); 0: off. "
                           "The backbone must support it.")(fn)
    return BACKBONE_OPTION(fn)


def _backbones(addresses, terminated=None):
    """-b's addresses, or the members --discover found: (the first, the cluster's members or
    () for a single backbone). Interrupted while discovering: one line, and exit 130 (0 after
    a SIGTERM that `terminated` saw)."""
    if getattr(addresses, "discover", None) is not None:
        try:
            addresses = _discover(*addresses.discover)
        except KeyboardInterrupt:
            click.echo("interrupted while discovering the cluster", err=True)
            sys.exit(0 if terminated is not None and terminated.came else INTERRUPTED)
    if len(addresses) > 10:
        raise click.UsageError("--backbone: at most 10 addresses")
    if len(set(addresses)) != len(addresses):
        raise click.UsageError("--backbone: an address given twice")
    return addresses[0], tuple(addresses) if len(addresses) > 1 else ()


def _discover(name, timeout, cluster_port, key_file):
    """(--discover) The members' data addresses, found on the LAN; one line if none are."""
    from pelotari.fyrehose.discover import DiscoverError, find_cluster, read_key

    key = None
    if key_file:
        try:
            key = read_key(key_file)
        except ValueError as exc:
            raise click.UsageError(f"--cluster-key-file: {exc}") from None
    try:
        name.encode()
    except UnicodeEncodeError:
        raise click.UsageError("--discover NAME must be text (UTF-8)") from None
    if len(name.encode()) > 32:
        raise click.UsageError("--discover NAME is at most 32 bytes")
    what = f"cluster {name!r}" if name else "a cluster"
    click.echo(f"discovering {what} on the LAN (up to {timeout:g} s)", err=True)
    try:
        members = find_cluster(name or None, timeout, key=key, cluster_port=cluster_port)
    except DiscoverError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"discovered {what}: {', '.join(f'{h}:{p}' for h, p in members)}", err=True)
    return list(members)


def _client_config(**options):
    """ClientConfig(**options); the limits it checks are the library's, reported as usage."""
    from pelotari.fyrehose import ClientConfig

    try:
        return ClientConfig(**options)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


@main.command()
@_client_options
@click.argument("messages", nargs=-1)
@click.option("-n", "--count", type=click.IntRange(1), default=None,
              help="Messages to send: repeats the MESSAGES cycle (or at most this many stdin lines).")
@click.option("-r", "--rate", type=FiniteRange(0.001), default=None,
              help="Messages per second [default: as fast as confirmations allow].")
@click.option("--binary", is_flag=True,
              help="Publish stdin lines (and MESSAGES) as raw bytes: only the newline is "
                   "stripped, nothing is decoded, non-UTF-8 is allowed.")
@click.option("--file", "file", type=click.File("rb"), default=None, metavar="PATH",
              help="Publish the whole file's bytes as one message (- reads stdin to its end).")
@click.option("--no-confirm", is_flag=True,
              help="Fire and forget: sign on with NOSUBSCRIBE and do not wait for DELIVERs.")
@click.option("--timeout", type=FiniteRange(0.01), default=2.0, show_default=True,
              help="Seconds to wait for each message's DELIVER to come back.")
@click.option("--in-flight", type=click.IntRange(1, 65536), default=256,
              show_default=True, help="Most unconfirmed messages at once.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the summary.")
def pub(backbone, bind, pack, keepalive, messages, count, rate, binary, file, no_confirm, timeout, in_flight,
        quiet):
    """Publish MESSAGES (or stdin lines) through the backbone.

    A message counts as published only when the backbone's DELIVER of it comes back; each
    confirmed message is printed as SEQUENCE<TAB>message, escaped like `pelotari sub` prints it.
    stdin is read as bytes, one message per line (a CR before the newline is dropped too,
    unless --binary). An input that cannot be published (over 65,498 bytes; not UTF-8 without
    --binary) is reported on stderr with its line number and skipped; the rest go on. Exit
    status 1 if any input was skipped or any message not confirmed; 130 after Ctrl-C.

    \b
      pelotari pub hello world           two messages
      pelotari pub -n 1000 -r 200 tick   1000 x "tick" at 200/s
      seq 10 | pelotari pub              one message per stdin line
      pelotari pub --binary < dump.bin   raw bytes, one message per line
      pelotari pub --file photo.jpg      the whole file as one message
      pelotari pub --pack 1472 -n 10000 x  packed: many messages per datagram

    With --pack, messages go in groups (64, or 10 ms worth at --rate, at most --in-flight; from
    stdin a group leaves when it is full, input ends, or no further line is waiting: a line is
    never held back to fill a pack), each packed into as few datagrams as fit.
    """
    SignalInterrupt(signal.SIGTERM)  # a service manager's stop ends it like Ctrl-C
    from pelotari.fyrehose import Client
    from pelotari.fyrehose.codec import MAX_DATA, NOJOURNAL, NOSUBSCRIBE

    if file is not None and messages:
        raise click.UsageError("give MESSAGES or --file, not both")
    backbone, members = _backbones(backbone)
    # Following a cluster, a publisher journals what it saw confirmed: if the old active died
    # before every subscriber had it, the new one's subscribers can be repaired from us.
    flags = (0 if members else NOJOURNAL) | (NOSUBSCRIBE if no_confirm else 0)
    config = _client_config(flags=flags, publish_timeout=timeout, pack=pack, cluster=members,
                            keepalive_interval=keepalive)
    skipped = 0

    def skip(label, why):
        nonlocal skipped
        skipped += 1
        click.echo(f"{label}: {why}; skipped", err=True)

    source = _pub_source(messages, file, count, binary, MAX_DATA, skip)
    client = Client(backbone, bind=bind, receive=False, config=config)
    interrupted = False
    started = time.monotonic()
    status = StatusLine()
    # (label, data, shown or None) items, published paced and windowed by the library
    # (from stdin, a pack leaves as soon as no further line is waiting: PublishStream's rule)
    stream = client.publish_stream(source, key=lambda item: item[1], rate=rate,
                                   window=in_flight,
                                   ready=_STDIN.ready if file is None and not messages else None)

    def show(outcome):
        label, data, shown = outcome.item
        shown = _show(data) if shown is None else shown
        if outcome.error is not None:
            click.echo(f"{label}: not confirmed: {shown[:60]}", err=True)
        elif not quiet:
            seq = "sent" if outcome.sequence is None else outcome.sequence
            click.echo(f"{seq}\t{shown}")
            sys.stdout.flush()
        elif status.tty and status.due():
            status.update(f"sent {stream.sent}  confirmed {stream.confirmed}  failed {stream.failed}")

    with client:
        try:
            if not client.wait_connected(min(timeout, 3.0)) and not no_confirm:
                raise click.ClickException(
                    f"the backbone at {backbone[0]}:{backbone[1]} is not answering (is "
                    "`pelotari backbone` running there, and UDP let through?)")
            for outcome in stream:
                show(outcome)
        except KeyboardInterrupt:  # stop reading; what went out is still confirmed and printed
            interrupted = True
        for outcome in stream.drain():
            show(outcome)
    sent, confirmed, failed = stream.sent, stream.confirmed, stream.failed
    status.finish()
    elapsed = time.monotonic() - started
    what = f"{confirmed} confirmed, {failed} not confirmed" if not no_confirm else "unconfirmed"
    summary = f"published {sent} message{'' if sent == 1 else 's'} in {elapsed:.2f}s ({what})"
    if skipped:
        summary += f", {skipped} input{'s' if skipped != 1 else ''} skipped"
    if members:
        cs = client.stats()
        summary += (f"; followed {plural(cs.get('moves', 0), 'failover')}, re-sent "
                    f"{plural(cs.get('resent', 0), 'message')} the old active had not "
                    "confirmed (at least once: a re-sent one may be there twice)")
    click.echo(summary + ("; interrupted" if interrupted else ""), err=True)
    if interrupted:
        sys.exit(INTERRUPTED)
    if failed or skipped:
        sys.exit(1)


def _pub_source(messages, file, count, binary, limit, skip):
    """(label, data, shown or None) per message to publish; unusable input goes to skip()."""
    if file is None and not messages:
        yield from _stdin_lines(count, binary, limit, skip)
        return
    fixed = []
    if file is not None:
        if file.name == "<stdin>" and sys.stdin.isatty():
            click.echo("reading one message from stdin (Ctrl-D to end)", err=True)
        data = file.read(limit + 1)
        name = "stdin" if file.name == "<stdin>" else f"file {file.name}"
        if len(data) > limit:
            skip(escape_text(name), f"too long (over {limit} bytes; at most {limit})")
        else:
            fixed.append((data, escape_text(name)))
    for i, text in enumerate(messages, 1):
        try:
            data = os.fsencode(text) if binary else text.encode("utf-8")
        except UnicodeEncodeError:
            skip(f"argument {i}", "not UTF-8 (--binary publishes raw bytes)")
            continue
        why = _unpublishable(data, binary, limit)
        if why:
            skip(f"argument {i}", why)
        else:
            fixed.append((data, _show(data)))
    if not fixed:
        return
    total = len(fixed) if count is None else count
    for k in range(total):
        data, shown = fixed[k % len(fixed)]
        yield f"message {k + 1}", data, shown


class _Input:
    """stdin read by its descriptor with a buffer of our own, so ready() knows whether the next
    line is there (buffered, or readable at once) or reading it would wait."""

    def __init__(self, fd: int = 0):
        self.fd, self.buf, self.eof = fd, bytearray(), False

    def _fill(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except OSError:  # (a closed descriptor: the end)
            chunk = b""
        self.eof = not chunk
        self.buf += chunk

    def ready(self) -> bool:
        """Whether readline() would return without waiting for input."""
        if self.eof or b"\n" in self.buf:
            return True
        import select

        try:
            return bool(select.select([self.fd], [], [], 0)[0])
        except (OSError, ValueError):
            return True  # (nothing to wait on: readline ends at once)

    def readline(self, limit: int) -> bytes:
        """The next line with its newline, at most `limit` bytes; b"" at the end."""
        while True:
            end = self.buf.find(b"\n", 0, limit)
            if end >= 0 or len(self.buf) >= limit or self.eof:
                n = end + 1 if end >= 0 else min(limit, len(self.buf))
                line = bytes(self.buf[:n])
                del self.buf[:n]
                return line
            self._fill()


_STDIN = _Input()


def _stdin_lines(count, binary, limit, skip):
    """stdin lines, read as bytes, each at most limit + 2 bytes in memory."""
    stream = _STDIN
    if sys.stdin.isatty():
        click.echo("reading messages from stdin, one per line (Ctrl-D to end)", err=True)
    number = 0
    while count is None or number < count:
        line = stream.readline(limit + 2)
        if not line:
            return
        number += 1
        ended = line.endswith(b"\n")
        size = len(line) - ended
        if not ended and len(line) == limit + 2:  # too long: read past it, keeping nothing
            while True:
                rest = stream.readline(1 << 16)
                ended = rest.endswith(b"\n")
                size += len(rest) - ended
                if not rest or ended:
                    break
            skip(f"line {number}", f"too long ({size} bytes; at most {limit})")
            continue
        line = line[:size]
        if not binary and line.endswith(b"\r"):
            line = line[:-1]
        why = _unpublishable(line, binary, limit)
        if why:
            skip(f"line {number}", why)
        else:
            yield f"line {number}", line, None


def _unpublishable(data, binary, limit):
    """Why data cannot be published (too long; not UTF-8 unless binary), or None."""
    if len(data) > limit:
        return f"too long ({len(data)} bytes; at most {limit})"
    if not binary:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return (f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}; "
                    "--binary publishes raw bytes)")
    return None


MAX_QUEUED = 65536  # pelotari.fyrehose.client.DEFAULT_MAX_QUEUED, repeated for a light --help
MAX_QUEUED_BYTES = 32 << 20  # ... DEFAULT_MAX_QUEUED_BYTES


@main.command()
@_client_options
@click.option("-n", "--count", type=click.IntRange(1), default=None,
              help="Exit after this many messages.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line: sequence and data (data_base64 if not UTF-8), "
                   "or lost (with its reason) and resync notices.")
@click.option("--raw", is_flag=True,
              help="Write each message's bytes exactly as they came, then a newline, and nothing "
                   "else (no SEQUENCE; notices go to stderr). Only for data you trust: a message "
                   "holding a newline reads as two, and terminal escapes are not defused.")
@click.option("--no-journal", is_flag=True,
              help="Set NOJOURNAL: keep no journal and never serve other clients' REQUESTs.")
@click.option("--journal-size", type=click.IntRange(1), default=4096, show_default=True,
              help="Recent messages kept to serve other clients' REQUESTs.")
@click.option("--timeout", type=FiniteRange(0.01), default=None,
              help="Exit after this many seconds without a message.")
@click.option("--max-queued", type=click.IntRange(1), default=MAX_QUEUED, show_default=True,
              help="Most messages waiting to be written when stdout is slower than the stream; "
                   "past it newer ones are dropped and reported as lost (overflow).")
@click.option("--max-queued-bytes", type=click.IntRange(1), default=MAX_QUEUED_BYTES,
              show_default=True, help="Most bytes of message data waiting to be written.")
@click.option("--gro", is_flag=True,
              help="Read with UDP_GRO (Linux >= 5.0): a run of DELIVERs the backbone sends with "
                   "GSO arrives in one read and is split here; nothing changes on the wire.")
def sub(backbone, bind, pack, keepalive, count, as_json, raw, no_journal, journal_size, timeout, max_queued,
        max_queued_bytes, gro):
    """Subscribe and print every message in sequence order.

    Each message is one line, SEQUENCE<TAB>text: backslashes, control characters (newline, tab,
    ESC, ...) and line or bidi separators are escaped (\\n, \\t, \\x1b, \\u2028, \\\\), so no
    message can forge a line or drive the terminal; data that is not UTF-8 prints as a Python
    bytes literal (b'...'). --json and --raw give the exact bytes.

    Gaps are repaired from other subscribers' journals (REQUEST → FORWARD); messages no peer
    could supply are reported as "lost FIRST..LAST" on stderr (or in --json), never skipped
    silently. So are messages dropped because output was not read in time (--max-queued).

    It ends with a summary line on stderr; exit status 130 after Ctrl-C, 0 after SIGTERM or
    --count messages.
    """
    # A service manager's stop ends it as Ctrl-C does, but as a clean stop (status 0).
    terminated = SignalInterrupt(signal.SIGTERM)
    from pelotari.fyrehose import Client, Lost, Message, Resync
    from pelotari.fyrehose.codec import NOJOURNAL

    if raw and as_json:
        raise click.UsageError("--raw and --json exclude each other")
    backbone, members = _backbones(backbone, terminated)
    config = _client_config(flags=NOJOURNAL if no_journal else 0, journal_size=journal_size,
                            pack=pack, cluster=members, keepalive_interval=keepalive)
    received = 0
    interrupted = False
    try:
        client = Client(backbone, bind=bind, config=config, gro=gro, max_queued=max_queued,
                        max_queued_bytes=max_queued_bytes,
                        on_event=_cluster_notices if members else None).start()
    except OSError as exc:
        raise click.ClickException(f"cannot open the client socket: {exc.strerror or exc}") from None
    with client:
        try:
            if client.wait_connected(3.0):
                ready.announce()  # signed on: what is published from now on reaches us
            else:
                click.echo(f"warning: the backbone at {backbone[0]}:{backbone[1]} is not "
                           "answering yet; still trying", err=True)
                threading.Thread(target=lambda: client.wait_connected(None)
                                 and ready.announce("pelotari sub"), daemon=True).start()
            for item in client.messages(timeout=timeout):
                if isinstance(item, Message):
                    received += 1
                    _print_message(item, as_json, raw)
                elif isinstance(item, Lost):
                    why = {"overflow": " (overflow: output not read in time)",
                           "failover": " (failover: numbers the dead active reserved and never "
                                       "used, or messages no journal held)"}.get(item.reason, "")
                    _notice({"lost": [item.first, item.last], "reason": item.reason},
                            f"lost {item.first}..{item.last}{why}", as_json)
                elif isinstance(item, Resync):
                    _notice({"resync": [item.expected, item.received]},
                            f"sequence jumped from {item.expected} to {item.received} "
                            "(backbone restart? messages it sequenced before this client "
                            "signed on again are not counted: the wire does not say)", as_json)
                if count is not None and received >= count:
                    break
        except KeyboardInterrupt:  # how a subscription ends: the summary, then the status
            interrupted = not terminated.came
        stats = client.stats()
    click.echo(f"received {plural(received, 'message')}; "
               f"{plural(stats.get('requests', 0), 'request')}, "
               f"{stats.get('lost', 0)} lost, {stats.get('overflow', 0)} dropped unread, "
               f"{plural(stats.get('duplicates', 0), 'duplicate')}"
               + ("; interrupted" if interrupted else "")
               + (" (the backbone never answered)"
                  if interrupted and not stats.get("acks_in") else ""),
               err=True)
    if interrupted:  # Ctrl-C: its one line (saying if the backbone never answered), 130
        sys.exit(INTERRUPTED)
    if not stats.get("acks_in"):
        raise click.ClickException(f"the backbone at {backbone[0]}:{backbone[1]} never answered")


def _cluster_notices(ev):
    """(sub -b A,B,C) the cluster's events, a line each on stderr."""
    from pelotari.fyrehose.events import BackboneMoved, NoQuorum

    if isinstance(ev, BackboneMoved):
        click.echo(f"{time.strftime('%H:%M:%S')} following the new active backbone at "
                   f"{ev.new[0]}:{ev.new[1]} (epoch {ev.epoch})", err=True)
    elif isinstance(ev, NoQuorum):
        click.echo(f"{time.strftime('%H:%M:%S')} no quorum: the member at {ev.member[0]} "
                   "reaches no majority of the cluster (a partition?); nothing is sequenced "
                   "on this side until it heals — still asking", err=True)


def _show(data):
    """Message bytes as one printable line: escaped UTF-8, else a bytes literal (b'...')."""
    try:
        return escape_text(data.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(data)  # escapes every byte outside printable ASCII, and the backslash


def _print_message(msg, as_json, raw):
    if raw:
        sys.stdout.buffer.write(msg.data + b"\n")
        sys.stdout.buffer.flush()
        return
    if as_json:
        try:
            record = {"sequence": msg.sequence, "data": msg.data.decode("utf-8")}
        except UnicodeDecodeError:
            record = {"sequence": msg.sequence,
                      "data_base64": base64.b64encode(msg.data).decode()}
        click.echo(json.dumps(record))  # ensure_ascii: every control and non-ASCII is \uXXXX
    else:
        click.echo(f"{msg.sequence}\t{_show(msg.data)}")
    sys.stdout.flush()


def _notice(record, text, as_json):
    if as_json:
        click.echo(json.dumps(record))
    else:
        click.echo(text, err=True)
