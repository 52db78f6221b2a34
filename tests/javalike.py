"""Stand-ins for the three public Java bully clients, as sans-IO cores for pelotari.sim: they
behave on the wire as each family does (read from docs/protocols/bully.md's table of what each
Java client does, itself from their public sources and a hand run), not as the seed says.

    peerbox     reads one message per incoming connection and never closes one (its own
                either); writes a message field by field (several segments); echoes a 9 back
                (naming the asker); answers 11 on a new connection to the address the 11
                names; takes 13 as an absolute time; heartbeat every 20 s; a leader is ID 0,
                counts IDs up and drops a peer silent 30 s.
    vsp2p       reads one message per incoming connection (one more after an 11) and never
                closes; its own 9 names the receiver; answers 6 with 7 and 11 with 12 on the
                same connection, 12 with a random time (now ± 24 h); heartbeat every 50 s; a
                leader is a directory without an ID giving the lowest free ID.
    p2p         reads the first chunk of an incoming connection only, answers, closes; on its
                own connections writes, then reads until EOF (no timeout); takes 13 relative to
                the last time it reported; heartbeat every 41 s; a leader is ID 0 and never
                drops anyone.

`heartbeat` overrides the family's interval (the seed's limit: once a minute).
"""
import random
from dataclasses import dataclass, field

from pelotari.bully import wire
from pelotari.bully.core import Close, Connect, Send
from pelotari.bully.wire import Framer, Message, Peer

FAMILIES = {
    "peerbox": {"heartbeat": 20.0, "prune": 30.0, "leader_id": 0},
    "vsp2p": {"heartbeat": 50.0, "prune": 60.0, "leader_id": None},
    "p2p": {"heartbeat": 41.0, "prune": None, "leader_id": 0},
}


@dataclass
class _C:
    remote: tuple
    outgoing: bool
    up: bool = False
    framer: Framer = field(default_factory=Framer)
    done: bool = False  # read what it reads: the rest of the bytes are ignored
    reply: bool = False  # p2p: our own connection, read until EOF then handled
    buffer: bytes = b""
    queued: list = field(default_factory=list)
    waits_for: int = 0  # peerbox: the tag its own connection waits for (2 after 1, any after 9)


