"""`pelotari swarm keygen|node|simulate` and the asyncio adapter (pelotari.swarm.node): real
processes and real sockets, on 127.0.0.210-230 and ports 37000-37999 only."""
import asyncio
import json
import os
import random
import signal
import socket
import stat
import subprocess
import time

import pytest
from conftest import PELOTARI
from nodeproc import NodeProcess, Spawner

from pelotari.swarm.core import Config, Connected, UserMessage
from pelotari.swarm.node import Node, NodeWarning
from pelotari.swarm.wire import Keyring

A, B, C, D = "127.0.0.210", "127.0.0.211", "127.0.0.212", "127.0.0.213"
FAST = ["--get-interval", "1", "--ping-interval", "1"]


def udp_port(*hosts):
    """A port in 37000-37999 free for UDP on every one of hosts."""
    for _ in range(200):
        port = random.randint(37000, 37999)
        socks = []
        try:
            for h in hosts:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((h, port))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port in 37000-37999")


def key_file(path, key=None):
    path.write_text(Keyring([key or Keyring.generate()]).to_text())
    path.chmod(0o600)
    return str(path)


class Swarm(NodeProcess):
    """One `pelotari swarm node ... --json` process: events on a queue, commands on stdin."""

    wait = NodeProcess.wait_named

    def __init__(self, *args, **kwargs):
        super().__init__("swarm", "node", *args, **kwargs)


@pytest.fixture
def swarm():
    with Spawner(Swarm) as make:
        yield make


def run(*args, **kwargs):
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(PELOTARI + ["swarm", *args], capture_output=True, text=True,
                          timeout=30, **kwargs)


# ---- keygen ----------------------------------------------------------------------------------

def test_keygen_writes_a_private_key_file_and_never_overwrites_one_unasked(tmp_path):
    path = tmp_path / "swarm.key"
    res = run("keygen", "-o", str(path))
    assert res.returncode == 0 and res.stdout == "", res.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text()
    assert len(Keyring.from_text(first).keys) == 1

    res = run("keygen", "-o", str(path))
    assert res.returncode == 1 and res.stderr.count("\n") == 1, res.stderr
    assert "exists" in res.stderr and "--force" in res.stderr and "Traceback" not in res.stderr
    assert path.read_text() == first

    path.chmod(0o644)
    res = run("keygen", "-o", str(path), "--force")
    assert res.returncode == 0, res.stderr
    assert path.read_text() != first and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["swarm.key"]  # no temporary file left

    res = run("keygen")  # to stdout
    assert res.returncode == 0 and Keyring.from_text(res.stdout).primary not in (
        Keyring.from_text(first).primary, Keyring.from_text(path.read_text()).primary)


# ---- three nodes, as a user starts them ------------------------------------------------------

