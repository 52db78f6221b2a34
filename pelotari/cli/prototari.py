"""`pelotari prototari`: run a LAN discovery node, see peers come and go, send lines."""
import asyncio
import signal
import socket

import click

from pelotari.cli import main
from pelotari.cli.common import (FiniteRange, escape_text, metrics_option, plural,
                                 split_address, start_metrics)
from pelotari.prototari.wire import BROADCAST_PORT, UNICAST_PORT
from pelotari.cli.service import (Output, Stopper, ensure_standard_fds, exit_if_interrupted,
                                  quiet_logging, read_commands, run_until_stopped)


@main.command()
@click.option("-i", "--interface", default=None,
              help="Network interface to use: its address and broadcast address. [default: the "
                   "host's one private IPv4 interface (10/8, 172.16/12, 192.168/16; up, not "
                   "loopback, with a broadcast address); none or several is an error]")
@click.option("--host", default=None,
              help="Bind this address instead (e.g. 0.0.0.0): no interface is picked, and "
                   "broadcasts go to --broadcast-address.")
@click.option("--broadcast-address", default=None,
              help="Where `pelotari?` goes. [default: the interface's; 255.255.255.255 with "
                   "--host]")
@click.option("--unicast-port", type=click.IntRange(1, 65535), default=UNICAST_PORT, show_default=True,
              help="Where every node listens for unicasts: aupa!, dale!, hor?, hemen nago! and "
                   "data go to a peer's address at this port.")
@click.option("--broadcast-port", type=click.IntRange(1, 65535), default=BROADCAST_PORT, show_default=True)
@click.option("--max-peers", type=click.IntRange(1, 65535), default=64, show_default=True)
@click.option("--broadcast-interval", type=FiniteRange(0.01), default=5.0, show_default=True,
              help="Seconds between `pelotari?` broadcasts.")
@click.option("--inactive-peer-time", type=FiniteRange(0.01), default=5.0, show_default=True,
              help="Seconds of silence before a peer gets `hor?`.")
@click.option("--heartbeat-max-wait", type=FiniteRange(0.01), default=1.0, show_default=True,
              help="Seconds to wait for `hemen nago!`.")
@click.option("--reservation-timeout", type=FiniteRange(0.01), default=2.0, show_default=True,
              help="Seconds a spot stays reserved for a broadcaster we answered.")
@click.option("--response-window", type=FiniteRange(0.01), default=2.0, show_default=True,
              help="Seconds after our broadcast in which `aupa!` is accepted; outside it, "
                   "`aupa!` is counted and dropped.")
@click.option("--max-reservations", type=click.IntRange(1, 65535), default=None,
              help="Spots strangers' broadcasts may reserve at once. [default: half of "
                   "--max-peers, at least 1]")
@click.option("--per-port", "multi_node", is_flag=True,
              help="Several nodes per host: a peer is IP:PORT and replies go to the source "
                   "port. Off by default (a peer is its IP, replies go to --unicast-port); nodes "
                   "that send from ephemeral ports cannot be peers of a --per-port node.")
@click.option("--pong-interval", type=FiniteRange(0), default=0.1, show_default=True,
              help="Answer at most one `hor?` per peer per this many seconds (0: every one).")
@click.option("--peer-broadcast-interval", type=FiniteRange(0), default=5.0,
              show_default=True,
              help="A peer that never speaks heartbeat (the Go implementation) is kept by its "
                   "broadcasts: it leaves after missing 3 of them, at this interval or the "
                   "shortest gap seen (0: by the heartbeat alone).")
@click.option("--json", "as_json", is_flag=True, help="Events as JSON lines.")
@metrics_option
def prototari(interface, host, broadcast_address, unicast_port, broadcast_port, max_peers,
              broadcast_interval, inactive_peer_time, heartbeat_max_wait, reservation_timeout,
              response_window, max_reservations, multi_node, pong_interval,
              peer_broadcast_interval, as_json, metrics):
    """Run a prototari node: find peers on the LAN by broadcast and keep them by heartbeat.

    Peers joining and leaving, and messages from them, are printed as they happen. Each line
    on stdin is sent to every peer; `@HOST text` (or `@HOST:PORT text`) sends to one. Lines
    over 64 KiB or not UTF-8 are reported (one line on stderr, or an "error" event) and
    skipped.

    stdin may be a terminal, a pipe, /dev/null or closed: the end of input does not stop the
    node. It runs until Ctrl-C or SIGTERM, so it can run as a service (systemd, nohup, a
    container without a TTY); then it prints a "stopped" event (with its counters) and exits
    with status 0 (SIGTERM) or 130 (Ctrl-C).

    Output never holds the node up: lines wait for a slow reader (up to 1 MiB per stream), and
    beyond that are dropped and counted (`output_dropped` in the "stopped" event; one warning
    line on stderr when it starts). In text mode a message's data is escaped onto one line
    (backslash, controls, line and bidi separators), as `pelotari sub` shows it.
    """
    from pelotari.prototari import Config

    ensure_standard_fds()
    try:
        config = Config(max_peers=max_peers, broadcast_interval=broadcast_interval,
                        inactive_peer_time=inactive_peer_time,
                        heartbeat_max_wait=heartbeat_max_wait,
                        reservation_timeout=reservation_timeout,
                        response_window=response_window, max_reservations=max_reservations,
                        multi_node=multi_node, pong_interval=pong_interval,
                        peer_broadcast_interval=peer_broadcast_interval,
                        broadcast_address=broadcast_address,
                        broadcast_port=broadcast_port, unicast_port=unicast_port)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    # (Ctrl-C before the signal handlers are installed: KeyboardInterrupt, "interrupted", 130)
    asyncio.run(_run(config, interface, host, as_json, metrics))


