"""`pelotari craft` and `pelotari inspect` as a user runs them, against real sockets and files."""
import json
import os
import subprocess
import time

import pytest

from fastpath import refcodec as wire
from pelotari.fyrehose import Client, Message
from pelotari.fyrehose.codec import NOSUBSCRIBE

from conftest import PELOTARI

pytestmark = pytest.mark.e2e


def run(*args, timeout=60):
    return subprocess.run(PELOTARI + list(args), capture_output=True, text=True, timeout=timeout)


def test_craft_keepalive_prints_the_backbones_ack(backbone):
    res = run("craft", "keepalive", "--flags", "NOJOURNAL", "--token", "hex:" + "ab" * 16,
              "--send", f"127.0.0.1:{backbone.address[1]}", "--wait", "1")
    assert res.returncode == 0, res.stderr
    assert "flags     = NOJOURNAL" in res.stdout
    assert f"answer from 127.0.0.1:{backbone.address[1]}: fyrehose KEEPALIVE-ACK token={'ab' * 16}" in res.stdout
    assert backbone.stats()["keepalives"] == 1


def test_crafted_push_is_delivered_and_a_lying_length_is_dropped(backbone):
    with Client(f"127.0.0.1:{backbone.address[1]}") as sub:
        assert sub.wait_connected(3)
        assert run("craft", "push", "--data", "crafted!", "-q", "--send",
                   f"127.0.0.1:{backbone.address[1]}").returncode == 0
        assert sub.receive(3) == Message(1000, b"crafted!")
        assert run("craft", "push", "--data", "abc", "--length", "99", "-q", "--send",
                   f"127.0.0.1:{backbone.address[1]}").returncode == 0
        time.sleep(0.3)
    assert backbone.stats()["drops"]["length_mismatch"] == 1


def test_craft_shows_exact_bytes():
    res = run("craft", "request", "--addr", "10.0.0.1", "--port", "2323", "--from-seq", "5",
              "--to-seq", "9", "--hexdump")
    assert res.returncode == 0
    want = wire.encode_request("10.0.0.1", 2323, 5, 9)
    assert res.stdout.splitlines()[0].startswith("0000  " + " ".join(f"{b:02X}" for b in want[:16]))


@pytest.mark.parametrize("args,needle", [
    (["keepalive", "--token", "short"], "TOKEN must be 16 bytes"),
    (["keepalive", "--flags", "BOGUS"], "unknown flag 'BOGUS'"),
    (["request", "--addr", "nowhere"], "not an IPv4 address"),
    (["explode"], "unknown type 'explode'; choose from deliver, push"),
    (["keepalive", "--sequence", "5"], "FyrehoseKeepalive has no field 'sequence'"),
    (["push", "-F", "nonsense"], "'nonsense' is not NAME=VALUE"),
    (["request", "--from-seq", "ten"], "from_seq: 'ten' is not a number"),
])
def test_craft_errors_are_one_line(args, needle):
    res = run("craft", *args)
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr


def test_craft_sets_any_field_by_name_and_lists_the_types():
    res = run("craft", "forward", "-F", "addr=10.1.2.3", "-F", "port=9", "-F", "from_seq=0x10",
              "-F", "to_seq=20", "--hexdump")
    want = wire.encode_forward("10.1.2.3", 9, 16, 20)
    assert res.returncode == 0 and res.stdout.splitlines()[0].startswith(
        "0000  " + " ".join(f"{b:02X}" for b in want[:16]))
    listing = run("craft", "--list").stdout
    assert "keepalive-ack" in listing and "fyrehose.keepalive" in listing
    assert "type, addr, port, flags, token" in listing


def make_pcap(path):
    from scapy.all import IP, UDP, wrpcap

    packets = [IP(src="127.0.0.1", dst="127.0.0.2") / UDP(sport=2323, dport=40000) /
               wire.encode_deliver(s, b"m%d" % s) for s in (10, 11, 13, 16)]
    packets.append(IP() / UDP(sport=40000, dport=2323) / wire.encode_request("", 0, 12, 12))
    packets.append(IP() / UDP(sport=40000, dport=2323) / b"\x99bad")
    packets.append(IP() / UDP(sport=40000, dport=53) / b"not fyrehose")
    wrpcap(str(path), packets)
    return packets


def test_inspect_pcap_json_counts_and_gaps(tmp_path):
    make_pcap(tmp_path / "in.pcap")
    res = run("inspect", str(tmp_path / "in.pcap"), "--json", "--follow-gaps")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    *packets, summary = rows
    assert [(r["type"], r.get("sequence")) for r in packets] == [
        ("DELIVER", 10), ("DELIVER", 11), ("DELIVER", 13), ("DELIVER", 16), ("REQUEST", None),
        ("MALFORMED", None)]
    assert packets[0]["src"] == "127.0.0.1:2323" and packets[0]["dst"] == "127.0.0.2:40000"
    assert packets[4]["from_seq"] == 12 and "UnknownPacketType" in packets[5]["reason"]
    assert summary == {"summary": {"counts": {"DELIVER": 4, "REQUEST": 1, "MALFORMED": 1},
                                   "packets": 6, "gaps": [{"src": "127.0.0.1:2323",
                                                           "dst": "127.0.0.2:40000",
                                                           "missing": [[12, 12], [14, 15]]}]}}


