"""The swarm wire format (docs/protocols/swarm.md): every type byte-exact both ways, the flag
bits, the MAC computed here from first principles, key rotation, the epoch window, the
1,024-byte limit at and one past it, malformed datagrams as bytes literals, and a fuzz loop."""
import hashlib
import hmac
import random
import struct

import pytest

from pelotari.swarm import wire
from pelotari.swarm.wire import Entry, Keyring, Limits, Message

KEY = bytes(range(32))  # 00 01 .. 1f
KEY2 = bytes(range(32, 64))
NOW = 1_800_000_000.0  # epoch 60,000,000 exactly at its start (+ the offsets the tests add)
MID = NOW + 15  # the middle of that epoch: only it is accepted
EPOCH = 60_000_000


def epoch_key(key, epoch):
    """K_e as swarm.md states it."""
    return hmac.new(key, b"pelotari swarm v1 epoch" + struct.pack(">Q", epoch), hashlib.sha256).digest()


def signed(content, key=KEY, epoch=EPOCH):
    """header || MAC || body, the MAC over header || body under K_e, as swarm.md states it."""
    mac = hmac.new(epoch_key(key, epoch), content, hashlib.sha256).digest()
    return content[:4] + mac + content[4:]


def kr(*keys, **kw):
    return Keyring(keys or (KEY,), **kw)


# (message, header || body): the datagram is these bytes with the MAC after the 4th byte.
VECTORS = [
    (wire.connect(3, 0x0102030405060708),
     b"\x00\x00\x00\x06" + bytes.fromhex("0102030405060708") + bytes(8)),
    (wire.connect(15, 0xFFFFFFFFFFFFFFFF, ack=True, echo=0x1112131415161718),
     b"\x00\x00\x00\x1f" + b"\xff" * 8 + bytes.fromhex("1112131415161718")),
    (wire.reset(5), b"\x00\x01\x00\x0a"),
    (wire.reset(), b"\x00\x01\x00\x00"),
    (wire.ping(0x0102030405060708), b"\x00\x02\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08"),
    (wire.pong(0x0102030405060708), b"\x00\x03\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08"),
    (wire.get_connections(40), b"\x00\x04\x00\x00\x00\x00\x00\x00"),
    (wire.get_connections(36), b"\x00\x04\x00\x00"),
    (wire.connections([Entry("10.0.0.1", 21452), Entry("192.168.1.2", 80),
                       Entry("2001:db8::7", 4000), Entry("10.0.0.9", 21452, direct=False),
                       Entry("fe80::1", 1, direct=False)]),
     b"\x00\x05\x00\x00"
     b"\x04\x02" b"\x0a\x00\x00\x01\x53\xcc" b"\xc0\xa8\x01\x02\x00\x50"
     b"\x06\x01" b"\x20\x01\x0d\xb8" + bytes(11) + b"\x07" b"\x0f\xa0"
     b"\x14\x01" b"\x0a\x00\x00\x09\x53\xcc"
     b"\x16\x01" b"\xfe\x80" + bytes(13) + b"\x01" b"\x00\x01"),
    (wire.connections([]), b"\x00\x05\x00\x00"),
    (wire.user(6, b"hello"), b"\x00\x06\x00\x00hello"),
    (wire.user(0xFFFF, b"", flags=0xABCD), b"\xff\xff\xab\xcd"),
]


@pytest.mark.parametrize("msg, content", VECTORS, ids=[m.name + str(i) for i, (m, _) in enumerate(VECTORS)])
def test_every_type_encodes_and_decodes_byte_exact(msg, content):
    datagram = signed(content)
    assert wire.pack(msg) == content
    assert wire.encode(msg, kr(), NOW) == datagram
    assert wire.decode(datagram, kr(), NOW) == msg
    assert wire.parse(datagram) == msg


def test_vectors_cover_every_protocol_type_and_sizes_are_the_docs():
    assert {m.type for m, _ in VECTORS} >= set(wire.TABLE)
    assert [wire.body_size(t) for t in range(7)] == [16, 0, 8, 8, None, None, None]
    sizes = {m.name: len(wire.encode(m, kr(), NOW)) for m, _ in VECTORS[:6]}
    assert sizes == {"Connect": 52, "Reset": 36, "Ping": 44, "Pong": 44}
    assert (wire.PREFIX_SIZE, wire.MAX_BODY, wire.MAX_ENTRIES_V4, wire.MAX_ENTRIES_V6) == (36, 988, 164, 54)
    assert wire.TYPES == {"Connect": 0, "Reset": 1, "Ping": 2, "Pong": 3, "GetConnections": 4,
                          "Connections": 5}


