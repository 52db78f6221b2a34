"""The client adapters in memory: timer re-arming, and publish_stream's pacing and window."""
import asyncio
import time
from concurrent.futures import Future

import pytest

from fastpath import refcodec as wire
from fastpath.packets import NOJOURNAL, Keepalive, Push
from pelotari.fyrehose import (AsyncClient, Client, ClientConfig, Message, Published,
                               PublishTimeout)
from pelotari.fyrehose.core import MAX_WAIT, ClientCore

BB = ("127.0.0.1", 2323)


class FakeTransport:
    """What an asyncio datagram transport does for AsyncClient: collect sends."""

    def __init__(self):
        self.sent = []

    def sendto(self, data, addr):
        self.sent.append((wire.decode(data), addr))

    def get_extra_info(self, name):
        return ("127.0.0.1", 40000)

    def close(self):
        pass


def test_async_client_rearms_its_timer_only_when_the_cores_timer_moves():
    async def main():
        loop = asyncio.get_running_loop()
        armed = []
        real_call_at = loop.call_at

        def call_at(when, callback, *args, **kw):
            armed.append(when)
            return real_call_at(when, callback, *args, **kw)

        loop.call_at = call_at
        client = AsyncClient(BB, ClientConfig(request_delay=0.1))
        transport = FakeTransport()
        client.connection_made(transport)
        (ka, addr), = transport.sent
        assert isinstance(ka, Keepalive) and addr == BB
        client.datagram_received(wire.encode_keepalive_ack(ka.token), BB)
        assert client.up.is_set() and len(armed) == 1  # the next KEEPALIVE
        for seq in range(1000, 2000):
            client.datagram_received(wire.encode_deliver(seq, b"m%d" % seq), BB)
        assert len(armed) == 1, "a burst of in-order DELIVERs re-armed the timer"
        assert client.stats()["queued"] == 1000
        assert await client.receive() == Message(1000, b"m1000")
        # A gap: its REQUEST is due before the next KEEPALIVE, so the timer moves, once.
        client.datagram_received(wire.encode_deliver(2005, b"late"), BB)
        client.datagram_received(wire.encode_deliver(2006, b"later"), BB)
        assert len(armed) == 2 and armed[1] < armed[0]
        await client.close()

    asyncio.run(main())


def test_sync_client_wakes_its_io_thread_only_when_a_command_moves_the_timer_earlier(
        monkeypatch):
    client = Client(f"{BB[0]}:{BB[1]}", publish_timeout=0.5, flags=NOJOURNAL)
    core = client.core = ClientCore(client.backbone, time.monotonic(), client.config)
    core.handle_timer(time.monotonic())
    core.datagrams_to_send()
    client._timer_at = keepalive = core.get_timer()  # what the I/O thread sleeps until
    wakes, sent = [], []
    monkeypatch.setattr(client, "_wake", lambda: wakes.append(client._timer_at))
    monkeypatch.setattr(client, "_send", sent.extend)
    futs = [client.publish_nowait(b"m%d" % i) for i in range(100)]
    assert len(sent) == 100 and all(isinstance(wire.decode(d), Push) for d, _ in sent)
    # The first publish's expiry comes before the next KEEPALIVE: one wake-up; the later
    # expiries come after it: none.
    assert len(wakes) == 1 and wakes[0] < keepalive
    assert all(not f.done() for f in futs)


# ---- publish_stream -------------------------------------------------------------------------

class FakeTime:
    """A clock that moves only when slept on."""

    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class LazyFuture(Future):
    """Unconfirmed until someone waits on it; then confirmed with `sequence`."""

    def __init__(self, sequence, waits):
        super().__init__()
        self.sequence, self.waits = sequence, waits

    def result(self, timeout=None):
        if not self.done():
            self.waits.append(self.sequence)
            self.set_result(self.sequence)
        return super().result(timeout)


