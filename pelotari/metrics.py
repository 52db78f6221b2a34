"""`--metrics HOST:PORT` for every long-running pelotari process: Prometheus text exposition
(prometheus_client) at /metrics and a JSON status view of the process's table at /status.

A protocol supplies a *source*: an object with `collect()` -> iterable of prometheus_client
metric families (built at scrape time from the counters the process keeps anyway, so nothing
is counted twice and the hot path pays nothing between scrapes) and `status()` -> a dict whose
`entries` list (subscribers, peers…) /status sorts, pages and caps, NATS /connz style:
`/status?sort=FIELD&order=desc&limit=N&offset=K`.

The server answers at most MAX_CONNECTIONS connections at once, at most PER_HOST_CONNECTIONS
from one host, each for at most REQUEST_TIMEOUT seconds in all; one more from a host that holds
its share cuts that host's oldest (a scraper's next request is never refused while the last
one's thread is still finishing: it was, under load), a connection from a host that holds none
while all are taken cuts the oldest one of the host holding the most, and any other past a
bound is closed at once. So a stranger who connects and dribbles, from however many
addresses, costs a thread for a bounded time and cannot lock a scraper on another host out. It
binds loopback unless told otherwise.
"""
import json
import socket
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Protocol
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.process_collector import ProcessCollector

DEFAULT_HOST = "127.0.0.1"  # loopback unless the operator names another address
DEFAULT_PORT = 9466  # --metrics HOST alone (a free port in Prometheus's default-port list)
REQUEST_TIMEOUT = 5.0  # seconds one HTTP connection may take in all (request and answer)
MAX_CONNECTIONS = 8  # connections served at once; more are closed unanswered
PER_HOST_CONNECTIONS = 2  # of those, from one source address
DEFAULT_LIMIT = 1024  # /status entries per answer unless ?limit= says otherwise
MAX_LIMIT = 65536  # the most /status entries one answer holds, whatever ?limit= asks

__all__ = ["MetricsServer", "MetricsSource", "counter", "counters_by", "gauge", "histogram",
           "gauges_by", "stats_families", "OnLoop", "DEFAULT_HOST"]


class MetricsSource(Protocol):
    """What a protocol hands the metrics server."""

    def collect(self) -> Iterable:
        """Metric families (prometheus_client.core) as of now."""

    def status(self) -> dict:
        """A JSON-able snapshot; its `entries` list is the table /status pages through."""


def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    """One unlabelled counter (`name` without `_total`; the exposition adds it)."""
    return CounterMetricFamily(name, documentation, value=value)


def counters_by(name: str, documentation: str, label: str,
                values: Mapping[str, float]) -> CounterMetricFamily:
    """One counter family with a sample per label value (drops by reason)."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key, value in values.items():
        family.add_metric([str(key)], value)
    return family


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    """One unlabelled gauge."""
    return GaugeMetricFamily(name, documentation, value=value)


def histogram(name: str, documentation: str, buckets: Iterable[tuple[float, int]],
              total: float) -> HistogramMetricFamily:
    """A histogram from (upper bound, cumulative count) pairs ending at +inf, and the sum."""
    pairs = [(repr(float(bound)) if bound != float("inf") else "+Inf", count)
             for bound, count in buckets]
    if not pairs or pairs[-1][0] != "+Inf":
        raise ValueError("a histogram's last bucket is +inf")
    return HistogramMetricFamily(name, documentation, buckets=pairs, sum_value=total)


def gauges_by(name: str, documentation: str, label: str,
              values: Mapping[str, float]) -> GaugeMetricFamily:
    """One gauge family with a sample per label value (connections by status)."""
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in values.items():
        family.add_metric([str(key)], value)
    return family


def stats_families(prefix: str, stats: Mapping[str, float],
                   drop_prefixes: tuple = ("dropped_",)):
    """Counter families for a node's counters: keys starting with one of `drop_prefixes` as
    one `<prefix>drops` family labelled by reason (the key, less a leading `dropped_`), every
    other key its own counter `<prefix><key>` (the snake_case names the protocol documents).
    The drops family is there even when nothing was dropped."""
    stats = dict(stats)  # one copy: the node's loop may add keys meanwhile
    drops = {k.removeprefix("dropped_"): v for k, v in sorted(stats.items())
             if k.startswith(drop_prefixes)}
    yield counters_by(prefix + "drops", "Datagrams or messages dropped or refused, by reason "
                      "(the protocol's document names each).", "reason", drops)
    for key, value in sorted(stats.items()):
        if not key.startswith(drop_prefixes) and isinstance(value, (int, float)):
            yield counter(prefix + key, f"{key.replace('_', ' ')} (the node's counter).", value)


class OnLoop:
    """A MetricsSource that reads `source` on an asyncio loop's own thread (call_soon_threadsafe),
    so that the node's tables are never read while its loop changes them; a loop too busy to
    answer within `timeout` seconds fails the scrape (TimeoutError), never the node."""

    def __init__(self, source, loop, timeout: float = 2.0):
        self.source, self.loop, self.timeout = source, loop, timeout

    def _run(self, fn):
        import concurrent.futures

        future = concurrent.futures.Future()

        def call():
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the scraping thread
                    future.set_exception(exc)

        self.loop.call_soon_threadsafe(call)
        try:
            return future.result(self.timeout)
        finally:
            future.cancel()

    def collect(self):
        """The source's families, built on the loop."""
        return self._run(lambda: list(self.source.collect()))

    def status(self) -> dict:
        """The source's status, built on the loop."""
        return self._run(self.source.status)


