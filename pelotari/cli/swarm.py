"""`pelotari swarm keygen|node|simulate`: swarm peer discovery (docs/protocols/swarm.md).

The CLI only wires: keys from a file or the environment, the asyncio adapter
(pelotari.swarm.node), events printed, commands read from stdin; every rule is the core's.
"""
import asyncio
import os
import socket
import stat
import time

import click

from pelotari.cli import main
from pelotari.cli.common import (FiniteRange, PelotariGroup, escape_text, metrics_option,
                                 plural, split_address, start_metrics)

PORT = 21452  # pelotari.swarm.wire.DEFAULT_PORT (not imported here: --help stays fast)
ENV_KEYS = "PELOTARI_SWARM_KEYS"  # pelotari.swarm.wire.ENV_KEYS
PING_TIMEOUT = 2.0  # s a `ping` command waits for its Pong
MAX_PENDING = 256  # commands read and not yet run; past it a line is dropped with an error
MAX_INTERVAL = 86400.0  # s: --ping-interval and --get-interval at most (the core's times are
# u32 ms: past ~20 days a timer overflowed at the first connection, inf at start)

COMMANDS = """\
connections              every connection (direct, vague, connecting, half_open) and the
                         known peers not contacted yet
ping HOST:PORT [SECONDS] ping an established connection; prints the round trip, or that no
                         Pong came within SECONDS (2 by default, 0.05 to 3600)
send HOST:PORT TYPE TEXT a user message (TYPE 6..65535; TEXT, the rest of the line, as UTF-8,
                         at most 988 bytes) to an established connection
connect HOST:PORT        dial a node and keep it as a direct connection
stats                    counters: datagrams sent and received by type, drops by reason
help                     this list
quit                     stop (as Ctrl-C, SIGTERM and SIGHUP do)"""

HELP_LINE = ("commands: connections, ping HOST:PORT [SECONDS], send HOST:PORT TYPE TEXT, "
             "connect HOST:PORT, stats, help, quit")

GROUP_HELP = """Swarm: UDP peer discovery for large networks (tens of thousands of nodes).

Every node holds direct connections (the peers it chose, pinged every few seconds) and vague
ones (inbound, checked a few at a time), asks its connections for theirs, and dials what it
learns until it holds 16 direct connections. Every datagram carries an HMAC-SHA256 under a
network key that every node shares: datagrams from anybody without the key are counted and
dropped, never answered.

\b
Start (copy swarm.key to every node, keeping it mode 0600):
  pelotari swarm keygen -o swarm.key
  pelotari swarm node --listen 10.0.0.1 --key-file swarm.key
  pelotari swarm node --listen 10.0.0.2 --key-file swarm.key --bootstrap 10.0.0.1
"""


@main.group(cls=PelotariGroup, help=GROUP_HELP)
def swarm():
    pass


# ---- keygen ----------------------------------------------------------------------------------

@swarm.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write the key file here (mode 0600). [default: print it on stdout]")
@click.option("--force", is_flag=True,
              help="Replace FILE if it exists (atomically). Nodes holding the old key no longer "
                   "connect to nodes given the new one.")
def keygen(output, force):
    """Make a new network key: 32 random bytes, as a key file.

    A key file is one key per line, 64 hex digits; the first line signs, every line verifies
    (add a second key to rotate without downtime: docs/protocols/swarm.md, "Keys"). Every node
    of a network needs a copy; keep it private (mode 0600: `swarm node` refuses a key file
    that group or others can read). An existing FILE is never overwritten without --force.
    """
    from pelotari.swarm.wire import Keyring

    text = Keyring([Keyring.generate()]).to_text()
    if output is None:
        click.echo(text, nl=False)
        return
    if force:
        directory = os.path.dirname(os.path.abspath(output))
        tmp = os.path.join(directory, f".{os.path.basename(output)}.{os.getpid()}.tmp")
        _write_private(tmp, text)
        try:
            os.replace(tmp, output)
        except OSError:
            os.unlink(tmp)
            raise
    else:
        try:
            _write_private(output, text)
        except FileExistsError:
            raise click.ClickException(f"{output} exists: not overwritten (pass --force to "
                                       "replace it)") from None
    click.echo(f"wrote a new network key to {output} (mode 0600); give every node of the "
               "network a copy, kept private", err=True)


