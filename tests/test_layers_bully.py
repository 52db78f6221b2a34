"""The bully scapy layer against pelotari.bully.wire: exact bytes both ways for all 13 messages,
chains of messages in one TCP payload, malformed payloads that must dissect without raising,
describe(); and `pelotari craft` / `pelotari inspect` with bully on real TCP sockets and pcaps."""
import json
import signal
import socket
import struct
import subprocess
import threading

import pytest
from hypothesis import given, settings, strategies as st

scapy_all = pytest.importorskip("scapy.all")
from scapy.all import IP, TCP, UDP, Ether, Raw, raw, wrpcap  # noqa: E402

from pelotari.bully import wire  # noqa: E402
from pelotari.bully.wire import Message, Peer  # noqa: E402
from pelotari.layers import bully as bl  # noqa: E402

from conftest import PELOTARI  # noqa: E402

ME = Peer("127.0.0.2", 3334, 2)
P3 = Peer("127.0.0.3", 3335, 3)
P4 = Peer("127.0.0.4", 3336, 4)
ME_KW = dict(ip="127.0.0.2", port=3334, id=2)


def slot(p):
    return bl.BullyPeer(ip=p.host, port=p.port, id=p.id)


# (scapy packet, the wire.Message with the same fields): every tag, written out by hand.
PAIRS = [
    (bl.BullyEntry(ip="127.0.0.2", port=3334), Message(1, Peer("127.0.0.2", 3334))),
    (bl.BullyEntryResponse(id=5, peers=[slot(ME), slot(P3)]), Message(2, id=5, peers=(ME, P3))),
    (bl.BullyNodeRequest(**ME_KW), Message(3, ME)),
    (bl.BullyNodeResponse(peers=[slot(ME), slot(P3), slot(P4), slot(Peer("127.0.0.5", 1, 25))]),
     Message(4, peers=(ME, P3, P4, Peer("127.0.0.5", 1, 25)))),
    (bl.BullyIAmAlive(**ME_KW), Message(5, ME)),
    (bl.BullyNodeSearch(ip="127.0.0.2", port=3334, source_id=2, search_id=9, destination_id=17),
     Message(6, Peer("127.0.0.2", 3334), source_id=2, search_id=9, destination_id=17)),
    (bl.BullyIAmFound(search_id=9, **ME_KW), Message(7, ME, search_id=9)),
    (bl.BullyText(msg="¡hola!".encode(), **ME_KW), Message(8, ME, data="¡hola!".encode())),
    (bl.BullyAreYouAlive(**ME_KW), Message(9, ME)),
    (bl.BullyIAmLeader(**ME_KW), Message(10, ME)),
    (bl.BullyTellMeYourTime(**ME_KW), Message(11, ME)),
    (bl.BullyHereIsMyTime(time_ms=1_795_000_000_123, **ME_KW), Message(12, ME, time_ms=1_795_000_000_123)),
    (bl.BullyHereIsYourNewTime(time_ms=-5, **ME_KW), Message(13, ME, time_ms=-5)),
]
IDS = [wire.TABLE[m.tag][0] for _, m in PAIRS]


def to_message(pkt):
    """A dissected scapy message as the wire.Message wire.decode would return."""
    names = {f.name for f in pkt.fields_desc}
    kw = {}
    if "ip" in names:
        kw["peer"] = Peer(pkt.ip, pkt.port, pkt.id if "id" in names and "peers" not in names else 0)
    if "peers" in names:
        kw["peers"] = tuple(Peer(s.ip, s.port, s.id) for s in pkt.peers if not s.empty())
        if "id" in names:
            kw["id"] = pkt.id
    for name in ("source_id", "search_id", "destination_id"):
        if name in names:
            kw[name] = pkt.getfieldval(name)
    if "time_ms" in names:
        kw["time_ms"] = pkt.time_ms
    if "msg" in names:
        kw["data"] = pkt.msg
    return Message(pkt.tag, **kw)