def test_three_nodes_connect_learn_each_other_ping_and_send(swarm, tmp_path):
    key = key_file(tmp_path / "swarm.key")
    port = udp_port(A, B, C)
    a = swarm("--listen", f"{A}:{port}", "--key-file", key, *FAST)
    listening = a.wait("listening")
    assert listening and listening["port"] == port, "".join(a.stderr)
    b = swarm("--listen", f"{B}:{port}", "--key-file", key, "--bootstrap", f"{A}:{port}", *FAST)
    c = swarm("--listen", f"{C}:{port}", "--key-file", key, "--bootstrap", f"{A}:{port}", *FAST)
    pa, pb, pc = (f"{h}:{port}" for h in (A, B, C))
    assert b.wait("connected", peer=pa, direct=True, inbound=False), "".join(b.stderr)
    assert c.wait("connected", peer=pa, direct=True), "".join(c.stderr)
    assert a.wait("connected", peer=pb, inbound=True) and a.wait("connected", peer=pc)
    # B and C never heard of each other but through A's Connections answers.
    assert b.wait("connected", peer=pc, timeout=15), b.seen
    assert c.wait("connected", peer=pb, timeout=15), c.seen
    assert (b.wait("learned", timeout=0, check=lambda e: pc in e["learned"])
            or c.wait("learned", timeout=0, check=lambda e: pb in e["learned"])), (b.seen, c.seen)

    # 30 s to answer (the command's own limit is 2 s: a machine under load took longer once);
    # an outcome, a Pong, not a round trip's speed
    b.command(f"ping {pc} 30")
    pong = b.wait("pong", peer=pc, timeout=40)
    assert pong and 0 < pong["rtt"] < 30, b.seen
    b.command(f"ping {pc} soon")  # a bad limit: one error, no crash
    assert b.wait("error", check=lambda e: "SECONDS 'soon' is not a number" in e["message"])
    b.command(f"send {pc} 7 kaixo C, from B ✓ \x1b[31m")
    got = c.wait("message", peer=pb)
    assert got and (got["type"], got["data"]) == (7, "kaixo C, from B ✓ \x1b[31m"), c.seen
    assert b.wait("sent", peer=pc, type=7)
    b.command("send 127.0.0.229:37999 7 nobody")  # no connection there: one error, no crash
    assert b.wait("error", check=lambda e: "no established connection" in e["message"])
    b.command("connections")
    rows = b.wait("connections")
    status = {r["peer"]: r["status"] for r in rows["connections"]} if rows else {}
    assert status.keys() == {pa, pc} and status[pa] == "direct", rows  # C: as it dialled
    b.command(f"connect {pa}")  # already direct: said so, not "dialling"
    assert b.wait("connecting", peer=pa, status="direct", why="command"), b.seen
    c.command("stats")
    stats = c.wait("stats")["stats"]
    assert stats["received_User7"] == 1 and stats.get("dropped_bad_mac", 0) == 0

    for p, sig in ((a, signal.SIGINT), (b, signal.SIGTERM), (c, signal.SIGHUP)):
        code, took = p.stop(sig)  # Ctrl-C: status 130; a service's stop or a hangup: 0
        assert code == (130 if sig == signal.SIGINT else 0) and took < 5, (code, took, p.stderr)
        assert p.wait("stopped", signal=sig.name, timeout=2)
        assert p.group_gone()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((A, port))  # the port is free again: nothing was left running


def test_a_node_with_another_key_never_connects(swarm, tmp_path):
    port = udp_port(A, D)
    a = swarm("--listen", f"{A}:{port}", "--key-file", key_file(tmp_path / "a.key"))
    assert a.wait("listening"), a.stderr
    d = swarm("--listen", f"{D}:{port}", "--key-file", key_file(tmp_path / "d.key"),
              "--bootstrap", f"{A}:{port}")
    assert d.wait("connecting", peer=f"{A}:{port}"), d.stderr
    time.sleep(1.5)  # D's Connect at 0 s and its resend at 1 s
    a.command("stats")
    stats = a.wait("stats")["stats"]
    assert stats["dropped_bad_mac"] >= 2 and "received_Connect" not in stats
    assert stats.get("sent_bytes", 0) == 0  # nothing at all is answered to a stranger
    d.command("stats")
    assert d.wait("stats")["stats"].get("received_bytes", 0) == 0
    assert not a.wait("connected", timeout=0) and not d.wait("connected", timeout=0)
    # after its 4 Connects (0, 1, 3, 7 s) and 8 s more, d says so instead of going quiet
    gave_up = d.wait("unanswered", peer=f"{A}:{port}", timeout=20)
    assert gave_up and gave_up["connects"] == 4 and gave_up["redial"] == 30, d.seen
    assert a.stop()[0] == 0 and d.stop()[0] == 0


@pytest.mark.parametrize("boot", ["self", "224.0.0.1:{port}", "255.255.255.255:{port}"])
def test_a_bootstrap_no_node_can_be_is_one_clear_error(tmp_path, boot):
    port = udp_port(A)
    boot = f"{A}:{port}" if boot == "self" else boot.format(port=port)
    r = run("node", "--listen", f"{A}:{port}", "--key-file", key_file(tmp_path / "k"),
            "--bootstrap", boot)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "--bootstrap" in r.stderr, r
    assert "Traceback" not in r.stderr


