"""Potato meshes too large for processes, in pelotari.sim: broadcast reach, redundancy, hops and
latency; election time, messages per edge and whether every client was counted once.

Each measurement is a JSON-lines record (kind "potato-sim-broadcast" or "potato-sim-election");
`pelotari trend` plots them (potato.png) and sums them up per network condition.
"""
import random
from statistics import median

from pelotari.potato.core import Config, Delivered, ElectionResult, PotatoNode
from pelotari.sim import LinkSpec, Simulator


class SimCore:
    """A potato core behind the simulator's datagram interface: a peer is (name, 1)."""

    def __init__(self, core: PotatoNode):
        self.core = core

    def receive_datagram(self, data, source, now):
        self.core.receive(source[0], data, now)

    def handle_timer(self, now):
        self.core.handle_timer(now)

    def get_timer(self):
        return self.core.get_timer()

    def datagrams_to_send(self):
        return [(data, (peer, 1)) for peer, data in self.core.messages_to_send()]

    def next_event(self):
        return self.core.next_event()


def random_mesh(n: int, degree: float, rng: random.Random) -> set[tuple[str, str]]:
    """A connected random mesh of n clients with about `degree` peers each: a random tree, then
    random extra edges."""
    names = [f"c{k}" for k in range(n)]
    order = names[:]
    rng.shuffle(order)
    edges = set()
    for k in range(1, n):
        a, b = order[k], order[rng.randrange(k)]
        edges.add((min(a, b), max(a, b)))
    target = int(n * degree / 2)
    while len(edges) < target:
        a, b = rng.sample(names, 2)
        edges.add((min(a, b), max(a, b)))
    return edges


def build(n: int, degree: float, seed: int, loss: float = 0.0, delay: float = 0.001,
          jitter: float = 0.0005, config: Config | None = None):
    """The simulator, the mesh's edges, and the cores by name."""
    rng = random.Random(seed)
    edges = random_mesh(n, degree, rng)
    sim = Simulator(seed=seed, default=LinkSpec(delay=delay, jitter=jitter, loss=loss))
    cores = {}
    for k in range(n):
        name = f"c{k}"
        cores[name] = PotatoNode(name, 0.0, config)
        sim.add((name, 1), lambda now, c=cores[name]: SimCore(c))
    for a, b in edges:
        cores[a].peer_up(b, 0.0)
        cores[b].peer_up(a, 0.0)
    for c in cores.values():
        c.next_event()
        while c.next_event() is not None:
            pass
    return sim, edges, cores


def _component(origin: str, edges, side: set[str] | None) -> set[str]:
    """Clients the origin can reach (itself included), over edges a partition left."""
    adj: dict[str, list[str]] = {}
    for a, b in edges:
        if side is None or (a in side) == (b in side):
            adj.setdefault(a, []).append(b)
            adj.setdefault(b, []).append(a)
    seen, todo = {origin}, [origin]
    while todo:
        for nb in adj.get(todo.pop(), ()):
            if nb not in seen:
                seen.add(nb)
                todo.append(nb)
    return seen


