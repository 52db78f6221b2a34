"""The swarm scapy layer against pelotari.swarm.wire: exact bytes both ways for every type (signed
and unsigned), the MAC scapy computes is wire's, a bad MAC shows as bad, malformed datagrams (as
bytes literals) dissect as SwarmMalformed with wire's reason and never raise; and `pelotari
craft` / `pelotari inspect` with swarm on pcaps written by scapy and a real UDP responder."""
import json
import os
import socket
import subprocess
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

scapy_all = pytest.importorskip("scapy.all")
from scapy.all import IP, UDP, Ether, raw, wrpcap  # noqa: E402

from pelotari.layers import swarm as sl  # noqa: E402
from pelotari.swarm import wire  # noqa: E402
from pelotari.swarm.wire import Entry, Message  # noqa: E402

from conftest import PELOTARI  # noqa: E402

KEY = bytes(range(32))  # the doc's known-answer key
KEY_HEX = KEY.hex()
OTHER = bytes(range(100, 132))
NOW = 1_800_000_000  # the doc's known answer: epoch 60,000,000
RING = wire.Keyring([KEY])
ENTRIES = (Entry("10.0.0.1", 21452), Entry("2001:db8::1", 21453),
           Entry("192.0.2.7", 7, direct=False), Entry("fe80::7", 65535, direct=False))


@pytest.fixture(autouse=True)
def no_keyring():
    sl.set_keyring(None)
    yield
    sl.set_keyring(None)


# (scapy packet, the wire.Message with the same fields): every type, written out by hand.
PAIRS = [
    (sl.SwarmConnect(attempt=3, token=0x1122334455667788), wire.connect(3, 0x1122334455667788)),
    (sl.SwarmConnect(attempt=15, ack=1, token=1, echo=0xFFFFFFFFFFFFFFFF),
     wire.connect(15, 1, ack=True, echo=0xFFFFFFFFFFFFFFFF)),
    (sl.SwarmReset(attempt=5), wire.reset(5)),
    (sl.SwarmPing(token=0x0102030405060708), wire.ping(0x0102030405060708)),
    (sl.SwarmPong(echo=0x0102030405060708), wire.pong(0x0102030405060708)),
    (sl.SwarmGetConnections(), wire.get_connections()),
    (sl.SwarmGetConnections(pad=bytes(64)), wire.get_connections(room=100)),
    (sl.SwarmConnections(), wire.connections([])),
    (sl.SwarmConnections(groups=sl.groups_of(ENTRIES)), wire.connections(ENTRIES)),
    (sl.SwarmUser(type=6), wire.user(6)),
    (sl.SwarmUser(type=0xFFFF, flags=0xA5A5, data=b"\x00app\xff"),
     wire.user(0xFFFF, b"\x00app\xff", flags=0xA5A5)),
]
IDS = ["Connect", "ConnectAck", "Reset", "Ping", "Pong", "GetConnections", "GetConnections100",
       "ConnectionsEmpty", "Connections", "User6", "User65535"]


def fields_of(pkt):
    """A dissected scapy message as the wire.Message wire.parse returns, read from its fields."""
    if isinstance(pkt, sl.SwarmUser):
        return Message(pkt.type, pkt.flags, data=bytes(pkt.data))
    flags = (pkt.reserved << 5) | wire.make_flags(pkt.attempt, bool(pkt.ack))
    kw = {f: pkt.getfieldval(f) for f in ("token", "echo") if f in pkt.fields}
    if isinstance(pkt, sl.SwarmGetConnections):
        kw["pad"] = len(pkt.pad)
    if isinstance(pkt, sl.SwarmConnections):
        kw["entries"] = pkt.entries()
    return Message(pkt.type, flags, **kw)


@pytest.mark.parametrize("pkt,msg", PAIRS, ids=IDS)
def test_every_type_builds_wires_bytes_and_dissects_back(pkt, msg):
    content = wire.pack(msg)
    unsigned = content[:4] + bytes(32) + content[4:]
    assert raw(pkt) == unsigned                          # no keyring: the MAC is zero
    with sl.signing(RING, now=NOW):
        signed = wire.encode(msg, RING, NOW)
        assert raw(pkt.copy()) == signed                 # the MAC scapy computes is wire's
        dissected = sl.dissect(signed)
        assert type(dissected) is type(pkt) and not dissected.payload
        assert fields_of(dissected) == msg == wire.decode(signed, RING, NOW)
        assert raw(dissected) == signed                  # rebuilt unchanged
        assert dissected.mac_status() == ("ok", 0)
        assert dissected.summary().endswith(" mac ok")
    assert sl.dissect(signed).mac_status() == ("unchecked", None)
    assert sl.dissect(signed).summary().endswith(" mac unchecked")


