"""Potato Protocol v2.1 messages (potato.md): one JSON object each, checked against the schema.

Everything that defines a message lives in TYPES (each type: whether it needs `to`, and which
body it carries) and in Limits (every bound, a constructor argument). Decisions the seed leaves
open (`to` on responses, vote counts in responses, the indirect deadline) are in
docs/protocols/potato.md.
"""
import hashlib
import json
import math
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

INITIAL = "INITIAL"  # `parent` before the first frame
VOTES = ("YES", "NO", "ABSTAIN")
MAX_NAME = 100  # the seed truncates names to 100 characters in frame identifiers
MAX_COUNT = 1 << 31  # a response's yes/no counts: more clients than any mesh has

# type -> (needs `to`, body kind: None, "request" or "response")
TYPES: dict[str, tuple[bool, str | None]] = {
    "direct": (True, None),
    "broadcast": (False, None),
    "direct_election_request": (False, "request"),
    "direct_election_response": (True, "response"),
    "indirect_election_request": (False, "request"),
    "indirect_election_response": (True, "response"),
}
FIELDS = ("type", "identifier", "from", "to", "visited", "body")
REQUIRED = ("type", "identifier", "from", "visited")


class PotatoError(ValueError):
    """Bytes that are not a message the schema allows."""

    reason = "malformed"


class TooLarge(PotatoError):
    """More bytes, names, or nesting than the limits allow."""

    reason = "too_large"


class NotJson(PotatoError):
    """Not one UTF-8 JSON object."""

    reason = "not_json"


class UnknownType(PotatoError):
    """`type` is none of the six."""

    reason = "unknown_type"


class BadField(PotatoError):
    """A field missing, of the wrong kind, or unknown."""

    reason = "bad_field"


class BadPicture(PotatoError):
    """A frame's stroke list that breaks the picture rules (docs/protocols/potato.md)."""

    reason = "bad_picture"


