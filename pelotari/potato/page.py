"""The potato page: `pelotari potato node --http` serves a canvas that is a potato client of its
own (pelotari/potato/web/: the protocol in core.js, the page in page.js), and the WebSocket
`/signal` that carries its WebRTC signaling (docs/protocols/potato.md, "Browsers").

On `/signal`, one JSON object per text message, at most `max_signal` bytes:

    page -> node   {"hello": NAME, "offer": SDP}          first, within hello_timeout
    node -> page   {"hello": NODE, "answer": SDP, "pages": [NAME, ...]}
                   or {"hello": NODE, "refused": REASON}, then the socket closes
    page -> node   {"to": PAGE, "offer" | "answer": SDP}  or {"to": PAGE, "refused": REASON}
    node -> PAGE   {"from": NAME, "offer" | "answer" | "refused": ...}

The first answer links the page to this node (BrowserTransport), for as long as its WebSocket
is open: the one closes with the other. `pages` are the other pages
whose WebSocket is open here, and the new page offers a link to each through the node, which
relays only between its own WebSockets and writes `from` itself (a page cannot speak for
another). Bounds: `max_per_host` WebSockets per address and `max_pages` in all (429/503 before
the upgrade); a token bucket per WebSocket on relayed messages and bytes; pages' HTTP requests
a token bucket per address; TCP connections `max_connections_per_host` per address and
`max_connections` in all (closed at once past them), each closed when it has no complete
request for `idle_timeout` (slow headers, idle keep-alive); a Host header that is not an address, `localhost` or the served
name is refused (421: DNS rebinding), and so is a WebSocket whose Origin is another site (403:
another site's page in the user's browser).
"""
import asyncio
import ipaddress
import json
import logging
import math
import time
from collections import Counter, OrderedDict
from http import HTTPStatus
from pathlib import Path

from aiohttp import WSMsgType, web
from aiohttp.web_protocol import RequestHandler

from pelotari.potato.transport import NAME_MAX, SIGNAL_MAX, _valid_name

log = logging.getLogger("pelotari.potato.page")

WEB = Path(__file__).parent / "web"
FILES = {"/": ("index.html", "text/html"), "/core.js": ("core.js", "text/javascript"),
         "/page.js": ("page.js", "text/javascript"), "/page.css": ("page.css", "text/css")}
# What the page may load and talk to: its own files and its own server, nothing inline.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
RELAYED = ("offer", "answer", "refused")
# Bytes waiting to go to a page past which relayed signaling for it is dropped (the transport's
# default high-water mark: below it, a write never waits).
RELAY_BACKLOG = 65536