def test_the_docs_known_answer():
    want = bytes.fromhex("00020000 74268f5a4b569a6b45427fe67f425d71f572df794ef9d88a0916b44948c99563"
                         " 0102030405060708".replace(" ", ""))
    sl.set_keyring(KEY, now=NOW)
    assert raw(sl.SwarmPing(token=0x0102030405060708)) == want
    assert raw(IP(dst="127.0.0.1") / UDP() / sl.SwarmPing(token=0x0102030405060708))[28:] == want
    assert raw(sl.SwarmPing(token=0x0102030405060708, mac=bytes(32)))[4:36] == bytes(32)  # as given
    sl.set_keyring(KEY_HEX + "\n", now=NOW)  # a key file's text
    assert raw(sl.SwarmPing(token=0x0102030405060708)) == want


@pytest.mark.parametrize("hexed,cls,summary", [
    ("0000 0007" + "00" * 32 + "0000000000000007 0000000000000009", sl.SwarmConnect,
     "swarm Connect attempt=3 ack=1 token=7 echo=9 mac unchecked"),
    ("0001 000a" + "00" * 32, sl.SwarmReset, "swarm Reset attempt=5 mac unchecked"),
    ("0002 0000" + "00" * 32 + "a1b2c3d4e5f60718", sl.SwarmPing,
     "swarm Ping token=a1b2c3d4… mac unchecked"),
    ("0003 0000" + "00" * 32 + "00000000deadbeef", sl.SwarmPong,
     "swarm Pong echo=deadbeef mac unchecked"),
    ("0004 0000" + "00" * 32 + "00" * 12, sl.SwarmGetConnections,
     "swarm GetConnections room=48 mac unchecked"),
    ("0005 0000" + "00" * 32 + "0401 0a000001 53cc" + "1601" + "20010db8" + "00" * 11 + "01 0007",
     sl.SwarmConnections,
     "swarm Connections 2 entries (1 direct IPv4, 1 vague IPv6) mac unchecked"),
    ("0005 0000" + "00" * 32, sl.SwarmConnections, "swarm Connections no entries mac unchecked"),
    ("0007 8001" + "00" * 32 + "6869", sl.SwarmUser, "swarm User7 flags=0x8001 len=2 6869 mac unchecked"),
    ("0002 ffe0" + "00" * 32 + "0000000000000001", sl.SwarmPing,
     "swarm Ping reserved=0x7ff token=1 mac unchecked"),  # reserved bits kept and shown
], ids=["Connect", "Reset", "Ping", "Pong", "GetConnections", "Connections", "ConnectionsEmpty",
        "User", "Reserved"])
def test_literal_bytes_and_summaries(hexed, cls, summary):
    data = bytes.fromhex(hexed.replace(" ", ""))
    pkt = sl.dissect(data)
    assert type(pkt) is cls and raw(pkt) == data and pkt.summary() == summary
    assert wire.pack(wire.parse(data)) == data[:4] + data[36:]


def test_flag_bits_follow_the_docs_numbering():
    assert raw(sl.SwarmConnect(attempt=3, ack=1))[:4] == bytes.fromhex("00000007")
    assert raw(sl.SwarmReset(attempt=5))[:4] == bytes.fromhex("0001000a")
    assert raw(sl.SwarmPing(reserved=1))[2:4] == bytes.fromhex("0020")  # bit 10: 0x0020
    assert [(f.name, f.size) for f in sl.SwarmConnect.fields_desc[1:4]] == [
        ("reserved", 11), ("attempt", 4), ("ack", 1)]
    for t, (name, _, body) in wire.TABLE.items():
        assert sl.CLASSES[t].__name__ == f"Swarm{name}" and sl.CRAFT[name.lower()] is sl.CLASSES[t]
        built = raw(sl.CLASSES[t]())
        assert built[:2] == t.to_bytes(2, "big")
        if wire.body_size(t) is not None:
            assert len(built) == wire.PREFIX_SIZE + wire.body_size(t)
    assert len(raw(sl.SwarmGetConnections())) == wire.MAX_DATAGRAM  # wire's default room
    assert sl.KIND_NAMES == {0x04: "direct IPv4", 0x06: "direct IPv6", 0x14: "vague IPv4",
                             0x16: "vague IPv6"}
    assert sl.DEFAULT_PORTS == (wire.DEFAULT_PORT,) == (21452,)


