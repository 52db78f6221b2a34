"""pelotari nodes and independent seed-only nodes on one namespaced LAN (root only).

SEED_NODE below is written from the seed document (docs: ../shared/seeds/prototari.md) alone,
the way the original Go implementation behaves on the wire: it broadcasts `pelotari?` to port
21451 and sends every unicast from an EPHEMERAL source port, to the peer's IP at 21450; it
listens on 21450 and 21451 and keys peers by IP. pelotari nodes run with no interface option
and stdin on /dev/null. All must become peers, heartbeat each other both ways, and drop a
killed node.

With "heartbeat": false in its configuration SEED_NODE is what the Go implementation really
is: it sends no `hor?`, answers none and never removes a peer; its broadcasts alone show it is
there ("skip" lists broadcasts it leaves out, as if lost).
"""
import json
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
from test_prototari_lan import NodeProcess, wait_for_peers

pytestmark = pytest.mark.e2e

SEED_NODE = r'''
import json, select, socket, sys, time

own_ip, broadcast_address, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
BPORT, UPORT = 21451, 21450
MAX, INTERVAL = cfg["max_peers"], cfg["broadcast_interval"]
HEARTBEAT, SKIP = cfg.get("heartbeat", True), set(cfg.get("skip", ()))
INACTIVE, WAIT, RESERVE = cfg["inactive_peer_time"], cfg["heartbeat_max_wait"], cfg["reservation_timeout"]


def out(**kw):
    print(json.dumps({"t": time.monotonic(), **kw}), flush=True)


def listener(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", port))
    return s


def send(msg, ip, port):
    """Every datagram from a new socket on an ephemeral port."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    s.bind((own_ip, 0))
    s.sendto(msg, (ip, port))
    out(event="sent", msg=msg.decode(), to=f"{ip}:{port}", sport=s.getsockname()[1])
    s.close()


bsock, usock = listener(BPORT), listener(UPORT)
peers, reserved = {}, {}  # ip -> {last_seen, missed, deadline}; ip -> reservation expiry
next_broadcast = time.monotonic()
broadcasts = 0


def add_peer(ip, now):
    if ip not in peers:
        out(event="joined", peer=ip)
    peers[ip] = {"last_seen": now, "missed": 0, "deadline": None}


while True:
    now = time.monotonic()
    for ip in [ip for ip, exp in reserved.items() if now >= exp]:
        del reserved[ip]
    if now >= next_broadcast:  # 1a: broadcast unless full
        if len(peers) + len(reserved) < MAX:
            if broadcasts in SKIP:
                out(event="skipped", msg="pelotari?")
            else:
                send(b"pelotari?", broadcast_address, BPORT)
            broadcasts += 1
        next_broadcast = now + INTERVAL
    for ip, p in list(peers.items()) if HEARTBEAT else ():  # 2: heartbeat
        if p["deadline"] is not None and now >= p["deadline"]:
            p["deadline"] = None
            p["missed"] += 1
            if p["missed"] >= 3:
                del peers[ip]
                out(event="left", peer=ip)
                continue
        if p["deadline"] is None and now - p["last_seen"] > INACTIVE:
            send(b"hor?", ip, UPORT)
            p["deadline"] = now + WAIT
    ready, _, _ = select.select([bsock, usock], [], [], 0.01)
    for s in ready:
        data, (ip, port) = s.recvfrom(65535)
        if ip == own_ip:
            continue
        now = time.monotonic()
        out(event="recv", msg=data.decode("utf-8", "replace"), src=f"{ip}:{port}",
            dport=s.getsockname()[1])
        if ip in peers:
            peers[ip]["last_seen"] = now  # the last message received from it
        if data == b"pelotari?":  # 1b
            if ip in peers or ip in reserved or len(peers) + len(reserved) >= MAX:
                continue
            send(b"aupa!", ip, UPORT)
            reserved[ip] = now + RESERVE
        elif data == b"aupa!":  # 1c
            if ip not in peers and len(peers) + len(reserved) - (ip in reserved) >= MAX:
                continue
            reserved.pop(ip, None)
            add_peer(ip, now)
            send(b"dale!", ip, UPORT)
        elif data == b"dale!":  # 1b step 5
            expires = reserved.pop(ip, None)
            if expires is not None and now < expires and ip not in peers:
                add_peer(ip, now)
        elif data == b"hor?" and HEARTBEAT:
            send(b"hemen nago!", ip, UPORT)
        elif data == b"hemen nago!" and ip in peers:
            peers[ip]["missed"], peers[ip]["deadline"] = 0, None
'''


