"""`pelotari potato node`: real processes on 127.0.0.x over WebRTC and TCP, commands on stdin."""
import json
import os
import queue
import signal
import subprocess
import threading

import pytest
from conftest import PELOTARI, wait_event
from test_bully_node import free_port


class Potato:
    """One `pelotari potato node ... --json` process: events on a queue, commands on stdin."""

    def __init__(self, *args, stdin=subprocess.PIPE):
        self.proc = subprocess.Popen(PELOTARI + ["potato", "node", *args, "--json"], stdin=stdin,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.events: queue.Queue = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def wait(self, event, timeout=10.0, **fields):
        return wait_event(self.events, self.seen, lambda e: e["event"] == event and all(
            e.get(k) == v for k, v in fields.items()), timeout)

    def command(self, line):
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def stop(self, sig=signal.SIGTERM):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        return self.proc.wait(10)


@pytest.fixture
def potato():
    started = []

    def make(*args, **kwargs):
        p = Potato(*args, **kwargs)
        started.append(p)
        return p

    yield make
    for p in started:
        if p.proc.poll() is None:
            p.stop(signal.SIGKILL)


@pytest.mark.parametrize("transport", ["webrtc", "tcp"])
def test_three_clients_in_a_chain_relay_broadcast_and_elect(potato, transport):
    port = free_port()
    a = potato("--name", "A", "--listen", f"127.0.0.1:{port}", "--transport", transport)
    assert a.wait("listening")
    b = potato("--name", "B", "--listen", f"127.0.0.2:{port}", "--connect", f"127.0.0.1:{port}",
               "--transport", transport)
    assert b.wait("connected", peer="A")
    c = potato("--name", "C", "--listen", f"127.0.0.3:{port}", "--connect", f"127.0.0.2:{port}",
               "--transport", transport)
    assert c.wait("connected", peer="B")
    assert a.wait("peer_up", peer="B")
    c.command("send A kaixo A, from C ✓")  # A is not C's peer: B relays it
    got = a.wait("message", sender="C")
    assert (got["kind"], got["body"], got["hops"]) == ("direct", "kaixo A, from C ✓", 1)
    a.command("broadcast hello mesh")
    assert c.wait("message", kind="broadcast", body="hello mesh")["hops"] == 2
    a.command("propose")
    result = a.wait("election_result")
    assert result["won"] and (result["yes"], result["no"]) == (3.5, 0)
    for p in (a, b, c):
        assert p.wait("frame", frame=result["next"])
    b.stop(signal.SIGKILL)  # C loses its only peer; A too
    assert a.wait("peer_down", peer="B", timeout=5)
    assert c.wait("peer_down", peer="B", timeout=5)
    assert a.stop() == 0 and c.stop() == 0


def test_a_client_runs_as_a_service_and_says_what_is_wrong_in_one_line(potato):
    port = free_port()
    a = potato("--name", "A", "--listen", f"127.0.0.1:{port}", "--transport", "tcp",
               stdin=subprocess.DEVNULL)
    assert a.wait("listening")
    b = potato("--name", "B", "--listen", f"127.0.0.2:{port}", "--connect", f"127.0.0.1:{port}",
               "--transport", "tcp", stdin=subprocess.DEVNULL)
    assert a.wait("peer_up", peer="B")
    assert a.stop(signal.SIGINT) == 0 and b.stop(signal.SIGHUP) == 0
    res = subprocess.run(PELOTARI + ["potato", "node", "--name", "", "--transport", "tcp"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    busy = potato("--name", "Y", "--listen", f"127.0.0.1:{port}", "--transport", "tcp")
    assert busy.wait("listening")
    res = subprocess.run(PELOTARI + ["potato", "node", "--name", "X", "--listen",
                                     f"127.0.0.1:{port}", "--transport", "tcp"],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert res.returncode == 1 and res.stderr.count("\n") == 1, res.stderr
    assert "cannot listen" in res.stderr and "Traceback" not in res.stderr


def test_the_mesh_benchmark_measures_a_small_mesh_over_tcp():
    from pelotari.potato import bench
    r = bench.run_mesh([("A", "B"), ("B", "C")], "tcp", port=free_port(), elections=3,
                       broadcasts=20, label="chain")
    assert r["elections"] == 3 and 0 < r["election_p50_ms"] <= r["election_p99_ms"] < 1000
    assert r["setup_s"] < 30 and r["cpu_us_per_delivery"] >= 0


def test_listening_says_which_port_was_taken(potato):
    a = potato("--name", "A", "--transport", "tcp", stdin=subprocess.DEVNULL)
    assert a.wait("listening")["port"] > 0