class JavaLike:
    """One Java client of `family` at (host, port): a leader (leader=None) or a peer."""

    def __init__(self, host, port, now, *, family, leader=None, heartbeat=None, seed=0,
                 clock=lambda: 1.7e9):
        self.family = family
        self.f = dict(FAMILIES[family])
        if heartbeat is not None:
            self.f["heartbeat"] = heartbeat
        self.host, self.port, self.clock = host, port, clock
        self.rng = random.Random(seed)
        self.conns: dict[int, _C] = {}
        self.next_conn = 1
        self.out: list = []
        self.members: dict[int, list] = {}  # leader: id -> [Peer, last heard]
        self.next_id = 1
        self.texts: list[tuple[int, str]] = []
        self.found: list[Peer] = []
        self.times: list[int] = []  # 13s taken (the value)
        self.offset_ms = 0  # peerbox: T13 - now; p2p: its clock's correction
        self.last_reported = None  # p2p: the Time of its last 12
        self.leader_address = leader
        self.leader_id = None
        self.id = None
        self.heartbeats = 0
        self.blocked = 0  # p2p: heartbeats held up by a connection that was not closed
        self._beat = None
        self.timer = None
        self.leads = leader is None
        if leader is None:
            self.id = self.f["leader_id"]
            self.leader_address = (host, port)
            self.timer = now + (self.f["prune"] or 1e9)
        else:
            self._send(leader, Message(1, Peer(host, port)), now, wait=2)
            self.timer = now + self.f["heartbeat"]

    # ---- the sim's interface -----------------------------------------------------------

    def accept(self, remote, now, local=None):
        conn = self._new(remote, False)
        self.conns[conn].up = True
        return conn

    def connection_made(self, conn, local, now):
        c = self.conns.get(conn)
        if c is None:
            return
        c.up = True
        for data in c.queued:
            self._write(conn, data)
        c.queued = []

    def data_received(self, conn, data, now):
        c = self.conns.get(conn)
        if c is None:
            return
        if c.reply:  # p2p's own connection: everything until EOF, then handled
            c.buffer += data
            return
        if self.family == "p2p" and not c.outgoing:
            if c.done:
                return
            c.done = True  # one read: the first chunk, by fixed offsets
            msgs = self._parse(data)
            if msgs:
                self._handle(conn, msgs[0], now)
            self._close(conn)
            return
        if c.done:
            return  # peerbox, vsp2p: one message per connection, then no more reading
        try:
            msgs = c.framer.feed(data)
        except wire.BullyError:
            c.done = True
            return
        for msg in msgs:
            if c.outgoing and c.waits_for and (c.waits_for < 0 or msg.tag == c.waits_for):
                c.waits_for = 0
            elif c.outgoing and self.family == "peerbox":
                continue  # not read
            self._handle(conn, msg, now)
            if not c.outgoing and not (self.family == "vsp2p" and msg.tag == 11):
                c.done = True  # (VSP2P reads one more message after an 11)
                return

    def connection_lost(self, conn, now, reset=False):
        c = self.conns.pop(conn, None)
        if c is not None and c.reply:
            for msg in self._parse(c.buffer):
                self._handle(None, msg, now)
                break

    def eof_received(self, conn, now):
        c = self.conns.get(conn)
        if c is not None and c.reply:
            self.connection_lost(conn, now)
            self.out.append(Close(conn))
        return True  # peerbox and vsp2p never close (only the GC does)

    def actions(self):
        out, self.out = self.out, []
        return out

    def next_event(self):
        return None

    def get_timer(self):
        return self.timer

    def handle_timer(self, now):
        if self.leads:
            prune = self.f["prune"]
            for i, (peer, heard) in list(self.members.items()):
                if prune and now - heard > prune:
                    del self.members[i]
            self.timer = now + (prune or 1e9) + 1
            return
        if self.family == "p2p" and self._beat in self.conns:
            self.blocked += 1  # its one thread still reads the last one until EOF
            self.timer = now + 1.0
            return
        if self.id is not None:
            self.heartbeats += 1
            # always to the leader it joined (peerbox, vsp2p), on a new connection
            self._beat = self._send(self.leader_address, Message(5, self._me()), now)
        self.timer = now + self.f["heartbeat"]

    # ---- commands ----------------------------------------------------------------------

    def text(self, address, data, now):
        self._send(address, Message(8, self._me(), data=data), now)

    def search(self, address, destination, search_id, now):
        self._send(address, Message(6, Peer(self.host, self.port), source_id=self.id,
                                    search_id=search_id, destination_id=destination), now,
                   wait=7 if self.family == "vsp2p" else 0)

    def ask(self, peer, now):
        """An AreYouAlive to peer (VSP2P's names its receiver, as the real one does)."""
        msg = Message(9, peer if self.family == "vsp2p" else self._me())
        self._send(peer.address, msg, now, wait=-1)

    def announce(self, address, now):
        """An IAmLeader (the end of an election it won)."""
        self._send(address, Message(10, self._me()), now)

    def new_time(self, address, value_ms, now):
        """(As a leader, by hand) a HereIsYourNewTime."""
        self._send(address, Message(13, self._me(), time_ms=value_ms), now)

    # ---- what it does --------------------------------------------------------------------

    def _me(self):
        return Peer(self.host, self.port, self.id if self.id is not None else 0)

    def _now_ms(self):
        return int(self.clock() * 1000) + self.offset_ms

    def _handle(self, conn, msg, now):
        tag = msg.tag
        if tag == 1 and self.leader_address == (self.host, self.port):
            if self.family == "vsp2p":
                new = next(i for i in range(1, 27) if i not in self.members)
                if new > 25:
                    return  # no answer at all
            else:
                new = self.next_id
                self.next_id += 1
            self.members[new] = [Peer(*msg.peer.address, new), now]
            slots = [] if self.f["leader_id"] is None else [self._me()]
            slots += [p for i, (p, _) in sorted(self.members.items()) if i != new]
            self._reply(conn, Message(2, id=new, peers=tuple(slots[:4])))
        elif tag == 2:
            self.id = msg.id
            self.leader_id = next((p.id for p in msg.peers
                                   if p.address == tuple(self.leader_address)), None)
        elif tag == 3:
            slots = [p for p, _ in self.members.values()][:4]
            if self.family == "vsp2p" and len(slots) < 4:
                return  # IndexOutOfBounds: no answer
            self._reply(conn, Message(4, peers=tuple(slots)))
        elif tag == 5:
            m = self.members.get(msg.peer.id)
            if m is not None and self.family != "p2p":
                m[1] = now
            elif m is None and self.family == "peerbox":
                self.members[msg.peer.id] = [msg.peer, now]
        elif tag == 6 and msg.destination_id == self.id:
            found = Message(7, self._me(), search_id=msg.search_id)
            if self.family == "vsp2p":
                self._reply(conn, found)
            else:
                self._send(msg.peer.address, found, now)
        elif tag == 7:
            self.found.append(msg.peer)
        elif tag == 8:
            self.texts.append((msg.peer.id, msg.text))
        elif tag == 9 and conn is not None and not self.conns[conn].outgoing:
            if self.family == "peerbox":
                self._reply(conn, msg)  # the echo: the asker's own peer
            else:
                self._reply(conn, Message(5, self._me()))
        elif tag == 10:
            self.leader_id = msg.peer.id  # heartbeats stay where they went (peerbox, vsp2p)
            if self.family == "p2p":
                self.leader_address = msg.peer.address
        elif tag == 11:
            if self.family == "peerbox":  # on a new connection, to the address named
                self._send(msg.peer.address, Message(12, self._me(), time_ms=self._now_ms()),
                           now)
            elif self.family == "vsp2p":
                t = self._now_ms() + self.rng.randint(-86_400_000, 86_400_000)
                self._reply(conn, Message(12, self._me(), time_ms=t))
            else:
                self.last_reported = self._now_ms()
                self._reply(conn, Message(12, self._me(), time_ms=self.last_reported))
        elif tag == 13:
            self.times.append(msg.time_ms)
            if self.family == "peerbox":
                self.offset_ms = msg.time_ms - int(self.clock() * 1000)
            elif self.family == "p2p":
                self.offset_ms += msg.time_ms - (self.last_reported or 0)

    def _parse(self, data):
        try:
            return Framer().feed(bytes(data))
        except wire.BullyError:
            return []

    def _new(self, remote, outgoing):
        conn = self.next_conn
        self.next_conn += 1
        self.conns[conn] = _C(tuple(remote), outgoing)
        return conn

    def _send(self, address, msg, now, wait=0):
        """A new connection per message; peerbox and vsp2p never close it, p2p reads it
        until EOF (then closes)."""
        conn = self._new(address, True)
        c = self.conns[conn]
        c.waits_for = wait
        c.reply = self.family == "p2p"
        self.out.append(Connect(conn, tuple(address)))
        for piece in self._pieces(wire.encode(msg)):
            c.queued.append(piece)
        if self.family == "vsp2p" and msg.tag in (8, 10):
            c.queued.append(None)  # vsp2p closes after 8 and 10
        return conn

    def _pieces(self, data):
        if self.family != "peerbox" or data[0] == 1:
            return [data]
        return [data[:1], data[1:2], data[2:]]  # tag, version, the fields

    def _write(self, conn, data):
        if data is None:
            self._close(conn)
        else:
            self.out.append(Send(conn, data))

    def _reply(self, conn, msg):
        if conn is None:
            return
        for piece in self._pieces(wire.encode(msg)):
            self.out.append(Send(conn, piece))

    def _close(self, conn):
        if self.conns.pop(conn, None) is not None:
            self.out.append(Close(conn))