def _cut(sim: Simulator, edges, cores, rng: random.Random) -> set[str]:
    """Partition: a random half of the clients loses every edge to the other half."""
    names = sorted(cores)
    side = set(rng.sample(names, len(names) // 2))
    sim.partition({(n) for n in side}, {n for n in names if n not in side})
    for a, b in edges:
        if (a in side) != (b in side):
            cores[a].peer_down(b, sim.now)
            cores[b].peer_down(a, sim.now)
    return side


def broadcast(n: int = 1000, degree: float = 6, loss: float = 0.0, partition: bool = False,
              seed: int = 0) -> dict:
    """One broadcast from a random client: the share it reached, relative message redundancy
    RMR = m / (r - 1) - 1 (m messages, r the clients it could reach: n without a partition),
    the hop count of the last delivery and delivery latency."""
    sim, edges, cores = build(n, degree, seed, loss)
    rng = random.Random(seed + 1)
    reachable = n
    origin = f"c{rng.randrange(n)}"
    if partition:
        side = _cut(sim, edges, cores, rng)
        reachable = len(_component(origin, edges, side))
    before = sum(c.stats["sent_broadcast"] for c in cores.values())
    t0 = sim.now
    ident = sim.do((origin, 1), lambda c, now: c.core.broadcast({"x": 1}, now))
    sim.run(t0 + 5)
    got = [(t - t0, e.hops) for name in cores if name != origin
           for t, e in sim.nodes[(name, 1)].events
           if isinstance(e, Delivered) and e.identifier == ident]
    m = sum(c.stats["sent_broadcast"] for c in cores.values()) - before
    lat = sorted(t for t, _ in got)
    return {"kind": "potato-sim-broadcast", "where": "simulator", "nodes": n,
            "degree": 2 * len(edges) / n, "loss": loss, "partition": partition, "seed": seed,
            "reached": len(got) / (n - 1), "reached_of_reachable": len(got) / (reachable - 1),
            "messages": m, "rmr": m / max(1, reachable - 1) - 1,
            "last_hops": max((h for _, h in got), default=0),
            "latency_p50_ms": lat[len(lat) // 2] * 1000 if lat else None,
            "latency_p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat
            else None}


ELECTION_TYPES = ("direct_election_request", "indirect_election_request",
                  "direct_election_response", "indirect_election_response")


def election(n: int = 1000, degree: float = 6, loss: float = 0.0, partition: bool = False,
             seed: int = 0) -> dict:
    """One election from a random client where everybody shares its frame: how long until its
    result, election messages per edge, and whether every client was counted exactly once."""
    sim, edges, cores = build(n, degree, seed, loss)
    rng = random.Random(seed + 2)
    origin = f"c{rng.randrange(n)}"
    component, live_edges = set(cores), edges
    if partition:
        side = _cut(sim, edges, cores, rng)
        component = _component(origin, edges, side)
        live_edges = [(a, b) for a, b in edges if a in component and b in component]
    reachable = len(component)
    t0 = sim.now
    sim.do((origin, 1), lambda c, now: c.core.propose(now))
    sim.run_until(lambda: bool([e for _, e in sim.nodes[(origin, 1)].events
                                if isinstance(e, ElectionResult)]), t0 + 5)
    took = sim.now - t0
    sim.run(sim.now + 1)
    (result,) = [e for _, e in sim.nodes[(origin, 1)].events if isinstance(e, ElectionResult)]
    taken = sum(cores[c].frame == result.next for c in component if c != origin)
    msgs = sum(c.stats[f"sent_{t}"] for c in cores.values() for t in ELECTION_TYPES)
    counted = int(result.yes - 1.5) + result.no
    return {"kind": "potato-sim-election", "where": "simulator", "nodes": n,
            "degree": 2 * len(edges) / n, "loss": loss, "partition": partition, "seed": seed,
            "elected_ms": took * 1000, "won": result.won, "yes": result.yes, "no": result.no,
            "counted": counted, "reachable_others": reachable - 1,
            "counted_once": counted == reachable - 1,
            "messages": msgs, "edges": len(live_edges),
            "messages_per_edge": msgs / len(live_edges),  # over the edges the origin reaches
            "took_frame": taken / max(1, reachable - 1)}


def run(n: int = 1000, degree: float = 6, seeds: int = 3, progress=lambda s: None) -> list[dict]:
    """The issue's measurements: with and without 1 % loss and a partition."""
    out = []
    for loss, part in ((0.0, False), (0.01, False), (0.0, True)):
        for seed in range(seeds):
            out.append(broadcast(n, degree, loss, part, seed))
            out.append(election(n, degree, loss, part, seed))
        b = [r for r in out if r["kind"] == "potato-sim-broadcast" and r["loss"] == loss
             and r["partition"] == part]
        e = [r for r in out if r["kind"] == "potato-sim-election" and r["loss"] == loss
             and r["partition"] == part]
        progress(f"loss {loss:.0%}, partition {part}: reached "
                 f"{median(r['reached_of_reachable'] for r in b):.1%}, RMR "
                 f"{median(r['rmr'] for r in b):.2f}, election "
                 f"{median(r['elected_ms'] for r in e):.0f} ms, "
                 f"{median(r['messages_per_edge'] for r in e):.2f} msgs/edge")
    return out
