"""The potato scapy layer against pelotari.potato.wire: exact bytes both ways for the six message
types and the transport's hello/ping lines, malformed lines (as bytes literals) that must
dissect as such without raising, describe(); and `pelotari craft` / `pelotari inspect` with
potato on a real `pelotari potato node --transport tcp`, a fake peer, and pcaps."""
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

scapy_all = pytest.importorskip("scapy.all")
from scapy.all import IP, TCP, Ether, Raw, raw, wrpcap  # noqa: E402

from pelotari.potato import transport, wire  # noqa: E402
from pelotari.potato.wire import Message, Request, Response  # noqa: E402
from pelotari.layers import potato as pl  # noqa: E402

from conftest import PELOTARI  # noqa: E402

NEXT = "5f" * 20
REQ = Request("INITIAL", NEXT, "A", ("B", "C"), 290)
RESP = Response("INITIAL", NEXT, "NO", 1, 2)

# (scapy packet, the wire.Message with the same fields): every type, written out by hand.
PAIRS = [
    (pl.PotatoDirect(identifier="m1", sender="A", to="C", visited=["A", "B"], body="hi"),
     Message("direct", "m1", "A", ("A", "B"), "C", "hi")),
    (pl.PotatoBroadcast(identifier="m2", sender="A", visited=["A"], body={"n": [1, 2.5, None]}),
     Message("broadcast", "m2", "A", ("A",), None, {"n": [1, 2.5, None]})),
    (pl.PotatoDirectElectionRequest(identifier="r1", sender="A", visited=["A"],
                                    body=REQ.as_dict()),
     Message("direct_election_request", "r1", "A", ("A",), None, REQ.as_dict())),
    (pl.PotatoDirectElectionResponse(identifier="r2", sender="B", to="A", visited=["B"],
                                     body=RESP.as_dict()),
     Message("direct_election_response", "r2", "B", ("B",), "A", RESP.as_dict())),
    (pl.PotatoIndirectElectionRequest(identifier="r3", sender="B", visited=["B"],
                                      body=REQ.as_dict()),
     Message("indirect_election_request", "r3", "B", ("B",), None, REQ.as_dict())),
    (pl.PotatoIndirectElectionResponse(identifier="r4", sender="D", to="B", visited=["D"],
                                       body=Response("INITIAL", NEXT, "ABSTAIN").as_dict()),
     Message("indirect_election_response", "r4", "D", ("D",), "B",
             Response("INITIAL", NEXT, "ABSTAIN").as_dict())),
]
IDS = [m.type for _, m in PAIRS]


def fields_of(pkt):
    """A dissected message as the wire.Message wire.decode returns."""
    return Message(pkt.type, pkt.identifier, pkt.sender, tuple(pkt.visited), pkt.to, pkt.body)


@pytest.mark.parametrize("pkt,msg", PAIRS, ids=IDS)
def test_every_type_builds_the_encoders_bytes_and_dissects_back(pkt, msg):
    line = wire.encode(msg)
    assert raw(pkt) == line + b"\n"             # scapy builds what a client sends: one line
    dissected = pl.dissect(line + b"\n")
    assert type(dissected) is type(pkt) and isinstance(dissected, pl.PotatoMessage)
    assert not dissected.payload
    assert fields_of(dissected) == msg == wire.decode(line)
    assert raw(dissected) == line + b"\n"


def test_literal_bytes_both_ways():
    data = (b'{"type":"direct","identifier":"m1","from":"A","to":"B","visited":["A"],'
            b'"body":"hi"}\n')
    pkt = pl.PotatoDirect(identifier="m1", sender="A", to="B", visited=["A"], body="hi")
    assert raw(pkt) == data
    got = pl.dissect(data)
    assert (got.type, got.identifier, got.sender, got.to, got.visited, got.body) == (
        "direct", "m1", "A", "B", ["A"], "hi")
    # The transport's own lines, exactly as pelotari.potato.transport writes them.
    assert raw(pl.PotatoHello(hello="A")) == b'{"hello": "A"}\n' == \
        json.dumps({"hello": "A"}).encode() + b"\n" == pl.hello_line("A")
    assert raw(pl.PotatoHello(hello="B", refused="duplicate")) == \
        b'{"hello": "B", "refused": "duplicate"}\n'
    assert raw(pl.PotatoPing()) == transport.PING + b"\n" == b'{"ping": 1}\n'
    assert type(pl.dissect(b'{"ping": 1}\n')) is pl.PotatoPing
    assert type(pl.dissect(b'\n')) is pl.PotatoBlank and raw(pl.dissect(b"\n")) == b"\n"
    hello = pl.dissect(b'{"hello": "B", "refused": "duplicate"}\n')
    assert type(hello) is pl.PotatoHello and (hello.hello, hello.refused) == ("B", "duplicate")


