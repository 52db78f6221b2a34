"""A stranger attacking a prototari node from its own namespace host (run by replay.py).

    python prototari_attacker.py '{"phase": "outside", "victim": "10.200.0.2",
                                   "interface": "...", "addresses": ["10.200.0.3", ...], ...}'

The attacker owns every address in `addresses` (the first is its host's own, the others extra
addresses on the same interface), sends every datagram from a new socket (a new source port),
and counts every UDP datagram the victim sends to any of those addresses, on any port, with a
packet socket on its interface. At the end it prints one JSON line: what it sent, what came
back, and what the phase measured.
"""
import json
import random
import select
import socket
import struct
import sys
import threading
import time

UNICAST, BROADCAST = 21450, 21451
ETH_P_IP, SOL_PACKET, PACKET_IGNORE_OUTGOING, PACKET_OUTGOING = 0x0800, 263, 23, 4
TRUNCATED = [b"pelotari", b"pelotari?\n", b"aupa", b"aupa!!", b"dale", b"hor", b"hemen nago",
             b"hemen", b"\x01PT", b"\x01", b"", b" aupa!", b"AUPA!"]


class Attacker:
    """Sends from its addresses to the victim and records what the victim sends back."""

    def __init__(self, victim: str, interface: str, addresses: list):
        self.victim, self.addresses = victim, addresses
        self.mine = {socket.inet_aton(a) for a in addresses}
        self.sent = {"datagrams": 0, "bytes": 0}
        self.got = []  # (monotonic time, payload) of each datagram the victim sent us
        self.sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
        try:
            self.sniffer.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            pass  # older kernels: outgoing packets are skipped below
        self.sniffer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sniffer.bind((interface, ETH_P_IP))
        self.catch = self._listen(UNICAST)  # so that nothing sent to us is refused with ICMP
        self.hear = self._listen(BROADCAST)  # the victim's broadcasts
        threading.Thread(target=self._sniff, daemon=True).start()
        threading.Thread(target=self._discard, daemon=True).start()

    @staticmethod
    def _listen(port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))
        return s

    def _sniff(self):
        """Record the UDP payload of every datagram from the victim to one of our addresses."""
        victim = socket.inet_aton(self.victim)
        while True:
            packet, (_, _, pkttype, _, _) = self.sniffer.recvfrom(70000)
            ihl = (packet[0] & 0x0F) * 4
            if (pkttype == PACKET_OUTGOING or packet[9] != socket.IPPROTO_UDP
                    or packet[12:16] != victim or packet[16:20] not in self.mine
                    or struct.unpack("!H", packet[6:8])[0] & 0x1FFF):
                continue
            length = struct.unpack("!H", packet[ihl + 4:ihl + 6])[0] - 8
            self.got.append((time.monotonic(), packet[ihl + 8:ihl + 8 + length]))

    def _discard(self):
        """Empty the unicast socket (it exists only so that the port is open)."""
        while True:
            self.catch.recv(70000)

    def blast(self, message: bytes, sources, port: int) -> None:
        """One datagram from each source address, each from a new source port."""
        for ip in sources:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind((ip, 0))
                s.sendto(message, (self.victim, port))
            self.sent["datagrams"] += 1
            self.sent["bytes"] += len(message)

    def next_broadcast(self, timeout: float = 10.0, required: bool = True):
        """When the victim's next `pelotari?` arrived (if none within timeout: None, or raise)."""
        self.hear.setblocking(False)
        try:
            while True:
                self.hear.recv(70000)  # older broadcasts
        except BlockingIOError:
            pass
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            if select.select([self.hear], [], [], left)[0]:
                data, (ip, _) = self.hear.recvfrom(70000)
                if ip == self.victim and data == b"pelotari?":
                    return time.monotonic()
        if required:
            raise RuntimeError(f"no broadcast from {self.victim} within {timeout} s")
        return None

    def report(self, **measured) -> dict:
        """What was sent, what came back (by message), and what the phase measured."""
        got = {}
        for _, data in self.got:
            name = data.decode("utf-8", "replace") if len(data) <= 16 else f"{len(data)} B"
            got[name] = got.get(name, 0) + 1
        return {"sent": self.sent, "got_bytes": sum(len(d) for _, d in self.got), "got": got,
                **measured}


