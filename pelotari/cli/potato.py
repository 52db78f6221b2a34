"""`pelotari potato`: the Potato Protocol v2.1 mesh (potato.md)."""
import json
import pathlib
import time

import click

from pelotari.cli import main
from pelotari.cli.common import (FiniteRange, MetricsAddressType, PelotariGroup, metrics_option,
                                 plural, start_metrics)

GROUP_HELP = """Potato mesh: relay and elections among clients that are not all peers.

Clients relay JSON messages (direct to one client by name, or broadcast to all) across a mesh
in which not every client is connected to every other, and agree on the next shared "frame" by
direct and indirect elections, without knowing who is in the mesh.
"""


@main.group(cls=PelotariGroup, help=GROUP_HELP)
def potato():
    pass


@potato.command()
@click.option("-n", "--nodes", type=click.IntRange(3, 100000), default=1000, show_default=True,
              help="Clients in the mesh.")
@click.option("-d", "--degree", type=FiniteRange(2, 50), default=6.0, show_default=True,
              help="Average peers per client (a random connected mesh).")
@click.option("--seeds", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Meshes per measurement (seeds 0..N-1).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="results/potato.jsonl",
              show_default=True, help="JSON-lines file the records are appended to.")
def simulate(nodes, degree, seeds, output):
    """Measure broadcasts and elections in a simulated mesh.

    For each of: no loss; 1 % of messages lost; the mesh cut in two halves — a broadcast from a
    random client (share reached, relative message redundancy RMR = m/(n-1) - 1, hops of the
    last delivery, latency p50/p99) and an election (time to the result, election messages per
    edge, and whether every client reachable was counted exactly once). Links: 1 ms, 0.5 ms of
    jitter. Deterministic for a given seed.
    """
    from statistics import median

    from pelotari.harness.results import environment, write
    from pelotari.potato import simulate as sim

    started = time.monotonic()
    env = environment()
    records = [{**r, "env": env} for r in sim.run(nodes, degree, seeds, progress=lambda s: click.echo(
        f"[{time.monotonic() - started:5.1f}s] {s}", err=True))]
    write(pathlib.Path(output), records)
    click.echo("| conditions | reached | RMR | last hops | latency p50 / p99 | election | "
               "msgs/edge | counted once |")
    click.echo("|---|---|---|---|---|---|---|---|")
    for loss, part in ((0.0, False), (0.01, False), (0.0, True)):
        b = [r for r in records if r["kind"] == "potato-sim-broadcast" and r["loss"] == loss
             and r["partition"] == part]
        e = [r for r in records if r["kind"] == "potato-sim-election" and r["loss"] == loss
             and r["partition"] == part]
        what = "partition" if part else f"{loss:.0%} loss"
        click.echo(f"| {what} | {median(r['reached_of_reachable'] for r in b):.1%} of reachable | "
                   f"{median(r['rmr'] for r in b):.2f} | {median(r['last_hops'] for r in b):g} | "
                   f"{median(r['latency_p50_ms'] for r in b):.1f} / "
                   f"{median(r['latency_p99_ms'] for r in b):.1f} ms | "
                   f"{median(r['elected_ms'] for r in e):.0f} ms | "
                   f"{median(r['messages_per_edge'] for r in e):.2f} | "
                   f"{sum(r['counted_once'] for r in e)}/{len(e)} |")
    click.echo(f"{plural(len(records), 'record')} appended to {output}", err=True)


# ---- a client ----------------------------------------------------------------------------

COMMANDS = """\
send NAME TEXT   a direct message to the client NAME (relayed if it is not a peer)
broadcast TEXT   a message to every client in the mesh
propose          run an election for a new frame; on YES the frame is broadcast
frame            the current frame identifier
peers            our peers
stats            counters: messages sent, received, dropped
help             this list
quit             stop (as Ctrl-C, SIGTERM and SIGHUP do)"""

HELP_LINE = "commands: send NAME TEXT, broadcast TEXT, propose, frame, peers, stats, help, quit"


def _address(text, option):
    from pelotari.cli.common import AddressType
    try:
        return AddressType(0).convert(text, None, None)
    except click.BadParameter as exc:  # (named: "Invalid value:" alone did not say which)
        raise click.BadParameter(exc.message, param_hint=option) from None


NODE_HELP = """Run a potato client: relay, deliver and vote.

\b
Once running, it reads these commands on stdin, one per line:
""" + "\n".join("  " + line for line in COMMANDS.splitlines())