def test_classes_and_field_names_come_from_the_wire_table():
    assert set(pl.CLASSES) == set(wire.TYPES)
    assert sorted(cls.__name__ for cls in pl.CLASSES.values()) == [
        "PotatoBroadcast", "PotatoDirect", "PotatoDirectElectionRequest",
        "PotatoDirectElectionResponse", "PotatoIndirectElectionRequest",
        "PotatoIndirectElectionResponse"]
    for kind, cls in pl.CLASSES.items():
        assert [f.name for f in cls.fields_desc] == [pl.FIELD_NAMES[n] for n in wire.FIELDS]
        assert cls().type == kind and pl.CRAFT[kind] is cls
        assert getattr(pl, cls.__name__) is cls
    assert pl.FIELD_NAMES["from"] == "sender" and set(pl.FIELD_NAMES) == set(wire.FIELDS)
    # Defaults make a message (a fresh identifier each), from pelotari-craft.
    a, b = pl.PotatoBroadcast(), pl.PotatoBroadcast()
    assert a.identifier != b.identifier and raw(a) == raw(a)
    assert wire.decode(raw(a)[:-1]).sender == "pelotari-craft"


def test_a_foreign_spelling_is_kept_exactly_and_a_change_rebuilds_with_the_encoder():
    data = b'{ "visited" : ["A"], "type": "broadcast", "from": "A", "identifier": "x9" }\n'
    pkt = pl.dissect(data)
    assert type(pkt) is pl.PotatoBroadcast and raw(pkt) == data   # as captured, byte for byte
    pkt.visited.append("B")                                       # in place: still noticed
    assert raw(pkt) == wire.encode(Message("broadcast", "x9", "A", ("A", "B"))) + b"\n"
    again = pl.dissect(data)
    again.to = "Z"
    assert b'"to":"Z"' in raw(again)


def test_crafted_lies_are_built_as_asked():
    assert raw(pl.PotatoDirect(identifier="i", sender="A", type="bogus")) == \
        b'{"type":"bogus","identifier":"i","from":"A","visited":[]}\n'
    assert pl.problem(raw(pl.PotatoDirect(identifier="i", sender="A"))) == \
        "bad_field: a direct message needs `to`"
    assert pl.problem(raw(pl.PotatoDirect(identifier="i", sender="A", to="B"))) is None


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                   max_size=3), max_leaves=8)


@st.composite
def messages(draw):
    """Any message wire.decode takes."""
    kind = draw(st.sampled_from(sorted(wire.TYPES)))
    needs_to, body_kind = wire.TYPES[kind]
    ident = st.text(min_size=1, max_size=12)
    parent = draw(ident)
    nxt = draw(ident.filter(lambda n: n != parent))  # a frame is not its own parent
    if body_kind == "request":
        body = Request(parent, nxt, draw(names), tuple(draw(st.lists(names, max_size=3))),
                       draw(st.none() | st.integers(0, 300))).as_dict()
    elif body_kind == "response":
        vote = draw(st.sampled_from(wire.VOTES))
        yes, no = (0, 0) if vote == "ABSTAIN" else sorted(draw(st.tuples(
            st.integers(0, 50), st.integers(1, 50))), reverse=vote == "YES")
        body = Response(parent, nxt, vote, yes, no).as_dict()
    else:
        body = draw(json_values)
    to = draw(names) if needs_to else draw(st.none() | names)
    return Message(kind, draw(ident), draw(names), tuple(draw(st.lists(names, max_size=4))), to,
                   body)


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=5))
def test_scapy_and_the_wire_agree_on_random_streams(msgs):
    stream = b"".join(wire.encode(m) + b"\n" for m in msgs)
    chain = pl.dissect(stream)
    assert raw(chain) == stream
    got = pl.messages(chain)
    assert [fields_of(m) for m in got] == [wire.decode(wire.encode(m)) for m in msgs]
    built = pl.CLASSES[msgs[0].type](**_kw(msgs[0]))
    for m in msgs[1:]:
        built = built / pl.CLASSES[m.type](**_kw(m))
    assert raw(built) == stream
    assert (pl.split_frames(stream) or [stream]) == [wire.encode(m) + b"\n" for m in msgs]