# ---- as a service ----------------------------------------------------------------------------

def test_the_text_stop_line_has_the_counters_the_help_promises(swarm):
    """Issue 27: `--help` says the node stops with its counters; the text line had none."""
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a bootstrap that never answers
    peer.bind((B, udp_port(A, B)))
    peer.settimeout(30)
    try:
        env = dict(os.environ, PELOTARI_SWARM_KEYS=Keyring.generate().hex())
        a = swarm("--listen", f"{A}:0", "--bootstrap", "%s:%d" % peer.getsockname(), env=env,
                  stdin=subprocess.DEVNULL, as_json=False)
        size = len(peer.recvfrom(2048)[0])  # its first Connect: counted now
        code, _ = a.stop(signal.SIGINT)
    finally:
        peer.close()
    stopped = NodeProcess.wait(a, lambda line: " stopped " in line, 5)
    assert code == 130 and a.stderr_text() == "", (code, a.stderr_text())
    words = stopped.split()  # TIME stopped stopped by SIGINT; counters: K=V ...
    assert words[2:6] == ["stopped", "by", "SIGINT;", "counters:"], stopped
    counters = dict(word.split("=") for word in words[6:])
    connects = int(counters["sent_Connect"])  # (1, or more where it was resent at 1 s)
    assert counters == {"sent_Connect": str(connects), "sent_bytes": str(connects * size)}


@pytest.mark.parametrize("stdin", ["devnull", "closed"])
def test_a_node_runs_without_stdin_and_stops_quickly_on_signals(swarm, tmp_path, stdin):
    kwargs = {"devnull": {"stdin": subprocess.DEVNULL},
              "closed": {"stdin": subprocess.DEVNULL, "preexec_fn": lambda: os.close(0)}}[stdin]
    env = dict(os.environ, PELOTARI_SWARM_KEYS=Keyring.generate().hex())  # the key from env
    port = udp_port(A, B)
    a = swarm("--listen", f"{A}:{port}", env=env, **kwargs)
    assert a.wait("listening", key_source="PELOTARI_SWARM_KEYS"), a.stderr
    b = swarm("--listen", f"{B}:{port}", "--bootstrap", f"{A}:{port}", env=env, **kwargs)
    assert b.wait("connected", peer=f"{A}:{port}"), b.stderr
    time.sleep(0.5)  # the end of input stops nothing
    assert a.proc.poll() is None and b.proc.poll() is None
    for p, sig in ((a, signal.SIGINT), (b, signal.SIGTERM)):
        code, took = p.stop(sig)
        assert (code, "".join(p.stderr)) == (130 if sig == signal.SIGINT else 0, "") \
            and took < 3, took
        assert p.wait("stopped", signal=sig.name, timeout=2) and p.group_gone()


def test_user_errors_are_one_line_without_a_traceback(tmp_path):
    key = key_file(tmp_path / "swarm.key")
    port = udp_port(A)
    open_key = key_file(tmp_path / "open.key")
    os.chmod(open_key, 0o644)
    bad_key = tmp_path / "bad.key"
    bad_key.write_text("# not a key\nzzzz\n")
    bad_key.chmod(0o600)
    cases = [
        (["--listen", f"{A}:{port}", "--key-file", str(tmp_path / "missing.key")],
         "cannot read key file"),
        (["--listen", f"{A}:{port}", "--key-file", open_key], "too open"),
        (["--listen", f"{A}:{port}", "--key-file", str(bad_key)], "line 2"),
        (["--listen", f"{A}:nonsense", "--key-file", key], "bad port"),
        (["--listen", f"0.0.0.0:{port}", "--key-file", key], "not every address"),
        (["--listen", f"{A}:{port}", "--key-file", key, "--bootstrap", f"{B}:0"], "port 0"),
        (["--listen", f"{A}:{port}"], "no network key"),
    ]
    env = {k: v for k, v in os.environ.items() if k != "PELOTARI_SWARM_KEYS"}
    for args, words in cases:
        res = run("node", *args, env=env)
        assert res.returncode == 1 and res.stderr.count("\n") == 1, (args, res.stderr)
        assert words in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind((A, port))
        res = run("node", "--listen", f"{A}:{port}", "--key-file", key)
        assert res.returncode == 1 and res.stderr.count("\n") == 1, res.stderr
        assert "cannot listen" in res.stderr and "Traceback" not in res.stderr