@pytest.mark.parametrize("pkt,msg", PAIRS, ids=IDS)
def test_every_message_builds_the_encoders_bytes_and_dissects_back(pkt, msg):
    data = wire.encode(msg)
    assert raw(pkt) == data                    # scapy builds wire's bytes
    dissected = bl.dissect(data)
    assert type(dissected) is type(pkt)        # and reads them as the same message
    assert not dissected.payload               # nothing chained after a lone message
    assert to_message(dissected) == msg == wire.decode(raw(dissected))
    assert raw(dissected) == data              # and rebuilds them unchanged
    assert len(data) == wire.fixed_size(msg.tag) + len(msg.data)


@pytest.mark.parametrize("pkt,hexed", [
    (bl.BullyEntry(ip="127.0.0.1", port=3333), "0100 7f000001 0d05"),
    (bl.BullyNodeRequest(ip="127.0.0.1", port=3334, id=2), "0301 7f000001 0d06 0002"),
    (bl.BullyEntryResponse(id=7, peers=[bl.BullyPeer(ip="127.0.0.1", port=3333, id=1)]),
     "0201 0007 7f000001 0d05 0001" + "00" * 24),
    (bl.BullyIAmFound(ip="127.0.0.9", port=3333, id=7, search_id=3), "0701 7f000009 0d05 0007 0003"),
    (bl.BullyText(ip="127.0.0.1", port=3333, id=1, msg=b"hi"), "0801 7f000001 0d05 0001 0002 6869"),
    (bl.BullyHereIsYourNewTime(ip="127.0.0.1", port=3333, id=1, time_ms=-2),
     "0d01 7f000001 0d05 0001 fffffffffffffffe"),
], ids=["Entry", "NodeRequest", "EntryResponse", "IAmFound", "Text", "HereIsYourNewTime"])
def test_literal_bytes(pkt, hexed):
    data = bytes.fromhex(hexed.replace(" ", ""))
    assert raw(pkt) == data
    assert raw(bl.dissect(data)) == data and type(bl.dissect(data)) is type(pkt)


def test_classes_names_and_versions_come_from_the_table():
    assert [cls.__name__ for _, cls in sorted(bl.CLASSES.items())] == [
        "BullyEntry", "BullyEntryResponse", "BullyNodeRequest", "BullyNodeResponse",
        "BullyIAmAlive", "BullyNodeSearch", "BullyIAmFound", "BullyText", "BullyAreYouAlive",
        "BullyIAmLeader", "BullyTellMeYourTime", "BullyHereIsMyTime", "BullyHereIsYourNewTime"]
    for tag, (name, version, _) in wire.TABLE.items():
        built = raw(bl.CLASSES[tag]())
        assert built[:2] == bytes([tag, version]) and len(built) == wire.fixed_size(tag)
        assert bl.CRAFT[name.lower()] is bl.CLASSES[tag]
    assert raw(bl.BullyEntry())[1] == 0 and {raw(c())[1] for t, c in bl.CLASSES.items() if t != 1} == {1}


@st.composite
def messages(draw):
    """Any valid wire.Message (127.0.0.x addresses)."""
    peer = st.builds(Peer, st.integers(1, 254).map(lambda k: f"127.0.0.{k}"),
                     st.integers(1, 65535), st.integers(0, 65535))
    tag = draw(st.sampled_from(sorted(wire.TABLE)))
    me = draw(peer)
    kinds = wire.TABLE[tag][2]
    kw = {}
    if "addr" in kinds:
        kw["peer"] = Peer(me.host, me.port)
    elif "peer" in kinds:
        kw["peer"] = me
    if "peers" in kinds:
        kw["peers"] = tuple(draw(st.lists(peer, max_size=4)))
    for f in kinds:
        kind, _, attr = f.partition(":")
        if kind == "u16":
            kw[attr] = draw(st.integers(0, 65535))
        elif kind == "i64":
            kw[attr] = draw(st.integers(-(1 << 63), (1 << 63) - 1))
        elif kind == "text":
            kw["data"] = draw(st.binary(max_size=300))
    return Message(tag, **kw)


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=5))
def test_scapy_and_the_wire_agree_on_random_message_sequences(msgs):
    stream = b"".join(wire.encode(m) for m in msgs)
    chain = bl.dissect(stream)
    assert raw(chain) == stream
    got = bl.messages(chain)
    assert [to_message(m) for m in got] == msgs
    assert wire.Framer().feed(stream) == msgs
    built = got[0]
    for m in got[1:]:
        built = built / m
    assert raw(built) == stream