class SeedProcess:
    """SEED_NODE in a host's namespace; its JSON lines arrive on a queue."""

    def __init__(self, lan, host, script, **cfg):
        self.host = host
        brd = host.address.rsplit(".", 1)[0] + ".255"
        self.proc = lan.spawn(host, [sys.executable, str(script), host.address, brd,
                                     json.dumps(cfg)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def drain(self, timeout=0.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.seen.append(self.lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                return self.seen

    def peers(self):
        current = set()
        for ev in self.drain():
            if ev["event"] == "joined":
                current.add(ev["peer"])
            elif ev["event"] == "left":
                current.discard(ev["peer"])
        return current

    def wait_for_peers(self, want, timeout):
        """Whether its peers become exactly `want` within timeout."""
        deadline = time.monotonic() + timeout
        while self.peers() != want:
            if time.monotonic() > deadline:
                return False
            self.drain(0.1)
        return True

    def wait_until_gone(self, ip, timeout):
        """Whether it drops ip within timeout."""
        deadline = time.monotonic() + timeout
        while ip in self.peers():
            if time.monotonic() > deadline:
                return False
            self.drain(0.1)
        return True


def test_pelotari_and_seed_only_nodes_become_peers_heartbeat_and_drop_the_dead(lan, tmp_path):
    script = tmp_path / "seed_node.py"
    script.write_text(SEED_NODE)
    ha, hb, h1, h2 = (lan.add_host(n) for n in ("a", "b", "s1", "s2"))
    # Everyone's table holds the other three, so once all are peers nobody broadcasts and the
    # only traffic is heartbeats. s1 asks first (0.6 s < pelotari's 1 s): pelotari answers it.
    # s2 waits longer (3 s) than pelotari: pelotari asks it, and s2 answers.
    seed_cfg = {"max_peers": 3, "broadcast_interval": 0.5, "heartbeat_max_wait": 0.3,
                "reservation_timeout": 1.0}
    s1 = SeedProcess(lan, h1, script, inactive_peer_time=0.6, **seed_cfg)
    s2 = SeedProcess(lan, h2, script, inactive_peer_time=3.0, **seed_cfg)
    a = NodeProcess(lan, ha, "--max-peers", "3", stdin=subprocess.DEVNULL)
    b = NodeProcess(lan, hb, "--max-peers", "3", stdin=subprocess.DEVNULL)
    assert "--interface" not in a.proc.args and "-i" not in a.proc.args

    started = a.wait(lambda e: e["event"] == "started", 10)
    assert started["interface"] == ha.interface and started["peer"] == "address"
    assert started["address"] == f"{ha.address}:21450"
    assert started["broadcast"] == ha.address.rsplit(".", 1)[0] + ".255:21451"

    pel = {n: {f"{h.address}:21450" for h in (ha, hb, h1, h2) if h is not n.host} for n in (a, b)}
    for n in (a, b):
        assert wait_for_peers(n, pel[n], 15), (n.host.name, n.peers())
    for s in (s1, s2):
        want = {h.address for h in (ha, hb, h1, h2) if h is not s.host}
        assert s.wait_for_peers(want, 15), (s.host.name, s.peers())

    time.sleep(3.5)  # a few heartbeat rounds
    for s in (s1, s2):
        lines = s.drain()
        got = [e for e in lines if e["event"] == "recv" and e["src"].split(":")[0] in
               (ha.address, hb.address)]
        # everything pelotari sent the seed node, but its broadcasts, came to port 21450
        assert {e["dport"] for e in got if e["msg"] != "pelotari?"} == {21450}
        assert {e["dport"] for e in got if e["msg"] == "pelotari?"} <= {21451}
        # and the seed node itself never sent from 21450/21451
        assert all(e["sport"] not in (21450, 21451) for e in lines if e["event"] == "sent")
    pongs_at_s1 = {e["src"].split(":")[0] for e in s1.seen
                   if e["event"] == "recv" and e["msg"] == "hemen nago!"}
    assert {ha.address, hb.address} <= pongs_at_s1  # pelotari -> seed: hemen nago!
    pings_at_s2 = {e["src"].split(":")[0] for e in s2.seen
                   if e["event"] == "recv" and e["msg"] == "hor?"}
    assert {ha.address, hb.address} <= pings_at_s2  # pelotari asks the seed node ...

    # ... and the seed node's answer reached pelotari (its counters, printed when it stops)
    code, stopped, stderr = a.stop(signal.SIGTERM)
    assert code == 0 and stderr == "" and stopped["signal"] == "SIGTERM"
    assert stopped["peers"][f"{h2.address}:21450"]["pongs"] >= 2, stopped
    t0 = time.monotonic()
    gone = f"{ha.address}:21450"
    assert b.wait(lambda e: e["event"] == "left" and e["peer"] == gone, 10)
    for s in (s1, s2):  # the seed nodes drop the stopped pelotari node
        assert s.wait_until_gone(ha.address, 10), s.host.name
    assert time.monotonic() - t0 < 3.0 + 3 * 0.3 + 2.0

    s1.proc.kill()  # a seed node dies: pelotari and the other seed node drop it
    assert b.wait(lambda e: e["event"] == "left" and e["peer"] == f"{h1.address}:21450", 10)
    assert s2.wait_until_gone(h1.address, 10)

    b.kill()  # and a pelotari node that dies is dropped by the seed node
    assert s2.wait_until_gone(hb.address, 10)


def test_a_seed_node_without_heartbeat_is_kept_by_its_broadcasts_through_a_lost_one(lan, tmp_path):
    """The Go implementation's heartbeat: none. A node that broadcasts every 2 s and never
    answers `hor?` is asked (pelotari asks after 1.5 s and gives up 3 x 0.5 s later) and kept by
    its broadcasts, even across one left out (4 s of silence): one `joined`, no `left`, until it
    is killed; then it is dropped (3 x 2 + 0.5 s after its last broadcast)."""
    script = tmp_path / "seed_node.py"
    script.write_text(SEED_NODE)
    hp, hg = lan.add_host("p"), lan.add_host("g")
    node = NodeProcess(lan, hp, "--inactive-peer-time", "1.5", "--heartbeat-max-wait", "0.5",
                       stdin=subprocess.DEVNULL)
    assert node.wait(lambda e: e["event"] == "started", 10)
    mute = SeedProcess(lan, hg, script, max_peers=64, broadcast_interval=2.0, heartbeat=False,
                       skip=[3], inactive_peer_time=1.0, heartbeat_max_wait=1.0,
                       reservation_timeout=1.0)
    peer = f"{hg.address}:21450"
    assert node.wait(lambda e: e["event"] == "joined" and e["peer"] == peer, 10), node.seen

    def broadcasts_sent():
        return sum(e["event"] == "sent" and e["msg"] == "pelotari?" for e in mute.drain())

    deadline = time.monotonic() + 60
    while broadcasts_sent() < 7 and time.monotonic() < deadline:  # the 4th is left out
        mute.drain(0.2)
    assert broadcasts_sent() >= 7, mute.seen
    asked = [e for e in mute.seen if e["event"] == "recv" and e["msg"] == "hor?"]
    assert asked and not any(e["event"] == "sent" and e["msg"] == "hemen nago!" for e in mute.seen)
    mute.proc.kill()
    assert node.wait(lambda e: e["event"] == "left" and e["peer"] == peer, 30), node.seen
    code, stopped, stderr = node.stop(signal.SIGTERM)
    assert code == 0 and stderr == "", stderr
    assert [e["event"] for e in node.seen if e.get("peer") == peer] == ["joined", "left"]
    assert (stopped["stats"]["joined"], stopped["stats"]["left"]) == (1, 1), stopped
    # pelotari answered its first broadcast only: never again a stranger to it
    assert sum(e["event"] == "recv" and e["msg"] == "aupa!" for e in mute.seen) == 1
