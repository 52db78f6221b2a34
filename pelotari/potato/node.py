"""A potato client on asyncio: the sans-IO core (core.py) behind a transport (transport.py).

The transport carries whole messages between named peers (TCP or WebRTC data channels); this
adapter hands them to the core, sends what the core queues, keeps one loop timer at the core's
get_timer(), and delivers the core's events to a callback.

`keep_connected(host, port)` stays peers with a client for good: it connects, waits for that
peer to go down, and connects again; a failed attempt is retried after a delay that doubles
from `reconnect_min` (0.5 s) up to `reconnect_max` (10 s), each wait randomized by ±25 %. The
delay starts again from `reconnect_min` once a connection has lasted `reconnect_max`. Every
attempt is a task of its own: `close()` cancels them at once.
"""
import asyncio
import logging
import random
import time
from collections.abc import Callable

from pelotari.adapter import CoreTimer, deliver
from pelotari.potato.core import Config, PotatoNode
from pelotari.potato.wire import INITIAL

log = logging.getLogger("pelotari.potato")

TRANSPORTS = ("tcp", "webrtc")
REPLIES = (b'{"type":"direct_election_response"', b'{"type":"indirect_election_response"')


class Node:
    """One potato client: a name, a listening address, peers by name."""

    def __init__(self, name: str, host: str, port: int, *, transport: str = "tcp",
                 config: Config | None = None, frame: str = INITIAL,
                 on_event: Callable[[object], None] = lambda ev: None,
                 reconnect_min: float = 0.5, reconnect_max: float = 10.0, **transport_args):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport is one of {', '.join(TRANSPORTS)}")
        if not 0 < reconnect_min <= reconnect_max:
            raise ValueError("need 0 < reconnect_min <= reconnect_max")
        self.name = name
        self.reconnect_min, self.reconnect_max = reconnect_min, reconnect_max
        self.on_event = on_event
        self.core = PotatoNode(name, time.monotonic(), config, frame)
        from pelotari.potato import transport as tr
        cls = tr.TcpTransport if transport == "tcp" else tr.WebRtcTransport
        self.transport = cls(name, host, port, on_peer_up=self._up, on_peer_down=self._down,
                             on_message=self._message, **transport_args)
        self.browsers = None  # a BrowserTransport once add_browsers() made one
        self._timer: CoreTimer | None = None  # made on the running loop, at the first use
        self._closed = False
        self._keepers: set[asyncio.Task] = set()  # keep_connected tasks
        self._gone: dict[str, list[asyncio.Future]] = {}  # peer -> waiting for its down

    # ---- life ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen for peers."""
        await self.transport.start()
        self._process_events()

    def add_browsers(self, host: str, **transport_args):
        """A second transport for pages (pelotari.potato.page): WebRTC links signaled over
        their WebSocket, with ICE on `host`. A name is one peer across both transports; a
        connection this node opens takes its name from a page that holds it."""
        from pelotari.potato.transport import BrowserTransport

        self.browsers = BrowserTransport(self.name, host, on_peer_up=self._up,
                                         on_peer_down=self._down, on_message=self._message,
                                         **transport_args)
        self.browsers.taken = lambda name: name in self.transport._peers
        self.transport.taken = lambda name: name in self.browsers._peers
        # A peer we connect to (--connect) wins its name back from a page that took it.
        self.transport.yield_name = self.browsers.give_up
        return self.browsers

    def _carrier(self, peer: str):
        """The transport that holds this peer."""
        if self.browsers is not None and peer in self.browsers._peers:
            return self.browsers
        return self.transport

    async def connect(self, host: str, port: int) -> str:
        """Become peers with the client at host:port; its name."""
        return await self.transport.connect(host, port)

    def keep_connected(self, host: str, port: int, *,
                       on_connected: Callable[[str], None] = lambda peer: None,
                       on_failed: Callable[[Exception, float | None], None] =
                       lambda exc, retry_in: None) -> asyncio.Task:
        """Be peers with the client at host:port until close(): connect now, and again (with
        backoff) whenever it goes down or an attempt fails. on_connected(name) after each
        connection; on_failed(error, seconds until the next attempt, None: no more)."""
        task = asyncio.get_running_loop().create_task(
            self._keep(host, port, on_connected, on_failed))
        self._keepers.add(task)
        task.add_done_callback(self._keepers.discard)
        return task

    async def _keep(self, host, port, on_connected, on_failed) -> None:
        from pelotari.potato.transport import PeerRefused

        loop = asyncio.get_running_loop()
        delay = self.reconnect_min
        while not self._closed:
            try:
                peer = await self.transport.connect(host, port)
            except Exception as exc:  # refused, unreachable, timed out, or aiortc failing
                if isinstance(exc, PeerRefused) and exc.peer in self.transport.peers():
                    peer = exc.peer  # connected already (it connected to us): wait for its down
                elif isinstance(exc, PeerRefused) and exc.reason == "own_name":
                    on_failed(exc, None)  # ourselves: no use trying again
                    return
                else:
                    wait = delay * random.uniform(0.75, 1.25)
                    on_failed(exc, wait)
                    delay = min(delay * 2, self.reconnect_max)
                    await asyncio.sleep(wait)
                    continue
            else:
                on_connected(peer)
            since = loop.time()
            await self._until_down(peer)
            if loop.time() - since >= self.reconnect_max:
                delay = self.reconnect_min
            wait = delay * random.uniform(0.75, 1.25)
            delay = min(delay * 2, self.reconnect_max)
            await asyncio.sleep(wait)

    async def _until_down(self, peer: str) -> None:
        if peer not in self.transport.peers():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._gone.setdefault(peer, []).append(waiter)
        try:
            await waiter
        finally:
            waiters = self._gone.get(peer, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._gone.pop(peer, None)

    async def close(self) -> None:
        """Stop the connection attempts, the timer and the transport."""
        self._closed = True
        for task in list(self._keepers):
            task.cancel()
        await asyncio.gather(*self._keepers, return_exceptions=True)
        if self._timer is not None:
            self._timer.cancel()
        if self.browsers is not None:
            await self.browsers.close()
        await self.transport.close()

    # ---- commands --------------------------------------------------------------------------

    def send(self, to: str, body) -> str:
        """A direct message; its identifier."""
        return self._call(lambda now: self.core.send_direct(to, body, now))

    def broadcast(self, body) -> str:
        """A broadcast; its identifier."""
        return self._call(lambda now: self.core.broadcast(body, now))

    def propose(self) -> str | None:
        """Run an election for a new frame (None: ours is still open)."""
        return self._call(lambda now: self.core.propose(now))

    @property
    def frame(self) -> str:
        return self.core.frame

    def peers(self) -> list[str]:
        return sorted(self.core.peers)

    # ---- the transport's side --------------------------------------------------------------

    def _up(self, peer: str) -> None:
        self._call(lambda now: self.core.peer_up(peer, now))

    def _down(self, peer: str) -> None:
        for waiter in self._gone.pop(peer, []):
            if not waiter.done():
                waiter.set_result(None)
        self._call(lambda now: self.core.peer_down(peer, now))

    def _message(self, peer: str, data: bytes) -> None:
        self._call(lambda now: self.core.receive(peer, data, now))

    # ---- the core's side -------------------------------------------------------------------

    def _call(self, fn):
        result = fn(time.monotonic())
        self._process_events()
        return result

    def _process_events(self) -> None:
        """After any call into the core: send what it queued, deliver its events, re-arm the
        timer if its time changed."""
        if self._closed:
            return
        for peer, data in self.core.messages_to_send():
            # An election response answers that peer's request: the transport sends it only
            # within what the peer sent us (wire.encode puts `type` first).
            if not self._carrier(peer).send(peer, data, reply=data.startswith(REPLIES)):
                self.core.stats["send_dropped"] += 1
        while (ev := self.core.next_event()) is not None:
            deliver(self.on_event, ev, log)  # (a handler's bug must not stop the timer)
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = CoreTimer(loop, self._on_timer, time.monotonic() - loop.time())
        self._timer.arm(self.core.get_timer())

    def _on_timer(self, when: float) -> None:
        now = time.monotonic()
        due = self.core.get_timer()
        if due is not None and due <= now:
            self.core.handle_timer(now)
        self._process_events()