def test_bound_to_udp_21452_both_ways_and_bind_port():
    ping = raw(sl.SwarmPing(token=9))
    for sport, dport in ((40000, 21452), (21452, 40000)):
        pkt = Ether(raw(Ether() / IP() / UDP(sport=sport, dport=dport) / ping))
        assert isinstance(pkt[UDP].payload, sl.SwarmPing) and pkt[sl.SwarmPing].token == 9
    built = IP() / UDP() / sl.SwarmPong()
    assert (built[UDP].sport, built[UDP].dport) == (21452, 21452)
    other = Ether(raw(Ether() / IP() / UDP(sport=40000, dport=21499) / ping))
    assert not isinstance(other[UDP].payload, sl.SwarmPing)
    sl.bind_port(21499)
    other = Ether(raw(Ether() / IP() / UDP(sport=40000, dport=21499) / ping))
    assert isinstance(other[UDP].payload, sl.SwarmPing)


def test_a_bad_mac_shows_as_bad():
    signed = wire.encode(wire.ping(77), RING, NOW)
    forged = signed[:-1] + bytes([signed[-1] ^ 1])
    sl.set_keyring(RING, now=NOW)
    assert sl.dissect(forged).mac_status() == ("bad", None)
    assert sl.dissect(forged).summary() == "swarm Ping token=4c mac bad"
    assert sl.describe(forged)["mac"] == "bad"
    sl.set_keyring(OTHER, now=NOW)  # another network's key
    assert sl.dissect(signed).mac_status() == ("bad", None)
    sl.set_keyring(RING, now=NOW + 3600)  # a replay from an hour ago
    assert sl.dissect(signed).mac_status() == ("bad", None)
    # A second installed key verifies too; the row names the index.
    sl.set_keyring(wire.Keyring([OTHER, KEY]), now=NOW)
    assert sl.dissect(signed).mac_status() == ("ok", 1)
    assert sl.dissect(signed).summary().endswith("mac ok (key 1)")
    assert sl.describe(signed)["mac_key"] == 1
    # Without a fixed time, a packet is checked at its capture time.
    sl.set_keyring(RING)
    pkt = Ether(raw(Ether() / IP() / UDP(sport=40000, dport=21452) / signed))
    pkt.time = NOW + 5
    assert pkt[sl.SwarmPing].mac_status() == ("ok", 0)
    pkt.time = NOW + 300
    assert pkt[sl.SwarmPing].mac_status() == ("bad", None)
    assert sl.dissect(signed).mac_status() == ("bad", None)  # dissected now: years off


def literal(hexed):
    return bytes.fromhex(hexed.replace(" ", ""))


