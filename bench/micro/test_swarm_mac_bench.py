"""What verifying a swarm datagram's MAC costs: Python's hmac module, the Keyring's precomputed
hashlib states, and fastpath.swarmmac's C states, side by side (a 44-byte Ping, two keys
installed, the datagram signed by the second: the worst case of the common window):

    .venv/bin/python -m pytest bench/micro --benchmark-enable -k swarm_mac
"""
import hashlib
import hmac

import pytest

from fastpath.swarmmac import MacSet
from pelotari.swarm import wire

NOW = 1_700_000_010.0
KEYS = [bytes(range(32)), bytes(range(32, 64))]
DATAGRAMS = 1000


@pytest.fixture(scope="module")
def setup():
    kr = wire.Keyring(KEYS)
    dg = wire.Keyring([KEYS[1]]).sign(wire.pack(wire.ping(1)), NOW)
    e = kr.epoch(NOW)
    m = MacSet()
    m.load([wire.epoch_key(k, e) for k in KEYS], 0)
    return kr, m, dg, [wire.epoch_key(k, e) for k in KEYS]


@pytest.mark.parametrize("case", ["hmac module", "keyring (hashlib states)", "fastpath C"])
def test_swarm_mac_verify(benchmark, setup, case):
    kr, m, dg, epoch_keys = setup
    content, tag = dg[:4] + dg[36:], dg[4:36]

    def with_hmac():
        for _ in range(DATAGRAMS):
            for k in epoch_keys:
                if hmac.compare_digest(hmac.new(k, content, hashlib.sha256).digest(), tag):
                    break

    def with_keyring():
        for _ in range(DATAGRAMS):
            kr.verify(dg, NOW)

    def with_c():
        verify = m.verify
        for _ in range(DATAGRAMS):
            verify(dg)

    fn = {"hmac module": with_hmac, "keyring (hashlib states)": with_keyring,
          "fastpath C": with_c}[case]
    assert m.verify(dg) == 1 and kr.verify(dg, NOW) == 1
    benchmark.extra_info.update(datagrams_per_round=DATAGRAMS)
    benchmark(fn)