def _kw(m):
    return dict(identifier=m.identifier, sender=m.sender, to=m.to, visited=list(m.visited),
                body=m.body)


def test_a_segment_of_several_lines_is_a_chain_and_splits_into_them():
    a = raw(PAIRS[0][0])
    stream = b'{"hello": "A"}\n' + a + b'{"ping": 1}\n' + b"oops\n" + b'{"type":"br'
    chain = pl.dissect(stream)
    assert [type(m) for m in pl.messages(chain)] == [pl.PotatoHello, pl.PotatoDirect,
                                                     pl.PotatoPing, pl.PotatoMalformed,
                                                     pl.PotatoPartial]
    assert raw(chain) == stream
    assert pl.split_frames(stream) == [b'{"hello": "A"}\n', a, b'{"ping": 1}\n', b"oops\n",
                                       b'{"type":"br']
    assert pl.split_frames(a) is None and pl.unfinished(stream) == b'{"type":"br'
    assert pl.unfinished(a) == b""
    row = pl.describe(chain)
    assert row == {"protocol": "potato", "type": "HELLO", "name": "A",
                   "types": ["HELLO", "direct", "PING", "MALFORMED", "PARTIAL"],
                   "summary": "potato hello 'A'"}


def test_thousands_of_lines_in_one_payload_never_raise():
    one = raw(PAIRS[1][0])
    pkt = pl.dissect(one * 3000)  # scapy's recursion gives up somewhere; it must not raise
    assert isinstance(pkt, pl.PotatoBroadcast)
    assert pl.split_frames(one * 3000) == [one] * 3000


BIG = 65536
# (line as on the wire, without its newline; wire's reason, or the transport's bad_hello)
MALFORMED = [
    (b"garbage", "not_json"),
    (b"\xff\xfe{}", "not_json"),
    (b'["type", "direct"]', "not_json"),
    (b'"direct"', "not_json"),
    (b"[" * 60000, "not_json"),  # absurd nesting: RecursionError, not a traceback
    (b'{"type":"direct","identifier":"m","from":"A","to":"B","visited":[]', "not_json"),
    (b'{"ping":1}', "bad_field"),  # not the transport's exact ping: a message, and a bad one
    (b'{"type":"direct","identifier":"m","from":"A","visited":[]}', "bad_field"),  # no to
    (b'{"type":"broadcast","identifier":"m","from":"A"}', "bad_field"),  # no visited
    (b'{"type":"broadcast","identifier":"m","from":"A","visited":[],"x":1}', "bad_field"),
    (b'{"type":"broadcast","identifier":"","from":"A","visited":[]}', "bad_field"),
    (b'{"type":"broadcast","identifier":"m","from":"' + b"a" * 101 + b'","visited":[]}',
     "bad_field"),
    (b'{"type":"broadcast","identifier":"m","from":"A","visited":"A"}', "bad_field"),
    (b'{"type":"broadcast","identifier":"m","from":"A","visited":[1]}', "bad_field"),
    (b'{"type":"shout","identifier":"m","from":"A","visited":[]}', "unknown_type"),
    (b'{"type":null,"identifier":"m","from":"A","visited":[]}', "unknown_type"),
    (b'{"type":"direct_election_request","identifier":"m","from":"A","visited":[],'
     b'"body":{"parent":"INITIAL","next":"n","direct_participants":[]}}', "bad_field"),
    (b'{"type":"direct_election_response","identifier":"m","from":"A","to":"B","visited":[],'
     b'"body":{"parent":"P","next":"n","vote":"YES","yes":1,"no":2}}', "bad_field"),
    (b'{"type":"direct_election_response","identifier":"m","from":"A","to":"B","visited":[],'
     b'"body":{"parent":"P","next":"n","vote":"ABSTAIN","yes":1,"no":0}}', "bad_field"),
    (b'{"type":"direct_election_response","identifier":"m","from":"A","to":"B","visited":[],'
     b'"body":{"parent":"P","next":"n","vote":"YES","yes":1' + b"0" * 309 + b',"no":0}}',
     "bad_field"),
    (b'{"type":"broadcast","identifier":"' + b"i" * 257 + b'","from":"A","visited":[]}',
     "too_large"),
    (b'{"type":"broadcast","identifier":"m","from":"A","visited":[],"body":' + b"[" * 40
     + b"]" * 40 + b"}", "too_large"),
    (b'{"type":"broadcast","identifier":"m","from":"A","visited":[],"body":"' + b"x" * BIG
     + b'"}', "too_large"),
    (b'{"hello": ["A"]}', "bad_hello"),
    (b'{"hello"}', "bad_hello"),
    (b'{"hello": "' + b"a" * 101 + b'"}', "bad_hello"),
    (b'{"hello": "A", "x": "' + b"x" * 1024 + b'"}', "bad_hello"),
]


