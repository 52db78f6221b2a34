"""The backbone end to end: its socket loop over real UDP sockets on 127.0.0.1, poked with
hand-made datagrams. Every rule and limit is tested on the core alone, with a fake clock, in
test_backbone_core.py; these check what the adapter adds (the kernel's addresses and sizes,
batching, stop, memory). (B1)..(B5) are the seed's RULES (BACKBONE).
"""
import time

import pytest

from fastpath import refcodec as wire
from fastpath.packets import (MAX_DATA, MAX_SEQUENCE, NOJOURNAL, Deliver, Forward,
                              KeepaliveAck)

from conftest import wait_for

TOKEN = b"T" * 16


def keepalive(peer, bb, flags=0, token=TOKEN, addr="", port=0):
    peer.send(wire.encode_keepalive(addr, port, flags, token), bb.address)
    got = peer.recv(1.0)
    return wire.decode(got[0]) if got else None


def delivers(peer, quiet=0.2):
    return [wire.decode(d) for d, _ in peer.recv_all(quiet)]


def test_keepalive_is_acked_with_the_same_token(backbone, raw_peer):  # (B1)
    p = raw_peer()
    token = bytes(range(100, 116))
    p.send(wire.encode_keepalive("", 0, 0, token), backbone.address)
    data, src = p.recv()
    assert data == b"\x20" + token and src == backbone.address


def test_push_is_sequenced_and_delivered_to_every_subscriber(backbone, raw_peer):  # (B2)(B3)
    subs = [raw_peer() for _ in range(3)]
    for s in subs:
        assert keepalive(s, backbone) == KeepaliveAck(TOKEN)
    pub = raw_peer()  # (B5) never sent a KEEPALIVE
    for i in range(5):
        pub.send(wire.encode_push(b"m%d" % i), backbone.address)
    for s in subs:
        assert delivers(s) == [Deliver(1000 + i, b"m%d" % i) for i in range(5)]
    assert pub.recv(0.2) is None
    st = backbone.stats()
    assert (st["pushes"], st["delivers"], st["subscribers"]) == (5, 15, 3)


def test_empty_and_largest_payloads_are_delivered(backbone, raw_peer):
    s = raw_peer()
    keepalive(s, backbone)
    s.send(wire.encode_push(b""), backbone.address)
    s.send(wire.encode_push(b"z" * MAX_DATA), backbone.address)
    got = delivers(s)
    assert got[0] == Deliver(1000, b"") and got[1] == Deliver(1001, b"z" * MAX_DATA)


def test_request_is_forwarded_to_a_journaling_client_never_a_nojournal_one(backbone, raw_peer):  # (B4)
    requester, journaling, nojournal = raw_peer(), raw_peer(), raw_peer()
    keepalive(requester, backbone)
    keepalive(journaling, backbone)
    keepalive(nojournal, backbone, flags=NOJOURNAL)
    for _ in range(30):
        requester.send(wire.encode_request("", 0, 5, 9), backbone.address)
    forwards = delivers(journaling)
    assert forwards == [Forward("127.0.0.1", requester.address[1], 5, 9)] * 30
    assert nojournal.recv(0.2) is None
    assert requester.recv(0.1) is None  # never to the requester itself


def test_keepalive_or_request_naming_another_host_is_refused_by_default(backbone, raw_peer):
    s, peer = raw_peer(), raw_peer()
    keepalive(peer, backbone)
    assert keepalive(s, backbone, addr="10.1.2.3", port=9) is None  # no ACK, no table entry
    s.send(wire.encode_request("10.1.2.3", 9, 1, 1), backbone.address)
    assert peer.recv(0.2) is None
    st = backbone.stats()
    assert st["drops"]["foreign_address"] == 2 and st["clients"] == 1


def test_keepalive_naming_another_port_of_its_own_host_is_refused(backbone, raw_peer):
    # Issue 11: one socket varying PORT kept 4,096 entries alive. Only the source itself can
    # be signed on, so each entry is a socket that asked for its DELIVERs.
    control, listener, pub = raw_peer(), raw_peer(), raw_peer()
    assert keepalive(control, backbone, addr="127.0.0.1", port=listener.address[1]) is None
    assert keepalive(control, backbone, addr="", port=listener.address[1]) is None
    pub.send(wire.encode_push(b"x"), backbone.address)
    assert listener.recv(0.2) is None and control.recv(0.1) is None
    st = backbone.stats()
    assert st["drops"]["foreign_address"] == 2 and st["clients"] == 0
    # Naming itself explicitly is the same as zeros.
    own = control.address
    assert keepalive(control, backbone, addr=own[0], port=own[1]) == KeepaliveAck(TOKEN)


def test_allow_foreign_addresses_lets_a_keepalive_name_another_port(backbone_factory, raw_peer):
    bb = backbone_factory(allow_foreign_addresses=True)
    control, listener, pub = raw_peer(), raw_peer(), raw_peer()
    ack = keepalive(control, bb, addr="127.0.0.1", port=listener.address[1])
    assert ack == KeepaliveAck(TOKEN)  # the ACK goes to the KEEPALIVE's source
    pub.send(wire.encode_push(b"x"), bb.address)
    assert delivers(listener) == [Deliver(bb.stats()["next_sequence"] - 1, b"x")]
    assert control.recv(0.1) is None


def test_default_first_sequence_follows_the_clock(backbone_factory):
    before = int(time.time() * 1e6) % (1 << 48)
    bb = backbone_factory()
    after = int(time.time() * 1e6) % (1 << 48)
    assert before <= bb.next_sequence <= after or after < before  # (unless the clock wrapped)


