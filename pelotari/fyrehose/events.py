"""Events a fyrehose client reports to the application."""
from dataclasses import dataclass


class Event:
    """Base class of client events."""


@dataclass(frozen=True)
class Message(Event):
    """A published message, in sequence order."""

    sequence: int
    data: bytes


@dataclass(frozen=True)
class Lost(Event):
    """Messages first..last will never arrive: no peer could supply them ("unrepaired"; after
    a cluster failover, "failover": the old active's last messages no journal held and the part
    of its reservation it never used), or the application did not keep up and a full receive
    queue dropped them ("overflow")."""

    first: int
    last: int
    reason: str = "unrepaired"

    @property
    def count(self) -> int:
        """How many sequence numbers were lost."""
        return (self.last - self.first) % (1 << 48) + 1


@dataclass(frozen=True)
class Resync(Event):
    """The sequence jumped (a backbone restart, or a very long outage); tracking restarted."""

    expected: int
    received: int


@dataclass(frozen=True)
class PublishConfirmed(Event):
    """The backbone delivered our PUSH back: it is published as `sequence`."""

    publish_id: int
    sequence: int


@dataclass(frozen=True)
class PublishFailed(Event):
    """No DELIVER of our PUSH came back in time; it may or may not have been published."""

    publish_id: int
    reason: str


@dataclass(frozen=True)
class BackboneUp(Event):
    """The backbone answered a KEEPALIVE (first time, or after BackboneDown)."""

    rtt: float


@dataclass(frozen=True)
class BackboneDown(Event):
    """No KEEPALIVE-ACK for `silent_for` seconds."""

    silent_for: float


@dataclass(frozen=True)
class NoQuorum(Event):
    """(Backbone cluster) the active is silent and a member that answers says no majority
    can be reached (the minority side of a partition: nothing sequences here until it heals).
    Said once per silence; the client goes on asking, and moves when an active answers."""

    member: tuple
    epoch: int


@dataclass(frozen=True)
class BackboneMoved(Event):
    """(Backbone cluster) a new active backbone serves, in a newer epoch: this client now
    talks to it, and re-sent `resent` publishes the old one had not confirmed (at least once:
    some may have been published already)."""

    old: tuple
    new: tuple
    epoch: int
    resent: int
