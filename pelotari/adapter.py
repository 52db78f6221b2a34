"""What the asyncio adapters of the sans-IO cores share (aioquic's asyncio/protocol.py shape).

A core takes input and `now` and leaves datagrams (or messages), events and one timer; after
every call into it an adapter runs its one `_process_events`: send what the core queued, hand
over its events, and `CoreTimer.arm(core.get_timer())`, which touches the loop only when that
time changed. The pieces, each usable alone:

* `CoreTimer`: the one loop timer kept at the core's get_timer();
* `Trouble`: socket errors and other trouble counted, each kind reported once as a
  `NodeWarning` event and a log warning;
* `EventQueue`: events for an async consumer, bounded (a slow consumer costs memory up to the
  bound only: the rest is dropped and counted), ended by close();
* `send_datagrams` / `receive_datagrams`: a non-blocking UDP socket read and written directly.
  A send never blocks and never queues: a full send buffer drops the datagram (UDP loses it on
  the wire as well), counted in `send_dropped`;
* `DatagramNode`: all of the above put together, the base of the adapters of the UDP cores
  (prototari, swarm).
"""
import asyncio
import errno
import logging
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Optional

READ_BATCH = 64  # datagrams read per wake-up before the loop gets a turn
MAX_EVENTS = 4096  # events waiting for the consumer; past it, new ones are dropped and counted

Address = tuple  # (host, port)


class CoreTimer:
    """The one loop timer of an adapter, kept at the core's get_timer(): `arm(when)` after every
    call into the core re-arms it only when `when` changed (None: no timer). `on_due(when)` runs
    when it fires. `offset` is the core's clock minus the loop's (loop.time()). `rearms` counts
    the timers armed (what the adapters' tests count over a burst of datagrams). With `lazy`, a
    deadline that moves later keeps the timer armed sooner (on_due must then check that the
    core is due, and arm again when not): a core whose deadline moves with every connection
    is not re-armed each time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_due: Callable[[float], None],
                 offset: float = 0.0, lazy: bool = False):
        self._loop = loop
        self._on_due = on_due
        self._offset = offset
        self._lazy = lazy
        self._handle: Optional[asyncio.TimerHandle] = None
        self._when: Optional[float] = None
        self.rearms = 0

    @property
    def when(self) -> Optional[float]:
        """When the armed timer fires (core clock); None if none is armed."""
        return self._when

    def arm(self, when: Optional[float]) -> None:
        """Keep the timer at `when` (core clock; None: none)."""
        if when == self._when or (self._lazy and when is not None and self._when is not None
                                   and when > self._when):
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._when = when
        if when is not None:
            self._handle = self._loop.call_at(when - self._offset, self._fire)
            self.rearms += 1

    def cancel(self) -> None:
        """No timer from now on (until the next arm)."""
        self.arm(None)

    def _fire(self) -> None:
        when, self._when, self._handle = self._when, None, None
        self._on_due(when)


@dataclass(frozen=True)
class NodeWarning:
    """A kind of trouble not seen before (a socket error: its direction and errno), reported
    once; every occurrence is counted in the node's stats."""

    kind: str  # e.g. "send ENETUNREACH"
    message: str


class Trouble:
    """Counts trouble into `stats` and reports each kind once: a log warning and a NodeWarning
    given to `report` (an event queue's put)."""

    def __init__(self, log: logging.Logger, stats: Counter, report: Callable[[Any], Any]):
        self.log = log
        self.stats = stats
        self.report = report
        self.reported: set[str] = set()

    def warn_once(self, kind: str, message: str, exc_info: bool = False) -> None:
        """Report a kind of trouble, unless it was reported before."""
        if kind in self.reported:
            return
        self.reported.add(kind)
        self.log.warning("%s", message, exc_info=exc_info)
        self.report(NodeWarning(kind, message))

    def socket_error(self, direction: str, exc: OSError, to: Optional[Address] = None,
                     counter: Optional[str] = None) -> None:
        """Count a failed send or receive (in `counter`, default `<direction>_errors`) and
        report its kind (direction and errno) once."""
        self.stats[counter or f"{direction}_errors"] += 1
        name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        kind = f"{direction} {name}"
        if kind in self.reported:  # (a flood of errors builds no message)
            return
        where = f" to {to[0]}:{to[1]}" if to is not None else ""
        if counter == "send_dropped":
            message = (f"cannot send{where}: the socket's send buffer is full; datagrams are "
                       "dropped (counted in send_dropped; not reported again)")
        else:
            late = " (an ICMP error for an earlier datagram)" if direction == "receive" else ""
            message = (f"cannot {direction}{where}: {exc.strerror or exc}{late} (counted in "
                       f"{direction}_errors; further {name} errors are not reported)")
        self.warn_once(kind, message)


class _Closed:
    """The end of the event stream (put in the queue by close())."""


_CLOSED = _Closed()


class EventQueue:
    """A node's events for an async consumer: at most `limit` wait (past it, new ones are
    dropped and counted in stats["events_dropped"]); after close(), get() gives None and
    iteration ends."""

    def __init__(self, stats: Counter, limit: int = MAX_EVENTS):
        self._queue: asyncio.Queue = asyncio.Queue(limit)
        self._stats = stats

    def put(self, event: Any) -> None:
        """Queue an event (dropped and counted when the queue is full)."""
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self._stats["events_dropped"] += 1

    async def get(self, timeout: Optional[float] = None) -> Any:
        """The next event, or None after timeout or close()."""
        try:
            ev = await asyncio.wait_for(self._queue.get(), timeout)
        except asyncio.TimeoutError:
            return None
        if ev is _CLOSED:
            self._queue.put_nowait(ev)  # every later call ends too
            return None
        return ev

    async def __aiter__(self) -> AsyncIterator[Any]:
        while True:
            ev = await self._queue.get()
            if ev is _CLOSED:
                self._queue.put_nowait(ev)
                return
            yield ev

    def close(self) -> None:
        """End the stream after the events queued (the oldest one goes if there is no room)."""
        if self._queue.full():
            self._queue.get_nowait()
            self._stats["events_dropped"] += 1
        self._queue.put_nowait(_CLOSED)


