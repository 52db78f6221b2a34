"""A backbone that is a cluster member (docs/protocols/fyrehose-cluster.md): the Backbone
(gated), its data plane for the member's core, and, while it stands by, a journaling
subscription to the active backbone. `ClusterBackbone` runs them on one asyncio loop.
"""
import hashlib
import logging
import os
from collections.abc import Callable
from typing import Optional

from fastpath import refcodec
from fastpath.packets import CLUSTER, INFO_ACTIVE, INFO_NO_QUORUM, MAX_MEMBERS, MAX_SEQUENCE
from pelotari.fyrehose.aio import AsyncClient
from pelotari.fyrehose.backbone import Backbone
from pelotari.fyrehose.cluster import (BecameActive, Config)
from pelotari.fyrehose.cluster_node import ClusterNode
from pelotari.fyrehose.floating import FloatingAddress

log = logging.getLogger("pelotari.fyrehose.cluster")

WRAP = MAX_SEQUENCE + 1


def nearest_position(sequence: int, reference: int) -> int:
    """The position (an unwrapped sequence) congruent to `sequence` mod 2^48 nearest to
    `reference`."""
    base = reference - (reference % WRAP) + sequence
    return min((base - WRAP, base, base + WRAP), key=lambda p: abs(p - reference))


class BackbonePlane:
    """The data plane of a member: positions in, the gate out (pelotari.fyrehose.cluster_node's
    interface). `journal` is the standby's subscription to the active (or None)."""

    def __init__(self, backbone: Backbone):
        self.backbone = backbone
        self.journal: Optional[AsyncClient] = None
        self._ref = 0  # a position known to be near the backbone's next sequence
        self.reference: Callable[[], int] = lambda: 0  # a position the cluster knows
        self.to_tell: list = []  # adopted clients, told by an unasked INFO once we serve

    def position(self) -> int:
        self._ref = nearest_position(self.backbone.next_sequence, self._ref)
        return self._ref

    def held(self) -> int:
        j = self.journal
        high = j.core.tracker.highest_sequence if j is not None else None
        ref = self.reference()
        if high is None or not ref:
            return 0
        return nearest_position(high, ref)

    def start(self, first: int) -> None:
        self.backbone.gate(0, 0)  # (closed while the first sequence changes)
        self.backbone.set_next_sequence(first % WRAP)
        self._ref = first

    def allow(self, limit: int, until: float) -> None:
        self.backbone.gate(limit % WRAP, until)

    def stop(self) -> None:
        self.backbone.gate(0, 0)

    def table(self) -> list:
        """The cluster clients among the backbone's subscribers: the standbys adopt them."""
        return [e for e in self.backbone.subscribers() if e[2] & CLUSTER]

    def adopt(self, entries) -> None:
        self.backbone.adopt(entries)
        self.to_tell = [(h, p) for h, p, _f, _left in entries]


