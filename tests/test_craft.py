"""pelotari.craft called directly: values converted and checked at their limits, packs, signing
rules, and the UDP, TCP and line exchanges against peers on 127.0.0.1."""
import json
import socket
import threading

import pytest

pytest.importorskip("scapy")

from fastpath import refcodec as wire  # noqa: E402
from pelotari import craft as crafting  # noqa: E402
from pelotari.layers import bully, potato  # noqa: E402
from pelotari.layers.fyrehose import (  # noqa: E402
    FyrehoseDeliver, FyrehoseInfo, FyrehoseKeepalive, FyrehoseKeepaliveAck, FyrehoseRequest)

MAX48 = (1 << 48) - 1
MAX64 = (1 << 64) - 1


@pytest.mark.parametrize("cls,name,text,want", [
    (FyrehoseRequest, "from_seq", str(MAX48), MAX48),  # a 48-bit field at its limit
    (FyrehoseRequest, "port", "0xffff", 0xFFFF),
    (FyrehoseRequest, "addr", "10.0.0.1", "10.0.0.1"),
    (FyrehoseDeliver, "data", "hex:00ff", b"\x00\xff"),
    (FyrehoseDeliver, "data", "hi", b"hi"),
    (FyrehoseKeepalive, "flags", "nosubscribe,nojournal", "NOSUBSCRIBE+NOJOURNAL"),
    (FyrehoseKeepalive, "flags", "3", 3),
    (FyrehoseKeepalive, "flags", "cluster+packed", "CLUSTER+PACKED"),
    (FyrehoseInfo, "flags", "no_quorum", "NO_QUORUM"),
    (FyrehoseInfo, "epoch", str(MAX64), MAX64),  # a 64-bit field at its limit
])
def test_field_values_convert_up_to_the_limit(cls, name, text, want):
    assert crafting.field_value(cls, name, text) == want


@pytest.mark.parametrize("cls,name,text,needle", [
    (FyrehoseRequest, "from_seq", str(MAX48 + 1), f"outside 0..{MAX48}"),  # one past
    (FyrehoseRequest, "port", "65536", "outside 0..65535"),
    (FyrehoseRequest, "port", "-1", "outside 0..65535"),
    (FyrehoseRequest, "addr", "nowhere", "not an IPv4 address"),
    (FyrehoseDeliver, "data", "hex:zz", "'zz' is not hex"),
    (FyrehoseKeepalive, "flags", "BOGUS", "unknown flag 'BOGUS'"),
    (FyrehoseKeepalive, "sequence", "1", "FyrehoseKeepalive has no field 'sequence'"),
    (FyrehoseRequest, "to_seq", "ten", "to_seq: 'ten' is not a number"),
    (FyrehoseInfo, "epoch", str(MAX64 + 1), f"outside 0..{MAX64}"),  # one past
    (FyrehoseInfo, "flags", "PACKED", "unknown flag 'PACKED'"),  # KEEPALIVE's, not INFO's
    (FyrehoseInfo, "members", ",".join(["10.0.0.1:2323"] * 6), "6 members; INFO holds 5"),
    (FyrehoseInfo, "members", "10.0.0.1", "not ADDR:PORT"),
    (FyrehoseInfo, "members", "10.0.0.1:65536", "not ADDR:PORT"),
])
def test_bad_field_values_are_craft_errors(cls, name, text, needle):
    with pytest.raises(crafting.CraftError, match=needle) as caught:
        crafting.field_value(cls, name, text)
    assert isinstance(caught.value, ValueError)


def test_craft_builds_the_reference_codecs_bytes_and_the_last_text_of_a_field_wins():
    crafted = crafting.craft("request", fields=[("addr", "10.0.0.1"), ("port", "2323"),
                                                ("from_seq", "bad"), ("from_seq", "5"),
                                                ("to_seq", "9")])
    assert crafted.wire == wire.encode_request("10.0.0.1", 2323, 5, 9)
    assert crafted.transport == "udp" and not crafted.lines and crafted.notes == ()


def test_craft_builds_the_cluster_extensions_query_and_info():
    token = "hex:" + bytes(range(16)).hex()
    assert crafting.craft("query", fields=[("token", token)]).wire == wire.encode_query(
        bytes(range(16)))
    crafted = crafting.craft("info", fields=[
        ("token", token), ("epoch", "9"), ("addr", "10.0.0.1"), ("port", "2323"),
        ("flags", "ACTIVE"), ("members", "10.0.0.1:2323,10.0.0.2:2324")])
    assert crafted.wire == wire.encode_info(bytes(range(16)), 9, "10.0.0.1", 2323, 0x2,
                                            [("10.0.0.1", 2323), ("10.0.0.2", 2324)])
    assert crafting.craft("fyrehose.info").wire == wire.encode_info(bytes(16), 0, "", 0, 0)


