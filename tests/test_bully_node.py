"""`pelotari bully` as real processes on loopback (127.0.0.1 leads, peers on 127.0.0.2..9), and
the asyncio adapter (pelotari.bully.node) in-process with raw sockets.

Every node binds its own loopback address, so all of them can share one free port. Processes
run in their own session: the fixture kills each group, whatever a test did.
"""
import asyncio
import os
import signal
import socket
import subprocess
import time

import pytest
from conftest import PELOTARI, wait_event, wait_for
from nodeproc import NodeProcess, Spawner, is_event

from pelotari.bully import wire
from pelotari.bully.core import Config, JoinFailed
from pelotari.bully.node import BindError, Node
from pelotari.bully.wire import Message, Peer

FAST = ["--heartbeat", "0.5"]


def bound_port(node):
    """The port a node started on port 0 got (from its listening event); its peers take the
    same number on their own 127.0.0.x."""
    ev = node.wait(is_event("listening"), 10)
    assert ev, "".join(node.stderr)
    return ev["port"]


class Bully(NodeProcess):
    """One `pelotari bully ... --json` process: events on a queue, commands on stdin."""

    def __init__(self, *args, **kwargs):
        super().__init__("bully", *args, **kwargs)


@pytest.fixture
def bully():
    with Spawner(Bully) as make:
        yield make


def network(bully, peers=3, offsets=None, extra=()):
    """A leader on 127.0.0.1 and `peers` peers on 127.0.0.2..; (port, leader, [(peer, id)])."""
    offsets = offsets or [0.0] * peers
    leader = bully("start", "--bind", "127.0.0.1:0", *FAST, *extra)
    port = bound_port(leader)
    out = []
    for k in range(peers):
        p = bully("join", f"127.0.0.1:{port}", "--bind", f"127.0.0.{k + 2}:{port}", *FAST,
                  "--clock-offset", repr(offsets[k]), *extra)
        out.append(p)
    joined = []
    for p in out:
        ev = p.wait(is_event("joined"), 10)
        assert ev is not None, "".join(p.stderr)
        joined.append((p, ev["id"]))
    return port, leader, joined


def count(p, kind):
    """How many events of that kind the process printed so far."""
    p.drain()
    return sum(1 for e in p.seen if e["event"] == kind)


