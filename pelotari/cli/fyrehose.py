"""`pelotari backbone`, `pelotari pub` and `pelotari sub`."""
import base64
import itertools
import json
import sys
import time

import click

from pelotari.cli import main
from pelotari.cli.common import AddressType, StatusLine, human_rate

DEFAULT_PORT = 2323  # pelotari.fyrehose.DEFAULT_PORT, repeated so --help imports nothing heavy
BACKBONE_OPTION = click.option(
    "-b", "--backbone", type=AddressType(DEFAULT_PORT), default=f"127.0.0.1:{DEFAULT_PORT}",
    show_default=True, help="Backbone address (HOST:PORT or HOST).")


@main.command()
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to bind.")
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="UDP port to bind (0 picks a free one and prints it).")
@click.option("--window", type=click.FloatRange(0.1, 3600), default=5.0, show_default=True,
              help="Seconds a client stays subscribed after each KEEPALIVE.")
@click.option("--max-subscribers", type=click.IntRange(1, 1 << 20), default=4096, show_default=True,
              help="Size of the subscriber table; KEEPALIVEs past it are dropped.")
@click.option("--max-request-range", type=click.IntRange(1, 1 << 20), default=1024,
              show_default=True, help="Most sequences one REQUEST may name.")
@click.option("--allow-foreign-addresses", is_flag=True,
              help="Honour KEEPALIVE/REQUEST ADDR fields naming another host (off: such "
                   "packets are dropped, so nobody can aim the backbone at a third host).")
@click.option("--first-sequence", type=click.IntRange(0, (1 << 48) - 1), default=None,
              help="First SEQUENCE to assign [default: the clock in microseconds].")
@click.option("--stats-interval", type=click.FloatRange(0.1, 3600), default=None,
              help="Seconds between stats lines [default: 1 on a terminal, 10 otherwise].")
@click.option("--json-stats", is_flag=True, help="Print stats as JSON lines on stdout.")
@click.option("--no-gso", is_flag=True,
              help="Send every DELIVER as its own datagram, never batched with UDP GSO "
                   "(GSO is used when the kernel supports it; the datagrams are the same).")
@click.option("--no-packing", is_flag=True,
              help="Refuse the packing extension: drop packed PUSHes (length_mismatch) and send "
                   "one DELIVER per datagram even to clients that set PACKED.")
@click.option("--max-pack", type=click.IntRange(9, 65507), default=65507, show_default=True,
              help="Largest packed DELIVER datagram sent, whatever a client asks for (1472 keeps "
                   "packs within a 1,500-byte Ethernet MTU).")
