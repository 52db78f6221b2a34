"""Measuring the bully client: elections and clock sync, in the simulator and with real processes.

Every measurement is a JSON-lines record (kind "bully-election", "bully-sync" or
"bully-sim-sync") that `pelotari trend` loads. Real processes run `pelotari bully` on loopback
addresses 127.0.0.k (they share one kernel clock, so the true offset of every logical clock is
known: it is what the node reports as its offset from the system clock).
"""
import random
import signal
import subprocess
import time
from collections.abc import Callable

from pelotari.harness.procs import Children, JsonProcess, wait_all
from pelotari.bully.core import BullyNode, Config
from pelotari.sim import LinkSpec, Simulator

EPOCH = 1.7e9  # the simulator's true wall clock at t = 0
ELECTION_MESSAGES = ("AreYouAlive", "IAmLeader")


def textbook_messages(n: int) -> int:
    """The bully algorithm's worst case the issue compares with: n(n-1)/2."""
    return n * (n - 1) // 2


def _sim_network(n: int, config: Config, seed: int, spec: LinkSpec,
                 offsets: list[float] | None = None) -> Simulator:
    leader = ("10.0.1.250", 3333)
    sim = Simulator(seed=seed, default=spec)
    wall = lambda: EPOCH + sim.now
    sim.add(leader, lambda now: BullyNode(*leader, now, config=config, node_id=n, system=wall,
                                          clock_offset=offsets[0] if offsets else 0.0))
    for k in range(1, n):
        a = (f"10.0.1.{k}", 3333)
        off = offsets[k] if offsets else 0.0
        sim.call_at(0.005 * k, lambda a=a, off=off: sim.add(a, lambda now: BullyNode(
            *a, now, leader=leader, config=config, system=wall, clock_offset=off)))
    sim.run(0.005 * n + 3 * config.heartbeat)
    return sim


def sim_election(n: int, seed: int = 0, how: str = "kill",
                 spec: LinkSpec | None = None) -> dict:
    """Kill (or silence) the leader of a simulated network of n; how long until every survivor
    names the highest survivor, and how many election messages that took."""
    cfg = Config(heartbeat=1.0, peer_timeout=3.5, max_id=max(25, n))
    spec = spec or LinkSpec(delay=0.0002, jitter=0.0001)
    sim = _sim_network(n, cfg, seed, spec)
    leader = next(a for a, node in sim.nodes.items() if node.core.is_leader)
    cores = [node.core for a, node in sim.nodes.items() if a != leader]
    before = {id(c): (sum(c.sent[m] for m in ELECTION_MESSAGES), c.stats["answered_are_you_alive"])
              for c in cores}
    (sim.kill if how == "kill" else sim.crash)(leader)
    t0 = sim.now
    best = max(c.id for c in cores)
    ok = sim.run_until(lambda: all(c.leader is not None and c.leader.id == best for c in cores),
                       t0 + 30)
    elected = sim.now - t0
    detected = min((t for a, node in sim.nodes.items() if a != leader
                    for t, e in node.events if t >= t0 and type(e).__name__ == "ElectionStarted"),
                   default=sim.now) - t0
    sim.run(sim.now + 1)
    messages = sum(sum(c.sent[m] for m in ELECTION_MESSAGES) + c.stats["answered_are_you_alive"]
                   - sum(before[id(c)]) for c in cores)
    return {"kind": "bully-election", "where": "simulator", "how": how, "nodes": n,
            "seed": seed, "agreed": ok, "detect_s": detected,
            "elected_after_detect_s": elected - detected, "elected_s": elected,
            "messages": messages, "textbook_messages": textbook_messages(n)}


