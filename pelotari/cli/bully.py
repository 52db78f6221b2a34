"""`pelotari bully start|join`: run a node of the bully P2P client (p2p-bully-client.md)."""
import asyncio
import datetime
import time

import click

from pelotari.cli import main
from pelotari.cli.common import (AddressType, FiniteRange, PelotariGroup, escape_text,
                                 metrics_option, plural, start_metrics)

from pelotari.bully.wire import DEFAULT_PORT as PORT  # the wire table (no asyncio)
SYNC_INTERVAL = 60.0  # Config.sync_interval's default (not imported here: --help stays fast)

COMMANDS = """\
peers            who leads, its members (leader) or neighbours, every node known
search ID        find the node with that ID ("found" or "not found" follows)
text ID MESSAGE  send MESSAGE (the rest of the line) to the node with that ID
elect            start a bully election
sync             (leader only) bring every clock to the group's, the Berkeley way
time             the logical clock (ISO, ms) and its offset from the system clock
stats            counters: messages sent, received, dropped; connections
help             this list
quit             stop (as Ctrl-C and SIGTERM do)"""

SERVICE = """\
stdin may be a terminal, a pipe, /dev/null or closed: the end of input does not stop the
node; it runs until `quit`, Ctrl-C, SIGTERM or SIGHUP (then it closes every connection and exits
with status 0, or 130 after Ctrl-C), so it can run as a service. With --json every event is one
JSON object per line, with "event" and "t" (wall-clock seconds)."""

HELP_LINE = "commands: peers, search ID, text ID MESSAGE, elect, sync, time, stats, help, quit"


GROUP_HELP = """Bully P2P client: a leader-based peer-to-peer network over TCP (port 3333).

One node founds the network and leads it (`pelotari bully start`); every other joins through
the leader (`pelotari bully join LEADER`), which gives it an ID from 1 to 25 and up to four
peers. Nodes send the leader a heartbeat, search for each other by ID and send text messages.
When the leader goes, the highest ID left takes over (the bully election); the leader
synchronises the nodes' logical clocks every minute and on request (the Berkeley algorithm). Messages are
the protocol's 13, byte for byte as the Java clients send them. A node runs as a service
until Ctrl-C or SIGTERM.

Once a node runs, it reads these commands on stdin, one per line:

\b
""" + COMMANDS


@main.group(cls=PelotariGroup, help=GROUP_HELP)
def bully():
    pass


# ---- options shared by start and join --------------------------------------------------------

def _heartbeat(ctx, param, value):
    if value is not None and value > 60:
        raise click.BadParameter(f"{value:g} s: at most 60 (the protocol wants a heartbeat at "
                                 "least once a minute)")
    return value


