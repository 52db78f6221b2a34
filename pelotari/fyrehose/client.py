"""Synchronous fyrehose client: a background I/O thread drives the sans-IO core."""
import asyncio
import concurrent.futures
import itertools
import logging
import os
import select
import socket
import threading
import time
from collections import deque
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import replace
from typing import (Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple,
                    Union)

from pelotari.fyrehose.batchio import RecvBatch, SendBatch, enable_gro, set_buffers
from pelotari.fyrehose.backbone import DEFAULT_PORT
from pelotari.fyrehose.core import ClientConfig, ClientCore, check_wait
from pelotari.fyrehose.events import (BackboneDown, BackboneUp, Event, Lost, Message,
                                      PublishConfirmed, PublishFailed, Resync)

log = logging.getLogger("pelotari.fyrehose.client")


MAX_RATE = 1e9  # messages per second; no host publishes faster

class PublishTimeout(TimeoutError):
    """The backbone's DELIVER of a published message did not come back in time."""


def parse_address(text: Union[str, Tuple[str, int]], default_port: int = DEFAULT_PORT) -> Tuple[str, int]:
    """'host', 'host:port' or (host, port) → (IPv4 address, port)."""
    if isinstance(text, tuple):
        host, port = text
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, str(default_port)
        try:
            port = int(port_text)
        except ValueError:
            raise ValueError(f"bad port in address {text!r}") from None
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"port {port} outside 0..65535")
    try:
        host = socket.gethostbyname(host or "0.0.0.0")
    except OSError:
        raise ValueError(f"cannot resolve host {host!r}") from None
    return host, int(port)