def test_an_open_key_file_is_taken_when_asked_to(swarm, tmp_path):
    key = key_file(tmp_path / "open.key")
    os.chmod(key, 0o644)
    a = swarm("--listen", f"{A}:{udp_port(A)}", "--key-file", key, "--insecure-key-file")
    assert a.wait("listening"), a.stderr
    a.command("help")
    assert a.wait("help")
    a.command("quit")
    assert a.proc.wait(5) == 0 and a.wait("stopped", signal="quit")


def test_simulate_appends_records(tmp_path):
    out = tmp_path / "swarm.jsonl"
    res = run("simulate", "-n", "24", "--bootstraps", "2", "--limit", "120", "--capacity", "48",
              "--max-known", "32", "-o", str(out))
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["phase"] for r in records] == ["join", "crash"]
    assert all(r["kind"] == "swarm-sim" and r["nodes"] == 24 and "env" in r for r in records)
    assert all((r["capacity"], r["max_known"]) == (48, 32) for r in records)
    assert "| join | 24 |" in res.stdout


# ---- the adapter, in-process -----------------------------------------------------------------

KR = Keyring([bytes(range(32))])


def test_adapter_connects_pings_sends_and_closes():
    async def main():
        port = udp_port(A, B)
        a = await Node.start(A, port, KR)
        b = await Node.start(B, port, KR)
        try:
            b.connect(a.address)
            ev = await b.next_event(3)
            assert ev == Connected(a.address, True, False)
            assert await a.next_event(3) == Connected(b.address, False, True)
            assert await a.ping(b.address) > 0  # b holds a as direct: every Ping is answered
            b.send(a.address, 7, b"kaixo")
            assert await a.next_event(3) == UserMessage(b.address, 7, 0, b"kaixo")
            with pytest.raises(KeyError):
                a.send(("127.0.0.229", 37999), 7, b"")
            with pytest.raises(ValueError):
                a.send(b.address, 3, b"")  # not a user type
            assert a.stats["received_User7"] == 1 and b.stats["sent_User7"] == 1
            assert {i.address: i.status for i in b.connections()} == {a.address: "direct"}
            # the MAC's wall clock is time.time(), refreshed at every call
            assert abs(a.core.wall_offset - (time.time() - asyncio.get_running_loop().time())) < 1
        finally:
            await a.close()
            await b.close()
        assert await a.next_event(1) is None and await a.next_event() is None
        with pytest.raises(RuntimeError):
            a.connect(b.address)
        assert [e async for e in b.events()] == []

    asyncio.run(main())


def test_adapter_rearms_the_timer_only_when_the_cores_changes():
    async def main():
        port = udp_port(A, B)
        a = await Node.start(A, port, KR)
        b = await Node.start(B, port, KR)
        try:
            b.connect(a.address)
            assert isinstance(await a.next_event(3), Connected)
            before = a._timer.rearms + b._timer.rearms
            for i in range(200):  # 200 sends and 200 receipts: no timer changes
                b.send(a.address, 9, b"%d" % i)
            got = [await a.next_event(3) for _ in range(200)]
            assert [e.data for e in got] == [b"%d" % i for i in range(200)]
            armed = a._timer.rearms + b._timer.rearms - before
            assert armed < 10, armed  # only the core's own timer changes (slot ticks)
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_adapter_bounds_its_event_queue_and_drops_strangers():
    async def main():
        port = udp_port(A, B, D)
        a = await Node.start(A, port, KR, max_events=3)
        b = await Node.start(B, port, KR)
        d = await Node.start(D, port, Keyring([Keyring.generate()]))
        try:
            b.connect(a.address)
            assert isinstance(await b.next_event(3), Connected)
            for i in range(10):
                b.send(a.address, 9, b"x")
            await asyncio.sleep(0.2)  # nobody reads a's events
            assert a.stats["events_dropped"] == 11 - 3  # Connected and 10 messages, 3 kept
            d.connect(a.address)
            await asyncio.sleep(0.2)
            assert a.stats["dropped_bad_mac"] == 1 and d.stats.get("received_bytes", 0) == 0
        finally:
            for n in (a, b, d):
                await n.close()

    asyncio.run(main())