def knows_everybody(p, ids, timeout=5.0):
    """Wait until the node's address book holds every ID in ids (but its own)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ev = p.ask("peers", "peers")
        if ev is not None and {k["id"] for k in ev["known"]} >= set(ids) - {ev["id"]}:
            return True
        time.sleep(0.2)
    return False


# ---- (a) joining, search, text ---------------------------------------------------------------

def test_leader_and_three_peers_ids_search_and_text(bully):
    port, leader, peers = network(bully)
    assert leader.wait(is_event("listening"))["id"] == 25
    ids = [i for _, i in peers]
    assert len(set(ids)) == 3 and all(1 <= i <= 25 for i in ids) and 25 not in ids
    for p, i in peers:
        ev = p.wait(is_event("joined"))
        assert ev["leader"] == {"id": 25, "host": "127.0.0.1", "port": port}
        assert ev["id"] == i
    assert wait_for(lambda: count(leader, "peer_joined") == 3), leader.seen
    joined = {e["peer"]["id"]: e["peer"] for e in leader.seen if e["event"] == "peer_joined"}
    assert joined == {i: {"id": i, "host": f"127.0.0.{k + 2}", "port": port}
                      for k, (_, i) in enumerate(peers)}

    (a, id_a), (b, id_b), (c, id_c) = peers
    found = a.ask(f"search {id_c}", "found")
    assert found is not None and found["peer"] == {"id": id_c, "host": "127.0.0.4", "port": port}

    message = "grüß dich ✓ 日本語 — \\ \"quoted\" \t tab"
    a.command(f"text {id_b} {message}")
    got = b.wait(is_event("text"), 5)
    assert got is not None and got["text"] == message
    assert got["from"] == {"id": id_a, "host": "127.0.0.2", "port": port}
    assert a.wait(is_event("text_sent"))["to"]["id"] == id_b
    c.command("text 25 to the leader")
    assert leader.wait(is_event("text", text="to the leader"))["from"]["id"] == id_c

    # A search for an ID nobody has: not found; bad commands are one error line each.
    assert a.ask("search 24", "not_found", 5)["id"] == 24
    assert "not an ID" in a.ask("search x", "error")["message"]
    # IDs past the seed's 25: no answer naming one would be believed, so none is asked for.
    assert "within 1..25" in a.ask("search 100", "error")["message"]
    # A leader's peers line names its members (it may have no neighbours at all).
    members = leader.ask("peers", "peers")["members"]
    assert sorted(m["id"] for m in members) == sorted(ids)
    # An election while the leader lives ends with it, and says so.
    assert a.ask("elect", "leader_kept", 5)["leader"]["id"] == 25
    assert "unknown command" in a.ask("frobnicate", "error")["message"]
    assert all(p.proc.poll() is None for p in (leader, a, b, c))


# ---- (b) the leader dies ---------------------------------------------------------------------

def test_sigkill_leader_survivors_agree_on_the_highest_id(bully):
    port, leader, peers = network(bully)
    ids = [i for _, i in peers]
    for p, _ in peers:
        assert knows_everybody(p, ids + [25]), p.seen[-1]
        p.drain()
    after = {p: [] for p, _ in peers}  # events since the kill
    killed = time.monotonic()
    leader.kill()  # SIGKILL

    best = max(ids)
    deadline = killed + 6.0
    for p, i in peers:
        ev = wait_event(p.events, after[p], is_event("new_leader"),
                        max(0.1, deadline - time.monotonic()))
        assert ev is not None, f"ID {i} named no new leader: {after[p]}"
    time.sleep(0.5)  # any later announcement too
    for p, i in peers:
        wait_event(p.events, after[p], lambda e: False, 0.01)
        named = [e for e in after[p] if e["event"] == "new_leader"]
        assert named[-1]["leader"] == {"id": best, "host": f"127.0.0.{ids.index(best) + 2}",
                                       "port": port}, (i, named)
        assert named[-1]["me"] is (i == best)
    elapsed = time.monotonic() - killed
    assert elapsed < 7.0
    # The new leader answers: a search through it still works.
    low = min(peers, key=lambda x: x[1])
    others = [i for _, i in peers if i != low[1]]
    assert low[0].ask(f"search {others[0]}", "found")["peer"]["id"] == others[0]


# ---- (c) clock sync --------------------------------------------------------------------------

def test_sync_brings_every_clock_within_a_few_ms(bully):
    offsets = [3.0, -4.5, 6.25]
    port, leader, peers = network(bully, offsets=offsets)
    for (p, _), off in zip(peers, offsets):
        assert abs(p.ask("time", "time")["offset"] - off) < 0.001
    error = peers[0][0].ask("sync", "error")["message"]
    assert error == f"only the leader synchronises clocks; the leader is 25@127.0.0.1:{port}"

    leader.command("sync")
    done = leader.wait(is_event("sync_done"), 8)
    assert done is not None and done["unanswered"] == []
    ids = sorted(str(i) for _, i in peers)
    assert sorted(done["offsets"]) == sorted(ids + ["25"])
    for (p, i), off in zip(peers, offsets):  # each measured within a few ms of the truth
        assert abs(done["offsets"][str(i)] - off) < 0.005, done
    for p, _ in peers:
        adjusted = p.wait(is_event("clock_adjusted"), 5)
        assert adjusted is not None and adjusted["stepped"] is True
    time.sleep(0.2)
    answers = [p.ask("time", "time") for p in [leader] + [p for p, _ in peers]]
    assert None not in answers, (answers, leader.seen[-5:], leader.stderr, leader.proc.poll())
    now = [a["offset"] for a in answers]
    assert max(now) - min(now) < 0.005, now
    assert abs(leader.ask("time", "time")["offset"] - done["average"]) < 0.005


# ---- (d) the service rules -------------------------------------------------------------------

def port_is_free(host, port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen(1)
            return True
        except OSError:
            return False


@pytest.mark.parametrize("stdin", ["devnull", "closed"])
def test_a_service_answers_without_stdin_and_stops_cleanly(bully, stdin):
    kwargs = {"devnull": {"stdin": subprocess.DEVNULL},
              "closed": {"stdin": subprocess.DEVNULL, "preexec_fn": lambda: os.close(0)}}[stdin]
    leader = bully("start", "--bind", "127.0.0.1:0", *FAST, **kwargs)
    port = bound_port(leader)
    peer = bully("join", f"127.0.0.1:{port}", "--bind", f"127.0.0.2:{port}", *FAST,
                 stdin=subprocess.DEVNULL)
    assert peer.wait(is_event("joined", id=1), 10), "".join(peer.stderr)
    assert leader.wait(is_event("peer_joined"), 5)["peer"]["id"] == 1
    time.sleep(1.0)  # heartbeats keep going; no input does not stop anything
    assert leader.proc.poll() is None and peer.proc.poll() is None

    code, took = leader.stop(signal.SIGTERM)
    assert (code, "".join(leader.stderr)) == (0, "") and took < 3, took
    assert leader.wait(is_event("stopped", signal="SIGTERM"), 2)
    assert leader.group_gone() and port_is_free("127.0.0.1", port)

    code, took = peer.stop(signal.SIGINT)  # Ctrl-C: status 130 (SIGTERM's is 0)
    assert (code, "".join(peer.stderr)) == (130, "") and took < 3, took
    assert peer.group_gone() and port_is_free("127.0.0.2", port)


def test_quit_and_ctrl_c_in_text_mode(bully):
    leader = bully("start", "--bind", "127.0.0.1:0", *FAST, as_json=False)
    line = leader.wait(lambda line: "listening on 127.0.0.1" in line and "ID 25" in line, 10)
    assert line, "".join(leader.stderr)
    port = int(line.split("listening on 127.0.0.1:")[1].split()[0])
    peer = bully("join", f"127.0.0.1:{port}", "--bind", f"127.0.0.2:{port}", *FAST,
                 as_json=False)
    line = peer.wait(lambda line: " joined as ID " in line, 10)
    assert line.split(" ", 1)[1] == f"joined as ID 1 (leader 25@127.0.0.1:{port}); peers: none\n"
    # A peer's text is shown on one inert line: controls escaped, the rest as it is.
    peer.command("text 25 red \x1b[31m ✓ \\ end")
    got = leader.wait(lambda line: " text from " in line, 5)
    assert got.split(" ", 1)[1] == (f"text from 1@127.0.0.2:{port}: red \\x1b[31m ✓ \\\\ end\n")
    peer.command("sync")
    assert peer.wait(lambda line: False, 0.5) is None
    assert f"error: only the leader synchronises clocks; the leader is 25@127.0.0.1:{port}" \
        in "".join(peer.stderr)
    peer.command("quit")
    assert peer.proc.wait(5) == 0
    code, _ = leader.stop(signal.SIGINT)
    assert code == 130 and "Traceback" not in "".join(leader.stderr)
    assert leader.wait(lambda line: "stopped by SIGINT" in line, 2)


def test_join_where_nothing_listens_is_one_line_and_status_1(bully):
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections to it are refused
    port = closed.getsockname()[1]
    p = bully("join", f"127.0.0.1:{port}", "--bind", f"127.0.0.2:{port}", *FAST,
              stdin=subprocess.DEVNULL, as_json=False)
    try:
        assert p.proc.wait(10) == 1
    finally:
        closed.close()
    time.sleep(0.1)
    err = "".join(p.stderr)
    assert err == (f"Error: cannot join: the leader at 127.0.0.1:{port} refused the "
                   f"connection\n"), err


def run(*args):
    return subprocess.run(PELOTARI + ["bully", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=20, check=False)


@pytest.mark.parametrize("args,needle", [
    (["start", "--heartbeat", "61"], "at most 60"),
    (["join", "127.0.0.1", "--heartbeat", "0"], "--heartbeat"),
    (["join", "127.0.0.1", "--heartbeat", "0.001"], "x>=0.1"),  # (1,000 connections a second)
    (["start", "--heartbeat", "5", "--peer-timeout", "4"], "peer-timeout must be longer"),
    (["start", "--id", "26"], "--id"),
    (["join", "127.0.0.1:notaport"], "bad port"),
])
def test_bad_option_values_are_one_error_line_and_status_2(args, needle):
    res = run(*args)
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error")]
    assert res.returncode == 2 and len(errors) == 1 and needle in errors[0], res.stderr
    assert "Traceback" not in res.stderr


def test_address_in_use_is_one_line_and_status_1():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        res = run("start", "--bind", f"127.0.0.1:{port}")
    assert res.returncode == 1
    assert res.stderr == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_help_explains_the_stdin_commands():
    for cmd in ([], ["start"], ["join"]):
        res = run(*cmd, "--help")
        assert res.returncode == 0
        for word in ("peers", "search ID", "text ID MESSAGE", "elect", "sync", "time", "quit"):
            assert word in res.stdout, (cmd, word)
    text = run("join", "--help").stdout
    assert "--clock-offset" in text
    # The defaults shown are the core's.
    assert f"[default: {Config().sync_interval:g}]" in " ".join(text.split())
    assert Config().peer_timeout > 60  # a peer heartbeating once a minute is never dropped


# ---- (e) the adapter, in-process -------------------------------------------------------------

def node_request(host="127.0.0.1", port=5555, peer_id=7):
    return wire.encode(Message(3, Peer(host, port, peer_id)))


async def _read_message(reader, size):
    data = await asyncio.wait_for(reader.readexactly(size), 3)
    return wire.decode(data)


def text_message(data, host="127.0.0.1", port=5555, peer_id=7):
    return wire.encode(Message(8, Peer(host, port, peer_id), data=data))


def test_adapter_closes_on_garbage_and_frames_split_and_coalesced_messages():
    from pelotari.bully.core import TextReceived

    async def scenario():
        events = []
        node = await Node.start("127.0.0.1", 0, on_event=events.append)
        try:
            r, w = await asyncio.open_connection("127.0.0.1", node.port)
            w.write(b"\xff\x01 not a bully message")
            assert await asyncio.wait_for(r.read(100), 30) == b""  # closed by the node
            w.close()
            assert node.all_stats()["dropped_unknown_tag"] == 1

            r, w = await asyncio.open_connection("127.0.0.1", node.port)
            for byte in text_message(b"one"):  # one byte per write, with pauses
                w.write(bytes([byte]))
                await w.drain()
                await asyncio.sleep(0.01)
            w.write(text_message(b"two") + text_message(b"three"))  # two in one write
            texts = lambda: [e.text for e in events if isinstance(e, TextReceived)]  # noqa: E731
            await wait_until(lambda: len(texts()) == 3, 30)
            assert texts() == ["one", "two", "three"]
            # A connection that carried whole messages is closed a moment after (the Java
            # clients send one message per connection; P2P-Client reads until EOF).
            assert await asyncio.wait_for(r.read(100), 30) == b""
            w.close()

            # A request is answered on its connection, which then closes.
            r, w = await asyncio.open_connection("127.0.0.1", node.port)
            w.write(node_request())
            assert (await _read_message(r, 34)).tag == 4
            assert await asyncio.wait_for(r.read(100), 30) == b""
            w.close()
            return node.all_stats()
        finally:
            await node.close()

    stats = asyncio.run(scenario())
    assert stats["connections_accepted"] == 3 and stats["received_NodeRequest"] == 1


def test_adapter_frees_a_hosts_oldest_idle_connection_and_aborts_a_peer_that_does_not_read():
    async def scenario():
        # (linger long: the connections that carried a message stay until this test is done)
        node = await Node.start("127.0.0.1", 0, config=Config(max_connections_per_host=2,
                                                              linger=60.0),
                                write_limit=1000)
        try:
            conns = []
            for k in range(2):
                conns.append(await asyncio.open_connection("127.0.0.1", node.port))
                conns[-1][1].write(text_message(b"m%d" % k))
                await wait_until(lambda k=k: node.core.stats["received_Text"] == k + 1, 30)
            # A third from the host: its oldest connection (nothing half-read) makes room.
            conns.append(await asyncio.open_connection("127.0.0.1", node.port))
            await wait_until(lambda: node.all_stats()["connections_evicted_host_limit"] == 1, 30)
            assert await asyncio.wait_for(conns[0][0].read(100), 30) == b""
            # Both left hold half a message: a fourth is refused.
            for _, w in conns[1:]:
                w.write(b"\x05\x01\x7f")
                await w.drain()
            await wait_until(lambda: all(s.node.core._conns[s.conn].framer.pending
                                         for s in node._streams.values()), 30)
            r4, w4 = await asyncio.open_connection("127.0.0.1", node.port)
            try:  # refused: reset, or closed at once
                assert await asyncio.wait_for(r4.read(100), 30) == b""
            except ConnectionResetError:
                pass
            assert node.all_stats()["connections_refused_host_limit"] == 1
            for _, w in conns + [(r4, w4)]:
                w.close()
        finally:
            await node.close()

        # A client that floods TellMeYourTime (as this node's leader) but never reads: the
        # node's unsent answers pile up past write_limit and the connection is aborted
        # (counted), not buffered.
        fake_leader = await asyncio.start_server(_fake_leader, "127.0.0.1", 0)
        port = fake_leader.sockets[0].getsockname()[1]
        node = await Node.start("127.0.0.2", 0, leader=("127.0.0.1", port),
                                config=Config(sync_interval=0), write_limit=1000)
        try:
            await wait_until(lambda: node.core.id == 1, 30)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.bind(("127.0.0.1", 0))
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.2", node.port))
            await wait_until(lambda: len(node._streams) >= 1, 30)
            for stream in node._streams.values():
                stream.transport.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            batch = wire.encode(Message(11, Peer("127.0.0.1", port, 25))) * 100
            for _ in range(2000):
                try:
                    sock.send(batch)
                except (BlockingIOError, ConnectionResetError, BrokenPipeError):
                    pass
                await asyncio.sleep(0.005)
                if node.all_stats()["connections_aborted_write_buffer"]:
                    break
            sock.close()
            assert node.all_stats()["connections_aborted_write_buffer"] == 1
        finally:
            await node.close()
            fake_leader.close()

    asyncio.run(scenario())


async def _fake_leader(reader, writer):
    """A leader at 127.0.0.1 that gives ID 1 and reads whatever else comes."""
    try:
        head = await reader.readexactly(2)
        if head[0] == 1:
            await reader.readexactly(6)
            writer.write(wire.encode(Message(2, id=1, peers=(
                Peer("127.0.0.1", writer.get_extra_info("sockname")[1], 25),))))
        await reader.read()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def test_a_connect_that_hangs_is_given_up_by_the_core_and_cancelled():
    """A 'leader' whose accept queue is full drops our SYNs: the core's connect timeout closes
    the pending connection, the adapter cancels it; three tries, then JoinFailed."""
    async def scenario():
        blackhole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        blackhole.bind(("127.0.0.1", 0))
        blackhole.listen(0)
        fillers = []
        for _ in range(3):  # fill its accept queue (nobody accepts)
            f = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            f.setblocking(False)
            try:
                f.connect(blackhole.getsockname())
            except BlockingIOError:
                pass
            fillers.append(f)
        events = []
        node = await Node.start("127.0.0.2", 0, leader=blackhole.getsockname(),
                                config=Config(connect_timeout=0.2, reply_timeout=0.2),
                                on_event=events.append)
        try:
            t0 = time.monotonic()
            while not any(isinstance(e, JoinFailed) for e in events):
                assert time.monotonic() - t0 < 5, events
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.05)
            return events, node.connections, dict(node.all_stats())
        finally:
            await node.close()
            blackhole.close()
            for f in fillers:
                f.close()

    events, open_connections, stats = asyncio.run(scenario())
    assert "did not answer" in events[-1].reason
    assert open_connections == 0
    assert stats.get("connect_timeouts", 0) >= 1, stats


def test_bind_errors_name_the_address():
    async def scenario():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen(1)
            port = holder.getsockname()[1]
            with pytest.raises(BindError) as info:
                await Node.start("127.0.0.1", port)
        return str(info.value), port

    text, port = asyncio.run(scenario())
    assert text == f"cannot listen on 127.0.0.1:{port}: Address already in use"


def test_nodes_bound_to_any_address_name_the_connections_end():
    """A leader and a peer bound to 0.0.0.0: the joiner learns the leader's ID (the leader names
    itself by the address the joiner reached), and a sync round reaches the wildcard peer
    (its HereIsMyTime names 127.0.0.1, not 0.0.0.0, so it is not dropped as forged)."""
    from pelotari.bully.core import Joined, SyncDone

    async def scenario():
        leader, peer, led, got = await joined_pair(Config(heartbeat=0.5, peer_timeout=1.6),
                                                   "0.0.0.0", "0.0.0.0")
        try:
            joined = next(e for e in got if isinstance(e, Joined))
            leader.start_sync()
            await wait_until(lambda: any(isinstance(e, SyncDone) for e in led), 3.0)
            return joined, next(e for e in led if isinstance(e, SyncDone)), leader.port
        finally:
            await peer.close()
            await leader.close()

    joined, done, port = asyncio.run(scenario())
    assert joined.leader == Peer("127.0.0.1", port, 25)
    assert done.unanswered == () and set(done.offsets) == {25, joined.id}


def test_a_hangup_stops_the_node_cleanly(bully):
    leader = bully("start", "--bind", "127.0.0.1:0", *FAST, stdin=subprocess.DEVNULL)
    port = bound_port(leader)
    code, took = leader.stop(signal.SIGHUP)
    assert (code, "".join(leader.stderr)) == (0, "") and took < 3, took
    assert leader.wait(is_event("stopped", signal="SIGHUP"), 2)
    assert leader.group_gone() and port_is_free("127.0.0.1", port)


def test_the_adapter_rearms_its_timer_only_when_the_cores_changes():
    """A leader (127.0.0.1) and a peer (127.0.0.2); 100 texts from the peer, each on a
    connection of its own: the leader's timer is armed again only when the core's next
    deadline moves, far fewer times than the calls into its core."""
    from pelotari.bully.core import TextReceived

    async def scenario():
        leader, peer, led, got = await joined_pair(Config(heartbeat=5.0, peer_timeout=16.0,
                                                          text_burst=1000),
                                                   "127.0.0.1", "127.0.0.2")
        try:
            calls = []
            real = leader.core.data_received
            leader.core.data_received = lambda *a: (calls.append(1), real(*a))[1]
            before = leader._timer.rearms
            for i in range(100):  # in tens: a host has 16 connections open at most
                peer.text(25, b"t%d" % i)
                if i % 10 == 9:
                    await wait_until(lambda n=i + 1: sum(isinstance(e, TextReceived)
                                                         for e in led) == n)
            texts = sorted(e.text for e in led if isinstance(e, TextReceived))
            return texts, leader._timer.rearms - before, len(calls)
        finally:
            await peer.close()
            await leader.close()

    texts, rearms, calls = asyncio.run(scenario())
    assert texts == sorted(f"t{i}" for i in range(100))
    assert calls >= 100 and rearms < calls / 4, (rearms, calls)


async def joined_pair(cfg, leader_host, peer_host):
    """A leader and a peer joined to it, in-process: (leader, peer, leader's events, peer's)."""
    from pelotari.bully.core import Joined

    led, got = [], []
    leader = await Node.start(leader_host, 0, config=cfg, on_event=led.append)
    peer = await Node.start(peer_host, 0, leader=("127.0.0.1", leader.port), config=cfg,
                            on_event=got.append)
    try:
        await wait_until(lambda: any(isinstance(e, Joined) for e in got), 2.0)
    except BaseException:
        await peer.close()
        await leader.close()
        raise
    return leader, peer, led, got


async def wait_until(predicate, timeout=5.0):
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def test_a_flooding_connection_is_read_a_piece_at_a_time_and_others_still_served():
    """20,000 NodeSearch in one write: the node handles them max_messages_per_read at a time
    (reading that connection paused meanwhile), every one counted, and answers another
    connection's NodeRequest in between."""
    async def scenario():
        node = await Node.start("127.0.0.71", 0)
        try:
            one = wire.encode(Message(6, Peer("127.0.0.72", 3333), source_id=7, search_id=1,
                                      destination_id=9))
            _, flood = await asyncio.open_connection("127.0.0.71", node.port,
                                                     local_addr=("127.0.0.72", 0))
            flood.write(one * 20000)
            reader, asker = await asyncio.open_connection("127.0.0.71", node.port,
                                                          local_addr=("127.0.0.73", 0))
            asker.write(wire.encode(Message(3, Peer("127.0.0.73", 3333, 5))))
            answer = await asyncio.wait_for(reader.read(4096), 30)
            assert answer and answer[0] == 4  # NodeResponse
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while node.core.stats["received_NodeSearch"] < 20000 and loop.time() < deadline:
                await asyncio.sleep(0.01)
            flood.close()
            asker.close()
            return node.core.stats["received_NodeSearch"]
        finally:
            await node.close()

    assert asyncio.run(scenario()) == 20000