# (help= and not a docstring: a docstring built with + is no docstring, and --help was empty)
@potato.command(help=NODE_HELP, short_help="Run a potato client: relay, deliver and vote.",
                epilog="""stdin may be a terminal, a pipe, /dev/null or closed: the end of input
does not stop the client; it runs until `quit`, Ctrl-C, SIGTERM or SIGHUP, then exits with status
0, or 130 after Ctrl-C. With --json every event is one JSON object per line.""")
@click.option("--name", required=True, help="This client's name (1 to 100 characters of "
                                            "valid UTF-8).")
@click.option("--listen", default="127.0.0.1:0", show_default=True, metavar="HOST:PORT",
              help="Where peers connect to us (port 0: any free port; printed at start).")
@click.option("--connect", "connect", multiple=True, metavar="HOST:PORT",
              help="A client to become peers with (repeat for several); tried again, with "
                   "backoff (0.5 s doubling to 10 s), whenever it is unreachable or goes away.")
@click.option("--transport", type=click.Choice(["webrtc", "tcp"]), default="webrtc",
              show_default=True, help="WebRTC data channels (aiortc; host candidates only, no "
                                      "STUN), or plain TCP with one JSON message per line.")
@click.option("--http", "http", type=MetricsAddressType("the page server", port_required=True),
              default=None, metavar="HOST:PORT",
              help="Serve the potato page at http://HOST:PORT/: a canvas to draw on that joins "
                   "the mesh as a client of its own, over WebRTC from the browser (HOST "
                   "defaults to 127.0.0.1, loopback; PORT alone is enough; 0 picks a free port "
                   "and prints it).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event.")
@metrics_option
def node(name, listen, connect, transport, http, as_json, metrics):
    import asyncio

    from pelotari.cli.service import ensure_standard_fds
    from pelotari.potato.wire import is_name

    if not is_name(name):
        raise click.BadParameter("a name is 1 to 100 characters of valid UTF-8",
                                 param_hint="--name")
    listen = _address(listen, "--listen")
    targets = [_address(c, "--connect") for c in connect]
    for (host, port), text in zip(targets, connect):
        if port == 0:  # (was tried again every 10 s for good: nothing listens on port 0)
            raise click.BadParameter(f"{text!r} has no port: HOST:PORT, PORT 1..65535",
                                     param_hint="--connect")
    ensure_standard_fds()
    # (Ctrl-C before the signal handlers are installed: KeyboardInterrupt, "interrupted", 130)
    failure = asyncio.run(_run(name, listen, targets, transport, as_json, metrics, http))
    if failure:
        raise click.ClickException(failure)


async def _run(name, listen, targets, transport, as_json, metrics=None, http=None):
    """Run the client until a signal or `quit` (None; exit status 130 after Ctrl-C), or its
    one-line failure."""
    from pelotari.cli.service import Output

    with Output(as_json) as out:
        return await _serve(name, listen, targets, transport, as_json, out, metrics, http)


