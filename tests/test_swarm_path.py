"""The swarm node's C datagram path (fastpath.swarmpath.PingPath) against the core it mirrors:
the same datagrams, over real loopback sockets to the C path and in memory to
SwarmNode.receive_datagram, must give the same Pongs (byte for byte), counters and table state —
for Pings from direct and vague connections, past every limit, replays, bad MACs, strangers,
truncated and oversized datagrams, and the core's own messages interleaved."""
import asyncio
import socket
import time
from collections import Counter

import pytest

from bench.fuzz.swarmpath import KR, PEERS, Pair, table_state
from pelotari.swarm import table as table_mod
from pelotari.swarm import wire
from pelotari.swarm.core import Config
from pelotari.swarm.node import Node, NodeWarning, fast_path_available
from pelotari.swarm.wire import Keyring

pytestmark = pytest.mark.skipif(not fast_path_available(),
                                reason="the C path is part of the Cython build only")

OTHER = Keyring([bytes(range(1, 33))])


def test_the_paths_wire_constants_are_the_wire_tables():
    from fastpath import swarmpath
    assert swarmpath.PING == wire.TYPES["Ping"] and swarmpath.PONG == wire.TYPES["Pong"]
    assert swarmpath.PING_SIZE == wire.PREFIX_SIZE + wire.body_size(wire.TYPES["Ping"])
    assert swarmpath.PING_SIZE == wire.PREFIX_SIZE + wire.body_size(wire.TYPES["Pong"])


def test_the_c_path_answers_exactly_as_the_core():
    cfg = Config(vague_pongs_per_slot=4, ping_burst=2, ping_refill=3.0)
    p = Pair(cfg)
    try:
        vague = [p.establish(k, 0.0) for k in (0, 1)]
        direct = p.establish(2, 0.0, direct=True)
        assert sorted(p.c.direct()) == [direct] and len(vague) == 2
        ping = p.sign(wire.ping(0xAB), 1.5)
        stranger = OTHER.sign(wire.pack(wire.ping(1)), p.wall + 1.5)
        user = p.sign(wire.user(9, b"kaixo"), 1.5)
        long_ = p.sign(wire.user(9, bytes(wire.MAX_BODY)), 1.5) + b"x"  # one byte past
        items = [(0, ping), (0, ping),          # a vague one: once a slot (claim)
                 (2, ping), (2, ping),          # a direct one: once a slot
                 (3, ping),                     # no record: the core Resets it
                 (1, stranger),                 # another network's key: dropped (MAC)
                 (1, ping[:30]), (1, ping[:40]),  # truncated; a short Ping (the MAC fails)
                 (1, user), (1, long_),         # the core's own, between Pings
                 (1, p.sign(wire.ping(7), 1.5)), (1, b"\x00\x02" + bytes(42))]
        p.feed(items, 1.5)
        # slot 2 (new claims), 3, ...: the vague buckets (burst 2, one every 3 s) run dry
        for now in (2.5, 3.5, 4.5, 5.5, 8.5):
            p.feed([(0, p.sign(wire.ping(int(now * 10)), now)),
                    (1, p.sign(wire.ping(int(now * 10) + 1), now))], now)
        c_sent = p.c_sent()
        assert sorted(c_sent) == sorted(p.to_py)
        kinds = Counter(wire.parse(d).name for d, _ in c_sent)
        assert kinds["Pong"] >= 5 and kinds["Reset"] == 1, kinds
        c_stats, py_stats = p.stats(), p.py.stats
        assert c_stats == py_stats, set(c_stats.items()) ^ set(py_stats.items())
        for k in ("limited_claim", "limited_own", "dropped_bad_mac", "dropped_truncated",
                  "dropped_too_long", "received_User9"):
            assert py_stats[k] >= 1, k
        assert table_state(p.c) == table_state(p.py)
        # the C path did the Pings: nothing but the core's share reached the core
        assert p.path.counters()["sent_Pong"] == kinds["Pong"]
    finally:
        p.close()


