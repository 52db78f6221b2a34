"""Swarm's scale figures, side by side for the pure-Python stack (PELOTARI_PURE_PYTHON=1: the
array-backed table, hashlib MACs) and the Cython one (fastpath.swarmtable, fastpath.swarmmac):

* bytes per connection: RSS growth from before a table of 100,000 is made until it holds
  100,000 distinct (127.x.y.z, port) connections (goal ≤ 64, docs/protocols/swarm.md);
* Ping → Pong per second through the sans-IO core (`SwarmNode.receive_datagram` and
  `datagrams_to_send`, no sockets): signed Pings from established connections, each verified,
  looked up, answered and signed. The rate limits are lifted for it (they cap vague Pongs at
  1,024 a slot by design): this measures the path's cost, not the limits. Goal ≥ 100,000 per
  second per core for the node's datagram path (issue 14: to reach in C).
* sockets: a real node (pelotari.swarm.node.Node, a fresh interpreter, one UDP socket on
  127.0.0.1) and the load generator (fastpath.swarmload, in this process) with `peers` distinct
  peers (127.2.x.y addresses x 16 ports): every peer does the real handshake, the node must
  hold them all as established connections, then Pings are offered for a few seconds and the
  Pongs that pass the MAC and echo a Ping are counted. Reported: Pongs/s, Pings/s offered,
  loss, the node process's CPU seconds (user + system) and Pongs per node CPU
  second ("per core"). The node's rate limits are lifted for it, as above; its once-per-slot
  claim stays (one Pong per connection per slot), so `slot` is 0.1 s: 50,000 peers may then be
  answered up to 500,000 times a second, and every peer's Pings are kept at least two slots
  apart (peers / rate >= 2 x slot).

Each measurement runs in a fresh interpreter (sockets: the node does; the generator runs in
this one, on the other core of a 2-CPU machine). Records are JSON lines of kind "swarm-bench".
"""
import json
import os
import resource
import select
import subprocess
import sys
import time
from typing import Callable, Optional

N_TABLE = 100_000

_MEMORY = r"""
import gc, json, sys
import psutil
def rss():
    return psutil.Process().memory_info().rss
from pelotari.swarm import table
n = int(sys.argv[1])
def address(k):
    return ("127.%d.%d.%d" % (k >> 16 & 0xFF, k >> 8 & 0xFF, k & 0xFF), 1024 + k % 60000)
address(0)
gc.collect()
gc.disable()
before = rss()
t = table.ConnectionTable(n)
for k in range(n):
    t.add(address(k), k)
after = rss()
assert len(t) == n and t.lookup(address(n // 2)) == n // 2
print(json.dumps({"implementation": table.IMPLEMENTATION, "connections": n,
                  "rss_growth": after - before, "bytes_per_connection": (after - before) / n}))
"""

_PINGPONG = r"""
import json, sys, time
from pelotari.swarm import core, table, wire
conns, rounds = int(sys.argv[1]), int(sys.argv[2])
kr = wire.Keyring([bytes(range(32))])
WALL = 1_800_000_000.0
cfg = core.Config(vague_pongs_per_slot=10**9, ping_burst=10**6, ping_refill=0.001,
                  capacity=conns + 16, target_direct=0, promote_pings_per_slot=0)
node = core.SwarmNode(("127.0.0.1", 21452), kr, 0.0, cfg, wall_offset=WALL, seed=1)
def sign(msg, now):
    return wire.encode(msg, kr, WALL + now)
peers = [("127.1.%d.%d" % (k >> 8, k & 0xFF), 30000 + k % 1000) for k in range(conns)]
for k, src in enumerate(peers):  # the handshake, as a peer does it (500 a slot: within limits)
    at = float(k // 500)
    node.receive_datagram(sign(wire.connect(0, k + 1), at), src, at)
    (answer, _), = node.datagrams_to_send()
    token = wire.decode(answer, kr, WALL + at).token
    node.receive_datagram(sign(wire.connect(0, k + 1, ack=True, echo=token), at), src, at)
    node.datagrams_to_send()
assert sum(c.status == "vague" for c in node.connections()) == conns
start = float(conns // 500 + 1)
pings = [(sign(wire.ping(k + 7), start), src) for k, src in enumerate(peers)]
receive, drain = node.receive_datagram, node.datagrams_to_send
answered = 0
t0 = time.perf_counter()
for r in range(rounds):
    now = start + r  # a new slot each round: one claim per connection per slot
    for data, src in pings:
        receive(data, src, now)
    answered += len(drain())
took = time.perf_counter() - t0
assert answered == conns * rounds, (answered, node.stats)  # every Ping answered: no limit hit
print(json.dumps({"implementation": table.IMPLEMENTATION, "mac": wire.IMPLEMENTATION,
                  "connections": conns, "pings": conns * rounds, "pongs": answered,
                  "seconds": took, "pongs_per_second": answered / took,
                  "us_per_ping": took / (conns * rounds) * 1e6}))
"""