def test_known_answer_from_the_docs():
    """The vector printed in swarm.md, as literal bytes."""
    assert epoch_key(KEY, EPOCH).hex() == "a17cfc73e88cf22d4913771cb804483979f85839d03247225ea484ec8cb97690"
    datagram = bytes.fromhex("00020000" "74268f5a4b569a6b45427fe67f425d71f572df794ef9d88a0916b44948c99563"
                             "0102030405060708")
    assert wire.encode(wire.ping(0x0102030405060708), kr(), NOW) == datagram
    assert wire.epoch_key(KEY, EPOCH) == epoch_key(KEY, EPOCH)


def test_the_mac_is_rfc2104_hmac_from_its_inner_and_outer_states():
    """The cached inner/outer SHA-256 states give HMAC-SHA256 exactly."""
    ke = epoch_key(KEY, EPOCH)
    block = ke.ljust(64, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in block) + b"\x00\x02\x00\x00" + bytes(8)).digest()
    manual = hashlib.sha256(bytes(b ^ 0x5C for b in block) + inner).digest()
    assert kr().mac(b"\x00\x02\x00\x00" + bytes(8), EPOCH) == manual
    assert manual == hmac.new(ke, b"\x00\x02\x00\x00" + bytes(8), hashlib.sha256).digest()


# ---- flags ---------------------------------------------------------------------------------
def test_flag_bits_are_numbered_from_the_most_significant():
    assert wire.make_flags(0, True) == 0x0001  # bit 15
    assert [wire.make_flags(1 << k) for k in range(4)] == [0x0002, 0x0004, 0x0008, 0x0010]  # 14..11
    assert wire.make_flags(15, True) == 0x001F
    assert wire.RESERVED_MASK == 0xFFE0 and wire.ATTEMPT_MASK | wire.ACK_BIT | wire.RESERVED_MASK == 0xFFFF
    assert wire.pack_header(0, wire.make_flags(3, True)) == b"\x00\x00\x00\x07"
    m = wire.parse(signed(b"\x00\x00\x00\x07" + bytes(16)))  # Ack without echo is fine
    assert (m.attempt, m.ack) == (3, True)
    with pytest.raises(wire.InvalidField):
        wire.make_flags(16)


def test_reserved_bits_are_ignored_and_kept():
    m = wire.parse(signed(b"\x00\x02\xff\xe0" + bytes(8)))
    assert (m.type, m.flags, m.attempt, m.ack) == (2, 0xFFE0, 0, False)
    assert wire.pack(m) == b"\x00\x02\xff\xe0" + bytes(8)


def test_attempts_compare_modulo_16():
    assert wire.attempt_newer(1, 0) and wire.attempt_newer(0, 15) and wire.attempt_newer(3, 12)
    assert not wire.attempt_newer(0, 1) and not wire.attempt_newer(5, 5)
    assert not wire.attempt_newer(8, 0)  # half way round: neither is later


# ---- keys and rotation ---------------------------------------------------------------------
def test_rotation_install_use_remove():
    old, new = KEY, KEY2
    a, b = kr(old), kr(old)
    b.install(new)  # step 1 on b: verifies both, signs old
    assert wire.encode(wire.ping(1), b, MID) == wire.encode(wire.ping(1), a, MID)
    b.use(new)  # step 2 on b: signs new; a (not switched) cannot verify yet...
    d = wire.encode(wire.ping(1), b, MID)
    assert d == signed(b"\x00\x02\x00\x00" + struct.pack(">Q", 1), key=new)
    with pytest.raises(wire.BadMac):
        a.verify(d, MID)
    a.install(new)  # ...until it installs it
    assert a.verify(d, MID) == 1
    assert b.verify(wire.encode(wire.ping(1), a, MID), MID) == 1  # old still verifies at b
    b.remove(old)  # step 3
    assert b.keys == (new,)
    with pytest.raises(wire.BadMac):
        b.verify(wire.encode(wire.ping(1), a, MID), MID)


