"""pelotari.adapter: the pieces the asyncio adapters of the cores share."""
import asyncio
import errno
import logging
import socket
from collections import Counter

import pytest

from pelotari.adapter import (CoreTimer, DatagramNode, EventQueue, NodeWarning, Trouble, deliver,
                              receive_datagrams, send_datagrams)

log = logging.getLogger("test.adapter")


def test_core_timer_rearms_only_when_the_time_changes_and_fires_at_it():
    async def main():
        loop = asyncio.get_running_loop()
        fired = []
        timer = CoreTimer(loop, fired.append, offset=100.0)  # core clock = loop clock + 100
        base = loop.time() + 100.0
        for _ in range(50):
            timer.arm(base + 0.05)
        assert timer.rearms == 1 and timer.when == base + 0.05
        timer.arm(base + 0.02)
        assert timer.rearms == 2
        timer.arm(None)
        timer.arm(None)
        assert timer.rearms == 2 and timer.when is None
        await asyncio.sleep(0.08)
        assert fired == []  # cancelled: neither time fired
        timer.arm(base + 0.01)
        await asyncio.sleep(0.05)
        assert fired == [base + 0.01] and timer.when is None
        assert loop.time() + 100.0 >= base + 0.01
        timer.arm(base + 0.01)  # the same time again after it fired: armed again
        assert timer.rearms == 4
        timer.cancel()

    asyncio.run(main())


def test_trouble_counts_every_error_and_reports_each_kind_once():
    stats, events = Counter(), []
    t = Trouble(log, stats, events.append)
    for _ in range(3):
        t.socket_error("send", OSError(errno.ENETUNREACH, "Network is unreachable"),
                       ("127.0.0.1", 9))
    t.socket_error("receive", OSError(errno.ECONNREFUSED, "Connection refused"))
    t.socket_error("send", BlockingIOError(errno.EAGAIN, "again"), ("127.0.0.1", 9),
                   "send_dropped")
    assert stats == {"send_errors": 3, "receive_errors": 1, "send_dropped": 1}
    assert [e.kind for e in events] == ["send ENETUNREACH", "receive ECONNREFUSED",
                                        "send EAGAIN"]
    assert all(isinstance(e, NodeWarning) for e in events)
    assert events[0].message.startswith("cannot send to 127.0.0.1:9: Network is unreachable")
    assert "earlier datagram" in events[1].message
    assert "send buffer is full" in events[2].message
    t.warn_once("internal KeyError", "x")
    t.warn_once("internal KeyError", "y")
    assert [e.message for e in events[3:]] == ["x"]


def test_event_queue_holds_its_limit_drops_one_past_and_ends_at_close():
    async def main():
        stats = Counter()
        q = EventQueue(stats, limit=3)
        for i in range(4):
            q.put(i)
        assert stats["events_dropped"] == 1
        assert [await q.get(0.1) for _ in range(3)] == [0, 1, 2]
        assert await q.get(0.01) is None  # timeout
        for i in range(3):
            q.put(i)
        q.close()  # full: the oldest goes to make room for the end
        assert stats["events_dropped"] == 2
        assert [ev async for ev in q] == [1, 2]
        assert await q.get() is None and await q.get() is None

    asyncio.run(main())


class _FailingSocket:
    def __init__(self, exc):
        self.exc, self.sent = exc, []

    def sendto(self, data, to):
        if self.exc is not None:
            raise self.exc
        self.sent.append((data, to))


def test_send_datagrams_never_blocks_drops_on_a_full_buffer_and_counts_errors():
    stats, events = Counter(), []
    t = Trouble(log, stats, events.append)
    send_datagrams(_FailingSocket(BlockingIOError(errno.EAGAIN, "full")),
                   [(b"a", ("127.0.0.1", 9))] * 2, t)
    send_datagrams(_FailingSocket(OSError(errno.EPERM, "no")), [(b"a", ("127.0.0.1", 9))], t)
    ok = _FailingSocket(None)
    send_datagrams(ok, [(b"a", ("127.0.0.1", 9)), (b"b", ("127.0.0.2", 9))], t)
    assert stats == {"send_dropped": 2, "send_errors": 1}
    assert ok.sent == [(b"a", ("127.0.0.1", 9)), (b"b", ("127.0.0.2", 9))]
    assert [e.kind for e in events] == ["send EAGAIN", "send EPERM"]


def test_receive_datagrams_reads_at_most_a_batch_of_at_most_size_bytes():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        tx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        for i in range(5):
            tx.sendto(b"%d" % i * (i + 1), rx.getsockname())
        got = []
        t = Trouble(log, Counter(), lambda ev: None)
        deliver = lambda data, source: got.append((data, source))  # noqa: E731
        assert receive_datagrams(rx, 4, deliver, t, batch=3) == 3
        assert receive_datagrams(rx, 4, deliver, t, batch=3) == 2
        assert receive_datagrams(rx, 4, deliver, t, batch=3) == 0
        assert [d for d, _ in got] == [b"0", b"11", b"222", b"3333", b"4444"]  # 5 bytes cut
        assert {s for _, s in got} == {tx.getsockname()}
    finally:
        rx.close()
        tx.close()


@pytest.mark.parametrize("limit", [1, 2])
def test_event_queue_limit_at_and_one_past(limit):
    async def main():
        stats = Counter()
        q = EventQueue(stats, limit=limit)
        for i in range(limit):
            q.put(i)
        assert stats["events_dropped"] == 0
        q.put(limit)
        assert stats["events_dropped"] == 1

    asyncio.run(main())


class _EchoCore:
    """A toy sans-IO core: echoes every datagram, an event each; a timer 0.05 s after the last."""

    def __init__(self):
        self.out, self.events, self.timer, self.fired = [], [], None, 0

    def receive_datagram(self, data, source, now):
        self.out.append((b"echo " + data, source))
        self.events.append(data)
        self.timer = now + 0.05

    def datagrams_to_send(self):
        out, self.out = self.out, []
        return out

    def next_event(self):
        return self.events.pop(0) if self.events else None

    def get_timer(self):
        return self.timer

    def handle_timer(self, now):
        self.fired += 1
        self.timer = None


class _EchoNode(DatagramNode):
    def __init__(self, sock):
        self.core = _EchoCore()
        self.stats = Counter()
        loop = asyncio.get_running_loop()
        self._attach(loop, [sock], self.stats, log, 64, max_events=8)

    def _now(self):
        return self._loop.time()


def test_datagram_node_reads_sends_queues_events_times_and_closes():
    async def main():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        peer.bind(("127.0.0.1", 0))
        peer.settimeout(2)
        node = _EchoNode(sock)
        try:
            for i in range(3):
                peer.sendto(b"%d" % i, sock.getsockname())
            assert [await node.next_event(2) for _ in range(3)] == [b"0", b"1", b"2"]
            got = sorted(peer.recvfrom(100)[0] for _ in range(3))
            assert got == [b"echo 0", b"echo 1", b"echo 2"]
            await asyncio.sleep(0.15)
            assert node.core.fired == 1 and node._timer.when is None
        finally:
            await node.close()
            peer.close()
        assert node.closed and sock.fileno() == -1
        assert await node.next_event(1) is None

    asyncio.run(main())


def test_deliver_logs_a_handler_bug_and_goes_on(caplog):
    got = []

    def handler(ev):
        if ev == 1:
            raise KeyError(ev)
        got.append(ev)

    with caplog.at_level(logging.ERROR, logger=log.name):
        for ev in (0, 1, 2):
            deliver(handler, ev, log)
    assert got == [0, 2]
    assert [r.getMessage() for r in caplog.records] == ["event handler failed on 1"]
