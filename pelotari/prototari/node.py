"""asyncio adapter for the prototari core: a unicast socket, a broadcast listener, the timer.

Interfaces are found with the standard library only: socket.if_nameindex() and the
SIOCGIFFLAGS / SIOCGIFADDR / SIOCGIFBRDADDR / SIOCGIFNETMASK / SIOCGIFCONF ioctls (Linux).
"""
import array
import asyncio
import fcntl
import ipaddress
import logging
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

from pelotari.adapter import DatagramNode, NodeWarning
from pelotari.prototari.core import Address, Config, NodeCore

log = logging.getLogger("pelotari.prototari")

SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
SIOCGIFBRDADDR = 0x8919
SIOCGIFNETMASK = 0x891b
SIOCGIFCONF = 0x8912
IFF_UP, IFF_BROADCAST, IFF_LOOPBACK = 0x1, 0x2, 0x8
READ_SIZE = 65536  # bytes read per datagram (the largest DATA is 65,503)
PRIVATE_NETWORKS = tuple(ipaddress.ip_network(n) for n in
                         ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


@dataclass(frozen=True)
class Interface:
    """One network interface as the kernel reports it (its primary IPv4 address)."""

    name: str
    address: str | None
    broadcast: str | None  # the configured one, else derived from the netmask (None for /31, /32)
    up: bool
    loopback: bool
    can_broadcast: bool
    prefix: int | None = None

    @property
    def private(self) -> bool:
        """Whether its address is in 10/8, 172.16/12 or 192.168/16."""
        if self.address is None:
            return False
        ip = ipaddress.ip_address(self.address)
        return any(ip in net for net in PRIVATE_NETWORKS)


def _ifreq(s: socket.socket, request: int, name: str) -> bytes:
    return fcntl.ioctl(s.fileno(), request, struct.pack("256s", name.encode()[:15]))


def broadcast_address(address: str, prefix: int) -> str | None:
    """The broadcast address of address/prefix (every host bit set), or None for /31 and /32."""
    if prefix > 30:  # a /32 has no other host; a /31 is two hosts and no broadcast (RFC 3021)
        return None
    return str(ipaddress.IPv4Network(f"{address}/{prefix}", strict=False).broadcast_address)


def _read_ipv4(s: socket.socket, request: int, name: str) -> str | None:
    try:
        found = socket.inet_ntoa(_ifreq(s, request, name)[20:24])
    except OSError:
        return None
    return None if found == "0.0.0.0" else found


def _prefix(s: socket.socket, name: str) -> int | None:
    try:
        mask = socket.inet_ntoa(_ifreq(s, SIOCGIFNETMASK, name)[20:24])
    except OSError:
        return None
    return ipaddress.IPv4Network(f"0.0.0.0/{mask}").prefixlen


def interface_addresses(name: str) -> tuple[str, str | None, int | None]:
    """(IPv4 address, broadcast address, prefix length) of a network interface; the broadcast
    address is the configured one, else derived from the netmask (None if there is none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            addr = socket.inet_ntoa(_ifreq(s, SIOCGIFADDR, name)[20:24])
        except OSError as exc:
            raise ValueError(f"interface {name!r} has no IPv4 address ({exc.strerror})") from None
        prefix = _prefix(s, name)
        brd = _read_ipv4(s, SIOCGIFBRDADDR, name)
    if brd is None and prefix is not None:
        brd = broadcast_address(addr, prefix)
    return addr, brd, prefix


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
            broadcast = prefix = None
            if address is not None:
                prefix = _prefix(s, name)
                if flags & IFF_BROADCAST:
                    broadcast = _read_ipv4(s, SIOCGIFBRDADDR, name)
                    if broadcast is None and prefix is not None:
                        broadcast = broadcast_address(address, prefix)
            out.append(Interface(name, address, broadcast, bool(flags & IFF_UP),
                                 bool(flags & IFF_LOOPBACK), bool(flags & IFF_BROADCAST), prefix))
    return out


def choose_interface(candidates: Iterable[Interface]) -> Interface:
    """The one interface up, not loopback, with a broadcast address and a private address;
    ValueError (one line asking for -i) if none or several (docs/protocols/prototari.md)."""
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


class Node(DatagramNode):
    """A running prototari node. Use `await Node.start(...)`, then events() or next_event()
    (PeerJoined, PeerLeft, Message, NodeWarning), send(), close().

    Two sockets (unicast, which also sends, and the broadcast listener) on
    pelotari.adapter.DatagramNode: sends never block (a full send buffer drops the datagram:
    send_dropped); socket errors are counted in the core's stats and each kind reported once;
    the timer is re-armed only when the core's get_timer() changes."""

    def __init__(self, config: Config, host: str, interface: str | None = None):
        self.config = config
        self.host = host
        self.interface = interface
        self._loop = asyncio.get_running_loop()
        self._offset = time.monotonic() - self._loop.time()
        self.core: NodeCore | None = None

    @classmethod
    async def start(cls, config: Config | None = None, *, interface: str | None = None,
                    host: str | None = None) -> "Node":
        """Open the sockets and start broadcasting.

        With `interface`, its address and broadcast address (derived from the netmask if none
        is configured; ValueError for /31 and /32) are used, and the sockets bound to it. With
        `host` and no interface, that address is bound and the config's broadcast address
        (default 255.255.255.255) used. With neither, the host's one private IPv4
        interface is used as if named (ValueError if there is none or several). A broadcast
        address in the config always wins over the interface's."""
        config = config or Config()
        if interface is None and host is None:
            interface = choose_interface(interfaces()).name
        own: set[str] = set()
        if interface is not None:
            addr, brd, prefix = interface_addresses(interface)
            if brd is None and config.broadcast_address is None:
                why = (f"a /{prefix} network has none" if prefix is not None
                       else "its netmask cannot be read")
                raise ValueError(f"interface {interface} ({addr}) has no broadcast address and "
                                 f"{why}: pass --broadcast-address")
            own = local_ipv4_addresses() | {addr}
            host = host or addr
            config = replace(config, broadcast_address=config.broadcast_address or brd)
        elif host in ("0.0.0.0", ""):
            own = local_ipv4_addresses()
        node = cls(config, host or "0.0.0.0", interface)
        node._open(own)
        return node

    def _open(self, own: set[str]) -> None:
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
        self._attach(self._loop, [uni, lis], self.core.stats, log, READ_SIZE, offset=self._offset)
        self._process_events(self._now())

    @property
    def broadcast(self) -> Address:
        """Where `pelotari?` goes."""
        return (self.config.broadcast_address or "255.255.255.255", self.config.broadcast_port)

    def _now(self) -> float:
        return self._loop.time() + self._offset

    @property
    def peers(self) -> set[Address]:
        """Registered peers."""
        return set(self.core.peers)

    def send(self, peer: Address, data: bytes) -> None:
        """Send data to one registered peer (KeyError for a stranger)."""
        self.core.send(peer, data)
        self._process_events(self._now())

    def send_all(self, data: bytes) -> int:
        """Send data to every registered peer; return how many."""
        n = self.core.send_all(data)
        self._process_events(self._now())
        return n


__all__ = ["Interface", "Node", "NodeWarning", "broadcast_address", "choose_interface",
           "interfaces"]
