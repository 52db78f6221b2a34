"""Swarms too large for processes, in pelotari.sim: N nodes join through a few bootstrap nodes;
how long until every node holds its target of direct connections, what GetConnections and
Connections cost per node, and how long the survivors take to get back to target after a crash
of a share of the nodes.

Each measurement is a JSON-serialisable record of kind "swarm-sim" (phase "join" or "crash"),
with the traffic per node (counts and bytes), CPU seconds and peak RSS. The core simulates
11,000-24,000 datagrams per CPU second with the Cython table and C MACs: 10,000 nodes take about
8 CPU minutes and 3.5 GB, most of it the preallocated tables (docs/protocols/swarm.md, "Measured
(simulator, pure Python)").
"""
import random
import resource
import time
from dataclasses import replace

from pelotari.sim import LinkSpec, Simulator
from pelotari.swarm import wire
from pelotari.swarm.core import Config, SwarmNode
from pelotari.swarm.table import IMPLEMENTATION as TABLE_IMPLEMENTATION
from pelotari.swarm.wire import Keyring

WALL = 1_800_000_000.0
PORT = 21452


def address(k: int) -> tuple[str, int]:
    """Node k's address: 10.x.y.z."""
    return (f"10.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}", PORT)


def bootstrap_config(config: Config, n: int) -> Config:
    """A bootstrap node's config in a swarm of n: room and a Pong budget for the whole swarm.

    Every node dials every bootstrap and holds it as direct (connect()), so a bootstrap holds
    the whole swarm as vague connections (what the big table is for: with less room it evicts,
    Resets and is dialled again), and every node pings it every ping_interval: n / 5 Pings a
    second, 2,000 at 10,000 nodes. With the default global budget (1,024 a slot) half of them
    went unanswered, nodes demoted the bootstraps after 3 misses, promoted them again, and
    10,000 nodes never converged. A budget of n a slot never binds (each connection claims at
    most one answer a slot anyway): the bootstrap is provisioned for its swarm."""
    return replace(config, capacity=max(config.capacity, n + 16),
                   vague_pongs_per_slot=max(config.vague_pongs_per_slot, n))


def build(n: int, bootstraps: int = 3, seed: int = 0, loss: float = 0.0, delay: float = 0.010,
          jitter: float = 0.010, join_spread: float | None = None,
          config: Config | None = None):
    """The simulator and the node addresses; node k joins at k * spread / n and dials every
    bootstrap (the first `bootstraps` nodes)."""
    config = config or Config(capacity=4096)
    keyring = Keyring([random.Random(seed).randbytes(32)])
    # Nothing here reads the cores' events: not keeping them is most of the memory of 10,000.
    sim = Simulator(seed=seed, default=LinkSpec(delay=delay, jitter=jitter, loss=loss),
                    keep_events=False)
    addrs = [address(k) for k in range(n)]
    boots = addrs[:bootstraps]
    spread = n * 0.002 if join_spread is None else join_spread

    boot_config = bootstrap_config(config, n)

    def join(k: int, a) -> None:
        cfg = boot_config if k < bootstraps else config
        sim.add(a, lambda now: SwarmNode(a, keyring, now, cfg, wall_offset=WALL,
                                         secret=(seed * 1_000_003 + k).to_bytes(32, "big"),
                                         seed=seed * 1_000_003 + k))
        for b in boots:
            if b != a:
                sim.do(a, lambda c, now, b=b: c.connect(b, now))

    for k, a in enumerate(addrs):
        sim.call_at(k * spread / n, lambda k=k, a=a: join(k, a))
    return sim, addrs


def _short(sim, addrs, target, dead=frozenset()) -> int:
    """Live nodes (or nodes not joined yet) holding fewer than target direct connections to live
    nodes. Asked every simulated second: the count first, addresses only after a crash."""
    short = 0
    nodes = sim.nodes
    for a in addrs:
        node = nodes.get(a)
        if node is None:
            short += 1
        elif not node.crashed:
            core = node.core
            if len(core.table.direct) < target or (
                    dead and sum(d not in dead for d in core.direct()) < target):
                short += 1
    return short


def _wait(sim, addrs, target, limit, period=1.0, dead=frozenset()) -> float | None:
    """Run until every live node holds `target` direct connections to live nodes; when (None:
    not by limit)."""
    while sim.now < limit:
        sim.run(sim.now + period)
        if _short(sim, addrs, target, dead) == 0:
            return sim.now
    return None


TRAFFIC = ("sent_GetConnections", "sent_bytes_GetConnections", "sent_Connections",
           "sent_bytes_Connections", "sent_bytes", "sent_Ping", "sent_Connect", "sent_Reset",
           "learned")