async def _serve(name, listen, targets, transport, as_json, out, metrics=None, http=None):
    from pelotari.cli.common import escape_text
    from pelotari.cli.service import (Stopper, exit_if_interrupted, read_commands,
                                      run_until_stopped)
    from pelotari.potato import core as c
    from pelotari.potato.node import Node

    stopper = Stopper()  # from here on, each signal stops the client cleanly

    def emit(event, text, **fields):
        out.event(event, escape_text(text), **fields)  # names and bodies are anybody's

    def show(body):
        return body if isinstance(body, str) else json.dumps(body)

    def on_event(ev):
        if isinstance(ev, c.PeerUp):
            emit("peer_up", f"peer {ev.peer} connected", peer=ev.peer)
        elif isinstance(ev, c.PeerDown):
            emit("peer_down", f"peer {ev.peer} gone", peer=ev.peer)
        elif isinstance(ev, c.Delivered):
            via = f" via {ev.via}" if ev.via and ev.via != ev.sender else ""
            emit("message", f"{ev.kind} from {ev.sender}{via} ({ev.hops} hop{'' if ev.hops == 1 else 's'}): "
                 f"{show(ev.body)}", kind=ev.kind, sender=ev.sender, via=ev.via, body=ev.body,
                 hops=ev.hops, identifier=ev.identifier)
        elif isinstance(ev, c.Undeliverable):
            emit("undeliverable", f"no peer to send to {ev.to}", to=ev.to)
        elif isinstance(ev, c.ElectionStarted):
            emit("election_started", f"election for {ev.next[:12]} on {ev.parent[:12]} "
                 f"(direct participants: {', '.join(ev.participants) or 'none'})",
                 parent=ev.parent, next=ev.next, participants=list(ev.participants))
        elif isinstance(ev, c.VoteCast):
            emit("vote", f"voted {ev.vote} on {ev.originator}'s {ev.next[:12]}",
                 originator=ev.originator, vote=ev.vote, parent=ev.parent, next=ev.next)
        elif isinstance(ev, c.ElectionResult):
            emit("election_result", f"election {'won' if ev.won else 'lost'}: YES {ev.yes:g}, "
                 f"NO {ev.no}" + (f" (abstained: {', '.join(ev.abstained)})"
                                  if ev.abstained else ""),
                 won=ev.won, yes=ev.yes, no=ev.no, abstained=list(ev.abstained),
                 parent=ev.parent, next=ev.next)
        elif isinstance(ev, c.FrameChanged):
            via = f" via {ev.via}" if ev.via and ev.via != ev.by else ""
            drawn = "" if ev.picture is None else \
                f", {len(ev.picture)} stroke{'s' * (len(ev.picture) != 1)}"
            emit("frame", f"frame is now {ev.frame[:12]} (by {ev.by}{via}{drawn})",
                 frame=ev.frame, parent=ev.parent, by=ev.by, via=ev.via,
                 strokes=None if ev.picture is None else len(ev.picture))

    node = Node(name, listen[0], listen[1], transport=transport, on_event=on_event)
    exporter = pages = None
    try:
        try:
            await node.start()
        except (OSError, ValueError) as exc:
            return f"cannot listen on {listen[0]}:{listen[1]}: {exc}"
        host, port = listen[0], node.transport.port  # the port taken, when asked for 0
        emit("listening", f"{name} listening on {host}:{port} ({transport})", name=name,
             host=host, port=port, transport=transport)
        if http is not None:
            from pelotari.potato.page import PageServer

            try:
                node.add_browsers(http[0])
                pages = PageServer(node, http[0], http[1])
                await pages.start()
            except (OSError, ValueError) as exc:
                return f"cannot serve the page on {http[0]}:{http[1]}: {exc}"
            emit("http", f"open {pages.url} in a browser to draw with the mesh", url=pages.url,
                 host=http[0], port=pages.port)
        import asyncio

        from pelotari.metrics import OnLoop
        from pelotari.potato.metrics import PotatoMetrics

        try:
            exporter = start_metrics(metrics, OnLoop(PotatoMetrics(node, pages),
                                                     asyncio.get_running_loop()),
                                     lambda text, url: emit("metrics", text, url=url))
        except click.ClickException as exc:
            return exc.message
        for h, p in targets:  # each its own task, retried with backoff; close() cancels them
            def connected(peer, h=h, p=p):
                emit("connected", f"connected to {peer} at {h}:{p}", peer=peer, host=h, port=p)

            def failed(exc, retry_in, h=h, p=p):
                again = f"; again in {retry_in:.1f} s" if retry_in is not None else ""
                why = str(exc) or type(exc).__name__  # e.g. the peer speaks the other transport
                emit("error", f"cannot connect to {h}:{p}: {why}{again}",
                     message=f"cannot connect to {h}:{p}", reason=why, retry_in=retry_in)

            node.keep_connected(h, p, on_connected=connected, on_failed=failed)

        def command(text):
            words = text.split(None, 2)
            cmd = words[0].lower()
            if cmd == "send" and len(words) == 3:
                node.send(words[1], words[2])
            elif cmd == "broadcast" and len(words) >= 2:
                node.broadcast(text.split(None, 1)[1])
            elif cmd == "propose" and len(words) == 1:
                if node.propose() is None:
                    emit("error", "an election of ours is still open", message="busy")
            elif cmd == "frame" and len(words) == 1:
                emit("frame", f"frame {node.frame}", frame=node.frame)
            elif cmd == "peers" and len(words) == 1:
                emit("peers", "peers: " + (", ".join(node.peers()) or "none"),
                     peers=node.peers())
            elif cmd == "stats" and len(words) == 1:
                stats = PotatoMetrics(node, pages)._stats()
                emit("stats", " ".join(f"{k}={v}" for k, v in sorted(stats.items())),
                     stats=dict(stats))
            elif cmd == "help":
                out.listing("help", COMMANDS.splitlines(), "commands")
            elif cmd == "quit" and len(words) == 1:
                stopper.stop("quit")
            else:
                emit("error", f"unknown command or usage {words[0]!r}; {HELP_LINE}",
                     message="unknown command")

        def on_line(text):
            if text.strip():
                try:
                    command(text.strip())
                except ValueError as exc:
                    emit("error", str(exc), message=str(exc))

        await run_until_stopped(stopper, [read_commands(
            on_line, lambda text: emit("error", text, message=text),
            lambda: out.end_of_input("client"))])
        emit("stopped", f"stopped by {stopper.why or 'request'}", signal=stopper.why)
        exit_if_interrupted(stopper.why)
    finally:
        stopper.close()
        if exporter is not None:
            exporter.stop()
        if pages is not None:
            await pages.close()
        await node.close()


