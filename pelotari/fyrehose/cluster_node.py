"""asyncio adapter for a backbone cluster member (pelotari.fyrehose.cluster.ClusterCore): bully's
TCP port, the cluster port (UDP for the cluster datagrams, TCP for the watch connections), the
stored state, and the data plane it gates.

The connections are pelotari.bully.node's (this adapter is its Node with two listening ports
and a datagram endpoint). The data plane is anything with:

    position() -> int      the next position the backbone will sequence (unwrapped)
    held() -> int          the highest position our journal holds (a standby's)
    start(first)           sequence from position `first` (we won an epoch)
    allow(limit, until)    sequence up to position `limit`, until `until` (time.monotonic())
    stop()                 sequence nothing (a standby's backbone)
    table() -> [(host, port, flags, seconds_left)]   the clients to tell the standbys of
    adopt(entries)         take over the old active's clients (we won an epoch)

It is synchronised every `tick` seconds and whenever the core's state changes, so the backbone
never sequences past what the core allows: `allow` carries the lease's end, which the backbone
checks itself (a stalled event loop cannot extend it).
"""
import asyncio
import json
import logging
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Callable

from pelotari.bully.node import BACKLOG, BindError, Node
from pelotari.fyrehose.cluster import (MAX_FIELD, BecameActive, ClusterCore, Config, State,
                                       SteppedDown)
from pelotari.fyrehose.discover import MAGIC as DISCOVERY_MAGIC

log = logging.getLogger("pelotari.fyrehose.cluster")

Address = tuple[str, int]
TICK = 0.005  # data plane <-> core
MEMBER_RATE = 2000.0  # cluster datagrams a second taken from one member host ...
MEMBER_BURST = 500.0  # ... and at once


class StateFile:
    """A member's State in a JSON file: written to a temporary file, fsynced, renamed (a crash
    leaves the old state or the new one, never half of one)."""

    def __init__(self, path: str):
        self.path = path

    def load(self) -> State | None:
        """The stored state, or None (no file: a member without stored state)."""
        try:
            with open(self.path) as f:
                raw = json.load(f)
            values = raw["promised"], raw["reserved"]
            if not all(type(v) is int and 0 <= v < MAX_FIELD for v in values):
                raise ValueError("values out of range")
            return State(*values)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{self.path}: not a cluster state file ({exc})") from None

    def save(self, state: State) -> None:
        """Store it durably before anything that depends on it is sent."""
        folder = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".state-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"promised": state.promised, "reserved": state.reserved}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


class MemoryPlane:
    """A data plane without a backbone (tests, the simulator's twin): positions advance only
    when `advance()` is called, and never past what the core allows."""

    def __init__(self):
        self.next = 0
        self.high = 0
        self.limit = -1
        self.until = float("-inf")
        self.issued: list[int] = []
        self.clients: list[tuple[str, int, int, float]] = []  # what table() says
        self.adopted: list[tuple[str, int, int, float]] = []

    def position(self) -> int:
        return self.next

    def held(self) -> int:
        return self.high

    def start(self, first: int) -> None:
        self.next = first

    def allow(self, limit: int, until: float) -> None:
        self.limit, self.until = limit, until

    def stop(self) -> None:
        self.limit, self.until = -1, float("-inf")

    def table(self) -> list[tuple[str, int, int, float]]:
        return list(self.clients)

    def adopt(self, entries) -> None:
        self.adopted += entries

    def advance(self, count: int) -> list[int]:
        """Sequence up to `count` messages now, as the backbone would; the positions."""
        if time.monotonic() >= self.until:
            return []
        out = list(range(self.next, min(self.limit + 1, self.next + count)))
        self.next += len(out)
        self.high = max(self.high, self.next - 1)
        self.issued += out
        return out


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, node: "ClusterNode"):
        self.node = node

    def datagram_received(self, data, addr):
        self.node._datagram(data, addr)

    def error_received(self, exc):
        self.node.stats["datagram_errors"] += 1


