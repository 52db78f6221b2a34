"""asyncio adapter for the prototari core: a unicast socket, a broadcast listener, the timer."""
import asyncio
import fcntl
import socket
import struct
import time
from dataclasses import replace
from typing import AsyncIterator, Optional, Set, Tuple

from pelotari.prototari.core import Address, Config, NodeCore

SIOCGIFADDR = 0x8915
SIOCGIFBRDADDR = 0x8919


def interface_addresses(name: str) -> Tuple[str, str]:
    """(IPv4 address, broadcast address) of a network interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("256s", name.encode()[:15])
        try:
            addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)[20:24])
            brd = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFBRDADDR, req)[20:24])
        except OSError as exc:
            raise ValueError(f"interface {name!r} has no IPv4 address ({exc.strerror})") from None
    return addr, brd


class _Endpoint(asyncio.DatagramProtocol):
    def __init__(self, node: "Node"):
        self.node = node

    def datagram_received(self, data, addr):
        self.node._received(data, addr)

    def error_received(self, exc):
        self.node.core.stats["socket_errors"] += 1


class Node:
    """A running prototari node. Use `await Node.start(...)`, then events(), send(), close()."""

    def __init__(self, config: Config, host: str):
        self.config = config
        self.host = host
        self._loop = asyncio.get_running_loop()
        self._offset = time.monotonic() - self._loop.time()
        self.core: Optional[NodeCore] = None
        self._events: "asyncio.Queue" = asyncio.Queue()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._unicast = self._listener = None

    @classmethod
    async def start(cls, config: Optional[Config] = None, *, interface: Optional[str] = None,
                    host: Optional[str] = None) -> "Node":
        """Open the sockets and start broadcasting. With `interface`, its address and broadcast
        address are used (and the sockets bound to it); else `host` (default all) and the
        config's broadcast address."""
        config = config or Config()
        if interface is not None:
            addr, brd = interface_addresses(interface)
            host = host or addr
            config = replace(config, broadcast_address=brd)
        node = cls(config, host or "0.0.0.0")
        await node._open(interface)
        return node

    async def _open(self, interface: Optional[str]) -> None:
        cfg = self.config
        uni = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        uni.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        lis = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # Several nodes on one host all hear the broadcasts on the shared port.
        lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            if interface is not None:
                for s in (uni, lis):
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
            uni.bind((self.host, cfg.unicast_port))
            lis.bind(("", cfg.broadcast_port))
        except OSError:
            uni.close()
            lis.close()
            raise
        bound = uni.getsockname()
        self.address: Address = (self.host if self.host != "0.0.0.0" else bound[0], bound[1])
        self_addresses: Set[Address] = {self.address}
        self.core = NodeCore(self._now(), cfg, self_addresses)
        self._unicast, _ = await self._loop.create_datagram_endpoint(lambda: _Endpoint(self), sock=uni)
        self._listener, _ = await self._loop.create_datagram_endpoint(lambda: _Endpoint(self), sock=lis)
        self._pump()

    def _now(self) -> float:
        return self._loop.time() + self._offset

    def _received(self, data: bytes, addr) -> None:
        self.core.receive_datagram(data, addr[:2], self._now())
        self._pump()

    def _pump(self) -> None:
        core = self.core
        now = self._now()
        if core.get_timer() <= now:
            core.handle_timer(now)
        for data, to in core.datagrams_to_send():
            try:
                self._unicast.sendto(data, to)
            except OSError:
                core.stats["send_errors"] += 1
        while (ev := core.next_event()) is not None:
            self._events.put_nowait(ev)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(max(0.0, core.get_timer() - now), self._pump)

    @property
    def peers(self) -> Set[Address]:
        """Registered peers."""
        return set(self.core.peers)

    def send(self, peer: Address, data: bytes) -> None:
        """Send data to one registered peer (KeyError for a stranger)."""
        self.core.send(peer, data)
        self._pump()

    def send_all(self, data: bytes) -> int:
        """Send data to every registered peer; return how many."""
        n = self.core.send_all(data)
        self._pump()
        return n

    async def next_event(self, timeout: Optional[float] = None):
        """The next PeerJoined, PeerLeft or Message (None after timeout)."""
        try:
            return await asyncio.wait_for(self._events.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def events(self) -> AsyncIterator[object]:
        """Every event, as it happens."""
        while True:
            yield await self._events.get()

    async def close(self) -> None:
        """Stop timers and close both sockets (peers notice by the missed heartbeats)."""
        if self._timer:
            self._timer.cancel()
        for t in (self._unicast, self._listener):
            if t:
                t.close()