def test_the_global_vague_budget_is_shared_with_the_core():
    cfg = Config(vague_pongs_per_slot=2, ping_burst=5, ping_refill=0.1)
    p = Pair(cfg)
    try:
        for k in range(4):
            p.establish(k, 0.0)
        pings = [(k, p.sign(wire.ping(k + 1), 1.2)) for k in range(4)]
        p.feed(pings, 1.2)
        assert p.stats()["limited_global"] == 2 == p.py.stats["limited_global"]
        assert sorted(p.c_sent()) == sorted(p.to_py)
        assert p.c.vague_pongs == p.py.vague_pongs == 2
    finally:
        p.close()


def test_limits_of_the_path_itself():
    from fastpath.swarmpath import PingPath

    PingPath(max_datagram=44)
    with pytest.raises(ValueError):
        PingPath(max_datagram=43)
    with pytest.raises(ValueError):
        PingPath(ping_burst=0)
    with pytest.raises(ValueError):
        PingPath(capacity=0)
    with pytest.raises(ValueError):
        PingPath(capacity=1025)
    fp = PingPath(capacity=1)
    with pytest.raises(IndexError):
        fp.take(0)
    from fastpath.swarmmac import MacSet
    with pytest.raises(ValueError):
        fp.run(table_mod.ConnectionTable(4), MacSet())  # no keys loaded


@pytest.mark.parametrize("fast", [True, False])
def test_a_node_answers_pings_on_either_path(fast):
    async def main():
        a = await Node.start(PEERS[0], 0, KR, fast_path=fast)
        b = await Node.start(PEERS[1], 0, KR, fast_path=fast)
        try:
            assert a.fast_path is fast and b.fast_path is fast
            b.connect(a.address)
            assert (await a.next_event(3)).address == b.address
            assert await a.ping(b.address) > 0
            assert await b.ping(a.address) > 0
            assert a.stats["sent_Pong"] >= 1 and b.stats["received_Pong"] >= 1
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_an_ipv6_node_cannot_be_asked_for_the_c_path():
    async def main():
        with pytest.raises(ValueError):
            await Node.start("::1", 0, KR, fast_path=True)
        n = await Node.start("::1", 0, KR)
        assert not n.fast_path
        await n.close()

    try:
        socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    asyncio.run(main())


@pytest.mark.parametrize("fast", [True, False])
def test_ping_reports_the_round_trip_of_the_pong_that_counted(fast):
    # A peer answers one request per connection per slot: a ping() right after another goes
    # unanswered and is answered later, often as the Pong to one of the core's own routine
    # Pings. Its round trip is that Pong's, never the time since the user's ping() (before: up
    # to a slot, e.g. "round trip 996 ms" on loopback).
    cfg = Config(ping_interval=0.3, ping_jitter=0.0)

    async def main():
        a = await Node.start(PEERS[0], 0, KR, cfg, fast_path=fast)
        b = await Node.start(PEERS[1], 0, KR, cfg, fast_path=fast)
        try:
            b.connect(a.address)
            assert (await a.next_event(3)).address == b.address
            a.connect(b.address)  # both hold each other as direct: one answer a slot
            await asyncio.sleep(0.2)
            rtts = [await b.ping(a.address, timeout=3.0) for _ in range(4)]
            assert all(r is not None for r in rtts), rtts
            assert max(rtts) < 0.15, rtts  # loopback: well under a ms, but a loaded CI machine
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_a_max_datagram_below_a_pings_size_runs_the_python_path():
    # Limits allow 36..1024; a PingPath needs room for a Ping (44). Before: Node.start raised
    # "max_datagram must be within 44..65535" for a valid Config on the default path.
    cfg = Config(limits=wire.Limits(max_datagram=40), get_room=40)

    async def main():
        n = await Node.start(PEERS[0], 0, KR, cfg)
        try:
            assert not n.fast_path
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((PEERS[1], 0))
            s.sendto(wire.encode(wire.ping(1), KR, time.time()), n.address)
            s.close()
            for _ in range(100):
                await asyncio.sleep(0.01)
                if n.stats["dropped_too_long"]:
                    break
            assert n.stats["dropped_too_long"] == 1
        finally:
            await n.close()
        with pytest.raises(ValueError, match="max_datagram"):
            await Node.start(PEERS[0], 0, KR, cfg, fast_path=True)

    asyncio.run(main())


