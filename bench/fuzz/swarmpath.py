"""The swarm node's C datagram path (fastpath.swarmpath.PingPath) beside the core it mirrors:
`Pair` feeds the same datagrams over real loopback sockets to the C path and in memory to
SwarmNode.receive_datagram (tests/test_swarm_path.py and the swarm-path fuzz target)."""
import socket
from collections import Counter

from pelotari.swarm import wire
from pelotari.swarm.core import Config, SwarmNode
from pelotari.swarm.wire import Keyring

KR = Keyring([bytes(range(32))])
HOST = "127.0.0.220"
PEERS = ["127.0.0.221", "127.0.0.222", "127.0.0.223", "127.0.0.224"]


class Pair:
    """Two identical cores: `py` fed in memory, `c` through a PingPath on a real socket."""

    def __init__(self, cfg: Config):
        from fastpath.swarmpath import PingPath

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((HOST, 0))
        self.sock.setblocking(False)
        self.address = self.sock.getsockname()
        self.wall = 1_800_000_000.0  # an epoch starts here
        self.cfg = cfg
        self.py, self.c = (SwarmNode(self.address, KR, 0.0, cfg, wall_offset=self.wall,
                                     secret=b"s" * 32, seed=3) for _ in range(2))
        self.path = PingPath(capacity=64, max_datagram=cfg.limits.max_datagram,
                             vague_pongs_per_slot=cfg.vague_pongs_per_slot,
                             ping_burst=cfg.ping_burst,
                             refill_ms=int(round(cfg.ping_refill * 1000)))
        self.peers = []
        for h in PEERS:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((h, 0))
            s.settimeout(1.0)
            self.peers.append(s)
        self.to_py = []  # what the Python core sent, (bytes, address)

    def close(self):
        for s in [self.sock, *self.peers]:
            s.close()

    def sign(self, msg, now):
        return wire.encode(msg, KR, self.wall + now)

    def establish(self, k, now, direct=False):
        """Peer k's handshake with both cores (in memory); direct: they dial it as well."""
        src = self.peers[k].getsockname()
        for core in (self.py, self.c):
            core.receive_datagram(self.sign(wire.connect(0, 100 + k), now), src, now)
            (answer, _), = core.datagrams_to_send()
            token = wire.decode(answer, KR, self.wall + now).token
            core.receive_datagram(self.sign(wire.connect(0, 100 + k, ack=True, echo=token),
                                            now), src, now)
            core.datagrams_to_send()
            if direct:
                core.connect(src, now)  # established and vague: direct now (asks at once)
                core.datagrams_to_send()
        return src

    def feed(self, items, now):
        """items: (peer index, datagram) sent in this order; both cores take them."""
        for k, data in items:
            self.peers[k].sendto(data, self.address)
            self.py.receive_datagram(data, self.peers[k].getsockname(), now)
            self.to_py += self.py.datagrams_to_send()
        # the C side: as pelotari.swarm.node's _readable_fast does it
        core, fp, fd = self.c, self.path, self.sock.fileno()
        ms = core.advance(now)
        macs = core.keyring.macset(now + core.wall_offset)
        got = 0
        while got < len(items):
            n = fp.receive(fd)
            got += n
            fp.ms, fp.mark, fp.vague_pongs = ms, core.slot_mark, core.vague_pongs
            i = fp.run(core.table, macs, 0)
            while i < n:
                core.vague_pongs = fp.vague_pongs
                core.receive_datagram(*fp.take(i), now)
                fp.vague_pongs = core.vague_pongs
                i = fp.run(core.table, macs, i + 1)
            core.vague_pongs = fp.vague_pongs
            fp.flush(fd)

    def c_sent(self):
        """What the C side sent: Pongs read off the peers' sockets, and the core's datagrams."""
        out = []
        for s in self.peers:
            s.setblocking(False)
            while True:
                try:
                    data, _ = s.recvfrom(2048)
                except BlockingIOError:
                    break
                out.append((data, s.getsockname()))
        return out + self.c.datagrams_to_send()

    def stats(self):
        merged = Counter(self.c.stats)
        merged.update({k: v for k, v in self.path.counters().items() if v})
        return merged


def table_state(core):
    t = core.table
    return ([t.addresses[s] for s in range(t.count)], list(t.claimed[:t.count]),
            list(t.bucket[:t.count]), list(t.heard[:t.count]), list(t.lru()), sorted(t.direct))
