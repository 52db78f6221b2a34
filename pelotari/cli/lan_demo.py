"""`pelotari lan-demo`: prototari nodes on a namespaced LAN, discovering, messaging, dropping."""
import json
import queue
import signal
import subprocess
import sys
import threading
import time

import click

from pelotari.cli import main
from pelotari.cli.common import plural
from pelotari.prototari.wire import UNICAST_PORT

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

    Ctrl-C (SIGINT) or SIGTERM at any moment removes everything it created (nodes, namespaces,
    bridge), prints one line saying so, and exits with status 130 (SIGINT) or 143 (SIGTERM).
    """
    interrupted = _Interrupts()  # first: from here on, no signal can leave anything behind
    try:
        ok = _demo(nodes, loss, interrupted)
    except _Interrupted as exc:
        click.echo(f"lan-demo: interrupted by {exc.signame}; the nodes, namespaces and bridge "
                   "it created are removed", err=True)
        sys.exit(128 + exc.signum)
    sys.exit(0 if ok else 1)


class _Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum
        self.signame = signal.Signals(signum).name


class _Interrupts:
    """SIGINT and SIGTERM only take note; check() raises _Interrupted at the next safe point
    (between two steps, never half-way through creating a namespace or starting a node)."""

    def __init__(self):
        self.signum = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._note)

    def _note(self, signum, frame):
        self.signum = self.signum or signum

    def check(self):
        if self.signum is not None:
            raise _Interrupted(self.signum)


def _demo(nodes, loss, interrupted):
    from pelotari import netlab

    check = interrupted.check
    why = netlab.available()
    if why:
        raise click.ClickException(f"lan-demo needs network namespaces: {why}")
    out: queue.Queue = queue.Queue()
    check()
    with netlab.LanHarness() as lan:
        hosts = []
        for i in range(nodes):
            check()
            hosts.append(lan.add_host(chr(ord("a") + i)))
        if loss:
            mechanism = set()
            for h in hosts:
                check()
                mechanism.add(lan.loss(h, loss))
            _say(f"{loss}% of UDP dropped at every host ({', '.join(mechanism)}): discovery and "
                 "heartbeats retry, so the nodes still find each other and notice a death; a "
                 "message is sent once (prototari never retransmits), so some copies are lost")
        _say(f"LAN {lan.subnet}.0/24 on bridge {lan.bridge}: " +
             ", ".join(f"{h.name}={h.address}" for h in hosts))
        procs = {}
        for h in hosts:
            check()
            procs[h.name] = _start(lan, h, out)
        everyone = {h.name: {f"{o.address}:{UNICAST_PORT}" for o in hosts if o is not h} for h in hosts}
        peers = {h.name: set() for h in hosts}
        ok = _follow(out, peers, lambda: all(peers[n] == everyone[n] for n in peers), 20,
                     "every node found every other", check)
        first, last = hosts[0], hosts[-1]
        procs[first.name].stdin.write("hello from " + first.name + "\n")
        procs[first.name].stdin.flush()
        got = set()
        if loss:  # no retransmission: what arrives is what arrives, and that is no failure
            _follow(out, peers, lambda: got == {h.name for h in hosts[1:]}, 3,
                    "every node got the message", check, got, quiet=True)
            _say(_delivered(got, len(hosts) - 1, loss))
        else:
            ok &= _follow(out, peers, lambda: got == {h.name for h in hosts[1:]}, 10,
                          "every node got the message", check, got)
        check()
        _say(f"killing {last.name}: the others should drop it after 3 missed heartbeats")
        procs[last.name].kill()
        t0 = time.monotonic()
        gone = f"{last.address}:{UNICAST_PORT}"
        ok &= _follow(out, peers, lambda: all(gone not in peers[h.name] for h in hosts[:-1]), 15,
                      "the others dropped it", check)
        _say(f"detected in {time.monotonic() - t0:.1f}s; restarting {last.name}")
        check()
        procs[last.name] = _start(lan, last, out)
        ok &= _follow(out, peers, lambda: all(peers[n] == everyone[n] for n in peers), 20,
                      "it was admitted again", check)
        check()
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
    check()  # interrupted while stopping the nodes: say so (everything is removed all the same)
    return ok


def _delivered(got, others, loss):
    """What the narration says of a message sent once over a lossy LAN."""
    return (f"{len(got)} of {plural(others, 'node')} got the message "
            f"({', '.join(sorted(got)) or 'none'}); with {loss}% loss, each copy arrives "
            f"with probability {1 - loss / 100:.2f}")


def _say(text):
    click.secho(f"lan-demo: {text}", bold=True)


def _start(lan, host, out):
    proc = lan.spawn(host, [sys.executable, "-m", "pelotari", "prototari", "--json", *FAST],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                     text=True, bufsize=1)

    def read():
        for line in proc.stdout:
            try:
                out.put((host.name, json.loads(line)))
            except ValueError:
                continue  # not an event (a node killed half-way through a line)

    threading.Thread(target=read, daemon=True).start()
    return proc


def _follow(out, peers, done, timeout, what, check, got=None, quiet=False):
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        check()
        try:
            name, ev = out.get(timeout=0.2)
        except queue.Empty:
            continue
        kind = ev["event"]
        if kind == "joined":
            peers[name].add(ev["peer"])
            click.echo(f"[{name}] joined  {ev['peer']} (via {ev['via']}; "
                       f"{plural(len(peers[name]), 'peer')})")
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
    if quiet:
        return result
    click.secho(f"lan-demo: {what}" if result else f"lan-demo: TIMED OUT waiting until {what}",
                fg="green" if result else "red", bold=True)
    return result