def outside(a: Attacker, cfg: dict) -> dict:
    """`aupa!` from every address (3 ports each) between the victim's response windows."""
    late = 0
    for _ in range(cfg["rounds"]):
        seen = a.next_broadcast()
        time.sleep(max(0.0, seen + cfg["window"] + 0.1 - time.monotonic()))
        a.blast(b"aupa!", a.addresses * 3, UNICAST)
        late += time.monotonic() > seen + cfg["interval"] - 0.1  # would reach the next window
    time.sleep(0.5)
    return a.report(late_rounds=late)


def inside(a: Attacker, cfg: dict) -> dict:
    """100 `aupa!` from one address (new ports) right after a broadcast; then stay silent."""
    seen = a.next_broadcast()
    a.blast(b"aupa!", [a.addresses[0]] * 100, UNICAST)
    took = time.monotonic() - seen
    time.sleep(cfg["settle"])  # the victim's heartbeats to us, unanswered
    return a.report(blast_after_broadcast=round(took, 3))


def discover(a: Attacker, cfg: dict) -> dict:
    """`pelotari?` from the extra addresses, `rate` times a second, for `duration` seconds."""
    end = time.monotonic() + cfg["duration"]
    while time.monotonic() < end:
        a.blast(b"pelotari?", a.addresses[1:], BROADCAST)
        time.sleep(1 / cfg["rate"])
    time.sleep(0.5)
    # Each `aupa!` is one reservation, held reservation_timeout unless `dale!` comes (never here):
    # the most outstanding at once is the most `aupa!` within any such span.
    times = [t for t, d in a.got if d == b"aupa!"]
    span = cfg["reservation_timeout"] - 0.05
    held = max((sum(1 for u in times if t <= u < t + span) for t in times), default=0)
    return a.report(max_reservations_held=held)


def strangers(a: Attacker, cfg: dict) -> dict:
    """`hor?`, `hemen nago!`, `dale!` and data from 20 addresses, spread over windows and not."""
    for _ in range(cfg["rounds"]):
        for message in (b"hor?", b"hemen nago!", b"dale!", b"\x01PTDhi", b"\x01PTD" + b"x" * 1400):
            a.blast(message, a.addresses[:20], UNICAST)
        time.sleep(0.25)
    time.sleep(0.5)
    return a.report()


def garbage(a: Attacker, cfg: dict) -> dict:
    """Random bytes, 65,507-byte datagrams and truncated control strings to both ports."""
    rng = random.Random(5)
    junk = [rng.randbytes(rng.randrange(1, 1472)) for _ in range(cfg["random"] // 2)]
    junk += [rng.randbytes(65507) for _ in range(cfg["oversized"] // 2)]
    junk += TRUNCATED * cfg["truncated_rounds"]
    for port in (UNICAST, BROADCAST):
        for k, message in enumerate(junk):
            a.blast(message, [a.addresses[k % 10]], port)
            # paced, so that the node's receive buffer keeps up
            time.sleep(0.004 if len(message) > 1472 else 0.005 if k % 50 == 49 else 0)
    alive = a.next_broadcast(cfg["interval"] * 2 + 1, required=False) is not None
    time.sleep(0.3)
    return a.report(broadcasting_after=alive)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    a = Attacker(cfg["victim"], cfg["interface"], cfg["addresses"])
    phase = {"outside": outside, "inside": inside, "discover": discover,
             "strangers": strangers, "garbage": garbage}[cfg["phase"]]
    print(json.dumps({"phase": cfg["phase"], **phase(a, cfg)}), flush=True)


if __name__ == "__main__":
    main()
