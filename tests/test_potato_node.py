"""`pelotari potato node`: real processes on 127.0.0.x over WebRTC and TCP, commands on stdin."""
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
from conftest import PELOTARI
from nodeproc import NodeProcess, Spawner


class Potato(NodeProcess):
    """One `pelotari potato node ... --json` process: events on a queue, commands on stdin."""

    wait = NodeProcess.wait_named

    def __init__(self, *args, **kwargs):
        super().__init__("potato", "node", *args, **kwargs)


@pytest.fixture
def potato():
    with Spawner(Potato) as make:
        yield make


@pytest.mark.parametrize("transport", ["webrtc", "tcp"])
def test_three_clients_in_a_chain_relay_broadcast_and_elect(potato, transport):
    a = potato("--name", "A", "--listen", "127.0.0.1:0", "--transport", transport)
    port = a.wait("listening")["port"]  # the others take the same number on their own 127.0.0.x
    b = potato("--name", "B", "--listen", f"127.0.0.2:{port}", "--connect", f"127.0.0.1:{port}",
               "--transport", transport)
    assert b.wait("connected", peer="A")
    c = potato("--name", "C", "--listen", f"127.0.0.3:{port}", "--connect", f"127.0.0.2:{port}",
               "--transport", transport)
    assert c.wait("connected", peer="B")
    assert a.wait("peer_up", peer="B")
    c.command("send A kaixo A, from C ✓")  # A is not C's peer: B relays it
    got = a.wait("message", sender="C")
    # C -> B -> A: two links each way (a direct message's last relay adds no name to visited)
    assert (got["kind"], got["body"], got["hops"], got["via"]) == ("direct", "kaixo A, from C ✓",
                                                                   2, "B")
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
    assert a.stop()[0] == 0 and c.stop()[0] == 0


def test_a_client_runs_as_a_service_and_says_what_is_wrong_in_one_line(potato):
    a = potato("--name", "A", "--listen", "127.0.0.1:0", "--transport", "tcp",
               stdin=subprocess.DEVNULL)
    port = a.wait("listening")["port"]
    b = potato("--name", "B", "--listen", f"127.0.0.2:{port}", "--connect", f"127.0.0.1:{port}",
               "--transport", "tcp", stdin=subprocess.DEVNULL)
    assert a.wait("peer_up", peer="B")
    assert a.stop(signal.SIGINT)[0] == 130 and b.stop(signal.SIGHUP)[0] == 0
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
    from pelotari.harness.systems import free_port
    from pelotari.potato import bench

    # run_mesh starts every node on one port at once: the number is chosen before any binds
    r = bench.run_mesh([("A", "B"), ("B", "C")], "tcp", port=free_port(socket.SOCK_STREAM),
                       elections=3, broadcasts=20, label="chain")
    assert r["elections"] == 3 and 0 < r["election_p50_ms"] <= r["election_p99_ms"] < 1000
    assert r["setup_s"] < 30 and r["cpu_us_per_delivery"] >= 0


def test_a_tcp_client_dialling_a_webrtc_client_says_it_speaks_the_other_transport(potato):
    """Issue 27: the line said only "closed the connection during the handshake"."""
    b = potato("--name", "B", "--listen", "127.0.0.1:0", "--transport", "webrtc",
               stdin=subprocess.DEVNULL)
    port = b.wait("listening", timeout=30)["port"]
    a = potato("--name", "A", "--listen", f"127.0.0.2:{port}", "--connect", f"127.0.0.1:{port}",
               "--transport", "tcp", stdin=subprocess.DEVNULL, as_json=False)
    line = NodeProcess.wait(a, lambda line: "cannot connect to" in line, 30)
    assert line and f"cannot connect to 127.0.0.1:{port}: 127.0.0.1:{port} ('B') speaks WebRTC, " \
        "not TCP: both ends need the same transport; again in " in line, (line, a.stderr_text())
    assert not b.wait("peer_up", timeout=0)


def test_listening_says_which_port_was_taken(potato):
    a = potato("--name", "A", "--transport", "tcp", stdin=subprocess.DEVNULL)
    assert a.wait("listening")["port"] > 0


# -- the attack review --------------------------------------------------------------------------


def _gone(pgid):
    """Processes still in the process group `pgid`."""
    left = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                left.append(p.pid)
        except ProcessLookupError:
            continue
    return left


