"""The scapy layers, as `pelotari inspect` runs them on a capture."""
from __future__ import annotations

from bench.fuzz.common import Target, check
from pelotari import layers
from pelotari.inspect import Inspection, bind_ports

MODULES = layers.load()
NAMES = sorted(MODULES)
BOUND = bind_ports(MODULES, ["potato:4000"])
PORTS = {name: sorted(BOUND[name])[0] for name in NAMES}


def seeds():
    """One crafted packet per protocol (the exact-bytes vectors of tests/test_layers_*.py)."""
    from pelotari.bully import wire as bully
    from pelotari.fyrehose import codec
    from pelotari.prototari import wire as prototari
    from pelotari.swarm import wire as swarm

    payloads = {
        "bully": bully.encode(bully.entry("127.0.0.2", 3334)) + bully.encode(
            bully.Message(8, bully.Peer("127.0.0.1", 3333, 25), data=b"hi")),
        "fyrehose": b"".join(codec.encode_deliver(s, b"x") for s in (1, 2)),
        "potato": b'{"type":"broadcast","identifier":"1","from":"a","visited":[]}\n',
        "prototari": prototari.DISCOVER,
        "swarm": swarm.Keyring([bytes(32)]).sign(swarm.pack(swarm.ping(7)), 1.8e9),
    }
    return [bytes([NAMES.index(n)]) + p for n, p in payloads.items()]


def layers_input(data: bytes) -> None:
    """A payload of any protocol on its port (the first byte picks which) dissects without an
    exception, its layer builds back to the same bytes, and `pelotari inspect`'s reader turns
    the packet, rebuilt from its bytes, into rows that each name a protocol and a type."""
    from scapy.layers.inet import IP, TCP, UDP

    if not data:
        return
    name, payload = NAMES[data[0] % len(NAMES)], data[1:]
    module = MODULES[name]
    dissected = module.dissect(payload)
    check(bytes(dissected) == payload, f"{name}: the dissected layer builds other bytes")
    transport = TCP if getattr(module, "TRANSPORT", "udp") == "tcp" else UDP
    pkt = IP(bytes(IP(src="127.0.0.1", dst="127.0.0.2") /
                   transport(sport=40000, dport=PORTS[name]) / payload))
    for row in Inspection(MODULES, BOUND).read(pkt):
        check(isinstance(row.get("protocol"), str) and isinstance(row.get("type"), str),
              f"{name}: a row without protocol or type: {row}")


TARGETS = [Target("scapy-layers", layers_input, seeds, layers_input.__doc__,
                  tuple(layers.LAYERS.values()) + ("pelotari.inspect",))]