def test_inspect_text_lines_and_the_pcap_it_writes_reads_back_identical(tmp_path):
    from scapy.all import rdpcap

    packets = make_pcap(tmp_path / "in.pcap")
    res = run("inspect", str(tmp_path / "in.pcap"), "--follow-gaps", "-w", str(tmp_path / "out.pcap"))
    assert res.returncode == 0
    assert len(res.stdout.splitlines()) == 6
    assert "stream 127.0.0.1:2323 > 127.0.0.2:40000: missing 12, 14..15" in res.stderr
    assert "6 packets: DELIVER 4, MALFORMED 1, REQUEST 1" in res.stderr
    assert [bytes(p) for p in rdpcap(str(tmp_path / "out.pcap"))] == [bytes(p) for p in packets[:6]]
    again = run("inspect", str(tmp_path / "out.pcap"))
    assert again.stdout == res.stdout


def test_craft_writes_what_it_sends_as_a_capture_that_inspect_reads(tmp_path):
    """No root, no live capture: `craft -w FILE` (the README's potato example inspects one)."""
    path = tmp_path / "push.pcap"
    res = run("craft", "push", "--data", "hi", "-q", "-w", str(path))
    assert res.returncode == 0 and res.stderr == f"wrote 1 packet to {path} (to 127.0.0.1:2323/udp)\n"
    res = run("inspect", str(path))
    assert res.returncode == 0 and "fyrehose PUSH len=2" in res.stdout
    assert res.stderr == "1 packet: PUSH 1\n"
    res = run("craft", "NodeRequest", "-F", "id=2", "-q", "-w", str(tmp_path / "bully.pcap"),
              "--send", "127.0.0.1:1")
    assert res.returncode == 1 and "(to 127.0.0.1:1/tcp)" in res.stderr
    res = run("inspect", str(tmp_path / "bully.pcap"), "-p", "bully:1")
    assert "> 127.0.0.1:1 " in res.stdout and res.stderr == "1 packet: NodeRequest 1\n"
    res = run("craft", "direct", "-F", "from=A", "-F", "to=B", "-w", str(tmp_path / "m.pcap"))
    assert res.returncode == 2 and "no default port: give HOST:PORT" in res.stderr
    assert not (tmp_path / "m.pcap").exists()


def test_inspect_needs_exactly_one_source():
    res = run("inspect")
    assert res.returncode == 2 and "give a PCAP file or --interface" in res.stderr