@pytest.mark.parametrize("line,reason", MALFORMED,
                         ids=[f"{r}-{len(d)}-{k}" for k, (d, r) in enumerate(MALFORMED)])
def test_malformed_lines_dissect_as_malformed_with_the_reason(line, reason):
    if reason != "bad_hello":  # the receiver's own check says the same
        with pytest.raises(wire.PotatoError) as exc:
            wire.decode(line)
        assert exc.value.reason == reason
    data = line + b"\n"
    pkt = pl.dissect(data)
    assert isinstance(pkt, pl.PotatoMalformed) and pkt.load == line and raw(pkt) == data
    assert pkt.reason.startswith(reason + ":") and f"({reason}: " in pkt.summary()
    row = pl.describe(data)
    assert row["type"] == "MALFORMED" and row["reason"] == pkt.reason
    # The good line after it is still read: a line stream resynchronises at the newline.
    chain = pl.dissect(data + raw(PAIRS[0][0]))
    assert [type(m) for m in pl.messages(chain)] == [pl.PotatoMalformed, pl.PotatoDirect]
    if len(data) < 65000:  # in a TCP segment to a port bound as potato
        pl.bind_port(24440)
        seg = IP(raw(IP(src="127.0.0.1", dst="127.0.0.2") / TCP(sport=40000, dport=24440) / data))
        assert seg.haslayer(pl.PotatoMalformed) and seg[pl.PotatoMalformed].load == line


def test_a_line_without_its_newline_is_partial_unless_already_too_long():
    pkt = pl.dissect(b'{"type":"direct"')
    assert type(pkt) is pl.PotatoPartial and pkt.reason == "no newline yet"
    assert raw(pkt) == b'{"type":"direct"' and raw(pl.PotatoPartial(load=b"ab")) == b"ab"
    assert "partial line, 16 bytes so far" in pkt.summary()
    whole = raw(PAIRS[0][0])[:-1]  # a whole message whose newline is in the next segment
    assert type(pl.dissect(whole)) is pl.PotatoPartial
    huge = b"x" * (BIG + 1)
    assert type(pl.dissect(huge)) is pl.PotatoMalformed and pl.unfinished(huge) == b""
    assert pl.dissect(huge).reason.startswith("too_large:")
    offer = json.dumps({"hello": "A", "offer": "v=0 " * 500}).encode()  # signaling may be long
    assert type(pl.dissect(offer + b"\n")) is pl.PotatoHello
    assert "WebRTC offer (SDP 2000 characters)" in pl.dissect(offer + b"\n").summary()


def test_a_class_used_by_hand_on_bad_bytes_does_not_raise():
    for data in (b"garbage\n", b"[1]\n", b"", b'{"type": 5}'):
        pkt = pl.PotatoDirect(data) if data else pl.PotatoDirect()
        pkt.summary()
        if data:
            assert raw(pkt) == data  # kept as read