@potato.command("bench")
@click.option("--port", type=click.IntRange(1, 65535), default=34440, show_default=True,
              help="The port every client listens on (each on its own 127.0.0.k); pages are "
                   "served on the next one.")
@click.option("--mixed", is_flag=True,
              help="Pages in headless chromium beside Python clients instead: the A-G mesh "
                   "with 3 pages, and 16 Python clients with 4 pages (needs Debian's chromium "
                   "and Playwright, which `bash tools/run test` installs).")
@click.option("--runs", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Run each mesh this many times (a figure is their median; trend shows it).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="results/potato.jsonl",
              show_default=True, help="JSON-lines file the records are appended to.")
def bench_command(port, mixed, runs, output):
    """Measure real meshes: the seed's A-G example and 20 clients, over WebRTC and TCP.

    Clients run as processes on 127.0.0.1..20 (one port, --port). For each mesh and transport:
    the time until every client has all its peers, 20 elections (time from `propose` to the
    result, p50 and p99; every client must take each new frame), and 200 broadcasts (CPU time
    of all clients per message delivered). With --mixed: pages in headless chromium join
    Python clients over TCP (set-up, page start to first peer, 20 elections proposed by a
    page and taken by every client, the CPU each page costs the node serving it). Ctrl-C,
    SIGTERM or an error stops every client, and the browser.
    """
    from pelotari.harness.procs import STOP_SIGNALS, Children
    from pelotari.harness.results import environment, write
    from pelotari.potato import bench

    started = time.monotonic()

    def progress(text):
        click.echo(f"[{time.monotonic() - started:5.1f}s] {text}", err=True)

    try:
        with Children(interrupt=STOP_SIGNALS):
            env = environment()
            records = []
            for k in range(runs):
                if runs > 1:
                    progress(f"run {k + 1} of {runs}")
                found = bench.run_mixed_all(progress=progress, port=port) if mixed else \
                    bench.run(port=port, progress=progress)
                records += [{**r, "env": env} for r in found]
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    if mixed:
        write(pathlib.Path(output), records)
        click.echo("| mesh | transport | set-up | page to first peer | election p50 / p99 | "
                   "agreed | node CPU per page |")
        click.echo("|---|---|---|---|---|---|---|")
        for r in records:
            click.echo(f"| {r['mesh']} ({r['python_clients']} Python clients, {r['pages']} "
                       f"pages, {r['edges']} links) | {r['transport']} | {r['setup_s']:.2f} s | "
                       f"{r['page_first_peer_ms_p50']:.0f} ms | {r['election_p50_ms']:.1f} / "
                       f"{r['election_p99_ms']:.1f} ms | {r['frames_agreed']} of "
                       f"{r['elections_won']} | {r['node_cpu_pct_per_page']:.1f} % |")
        click.echo(f"{plural(len(records), 'record')} appended to {output}", err=True)
        return
    write(pathlib.Path(output), records)
    click.echo("| mesh | transport | set-up | election p50 / p99 | CPU per delivery |")
    click.echo("|---|---|---|---|---|")
    for r in records:
        click.echo(f"| {r['mesh']} ({r['nodes']} clients, {r['edges']} links) | "
                   f"{r['transport']} | {r['setup_s']:.2f} s | {r['election_p50_ms']:.1f} / "
                   f"{r['election_p99_ms']:.1f} ms | {r['cpu_us_per_delivery']:.0f} µs |")
    click.echo(f"{plural(len(records), 'record')} appended to {output}", err=True)
