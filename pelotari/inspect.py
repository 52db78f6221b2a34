"""What `pelotari inspect` makes of captured packets: which protocol reads each one, one row per
frame, line protocols followed across TCP segments, and the DELIVER sequences missing per stream.

It works on scapy packets and the layer modules of `pelotari.layers` (see its docstring for what a
layer provides); the CLI reads the pcap or sniffs, and prints the rows.
"""
from typing import Dict, Iterable, List, Optional, Set, Tuple

from fastpath.packets import MAX_SEQUENCE

BAD = ("MALFORMED", "UNKNOWN", "PARTIAL")
_SEQ_SPAN = MAX_SEQUENCE + 1  # SEQUENCE is 48-bit: 2**48 - 1 is followed by 0


class PortSpecError(ValueError):
    """A --port value that is neither PORT nor PROTOCOL:PORT of a known protocol."""


def bind_ports(modules: Dict[str, object], specs: Iterable[str]) -> Dict[str, Set[int]]:
    """{protocol: ports it is read on}: each layer's DEFAULT_PORTS plus every "[PROTOCOL:]PORT"
    spec (no protocol: every protocol tries that port); the layers are told (bind_port)."""
    bound = {name: set(m.DEFAULT_PORTS) for name, m in modules.items()}
    for spec in specs:
        proto, _, number = spec.rpartition(":")
        if proto and proto not in modules:
            raise PortSpecError(f"unknown protocol {proto!r} in {spec!r}")
        try:
            port = int(number)
        except ValueError:
            raise PortSpecError(f"{spec!r} is not PORT or PROTOCOL:PORT") from None
        for name in ([proto] if proto else modules):
            bound[name].add(port)
            modules[name].bind_port(port)
    return bound


def capture_filter(modules: Dict[str, object], bound: Dict[str, Set[int]]) -> str:
    """The BPF expression for every bound port, UDP first: "udp port 2323 or tcp port 3333"."""
    every = sorted({(getattr(modules[name], "TRANSPORT", "udp"), p)
                    for name, ports in bound.items() for p in ports},
                   key=lambda tp: (tp[0] != "udp", tp[1]))
    return " or ".join(f"{transport} port {p}" for transport, p in every)


def payload(layer) -> bytes:
    """The bytes a UDP or TCP layer carries, without the link layer's padding (an Ethernet
    frame is at least 60 bytes: a short segment or datagram comes with zeros after it)."""
    from scapy.layers.inet import UDP
    from scapy.packet import Padding

    data = bytes(layer.payload)
    pad = layer.payload.getlayer(Padding) if data else None
    if pad is not None:
        data = data[:len(data) - len(pad.load)]
    if isinstance(layer, UDP) and layer.len is not None and 8 <= layer.len <= len(data) + 8:
        data = data[:layer.len - 8]  # UDP says its length: what follows is padding
    return data


class Streams:
    """What inspect remembers from packet to packet for TCP protocols: connections taken as a
    line protocol's (a layer whose FRAMING is "lines": potato) because their first payload
    looked like it (`recognise`: a potato hello), on ports nobody named; and each direction's
    unfinished last line or message (a layer with `unfinished`: potato, bully), put in front of
    that direction's next segment (when its sequence number follows on)."""

    def __init__(self):
        self.known = set()  # (protocol module name, frozenset of both ends)
        self.pending = {}  # (module name, src, sport, dst, dport) -> (next seq, bytes, pkt)
        self.holds = 0  # segments whose bytes were held (all or a part) for a later one

    def claims(self, module, pkt, layer, data) -> bool:
        """Whether this connection is the line protocol's (its first payload was recognised)."""
        from scapy.layers.inet import IP

        ends = frozenset({(pkt[IP].src, layer.sport), (pkt[IP].dst, layer.dport)})
        key = (module.__name__, ends)
        if key not in self.known and data and module.recognise(data):
            self.known.add(key)
        return key in self.known

    def join(self, module, pkt, layer, data):
        """(data with the direction's unfinished line in front, bytes taken from before)."""
        from scapy.layers.inet import IP

        if not data:  # an ACK, SYN or FIN: the line goes on in a later segment
            return data, 0
        flow = (module.__name__, pkt[IP].src, layer.sport, pkt[IP].dst, layer.dport)
        seq, before, _ = self.pending.pop(flow, (None, b"", None))
        if seq != layer.seq:
            before = b""
        tail = module.unfinished(before + data)
        if tail:
            self.pending[flow] = ((layer.seq + len(data)) % (1 << 32), tail, pkt)
            self.holds += 1
        return before + data, len(before)

    def ended(self, module, pkt, layer):
        """(the packet, the bytes) left unfinished in this direction if this segment ends it
        (FIN or RST), else None."""
        from scapy.layers.inet import IP

        if not int(layer.flags) & 0x05:  # FIN | RST
            return None
        flow = (module.__name__, pkt[IP].src, layer.sport, pkt[IP].dst, layer.dport)
        held = self.pending.pop(flow, None)
        return (held[2], held[1]) if held else None

    def left(self, module):
        """Every (packet, bytes) still unfinished for that protocol (the capture ended)."""
        out = [(v[2], v[1]) for k, v in self.pending.items() if k[0] == module.__name__]
        self.pending = {k: v for k, v in self.pending.items() if k[0] != module.__name__}
        return out