def test_keyring_refuses_bad_keys_and_operations():
    with pytest.raises(wire.BadKey):
        Keyring([])
    with pytest.raises(wire.BadKey):
        Keyring([bytes(31)])
    with pytest.raises(wire.BadKey):
        Keyring([KEY, KEY])
    with pytest.raises(wire.BadKey):
        Keyring([KEY, KEY2, bytes(32), b"\x01" * 32])  # max_keys 3
    k = kr(KEY, KEY2)
    with pytest.raises(wire.BadKey):
        k.remove(KEY)  # the primary
    with pytest.raises(wire.BadKey):
        k.use(bytes(32))  # not installed
    with pytest.raises(ValueError):
        Keyring([KEY], epoch_seconds=30, skew_seconds=16)
    assert issubclass(wire.BadKey, ValueError)


def test_key_file_and_environment():
    text = "# comment\n\n" + KEY2.hex().upper() + "\n  " + KEY.hex() + "  \n"
    k = Keyring.from_text(text)
    assert k.keys == (KEY2, KEY) and k.primary == KEY2
    assert Keyring.from_text(k.to_text()).keys == k.keys
    with pytest.raises(wire.BadKey, match="line 2"):
        Keyring.from_text(KEY.hex() + "\n" + KEY.hex()[:-1] + "\n")
    with pytest.raises(wire.BadKey, match="not hex"):
        Keyring.from_text("zz" * 32)
    env = {wire.ENV_KEYS: f"{KEY.hex()}, {KEY2.hex()}"}
    assert Keyring.from_env(env).keys == (KEY, KEY2)
    with pytest.raises(wire.BadKey):
        Keyring.from_env({})
    assert len(Keyring.generate()) == 32 and Keyring.generate() != Keyring.generate()


def test_key_file_from_disk(tmp_path):
    p = tmp_path / "swarm.keys"
    p.write_text(kr(KEY, KEY2).to_text())
    assert Keyring.from_file(p).keys == (KEY, KEY2)


# ---- epochs --------------------------------------------------------------------------------
def test_window_holds_at_most_two_epochs():
    k = kr()
    assert k.window(NOW + 0) == (EPOCH, EPOCH - 1)
    assert k.window(NOW + 9.99) == (EPOCH, EPOCH - 1)
    assert k.window(NOW + 10) == (EPOCH,)
    assert k.window(MID) == (EPOCH,)
    assert k.window(NOW + 19.99) == (EPOCH,)
    assert k.window(NOW + 20) == (EPOCH, EPOCH + 1)
    assert k.window(NOW + 29.99) == (EPOCH, EPOCH + 1)


def test_previous_epoch_accepted_within_the_skew_and_older_rejected():
    content = b"\x00\x02\x00\x00" + bytes(8)
    prev = signed(content, epoch=EPOCH - 1)
    assert wire.decode(prev, kr(), NOW + 5) == wire.ping(0)  # 5 s into the next epoch
    with pytest.raises(wire.BadMac):
        wire.decode(prev, kr(), NOW + 10)  # past the skew
    with pytest.raises(wire.BadMac):
        wire.decode(signed(content, epoch=EPOCH - 2), kr(), NOW + 5)  # two epochs old: a replay
    ahead = signed(content, epoch=EPOCH + 1)  # a sender whose clock is ahead
    assert wire.decode(ahead, kr(), NOW + 25) == wire.ping(0)
    with pytest.raises(wire.BadMac):
        wire.decode(ahead, kr(), MID)


def test_replay_age_is_at_most_40_seconds():
    k = kr()
    d = wire.encode(wire.ping(7), k, NOW)  # signed at the start of its epoch
    assert wire.decode(d, k, NOW + 39.9).token == 7
    with pytest.raises(wire.BadMac):
        wire.decode(d, k, NOW + 40)


def test_epoch_keys_are_derived_once_per_epoch_not_per_datagram(monkeypatch):
    calls = []
    real = wire.epoch_key
    monkeypatch.setattr(wire, "epoch_key", lambda key, e: calls.append(e) or real(key, e))
    k = kr(KEY, KEY2)
    d = wire.encode(wire.ping(1), k, MID)
    for i in range(100):
        assert k.verify(d, MID + i * 0.01) == 0
    assert calls == [EPOCH, EPOCH]  # one per key, once
    with pytest.raises(wire.BadMac):
        k.verify(bytes(44), NOW + 1)  # garbage: 2 epochs x 2 keys tried
    assert sorted(calls) == [EPOCH - 1] * 2 + [EPOCH] * 2