class Recorder:
    """Stands in for Client.publish_many_nowait: records each call."""

    def __init__(self, fake_time, make_future):
        self.time, self.make_future = fake_time, make_future
        self.calls = []  # (clock, datas, futures unconfirmed before the call)
        self.futures = []
        self.waits = []

    def __call__(self, datas):
        pending = sum(1 for f in self.futures if f is not None and not f.done())
        self.calls.append((self.time.now, list(datas), pending))
        futs = [self.make_future(len(self.futures) + i, self) for i in range(len(datas))]
        self.futures.extend(futs)
        return futs


def stream_client(monkeypatch, make_future=lambda seq, rec: LazyFuture(seq, rec.waits), **cfg):
    client = Client(f"{BB[0]}:{BB[1]}", **cfg)
    fake = FakeTime()
    recorder = Recorder(fake, make_future)
    monkeypatch.setattr(client, "publish_many_nowait", recorder)
    return client, fake, recorder


def test_publish_stream_paces_messages_at_the_rate(monkeypatch):
    client, fake, rec = stream_client(monkeypatch)
    stream = client.publish_stream([b"m%d" % i for i in range(10)], rate=50,
                                   clock=fake.clock, sleep=fake.sleep)
    outcomes = list(stream)
    assert [t for t, _, _ in rec.calls] == pytest.approx([100 + i / 50 for i in range(10)])
    assert sum(fake.sleeps) == pytest.approx(9 / 50)
    assert outcomes == [Published(b"m%d" % i, i) for i in range(10)]
    assert (stream.sent, stream.confirmed, stream.failed) == (10, 10, 0)


def test_publish_stream_keeps_at_most_window_unconfirmed_and_answers_in_order(monkeypatch):
    client, fake, rec = stream_client(monkeypatch)
    items = [("label %d" % i, b"d%d" % i) for i in range(10)]
    stream = client.publish_stream(items, key=lambda item: item[1], window=4,
                                   clock=fake.clock, sleep=fake.sleep)
    outcomes = list(stream)
    # Unconfirmed before each publish: the window fills, then is waited down to half.
    assert [pending for _, _, pending in rec.calls] == [0, 1, 2, 3, 2, 3, 2, 3, 2, 3]
    assert rec.waits == list(range(10))  # oldest first
    assert [o.item for o in outcomes] == items and [o.sequence for o in outcomes] == list(range(10))
    assert fake.sleeps == []  # no rate: never sleeps


def test_publish_stream_window_limits(monkeypatch):
    client, fake, rec = stream_client(monkeypatch)
    stream = client.publish_stream([b"a", b"b", b"c"], window=1, clock=fake.clock,
                                   sleep=fake.sleep)
    assert len(list(stream)) == 3
    assert [pending for _, _, pending in rec.calls] == [0, 0, 0]
    with pytest.raises(ValueError):
        client.publish_stream([], window=0)
    with pytest.raises(ValueError):
        client.publish_stream([], rate=0)
    list(client.publish_stream([b"d"], group=1, clock=fake.clock, sleep=fake.sleep))
    assert rec.calls[-1][1] == [b"d"]
    with pytest.raises(ValueError):
        client.publish_stream([], group=0)


def test_publish_stream_packs_groups_of_ten_milliseconds_or_64(monkeypatch):
    client, fake, rec = stream_client(monkeypatch, pack=1472)
    list(client.publish_stream([b"x"] * 25, rate=1000, clock=fake.clock, sleep=fake.sleep))
    assert [len(datas) for _, datas, _ in rec.calls] == [10, 10, 5]
    assert [t for t, _, _ in rec.calls] == pytest.approx([100.0, 100.01, 100.02])
    client, fake, rec = stream_client(monkeypatch, pack=1472)
    list(client.publish_stream([b"x"] * 150, clock=fake.clock, sleep=fake.sleep))
    assert [len(datas) for _, datas, _ in rec.calls] == [64, 64, 22]
    client, fake, rec = stream_client(monkeypatch, pack=1472)
    list(client.publish_stream([b"x"] * 40, window=16, clock=fake.clock, sleep=fake.sleep))
    assert [len(datas) for _, datas, _ in rec.calls] == [16, 16, 8]  # a group fits the window
    assert [pending + len(datas) for _, datas, pending in rec.calls] == [16, 16, 16]