def _write_private(path, text):
    """Create path (never an existing file or link), mode 0600 whatever the umask, and write."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


# ---- node ------------------------------------------------------------------------------------

NODE_HELP = """Run a swarm node until Ctrl-C, SIGTERM or SIGHUP.

It listens on --listen, dials every --bootstrap node, and from then on finds the rest of the
network by itself. It prints what happens: connected, promoted (a vague connection made
direct), demoted (a direct one that stopped answering), reset (a peer that holds no connection
for us), learned (the new peers in a Connections answer; with --json also the answers with
nothing new), forgotten, and user messages.

The network key comes from --key-file, else from the environment variable PELOTARI_SWARM_KEYS
(hex keys separated by commas or spaces, the first signs).

\b
Once running, it reads these commands on stdin, one per line:
""" + "\n".join("  " + line for line in COMMANDS.splitlines())

NODE_EPILOG = """stdin may be a terminal, a pipe, /dev/null or closed: the end of input does not
stop the node, so it can run as a service; then it prints a "stopped" event with its counters
and exits with status 0 (SIGTERM, SIGHUP, quit) or 130 (Ctrl-C). With --json every event is
one JSON object per line ("event", "time" and the event's fields). Output never holds the
node up: lines a slow reader cannot take are dropped and counted. Advanced options
(--ping-interval, --get-interval, --target-direct) change the core's timers, for tests and
small demos: every node of a network should use the same."""


@swarm.command(help=NODE_HELP, epilog=NODE_EPILOG)
@click.option("--listen", required=True, metavar="HOST:PORT",
              help=f"The address this node is reached at (port {PORT} if left out; port 0: a "
                   "free one, printed at start). One address, not 0.0.0.0: the node knows "
                   "itself by it.")
@click.option("--key-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="The network key file (`pelotari swarm keygen -o FILE`); refused if group "
                   f"or others can read it. [default: ${ENV_KEYS}]")
@click.option("--insecure-key-file", is_flag=True,
              help="Use a key file even if group or others can read it.")
@click.option("--bootstrap", multiple=True, metavar="HOST:PORT",
              help="A node to dial at start and keep as a direct connection (repeat for "
                   "several); dialled again until it answers.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event.")
@click.option("--ping-interval", type=FiniteRange(0.05, MAX_INTERVAL), default=None,
              metavar="SECONDS",
              help="Advanced: seconds between Pings to each direct connection (3 unanswered "
                   "demote it). [default: 5]")
@click.option("--get-interval", type=FiniteRange(0.05, MAX_INTERVAL), default=None,
              metavar="SECONDS",
              help="Advanced: seconds between GetConnections to each direct connection. "
                   "[default: 60]")
@click.option("--target-direct", type=click.IntRange(0, 1024), default=None, metavar="N",
              help="Advanced: direct connections wanted. [default: 16]")
@metrics_option
def node(listen, key_file, insecure_key_file, bootstrap, as_json, ping_interval, get_interval,
         target_direct, metrics):
    from pelotari.cli.service import ensure_standard_fds

    ensure_standard_fds()
    host, port = _option_address("--listen", listen, allow_zero=True)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if host in ("0.0.0.0", "::"):
        raise click.ClickException(f"--listen {listen}: give the one address this node is "
                                   "reached at, not every address (the node must know its own "
                                   "address to leave itself out of what it learns)")
    _check_listen(listen, host)
    boots = [_option_address("--bootstrap", b, family=family) for b in bootstrap]
    for text, address in zip(bootstrap, boots):
        from pelotari.swarm.core import unicast

        if address == (host, port):
            raise click.ClickException(f"--bootstrap {text}: that is this node's own address")
        if not unicast(address[0]):
            raise click.ClickException(f"--bootstrap {text}: {address[0]} is not a unicast "
                                       "address (multicast, broadcast, reserved or unspecified)")
    keyring, key_source = _keyring(key_file, insecure_key_file)
    config = _config(ping_interval, get_interval, target_direct)
    # (Ctrl-C before the signal handlers are installed: KeyboardInterrupt, "interrupted", 130)
    failure = asyncio.run(_run((host, port), boots, keyring, key_source, config, as_json,
                               metrics))
    if failure:
        raise click.ClickException(failure)


def _check_listen(listen, host):
    """A one-line error for a --listen address no node can be reached at."""
    from pelotari.swarm.core import listen_problem

    why = listen_problem(host)
    if why is not None:
        raise click.ClickException(f"--listen {listen}: {why}")


def _literal(host, family):
    """host as the address text the socket reports, if it is an address of the family; None
    for a name; ValueError for an address of the other family."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if (ip.version == 6) != (family == socket.AF_INET6):
        raise ValueError(f"{host} is an IPv{ip.version} address; this node listens on IPv"
                         f"{6 if family == socket.AF_INET6 else 4}")
    return str(ip)


def _option_address(option, text, allow_zero=False, family=None):
    try:
        host, port = split_address(text, PORT)
        if family is None:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
        literal = _literal(host, family)
        if literal is None:
            try:
                host = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)[0][4][0]
            except OSError:
                raise ValueError(f"cannot resolve host {host!r}") from None
        else:
            host = literal
    except ValueError as exc:
        raise click.ClickException(f"{option} {text}: {exc}") from None
    if port == 0 and not allow_zero:
        raise click.ClickException(f"{option} {text}: port 0 is not a node's port")
    return host, port


