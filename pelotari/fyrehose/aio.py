"""asyncio fyrehose client: a DatagramProtocol adapter over the sans-IO core."""
import asyncio
import time
from dataclasses import replace
from typing import AsyncIterator, Dict, List, Optional, Tuple, Union

from pelotari.fyrehose.backbone import DEFAULT_PORT
from pelotari.fyrehose.client import (DEFAULT_MAX_QUEUED, DEFAULT_MAX_QUEUED_BYTES, Backlog, Item,
                                      PublishTimeout, parse_address)
from pelotari.fyrehose.core import ClientConfig, ClientCore
from pelotari.fyrehose.events import (BackboneDown, BackboneUp, Lost, Message, PublishConfirmed,
                                      PublishFailed, Resync)


class AsyncClient(asyncio.DatagramProtocol):
    """A fyrehose publisher/subscriber for asyncio programs.

    Use `client = await AsyncClient.connect(...)`, `await client.publish(data)` and
    `async for item in client.messages()`. The receive queue is bounded like Client's
    (`max_queued` items, `max_queued_bytes` bytes of DATA; overflow is reported as
    Lost(first, last, "overflow")). close() ends every messages() and wakes every receive().
    """

    def __init__(self, backbone: Tuple[str, int], config: ClientConfig, receive: bool = True,
                 max_queued: int = DEFAULT_MAX_QUEUED,
                 max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES):
        self.backbone = backbone
        self.config = config
        self._receive = receive
        self._loop = asyncio.get_running_loop()
        self._clock_offset = time.monotonic() - self._loop.time()
        self.core = ClientCore(backbone, self._now(), config)
        self._backlog = Backlog(max_queued, max_queued_bytes)
        self._ready = asyncio.Event()  # set when the backlog has items or the client closed
        self._futures: Dict[int, asyncio.Future] = {}
        self._timer: Optional[asyncio.TimerHandle] = None
        self._transport: Optional[asyncio.DatagramTransport] = None
        self.up = asyncio.Event()
        self._closed = False

    @classmethod
    async def connect(cls, backbone: Union[str, Tuple[str, int]] = f"127.0.0.1:{DEFAULT_PORT}", *,
                      bind: Union[str, Tuple[str, int]] = "0.0.0.0:0",
                      config: Optional[ClientConfig] = None, receive: bool = True,
                      max_queued: int = DEFAULT_MAX_QUEUED,
                      max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
                      **config_overrides) -> "AsyncClient":
        """Open the socket and start KEEPALIVEs."""
        cfg = replace(config or ClientConfig(), **config_overrides)
        Backlog(max_queued, max_queued_bytes)  # bad limits fail here, before a socket opens
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_datagram_endpoint(
            lambda: cls(parse_address(backbone), cfg, receive, max_queued, max_queued_bytes),
            local_addr=parse_address(bind, 0))
        return proto

    def _now(self) -> float:
        return self._loop.time() + self._clock_offset

    # ---- asyncio.DatagramProtocol --------------------------------------------------------

    def connection_made(self, transport) -> None:
        self._transport = transport
        self._pump()

    def datagram_received(self, data: bytes, addr) -> None:
        self.core.receive_datagram(data, addr[:2], self._now())
        self._pump()

    def error_received(self, exc: Exception) -> None:
        self.core.stats["socket_errors"] += 1

    def connection_lost(self, exc) -> None:
        self._shut()

    # ---- API -----------------------------------------------------------------------------

    @property
    def address(self) -> Tuple[str, int]:
        """The local (host, port)."""
        return self._transport.get_extra_info("sockname")[:2]

    async def publish(self, data: bytes, timeout: Optional[float] = None) -> Optional[int]:
        """Publish and wait for the backbone's DELIVER; None for NOSUBSCRIBE clients."""
        pid = self.core.publish(data, self._now())
        fut = None
        if pid is not None:
            fut = self._futures[pid] = self._loop.create_future()
        self._pump()
        if fut is None:
            return None
        wait = self.config.publish_timeout + 1.0 if timeout is None else timeout
        try:
            return await asyncio.wait_for(fut, wait)
        except asyncio.TimeoutError:
            raise PublishTimeout("no DELIVER came back from the backbone") from None

    async def publish_many(self, datas, timeout: Optional[float] = None) -> List[Optional[int]]:
        """Publish several messages (packed when `pack` is set); their sequence numbers."""
        pids = self.core.publish_many(datas, self._now())
        futs = []
        for pid in pids:
            fut = None
            if pid is not None:
                fut = self._futures[pid] = self._loop.create_future()
            futs.append(fut)
        self._pump()
        wait = self.config.publish_timeout + 1.0 if timeout is None else timeout
        try:
            return [None if f is None else await asyncio.wait_for(f, wait) for f in futs]
        except asyncio.TimeoutError:
            raise PublishTimeout("no DELIVER came back from the backbone") from None

    def set_flags(self, flags: int) -> None:
        """Change NOSUBSCRIBE/NOJOURNAL now; the backbone hears it in this KEEPALIVE."""
        self.core.set_flags(flags, self._now())
        self._pump()

    async def receive(self) -> Item:
        """The next Message, Lost or Resync in sequence order.

        Raises ConnectionAbortedError once the client is closed (a waiting call wakes up).
        """
        while True:
            if self._closed:
                raise ConnectionAbortedError("client closed")
            if self._backlog.items:
                return self._backlog.get()
            self._ready.clear()
            await self._ready.wait()

    async def messages(self) -> AsyncIterator[Item]:
        """Iterate over received items until the client closes."""
        while True:
            try:
                item = await self.receive()
            except ConnectionAbortedError:
                return
            yield item

    def stats(self) -> dict:
        """Client counters (datagrams, duplicates, requests, lost, overflow, queued, ...)."""
        return {**self.core.stats, "journal": len(self.core.journal),
                "held": self.core.tracker.held_count, "queued": len(self._backlog),
                "overflow": self._backlog.dropped_messages}

    async def close(self) -> None:
        """Close the socket; pending publishes fail."""
        if self._timer:
            self._timer.cancel()
        if self._transport:
            self._transport.close()
        for fut in self._futures.values():
            if not fut.done():
                fut.set_exception(ConnectionAbortedError("client closed"))
        self._shut()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---- plumbing ------------------------------------------------------------------------

    def _shut(self) -> None:
        self._closed = True
        self._backlog.clear()
        self._ready.set()  # wakes every receive(), which then raises

    def _pump(self) -> None:
        if self._closed or self._transport is None:
            return
        core = self.core
        now = self._now()
        if core.get_timer() <= now:
            core.handle_timer(now)
        for data, addr in core.datagrams_to_send():
            self._transport.sendto(data, addr)
        while (ev := core.next_event()) is not None:
            if isinstance(ev, (Message, Lost, Resync)):
                if self._receive and self._backlog.put(ev):
                    self._ready.set()
            elif isinstance(ev, PublishConfirmed):
                fut = self._futures.pop(ev.publish_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(ev.sequence)
            elif isinstance(ev, PublishFailed):
                fut = self._futures.pop(ev.publish_id, None)
                if fut is not None and not fut.done():
                    fut.set_exception(PublishTimeout(f"publish {ev.publish_id}: {ev.reason}"))
            elif isinstance(ev, BackboneUp):
                self.up.set()
            elif isinstance(ev, BackboneDown):
                self.up.clear()
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, core.get_timer() - self._now())
        self._timer = self._loop.call_later(delay, self._pump)
