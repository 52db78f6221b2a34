"""`pelotari lan-demo`: prototari nodes on a namespaced LAN, discovering, messaging, dropping."""
import json
import queue
import subprocess
import sys
import threading
import time

import click

from pelotari.cli import main

FAST = ["--broadcast-interval", "0.5", "--inactive-peer-time", "1", "--heartbeat-max-wait", "0.3",
        "--reservation-timeout", "1"]


@main.command("lan-demo")
@click.option("-n", "--nodes", type=click.IntRange(2, 8), default=3, show_default=True,
              help="Hosts on the namespaced LAN, one node each.")
@click.option("--loss", type=click.IntRange(0, 90), default=0, show_default=True,
              help="Percent of UDP datagrams dropped at every host.")
def lan_demo(nodes, loss):
    """Show prototari on a real (namespaced) LAN: discovery, a message, a death, a return.

    Creates NODES network namespaces on a bridge (root only), runs `pelotari prototari` in
    each, and narrates: every node finds every other by broadcast; the first sends a message;
    the last is killed and the others drop it after three missed heartbeats; it restarts and
    is admitted again. Each node picks its host's private interface by itself (no -i). At the
    end every node is stopped with SIGTERM, and everything the demo created is removed.
    """
    from pelotari import netlab

    why = netlab.available()
    if why:
        raise click.ClickException(f"lan-demo needs network namespaces: {why}")
    out: queue.Queue = queue.Queue()
    with netlab.LanHarness() as lan:
        hosts = [lan.add_host(chr(ord("a") + i)) for i in range(nodes)]
        if loss:
            mechanism = {lan.loss(h, loss) for h in hosts}
            _say(f"{loss}% of UDP dropped at every host ({', '.join(mechanism)})")
        _say(f"LAN {lan.subnet}.0/24 on bridge {lan.bridge}: " +
             ", ".join(f"{h.name}={h.address}" for h in hosts))
        procs = {h.name: _start(lan, h, out) for h in hosts}
        everyone = {h.name: {f"{o.address}:21450" for o in hosts if o is not h} for h in hosts}
        peers = {h.name: set() for h in hosts}
        ok = _follow(out, peers, lambda: all(peers[n] == everyone[n] for n in peers), 20,
                     "every node found every other")
        first, last = hosts[0], hosts[-1]
        procs[first.name].stdin.write("hello from " + first.name + "\n")
        procs[first.name].stdin.flush()
        got = set()
        ok &= _follow(out, peers, lambda: got == {h.name for h in hosts[1:]}, 10,
                      "every node got the message", got)
        _say(f"killing {last.name}: the others should drop it after 3 missed heartbeats")
        procs[last.name].kill()
        t0 = time.monotonic()
        gone = f"{last.address}:21450"
        ok &= _follow(out, peers, lambda: all(gone not in peers[h.name] for h in hosts[:-1]), 15,
                      "the others dropped it")
        _say(f"detected in {time.monotonic() - t0:.1f}s; restarting {last.name}")
        procs[last.name] = _start(lan, last, out)
        ok &= _follow(out, peers, lambda: all(peers[n] == everyone[n] for n in peers), 20,
                      "it was admitted again")
        for proc in procs.values():
            proc.terminate()  # a node runs until SIGTERM, whatever happens to its stdin
        for proc in procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                ok = False
                _say("a node did not stop on SIGTERM")
        _say("every node stopped on SIGTERM")
    _say("namespaces and bridge removed")
    sys.exit(0 if ok else 1)


def _say(text):
    click.secho(f"lan-demo: {text}", bold=True)


def _start(lan, host, out):
    proc = lan.spawn(host, [sys.executable, "-m", "pelotari", "prototari", "--json", *FAST],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                     text=True, bufsize=1)

    def read():
        for line in proc.stdout:
            out.put((host.name, json.loads(line)))

    threading.Thread(target=read, daemon=True).start()
    return proc


def _follow(out, peers, done, timeout, what, got=None):
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        try:
            name, ev = out.get(timeout=0.2)
        except queue.Empty:
            continue
        kind = ev["event"]
        if kind == "joined":
            peers[name].add(ev["peer"])
            click.echo(f"[{name}] joined  {ev['peer']} (via {ev['via']}; {len(peers[name])} peers)")
        elif kind == "left":
            peers[name].discard(ev["peer"])
            click.echo(f"[{name}] left    {ev['peer']} ({ev['reason']})")
        elif kind == "message":
            click.echo(f"[{name}] message from {ev['peer']}: {ev['data']}")
            if got is not None:
                got.add(name)
        elif kind == "started":
            click.echo(f"[{name}] started on {ev['interface']} {ev['address']} "
                       f"(broadcast {ev['broadcast']})")
    result = done()
    click.secho(f"lan-demo: {what}" if result else f"lan-demo: TIMED OUT waiting until {what}",
                fg="green" if result else "red", bold=True)
    return result