MAC0 = "00" * 32
# Malformed datagrams as bytes literals: (bytes, wire's reason). Each once broke or could break
# a reader that trusts counts and lengths.
MALFORMED = {
    "empty": (b"", "truncated"),
    "header only": (literal("0002 0000"), "truncated"),
    "35 bytes": (literal("0002 0000" + "00" * 31), "truncated"),
    "1025 bytes": (literal("0006 0000" + MAC0) + bytes(989), "too_long"),
    "1025-byte GetConnections": (literal("0004 0000" + MAC0) + bytes(989), "too_long"),
    "Ping body 7": (literal("0002 0000" + MAC0 + "01020304050607"), "bad_length"),
    "Pong body 9": (literal("0003 0000" + MAC0 + "010203040506070809"), "bad_length"),
    "Connect body 8": (literal("0000 0000" + MAC0 + "0102030405060708"), "bad_length"),
    "Reset with a body": (literal("0001 0002" + MAC0 + "00"), "bad_length"),
    "Connect echo without Ack": (literal("0000 0002" + MAC0 + "00000000000000ff 0000000000000001"),
                                 "invalid_field"),
    "GetConnections padding not zero": (literal("0004 0000" + MAC0 + "0000000001"), "invalid_field"),
    "Connections lone byte": (literal("0005 0000" + MAC0 + "04"), "truncated"),
    "Connections lone byte after a group": (literal("0005 0000" + MAC0 + "0401 7f000001 53cc 14"),
                                            "truncated"),
    "Connections group cut short": (literal("0005 0000" + MAC0 + "0402 7f000001 53cc 7f00"),
                                    "truncated"),
    "Connections count past the body": (literal("0005 0000" + MAC0 + "0602" + "00" * 17 + "01"),
                                        "truncated"),
    "Connections odd IPv6 length": (literal("0005 0000" + MAC0 + "0601" + "20010db8" + "00" * 11 + "01" + "00"),
                                    "truncated"),
    "unknown family 0x05": (literal("0005 0000" + MAC0 + "0501 7f000001 53cc"), "unknown_family"),
    "unknown status 0x24": (literal("0005 0000" + MAC0 + "2401 7f000001 53cc"), "unknown_family"),
    "unknown kind after a good group": (literal("0005 0000" + MAC0 + "0401 7f000001 53cc ff00"),
                                        "unknown_family"),
    "empty group": (literal("0005 0000" + MAC0 + "0400"), "invalid_field"),
    "groups out of order": (literal("0005 0000" + MAC0 + "1401 7f000001 53cc 0401 7f000002 53cc"),
                            "invalid_field"),
    "group repeated": (literal("0005 0000" + MAC0 + "0401 7f000001 53cc 0401 7f000002 53cc"),
                       "invalid_field"),
    "port 0": (literal("0005 0000" + MAC0 + "0401 7f000001 0000"), "invalid_field"),
    "0.0.0.0": (literal("0005 0000" + MAC0 + "0401 00000000 53cc"), "invalid_field"),
    "IPv4-mapped IPv6": (literal("0005 0000" + MAC0 + "0601" + "00" * 10 + "ffff 7f000001 53cc"),
                         "invalid_field"),
    "more entries than fit": (literal("0005 0000" + MAC0 + "04ff") + bytes(6 * 255), "too_long"),
}


@pytest.mark.parametrize("data,reason", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_datagrams_dissect_as_malformed_with_wires_reason(data, reason):
    with pytest.raises(wire.SwarmError) as exc:
        wire.parse(data)
    assert exc.value.reason == reason
    pkt = sl.dissect(data)
    assert type(pkt) is sl.SwarmMalformed and raw(pkt) == data
    assert pkt.reason == reason and pkt.detail == str(exc.value)
    assert f"({reason}: {exc.value})" in pkt.summary() and f"{len(data)} bytes" in pkt.summary()
    row = sl.describe(data)
    assert row["type"] == "MALFORMED" and row["reason"] == reason and row["mac"] == "unchecked"
    if data:  # and so on the wire, to or from 21452
        captured = Ether(raw(Ether() / IP() / UDP(sport=21452, dport=40000) / data))
        assert type(captured[UDP].payload) is sl.SwarmMalformed


def test_a_malformed_datagram_with_a_good_mac_says_so():
    data = RING.sign(literal("0005 0000 0501 7f000001 53cc"), NOW)
    sl.set_keyring(RING, now=NOW)
    pkt = sl.dissect(data)
    assert pkt.summary() == ("swarm malformed Connections (unknown_family: group kind 0x05 at "
                             "offset 0), 44 bytes, mac ok")
    assert sl.describe(data)["mac"] == "ok"
    assert sl.describe(literal("0002"))["mac"] == "unchecked"  # too short to hold a MAC


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=1100) | st.builds(lambda t, rest: t + rest,
                                             st.sampled_from([bytes([0, t]) for t in range(7)]),
                                             st.binary(max_size=200)))
def test_any_bytes_dissect_without_raising_as_wire_reads_them(data):
    sl.set_keyring(RING, now=NOW)
    pkt = sl.dissect(data)
    summary = pkt.summary()
    try:
        msg = wire.parse(data)
    except wire.SwarmError as exc:
        assert type(pkt) is sl.SwarmMalformed and pkt.reason == exc.reason
    else:
        assert type(pkt) is not sl.SwarmMalformed and fields_of(pkt) == msg
        assert summary.endswith("mac bad")
    assert raw(pkt) == data
    assert sl.describe(pkt)["protocol"] == "swarm"