def test_a_packing_stream_never_holds_an_item_back_to_fill_a_group(monkeypatch):
    # The flush rule: a group leaves as soon as the next item is not there yet (items 4 and 6
    # come later: reading them would wait).
    client, fake, rec = stream_client(monkeypatch, pack=1472)
    taken = []

    def items():
        for k in range(12):
            taken.append(k)
            yield b"x%d" % k

    def ready():
        return len(taken) not in (4, 6)

    outcomes = list(client.publish_stream(items(), clock=fake.clock, sleep=fake.sleep,
                                          ready=ready))
    assert [len(datas) for _, datas, _ in rec.calls] == [4, 2, 6]
    # before waiting for item 4, the first four were settled (their outcomes reported)
    assert rec.waits[:4] == [0, 1, 2, 3] and len(outcomes) == 12


def test_publish_stream_reports_failures_and_fire_and_forget(monkeypatch):
    def failing_odd(seq, rec):
        fut = Future()
        if seq % 2:
            fut.set_exception(PublishTimeout(f"publish {seq}: timeout"))
        else:
            fut.set_result(seq)
        return fut

    client, fake, rec = stream_client(monkeypatch, failing_odd)
    stream = client.publish_stream([b"a", b"b", b"c"], clock=fake.clock, sleep=fake.sleep)
    outcomes = list(stream)
    assert [(o.item, o.sequence) for o in outcomes] == [(b"a", 0), (b"b", None), (b"c", 2)]
    assert isinstance(outcomes[1].error, PublishTimeout)
    assert (stream.sent, stream.confirmed, stream.failed) == (3, 2, 1)

    client, fake, rec = stream_client(monkeypatch, lambda seq, rec: None)
    stream = client.publish_stream([b"a", b"b"], clock=fake.clock, sleep=fake.sleep)
    assert list(stream) == [Published(b"a", None), Published(b"b", None)]
    assert (stream.sent, stream.confirmed, stream.failed) == (2, 0, 0)


def test_an_interrupted_publish_stream_still_gives_what_is_in_flight(monkeypatch):
    client, fake, rec = stream_client(monkeypatch)
    sleeps = []

    def interrupting_sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise KeyboardInterrupt

    stream = client.publish_stream([b"m%d" % i for i in range(10)], rate=10, window=8,
                                   clock=fake.clock, sleep=interrupting_sleep)
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for outcome in stream:
            seen.append(outcome)
    assert seen == [] and stream.sent == 3
    assert [o.sequence for o in stream.drain()] == [0, 1, 2]
    assert (stream.confirmed, stream.failed) == (3, 0)


@pytest.mark.parametrize("rate", [float("inf"), float("nan"), 1e9 * 1.5, -1.0])
def test_publish_stream_refuses_a_rate_that_is_no_rate(monkeypatch, rate):
    client, _, _ = stream_client(monkeypatch)
    with pytest.raises(ValueError, match="rate must be within"):
        client.publish_stream([], rate=rate)
    client.publish_stream([], rate=1e9)  # the limit itself is a rate


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), -0.5, MAX_WAIT * 2])
def test_timeouts_past_what_a_thread_can_wait_are_value_errors(monkeypatch, timeout):
    # `pub --timeout inf` (and `--pack ... -r inf`) ended in an OverflowError traceback.
    client, _, _ = stream_client(monkeypatch)
    with pytest.raises(ValueError, match="timeout must be within"):
        client.publish_stream([], timeout=timeout)
    with pytest.raises(ValueError, match="timeout must be within"):
        client.receive(timeout)
    with pytest.raises(ValueError, match="timeout must be within"):
        ClientConfig(publish_timeout=timeout)
    assert client.receive(0) is None  # the bounds themselves wait
    ClientConfig(publish_timeout=MAX_WAIT)