def sim_sync(n: int = 25, seed: int = 0, rtt_blind: bool = False, hour_off: bool = True,
             spread_s: float = 0.01) -> dict:
    """One sync round in a simulated network where each peer is 0.2 to 10 ms from the leader
    (the way back 20 % slower, 0.2 ms of jitter) and clocks start up to ±spread_s off the true
    time (one an hour off). Spread of the logical clocks once slewing is done, and how far they
    are from the true time."""
    rng = random.Random(seed)
    offsets = [rng.uniform(-spread_s, spread_s) for _ in range(n)]
    if hour_off:
        offsets[n // 2] = 3600.0
    # (the Java clients' averaging has no bound on a correction: nor has its imitation)
    cfg = Config(heartbeat=1.0, peer_timeout=3.5, rtt_blind=rtt_blind, max_id=max(25, n),
                 **({"max_correction": 1e9} if rtt_blind else {}))
    sim = _sim_network(n, cfg, seed, LinkSpec(delay=0.001, jitter=0.0002), offsets)
    leader = next(a for a, node in sim.nodes.items() if node.core.is_leader)
    for a in sim.nodes:  # each peer its own distance from the leader; the way back 20 % slower
        if a != leader:
            d = rng.uniform(0.0002, 0.010)
            sim.link(leader[0], a[0], LinkSpec(delay=d, jitter=0.0002), both_ways=False)
            sim.link(a[0], leader[0], LinkSpec(delay=d * 1.2, jitter=0.0002), both_ways=False)
    sim.do(leader, lambda c, now: c.start_sync(now))
    sim.run(sim.now + cfg.sync_timeout + 3.0)  # the round, then 128 ms at most to slew
    done = [e for _, e in sim.nodes[leader].events if type(e).__name__ == "SyncDone"][-1]
    # Clocks the round left alone (past max_correction: the hour-off one) are not in the spread.
    after = [node.core.clock.offset(sim.now) for node in sim.nodes.values()
             if node.core.id not in done.left_out]
    return {"kind": "bully-sim-sync", "where": "simulator", "method":
            "rtt-blind average" if rtt_blind else "berkeley", "nodes": n, "seed": seed,
            "hour_off": hour_off, "start_spread_s": max(offsets) - min(offsets),
            "left_alone": len(done.left_out),
            "spread_ms": (max(after) - min(after)) * 1000,
            "mean_error_ms": sum(after) / len(after) * 1000,
            "max_abs_error_ms": max(abs(a) for a in after) * 1000}


# ---- real processes --------------------------------------------------------------------------

def _proc(args: list[str]) -> JsonProcess:
    """One `pelotari bully ARGS --json` process."""
    return JsonProcess(["bully", *args, "--json"], stderr=subprocess.PIPE)


def _network(n: int, port: int, extra: list[str], offsets: list[float] | None = None):
    """A leader (ID 25) on 127.0.0.1 and n-1 peers on 127.0.0.2.. (port `port`); call it within
    `Children`, which stops them however the caller ends."""
    heartbeat = ["--heartbeat", "1"]
    procs = [_proc(["start", "--bind", f"127.0.0.1:{port}", *heartbeat, *extra,
                   *(["--clock-offset", repr(offsets[0])] if offsets else [])])]
    if not wait_all(procs, lambda: any(e.get("event") == "listening" for e in procs[0].events), 20):
        raise RuntimeError("the leader did not start: " + procs[0].p.stderr.read1().decode())
    for k in range(1, n):
        procs.append(_proc(["join", f"127.0.0.1:{port}", "--bind", f"127.0.0.{k + 1}:{port}",
                           *heartbeat, *extra,
                           *(["--clock-offset", repr(offsets[k])] if offsets else [])]))
    joined = lambda: all(any(e.get("event") == "joined" for e in p.events)
                         for p in procs[1:])
    if not wait_all(procs, joined, 60):
        raise RuntimeError(f"only {sum(any(e.get('event') == 'joined' for e in p.events) for p in procs[1:])}"
                           f" of {n - 1} peers joined")
    return procs


def real_election(n: int, port: int = 33330) -> dict:
    """SIGKILL the leader of n real processes; time until every survivor names the same new
    leader (the highest ID), from the kill and from the first survivor noticing."""
    with Children():
        procs = _network(n, port, [])
        wait_all(procs, lambda: False, 3.0)  # a few heartbeats: every book is complete
        leader, survivors = procs[0], procs[1:]
        ids = {p: next(e["id"] for e in p.events if e.get("event") == "joined") for p in survivors}
        best = max(ids.values())
        mark = {p: len(p.events) for p in survivors}
        t_kill = time.time()
        leader.stop(signal.SIGKILL)

        def named(p):
            return [e for e in p.events[mark[p]:] if e.get("event") == "new_leader"]
        agreed = wait_all(survivors, lambda: all(named(p) and named(p)[-1]["leader"]["id"] == best
                                              for p in survivors), 30)
        wait_all(survivors, lambda: False, 0.5)
        last = max(named(p)[-1]["t"] for p in survivors) if agreed else float("nan")
        starts = [e["t"] for p in survivors for e in p.events[mark[p]:]
                  if e.get("event") == "election_started"]
        first_start = min(starts) if starts else float("nan")
        for p in survivors:
            p.command("stats")
        wait_all(survivors, lambda: all(any(e.get("event") == "stats" for e in p.events[mark[p]:])
                                     for p in survivors), 10)
        messages = 0
        for p in survivors:
            st = [e for e in p.events[mark[p]:] if e.get("event") == "stats"][-1]
            messages += sum(st.get("sent", {}).get(m, 0) for m in ELECTION_MESSAGES)
            messages += st.get("stats", {}).get("answered_are_you_alive", 0)
        return {"kind": "bully-election", "where": "processes", "how": "SIGKILL", "nodes": n,
                "agreed": agreed, "elected_s": last - t_kill,
                "detect_s": first_start - t_kill, "elected_after_detect_s": last - first_start,
                "messages_total_after_kill": messages, "textbook_messages": textbook_messages(n)}


def real_sync(n: int = 25, port: int = 33340, seed: int = 0, spread_s: float = 10.0) -> dict:
    """n real processes whose logical clocks start up to ±spread_s off; one sync round; the
    spread of their offsets from the (shared) system clock right after it and once slewed."""
    rng = random.Random(seed)
    offsets = [rng.uniform(-spread_s, spread_s) for _ in range(n)]
    with Children():
        procs = _network(n, port, [], offsets)
        wait_all(procs, lambda: False, 3.0)
        leader = procs[0]
        mark = len(leader.events)
        leader.command("sync")
        if not wait_all(procs, lambda: any(e.get("event") == "sync_done"
                                        for e in leader.events[mark:]), 15):
            raise RuntimeError("the sync round did not end")

        def read():
            marks = {p: len(p.events) for p in procs}
            for p in procs:
                p.command("time")
            wait_all(procs, lambda: all(any(e.get("event") == "time" for e in p.events[marks[p]:])
                                     for p in procs), 10)
            return [[e for e in p.events[marks[p]:] if e.get("event") == "time"][-1]["offset"]
                    for p in procs]
        right_after = read()
        wait_all(procs, lambda: False, 2.0)  # a slew of at most 128 ms takes 1.5 s
        settled = read()
        done = [e for e in leader.events[mark:] if e.get("event") == "sync_done"][-1]
        return {"kind": "bully-sync", "where": "processes", "nodes": n, "seed": seed,
                "start_spread_s": max(offsets) - min(offsets),
                "spread_right_after_ms": (max(right_after) - min(right_after)) * 1000,
                "spread_ms": (max(settled) - min(settled)) * 1000,
                "outliers": len(done.get("outliers", [])),
                "unanswered": len(done.get("unanswered", []))}


class _Records(list):
    """A list that stamps each record with the run's environment."""

    def __init__(self, env: dict):
        super().__init__()
        self.env = env

    def append(self, rec: dict) -> None:
        super().append({**rec, "env": self.env})


def run(sizes=(5, 10, 25), sync_nodes: int = 25, real: bool = True, seeds: int = 5,
        progress: Callable[[str], None] = lambda s: None, port: int = 33330) -> list[dict]:
    """Every bully measurement, as records (each with the environment, as `pelotari bench`'s);
    the processes' elections on `port`, their sync on port + 10."""
    from pelotari.harness.results import environment
    env = environment()
    out = _Records(env)
    for n in sizes:
        for how in ("kill", "crash"):
            for seed in range(seeds):
                out.append(sim_election(n, seed, how))
        progress(f"simulated elections, {n} nodes")
    for seed in range(seeds):
        for blind in (False, True):
            out.append(sim_sync(sync_nodes, seed, rtt_blind=blind))
    progress("simulated sync, Berkeley and RTT-blind")
    if real:
        for n in sizes:
            out.append(real_election(n, port))
            progress(f"election, {n} processes: {out[-1]['elected_s'] * 1000:.0f} ms")
        out.append(real_sync(sync_nodes, port + 10))
        progress(f"sync, {sync_nodes} processes: spread {out[-1]['spread_ms']:.3f} ms")
    return list(out)