@st.composite
def messages(draw):
    """Any valid wire.Message."""
    u64 = st.integers(0, (1 << 64) - 1)
    t = draw(st.sampled_from(sorted(wire.TABLE) + [6, 1000, 65535]))
    if t == 0:
        ack = draw(st.booleans())
        return wire.connect(draw(st.integers(0, 15)), draw(u64), ack, draw(u64) if ack else 0)
    if t == 1:
        return wire.reset(draw(st.integers(0, 15)))
    if t == 2:
        return wire.ping(draw(u64))
    if t == 3:
        return wire.pong(draw(u64))
    if t == 4:
        return wire.get_connections(draw(st.integers(wire.PREFIX_SIZE, wire.MAX_DATAGRAM)))
    if t == 5:
        v4 = st.builds(lambda a, p, d: Entry(f"10.{a >> 8}.{a & 255}.1", p, d),
                       st.integers(0, 65535), st.integers(1, 65535), st.booleans())
        v6 = st.builds(lambda a, p, d: Entry(f"2001:db8::{a:x}", p, d),
                       st.integers(1, 65535), st.integers(1, 65535), st.booleans())
        entries = draw(st.lists(v4 | v6, max_size=40))
        return wire.connections(wire.fit_connections(entries))
    return wire.user(t, draw(st.binary(max_size=wire.MAX_BODY)), draw(st.integers(0, 0xFFFF)))


def build(msg):
    """The scapy packet for a wire.Message, from its fields."""
    if msg.is_user:
        return sl.SwarmUser(type=msg.type, flags=msg.flags, data=msg.data)
    cls = sl.CLASSES[msg.type]
    kw = dict(reserved=msg.flags >> 5, attempt=msg.attempt, ack=int(msg.ack))
    for f in ("token", "echo"):
        if f in wire.TABLE[msg.type][2]:
            kw[f] = getattr(msg, f)
    if msg.type == 4:
        kw["pad"] = bytes(msg.pad)
    if msg.type == 5:
        kw["groups"] = sl.groups_of(msg.entries)
    return cls(**kw)


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
@settings(max_examples=300, deadline=None)
@given(messages(), st.integers(0, 4_000_000_000))
def test_any_message_both_ways_signed_at_any_time(msg, now):
    sl.set_keyring(RING, now=now)
    signed = wire.encode(msg, RING, now)
    assert raw(build(msg)) == signed
    pkt = sl.dissect(signed)
    assert fields_of(pkt) == msg and pkt.mac_status() == ("ok", 0) and raw(pkt) == signed


def test_the_mac_is_hmac_sha256_under_the_epoch_key_in_every_epoch():
    """The doc's definition, computed with the hmac module, in epochs 0..599 (and epoch 148,
    whose key for KEY starts with a zero byte; epoch 1's holds one further on)."""
    import hmac

    content = literal("0002 0000 0102030405060708")
    wrong = []
    for epoch in list(range(600)) + [148]:
        now = epoch * wire.EPOCH_SECONDS + wire.EPOCH_SECONDS // 2
        k_e = hmac.digest(KEY, wire.EPOCH_LABEL + epoch.to_bytes(8, "big"), "sha256")
        want = content[:4] + hmac.digest(k_e, content, "sha256") + content[4:]
        try:
            with sl.signing(RING, now=now):
                got = raw(sl.SwarmPing(token=0x0102030405060708))
        except ValueError as exc:
            got = repr(exc)
        if got != want:
            wrong.append((epoch, b"\0" in k_e))
    assert wrong == []


def test_describe_rows():
    sl.set_keyring(RING, now=NOW)
    assert sl.describe(wire.encode(wire.connect(3, 7, True, 9), RING, NOW)) == {
        "protocol": "swarm", "type": "Connect", "mac": "ok", "mac_key": 0, "attempt": 3,
        "ack": True, "token": "0000000000000007", "echo": "0000000000000009",
        "summary": "swarm Connect attempt=3 ack=1 token=7 echo=9 mac ok"}
    row = sl.describe(wire.encode(wire.connections(ENTRIES), RING, NOW))
    assert row["entries"] == 4 and row["groups"] == {"direct IPv4": 1, "direct IPv6": 1,
                                                     "vague IPv4": 1, "vague IPv6": 1}
    assert sl.describe(wire.encode(wire.get_connections(200), RING, NOW))["room"] == 200
    user = sl.describe(wire.encode(wire.user(9, b"abc", 3), RING, NOW))
    assert (user["type"], user["flags"], user["data_len"]) == ("User9", 3, 3)
    assert sl.describe(scapy_all.Raw(b"x")) is None


