"""Replay issue 11's attacks against running pelotari processes and print what each achieved.

    sudo .venv/bin/python bench/attack/replay.py              # every vector, a table
    sudo .venv/bin/python bench/attack/replay.py --json out.jsonl

Everything runs on this machine: a `pelotari backbone` and `pelotari sub` processes on 127.0.0.x,
attacked from plain sockets and (as root) from a raw socket forging source addresses; every such
datagram goes to a 127.x address. Then (root, iproute2) `pelotari prototari` nodes on a
namespaced LAN (pelotari/netlab.py), attacked by prototari_attacker.py from another namespace
host. For each vector the line says what the attacker sent, what reached the victim (for
prototari: what the node sent back to the attacker's addresses), their ratio (the amplification
factor) and the outcome.
"""
import argparse
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spoof import Spoofer, available as spoof_available  # noqa: E402

from fastpath import refcodec as wire  # noqa: E402
from fastpath.batchio import SendBatch  # noqa: E402
from fastpath.packets import NOJOURNAL  # noqa: E402
from pelotari import netlab  # noqa: E402
from pelotari.harness.procs import bound_port  # noqa: E402
from pelotari.harness.soak import rss_kib  # noqa: E402

PY = [sys.executable, "-m", "pelotari"]
FIRST = 1000
TOKEN = b"A" * 16


@dataclass
class Result:
    """One attack vector's measured outcome."""

    protocol: str
    vector: str
    attacker_bytes: int
    victim_bytes: int
    outcome: str
    ok: bool

    @property
    def factor(self) -> Optional[float]:
        return self.victim_bytes / self.attacker_bytes if self.attacker_bytes else None


def udp(host: str = "127.0.0.1", buffer: int = 8 << 20) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    s.bind((host, 0))
    return s


def drain(sock: socket.socket, quiet: float = 0.5, only: Optional[int] = None,
          limit: float = 10.0) -> int:
    """Bytes that reach sock until `quiet` seconds pass with none of packet type `only` (any,
    if None), or `limit` seconds in all."""
    total = 0
    deadline = time.monotonic() + limit
    last = time.monotonic()
    sock.settimeout(0.05)
    while time.monotonic() - last < quiet and time.monotonic() < deadline:
        try:
            data = sock.recv(70000)
        except socket.timeout:
            continue
        if only is None or data[:1] == bytes([only]):
            total += len(data)
            last = time.monotonic()
    return total


RUNNING: List[subprocess.Popen] = []  # killed on the way out, whatever happened


class Proc:
    """A process whose stdout JSON lines (and stderr) are collected as they come."""

    def __init__(self, argv: List[str], spawn=subprocess.Popen):
        self.p = spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
        RUNNING.append(self.p)
        self.lines: List[dict] = []
        self.err: List[str] = []
        self.readers = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=self.err.extend, args=(self.p.stderr,),
                                         daemon=True)]
        for t in self.readers:
            t.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                pass

    def stop(self, sig: Optional[int] = signal.SIGINT, timeout: float = 10) -> str:
        """Send sig (None: let it end by itself), wait, and return what it printed on stderr."""
        if sig is not None and self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        for t in self.readers:
            t.join(5)
        return "".join(self.err)


class Backbone(Proc):
    """`pelotari backbone` on 127.0.0.1 with JSON stats every 0.2 s."""

    def __init__(self, *options: str):
        super().__init__([*PY, "backbone", "--host", "127.0.0.1", "--port", "0",
                          "--first-sequence", str(FIRST), "--json-stats",
                          "--stats-interval", "0.2", *options])
        deadline = time.monotonic() + 10
        while not self.lines and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.lines:
            raise RuntimeError("the backbone did not start: " + self.stop())
        self.address = ("127.0.0.1", bound_port(self.p.pid))

    def stats(self) -> dict:
        time.sleep(0.45)
        return self.lines[-1]


class Sub(Proc):
    """`pelotari sub --json` bound to a chosen 127.x address, any port."""

    def __init__(self, bb: Backbone, host: str, *options: str):
        super().__init__([*PY, "sub", "--json", "-b", f"{bb.address[0]}:{bb.address[1]}",
                          "--bind", f"{host}:0", *options])
        self.address = (host, bound_port(self.p.pid, host=host))

    def messages(self) -> list:
        return [(m["sequence"], m.get("data")) for m in self.lines if "sequence" in m]

    def notices(self) -> list:
        return [m for m in self.lines if "lost" in m or "resync" in m]


