"""The fyrehose backbone server: runs a backbone socket loop (around its sans-IO core) on a
thread: fastpath.backbone's nogil loop, or under PELOTARI_PURE_PYTHON=1 (or unbuilt) the
pure-Python one in pelotari.fyrehose.backbone_core."""
import signal
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable, Optional

from fastpath.implementation import compiled
from pelotari.fyrehose.batchio import set_buffers
from fastpath.packets import DEFAULT_PORT, MAX_DATA, MAX_DATAGRAM

if compiled("backbone") is None:
    from pelotari.fyrehose.backbone_core import BackboneLoop
    IMPLEMENTATION = "python"
else:
    from fastpath.backbone import BackboneLoop
    IMPLEMENTATION = "cython"


@dataclass(frozen=True)
class BackboneConfig:
    """Everything a backbone can be told; every limit is here."""

    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    window: float = 5.0  # seconds a client stays subscribed after a KEEPALIVE
    max_subscribers: int = 4096
    max_data: int = MAX_DATA
    max_request_range: int = 1024  # sequences one REQUEST may name
    allow_foreign_addresses: bool = False  # honour KEEPALIVE/REQUEST ADDR naming another host
    first_sequence: Optional[int] = None  # None: the wall clock in microseconds
    batch: int = 64  # datagrams per recvmmsg
    socket_buffer: int = 8 << 20  # SO_RCVBUF/SO_SNDBUF asked for (the kernel may cap it)
    gso: Optional[bool] = None  # UDP GSO fan-out: None = when the kernel supports it
    gso_max_segment: int = 1472  # larger DELIVERs go one per send (fits an Ethernet MTU)
    packing: bool = True  # packing extension: packed PUSHes in, packed DELIVERs to those who ask
    max_pack: int = MAX_DATAGRAM  # caps the packed datagram size a client may ask for
    max_pack_frames: int = 1024  # most PUSH frames one packed datagram may hold
    max_per_address: int = 256  # table entries one source host may hold (0: no limit)
    repair_rate: float = 16384.0  # sequences/s each subscriber's REQUEST budget refills
    repair_burst: float = 16384.0  # sequences a subscriber may REQUEST at once
    gated: bool = False  # a cluster member: sequences nothing until gate() allows it


class Backbone:
    """Runs a fyrehose backbone on its own thread; the loop itself holds no GIL."""

    def __init__(self, config: Optional[BackboneConfig] = None, **overrides):
        self.config = replace(config or BackboneConfig(), **overrides)
        self._sock: Optional[socket.socket] = None
        self._loop: Optional[BackboneLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self.started_at: Optional[float] = None

    @property
    def address(self) -> tuple:
        """The (host, port) actually bound."""
        if self._sock is None:
            raise RuntimeError("backbone is not started")
        return self._sock.getsockname()

    def start(self) -> "Backbone":
        """Bind the socket and start serving; raises OSError if the address is unusable."""
        if self._thread is not None:
            raise RuntimeError("backbone already started")
        cfg = self.config
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            set_buffers(sock, cfg.socket_buffer)
            sock.bind((cfg.host, cfg.port))
            sock.setblocking(True)  # the loop sleeps in recvmmsg (see BackboneLoop.serve)
            self._loop = BackboneLoop(
                sock.fileno(), window=cfg.window, max_subscribers=cfg.max_subscribers,
                max_data=cfg.max_data, max_request_range=cfg.max_request_range,
                allow_foreign_addresses=cfg.allow_foreign_addresses,
                first_sequence=cfg.first_sequence, batch=cfg.batch, gso=cfg.gso,
                gso_max_segment=cfg.gso_max_segment, packing=cfg.packing,
                max_pack=cfg.max_pack, max_pack_frames=cfg.max_pack_frames,
                max_per_address=cfg.max_per_address, repair_rate=cfg.repair_rate,
                repair_burst=cfg.repair_burst)
            if cfg.gated:
                self._loop.core.gate(0, 0)  # closed before the first datagram is read
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="fyrehose-backbone", daemon=True)
        self.started_at = time.monotonic()
        self._thread.start()
        return self

    def _run(self):
        try:
            self._loop.serve()
        except BaseException as exc:  # pragma: no cover - the loop itself does not raise
            self._error = exc

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket."""
        if self._thread is None:
            return
        self._loop.stop()
        self._thread.join(timeout)
        self._thread = None
        self._sock.close()
        self._sock = None

    @property
    def running(self) -> bool:
        """Whether the loop thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def next_sequence(self) -> int:
        """SEQUENCE the next PUSH will be given."""
        return self._loop.core.next_sequence

    # ---- the backbone-cluster extension (docs/protocols/fyrehose-cluster.md) ----

    def gate(self, limit: int, until: float) -> None:
        """Sequence only up to SEQUENCE `limit` (mod 2^48) and only until `until`
        (time.monotonic() seconds); past either, PUSH, KEEPALIVE and REQUEST are dropped."""
        self._loop.core.gate(limit & ((1 << 48) - 1), int(until * 1e9) if until > 0 else 0)

    def set_next_sequence(self, sequence: int) -> None:
        """The SEQUENCE the next PUSH gets (a new epoch's first; call while gated closed)."""
        self._loop.core.set_next_sequence(sequence)

    def adopt(self, entries) -> None:
        """Take over table entries of an old active's, [(host, port, flags, seconds_left)]:
        the loop applies them at once (woken by an empty datagram, counted as `truncated`)."""
        now = time.monotonic_ns()
        self._loop.core.adopt([(h, p, f, now + int(left * 1e9)) for h, p, f, left in entries])
        host, port = self._sock.getsockname()
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"", ("127.0.0.1" if host == "0.0.0.0" else host, port))
        except OSError:
            pass  # (the loop applies them at its next wake-up, within WAKE_INTERVAL)

    def send(self, data: bytes, addresses) -> int:
        """Send one datagram to each address from the backbone's socket, never waiting (a
        full buffer drops it); how many went."""
        sent = 0
        for address in addresses:
            try:
                self._sock.sendto(data, socket.MSG_DONTWAIT, address)
                sent += 1
            except OSError:
                pass
        return sent

    def set_info(self, info: Optional[bytes]) -> None:
        """The INFO a QUERY is answered with (None: QUERY goes unanswered)."""
        self._loop.core.set_info(info)

    def stats(self) -> dict:
        """A snapshot: datagrams/bytes in and out, pushes, subscribers, drops by reason."""
        snap = self._loop.stats()
        snap["uptime"] = time.monotonic() - self.started_at if self.started_at else 0.0
        return snap

    def subscribers(self) -> list:
        """Live clients as [(host, port, flags, seconds_left)]."""
        return self._loop.subscribers()

    def table(self) -> list:
        """Live clients as dicts: address, flags, seconds left, age and per-entry counters."""
        return self._loop.table()

    def serve_forever(self, on_tick: Optional[Callable[[dict], None]] = None,
                      interval: float = 1.0) -> Optional[int]:
        """Serve until SIGINT or SIGTERM, calling on_tick(stats) every interval; then stop.
        Returns the signal that stopped it (None: the loop ended by itself)."""
        if self._thread is None:
            self.start()
        done = threading.Event()
        previous = {}
        stopped_by = []

        def handler(signum, frame):
            stopped_by.append(signum)
            done.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
        try:
            while not done.wait(interval):
                if on_tick is not None:
                    on_tick(self.stats())
                if not self.running:
                    break
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            self.stop()
        return stopped_by[0] if stopped_by else None

    def __enter__(self) -> "Backbone":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
