# SPDX-License-Identifier: MIT
# This file is part of pelotari.
# scapy.contrib.description = Potato Protocol v2.1 over TCP (newline-delimited JSON mesh messages)
# scapy.contrib.status = loads

"""
potato: Potato Protocol v2.1 (potato.md) over pelotari's TCP transport
(pelotari.potato.transport, docs/protocols/potato.md).

A TCP payload is newline-delimited JSON: every line one of
  * a message: one JSON object with the fields of `pelotari.potato.wire.FIELDS` (type,
    identifier, from, to, visited, body), its type one of `wire.TYPES`; a class per type
    (PotatoDirect, PotatoBroadcast, PotatoDirectElectionRequest, ...) is generated from that
    table, all subclasses of PotatoMessage, and a message is built by `wire.encode` (plus the
    newline), so the bytes are exactly what a client sends;
  * the transport's own lines: the handshake `{"hello": NAME}` (or with `refused`, or a WebRTC
    signaling `offer`/`answer`), PotatoHello; the keepalive `{"ping": 1}`, PotatoPing; an empty
    line (skipped by the receiver), PotatoBlank.
A line the receiver would drop or close the connection on (not JSON, against the schema, an
unknown type, over the size limits, a hello that is no hello) dissects as PotatoMalformed whose
summary says why (wire's reason: not_json, bad_field, unknown_type, too_large; bad_hello); a
last piece without its newline (the line goes on in the next segment) is PotatoPartial.
Dissection never raises. A line is checked exactly as the receiver checks it: `wire.decode`
with the default `wire.Limits`.

    >>> raw(PotatoDirect(identifier="m1", to="B", body="hi", sender="A"))
    b'{"type":"direct","identifier":"m1","from":"A","to":"B","visited":[],"body":"hi"}\\n'

`from` is a Python keyword, and scapy makes a signature of the field names: the field is
`sender`, as in wire.Message (FIELD_NAMES maps them); `pelotari craft` takes `-F from=A` too.

Potato has no fixed port (a client listens where it is told, often port 0): bind_port(port)
binds one, `pelotari inspect -p potato:PORT` does it for a capture, and inspect also takes any
TCP connection whose first payload is a hello line as potato (`recognise`).
"""

import copy
import json

from scapy.fields import Field, StrField
from scapy.layers.inet import TCP
from scapy.packet import Packet, bind_layers

from pelotari.potato import wire
from pelotari.potato.transport import HELLO, HELLO_MAX, PING, SIGNAL_MAX

DEFAULT_PORT = None  # none: `--send` needs HOST:PORT
DEFAULT_PORTS = ()
TRANSPORT = "tcp"  # `pelotari inspect` reads it from TCP segments, craft connects
FRAMING = "lines"  # newline-delimited: craft does the hello handshake, inspect joins lines
EOL = b"\n"
LIMITS = wire.Limits()  # what a receiver allows (the transport's max_message is the same)
CRAFT_NAME = "pelotari-craft"  # `from` of a crafted message unless set
# JSON field -> scapy field: wire.FIELDS, but `from` (a Python keyword) is `sender`, as in
# wire.Message.
FIELD_NAMES = {name: "sender" if name == "from" else name for name in wire.FIELDS}
ALIASES = {"from": "sender"}  # `pelotari craft -F from=A`


