"""Time to full discovery and to failure detection of prototari on a namespaced LAN (root).

Measured, not asserted (speed belongs in benchmarks):

    sudo .venv/bin/python -m pytest bench/micro -k prototari --benchmark-enable \\
        --benchmark-json=results/prototari.json

Nodes run as separate `pelotari prototari` processes with a 0.5 s broadcast interval, 1 s
inactive-peer time and 0.3 s heartbeat wait, so failure detection is bounded by
1 + 3 x 0.3 = 1.9 s after the last datagram heard.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from test_prototari_lan import NodeProcess, addr, wait_for_peers  # noqa: E402

from pelotari import netlab  # noqa: E402

pytestmark = pytest.mark.skipif(bool(netlab.available()), reason=netlab.available() or "ok")


@pytest.mark.parametrize("nodes", [3, 8])
def test_prototari_time_to_full_discovery(benchmark, nodes):
    def setup():
        lan = netlab.LanHarness()
        hosts = [lan.add_host(chr(ord("a") + i)) for i in range(nodes)]
        return (lan, hosts), {}

    def discover(lan, hosts):
        procs = [NodeProcess(lan, h) for h in hosts]
        for node in procs:
            assert wait_for_peers(node, {addr(h) for h in hosts if h is not node.host}, 30)
        lan.close()

    benchmark.extra_info["nodes"] = nodes
    benchmark.pedantic(discover, setup=setup, rounds=3)


def test_prototari_time_to_failure_detection(benchmark):
    def setup():
        lan = netlab.LanHarness()
        hosts = [lan.add_host(n) for n in "abc"]
        procs = [NodeProcess(lan, h) for h in hosts]
        for node in procs:
            assert wait_for_peers(node, {addr(h) for h in hosts if h is not node.host}, 30)
        return (lan, hosts, procs), {}

    def detect(lan, hosts, procs):
        procs[2].kill()
        gone = addr(hosts[2])
        for node in procs[:2]:
            assert node.wait(lambda e: e["event"] == "left" and e["peer"] == gone, 15)
        lan.close()

    benchmark.pedantic(detect, setup=setup, rounds=3)