@pytest.mark.parametrize("transport", ["tcp", "webrtc"])
def test_sigint_while_a_connect_is_pending_stops_at_once(potato, transport):
    """The attack review: Ctrl-C waited for --connect attempts to time out (5 s). The target
    here takes the TCP connection (in its backlog) and never says a word."""
    silent = socket.socket()
    silent.bind(("127.0.0.5", 0))
    silent.listen()
    try:
        a = potato("--name", "A", "--listen", "127.0.0.1:0", "--transport", transport,
                   "--connect", "%s:%d" % silent.getsockname())
        assert a.wait("listening", timeout=20)
        time.sleep(0.3)  # the attempt is under way
        t0 = time.monotonic()
        os.kill(a.proc.pid, signal.SIGINT)
        assert a.proc.wait(5) == 130
        took = time.monotonic() - t0
        assert took < 1.5, took
        assert a.wait("stopped")["signal"] == "SIGINT"
        assert _gone(a.proc.pid) == []
    finally:
        silent.close()


@pytest.mark.parametrize("transport", ["tcp", "webrtc"])
def test_a_connect_target_that_goes_away_is_reconnected(potato, transport):
    a = potato("--name", "A", "--listen", "127.0.0.1:0", "--transport", transport)
    port = a.wait("listening", timeout=20)["port"]
    b = potato("--name", "B", "--listen", f"127.0.0.2:{port}", "--connect", f"127.0.0.1:{port}",
               "--transport", transport)
    assert b.wait("connected", peer="A", timeout=20)
    a.stop(signal.SIGKILL)
    assert b.wait("peer_down", peer="A", timeout=5)
    b.seen.clear()  # from here on, new events only
    assert b.wait("error", timeout=5)["retry_in"] is not None
    time.sleep(2.0)  # B tries, fails, and waits longer each time (0.5 s, 1 s, 2 s, ...)
    a2 = potato("--name", "A", "--listen", f"127.0.0.1:{port}", "--transport", transport)
    assert a2.wait("listening", timeout=20)
    t0 = time.monotonic()
    assert b.wait("connected", peer="A", timeout=15)
    assert time.monotonic() - t0 < 10
    assert a2.wait("peer_up", peer="B")
    retries = [e["retry_in"] for e in b.seen if e["event"] == "error"]
    assert retries and all(0.3 < r < 12.5 for r in retries), retries
    assert retries == sorted(retries) or len(retries) < 3  # backing off
    b.command("broadcast back")
    assert a2.wait("message", body="back")
    assert a2.stop()[0] == 0 and b.stop()[0] == 0


@pytest.mark.parametrize("transport", ["tcp", "webrtc"])
def test_a_broadcast_flood_does_not_get_good_peers_dropped(potato, transport):
    """The attack review: peers flooding broadcasts at A starved A's loop, so the pings of
    its good peers arrived (or were read) more than 1 s late and good peers were dropped.
    Mesh A-B, A-C, A-D, B-C, C-D; three flooders at A for 5 s."""
    a = potato("--name", "A", "--listen", "127.0.0.1:0", "--transport", transport)
    port = a.wait("listening", timeout=20)["port"]
    good = {"A": a}
    for name, i, targets in (("B", 2, (1,)), ("C", 3, (1, 2)), ("D", 4, (1, 3))):
        args = ["--name", name, "--listen", f"127.0.0.{i}:{port}", "--transport", transport]
        for t in targets:
            args += ["--connect", f"127.0.0.{t}:{port}"]
        good[name] = potato(*args)
        for t in targets:
            assert good[name].wait("connected", peer="ABCD"[t - 1], timeout=20)
    time.sleep(0.5)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))))
    flooders = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "flood", transport,
                                  f"Z{k}", f"127.0.0.{10 + k}", f"127.0.0.1:{port}", "5"],
                                 env=env, start_new_session=True) for k in range(3)]
    try:
        for f in flooders:
            f.wait(60)
    finally:
        for f in flooders:
            if f.poll() is None:
                f.kill()
                f.wait()
    time.sleep(1.5)
    for name, p in good.items():
        while not p.events.empty():
            p.seen.append(p.events.get())
        downs = [e["peer"] for e in p.seen if e["event"] == "peer_down"]
        assert not [d for d in downs if d in good], (name, downs)
    a.command("stats")
    stats = a.wait("stats", timeout=10)["stats"]
    if transport == "tcp":  # read in bounded batches (and no faster than recv_rate)
        assert stats.get("recv_yielded", 0) + stats.get("recv_held", 0) > 0, stats
    # (WebRTC: aiortc itself takes fewer than recv_rate messages a second here; what keeps the
    # good peers is that any SCTP packet from a peer counts as a sign of life.)
    # The mesh still carries messages. A broadcast is best-effort: right after the flood, a slow
    # (pure-Python, loaded) D may still have A's and C's bounded send buffers toward it full of
    # relayed flood, and a message that does not fit is dropped and counted, by design; so
    # try a few times.
    for k in range(3):
        a.command(f"broadcast still here {k}")
        if good["D"].wait("message", timeout=10,
                          check=lambda e: e["body"].startswith("still here")):
            break
    else:
        pytest.fail("no broadcast reached D after the flood")