def test_verification_tries_at_most_two_hmacs_per_key(monkeypatch):
    if wire.MacSet is not None:  # the C path tries its states in the same order
        c = kr(KEY, KEY2)
        assert (c.macset(MID).count, c.macset(NOW + 1).count) == (2, 4)
    monkeypatch.setattr(wire, "MacSet", None)  # count the pure path's comparisons
    k = kr(KEY, KEY2)
    k.verify(wire.encode(wire.ping(1), k, NOW), NOW)  # warm the cache
    tried = []
    real = wire.hmac.compare_digest
    monkeypatch.setattr(wire.hmac, "compare_digest", lambda a, b: tried.append(1) or real(a, b))
    with pytest.raises(wire.BadMac):
        k.verify(bytes(44), NOW + 1)
    assert len(tried) == 4
    tried.clear()
    assert k.verify(wire.encode(wire.ping(1), k, NOW + 1), NOW + 1) == 0
    assert len(tried) == 1  # current epoch, primary key first


def test_another_network_or_a_flipped_bit_fails_the_mac():
    d = wire.encode(wire.ping(1), kr(), MID)
    with pytest.raises(wire.BadMac):
        wire.decode(d, kr(KEY2), MID)
    for i in range(len(d)):
        bad = bytearray(d)
        bad[i] ^= 0x01
        with pytest.raises(wire.BadMac):
            wire.decode(bytes(bad), kr(), MID)


def test_other_epoch_lengths_do_not_interoperate():
    d = wire.encode(wire.ping(1), kr(), MID)
    with pytest.raises(wire.BadMac):
        wire.decode(d, kr(epoch_seconds=60, skew_seconds=10), MID)


# ---- size limits ---------------------------------------------------------------------------
def test_1024_bytes_at_the_limit_and_one_past_it():
    k = kr()
    ok = wire.user(6, bytes(988))
    d = wire.encode(ok, k, MID)
    assert len(d) == 1024 and wire.decode(d, k, MID) == ok
    with pytest.raises(wire.TooLong):
        wire.encode(wire.user(6, bytes(989)), k, MID)
    with pytest.raises(wire.TooLong):
        wire.decode(d + b"\x00", k, MID)  # too long before any HMAC: no BadMac
    full = wire.get_connections(1024)
    assert len(wire.encode(full, k, MID)) == 1024
    with pytest.raises(wire.InvalidField):
        wire.get_connections(1025)
    with pytest.raises(wire.TooLong):
        wire.pack(Message(4, pad=989))


def test_connections_at_the_limit_and_one_past_it():
    v4 = [Entry(f"10.0.{i // 256}.{i % 256 or 1}", 1000 + i) for i in range(165)]
    m = wire.connections(v4[:164])
    d = wire.encode(m, kr(), MID)
    assert len(d) == 36 + 2 + 164 * 6 == 1022 and wire.decode(d, kr(), MID) == m
    with pytest.raises(wire.TooLong):
        wire.encode(wire.connections(v4), kr(), MID)
    v6 = [Entry(f"2001:db8::{i + 1:x}", 1) for i in range(55)]
    assert len(wire.encode(wire.connections(v6[:54]), kr(), MID)) == 36 + 2 + 54 * 18 == 1010
    with pytest.raises(wire.TooLong):
        wire.encode(wire.connections(v6), kr(), MID)


def test_limits_are_constructor_arguments():
    small = Limits(max_datagram=512, max_entries=2)
    d = wire.encode(wire.user(9, bytes(476)), kr(), MID, small)
    assert len(d) == 512 and wire.decode(d, kr(), MID, small).data == bytes(476)
    with pytest.raises(wire.TooLong):
        wire.decode(wire.encode(wire.user(9, bytes(477)), kr(), MID), kr(), MID, small)
    three = wire.encode(wire.connections([Entry("10.0.0.1", 1), Entry("10.0.0.2", 1),
                                          Entry("10.0.0.3", 1)]), kr(), MID)
    with pytest.raises(wire.TooLong):
        wire.decode(three, kr(), MID, small)
    with pytest.raises(ValueError):
        Limits(max_datagram=1025)
    with pytest.raises(ValueError):
        Limits(max_datagram=35)


