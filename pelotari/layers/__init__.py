"""Scapy layers for pelotari's protocols, in scapy's contrib style.

Each protocol is one module here plus one line in LAYERS; `load()` imports them (scapy's import
is slow, so nothing imports this package until a scapy tool runs). A layer module provides its
Packet classes, `CRAFT` (type name -> Packet class, for `pelotari craft`), `dissect(bytes)`,
`DEFAULT_PORTS`, `bind_port(port)` and `describe(layer) -> dict | None` (what
`pelotari inspect` prints of a dissected payload: protocol, type, summary and any sequence
fields). Optional: `TRANSPORT` ("udp" unless it says "tcp": where inspect reads the protocol and
how craft sends it), `DEFAULT_PORT` (craft's port when --send names only a host; None: it
must name one) and `split_frames(payload)` (the frames of a payload that holds several, one
inspect row each), `ALIASES` (craft -F names for fields scapy cannot have, e.g. potato's
`from`). A TCP protocol of newline-delimited lines says `FRAMING = "lines"` and provides
`problem(line)`, `recognise(payload)` (inspect takes a connection that starts so as this
protocol's on any port), `unfinished(payload)` (a last line to join to the next segment) and
what craft's handshake needs (potato: `hello_line`, `client_name`, PotatoHello, PING).
"""
import importlib
from typing import Dict, List

# protocol name -> module defining its layers, a `bind_port(port)` and DEFAULT_PORTS
LAYERS: Dict[str, str] = {
    "fyrehose": "pelotari.layers.fyrehose",
    "prototari": "pelotari.layers.prototari",
    "bully": "pelotari.layers.bully",
    "potato": "pelotari.layers.potato",
    "swarm": "pelotari.layers.swarm",
    "cluster": "pelotari.layers.cluster",
}


def craftable() -> Dict[str, type]:
    """Every packet type `pelotari craft` can build, by name (a name two protocols share is
    written PROTOCOL.TYPE)."""
    out = {}
    for proto, module in load().items():
        for name, cls in module.CRAFT.items():
            out[name if name not in out else f"{proto}.{name}"] = cls
            out[f"{proto}.{name}"] = cls
    return out


def load(names: List[str] = None) -> Dict[str, object]:
    """Import the layer modules (all by default) and return them by protocol name."""
    return {name: importlib.import_module(LAYERS[name]) for name in (names or LAYERS)}