def test_a_segment_of_several_messages_dissects_as_a_chain_and_splits_into_them():
    a, b, c = (wire.encode(m) for m in (Message(3, ME), Message(8, P3, data=b"x" * 3),
                                        Message(7, P4, search_id=1)))
    chain = bl.dissect(a + b + c)
    assert [type(m) for m in bl.messages(chain)] == [bl.BullyNodeRequest, bl.BullyText, bl.BullyIAmFound]
    assert chain[bl.BullyText].msg == b"xxx" and chain[bl.BullyIAmFound].search_id == 1
    assert bl.split_frames(a + b + c) == [a, b, c]
    assert bl.split_frames(a) is None
    assert raw(bl.BullyNodeRequest(**ME_KW) / bl.BullyText(msg=b"xxx", ip="127.0.0.3", port=3335,
                                                          id=3)) == a + b
    row = bl.describe(chain)
    assert row == {"protocol": "bully", "type": "NodeRequest",
                   "types": ["NodeRequest", "Text", "IAmFound"],
                   "summary": "bully NodeRequest id=2 from 127.0.0.2:3334"}


def test_thousands_of_messages_in_one_payload_never_raise():
    one = wire.encode(Message(5, ME))
    pkt = bl.dissect(one * 4000)  # scapy's recursion gives up somewhere; it must not raise
    assert isinstance(pkt, bl.BullyIAmAlive)
    assert bl.split_frames(one * 4000) == [one] * 4000


MALFORMED = [
    (b"", "Truncated"),
    (b"\x05", "Truncated"),
    (b"\x00\x01" + bytes(8), "UnknownTag"),
    (b"\x0e\x01" + bytes(8), "UnknownTag"),
    (b"\xff" * 40, "UnknownTag"),
    (b"\x03\x00" + bytes(8), "BadVersion"),  # version 0 on a tag that needs 1
    (b"\x01\x01" + bytes(6), "BadVersion"),  # Entry is the one with 0
    (wire.encode(Message(5, ME))[:9], "Truncated"),
    (wire.encode(Message(4, peers=(ME,)))[:20], "Truncated"),
    (wire.encode(Message(8, ME, data=b"hello"))[:-1], "Truncated"),
    (wire.encode(Message(8, ME, data=b"hello"))[:11], "Truncated"),  # inside the length field
]


@pytest.mark.parametrize("data,error", MALFORMED, ids=[f"{e}-{len(d)}" for d, e in MALFORMED])
def test_malformed_payloads_dissect_as_malformed_with_the_reason(data, error):
    with pytest.raises(wire.BullyError):
        wire.decode(data)
    pkt = bl.dissect(data)
    assert isinstance(pkt, bl.BullyMalformed) and pkt.load == data
    assert pkt.reason.startswith(error + ":") and f"({error}: " in pkt.summary()
    row = bl.describe(data)
    assert row["type"] == "MALFORMED" and row["reason"] == pkt.reason
    if data:  # on the wire, to or from 3333, it is the TCP payload's layer
        seg = IP(raw(IP(src="127.0.0.1", dst="127.0.0.2") / TCP(sport=40000, dport=3333) / data))
        assert isinstance(seg[TCP].payload, bl.BullyMalformed) and seg[bl.BullyMalformed].load == data