def open_client_socket(bind: Tuple[str, int], buffer: int = 4 << 20) -> socket.socket:
    """A non-blocking UDP socket with large buffers, bound to bind."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    set_buffers(sock, buffer, force=False)
    sock.bind(bind)
    sock.setblocking(False)
    return sock


Item = Union[Message, Lost, Resync]

DEFAULT_MAX_QUEUED = 65536  # items waiting for the application
DEFAULT_MAX_QUEUED_BYTES = 32 << 20  # DATA bytes of the messages waiting


class Backlog:
    """Items waiting for the application, bounded in count and DATA bytes (not thread-safe).

    An item that does not fit is dropped, and so is every later one until the application has
    taken the backlog down to half of both limits; then the dropped sequences are queued, in
    their place, as Lost(first, last, reason="overflow") (a Resync among them is kept, so at most
    Lost, Resync, Lost). Memory stays within the limits plus those three notices.
    """

    def __init__(self, max_items: int = DEFAULT_MAX_QUEUED,
                 max_bytes: int = DEFAULT_MAX_QUEUED_BYTES):
        if max_items < 1 or max_bytes < 1:
            raise ValueError("max_queued and max_queued_bytes must be at least 1")
        self.max_items, self.max_bytes = max_items, max_bytes
        self.items: "deque[Item]" = deque()
        self.bytes = 0
        self.dropped_messages = 0  # Messages dropped for overflow, ever
        self._dropped: list = []  # while overflowing: [first, last] ranges and at most one Resync

    def __len__(self) -> int:
        return len(self.items)

    def put(self, item: Item) -> bool:
        """Queue item, or fold it into the overflow notice; whether it was queued."""
        size = len(item.data) if type(item) is Message else 0
        if (self._dropped or len(self.items) >= self.max_items
                or (self.items and self.bytes + size > self.max_bytes)):
            self._drop(item)
            return False
        self.items.append(item)
        self.bytes += size
        return True

    def get(self) -> Item:
        """The oldest item (the backlog must not be empty)."""
        item = self.items.popleft()
        if type(item) is Message:
            self.bytes -= len(item.data)
        if (self._dropped and len(self.items) <= self.max_items // 2
                and self.bytes <= self.max_bytes // 2):
            for entry in self._dropped:
                self.items.append(Lost(entry[0], entry[1], "overflow")
                                  if isinstance(entry, list) else entry)
            self._dropped = []
        return item

    def clear(self) -> None:
        """Forget everything queued or pending."""
        self.items.clear()
        self.bytes = 0
        self._dropped = []

    def _drop(self, item: Item) -> None:
        dropped = self._dropped
        if isinstance(item, Resync):  # tracking restarted: one Resync stands for several
            if dropped and isinstance(dropped[-1], list) and len(dropped) > 1:
                dropped.pop()  # sequences between two Resyncs are not worth a notice
            if dropped and isinstance(dropped[-1], Resync):
                dropped[-1] = Resync(dropped[-1].expected, item.received)
            else:
                dropped.append(item)
            return
        if isinstance(item, Message):
            self.dropped_messages += 1
            first = last = item.sequence
        else:
            first, last = item.first, item.last
        if dropped and isinstance(dropped[-1], list):
            dropped[-1][1] = last
        else:
            dropped.append([first, last])


# One class since Python 3.11; three before it.
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)


@contextmanager
def _publish_timeout():
    """Turn a wait for a DELIVER that ran out into PublishTimeout."""
    try:
        yield
    except PublishTimeout:
        raise
    except _TIMEOUTS:
        raise PublishTimeout("no DELIVER came back from the backbone") from None


class _Adapter:
    """What the sync and asyncio clients share: publish futures, the one path from the core's
    events to futures, queue and callbacks, and the counters.

    A subclass sets config, core, _futures, _backlog, _receive, _up (an Event with set/clear)
    and implements _queue(item)."""

    config: ClientConfig
    core: ClientCore
    _futures: Dict[int, Any]
    _backlog: Backlog
    _receive: bool
    _on_message: Optional[Callable[[Item], None]] = None
    _on_event: Optional[Callable[[Event], None]] = None

    def _futures_for(self, pids, new_future) -> list:
        """A new future per publish id (None stays None: NOSUBSCRIBE cannot be confirmed)."""
        futs = []
        for pid in pids:
            fut = None
            if pid is not None:
                fut = self._futures[pid] = new_future()
            futs.append(fut)
        return futs

    def _wait(self, timeout: Optional[float]) -> float:
        """Seconds to wait for a DELIVER: by default a second past the core's own expiry."""
        return self.config.publish_timeout + 1.0 if timeout is None else check_wait(timeout)

    def _process_events(self, events: Iterable[Event]) -> None:
        """Hand each core event to its publish future, the receive queue and the callbacks."""
        for ev in events:
            try:
                self._dispatch(ev)
            except Exception:  # an application callback must not kill the I/O thread or loop
                log.exception("fyrehose client callback failed on %r", ev)

    def _dispatch(self, ev: Event) -> None:
        kind = type(ev)
        if kind is Message or kind is Lost or kind is Resync:
            if self._on_message is not None:
                self._on_message(ev)
            elif self._receive:
                self._queue(ev)
        elif kind is PublishConfirmed or kind is PublishFailed:
            fut = self._futures.pop(ev.publish_id, None)
            if fut is not None and not fut.done():  # close() may have failed it already
                if kind is PublishConfirmed:
                    fut.set_result(ev.sequence)
                else:
                    fut.set_exception(PublishTimeout(f"publish {ev.publish_id}: {ev.reason}"))
        elif kind is BackboneUp:
            self._up.set()
        elif kind is BackboneDown:
            self._up.clear()
        if self._on_event is not None:
            self._on_event(ev)

    def _queue(self, item: Item) -> None:
        raise NotImplementedError

    def _abort_futures(self) -> None:
        for fut in self._futures.values():
            if not fut.done():
                fut.set_exception(ConnectionAbortedError("client closed"))
        self._futures.clear()

    def _core_stats(self) -> dict:
        core = self.core
        return {**core.stats, "journal": len(core.journal), "held": core.tracker.held_count}

    def _queue_stats(self) -> dict:
        return {"queued": len(self._backlog), "overflow": self._backlog.dropped_messages}


