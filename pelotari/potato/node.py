"""A potato client on asyncio: the sans-IO core (core.py) behind a transport (transport.py).

The transport carries whole messages between named peers (TCP or WebRTC data channels); this
adapter hands them to the core, sends what the core queues, keeps one loop timer at the core's
get_timer(), and delivers the core's events to a callback.
"""
import asyncio
import time
from collections.abc import Callable

from pelotari.potato.core import Config, PotatoNode
from pelotari.potato.wire import INITIAL

TRANSPORTS = ("tcp", "webrtc")


class Node:
    """One potato client: a name, a listening address, peers by name."""

    def __init__(self, name: str, host: str, port: int, *, transport: str = "tcp",
                 config: Config | None = None, frame: str = INITIAL,
                 on_event: Callable[[object], None] = lambda ev: None, **transport_args):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport is one of {', '.join(TRANSPORTS)}")
        self.name = name
        self.on_event = on_event
        self.core = PotatoNode(name, time.monotonic(), config, frame)
        from pelotari.potato import transport as tr
        cls = tr.TcpTransport if transport == "tcp" else tr.WebRtcTransport
        self.transport = cls(name, host, port, on_peer_up=self._up, on_peer_down=self._down,
                             on_message=self._message, **transport_args)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._closed = False

    # ---- life ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen for peers."""
        await self.transport.start()
        self._pump()

    async def connect(self, host: str, port: int) -> str:
        """Become peers with the client at host:port; its name."""
        return await self.transport.connect(host, port)

    async def close(self) -> None:
        """Stop the timer and the transport."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
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
        self._call(lambda now: self.core.peer_down(peer, now))

    def _message(self, peer: str, data: bytes) -> None:
        self._call(lambda now: self.core.receive(peer, data, now))

    # ---- the core's side -------------------------------------------------------------------

    def _call(self, fn):
        result = fn(time.monotonic())
        self._pump()
        return result

    def _pump(self) -> None:
        if self._closed:
            return
        for peer, data in self.core.messages_to_send():
            if not self.transport.send(peer, data):
                self.core.stats["send_dropped"] += 1
        while (ev := self.core.next_event()) is not None:
            self.on_event(ev)
        when = self.core.get_timer()
        if when == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = when
        if when is not None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, when - time.monotonic())
            self._timer = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, None
        now = time.monotonic()
        due = self.core.get_timer()
        if due is not None and due <= now:
            self.core.handle_timer(now)
        self._pump()