def test_good_messages_then_garbage_keep_the_good_ones():
    good = wire.encode(Message(5, ME))
    chain = bl.dissect(good + b"\x63junk")
    assert [type(m) for m in bl.messages(chain)] == [bl.BullyIAmAlive, bl.BullyMalformed]
    assert chain[bl.BullyMalformed].reason == "UnknownTag: unknown tag 99"
    assert bl.split_frames(good + b"\x05\x01") == [good, b"\x05\x01"]
    assert bl.describe(chain)["types"] == ["IAmAlive", "MALFORMED"]


def test_a_length_that_lies_is_crafted_as_asked_and_reads_back_malformed():
    assert raw(bl.BullyText(msg=b"abc"))[10:12] == b"\x00\x03"  # computed on build
    lie = raw(bl.BullyText(msg=b"abc", length=9))
    assert lie[10:12] == b"\x00\x09"
    assert isinstance(bl.dissect(lie), bl.BullyMalformed)
    assert "Truncated: 15 bytes; Text needs 21" in bl.dissect(lie).summary()


def test_peer_slots_pad_and_refuse_a_fifth():
    assert raw(bl.BullyNodeResponse()) == b"\x04\x01" + bytes(32)
    dissected = bl.dissect(b"\x04\x01" + bytes(32))
    assert len(dissected.peers) == 4 and all(s.empty() for s in dissected.peers)
    assert "peers=[]" in dissected.summary()
    with pytest.raises(ValueError, match="a peer list holds 4"):
        raw(bl.BullyNodeResponse(peers=[slot(ME)] * 5))
    assert bl.PeerSlotsField.from_cli("2@127.0.0.2:3334, 127.0.0.3:3335")[1].id == 0
    for bad in ("127.0.0.2", "x@127.0.0.2:1", "2@127.0.0.2:70000", "2@host:1"):
        with pytest.raises(ValueError):
            bl.PeerSlotsField.from_cli(bad)


def test_summaries():
    assert bl.BullyIAmFound(ip="127.0.0.2", port=3334, id=7, search_id=3).summary() == \
        "bully IAmFound id=7 search=3 from 127.0.0.2:3334"
    assert bl.BullyEntry(ip="127.0.0.2", port=3334).summary() == "bully Entry from 127.0.0.2:3334"
    assert bl.BullyNodeSearch(ip="127.0.0.2", port=3334, source_id=2, search_id=9,
                              destination_id=17).summary() == \
        "bully NodeSearch source=2 search=9 destination=17 from 127.0.0.2:3334"
    assert bl.dissect(wire.encode(PAIRS[1][1])).summary() == \
        "bully EntryResponse id=5 peers=[2@127.0.0.2:3334, 3@127.0.0.3:3335]"
    assert bl.BullyText(msg=b"hey", **ME_KW).summary() == "bully Text id=2 from 127.0.0.2:3334 len=3 'hey'"
    assert bl.BullyHereIsMyTime(time_ms=0, **ME_KW).summary().endswith("time=0 (1970-01-01T00:00:00.000Z)")
    assert "tag=3 version=0" in bl.BullyIAmAlive(tag=3, version=0).summary()  # crafted lies show


def test_bound_to_tcp_3333_both_ways_and_to_any_named_port():
    data = wire.encode(Message(9, ME))
    for sport, dport in ((40000, 3333), (3333, 40000)):
        seg = IP(raw(IP() / TCP(sport=sport, dport=dport) / data))
        assert seg[bl.BullyAreYouAlive].id == 2
    assert not IP(raw(IP() / UDP(sport=40000, dport=3333) / data)).haslayer(bl.BullyAreYouAlive)
    assert not IP(raw(IP() / TCP(sport=40000, dport=24333) / data)).haslayer(bl.BullyAreYouAlive)
    bl.bind_port(24333)
    assert IP(raw(IP() / TCP(sport=40000, dport=24333) / data)).haslayer(bl.BullyAreYouAlive)
    syn = IP(raw(IP() / TCP(sport=40000, dport=3333, flags="S")))
    assert not syn.haslayer(bl.BullyMalformed) and not syn[TCP].payload
    assert bl.describe(Raw(b"\x05\x01")) is None


