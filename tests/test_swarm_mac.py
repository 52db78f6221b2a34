"""fastpath.swarmmac: the C MACs equal pelotari.swarm.wire's (and the stdlib's) byte for byte."""
import hashlib
import hmac
import random

import pytest

from fastpath.implementation import compiled
from pelotari.swarm import wire

if compiled("swarmmac") is None:
    pytest.skip("compares fastpath.swarmmac with the pure MACs: the Cython build only",
                allow_module_level=True)
MacSet = compiled("swarmmac").MacSet

NOW = 1_700_000_010.0


def keyring(n=2, seed=0):
    rng = random.Random(seed)
    return wire.Keyring([rng.randbytes(32) for _ in range(n)])


def loaded(kr, now=NOW):
    """A MacSet holding the keyring's states for the epochs accepted at `now`, as the node
    will load it: every key in the current epoch first, the primary signing."""
    keys = [wire.epoch_key(k, e) for e in kr.window(now) for k in kr.keys]
    m = MacSet()
    m.load(keys, 0)
    return m


@pytest.mark.parametrize("body_len", [0, 1, 8, 27, 28, 55, 56, 63, 64, 119, 120, 500, 988])
def test_sign_and_mac_equal_the_keyring_and_the_stdlib(body_len):
    kr = keyring()
    m = loaded(kr)
    content = wire.pack_header(2, 0) + random.Random(body_len).randbytes(body_len)
    e = kr.epoch(NOW)
    expected = hmac.new(wire.epoch_key(kr.primary, e), content, hashlib.sha256).digest()
    assert m.mac(content) == kr.mac(content, e) == expected
    assert m.sign(content) == kr.sign(content, NOW)
    assert m.sign(content)[4:36] == expected


def test_verify_names_the_state_and_refuses_any_change():
    kr = keyring(3)
    m = loaded(kr)
    dg = kr.sign(wire.pack(wire.ping(7)), NOW)
    assert m.verify(dg) == 0
    for i in range(len(dg)):  # every single-bit change anywhere: header, MAC, body
        bad = bytearray(dg)
        bad[i] ^= 0x01
        assert m.verify(bytes(bad)) == -1, i
    assert m.verify(dg[:-1]) == -1 and m.verify(dg + b"\0") == -1
    assert m.verify(dg[:35]) == -1 and m.verify(b"") == -1


def test_a_datagram_signed_by_a_secondary_key_verifies_at_its_index():
    kr = keyring(3)
    other = wire.Keyring([kr.keys[2]])
    m = loaded(kr)
    dg = other.sign(wire.pack(wire.pong(9)), NOW)
    assert m.verify(dg) == 2 and kr.verify(dg, NOW) == 2


def test_limits_of_load_at_and_past():
    m = MacSet()
    with pytest.raises(ValueError):
        m.mac(b"\0" * 4)  # nothing loaded
    m.load([b"k"] * 8, 7)
    assert (m.count, m.signer) == (8, 7)
    for keys, signer in (([], 0), ([b"k"] * 9, 0), ([b"k"], 1), ([b"k"], -1), ([b""], 0),
                         ([b"k" * 65], 0)):
        with pytest.raises(ValueError):
            m.load(keys, signer)
    m.load([b"k" * 64], 0)  # a key of one block: used as it is (RFC 2104)
    assert m.mac(b"abcd") == hmac.new(b"k" * 64, b"abcd", hashlib.sha256).digest()
    with pytest.raises(ValueError):
        m.sign(b"abc")  # shorter than the header


def test_keys_with_zero_bytes_anywhere_give_the_stdlib_mac():
    """Epoch keys are random bytes: about one in eight holds a zero byte (one in 256 starts
    with one); the MAC must not stop at it (it did: len() of a C string)."""
    m = MacSet()
    for key in (b"\0" + bytes(range(1, 32)), bytes(range(32)), b"\x01\0\0\x02" * 8, b"\0" * 32):
        m.load([key], 0)
        assert m.mac(b"\0\1\0\0body") == hmac.new(key, b"\0\1\0\0body", hashlib.sha256).digest()


def test_every_epoch_of_a_key_signs_as_the_stdlib_does():
    kr = wire.Keyring([bytes(range(32))])
    for e in range(600):  # epoch 148 of this key starts with a zero byte
        now = e * 30 + 15.0
        want = hmac.new(wire.epoch_key(kr.primary, e), b"\0\1\0\0", hashlib.sha256).digest()
        assert kr.sign(b"\0\1\0\0", now)[4:36] == want, e
