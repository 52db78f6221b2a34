"""The packing extension at the backbone: packed PUSHes are sequenced frame by frame, plain
subscribers get one DELIVER per datagram, subscribers that set PACKED get frames packed up to
their limit, and a malformed pack is dropped whole."""
import socket

import pytest

from fastpath import refcodec as wire
from pelotari.fyrehose.backbone_core import gso_supported
from pelotari.fyrehose.batchio import SendBatch
from fastpath.packets import NOSUBSCRIBE, PACKED, Deliver, packed_flags

TOKEN = b"t" * 16


def sign_on(peer, bb, flags=0):
    peer.send(wire.encode_keepalive("", 0, flags, TOKEN), bb.address)
    assert peer.recv()[0] == b"\x20" + TOKEN


def publish(bb, datagrams, sign=NOSUBSCRIBE | packed_flags(65507)):
    """Send datagrams from a new socket, signed on first with `sign` (None: not signed on)."""
    pub = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pub.bind(("127.0.0.1", 0))
    pub.settimeout(2)
    if sign is not None:  # only a live PACKED client may send packed PUSHes
        pub.sendto(wire.encode_keepalive("", 0, sign, TOKEN), bb.address)
        assert pub.recv(100) == b"\x20" + TOKEN
    SendBatch().send(pub, [(d, bb.address) for d in datagrams])  # one receive batch, mostly
    pub.close()


def frames_of(peer):
    """Every DELIVER frame the peer received, and the sizes of the datagrams they came in."""
    got, sizes = [], []
    for datagram, _ in peer.recv_all(0.3):
        sizes.append(len(datagram))
        got.extend((d.sequence, bytes(d.data)) for d in wire.decode_pack(datagram))
    return got, sizes


@pytest.mark.parametrize("gso", [False, True] if gso_supported() else [False])
def test_a_packed_push_reaches_plain_and_packing_subscribers(backbone_factory, raw_peer, gso):
    bb = backbone_factory(first_sequence=500, gso=gso)
    plain, packing = raw_peer(), raw_peer()
    sign_on(plain, bb)
    sign_on(packing, bb, packed_flags(1472))
    payloads = [b"m%03d" % i for i in range(30)]
    publish(bb, wire.pack_pushes(payloads[:20]) + [wire.encode_push(p) for p in payloads[20:]])
    expected = [(500 + i, p) for i, p in enumerate(payloads)]
    plain_datagrams = [d for d, _ in plain.recv_all(0.3)]
    assert plain_datagrams == [wire.encode_deliver(s, p) for s, p in expected]
    got, sizes = frames_of(packing)
    assert got == expected
    # The 20 packed frames arrive in one receive batch, so they travel on together; how the
    # other 10 are grouped depends on how they were batched on arrival.
    assert max(sizes) >= 20 * 13 and len(sizes) <= 11
    st = bb.stats()
    assert st["pushes"] == 30 and st["packs_in"] == 1 and st["delivers"] == 60


def test_packs_respect_the_subscribers_limit_and_a_large_frame_goes_alone(backbone_factory,
                                                                            raw_peer):
    bb = backbone_factory(first_sequence=1)
    sub = raw_peer()
    sign_on(sub, bb, packed_flags(100))
    payloads = [b"a" * 31] * 7 + [b"B" * 300] + [b"c" * 31] * 2  # 40-byte frames, one of 309
    publish(bb, [b"".join(wire.encode_push(p) for p in payloads)])  # one datagram: one batch
    got, sizes = frames_of(sub)
    assert got == [(1 + i, p) for i, p in enumerate(payloads)]
    assert sizes == [80, 80, 80, 40, 309, 80]


def test_the_limit_is_at_most_max_pack(backbone_factory, raw_peer):
    bb = backbone_factory(max_pack=50)
    sub = raw_peer()
    sign_on(sub, bb, packed_flags(60000))
    publish(bb, [wire.encode_push(b"x" * 16) * 6])  # 25-byte frames: two per 50 bytes
    assert frames_of(sub)[1] == [50, 50, 50]


def test_packed_flag_without_a_limit_means_the_default(backbone_factory, raw_peer):
    bb = backbone_factory()
    sub = raw_peer()
    sign_on(sub, bb, PACKED)
    publish(bb, [wire.encode_push(b"y" * 91) * 20])  # 100-byte frames: 14 fit in 1,472
    assert frames_of(sub)[1] == [1400, 600]


