# SPDX-License-Identifier: MIT
# This file is part of pelotari.
# scapy.contrib.description = prototari LAN discovery, heartbeat and delivery
# scapy.contrib.status = loads

"""
prototari: LAN peer discovery by UDP broadcast (pelotari, docs/protocols/prototari.md).

Control messages are exact ASCII strings (`pelotari?`, `aupa!`, `dale!`, `hor?`, `hemen nago!`);
data is the 4-byte magic `\\x01PTD` followed by the application's bytes. Anything else on the
prototari ports dissects as PrototariUnknown.
"""

from scapy.fields import StrField, StrFixedLenField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from pelotari.prototari.wire import (BROADCAST_PORT, CONFIRM, DATA_MAGIC, DISCOVER, MESSAGES, PING,
                                     PONG, RESPOND, UNICAST_PORT)

DEFAULT_PORTS = (UNICAST_PORT, BROADCAST_PORT)
DEFAULT_PORT = None  # two ports (discovery, the rest): craft's --send needs HOST:PORT
NAMES = MESSAGES


class _Prototari(Packet):
    def extract_padding(self, s):
        return b"", s


def _control(message: bytes):
    """The Packet class of one control message of the wire table."""
    class Control(_Prototari):
        name = f"prototari {NAMES[message]}"
        fields_desc = [StrFixedLenField("message", message, len(message))]

        def mysummary(self):
            return f"prototari {NAMES[message]} ({message.decode()})"

    name = "".join(part.capitalize() for part in NAMES[message].split("-"))
    Control.__name__ = Control.__qualname__ = f"Prototari{name}"  # e.g. PrototariHeartbeatAnswer
    return Control


CONTROL_CLASSES = {message: _control(message) for message in NAMES}
PrototariDiscover = CONTROL_CLASSES[DISCOVER]
PrototariRespond = CONTROL_CLASSES[RESPOND]
PrototariConfirm = CONTROL_CLASSES[CONFIRM]
PrototariHeartbeat = CONTROL_CLASSES[PING]
PrototariHeartbeatAnswer = CONTROL_CLASSES[PONG]


class PrototariData(_Prototari):
    """Application data for a registered peer."""

    name = "prototari DATA"
    fields_desc = [StrFixedLenField("magic", DATA_MAGIC, len(DATA_MAGIC)), StrField("data", b"")]

    def mysummary(self):
        return f"prototari DATA len={len(self.data)}"


class PrototariUnknown(Packet):
    """A datagram on a prototari port that is none of its messages."""

    name = "prototari unknown"
    fields_desc = [StrField("load", b"")]

    def mysummary(self):
        return f"prototari unknown ({len(self.load)} bytes)"


CRAFT = {**{NAMES[m].lower(): cls for m, cls in CONTROL_CLASSES.items()}, "data": PrototariData}


class Prototari(Packet):
    """Dispatches a datagram to its message class."""

    name = "prototari"

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):
        if _pkt is None:
            return cls
        if _pkt.startswith(DATA_MAGIC):
            return PrototariData
        return CONTROL_CLASSES.get(bytes(_pkt), PrototariUnknown)


dissect = Prototari  # a datagram of this protocol -> its packet


def describe(layer):
    """What `pelotari inspect` shows of one dissected UDP payload, or None if it is not ours."""
    if isinstance(layer, PrototariUnknown):
        return {"protocol": "prototari", "type": "UNKNOWN", "summary": layer.summary()}
    if isinstance(layer, PrototariData):
        return {"protocol": "prototari", "type": "DATA", "summary": layer.summary()}
    for message, cls in CONTROL_CLASSES.items():
        if isinstance(layer, cls):
            return {"protocol": "prototari", "type": NAMES[message], "summary": layer.summary()}
    return None


def bind_port(port: int) -> None:
    """Dissect UDP datagrams to or from `port` as prototari."""
    bind_layers(UDP, Prototari, dport=port)
    bind_layers(UDP, Prototari, sport=port)


for _port in DEFAULT_PORTS:
    bind_port(_port)