async def _flood(kind, name, host, target, seconds):
    """Broadcasts to one client as fast as we can: raw lines (TCP), the transport (WebRTC)."""
    from pelotari.potato.transport import WebRtcTransport

    thost, tport = target.rsplit(":", 1)
    if kind == "tcp":
        sock = socket.create_connection((thost, int(tport)), source_address=(host, 0))
        sock.sendall(json.dumps({"hello": name}).encode() + b"\n")
        sock.recv(1000)
        threading.Thread(target=lambda: [None for _ in iter(lambda: sock.recv(65536), b"")],
                         daemon=True).start()  # what it relays back: read and forgotten
        t0, i = time.monotonic(), 0
        while time.monotonic() - t0 < float(seconds):
            sock.sendall(b"".join(json.dumps({
                "type": "broadcast", "identifier": f"{name}-{i}-{k}", "from": name,
                "visited": [], "body": "x"}).encode() + b"\n" for k in range(20000)))
            i += 1
        sock.close()
        return
    cls = WebRtcTransport
    z = cls(name, host, 0, on_peer_up=lambda n: None, on_peer_down=lambda n: None,
            on_message=lambda p, d: None)
    await z.start()
    peer = await z.connect(thost, int(tport))
    t0, i = time.monotonic(), 0
    while time.monotonic() - t0 < float(seconds):
        for _ in range(50):
            i += 1
            z.send(peer, json.dumps({"type": "broadcast", "identifier": f"{name}-{i}",
                                     "from": name, "visited": [], "body": "x"}).encode())
        await asyncio.sleep(0)
    await z.close()


if __name__ == "__main__" and sys.argv[1:2] == ["flood"]:
    asyncio.run(_flood(*sys.argv[2:7]))


def test_the_adapter_rearms_its_timer_only_when_the_cores_changes():
    """In-process over TCP on 127.0.0.2/3: 200 messages in, the timer stays at the oldest cache
    entry's expiry, so it is armed a few times only (it was armed again per message before)."""
    from pelotari.potato import core as c
    from pelotari.potato.node import Node

    async def main():
        got = []
        a = Node("A", "127.0.0.2", 0, transport="tcp", on_event=got.append)
        b = Node("B", "127.0.0.3", 0, transport="tcp")
        await a.start()
        await b.start()
        try:
            assert await b.connect("127.0.0.2", a.transport.port) == "A"
            for _ in range(300):
                if "B" in a.peers():
                    break
                await asyncio.sleep(0.01)
            before = a._timer.rearms
            for i in range(200):
                b.send("A", f"m{i}")
            for _ in range(500):
                if sum(isinstance(e, c.Delivered) for e in got) == 200:
                    break
                await asyncio.sleep(0.01)
            bodies = [e.body for e in got if isinstance(e, c.Delivered)]
            assert bodies == [f"m{i}" for i in range(200)]
            assert a._timer.rearms - before < 5, a._timer.rearms - before
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_a_bug_in_the_event_handler_costs_that_event_only():
    """on_event raising on a message neither leaves the timer unarmed (it is armed after the
    events: the raise skipped it, and the identifier cache never expired) nor stops the next."""
    from pelotari.potato import core as c
    from pelotari.potato.node import Node

    async def main():
        got = []

        def handler(ev):
            if isinstance(ev, c.Delivered) and ev.body == "boom":
                raise RuntimeError("a bug in the handler")
            got.append(ev)

        a = Node("A", "127.0.0.2", 0, transport="tcp", on_event=handler)
        b = Node("B", "127.0.0.3", 0, transport="tcp")
        await a.start()
        await b.start()
        try:
            assert await b.connect("127.0.0.2", a.transport.port) == "A"
            b.send("A", "boom")
            for _ in range(300):
                if a.core.get_timer() is not None:  # the message is in: its cache entry
                    break
                await asyncio.sleep(0.01)
            assert a._timer.when == a.core.get_timer() is not None
            b.send("A", "after")
            for _ in range(300):
                if any(isinstance(e, c.Delivered) for e in got):
                    break
                await asyncio.sleep(0.01)
            assert [e.body for e in got if isinstance(e, c.Delivered)] == ["after"]
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())