# Malformed and unexpected datagrams, each with the drop reason it must be counted under.
CORPUS = [
    (b"", "truncated"),
    (b"\x02\x00\x01\x00\x00\x00\x00\x00", "truncated"),
    (b"\x02\x00\x09\x00\x00\x00\x00\x00\x00short", "length_mismatch"),
    (b"\x10" + b"\x00" * 30, "length_mismatch"),
    (b"\x04" + b"\x00" * 6 + b"\x00\x00\x00\x00\x00\x09" + b"\x00\x00\x00\x00\x00\x01", "invalid_field"),
    (b"\x99garbage", "unknown_type"),
    (b"\x00" * 64, "unknown_type"),
    # (DATA past MAX_DATA cannot be sent at all: the kernel refuses an IPv4 UDP datagram over
    # 65,507 bytes with EMSGSIZE. Oversize is tested with a lower max_data below.)
    (b"\x02\x00\x10" + b"\x00" * 6 + b"x" * 65000, "length_mismatch"),
    (b"\x01\x00\x01\x00\x00\x00\x00\x00\x01x", "unexpected_type"),   # a DELIVER sent to the backbone
    (b"\x08" + b"\x00" * 18, "unexpected_type"),                     # a FORWARD
    (b"\x20" + b"\x00" * 16, "unexpected_type"),                     # a KEEPALIVE-ACK
    # The cluster extension's QUERY and INFO: a backbone that is no cluster member answers
    # nothing and counts them as it counts DELIVER, FORWARD and ACK (docs/protocols/fyrehose.md).
    (b"\x40" + b"q" * 16 + b"\x00" * 47, "unexpected_type"),         # a QUERY
    (b"\x80" + b"\x00" * 31 + b"\x01" + b"\x7f\x00\x00\x01\x09\x13" + b"\x00" * 25,
     "unexpected_type"),                                              # an INFO
    (b"\x40" + b"\x00" * 62, "truncated"),                            # a QUERY one byte short
    (b"\x80" + b"\x00" * 64, "length_mismatch"),                      # an INFO one byte long
    (b"\x80" + b"\x00" * 31 + b"\x06" + b"\x00" * 31, "invalid_field"),  # INFO with COUNT 6
]


def test_malformed_corpus_is_counted_by_reason_and_state_survives(backbone, raw_peer):
    sub, attacker = raw_peer(), raw_peer()
    keepalive(sub, backbone)
    attacker.send(wire.encode_push(b"before"), backbone.address)
    assert delivers(sub) == [Deliver(1000, b"before")]
    for datagram, _ in CORPUS:
        attacker.send(datagram, backbone.address)
    expected = {}
    for _, reason in CORPUS:
        expected[reason] = expected.get(reason, 0) + 1
    wait_for(lambda: sum(backbone.stats()["drops"].values()) == len(CORPUS))
    drops = {k: v for k, v in backbone.stats()["drops"].items() if v}
    assert drops == expected
    assert sub.recv(0.2) is None  # nothing was delivered or sequenced
    attacker.send(wire.encode_push(b"after"), backbone.address)
    assert delivers(sub) == [Deliver(1001, b"after")]  # sequence continuous, subscriber kept
    assert backbone.running and backbone.stats()["subscribers"] == 1


def test_a_flood_of_garbage_does_not_stall_the_loop(backbone, raw_peer):
    sub, attacker = raw_peer(), raw_peer()
    keepalive(sub, backbone)
    junk = b"\xee" * 1400
    for i in range(20000):
        attacker.send(junk, backbone.address)
    attacker.send(wire.encode_push(b"still here"), backbone.address)
    got = delivers(sub, quiet=0.5)
    assert got == [Deliver(1000, b"still here")]
    st = backbone.stats()
    assert st["drops"]["unknown_type"] + st["receive_errors"] <= 20000
    assert st["drops"]["unknown_type"] > 0


def test_stop_is_prompt_and_releases_the_port(backbone_factory):
    from pelotari.fyrehose import Backbone

    bb = backbone_factory()
    port = bb.address[1]
    t0 = time.monotonic()
    bb.stop()
    assert time.monotonic() - t0 < 1.0 and not bb.running
    again = Backbone(host="127.0.0.1", port=port).start()  # the port is free again
    again.stop()


def test_backbone_limits_are_validated():
    from pelotari.fyrehose import Backbone

    for bad in ({"max_subscribers": 0}, {"window": 0}, {"max_data": MAX_DATA + 1},
                {"max_request_range": 0}, {"first_sequence": MAX_SEQUENCE + 1}):
        with pytest.raises(ValueError):
            Backbone(host="127.0.0.1", port=0, **bad).start()


def test_serving_leaks_no_python_memory(backbone, raw_peer):
    # The compiled loop runs nogil, where Cython cannot create Python objects; this checks that
    # nothing around it (stats, the table, the wrapper) grows with traffic either, and that the
    # pure loop keeps nothing per datagram. Sent in chunks the slower pure loop keeps up with.
    import gc
    import sys

    subs = [raw_peer() for _ in range(2)]
    for s in subs:
        keepalive(s, backbone)
    pub = raw_peer()
    push, junk = wire.encode_push(b"p" * 100), b"\xee" * 100

    def blast(n):
        for _ in range(0, n, 500):
            for _ in range(500):
                pub.send(push, backbone.address)
                pub.send(junk, backbone.address)
            blast.total += 1000
            assert wait_for(lambda: backbone.stats()["datagrams_in"] >= blast.total, timeout=10)

    blast.total = backbone.stats()["datagrams_in"]
    blast(2000)  # warm-up
    gc.collect()
    before = sys.getallocatedblocks()
    blast(20000)
    gc.collect()
    grown = sys.getallocatedblocks() - before
    assert backbone.stats()["pushes"] == 22000
    assert grown < 500, f"{grown} Python blocks still allocated after 40,000 datagrams"