class Client(_Adapter):
    """A fyrehose publisher/subscriber with a blocking API.

    Messages, Lost and Resync notices arrive in sequence order through messages()/receive()
    or the on_message callback (called on the I/O thread). receive=False keeps no queue (for
    clients that only publish but still want confirmations). The queue holds at most
    `max_queued` items and `max_queued_bytes` bytes of DATA: an application that does not keep
    up loses the newest messages, reported in their place as Lost(first, last, "overflow")
    (see Backlog). gro=True sets UDP_GRO on the socket (Linux >= 5.0): runs of DELIVERs the
    backbone sends with GSO arrive as one read and are split back into datagrams before the
    protocol sees them.
    """

    def __init__(self, backbone: Union[str, Tuple[str, int]] = f"127.0.0.1:{DEFAULT_PORT}", *,
                 bind: Union[str, Tuple[str, int]] = "0.0.0.0:0",
                 config: Optional[ClientConfig] = None,
                 on_message: Optional[Callable[[Item], None]] = None,
                 on_event: Optional[Callable[[Event], None]] = None,
                 receive: bool = True, gro: bool = False,
                 max_queued: int = DEFAULT_MAX_QUEUED,
                 max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES, **config_overrides):
        self.backbone = parse_address(backbone)
        self.config = replace(config or ClientConfig(), **config_overrides)
        self._bind = parse_address(bind, 0)
        self._on_message = on_message
        self._on_event = on_event
        self._receive = receive
        self._gro = gro
        self._backlog = Backlog(max_queued, max_queued_bytes)
        self._ready = threading.Condition()  # guards the backlog; notified on put and close
        self._futures: Dict[int, Future] = {}
        self._lock = threading.Lock()  # guards the core and _timer_at
        self._send_lock = threading.Lock()  # guards the SendBatch (its queue is not thread-safe)
        self._closed = threading.Event()
        self._up = threading.Event()
        self._timer_at = 0.0  # the core's timer the I/O thread waits for
        self._sock: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self.core: Optional[ClientCore] = None

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> "Client":
        """Open the socket and start the I/O thread (KEEPALIVEs begin at once)."""
        self._sock = open_client_socket(self._bind)
        if self._gro:
            try:
                enable_gro(self._sock)
            except OSError:
                self._sock.close()
                raise
        self._rx = RecvBatch(64, 65536, self._gro)
        self._tx = SendBatch(1024)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.core = ClientCore(self.backbone, time.monotonic(), self.config)
        self._timer_at = self.core.get_timer()
        self._thread = threading.Thread(target=self._run, name="fyrehose-client", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the I/O thread and close the socket; pending publishes fail, and receive() and
        messages() (in any thread) stop: ConnectionAbortedError, end of iteration."""
        if self._thread is None:
            return
        with self._ready:
            self._closed.set()
            self._backlog.clear()
            self._ready.notify_all()
        os.write(self._wake_w, b"x")
        self._thread.join(5)
        self._thread = None
        self._sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._abort_futures()

    def __enter__(self) -> "Client":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def address(self) -> Tuple[str, int]:
        """The local (host, port) peers and the backbone see."""
        return self._sock.getsockname()

    def wait_connected(self, timeout: float = 5.0) -> bool:
        """Block until the backbone has acknowledged a KEEPALIVE."""
        return self._up.wait(timeout)

    # ---- publishing ----------------------------------------------------------------------

    def publish_nowait(self, data: bytes) -> Optional[Future]:
        """Send a PUSH; return a Future of its sequence number (None for NOSUBSCRIBE)."""
        return self._command(lambda now: self._futures_for(
            [self.core.publish(data, now)], Future))[0]

    def publish_many_nowait(self, datas) -> List[Optional[Future]]:
        """Send several PUSHes (packed when `pack` is set); one Future (or None) per message."""
        return self._command(lambda now: self._futures_for(
            self.core.publish_many(datas, now), Future))

    def publish_many(self, datas, timeout: Optional[float] = None) -> List[Optional[int]]:
        """Publish several messages and wait for each DELIVER: their sequence numbers."""
        futs = self.publish_many_nowait(datas)
        wait = self._wait(timeout)
        with _publish_timeout():
            return [None if f is None else f.result(wait) for f in futs]

    def publish(self, data: bytes, timeout: Optional[float] = None) -> Optional[int]:
        """Publish and wait for the backbone's DELIVER: return its sequence number.

        Raises PublishTimeout if it does not come back. A NOSUBSCRIBE client cannot see its
        DELIVER, so it returns None at once (fire-and-forget).
        """
        fut = self.publish_nowait(data)
        if fut is None:
            return None
        with _publish_timeout():
            return fut.result(self._wait(timeout))

    def publish_stream(self, items: Iterable, *, key: Optional[Callable[[Any], bytes]] = None,
                       rate: Optional[float] = None, window: int = 256,
                       group: Optional[int] = None, timeout: Optional[float] = None,
                       ready: Optional[Callable[[], bool]] = None,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> "PublishStream":
        """Publish items as they come, paced and windowed; iterate for their outcomes (see
        PublishStream)."""
        return PublishStream(self, items, key=key, rate=rate, window=window, group=group,
                             timeout=timeout, ready=ready, clock=clock, sleep=sleep)

    def set_flags(self, flags: int) -> None:
        """Change NOSUBSCRIBE/NOJOURNAL now; the backbone hears it in this KEEPALIVE."""
        self._command(lambda now: self.core.set_flags(flags, now))

    # ---- receiving -----------------------------------------------------------------------

    def receive(self, timeout: Optional[float] = None) -> Optional[Item]:
        """The next Message, Lost or Resync in sequence order, or None after timeout.

        Raises ConnectionAbortedError once the client is closed (a waiting call wakes up).
        """
        backlog = self._backlog
        if timeout is not None:
            check_wait(timeout)
        with self._ready:
            if not self._ready.wait_for(lambda: backlog.items or self._closed.is_set(), timeout):
                return None
            if self._closed.is_set():
                raise ConnectionAbortedError("client closed")
            return backlog.get()

    def messages(self, timeout: Optional[float] = None) -> Iterator[Item]:
        """Iterate over received items; ends after `timeout` seconds with nothing new, or at
        close()."""
        while True:
            try:
                item = self.receive(timeout)
            except ConnectionAbortedError:
                return
            if item is None:
                return
            yield item

    def stats(self) -> dict:
        """Client counters (datagrams, duplicates, requests, lost, overflow, queued, ...)."""
        with self._lock:
            snap = self._core_stats()
        with self._ready:
            snap.update(self._queue_stats())
        return snap

    # ---- the I/O thread ------------------------------------------------------------------

    def _command(self, run: Callable[[float], Any]) -> Any:
        """run(now) on the core from any thread; send what it queued, and wake the I/O thread
        if the core's timer moved before the one it waits for. Events stay for the I/O thread,
        where callbacks run."""
        with self._lock:
            result = run(time.monotonic())
            out = self.core.datagrams_to_send()
            timer = self.core.get_timer()
            wake = timer < self._timer_at
            if wake:
                self._timer_at = timer
        if out:
            self._send(out)
        if wake:
            self._wake()
        return result

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"t")
        except BlockingIOError:  # the pipe is full of wake-ups already
            pass

    def _run(self) -> None:
        sock, core = self._sock, self.core
        sock_fd = sock.fileno()
        poller = select.poll()
        poller.register(sock_fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._closed.is_set():
            delay = self._timer_at - time.monotonic()
            readable = False
            if delay > 0:
                for fd, _ in poller.poll(min(delay, 0.5) * 1000):
                    if fd == sock_fd:
                        readable = True
                    else:
                        try:
                            os.read(self._wake_r, 4096)
                        except BlockingIOError:
                            pass
            batch = []
            if readable:
                for _ in range(16):  # bounded so timers still run under a flood
                    got = self._rx.recv(sock)
                    batch.extend(got)
                    if len(got) < 64:
                        break
            with self._lock:
                now = time.monotonic()
                for data, addr in batch:
                    core.receive_datagram(data, addr, now)
                if core.get_timer() <= now:
                    core.handle_timer(now)
                out = core.datagrams_to_send()
                events = list(iter(core.next_event, None))
                self._timer_at = core.get_timer()
            if out:
                self._send(out)
            self._process_events(events)

    def _send(self, datagrams) -> None:
        with self._send_lock:
            self._tx.send(self._sock, datagrams)

    def _queue(self, item: Item) -> None:
        with self._ready:
            if not self._closed.is_set() and self._backlog.put(item):
                self._ready.notify()


class Published(NamedTuple):
    """The outcome of one item of a PublishStream."""

    item: Any  # as the iterable gave it
    sequence: Optional[int]  # its SEQUENCE, or None: fire-and-forget, or not confirmed
    error: Optional[BaseException] = None  # why it is not confirmed (PublishTimeout, ...)


PACK_GROUP = 64  # messages per publish_many() with `pack` set and no rate
PACK_GROUP_SECONDS = 0.01  # with a rate: this long's worth of messages per publish_many()


class PublishStream:
    """Items of an iterable published as they are read, at most `rate` per second and with at
    most `window` unconfirmed at once; iterating gives one Published per item, in order.

    key(item) gives the bytes to publish (default: the item itself). With `pack` set, items go
    in groups (`group`; default 64, or 10 ms worth at `rate`, at most `window`) through
    publish_many(). The flush rule: a group leaves when it is full, when the items end, or as
    soon as `ready()` says the next item is not there yet (reading it would wait), so a packing
    publisher never holds a message back to fill a pack; `ready` defaults to "always" (an
    in-memory iterable). clock and sleep are injectable so pacing is tested without sleeping.
    Counters: sent, confirmed, failed. After an interruption (KeyboardInterrupt), drain() gives
    what is still in flight.
    """

    def __init__(self, client: Client, items: Iterable, *, key=None, rate=None, window=256,
                 group=None, timeout=None, ready=None, clock=time.monotonic,
                 sleep=time.sleep):
        if window < 1:
            raise ValueError("window must be at least 1")
        if rate is not None and not 0 < rate <= MAX_RATE:  # also refuses NaN and infinity
            raise ValueError(f"rate must be within (0, {MAX_RATE:g}] messages per second")
        if group is None:
            pack = client.config.pack
            group = 1 if not pack else max(1, int(rate * PACK_GROUP_SECONDS)) if rate else PACK_GROUP
            group = min(group, window)
        if group < 1:
            raise ValueError("group must be at least 1")
        self._client, self._items = client, iter(items)
        self._ready = ready or (lambda: True)
        self._key = key  # None: the items are the bytes
        self.rate, self.window, self.group = rate, window, group
        self._timeout = client._wait(timeout)
        self._clock, self._sleep = clock, sleep
        self._inflight: "deque[Tuple[Optional[Future], Any]]" = deque()
        self.sent = self.confirmed = self.failed = 0

    def __iter__(self) -> Iterator[Published]:
        started = None
        items, group, window, inflight = self._items, self.group, self.window, self._inflight
        key, publish_many = self._key, self._client.publish_many_nowait
        ready, end = self._ready, object()
        while True:
            if inflight and not ready():  # input would wait: say what became of those out
                yield from self._settle(0)
            batch = list(itertools.islice(items, 1))  # (waits for the first)
            if not batch:
                break
            while len(batch) < group and ready():  # the rest only while already there
                item = next(items, end)
                if item is end:
                    break
                batch.append(item)
            n = len(batch)
            # At most `window` unconfirmed once this batch is out. A full window is waited
            # down to half, so confirmations are taken in runs, not a thread hand-off each.
            if len(inflight) + n > window:
                yield from self._settle(max(0, min(window - n, window // 2)))
            elif inflight and (inflight[0][0] is None or inflight[0][0].done()):
                yield from self._settle(len(inflight))  # what is settled already
            if self.rate:
                now = self._clock()
                if started is None:
                    started = now
                delay = started + self.sent / self.rate - now
                if delay > 0:
                    self._sleep(delay)
            futs = publish_many(batch if key is None else [key(item) for item in batch])
            inflight.extend(zip(futs, batch))
            self.sent += n
        yield from self.drain()

    def drain(self) -> Iterator[Published]:
        """Wait for everything in flight; its outcomes in order."""
        return self._settle(0)

    def _settle(self, limit: int) -> Iterator[Published]:
        """Outcomes of the oldest items: those settled already, and, blocking, as many more as
        keep at most `limit` in flight."""
        inflight = self._inflight
        while inflight:
            fut, item = inflight[0]
            if fut is None:  # fire-and-forget
                inflight.popleft()
                yield Published(item, None)
                continue
            if len(inflight) <= limit and not fut.done():
                return
            try:
                seq = fut.result(self._timeout)
            except (*_TIMEOUTS, ConnectionAbortedError) as exc:
                inflight.popleft()
                self.failed += 1
                if not isinstance(exc, (PublishTimeout, ConnectionAbortedError)):
                    exc = PublishTimeout("no DELIVER came back from the backbone")
                yield Published(item, None, exc)
                continue
            inflight.popleft()  # only now: an interrupted wait leaves it for drain()
            self.confirmed += 1
            yield Published(item, seq)