# ---- the tools ---------------------------------------------------------------------------------

def run(*args, timeout=60):
    return subprocess.run(PELOTARI + list(args), capture_output=True, text=True, timeout=timeout)


def hexdump_bytes(text):
    """The bytes of scapy's hexdump output."""
    out = b""
    for line in text.splitlines():
        out += bytes.fromhex(line[6:53])
    return out


@pytest.mark.e2e
def test_craft_shows_exact_bytes_of_bully_messages():
    res = run("craft", "NodeRequest", "-F", "ip=127.0.0.2", "-F", "port=3334", "-F", "id=2",
              "--hexdump")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith("0000  03 01 7F 00 00 02 0D 06 00 02")
    assert hexdump_bytes(res.stdout) == wire.encode(Message(3, ME))
    res = run("craft", "bully.entryresponse", "-F", "id=5",
              "-F", "peers=2@127.0.0.2:3334,3@127.0.0.3:3335", "--hexdump")
    assert hexdump_bytes(res.stdout) == wire.encode(Message(2, id=5, peers=(ME, P3)))
    res = run("craft", "text", "-F", "msg=hello", "--port", "3334", "-F", "ip=127.0.0.2",
              "-F", "id=2")
    assert res.returncode == 0 and "length    = None" not in res.stdout
    assert "msg       = b'hello'" in res.stdout and "length    = 5" in res.stdout
    res = run("craft", "hereismytime", "-F", "time_ms=-1", "--hexdump")
    assert hexdump_bytes(res.stdout) == b"\x0c\x01" + bytes(8) + b"\xff" * 8


@pytest.mark.e2e
@pytest.mark.parametrize("args,needle", [
    (["iamalive", "-F", "port=70000"], "port: 70000 outside 0..65535"),
    (["iamalive", "-F", "id=-1"], "id: -1 outside 0..65535"),
    (["iamalive", "-F", "ip=nowhere"], "ip: 'nowhere' is not an IPv4 address"),
    (["noderesponse", "-F", "peers=1@127.0.0.1:1,2@127.0.0.1:1,3@127.0.0.1:1,4@127.0.0.1:1,"
      "5@127.0.0.1:1"], "5 peers; a peer list holds 4 slots"),
    (["noderesponse", "-F", "peers=127.0.0.1"], "is not ID@IP:PORT"),
    (["hereismytime", "-F", "time_ms=soon"], "time_ms: invalid literal"),
    (["iamalives"], "unknown type 'iamalives'"),
    (["iamalive", "-F", "msg=x"], "BullyIAmAlive has no field 'msg'"),
])
def test_craft_errors_are_one_line(args, needle):
    res = run("craft", *args)
    assert res.returncode == 2, res
    assert needle in res.stderr and "Traceback" not in res.stderr


def listener(answer_chunks, pause=0.2):
    """A TCP server on 127.0.0.1 (an ephemeral port) that takes one connection, reads one bully
    message with wire.Framer, then sends answer_chunks (pausing between them) and closes.
    Returns (port, what it received, thread)."""
    import time

    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(30)
    got = []

    def serve():
        with srv:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(30)
                framer, raw_in = wire.Framer(), b""
                while not got:
                    data = conn.recv(4096)
                    if not data:
                        return
                    raw_in += data
                    got.extend(framer.feed(data))
                got.append(raw_in)
                for k, chunk in enumerate(answer_chunks):
                    if k:
                        time.sleep(pause)
                    conn.sendall(chunk)
                time.sleep(pause)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return srv.getsockname()[1], got, thread