@pytest.mark.parametrize("bad, reason", [
    (wire.encode_push(b"ok") + b"\x02\x00", "length_mismatch"),  # frame header cut short
    (wire.encode_push(b"ok") + wire.encode_push(b"abc")[:-1], "length_mismatch"),  # DATA cut
    (wire.encode_push(b"ok") + wire.encode_deliver(7, b"abc"), "length_mismatch"),  # mixed types
    (wire.encode_push(b"ok") + b"\x00" * 9, "length_mismatch"),
    (b"\x02\x00\x05" + bytes(6) + b"abc", "length_mismatch"),  # LENGTH past the end
])
def test_a_malformed_pack_is_dropped_whole(backbone_factory, raw_peer, bad, reason):
    bb = backbone_factory(first_sequence=10)
    sub = raw_peer()
    sign_on(sub, bb, PACKED)
    publish(bb, [wire.encode_push(b"before"), bad, wire.encode_push(b"after")])
    got, _ = frames_of(sub)
    assert got == [(10, b"before"), (11, b"after")]  # nothing of the bad one, nothing lost
    assert bb.stats()["drops"][reason] == 1


def test_packing_off_refuses_packs_and_ignores_the_flag(backbone_factory, raw_peer):
    bb = backbone_factory(first_sequence=1, packing=False)
    sub = raw_peer()
    sign_on(sub, bb, PACKED)
    publish(bb, wire.pack_pushes([b"a", b"b"]) + [wire.encode_push(b"c"), wire.encode_push(b"d")])
    assert [d for d, _ in sub.recv_all(0.3)] == [wire.encode_deliver(1, b"c"),
                                                 wire.encode_deliver(2, b"d")]
    assert bb.stats()["drops"]["length_mismatch"] == 1


def test_a_batch_of_more_frames_than_one_fan_out_holds_keeps_every_sequence(backbone_factory,
                                                                           raw_peer):
    bb = backbone_factory(first_sequence=0, max_pack_frames=4000)
    sub = raw_peer()
    sign_on(sub, bb, packed_flags(60000))
    # 3 datagrams of 4,000 empty frames each: 12,000 frames > the 8,192 fanned out at once.
    publish(bb, [wire.encode_push(b"") * 4000] * 3)
    got, _ = frames_of(sub)
    assert [s for s, _ in got] == list(range(12000))


def test_zero_length_frames_and_the_largest_pack(backbone_factory, raw_peer):
    bb = backbone_factory(first_sequence=0, max_pack_frames=65507 // 9)
    sub = raw_peer()
    sign_on(sub, bb, packed_flags(65507))
    big = wire.encode_push(b"q" * 65498)  # one frame filling a datagram
    frames = wire.encode_push(b"") * (65507 // 9)  # 7,278 empty frames, 65,502 bytes
    publish(bb, [big, frames])
    got, sizes = frames_of(sub)
    assert len(got) == 1 + 65507 // 9 and got[0] == (0, b"q" * 65498)
    assert sizes == [65507, 65502]


def test_decode_pack_gives_each_frame(codec):
    pack = codec.encode_pack([Deliver(5, b"ab"), Deliver(6, b""), Deliver(9, b"xyz")])
    assert [(d.sequence, bytes(d.data)) for d in codec.decode_pack(pack)] == [
        (5, b"ab"), (6, b""), (9, b"xyz")]


@pytest.mark.parametrize("sign, allowed", [
    (None, False),                                 # never signed on
    (NOSUBSCRIBE, False),                          # signed on, but not PACKED
    (NOSUBSCRIBE | PACKED, True),                  # a publisher that opted in
    (packed_flags(1472), True),                    # a packing subscriber
])
def test_only_a_live_packed_client_may_send_a_pack(backbone_factory, raw_peer, sign, allowed):
    # Issue 11: 10 packed datagrams from anyone became 72,780 messages. A pack is accepted
    # only from the address:port of a live client that announced PACKED.
    bb = backbone_factory(first_sequence=1)
    sub = raw_peer()
    sign_on(sub, bb)
    publish(bb, [wire.encode_push(b"") * 50, wire.encode_push(b"single")], sign=sign)
    got = [d for d, _ in sub.recv_all(0.3)]
    st = bb.stats()
    if allowed:
        assert len(got) == 51 and st["packs_in"] == 1
    else:  # the pack is dropped whole; a plain PUSH is still accepted from anyone (B5)
        assert got == [wire.encode_deliver(1, b"single")]
        assert st["drops"]["pack_not_signed_on"] == 1 and st["pushes"] == 1


def test_frames_per_pack_at_the_limit_and_one_past(backbone_factory, raw_peer):
    bb = backbone_factory(first_sequence=1, max_pack_frames=100)
    sub = raw_peer()
    sign_on(sub, bb, packed_flags(65507))
    publish(bb, [wire.encode_push(b"a") * 100, wire.encode_push(b"b") * 101])
    got, _ = frames_of(sub)
    assert got == [(1 + i, b"a") for i in range(100)]
    assert bb.stats()["drops"]["pack_too_many_frames"] == 1