def _child(code: str, args, pure: bool) -> dict:
    env = dict(os.environ)
    env.pop("PELOTARI_PURE_PYTHON", None)
    if pure:
        env["PELOTARI_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                         text=True, check=True, env=env).stdout
    return json.loads(out)


def memory(pure: bool, n: int = N_TABLE) -> dict:
    """Bytes per connection of a table filled to n (a fresh interpreter)."""
    return _child(_MEMORY, [n], pure)


def pingpong(pure: bool, connections: int = 2000, rounds: int = 10) -> dict:
    """Ping → Pong through the sans-IO core (a fresh interpreter)."""
    return _child(_PINGPONG, [connections, rounds], pure)


# ---- sockets -----------------------------------------------------------------------------------

SLOT = 0.1  # s: the node's slot for the sockets measure (one Pong per connection per slot)
PEERS = 50_000
RATE = 150_000.0  # Pings offered per second
SECONDS = 5.0

# The node child: a real Node on 127.0.0.1 (the datagram path node.py picks), the rate limits
# lifted; it prints one JSON line when ready, then answers "count" (its connections by status
# and its counters) and "quit" on stdin.
_NODE = r"""
import asyncio, collections, json, os, signal, sys
from pelotari.swarm import core, node, table, wire
# Ctrl-C at the terminal reaches the whole group: the bench stops this node itself (quit, or
# the end of its stdin), so the child neither dies halfway nor prints a traceback.
signal.signal(signal.SIGINT, signal.SIG_IGN)
peers, slot = int(sys.argv[1]), float(sys.argv[2])
kr = wire.Keyring.from_env()
cfg = core.Config(slot=slot, vague_pongs_per_slot=10**9, ping_burst=10**6, ping_refill=0.001,
                  connect_answers_per_slot=10**9, resets_per_slot=10**9, capacity=peers + 16,
                  target_direct=0, promote_pings_per_slot=0)
async def main():
    n = await node.Node.start("127.0.0.1", 0, kr, cfg)
    loop = asyncio.get_running_loop()
    fields = ("slot", "vague_pongs_per_slot", "ping_burst", "ping_refill",
              "connect_answers_per_slot", "resets_per_slot", "capacity", "target_direct",
              "promote_pings_per_slot")
    fast = n.fast_path
    print(json.dumps({"port": n.address[1], "pid": os.getpid(), "table": table.IMPLEMENTATION,
                      "mac": wire.IMPLEMENTATION,
                      "datagram_path": "C (fastpath.swarmpath)" if fast else "Python",
                      "config": {f: getattr(cfg, f) for f in fields}}), flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        if line.strip() == b"count":
            status = collections.Counter(c.status for c in n.connections())
            print(json.dumps({"status": status, "stats": dict(n.stats)}), flush=True)
        elif line.strip() == b"quit":
            break
    await n.close()
asyncio.run(main())
"""


def _env(pure: bool) -> dict:
    env = dict(os.environ)
    env.pop("PELOTARI_PURE_PYTHON", None)
    if pure:
        env["PELOTARI_PURE_PYTHON"] = "1"
    return env


class NodeChild:
    """The node in a fresh interpreter (killed by close(), whatever happens)."""

    def __init__(self, pure: bool, peers: int, slot: float, keys_hex: str,
                 timeout: float = 30.0):
        env = _env(pure)
        env["PELOTARI_SWARM_KEYS"] = keys_hex
        self.proc = subprocess.Popen([sys.executable, "-c", _NODE, str(peers), str(slot)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     text=True)
        try:
            self.info = self._line(timeout)
        except BaseException:
            self.close()
            raise
        self.pid = self.info["pid"]
        self.port = self.info["port"]

    def _line(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            code = self.proc.poll()
            raise RuntimeError("the swarm node child " + (
                f"exited ({code})" if code is not None else f"did not answer in {timeout} s"))
        return json.loads(line)

    def count(self, timeout: float = 60.0) -> dict:
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return self._line(timeout)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the node process."""
        import psutil

        times = psutil.Process(self.proc.pid).cpu_times()
        return times.user + times.system

    def schedstat(self) -> tuple:
        """(seconds on a CPU, seconds runnable but waiting for one) of the node's threads
        (/proc/PID/task/*/schedstat): the second says how much another process held its
        core."""
        # by hand: psutil has no run-queue wait (schedstat's second field)
        run = wait = 0
        base = f"/proc/{self.proc.pid}/task"
        for task in os.listdir(base):
            try:
                with open(f"{base}/{task}/schedstat") as f:
                    a, b, _ = f.read().split()
            except (OSError, ValueError):
                continue
            run, wait = run + int(a), wait + int(b)
        return run / 1e9, wait / 1e9

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(2)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def udp_drops(ports) -> int:
    """The kernel's receive drops (/proc/net/udp, full receive buffer) of the IPv4 UDP sockets
    on these local ports."""
    # by hand: psutil's net_connections() has no per-socket drop count
    ports = set(ports)
    total = 0
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            cols = line.split()
            if int(cols[1].split(":")[1], 16) in ports:
                total += int(cols[-1])
    return total


def sockets(pure: bool, peers: int = PEERS, seconds: float = SECONDS, rate: float = RATE,
            slot: float = SLOT, connect_rate: float = 10_000.0, connect_timeout: float = 120.0,
            ports: int = 16, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Ping -> Pong over real loopback sockets: a node child and `peers` generated peers."""
    from fastpath.swarmload import SwarmLoad  # the generator is Cython: both stacks use it
    from pelotari.swarm import wire

    if peers / rate < 2 * slot:
        raise ValueError(f"{rate:,.0f} Pings/s over {peers:,} peers pings each every "
                         f"{peers / rate:.3f} s: under two slots ({2 * slot} s); the node "
                         "answers a connection once per slot")
    key = wire.Keyring.generate()
    keyring = wire.Keyring([key])
    name = "pure Python" if pure else "Cython"
    node: Optional[NodeChild] = None
    gen = None
    try:
        node = NodeChild(pure, peers, slot, key.hex())
        gen = SwarmLoad("127.0.0.1", node.port, keyring, peers, ports=ports)
        progress(f"{name}: node pid {node.pid} on 127.0.0.1:{node.port} (table "
                 f"{node.info['table']}, MACs {node.info['mac']}); {peers:,} peers from "
                 f"{gen.addresses:,} addresses x {ports} ports")
        c = gen.connect(rate=connect_rate, timeout=connect_timeout, retry=max(1.0, 3 * slot))
        progress(f"{name}: {c['ready']:,} of {peers:,} peers ready in {c['seconds']:.1f} s "
                 f"({c['connects_sent']:,} Connects, {c['resets']:,} Resets)")
        before = node.count()
        established = sum(v for k, v in before["status"].items() if k in ("vague", "direct"))
        if c["ready"] != peers or established != peers:
            raise RuntimeError(f"{c['ready']:,} peers ready, {established:,} established in the "
                               f"node ({before['status']}), of {peers:,}")
        time.sleep(2 * slot)  # the confirming Pings' slots are over
        drops0 = udp_drops([node.port])
        gen_drops0 = udp_drops(gen.ports)
        load = os.getloadavg()[0]  # the machine's: other processes take cores from both
        cpu0, self0 = node.cpu_seconds(), resource.getrusage(resource.RUSAGE_SELF)
        sched0 = node.schedstat()
        r = gen.run(rate, seconds, drain=0.5, min_gap=2 * slot)
        cpu1, self1 = node.cpu_seconds(), resource.getrusage(resource.RUSAGE_SELF)
        sched1 = node.schedstat()
        drops = udp_drops([node.port]) - drops0
        gen_drops = udp_drops(gen.ports) - gen_drops0
        after = node.count()
    finally:
        if gen is not None:
            gen.close()
        if node is not None:
            node.close()
    node_cpu = cpu1 - cpu0
    gen_cpu = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
    stats = after["stats"]
    lat = r["latency"]
    rec = {
        "implementation": node.info["table"], "mac": node.info["mac"],
        "datagram_path": node.info["datagram_path"], "peers": peers,
        "addresses": gen.addresses, "ports": ports, "established": established,
        "connect_seconds": c["seconds"], "connect_resends": c["connects_sent"] - peers,
        "seconds": r["seconds"], "rate": rate, "pings": r["pings_sent"], "pongs": r["pongs"],
        "offered_per_second": r["offered_per_second"], "pongs_per_second": r["pongs_per_second"],
        "loss": r["loss"], "node_cpu_seconds": node_cpu,
        "pongs_per_cpu_second": r["pongs"] / node_cpu if node_cpu > 0 else None,
        "node_runqueue_wait_seconds": sched1[1] - sched0[1], "loadavg_1m": load,
        "generator_cpu_seconds": gen_cpu, "generator_behind": r["behind"],
        "node_receive_drops": drops,
        "generator_receive_drops": gen_drops, "send_dropped": r["send_dropped"],
        "bad_mac": r["bad_mac"], "pongs_unmatched": r["pongs_unmatched"], "resets": r["resets"],
        "latency_p50_us": lat["p50_ns"] / 1e3, "latency_p99_us": lat["p99_ns"] / 1e3,
        "node_limited": {k: v for k, v in stats.items() if k.startswith("limited_")},
        "node_established_after": sum(v for k, v in after["status"].items()
                                      if k in ("vague", "direct")),
        "config": node.info["config"],
        "note": "generator and node on one machine, one core each; the node's slot is "
                f"{slot} s (one Pong per connection per slot), its other rate limits lifted",
    }
    progress(f"{name}: {rec['pongs_per_second']:,.0f} Pongs/s for {rec['offered_per_second']:,.0f} "
             f"Pings/s offered (loss {rec['loss']:.1%}); node CPU {node_cpu:.2f} s: "
             f"{rec['pongs_per_cpu_second'] or 0:,.0f} Pongs per CPU second")
    return rec


def run(progress: Callable[[str], None] = lambda s: None, *, measures=("memory", "pingpong",
        "sockets"), peers: int = PEERS, seconds: float = SECONDS, rate: float = RATE,
        stacks=(True, False)) -> list:
    """The figures, for both stacks (pure first): records of kind swarm-bench."""
    records = []
    for pure in stacks:
        name = "pure Python" if pure else "Cython"
        if "memory" in measures:
            m = memory(pure)
            progress(f"{name}: {m['bytes_per_connection']:.1f} bytes per connection at "
                     f"{m['connections']:,}")
            records.append({"kind": "swarm-bench", "measure": "memory", "stack": name, **m})
        if "pingpong" in measures:
            p = pingpong(pure)
            progress(f"{name}: {p['pongs_per_second']:,.0f} Ping -> Pong per second through "
                     f"the core ({p['us_per_ping']:.1f} us a Ping)")
            records.append({"kind": "swarm-bench", "measure": "pingpong", "stack": name, **p})
        if "sockets" in measures:
            s = sockets(pure, peers, seconds, rate, progress=progress)
            records.append({"kind": "swarm-bench", "measure": "sockets", "stack": name, **s})
    return records


if __name__ == "__main__":  # python -m pelotari.swarm.bench
    for r in run(print):
        pass