def _show(data: bytes) -> str:
    """Message bytes as one inert line: escaped UTF-8, else a bytes literal (b'...'), as
    `pelotari sub` shows them."""
    try:
        return escape_text(data.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(data)  # escapes every byte outside printable ASCII, and the backslash


async def _run(config, interface, host, as_json, metrics):
    """Run the node until a signal stops it (exit status 130 after Ctrl-C)."""
    quiet_logging("pelotari.prototari")
    with Output(as_json) as out:
        await _serve(config, interface, host, as_json, out, metrics)


async def _serve(config, interface, host, as_json, out, metrics):
    from pelotari.prototari import Message, Node, NodeWarning, PeerJoined, PeerLeft

    _emit = out.event
    stopper = Stopper((signal.SIGINT, signal.SIGTERM))  # from here on, both stop it cleanly
    try:
        node = await Node.start(config, interface=interface, host=host)
    except (OSError, ValueError) as exc:
        stopper.close()
        raise click.ClickException(f"cannot start: {getattr(exc, 'strerror', None) or exc}") from None
    address = f"{node.address[0]}:{node.address[1]}"
    broadcast = "{}:{}".format(*node.broadcast)
    identity = "address:port" if config.multi_node else "address"
    _emit("started", f"{address} on {node.interface or 'the bound address'}, "
          f"broadcast {broadcast}; a peer is its {identity}",
          interface=node.interface, address=address, broadcast=broadcast, peer=identity)
    from pelotari.metrics import OnLoop
    from pelotari.prototari.metrics import PrototariMetrics

    try:
        exporter = start_metrics(metrics, OnLoop(PrototariMetrics(node), asyncio.get_running_loop()),
                                 lambda text, url: _emit("metrics", text, url=url))
    except click.ClickException:
        stopper.close()
        await node.close()
        raise
    def error(message):
        _emit("error", err=True, message=message)

    async def show_events():
        async for ev in node.events():
            if isinstance(ev, NodeWarning):
                _emit("warning", ev.message, err=True, kind=ev.kind, message=ev.message)
                continue
            peer = f"{ev.peer[0]}:{ev.peer[1]}"
            if isinstance(ev, PeerJoined):
                _emit("joined", peer=peer, via=ev.via, peers=len(node.peers))
            elif isinstance(ev, PeerLeft):
                _emit("left", peer=peer, reason=ev.reason, peers=len(node.peers))
            elif isinstance(ev, Message):
                if as_json:  # json.dumps escapes every control and non-ASCII character
                    data = ev.data.decode("utf-8", "backslashreplace")
                else:
                    data = _show(ev.data)
                _emit("message", peer=peer, data=data)

    def on_line(text):
        if not text:
            return
        try:
            if text.startswith("@"):
                target, _, body = text[1:].partition(" ")
                try:
                    peer = split_address(target, config.unicast_port)
                    socket.inet_aton(peer[0])
                except (ValueError, OSError):
                    error(f"{target!r} is not a peer's ADDRESS:PORT; a direct message is "
                          "@ADDRESS:PORT text")
                    return
                if peer not in node.peers:
                    error(f"{peer[0]}:{peer[1]} is not a peer (peers: "
                          f"{', '.join(f'{a}:{p}' for a, p in sorted(node.peers)) or 'none yet'})"
                          "; a direct message is @ADDRESS:PORT text")
                    return
                node.send(peer, body.encode())
            else:
                n = node.send_all(text.encode())
                _emit("sent", peers=n)
        except (KeyError, ValueError) as exc:
            error(str(exc).strip("'\""))

    try:
        await run_until_stopped(stopper, [show_events(),
                                          read_commands(on_line, error, out.end_of_input)])
    finally:
        if exporter is not None:
            exporter.stop()
        await node.close()
    peers = {f"{a}:{p}": {"missed": s.missed, "pongs": s.pongs}
             for (a, p), s in sorted(node.core.peers.items())}
    dropped = out.dropped
    stats = dict(sorted(node.core.stats.items()))
    counters = " ".join(f"{k}={v}" for k, v in stats.items()) or "none"
    _emit("stopped", f"by {stopper.why or 'request'} with {plural(len(peers), 'peer')}; "
          f"counters: {counters}"
          + (f"; {plural(dropped, 'line')} of output dropped" if dropped else ""),
          force=True, signal=stopper.why, peers=peers, stats=stats, output_dropped=dropped)
    exit_if_interrupted(stopper.why)

