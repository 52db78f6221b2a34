"""asyncio fyrehose client: a DatagramProtocol adapter over the sans-IO core."""
import asyncio
import time
from dataclasses import replace
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Tuple, Union

from pelotari.adapter import CoreTimer
from pelotari.fyrehose.backbone import DEFAULT_PORT
from pelotari.fyrehose.client import (DEFAULT_MAX_QUEUED, DEFAULT_MAX_QUEUED_BYTES, Backlog, Item,
                                      _Adapter, _publish_timeout, open_client_socket,
                                      parse_address)
from pelotari.fyrehose.core import ClientConfig, ClientCore


class AsyncClient(_Adapter, asyncio.DatagramProtocol):
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
        # The core's clock is time.monotonic(), like Client's; the loop's may differ by an offset.
        self._clock_offset = time.monotonic() - self._loop.time()
        self.core = ClientCore(backbone, self._now(), config)
        self._backlog = Backlog(max_queued, max_queued_bytes)
        self._ready = asyncio.Event()  # set when the backlog has items or the client closed
        self._futures: Dict[int, asyncio.Future] = {}
        self._timer = CoreTimer(self._loop, self._handle_timer, self._clock_offset)
        self._transport: Optional[asyncio.DatagramTransport] = None
        self._up = asyncio.Event()
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
        address = parse_address(backbone)
        # Large buffers, as Client's: a burst (a failover's re-sends, a repair) must not
        # overflow the kernel's default 208 KiB.
        sock = open_client_socket(parse_address(bind, 0))
        try:
            _, proto = await loop.create_datagram_endpoint(
                lambda: cls(address, cfg, receive, max_queued, max_queued_bytes), sock=sock)
        except BaseException:
            sock.close()
            raise
        return proto

    def _now(self) -> float:
        return self._loop.time() + self._clock_offset

    # ---- asyncio.DatagramProtocol --------------------------------------------------------

    def connection_made(self, transport) -> None:
        self._transport = transport
        self.core.handle_timer(self._now())  # the first KEEPALIVE now, before any PUSH
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
    def up(self) -> asyncio.Event:
        """Set while the backbone answers KEEPALIVEs."""
        return self._up

    @property
    def address(self) -> Tuple[str, int]:
        """The local (host, port)."""
        return self._transport.get_extra_info("sockname")[:2]

    async def publish(self, data: bytes, timeout: Optional[float] = None) -> Optional[int]:
        """Publish and wait for the backbone's DELIVER; None for NOSUBSCRIBE clients."""
        fut, = self._command(lambda now: self._futures_for(
            [self.core.publish(data, now)], self._loop.create_future))
        if fut is None:
            return None
        with _publish_timeout():
            return await asyncio.wait_for(fut, self._wait(timeout))

    async def publish_many(self, datas, timeout: Optional[float] = None) -> List[Optional[int]]:
        """Publish several messages (packed when `pack` is set); their sequence numbers."""
        futs = self._command(lambda now: self._futures_for(
            self.core.publish_many(datas, now), self._loop.create_future))
        wait = self._wait(timeout)
        with _publish_timeout():
            return [None if f is None else await asyncio.wait_for(f, wait) for f in futs]

    def set_flags(self, flags: int) -> None:
        """Change NOSUBSCRIBE/NOJOURNAL now; the backbone hears it in this KEEPALIVE."""
        self._command(lambda now: self.core.set_flags(flags, now))

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
        return {**self._core_stats(), **self._queue_stats()}

    async def close(self) -> None:
        """Close the socket; pending publishes fail."""
        self._timer.cancel()
        if self._transport:
            self._transport.close()
        self._abort_futures()
        self._shut()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---- plumbing (aioquic asyncio/protocol.py: _process_events, then _transmit) ---------

    def _command(self, run: Callable[[float], Any]) -> Any:
        result = run(self._now())
        self._pump()
        return result

    def _pump(self) -> None:
        self._process_events(iter(self.core.next_event, None))
        self._transmit()

    def _handle_timer(self, when: float) -> None:
        self.core.handle_timer(max(when, self._now()))  # the loop may call back a hair early
        self._pump()

    def _transmit(self) -> None:
        """Send what the core queued; re-arm the timer only if the core's timer moved."""
        if self._closed or self._transport is None:
            return
        sendto = self._transport.sendto
        for data, addr in self.core.datagrams_to_send():
            sendto(data, addr)
        self._timer.arm(self.core.get_timer())

    def _queue(self, item: Item) -> None:
        if not self._closed and self._backlog.put(item):
            self._ready.set()

    def _shut(self) -> None:
        self._closed = True
        self._backlog.clear()
        self._ready.set()  # wakes every receive(), which then raises