def backbone(host, port, window, max_subscribers, max_request_range, allow_foreign_addresses,
             first_sequence, stats_interval, json_stats, no_gso, no_packing, max_pack):
    """Run a fyrehose backbone until Ctrl-C or SIGTERM.

    The backbone numbers every PUSH it receives with a continuous 48-bit SEQUENCE and DELIVERs
    it to every client that sent a KEEPALIVE in the last --window seconds; REQUESTs for lost
    messages are FORWARDed to a random journaling client. A live stats line shows rates,
    subscribers and dropped datagrams.
    """
    from pelotari.fyrehose import Backbone

    bb = Backbone(host=host, port=port, window=window, max_subscribers=max_subscribers,
                  max_request_range=max_request_range,
                  allow_foreign_addresses=allow_foreign_addresses, first_sequence=first_sequence,
                  gso=False if no_gso else None, packing=not no_packing, max_pack=max_pack)
    try:
        bb.start()
    except OSError as exc:
        raise click.ClickException(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
    bound = bb.address
    click.echo(f"fyrehose backbone listening on {bound[0]}:{bound[1]}/udp, "
               f"first sequence {bb.next_sequence}", err=True)
    status = StatusLine(interval=stats_interval or 1.0, plain_interval=stats_interval or 10.0)
    last = {"t": time.monotonic(), "in": 0, "out": 0, "push": 0}

    def tick(stats):
        now = time.monotonic()
        dt = max(now - last["t"], 1e-9)
        rate_in = (stats["datagrams_in"] - last["in"]) / dt
        rate_out = (stats["datagrams_out"] - last["out"]) / dt
        pushes = (stats["pushes"] - last["push"]) / dt
        last.update(t=now, **{"in": stats["datagrams_in"], "out": stats["datagrams_out"],
                              "push": stats["pushes"]})
        drops = sum(stats["drops"].values())
        if json_stats:
            click.echo(json.dumps({"time": time.time(), **stats, "rate_in": rate_in,
                                   "rate_out": rate_out, "push_rate": pushes}))
            return
        status.update(
            f"subs {stats['subscribers']:>4}  push/s {human_rate(pushes):>7}  "
            f"in/s {human_rate(rate_in):>7}  out/s {human_rate(rate_out):>7}  "
            f"seq {stats['next_sequence']}  req {stats['requests']}  drops {drops}",
            force=True)

    bb.serve_forever(on_tick=tick, interval=stats_interval or status.interval)
    status.finish()
    stats = bb.stats()
    dropped = {k: v for k, v in stats["drops"].items() if v}
    click.echo(f"stopped after {stats['uptime']:.1f}s: {stats['pushes']} pushes, "
               f"{stats['delivers']} delivers, {stats['datagrams_in']} datagrams in, "
               f"dropped {dropped or 'none'}", err=True)


def _client_options(fn):
    fn = click.option("--bind", type=AddressType(0), default="0.0.0.0:0", show_default=True,
                      help="Local address for this client's socket.")(fn)
    fn = click.option("--pack", type=click.IntRange(0, 65507), default=0, show_default=True,
                      metavar="BYTES",
                      help="Packing extension: accept (and, publishing, send) several messages "
                           "per datagram, up to BYTES each (1472 fits an Ethernet MTU); 0: off. "
                           "The backbone must support it.")(fn)
    return BACKBONE_OPTION(fn)


@main.command()
@_client_options
@click.argument("messages", nargs=-1)
@click.option("-n", "--count", type=click.IntRange(1), default=None,
              help="Messages to send: repeats the MESSAGES cycle (or at most this many stdin lines).")
@click.option("-r", "--rate", type=click.FloatRange(0.001), default=None,
              help="Messages per second [default: as fast as confirmations allow].")
@click.option("--no-confirm", is_flag=True,
              help="Fire and forget: sign on with NOSUBSCRIBE and do not wait for DELIVERs.")
@click.option("--timeout", type=click.FloatRange(0.01), default=2.0, show_default=True,
              help="Seconds to wait for each message's DELIVER to come back.")
@click.option("--in-flight", type=click.IntRange(1, 65536), default=256,
              show_default=True, help="Most unconfirmed messages at once.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the summary.")
def pub(backbone, bind, pack, messages, count, rate, no_confirm, timeout, in_flight, quiet):
    """Publish MESSAGES (or stdin lines) through the backbone.

    A message counts as published only when the backbone's DELIVER of it comes back; each
    confirmed message is printed with its SEQUENCE. Exit status 1 if any was not confirmed.

    \b
      pelotari pub hello world           two messages
      pelotari pub -n 1000 -r 200 tick   1000 x "tick" at 200/s
      seq 10 | pelotari pub              one message per stdin line
      pelotari pub --pack 1472 -n 10000 x  packed: many messages per datagram

    With --pack, messages go in groups (64, or 10 ms worth at --rate; from stdin a group
    leaves when it is full or input ends), each packed into as few datagrams as fit.
    """
    from pelotari.fyrehose import Client, ClientConfig
    from pelotari.fyrehose.client import PublishTimeout
    from pelotari.fyrehose.codec import NOJOURNAL, NOSUBSCRIBE

    source = _message_source(messages, count)
    flags = NOJOURNAL | (NOSUBSCRIBE if no_confirm else 0)
    if pack and pack < 9:
        raise click.BadParameter("must be 0 or at least 9 (one frame header)", param_hint="--pack")
    client = Client(backbone, bind=bind, receive=False,
                    config=ClientConfig(flags=flags, publish_timeout=timeout, pack=pack))
    sent = confirmed = failed = 0
    started = time.monotonic()
    status = StatusLine()
    inflight = []
    with client:
        if not client.wait_connected(min(timeout, 3.0)) and not no_confirm:
            raise click.ClickException(f"no KEEPALIVE-ACK from backbone {backbone[0]}:{backbone[1]}")

        def settle(block):
            nonlocal confirmed, failed
            while inflight and (block or inflight[0][0].done()):
                fut, text = inflight.pop(0)
                try:
                    seq = fut.result(timeout + 1.0)
                except (PublishTimeout, TimeoutError, ConnectionAbortedError):
                    failed += 1
                    click.echo(f"not confirmed: {text[:60]!r}", err=True)
                    continue
                confirmed += 1
                if not quiet:
                    click.echo(f"{seq}\t{text}")

        group = 1 if not pack else max(1, int(rate * 0.01)) if rate else 64
        while True:
            texts = list(itertools.islice(source, group))
            if not texts:
                break
            if rate:
                delay = started + sent / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if pack:
                futs = client.publish_many_nowait([t.encode() for t in texts])
            else:
                futs = [client.publish_nowait(texts[0].encode())]
            sent += len(texts)
            for fut, text in zip(futs, texts):
                if fut is not None:
                    inflight.append((fut, text))
                elif not quiet:
                    click.echo(f"sent\t{text}")
            settle(block=len(inflight) >= in_flight)
            if status.tty and status.due() and quiet:
                status.update(f"sent {sent}  confirmed {confirmed}  failed {failed}")
        settle(block=True)
    status.finish()
    elapsed = time.monotonic() - started
    what = f"{confirmed} confirmed, {failed} not confirmed" if not no_confirm else "unconfirmed"
    click.echo(f"published {sent} messages in {elapsed:.2f}s ({what})", err=True)
    if failed:
        sys.exit(1)


def _message_source(messages, count):
    if messages:
        if count is None:
            yield from messages
            return
        for i in range(count):
            yield messages[i % len(messages)]
        return
    if sys.stdin.isatty():
        click.echo("reading messages from stdin, one per line (Ctrl-D to end)", err=True)
    for i, line in enumerate(sys.stdin):
        if count is not None and i >= count:
            return
        yield line.rstrip("\n")


@main.command()
@_client_options
@click.option("-n", "--count", type=click.IntRange(1), default=None,
              help="Exit after this many messages.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line: sequence and data (data_base64 if not UTF-8), "
                   "or lost/resync notices.")
@click.option("--no-journal", is_flag=True,
              help="Set NOJOURNAL: keep no journal and never serve other clients' REQUESTs.")
@click.option("--journal-size", type=click.IntRange(1), default=4096, show_default=True,
              help="Recent messages kept to serve other clients' REQUESTs.")
@click.option("--timeout", type=click.FloatRange(0.01), default=None,
              help="Exit after this many seconds without a message.")
@click.option("--gro", is_flag=True,
              help="Read with UDP_GRO (Linux >= 5.0): a run of DELIVERs the backbone sends with "
                   "GSO arrives in one read and is split here; nothing changes on the wire.")
def sub(backbone, bind, pack, count, as_json, no_journal, journal_size, timeout, gro):
    """Subscribe and print every message in sequence order.

    Gaps are repaired from other subscribers' journals (REQUEST → FORWARD); messages no peer
    could supply are reported as "lost FIRST..LAST" on stderr (or in --json), never skipped
    silently.
    """
    from pelotari.fyrehose import Client, ClientConfig, Lost, Message, Resync
    from pelotari.fyrehose.codec import NOJOURNAL

    if pack and pack < 9:
        raise click.BadParameter("must be 0 or at least 9 (one frame header)", param_hint="--pack")
    config = ClientConfig(flags=NOJOURNAL if no_journal else 0, journal_size=journal_size,
                          pack=pack)
    received = 0
    try:
        client = Client(backbone, bind=bind, config=config, gro=gro).start()
    except OSError as exc:
        raise click.ClickException(f"cannot open the client socket: {exc.strerror or exc}") from None
    with client:
        if not client.wait_connected(3.0):
            click.echo(f"warning: no KEEPALIVE-ACK yet from {backbone[0]}:{backbone[1]}; "
                       "still trying", err=True)
        try:
            for item in client.messages(timeout=timeout):
                if isinstance(item, Message):
                    received += 1
                    _print_message(item, as_json)
                elif isinstance(item, Lost):
                    _notice({"lost": [item.first, item.last]}, f"lost {item.first}..{item.last}",
                            as_json)
                elif isinstance(item, Resync):
                    _notice({"resync": [item.expected, item.received]},
                            f"sequence jumped from {item.expected} to {item.received} "
                            "(backbone restart?)", as_json)
                if count is not None and received >= count:
                    break
        except KeyboardInterrupt:
            pass
        stats = client.stats()
    click.echo(f"received {received} messages; {stats.get('requests', 0)} requests, "
               f"{stats.get('lost', 0)} lost, {stats.get('duplicates', 0)} duplicates", err=True)


def _print_message(msg, as_json):
    try:
        text = msg.data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if as_json:
        record = {"sequence": msg.sequence}
        if text is None:
            record["data_base64"] = base64.b64encode(msg.data).decode()
        else:
            record["data"] = text
        click.echo(json.dumps(record))
    else:
        shown = text if text is not None else repr(msg.data)
        click.echo(f"{msg.sequence}\t{shown}")
    sys.stdout.flush()


def _notice(record, text, as_json):
    if as_json:
        click.echo(json.dumps(record))
    else:
        click.echo(text, err=True)
