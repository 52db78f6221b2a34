"""Gap repair end to end: real backbone, real clients, loss injected by a real UDP relay."""
import asyncio
import threading
import time

import pytest

from pelotari.fyrehose import (AsyncClient, Backbone, Client, Lost, Message, PublishTimeout,
                               Resync)
from pelotari.fyrehose.codec import NOJOURNAL, NOSUBSCRIBE

from conftest import wait_for
from lossy_relay import LossyRelay


def collect(client, want, timeout=15.0):
    """Items until `want` Messages/Lost have covered `want` sequences, or timeout."""
    items, covered = [], 0
    deadline = time.monotonic() + timeout
    while covered < want and time.monotonic() < deadline:
        item = client.receive(0.2)
        if item is None:
            continue
        items.append(item)
        covered += 1 if isinstance(item, Message) else item.count if isinstance(item, Lost) else 0
    return items


def addr(bb):
    return f"127.0.0.1:{bb.address[1]}"


def test_several_subscribers_receive_every_message_in_order(backbone):
    subs = [Client(addr(backbone)).start() for _ in range(4)]
    try:
        assert all(s.wait_connected(3) for s in subs)
        with Client(addr(backbone), receive=False) as pub:
            assert pub.wait_connected(3)
            seqs = [pub.publish(b"msg %d" % i) for i in range(200)]
        assert seqs == list(range(1000, 1200))  # confirmed with the right sequence
        for s in subs:
            got = collect(s, 200)
            assert [(m.sequence, m.data) for m in got] == [(1000 + i, b"msg %d" % i)
                                                           for i in range(200)]
    finally:
        for s in subs:
            s.close()


def test_publish_without_a_backbone_times_out(raw_peer):
    silent = raw_peer()  # a socket that never answers
    with Client(f"127.0.0.1:{silent.address[1]}", publish_timeout=0.3) as c:
        with pytest.raises(PublishTimeout):
            c.publish(b"x")


def test_nosubscribe_client_publishes_fire_and_forget_and_gets_no_delivers(backbone):
    with Client(addr(backbone)) as sub, \
            Client(addr(backbone), flags=NOSUBSCRIBE) as pub:
        assert sub.wait_connected(3) and pub.wait_connected(3)
        assert pub.publish(b"fire") is None
        assert collect(sub, 1) == [Message(1000, b"fire")]
        time.sleep(0.2)
        assert pub.stats().get("delivers_in", 0) == 0


def test_lossy_subscriber_ends_with_every_message_through_request_forward(backbone):
    relay = LossyRelay(backbone.address, loss=0.2, seed=7)
    peers = [Client(addr(backbone)).start() for _ in range(2)]
    lossy = Client(f"127.0.0.1:{relay.address[1]}", tail_probe=0.25).start()  # a lost tail too
    try:
        assert lossy.wait_connected(3) and all(p.wait_connected(3) for p in peers)
        n = 500
        with Client(addr(backbone), flags=NOJOURNAL, receive=False) as pub:
            for i in range(n):
                pub.publish_nowait(b"m%d" % i)
                if i % 50 == 0:
                    time.sleep(0.01)
        got = collect(lossy, n, timeout=20)
        assert [type(x) for x in got] == [Message] * n, [x for x in got if not isinstance(x, Message)]
        assert [m.data for m in got] == [b"m%d" % i for i in range(n)]
        assert [m.sequence for m in got] == list(range(1000, 1000 + n))
        stats = lossy.stats()
        assert relay.dropped > 50 and stats["requests"] > 0 and stats.get("lost", 0) == 0
        assert backbone.stats()["forwards"] > 0
    finally:
        lossy.close()
        for p in peers:
            p.close()
        relay.close()


