"""Per-message cost of the backbone's sequencing and fan-out, without the kernel.

BackboneLoop.dry_run() feeds PUSHes through the real receive path with every send discarded,
so this is the user-space work per message (and, across N, per subscriber):

    .venv/bin/python -m pytest bench/micro --benchmark-enable -k fanout
"""
import socket

import pytest

from fastpath.backbone import BackboneLoop
from fastpath.codec import encode_keepalive, encode_push
from fastpath.packets import NOJOURNAL

MESSAGES_PER_BATCH = 64
BATCHES = 50


def loop_with_subscribers(n):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    loop = BackboneLoop(sock.fileno(), max_subscribers=max(n, 1), window=3600)
    ka = encode_keepalive("", 0, NOJOURNAL, b"t" * 16)
    addrs = [("127.0.%d.%d" % (k // 250, 1 + k % 250), 40000) for k in range(n)]
    for i in range(0, n, MESSAGES_PER_BATCH):
        loop.dry_run([(ka, a) for a in addrs[i:i + MESSAGES_PER_BATCH]])
    return loop, sock


@pytest.mark.parametrize("subscribers", [1, 16, 1000])
@pytest.mark.parametrize("payload", [16, 1024])
def test_fanout(benchmark, subscribers, payload):
    loop, sock = loop_with_subscribers(subscribers)
    pushes = [(encode_push(b"x" * payload), ("127.0.0.1", 9))] * MESSAGES_PER_BATCH
    benchmark.extra_info.update(messages_per_round=MESSAGES_PER_BATCH * BATCHES,
                                subscribers=subscribers)
    benchmark(loop.dry_run, pushes, BATCHES)
    sock.close()


@pytest.mark.parametrize("subscribers", [16, 1000])
def test_fanout_packed(benchmark, subscribers):
    """The packing extension: 16-byte messages arriving as packed PUSHes (58 per 1,472 bytes)
    to subscribers that set PACKED (limit 65,507): user-space work per message."""
    from fastpath.packets import NOSUBSCRIBE, PACKED, packed_flags

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    loop = BackboneLoop(sock.fileno(), max_subscribers=subscribers + 1, gso=False, window=3600)
    ka = encode_keepalive("", 0, NOJOURNAL | packed_flags(65507), b"t" * 16)
    # Only a live client that announced PACKED may send packs: the publisher signs on first.
    loop.dry_run([(encode_keepalive("", 0, NOSUBSCRIBE | PACKED, b"p" * 16), ("127.0.0.1", 9))])
    addrs = [("127.0.%d.%d" % (k // 250, 1 + k % 250), 40000) for k in range(subscribers)]
    for i in range(0, subscribers, MESSAGES_PER_BATCH):
        loop.dry_run([(ka, a) for a in addrs[i:i + MESSAGES_PER_BATCH]])
    pack = encode_push(b"x" * 16) * 58
    benchmark.extra_info.update(messages_per_round=MESSAGES_PER_BATCH * 58 * BATCHES,
                                subscribers=subscribers)
    benchmark(loop.dry_run, [(pack, ("127.0.0.1", 9))] * MESSAGES_PER_BATCH, BATCHES)
    assert loop.stats()["packs_in"] > 0
    sock.close()