def _node_options(fn):
    options = [
        click.option("--heartbeat", type=FiniteRange(0.1), default=5.0,
                     show_default=True, callback=_heartbeat, metavar="SECONDS",
                     help="Seconds between heartbeats to the leader (0.1 to 60; each opens "
                          "two connections: leaders that never close one, as peerbox and VSP2P "
                          "do, keep them all: 20 is peerbox's own)."),
        click.option("--peer-timeout", type=FiniteRange(0, min_open=True), default=None,
                     metavar="SECONDS",
                     help="As leader, drop a peer whose heartbeat stopped this long ago. Keep it "
                          "over 60 when any peer may heartbeat once a minute, as the protocol "
                          "allows (Java clients: 20-50 s). [default: 65, or 3.2 x --heartbeat if "
                          "longer]"),
        click.option("--sync-interval", type=FiniteRange(0), default=None,
                     metavar="SECONDS",
                     help="As leader, synchronise clocks this often (0: only by `sync`). "
                          f"[default: {SYNC_INTERVAL:g}]"),
        click.option("--election-step", type=FiniteRange(0), default=0.02,
                     show_default=True, metavar="SECONDS",
                     help="An election waits this long per higher ID it knows, so that the "
                          "highest asks first."),
        click.option("--max-connections", type=click.IntRange(1, 65535), default=256,
                     show_default=True, metavar="N",
                     help="Incoming connections open at once (16 per host at most)."),
        click.option("--max-correction", type=FiniteRange(0, min_open=True), default=60.0,
                     show_default=True, metavar="SECONDS",
                     help="No clock sync moves a clock further: a peer further off is left out "
                          "of the leader's round, and a new time from the leader that would "
                          "move ours further is refused (a wild or relative value)."),
        click.option("--outlier-bound", type=FiniteRange(0, min_open=True), default=1.0,
                     show_default=True, metavar="SECONDS",
                     help="As leader, average only the clocks this close to its own; the "
                          "others are told the time without pulling anybody. A clock that "
                          "ticks in whole seconds (P2P-Client's) can pull the group by a third "
                          "of a second a round at 1; 0.5 leaves it out."),
        click.option("--clock-offset", type=FiniteRange(-86400.0 * 366, 86400.0 * 366),
                     default=0.0, show_default=True,
                     metavar="SECONDS",
                     help="Start the logical clock this far from the system clock. For demos "
                          "and the sync benchmark: `sync` then brings it back in line."),
        click.option("--json", "as_json", is_flag=True,
                     help="Events as JSON lines (one object per line)."),
        metrics_option,
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _config(heartbeat, peer_timeout, sync_interval, election_step, max_connections,
            max_correction, outlier_bound=1.0):
    from pelotari.bully.core import Config

    try:
        return Config.for_heartbeat(
            heartbeat, peer_timeout,
            sync_interval=SYNC_INTERVAL if sync_interval is None else sync_interval,
            election_step=election_step, max_connections=max_connections,
            max_correction=max_correction, outlier_bound=outlier_bound)
    except ValueError as exc:
        text = str(exc)
        for name in ("peer_timeout", "heartbeat", "max_correction"):
            text = text.replace(name, "--" + name.replace("_", "-"))
        raise click.UsageError(text.replace("_", "-")) from None


START_HELP = """Found a network and lead it.

The leader gives every node that joins (`pelotari bully join THIS_HOST`) an ID and up to four
peers, takes their heartbeats, and drops a node whose heartbeat stops.

Commands on stdin, one per line:

\b
""" + COMMANDS

JOIN_HELP = """Join the network whose leader listens at LEADER[:PORT] (port 3333 by default).

The leader gives this node an ID (1..25) and up to four peers. A join that fails (nobody
answers, or the network is full) is one line on stderr and exit status 1.

Commands on stdin, one per line:

\b
""" + COMMANDS


@bully.command(help=START_HELP, epilog=SERVICE)
@click.option("--bind", type=AddressType(PORT), default=f"0.0.0.0:{PORT}", show_default=True,
              metavar="HOST[:PORT]", help="Where to listen (peers connect here).")
@click.option("--id", "node_id", type=click.IntRange(1, 25), default=25, show_default=True,
              metavar="N", help="The leader's own ID (1..25); the others get the free ones, "
                                "lowest first.")
@_node_options
def start(bind, node_id, heartbeat, peer_timeout, sync_interval, election_step,
          max_connections, max_correction, outlier_bound, clock_offset, as_json, metrics):
    config = _config(heartbeat, peer_timeout, sync_interval, election_step, max_connections,
                     max_correction, outlier_bound)
    _serve(bind, None, node_id, config, clock_offset, as_json, metrics)


@bully.command(help=JOIN_HELP, epilog=SERVICE)
@click.argument("leader", type=AddressType(PORT), metavar="LEADER[:PORT]")
@click.option("--bind", type=AddressType(PORT), default=f"0.0.0.0:{PORT}", show_default=True,
              metavar="HOST[:PORT]",
              help="Where to listen (peers connect here). Several nodes on one machine need "
                   "one each: --bind 127.0.0.1:3334, ...")
@_node_options
def join(leader, bind, heartbeat, peer_timeout, sync_interval, election_step, max_connections,
         max_correction, outlier_bound, clock_offset, as_json, metrics):
    config = _config(heartbeat, peer_timeout, sync_interval, election_step, max_connections,
                     max_correction, outlier_bound)
    _serve(bind, leader, None, config, clock_offset, as_json, metrics)


# ---- running ---------------------------------------------------------------------------------

def _serve(bind, leader, node_id, config, clock_offset, as_json, metrics=None):
    from pelotari.cli.service import ensure_standard_fds

    ensure_standard_fds()
    # (Ctrl-C before the signal handlers are installed: KeyboardInterrupt, "interrupted", 130)
    failure = asyncio.run(_run(bind, leader, node_id, config, clock_offset, as_json, metrics))
    if failure:
        raise click.ClickException(failure)


def _peer(p):
    return {"id": p.id, "host": p.host, "port": p.port}


def _name(p):
    return f"{p.id}@{p.host}:{p.port}"


def _names(peers):
    return ", ".join(_name(p) for p in peers) or "none"


def _iso(ms):
    return datetime.datetime.fromtimestamp(ms / 1000).astimezone().isoformat(
        timespec="milliseconds")


def _describe(ev, node):
    """(event name, human line, JSON fields) for one core event."""
    from pelotari.bully import core as c

    if isinstance(ev, c.Joined):
        return ("joined", (f"joined as ID {ev.id} (leader {_name(ev.leader)}); peers: "
                           f"{_names(ev.peers)}"),
                {"id": ev.id, "leader": _peer(ev.leader), "peers": [_peer(p) for p in ev.peers]})
    if isinstance(ev, c.PeerJoined):
        return ("peer_joined", f"peer {_name(ev.peer)} joined", {"peer": _peer(ev.peer)})
    if isinstance(ev, c.PeerLeft):
        return ("peer_left", f"peer {_name(ev.peer)} left: {ev.reason}",
                {"peer": _peer(ev.peer), "reason": ev.reason})
    if isinstance(ev, c.PeersChanged):
        return ("peers", f"neighbours: {_names(ev.peers)}", _peers_fields(node))
    if isinstance(ev, c.Found):
        return ("found", f"found ID {ev.peer.id} at {ev.peer.host}:{ev.peer.port}",
                {"peer": _peer(ev.peer), "search_id": ev.search_id})
    if isinstance(ev, c.NotFound):
        return ("not_found", f"ID {ev.destination_id} not found (no answer to the search)",
                {"id": ev.destination_id, "search_id": ev.search_id})
    if isinstance(ev, c.TextReceived):
        return ("text", f"text from {_name(ev.peer)}: {escape_text(ev.text)}",
                {"from": _peer(ev.peer), "text": ev.text})
    if isinstance(ev, c.TextSent):
        return ("text_sent", f"text sent to {_name(ev.peer)}", {"to": _peer(ev.peer)})
    if isinstance(ev, c.TextFailed):
        return ("text_failed", f"text to ID {ev.destination_id} not sent: {ev.reason}",
                {"id": ev.destination_id, "reason": ev.reason})
    if isinstance(ev, c.ElectionStarted):
        return ("election_started", f"election started: {ev.reason}", {"reason": ev.reason})
    if isinstance(ev, c.NewLeader):
        who = "this node" if ev.me else _name(ev.leader)
        return ("new_leader", f"new leader: {who} (ID {ev.leader.id})",
                {"leader": _peer(ev.leader), "me": ev.me})
    if isinstance(ev, c.LeaderKept):
        return ("leader_kept", f"election over: {_name(ev.leader)} still leads",
                {"leader": _peer(ev.leader)})
    if isinstance(ev, c.SyncDone):
        # A clock left alone is not shown among the offsets (VSP2P's random times are not one)
        offsets = " ".join(f"{i}:{v:+.6f}" for i, v in sorted(ev.offsets.items())
                           if i not in ev.left_out)
        return ("sync_done",
                (f"sync done: offsets (s, from the leader's clock) {offsets}; the clocks "
                 f"answering moved to {ev.average:+.6f} (outliers too; not those left alone); "
                 f"outliers: {', '.join(map(str, ev.outliers)) or 'none'}; "
                 f"unanswered: {', '.join(map(str, ev.unanswered)) or 'none'}; left alone: "
                 f"{', '.join(f'{i} ({why})' for i, why in ev.left_out.items()) or 'none'}"),
                {"offsets": {str(i): v for i, v in sorted(ev.offsets.items())},
                 "average": ev.average, "outliers": list(ev.outliers),
                 "unanswered": list(ev.unanswered),
                 "left_out": {str(i): why for i, why in ev.left_out.items()}})
    if isinstance(ev, c.ClockRefused):
        return ("clock_refused", (f"new time from the leader {_name(ev.leader)} not taken: it "
                                  f"would move the clock by {ev.delta:+.3f} s (past "
                                  f"--max-correction)"),
                {"delta": ev.delta, "leader": _peer(ev.leader)})
    if isinstance(ev, c.ClockAdjusted):
        how = "stepped" if ev.stepped else "slewing"
        return ("clock_adjusted", (f"clock adjusted by {ev.delta:+.6f} s ({how}); offset "
                                   f"from the system clock {ev.offset:+.6f} s"),
                {"delta": ev.delta, "stepped": ev.stepped, "offset": ev.offset})
    return (type(ev).__name__.lower(), repr(ev), {"repr": repr(ev)})


def _peers_fields(node):
    core = node.core
    return {"id": core.id or None, "leader": _peer(core.leader) if core.leader else None,
            "is_leader": core.is_leader, "peers": [_peer(p) for p in core.peers()],
            "known": [_peer(p) for p in core.known().values()],
            "members": [_peer(m.peer) for _, m in sorted(core.members.items())]}


async def _run(bind, leader, node_id, config, clock_offset, as_json, metrics=None):
    """Run the node until a signal or `quit` (None; exit status 130 after Ctrl-C), or until
    joining fails (its reason)."""
    from pelotari.cli.service import Output

    with Output(as_json, time_key="t", label=False) as out:
        return await _node(bind, leader, node_id, config, clock_offset, as_json, out, metrics)


async def _node(bind, leader, node_id, config, clock_offset, as_json, out, metrics=None):
    from pelotari.bully import core as c
    from pelotari.bully.node import BindError, Node
    from pelotari.cli.service import (Stopper, exit_if_interrupted, read_commands,
                                      run_until_stopped)

    emit = out.event

    def error(message):
        emit("error", f"error: {message}", err=True, message=message)

    stopper = Stopper()  # from here on, each signal stops the node cleanly
    failure = []
    node = None

    early = []  # events before the "listening" line (a founding leader's NewLeader)

    def on_event(ev):
        if early is not None:
            early.append(ev)
            return
        if isinstance(ev, c.JoinFailed):
            if as_json:  # the reason is also the one line on stderr
                emit("join_failed", "", reason=ev.reason)
            failure.append(f"cannot join: {ev.reason}")
            stopper.stop("join_failed")
            return
        name, human, fields = _describe(ev, node)
        emit(name, human, **fields)

    node = Node(bind[0], bind[1], leader=leader, node_id=node_id, config=config,
                clock_offset=clock_offset, on_event=on_event)
    try:
        await node.open()
    except BaseException as exc:
        stopper.close()
        if isinstance(exc, BindError):
            return str(exc)
        raise
    host, port = node.address
    if leader is None:
        human = f"listening on {host}:{port} as the leader, ID {node.core.id}"
    else:
        human = f"listening on {host}:{port}; joining the leader at {leader[0]}:{leader[1]}"
    emit("listening", human, force=True, host=host, port=port,
                 id=node.core.id or None,
                 leader=None if leader is None else {"host": leader[0], "port": leader[1]})
    from pelotari.bully.metrics import BullyMetrics
    from pelotari.metrics import OnLoop

    try:
        exporter = start_metrics(metrics, OnLoop(BullyMetrics(node), asyncio.get_running_loop()),
                                 lambda text, url: emit("metrics", text, url=url))
    except click.ClickException as exc:
        stopper.close()
        await node.close()
        return exc.message
    out.hint("type `help` for the commands")
    held, early = early, None
    for ev in held:
        on_event(ev)

    def command(text):
        words = text.split(None, 2)
        name = words[0].lower()
        try:
            if name == "peers":
                f = _peers_fields(node)
                me = f"ID {f['id']}" if f["id"] else "not joined yet"
                lead = "this node" if f["is_leader"] else (
                    _name(node.core.leader) if node.core.leader else "none")
                # (a leader's members, not its neighbours: Java members never ask for nodes,
                # so a leader's neighbour list can be empty while it leads many)
                near = (f"members ({len(node.core.members)}): "
                        f"{_names(m.peer for _, m in sorted(node.core.members.items()))}"
                        if f["is_leader"] else f"neighbours: {_names(node.core.peers())}")
                if not f["is_leader"]:
                    del f["members"]
                emit("peers", f"{me}; leader: {lead}; {near}; known "
                             f"({len(f['known'])}): {_names(node.core.known().values())}", **f)
            elif name == "search" and len(words) == 2:
                sid = node.search(_id(words[1]))
                if sid is None:
                    error("too many searches under way; try again")
            elif name == "text" and len(words) == 3:
                node.text(_id(words[1]), words[2].encode())
            elif name == "elect" and len(words) == 1:
                node.elect()
            elif name == "sync" and len(words) == 1:
                from pelotari.bully.core import NotLeader

                try:
                    node.start_sync()
                except NotLeader as exc:  # the core decides; we say who leads
                    lead = node.core.leader
                    raise ValueError(f"{exc}; the leader is " +
                                     (_name(lead) if lead else "not known yet")) from None
            elif name == "time" and len(words) == 1:
                ms, offset = node.time_ms(), node.clock_offset()
                emit("time", f"time {_iso(ms)} (offset {offset:+.6f} s from the system "
                             "clock)", time=_iso(ms), ms=ms, offset=offset,
                             target=node.core.clock.target)
            elif name == "stats" and len(words) == 1:
                stats = dict(sorted(node.all_stats().items()))
                sent = dict(sorted(node.core.sent.items()))
                text = " ".join(f"{k}={v}" for k, v in stats.items())
                emit("stats", f"stats: connections={node.connections} {text}; sent: " +
                             " ".join(f"{k}={v}" for k, v in sent.items()),
                             connections=node.connections, stats=stats, sent=sent,
                             output_dropped=out.dropped)
            elif name == "help":
                out.listing("help", COMMANDS.splitlines(), "commands")
            elif name == "quit" and len(words) == 1:
                stopper.stop("quit")
            elif name in ("search", "text", "elect", "sync", "time", "stats", "quit"):
                usage = {"search": "search ID", "text": "text ID MESSAGE"}.get(name, name)
                error(f"usage: {usage}")
            else:
                error(f"unknown command {words[0]!r}; {HELP_LINE}")
        except ValueError as exc:  # NotLeader, NotJoined, a bad ID, our own ID, too long
            error(str(exc))

    try:
        await run_until_stopped(stopper, [read_commands(
            lambda text: command(text.lstrip()) if text.strip() else None, error,
            out.end_of_input)])
    finally:
        if exporter is not None:
            exporter.stop()
        await node.close()
    if failure:
        return failure[0]
    dropped = out.dropped
    emit("stopped", f"stopped by {stopper.why or 'request'}" +
         (f"; {plural(dropped, 'line')} of output dropped" if dropped else ""), force=True,
         signal=stopper.why, stats=dict(sorted(node.all_stats().items())),
         output_dropped=dropped)
    exit_if_interrupted(stopper.why)
    return None


def _id(text):
    from pelotari.bully.wire import ID_FIELD_MAX

    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ID (a number, 1..{ID_FIELD_MAX})") from None
    if not 0 <= value <= ID_FIELD_MAX:  # 0: a Java leader's (the node says if it is not)
        raise ValueError(f"{value} is not an ID (1..{ID_FIELD_MAX})")
    return value


# ---- bench ------------------------------------------------------------------------------

def _sizes(ctx, param, value):
    try:
        sizes = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("a comma-separated list of node counts, e.g. 5,10,25") from None
    if not sizes or any(not 2 <= n <= 25 for n in sizes):
        raise click.BadParameter("node counts are within 2..25")
    return sizes


@bully.command("bench")
@click.option("-N", "--sizes", default="5,10,25", show_default=True, callback=_sizes,
              help="Network sizes for the election measurements.")
@click.option("--sync-nodes", type=click.IntRange(2, 25), default=25, show_default=True,
              help="Nodes in the clock-sync measurements.")
@click.option("--seeds", type=click.IntRange(1, 100), default=5, show_default=True,
              help="Simulator runs per measurement (seeds 0..N-1).")
@click.option("--sim-only", is_flag=True, help="Only the simulator (no processes started).")
@click.option("--port", type=click.IntRange(1, 65525), default=33330, show_default=True,
              help="TCP port of the processes' elections; their sync uses PORT + 10.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="results/bully.jsonl",
              show_default=True, help="JSON-lines file the records are appended to "
                                      "(`pelotari trend` reads it).")
def bench(sizes, sync_nodes, seeds, sim_only, port, output):
    """Measure elections and clock sync: simulator and real processes.

    Elections: the leader of N nodes is killed (and, in the simulator, also silenced); the
    time until every survivor names the highest ID left, and the election messages sent,
    against the textbook's n(n-1)/2. Clock sync: nodes start up to ±10 s apart (processes on
    127.0.0.x share one kernel clock, so their true offsets are known); one round; the spread
    of the logical clocks. In the simulator, with uneven, asymmetric, jittery links and one
    clock an hour off, the Berkeley round is compared with the Java clients' RTT-blind average.
    Processes listen on 127.0.0.1..127.0.0.25, ports --port and --port + 10 (33330 and 33340).
    Ctrl-C, SIGTERM or an error stops every process it started.
    """
    import pathlib

    from pelotari.harness.procs import STOP_SIGNALS, Children
    from pelotari.harness.results import write
    from pelotari.bully import bench as measure

    started = time.monotonic()
    try:
        with Children(interrupt=STOP_SIGNALS):
            records = measure.run(sizes, sync_nodes, real=not sim_only, seeds=seeds, port=port,
                                  progress=lambda s: click.echo(
                                      f"[{time.monotonic() - started:5.1f}s] {s}", err=True))
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    write(pathlib.Path(output), records)
    click.echo(_bench_table(records))
    click.echo(f"{plural(len(records), 'record')} appended to {output}", err=True)


def _bench_table(records) -> str:
    """Medians per measurement, as a Markdown table."""
    from statistics import median

    lines = ["| measurement | nodes | median | messages (textbook n(n-1)/2) |",
             "|---|---:|---|---|"]
    groups = {}
    for r in records:
        if r["kind"] == "bully-election":
            key = (f"election, {r['where']}, {r['how']}", r["nodes"])
        elif r["kind"] == "bully-sim-sync":
            key = (f"sync, simulator, {r['method']}", r["nodes"])
        else:
            key = ("sync, processes", r["nodes"])
        groups.setdefault(key, []).append(r)
    for (what, n), rs in groups.items():
        if rs[0]["kind"] == "bully-election":
            after = median(r["elected_after_detect_s"] for r in rs) * 1000
            total = median(r["elected_s"] for r in rs) * 1000
            msgs = median(r.get("messages", r.get("messages_total_after_kill", 0)) for r in rs)
            cell = f"{after:.1f} ms after detection ({total:.1f} ms after the leader went)"
            lines.append(f"| {what} | {n} | {cell} | {msgs:g} ({rs[0]['textbook_messages']}) |")
        elif rs[0]["kind"] == "bully-sim-sync":
            spread = median(r["spread_ms"] for r in rs)
            err = median(r["max_abs_error_ms"] for r in rs)
            lines.append(f"| {what} | {n} | spread {spread:.3f} ms, furthest from true time "
                         f"{err:.3f} ms | |")
        else:
            spread = median(r["spread_ms"] for r in rs)
            lines.append(f"| {what} | {n} | spread {spread:.3f} ms (start: "
                         f"{median(r['start_spread_s'] for r in rs):.1f} s) | |")
    return "\n".join(lines)