class ClusterNode(Node):
    """A running cluster member. `await ClusterNode.start(host, peers=[...], ...)`, then
    `await close()`."""

    def __init__(self, host: str, port: int, *, cluster_port: int, peers: list[Address],
                 plane, config: Config | None = None, bully_leader: Address | None = None,
                 state_path: str | None = None, name: bytes = b"fyrehose",
                 on_event: Callable[[object], None] | None = None, tick: float = TICK,
                 key: bytes | None = None):
        super().__init__(host, port, on_event=on_event)
        self.cluster_port = cluster_port
        self.peers = [(p[0], int(p[1])) for p in peers]
        self.plane = plane
        self.cluster_config = config or Config(cluster_size=len(self.peers) + 1)
        self.bully_leader = bully_leader
        self.state_file = StateFile(state_path) if state_path else None
        self.name = name
        self.key = key
        self._member_hosts = {p[0] for p in self.peers}
        self._buckets: dict[str, tuple[float, float]] = {}  # member host -> (tokens, when)
        self.tick = tick
        self._udp: asyncio.DatagramTransport | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._ticker: asyncio.Task | None = None
        self._active = False
        self.on_tick: Callable[[], None] | None = None  # after each synchronisation
        # (--discover) A client's ASK, from any host, to its ANSWER (or None): see
        # pelotari.fyrehose.discover. None: ASKs are dropped as any non-member's datagram.
        self.answer: Callable[[bytes, Address], bytes | None] | None = None
        user = self.on_event

        def handler(ev):
            self._deliver_event(ev)  # the data plane first: it starts before it is allowed
            user(ev)
        self.on_event = handler

    @classmethod
    async def start(cls, host: str, port: int = 2324, **kwargs) -> "ClusterNode":
        """Listen on bully's port, the cluster port (TCP and UDP), build the core, run."""
        node = cls(host, port, **kwargs)
        await node.open()
        return node

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, port))
            sock.listen(BACKLOG)
        except OSError as exc:
            sock.close()
            raise BindError((self.host, port), exc) from None
        return sock

    async def open(self) -> None:
        from pelotari.bully.node import _Stream

        state = self.state_file.load() if self.state_file else None
        socks = [self._listen(self.port), self._listen(self.cluster_port)]
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            try:  # (a flood from elsewhere must not crowd the members' leases out)
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            except OSError:
                pass
            udp.bind((self.host, self.cluster_port))
        except OSError as exc:
            udp.close()
            for s in socks:
                s.close()
            raise BindError((self.host, self.cluster_port), exc) from None
        self.core = ClusterCore(
            (self.host, self.cluster_port), self.peers, self._now(), bully_port=self.port,
            bully_leader=self.bully_leader, config=self.cluster_config, name=self.name,
            incarnation=secrets.randbits(64), state=state,
            save=self.state_file.save if self.state_file else None, key=self.key)
        for s in socks:
            self._servers.append(await self._loop.create_server(lambda: _Stream(self), sock=s))
        self._server = self._servers[0]
        self._udp, _ = await self._loop.create_datagram_endpoint(lambda: _Datagrams(self),
                                                                 sock=udp)
        self._ticker = self._loop.create_task(self._tick())
        self._process_events()

    async def close(self) -> None:
        """Stop sequencing first (a watcher must never see us close while we sequence), then
        every socket."""
        if self._closed:
            return
        self.plane.stop()
        if self._ticker is not None:
            self._ticker.cancel()
        for server in self._servers[1:]:
            server.close()
        if self._udp is not None:
            self._udp.close()
        await super().close()
        for server in self._servers[1:]:
            await server.wait_closed()

    def kill(self) -> None:
        """Die as a killed process does (tests): every connection reset at once, nothing
        flushed, nothing said."""
        self._closed = True
        self.plane.stop()
        self._timer.cancel()
        if self._ticker is not None:
            self._ticker.cancel()
        for stream in list(self._streams.values()):
            stream.detached = True
            stream.transport.abort()
        for task in self._pending.values():
            task.cancel()
        for server in self._servers:
            server.close()
        if self._udp is not None:
            self._udp.abort()

    # ---- the core's datagrams, and the data plane ------------------------------------------

    def _datagram(self, data: bytes, addr) -> None:
        if self._closed:
            return
        if self.answer is not None and data[:len(DISCOVERY_MAGIC)] == DISCOVERY_MAGIC:
            reply = self.answer(data, (addr[0], addr[1]))  # (rate-limited; as large as the ASK)
            if reply is not None and self._udp is not None and not self._udp.is_closing():
                self._udp.sendto(reply, addr)
            return
        if addr[0] not in self._member_hosts:  # counted, before any work (floods)
            self.stats["cluster_dropped_not_member"] += 1
            return
        now = self._now()
        if not self._allowed(addr[0], now):  # (before the tag's HMAC and the decoding)
            self.stats["cluster_dropped_rate"] += 1
            return
        try:
            self.core.receive_datagram(data, (addr[0], addr[1]), now)
        finally:
            self._process_events()

    def _allowed(self, host: str, now: float) -> bool:
        """A member host's datagrams, at most MEMBER_RATE a second (MEMBER_BURST at once): a
        member sends tens (LEASEs and their answers every 50 ms, TABLE, RESERVE), so a flood
        forged from its address costs a lookup each, not an HMAC and a decoding, and cannot
        hold up this member's own leases."""
        tokens, then = self._buckets.get(host, (MEMBER_BURST, now))
        tokens = min(MEMBER_BURST, tokens + (now - then) * MEMBER_RATE)
        if tokens < 1:
            self._buckets[host] = (tokens, now)
            return False
        self._buckets[host] = (tokens - 1, now)
        return True

    def _send_datagrams(self) -> None:
        for data, dst in self.core.datagrams_to_send():
            if self._udp is not None and not self._udp.is_closing():
                self._udp.sendto(data, dst)

    def _process_events(self, not_before: float | None = None) -> None:
        super()._process_events(not_before)
        if not self._closed and not self._pumping:
            self._sync_plane()
            self._send_datagrams()  # (a reservation the data plane's progress asked for)
            if self.on_tick is not None:
                self.on_tick()

    def _sync_plane(self) -> None:
        """Tell the data plane what it may do, and the core what it did."""
        core, now = self.core, self._now()
        limit = core.may_issue(now)
        if limit is None:
            if self._active:
                self._active = False
                self.plane.stop()
            core.holding(self.plane.held())
            return
        core.issued(self.plane.position(), now)
        limit = core.may_issue(now)
        if limit is not None:  # (None: its reservation used up; the gate holds at its end)
            self.plane.allow(limit, core.lease_until)
        self._active = True
        if core.table_due(now):
            core.publish_table(self.plane.table(), now)

    async def _tick(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.tick)
            self._process_events()

    def _deliver_event(self, ev) -> None:
        if isinstance(ev, BecameActive):
            self.plane.start(ev.first)
            self.plane.adopt(self.core.adoptable(self._now()))
        elif isinstance(ev, SteppedDown):
            self._active = False
            self.plane.stop()


__all__ = ["ClusterNode", "MemoryPlane", "StateFile"]
