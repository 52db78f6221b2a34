"""pelotari.potato.transport: TCP and WebRTC (aiortc) transports carrying whole messages between
named peers, on loopback addresses (127.0.0.0/8) and, for WebRTC with aioice's own candidate
choice, in network namespaces the test creates (root only: the `lan` fixture says why when
skipped).

Run as a script, this file is one node in a process of its own (the stop and kill tests):
    python tests/test_potato_transport.py KIND NAME HOST PORT [HOST:PORT ...]
It prints JSON lines ({"ready": port}, {"up": name}, {"down": name}, {"msg": text, "from":
name}); a node that connects to nobody echoes every message back, one that connects sends
{"hi": NAME} to each peer it connects to.
"""
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

from pelotari.potato.transport import PING, PeerRefused, TcpTransport, WebRtcTransport

KINDS = {"tcp": TcpTransport, "webrtc": WebRtcTransport}
DOWN_BOUND = 1.5  # seconds from a peer's death to on_peer_down (dead_after is 1.0)


def run(coro, timeout=30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def until(predicate, timeout=3.0, step=0.005):
    """Poll until predicate() is true (returned True) or timeout (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(step)
    return True


class Rec:
    """A transport whose callbacks record events with their loop time."""

    def __init__(self, kind, name, host="127.0.0.1", **kwargs):
        self.events = []
        self.transport = KINDS[kind](
            name, host, 0, on_peer_up=lambda n: self._ev("up", n),
            on_peer_down=lambda n: self._ev("down", n),
            on_message=lambda n, d: self._ev("msg", n, d), **kwargs)
        self.name, self.host = name, host

    def _ev(self, *event):
        self.events.append((time.monotonic(), *event))

    def __getattr__(self, attr):
        return getattr(self.transport, attr)

    @property
    def address(self):
        return self.host, self.transport.port

    def got(self, kind, *args):
        return [e for e in self.events if e[1] == kind and tuple(e[2:2 + len(args)]) == args]

    def messages(self, peer):
        return [e[3] for e in self.events if e[1] == "msg" and e[2] == peer]


async def started(kind, *names, **kwargs):
    """Listening transports, the i-th on 127.0.0.(i+1) (all of 127/8 is this host's)."""
    nodes = [Rec(kind, name, f"127.0.0.{i + 1}", **kwargs) for i, name in enumerate(names)]
    for node in nodes:
        await node.start()
    return nodes


async def close_all(*nodes):
    for node in nodes:
        await node.close()


def fd_count():
    return psutil.Process().num_fds()


def open_files():
    """What this process's descriptors are open on (socket:[inode], pipe:[inode], paths):
    what a scenario leaves behind is what is open after it and was not before (a count would
    also see other tests' garbage closed meanwhile)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return out


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    """Each transport in turn."""
    return request.param


# -- the basics ---------------------------------------------------------------------------------


def test_two_and_three_nodes_exchange_names_and_exact_bytes(kind):
    payloads = [b'{"type": "broadcast", "body": "line\\nbreak \\u00e9"}',
                '{"text": "h\u00e9llo \u2603"}'.encode(), b"\xff\xfe not UTF-8", b"x" * 60000,
                b" ", b"{}"]

    async def scenario():
        a, b, c = await started(kind, "a", "b", "c")
        assert await b.connect(*a.address) == "a"
        assert await until(lambda: a.peers() == ["b"] and b.peers() == ["a"])
        assert a.got("up", "b") and b.got("up", "a")
        assert await c.connect(*a.address) == "a"
        assert await c.connect(*b.address) == "b"
        assert await until(lambda: len(a.peers()) == len(b.peers()) == 2)
        assert sorted(c.peers()) == ["a", "b"]
        for src, dst in [(a, b), (b, a), (a, c), (c, a), (b, c), (c, b)]:
            for data in payloads:
                assert src.send(dst.name, data)
        ordered = [b'{"n": %d}' % i for i in range(200)]
        for data in ordered:
            assert a.send("c", data)
        assert await until(lambda: len(c.messages("a")) == len(payloads) + 200)
        for src, dst in [(a, b), (b, a), (a, c), (c, a), (b, c), (c, b)]:
            assert await until(lambda: len(dst.messages(src.name)) >= len(payloads))
            assert dst.messages(src.name)[:len(payloads)] == payloads
        assert c.messages("a")[len(payloads):] == ordered
        assert a.stats["messages_sent"] == 2 * len(payloads) + 200
        assert not any(e[1] == "down" for n in (a, b, c) for e in n.events)
        await close_all(a, b, c)
        # close() reports every peer down
        assert sorted(e[2] for e in a.events if e[1] == "down") == ["b", "c"]

    run(scenario())


def test_send_refusals_are_counted(kind):
    async def scenario():
        a, b = await started(kind, "a", "b", max_message=1000)
        await b.connect(*a.address)
        assert not a.send("nobody", b"{}")
        assert not a.send("b", b"x" * 1001)
        assert not a.send("b", PING)
        assert not a.send("b", b"")
        assert not a.send("b", "text")
        assert a.send("b", b"x" * 1000)
        if kind == "tcp":
            assert not a.send("b", b'{"a":\n1}')
            assert a.stats["send_dropped_newline"] == 1
        assert (a.stats["send_dropped_unknown_peer"], a.stats["send_dropped_oversize"],
                a.stats["send_dropped_reserved"], a.stats["send_dropped_empty"],
                a.stats["send_dropped_not_bytes"]) == (1, 1, 1, 1, 1)
        assert await until(lambda: b.messages("a") == [b"x" * 1000])
        await b.close()
        assert await until(lambda: a.got("down", "b"))
        assert not a.send("b", b"{}")
        assert a.stats["send_dropped_unknown_peer"] == 2
        await a.close()
        assert not a.send("b", b"{}")

    run(scenario())


def test_send_buffer_limit(kind):
    async def scenario():
        a, b = await started(kind, "a", "b", max_buffer=100_000)
        await b.connect(*a.address)
        sent = 0
        while a.send("b", b"y" * 50_000):  # nothing is flushed until we yield
            sent += 1
            assert sent < 100
        assert a.stats["send_dropped_buffer_full"] == 1
        assert await until(lambda: len(b.messages("a")) == sent, timeout=5)
        assert a.send("b", b"{}")
        await close_all(a, b)

    run(scenario())


def test_oversize_message_received(kind):
    """TCP: a line over max_message closes the connection; WebRTC: the frame is dropped."""
    async def scenario():
        a, = await started(kind, "a", max_message=100_000)
        b, = [Rec(kind, "b", "127.0.0.2")]  # max_message 65,536
        await b.start()
        await a.connect(*b.address)
        assert a.send("b", b"z" * 70_000)
        if kind == "tcp":
            assert await until(lambda: b.got("down", "a") and a.got("down", "b"))
            assert b.stats["closed_oversize"] == 1
            assert a.peers() == [] == b.peers()
        else:
            assert a.send("b", b'{"after": 1}')
            assert await until(lambda: b.messages("a") == [b'{"after": 1}'])
            assert b.stats["recv_dropped_oversize"] == 1
            assert b.peers() == ["a"]
        assert b.messages("a") in ([], [b'{"after": 1}'])
        await close_all(a, b)

    run(scenario())


# -- names ------------------------------------------------------------------------------------


def test_duplicate_and_own_names_are_refused(kind):
    async def scenario():
        a, b = await started(kind, "a", "b")
        impostor = Rec(kind, "b", "127.0.0.3")
        twin = Rec(kind, "a", "127.0.0.4")
        assert await b.connect(*a.address) == "a"
        with pytest.raises(PeerRefused, match="duplicate"):
            await impostor.connect(*a.address)
        assert a.stats["refused_duplicate"] == 1
        with pytest.raises(PeerRefused, match="own_name"):
            await twin.connect(*a.address)
        assert a.stats["refused_own_name"] == 1
        with pytest.raises(PeerRefused, match="own_name"):
            await a.connect(*a.address)  # ourselves
        # connecting again to a current peer is a duplicate on both sides
        with pytest.raises(PeerRefused):
            await b.connect(*a.address)
        assert a.peers() == ["b"] and b.peers() == ["a"]
        assert len(a.got("up")) == 1 and not a.got("down")
        assert b.send("a", b'{"still": "here"}')
        assert await until(lambda: a.messages("b") == [b'{"still": "here"}'])
        assert impostor.peers() == [] and not impostor.got("up")
        await close_all(a, b, impostor, twin)

    run(scenario())


def test_bad_hellos_are_refused(kind):
    """A raw client: a name over 100 characters, a hello that is not JSON, then silence."""
    async def scenario():
        a, = await started(kind, "a", handshake_timeout=0.5)
        extra = ', "offer": "v=0"' if kind == "webrtc" else ""
        reader, writer = await asyncio.open_connection(*a.address)
        writer.write(b'{"hello": "%s"%s}\n' % (b"n" * 101, extra.encode()))
        line = await reader.readline()
        assert json.loads(line) == {"hello": "a", "refused": "bad_name"}
        writer.close()
        reader, writer = await asyncio.open_connection(*a.address)
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        assert await reader.read() in (b"", b'{"hello": "a", "refused": "bad_hello"}\n')
        writer.close()
        reader, writer = await asyncio.open_connection(*a.address)
        started_at = time.monotonic()
        assert await reader.read() == b""  # closed after handshake_timeout
        assert 0.4 < time.monotonic() - started_at < 1.5
        writer.close()
        assert a.stats["refused_bad_name"] == 1
        assert a.stats["refused_bad_hello"] == 1
        assert a.stats["handshake_timeout"] == 1
        await a.close()

    run(scenario())


def test_connect_failures_are_clear(kind):
    async def scenario():
        a, = await started(kind, "a", handshake_timeout=0.5)
        dead = socket.socket()
        dead.bind(("127.0.0.9", 0))  # bound, never listening: held, so connecting is refused
        port = dead.getsockname()[1]
        with pytest.raises(OSError, match=f"127.0.0.9:{port}"):
            await a.connect("127.0.0.9", port)
        dead.close()
        silent = socket.socket()  # accepts (in the backlog), never answers
        silent.bind(("127.0.0.9", 0))
        silent.listen()
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="0.5 s"):
            await a.connect(*silent.getsockname())
        assert time.monotonic() - t0 < 1.5
        silent.close()
        assert a.peers() == []
        await a.close()

    run(scenario())


@pytest.mark.parametrize("dialling, listening, says", [
    ("tcp", "webrtc", "speaks WebRTC, not TCP"),
    ("webrtc", "tcp", "speaks TCP, not WebRTC"),
])
def test_a_node_of_the_other_transport_is_named(dialling, listening, says):
    """Issue 27: a TCP node dialling a WebRTC one said only "closed the connection during the
    handshake" (the WebRTC side closed without a word); the other way, the TCP node took the
    WebRTC one for a peer until the signaling connection closed."""
    async def scenario():
        a, = await started(dialling, "a")
        b = Rec(listening, "b", "127.0.0.2")
        await b.start()
        with pytest.raises(PeerRefused, match=f"^{b.host}:{b.port} \\('b'\\) {says}: both ends "
                                              "need the same transport$"):
            await a.connect(*b.address)
        assert b.stats["refused_wrong_transport"] == 1 and a.stats["refused_by_peer"] == 1
        assert a.peers() == [] == b.peers() and a.events == [] == b.events
        await close_all(a, b)

    run(scenario())


def test_crossed_connects_keep_one_connection(kind):
    """Two nodes connecting to each other at once both end up peers over one connection."""
    async def scenario():
        for _ in range(3):
            a, b = await started(kind, "a", "b")
            names = await asyncio.gather(a.connect(*b.address), b.connect(*a.address))
            assert names == ["b", "a"]
            assert await until(lambda: a.peers() == ["b"] and b.peers() == ["a"])
            await asyncio.sleep(0.3)
            assert a.peers() == ["b"] and b.peers() == ["a"]
            assert len(a.got("up")) == 1 == len(b.got("up"))
            assert not a.got("down") and not b.got("down")
            assert a.send("b", b"[1]") and b.send("a", b"[2]")
            assert await until(lambda: b.messages("a") == [b"[1]"] and a.messages("b") == [b"[2]"])
            if kind == "tcp":
                assert len(a._links) == 1 == len(b._links)
            await close_all(a, b)

    run(scenario())


def test_tcp_late_crossed_refusal_waits_for_the_other_connection():
    """A connection we took that the peer then refuses as the losing one of a crossed pair: no
    down while its other connection arrives, a down if none does within handshake_timeout."""
    async def scenario():
        a, = await started("tcp", "a", handshake_timeout=0.5)

        async def raw_b():
            reader, writer = await asyncio.open_connection(*a.address)
            writer.write(b'{"hello": "b"}\n')
            assert json.loads(await reader.readline()) == {"hello": "a"}
            return writer

        first = await raw_b()
        assert await until(lambda: a.peers() == ["b"])
        first.write(b'{"hello": "b", "refused": "crossed"}\n')
        second = await raw_b()
        second.write(b'{"x": 2}\n')
        assert await until(lambda: a.messages("b") == [b'{"x": 2}'])
        assert a.peers() == ["b"] and len(a.got("up")) == 1 and not a.got("down")
        assert a.stats["closed_crossed"] == 1
        assert not a.send("b", b'{"hello": "x"}')  # the transport's own lines
        second.write(b'{"hello": "b", "refused": "crossed"}\n')
        t0 = time.monotonic()
        assert await until(lambda: a.got("down", "b"), timeout=2)
        assert 0.4 < a.got("down", "b")[0][0] - t0 < 0.9
        for writer in (first, second):
            writer.close()
        await a.close()
        assert len(a.got("down")) == 1

    run(scenario())


def test_max_peers(kind):
    async def scenario():
        a, b, c = await started(kind, "a", "b", "c", max_peers=1)
        await b.connect(*a.address)
        with pytest.raises(PeerRefused, match="max_peers"):
            await c.connect(*a.address)
        assert a.stats["refused_max_peers"] == 1 and a.peers() == ["b"]
        await close_all(a, b, c)

    run(scenario())


# -- liveness ---------------------------------------------------------------------------------


def test_closed_peer_is_down_at_once(kind):
    async def scenario():
        a, b, c = await started(kind, "a", "b", "c")
        await b.connect(*a.address)
        await c.connect(*a.address)
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        await b.close()
        assert await until(lambda: a.got("down", "b"), timeout=DOWN_BOUND)
        took = a.got("down", "b")[0][0] - t0
        assert took < DOWN_BOUND, took
        assert a.peers() == ["c"]
        assert a.stats["closed_dead"] == 0  # noticed by the close, not the silence
        await close_all(a, c)

    run(scenario())


def test_tcp_peer_that_stops_reading_and_pinging_is_down():
    """In process (TCP only: WebRTC's peers are stopped for real in
    test_stopped_and_killed_processes): b neither reads nor pings, so a hears nothing."""
    async def scenario():
        a, b = await started("tcp", "a", "b")
        await b.connect(*a.address)
        link = b._peers["a"]
        link.transport.pause_reading()
        b._keepalive.cancel()
        t0 = time.monotonic()
        assert await until(lambda: a.got("down", "b"), timeout=DOWN_BOUND + 0.5)
        took = a.got("down", "b")[0][0] - t0
        assert 0.8 < took < DOWN_BOUND, took
        assert a.stats["closed_dead"] == 1
        await close_all(a, b)

    run(scenario())


class NodeProcess:
    """This file run as a script: one node in a process of its own."""

    def __init__(self, argv, spawn=None):
        cmd = [sys.executable, os.path.abspath(__file__), *argv]
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        if spawn is None:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env,
                                         start_new_session=True)
        else:
            self.proc = spawn(cmd, stdout=subprocess.PIPE, text=True, env=env)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def seen(self, key, value=None):
        return [ev for ev in self.lines if key in ev and value in (None, ev[key])]

    async def wait(self, key, value=None, timeout=10.0):
        assert await until(lambda: self.seen(key, value), timeout), (key, value, self.lines)
        return self.seen(key, value)[0]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        self.reader.join(5)


def test_stopped_and_killed_processes(kind):
    """SIGSTOP: silent but connected (TCP keeps its ACKs, UDP its port): down by the pings;
    SIGKILL: down within the same bound."""
    async def scenario():
        a, = await started(kind, "a")
        procs = [NodeProcess([kind, name, f"127.0.0.{i + 2}", "0"])
                 for i, name in enumerate(("stopped", "killed"))]
        try:
            for proc in procs:
                port = (await proc.wait("ready"))["ready"]
                assert await a.connect(proc.seen("ready")[0]["host"], port) == proc.seen(
                    "ready")[0]["name"]
            assert sorted(a.peers()) == ["killed", "stopped"]
            assert a.send("stopped", b'{"echo": "me"}')
            assert await until(lambda: a.messages("stopped") == [b'{"echo": "me"}'])
            await asyncio.sleep(0.3)
            for proc, sig, name in zip(procs, (signal.SIGSTOP, signal.SIGKILL),
                                       ("stopped", "killed")):
                t0 = time.monotonic()
                proc.proc.send_signal(sig)
                assert await until(lambda: a.got("down", name), timeout=DOWN_BOUND + 1)
                took = a.got("down", name)[0][0] - t0
                assert took < DOWN_BOUND, (name, took)
            assert a.peers() == []
        finally:
            for proc in procs:
                proc.kill()
            await a.close()

    run(scenario())


# -- WebRTC specifics -------------------------------------------------------------------------


def test_webrtc_candidates_stay_on_the_hosts_address():
    """aioice alone would offer every interface address but 127.0.0.1; the transport offers
    only its own host's, so loopback works and nothing outside 127/8 is ever contacted."""
    async def scenario():
        a, b = await started("webrtc", "a", "b")
        await b.connect(*a.address)
        for node, own, other in ((a, "127.0.0.1", "127.0.0.2"), (b, "127.0.0.2", "127.0.0.1")):
            (link,) = node._links
            local = [line.split()[4] for line in link.pc.localDescription.sdp.splitlines()
                     if line.startswith("a=candidate:")]
            remote = [line.split()[4] for line in link.pc.remoteDescription.sdp.splitlines()
                      if line.startswith("a=candidate:")]
            assert local == [own] and remote == [other]
        await close_all(a, b)

    run(scenario())


def test_webrtc_wildcard_host_in_namespaces(lan):
    """Listening on 0.0.0.0, aioice picks the candidates itself (the namespace's veth address,
    not 127.0.0.1): two nodes in namespaces of their own on a bridge still meet."""
    hosts = [lan.add_host("pa"), lan.add_host("pb")]
    spawn = [lambda cmd, host=host, **kw: lan.spawn(host, cmd, **kw) for host in hosts]

    async def scenario():
        listener = NodeProcess(["webrtc", "pa", "0.0.0.0", "9100"], spawn[0])
        try:
            await listener.wait("ready")
            dialer = NodeProcess(["webrtc", "pb", "0.0.0.0", "0", f"{hosts[0].address}:9100"],
                                 spawn[1])
            try:
                await dialer.wait("up", "pa")
                await listener.wait("up", "pb")
                ev = await dialer.wait("msg")  # its hello, echoed
                assert ev == {"msg": '{"hi": "pb"}', "from": "pa"}
            finally:
                dialer.kill()
            await listener.wait("down", "pb", timeout=DOWN_BOUND + 1)
        finally:
            listener.kill()

    run(scenario())


# -- hygiene ----------------------------------------------------------------------------------


def test_close_leaves_nothing_behind(kind):
    async def scenario():
        fds, threads = open_files(), threading.active_count()
        tasks = asyncio.all_tasks()
        nodes = await started(kind, "a", "b", "c", "d")
        for i, node in enumerate(nodes):
            for other in nodes[i + 1:]:
                await node.connect(*other.address)
        assert all(len(node.peers()) == 3 for node in nodes)
        assert open_files() - fds
        for node in nodes:  # messages in flight while everything closes
            for other in nodes:
                if other is not node:
                    node.send(other.name, b"q" * 30000)
        for node in nodes:
            await node.close()
            await node.close()  # twice is harmless
        for _ in range(2000):  # until the closes have run (20 s at most)
            if not asyncio.all_tasks() - tasks and not open_files() - fds:
                break
            await asyncio.sleep(0.01)
        assert asyncio.all_tasks() - tasks == set()
        assert open_files() - fds == set()
        assert threading.active_count() == threads
        for node in nodes:
            assert node.peers() == [] and len(node.got("up")) == len(node.got("down")) == 3

    run(scenario())


def test_names_are_checked():
    async def scenario():
        with pytest.raises(ValueError):
            TcpTransport("", "127.0.0.1", 0, on_peer_up=print, on_peer_down=print,
                         on_message=print)
        with pytest.raises(ValueError):
            TcpTransport("n" * 101, "127.0.0.1", 0, on_peer_up=print, on_peer_down=print,
                         on_message=print)
        with pytest.raises(ValueError, match="numeric"):
            WebRtcTransport("a", "localhost", 0, on_peer_up=print, on_peer_down=print,
                            on_message=print)
        # the longest name travels whole
        a = Rec("tcp", "a" * 100)
        b = Rec("tcp", "\u00e9" * 100, "127.0.0.2")
        await a.start()
        assert await b.connect(*a.address) == "a" * 100
        assert await until(lambda: a.peers() == ["\u00e9" * 100])
        await close_all(a, b)

    run(scenario())


# -- the script ---------------------------------------------------------------------------------


async def _node_main(kind, name, host, port, targets):
    def out(obj):
        print(json.dumps(obj), flush=True)

    echo = not targets

    def on_message(peer, data):
        out({"msg": data.decode("utf-8", "replace"), "from": peer})
        if echo:
            transport.send(peer, data)

    transport = KINDS[kind](name, host, int(port), on_peer_up=lambda n: out({"up": n}),
                            on_peer_down=lambda n: out({"down": n}), on_message=on_message)
    await transport.start()
    out({"ready": transport.port, "host": host, "name": name})
    for target in targets:
        thost, tport = target.rsplit(":", 1)
        peer = await transport.connect(thost, int(tport))
        transport.send(peer, json.dumps({"hi": name}).encode())
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_node_main(*sys.argv[1:5], sys.argv[5:]))


def test_tcp_a_stranger_cannot_take_a_peers_name():
    """The attack review: Z connected to B; within the handshake timeout a stranger on another
    address says it is B. Z keeps the real B (was: the stranger replaced it, silently)."""
    async def scenario():
        b, z = await started("tcp", "B", "Z")
        assert await z.connect(*b.address) == "B"
        reader, writer = await asyncio.open_connection(*z.address, local_addr=("127.0.0.9", 0))
        writer.write(b'{"hello": "B"}\n')
        line = await reader.readline()
        assert json.loads(line)["refused"] == "duplicate"
        writer.close()
        assert z.send("B", b'"still the real B"')
        assert await until(lambda: b.messages("Z") == [b'"still the real B"'])
        assert not z.got("down", "B") and z.stats["replaced_crossed"] == 0
        await close_all(b, z)

    run(scenario())


def test_tcp_malformed_hellos_are_counted_not_tracebacks(capfd):
    async def scenario():
        a, = await started("tcp", "a", handshake_timeout=0.5)
        for line in (b'{"hello":[],"refused":"crossed"}\n', b'{"hello":' + b"[" * 1010 + b"\n"):
            reader, writer = await asyncio.open_connection(*a.address)
            writer.write(line)
            await reader.read()
            writer.close()
        b, = await started("tcp", "b")
        await b.connect(*a.address)
        b.transport._peers["a"].write(b'{"hello":' + b"[" * 5000 + b"\n")
        await asyncio.sleep(0.2)
        assert a.stats["refused_bad_hello"] == 2
        await close_all(a, b)

    run(scenario())
    assert "Traceback" not in capfd.readouterr().err


# -- the attack review: floods, crowds, reflection -----------------------------------------------


def test_tcp_rate_limit_pauses_reading_and_loses_nothing():
    """A peer sending faster than recv_rate is read no faster (reading paused: TCP pushes back
    on it), every line still arrives in order, and it is not judged silent meanwhile."""
    async def scenario():
        a, = await started("tcp", "a", recv_rate=1000, recv_burst=0.1)
        reader, writer = await asyncio.open_connection(*a.address, local_addr=("127.0.0.9", 0))
        writer.write(b'{"hello": "z"}\n')
        assert json.loads(await reader.readline()) == {"hello": "a"}
        lines = [b'{"n": %d}' % i for i in range(3000)]
        t0 = time.monotonic()
        writer.write(b"\n".join(lines) + b"\n")
        await asyncio.sleep(0.5)
        took = len(a.messages("z"))
        assert took <= 100 + 1000 * (time.monotonic() - t0) + 50, took
        assert await until(lambda: len(a.messages("z")) == 3000, timeout=6)
        assert 2.5 < time.monotonic() - t0 < 4.5
        assert a.messages("z") == lines
        assert a.stats["recv_held"] > 0 and not a.got("down")
        writer.close()
        await a.close()

    run(scenario())


def test_webrtc_rate_limit_drops_the_excess_and_keeps_the_peer():
    async def scenario():
        a, b = await started("webrtc", "a", "b", recv_rate=200, recv_burst=0.5)
        await b.connect(*a.address)
        t0 = time.monotonic()
        for i in range(2000):
            assert b.send("a", b'{"n": %d}' % i)
        await asyncio.sleep(1.5)
        assert await until(lambda: a.stats["messages_received"] + a.stats["recv_dropped_rate"]
                           == 2000, timeout=10)
        assert a.stats["messages_received"] <= 100 + 200 * (time.monotonic() - t0) + 20
        assert a.stats["recv_dropped_rate"] > 1000
        assert a.peers() == ["b"] and not a.got("down") and not b.got("down")
        await close_all(a, b)

    run(scenario())


def _silent(host, port, local):
    s = socket.socket()
    s.bind((local, 0))
    s.connect((host, port))
    s.settimeout(0.5)
    return s


def test_connections_per_address_at_the_limit_and_one_past(kind):
    """max_per_host (4): four connections from one address that say nothing are held (until
    hello_timeout); the fifth is closed at once without a byte; others are not affected."""
    async def scenario():
        a, b = await started(kind, "a", "b")
        held = [_silent(*a.address, "127.0.0.9") for _ in range(4)]
        await asyncio.sleep(0.2)
        extra = _silent(*a.address, "127.0.0.9")
        t0 = time.monotonic()
        assert await asyncio.to_thread(extra.recv, 100) == b""  # closed, nothing sent
        assert time.monotonic() - t0 < 0.4
        assert a.stats["refused_per_host"] == 1
        for s in held:  # still open: no EOF within the timeout
            with pytest.raises(socket.timeout):
                s.settimeout(0.01)
                s.recv(100)
        assert await b.connect(*a.address) == "a"  # another address: welcome
        held.pop().close()
        await asyncio.sleep(0.1)
        again = _silent(*a.address, "127.0.0.9")  # a place came free
        with pytest.raises(socket.timeout):
            again.settimeout(0.2)
            again.recv(100)
        assert a.stats["refused_per_host"] == 1
        for s in held + [extra, again]:
            s.close()
        await asyncio.sleep(0.1)
        # peers that finish their handshake count too: four names from one address, not five
        zs = [Rec(kind, f"z{i}", "127.0.0.10") for i in range(5)]
        for z in zs[:4]:
            assert await z.connect(*a.address) == "a"
        with pytest.raises((ConnectionError, OSError, ValueError)):
            await zs[4].connect(*a.address)
        assert a.stats["refused_per_host"] == 2
        assert sorted(a.peers()) == ["b", "z0", "z1", "z2", "z3"]
        await close_all(a, b, *zs)

    run(scenario())


def test_a_silent_stranger_is_closed_after_hello_timeout(kind):
    async def scenario():
        a, = await started(kind, "a", hello_timeout=0.3)
        s = _silent(*a.address, "127.0.0.9")
        s.settimeout(3)
        t0 = time.monotonic()
        assert await asyncio.to_thread(s.recv, 100) == b""
        assert 0.25 < time.monotonic() - t0 < 1.0
        s.close()
        await a.close()

    run(scenario())


def test_outgoing_connections_are_never_refused_for_max_peers(kind):
    """Strangers that took every incoming place (max_peers) do not keep us from the peers we
    connect to ourselves (--connect)."""
    async def scenario():
        a, b = await started(kind, "a", "b", max_peers=2)
        strangers = [Rec(kind, f"s{i}", f"127.0.0.{10 + i}") for i in range(3)]
        for s in strangers[:2]:
            assert await s.connect(*a.address) == "a"
        with pytest.raises(PeerRefused, match="max_peers"):
            await strangers[2].connect(*a.address)
        assert await a.connect(*b.address) == "b"
        assert sorted(a.peers()) == ["b", "s0", "s1"]
        await close_all(a, b, *strangers)

    run(scenario())


def _stun_listener(host):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))
    s.settimeout(0.05)
    return s