@pytest.mark.parametrize("content", [b"garbage\n", b"", b"\xd4\xc3\xb2\xa1\x02\x00"])
def test_inspect_of_a_file_that_is_no_capture_is_one_line(tmp_path, content):
    # A file that is not a pcap (or is cut short in its header) ended in a scapy traceback.
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    res = run("inspect", str(path))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("Error: ") and len(res.stderr.splitlines()) == 1, res.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_live_capture_on_loopback_decodes_a_pub_sub_session(backbone_factory, tmp_path):
    bb = backbone_factory(first_sequence=500)
    port = bb.address[1]
    out = tmp_path / "live.pcap"
    cap = subprocess.Popen(PELOTARI + ["inspect", "-i", "lo", "-f", f"udp port {port} and inbound",
                                       "-p", str(port), "--json", "-t", "6",
                                       "-w", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "capturing on lo" in cap.stderr.readline()
    time.sleep(1.0)  # the capture socket is open once that line is printed; give it a margin
    with Client(f"127.0.0.1:{port}", keepalive_interval=1.0) as sub:
        assert sub.wait_connected(3)
        with Client(f"127.0.0.1:{port}", flags=NOSUBSCRIBE, keepalive_interval=1.0) as pub:
            assert pub.wait_connected(3)
            for i in range(2):
                pub.publish(b"live %d" % i)
            assert [sub.receive(3).sequence for _ in range(2)] == [500, 501]
    stdout, stderr = cap.communicate(timeout=30)
    *seen, summary = [json.loads(line) for line in stdout.splitlines()]
    types = [r["type"] for r in seen]
    # 2 KEEPALIVEs and ACKs, 2 PUSHes, 2 DELIVERs to the subscriber: each seen once (inbound)
    assert types.count("PUSH") == 2 and types.count("DELIVER") == 2, types
    assert sorted(r["sequence"] for r in seen if r["type"] == "DELIVER") == [500, 501]
    assert types.count("KEEPALIVE-ACK") >= 2
    from scapy.all import rdpcap

    # A GSO send (two DELIVERs in one super-datagram on lo) is one captured packet, two rows.
    captured = len([r for r in seen if not r.get("gso")]) + len({r["time"] for r in seen if r.get("gso")})
    assert summary["summary"]["packets"] == len(seen) and len(rdpcap(str(out))) == captured


def test_scapy_shell_has_the_layers_loaded():
    import pathlib
    import sys

    shell = pathlib.Path(__file__).resolve().parent.parent / "tools" / "scapy-shell"
    res = subprocess.run([sys.executable, str(shell)], input='print("HEX", raw(FyrehoseKeepaliveAck'
                         '(token=b"x" * 16)).hex())\n', capture_output=True, text=True, timeout=60)
    assert "HEX 20" + "78" * 16 in res.stdout


def test_scapy_crafted_request_is_forwarded_to_a_journaling_client(backbone, raw_peer):
    from scapy.all import raw

    from pelotari.layers.fyrehose import Fyrehose, FyrehoseForward, FyrehoseKeepalive, FyrehoseRequest

    requester, journaling = raw_peer(), raw_peer()
    for peer in (requester, journaling):
        peer.send(raw(FyrehoseKeepalive(token=b"k" * 16)), backbone.address)
        assert peer.recv()[0][:1] == b"\x20"
    requester.send(raw(FyrehoseRequest(from_seq=7, to_seq=9)), backbone.address)
    forward = Fyrehose(journaling.recv()[0])
    assert isinstance(forward, FyrehoseForward)
    assert (forward.addr, forward.port, forward.from_seq, forward.to_seq) == (
        "127.0.0.1", requester.address[1], 7, 9)


def test_src_without_root_says_so_in_one_line_and_sends_from_an_ordinary_socket(raw_peer):
    from pelotari.craft import sender

    peer, notes = raw_peer(), []
    sock = sender(("127.0.0.5", 4000), peer.address, b"\x20" + b"t" * 16, root=False,
                  note=notes.append)
    data, source = peer.recv()
    assert data == b"\x20" + b"t" * 16 and source == ("127.0.0.1", sock.getsockname()[1])
    assert notes == [
        "--src needs a raw socket, which needs root: sending from an ordinary UDP socket instead"]
    sock.close()


def test_craft_packs_pushes_and_the_backbone_delivers_each(backbone):
    with Client(f"127.0.0.1:{backbone.address[1]}") as sub:
        assert sub.wait_connected(3)
        res = run("craft", "push", "--data", "p!", "--pack", "3", "--hexdump", "--send",
                  f"127.0.0.1:{backbone.address[1]}")
        assert res.returncode == 0, res.stderr
        assert [sub.receive(3) for _ in range(3)] == [Message(1000 + i, b"p!") for i in range(3)]
    assert backbone.stats()["packs_in"] == 1
    res = run("craft", "keepalive", "--pack", "2")
    assert res.returncode == 2 and "only fyrehose DELIVER and PUSH" in res.stderr


def test_inspect_shows_each_frame_of_a_packed_datagram(tmp_path):
    from scapy.all import IP, UDP, wrpcap

    pack = b"".join(wire.encode_deliver(s, b"x" * (s % 3)) for s in (20, 21, 22))
    path = tmp_path / "packed.pcap"
    wrpcap(str(path), [IP(src="127.0.0.1", dst="127.0.0.2") / UDP(sport=2323, dport=40000) / pack])
    res = run("inspect", str(path), "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()][:-1]
    assert [(r["type"], r["sequence"], r["frames"]) for r in rows] == [
        ("DELIVER", 20, 3), ("DELIVER", 21, 3), ("DELIVER", 22, 3)]
    assert not any(r.get("gso") for r in rows)


def test_inspect_reads_a_short_datagram_padded_by_ethernet(tmp_path):
    # A frame is at least 60 bytes: a 17-byte KEEPALIVE-ACK comes with zeros after it.
    from scapy.all import IP, UDP, Ether, Padding, wrpcap

    ack = bytes([0x20]) + b"\xab" * 16
    frame = Ether() / IP(src="127.0.0.1", dst="127.0.0.2") / UDP(sport=2323, dport=40000) / ack
    frame = Ether(bytes(frame) + bytes(Padding(load=b"\x00" * (60 - len(bytes(frame))))))
    assert len(bytes(frame)) == 60
    path = tmp_path / "short.pcap"
    wrpcap(str(path), [frame])
    res = run("inspect", str(path), "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()][:-1]
    assert [r["type"] for r in rows] == ["KEEPALIVE-ACK"]


@pytest.mark.parametrize("content, needle", [
    (b"", "an empty file, not a capture"),
    (b"root:x:0:0:root:/root:/bin/bash\n", "Not a supported capture file"),
])
def test_inspect_of_an_empty_or_non_capture_file_is_one_line(tmp_path, content, needle):
    path = tmp_path / "in.pcap"
    path.write_bytes(content)
    res = run("inspect", str(path))
    assert res.returncode == 1 and res.stderr == f"Error: {path}: {needle}\n", res.stderr


def test_craft_without_a_type_says_what_to_give():
    res = run("craft")
    assert res.returncode == 2 and "give a packet TYPE (pelotari craft --list shows them)" in res.stderr