def _keyring(key_file, insecure):
    """(Keyring, where it came from), or a one-line ClickException."""
    from pelotari.swarm.wire import Keyring, SwarmError

    if key_file is None:
        if not os.environ.get(ENV_KEYS, "").strip():
            raise click.ClickException(f"no network key: pass --key-file FILE (`pelotari swarm "
                                       f"keygen -o FILE` makes one) or set {ENV_KEYS}")
        try:
            return Keyring.from_env(), ENV_KEYS
        except SwarmError as exc:
            raise click.ClickException(f"bad key in {ENV_KEYS}: {exc}") from None
    try:
        with open(key_file, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if mode & 0o077 and not insecure:
                raise click.ClickException(
                    f"key file {key_file}: permissions {stat.S_IMODE(mode):04o} are too open "
                    f"(group or others may read it): chmod 600 {key_file}, or pass "
                    "--insecure-key-file")
            data = f.read(1 << 16)
    except OSError as exc:
        raise click.ClickException(f"cannot read key file {key_file}: "
                                   f"{exc.strerror or exc}") from None
    try:
        return Keyring.from_text(data.decode("utf-8")), key_file
    except UnicodeDecodeError:
        raise click.ClickException(f"bad key file {key_file}: not text") from None
    except SwarmError as exc:
        raise click.ClickException(f"bad key file {key_file}: {exc}") from None


def _ping_timeout(word):
    """A `ping` command's SECONDS: a number from 0.05 to 3600 (ValueError otherwise)."""
    try:
        seconds = float(word)
    except ValueError:
        seconds = float("nan")
    if not 0.05 <= seconds <= 3600:  # (NaN too)
        raise ValueError(f"SECONDS {word!r} is not a number from 0.05 to 3600")
    return seconds


def _config(ping_interval, get_interval, target_direct):
    from pelotari.swarm.core import Config

    kw = {}
    if ping_interval is not None:
        kw["ping_interval"] = ping_interval
    if get_interval is not None:
        kw["get_interval"] = get_interval
    if target_direct is not None:
        kw["target_direct"] = target_direct
        kw["max_direct"] = max(Config.max_direct, target_direct, 1)
    try:
        return Config(**kw)
    except ValueError as exc:
        raise click.UsageError(str(exc).replace("_", "-")) from None


def _peer(address):
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _describe(ev, config):
    """(event name, human line, JSON fields) for one core event."""
    from pelotari.swarm import core as c

    peer = _peer(ev.address)
    if isinstance(ev, c.Connected):
        kind = "direct" if ev.direct else "vague"
        how = "they dialled us" if ev.inbound else "we dialled"
        return ("connected", f"connected to {peer} ({kind}; {how})",
                {"peer": peer, "direct": ev.direct, "inbound": ev.inbound})
    if isinstance(ev, c.Promoted):
        rtt = "under 1 ms" if ev.rtt < 0.001 else f"{ev.rtt * 1000:.0f} ms"  # the table keeps ms
        return ("promoted", f"{peer} promoted to direct (round trip {rtt})",
                {"peer": peer, "rtt": ev.rtt})
    if isinstance(ev, c.Demoted):
        return ("demoted", f"{peer} demoted to vague: {config.max_missed} Pings in a row "
                "unanswered", {"peer": peer})
    if isinstance(ev, c.Reset):
        then = "dialling it again" if ev.redial else "forgotten"
        return ("reset", f"{peer} holds no connection for us: {then}",
                {"peer": peer, "redial": ev.redial})
    if isinstance(ev, c.ConnectionsLearned):
        new = ", ".join(_peer(a) for a in ev.learned) or "none"
        return ("learned", f"{peer} shared {plural(ev.entries, 'connection')}; new to us: {new}",
                {"peer": peer, "entries": ev.entries, "learned": [_peer(a) for a in ev.learned]})
    if isinstance(ev, c.UserMessage):
        fields = {"peer": peer, "type": ev.type, "flags": ev.flags, "size": len(ev.data)}
        try:
            text = ev.data.decode("utf-8")
            shown = escape_text(text)
            fields["data"] = text  # json.dumps escapes every control and non-ASCII character
        except UnicodeDecodeError:
            shown = repr(ev.data)  # escapes every byte outside printable ASCII
            fields["hex"] = ev.data.hex()
        return ("message", f"message type {ev.type} from {peer}: {shown}", fields)
    if isinstance(ev, c.Unanswered):
        if ev.redial is None:
            then = "given up"
        else:
            then = f"dialling again in {ev.redial:.0f} s"
        return ("unanswered", f"{peer} did not answer {ev.connects} Connects (is it running, "
                f"with the same key?): {then}", {"peer": peer, "connects": ev.connects,
                                                 "redial": ev.redial})
    if isinstance(ev, c.Forgotten):
        return ("forgotten", f"{peer} forgotten ({ev.reason})", {"peer": peer,
                                                                "reason": ev.reason})
    return (type(ev).__name__.lower(), repr(ev), {"repr": repr(ev)})


async def _resolve(text, family=socket.AF_INET):
    """HOST:PORT, HOST (port 21452) or [IPv6]:PORT from a command line, an address of the
    node's family, resolved without blocking the loop."""
    host, port = split_address(text, PORT)
    if port == 0:
        raise ValueError("port 0 is not a node's port")
    literal = _literal(host, family)
    if literal is not None:
        return literal, port
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, family=family,
                                                             type=socket.SOCK_DGRAM)
    except OSError:
        raise ValueError(f"cannot resolve host {host!r}") from None
    return infos[0][4][0], port


