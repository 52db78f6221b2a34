"""The cluster's floating address for seed clients (docs/protocols/fyrehose-cluster.md,
"Floating address"): while its member is the serving active, `FloatingAddress` holds
ADDR/PREFIX as a secondary address of DEV, DNATs ADDR:PORT to the backbone's HOST:PORT with an
nftables table of its own (conntrack gives the answers ADDR as their source) and announces it
with gratuitous ARP; otherwise it holds nothing.

Top-level imports are the standard library's only: the guard process loads this file alone
(`_GUARD`), not the pelotari package.
"""
import ipaddress
import os
import queue
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

CAP_NET_ADMIN, CAP_NET_RAW = 12, 13
ARPHRD_ETHER = 1
# When the gratuitous ARPs go, in seconds after the address is taken. On Linux (checked on
# 6.18) a gratuitous ARP overrides a neighbour entry even within its locktime (1 s), so the
# first one moves every host that hears it; the others cover its loss, spread so that one
# burst of loss does not take them all (keepalived sends 5).
GARP_SCHEDULE = (0.0, 0.1, 0.5, 1.0, 2.0)
RETRY = 1.0  # seconds between attempts to take (or release) the address after a failure

# The guard: a process of its own session that waits for its member to end, however it ends
# (SIGKILL, a crash), and then removes what the member may have left: a dead member must not
# keep answering ARP for the address, nor DNAT it to a socket nobody reads.
_GUARD = ("import sys; sys.path.pop(0); import importlib.util as u; "
          "s = u.spec_from_file_location('pelotari_floating_guard', sys.argv[1]); "
          "m = u.module_from_spec(s); sys.modules[s.name] = m; s.loader.exec_module(m); "
          "m.guard(sys.argv[2:])")


class FloatingError(Exception):
    """The floating address cannot be used here (its message is one line for the user)."""


@dataclass(frozen=True)
class FloatingTaken:
    """This member now holds the floating address (and announced it on `dev`)."""

    address: str
    dev: str


@dataclass(frozen=True)
class FloatingReleased:
    """This member no longer holds the floating address."""

    address: str
    dev: str


@dataclass(frozen=True)
class FloatingFailed:
    """Taking, announcing or releasing the floating address failed (`what` says how, and
    what happens next)."""

    address: str
    dev: str
    what: str


def parse_address(text: str) -> ipaddress.IPv4Interface:
    """ADDR/PREFIX as an IPv4Interface, or FloatingError saying what is wrong."""
    usage = f"--floating-address {text}: give an IPv4 address with its prefix length " \
            "(ADDR/PREFIX, e.g. 192.0.2.10/24)"
    if "/" not in text:
        raise FloatingError(usage)
    try:
        iface = ipaddress.IPv4Interface(text)
    except ValueError:
        raise FloatingError(usage) from None
    ip = iface.ip
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast or ip.is_link_local \
            or ip == ipaddress.IPv4Address("255.255.255.255"):
        raise FloatingError(f"--floating-address {text}: not an address a host can hold")
    if iface.network.prefixlen < 31 and ip in (iface.network.network_address,
                                               iface.network.broadcast_address):
        raise FloatingError(f"--floating-address {text}: the network's own or broadcast "
                            "address")
    return iface


def garp_frame(mac: bytes, address: str) -> bytes:
    """A gratuitous ARP (RFC 5227's announcement: an ARP request whose sender and target are
    both `address`, target hardware address zero) from `mac`, broadcast on Ethernet."""
    if len(mac) != 6:
        raise ValueError("an Ethernet address is 6 bytes")
    ip = socket.inet_aton(address)
    return (b"\xff" * 6 + mac + b"\x08\x06"  # Ethernet: broadcast, from us, ARP
            + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1)  # Ethernet/IPv4, request
            + mac + ip + bytes(6) + ip)


def nft_rules(table: str, address: str, port: int, host: str) -> str:
    """The nft script that (re)creates `table`: ADDR:PORT DNATed to HOST, arriving
    (prerouting) and from local clients (output). Conntrack gives the answers ADDR again."""
    rule = f"ip daddr {address} udp dport {port} dnat to {host}"
    return (f"add table ip {table}\ndelete table ip {table}\n"  # (one transaction: replaces)
            f"table ip {table} {{\n"
            f" chain prerouting {{\n  type nat hook prerouting priority -100; policy accept;\n"
            f"  {rule}\n }}\n"
            f" chain output {{\n  type nat hook output priority -100; policy accept;\n"
            f"  {rule}\n }}\n}}\n")