@dataclass(frozen=True)
class Limits:
    """Every bound on a received message."""

    max_message: int = 65536  # bytes of JSON
    max_visited: int = 1024  # names in `visited`
    max_participants: int = 1024  # names in `direct_participants`
    max_identifier: int = 256  # characters of `identifier`, `parent`, `next`
    max_depth: int = 32  # nesting of `body`

    def __post_init__(self):
        for name in ("max_message", "max_visited", "max_participants", "max_identifier",
                     "max_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True)
class Message:
    """One potato message (`from` is `sender` here: a Python keyword)."""

    type: str
    identifier: str
    sender: str
    visited: tuple[str, ...] = ()
    to: str | None = None
    body: Any = None

    def as_dict(self) -> dict:
        out = {"type": self.type, "identifier": self.identifier, "from": self.sender}
        if self.to is not None:
            out["to"] = self.to
        out["visited"] = list(self.visited)
        if self.body is not None:
            out["body"] = self.body
        return out


@dataclass(frozen=True)
class Request:
    """The body of an election request (direct or indirect)."""

    parent: str
    next: str
    originator: str
    direct_participants: tuple[str, ...] = ()
    deadline_ms: int | None = None  # pelotari: what is left of the requester's time to answer

    def as_dict(self) -> dict:
        out = {"parent": self.parent, "next": self.next, "originator": self.originator,
               "direct_participants": list(self.direct_participants)}
        if self.deadline_ms is not None:
            out["deadline_ms"] = self.deadline_ms
        return out


@dataclass(frozen=True)
class Response:
    """The body of an election response: the vote, and (pelotari, as the seed's example does)
    the YES and NO counts it aggregates. Without counts, the vote counts as one."""

    parent: str
    next: str
    vote: str
    yes: int = field(default=-1)
    no: int = field(default=-1)

    def __post_init__(self):
        if self.yes < 0 or self.no < 0:  # derived from the vote
            object.__setattr__(self, "yes", 1 if self.vote == "YES" else 0)
            object.__setattr__(self, "no", 1 if self.vote == "NO" else 0)

    def as_dict(self) -> dict:
        return {"parent": self.parent, "next": self.next, "vote": self.vote,
                "yes": self.yes, "no": self.no}


def is_name(value) -> bool:
    """A client name: a string of 1..100 characters (valid Unicode: no lone surrogate)."""
    return isinstance(value, str) and 1 <= len(value) <= MAX_NAME and _encodable(value)


def _encodable(text: str) -> bool:
    """Whether text is valid Unicode (UTF-8 can carry it): json.loads turns an escaped lone
    surrogate such as \\ud800 into a str that no UTF-8 encoder takes."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# An escaped UTF-16 surrogate (\\uD800..\\uDFFF): a pair is one character, a lone one no
# character at all.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: Python reads inf, and would relay it as Infinity
        raise ValueError(f"{text[:20]} is out of range")
    return value


def _names(value, limit: int, what: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise BadField(f"{what} must be an array of names")
    if len(value) > limit:
        raise TooLarge(f"{what} holds {len(value)} names; at most {limit}")
    if not all(is_name(v) for v in value):
        raise BadField(f"{what} holds something that is not a name (1..{MAX_NAME} characters)")
    return tuple(value)


def _ident(value, limits: Limits, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadField(f"{what} must be a non-empty string")
    if len(value) > limits.max_identifier:
        raise TooLarge(f"{what} has {len(value)} characters; at most {limits.max_identifier}")
    return value


def _depth(value, limit: int, level: int = 0) -> None:
    if level > limit:
        raise TooLarge(f"body nests deeper than {limit}")
    if isinstance(value, dict):
        for v in value.values():
            _depth(v, limit, level + 1)
    elif isinstance(value, list):
        for v in value:
            _depth(v, limit, level + 1)


def request_body(body, limits: Limits) -> Request:
    """An election request's body, checked."""
    if not isinstance(body, dict):
        raise BadField("an election request needs a body object")
    deadline = body.get("deadline_ms")
    if deadline is not None and (not isinstance(deadline, int) or isinstance(deadline, bool)
                                 or deadline < 0):
        raise BadField("deadline_ms must be a non-negative integer")
    originator = body.get("originator")
    if not is_name(originator):
        raise BadField("originator must be a name")
    parent = _ident(body.get("parent"), limits, "parent")
    nxt = _ident(body.get("next"), limits, "next")
    if parent == nxt:
        raise BadField("next must differ from parent (a frame is not its own parent)")
    return Request(parent, nxt, originator,
                   _names(body.get("direct_participants"), limits.max_participants,
                          "direct_participants"), deadline)


def response_body(body, limits: Limits) -> Response:
    """An election response's body, checked."""
    if not isinstance(body, dict):
        raise BadField("an election response needs a body object")
    vote = body.get("vote")
    if vote not in VOTES:
        raise BadField("vote must be YES, NO or ABSTAIN")
    counts = []
    for key in ("yes", "no"):
        v = body.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or
                              not 0 <= v < MAX_COUNT):
            raise BadField(f"{key} must be an integer within 0..{MAX_COUNT - 1}")
        counts.append(-1 if v is None else v)
    if counts[0] >= 0 and counts[1] >= 0:
        yes, no = counts
        if vote == "ABSTAIN" and (yes or no):
            raise BadField("an ABSTAIN carries no votes")
        if (vote == "YES" and yes < no) or (vote == "NO" and no < yes) or \
                (vote != "ABSTAIN" and yes + no == 0):
            raise BadField("vote contradicts the counts")
    parent = _ident(body.get("parent"), limits, "parent")
    nxt = _ident(body.get("next"), limits, "next")
    if parent == nxt:
        raise BadField("next must differ from parent (a frame is not its own parent)")
    return Response(parent, nxt, vote,
                    counts[0] if counts[0] >= 0 and counts[1] >= 0 else -1,
                    counts[1] if counts[0] >= 0 and counts[1] >= 0 else -1)


# A frame's picture (pelotari's, docs/protocols/potato.md "Frames are pictures"): a stroke list
# on a WIDTH x HEIGHT grid, carried in the winner's frame broadcast as body["strokes"].
WIDTH, HEIGHT = 1024, 768
MAX_STROKES = 256
MAX_POINTS = 4096  # (x, y) pairs in all strokes together: at most 44,802 bytes of JSON, so a
# frame broadcast with its picture fits a 64 KiB message with ~200 names in `visited`
MAX_WIDTH = 32  # a stroke's line width, 1..32
_COLOUR = re.compile(r"#[0-9a-f]{6}\Z")