def test_fit_connections_takes_direct_before_vague_within_the_room():
    direct = [Entry(f"10.1.0.{i + 1}", 1) for i in range(100)]
    vague = [Entry(f"10.2.0.{i + 1}", 2, direct=False) for i in range(100)]
    got = wire.fit_connections(vague + direct)
    assert got[:100] == tuple(direct) and len(got) == 164  # 2 group headers + 164 × 6 = 988
    assert len(wire.encode(wire.connections(got), kr(), MID)) <= 1024
    small = wire.fit_connections(vague + direct, room=36 + 2 + 6 * 5)
    assert small == tuple(direct[:5])
    assert wire.fit_connections(direct, room=36) == ()
    assert wire.answer_room(44) == 44 and wire.answer_room(5000) == 1024


# ---- malformed datagrams (every one a regression) ------------------------------------------
def test_malformed_before_the_mac():
    k = kr()
    for data, error in [
        (b"", wire.Truncated),  # nothing
        (b"\x00\x02\x00", wire.Truncated),  # a header cut short
        (b"\x00\x02\x00\x00" + bytes(31), wire.Truncated),  # a MAC cut short
        (b"\x00\x02\x00\x00" + bytes(32 + 8), wire.BadMac),  # a zero MAC
        (bytes(1025), wire.TooLong),
    ]:
        with pytest.raises(error):
            wire.decode(data, k, MID)


MALFORMED_BODIES = [
    # (header || body, error): each signed with a good MAC, so only the body is at fault
    (b"\x00\x02\x00\x00" + bytes(7), wire.BadLength),  # Ping one byte short
    (b"\x00\x03\x00\x00" + bytes(9), wire.BadLength),  # Pong one byte long
    (b"\x00\x00\x00\x02" + bytes(8), wire.BadLength),  # Connect without its echo
    (b"\x00\x01\x00\x00\x00", wire.BadLength),  # Reset with a body
    (b"\x00\x00\x00\x02" + bytes(8) + b"\x00" * 7 + b"\x01", wire.InvalidField),  # echo, no Ack
    (b"\x00\x04\x00\x00\x00\x00\x01", wire.InvalidField),  # padding not zero
    (b"\x00\x05\x00\x00\x04", wire.Truncated),  # a lone group byte: odd length
    (b"\x00\x05\x00\x00\x04\x01\x0a\x00\x00\x01\x53", wire.Truncated),  # an entry cut short
    (b"\x00\x05\x00\x00\x04\x02\x0a\x00\x00\x01\x53\xcc", wire.Truncated),  # count past the end
    (b"\x00\x05\x00\x00\x04\x01\x0a\x00\x00\x01\x53\xcc\x00", wire.Truncated),  # trailing byte
    (b"\x00\x05\x00\x00\x05\x01\x0a\x00\x00\x01\x53\xcc", wire.UnknownFamily),  # family 5
    (b"\x00\x05\x00\x00\x24\x01\x0a\x00\x00\x01\x53\xcc", wire.UnknownFamily),  # status 2
    (b"\x00\x05\x00\x00\x14\x01\x0a\x00\x00\x01\x53\xcc\x04\x01\x0a\x00\x00\x02\x53\xcc",
     wire.InvalidField),  # vague before direct
    (b"\x00\x05\x00\x00\x04\x01\x0a\x00\x00\x01\x53\xcc\x04\x01\x0a\x00\x00\x02\x53\xcc",
     wire.InvalidField),  # a kind repeated
    (b"\x00\x05\x00\x00\x04\x00", wire.InvalidField),  # an empty group
    (b"\x00\x05\x00\x00\x04\x01\x0a\x00\x00\x01\x00\x00", wire.InvalidField),  # port 0
    (b"\x00\x05\x00\x00\x04\x01\x00\x00\x00\x00\x53\xcc", wire.InvalidField),  # 0.0.0.0
    (b"\x00\x05\x00\x00\x06\x01" + bytes(16) + b"\x53\xcc", wire.InvalidField),  # ::
    (b"\x00\x05\x00\x00\x06\x01" + bytes(10) + b"\xff\xff\x0a\x00\x00\x01\x53\xcc",
     wire.InvalidField),  # IPv4-mapped in an IPv6 group
]


