"""`pelotari prototari`: run a LAN discovery node, see peers come and go, send lines."""
import asyncio
import json
import sys
import time

import click

from pelotari.cli import main


@main.command()
@click.option("-i", "--interface", default=None,
              help="Network interface to use: its address, and its broadcast address.")
@click.option("--host", default=None, help="Address to bind the unicast socket [default: the interface's, or all].")
@click.option("--broadcast-address", default="255.255.255.255", show_default=True,
              help="Where `pelotari?` goes (ignored with --interface).")
@click.option("--unicast-port", type=click.IntRange(1, 65535), default=21450, show_default=True)
@click.option("--broadcast-port", type=click.IntRange(1, 65535), default=21451, show_default=True)
@click.option("--max-peers", type=click.IntRange(1, 65535), default=64, show_default=True)
@click.option("--broadcast-interval", type=click.FloatRange(0.01), default=5.0, show_default=True,
              help="Seconds between `pelotari?` broadcasts.")
@click.option("--inactive-peer-time", type=click.FloatRange(0.01), default=5.0, show_default=True,
              help="Seconds of silence before a peer gets `hor?`.")
@click.option("--heartbeat-max-wait", type=click.FloatRange(0.01), default=1.0, show_default=True,
              help="Seconds to wait for `hemen nago!`.")
@click.option("--reservation-timeout", type=click.FloatRange(0.01), default=2.0, show_default=True,
              help="Seconds a spot stays reserved for a broadcaster we answered.")
@click.option("--json", "as_json", is_flag=True, help="Events as JSON lines.")
def prototari(interface, host, broadcast_address, unicast_port, broadcast_port, max_peers,
              broadcast_interval, inactive_peer_time, heartbeat_max_wait, reservation_timeout,
              as_json):
    """Run a prototari node: find peers on the LAN by broadcast and keep them by heartbeat.

    Peers joining and leaving, and messages from them, are printed as they happen. Each line
    typed on stdin is sent to every peer; `@HOST:PORT text` sends to one. Ctrl-C or end of input
    stops the node.
    """
    from pelotari.prototari import Config

    try:
        config = Config(max_peers=max_peers, broadcast_interval=broadcast_interval,
                        inactive_peer_time=inactive_peer_time,
                        heartbeat_max_wait=heartbeat_max_wait,
                        reservation_timeout=reservation_timeout,
                        broadcast_address=broadcast_address, broadcast_port=broadcast_port,
                        unicast_port=unicast_port)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        asyncio.run(_run(config, interface, host, as_json))
    except KeyboardInterrupt:
        pass


def _emit(as_json, kind, **fields):
    if as_json:
        click.echo(json.dumps({"time": time.time(), "event": kind, **fields}))
    else:
        text = " ".join(f"{v}" for v in fields.values())
        click.echo(f"{time.strftime('%H:%M:%S')} {kind:<7} {text}")
    sys.stdout.flush()


async def _run(config, interface, host, as_json):
    from pelotari.prototari import Message, Node, PeerJoined, PeerLeft

    try:
        node = await Node.start(config, interface=interface, host=host)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot start: {getattr(exc, 'strerror', None) or exc}") from None
    where = f"{node.address[0]}:{node.address[1]}"
    _emit(as_json, "started", address=where, broadcast=f"{node.config.broadcast_address}:{config.broadcast_port}")
    loop = asyncio.get_running_loop()
    lines: "asyncio.Queue" = asyncio.Queue()
    loop.add_reader(sys.stdin.fileno(), lambda: lines.put_nowait(sys.stdin.readline()))

    async def show_events():
        async for ev in node.events():
            peer = f"{ev.peer[0]}:{ev.peer[1]}"
            if isinstance(ev, PeerJoined):
                _emit(as_json, "joined", peer=peer, via=ev.via, peers=len(node.peers))
            elif isinstance(ev, PeerLeft):
                _emit(as_json, "left", peer=peer, reason=ev.reason, peers=len(node.peers))
            elif isinstance(ev, Message):
                _emit(as_json, "message", peer=peer, data=ev.data.decode("utf-8", "backslashreplace"))

    shower = asyncio.ensure_future(show_events())
    try:
        while True:
            line = await lines.get()
            if not line:  # end of input
                break
            text = line.rstrip("\n")
            if not text:
                continue
            if text.startswith("@") and " " in text:
                target, body = text[1:].split(" ", 1)
                h, _, p = target.rpartition(":")
                try:
                    node.send((h, int(p)), body.encode())
                except (KeyError, ValueError) as exc:
                    _emit(as_json, "error", message=str(exc).strip("'\""))
            else:
                n = node.send_all(text.encode())
                _emit(as_json, "sent", peers=n)
    finally:
        loop.remove_reader(sys.stdin.fileno())
        shower.cancel()
        await node.close()