def rows(pkt, ports, streams: Optional[Streams] = None) -> List[dict]:
    """A captured packet as rows. Every protocol bound to one of its ports (UDP, or TCP for a
    layer whose TRANSPORT is "tcp") tries to read it; the first that recognises it wins, else
    the first one's "malformed" reading is shown. A datagram or segment of several frames (a
    packed or GSO fyrehose datagram, bully messages coalesced in one TCP segment, potato lines)
    becomes one row per frame. Segments without payload (SYN, ACK, FIN) are no rows. With
    `streams` (a Streams), line protocols are also read on connections they recognise, and a
    line split over segments is read whole (its row says how many bytes came before); a
    message protocol's (bully) message split over segments is one row, once whole (or, cut
    short, when its direction ends or the capture does: Inspection.finish)."""
    from scapy.layers.inet import IP, TCP, UDP

    if not pkt.haslayer(IP):
        return []
    if streams is not None and pkt.haslayer(TCP):
        cut = [torn for module, bound in ports if getattr(module, "FRAMING", None) == "messages"
               and (torn := streams.ended(module, pkt, pkt[TCP])) is not None]
        if cut:  # a message cut short: shown at its own packet's time and ends
            return [r for torn_pkt, data in cut for r in _torn(torn_pkt, data, ports)] + \
                rows(pkt, ports, streams)
    readings = []  # (protocol's rows) per protocol that read the packet
    every = []  # per reading: whether each of its malformed rows is shown (a line protocol)
    for module, bound in ports:
        layer = pkt.getlayer(TCP if getattr(module, "TRANSPORT", "udp") == "tcp" else UDP)
        if layer is None:
            continue
        lines = getattr(module, "FRAMING", None) == "lines" and isinstance(layer, TCP)
        data = payload(layer)
        if not (layer.sport in bound or layer.dport in bound or (
                lines and streams is not None and streams.claims(module, pkt, layer, data))):
            continue
        before = 0
        if streams is not None and isinstance(layer, TCP) and hasattr(module, "unfinished"):
            data, before = streams.join(module, pkt, layer, data)
            if getattr(module, "FRAMING", None) == "messages":
                tail = module.unfinished(data)  # held: one row once the message is whole
                data = data[:len(data) - len(tail)]
        if not data:
            continue
        frames = getattr(module, "split_frames", lambda _: None)(data)
        gso = frames is not None and getattr(module, "split_gso", lambda _: None)(data) is not None
        found = []
        for frame in frames or [data]:
            dissected = module.dissect(frame)
            dissected.time = pkt.time  # a layer that checks times (swarm's MAC epochs) reads it
            described = module.describe(dissected)
            if described is not None:
                if frames:
                    # Several frames in one datagram or segment: packed, coalesced, or (equal
                    # sizes, on lo) one GSO send captured before the device split it.
                    described["frames"] = len(frames)
                    if gso:
                        described["gso"] = True
                found.append((layer, len(frame), described))
        if before and found:
            found[0][2]["continued"] = before  # bytes of the line from earlier segments
        if found:
            readings.append(found)
            every.append(lines)
            if any(r[2]["type"] not in BAD for r in found):
                break
    if not readings:
        return []
    good = [found for found in readings if any(r[2]["type"] not in BAD for r in found)]
    chosen = good[0] if good else readings[0] if every[0] else readings[0][:1]
    return [{"time": float(pkt.time), "src": f"{pkt[IP].src}:{layer.sport}",
             "dst": f"{pkt[IP].dst}:{layer.dport}", "length": length, **described}
            for layer, length, described in chosen]