async def _run(listen, boots, keyring, key_source, config, as_json, metrics=None):
    """Run the node until a signal or `quit` (None; exit status 130 after Ctrl-C), or its
    one-line failure."""
    from pelotari.cli.service import Output, quiet_logging

    quiet_logging("pelotari.swarm")
    with Output(as_json) as out:
        return await _serve(listen, boots, keyring, key_source, config, as_json, out, metrics)


async def _serve(listen, boots, keyring, key_source, config, as_json, out, metrics=None):
    from pelotari.cli.service import (Stopper, exit_if_interrupted, read_commands,
                                      run_until_stopped)
    from pelotari.swarm import wire
    from pelotari.swarm.node import Node, NodeWarning

    family = socket.AF_INET6 if ":" in listen[0] else socket.AF_INET

    def emit(event, human, err=False, force=False, **fields):
        out.event(event, escape_text(human), err=err, force=force, **fields)

    def error(message):
        emit("error", f"error: {message}", err=True, message=message)

    stopper = Stopper()  # from here on, each signal stops the node cleanly
    try:
        node = await Node.start(listen[0], listen[1], keyring, config)
    except BaseException as exc:
        stopper.close()
        if isinstance(exc, OSError):
            return f"cannot listen on {_peer(listen)}: {exc.strerror or exc}"
        raise
    me = _peer(node.address)
    fingerprint = keyring.fingerprint()
    emit("listening", f"listening on {me}; key {fingerprint} from {key_source} "
         f"({len(keyring.keys)} installed)", force=True, host=node.address[0],
         port=node.address[1], key=fingerprint, keys=len(keyring.keys), key_source=key_source)
    from pelotari.metrics import OnLoop
    from pelotari.swarm.metrics import SwarmMetrics

    try:
        exporter = start_metrics(metrics, OnLoop(SwarmMetrics(node), asyncio.get_running_loop()),
                                 lambda text, url: emit("metrics", text, url=url))
    except click.ClickException as exc:
        stopper.close()
        await node.close()
        return exc.message
    out.hint("type `help` for the commands")
    for b in boots:
        try:
            node.connect(b)
            emit("connecting", f"dialling {_peer(b)} (bootstrap)", peer=_peer(b), why="bootstrap")
        except (ValueError, RuntimeError) as exc:
            error(f"--bootstrap {_peer(b)}: {exc}")

    async def show_events():
        async for ev in node.events():
            if isinstance(ev, NodeWarning):
                emit("warning", f"warning: {ev.message}", err=True, kind=ev.kind,
                     message=ev.message)
                continue
            name, human, fields = _describe(ev, config)
            if name == "learned" and not fields["learned"] and not as_json:
                continue  # a routine answer with nothing new: only in --json
            emit(name, human, **fields)

    def show_pong(peer, fut, timeout):
        rtt = fut.result() if not fut.cancelled() else None
        if rtt is None:
            emit("ping_timeout", f"no pong from {peer} within {timeout:g} s", peer=peer)
        else:
            emit("pong", f"pong from {peer}: round trip {rtt * 1000:.2f} ms", peer=peer, rtt=rtt)

    def show_connections():
        rows = sorted(node.connections(), key=lambda i: (i.status, i.address))
        known = node.known()
        counts = {s: sum(r.status == s for r in rows) for s in
                  ("direct", "vague", "connecting", "half_open")}
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"
        if as_json:
            emit("connections", "", connections=[
                {"peer": _peer(r.address), "status": r.status, "rtt": r.rtt,
                 "missed": r.missed} for r in rows], known=[_peer(a) for a in known])
            return
        out.line(f"{time.strftime('%H:%M:%S')} connections {len(rows)} ({summary}); "
                 f"known, not contacted yet: {len(known)}")
        for r in rows:
            if r.rtt is None:
                rtt = "-"
            else:  # the table keeps whole ms
                rtt = "< 1 ms" if r.rtt < 0.001 else f"{r.rtt * 1000:.0f} ms"
            out.line(f"  {_peer(r.address):<22} {r.status:<10} rtt {rtt:<9} missed {r.missed}")
        for a in known[:20]:
            out.line(f"  {_peer(a):<22} known")
        if len(known) > 20:
            out.line(f"  ... and {len(known) - 20} more known")

    def show_stats():
        stats = dict(sorted(node.stats.items()))
        emit("stats", "stats: " + " ".join(f"{k}={v}" for k, v in stats.items()), stats=stats,
             output_dropped=out.dropped)

    async def command(text):
        words = text.split(None, 3)
        name = words[0].lower()
        if name == "connections" and len(words) == 1:
            show_connections()
        elif name == "ping" and len(words) in (2, 3):
            timeout = _ping_timeout(words[2]) if len(words) == 3 else PING_TIMEOUT
            peer = await _resolve(words[1], family)
            try:
                fut = node.ping(peer, timeout)
            except KeyError:
                raise ValueError(f"no established connection to {_peer(peer)}") from None
            fut.add_done_callback(lambda f, p=_peer(peer): show_pong(p, f, timeout))
        elif name == "send" and len(words) == 4:
            peer = await _resolve(words[1], family)
            try:
                type_ = int(words[2])
            except ValueError:
                raise ValueError(f"TYPE {words[2]!r} is not a number (6..65535)") from None
            data = words[3].encode("utf-8")
            if len(data) > wire.MAX_BODY:  # (the core would say the datagram's size)
                raise ValueError(f"TEXT is {len(data)} bytes as UTF-8; at most {wire.MAX_BODY}")
            try:
                node.send(peer, type_, data)
            except KeyError:
                raise ValueError(f"no established connection to {_peer(peer)}") from None
            emit("sent", f"sent type {type_} ({len(data)} bytes) to {_peer(peer)}",
                 peer=_peer(peer), type=type_, size=len(data))
        elif name == "connect" and len(words) == 2:
            peer = await _resolve(words[1], family)
            before = node.core.status(peer)
            node.connect(peer)
            if before == "direct":
                emit("connecting", f"already connected to {_peer(peer)} (direct)",
                     peer=_peer(peer), why="command", status=before)
            elif before == "vague":
                emit("connecting", f"{_peer(peer)} was a vague connection: direct now "
                     f"(if there is room)", peer=_peer(peer), why="command", status=before)
            else:
                emit("connecting", f"dialling {_peer(peer)}", peer=_peer(peer), why="command",
                     status=before)
        elif name == "stats" and len(words) == 1:
            show_stats()
        elif name == "help":
            out.listing("help", COMMANDS.splitlines(), "commands")
        elif name == "quit" and len(words) == 1:
            stopper.stop("quit")
        elif name in ("connections", "ping", "send", "connect", "stats", "quit"):
            usage = {"ping": "ping HOST:PORT [SECONDS]", "send": "send HOST:PORT TYPE TEXT",
                     "connect": "connect HOST:PORT"}.get(name, name)
            error(f"usage: {usage}")
        else:
            error(f"unknown command {words[0]!r}; {HELP_LINE}")

    lines: asyncio.Queue = asyncio.Queue(MAX_PENDING)  # bounded: stdin may be a firehose

    def take(text):
        text = text.strip()
        if not text:
            return
        try:
            lines.put_nowait(text)
        except asyncio.QueueFull:
            error(f"busy: {MAX_PENDING} commands are waiting; dropped {text[:40]!r}")

    async def run_commands():  # one at a time, in order (a name may need resolving first)
        while True:
            text = await lines.get()
            try:
                await command(text)
            except (ValueError, RuntimeError) as exc:
                error(str(exc))
            await asyncio.sleep(0)  # a queue of commands never holds up datagrams and timers

    try:
        await run_until_stopped(stopper, [show_events(), run_commands(),
                                          read_commands(take, error, out.end_of_input)])
    finally:
        if exporter is not None:
            exporter.stop()
        await node.close()
    dropped = out.dropped
    stats = dict(sorted(node.stats.items()))
    counters = " ".join(f"{k}={v}" for k, v in stats.items()) or "none"
    emit("stopped", f"stopped by {stopper.why or 'request'}; counters: {counters}" +
         (f"; {plural(dropped, 'line')} of output dropped" if dropped else ""), force=True,
         signal=stopper.why, stats=stats, output_dropped=dropped)
    exit_if_interrupted(stopper.why)
    return None