@pytest.mark.parametrize("fast", [True, False])
def test_a_bug_in_the_core_costs_one_datagram_not_the_batch(fast):
    # A datagram that makes the core raise (a bug: e.g. a scoped IPv6 source shared in a
    # Connections answer) is counted and reported once; the datagrams after it in the same
    # batch are still handled and the Pongs sent. Before: the exception left the socket's
    # callback (a traceback from the event loop), and on the C path the rest of the batch,
    # already read, was lost with its Pongs.
    async def main():
        a = await Node.start(PEERS[0], 0, KR, fast_path=fast)
        b = await Node.start(PEERS[1], 0, KR, fast_path=fast)
        loop_errors = []
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: loop_errors.append(ctx))
        try:
            b.connect(a.address)
            assert (await a.next_event(3)).address == b.address
            real = a.core.receive_datagram

            def buggy(data, source, now):
                if data.endswith(b"boom"):
                    raise RuntimeError("a bug")
                real(data, source, now)

            a.core.receive_datagram = buggy
            await asyncio.sleep(0.05)
            b.send(a.address, 9, b"boom")  # one batch: the bug, then a message and a Ping
            b.send(a.address, 9, b"after")
            b.core.ping(a.address, b._now())
            b._process_events(b._last)
            got = []
            while (ev := await a.next_event(2)) is not None:
                got.append(ev)
                if any(getattr(e, "data", None) == b"after" for e in got):
                    break
            assert [e.data for e in got if hasattr(e, "data")] == [b"after"]
            warned = [e for e in got if isinstance(e, NodeWarning)]
            assert [w.kind for w in warned] == ["internal RuntimeError"]
            assert a.stats["internal_errors"] == 1 and a.stats["sent_Pong"] >= 1
            assert not loop_errors, loop_errors
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


@pytest.mark.parametrize("fast", [True, False])
def test_a_strangers_mixed_flood_is_counted_by_reason_and_answered_by_one_reset(fast):
    # Over real sockets, one sender: garbage of every size, past the limit (1,025 and 65,507
    # bytes), Ping-shaped datagrams with bad MACs, truncated ones, and a captured valid Ping
    # from an address the node holds nothing for, interleaved. Every datagram is counted by
    # reason; the sender gets one 36-byte Reset a slot, nothing else; a real peer's ping is
    # answered meanwhile. The same counters on the C path and the Python path.
    import random

    async def main():
        a = await Node.start(PEERS[0], 0, KR, fast_path=fast)
        b = await Node.start(PEERS[1], 0, KR, fast_path=fast)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((PEERS[2], 0))
        s.setblocking(False)
        try:
            b.connect(a.address)
            assert (await a.next_event(3)).address == b.address
            rnd = random.Random(5)
            good = wire.encode(wire.ping(5), KR, time.time())
            kinds = {"too_long": lambda: rnd.randbytes(rnd.choice([1025, 2000, 65507])),
                     "bad_mac": lambda: b"\x00\x02\x00\x00" + rnd.randbytes(40),
                     "truncated": lambda: rnd.randbytes(rnd.randint(0, 35)),
                     "valid": lambda: good}
            sent = Counter()
            before = Counter(a.stats)
            for k in range(400):
                kind = rnd.choice(list(kinds))
                s.sendto(kinds[kind](), a.address)
                sent[kind] += 1
                if k % 50 == 49:
                    await asyncio.sleep(0.01)  # (no loss in the kernel: exact counts)
            assert await b.ping(a.address) is not None
            await asyncio.sleep(0.2)
            got = a.stats - before
            assert got["dropped_too_long"] == sent["too_long"]
            assert got["dropped_bad_mac"] == sent["bad_mac"]
            assert got["dropped_truncated"] == sent["truncated"]
            assert got["no_connection"] == sent["valid"]
            assert got["sent_Reset"] + got["limited_reset"] == sent["valid"]
            back = []
            while True:
                try:
                    back.append(len(s.recv(70000)))
                except BlockingIOError:
                    break
            assert back and set(back) == {36} and len(back) == got["sent_Reset"] <= 2
        finally:
            s.close()
            await a.close()
            await b.close()

    asyncio.run(main())