def _peak_rss_mb() -> float:
    """This process's peak resident set so far, MB (Linux: ru_maxrss is in KB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _traffic(sim, addrs) -> dict:
    live = [sim.nodes[a].core for a in addrs if a in sim.nodes and not sim.nodes[a].crashed]
    total = {k: sum(c.stats[k] for c in live) for k in TRAFFIC}
    direct = sorted(len(c.table.direct) for c in live)
    return {f"{k}_per_node": v / max(1, len(live)) for k, v in total.items()} | {
        "direct_min": direct[0] if direct else 0, "direct_median": direct[len(direct) // 2]
        if direct else 0, "direct_max": direct[-1] if direct else 0}


def run_one(n: int = 10_000, bootstraps: int = 3, seed: int = 0, loss: float = 0.0,
            crash: float = 0.2, limit: float = 600.0, config: Config | None = None,
            on_record=lambda record: None) -> list[dict]:
    """Join n nodes, then crash a share of them: two records (each also given to on_record
    as soon as its phase ends)."""
    config = config or Config(capacity=4096)
    target = config.target_direct
    cpu = time.process_time()
    sim, addrs = build(n, bootstraps, seed, loss, config=config)
    done = _wait(sim, addrs, target, limit)
    boot = bootstrap_config(config, n)
    base = {"kind": "swarm-sim", "where": "simulator", "nodes": n, "bootstraps": bootstraps,
            "seed": seed, "loss": loss, "target_direct": target, "capacity": config.capacity,
            "max_known": config.max_known, "join_spread": n * 0.002,
            "bootstrap_capacity": boot.capacity,
            "bootstrap_vague_pongs_per_slot": boot.vague_pongs_per_slot,
            "table": TABLE_IMPLEMENTATION, "macs": wire.IMPLEMENTATION}
    join = base | {"phase": "join", "converged": done is not None,
                   "seconds": done, "last_joined": (n - 1) * 0.002,
                   "short": _short(sim, addrs, target),
                   "datagrams": sim.stats.sent, "bytes": sim.stats.bytes_sent,
                   "cpu_seconds": time.process_time() - cpu, "peak_rss_mb": _peak_rss_mb()}
    join |= _traffic(sim, addrs)
    on_record(join)
    out = [join]
    if crash and done is not None:
        rng = random.Random(seed + 1)
        victims = rng.sample(addrs[bootstraps:], int(n * crash))
        dead = frozenset(victims)
        before = {k: sum(sim.nodes[a].core.stats[k] for a in addrs if a not in dead)
                  for k in TRAFFIC}
        t0, sent0, bytes0, cpu = sim.now, sim.stats.sent, sim.stats.bytes_sent, time.process_time()
        for a in victims:
            sim.crash(a)
        back = _wait(sim, addrs, target, t0 + limit, dead=dead)
        alive = [a for a in addrs if a not in dead]
        rec = base | {"phase": "crash", "crashed": len(victims), "converged": back is not None,
                      "seconds": None if back is None else back - t0,
                      "short": _short(sim, addrs, target, dead),
                      "datagrams": sim.stats.sent - sent0, "bytes": sim.stats.bytes_sent - bytes0,
                      "cpu_seconds": time.process_time() - cpu, "peak_rss_mb": _peak_rss_mb()}
        for k, v in before.items():  # what the survivors sent during the phase
            rec[f"{k}_per_node"] = (sum(sim.nodes[a].core.stats[k] for a in alive) - v) / len(alive)
        direct = sorted(len(sim.nodes[a].core.table.direct) for a in alive)
        rec |= {"direct_min": direct[0], "direct_median": direct[len(direct) // 2],
                "direct_max": direct[-1]}
        rec["direct_to_crashed"] = sum(1 for a in alive for d in sim.nodes[a].core.direct()
                                       if d in dead)
        on_record(rec)
        out.append(rec)
    return out


def run(n: int = 10_000, seeds: int = 1, loss: float = 0.0, progress=lambda s: None,
        **kw) -> list[dict]:
    """The issue's measurements for each seed."""
    out = []
    for seed in range(seeds):
        def show(r):
            alive = r["nodes"] - r.get("crashed", 0)
            progress(f"{r['phase']}: {alive} of {r['nodes']} nodes, converged {r['converged']} "
                     f"in {r['seconds']} s simulated, {r['cpu_seconds']:.0f} s CPU")

        out += run_one(n, seed=seed, loss=loss, on_record=show, **kw)
    return out


if __name__ == "__main__":  # python -m pelotari.swarm.simulate N
    import json
    import sys

    for rec in run(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000,
                   progress=lambda s: print(s, file=sys.stderr, flush=True)):
        print(json.dumps(rec), flush=True)
