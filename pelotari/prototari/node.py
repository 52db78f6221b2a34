"""asyncio adapter for the prototari core: a unicast socket, a broadcast listener, the timer.

Interfaces are found with the standard library only: socket.if_nameindex() and the
SIOCGIFFLAGS / SIOCGIFADDR / SIOCGIFBRDADDR / SIOCGIFCONF ioctls (Linux).
"""
import array
import asyncio
import errno
import fcntl
import ipaddress
import logging
import socket
import struct
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, replace

from pelotari.prototari.core import Address, Config, NodeCore

log = logging.getLogger("pelotari.prototari")

SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
SIOCGIFBRDADDR = 0x8919
SIOCGIFCONF = 0x8912
IFF_UP, IFF_BROADCAST, IFF_LOOPBACK = 0x1, 0x2, 0x8
PRIVATE_NETWORKS = tuple(ipaddress.ip_network(n) for n in
                         ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


@dataclass(frozen=True)
class Interface:
    """One network interface as the kernel reports it (its primary IPv4 address)."""

    name: str
    address: str | None
    broadcast: str | None
    up: bool
    loopback: bool
    can_broadcast: bool

    @property
    def private(self) -> bool:
        """Whether its address is in 10/8, 172.16/12 or 192.168/16."""
        if self.address is None:
            return False
        ip = ipaddress.ip_address(self.address)
        return any(ip in net for net in PRIVATE_NETWORKS)


def _ifreq(s: socket.socket, request: int, name: str) -> bytes:
    return fcntl.ioctl(s.fileno(), request, struct.pack("256s", name.encode()[:15]))


def interface_addresses(name: str) -> tuple[str, str]:
    """(IPv4 address, broadcast address) of a network interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            addr = socket.inet_ntoa(_ifreq(s, SIOCGIFADDR, name)[20:24])
            brd = socket.inet_ntoa(_ifreq(s, SIOCGIFBRDADDR, name)[20:24])
        except OSError as exc:
            raise ValueError(f"interface {name!r} has no IPv4 address ({exc.strerror})") from None
    return addr, brd


def interfaces() -> list[Interface]:
    """Every interface of this host (network namespace), with its primary IPv4 address."""
    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                flags = struct.unpack_from("H", _ifreq(s, SIOCGIFFLAGS, name), 16)[0]
            except OSError:
                continue  # gone since it was listed
            try:
                address = socket.inet_ntoa(_ifreq(s, SIOCGIFADDR, name)[20:24])
            except OSError:
                address = None  # no IPv4 address
            broadcast = None
            if address is not None and flags & IFF_BROADCAST:
                try:
                    broadcast = socket.inet_ntoa(_ifreq(s, SIOCGIFBRDADDR, name)[20:24])
                except OSError:
                    pass
                if broadcast == "0.0.0.0":
                    broadcast = None
            out.append(Interface(name, address, broadcast, bool(flags & IFF_UP),
                                 bool(flags & IFF_LOOPBACK), bool(flags & IFF_BROADCAST)))
    return out


def choose_interface(candidates: Iterable[Interface]) -> Interface:
    """The one interface to use by default, as the original Go implementation picks it: up,
    not loopback, with a broadcast address, and an address in a private range. Raises
    ValueError (one line, telling the user to pass -i) if there is none or several."""
    fit = [i for i in candidates
           if i.up and not i.loopback and i.can_broadcast and i.broadcast and i.private]
    if len(fit) == 1:
        return fit[0]
    if not fit:
        raise ValueError("no private IPv4 interface (10/8, 172.16/12, 192.168/16; up, not "
                         "loopback, with a broadcast address): pass -i/--interface")
    names = ", ".join(f"{i.name} ({i.address})" for i in fit)
    raise ValueError(f"several private IPv4 interfaces: {names}; pass -i/--interface to choose")


def local_ipv4_addresses() -> set[str]:
    """Every IPv4 address of this host (network namespace), secondary ones included."""
    size = 40  # struct ifreq on 64-bit Linux
    count = 64
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        while True:
            buf = array.array("B", b"\0" * (size * count))
            addr, _ = buf.buffer_info()
            used = struct.unpack("iL", fcntl.ioctl(s.fileno(), SIOCGIFCONF,
                                                   struct.pack("iL", len(buf), addr)))[0]
            if used < len(buf):
                break
            count *= 2
    data = buf.tobytes()
    return {socket.inet_ntoa(data[i + 20:i + 24]) for i in range(0, used, size)}


@dataclass(frozen=True)
class NodeWarning:
    """A socket error of a kind not seen before (each kind is reported once, and counted in
    stats: `send_errors`, `receive_errors`)."""

    kind: str  # e.g. "send ENETUNREACH"
    message: str


class _Endpoint(asyncio.DatagramProtocol):
    def __init__(self, node: "Node"):
        self.node = node

    def datagram_received(self, data, addr):
        self.node._received(data, addr)

    def error_received(self, exc):
        self.node._socket_error(exc)


class Node:
    """A running prototari node. Use `await Node.start(...)`, then events(), send(), close()."""

    def __init__(self, config: Config, host: str, interface: str | None = None):
        self.config = config
        self.host = host
        self.interface = interface
        self._loop = asyncio.get_running_loop()
        self._offset = time.monotonic() - self._loop.time()
        self.core: NodeCore | None = None
        self._events: asyncio.Queue = asyncio.Queue()
        self._timer: asyncio.TimerHandle | None = None
        self._unicast = self._listener = None
        self._sending_to: Address | None = None
        self._reported: set[str] = set()

    @classmethod
    async def start(cls, config: Config | None = None, *, interface: str | None = None,
                    host: str | None = None) -> "Node":
        """Open the sockets and start broadcasting.

        With `interface`, its address and broadcast address are used (and the sockets bound to
        it). With `host` and no interface, that address is bound and the config's broadcast
        address (default 255.255.255.255) used. With neither, the host's one private IPv4
        interface is used as if named (ValueError if there is none or several). A broadcast
        address in the config always wins over the interface's."""
        config = config or Config()
        if interface is None and host is None:
            interface = choose_interface(interfaces()).name
        own: set[str] = set()
        if interface is not None:
            addr, brd = interface_addresses(interface)
            own = local_ipv4_addresses() | {addr}
            host = host or addr
            config = replace(config, broadcast_address=config.broadcast_address or brd)
        elif host in ("0.0.0.0", ""):
            own = local_ipv4_addresses()
        node = cls(config, host or "0.0.0.0", interface)
        await node._open(own)
        return node

    async def _open(self, own: set[str]) -> None:
        cfg = self.config
        uni = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        uni.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        lis = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # Several nodes on one host (multi_node) all hear the broadcasts on the shared port.
        lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            if self.interface is not None:
                for s in (uni, lis):
                    try:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE,
                                     self.interface.encode())
                    except PermissionError:  # older kernels want CAP_NET_RAW: bind by address
                        log.debug("SO_BINDTODEVICE not permitted; bound by address only")
            uni.bind((self.host, cfg.unicast_port))
            lis.bind(("", cfg.broadcast_port))
        except OSError:
            uni.close()
            lis.close()
            raise
        bound = uni.getsockname()
        self.address: Address = (self.host if self.host != "0.0.0.0" else bound[0], bound[1])
        self_addresses: set[Address] = {(ip, bound[1]) for ip in own | {self.address[0]}}
        self.core = NodeCore(self._now(), cfg, self_addresses)
        self._unicast, _ = await self._loop.create_datagram_endpoint(lambda: _Endpoint(self), sock=uni)
        self._listener, _ = await self._loop.create_datagram_endpoint(lambda: _Endpoint(self), sock=lis)
        self._pump()

    @property
    def broadcast(self) -> Address:
        """Where `pelotari?` goes."""
        return (self.config.broadcast_address or "255.255.255.255", self.config.broadcast_port)

    def _now(self) -> float:
        return self._loop.time() + self._offset

    def _received(self, data: bytes, addr) -> None:
        self.core.receive_datagram(data, addr[:2], self._now())
        self._pump()

    def _socket_error(self, exc: OSError, to: Address | None = None) -> None:
        to = to or self._sending_to
        direction = "send" if to is not None else "receive"
        self.core.stats[f"{direction}_errors"] += 1
        name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        kind = f"{direction} {name}"
        if kind in self._reported:
            return
        self._reported.add(kind)
        where = f" to {to[0]}:{to[1]}" if to is not None else ""
        message = (f"cannot {direction}{where}: {exc.strerror or exc} (counted in "
                   f"{direction}_errors; further {name} errors are not reported)")
        log.warning("%s", message)
        self._events.put_nowait(NodeWarning(kind, message))

    def _pump(self) -> None:
        core = self.core
        now = self._now()
        if core.get_timer() <= now:
            core.handle_timer(now)
        for data, to in core.datagrams_to_send():
            self._sending_to = to  # the transport reports a failed sendto to error_received
            try:
                self._unicast.sendto(data, to)
            except OSError as exc:
                self._socket_error(exc, to)
            finally:
                self._sending_to = None
        while (ev := core.next_event()) is not None:
            self._events.put_nowait(ev)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(max(0.0, core.get_timer() - now), self._pump)

    @property
    def peers(self) -> set[Address]:
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

    async def next_event(self, timeout: float | None = None):
        """The next PeerJoined, PeerLeft, Message or NodeWarning (None after timeout)."""
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
