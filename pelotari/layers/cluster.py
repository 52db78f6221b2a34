# SPDX-License-Identifier: MIT
# This file is part of pelotari.
# scapy.contrib.description = fyrehose cluster: leases, epochs and the subscriber table
# scapy.contrib.status = loads

"""
The backbone cluster's member-to-member datagrams (pelotari, docs/protocols/fyrehose-cluster.md,
"Wire"), on the cluster port (UDP 2325): type (u8) · name length (u8) · the cluster's name ·
the sender's incarnation (u64) · the type's fields (u64 each; TABLE: an epoch and 1..48
entries of three) · with a cluster key, a 16-byte HMAC-SHA256 tag.

    >>> raw(FyrehoseCluster(type="LEASE", cname=b"prod#0a1b2c3d", incarnation=7,
    ...                     values=[1795000000000, 4, 99, 90]))
"""

from scapy.fields import (ByteEnumField, ByteField, FieldLenField, FieldListField, FlagsField,
                          IPField, LongField, ShortField, StrField, StrFixedLenField, StrLenField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from pelotari.fyrehose.cluster import FIELDS, NAMES, TABLE, TAG_SIZE, _table_fields
from pelotari.fyrehose.discover import KINDS as DISCOVERY_KINDS, MAGIC as DISCOVERY_MAGIC

DEFAULT_PORTS = (2325,)
DEFAULT_PORT = 2325
FIELD_NAMES = {1: "epoch round reserved next", 2: "epoch round promised high",
               3: "epoch reservation", 4: "epoch reservation", 5: "promised", 6: "epoch",
               7: "epoch reserved high fresh", 8: "promised", 9: "epoch", 10: "epoch"}


def _layout(s: bytes):
    """(fields, tagged) of a datagram's bytes: the count its type fixes (TABLE's: what fits),
    then a tag if 16 bytes are left over; None if it is none of them."""
    if len(s) < 2 or s[0] not in FIELDS:
        return None
    rest = len(s) - 2 - s[1] - 8
    for tagged in (False, True):
        body = rest - (TAG_SIZE if tagged else 0)
        if body < 0 or body % 8:
            continue
        count = FIELDS[s[0]] or _table_fields(body // 8)
        if count and body == 8 * count:
            return count, tagged
    return None


class FyrehoseCluster(Packet):
    """One cluster datagram (a member to another)."""

    name = "fyrehose cluster"
    fields_desc = [
        ByteEnumField("type", 1, NAMES),
        FieldLenField("nlen", None, length_of="cname", fmt="B"),
        StrLenField("cname", b"fyrehose", length_from=lambda pkt: pkt.nlen),
        LongField("incarnation", 0),
        FieldListField("values", [], LongField("", 0),
                       count_from=lambda pkt: getattr(pkt, "_count", 0)),
        # (dissected: 16 bytes when the datagram has them left over; built: what is given)
        StrLenField("tag", b"",
                    length_from=lambda pkt: TAG_SIZE if getattr(pkt, "_tagged", False) else 0),
    ]

    def pre_dissect(self, s):
        layout = _layout(s)
        self._count, self._tagged = layout if layout else (0, False)
        return s

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        kind = NAMES.get(self.type, f"type {self.type}")
        if self.type == TABLE and self.values:
            body = f"epoch={self.values[0]} entries={(len(self.values) - 1) // 3}"
        else:
            body = " ".join(f"{n}={v}" for n, v in zip(FIELD_NAMES.get(self.type, "").split(),
                                                         self.values))
        tag = " tagged" if self.tag else ""
        return f"cluster {kind} {self.cname.decode(errors='replace')} {body}{tag}"


class FyrehoseClusterDiscovery(Packet):
    """`--discover`'s ASK and ANSWER on the cluster port (ANNOUNCE travels as prototari DATA):
    128 bytes, fyrehose-cluster.md "Layout"."""

    name = "fyrehose cluster discovery"
    fields_desc = [
        StrFixedLenField("magic", DISCOVERY_MAGIC, len(DISCOVERY_MAGIC)),
        ByteField("version", 1),
        ByteEnumField("kind", 2, DISCOVERY_KINDS),
        FlagsField("flags", 0, 8, ["KEYED", "FIXED"]),
        ByteField("size", 0),
        ByteField("count", 0),
        ByteField("nlen", 0),
        ShortField("data_port", 2323),
        ShortField("bully_port", 2324),
        ShortField("cluster_port", 2325),
        IPField("host", "0.0.0.0"),
        LongField("incarnation", 0),
        StrFixedLenField("token", bytes(16), 16),
        FieldListField("members", ["0.0.0.0"] * 5, IPField("", "0.0.0.0"), count_from=lambda p: 5),
        StrFixedLenField("cname", bytes(32), 32),
        StrFixedLenField("reserved", bytes(4), 4),
        StrFixedLenField("tag", bytes(16), 16),
    ]

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        kind = DISCOVERY_KINDS.get(self.kind, f"kind {self.kind}")
        name = self.cname[:self.nlen].decode(errors="replace") or "any"
        members = [m for m in self.members if m != "0.0.0.0"]
        return (f"cluster discovery {kind} {name} from {self.host}"
                + (f" members={','.join(members)}" if members else ""))


class FyrehoseClusterUnknown(Packet):
    """A datagram on the cluster port that is no cluster datagram (or discovery's ASK)."""

    name = "fyrehose cluster unknown"
    fields_desc = [StrField("load", b"")]

    def mysummary(self):
        return f"cluster unknown ({len(self.load)} bytes)"


class Cluster(Packet):
    """Dispatches a cluster-port datagram."""

    name = "fyrehose cluster port"

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):
        if _pkt is None:
            return FyrehoseCluster
        data = bytes(_pkt)
        if data.startswith(DISCOVERY_MAGIC) and len(data) == len(FyrehoseClusterDiscovery()):
            return FyrehoseClusterDiscovery
        return FyrehoseCluster if _layout(data) else FyrehoseClusterUnknown


CRAFT = {"cluster": FyrehoseCluster, "cluster-discovery": FyrehoseClusterDiscovery}
dissect = Cluster


def describe(layer):
    """What `pelotari inspect` shows of one dissected UDP payload, or None if it is not ours."""
    if isinstance(layer, FyrehoseClusterDiscovery):
        return {"protocol": "cluster", "type": DISCOVERY_KINDS.get(layer.kind, "UNKNOWN"),
                "summary": layer.summary()}
    if isinstance(layer, FyrehoseClusterUnknown):
        return {"protocol": "cluster", "type": "UNKNOWN", "summary": layer.summary()}
    if isinstance(layer, FyrehoseCluster):
        return {"protocol": "cluster", "type": NAMES.get(layer.type, "UNKNOWN"),
                "summary": layer.summary()}
    return None


def bind_port(port: int) -> None:
    """Dissect UDP datagrams to or from `port` as cluster datagrams."""
    bind_layers(UDP, Cluster, dport=port)
    bind_layers(UDP, Cluster, sport=port)


for _port in DEFAULT_PORTS:
    bind_port(_port)