def _cut(text: str, limit: int = 12) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _show(value, limit: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return repr(_cut(text, limit)) if isinstance(value, str) else _cut(text, limit)


class JsonField(Field):
    """One JSON value of a line. The line's bytes are built and read whole (json), not field by
    field, so addfield/getfield are never used; `from_cli` reads `pelotari craft -F` values."""

    __slots__ = ["cli"]
    ismutable = True  # lists and objects: a change in place rebuilds the line
    islist = 1  # a list is one value (scapy would otherwise make a packet per element)

    def __init__(self, name, default, cli="text"):
        self.cli = cli
        super().__init__(name, default, "B")

    def do_copy(self, x):
        return copy.deepcopy(x)

    def i2repr(self, pkt, x):
        return "None" if x is None else json.dumps(x, ensure_ascii=False)

    def addfield(self, pkt, s, val):
        raise NotImplementedError("a potato line is built whole")

    def getfield(self, pkt, s):
        raise NotImplementedError("a potato line is dissected whole")

    def from_cli(self, text: str):
        """text: the string as given (empty: none); names: comma-separated names; json: any
        JSON value, else the text as a string (empty: none)."""
        if self.cli == "names":
            return [part.strip() for part in text.split(",") if part.strip()]
        if text == "":
            return None
        if self.cli == "json":
            try:
                return json.loads(text)
            except ValueError:
                return text
        return text


def _classify(line: bytes, terminated: bool):
    """(class name, reason) for one line (without its newline)."""
    if not terminated:
        if len(line) > LIMITS.max_message:  # the receiver closes the connection
            return "malformed", f"too_large: a line over {LIMITS.max_message} bytes"
        return "partial", "no newline yet"
    if line == PING:
        return "ping", None
    if not line:
        return "blank", None
    if line.startswith(HELLO):
        try:
            hello = json.loads(line)
            name = hello["hello"]
            if not isinstance(name, str):
                raise TypeError
        except (ValueError, TypeError, KeyError, RecursionError):
            return "malformed", "bad_hello: no hello name"
        limit = SIGNAL_MAX if ("offer" in hello or "answer" in hello) else HELLO_MAX
        if len(line) > limit:
            return "malformed", f"bad_hello: a hello line over {limit} bytes"
        if not wire.is_name(name):
            return "malformed", f"bad_hello: {_show(name, 20)} is not a name (1..{wire.MAX_NAME})"
        return "hello", None
    try:
        msg = wire.decode(line, LIMITS)
    except wire.PotatoError as exc:
        return "malformed", f"{exc.reason}: {_cut(str(exc), 80)}"
    return msg.type, None


def problem(data: bytes):
    """Why the first line of data is not a good line (`reason: detail`), or None."""
    data = bytes(data)
    line, eol, _ = data.partition(EOL)
    return _classify(line, bool(eol))[1]


class _PotatoLine(Packet):
    """One line of a potato TCP stream; what follows it is the next line."""

    def extract_padding(self, s):
        return s, b""

    def guess_payload_class(self, payload):
        return Potato

    def do_dissect(self, s):
        line, eol, rest = s.partition(EOL)
        self.read_line(line)
        self.raw_packet_cache = line + eol
        self.raw_packet_cache_fields = {f.name: f.do_copy(self.getfieldval(f.name))
                                        for f in self.fields_desc}
        self.explicit = 1
        return rest

    def self_build(self):
        if self.raw_packet_cache is not None:
            if all(self.getfieldval(name) == value
                   for name, value in (self.raw_packet_cache_fields or {}).items()):
                return self.raw_packet_cache
            self.raw_packet_cache = self.raw_packet_cache_fields = None
        return self.line() + self.end()

    def end(self) -> bytes:
        """What ends the line on the wire."""
        return EOL

    def read_line(self, line: bytes) -> None:
        raise NotImplementedError

    def line(self) -> bytes:
        raise NotImplementedError


def _json_object(line: bytes) -> dict:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}


class PotatoMessage(_PotatoLine):
    """A potato message: the fields of wire.FIELDS, built by wire.encode. The class of each
    type (PotatoDirect, ...) only changes the default `type`; setting `type` to anything
    (-F type=...) crafts that, valid or not."""

    name = "potato message"
    TYPE = "direct"
    fields_desc = [JsonField(FIELD_NAMES[name], None, "names" if name == "visited" else
                             "json" if name == "body" else "text") for name in wire.FIELDS]

    def __init__(self, _pkt=b"", *args, **kwargs):
        super().__init__(_pkt, *args, **kwargs)
        if not _pkt:
            if "type" not in kwargs:
                self.fields["type"] = self.TYPE
            if "identifier" not in kwargs:
                self.fields["identifier"] = wire.new_identifier()
            if "sender" not in kwargs:
                self.fields["sender"] = CRAFT_NAME
            if "visited" not in kwargs:
                self.fields["visited"] = []

    def read_line(self, line: bytes) -> None:
        obj = _json_object(line)  # the dispatcher checked it; a class used by hand may not
        for name in wire.FIELDS:
            self.fields[FIELD_NAMES[name]] = obj.get(name)

    def message(self) -> wire.Message:
        """The wire.Message of these fields (as given: nothing is checked)."""
        visited = self.visited
        return wire.Message(self.type, self.identifier, self.sender,
                            tuple(visited) if isinstance(visited, (list, tuple)) else visited,
                            self.to, self.body)

    def line(self) -> bytes:
        return wire.encode(self.message())

    def mysummary(self):
        kind = self.type
        out = [f"potato {kind}", f"{self.sender}→{self.to if self.to is not None else '*'}",
               f"id={_cut(str(self.identifier), 8)}"]
        visited = self.visited if isinstance(self.visited, list) else []
        hops = f"{len(visited)} hop{'' if len(visited) == 1 else 's'}"
        out.append(f"via {'>'.join(map(str, visited))} ({hops})" if visited else f"({hops})")
        body = self.body
        body_kind = wire.TYPES.get(kind, (False, None))[1]
        if body_kind == "request" and isinstance(body, dict):
            parts = body.get("direct_participants")
            out.append(f"next={_cut(str(body.get('next')))} parent={_cut(str(body.get('parent')))}"
                       f" originator={body.get('originator')}")
            if isinstance(parts, list):
                out.append(f"participants=[{','.join(map(str, parts))}]")
            if body.get("deadline_ms") is not None:
                out.append(f"deadline={body['deadline_ms']}ms")
        elif body_kind == "response" and isinstance(body, dict):
            vote = f"vote={body.get('vote')}"
            if "yes" in body or "no" in body:
                vote += f" (yes {body.get('yes')}, no {body.get('no')})"
            out.append(f"{vote} next={_cut(str(body.get('next')))}")
        elif kind == "broadcast" and isinstance(body, dict) and isinstance(body.get("frame"), str):
            out.append(f"frame={_cut(body['frame'])} parent={_cut(str(body.get('parent')))}")
        elif body is not None:
            out.append(_show(body))
        return " ".join(out)