@pytest.mark.parametrize("content, error", MALFORMED_BODIES)
def test_malformed_bodies_are_typed_errors(content, error):
    datagram = signed(content, epoch=EPOCH)
    with pytest.raises(error) as info:
        wire.decode(datagram, kr(), MID)
    assert isinstance(info.value, ValueError)
    assert "dropped_" + info.value.reason in wire.DROP_COUNTERS


def test_encoder_refuses_values_outside_their_fields():
    for msg in [wire.ping(-1), wire.ping(1 << 64), Message(0, 0, echo=1), Message(70000),
                Message(2, flags=1 << 16)]:
        with pytest.raises(wire.InvalidField):
            wire.pack(msg)
    for entry in [Entry("10.0.0.1", 0), Entry("10.0.0.1", 65536), Entry("host", 1),
                  Entry("0.0.0.0", 1), Entry("::", 1)]:
        with pytest.raises(wire.InvalidField):
            wire.encode_entries([entry])
    with pytest.raises(wire.InvalidField):
        wire.user(5)


def test_ipv4_mapped_entries_go_as_ipv4():
    m = wire.connections([Entry("::ffff:10.0.0.1", 7)])
    assert m.entries == (Entry("10.0.0.1", 7),)
    assert wire.pack(m) == b"\x00\x05\x00\x00\x04\x01\x0a\x00\x00\x01\x00\x07"


def test_drop_counters_are_named_by_reason():
    assert wire.DROP_COUNTERS == ("dropped_too_long", "dropped_truncated", "dropped_bad_mac",
                                  "dropped_bad_length", "dropped_unknown_family",
                                  "dropped_invalid_field")
    assert all(issubclass(e, wire.SwarmError) and issubclass(e, ValueError) for e in wire.DROP_ERRORS)


# ---- fuzz ----------------------------------------------------------------------------------
def test_fuzz_decode_returns_or_raises_the_typed_error():
    """Invariant: for any bytes, decode (and parse) either returns a Message that packs back to
    exactly the bytes it came from, or raises one of DROP_ERRORS — never anything else. Inputs:
    random bytes, random bodies under a good MAC, and single-byte mutations of valid datagrams."""
    rng = random.Random(20261124)
    k = kr()
    seeds = [c for _, c in VECTORS] + [c for c, _ in MALFORMED_BODIES]
    ok = 0
    for i in range(6000):
        kind = i % 3
        if kind == 0:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 80)))
        elif kind == 1:
            base = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 4)):
                op = rng.randrange(3)
                if op == 0 and base:
                    base[rng.randrange(len(base))] = rng.getrandbits(8)
                elif op == 1 and len(base) > 4:
                    del base[rng.randrange(4, len(base)):]
                else:
                    base += bytes([rng.choice((0, 4, 6, 0x14, 0x16, 1, 0xff))])
            data = signed(bytes(base[:4].ljust(4, b"\0")) + bytes(base[4:]))
        else:
            content = bytes([0, rng.randrange(7), 0, rng.getrandbits(5)])
            content += bytes(rng.choice((0, 4, 6, 0x14, 0x16, rng.getrandbits(8)))
                             if j % 7 == 0 else rng.getrandbits(8) for j in range(rng.randrange(0, 60)))
            data = signed(content)
        for fn in (lambda d: wire.decode(d, k, MID), wire.parse):
            try:
                msg = fn(data)
            except wire.DROP_ERRORS:
                continue
            assert isinstance(msg, Message)
            assert wire.pack(msg) == data[:4] + data[36:]
            ok += 1
    assert ok > 1000  # the loop reaches the parser's success paths too


def test_the_fingerprint_names_the_signing_key_only():
    assert kr().fingerprint() == kr(KEY, KEY2).fingerprint() != kr(KEY2, KEY).fingerprint()
    want = hashlib.sha256(b"pelotari swarm key fingerprint\0" + KEY).hexdigest()[:16]
    assert kr().fingerprint() == want  # what `swarm node` has always printed: logs stay comparable