def test_unrecoverable_gap_is_reported_lost_never_skipped(backbone):
    # Sequences 1003 and 1004 never reach the lossy client, and its only peer keeps no journal.
    relay = LossyRelay(backbone.address, loss=0.0, drop_sequences={1003, 1004})
    lossy = Client(f"127.0.0.1:{relay.address[1]}", request_delay=0.02, request_retries=2).start()
    other = Client(addr(backbone), flags=NOJOURNAL).start()
    try:
        assert lossy.wait_connected(3) and other.wait_connected(3)
        with Client(addr(backbone), flags=NOJOURNAL | NOSUBSCRIBE) as pub:
            for i in range(8):
                pub.publish(b"m%d" % i)
        got = collect(lossy, 8, timeout=10)
        assert got == [Message(1000, b"m0"), Message(1001, b"m1"), Message(1002, b"m2"),
                       Lost(1003, 1004), Message(1005, b"m5"), Message(1006, b"m6"),
                       Message(1007, b"m7")]
        assert backbone.stats()["drops"]["no_journal_peer"] >= 3  # every REQUEST, no peer
    finally:
        lossy.close()
        other.close()
        relay.close()


def test_backbone_restart_gives_a_resync_and_messages_keep_flowing(backbone_factory):
    first = backbone_factory(first_sequence=500000)
    port = first.address[1]
    with Client(f"127.0.0.1:{port}") as sub:
        assert sub.wait_connected(3)
        with Client(f"127.0.0.1:{port}", flags=NOSUBSCRIBE) as pub:
            pub.publish(b"before")
            assert collect(sub, 1) == [Message(500000, b"before")]
            first.stop()
            second = backbone_factory(port=port, first_sequence=7)
            # The client re-signs on with its next KEEPALIVE (at most a second).
            wait_for(lambda: second.stats()["subscribers"] == 1, timeout=3)
            pub.publish(b"after")
            pub.publish(b"after2")
            got = collect(sub, 2, timeout=3)
        assert got == [Resync(500001, 7), Message(7, b"after"), Message(8, b"after2")]


def test_asyncio_client_publishes_and_receives():
    async def main(port):
        sub = await AsyncClient.connect(f"127.0.0.1:{port}")
        pub = await AsyncClient.connect(f"127.0.0.1:{port}", receive=False)
        await asyncio.wait_for(sub.up.wait(), 3)
        await asyncio.wait_for(pub.up.wait(), 3)
        seqs = [await pub.publish(b"a%d" % i, timeout=2) for i in range(20)]
        got = [await asyncio.wait_for(sub.receive(), 2) for _ in range(20)]
        await pub.close()
        await sub.close()
        return seqs, got

    with Backbone(host="127.0.0.1", port=0, first_sequence=40) as bb:
        seqs, got = asyncio.run(main(bb.address[1]))
    assert seqs == list(range(40, 60))
    assert got == [Message(40 + i, b"a%d" % i) for i in range(20)]


def test_on_message_callback_gets_items_in_order(backbone):
    got, done = [], threading.Event()

    def on_message(item):
        got.append(item)
        if len(got) == 10:
            done.set()

    with Client(addr(backbone), on_message=on_message) as sub:
        assert sub.wait_connected(3)
        with Client(addr(backbone), flags=NOSUBSCRIBE) as pub:
            for i in range(10):
                pub.publish(b"%d" % i)
        assert done.wait(3)
    assert [m.sequence for m in got] == list(range(1000, 1010))


def test_publishing_from_many_threads_sends_each_push_exactly_once(backbone):
    with Client(addr(backbone), receive=False) as pub:
        assert pub.wait_connected(3)
        results = []

        def worker(k):
            results.extend(pub.publish(b"t%d-%d" % (k, i)) for i in range(50))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(results) == list(range(1000, 1400))
    assert backbone.stats()["pushes"] == 400