class _Collector:
    def __init__(self, source):
        self.source = source

    def collect(self):
        yield from self.source.collect()


def page(entries: list, query: Mapping[str, list]) -> dict:
    """The /status slice of `entries`: sorted by ?sort= (a field, numbers high first unless
    ?order=asc), from ?offset=, at most ?limit= (capped at MAX_LIMIT); ValueError for bad ones."""
    def one(key, default):
        values = query.get(key)
        return values[-1] if values else default

    sort, order = one("sort", None), one("order", "desc")
    if order not in ("asc", "desc"):
        raise ValueError("order is asc or desc")
    try:
        limit = int(one("limit", DEFAULT_LIMIT))
        offset = int(one("offset", 0))
    except ValueError:
        raise ValueError("limit and offset are whole numbers") from None
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset are not negative")
    limit = min(limit, MAX_LIMIT)
    if sort is not None:
        if entries and sort not in entries[0]:
            raise ValueError(f"no field {sort!r} to sort by (fields: {', '.join(entries[0])})")
        # Numbers by value, anything else (a list of flags, an address) by its text; entries
        # without the field go last whichever the order.
        def key(e):
            v = e.get(sort)
            return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))

        present = [e for e in entries if e.get(sort) is not None]
        entries = (sorted(present, key=key, reverse=(order == "desc"))
                   + [e for e in entries if e.get(sort) is None])
    return {"total": len(entries), "offset": offset, "limit": limit,
            "entries": entries[offset:offset + limit]}


