"""asyncio adapter for the sans-IO bully core (pelotari.bully.core): a TCP server, outgoing
connections, one timer.

The core numbers connections; this module maps each number to a transport. After every call
into the core, _process_events carries out the core's actions (Connect: a connect task; Send:
transport.write, held here until the connection is up; Close: flush and close, and the core is
not told of that connection again), hands the events to a callback, and keeps the one loop
timer at core.get_timer() (re-armed only when that changes: pelotari.adapter.CoreTimer). `now` is time.monotonic() (asyncio's loop clock is monotonic too).

What the core leaves to the adapter:
  * a connect that fails (refused, unreachable, any OSError) is reported as connection_lost;
    the core times connects out itself by closing a pending connection: the connect is then
    cancelled and whatever it made closed;
  * outgoing connections start from the node's own address (unless it is bound to 0.0.0.0), so
    the messages that name their sender come from that sender's host;
  * writes never wait: a connection whose unsent bytes pass `write_limit` (a peer that does not
    read) is aborted and reported lost (counted as connections_aborted_write_buffer);
  * TCP_NODELAY on every socket: a sync probe's round trip must not wait for Nagle.
"""
import asyncio
import logging
import socket
import sys
import time
from collections import Counter, deque
from collections.abc import Callable

from pelotari.adapter import CoreTimer, deliver
from pelotari.bully.core import (Address, BullyNode, Close, Config, Connect, Continue, Send,
                                 Shutdown)
from pelotari.bully.wire import DEFAULT_PORT

log = logging.getLogger("pelotari.bully")

DEFAULT_WRITE_LIMIT = 256 * 1024  # unsent bytes per connection before it is aborted
BACKLOG = 128
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux 4.2+
CLOSE_GRACE = 10.0  # seconds a closed connection may take to flush before it is aborted


class BindError(OSError):
    """The node cannot listen where it was asked (address in use, not this host's, no
    permission). Its text is one line naming the address."""

    def __init__(self, address: Address, exc: OSError):
        reason = exc.strerror or str(exc)
        super().__init__(exc.errno, f"cannot listen on {address[0]}:{address[1]}: {reason}")
        self.address = address

    def __str__(self) -> str:
        return self.strerror


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class _Stream(asyncio.Protocol):
    """One TCP connection, incoming (conn is given by accept) or outgoing (conn known)."""

    def __init__(self, node: "Node", conn: int | None = None):
        self.node = node
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.detached = False  # the core is done with it (closed, refused, aborted)
        self.shut = False  # our side half-closed: nothing more is written

    def connection_made(self, transport):
        self.transport = transport
        _nodelay(transport)
        if self.conn is None:
            self.node._incoming(self)
        else:
            self.node._outgoing_up(self)

    def data_received(self, data):
        if not self.detached:
            self.node._data(self, data)

    def eof_received(self):
        # The core keeps a member's half-closed heartbeat connection open (True); anything
        # else is closed on our side too, and connection_lost follows.
        return not self.detached and self.node._eof(self)

    def connection_lost(self, exc):
        self.node._flushing.discard(self)
        if not self.detached:
            self.detached = True
            self.node._lost(self, reset=exc is not None)  # None: EOF; else a reset, a failed write