def _received(sock, seconds):
    got, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            got += len(sock.recv(2048))
        except socket.timeout:
            pass
    return got


async def _offer_from(host):
    """A real aiortc offer from `host` (its candidate lines, and the pc to close)."""
    m = Rec("webrtc", "mallory", host)
    pc = m._new_pc()
    pc.createDataChannel("potato")
    sdp = await m._describe(pc, offer=True)
    lines = sdp.splitlines(keepends=True)
    cand = [i for i, line in enumerate(lines) if line.startswith("a=candidate:")]
    return m, pc, lines, cand


async def _signal_raw(address, local, name, sdp):
    reader, writer = await asyncio.open_connection(*address, local_addr=(local, 0))
    writer.write(json.dumps({"hello": name, "offer": sdp}).encode() + b"\n")
    line = await reader.readline()
    writer.close()
    return json.loads(line)


def test_webrtc_offer_candidates_at_a_third_party_are_dropped():
    """The attack review: an offer naming ICE candidates at a third party made us send it
    connectivity checks (x4.3 the offer's bytes). Only the signaling address's candidates are
    used, at most max_candidates (8); the third party gets nothing."""
    async def scenario():
        victim = _stun_listener("127.0.0.7")
        vhost, vport = victim.getsockname()
        a, = await started("webrtc", "a")
        m, pc, lines, cand = await _offer_from("127.0.0.9")
        (i,) = cand

        def candidate(host, port):
            fields = lines[i].split(" ")
            fields[4], fields[5] = host, str(port)
            return " ".join(fields)

        # only the third party: refused, nothing sent there
        only = lines[:i] + [candidate(vhost, vport)] + lines[i + 1:]
        reply = await _signal_raw(a.address, "127.0.0.9", "m1", "".join(only))
        assert await asyncio.to_thread(_received, victim, 1.5) == 0  # was: 264 bytes of checks
        assert reply == {"hello": "a", "refused": "no_candidate"}
        # ours plus the third party's, and more of ours than the cap
        mixed = (lines[:i + 1] + [candidate(vhost, vport)]
                 + [candidate("127.0.0.9", 40000 + k) for k in range(10)] + lines[i + 1:])
        reply = await _signal_raw(a.address, "127.0.0.9", "m2", "".join(mixed))
        assert "answer" in reply
        (link,) = [x for x in a._links if x.name == "m2"]
        kept = [line.split()[4:6] for line in link.pc.remoteDescription.sdp.splitlines()
                if line.startswith("a=candidate:")]
        assert len(kept) == 8 and all(host == "127.0.0.9" for host, _ in kept)
        assert a.stats["ice_candidates_dropped"] == 1 + 1 + 3
        assert await asyncio.to_thread(_received, victim, 1.5) == 0
        await pc.close()
        await close_all(a, m)
        victim.close()

    run(scenario())


def test_webrtc_ice_checks_from_a_third_party_are_not_answered():
    """The attack review: whoever signaled knows our ICE credentials, and a STUN check can come
    from any source address. A check spoofed from a third party was answered there, and the
    third party then got our own checks (5 datagrams, 416 bytes for an 88-byte check)."""
    from test_potato_page import ice_address, ice_check, replies, udp

    async def scenario():
        a, = await started("webrtc", "a", handshake_timeout=30)
        m, pc, lines, _ = await _offer_from("127.0.0.9")
        offer = "".join(lines)
        reply = await _signal_raw(a.address, "127.0.0.9", "m1", offer)
        third, own = udp("127.0.0.66"), udp("127.0.0.9")
        try:
            check, ice = ice_check(reply["answer"], offer), ice_address(reply["answer"])
            third.sendto(check, ice)
            own.sendto(check, ice)
            assert await asyncio.to_thread(replies, own, 10)
            assert await asyncio.to_thread(replies, third, 0.3) == []
            assert a.stats["ice_checks_dropped"] == 1
        finally:
            third.close()
            own.close()
            await pc.close()
            await close_all(a, m)

    run(scenario())
