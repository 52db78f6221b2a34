"""The pure-Python twin of fastpath.batchio: the same RecvBatch and SendBatch, one recvmsg or
sendmsg per datagram instead of recvmmsg/sendmmsg, the same counters, and never blocking.

PELOTARI_PURE_PYTHON=1 selects it (fastpath/implementation.py). Its RecvBatch and SendBatch have
only batchio's Python API (recv, send, fan_out); the C-level receive/flush that the backbone and
the load generators call exist only in the compiled module.
"""
import contextlib
import select
import socket
import struct

__all__ = ["RecvBatch", "SendBatch", "enable_gro", "set_buffers"]

SEND_BLOCKED_WAIT_MS = 50  # default: how long a full socket buffer may stall one flush
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
SOL_UDP = 17  # <netinet/udp.h>
UDP_GRO = 104  # <linux/udp.h>
CONTROL_SPACE = 64  # per read: room for a UDP_GRO cmsg (an int) and more
_ENOBUFS = 105  # a full device queue: waited on like a full socket buffer


def set_buffers(sock, size, force=True):
    """Ask for `size`-byte receive and send buffers. With force, SO_RCVBUFFORCE/SO_SNDBUFFORCE
    go past rmem_max/wmem_max when we are privileged; otherwise the kernel caps the size."""
    for plain, forced in ((socket.SO_RCVBUF, SO_RCVBUFFORCE), (socket.SO_SNDBUF, SO_SNDBUFFORCE)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, forced if force else plain, size)
        except OSError:
            try:
                sock.setsockopt(socket.SOL_SOCKET, plain, size)
            except OSError:
                pass


def enable_gro(sock):
    """Set UDP_GRO on a UDP socket, so a GSO run arrives as one read (see RecvBatch control);
    OSError in one line where the kernel lacks it."""
    try:
        sock.setsockopt(SOL_UDP, UDP_GRO, 1)
    except OSError as exc:
        raise OSError(exc.errno, "this kernel does not support UDP_GRO (needs Linux >= 5.0)") from None


@contextlib.contextmanager
def _nonblocking(sock):
    """The socket without its Python-level timeout for a moment: a socket with a timeout would
    otherwise poll for up to that long before each call (the C module passes MSG_DONTWAIT)."""
    timeout = sock.gettimeout()
    if not timeout:  # None (blocking: MSG_DONTWAIT does it) or 0 (already non-blocking)
        yield
        return
    sock.settimeout(0)
    try:
        yield
    finally:
        sock.settimeout(timeout)


class RecvBatch:
    """Up to `capacity` datagrams per recv(), each read into at most `slot_size` bytes."""

    __slots__ = ("capacity", "slot_size", "count", "control", "_flags", "_pending", "_slot")

    def __init__(self, capacity=64, slot_size=65536, control=False):
        if capacity < 1 or capacity > 1024:
            raise ValueError(f"capacity {capacity} outside 1..1024")
        if slot_size < 1 or slot_size > 65536:
            raise ValueError(f"slot_size {slot_size} outside 1..65536")
        self.capacity = capacity
        self.slot_size = slot_size
        self.control = bool(control)
        self.count = 0
        self._flags = []       # msg_flags of each read of the last recv()
        self._pending = None   # an error met after some reads: raised by the next recv()
        # One slot read into and copied out of at its exact length, as batchio's arena: a
        # recvmsg(slot_size) per datagram would malloc slot_size bytes for each and leave the
        # heap fragmented while the datagrams are kept.
        self._slot = memoryview(bytearray(slot_size))

    def truncated_at(self, i):
        """Whether read i of the last receive lost bytes (MSG_TRUNC; other flags, such as a
        truncated control message, do not count)."""
        if not 0 <= i < self.count:
            raise IndexError(i)
        return bool(self._flags[i] & socket.MSG_TRUNC)

    def recv(self, sock):
        """Receive up to capacity reads without blocking; return [(bytes, (host, port))], one
        per datagram as sent: a UDP_GRO read (with control=True) is split at its segment size."""
        self.count = 0
        self._flags = []
        if self._pending is not None:  # as recvmmsg reports an error after a partial batch
            exc, self._pending = self._pending, None
            raise exc
        out = []
        ancbuf = CONTROL_SPACE if self.control else 0
        with _nonblocking(sock):
            for _ in range(self.capacity):
                try:
                    n, anc, flags, addr = sock.recvmsg_into((self._slot,), ancbuf,
                                                            socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if not self._flags:
                        raise
                    self._pending = exc
                    break
                self._flags.append(flags)
                addr = (addr[0], addr[1])
                seg = _segment_size(anc) or n
                if seg >= n:  # one datagram (an empty one too)
                    out.append((bytes(self._slot[:n]), addr))
                    continue
                for off in range(0, n, seg):
                    out.append((bytes(self._slot[off:min(off + seg, n)]), addr))
        self.count = len(self._flags)
        return out


def _segment_size(ancdata):
    """UDP_GRO: the size of each datagram coalesced into one read; 0 when it holds one."""
    for level, kind, data in ancdata:
        if level == SOL_UDP and kind == UDP_GRO and len(data) >= 4:
            return struct.unpack("i", data[:4])[0]
    return 0


class SendBatch:
    """Datagrams sent `capacity` at a time, never blocking: a full socket buffer is waited on for
    at most max_wait_ms per batch, then the rest of the batch is dropped and counted."""

    __slots__ = ("capacity", "count", "sent", "bytes_sent", "errors", "would_block", "max_wait_ms")

    def __init__(self, capacity=1024, max_wait_ms=SEND_BLOCKED_WAIT_MS):
        if capacity < 1 or capacity > 1024:  # as batchio: UIO_MAXIOV caps one sendmmsg at 1024
            raise ValueError(f"capacity {capacity} outside 1..1024")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must not be negative")
        self.capacity = capacity
        self.max_wait_ms = max_wait_ms
        self.count = 0
        self.sent = 0
        self.bytes_sent = 0
        self.errors = 0
        self.would_block = 0

    def send(self, sock, datagrams):
        """Send [(bytes-like, (host, port))]; return how many went."""
        return self._send(sock, [((d,), a) for d, a in datagrams])

    def fan_out(self, sock, header, payload, addrs):
        """Send header+payload to every address; the payload is shared, never copied."""
        return self._send(sock, [((header, payload), a) for a in addrs])

    def _send(self, sock, items):
        for _, (host, port) in items:  # every address is checked before anything is sent
            socket.inet_aton(host)
            if not 0 <= port <= 0xFFFF:
                raise OverflowError(f"port {port} is not a uint16_t")
        total = 0
        with _nonblocking(sock):
            for start in range(0, len(items), self.capacity):
                total += self._flush(sock, items[start:start + self.capacity])
        return total

    def _flush(self, sock, items):
        """Send one batch; a refused datagram is counted in `errors` and skipped."""
        done = waited = off = 0
        poller = None
        while off < len(items):
            buffers, addr = items[off]
            try:
                self.bytes_sent += sock.sendmsg(buffers, (), socket.MSG_DONTWAIT, addr)
            except OSError as exc:
                if isinstance(exc, BlockingIOError) or exc.errno == _ENOBUFS:
                    if waited < self.max_wait_ms:
                        if poller is None:
                            poller = select.poll()
                            poller.register(sock, select.POLLOUT)
                        poller.poll(1)
                        waited += 1
                        continue
                    # The buffer stays full: the rest would fail the same way (one buffer).
                    self.would_block += len(items) - off
                    break
                self.errors += 1
                off += 1
                continue
            self.sent += 1
            done += 1
            off += 1
        return done
