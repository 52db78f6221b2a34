"""Swarm's scale figures, side by side for the pure-Python stack (PELOTARI_PURE_PYTHON=1: the
array-backed table, hashlib MACs) and the Cython one (fastpath.swarmtable, fastpath.swarmmac):

* bytes per connection: RSS growth from before a table of 100,000 is made until it holds
  100,000 distinct (127.x.y.z, port) connections (goal ≤ 64, docs/protocols/swarm.md);
* Ping → Pong per second through the sans-IO core (`SwarmNode.receive_datagram` and
  `datagrams_to_send`, no sockets): signed Pings from established connections, each verified,
  looked up, answered and signed. The rate limits are lifted for it (they cap vague Pongs at
  1,024 a slot by design): this measures the path's cost, not the limits. Goal ≥ 100,000 per
  second per core for the node's datagram path (issue 14: to reach in C).

Each measurement runs in a fresh interpreter. Records are JSON lines of kind "swarm-bench".
"""
import json
import os
import subprocess
import sys
from typing import Callable

N_TABLE = 100_000

_MEMORY = r"""
import gc, json, os, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
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


def run(progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Both figures, for both stacks: records of kind swarm-bench."""
    records = []
    for pure in (True, False):
        name = "pure Python" if pure else "Cython"
        m = memory(pure)
        progress(f"{name}: {m['bytes_per_connection']:.1f} bytes per connection at "
                 f"{m['connections']:,}")
        p = pingpong(pure)
        progress(f"{name}: {p['pongs_per_second']:,.0f} Ping -> Pong per second through the "
                 f"core ({p['us_per_ping']:.1f} us a Ping)")
        for what, rec in (("memory", m), ("pingpong", p)):
            records.append({"kind": "swarm-bench", "measure": what, "stack": name, **rec})
    return records


if __name__ == "__main__":  # python -m pelotari.swarm.bench
    for r in run(print):
        pass