def _nft(script: str) -> None:
    res = subprocess.run(["nft", "-f", "-"], input=script, text=True, capture_output=True,
                         timeout=30)
    if res.returncode:
        lines = (res.stderr or res.stdout or f"exit status {res.returncode}").strip()
        raise OSError(f"nft: {lines.splitlines()[0]}")


def _drop_table(table: str) -> None:
    _nft(f"add table ip {table}\ndelete table ip {table}\n")


def _drop_address(ipr, index: int, address: str) -> bool:
    """Remove `address` from the link (any prefix); whether it was there."""
    found = False
    for msg in ipr.get_addr(family=socket.AF_INET, index=index):
        if msg.get_attr("IFA_ADDRESS") == address or msg.get_attr("IFA_LOCAL") == address:
            found = True
            ipr.addr("del", index=index, address=address, prefixlen=msg["prefixlen"])
    return found


def _capabilities(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def table_name(port: int) -> str:
    """The nftables table of the floating address for data port `port`."""
    return f"pelotari_float_{port}"


class FloatingAddress:
    """`prepare()` (checks, leftovers removed, the guard started), then `want(True/False)` as
    often as the member's state is looked at (a thread of its own takes and releases), and
    `close()` (released). Its events are read with `events()`."""

    def __init__(self, address: str, dev: str, host: str, port: int, *,
                 schedule: tuple = GARP_SCHEDULE):
        self.interface = parse_address(address)
        self.address = str(self.interface.ip)
        self.prefix = self.interface.network.prefixlen
        self.dev = dev
        self.host = host
        self.port = port
        self.table = table_name(port)
        self.schedule = tuple(schedule)
        self.held = False  # (written by the worker only)
        self.garps_sent = 0
        self._want = False
        self._closing = False
        self._cond = threading.Condition()
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._ipr = None
        self._index = 0
        self._mac = b""
        self._packet: Optional[socket.socket] = None
        self._guard: Optional[subprocess.Popen] = None
        self._worker: Optional[threading.Thread] = None

    @property
    def text(self) -> str:
        """ADDR/PREFIX."""
        return f"{self.address}/{self.prefix}"

    def prepare(self, on_leftover: Callable[[str], None] = lambda what: None) -> None:
        """Check that this process may hold the address on DEV (FloatingError otherwise),
        remove what an earlier run left (reported to on_leftover), start the guard and the
        worker. Call it before the backbone binds."""
        need = 1 << CAP_NET_ADMIN | 1 << CAP_NET_RAW
        # (not root: nft and the guard are other programs, so ambient capabilities too)
        if _capabilities("CapEff") & need != need or (
                os.geteuid() != 0 and _capabilities("CapAmb") & need != need):
            raise FloatingError("--floating-address needs root or CAP_NET_ADMIN (and "
                                "CAP_NET_RAW; both ambient when not root: nft is run)")
        if shutil.which("nft") is None:
            raise FloatingError("--floating-address needs nft (Debian: apt-get install "
                                "nftables)")
        try:
            from pyroute2 import IPRoute
        except ImportError:
            raise FloatingError("--floating-address needs pyroute2 (pip install "
                                "pyroute2)") from None
        try:
            # (pyroute2's sync API runs an event loop of its own: one IPRoute here, closed
            # before the caller's loop runs, and one in the worker's thread)
            self._ipr = IPRoute()
            found = self._ipr.link_lookup(ifname=self.dev)
            if not found:
                raise FloatingError(f"--floating-dev {self.dev}: no such network device")
            self._index = found[0]
            link = self._ipr.get_links(self._index)[0]
            mac = link.get_attr("IFLA_ADDRESS") or ""
            if link["ifi_type"] != ARPHRD_ETHER or len(mac.split(":")) != 6:
                raise FloatingError(f"--floating-dev {self.dev}: not an Ethernet device (a "
                                    "gratuitous ARP needs one)")
            self._mac = bytes.fromhex(mac.replace(":", ""))
            try:
                self._packet = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                self._packet.bind((self.dev, 0))  # (protocol 0: it receives nothing)
            except OSError as exc:
                raise FloatingError(f"--floating-dev {self.dev}: cannot send ARP on it: "
                                    f"{exc.strerror or exc}") from None
            try:  # leftovers of an earlier run of ours, before anything else
                _drop_table(self.table)
                if _drop_address(self._ipr, self._index, self.address):
                    on_leftover(f"removed the floating address {self.address} from {self.dev} "
                                "(left by an earlier run)")
            except OSError as exc:
                raise FloatingError(f"--floating-address: {exc}") from None
            self._guard = subprocess.Popen(
                [sys.executable, "-c", _GUARD, os.path.abspath(__file__), self.address,
                 self.dev, self.table], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                cwd="/", start_new_session=True)
        except BaseException:
            self.close()
            raise
        finally:
            if self._ipr is not None:
                self._ipr.close()
                self._ipr = None
        self._worker = threading.Thread(target=self._run, name="floating-address", daemon=True)
        self._worker.start()

    def want(self, hold: bool) -> None:
        """Hold the address (True) or not; the worker follows at once."""
        with self._cond:
            if self._want != hold:
                self._want = hold
                self._cond.notify()

    def events(self) -> list:
        """The events since the last call (FloatingTaken, FloatingReleased, FloatingFailed)."""
        out = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        """Release the address (waits for it), stop the worker and the guard."""
        with self._cond:
            self._want = False
            self._closing = True
            self._cond.notify()
        if self._worker is not None:
            self._worker.join(30)  # (it releases; if that fails it gives up: the guard retries)
        if self._guard is not None:
            guard, self._guard = self._guard, None
            guard.stdin.close()  # EOF: it removes the same again (harmless) and ends
            try:
                guard.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self._packet is not None and (self._worker is None or not self._worker.is_alive()):
            self._packet.close()
            self._packet = None

    # ---- the worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        from pyroute2 import IPRoute

        try:
            with IPRoute() as self._ipr:
                self._work()
        except Exception as exc:  # (never silently: the member would just never take it)
            self._events.put(FloatingFailed(self.address, self.dev, f"stopped: {exc!r}"))
        self._ipr = None

    def _work(self) -> None:
        due: list[float] = []  # when the next gratuitous ARPs go (while held)
        retry_at = 0.0
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    want = self._want and not self._closing
                    if want != self.held and now >= retry_at:
                        break
                    if self._closing and not self.held:
                        return
                    if due and due[0] <= now:
                        break
                    wake = due[:1] + ([retry_at] if want != self.held else [])
                    self._cond.wait(max(0.0, min(wake) - now) if wake else None)
            if want and not self.held:
                try:
                    self._take()
                except OSError as exc:
                    self._events.put(FloatingFailed(self.address, self.dev,
                                                    f"not taken ({exc}); again in {RETRY:g} s"))
                    retry_at = time.monotonic() + RETRY
                    continue
                self.held = True
                due = [now + d for d in self.schedule]
                self._events.put(FloatingTaken(self.address, self.dev))
            elif not want and self.held:
                due = []
                if self._release():
                    self._events.put(FloatingReleased(self.address, self.dev))
                elif self._closing:
                    return  # (the guard removes it when this process ends)
                else:
                    retry_at = time.monotonic() + RETRY
            else:
                due.pop(0)
                try:
                    self._packet.send(garp_frame(self._mac, self.address))
                    self.garps_sent += 1
                except OSError as exc:
                    self._events.put(FloatingFailed(self.address, self.dev,
                                                    f"gratuitous ARP: {exc.strerror or exc}"))

    def _take(self) -> None:
        # The table before the address: a datagram to ADDR that arrived before its DNAT
        # would leave a conntrack entry without it, and that flow unserved for its timeout.
        _nft(nft_rules(self.table, self.address, self.port, self.host))
        try:
            _drop_address(self._ipr, self._index, self.address)  # (another prefix: ours now)
            self._ipr.addr("add", index=self._index, address=self.address,
                           prefixlen=self.prefix)
        except Exception as exc:
            try:
                _drop_table(self.table)
            except OSError:
                pass
            raise OSError(f"cannot add {self.text} to {self.dev}: {exc}") from None

    def _release(self) -> bool:
        """The address, then the table; whether both are gone (held is False then)."""
        try:
            _drop_address(self._ipr, self._index, self.address)
            _drop_table(self.table)
        except Exception as exc:
            self._events.put(FloatingFailed(self.address, self.dev, f"not released ({exc}); "
                                            f"again in {RETRY:g} s unless stopping"))
            return False
        self.held = False
        return True


def guard(argv: list) -> None:
    """(The guard process) wait for EOF on stdin, then remove the address from DEV and the
    table."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # it ends when its member has, not before
    address, dev, table = argv
    from pyroute2 import IPRoute  # (ready before the member dies: removal takes ms)

    with IPRoute() as ipr:
        sys.stdin.buffer.read()
        found = ipr.link_lookup(ifname=dev)
        try:
            if found:
                _drop_address(ipr, found[0], address)
        finally:
            _drop_table(table)


__all__ = ["FloatingAddress", "FloatingError", "FloatingFailed", "FloatingReleased",
           "FloatingTaken", "GARP_SCHEDULE", "garp_frame", "nft_rules", "parse_address",
           "table_name"]
