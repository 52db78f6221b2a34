"""fastpath.swarmload, the swarm load generator: real loopback sockets, a real node (a child
interpreter) or a scripted one in a thread. Counts are asserted, never speeds."""
import socket
import threading
import time

import pytest

from conftest import compiled_tool

swarmload = compiled_tool("swarmload")  # no twin: a benchmark tool (both node stacks run below)

from pelotari.swarm import bench, wire  # noqa: E402

SwarmLoad = swarmload.SwarmLoad


def keyring():
    key = wire.Keyring.generate()
    return key, wire.Keyring([key])


@pytest.mark.parametrize("pure", [False, True], ids=["cython-node", "pure-python-node"])
def test_every_peer_established_in_a_real_node_and_pongs_counted(pure):
    key, kr = keyring()
    node = bench.NodeChild(pure, 2000, 0.1, key.hex())
    try:
        with SwarmLoad("127.0.0.1", node.port, kr, 2000, ports=8) as gen:
            assert {(h, d) for h, _, d in gen.bound} == {("0.0.0.0", "lo")}
            assert len(set(gen.ports)) == 8 and gen.addresses == 250
            c = gen.connect(rate=5000, timeout=60)
            assert c["ready"] == 2000 == gen.ready, c
            assert c["connect_answers"] >= 2000 and c["bad_mac"] == 0 and c["foreign"] == 0
            status = node.count()["status"]
            assert status.get("vague", 0) == 2000 and sum(status.values()) == 2000, status
            time.sleep(0.2)  # two slots: the confirming Pings' claims are over
            r = gen.run(rate=2000, seconds=1.5, drain=0.5, min_gap=0.2)
            after = node.count()
        assert 0 < r["pongs"] <= r["pings_sent"]
        assert r["bad_mac"] == 0 and r["foreign"] == 0 and r["malformed"] == 0
        assert r["pongs"] <= after["stats"]["sent_Pong"]  # every counted Pong is one it sent
        assert r["latency"]["count"] == r["pongs"]
        assert after["status"].get("vague", 0) == 2000
    finally:
        node.close()
    assert node.proc.poll() is not None


class ScriptedNode:
    """A node in a thread that does the handshake right and answers every Ping of the run with
    a Pong whose MAC is forged, one unsigned, one echoing another token, the right one, the
    right one again, and the right one from another socket."""

    def __init__(self, kr):
        self.kr = kr
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.other.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.evil = False
        self.answered = 0  # Pings answered the evil way
        self.pongs = 0  # good Pongs sent the plain way
        self.rejected = 0  # datagrams from the generator that failed to decode (its MAC)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        kr = self.kr
        while not self.stop.is_set():
            try:
                data, src = self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            try:
                msg = wire.decode(data, kr, time.time())
            except wire.SwarmError:
                self.rejected += 1
                continue
            if msg.type == 0 and not msg.ack:
                self.sock.sendto(wire.encode(wire.connect(0, 0x1234, ack=True, echo=msg.token),
                                             kr, time.time()), src)
            elif msg.type == 2:
                good = wire.encode(wire.pong(msg.token), kr, time.time())
                if not self.evil:
                    self.sock.sendto(good, src)
                    self.pongs += 1
                    continue
                forged = good[:4] + bytes([good[4] ^ 1]) + good[5:]
                unsigned = good[:4] + bytes(32) + good[36:]
                other = wire.encode(wire.pong(msg.token ^ 1 << 39), kr, time.time())
                for d in (forged, unsigned, other, good, good):
                    self.sock.sendto(d, src)
                self.other.sendto(good, src)
                self.answered += 1

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()  # (twice is harmless)
        self.other.close()


def test_forged_unsigned_repeated_and_foreign_pongs_are_not_counted():
    key, kr = keyring()
    node = ScriptedNode(wire.Keyring([key]))
    try:
        with SwarmLoad("127.0.0.1", node.port, kr, 8, addresses=4, ports=2) as gen:
            c = gen.connect(rate=200, timeout=20)
            assert c["ready"] == 8, c
            time.sleep(0.2)
            node.evil = True
            r = gen.run(rate=40, seconds=1.0, drain=2.0)  # room for a thread on a busy CPU
        node.close()
        n = node.answered
        assert n > 0 and r["pings_sent"] == n
        assert r["pongs"] == n  # the right one, once
        assert r["bad_mac"] == 2 * n  # forged and unsigned
        assert r["pongs_unmatched"] == 2 * n  # another token, and the right one again
        assert r["foreign"] == n  # from another address:port than the node's
        assert r["latency"]["count"] == n and node.rejected == 0
    finally:
        node.close()