class _Handler(BaseHTTPRequestHandler):
    server_version = "pelotari-metrics"
    timeout = REQUEST_TIMEOUT  # applied to the connection's socket by StreamRequestHandler
    error_content_type = "text/plain"
    error_message_format = "%(code)d %(message)s\n"

    def send_error(self, code, message=None, explain=None):
        """The status alone: http.server's error page quoted a bad request line back (3,018
        bytes in, 3,364 out)."""
        super().send_error(code)

    def do_GET(self):  # noqa: N802 - http.server's naming
        url = urlsplit(self.path)
        owner: MetricsServer = self.server.owner
        try:
            if url.path == "/metrics":
                body = generate_latest(owner.registry)
                self._answer(200, CONTENT_TYPE_LATEST, body)
            elif url.path == "/status":
                snapshot = dict(owner.source.status())
                snapshot.update(page(list(snapshot.pop("entries", [])),
                                     parse_qs(url.query, max_num_fields=16)))
                self._answer(200, "application/json",
                             json.dumps(snapshot, default=str).encode() + b"\n")
            elif url.path == "/":
                self._answer(200, "text/plain; charset=utf-8", owner.index().encode())
            else:
                self._answer(404, "text/plain; charset=utf-8", b"not found: try /metrics or /status\n")
        except ValueError as exc:
            self._answer(400, "text/plain; charset=utf-8", f"{exc}\n".encode())
        except (TimeoutError, RuntimeError):  # the node's loop is busy or already stopping
            owner.errors += 1
            self._answer(503, "text/plain; charset=utf-8", b"busy: try again\n")

    def do_HEAD(self):  # noqa: N802
        self._answer(200 if urlsplit(self.path).path in ("/", "/metrics", "/status") else 404,
                     "text/plain", b"", head=True)

    def _answer(self, code, content_type, body, head=False):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format, *args):  # noqa: A002 - scrapes are not news on stderr
        self.server.owner.requests += 1


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True
    block_on_close = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.active: Counter = Counter()  # open connections by source host
        self.timers: dict = {}  # connection -> the timer that cuts it at REQUEST_TIMEOUT
        self.opened: dict = {}  # connection -> its host, oldest first
        self.cut: set = set()  # connections evicted for a newcomer, not yet released

    def process_request(self, request, client_address):
        host = client_address[0]
        victim = None
        with self.lock:
            if self.active[host] >= PER_HOST_CONNECTIONS:
                victim = self._evict(host)  # the host's own oldest makes room
            full = False
            if victim is None and sum(self.active.values()) >= MAX_CONNECTIONS:
                if self.active[host] == 0:  # a host that holds none: make room
                    victim = self._evict()
                full = victim is None
            if not full:
                self.active[host] += 1
                self.opened[request] = host
        if victim is not None:
            self.owner.evicted += 1
            _cut(victim)
        if full:
            self.owner.refused += 1
            self.shutdown_request(request)
            return
        # The whole exchange has REQUEST_TIMEOUT: after it the socket is shut, whatever the
        # client is doing, and the handler's next read or write ends it.
        timer = threading.Timer(self.owner.request_timeout, _cut, (request,))
        timer.daemon = True
        with self.lock:
            self.timers[request] = timer
        timer.start()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request, host)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request, client_address[0])

    def _evict(self, of_host=None):
        """The oldest connection of `of_host`, or of the host holding the most, its place
        freed (lock held)."""
        busiest = max(self.active.values())
        for request, host in self.opened.items():  # oldest first
            if host == of_host if of_host is not None else self.active[host] == busiest:
                del self.opened[request]
                self.cut.add(request)
                self._forget(host)
                return request
        return None

    def _forget(self, host):
        self.active[host] -= 1
        if self.active[host] <= 0:
            del self.active[host]

    def _release(self, request, host):
        with self.lock:
            self.timers.pop(request).cancel()
            if request in self.cut:  # its place went to a newcomer already
                self.cut.discard(request)
            else:
                del self.opened[request]
                self._forget(host)

    def handle_error(self, request, client_address):
        self.owner.errors += 1  # a client that hung up or timed out: counted, never printed


def _cut(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class MetricsServer:
    """Serves a MetricsSource over HTTP on (host, port) from a daemon thread until stop()."""

    def __init__(self, source: MetricsSource, host: str = DEFAULT_HOST, port: int = 0,
                 process_metrics: bool = True, request_timeout: float = REQUEST_TIMEOUT):
        if not 0 < request_timeout <= 3600:
            raise ValueError("request_timeout is in (0, 3600] seconds")
        self.source = source
        self.request_timeout = request_timeout
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(source))
        if process_metrics:  # process_cpu_seconds_total, process_resident_memory_bytes, fds
            ProcessCollector(registry=self.registry)
        self.requests = 0  # answered
        self.errors = 0  # connections that failed (hung up, timed out, garbage)
        self.refused = 0  # connections closed unanswered: too many at once
        self.evicted = 0  # connections cut to make room (a new host's, or the same host's newer)
        self._server: Optional[_Server] = _Server((host, port), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                         kwargs={"poll_interval": 0.2},
                                         name="pelotari-metrics", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) actually bound."""
        return self._server.server_address[:2]

    @property
    def url(self) -> str:
        """http://HOST:PORT of the server."""
        host, port = self.address
        return f"http://{host}:{port}"

    def index(self) -> str:
        """The text served at /."""
        return (f"pelotari metrics\n{self.url}/metrics  Prometheus text exposition\n"
                f"{self.url}/status   JSON: counters and the table "
                "(?sort=FIELD&order=asc|desc&limit=N&offset=K)\n")

    def start(self) -> "MetricsServer":
        """Start answering; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering and close the socket."""
        if self._server is None:
            return
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(self.request_timeout + 1)
        self._server.server_close()
        self._server = None

    def __enter__(self) -> "MetricsServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
