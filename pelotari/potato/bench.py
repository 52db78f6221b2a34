"""Measuring potato with real processes: the seed's A-G mesh and a 20-client mesh, over WebRTC
and TCP — set-up time, election time (p50/p99), and the CPU cost of relaying a message.

Each measurement is a JSON-lines record (kind "potato-mesh"); `pelotari trend` plots them
(potato-mesh.png) and sums them up per mesh and transport.
Clients listen on 127.0.0.k (k = 1, 2, ...), one port for all.
"""
import random
import time
from collections.abc import Callable

from pelotari.harness.procs import Children, JsonProcess, wait_all

EXAMPLE = [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D"), ("C", "E"), ("D", "E"), ("D", "F"),
           ("D", "G"), ("E", "G")]


def _client(name: str, host: str, port: int, transport: str, connect=()) -> JsonProcess:
    """One `pelotari potato node --json` process; `.name` is its client's name."""
    args = ["potato", "node", "--name", name, "--listen", f"{host}:{port}", "--transport",
            transport, "--json"]
    for h, p in connect:
        args += ["--connect", f"{h}:{p}"]
    proc = JsonProcess(args)
    proc.name = name
    return proc


def random_edges(n: int, degree: float, seed: int) -> list[tuple[str, str]]:
    """A connected random mesh of n clients named c0.. with about `degree` peers each."""
    from pelotari.potato.simulate import random_mesh
    return sorted(random_mesh(n, degree, random.Random(seed)))


def run_mesh(edges, transport: str, port: int = 34440, elections: int = 20,
             broadcasts: int = 200, label: str = "") -> dict:
    """Start the mesh, measure set-up, elections and the relay cost; one record. The clients
    are stopped however it ends (Children)."""
    names = sorted({n for e in edges for n in e})
    host = {n: f"127.0.0.{k + 1}" for k, n in enumerate(names)}
    started = time.monotonic()
    clients: dict[str, JsonProcess] = {}
    with Children():
        for n in names:  # each connects to its peers that started before it
            earlier = [a if b == n else b for a, b in edges if n in (a, b) and
                       (a if b == n else b) in clients]
            clients[n] = _client(n, host[n], port, transport, [(host[m], port) for m in earlier])
            if not wait_all([clients[n]], lambda c=clients[n]: any(
                    e["event"] == "listening" for e in c.events), 20):
                raise RuntimeError(f"{n} did not start")
        degree = {n: sum(n in e for e in edges) for n in names}
        everyone = list(clients.values())

        def connected():
            return all(len({e["peer"] for e in c.events if e["event"] == "peer_up"})
                       >= degree[c.name] for c in everyone)
        if not wait_all(everyone, connected, 60):
            raise RuntimeError("the mesh did not connect")
        setup = time.monotonic() - started
        origin = clients[names[0]]
        took = []
        for _ in range(elections):
            mark = {c: len(c.events) for c in everyone}
            t0 = time.time()
            origin.command("propose")
            ok = wait_all(everyone, lambda: any(e["event"] == "election_result"
                                             for e in origin.events[mark[origin]:]), 5)
            result = [e for e in origin.events[mark[origin]:] if e["event"] == "election_result"]
            if not ok or not result:
                raise RuntimeError("an election did not end")
            nxt = result[-1]["next"]
            wait_all(everyone, lambda: all(any(e["event"] == "frame" and e.get("frame") == nxt
                                            for e in c.events[mark[c]:]) for c in everyone), 5)
            took.append((result[-1]["time"] - t0) * 1000)
        cpu0 = sum(c.cpu() for c in everyone)
        mark = {c: len(c.events) for c in everyone}
        for k in range(broadcasts):
            origin.command(f"broadcast relay-cost {k}")
        wait_all(everyone, lambda: all(sum(1 for e in c.events[mark[c]:] if e["event"] == "message")
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


def run(progress: Callable[[str], None] = lambda s: None, port: int = 34440) -> list[dict]:
    """The A-G mesh and a 20-client mesh (degree 4), over WebRTC and TCP, on `port`."""
    out = []
    for label, edges in (("A-G", EXAMPLE), ("20 clients", random_edges(20, 4, 0))):
        for transport in ("webrtc", "tcp"):
            r = run_mesh(edges, transport, port=port, label=label)
            out.append(r)
            progress(f"{label} over {transport}: set-up {r['setup_s']:.2f} s, election "
                     f"p50 {r['election_p50_ms']:.1f} ms p99 {r['election_p99_ms']:.1f} ms, "
                     f"{r['cpu_us_per_delivery']:.0f} µs CPU per delivery")
    return out