def test_summaries():
    s = [pl.dissect(raw(p)).summary() for p, _ in PAIRS]
    assert s[0] == "potato direct A→C id=m1 via A>B (2 hops) 'hi'"
    assert s[1] == 'potato broadcast A→* id=m2 via A (1 hop) {"n": [1, 2.5, null]}'
    assert s[2] == ("potato direct_election_request A→* id=r1 via A (1 hop) next=5f5f5f5f5f5f… "
                    "parent=INITIAL originator=A participants=[B,C] deadline=290ms")
    assert s[3] == ("potato direct_election_response B→A id=r2 via B (1 hop) vote=NO "
                    "(yes 1, no 2) next=5f5f5f5f5f5f…")
    assert s[5].endswith("vote=ABSTAIN (yes 0, no 0) next=5f5f5f5f5f5f…")
    frame = pl.PotatoBroadcast(identifier="0123456789abcdef", sender="A",
                               body={"frame": NEXT, "parent": "INITIAL"})
    assert frame.summary() == ("potato broadcast A→* id=01234567… (0 hops) "
                               "frame=5f5f5f5f5f5f… parent=INITIAL")
    assert pl.PotatoHello(hello="B", refused="own_name").summary() == \
        "potato hello 'B' refused: 'own_name'"
    assert pl.PotatoPing().summary() == "potato ping"
    assert pl.dissect(b"nope\n").summary() == ("potato malformed (not_json: not JSON: Expecting "
                                               "value: line 1 column 1 (char 0)), 4 bytes: 'nope'")


def test_no_port_is_potato_until_one_is_bound():
    data = raw(PAIRS[0][0])
    for sport, dport in ((40000, 3333), (40000, 2323), (40000, 24441)):
        assert not IP(raw(IP() / TCP(sport=sport, dport=dport) / data)).haslayer(pl.PotatoDirect)
    pl.bind_port(24441)
    for sport, dport in ((40000, 24441), (24441, 40000)):
        assert IP(raw(IP() / TCP(sport=sport, dport=dport) / data))[pl.PotatoDirect].to == "C"
    assert pl.describe(Raw(b"x\n")) is None and pl.describe(b"") is None
    assert pl.recognise(b'{"hello": "A"}\n') and not pl.recognise(data)


def test_describe_carries_the_fields():
    row = pl.describe(raw(PAIRS[3][0]))
    assert row == {"protocol": "potato", "type": "direct_election_response", "identifier": "r2",
                   "from": "B", "to": "A", "visited": ["B"], "vote": "NO",
                   "summary": pl.dissect(raw(PAIRS[3][0])).summary()}
    assert pl.client_name(PAIRS[0][0]) == "B" and pl.client_name(pl.PotatoBroadcast(sender="Q")) == "Q"


# ---- the tools ---------------------------------------------------------------------------------

def run(*args, timeout=60):
    return subprocess.run(PELOTARI + list(args), capture_output=True, text=True, timeout=timeout)


def hexdump_bytes(text):
    out = b""
    for line in text.splitlines():
        out += bytes.fromhex(line[6:53])
    return out


@pytest.mark.e2e
def test_craft_shows_exact_bytes_of_potato_messages():
    res = run("craft", "direct", "-F", "from=A", "-F", "to=B", "-F", "identifier=m1",
              "-F", "visited=A,B", "-F", 'body={"k": [1, "x"]}', "--hexdump")
    assert res.returncode == 0, res.stderr
    assert hexdump_bytes(res.stdout) == wire.encode(
        Message("direct", "m1", "A", ("A", "B"), "B", {"k": [1, "x"]})) + b"\n"
    res = run("craft", "potato", "-F", "type=broadcast", "-F", "sender=A", "-F", "identifier=b",
              "-F", "body=hello", "--hexdump")
    assert hexdump_bytes(res.stdout) == wire.encode(Message("broadcast", "b", "A", (), None,
                                                            "hello")) + b"\n"
    assert res.stderr == ""
    res = run("craft", "potato.hello", "-F", "hello=A", "--hexdump")
    assert hexdump_bytes(res.stdout) == b'{"hello": "A"}\n'
    res = run("craft", "direct_election_response", "-F", "from=B", "-F", "to=A",
              "-F", 'body={"parent": "P", "next": "n", "vote": "YES", "yes": 2, "no": 3}')
    assert res.returncode == 0 and 'body      = {"parent": "P"' in res.stdout
    assert "note: a receiver drops this line (bad_field: vote contradicts the counts)" in res.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("args,needle", [
    (["direct", "--send", "127.0.0.1"], "this protocol has no default port: give HOST:PORT"),
    (["direct", "-F", "color=red"], "has no field 'color'"),
])
def test_craft_errors_are_one_line(args, needle):
    res = run("craft", *args)
    assert res.returncode == 2, res
    assert needle in res.stderr and "Traceback" not in res.stderr