@pytest.mark.e2e
def test_craft_sends_a_node_request_over_tcp_and_dissects_the_answer_split_in_two_reads():
    answer = wire.encode(Message(4, peers=(P3, P4)))
    port, got, thread = listener([answer[:7], answer[7:]])
    res = run("craft", "NodeRequest", "-F", "ip=127.0.0.2", "--port", "3334", "-F", "id=2",
              "--send", f"127.0.0.1:{port}", "--wait", "5", "-q")
    thread.join(10)
    assert res.returncode == 0, res.stderr
    assert got[0] == Message(3, ME) and got[1] == wire.encode(Message(3, ME))
    assert f"sent 10 bytes to 127.0.0.1:{port} over TCP" in res.stderr
    lines = [line for line in res.stdout.splitlines() if line.startswith("answer from")]
    assert lines == [f"answer from 127.0.0.1:{port}: bully NodeResponse "
                     "peers=[3@127.0.0.3:3335, 4@127.0.0.4:3336]"]
    assert "port      = 3336" in res.stdout  # the answer's fields are shown too


@pytest.mark.e2e
def test_craft_prints_every_message_of_a_coalesced_answer_and_a_broken_one():
    alive, leader = wire.encode(Message(5, P4)), wire.encode(Message(10, P4))
    port, got, thread = listener([alive + leader + b"\x63"])
    res = run("craft", "AreYouAlive", "-F", "ip=127.0.0.2", "--send", f"127.0.0.1:{port}",
              "--wait", "5", "-q")
    thread.join(10)
    assert res.returncode == 0, res.stderr and got[0].tag == 9
    answers = [line.split(": ", 1)[1] for line in res.stdout.splitlines() if line.startswith("answer")]
    assert answers == ["bully IAmAlive id=4 from 127.0.0.4:3336",
                       "bully IAmLeader id=4 from 127.0.0.4:3336",
                       "bully malformed (UnknownTag: unknown tag 99), 1 bytes"]


@pytest.mark.e2e
def test_craft_to_a_peer_that_closes_or_is_not_there():
    port, got, thread = listener([])
    res = run("craft", "IAmAlive", "--send", f"127.0.0.1:{port}", "--wait", "5", "-q")
    thread.join(10)
    assert res.returncode == 0 and "closed the connection without an answer" in res.stderr
    assert got[0] == Message(5, Peer("0.0.0.0", 0, 0))
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))  # bound, never listening: held, so connecting is refused
    closed_port = probe.getsockname()[1]
    res = run("craft", "IAmAlive", "--send", f"127.0.0.1:{closed_port}", "--wait", "1")
    probe.close()
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"Error: cannot send to 127.0.0.1:{closed_port} over TCP: Connection refused")


def tcp(payload, sport=40000, dport=3333, src="127.0.0.1", dst="127.0.0.2", flags="PA"):
    return Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags=flags) / payload


def make_pcap(path):
    one = wire.encode(Message(7, Peer("127.0.0.2", 3334, 7), search_id=3))
    two = wire.encode(Message(3, ME)) + wire.encode(Message(4, peers=(P3,)))
    short = b"\x05\x01\x00"  # a torn message: with Ethernet's minimum the frame is padded
    padded = Ether(raw(tcp(short, sport=3333, dport=40000, src="127.0.0.2", dst="127.0.0.1"))
                   + bytes(3))
    assert padded.haslayer("Padding")
    packets = [
        tcp(b"", flags="S"),
        tcp(b"", sport=3333, dport=40000, src="127.0.0.2", dst="127.0.0.1", flags="SA"),
        tcp(one),
        tcp(two, sport=3333, dport=40000, src="127.0.0.2", dst="127.0.0.1"),
        tcp(b"\x63\x01hello"),
        padded,
        tcp(wire.encode(Message(5, ME)), dport=24334),  # bully only with -p bully:24334
        Ether() / IP(src="127.0.0.1", dst="127.0.0.2") / UDP(sport=40000, dport=2323) / b"\x99",
        tcp(b"", flags="F"),
    ]
    wrpcap(str(path), packets)