def test_limits_raise_valueerror_at_the_limit_plus_one():
    _, kr = keyring()
    with SwarmLoad("127.0.0.1", 9, kr, 12, addresses=4, ports=3) as gen:  # at the limit
        assert gen.address(11) == ("127.2.0.4", gen.ports[2])
        with pytest.raises(IndexError):
            gen.address(12)
        with pytest.raises(ValueError, match="no peer is ready"):
            gen.run(100, 0.1)
    with pytest.raises(ValueError, match="addresses x"):
        SwarmLoad("127.0.0.1", 9, kr, 13, addresses=4, ports=3)
    with pytest.raises(ValueError, match="peers must be"):
        SwarmLoad("127.0.0.1", 9, kr, swarmload.MAX_PEERS + 1)
    SwarmLoad("127.0.0.1", 9, kr, 1, base="127.255.255.254", addresses=1, ports=1).close()
    for base, addresses in (("127.255.255.254", 2), ("128.0.0.1", 1), ("10.0.0.1", 1),
                            ("127.0.0.0", 1)):
        with pytest.raises(ValueError, match="127"):
            SwarmLoad("127.0.0.1", 9, kr, 1, base=base, addresses=addresses, ports=1)
    with pytest.raises(ValueError, match="loopback"):
        SwarmLoad("192.0.2.1", 9, kr, 1)
    with pytest.raises(ValueError, match="ports"):
        SwarmLoad("127.0.0.1", 9, kr, 1, ports=swarmload.MAX_PORTS + 1)


def test_run_refuses_pings_closer_than_min_gap():
    key, kr = keyring()
    node = ScriptedNode(wire.Keyring([key]))
    try:
        with SwarmLoad("127.0.0.1", node.port, kr, 10, ports=1) as gen:
            assert gen.connect(rate=500, timeout=20)["ready"] == 10
            with pytest.raises(ValueError, match="under 0.2 s"):
                gen.run(rate=51, seconds=0.1, min_gap=0.2)  # 10 peers / 51 = 0.196 s
            assert gen.run(rate=50, seconds=0.1, min_gap=0.2)["pings_sent"] > 0
        with pytest.raises(ValueError, match="closed"):
            gen.connect()
    finally:
        node.close()


def test_sockets_tied_to_lo_need_no_privilege():
    """SO_BINDTODEVICE before bind is allowed unprivileged (Linux >= 5.7): as root, the same
    construction is run as nobody (unprivileged runs of this suite check it themselves)."""
    import os
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the other tests make the sockets")
    code = ("from fastpath.swarmload import SwarmLoad; from pelotari.swarm import wire; "
            "kr = wire.Keyring([bytes(32)]); g = SwarmLoad('127.0.0.1', 9, kr, 4, ports=2); "
            "print(sorted({(h, d) for h, _, d in g.bound})); g.close()")

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("no setpriv to drop privileges with")
    res = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                          sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if res.returncode != 0 and "SO_BINDTODEVICE" not in res.stderr:
        pytest.skip(f"cannot run this checkout as nobody: {res.stderr.strip()[-200:]}")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[('0.0.0.0', 'lo')]"


def test_epoch_changes_are_followed():
    """Epochs of 1 s (accepted ± 0.25 s): a 3-s run crosses at least two, and the generator
    signs and verifies in each (it re-fetches the MacSet from the Keyring every 50 ms)."""
    key = wire.Keyring.generate()
    short = dict(epoch_seconds=1, skew_seconds=0.25)
    node = ScriptedNode(wire.Keyring([key], **short))
    try:
        with SwarmLoad("127.0.0.1", node.port, wire.Keyring([key], **short), 4, ports=1) as gen:
            assert gen.connect(rate=100, timeout=20)["ready"] == 4
            time.sleep(0.2)
            before = node.pongs
            r = gen.run(rate=20, seconds=3.0, drain=2.0)
        node.close()
        n = node.pongs - before
        assert n > 40 and r["pings_sent"] == n and r["pongs"] == n and r["bad_mac"] == 0
        assert node.rejected == 0
    finally:
        node.close()


def test_no_descriptor_left_behind():
    import psutil

    def fds():
        return psutil.Process().num_fds()

    _, kr = keyring()
    start = fds()
    for _ in range(20):
        SwarmLoad("127.0.0.1", 9, kr, 64, ports=16).close()
        gen = SwarmLoad("127.0.0.1", 9, kr, 64, ports=16)
        del gen  # not closed: __dealloc__ closes its sockets
        with pytest.raises(ValueError):
            SwarmLoad("127.0.0.1", 9, kr, 65, addresses=4, ports=16)
    assert fds() == start
