"""UDP datagrams with a forged source address, through a raw socket (root only).

Used by the attack replay to send what a forger on a network without source-address filtering
could: every forged datagram here goes to a 127.x address on this machine.
"""
import socket
import struct


def available() -> str:
    """Why forged datagrams cannot be sent here ('' if they can)."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW).close()
    except PermissionError:
        return "forging source addresses needs root (a raw socket)"
    return ""


class Spoofer:
    """Sends UDP payloads from any (host, port) to any 127.x (host, port)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        self.sent_bytes = 0  # UDP payload bytes, as the victim's accounting counts them

    def send(self, payload: bytes, src, dst) -> None:
        """One datagram of `payload` that claims to come from src."""
        if not dst[0].startswith("127."):
            raise ValueError("forged datagrams go to loopback addresses only")
        udp = struct.pack("!HHHH", src[1], dst[1], 8 + len(payload), 0) + payload  # no checksum
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64,
                         socket.IPPROTO_UDP, 0, socket.inet_aton(src[0]),
                         socket.inet_aton(dst[0]))
        self.sock.sendto(ip + udp, (dst[0], 0))
        self.sent_bytes += len(payload)

    def close(self) -> None:
        self.sock.close()