class _Bucket:
    """A token bucket: `rate` a second, holding `burst`."""

    def __init__(self, rate: float, burst: float, now: float):
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, now

    def take(self, amount: float, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= amount:
            self.tokens -= amount
            return True
        return False


class PageServer:
    """The page's files and its /signal WebSocket, for one Node with browsers (add_browsers)."""

    def __init__(self, node, host: str, port: int, *, max_per_host: int = 4,
                 max_pages: int = 64, hello_timeout: float = 2.0, max_signal: int = SIGNAL_MAX,
                 signal_rate: float = 10.0, signal_burst: float = 20.0,
                 signal_byte_rate: float = 32768.0, signal_byte_burst: float = 131072.0,
                 http_rate: float = 4.0, http_burst: float = 32.0, max_hosts: int = 4096,
                 max_connections: int = 256, max_connections_per_host: int = 16,
                 idle_timeout: float = 10.0):
        if node.browsers is None:
            raise ValueError("the node has no browser transport (Node.add_browsers)")
        if min(max_per_host, max_pages, max_signal, max_hosts, max_connections,
               max_connections_per_host) < 1 or hello_timeout <= 0 or idle_timeout <= 0:
            raise ValueError("limits must be positive")
        self.node, self.host, self.port = node, host, port
        self.max_per_host, self.max_pages = max_per_host, max_pages
        self.hello_timeout, self.max_signal = hello_timeout, max_signal
        self.signal_rate, self.signal_burst = signal_rate, signal_burst
        self.signal_byte_rate, self.signal_byte_burst = signal_byte_rate, signal_byte_burst
        self.http_rate, self.http_burst, self.max_hosts = http_rate, http_burst, max_hosts
        self.max_connections, self.max_connections_per_host = (max_connections,
                                                               max_connections_per_host)
        self.idle_timeout = idle_timeout
        self.stats: Counter = Counter()
        self.pages: dict[str, web.WebSocketResponse] = {}  # name -> its open WebSocket
        self._transports: dict[str, asyncio.Transport] = {}  # name -> its WebSocket's TCP
        # WebSockets that have not said hello yet, oldest first (their connections): when
        # every place is taken, the oldest of them makes room for a new one
        self._silent: "OrderedDict[web.WebSocketResponse, object]" = OrderedDict()
        self._sockets: dict[str, int] = {}  # address -> WebSockets open from it
        self._http: dict[str, _Bucket] = {}  # address -> its requests' bucket
        self._closing: set[asyncio.Task] = set()  # WebSockets being closed (_link_gone)
        self._connections: Counter = Counter()  # address -> TCP connections open from it
        self._handlers: dict[_Handler, None] = {}  # those connections, the oldest first
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.AbstractServer | None = None
        self._files = {path: ((WEB / f).read_bytes(), kind) for path, (f, kind) in FILES.items()}

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    async def start(self) -> None:
        """Listen (port 0: any; self.port is set)."""
        app = web.Application(middlewares=[self._guard], client_max_size=4096)
        for path in self._files:
            app.router.add_get(path, self._file)
        app.router.add_get("/signal", self._signal)
        app.router.add_get("/favicon.ico", _no_content)
        # (aiohttp's keep-alive timeout also runs from the connection's start, and closes a
        # connection that has no complete request by then: slow headers as well as idle ones)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0,
                                     handler_cancellation=True,
                                     keepalive_timeout=self.idle_timeout)
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(self._accepted, self.host, self.port,
                                                  backlog=128, reuse_address=True)
        self.port = self._listener.sockets[0].getsockname()[1]

    def _accepted(self) -> "_Handler":
        """The protocol of one accepted connection: aiohttp's, behind the connection bounds."""
        server = self._runner.server
        return _Handler(self, server, loop=server._loop, **server._kwargs)

    def _admit_connection(self, handler: "_Handler", source: str) -> bool:
        """Whether a new connection from `source` may be served: its address has fewer than
        max_connections_per_host open, and the server fewer than max_connections, or one of
        them is idle (no request under way, no WebSocket) and is closed for it, the oldest
        first: connections held open with slow headers ran the process out of file
        descriptors (nobody got the page or reached the node any more), and from many
        addresses they would keep real pages out."""
        if self._connections[source] >= self.max_connections_per_host:
            self.stats["http_refused_connection"] += 1
            return False
        if self._connections.total() >= self.max_connections:
            idle = next((h for h in self._handlers if not h.page_busy), None)
            if idle is None:
                self.stats["http_refused_connection"] += 1
                return False
            self.stats["http_closed_evicted"] += 1
            self._release_connection(idle)
            idle.transport.abort()
        self._connections[source] += 1
        self._handlers[handler] = None
        return True

    def _release_connection(self, handler: "_Handler") -> None:
        if handler not in self._handlers:  # (closed for another already)
            return
        del self._handlers[handler]
        source = handler.page_source
        self._connections[source] -= 1
        if self._connections[source] <= 0:
            del self._connections[source]

    async def close(self) -> None:
        """Close every WebSocket and the listening socket."""
        if self._listener is not None:
            self._listener.close()
        await asyncio.gather(*(self._shut(ws, self._transports.get(name))
                               for name, ws in list(self.pages.items())))
        if self._closing:  # (their connections are closed: what waited on them is done)
            await asyncio.wait(list(self._closing), timeout=2.0)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None

    # ---- HTTP ----------------------------------------------------------------------------

    def _host_ok(self, header: str | None) -> bool:
        """A Host we answer to: an address literal, localhost or the name we serve on."""
        if not header:
            return False
        name = header.rsplit(":", 1)[0] if not header.endswith("]") else header
        name = name.strip("[]").lower()
        if name in ("localhost", self.host.lower()):
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    @web.middleware
    async def _guard(self, request: web.Request, handler):
        source = request.remote or "?"
        now = time.monotonic()
        bucket = self._http.get(source)
        if bucket is None:
            if len(self._http) >= self.max_hosts:  # forget the fullest buckets' hosts first
                for host in [h for h, b in self._http.items()
                             if b.take(0, now) and b.tokens >= b.burst][:self.max_hosts // 2]:
                    del self._http[host]
            if len(self._http) >= self.max_hosts:
                self.stats["http_refused_busy"] += 1
                return _refusal(web.Response(status=503))
            bucket = self._http[source] = _Bucket(self.http_rate, self.http_burst, now)
        if not bucket.take(1, now):
            self.stats["http_refused_rate"] += 1
            wait = max(1, math.ceil((1 - bucket.tokens) / bucket.rate))
            return _refusal(web.Response(
                status=429, text=f"Too many requests: try again in {wait} s.\n",
                headers={"Retry-After": str(wait)}))
        if not self._host_ok(request.headers.get("Host")):
            self.stats["http_refused_host"] += 1
            return _refusal(web.Response(status=421))
        self.stats["http_requests"] += 1
        connection = request.protocol
        if isinstance(connection, _Handler):
            connection.page_busy += 1
        try:
            return await handler(request)
        finally:
            if isinstance(connection, _Handler):
                connection.page_busy -= 1

    async def _file(self, request: web.Request) -> web.Response:
        body, kind = self._files[request.path]
        return web.Response(body=body, content_type=kind, charset="utf-8", headers={
            "Cache-Control": "no-cache", "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})

    # ---- /signal -------------------------------------------------------------------------

    def _origin_ok(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:  # not a browser (a browser always sends one on a WebSocket)
            return True
        host = request.headers.get("Host", "")
        return origin.lower() in (f"http://{host}".lower(), f"https://{host}".lower())

    async def _signal(self, request: web.Request) -> web.StreamResponse:
        source = request.remote or "?"
        if not self._origin_ok(request):
            self.stats["signal_refused_origin"] += 1
            return web.Response(status=403)
        if self._sockets.get(source, 0) >= self.max_per_host:
            self.stats["signal_refused_per_host"] += 1
            return web.Response(status=429)
        if sum(self._sockets.values()) >= self.max_pages:
            if not self._silent:
                self.stats["signal_refused_busy"] += 1
                return web.Response(status=503)
            # Every place taken, some by sockets that said nothing yet: the oldest of those
            # goes (sockets that never say hello cannot keep real pages out; a page says
            # hello at once, so it is the newest while it does).
            old, old_wire = self._silent.popitem(last=False)
            self.stats["signal_evicted_silent"] += 1
            if old_wire is not None and not old_wire.is_closing():
                old_wire.abort()
        ws = web.WebSocketResponse(max_msg_size=self.max_signal, autoping=True, heartbeat=None,
                                   compress=False)
        await ws.prepare(request)
        wire = request.transport
        self._sockets[source] = self._sockets.get(source, 0) + 1
        self.stats["signal_opened"] += 1
        name = None
        hang_up = []  # ends the page's link (set once it has one)
        self._silent[ws] = wire
        try:
            try:
                name = await self._hello(ws, source, hang_up, wire)
            finally:
                self._silent.pop(ws, None)
            if name is not None:
                self._transports[name] = wire
            if name is not None:
                await self._relay(ws, name)
        except (ConnectionError, asyncio.TimeoutError) as exc:
            log.debug("signaling from %s ended: %r", source, exc)
        finally:
            # A page is its WebSocket and its link: the one goes with the other (links that
            # outlived their socket let one address fill every place, and kept a reloaded
            # page's name taken).
            for end in hang_up:
                end()
            if name is not None and self.pages.get(name) is ws:
                del self.pages[name]
                self._transports.pop(name, None)
            self._sockets[source] -= 1
            if not self._sockets[source]:
                del self._sockets[source]
            await self._shut(ws, wire)
        return ws

    # Writing to a page: aiohttp makes everyone who writes to a WebSocket whose buffer is full
    # wait on one shared future, and cancels that future when it cancels the page's handler
    # (its connection dropped): whoever else was waiting got CancelledError — the node's
    # shutdown, or a page relaying to it, whose whole signaling ended. So each write and each
    # close runs in a task of its own, which nobody else waits on.

    def _detached(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._closing.add(task)
        task.add_done_callback(self._settled)
        return task

    def _settled(self, task: asyncio.Task) -> None:
        self._closing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("writing to a page: %r", task.exception())

    async def _write(self, ws: web.WebSocketResponse, text: str, timeout: float = 1.0) -> bool:
        """Send text to a page, waiting at most `timeout` for it: sent (or buffered)?"""
        task = self._detached(ws.send_str(text))
        done, _ = await asyncio.wait({task}, timeout=timeout)
        return bool(done) and not task.cancelled() and task.exception() is None

    async def _shut(self, ws: web.WebSocketResponse, wire, timeout: float = 1.0) -> None:
        """Close a page's WebSocket (the closing handshake, at most `timeout`), then its
        connection."""
        if not ws.closed:
            await asyncio.wait({self._detached(ws.close())}, timeout=timeout)
        if wire is not None and not wire.is_closing():
            wire.abort()

    async def _read(self, ws: web.WebSocketResponse, timeout: float | None):
        """The next message as a JSON object; None at the end; ValueError if it is not one."""
        msg = await (ws.receive(timeout) if timeout is not None else ws.receive())
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
            return None
        if msg.type == WSMsgType.ERROR:  # (over max_signal, among others)
            self.stats["signal_closed_error"] += 1
            return None
        if msg.type != WSMsgType.TEXT:
            raise ValueError("not text")
        try:
            obj = json.loads(msg.data)
        except (ValueError, RecursionError):
            raise ValueError("not JSON") from None
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        return obj

    async def _hello(self, ws: web.WebSocketResponse, source: str, hang_up: list,
                     wire=None) -> str | None:
        """The page's hello and offer, answered: its name, or None (refused, counted). The
        function that ends its link goes into hang_up."""
        me = self.node.name
        try:
            hello = await self._read(ws, self.hello_timeout)
        except asyncio.TimeoutError:
            self.stats["signal_hello_timeout"] += 1
            return None
        except ValueError:
            hello = {}
        if hello is None:
            return None
        name = hello.get("hello")
        if not _valid_name(name) or not isinstance(hello.get("offer"), str):
            self.stats["signal_refused_bad_hello"] += 1
            await ws.send_json({"hello": me, "refused": "bad_hello"})
            return None
        if name in self.pages:
            self.stats["signal_refused_duplicate"] += 1
            await ws.send_json({"hello": me, "refused": "duplicate"})
            return None
        reply, end = await self.node.browsers.answer(name, hello["offer"], source,
                                                     on_gone=lambda: self._link_gone(ws, wire))
        if end is not None:
            hang_up.append(end)
        if "refused" in reply:
            self.stats["signal_refused"] += 1
            await ws.send_json({"hello": me, **reply})
            return None
        others = sorted(self.pages)
        self.pages[name] = ws
        self.stats["signal_pages"] += 1
        await ws.send_json({"hello": me, **reply, "pages": others})
        return name

    def _link_gone(self, ws: web.WebSocketResponse, wire) -> None:
        """The page's link ended (or never opened): its WebSocket goes too."""
        if not ws.closed:
            self.stats["signal_closed_link"] += 1
            self._detached(self._shut(ws, wire))

    async def _relay(self, ws: web.WebSocketResponse, name: str) -> None:
        """Pass the page's signaling to the pages it names, until it closes."""
        now = time.monotonic()
        messages = _Bucket(self.signal_rate, self.signal_burst, now)
        size = _Bucket(self.signal_byte_rate, self.signal_byte_burst, now)
        while True:
            try:
                obj = await self._read(ws, None)
            except ValueError:
                self.stats["signal_dropped_malformed"] += 1
                continue
            if obj is None:
                return
            now = time.monotonic()
            kinds = [k for k in RELAYED if k in obj]
            to = obj.get("to")
            if set(obj) != {"to", *kinds} or len(kinds) != 1 or not isinstance(to, str) or \
                    not isinstance(obj[kinds[0]], str) or \
                    (kinds[0] == "refused" and len(obj["refused"]) > NAME_MAX):
                self.stats["signal_dropped_malformed"] += 1
                continue
            target = self.pages.get(to)
            if target is None or to == name:
                self.stats["signal_dropped_unknown_page"] += 1
                continue
            out = json.dumps({"from": name, kinds[0]: obj[kinds[0]]})
            if not messages.take(1, now) or not size.take(len(out), now):
                self.stats["signal_dropped_rate"] += 1
                continue
            wire = self._transports.get(to)
            if wire is None or wire.is_closing() or \
                    wire.get_write_buffer_size() + len(out) > RELAY_BACKLOG:
                # A page that does not read its WebSocket: what waits for it stays bounded
                # (aiohttp waits for the buffer to drain only every 64 KB).
                self.stats["signal_dropped_send"] += 1
                continue
            # (a page that does not read: this page's relaying waits, at most 1 s, nobody
            # else's)
            if await self._write(target, out):
                self.stats["signal_relayed"] += 1
            else:
                self.stats["signal_dropped_send"] += 1


class _Handler(RequestHandler):
    """aiohttp's connection handler behind the page server's connection bounds: one past them
    is closed at once, without a byte (aiohttp never sees it)."""

    __slots__ = ("page_server", "page_source", "page_busy")

    def __init__(self, page_server: PageServer, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.page_server, self.page_source = page_server, None
        self.page_busy = 0  # requests under way (a WebSocket is one for its whole life)

    def connection_made(self, transport) -> None:
        peer = transport.get_extra_info("peername")
        source = peer[0] if peer else "?"
        if not self.page_server._admit_connection(self, source):
            transport.abort()
            return
        self.page_source = source
        super().connection_made(transport)

    def connection_lost(self, exc) -> None:
        if self.page_source is None:  # refused
            return
        self.page_server._release_connection(self)
        super().connection_lost(exc)

    def handle_error(self, request, status: int = 500, exc=None, message=None):
        """aiohttp's error answer quotes what it could not parse (5,000 bytes of garbage came
        back as 20,205): ours names the status alone, about 150 bytes whatever came."""
        self.page_server.stats[f"http_error_{status}"] += 1
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        return super().handle_error(request, status, exc, phrase)


def _refusal(response: web.Response) -> web.Response:
    """A refusal ends its connection: requests pipelined behind it (38 bytes each) got one
    refusal each, 230 bytes."""
    response.force_close()
    return response


async def _no_content(request: web.Request) -> web.Response:
    return web.Response(status=204)
