"""Per-message cost of the backbone's sequencing and fan-out, without the kernel.

BackboneCore.receive_datagrams() feeds PUSHes through the real receive path of the core the
socket loop drives, with sends counted and not kept (keep_sends=False), so this is the
user-space work per message (and, across N, per subscriber):

    .venv/bin/python -m pytest bench/micro --benchmark-enable -k fanout
"""
import pytest

from fastpath.backbone import BackboneCore, gso_supported
from fastpath.codec import encode_keepalive, encode_push
from fastpath.packets import NOJOURNAL

MESSAGES_PER_BATCH = 64
BATCHES = 50
NOW = 1_000_000_000  # the core's clock (ns): every subscriber is live throughout


def core_with_subscribers(n, core_class=BackboneCore):
    core = core_class(max_subscribers=max(n, 1), window=3600, keep_sends=False,
                      gso=gso_supported())
    ka = encode_keepalive("", 0, NOJOURNAL, b"t" * 16)
    addrs = [("127.0.%d.%d" % (k // 250, 1 + k % 250), 40000) for k in range(n)]
    core.receive_datagrams([(ka, a) for a in addrs], NOW)
    return core


@pytest.mark.parametrize("subscribers", [1, 16, 1000])
@pytest.mark.parametrize("payload", [16, 1024])
def test_fanout(benchmark, subscribers, payload):
    core = core_with_subscribers(subscribers)
    pushes = [(encode_push(b"x" * payload), ("127.0.0.1", 9))] * MESSAGES_PER_BATCH
    benchmark.extra_info.update(messages_per_round=MESSAGES_PER_BATCH * BATCHES,
                                subscribers=subscribers)
    benchmark(core.receive_datagrams, pushes, NOW, BATCHES)


@pytest.mark.parametrize("implementation", ["cython", "python"])
def test_fanout_twin(benchmark, implementation):
    """The compiled core side by side with its pure-Python twin
    (pelotari.fyrehose.backbone_core): 16 subscribers, 16-byte messages."""
    from pelotari.fyrehose import backbone_core

    core_class = {"cython": BackboneCore, "python": backbone_core.BackboneCore}[implementation]
    core = core_with_subscribers(16, core_class)
    pushes = [(encode_push(b"x" * 16), ("127.0.0.1", 9))] * MESSAGES_PER_BATCH
    benchmark.extra_info.update(messages_per_round=MESSAGES_PER_BATCH * BATCHES, subscribers=16)
    benchmark(core.receive_datagrams, pushes, NOW, BATCHES)
    assert core.stats(NOW)["delivers"] >= 16 * MESSAGES_PER_BATCH * BATCHES


@pytest.mark.parametrize("subscribers", [16, 1000])
def test_fanout_packed(benchmark, subscribers):
    """The packing extension: 16-byte messages arriving as packed PUSHes (58 per 1,472 bytes)
    to subscribers that set PACKED (limit 65,507): user-space work per message."""
    from fastpath.packets import NOSUBSCRIBE, PACKED, packed_flags

    core = BackboneCore(max_subscribers=subscribers + 1, gso=False, window=3600,
                        keep_sends=False)
    # Only a live client that announced PACKED may send packs: the publisher signs on first.
    core.receive_datagrams([(encode_keepalive("", 0, NOSUBSCRIBE | PACKED, b"p" * 16),
                             ("127.0.0.1", 9))], NOW)
    ka = encode_keepalive("", 0, NOJOURNAL | packed_flags(65507), b"t" * 16)
    addrs = [("127.0.%d.%d" % (k // 250, 1 + k % 250), 40000) for k in range(subscribers)]
    core.receive_datagrams([(ka, a) for a in addrs], NOW)
    pack = encode_push(b"x" * 16) * 58
    benchmark.extra_info.update(messages_per_round=MESSAGES_PER_BATCH * 58 * BATCHES,
                                subscribers=subscribers)
    benchmark(core.receive_datagrams, [(pack, ("127.0.0.1", 9))] * MESSAGES_PER_BATCH, NOW,
              BATCHES)
    assert core.stats(NOW)["packs_in"] > 0