def test_adapter_counts_socket_errors_and_reports_each_kind_once():
    class FullBuffer:
        """A socket whose send buffer is always full."""

        def __init__(self, sock):
            self.sock = sock

        def sendto(self, data, to):
            raise BlockingIOError(11, "Resource temporarily unavailable")

        def __getattr__(self, name):
            return getattr(self.sock, name)

    class Denied(FullBuffer):
        """A socket whose every send is refused."""

        def sendto(self, data, to):
            raise PermissionError(13, "Permission denied")

    async def main():
        cfg = Config(connect_backoff=(0.05, 0.05, 0.05, 0.05))
        port = udp_port(A)
        a = await Node.start(A, port, KR, cfg)
        try:
            # A send refused (as a broadcast address without SO_BROADCAST was: the core no
            # longer dials one): sendto fails at once.
            a._sock = Denied(a._sock)
            a.connect(("127.0.0.227", port))
            warning = await a.next_event(2)
            assert isinstance(warning, NodeWarning) and warning.kind == "send EACCES", warning
            await asyncio.sleep(0.3)
            assert a.stats["send_errors"] >= 3
            a._sock = FullBuffer(a._sock.sock)  # sends never block: a full buffer drops
            a.connect(("127.0.0.228", port))
            ev = await a.next_event(2)
            while not isinstance(ev, NodeWarning):  # the first dial's Unanswered (0.2 s)
                ev = await a.next_event(2)
            assert ev.kind == "send EAGAIN"
            await asyncio.sleep(0.3)
            assert a.stats["send_dropped"] >= 3
            a._sock = a._sock.sock
            events = []
            while (ev := await a.next_event(0.05)) is not None:
                events.append(ev)
            assert not any(isinstance(e, NodeWarning) for e in events), events
        finally:
            await a.close()

    asyncio.run(main())


def test_ipv6_nodes_from_the_command_line_and_a_ping_right_after_their_own_request(swarm,
                                                                                   tmp_path):
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
            port = s.getsockname()[1]
    except OSError:
        pytest.skip("no IPv6 loopback here")
    from pelotari.swarm.core import unicast

    assert unicast("::1") and not unicast("::") and not unicast("ff02::1")
    key = key_file(tmp_path / "swarm.key")
    a = swarm("--listen", f"[::1]:{port}", "--key-file", key, *FAST)
    assert a.wait("listening"), "".join(a.stderr)
    b = swarm("--listen", "[::1]:0", "--key-file", key, "--bootstrap", f"[::1]:{port}", *FAST)
    peer = f"[::1]:{port}"
    assert b.wait("connected", peer=peer, direct=True), (b.seen, "".join(b.stderr))
    # At once: the Ping lands in the slot of b's first request, which a has answered already
    # (one a slot): the adapter sends it again a slot later.
    b.command(f"ping {peer}")
    assert b.wait("pong", peer=peer, timeout=4), b.seen
    b.command("send ::1 7 x")  # the default port: nothing there
    assert b.wait("error", check=lambda e: "[::1]:21452" in e["message"])
    b.command(f"send 127.0.0.1:{port} 7 x")
    assert b.wait("error", check=lambda e: "IPv4 address" in e["message"])
    c = run("node", "--listen", "[::1]:0", "--key-file", key, "--bootstrap", "127.0.0.1:5")
    assert c.returncode == 1 and "IPv4 address; this node listens on IPv6" in c.stderr
    assert "Traceback" not in c.stderr