@pytest.mark.e2e
def test_inspect_shows_bully_messages_one_row_each(tmp_path):
    make_pcap(tmp_path / "bully.pcap")
    res = run("inspect", str(tmp_path / "bully.pcap"), "--json")
    assert res.returncode == 0, res.stderr
    *rows, summary = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["protocol"], r["type"], r["src"], r["dst"], r["length"], r.get("frames"))
            for r in rows] == [
        ("bully", "IAmFound", "127.0.0.1:40000", "127.0.0.2:3333", 12, None),
        ("bully", "NodeRequest", "127.0.0.2:3333", "127.0.0.1:40000", 10, 2),
        ("bully", "NodeResponse", "127.0.0.2:3333", "127.0.0.1:40000", 34, 2),
        ("bully", "MALFORMED", "127.0.0.1:40000", "127.0.0.2:3333", 7, None),
        ("fyrehose", "MALFORMED", "127.0.0.1:40000", "127.0.0.2:2323", 1, None),
        # held in case the rest follows; the capture ended first: shown last, cut short
        ("bully", "MALFORMED", "127.0.0.2:3333", "127.0.0.1:40000", 3, None),
    ]
    assert rows[0]["summary"] == "bully IAmFound id=7 search=3 from 127.0.0.2:3334"
    assert rows[2]["summary"] == "bully NodeResponse peers=[3@127.0.0.3:3335]"
    assert rows[3]["reason"] == "UnknownTag: unknown tag 99"
    assert rows[5]["reason"] == "Truncated: 3 bytes; IAmAlive needs 10"
    assert summary == {"summary": {"counts": {"IAmFound": 1, "NodeRequest": 1, "NodeResponse": 1,
                                              "MALFORMED": 3}, "packets": 6}}
    other = run("inspect", str(tmp_path / "bully.pcap"), "--json", "-p", "bully:24334")
    *rows, _ = [json.loads(line) for line in other.stdout.splitlines()]
    assert [r["type"] for r in rows if r["dst"].endswith(":24334")] == ["IAmAlive"]
    text = run("inspect", str(tmp_path / "bully.pcap"))
    lines = text.stdout.splitlines()
    assert len(lines) == 6 and "bully NodeRequest id=2 from 127.0.0.2:3334" in lines[1]
    assert "6 packets: IAmFound 1, MALFORMED 3, NodeRequest 1, NodeResponse 1" in text.stderr


@pytest.mark.e2e
def test_inspect_shows_a_message_written_over_several_segments_as_one_row(tmp_path):
    # peerbox writes a message field by field: tag, version, then the rest.
    req = wire.encode(Message(3, ME))
    ans = wire.encode(Message(4, peers=(P3,)))
    back = dict(sport=3333, dport=40000, src="127.0.0.2", dst="127.0.0.1")

    def seg(data, seq, **kw):
        pkt = tcp(data, **kw)
        pkt[TCP].seq = seq
        return pkt

    packets = [seg(req[:1], 100), seg(req[1:2], 101), seg(req[2:], 102),
               seg(ans[:14], 500, **back), seg(ans[14:] + req[:4], 514, **back),
               seg(req[4:], 538, **back),
               seg(b"\x05\x01\x7f", 110),  # torn: its direction ends next
               seg(b"", 113, flags="FA")]
    wrpcap(str(tmp_path / "split.pcap"), packets)
    res = run("inspect", str(tmp_path / "split.pcap"), "--json")
    assert res.returncode == 0, res.stderr
    *rows, summary = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["type"], r["length"], r.get("continued"), r.get("frames")) for r in rows] == [
        ("NodeRequest", 10, 2, None),  # one row, once whole (8 of its bytes in the last)
        ("NodeResponse", 34, 14, None),  # the next message's first 4 bytes held back
        ("NodeRequest", 10, 4, None),
        ("MALFORMED", 3, None, None),  # cut short by its direction's FIN
    ]
    assert rows[-1]["reason"] == "Truncated: 3 bytes; IAmAlive needs 10"
    assert summary["summary"]["counts"] == {"NodeRequest": 2, "NodeResponse": 1,
                                            "MALFORMED": 1}
    # What -w writes reads the same again: the held segments are written too.
    again = run("inspect", str(tmp_path / "split.pcap"), "--json", "-w", str(tmp_path / "w.pcap"))
    assert again.returncode == 0, again.stderr
    res = run("inspect", str(tmp_path / "w.pcap"), "--json")
    assert [json.loads(line) for line in res.stdout.splitlines()][:-1] == rows