def _camel(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


CLASSES = {}  # message type -> Packet class
for _kind, (_needs_to, _body) in wire.TYPES.items():
    CLASSES[_kind] = type(f"Potato{_camel(_kind)}", (PotatoMessage,), {
        "__doc__": f"A potato `{_kind}` message (`to` {'required' if _needs_to else 'none'}"
                   f"{', body: an election ' + _body if _body else ''}).",
        "__module__": __name__, "name": f"potato {_kind}", "TYPE": _kind})
    globals()[CLASSES[_kind].__name__] = CLASSES[_kind]
del _kind, _needs_to, _body


class PotatoHello(_PotatoLine):
    """The transport's handshake line: {"hello": NAME}, with `refused` (REASON) when the
    connection is refused, or a WebRTC signaling `offer`/`answer` (an SDP). Built as the
    transport writes it (json.dumps, keys in this order)."""

    name = "potato hello"
    fields_desc = [JsonField("hello", CRAFT_NAME), JsonField("refused", None),
                   JsonField("offer", None), JsonField("answer", None)]

    def read_line(self, line: bytes) -> None:
        obj = _json_object(line)
        for f in self.fields_desc:
            self.fields[f.name] = obj.get(f.name)

    def line(self) -> bytes:
        return json.dumps({f.name: self.getfieldval(f.name) for f in self.fields_desc
                           if f.name == "hello" or self.getfieldval(f.name) is not None}).encode()

    def mysummary(self):
        out = f"potato hello {_show(self.hello, 100)}"
        if self.refused is not None:
            out += f" refused: {_show(self.refused, 60)}"
        for kind in ("offer", "answer"):
            sdp = self.getfieldval(kind)
            if sdp is not None:
                out += f" WebRTC {kind} (SDP {len(str(sdp))} characters)"
        return out


class _Fixed(_PotatoLine):
    fields_desc = []
    LINE = b""

    def read_line(self, line: bytes) -> None:
        pass

    def line(self) -> bytes:
        return self.LINE


class PotatoPing(_Fixed):
    """The transport's keepalive line, exactly {"ping": 1}."""

    name = "potato ping"
    LINE = PING

    def mysummary(self):
        return "potato ping"


class PotatoBlank(_Fixed):
    """An empty line: the receiver skips it."""

    name = "potato blank"

    def mysummary(self):
        return "potato blank line (skipped)"


class _Bytes(_PotatoLine):
    """A line kept as its bytes (`load`, without the newline; `eol` is the newline or none)."""

    fields_desc = [StrField("load", b""), StrField("eol", EOL)]

    def read_line(self, line: bytes) -> None:
        self.fields["load"] = line

    def do_dissect(self, s):
        rest = super().do_dissect(s)
        self.fields["eol"] = self.raw_packet_cache[len(self.load):]
        self.raw_packet_cache_fields["eol"] = self.eol
        return rest

    def line(self) -> bytes:
        return bytes(self.load)

    def end(self) -> bytes:
        return bytes(self.eol)

    @property
    def reason(self) -> str:
        line = bytes(self.load)
        return _classify(line, bool(self.eol))[1] or "valid"

    def preview(self) -> str:
        return repr(_cut(bytes(self.load).decode("utf-8", "replace"), 40))


class PotatoMalformed(_Bytes):
    """A line the receiver drops (or closes the connection on): `reason` says why."""

    name = "potato malformed"

    def mysummary(self):
        return f"potato malformed ({self.reason}), {len(self.load)} bytes: {self.preview()}"


class PotatoPartial(_Bytes):
    """The last bytes of a payload without a newline: a line that goes on in the next segment."""

    name = "potato partial"

    def __init__(self, _pkt=b"", *args, **kwargs):
        if not _pkt:
            kwargs.setdefault("eol", b"")
        super().__init__(_pkt, *args, **kwargs)

    def mysummary(self):
        return f"potato partial line, {len(self.load)} bytes so far (no newline yet): {self.preview()}"


KINDS = {**CLASSES, "hello": PotatoHello, "ping": PotatoPing, "blank": PotatoBlank,
         "malformed": PotatoMalformed, "partial": PotatoPartial}


class Potato(Packet):
    """Dispatches a TCP payload's first line to its class, checked as the receiver checks it."""

    name = "potato"

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):
        if not _pkt:
            return cls
        line, eol, _ = bytes(_pkt).partition(EOL)
        return KINDS[_classify(line, bool(eol))[0]]