def fake_peer(name="B", refuse=None, then=b""):
    """A TCP server on 127.0.0.1 that answers one hello as `name` (or refuses), sends `then`,
    and records every line until the client closes. Returns (port, lines, thread)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(30)
    lines = []

    def serve():
        with srv:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(30)
                buf = b""
                answered = False
                while True:
                    data = conn.recv(65536)
                    if not data:
                        break
                    buf += data
                    *got, buf = buf.split(b"\n")
                    lines.extend(got)
                    if got and not answered:
                        answered = True
                        reply = {"hello": name} if refuse is None else {"hello": name,
                                                                        "refused": refuse}
                        conn.sendall(json.dumps(reply).encode() + b"\n" + then)
                        if refuse:
                            break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return srv.getsockname()[1], lines, thread


@pytest.mark.e2e
def test_craft_send_says_hello_then_sends_the_line_and_pings_while_waiting():
    answer = wire.encode(Message("direct", "a1", "B", (), "A", "welcome")) + b"\n"
    port, lines, thread = fake_peer(then=b'{"ping": 1}\n' + answer + b"junk\n")
    res = run("craft", "direct", "-F", "from=A", "-F", "to=B", "-F", "identifier=m1",
              "-F", "body=hi", "--send", f"127.0.0.1:{port}", "--wait", "1", "-q")
    thread.join(10)
    assert res.returncode == 0, res.stderr
    assert lines[0] == b'{"hello": "A"}'
    assert lines[1] == wire.encode(Message("direct", "m1", "A", (), "B", "hi"))
    assert set(lines[2:]) == {b'{"ping": 1}'} and len(lines[2:]) >= 2  # we stayed alive
    assert f"127.0.0.1:{port} is 'B'; we are 'A'" in res.stderr
    answers = [line.split(": ", 1)[1] for line in res.stdout.splitlines()
               if line.startswith("answer from")]
    assert answers == ["potato direct B→A id=a1 (0 hops) 'welcome'",
                       "potato malformed (not_json: not JSON: Expecting value: line 1 column 1 "
                       "(char 0)), 4 bytes: 'junk'"]
    assert f"2 lines and 1 ping from 127.0.0.1:{port} in 1s" in res.stderr


@pytest.mark.e2e
def test_craft_send_as_a_relay_and_a_refusal():
    port, lines, thread = fake_peer()
    res = run("craft", "broadcast", "-F", "from=A", "-F", "visited=A,R", "--send",
              f"127.0.0.1:{port}", "-q")
    thread.join(10)
    assert res.returncode == 0 and lines[0] == b'{"hello": "R"}'  # the last relay says hello
    port, lines, thread = fake_peer(refuse="duplicate")
    res = run("craft", "broadcast", "--name", "X", "--send", f"127.0.0.1:{port}", "-q")
    thread.join(10)
    assert res.returncode == 1 and lines == [b'{"hello": "X"}']
    assert res.stderr.strip().splitlines()[-1] == (
        f"Error: 127.0.0.1:{port} (B) refused 'X': duplicate")


class Node:
    """A `pelotari potato node --transport tcp --json` process."""

    def __init__(self, name, host):
        self.proc = subprocess.Popen(PELOTARI + ["potato", "node", "--name", name, "--listen",
                                                 f"{host}:0", "--transport", "tcp", "--json"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.events = queue.Queue()
        threading.Thread(target=lambda: [self.events.put(json.loads(line))
                                         for line in self.proc.stdout], daemon=True).start()
        self.port = self.wait("listening")["port"]

    def wait(self, event, timeout=15.0, **fields):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                e = self.events.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            if e["event"] == event and all(e.get(k) == v for k, v in fields.items()):
                return e
        raise AssertionError(f"no {event} {fields} within {timeout}s")

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.proc.wait(10)


@pytest.fixture
def node():
    started = []

    def make(name, host="127.0.0.1"):
        started.append(Node(name, host))
        return started[-1]

    yield make
    for n in started:
        n.stop()


@pytest.mark.e2e
def test_craft_send_to_a_real_potato_node(node):
    b = node("B", "127.0.0.61")
    res = run("craft", "direct", "-F", "from=A", "-F", "to=B", "-F", "identifier=m-77",
              "-F", 'body={"x": 1}', "--send", f"127.0.0.61:{b.port}", "-q")
    assert res.returncode == 0, res.stderr
    got = b.wait("message", identifier="m-77")
    assert (got["kind"], got["sender"], got["body"], got["hops"]) == ("direct", "A", {"x": 1}, 1)
    b.wait("peer_down", peer="A")
    # An election request: the node's answer (its vote) comes back and is dissected.
    res = run("craft", "direct_election_request", "-F", "from=A", "-F",
              'body={"parent": "INITIAL", "next": "n1", "originator": "A", '
              '"direct_participants": ["B"]}', "--send", f"127.0.0.61:{b.port}", "--wait", "1.5",
              "-q")
    assert res.returncode == 0, res.stderr
    assert b.wait("vote", originator="A")["vote"] == "YES"
    answers = [line.split(": ", 1)[1] for line in res.stdout.splitlines()
               if line.startswith("answer from")]
    assert len(answers) == 1 and answers[0].startswith("potato direct_election_response B→A")
    assert answers[0].endswith("vote=YES (yes 1, no 0) next=n1")
    res = run("craft", "hello", "-F", "hello=B", "--send", f"127.0.0.61:{b.port}")
    assert res.returncode == 1 and "refused 'B': own_name" in res.stderr


def seg(payload, sport, dport, seq, src="127.0.0.1", dst="127.0.0.2", flags="PA"):
    return Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, seq=seq,
                                                flags=flags) / payload


def make_pcap(path):
    """Two connections: to a named port (34440) and to one nobody names (41000) but that starts
    with a hello; and a third on 42000 without a hello."""
    direct = raw(PAIRS[0][0])
    request = raw(PAIRS[2][0])
    response = raw(PAIRS[3][0])
    big = wire.encode(Message("broadcast", "big", "A", ("A",), None, "z" * 3000)) + b"\n"
    back = dict(src="127.0.0.2", dst="127.0.0.1")
    packets = [
        seg(b"", 50000, 34440, 100, flags="S"),
        seg(b'{"hello": "A"}\n', 50000, 34440, 101),
        seg(b'{"hello": "B"}\n', 34440, 50000, 900, **back),
        seg(direct + b'{"ping": 1}\n', 50000, 34440, 116),
        seg(big[:1000], 50000, 34440, 116 + len(direct) + 12),           # a line over 3 segments
        seg(b"", 34440, 50000, 915, flags="A", **back),
        seg(big[1000:2000], 50000, 34440, 116 + len(direct) + 12 + 1000),
        seg(big[2000:] + b"nonsense\n", 50000, 34440, 116 + len(direct) + 12 + 2000),
        seg(b'{"hello": "C"}\n', 50001, 41000, 7),
        seg(b'{"hello": "D"}\n', 41000, 50001, 3, **back),
        seg(request, 50001, 41000, 22),
        seg(response, 41000, 50001, 18, **back),
        seg(direct, 50002, 42000, 1),
    ]
    wrpcap(str(path), packets)
    return big


@pytest.mark.e2e
def test_inspect_shows_potato_lines_one_row_each(tmp_path):
    big = make_pcap(tmp_path / "potato.pcap")
    res = run("inspect", str(tmp_path / "potato.pcap"), "--json", "-p", "potato:34440")
    assert res.returncode == 0, res.stderr
    *rows, summary = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["type"], r["src"], r["dst"], r["length"], r.get("frames"), r.get("continued"))
            for r in rows] == [
        ("HELLO", "127.0.0.1:50000", "127.0.0.2:34440", 15, None, None),
        ("HELLO", "127.0.0.2:34440", "127.0.0.1:50000", 15, None, None),
        ("direct", "127.0.0.1:50000", "127.0.0.2:34440", len(raw(PAIRS[0][0])), 2, None),
        ("PING", "127.0.0.1:50000", "127.0.0.2:34440", 12, 2, None),
        ("PARTIAL", "127.0.0.1:50000", "127.0.0.2:34440", 1000, None, None),
        ("PARTIAL", "127.0.0.1:50000", "127.0.0.2:34440", 2000, None, 1000),
        ("broadcast", "127.0.0.1:50000", "127.0.0.2:34440", len(big), 2, 2000),
        ("MALFORMED", "127.0.0.1:50000", "127.0.0.2:34440", 9, 2, None),
        ("HELLO", "127.0.0.1:50001", "127.0.0.2:41000", 15, None, None),   # by its hello
        ("HELLO", "127.0.0.2:41000", "127.0.0.1:50001", 15, None, None),
        ("direct_election_request", "127.0.0.1:50001", "127.0.0.2:41000",
         len(raw(PAIRS[2][0])), None, None),
        ("direct_election_response", "127.0.0.2:41000", "127.0.0.1:50001",
         len(raw(PAIRS[3][0])), None, None),
    ]
    assert all(r["protocol"] == "potato" for r in rows)
    assert rows[2]["summary"] == "potato direct A→C id=m1 via A>B (2 hops) 'hi'"
    assert rows[2]["visited"] == ["A", "B"] and rows[2]["from"] == "A" and rows[2]["to"] == "C"
    assert rows[6]["summary"].startswith("potato broadcast A→* id=big via A (1 hop) 'zzz")
    assert rows[7]["reason"].startswith("not_json:")
    assert rows[11]["vote"] == "NO" and rows[0]["name"] == "A"
    assert summary["summary"]["packets"] == 12
    assert summary["summary"]["counts"]["HELLO"] == 4
    # Without naming the port, the first connection is still found by its hello.
    res = run("inspect", str(tmp_path / "potato.pcap"), "--json")
    assert len(res.stdout.splitlines()) == 13
    # The connection without a hello, only when its port is named.
    res = run("inspect", str(tmp_path / "potato.pcap"), "--json", "-p", "potato:42000")
    *rows, _ = [json.loads(line) for line in res.stdout.splitlines()]
    assert rows[-1]["type"] == "direct" and rows[-1]["dst"] == "127.0.0.2:42000"
    text = run("inspect", str(tmp_path / "potato.pcap"), "-p", "potato:34440")
    assert len(text.stdout.splitlines()) == 12
    assert "potato direct_election_response B→A" in text.stdout
    assert "12 packets: " in text.stderr and "HELLO 4" in text.stderr


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_inspect_live_on_loopback_sees_a_crafted_message_reach_a_node(node, tmp_path):
    b = node("B", "127.0.0.62")
    out = tmp_path / "live.pcap"
    cap = subprocess.Popen(PELOTARI + ["inspect", "-i", "lo", "-f",
                                       f"tcp port {b.port} and inbound", "-p",
                                       f"potato:{b.port}", "--json", "-t", "6", "-w", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "capturing on lo" in cap.stderr.readline()
    time.sleep(1.0)
    res = run("craft", "broadcast", "-F", "from=A", "-F", "identifier=live-1", "-F", "body=hey",
              "--send", f"127.0.0.62:{b.port}", "-q")
    assert res.returncode == 0, res.stderr
    b.wait("message", identifier="live-1")
    stdout, _ = cap.communicate(timeout=30)
    *rows, summary = [json.loads(line) for line in stdout.splitlines()]
    kinds = [(r["type"], r["dst"].endswith(f":{b.port}")) for r in rows]
    assert kinds[:3] == [("HELLO", True), ("HELLO", False), ("broadcast", True)]
    assert rows[2]["identifier"] == "live-1" and rows[2]["summary"].endswith("(0 hops) 'hey'")
    read = run("inspect", str(out), "--json", "-p", f"potato:{b.port}")
    assert [json.loads(line).get("type") for line in read.stdout.splitlines()][:3] == [
        "HELLO", "HELLO", "broadcast"]