def test_flags_can_be_changed_while_running(backbone):
    with Client(addr(backbone)) as sub, Client(addr(backbone), flags=NOSUBSCRIBE) as pub:
        assert sub.wait_connected(3) and pub.wait_connected(3)
        pub.publish(b"one")
        assert collect(sub, 1) == [Message(1000, b"one")]
        sub.set_flags(NOSUBSCRIBE)
        wait_for(lambda: backbone.stats()["subscribers"] == 0, timeout=2)
        pub.publish(b"two")
        assert sub.receive(0.3) is None
        sub.set_flags(0)
        wait_for(lambda: backbone.stats()["subscribers"] == 1, timeout=2)
        pub.publish(b"three")
        # 1001 went out while it was not subscribed, and no peer journals it: reported lost.
        assert collect(sub, 2, timeout=5) == [Lost(1001, 1001), Message(1002, b"three")]


def test_packing_and_plain_clients_share_a_backbone(backbone):
    n = 300
    packed_sub = Client(addr(backbone), pack=1472).start()
    plain_sub = Client(addr(backbone)).start()
    try:
        assert packed_sub.wait_connected(3) and plain_sub.wait_connected(3)
        with Client(addr(backbone), pack=1472, flags=NOJOURNAL) as pub:
            assert pub.wait_connected(3)
            seqs = pub.publish_many([b"p%03d" % i for i in range(n)])
            assert pub.stats()["packs_in"] > 0  # its own DELIVERs came back packed
        assert seqs == list(range(1000, 1000 + n))
        want = [(1000 + i, b"p%03d" % i) for i in range(n)]
        for sub in (packed_sub, plain_sub):
            assert [(m.sequence, m.data) for m in collect(sub, n)] == want
        assert packed_sub.stats()["packs_in"] > 0 and plain_sub.stats().get("packs_in", 0) == 0
        st = backbone.stats()
        assert st["packs_in"] > 0 and st["packs_out"] > 0
    finally:
        packed_sub.close()
        plain_sub.close()


def test_a_lost_pack_is_repaired_message_by_message(backbone):
    relay = LossyRelay(backbone.address, loss=0.3, seed=3)
    peer = Client(addr(backbone), pack=1472).start()
    # The last pack may be lost too: only a tail probe (opt-in) finds a lost tail.
    lossy = Client(f"127.0.0.1:{relay.address[1]}", pack=1472, tail_probe=0.25).start()
    try:
        assert lossy.wait_connected(3) and peer.wait_connected(3)
        n = 600
        with Client(addr(backbone), pack=1472, flags=NOJOURNAL | NOSUBSCRIBE) as pub:
            # A client starts from the first message it hears: warm up until one gets through.
            while lossy.receive(0) is None:
                pub.publish(b"warm-up")
                time.sleep(0.02)
            while lossy.receive(0.1) is not None:
                pass
            for k in range(0, n, 50):
                pub.publish_many([b"m%d" % i for i in range(k, k + 50)])
                time.sleep(0.01)
        got, deadline = [], time.monotonic() + 20
        while b"m%d" % (n - 1) not in got and time.monotonic() < deadline:
            item = lossy.receive(0.2)
            if isinstance(item, Message) and item.data != b"warm-up":
                got.append(item.data)
        assert got == [b"m%d" % i for i in range(n)]
        assert relay.dropped > 3 and lossy.stats()["requests"] > 0
    finally:
        lossy.close()
        peer.close()
        relay.close()


def test_async_client_publishes_packed(backbone):
    async def main():
        sub = await AsyncClient.connect(addr(backbone), pack=4096)
        pub = await AsyncClient.connect(addr(backbone), pack=4096, flags=NOJOURNAL)
        try:
            seqs = await pub.publish_many([b"a%d" % i for i in range(40)])
            got = [await asyncio.wait_for(sub.receive(), 3) for _ in range(40)]
            return seqs, got
        finally:
            await pub.close()
            await sub.close()

    seqs, got = asyncio.run(main())
    assert seqs == list(range(1000, 1040))
    assert [(m.sequence, m.data) for m in got] == [(1000 + i, b"a%d" % i) for i in range(40)]