def sign_on(sock: socket.socket, bb: Backbone, flags: int = 0) -> bool:
    sock.sendto(wire.encode_keepalive("", 0, flags, TOKEN), bb.address)
    sock.settimeout(2)
    try:
        while True:
            if sock.recv(70000)[:1] == b"\x20":
                return True
    except socket.timeout:
        return False


def publish(bb: Backbone, payloads) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        SendBatch().send(s, [(wire.encode_push(p), bb.address) for p in payloads])


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# ---- fyrehose ---------------------------------------------------------------------------------

def fyrehose_vectors(spoofer: Optional[Spoofer]) -> List[Result]:
    out: List[Result] = []
    bb = Backbone()
    journal = Sub(bb, "127.0.0.2")
    try:
        if not wait_until(lambda: bb.stats()["subscribers"] == 1, 5):
            raise RuntimeError("the journaling subscriber did not sign on")
        payloads = [b"%05d" % i + b"." * 1395 for i in range(1024)]  # 1,400 bytes each
        publish(bb, payloads)
        wait_until(lambda: len(journal.messages()) == 1024, 10)

        # 1. A REQUEST naming another port on the sender's own host (the x75,000).
        attacker, victim = udp(), udp()
        sent = 0
        for _ in range(200):
            d = wire.encode_request("127.0.0.1", victim.getsockname()[1], FIRST, FIRST + 1023)
            attacker.sendto(d, bb.address)
            sent += len(d)
        got = drain(victim)
        drops = bb.stats()["drops"]
        out.append(Result("fyrehose", "REQUEST naming another port (reflection)", sent, got,
                          f"dropped: foreign_address {drops['foreign_address']}", got <= sent))

        # 2. A REQUEST for itself from an address that never subscribed.
        sent = 0
        for _ in range(200):
            d = wire.encode_request("", 0, FIRST, FIRST + 1023)
            attacker.sendto(d, bb.address)
            sent += len(d)
        got = drain(attacker)
        drops = bb.stats()["drops"]
        out.append(Result("fyrehose", "REQUEST from an address that never subscribed", sent,
                          got, f"dropped: request_not_subscribed "
                               f"{drops['request_not_subscribed']}", got <= sent))

        if spoofer is not None:
            # 3. Forged source: a never-subscribed victim.
            before = spoofer.sent_bytes
            target = udp("127.0.0.9")
            for _ in range(200):
                spoofer.send(wire.encode_request("", 0, FIRST, FIRST + 1023),
                             target.getsockname(), bb.address)
            got = drain(target)
            sent = spoofer.sent_bytes - before
            out.append(Result("fyrehose", "REQUEST forging a never-subscribed source", sent, got,
                              "dropped: request_not_subscribed", got <= sent))

            # 4. Forged source: a live subscriber, flooded with repair it did not ask for.
            live = udp("127.0.0.8")
            sign_on(live, bb)
            stop = threading.Event()

            def keepalive():
                while not stop.wait(0.5):
                    live.sendto(wire.encode_keepalive("", 0, NOJOURNAL, TOKEN), bb.address)

            t = threading.Thread(target=keepalive, daemon=True)
            t.start()
            before = spoofer.sent_bytes
            start = time.monotonic()
            for _ in range(200):  # 204,800 sequences asked for in its name
                spoofer.send(wire.encode_request("", 0, FIRST, FIRST + 1023),
                             live.getsockname(), bb.address)
            got = drain(live, 1.0, only=0x01)
            elapsed = time.monotonic() - start
            stop.set()
            t.join()
            sent = spoofer.sent_bytes - before
            budget = (16384 + 16384 * elapsed) * 1409
            drops = bb.stats()["drops"]
            out.append(Result("fyrehose", "REQUEST forging a live subscriber's source", sent, got,
                              f"repair {got // 1409} DELIVERs <= budget "
                              f"{int(budget // 1409)}; repair_budget drops "
                              f"{drops['repair_budget']}", got <= budget))

            # 5. A FORWARD forged from the backbone's own address (what cannot be refused).
            before = spoofer.sent_bytes
            target = udp("127.0.0.10")
            start = time.monotonic()
            for _ in range(200):
                spoofer.send(wire.encode_forward("127.0.0.10", target.getsockname()[1], FIRST,
                                                 FIRST + 1023), bb.address, journal.address)
            got = drain(target, 1.0)
            elapsed = time.monotonic() - start
            sent = spoofer.sent_bytes - before
            cap = (2 << 20) + (8 << 20) * elapsed
            out.append(Result("fyrehose", "FORWARD forged from the backbone's address", sent,
                              got, f"journal's per-requester budget: {got} <= {int(cap)} B "
                                   "(documented residual)", got <= cap))

            # 5b. A KEEPALIVE forged from an address that never asked (B2: not refusable).
            before = spoofer.sent_bytes
            target = udp("127.0.0.11")
            spoofer.send(wire.encode_keepalive("", 0, NOJOURNAL, TOKEN), target.getsockname(),
                         bb.address)
            time.sleep(0.1)
            publish(bb, payloads[:100])
            got = drain(target, 0.5)
            sent = spoofer.sent_bytes - before
            out.append(Result("fyrehose", "KEEPALIVE forged from a never-subscribed source",
                              sent, got, "streamed to until the entry expires, 5 s after the "
                                         "last forgery (documented residual: B2 has no "
                                         "handshake; only source-address filtering stops it)",
                              True))
    finally:
        bb.stop()
        journal.stop()

    # 6-8. Forged DELIVERs at a subscriber.
    bb = Backbone()
    sub = Sub(bb, "127.0.0.3")
    try:
        wait_until(lambda: bb.stats()["subscribers"] == 1, 5)
        publish(bb, [b"first"])
        wait_until(lambda: len(sub.messages()) == 1, 5)
        attacker = udp("127.0.0.4")
        sent = 0
        for d in (wire.encode_deliver(FIRST + 1, b"FORGED"),
                  wire.encode_deliver(FIRST + 20_001, b"jump")):
            attacker.sendto(d, sub.address)
            sent += len(d)
        for k in range(20_000):
            d = wire.encode_deliver(FIRST + 2 + k, b"f")
            attacker.sendto(d, sub.address)
            sent += len(d)
        time.sleep(0.2)
        publish(bb, [b"real%d" % i for i in range(5)])
        wait_until(lambda: len(sub.messages()) >= 6, 5)
        time.sleep(1.5)
        msgs = sub.messages()
        real = msgs[1:] == [(FIRST + 1 + i, "real%d" % i) for i in range(5)]
        summary = sub.stop().strip().splitlines()[-1]
        out.append(Result("fyrehose", "20,002 forged DELIVERs (next, +20,000, flood)", sent, 0,
                          f"real messages delivered: {real}; notices {len(sub.notices())}; "
                          f"{summary}", real and not sub.notices()))
        if spoofer is not None:
            sub2 = Sub(bb, "127.0.0.5")
            wait_until(lambda: bb.stats()["subscribers"] >= 1, 5)
            time.sleep(0.3)
            publish(bb, [b"before"])
            wait_until(lambda: len(sub2.messages()) == 1, 5)
            seq = sub2.messages()[0][0]
            spoofer.send(wire.encode_deliver(seq + 1, b"SPOOFED"), bb.address, sub2.address)
            publish(bb, [b"after"])
            wait_until(lambda: len(sub2.messages()) == 2, 5)
            believed = (seq + 1, "SPOOFED") in sub2.messages()
            sub2.stop()
            out.append(Result("fyrehose", "DELIVER forged from the backbone's address", 0, 0,
                              f"believed: {believed} (documented residual: only source-address "
                              "filtering stops it)", True))
    finally:
        bb.stop()
        sub.stop()

    # 9. One host fills the subscriber table.
    bb = Backbone()
    try:
        socks = [udp(buffer=1 << 16) for _ in range(600)]
        sent = 0
        flooding = threading.Event()

        def flood():
            nonlocal sent
            for _ in range(5):  # every socket signs on, and names 100 other ports of its host
                for k, s in enumerate(socks):
                    for d in (wire.encode_keepalive("", 0, 0, TOKEN),
                              wire.encode_keepalive("", 20000 + k % 100, 0, TOKEN)):
                        s.sendto(d, bb.address)
                        sent += len(d)
                flooding.set()

        t = threading.Thread(target=flood, daemon=True)
        t.start()
        flooding.wait(5)  # the table is full of that host's entries and it goes on flooding
        newcomer = udp("127.0.0.6")
        start = time.monotonic()
        admitted = sign_on(newcomer, bb)
        took = time.monotonic() - start
        t.join()
        st = bb.stats()
        for s in socks:
            s.close()
        out.append(Result("fyrehose", "one host: 600 sockets + varying PORT", sent, 0,
                          f"entries held by that host {st['subscribers'] - 1}; a new client on "
                          f"another address admitted during the flood: {admitted} in "
                          f"{took * 1e3:.1f} ms",
                          admitted and took < 1.0))
    finally:
        bb.stop()

    # 10. Packed PUSHes from a stranger.
    bb = Backbone()
    try:
        before = bb.stats()["pushes"]
        pack = wire.encode_push(b"") * (65507 // 9)
        attacker = udp()
        for _ in range(10):
            attacker.sendto(pack, bb.address)
        st = bb.stats()
        made = st["pushes"] - before
        out.append(Result("fyrehose", "10 packed PUSHes (72,780 frames) from a stranger",
                          10 * len(pack), 0,
                          f"messages sequenced: {made}; dropped: pack_too_many_frames "
                          f"{st['drops']['pack_too_many_frames']}, pack_not_signed_on "
                          f"{st['drops']['pack_not_signed_on']}", made == 0))
        small = wire.encode_push(b"") * 1000  # within the frame limit: still not signed on
        for _ in range(10):
            attacker.sendto(small, bb.address)
        st = bb.stats()
        made = st["pushes"] - before
        out.append(Result("fyrehose", "10 packed PUSHes (10,000 frames) from a stranger",
                          10 * len(small), 0,
                          f"messages sequenced: {made}; dropped: pack_not_signed_on "
                          f"{st['drops']['pack_not_signed_on']}", made == 0))
    finally:
        bb.stop()

    # 11. Garbage: a million datagrams of every kind of wrong.
    bb = Backbone()
    try:
        import random
        rng = random.Random(11)
        junk = [bytes([t]) + rng.randbytes(rng.randrange(0, 60))
                for t in (0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x33, 0xff) for _ in range(40)]
        junk += [wire.encode_push(b"x")[:5], b"\x04" * 18, b"\x10" * 30, b""]
        rss0 = rss_kib(bb.p.pid)
        attacker = udp()
        batch = SendBatch()
        sent = 0
        n = 0
        while n < 1_000_000:
            items = [(junk[(n + k) % len(junk)], bb.address) for k in range(1024)]
            batch.send(attacker, items)
            sent += sum(len(d) for d, _ in items)
            n += 1024
        probe = udp("127.0.0.7")
        alive = sign_on(probe, bb)
        st = bb.stats()
        drops = {k: v for k, v in st["drops"].items() if v}
        rss1 = rss_kib(bb.p.pid)
        out.append(Result("fyrehose", f"{n:,} garbage datagrams", sent, 0,
                          f"read {st['datagrams_in']:,}, dropped by reason {drops}; RSS "
                          f"{rss0} -> {rss1} KiB; still answering: {alive}",
                          alive and rss1 - rss0 < 4096))
    finally:
        bb.stop()
    return out


# ---- prototari --------------------------------------------------------------------------------

ATTACKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prototari_attacker.py")
INTERVAL, WINDOW, RESERVATION, INACTIVE, WAIT = 1.0, 0.3, 1.0, 1.0, 0.3
FAST = ["--broadcast-interval", str(INTERVAL), "--response-window", str(WINDOW),
        "--reservation-timeout", str(RESERVATION), "--inactive-peer-time", str(INACTIVE),
        "--heartbeat-max-wait", str(WAIT)]


class Node(Proc):
    """`pelotari prototari --json` in a namespace host (it picks the host's interface itself)."""

    def __init__(self, lan, host):
        super().__init__([*PY, "prototari", "--json", *FAST],
                         spawn=functools.partial(lan.spawn, host))
        if not wait_until(lambda: self.events("started"), 10):
            raise RuntimeError("the prototari node did not start: " + self.stop(signal.SIGTERM))

    def events(self, name: str, among=None) -> List[dict]:
        """Its events called name (with among: only those about peers at those addresses)."""
        return [e for e in self.lines if e.get("event") == name
                and (among is None or e["peer"].split(":")[0] in among)]

    def finish(self) -> dict:
        """Stop it with SIGTERM and return its `stopped` event (peers and counters)."""
        err = self.stop(signal.SIGTERM)
        stopped = self.events("stopped")
        if self.p.returncode != 0 or not stopped or err:
            raise RuntimeError(f"the prototari node did not stop cleanly (exit "
                               f"{self.p.returncode}): {err}")
        return stopped[-1]


def dropped(stopped: dict, reason: str) -> int:
    """A node's count of datagrams dropped for reason, from its `stopped` event."""
    return stopped["stats"].get("dropped_" + reason, 0)


def prototari_vectors() -> List[Result]:
    """Strangers on a namespaced LAN attack fresh `pelotari prototari` nodes."""
    out: List[Result] = []
    with netlab.LanHarness() as lan:
        hv, hx, hn = (lan.add_host(n) for n in ("victim", "attacker", "new"))
        prefix = hx.address.rsplit(".", 1)[0]
        extra = [f"{prefix}.{100 + i}" for i in range(60)]
        for ip in extra:  # addresses the attacker really owns: what is sent to them is counted
            lan.exec_in(hx.namespace, "ip", "addr", "add", f"{ip}/24", "dev", hx.interface)
        mine = [hx.address, *extra]

        def run(phase: str, during=None, **cfg):
            """Attack a fresh victim: (report, `stopped` event, victim, during(victim))."""
            victim = Node(lan, hv)
            time.sleep(0.2)
            victim.rss = [rss_kib(victim.p.pid)]
            attacker = Proc([sys.executable, ATTACKER, json.dumps(
                {"phase": phase, "victim": hv.address, "interface": hx.interface,
                 "addresses": mine, "interval": INTERVAL, "window": WINDOW,
                 "reservation_timeout": RESERVATION, **cfg})],
                spawn=functools.partial(lan.spawn, hx))
            seen = during(victim) if during else None
            err = attacker.stop(None, 60)
            if attacker.p.returncode != 0 or not attacker.lines:
                raise RuntimeError(f"the prototari {phase} attacker failed: {err}")
            victim.rss.append(rss_kib(victim.p.pid))
            victim.alive = victim.p.poll() is None
            return attacker.lines[-1], victim.finish(), victim, seen

        # 1. aupa! from 61 addresses, 3 new ports each, between the victim's response windows.
        r, st, v, _ = run("outside", rounds=3)
        joined = v.events("joined", mine)
        out.append(Result("prototari", "aupa! outside the window, 61 addresses",
                          r["sent"]["bytes"], r["got_bytes"],
                          f"{r['sent']['datagrams']} aupa!: peers gained {len(joined)}; dropped "
                          f"respond_outside_window {dropped(st, 'respond_outside_window')}; "
                          f"rounds that ran into the next window {r['late_rounds']}",
                          not joined and r["got_bytes"] == 0 and r["late_rounds"] == 0))

        # 2. 100 aupa! from one address (new ports) right after a broadcast, then silence.
        r, st, v, _ = run("inside", settle=INACTIVE + 3 * WAIT + 0.6)
        joined, left, got = v.events("joined", mine), v.events("left", mine), r["got"]
        bound = len(b"dale!") + 3 * len(b"hor?")
        out.append(Result("prototari", "100 aupa! inside the window, one address",
                          r["sent"]["bytes"], r["got_bytes"],
                          f"sent {r['blast_after_broadcast']:.3f} s after a broadcast: peers "
                          f"{len(joined)}, dale! {got.get('dale!', 0)}, then hor? "
                          f"{got.get('hor?', 0)} and left {len(left)}; dropped respond_repeated "
                          f"{dropped(st, 'respond_repeated')}; <= {bound} B",
                          r["blast_after_broadcast"] < WINDOW and len(joined) <= 1
                          and got.get("dale!", 0) == 1 and r["got_bytes"] <= bound))

        # 3. pelotari? from 60 addresses, 20 times a second, while a real node starts.
        def newcomer(victim: Node) -> Optional[float]:
            """Start a real node during the flood; seconds until the victim has it (or None)."""
            time.sleep(1.0)
            new = Node(lan, hn)
            start = time.monotonic()
            admitted = wait_until(lambda: victim.events("joined", [hn.address]), 5)
            took = time.monotonic() - start
            new.finish()
            return took if admitted else None

        r, st, v, took = run("discover", newcomer, duration=6.0, rate=20)
        limit = 64 // 2  # max_reservations: half of the default --max-peers
        waited = f"{took:.2f} s" if took is not None else "never"
        out.append(Result("prototari", "pelotari? flood from 60 addresses",
                          r["sent"]["bytes"], r["got_bytes"],
                          f"{r['sent']['datagrams']:,} pelotari?: most reservations held "
                          f"{r['max_reservations_held']} <= {limit}, aupa! "
                          f"{r['got'].get('aupa!', 0)}, factor <= 5/9; dropped "
                          f"discover_reservations_full {dropped(st, 'discover_reservations_full')}"
                          f"; a new "
                          f"node admitted after {waited}",
                          r["max_reservations_held"] <= limit and set(r["got"]) <= {"aupa!"}
                          and r["got_bytes"] <= r["sent"]["bytes"] * 5 / 9
                          and took is not None and took <= INTERVAL + 0.5))

        # 4. hor?, hemen nago!, dale! and data from 20 addresses, inside windows and out.
        r, st, v, _ = run("strangers", rounds=6)
        drops = {k[8:]: n for k, n in st["stats"].items()
                 if k.startswith("dropped_") and k.endswith(("stranger", "reservation"))}
        out.append(Result("prototari", "hor?, hemen nago!, dale!, data from strangers",
                          r["sent"]["bytes"], r["got_bytes"],
                          f"{r['sent']['datagrams']} datagrams: answered {r['got'] or 'none'}; "
                          f"peers gained {len(v.events('joined', mine))}; dropped {drops}",
                          r["got_bytes"] == 0 and not v.events("joined", mine)))

        # 5. Garbage to both ports: random bytes, 65,507-byte datagrams, cut control strings.
        r, st, v, _ = run("garbage", random=20000, oversized=200, truncated_rounds=50)
        drops = {k[8:]: n for k, n in st["stats"].items() if k.startswith("dropped_") and n}
        out.append(Result("prototari", "garbage to both ports (random, 65,507 B, cut)",
                          r["sent"]["bytes"], r["got_bytes"],
                          f"{r['sent']['datagrams']:,} datagrams: the node read "
                          f"{st['stats'].get('datagrams_in', 0):,}, dropped {drops}; RSS "
                          f"{v.rss[0]} -> {v.rss[1]} KiB; running and broadcasting after: "
                          f"{v.alive and r['broadcasting_after']}",
                          v.alive and r["broadcasting_after"] and r["got_bytes"] == 0
                          and v.rss[1] - v.rss[0] < 4096))
    return out


def print_table(results: List[Result]) -> None:
    print(f"{'protocol':<9} {'vector':<48} {'sent B':>10} {'victim B':>10} {'factor':>7}  "
          "outcome")
    for r in results:
        factor = f"{r.factor:.3f}" if r.factor is not None else "-"
        mark = "ok  " if r.ok else "FAIL"
        print(f"{r.protocol:<9} {r.vector:<48} {r.attacker_bytes:>10,} {r.victim_bytes:>10,} "
              f"{factor:>7}  {mark} {r.outcome}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", help="also write one JSON line per vector")
    args = parser.parse_args(argv)
    why = spoof_available()
    spoofer = None if why else Spoofer()
    if why:
        print(f"note: {why}; the forged-source vectors are left out", file=sys.stderr)
    try:
        results = fyrehose_vectors(spoofer)
        why = netlab.available()
        if why:
            print(f"note: {why}; the prototari vectors are left out", file=sys.stderr)
        else:
            results += prototari_vectors()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        for p in RUNNING:  # nothing this script started outlives it
            if p.poll() is None:
                p.kill()
                p.wait()
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            for r in results:
                f.write(json.dumps({**asdict(r), "factor": r.factor, "time": time.time()}) + "\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
