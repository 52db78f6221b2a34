"""Measuring potato with real processes: the seed's A-G mesh and a 20-client mesh, over WebRTC
and TCP — set-up time, election time (p50/p99), and the CPU cost of relaying a message.

Each measurement is a JSON-lines record (kind "potato-mesh") that `pelotari trend` can load.
Clients listen on 127.0.0.k (k = 1, 2, ...), one port for all.
"""
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable

EXAMPLE = [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D"), ("C", "E"), ("D", "E"), ("D", "F"),
           ("D", "G"), ("E", "G")]
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Client:
    """One `pelotari potato node --json` process."""

    def __init__(self, name: str, host: str, port: int, transport: str, connect=()):
        args = [sys.executable, "-m", "pelotari", "potato", "node", "--name", name, "--listen",
                f"{host}:{port}", "--transport", transport, "--json"]
        for h, p in connect:
            args += ["--connect", f"{h}:{p}"]
        self.name = name
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        os.set_blocking(self.p.stdout.fileno(), False)
        self._buf = b""
        self.events: list[dict] = []

    def poll(self) -> None:
        try:
            chunk = os.read(self.p.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def command(self, line: str) -> None:
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()

    def cpu(self) -> float:
        """User + system CPU seconds so far."""
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()


def _wait(clients, done: Callable[[], bool], timeout: float) -> bool:
    sel = selectors.DefaultSelector()
    for c in clients:
        sel.register(c.p.stdout, selectors.EVENT_READ, c)
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            for key, _ in sel.select(max(0.0, min(0.05, end - time.monotonic()))):
                key.data.poll()
            if done():
                return True
        return done()
    finally:
        sel.close()


def random_edges(n: int, degree: float, seed: int) -> list[tuple[str, str]]:
    """A connected random mesh of n clients named c0.. with about `degree` peers each."""
    from pelotari.potato.simulate import random_mesh
    return sorted(random_mesh(n, degree, random.Random(seed)))


def run_mesh(edges, transport: str, port: int = 34440, elections: int = 20,
             broadcasts: int = 200, label: str = "") -> dict:
    """Start the mesh, measure set-up, elections and the relay cost; one record."""
    names = sorted({n for e in edges for n in e})
    host = {n: f"127.0.0.{k + 1}" for k, n in enumerate(names)}
    started = time.monotonic()
    clients: dict[str, Client] = {}
    try:
        for n in names:  # each connects to its peers that started before it
            earlier = [a if b == n else b for a, b in edges if n in (a, b) and
                       (a if b == n else b) in clients]
            clients[n] = Client(n, host[n], port, transport, [(host[m], port) for m in earlier])
            if not _wait([clients[n]], lambda c=clients[n]: any(
                    e["event"] == "listening" for e in c.events), 20):
                raise RuntimeError(f"{n} did not start")
        degree = {n: sum(n in e for e in edges) for n in names}
        everyone = list(clients.values())

        def connected():
            return all(len({e["peer"] for e in c.events if e["event"] == "peer_up"})
                       >= degree[c.name] for c in everyone)
        if not _wait(everyone, connected, 60):
            raise RuntimeError("the mesh did not connect")
        setup = time.monotonic() - started
        origin = clients[names[0]]
        took = []
        for _ in range(elections):
            mark = {c: len(c.events) for c in everyone}
            t0 = time.time()
            origin.command("propose")
            ok = _wait(everyone, lambda: any(e["event"] == "election_result"
                                             for e in origin.events[mark[origin]:]), 5)
            result = [e for e in origin.events[mark[origin]:] if e["event"] == "election_result"]
            if not ok or not result:
                raise RuntimeError("an election did not end")
            nxt = result[-1]["next"]
            _wait(everyone, lambda: all(any(e["event"] == "frame" and e.get("frame") == nxt
                                            for e in c.events[mark[c]:]) for c in everyone), 5)
            took.append((result[-1]["time"] - t0) * 1000)
        cpu0 = sum(c.cpu() for c in everyone)
        mark = {c: len(c.events) for c in everyone}
        for k in range(broadcasts):
            origin.command(f"broadcast relay-cost {k}")
        _wait(everyone, lambda: all(sum(1 for e in c.events[mark[c]:] if e["event"] == "message")
                                    >= broadcasts for c in everyone if c is not origin), 60)
        cpu = sum(c.cpu() for c in everyone) - cpu0
        took.sort()
        return {"kind": "potato-mesh", "where": "processes", "mesh": label,
                "transport": transport, "nodes": len(names), "edges": len(edges),
                "setup_s": setup, "elections": len(took),
                "election_p50_ms": took[len(took) // 2],
                "election_p99_ms": took[min(len(took) - 1, int(len(took) * 0.99))],
                "broadcasts": broadcasts,
                "cpu_us_per_delivery": cpu / (broadcasts * (len(names) - 1)) * 1e6}
    finally:
        for c in clients.values():
            c.stop()


def run(progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """The A-G mesh and a 20-client mesh (degree 4), over WebRTC and TCP."""
    out = []
    for label, edges in (("A-G", EXAMPLE), ("20 clients", random_edges(20, 4, 0))):
        for transport in ("webrtc", "tcp"):
            r = run_mesh(edges, transport, label=label)
            out.append(r)
            progress(f"{label} over {transport}: set-up {r['setup_s']:.2f} s, election "
                     f"p50 {r['election_p50_ms']:.1f} ms p99 {r['election_p99_ms']:.1f} ms, "
                     f"{r['cpu_us_per_delivery']:.0f} µs CPU per delivery")
    return out
