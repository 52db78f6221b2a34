"""GSO fan-out: runs of DELIVERs go to each subscriber in one UDP_SEGMENT send, and every
subscriber still receives exactly the datagrams plain fan-out sends, in order."""
import socket

import pytest

from fastpath import refcodec as wire
from pelotari.fyrehose.backbone_core import gso_supported
from pelotari.fyrehose.batchio import SendBatch

pytestmark = pytest.mark.skipif(not gso_supported(), reason="this kernel has no UDP_SEGMENT")


HELD = 128  # PUSHes queued before the loop starts: a default 208 KiB SO_RCVBUF holds 256


def burst(address, payloads):
    """The PUSHes in one sendmmsg burst."""
    pub = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pub.bind(("127.0.0.1", 0))
    SendBatch().send(pub, [(wire.encode_push(p), address) for p in payloads])
    pub.close()


def receive(peer, count, timeout=30.0):
    """Datagrams until `count` arrived (or a long silence)."""
    out = []
    while len(out) < count and (got := peer.recv(timeout)) is not None:
        out.append(got[0])
    return out


def session(held_backbone, raw_peer, payloads, **config):
    bb = held_backbone(**config)
    subs = [raw_peer() for _ in range(3)]
    for s in subs:
        s.send(wire.encode_keepalive("", 0, 0, b"t" * 16), bb.address)
    burst(bb.address, payloads[:HELD])  # waits behind the KEEPALIVEs until the loop starts
    bb.release()
    burst(bb.address, payloads[HELD:])
    got = []
    for s in subs:
        datagrams = receive(s, 1 + len(payloads))
        assert datagrams[0][:1] == b"\x20"  # the KEEPALIVE's answer, then the DELIVERs
        got.append(datagrams[1:])
    # Then nothing more: one quiet wait covers all three (a late extra would be here by then).
    for s, datagrams in zip(subs, got):
        datagrams += [d for d, _ in s.recv_all(0.2 if s is subs[0] else 0.001)]
    return bb, got


def expected(payloads):
    return [wire.encode_deliver(100 + i, p) for i, p in enumerate(payloads)]


def test_a_burst_goes_out_in_gso_sends_with_identical_datagrams(held_backbone, raw_peer):
    payloads = [b"%04d" % i + b"x" * 12 for i in range(200)]
    bb, got = session(held_backbone, raw_peer, payloads, gso=True)
    for datagrams in got:
        assert datagrams == expected(payloads)
    st = bb.stats()
    assert st["gso"] and st["gso_sends"] > 0 and st["gso_segments"] > st["gso_sends"]
    assert st["delivers"] == 600


def test_without_gso_the_same_datagrams_go_one_per_send(held_backbone, raw_peer):
    payloads = [b"%04d" % i + b"x" * 12 for i in range(200)]
    bb, got = session(held_backbone, raw_peer, payloads, gso=False)
    assert all(datagrams == expected(payloads) for datagrams in got)
    assert bb.stats()["gso_sends"] == 0 and bb.stats()["datagrams_out"] >= 600


def test_mixed_sizes_break_runs_but_keep_order(held_backbone, raw_peer):
    payloads = [b"a" * (16 + (i % 3) * 100) for i in range(90)]
    bb, got = session(held_backbone, raw_peer, payloads, gso=True)
    assert all(datagrams == expected(payloads) for datagrams in got)


def test_segments_over_the_limit_go_the_plain_way(held_backbone, raw_peer):
    payloads = [b"z" * 1500 for _ in range(40)]  # 1,509-byte DELIVERs > 1,472
    bb, got = session(held_backbone, raw_peer, payloads, gso=True)
    assert all(datagrams == expected(payloads) for datagrams in got)
    assert bb.stats()["gso_sends"] == 0


def test_a_gro_client_receives_gso_runs_as_the_datagrams_sent(held_backbone):
    from pelotari.fyrehose import Client, Message

    bb = held_backbone(gso=True)
    payloads = [b"%04d" % i + b"y" * 60 for i in range(300)]
    got = []
    with Client(f"127.0.0.1:{bb.address[1]}", bind="127.0.0.1:0", gro=True) as client:
        bb.queued()  # the client's KEEPALIVE is first in the socket
        burst(bb.address, payloads[:HELD])
        bb.release()
        burst(bb.address, payloads[HELD:])
        assert client.wait_connected(30.0)
        for item in client.messages(timeout=30.0):
            got.append(item)
            if len(got) == len(payloads):
                break
        stats = client.stats()
    assert all(isinstance(m, Message) for m in got)
    assert [(m.sequence, m.data) for m in got] == [(100 + i, p) for i, p in enumerate(payloads)]
    assert bb.stats()["gso_sends"] > 0 and stats.get("requests", 0) == 0  # no gap was seen