def _torn(pkt, data: bytes, ports) -> List[dict]:
    """The row of a message a direction's end (or the capture's) cut short."""
    from scapy.layers.inet import IP, TCP

    layer = pkt[TCP]
    for module, _ in ports:
        bound = _ports_of(ports, module)
        if getattr(module, "FRAMING", None) == "messages" and (
                layer.sport in bound or layer.dport in bound):
            described = module.describe(module.dissect(data))
            if described is not None:
                return [{"time": float(pkt.time), "src": f"{pkt[IP].src}:{layer.sport}",
                         "dst": f"{pkt[IP].dst}:{layer.dport}", "length": len(data),
                         **described}]
    return []


def _ports_of(ports, module) -> Set[int]:
    return next(bound for m, bound in ports if m is module)


class GapFollower:
    """Missing DELIVER sequence numbers per stream (source → destination).

    SEQUENCE is 48-bit and wraps (spec: "Sequence numbers: first value, continuity, wrap"): each
    stream's numbers are unwrapped to positions relative to the highest seen so far, a number
    within half the range of it counting as before or after it, as the clients' journal does."""

    def __init__(self):
        self.seen: Dict[Tuple[str, str], Set[int]] = {}  # stream -> unwrapped positions
        self.highest: Dict[Tuple[str, str], int] = {}

    def add(self, row) -> None:
        """Note a row's sequence if it is a DELIVER."""
        if row.get("type") != "DELIVER":
            return
        stream, seq = (row["src"], row["dst"]), row["sequence"]
        top = self.highest.get(stream)
        if top is None:
            pos = seq
        else:
            delta = (seq - top) % _SEQ_SPAN
            pos = top + (delta - _SEQ_SPAN if delta >= _SEQ_SPAN // 2 else delta)
        self.seen.setdefault(stream, set()).add(pos)
        self.highest[stream] = pos if top is None else max(top, pos)

    def gaps(self) -> Dict[Tuple[str, str], List[Tuple[int, int]]]:
        """{(src, dst): [(first, last), ...]} of sequences missing between the lowest and
        highest seen; a run of missing numbers across the wrap is two ranges, each ascending."""
        out = {}
        for stream, positions in sorted(self.seen.items()):
            ordered = sorted(positions)
            missing = []
            for a, b in zip(ordered, ordered[1:]):
                if b > a + 1:
                    missing += _wire_ranges(a + 1, b - 1)
            out[stream] = missing
        return out


def _wire_ranges(first: int, last: int) -> List[Tuple[int, int]]:
    """Unwrapped positions first..last as SEQUENCE ranges, split where 2**48 - 1 turns to 0."""
    out = []
    while first <= last:
        end = min(last, first - first % _SEQ_SPAN + MAX_SEQUENCE)
        out.append((first % _SEQ_SPAN, end % _SEQ_SPAN))
        first = end + 1
    return out


class Inspection:
    """One inspect run: the rows of each packet in turn, counted per type, with the line
    protocols' streams and the DELIVER gaps followed across packets."""

    def __init__(self, modules: Dict[str, object], bound: Dict[str, Set[int]]):
        self.ports = [(modules[name], ports) for name, ports in bound.items()]
        self.streams = Streams()
        self.follower = GapFollower()
        self.counts: Dict[str, int] = {}
        self.rows = 0
        self.claimed = False

    def read(self, pkt) -> List[dict]:
        """The packet's rows (none: not pelotari's), counted and followed. `claimed` says
        whether the packet was pelotari's: it gave rows, or bytes held for a later one's (a
        capture written with -w keeps it, so that it reads the same again)."""
        held = self.streams.holds
        out = self._count(rows(pkt, self.ports, self.streams))
        self.claimed = bool(out) or self.streams.holds != held
        return out

    def finish(self) -> List[dict]:
        """Rows of the messages the capture ended in the middle of (cut short)."""
        out = []
        for module, _ in self.ports:
            if getattr(module, "FRAMING", None) == "messages":
                for pkt, data in self.streams.left(module):
                    out += _torn(pkt, data, self.ports)
        return self._count(sorted(out, key=lambda r: r["time"]))

    def _count(self, out: List[dict]) -> List[dict]:
        for row in out:
            self.rows += 1
            self.counts[row["type"]] = self.counts.get(row["type"], 0) + 1
            self.follower.add(row)
        return out

    def summary(self, follow_gaps: bool = False) -> dict:
        """The closing record: rows per type, their number, and (follow_gaps) the gaps."""
        out = {"counts": self.counts, "packets": self.rows}
        if follow_gaps:
            out["gaps"] = [{"src": s, "dst": d, "missing": [list(g) for g in m]}
                           for (s, d), m in self.follower.gaps().items()]
        return out