def deliver(on_event: Callable[[Any], Any], event: Any, log: logging.Logger) -> None:
    """on_event(event) for an adapter that hands events to a callback: a bug in the handler is
    logged and goes no further (the adapter has its sends to finish and its timer to re-arm)."""
    try:
        on_event(event)
    except Exception:  # noqa: BLE001 (any bug in the handler)
        log.exception("event handler failed on %r", event)


def send_datagrams(sock: socket.socket, datagrams: Iterable[tuple[bytes, Address]],
                   trouble: Trouble) -> None:
    """sendto each (data, address) on a non-blocking socket; a full send buffer drops the
    datagram (send_dropped), any other error is counted (send_errors)."""
    for data, to in datagrams:
        try:
            sock.sendto(data, to)
        except (BlockingIOError, InterruptedError) as exc:
            trouble.socket_error("send", exc, to, "send_dropped")
        except OSError as exc:
            trouble.socket_error("send", exc, to)


def receive_datagrams(sock: socket.socket, size: int,
                      deliver: Callable[[bytes, Address], None], trouble: Trouble,
                      batch: int = READ_BATCH) -> int:
    """Read up to `batch` datagrams of at most `size` bytes from a non-blocking socket, each
    to deliver(data, (host, port)); how many. A receive error (an ICMP error for an earlier
    send) is counted (receive_errors) and reading goes on."""
    n = 0
    for _ in range(batch):
        try:
            data, source = sock.recvfrom(size)
        except (BlockingIOError, InterruptedError):
            break
        except OSError as exc:
            trouble.socket_error("receive", exc)
            continue
        deliver(data, source[:2])
        n += 1
    return n


class DatagramNode:
    """Base of an asyncio adapter whose sans-IO core speaks UDP (receive_datagram(data, source,
    now), datagrams_to_send(), next_event(), get_timer(), handle_timer(now)).

    A subclass builds its core and calls `_attach`; it provides `_now()` (the core's clock) and
    may replace `_receive` (one datagram into the core), `_on_timer` and `_process_events`
    (calling this one). Every socket is non-blocking and read directly (loop.add_reader, at
    most READ_BATCH datagrams per wake-up, then one `_process_events`); `_sock` sends; errors
    are counted into `stats` and each kind reported once (a NodeWarning event); events wait in a
    bounded EventQueue; the timer is re-armed only when the core's get_timer() changes."""

    core: Any
    _closed = True  # until _attach

    def _attach(self, loop: asyncio.AbstractEventLoop, sockets: list, stats: Counter,
                log: logging.Logger, read_size: int, *, max_events: int = MAX_EVENTS,
                offset: float = 0.0, readers: Optional[list] = None) -> None:
        """Start: read `sockets` (the first also sends) with `readers` (one callback per socket,
        given the socket; default `_readable`), count into `stats`, log to `log`; `offset`: the
        core's clock minus the loop's."""
        self._loop = loop
        self._sockets = list(sockets)
        self._sock = self._sockets[0]
        self._read_size = read_size
        self._events = EventQueue(stats, max_events)
        self._trouble = Trouble(log, stats, self._events.put)
        self._timer = CoreTimer(loop, self._on_timer, offset)
        self._closed = False
        for sock, reader in zip(self._sockets, readers or [self._readable] * len(self._sockets)):
            sock.setblocking(False)
            loop.add_reader(sock.fileno(), reader, sock)

    def _now(self) -> float:
        raise NotImplementedError

    def _readable(self, sock: socket.socket) -> None:
        now = self._now()
        receive_datagrams(sock, self._read_size,
                          lambda data, source: self._receive(data, source, now), self._trouble)
        self._process_events(now)

    def _receive(self, data: bytes, source: Address, now: float) -> None:
        self.core.receive_datagram(data, source, now)

    def _on_timer(self, when: float) -> None:
        now = max(self._now(), when)  # the loop may call back a hair early: take the due time
        self.core.handle_timer(now)
        self._process_events(now)

    def _process_events(self, now: float) -> None:
        """After any call into the core: send what it queued, queue its events, re-arm the
        timer if its time changed."""
        if self._closed:
            return
        core = self.core
        send_datagrams(self._sock, core.datagrams_to_send(), self._trouble)
        while (ev := core.next_event()) is not None:
            self._events.put(ev)
        self._timer.arm(core.get_timer())

    async def next_event(self, timeout: Optional[float] = None) -> Any:
        """The next event (the core's, or a NodeWarning), or None after timeout or close()."""
        return await self._events.get(timeout)

    async def events(self) -> AsyncIterator[Any]:
        """Every event as it happens, until close()."""
        async for ev in self._events:
            yield ev

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Stop reading, cancel the timer, close the sockets; next_event() gives None and
        events() ends from now on."""
        if self._closed:
            return
        self._closed = True
        self._timer.cancel()
        for sock in self._sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._events.close()


__all__ = ["MAX_EVENTS", "READ_BATCH", "CoreTimer", "DatagramNode", "EventQueue", "NodeWarning",
           "Trouble", "deliver", "receive_datagrams", "send_datagrams"]