def test_a_packed_deliver_counts_its_sequence_up_across_the_48_bit_wrap():
    crafted = crafting.craft("deliver", fields=[("sequence", str(MAX48)), ("data", "x")], pack=3)
    frames = crafted.dissected()
    seqs = []
    while frames is not None and isinstance(frames, FyrehoseDeliver):
        seqs.append(frames.sequence)
        frames = frames.payload if frames.payload else None
    assert seqs == [MAX48, 0, 1]
    assert crafted.wire == b"".join(wire.encode_deliver(s, b"x") for s in (MAX48, 0, 1))


@pytest.mark.parametrize("kind,subtype,kwargs,needle,hint", [
    ("keepalive", None, {"pack": 2}, "only fyrehose DELIVER and PUSH", "--pack"),
    ("keepalive", None, {"fields": [("token", "short")]}, "TOKEN must be 16 bytes", "--token"),
    ("keepalive", None, {"sign_at": 5.0}, "only swarm datagrams are signed", "--sign-at"),
    ("explode", None, {}, "unknown type 'explode'", "TYPE"),
    ("swarm", None, {}, "swarm: give a type too", "TYPE"),
    ("nothing", "ping", {}, "'nothing' is not a protocol", "TYPE"),
])
def test_craft_errors_name_the_option_at_fault(kind, subtype, kwargs, needle, hint):
    with pytest.raises(crafting.CraftError, match=needle) as caught:
        crafting.craft(kind, subtype, **kwargs)
    assert caught.value.hint == hint


def test_a_pack_that_does_not_fit_one_datagram_is_refused_one_frame_before_it_does():
    frame = len(wire.encode_push(b"x" * 1000))
    fits = 65507 // frame
    assert len(crafting.craft("push", fields=[("data", "x" * 1000)], pack=fits).wire) <= 65507
    with pytest.raises(crafting.CraftError, match="do not fit in one UDP datagram"):
        crafting.craft("push", fields=[("data", "x" * 1000)], pack=fits + 1)


def test_unsigned_swarm_datagrams_and_bad_potato_lines_come_with_a_note(monkeypatch):
    monkeypatch.delenv("PELOTARI_SWARM_KEYS", raising=False)
    assert any("unsigned" in n for n in crafting.craft("swarm", "ping").notes)
    direct = crafting.craft("direct", fields=[("from", "A")])
    assert direct.pkt.sender == "A"  # the ALIASES of the layer
    assert [n for n in direct.notes if n.startswith("a receiver drops this line")]
    with pytest.raises(crafting.CraftError, match="no default port") as caught:
        crafting.default_target(direct, "127.0.0.1", None)
    assert caught.value.hint == "--send"
    assert crafting.default_target(crafting.craft("noderequest"), "127.0.0.1", None) == (
        "127.0.0.1", bully.DEFAULT_PORT)


def _serve(sock, handle):
    thread = threading.Thread(target=handle, args=(sock,), daemon=True)
    thread.start()
    return thread


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_a_packed_push_signs_on_first_and_udp_answers_are_dissected():
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.settimeout(5)
    seen = []

    def backbone(sock):
        for _ in range(2):
            data, source = sock.recvfrom(70000)
            seen.append(data)
            sock.sendto(wire.encode_keepalive_ack(b"a" * 16), source)

    thread = _serve(peer, backbone)
    address = peer.getsockname()
    crafted = crafting.craft("push", fields=[("data", "p!")], pack=2)
    notes, answers = [], []
    got = crafting.send(crafted, address, wait=0.5, note=notes.append,
                        on_answer=lambda where, pkt: answers.append((where, pkt)))
    thread.join(5)
    peer.close()
    sign_on = FyrehoseKeepalive(seen[0])
    assert sign_on.token == crafting.PACK_TOKEN and sign_on.flags.NOSUBSCRIBE
    assert seen[1] == crafted.wire
    assert got == [wire.encode_keepalive_ack(b"a" * 16)]
    assert [type(pkt) for _, pkt in answers] == [FyrehoseKeepaliveAck]
    assert answers[0][0] == "%s:%d" % address
    assert notes[0].startswith("signed on as a packing publisher first")


def test_no_sign_on_sends_the_pack_alone_and_says_when_nothing_answers():
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    crafted = crafting.craft("push", fields=[("data", "p!")], pack=2)
    notes = []
    assert crafting.send(crafted, peer.getsockname(), wait=0.1, sign_on=False,
                         note=notes.append) == []
    peer.settimeout(5)
    assert peer.recv(70000) == crafted.wire
    peer.close()
    assert notes[-1] == "no answer within 0.1s"


