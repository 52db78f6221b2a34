"""pelotari.inspect: which protocol reads a captured packet, its rows, and the DELIVER gaps."""
import pytest

from fastpath import refcodec as wire
from pelotari.inspect import (GapFollower, Inspection, PortSpecError, bind_ports, capture_filter,
                              rows)

TOP = (1 << 48) - 1  # the highest SEQUENCE: 0 follows it


def delivers(*seqs, src="127.0.0.1:2323", dst="127.0.0.2:40000"):
    return [{"type": "DELIVER", "sequence": s, "src": src, "dst": dst} for s in seqs]


def follow(rows_):
    follower = GapFollower()
    for row in rows_:
        follower.add(row)
    return follower.gaps()


def test_gaps_between_the_lowest_and_highest_sequence_per_stream():
    got = follow(delivers(10, 11, 13, 16) + delivers(5, 7, dst="127.0.0.3:1")
                 + [{"type": "REQUEST", "from_seq": 1, "to_seq": 2, "src": "a", "dst": "b"}])
    assert got == {("127.0.0.1:2323", "127.0.0.2:40000"): [(12, 12), (14, 15)],
                   ("127.0.0.1:2323", "127.0.0.3:1"): [(6, 6)]}


def test_gaps_follow_the_48_bit_wrap():
    # 2**48 - 1 is followed by 0: a stream running across the wrap misses nothing.
    assert follow(delivers(TOP - 1, TOP, 0, 1)) == {("127.0.0.1:2323", "127.0.0.2:40000"): []}
    # Reordered across the wrap: 0 before TOP still counts as after it.
    assert follow(delivers(TOP - 1, 0, TOP, 2))[("127.0.0.1:2323", "127.0.0.2:40000")] == [(1, 1)]
    # Missing numbers on both sides of the wrap: two ascending ranges, in stream order.
    assert follow(delivers(TOP - 3, 2))[("127.0.0.1:2323", "127.0.0.2:40000")] == [
        (TOP - 2, TOP), (0, 1)]
    # Less than half the range ahead is after; half or more is before (the journal's rule).
    assert follow(delivers(0, (1 << 47) - 1))[("127.0.0.1:2323", "127.0.0.2:40000")] == [
        (1, (1 << 47) - 2)]
    assert follow(delivers(0, 1 << 47))[("127.0.0.1:2323", "127.0.0.2:40000")] == [
        ((1 << 47) + 1, TOP)]


class FakeLayer:
    DEFAULT_PORTS = (2323,)

    def __init__(self):
        self.bound = []

    def bind_port(self, port):
        self.bound.append(port)


def test_bind_ports_adds_named_and_unnamed_ports_and_refuses_bad_specs():
    modules = {"fyrehose": FakeLayer(), "bully": FakeLayer()}
    modules["bully"].TRANSPORT = "tcp"
    modules["bully"].DEFAULT_PORTS = (3333,)
    bound = bind_ports(modules, ["bully:3334", "9000"])
    assert bound == {"fyrehose": {2323, 9000}, "bully": {3333, 3334, 9000}}
    assert modules["bully"].bound == [3334, 9000] and modules["fyrehose"].bound == [9000]
    assert capture_filter(modules, bound) == ("udp port 2323 or udp port 9000 or tcp port 3333 or "
                                              "tcp port 3334 or tcp port 9000")
    for spec, needle in (("nope:1", "unknown protocol 'nope'"), ("bully:x", "is not PORT")):
        with pytest.raises(PortSpecError, match=needle):
            bind_ports(modules, [spec])
    assert issubclass(PortSpecError, ValueError)


def test_an_inspection_reads_rows_counts_them_and_follows_gaps():
    pytest.importorskip("scapy")
    from scapy.layers.inet import IP, UDP

    from pelotari import layers as registry

    modules = registry.load()
    inspection = Inspection(modules, bind_ports(modules, []))
    def out(data):
        return IP(src="127.0.0.1", dst="127.0.0.2") / UDP(sport=2323, dport=40000) / data

    packed = b"".join(wire.encode_deliver(s, b"x") for s in (TOP, 0))
    got = [inspection.read(p) for p in (out(wire.encode_deliver(TOP - 2, b"a")), out(packed),
                                        out(wire.encode_deliver(2, b"b")),
                                        IP() / UDP(sport=40000, dport=53) / b"not fyrehose",
                                        IP() / UDP(sport=40000, dport=2323) / b"\x99bad")]
    assert [[(r["type"], r.get("sequence"), r.get("frames")) for r in g] for g in got] == [
        [("DELIVER", TOP - 2, None)], [("DELIVER", TOP, 2), ("DELIVER", 0, 2)],
        [("DELIVER", 2, None)], [], [("MALFORMED", None, None)]]
    assert inspection.summary(follow_gaps=True) == {
        "counts": {"DELIVER": 4, "MALFORMED": 1}, "packets": 5,
        "gaps": [{"src": "127.0.0.1:2323", "dst": "127.0.0.2:40000",
                  "missing": [[TOP - 1, TOP - 1], [1, 1]]}]}
    assert rows(IP() / UDP(sport=1, dport=2) / b"x", inspection.ports) == []


def test_inspect_shows_a_row_for_query_and_for_info_with_their_fields():
    pytest.importorskip("scapy")
    from scapy.layers.inet import IP, UDP

    from pelotari import layers as registry

    modules = registry.load()
    inspection = Inspection(modules, bind_ports(modules, []))
    token = bytes(range(16))
    query = IP(src="127.0.0.2", dst="127.0.0.1") / UDP(sport=40000, dport=2323) / \
        wire.encode_query(token)
    info = IP(src="127.0.0.1", dst="127.0.0.2") / UDP(sport=2323, dport=40000) / \
        wire.encode_info(token, 9, "10.0.0.1", 2323, 0x2, [("10.0.0.1", 2323), ("10.0.0.2", 2323)])
    (q,), (i,) = inspection.read(query), inspection.read(info)
    assert (q["type"], q["token"], q["length"], q["src"]) == (
        "QUERY", token.hex(), 64, "127.0.0.2:40000")
    assert (i["type"], i["epoch"], i["active"], i["flags"], i["members"], i["length"]) == (
        "INFO", 9, "10.0.0.1:2323", ["ACTIVE"], ["10.0.0.1:2323", "10.0.0.2:2323"], 64)
    assert "epoch=9" in i["summary"] and "members=10.0.0.1:2323,10.0.0.2:2323" in i["summary"]
    assert inspection.summary()["counts"] == {"QUERY": 1, "INFO": 1}
