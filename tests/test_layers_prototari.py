"""The prototari scapy layer: exact bytes both ways, dispatch, and the tools on real nodes."""
import asyncio
import json
import os
import subprocess
import threading
import time

import pytest
from scapy.all import IP, UDP, raw

from pelotari.layers import prototari as pl
from pelotari.prototari.core import CONFIRM, DATA_MAGIC, DISCOVER, PING, PONG, RESPOND

from conftest import PELOTARI


@pytest.mark.parametrize("cls,wire", [
    (pl.PrototariDiscover, b"pelotari?"), (pl.PrototariRespond, b"aupa!"),
    (pl.PrototariConfirm, b"dale!"), (pl.PrototariHeartbeat, b"hor?"),
    (pl.PrototariHeartbeatAnswer, b"hemen nago!")])
def test_control_messages_build_and_dissect_exactly(cls, wire):
    assert raw(cls()) == wire
    assert type(pl.Prototari(wire)) is cls
    assert wire in {DISCOVER, RESPOND, CONFIRM, PING, PONG}  # the core's own constants


def test_data_frames_and_unknown_datagrams():
    assert raw(pl.PrototariData(data=b"hello")) == DATA_MAGIC + b"hello"
    frame = pl.Prototari(DATA_MAGIC + b"pelotari?")
    assert isinstance(frame, pl.PrototariData) and frame.data == b"pelotari?"
    for junk in (b"pelotari", b"pelotari?\n", b"\x00\x01", b"x" * 2000):
        assert isinstance(pl.Prototari(junk), pl.PrototariUnknown)


def test_bound_to_both_default_ports():
    for sport, dport in ((21450, 40000), (40000, 21451)):
        pkt = IP(raw(IP() / UDP(sport=sport, dport=dport) / b"aupa!"))
        assert pkt.haslayer(pl.PrototariRespond)


def run_node(port, bport):
    """A real prototari node on loopback, in a thread, until the returned event is set."""
    from pelotari.prototari import Config, Node

    stop, ready = threading.Event(), threading.Event()

    async def main():
        node = await Node.start(Config(unicast_port=port, broadcast_port=bport,
                                       broadcast_address="127.255.255.255",
                                       broadcast_interval=100, multi_node=True),
                                host="127.0.0.1")  # several nodes on one address: per port
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await node.close()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    assert ready.wait(5)
    return stop


@pytest.mark.e2e
def test_craft_sends_a_discover_and_shows_the_respond():
    stop = run_node(24650, 24651)
    try:
        res = subprocess.run(PELOTARI + ["craft", "discover", "--send", "127.0.0.1:24651",
                                         "--wait", "1"], capture_output=True, text=True, timeout=60)
    finally:
        stop.set()
    assert res.returncode == 0, res.stderr
    assert "answer from 127.0.0.1:24650: prototari RESPOND (aupa!)" in res.stdout


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_inspect_decodes_a_captured_discovery(tmp_path):
    out = tmp_path / "discovery.pcap"
    cap = subprocess.Popen(PELOTARI + ["inspect", "-i", "lo", "-f", "udp and inbound", "-p", "24750",
                                       "-p", "24751", "-t", "5", "-w", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "capturing on lo" in cap.stderr.readline()
    time.sleep(1.0)
    stops = [run_node(24750, 24751)]
    time.sleep(0.3)
    from pelotari.prototari import Config, Node

    async def second():
        node = await Node.start(Config(unicast_port=24760, broadcast_port=24751,
                                       broadcast_address="127.255.255.255", multi_node=True),
                                host="127.0.0.1")
        event = await node.next_event(3)
        await node.close()
        return event

    joined = asyncio.run(second())
    assert joined is not None
    stdout, _ = cap.communicate(timeout=30)
    for s in stops:
        s.set()
    read = subprocess.run(PELOTARI + ["inspect", str(out), "--json", "-p", "prototari:24750",
                                      "-p", "prototari:24751", "-p", "24760"],
                          capture_output=True, text=True, timeout=60)
    *rows, summary = [json.loads(line) for line in read.stdout.splitlines()]
    exchange = [(r["protocol"], r["type"], r["src"], r["dst"]) for r in rows]
    # Both nodes broadcast when they start; the second one's broadcast is answered.
    assert exchange == [
        ("prototari", "DISCOVER", "127.0.0.1:24750", "127.255.255.255:24751"),
        ("prototari", "DISCOVER", "127.0.0.1:24760", "127.255.255.255:24751"),
        ("prototari", "RESPOND", "127.0.0.1:24750", "127.0.0.1:24760"),
        ("prototari", "CONFIRM", "127.0.0.1:24760", "127.0.0.1:24750"),
    ]
    assert summary["summary"]["counts"] == {"DISCOVER": 2, "RESPOND": 1, "CONFIRM": 1}


def test_layer_messages_names_and_ports_come_from_the_wire_table():
    from pelotari.prototari import wire
    assert pl.DEFAULT_PORTS == (wire.UNICAST_PORT, wire.BROADCAST_PORT)
    assert set(pl.CONTROL_CLASSES) == set(wire.MESSAGES) == wire.CONTROL
    assert set(pl.CRAFT) == {name.lower() for name in wire.MESSAGES.values()} | {"data"}
    for message, name in wire.MESSAGES.items():
        cls = pl.CRAFT[name.lower()]
        assert raw(cls()) == message and cls().name == f"prototari {name}"
        assert type(pl.Prototari(message)) is cls
        assert pl.describe(pl.Prototari(message))["type"] == name
    assert raw(pl.PrototariData(data=b"x")) == wire.DATA_MAGIC + b"x"