class ClusterBackbone:
    """A cluster member: `await ClusterBackbone(...).start()`, then `await close()`. Its events
    (the core's and bully's) go to `on_event`."""

    def __init__(self, backbone: Backbone, host: str, *, peers: list[str], data_port: int,
                 bully_port: int, cluster_port: int, state_dir: str, name: bytes,
                 config: Optional[Config] = None,
                 on_event: Optional[Callable[[object], None]] = None,
                 key: Optional[bytes] = None,
                 answer: Optional[Callable[[bytes, tuple], Optional[bytes]]] = None,
                 floating: Optional[FloatingAddress] = None):
        self.backbone = backbone
        self.host = host
        self.peers = list(peers)
        self.data_port = data_port
        self.bully_port = bully_port
        self.cluster_port = cluster_port
        self.state_path = os.path.join(state_dir, f"cluster-{host}-{cluster_port}.json")
        self.state_dir = state_dir
        # Every datagram names the cluster and a digest of its member list: members started
        # with different --peers count each other's datagrams as another cluster's, not as
        # votes (two actives under one name otherwise).
        digest = hashlib.sha256(",".join(sorted([host, *self.peers])).encode()).hexdigest()[:8]
        self.name = name + b"#" + digest.encode()
        self.key = key
        self.answer = answer  # (--discover) clients' ASKs on the cluster port
        self.config = config or Config(cluster_size=len(self.peers) + 1)
        self.on_event = on_event or (lambda ev: None)
        self.plane = BackbonePlane(backbone)
        self.node: Optional[ClusterNode] = None
        self.failovers = 0
        self._info: Optional[bytes] = None
        # (--floating-address) prepared by the caller; held while this member serves
        self.floating = floating
        self._floating_epoch = None  # the epoch in which this member last served

    async def start(self) -> "ClusterBackbone":
        os.makedirs(self.state_dir, exist_ok=True)
        peers = [(p, self.cluster_port) for p in self.peers]
        # The member that sorts first founds bully's network; the others join it (a member
        # that finds it gone joins the next, or founds: ClusterCore._rejoin).
        first = min([self.host, *self.peers], key=lambda h: tuple(map(int, h.split("."))))
        self.node = await ClusterNode.start(
            self.host, self.bully_port, cluster_port=self.cluster_port, peers=peers,
            plane=self.plane, config=self.config, state_path=self.state_path, name=self.name,
            bully_leader=None if first == self.host else (first, self.bully_port),
            on_event=self._event, key=self.key)
        self.node.answer = self.answer
        core = self.node.core
        self.plane.reference = lambda: core.active_next or core.reserved
        self.node.on_tick = self._tick
        self._tick()
        # The member's journal: one subscription that follows the cluster's active (itself,
        # when it is) and keeps what it holds across failovers, so a new active's subscribers
        # can be repaired from it.
        members = tuple((h, self.data_port) for h in sorted([self.host, *self.peers]))
        self.plane.journal = await AsyncClient.connect(
            (self.host, self.data_port), bind=(self.host, 0), receive=False, cluster=members)
        return self

    async def close(self) -> None:
        """Stop sequencing, release the floating address, then the member, then the journal
        (the address is gone before the standbys see this member go)."""
        self.plane.stop()
        if self.floating is not None:
            self.floating.close()
            self._floating_events()
        if self.node is not None:
            await self.node.close()
        journal, self.plane.journal = self.plane.journal, None
        if journal is not None:
            await journal.close()

    # ---- events ---------------------------------------------------------------------------

    def _event(self, ev) -> None:
        if isinstance(ev, BecameActive):
            self.failovers += 1
        try:
            self.on_event(ev)
        finally:
            if self.node is not None:
                self._tick()

    def _tick(self) -> None:
        self._set_info()
        if self.floating is not None:
            core = self.node.core
            now = self.node._now()
            if core.may_issue(now) is not None:
                self._floating_epoch = core.epoch
            # Held from the first moment this member may sequence in its epoch until it is no
            # longer active or its lease lapsed (not while a reservation is merely used up):
            # only winning an epoch takes it, whatever strangers send.
            self.floating.want(core.role == "active" and now < core.lease_until
                               and self._floating_epoch == core.epoch)
            self._floating_events()

    def _floating_events(self) -> None:
        for ev in self.floating.events():
            self.on_event(ev)

    def _set_info(self) -> None:
        """The INFO a QUERY gets, when it changed. ACTIVE only once this member may sequence
        (its first reservation confirmed): a client that moves here is served at once."""
        core = self.node.core
        active = core.active if core.active is not None else ("0.0.0.0", 0)
        members = [(h, self.data_port) for h in sorted([self.host, *self.peers])][:MAX_MEMBERS]
        serving = core.may_issue(self.node._now()) is not None
        flags = (INFO_ACTIVE if serving else 0) | (INFO_NO_QUORUM if core.active is None else 0)
        info = refcodec.encode_info(bytes(16), core.epoch, active[0],
                                    self.data_port if core.active is not None else 0, flags,
                                    tuple(members))
        if info != self._info:
            self._info = info
            self.backbone.set_info(info)
        if serving and self.plane.to_tell:
            # The old active's clients (its table, adopted): an unasked INFO (64 bytes, once
            # per failover, to clients that sent the cluster KEEPALIVEs every 50 ms) makes them
            # QUERY at once instead of after their silence.
            clients, self.plane.to_tell = self.plane.to_tell, []
            self.backbone.send(info, clients)

    # ---- what /status shows ------------------------------------------------------------------

    def status(self) -> dict:
        """Role, epoch, the active, the standby's lag, failovers, the core's counters."""
        core = self.node.core
        now = self.node._now()
        lag = None
        held = self.plane.held()
        if core.role == "standby" and core.active_next and held:
            lag = max(0, core.active_next - 1 - held)
        return {"role": core.role, "epoch": core.epoch,
                "active": f"{core.active[0]}:{self.data_port}" if core.active else None,
                "may_sequence": core.may_issue(now) is not None,
                "promised": core.promised, "reserved": core.reserved,
                "held": self.plane.held(), "lag": lag, "became_active": self.failovers,
                "bully_id": core.bully.id, "stats": dict(core.stats),
                "floating": None if self.floating is None else {
                    "address": self.floating.text, "dev": self.floating.dev,
                    "held": self.floating.held, "gratuitous_arps": self.floating.garps_sent}}