def _coordinate(value, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit


def strokes(value) -> list:
    """A frame's stroke list, checked: [{"c": "#rrggbb", "w": 1..32, "p": [x0, y0, ...]}, ...]
    with integer points on the 1,024 x 768 grid. BadPicture (or TooLarge) says why not."""
    if not isinstance(value, list):
        raise BadPicture("strokes must be an array")
    if len(value) > MAX_STROKES:
        raise TooLarge(f"{len(value)} strokes; at most {MAX_STROKES}")
    points = 0
    for stroke in value:
        if not isinstance(stroke, dict) or set(stroke) != {"c", "w", "p"}:
            raise BadPicture('a stroke is an object with exactly "c", "w" and "p"')
        c, w, p = stroke["c"], stroke["w"], stroke["p"]
        if not isinstance(c, str) or not _COLOUR.match(c):
            raise BadPicture("a stroke's colour is #rrggbb (lower-case hex)")
        if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= MAX_WIDTH:
            raise BadPicture(f"a stroke's width is an integer in 1..{MAX_WIDTH}")
        if not isinstance(p, list) or not p or len(p) % 2:
            raise BadPicture("a stroke's points are a non-empty array of x, y pairs")
        points += len(p) // 2
        if points > MAX_POINTS:
            raise TooLarge(f"over {MAX_POINTS} points")
        if not all(_coordinate(x, WIDTH) for x in p[0::2]) or \
                not all(_coordinate(y, HEIGHT) for y in p[1::2]):
            raise BadPicture(f"a point is off the {WIDTH} x {HEIGHT} grid (integers)")
    return value


def decode(data: bytes, limits: Limits = Limits()) -> Message:
    """One message from the bytes of one JSON object; a PotatoError says why not."""
    if len(data) > limits.max_message:
        raise TooLarge(f"{len(data)} bytes; at most {limits.max_message}")
    try:
        # Strict UTF-8 and strict JSON: json.loads alone takes surrogates (raw or escaped),
        # NaN, Infinity and numbers that overflow to inf; we would relay them as text no
        # encoder or seed peer's JSON.parse takes.
        obj = json.loads(bytes(data).decode("utf-8"), parse_constant=_no_constant,
                         parse_float=_finite)
        if _SURROGATE_ESCAPE.search(data) and not _encodable(
                json.dumps(obj, ensure_ascii=False)):
            raise ValueError("a lone UTF-16 surrogate")
    except (ValueError, RecursionError) as e:  # RecursionError: absurd nesting
        raise NotJson(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise NotJson("not a JSON object")
    unknown = set(obj) - set(FIELDS)
    if unknown:
        raise BadField(f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    missing = [f for f in REQUIRED if f not in obj]
    if missing:
        raise BadField(f"missing {', '.join(missing)}")
    kind = obj["type"]
    if not isinstance(kind, str) or kind not in TYPES:  # (an object or array: no dict key)
        raise UnknownType(f"unknown type {str(kind)[:40]!r}")
    needs_to, body_kind = TYPES[kind]
    to = obj.get("to")
    if to is not None and not is_name(to):
        raise BadField("to must be a name")
    if needs_to and to is None:
        raise BadField(f"a {kind} message needs `to`")
    if not is_name(obj["from"]):
        raise BadField("from must be a name")
    body = obj.get("body")
    _depth(body, limits.max_depth)
    if body_kind == "request":
        request_body(body, limits)
    elif body_kind == "response":
        response_body(body, limits)
    return Message(kind, _ident(obj["identifier"], limits, "identifier"), obj["from"],
                   _names(obj["visited"], limits.max_visited, "visited"), to, body)


def encode(msg: Message) -> bytes:
    """The message as compact JSON (never a raw newline: strings are escaped)."""
    return json.dumps(msg.as_dict(), separators=(",", ":"), ensure_ascii=False).encode()


def frame_id(name: str, now_ms: float | None = None, random: str | None = None) -> str:
    """A frame identifier: SHA1 of `time-name-random` (Unix ms rounded, name cut to 100)."""
    ms = round(time.time() * 1000 if now_ms is None else now_ms)
    random = secrets.token_hex(8) if random is None else random
    return hashlib.sha1(f"{ms}-{name[:MAX_NAME]}-{random}".encode()).hexdigest()


def new_identifier() -> str:
    """A message identifier, unique to the message."""
    return uuid.uuid4().hex
