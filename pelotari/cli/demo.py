"""`pelotari demo`: a backbone, subscribers and a publisher as real processes, output merged."""
import json
import queue
import signal
import subprocess
import sys
import threading
import time

import click

from pelotari.cli.common import FiniteRange, plural
from pelotari.cli.service import SignalInterrupt

from pelotari.cli import main

COLOURS = ["cyan", "green", "magenta", "yellow", "blue", "red"]


def _spawn(args, stdin=subprocess.DEVNULL):
    # In a session of its own: a terminal's Ctrl-C reaches the demo alone, which then stops each
    # part once (a second SIGINT while a part was closing cut its summary short, and one while
    # the publisher's interpreter was still starting printed "Fatal Python error").
    return subprocess.Popen([sys.executable, "-m", "pelotari", *args], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            start_new_session=True)


def _pump(proc, name, out_q):
    def reader(stream, is_err):
        for line in stream:
            out_q.put((name, is_err, line.rstrip("\n")))
        out_q.put((name, None, None))

    for stream, is_err in ((proc.stdout, False), (proc.stderr, True)):
        threading.Thread(target=reader, args=(stream, is_err), daemon=True).start()


@main.command()
@click.option("-n", "--messages", type=click.IntRange(1, 100000), default=20, show_default=True,
              help="Messages the publisher sends.")
@click.option("-r", "--rate", type=FiniteRange(0.1, 100000), default=10.0, show_default=True,
              help="Messages per second.")
@click.option("-s", "--subscribers", type=click.IntRange(1, 16), default=2, show_default=True,
              help="Subscriber processes.")
@click.option("--timeout", type=FiniteRange(1), default=60.0, show_default=True,
              help="Give up after this many seconds.")
def demo(messages, rate, subscribers, timeout):
    """Start a backbone, subscribers and a publisher, and show messages flowing.

    Every part is a real `pelotari` process on 127.0.0.1 (a free port is chosen); their output
    is merged here with a name in front of each line. The demo ends when every subscriber has
    received every message, and says whether each saw all of them in sequence order. Ctrl-C
    (or SIGTERM, SIGHUP) stops every part first, then says "interrupted" (status 130).
    """
    SignalInterrupt(signal.SIGTERM, signal.SIGHUP)  # as Ctrl-C: the parts are stopped first
    out_q: "queue.Queue" = queue.Queue()
    procs = []
    try:
        bb = _spawn(["backbone", "--host", "127.0.0.1", "--port", "0", "--json-stats",
                     "--stats-interval", "1"])
        procs.append(("backbone", bb))
        port = _await_port(bb)
        _pump(bb, "backbone", out_q)
        click.secho(f"demo: backbone on 127.0.0.1:{port}; starting {plural(subscribers, 'subscriber')}",
                    bold=True)
        address = f"127.0.0.1:{port}"
        subs = []
        for i in range(subscribers):
            p = _spawn(["sub", "-b", address, "--count", str(messages), "--json"])
            procs.append((f"sub-{i + 1}", p))
            subs.append((f"sub-{i + 1}", p))
            _pump(p, f"sub-{i + 1}", out_q)
        # Wait until the backbone counts every subscriber before publishing.
        deadline = time.monotonic() + 10
        seen_subs = 0
        while seen_subs < subscribers and time.monotonic() < deadline:
            try:
                name, is_err, line = out_q.get(timeout=0.5)
            except queue.Empty:
                continue
            if name == "backbone" and line and line.startswith("{"):
                seen_subs = _subscribers(json.loads(line))
        click.secho(f"demo: {plural(seen_subs, 'subscriber')} signed on; publishing "
                    f"{plural(messages, 'message')} at {rate:g}/s", bold=True)
        pub = _spawn(["pub", "-b", address, "--rate", str(rate)], stdin=subprocess.PIPE)
        procs.append(("pub", pub))
        _pump(pub, "pub", out_q)
        threading.Thread(target=_feed, args=(pub, messages), daemon=True).start()
        results = _show(out_q, {n for n, _ in subs}, messages, timeout)
    finally:
        for name, p in procs:
            if p.poll() is None:
                # SIGTERM, a service's stop: each part says its summary; a part still starting
                # ends silently (SIGINT then made Python print a fatal error and a traceback).
                p.send_signal(signal.SIGTERM)
        for name, p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        while True:  # the backbone's and subscribers' closing summaries
            try:
                name, is_err, line = out_q.get(timeout=0.3)
            except queue.Empty:
                break
            if line is not None and not line.startswith("{"):
                _echo(name, line, is_err)
    ok = True
    for name in sorted(results):
        seqs = results[name]
        in_order = all(b == a + 1 for a, b in zip(seqs, seqs[1:]))
        good = len(seqs) == messages and in_order
        ok &= good
        click.secho(f"demo: {name} received {len(seqs)}/{plural(messages, 'message')}"
                    f"{', in sequence order' if in_order else ', OUT OF ORDER'}",
                    fg="green" if good else "red", bold=True)
    sys.exit(0 if ok else 1)


def _subscribers(stats) -> int:
    """The demo's subscribers the backbone counts: its journaling entries. The confirming
    publisher is a backbone subscriber too (its messages' DELIVERs confirm them), but one
    that keeps no journal (NOJOURNAL), while the demo's subscribers all keep one."""
    return stats["journaling"]


def _await_port(proc) -> int:
    line = proc.stderr.readline()
    if "listening on" not in line:
        raise click.ClickException(f"backbone did not start: {line.strip() or proc.stderr.read()}")
    return int(line.split("listening on ", 1)[1].split("/")[0].rsplit(":", 1)[1])


def _feed(pub, messages):
    try:
        for i in range(1, messages + 1):
            pub.stdin.write(f"message {i} of {messages}\n")
            pub.stdin.flush()
        pub.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def _echo(name, line, is_err):
    colour = COLOURS[hash(name) % len(COLOURS)] if name != "backbone" else "white"
    click.echo(click.style(f"[{name:>8}] ", fg=colour, bold=True) + line, err=False)


def _show(out_q, sub_names, messages, timeout):
    results = {n: [] for n in sub_names}
    finished = set()
    deadline = time.monotonic() + timeout
    while len(finished) < len(sub_names) and time.monotonic() < deadline:
        try:
            name, is_err, line = out_q.get(timeout=0.5)
        except queue.Empty:
            continue
        if line is None:
            if name in sub_names:
                finished.add(name)
            continue
        if name in results and line.startswith("{"):
            record = json.loads(line)
            if "sequence" in record:
                results[name].append(record["sequence"])
                _echo(name, f"{record['sequence']}  {record.get('data', '')}", False)
            else:
                _echo(name, line, True)
            continue
        if name == "backbone" and line.startswith("{"):
            s = json.loads(line)
            _echo(name, f"subscribers {_subscribers(s)}  pushes {s['pushes']}  "
                        f"delivers {s['delivers']}  next seq {s['next_sequence']}", False)
            continue
        _echo(name, line, is_err)
    return results