LINE_CLASSES = tuple(set(KINDS.values()))

# What `pelotari craft TYPE` builds: `potato` (set the type with -F type=...), each message
# type by name, and the transport's hello and ping lines.
CRAFT = {"potato": PotatoMessage, **CLASSES, "hello": PotatoHello, "ping": PotatoPing}


def dissect(data: bytes):
    """A TCP payload of this protocol -> its chain of lines (never raises)."""
    return Potato(bytes(data))


def split_frames(data: bytes):
    """The lines of a payload that holds more than one, as bytes each (with their newline; a
    last piece without one is the last item), or None for a payload of one line or less."""
    data = bytes(data)
    frames, start = [], 0
    while start < len(data):
        end = data.find(EOL, start)
        end = len(data) if end < 0 else end + 1
        frames.append(data[start:end])
        start = end
    return frames if len(frames) > 1 else None


def messages(pkt):
    """The lines of a dissected chain, in order, each without its payload."""
    out = []
    while isinstance(pkt, LINE_CLASSES):
        one = pkt.copy()
        one.remove_payload()
        out.append(one)
        pkt = pkt.payload
    return out


def kind(pkt) -> str:
    """The row type `pelotari inspect` shows: the message type, or HELLO, PING, BLANK,
    PARTIAL, MALFORMED."""
    if isinstance(pkt, PotatoMessage):
        return str(pkt.type)
    return pkt.name.split()[-1].upper()


def describe(layer):
    """What `pelotari inspect` shows of one dissected TCP payload (or its bytes), or None if it
    is not ours. For a chain, the first line; "types" then names every line in it."""
    if isinstance(layer, (bytes, bytearray, memoryview)):
        layer = dissect(layer)
    chain = messages(layer)
    if not chain:
        return None
    first = chain[0]
    row = {"protocol": "potato", "type": kind(first)}
    if isinstance(first, PotatoMessage):
        row.update({"identifier": first.identifier, "from": first.sender, "to": first.to,
                    "visited": first.visited})
        if isinstance(first.body, dict) and first.type.endswith("_response"):
            row["vote"] = first.body.get("vote")
    elif isinstance(first, PotatoHello):
        row["name"] = first.hello
        if first.refused is not None:
            row["refused"] = first.refused
    elif isinstance(first, (PotatoMalformed, PotatoPartial)):
        row["reason"] = first.reason
    if len(chain) > 1:
        row["types"] = [kind(m) for m in chain]
    row["summary"] = first.summary()
    return row


def recognise(payload: bytes) -> bool:
    """Whether a TCP payload on an unknown port starts like a potato connection (a hello)."""
    return bytes(payload[:len(HELLO)]) == HELLO


def unfinished(data: bytes) -> bytes:
    """The last line of a payload when it has no newline yet (and is not already over the
    limit): `pelotari inspect` joins it to the same direction's next segment."""
    data = bytes(data)
    tail = data[data.rfind(EOL) + 1:]
    return tail if len(tail) <= LIMITS.max_message else b""


def client_name(pkt) -> str:
    """The name `pelotari craft --send` says hello with for pkt: a hello's own; for a message
    the last client in `visited` (the relaying peer: as a client relays it), else `from`."""
    if isinstance(pkt, PotatoHello):
        return str(pkt.hello)
    if isinstance(pkt, PotatoMessage):
        visited = pkt.visited
        if isinstance(visited, list) and visited and isinstance(visited[-1], str):
            return visited[-1]
        if isinstance(pkt.sender, str):
            return pkt.sender
    return CRAFT_NAME


def hello_line(name: str) -> bytes:
    """The handshake line a client connecting as `name` sends first."""
    return PotatoHello(hello=name).line() + EOL


def bind_port(port: int) -> None:
    """Dissect TCP segments to or from `port` as potato."""
    bind_layers(TCP, Potato, dport=port)
    bind_layers(TCP, Potato, sport=port)