def test_describe_of_bytes_and_a_struct_check():
    row = bl.describe(wire.encode(Message(12, ME, time_ms=1000)))
    assert row == {"protocol": "bully", "type": "HereIsMyTime",
                   "summary": "bully HereIsMyTime id=2 from 127.0.0.2:3334 "
                              "time=1000 (1970-01-01T00:00:01.000Z)"}
    assert struct.unpack("!q", raw(bl.BullyHereIsMyTime(time_ms=-(1 << 63)))[10:])[0] == -(1 << 63)


@pytest.mark.e2e
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_inspect_live_on_loopback_shows_a_crafted_exchange(tmp_path):
    import time

    answer = wire.encode(Message(4, peers=(P3,)))
    port, got, thread = listener([answer])
    out = tmp_path / "live.pcap"
    cap = subprocess.Popen(PELOTARI + ["inspect", "-i", "lo", "-f", f"tcp port {port} and inbound",
                                       "-p", f"bully:{port}", "--json", "-t", "300", "-w", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "capturing on lo" in cap.stderr.readline()
    time.sleep(1.0)
    res = run("craft", "NodeRequest", "-F", "ip=127.0.0.2", "--port", "3334", "-F", "id=2",
              "--send", f"127.0.0.1:{port}", "--wait", "3", "-q")
    thread.join(10)
    assert res.returncode == 0, res.stderr
    # The capture writes each packet as it goes (-w): once both messages are in the file, it
    # is stopped as a user would stop it (on a loaded machine it may lag the exchange).
    from scapy.all import TCP, rdpcap
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if out.exists() and sum(1 for p in rdpcap(str(out))
                                if TCP in p and len(p[TCP].payload)) >= 2:
            break
        time.sleep(0.1)
    cap.send_signal(signal.SIGINT)
    stdout, _ = cap.communicate(timeout=60)
    *rows, summary = [json.loads(line) for line in stdout.splitlines()]
    # The handshake, ACKs and FINs carry no payload: only the two messages are rows.
    assert [(r["type"], r["dst"].endswith(f":{port}")) for r in rows] == [
        ("NodeRequest", True), ("NodeResponse", False)]
    assert summary["summary"]["counts"] == {"NodeRequest": 1, "NodeResponse": 1}
    read = run("inspect", str(out), "--json", "-p", f"bully:{port}")
    assert [json.loads(line).get("type") for line in read.stdout.splitlines()][:2] == [
        "NodeRequest", "NodeResponse"]


def test_peer_slots_and_port_come_from_the_wire_table():
    assert len(raw(bl.BullyPeer())) == wire.PEER_SIZE
    assert bl.DEFAULT_PORTS == (wire.DEFAULT_PORT,)
    for tag, (_, _, kinds) in wire.TABLE.items():
        if "peers" in kinds:  # an empty list still fills every slot
            built = raw(bl.CLASSES[tag]())
            assert len(built) == wire.fixed_size(tag) and wire.decode(built).peers == ()