# ---- simulate --------------------------------------------------------------------------------

@swarm.command()
@click.option("-n", "--nodes", type=click.IntRange(17, 1_000_000), default=1000,
              show_default=True, help="Nodes in the swarm (at least 17: every node is to hold "
                                      "16 direct connections).")
@click.option("-b", "--bootstraps", type=click.IntRange(1), default=3, show_default=True,
              help="Bootstrap nodes (the first ones); every other node dials all of them.")
@click.option("--seeds", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Runs (seeds 0..N-1).")
@click.option("--loss", type=FiniteRange(0, 0.5), default=0.0, show_default=True,
              help="Share of datagrams lost on every link.")
@click.option("--crash", type=FiniteRange(0, 0.9), default=0.2, show_default=True,
              help="Share of the nodes (never a bootstrap) crashed once the swarm has joined "
                   "(0: no crash phase).")
@click.option("--limit", type=FiniteRange(1), default=600.0, show_default=True,
              metavar="SECONDS", help="Simulated seconds each phase may take.")
@click.option("--capacity", type=click.IntRange(17), default=4096, show_default=True,
              help="Connections each node's table holds (preallocated: about 60 bytes each "
                   "per node); bootstrap nodes get room for the whole swarm, as every node "
                   "dials them.")
@click.option("--max-known", type=click.IntRange(0), default=4096, show_default=True,
              help="Known peers each node keeps (addresses heard of, not dialled yet).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="results/swarm.jsonl",
              show_default=True, help="JSON-lines file the records are appended to.")
def simulate(nodes, bootstraps, seeds, loss, crash, limit, capacity, max_known, output):
    """Measure joining and recovery of a simulated swarm (pelotari.sim, no sockets).

    Join: node k starts at k x 2 ms and dials every bootstrap node; how long (simulated) until
    every node holds its 16 direct connections, and GetConnections, Connections (count and
    bytes) and bytes sent per node. Crash: then --crash of the nodes stop at once; how long
    until every survivor again holds 16 direct connections, all to live nodes. Links: 10 ms ±
    10 ms. Deterministic for a seed. Bootstrap nodes get room and a Pong budget for the whole
    swarm (every node holds them as direct). The core simulates 11,000-24,000 datagrams per CPU
    second (Cython table and C MACs): 10,000 nodes take about 8 CPU minutes and 3.5 GB.
    """
    import pathlib

    from pelotari.harness.results import environment, write
    from pelotari.swarm import simulate as sim
    from pelotari.swarm.core import Config

    if bootstraps >= nodes:
        raise click.BadParameter(f"fewer than --nodes ({nodes})", param_hint="--bootstraps")
    started = time.monotonic()
    env = environment()
    records = [{**r, "env": env} for r in sim.run(
        nodes, seeds=seeds, loss=loss, bootstraps=bootstraps, crash=crash, limit=limit,
        config=Config(capacity=capacity, max_known=max_known), progress=lambda s: click.echo(f"[{time.monotonic() - started:6.1f}s] {s}", err=True))]
    write(pathlib.Path(output), records)
    click.echo("| phase | nodes | seed | converged | simulated s | GetConnections / node "
               "(bytes) | Connections / node (bytes) | bytes sent / node | direct min / median "
               "| CPU s | peak RSS MB |")
    click.echo("|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:|")
    for r in records:
        secs = "-" if r["seconds"] is None else f"{r['seconds']:.1f}"
        direct = (f"{r['direct_min']} / {r['direct_median']}" if "direct_min" in r else "-")
        sent = r.get("sent_bytes_per_node")
        click.echo(f"| {r['phase']} | {r['nodes']} | {r['seed']} | {r['converged']} | {secs} | "
                   f"{r['sent_GetConnections_per_node']:.1f} "
                   f"({r['sent_bytes_GetConnections_per_node']:,.0f}) | "
                   f"{r['sent_Connections_per_node']:.1f} "
                   f"({r['sent_bytes_Connections_per_node']:,.0f}) | "
                   f"{'-' if sent is None else f'{sent:,.0f}'} | {direct} | "
                   f"{r['cpu_seconds']:.1f} | {r['peak_rss_mb']:,.0f} |")
    click.echo(f"{plural(len(records), 'record')} appended to {output}", err=True)


# ---- bench -----------------------------------------------------------------------------------

MEASURES = ("memory", "pingpong", "sockets")


@swarm.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="results/swarm.jsonl",
              show_default=True, help="JSON-lines file the records are appended to.")