def test_tcp_exchange_reads_a_message_split_over_segments():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    answer = bytes(bully.BullyIAmAlive())
    received = []

    def node(sock):
        conn, _ = sock.accept()
        with conn:
            received.append(conn.recv(65536))
            conn.sendall(answer[:3])
            threading.Event().wait(0.1)
            conn.sendall(answer[3:])
            conn.recv(65536)  # until the client closes

    thread = _serve(server, node)
    crafted = crafting.craft("noderequest", fields=[("id", "2")])
    answers = []
    got = crafting.tcp_exchange(server.getsockname(), crafted.wire, 3.0, bully,
                                on_answer=lambda where, pkt: answers.append(pkt))
    thread.join(5)
    server.close()
    assert received == [crafted.wire] and got == [answer]
    assert [type(pkt) for pkt in answers] == [bully.BullyIAmAlive]


def test_tcp_exchange_to_a_closed_port_is_an_exchange_error():
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.bind(("127.0.0.1", 0))
    address = probe.getsockname()
    probe.close()
    with pytest.raises(crafting.ExchangeError, match="cannot send to 127.0.0.1"):
        crafting.tcp_exchange(address, b"\x05\x01", 0.0, bully)


def _potato_peer(refuse=None):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    lines = []

    def peer(sock):
        conn, _ = sock.accept()
        with conn:
            stream = conn.makefile("rb")
            lines.append(stream.readline())
            hello = {"hello": "B"} if refuse is None else {"hello": "B", "refused": refuse}
            conn.sendall(json.dumps(hello).encode() + b"\n")
            if refuse is not None:
                return
            lines.append(stream.readline())
            conn.sendall(potato.PING + potato.EOL + b'{"type": "direct", "identifier": "i1", '
                         b'"from": "B", "to": "A", "visited": [], "body": "back"}\n')
            while stream.readline():
                pass

    thread = _serve(server, peer)
    return server, thread, lines


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_line_exchange_says_hello_sends_the_line_and_counts_pings_apart():
    server, thread, lines = _potato_peer()
    address = server.getsockname()
    crafted = crafting.craft("direct", fields=[("from", "A"), ("to", "B"), ("body", "hi")])
    notes, answers = [], []
    got = crafting.send(crafted, address, wait=0.5, note=notes.append,
                        on_answer=lambda where, pkt: answers.append(pkt))
    thread.join(5)
    server.close()
    assert lines == [potato.hello_line("A"), crafted.wire]
    assert len(got) == 1 and json.loads(got[0])["body"] == "back"
    assert [pkt.body for pkt in answers] == ["back"]
    assert notes[0].startswith("%s:%d is 'B'; we are 'A' (from 127.0.0.1:" % address)
    assert notes[-1].startswith("1 line and 1 ping from ")


def test_a_refused_hello_is_an_exchange_error():
    server, thread, lines = _potato_peer(refuse="name taken")
    crafted = crafting.craft("direct", fields=[("from", "A"), ("to", "B")])
    with pytest.raises(crafting.ExchangeError, match="refused 'A': name taken"):
        crafting.send(crafted, server.getsockname(), wait=0.5)
    thread.join(5)
    server.close()
    assert lines == [potato.hello_line("A")]


def test_captured_packets_carry_what_send_sends_to_its_target():
    from scapy.all import IP, TCP, UDP

    push = crafting.craft("push", None, [("data", "hi")])
    [datagram] = crafting.captured(push, ("127.0.0.1", 2323))
    assert (datagram[IP].src, datagram[UDP].sport, datagram[UDP].dport) == ("127.0.0.1", 40000,
                                                                            2323)
    assert bytes(datagram[UDP].payload) == push.wire
    line = crafting.craft("direct", None, [("from", "A"), ("to", "B"), ("body", "x" * 40000)])
    segments = crafting.captured(line, ("10.0.0.2", 4002), src=("10.0.0.1", 5000))
    ends = {(s[IP].src, s[IP].dst, s[TCP].sport, s[TCP].dport) for s in segments}
    assert ends == {("10.0.0.1", "10.0.0.2", 5000, 4002)}
    assert bytes(segments[0][TCP].payload) == potato.hello_line("A")
    assert b"".join(bytes(s[TCP].payload) for s in segments[1:]) == line.wire
    first = 1 + len(potato.hello_line("A"))
    assert [s[TCP].seq for s in segments] == [1, first, first + crafting.SEGMENT,
                                              first + 2 * crafting.SEGMENT]
    hello = crafting.craft("potato", "hello", [("hello", "C")])
    assert [bytes(s[TCP].payload) for s in crafting.captured(hello, ("127.0.0.1", 1))] == [hello.wire]