class Node:
    """A running bully node. `await Node.start(host, port, ...)`, then the commands (search,
    text, elect, start_sync, ...), then `await close()`. Events go to `on_event` as they happen
    (without it, the last 1,000 are kept in `events`)."""

    def __init__(self, host: str, port: int, *, leader: Address | None = None,
                 node_id: int | None = None, config: Config | None = None,
                 clock_offset: float = 0.0, on_event: Callable[[object], None] | None = None,
                 write_limit: int = DEFAULT_WRITE_LIMIT):
        if write_limit < 1:
            raise ValueError("write_limit must be at least 1 byte")
        self.host, self.port = host, port
        self.config = config or Config()
        self.write_limit = write_limit
        self.events: deque[object] = deque(maxlen=1000)
        self.on_event = on_event or self.events.append
        self.stats: Counter = Counter()  # the adapter's own counts (the core has its own)
        self.core: BullyNode | None = None
        self._args = {"leader": leader, "node_id": node_id, "clock_offset": clock_offset}
        self._loop = asyncio.get_running_loop()
        self._offset = time.monotonic() - self._loop.time()
        self._server: asyncio.AbstractServer | None = None
        self._streams: dict[int, _Stream] = {}  # connections that are up
        self._pending: dict[int, asyncio.Task] = {}  # connects under way
        self._held: dict[int, list[bytes]] = {}  # bytes sent before the connection was up
        self._timer = CoreTimer(self._loop, self._on_timer, self._offset, lazy=True)
        self._flushing: set[_Stream] = set()  # closed by the core, still writing
        self._paused: set[int] = set()  # connections with messages the core has not handled
        self._pumping = False
        self._closed = False

    # ---- starting and stopping ---------------------------------------------------------

    @classmethod
    async def start(cls, host: str = "0.0.0.0", port: int = DEFAULT_PORT, **kwargs) -> "Node":
        """Listen on (host, port) (port 0: any free port), then build the core: the founding
        leader without `leader`, else a peer joining through leader=(ip, port). Raises
        BindError when the address cannot be listened on."""
        node = cls(host, port, **kwargs)
        await node.open()
        return node

    async def open(self) -> None:
        """Listen, build the core and start it (what start() does after the constructor)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            # A restarted node must get its port back while old connections sit in TIME_WAIT.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(BACKLOG)
        except OSError as exc:
            sock.close()
            raise BindError((self.host, self.port), exc) from None
        except BaseException:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self.core = BullyNode(self.host, self.port, self._now(), config=self.config, **self._args)
        try:
            self._server = await self._loop.create_server(lambda: _Stream(self), sock=sock)
        except BaseException:
            sock.close()
            raise
        self._process_events()

    async def close(self) -> None:
        """Stop the timer, the server, every connect under way and every connection."""
        if self._closed:
            return
        self._closed = True
        self._timer.cancel()
        if self._server is not None:
            self._server.close()
        tasks = list(self._pending.values())
        for task in tasks:
            task.cancel()
        self._pending.clear()
        self._held.clear()
        for stream in list(self._streams.values()) + list(self._flushing):
            stream.detached = True
            stream.transport.close()
            if stream.transport.get_write_buffer_size():
                stream.transport.abort()  # a peer that does not read must not hold us up
        self._streams.clear()
        self._flushing.clear()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await asyncio.sleep(0)  # let the transports' closing callbacks run

    @property
    def address(self) -> Address:
        """Where the node listens (host as given: 0.0.0.0 for any)."""
        return (self.host, self.port)

    @property
    def connections(self) -> int:
        """Connections open or being opened."""
        return len(self._streams) + len(self._pending)

    # ---- commands (each a core command, then _process_events) --------------------------------------

    def call(self, fn: Callable[[BullyNode, float], object]) -> object:
        """fn(core, now), then carry out what it queued; its result (exceptions pass)."""
        try:
            return fn(self.core, self._now())
        finally:
            self._process_events()

    def search(self, destination_id: int) -> int | None:
        return self.call(lambda c, now: c.search(destination_id, now))

    def text(self, destination_id: int, data: bytes) -> None:
        self.call(lambda c, now: c.text(destination_id, data, now))

    def elect(self) -> None:
        self.call(lambda c, now: c.elect(now))

    def start_sync(self) -> None:
        self.call(lambda c, now: c.start_sync(now))

    def time_ms(self) -> int:
        return self.core.time_ms(self._now())

    def clock_offset(self) -> float:
        """The logical clock minus the system clock, now (seconds)."""
        return self.core.clock.offset(self._now())

    def all_stats(self) -> Counter:
        """The core's counters and the adapter's."""
        return self.core.stats + self.stats

    # ---- the core's side ---------------------------------------------------------------

    def _now(self) -> float:
        return self._loop.time() + self._offset

    def _process_events(self, not_before: float | None = None) -> None:
        """Carry out the core's actions, deliver its events, re-arm the timer (no sooner than
        not_before seconds from now, when given)."""
        if self._closed or self._pumping:
            return  # a nested call (an event handler's command): the outer loop sees its work
        self._pumping = True
        try:
            core = self.core
            while True:
                actions = core.actions()
                for action in actions:
                    self._act(action)
                self._send_datagrams()
                ev = core.next_event()
                if ev is not None:
                    deliver(self.on_event, ev, log)  # (a handler's bug must not stop the timer)
                    if self._closed:
                        return
                if not actions and ev is None:
                    break
        finally:
            self._pumping = False
        when = self.core.get_timer()
        if not_before is not None and when is not None:
            when = max(when, self._now() + not_before)
        self._timer.arm(when)

    def _send_datagrams(self) -> None:
        """A core that also speaks datagrams (a subclass's) sends them here."""

    def _act(self, action) -> None:
        if isinstance(action, Send):
            stream = self._streams.get(action.conn)
            if stream is not None and stream.shut:
                self.stats["sends_after_shutdown"] += 1  # (the core should not: counted)
            elif stream is not None:
                stream.transport.write(action.data)
                if stream.transport.get_write_buffer_size() > self.write_limit:
                    self._overflow(action.conn, stream=stream)
            elif action.conn in self._pending:
                held = self._held.setdefault(action.conn, [])
                held.append(bytes(action.data))
                if sum(map(len, held)) > self.write_limit:
                    self._overflow(action.conn)
        elif isinstance(action, Connect):
            task = self._loop.create_task(self._connect(action.conn, action.address))
            self._pending[action.conn] = task
        elif isinstance(action, Shutdown):
            stream = self._streams.get(action.conn)
            if stream is not None and not stream.shut and stream.transport.can_write_eof():
                stream.shut = True
                stream.transport.write_eof()  # after what was written
        elif isinstance(action, Continue):
            stream = self._streams.get(action.conn)
            if stream is not None and action.conn not in self._paused:
                self._paused.add(action.conn)
                stream.transport.pause_reading()
                self._loop.call_soon(self._continue, stream)
        elif isinstance(action, Close):
            stream = self._streams.pop(action.conn, None)
            if stream is not None:
                stream.detached = True
                stream.transport.close()  # what was written goes first
                if stream.transport.get_write_buffer_size():
                    # ... to a peer that reads it: one that does not is cut off later.
                    self._flushing.add(stream)
                    self._loop.call_later(CLOSE_GRACE, stream.transport.abort)
            task = self._pending.pop(action.conn, None)
            if task is not None:  # a connect the core gave up on
                task.cancel()
            self._held.pop(action.conn, None)
        else:
            raise TypeError(f"unknown action {action!r}")

    def _overflow(self, conn: int, stream: _Stream | None = None) -> None:
        """A peer that does not read: drop the connection rather than hold its bytes."""
        self.stats["connections_aborted_write_buffer"] += 1
        if stream is not None:
            self._streams.pop(conn, None)
            stream.detached = True
            stream.transport.abort()
        else:
            task = self._pending.pop(conn, None)
            if task is not None:
                task.cancel()
            self._held.pop(conn, None)
        self.core.connection_lost(conn, self._now())  # its actions: the next round of _process_events

    def _on_timer(self, when: float) -> None:
        if self._closed:
            return
        now = self._now()
        not_before = None
        try:
            due = self.core.get_timer()
            if due is not None and due <= now:
                self.core.handle_timer(now)
                again = self.core.get_timer()
                if again is not None and again <= now:
                    # A core whose timer stays due would spin the loop: wait a moment instead.
                    self.stats["timer_still_due"] += 1
                    not_before = 0.001
        finally:  # whatever happened, the timer is armed again
            self._process_events(not_before)

    # ---- sockets -----------------------------------------------------------------------

    async def _connect(self, conn: int, address: Address) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            if self.host not in ("0.0.0.0", ""):
                if sys.platform.startswith("linux"):
                    # The port is picked at connect(), per destination: bound sockets do not
                    # use up the ephemeral range (one connection per message adds up).
                    try:
                        sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                    except OSError:
                        pass
                sock.bind((self.host, 0))
            await self._loop.sock_connect(sock, (address[0], int(address[1])))
            await self._loop.create_connection(lambda: _Stream(self, conn), sock=sock)
        except asyncio.CancelledError:
            sock.close()
            return  # the core closed it (connect timeout) or the node is closing
        except (OSError, ValueError) as exc:  # refused, unreachable, no route, bad address
            sock.close()
            if self._pending.pop(conn, None) is None or self._closed:
                return
            self._held.pop(conn, None)
            self.stats["connect_errors"] += 1
            log.debug("connect %s to %s:%s failed: %s", conn, address[0], address[1], exc)
            self.core.connection_lost(conn, self._now())
            self._process_events()
            return
        self._pending.pop(conn, None)  # normally gone already (_outgoing_up)

    def _outgoing_up(self, stream: _Stream) -> None:
        conn = stream.conn
        if self._closed or conn not in self._pending:
            stream.detached = True  # the core gave up on it meanwhile
            stream.transport.close()
            return
        del self._pending[conn]
        self._streams[conn] = stream
        for data in self._held.pop(conn, ()):
            stream.transport.write(data)
        local = stream.transport.get_extra_info("sockname")
        self.core.connection_made(conn, (local[0], local[1]), self._now())
        self._process_events()

    def _incoming(self, stream: _Stream) -> None:
        peer = stream.transport.get_extra_info("peername")
        local = stream.transport.get_extra_info("sockname")
        conn = None if self._closed or not peer else \
            self.core.accept((peer[0], peer[1]), self._now(), local=local and local[:2])
        if conn is None:
            # Closed, not reset: a reset reads as a dead process to a peer whose heartbeat
            # this was (it would hold an election while we live).
            stream.detached = True
            stream.transport.close()
            if not self._closed:
                self._process_events()
            return
        stream.conn = conn
        self._streams[conn] = stream
        self._process_events()

    def _data(self, stream: _Stream, data: bytes) -> None:
        if self._closed or self._streams.get(stream.conn) is not stream:
            return
        try:
            self.core.data_received(stream.conn, data, self._now())
        finally:
            self._process_events()

    def _continue(self, stream: _Stream) -> None:
        """The core's held messages, a read's worth at a time (other work runs between)."""
        self._paused.discard(stream.conn)
        if self._closed or self._streams.get(stream.conn) is not stream:
            return
        try:
            self.core.data_received(stream.conn, b"", self._now())
        finally:
            self._process_events()
        if stream.conn not in self._paused and self._streams.get(stream.conn) is stream \
                and not stream.transport.is_closing():
            stream.transport.resume_reading()

    def _eof(self, stream: _Stream) -> bool:
        if self._closed or self._streams.get(stream.conn) is not stream:
            return False
        try:
            return bool(self.core.eof_received(stream.conn, self._now()))
        finally:
            self._process_events()

    def _lost(self, stream: _Stream, reset: bool = False) -> None:
        if self._closed or self._streams.get(stream.conn) is not stream:
            return
        del self._streams[stream.conn]
        self.core.connection_lost(stream.conn, self._now(), reset=reset)
        self._process_events()


__all__ = ["DEFAULT_WRITE_LIMIT", "BindError", "Node"]