@click.option("--peers", type=click.IntRange(1, 1 << 20), default=50_000, show_default=True,
              help="Sockets measure: distinct peers (127.2.x.y addresses x 16 ports) brought "
                   "to the node.")
@click.option("--rate", type=FiniteRange(1, min_open=False), default=None,
              help="Sockets measure: Pings offered per second (each peer's at least two of the "
                   "node's 0.1 s slots apart).  [default: 150,000, or peers / 0.2 s if less]")
@click.option("--seconds", type=FiniteRange(0.1), default=5.0, show_default=True,
              help="Sockets measure: how long Pings are offered.")
@click.option("--only", "only", type=click.Choice(MEASURES), multiple=True,
              help="Run only this measure (repeatable). [default: all three]")
@click.option("--skip-sockets", is_flag=True, help="Leave out the sockets measure.")
@click.option("--stack", type=click.Choice(["both", "cython", "python"]), default="both",
              show_default=True, help="Which stack's figures: python is PELOTARI_PURE_PYTHON=1.")
def bench(output, peers, rate, seconds, only, skip_sockets, stack):
    """Measure what a connection costs, pure Python and Cython side by side.

    memory: bytes per connection, the RSS growth while a table of 100,000 fills with distinct
    (127.x.y.z, port) connections (goal: at most 64). pingpong: Ping -> Pong per second through
    the sans-IO core, 2,000 connections, no sockets. sockets: a real node (a child process on
    127.0.0.1) and --peers distinct peers from the load generator (fastpath.swarmload, in this
    process), each doing the real handshake; once the node holds them all as established
    connections, Pings are offered at --rate for --seconds: Pongs per second that pass the MAC
    and echo a Ping, loss, the node's CPU seconds and Pongs per node CPU second. The node's
    rate limits are lifted for it but the once-per-slot claim (its slot is 0.1 s). Every
    figure in a fresh interpreter; PELOTARI_PURE_PYTHON=1 gives the pure-Python stack. On a
    2-CPU machine the generator and the node get a core each. Ctrl-C, SIGTERM or an error
    stops every process it started.
    """
    import pathlib

    from fastpath.implementation import PURE_PYTHON
    from pelotari.harness.procs import STOP_SIGNALS, Children
    from pelotari.harness.results import environment, write
    from pelotari.swarm import bench as b

    measures = tuple(only) or MEASURES
    if skip_sockets:
        measures = tuple(m for m in measures if m != "sockets")
    if not measures:
        raise click.UsageError("--skip-sockets leaves no measure to run")
    if "sockets" in measures:
        if rate is None:
            rate = min(150_000.0, peers / (2 * b.SLOT))
        if peers / rate < 2 * b.SLOT:
            raise click.BadParameter(
                f"{rate:,.0f} Pings/s over {plural(peers, 'peer')} pings each every "
                f"{peers / rate:.3f} s; keep it at least {2 * b.SLOT} s (two of the node's "
                f"slots): --rate at most {peers / (2 * b.SLOT):,.0f}", param_hint="--rate")
        if PURE_PYTHON:
            raise click.ClickException(
                "the sockets measure needs the compiled build in this process (its load "
                "generator, for either stack), which PELOTARI_PURE_PYTHON turns off: unset "
                "PELOTARI_PURE_PYTHON (--stack python still measures the pure-Python node) or "
                "pass --skip-sockets")
        try:
            import fastpath.swarmload  # noqa: F401
        except ImportError:
            raise click.ClickException("the sockets measure needs the Cython build (python "
                                       "setup.py build_ext --inplace); or --skip-sockets")
    stacks = {"both": (True, False), "python": (True,), "cython": (False,)}[stack]
    started = time.monotonic()
    try:
        with Children(interrupt=STOP_SIGNALS):
            env = environment()
            records = [{**r, "env": env} for r in b.run(
                lambda s: click.echo(f"[{time.monotonic() - started:6.1f}s] {s}", err=True),
                measures=measures, peers=peers, seconds=seconds, rate=rate, stacks=stacks)]
    except (RuntimeError, OSError) as exc:
        raise click.ClickException(str(exc))
    write(pathlib.Path(output), records)

    def cell(stack, measure, fmt):
        r = next((r for r in records if r["stack"] == stack and r["measure"] == measure), None)
        return "-" if r is None else fmt(r)

    click.echo("| stack | bytes per connection at 100,000 | Ping -> Pong per second (core) | "
               "Pongs/s over sockets | Pings/s offered | loss | node CPU s | "
               "Pongs per node CPU second |")
    click.echo("|---|---:|---:|---:|---:|---:|---:|---:|")
    for stack in dict.fromkeys(r["stack"] for r in records):
        click.echo(" | ".join([
            f"| {stack}",
            cell(stack, "memory", lambda r: f"{r['bytes_per_connection']:.1f}"),
            cell(stack, "pingpong", lambda r: f"{r['pongs_per_second']:,.0f}"),
            cell(stack, "sockets", lambda r: f"{r['pongs_per_second']:,.0f}"),
            cell(stack, "sockets", lambda r: f"{r['offered_per_second']:,.0f}"),
            cell(stack, "sockets", lambda r: f"{r['loss']:.1%}"),
            cell(stack, "sockets", lambda r: f"{r['node_cpu_seconds']:.2f}"),
            cell(stack, "sockets", lambda r: f"{r['pongs_per_cpu_second'] or 0:,.0f}"),
        ]) + " |")
    click.echo(f"{plural(len(records), 'record')} appended to {output}", err=True)