def test_groups_of_and_the_cli_syntax():
    groups = sl.GroupsField.from_cli("vague:[2001:db8::2]:5, 10.0.0.1:6 ,::ffff:10.0.0.9:7")
    assert [(g.kind, [(e.host, e.port) for e in g.entries]) for g in groups] == [
        (0x04, [("10.0.0.1", 6), ("10.0.0.9", 7)]), (0x16, [("2001:db8::2", 5)])]
    for bad in ("10.0.0.1", "10.0.0.1:0", "nowhere:5", "0.0.0.0:5"):
        with pytest.raises(ValueError):
            sl.GroupsField.from_cli(bad)
    assert sl.TokenField.from_cli("hex:0102030405060708") == 0x0102030405060708
    assert sl.PadField.from_cli("room=100") == bytes(64)
    assert sl.MacField.from_cli("zero") == bytes(32)


# ---- the command line ----------------------------------------------------------------------
def run(*args, timeout=60, env=None):
    return subprocess.run(PELOTARI + list(args), capture_output=True, text=True, timeout=timeout,
                          env=env)


def hexdump_bytes(text):
    """The bytes of a scapy hexdump."""
    out = b""
    for line in text.splitlines():
        out += bytes.fromhex(line[6:53])
    return out


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "swarm.keys"
    path.write_text(RING.to_text())
    return str(path)


@pytest.mark.e2e
def test_craft_every_type_gives_wires_bytes(key_file):
    cases = [
        (["swarm", "connect", "-F", "attempt=3", "-F", "ack=1", "-F", "token=7", "-F", "echo=9"],
         wire.connect(3, 7, True, 9)),
        (["swarm", "reset", "-F", "attempt=5"], wire.reset(5)),
        (["swarm.ping", "--token", "hex:0102030405060708"], wire.ping(0x0102030405060708)),
        (["swarm", "pong", "-F", "echo=0x0102030405060708"], wire.pong(0x0102030405060708)),
        (["swarm", "getconnections", "-F", "pad=room=300"], wire.get_connections(300)),
        (["swarm", "connections", "-F", "entries=10.0.0.1:21452,vague:[fe80::7]:65535,"
          "[2001:db8::1]:21453,vague:192.0.2.7:7"], wire.connections(ENTRIES)),
        (["swarm", "user", "-F", "type=100", "-F", "flags=0x8000", "--data", "hello"],
         wire.user(100, b"hello", 0x8000)),
    ]
    for args, msg in cases:
        res = run("craft", *args, "--key-file", key_file, "--sign-at", str(NOW), "--hexdump")
        assert res.returncode == 0, res.stderr
        assert hexdump_bytes(res.stdout) == wire.encode(msg, RING, NOW), args
    unsigned = run("craft", "swarm", "ping", "-F", "token=1", "--hexdump",
                   env={k: v for k, v in os.environ.items() if k != wire.ENV_KEYS})
    assert hexdump_bytes(unsigned.stdout) == literal("0002 0000" + MAC0 + "0000000000000001")
    assert "note: unsigned" in unsigned.stderr
    from_env = run("craft", "swarm", "ping", "-F", "token=1", "--sign-at", str(NOW), "--hexdump",
                   env={**os.environ, wire.ENV_KEYS: KEY_HEX})
    assert hexdump_bytes(from_env.stdout) == wire.encode(wire.ping(1), RING, NOW)
    shown = run("craft", "swarm", "connect", "-F", "attempt=2", "--key-file", key_file)
    assert "attempt   = 2" in shown.stdout and "mac       = " in shown.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("args,needle", [
    (["swarm"], "swarm: give a type too (connect, reset, ping, pong, getconnections, connections, user)"),
    (["swarm", "hello"], "unknown type 'swarm.hello'"),
    (["nothing", "ping"], "'nothing' is not a protocol"),
    (["swarm", "ping", "-F", "token=-1"], "token: -1 outside 0..18446744073709551615"),
    (["swarm", "connect", "-F", "attempt=16"], "attempt: 16 outside 0..15"),
    (["swarm", "connections", "-F", "entries=10.0.0.1:0"], "port 0 outside 1..65535"),
    (["swarm", "ping", "-F", "mac=abcd"], "a MAC is 32 bytes, not 2"),
    (["keepalive", "--sign-at", "5"], "only swarm datagrams are signed"),
])
def test_craft_errors_are_one_line(args, needle):
    res = run("craft", *args)
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr


@pytest.mark.e2e
def test_craft_says_when_a_node_would_drop_it(tmp_path):
    bad = tmp_path / "bad.keys"
    bad.write_text("abcd\n")
    res = run("craft", "swarm", "ping", "--key-file", str(bad))
    assert res.returncode == 2 and "line 1: a key is 64 hex digits" in res.stderr
    res = run("craft", "swarm", "getconnections", "-F", "pad=hex:0001", "-q")
    assert "note: a swarm node drops this datagram (invalid_field: GetConnections padding" in res.stderr


def pcap_packets(crafted):
    """Captured swarm datagrams, all captured at NOW + 1 (so MACs are checked in NOW's epoch)."""
    signed = lambda m, at=NOW: wire.encode(m, RING, at)  # noqa: E731
    forged = bytearray(signed(wire.pong(5)))
    forged[-1] ^= 0x40
    payloads = [
        (40000, 21452, crafted),                                   # a crafted signed Ping
        (21452, 40000, signed(wire.pong(0x0102030405060708))),
        (40000, 21452, signed(wire.connect(1, 0xAB, True, 0xCD))),
        (40000, 21452, bytes(forged)),                             # a bad MAC
        (40000, 21452, signed(wire.ping(9), at=NOW - 3600)),       # an hour old: bad
        (40000, 21452, literal("0005 0000" + MAC0 + "0501 7f000001 53cc")),  # unknown family
        (40000, 21452, literal("0002 0000 0000")),                 # truncated
        (40000, 21460, signed(wire.connections(ENTRIES))),         # only with -p swarm:21460
    ]
    packets = []
    for sport, dport, data in payloads:
        ends = ("127.0.0.2", "127.0.0.1") if sport == 21452 else ("127.0.0.1", "127.0.0.2")
        pkt = Ether() / IP(src=ends[0], dst=ends[1]) / UDP(sport=sport, dport=dport) / data
        pkt.time = NOW + 1
        packets.append(pkt)
    return packets


@pytest.mark.e2e
def test_inspect_decodes_a_pcap_and_checks_macs(tmp_path, key_file):
    crafted = hexdump_bytes(run("craft", "swarm", "ping", "-F", "token=0x0102030405060708",
                                "--key-file", key_file, "--sign-at", str(NOW), "--hexdump").stdout)
    path = tmp_path / "swarm.pcap"
    wrpcap(str(path), pcap_packets(crafted))
    res = run("inspect", str(path), "--json", "--key-file", key_file, "-p", "swarm:21460")
    assert res.returncode == 0, res.stderr
    *rows, summary = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["type"], r["mac"], r.get("reason")) for r in rows] == [
        ("Ping", "ok", None), ("Pong", "ok", None), ("Connect", "ok", None), ("Pong", "bad", None),
        ("Ping", "bad", None), ("MALFORMED", "bad", "unknown_family"),
        ("MALFORMED", "unchecked", "truncated"), ("Connections", "ok", None)]
    assert rows[0]["summary"] == "swarm Ping token=01020304… mac ok"
    assert rows[1]["echo"] == "0102030405060708" and rows[1]["src"] == "127.0.0.2:21452"
    assert (rows[2]["attempt"], rows[2]["ack"], rows[2]["token"]) == (1, True, "00000000000000ab")
    assert rows[7]["entries"] == 4 and rows[7]["dst"] == "127.0.0.2:21460"
    assert summary["summary"]["counts"] == {"Ping": 2, "Pong": 2, "Connect": 1, "MALFORMED": 2,
                                            "Connections": 1}
    plain = run("inspect", str(path), "--json",
                env={k: v for k, v in os.environ.items() if k != wire.ENV_KEYS})
    *rows, _ = [json.loads(line) for line in plain.stdout.splitlines()]
    assert len(rows) == 7 and {r["mac"] for r in rows} == {"unchecked"}
    from_env = run("inspect", str(path), "--json", env={**os.environ, wire.ENV_KEYS: KEY_HEX})
    assert json.loads(from_env.stdout.splitlines()[0])["mac"] == "ok"
    text = run("inspect", str(path), "--key-file", key_file)
    lines = text.stdout.splitlines()
    assert len(lines) == 7 and lines[0].endswith("swarm Ping token=01020304… mac ok")
    assert "swarm Pong echo=45 mac bad" in lines[3]  # its last byte flipped: 05 -> 45
    assert "swarm malformed Connections (unknown_family: group kind 0x05 at offset 0)" in lines[5]


