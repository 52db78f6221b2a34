"""The backbone cluster's scapy layer (UDP 2325): exact bytes both ways against the core's own
encoder, keyed and not, TABLE's variable length, and what `pelotari inspect` shows."""
import pytest
from scapy.all import IP, UDP, raw

from pelotari.fyrehose import cluster as cl
from pelotari.layers import cluster as layer

KEY = b"k" * 32


@pytest.mark.parametrize("kind,values", [
    (cl.LEASE, (1795000000000, 4, 99, 90)), (cl.LEASE_OK, (1795000000000, 4, 1795000000000, 88)),
    (cl.RESERVE, (7, 5000)), (cl.STALE, (9,)), (cl.GRANT, (7, 5000, 4990, 1)),
    (cl.TABLE, (7, 1 << 16 | 9, 8, 1000, 2 << 16 | 10, 0, 500))])
@pytest.mark.parametrize("key", [None, KEY])
def test_every_type_builds_and_dissects_as_the_core_encodes_it(kind, values, key):
    wire = cl.encode(kind, b"prod#0a1b2c3d", 7, *values, key=key)
    pkt = layer.Cluster(wire)
    assert type(pkt) is layer.FyrehoseCluster
    assert (pkt.type, pkt.cname, pkt.incarnation, tuple(pkt.values)) == \
        (kind, b"prod#0a1b2c3d", 7, values)
    assert pkt.tag == (wire[-cl.TAG_SIZE:] if key else b"")
    built = layer.FyrehoseCluster(type=kind, cname=b"prod#0a1b2c3d", incarnation=7,
                                  values=list(values), tag=pkt.tag)
    assert raw(built) == wire == raw(pkt)


def test_on_the_cluster_port_in_a_capture_and_in_inspect():
    wire = cl.encode(cl.TABLE, b"x", 1, 5, 1 << 16 | 9, 8, 1000, key=KEY)
    frame = IP(raw(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=2325, dport=2325) / wire))
    row = layer.describe(frame[layer.FyrehoseCluster])
    assert row == {"protocol": "cluster", "type": "TABLE",
                   "summary": "cluster TABLE x epoch=5 entries=1 tagged"}


@pytest.mark.parametrize("garbage", [b"", b"\x01", b"\x63" + bytes(30), b"\x01\x01x" + bytes(7),
                                     cl.encode(cl.LEASE, b"x", 1, 1, 2, 3, 4) + b"\x00"])
def test_what_is_no_cluster_datagram_is_unknown(garbage):
    pkt = layer.Cluster(garbage)
    assert type(pkt) is layer.FyrehoseClusterUnknown
    assert layer.describe(pkt)["type"] == "UNKNOWN"


@pytest.mark.parametrize("key", [None, KEY])
def test_discovery_asks_and_answers_dissect_and_build_exactly(key):
    from pelotari.fyrehose import discover

    ask = discover.encode_ask(b"t" * 16, b"prod")
    pkt = layer.Cluster(ask)
    assert type(pkt) is layer.FyrehoseClusterDiscovery and raw(pkt) == ask
    assert (pkt.kind, pkt.cname[:pkt.nlen], pkt.token) == (discover.ASK, b"prod", b"t" * 16)
    answer = discover.encode(discover.Announcement(
        kind=discover.ANSWER, name=b"prod", host="10.0.0.1", data_port=2323, bully_port=2324,
        cluster_port=2325, size=3, incarnation=9, token=b"t" * 16,
        members=("10.0.0.1", "10.0.0.2", "10.0.0.3")), key=key)
    pkt = layer.Cluster(answer)
    assert raw(pkt) == answer and pkt.host == "10.0.0.1" and pkt.members[:3] == [
        "10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert layer.describe(pkt) == {
        "protocol": "cluster", "type": "ANSWER",
        "summary": "cluster discovery ANSWER prod from 10.0.0.1 members=10.0.0.1,10.0.0.2,10.0.0.3"}
    assert raw(layer.FyrehoseClusterDiscovery(
        kind=pkt.kind, flags=pkt.flags, size=3, count=pkt.count, nlen=4, host="10.0.0.1",
        incarnation=9, token=b"t" * 16, members=pkt.members, cname=pkt.cname,
        tag=pkt.tag)) == answer