class Responder:
    """A real UDP swarm peer on 127.0.0.x: decodes each datagram with wire under its key and
    answers a Ping with a Pong (or any datagram with `reply`), signed with `answer_key`."""

    def __init__(self, host="127.0.0.7", key=KEY, answer_key=None):
        self.ring = wire.Keyring([key])
        self.answer = wire.Keyring([answer_key or key])
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(15)
        self.address = self.sock.getsockname()
        self.got, self.errors = [], []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        try:
            data, peer = self.sock.recvfrom(2048)
        except OSError:
            return
        try:
            msg = wire.decode(data, self.ring, time.time())
        except wire.SwarmError as exc:
            self.errors.append(exc.reason)
            return
        self.got.append((msg, peer))
        if msg.type == wire.TYPES["Ping"]:
            self.sock.sendto(wire.encode(wire.pong(msg.token), self.answer, time.time()), peer)

    def close(self):
        self.thread.join(20)
        self.sock.close()


@pytest.mark.e2e
def test_send_a_signed_ping_to_a_real_peer_and_check_its_pong(key_file):
    peer = Responder()
    try:
        res = run("craft", "swarm", "ping", "-F", "token=0x00c0ffee00c0ffee", "--key-file",
                  key_file, "--send", f"{peer.address[0]}:{peer.address[1]}", "--wait", "3", "-q")
    finally:
        peer.close()
    assert res.returncode == 0, res.stderr
    assert peer.errors == [] and peer.got[0][0] == wire.ping(0x00C0FFEE00C0FFEE)
    assert f"sent 44 bytes to {peer.address[0]}:{peer.address[1]}" in res.stderr
    assert (f"answer from {peer.address[0]}:{peer.address[1]}: swarm Pong echo=00c0ffee… mac ok"
            in res.stdout)
    assert "echo      = 0xc0ffee00c0ffee" in res.stdout


@pytest.mark.e2e
def test_send_shows_an_answer_under_another_key_as_bad_and_unsigned_is_dropped(key_file):
    peer = Responder(host="127.0.0.8", answer_key=OTHER)
    try:
        res = run("craft", "swarm", "ping", "-F", "token=3", "--key-file", key_file, "--send",
                  f"{peer.address[0]}:{peer.address[1]}", "--wait", "3", "-q")
    finally:
        peer.close()
    assert "swarm Pong echo=3 mac bad" in res.stdout
    peer = Responder(host="127.0.0.9")
    try:
        res = run("craft", "swarm", "ping", "-F", "token=3", "--send",
                  f"{peer.address[0]}:{peer.address[1]}", "--wait", "1", "-q",
                  env={k: v for k, v in os.environ.items() if k != wire.ENV_KEYS})
    finally:
        peer.close()
    assert peer.errors == ["bad_mac"] and "no answer within 1s" in res.stderr


@pytest.mark.e2e
def test_craft_against_a_real_swarm_node_when_there_is_one(tmp_path, key_file):
    """`pelotari swarm node` (if this tree has it): a signed Connect is answered statelessly
    with its Connect (Ack, our token echoed), a Ping from a stranger address with a Reset."""
    pytest.importorskip("pelotari.swarm.node")
    os.chmod(key_file, 0o600)
    node = subprocess.Popen(PELOTARI + ["swarm", "node", "--listen", "127.0.0.240:0", "--key-file",
                                        key_file, "--json"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        started = json.loads(node.stdout.readline())
        assert started["event"] == "listening", started
        where = f"127.0.0.240:{started['port']}"
        res = run("craft", "swarm", "connect", "-F", "attempt=2", "-F", "token=0xfeed",
                  "--key-file", key_file, "--send", where, "--wait", "2", "-q")
        assert f"answer from {where}: swarm Connect attempt=0 ack=1 token=" in res.stdout
        assert "echo=feed mac ok" in res.stdout
        res = run("craft", "swarm", "ping", "-F", "token=1", "--key-file", key_file,
                  "--send", where, "--wait", "2", "-q")
        assert f"answer from {where}: swarm Reset attempt=0 mac ok" in res.stdout
        node.stdin.write("quit\n")
        node.stdin.flush()
        stopped = [json.loads(line) for line in node.stdout][-1]
        assert stopped["event"] == "stopped"
        assert stopped["stats"]["received_Connect"] == 1 == stopped["stats"]["received_Ping"]
        assert not any(k.startswith("dropped_") and v for k, v in stopped["stats"].items())
    finally:
        if node.poll() is None:
            node.kill()
        node.wait(10)
