"""The prototari core, deterministically: several NodeCores on an in-memory LAN, injected clock.

Sections of the seed: 1a broadcasting, 1b responding, 1c handshake, 2 heartbeat.
"""
from dataclasses import replace

import pytest

from pelotari.prototari.core import (
    CONFIRM,
    DATA_MAGIC,
    DISCOVER,
    MAX_DATA,
    PING,
    PONG,
    RESPOND,
    Config,
    Message,
    NodeCore,
    PeerJoined,
    PeerLeft,
)

BROADCAST = ("10.9.0.255", 21451)


class Lan:
    """Routes what cores send: broadcasts to every other node, unicasts to their target.
    `drop(pred)` loses datagrams the predicate picks (data, src, dst)."""

    def __init__(self):
        self.nodes = {}
        self.now = 0.0
        self.lost = []
        self.drop_if = lambda data, src, dst: False
        self.log = []

    def add(self, name, **cfg):
        cfg.setdefault("broadcast_address", BROADCAST[0])
        address = (f"10.9.0.{len(self.nodes) + 1}", 21450)
        node = NodeCore(self.now, Config(**cfg), self_addresses={address})
        node.address = address
        node.name = name
        self.nodes[address] = node
        return node

    def flush(self, rounds=10):
        for _ in range(rounds):
            moved = False
            for src, node in list(self.nodes.items()):
                for data, dst in node.datagrams_to_send():
                    moved = True
                    targets = ([n for a, n in self.nodes.items() if a != src] if dst == BROADCAST
                               else [self.nodes[dst]] if dst in self.nodes else [])
                    if not targets:
                        self.log.append((data, node.name, None))  # to a dead or absent node
                    for t in targets:
                        self.log.append((data, node.name, t.name))
                        if self.drop_if(data, src, t.address):
                            self.lost.append((data, src, t.address))
                        else:
                            t.receive_datagram(data, src, self.now)
            if not moved:
                return

    def run_until(self, t, step=0.05):
        while self.now < t - 1e-9:
            self.now = round(min(t, self.now + step), 6)
            for node in self.nodes.values():
                if node.get_timer() <= self.now:
                    node.handle_timer(self.now)
            self.flush()


def events(node):
    out = []
    while (ev := node.next_event()) is not None:
        out.append(ev)
    return out


def test_two_nodes_discover_each_other_by_the_three_way_handshake():
    lan = Lan()
    a = lan.add("a")
    b = lan.add("b", broadcast_interval=100)  # b stays quiet: a discovers it
    lan.now = 0.0
    a.handle_timer(0.0)
    b._next_broadcast = 100
    lan.flush()
    assert [(d, s, t) for d, s, t in lan.log] == [
        (DISCOVER, "a", "b"), (RESPOND, "b", "a"), (CONFIRM, "a", "b")]
    assert events(a) == [PeerJoined(b.address, "handshake")]
    assert events(b) == [PeerJoined(a.address, "confirmation")]
    assert set(a.peers) == {b.address} and set(b.peers) == {a.address}
    assert not a.reservations and not b.reservations


def test_simultaneous_discovery_registers_each_peer_once():
    lan = Lan()
    nodes = [lan.add(n) for n in "abc"]
    lan.run_until(0.1)
    for n in nodes:
        assert len(n.peers) == 2 and not n.reservations, n.name
        assert len([e for e in events(n) if isinstance(e, PeerJoined)]) == 2


def test_broadcast_every_interval_and_paused_while_full():
    lan = Lan()
    a = lan.add("a", max_peers=1, broadcast_interval=2.0)
    lan.run_until(5.0)
    assert a.stats["broadcasts"] == 3  # at 0, 2 and 4: nobody answers
    b = lan.add("b", broadcast_interval=100)
    lan.run_until(6.1)
    assert set(a.peers) == {b.address} and a.full
    before = a.stats["broadcasts"]
    lan.run_until(12.0)
    assert a.stats["broadcasts"] == before  # full: no broadcasts


def test_full_list_ignores_broadcasts_and_responses():
    lan = Lan()
    a = lan.add("a", max_peers=1)
    lan.add("b", broadcast_interval=100)
    lan.run_until(0.1)
    assert a.full
    c = lan.add("c")  # broadcasts; a is full and must not answer or reserve
    lan.run_until(0.2)
    assert c.address not in a.peers and c.address not in a.reservations
    assert a.stats["dropped_discover_while_full"] == 1
    a.receive_datagram(RESPOND, c.address, lan.now)  # an unsolicited aupa! while full
    assert a.stats["dropped_respond_while_full"] == 1 and a.datagrams_to_send() == []


def test_reservation_expires_and_a_late_confirmation_is_ignored():
    lan = Lan()
    a = lan.add("a", broadcast_interval=100)
    b = lan.add("b", broadcast_interval=100, reservation_timeout=2.0, max_peers=1)
    lan.drop_if = lambda data, src, dst: data == CONFIRM  # a's dale! is lost
    a.handle_timer(0.0)
    b._next_broadcast = 100
    lan.flush()
    assert b.reservations == {a.address: 2.0} and b.full  # the spot is blocked
    lan.run_until(2.0)
    assert not b.reservations and not b.full and b.stats["reservations_expired"] == 1
    b.receive_datagram(CONFIRM, a.address, 2.5)  # the dale! turns up late
    assert a.address not in b.peers and b.stats["dropped_confirm_without_reservation"] == 1


def test_a_lost_confirmation_is_repaired_at_the_next_broadcast():
    lan = Lan()
    a = lan.add("a", broadcast_interval=1.0, inactive_peer_time=100)
    b = lan.add("b", broadcast_interval=100, reservation_timeout=0.5, inactive_peer_time=100)
    b._next_broadcast = 100  # only a discovers
    lan.drop_if = lambda data, src, dst: data == CONFIRM and lan.now < 0.5  # the first dale! is lost
    lan.run_until(0.9)
    assert b.address in a.peers and a.address not in b.peers  # they disagree
    lan.run_until(1.1)  # a broadcasts again; b answers; a confirms again
    assert a.address in b.peers and a.stats["reconfirmed"] == 1


def test_confirmation_without_any_reservation_is_dropped():
    node = NodeCore(0.0)
    node.receive_datagram(CONFIRM, ("10.0.0.7", 21450), 0.0)
    assert not node.peers and node.stats["dropped_confirm_without_reservation"] == 1


def pair(**cfg):
    lan = Lan()
    a = lan.add("a", broadcast_interval=100, **cfg)
    b = lan.add("b", broadcast_interval=100, **cfg)
    a.handle_timer(0.0)
    b._next_broadcast = 100
    lan.flush()
    events(a), events(b)
    return lan, a, b


def quiet(node):
    """Stop node from heartbeating, so only the other side's heartbeat is exercised."""
    node.config = replace(node.config, inactive_peer_time=1e9)


def test_heartbeat_answered_keeps_the_peer():
    lan, a, b = pair(inactive_peer_time=3.0, heartbeat_max_wait=1.0)
    quiet(b)
    lan.run_until(10.0)
    exchanges = [(d, s, t) for d, s, t in lan.log if d in (PING, PONG)]
    assert exchanges == [(PING, "a", "b"), (PONG, "b", "a")] * 3  # at 3, 6 and 9 s
    assert b.address in a.peers and a.peers[b.address].missed == 0
    assert a.stats["heartbeats_missed"] == 0 and a.stats["pongs_in"] == 3


def test_three_missed_heartbeats_remove_the_peer_and_discovery_resumes():
    lan, a, b = pair(inactive_peer_time=3.0, heartbeat_max_wait=1.0, max_peers=1)
    del lan.nodes[b.address]  # b dies
    a._next_broadcast = 100
    lan.run_until(5.9)
    assert a.peers[b.address].missed == 2
    lan.run_until(6.0)  # last seen 0 + 3 s inactive + 3 x 1 s unanswered
    assert b.address not in a.peers and not a.full
    assert events(a) == [PeerLeft(b.address, "3 missed heartbeats")]
    assert [d for d, s, t in lan.log if s == "a" and d == PING] == [PING] * 3  # at 3, 4 and 5 s
    a._next_broadcast = lan.now  # the free spot means a broadcasts again
    before = a.stats["broadcasts"]
    lan.run_until(6.1)
    assert a.stats["broadcasts"] == before + 1


def test_a_pong_resets_the_missed_counter():
    lan, a, b = pair(inactive_peer_time=3.0, heartbeat_max_wait=1.0)
    quiet(b)
    lan.drop_if = lambda data, src, dst: data == PONG and dst == a.address
    lan.run_until(4.5)  # the hor? at 3 s went unanswered; the one sent at 4 s is lost too
    assert a.peers[b.address].missed == 1
    lan.drop_if = lambda data, src, dst: False
    lan.run_until(5.5)  # 5 s: a second miss, a third hor?, and this one is answered
    peer = a.peers[b.address]
    assert (peer.missed, a.stats["heartbeats_missed"], a.stats["pongs_in"]) == (0, 2, 1)


def test_any_message_from_a_peer_counts_as_a_heartbeat_answer():
    lan, a, b = pair(inactive_peer_time=3.0, heartbeat_max_wait=1.0)
    quiet(b)
    lan.drop_if = lambda data, src, dst: data == PONG
    lan.run_until(4.5)
    assert a.peers[b.address].missed == 1 and a.peers[b.address].heartbeat_deadline == 5.0
    b.send(a.address, b"alive")
    lan.flush()
    peer = a.peers[b.address]
    assert (peer.missed, peer.heartbeat_deadline, peer.last_seen) == (0, None, 4.5)


def test_any_message_refreshes_last_seen_and_postpones_the_heartbeat():
    lan, a, b = pair(inactive_peer_time=3.0)
    for t in (1.0, 2.0, 3.0, 4.0):
        lan.run_until(t)
        b.send(a.address, b"tick")
        lan.flush()
    assert a.peers[b.address].last_seen == 4.0
    assert not [1 for d, s, t in lan.log if d == PING and s == "a"]  # a never had to ask


def test_data_between_peers_and_from_strangers():
    lan, a, b = pair()
    b.send(a.address, b"hello")
    a.send_all(b"to everyone")
    lan.flush()
    assert events(a) == [Message(b.address, b"hello")]
    assert events(b) == [Message(a.address, b"to everyone")]
    a.receive_datagram(DATA_MAGIC + b"sneaky", ("10.9.0.99", 21450), lan.now)
    assert events(a) == [] and a.stats["dropped_data_from_stranger"] == 1
    with pytest.raises(KeyError):
        a.send(("10.9.0.99", 21450), b"x")
    with pytest.raises(ValueError):
        a.send(b.address, b"x" * (MAX_DATA + 1))
    a.send(b.address, b"x" * MAX_DATA)  # at the limit


def test_data_that_looks_like_a_control_string_stays_data():
    lan, a, b = pair()
    b.send(a.address, DISCOVER)
    lan.flush()
    assert events(a) == [Message(b.address, DISCOVER)]
    assert a.stats.get("dropped_discover_from_peer", 0) == 0


@pytest.mark.parametrize("datagram,reason", [
    (b"pelotari", "unknown"), (b"PELOTARI?", "unknown"), (b"pelotari?\n", "unknown"),
    (b"", "unknown"), (b"\x00" * 65507, "unknown"), (b"aupa! aupa!", "unknown"),
    (PONG, "pong_from_stranger"), (PING, "ping_from_stranger"),
    (CONFIRM, "confirm_without_reservation"), (DATA_MAGIC + b"x", "data_from_stranger"),
])
def test_unexpected_datagrams_are_counted_and_the_node_keeps_working(datagram, reason):
    lan, a, b = pair()
    a.receive_datagram(datagram, ("10.9.0.77", 40000), lan.now)
    assert a.stats["dropped_" + reason] == 1
    assert a.datagrams_to_send() == [] and events(a) == []
    b.send(a.address, b"still fine")
    lan.flush()
    assert events(a) == [Message(b.address, b"still fine")]


def test_own_broadcasts_are_ignored():
    node = NodeCore(0.0, self_addresses={("10.0.0.1", 21450)})
    node.receive_datagram(DISCOVER, ("10.0.0.1", 21450), 0.0)
    assert node.datagrams_to_send() == [] and node.stats["own_datagrams"] == 1


def test_multi_node_peers_are_keyed_by_address_and_port():
    node = NodeCore(0.0, Config(multi_node=True))
    node.receive_datagram(DISCOVER, ("10.0.0.5", 21450), 0.0)
    node.receive_datagram(DISCOVER, ("10.0.0.5", 21460), 0.0)  # a second node on that host
    assert set(node.reservations) == {("10.0.0.5", 21450), ("10.0.0.5", 21460)}
    assert [to for _, to in node.datagrams_to_send()] == [("10.0.0.5", 21450), ("10.0.0.5", 21460)]


def test_config_limits():
    Config(max_peers=1, heartbeat_max_wait=0.001)
    for bad in ({"max_peers": 0}, {"broadcast_interval": 0}, {"missed_heartbeats_limit": 0},
                {"reservation_timeout": -1}, {"response_window": 0}, {"max_reservations": 0}):
        with pytest.raises(ValueError):
            Config(**bad)


# ---- a peer with no heartbeat: the original Go implementation ---------------------------------

class GoPeer:
    """The original Go implementation on the wire: `pelotari?` every `interval` s (first at
    `first`) from ephemeral ports, `aupa!` to a stranger's broadcast, `dale!` to any `aupa!`;
    no `hor?` sent, none answered, no peer ever removed. `lost` broadcasts never arrive."""

    ADDRESS = ("10.9.0.50", 21450)

    def __init__(self, node, interval=5.0, first=0.3, lost=(), answers_hor=False):
        self.node, self.interval, self.lost, self.answers_hor = node, interval, set(lost), answers_hor
        self.next, self.sent, self.has_node, self.alive = first, 0, False, True
        self.pings = []  # when `hor?` was sent to it

    def deliver(self, data, now, port=40000):
        self.node.receive_datagram(data, (self.ADDRESS[0], port), now)

    def step(self, now):
        if self.alive and now >= self.next - 1e-9:
            if self.sent not in self.lost:
                self.deliver(DISCOVER, now, port=50000 + self.sent)
            self.sent += 1
            self.next = round(self.next + self.interval, 6)
        for data, dst in self.node.datagrams_to_send():
            if dst[0] not in (self.ADDRESS[0], BROADCAST[0]):
                continue
            if data == PING:
                self.pings.append(now)  # sent to it, whether it is there or not
            if not self.alive:
                continue
            if data == DISCOVER and not self.has_node:
                self.deliver(RESPOND, now)
            elif data == RESPOND:  # Go's completeHandshake: register and confirm
                self.has_node = True
                self.deliver(CONFIRM, now)
            elif data == CONFIRM:
                self.has_node = True
            elif data == PING and self.answers_hor:
                self.deliver(PONG, now)


def run_go(node, peer, until, step=0.05, start=0.0):
    """Drive node and peer to `until`; every event the node gave, with its time."""
    seen, now = [], start
    while now < until - 1e-9:
        now = round(now + step, 6)
        if node.get_timer() <= now:
            node.handle_timer(now)
        peer.step(now)
        seen += [(now, ev) for ev in events(node)]
    return seen


def joins_and_leaves(seen):
    return ([t for t, e in seen if isinstance(e, PeerJoined)],
            [t for t, e in seen if isinstance(e, PeerLeft)])


def test_a_heartbeatless_peer_at_the_seeds_limits_survives_a_lost_broadcast():
    """Default timers (5 s inactive + 3 x 1 s) against a peer broadcasting every 5 s (1a) that
    never answers `hor?`: its third broadcast is lost, a 10 s silence. No false left, no
    rejoin; it got its 3 `hor?` in the silence and none after."""
    node = NodeCore(0.0, Config(broadcast_address=BROADCAST[0]))
    go = GoPeer(node, interval=5.0, first=0.3, lost={3})  # 0.3, 5.3, 10.3, (15.3), 20.3 ...
    seen = run_go(node, go, 40.0)
    joined, left = joins_and_leaves(seen)
    assert (joined, left) == ([0.05], []), seen
    assert GoPeer.ADDRESS in node.peers and node.peers[GoPeer.ADDRESS].missed == 0
    assert node.stats["dropped_discover_from_peer"] == go.sent - len(go.lost)  # never a stranger
    assert [t for t in go.pings if 15.0 < t < 20.3] == [15.3, 16.3, 17.3]


def test_a_heartbeatless_peer_that_stops_is_removed_after_missing_three_broadcasts():
    node = NodeCore(0.0, Config(broadcast_address=BROADCAST[0]))
    go = GoPeer(node, interval=5.0, first=0.3)
    run_go(node, go, 12.0)  # broadcasts at 0.3, 5.3 and 10.3
    go.alive = False
    seen = run_go(node, go, 40.0, start=12.0)
    # last heard at 10.3 (its broadcast); 3 more broadcast intervals and the heartbeat wait
    assert joins_and_leaves(seen) == ([], [26.3]), seen
    assert seen[0][1] == PeerLeft(GoPeer.ADDRESS, "3 missed heartbeats")
    assert [t for t in go.pings if t > 12.0] == [15.3, 16.3, 17.3]  # none after the third miss


def test_a_broadcasting_peer_that_answers_hor_is_removed_by_the_heartbeat_alone():
    node = NodeCore(0.0, Config(broadcast_address=BROADCAST[0]))
    go = GoPeer(node, interval=5.0, first=4.0, answers_hor=True)  # hor? at 5 s comes first
    run_go(node, go, 12.0)
    assert node.peers[GoPeer.ADDRESS].heartbeats and node.stats["pongs_in"] >= 1
    go.alive = False
    seen = run_go(node, go, 30.0, start=12.0)
    assert joins_and_leaves(seen) == ([], [17.0]), seen  # last heard at 9 s: 9 + 5 + 3 x 1


def test_a_slower_peer_survives_a_lost_broadcast_when_its_interval_is_configured():
    """A peer broadcasting every 10 s, slower than the seed's rule (8 s) waits: before its
    interval is known it is dropped once, and remembered. From then on, with
    peer_broadcast_interval=10, a lost broadcast (20 s of silence) is within 3 x 10 + 1 s; with
    the 5 s default it is not (3 x 5 + 1 s)."""
    for interval, left in ((10.0, [8.3]), (5.0, [8.3, 36.3])):
        node = NodeCore(0.0, Config(broadcast_address=BROADCAST[0],
                                    peer_broadcast_interval=interval))
        go = GoPeer(node, interval=10.0, first=0.3, lost={3})  # 0.3, 10.3, 20.3, (30.3), 40.3
        assert joins_and_leaves(run_go(node, go, 45.0))[1] == left, interval
        assert GoPeer.ADDRESS in node.peers


def test_a_shorter_interval_is_learned_and_only_shortens_the_wait():
    """Short timers (1 s, 3 x 0.3 s): a peer broadcasting every second is dropped 3 x 1 + 0.3 s
    after its last broadcast, not 3 x 5 + 0.3 s; one spacing its broadcasts 20 s apart gets no
    more than the 5 s default (a forger keeps a spot no longer by spacing them)."""
    for interval, stop, removed in ((1.0, 4.5, 4.0 + 3.3), (20.0, 25.0, 20.0 + 15.3)):
        node = NodeCore(0.0, Config(broadcast_address=BROADCAST[0], broadcast_interval=100,
                                    inactive_peer_time=1.0, heartbeat_max_wait=0.3))
        go = GoPeer(node, interval=interval, first=interval)
        node.receive_datagram(DISCOVER, ("10.9.0.50", 50000), 0.0)  # it broadcast at 0 s
        node.receive_datagram(CONFIRM, ("10.9.0.50", 40000), 0.0)  # and confirmed our aupa!
        node.datagrams_to_send()
        go.has_node = True
        run_go(node, go, stop)
        go.alive = False
        seen = run_go(node, go, stop + 20.0, start=stop)
        assert joins_and_leaves(seen) == ([], [pytest.approx(removed)]), (interval, seen)


def test_short_timers_do_not_make_a_heartbeatless_peer_leave_and_join_in_a_loop():
    """pelotari asks after 1 s and gives up 0.9 s later; the peer broadcasts every 5 s. Found
    by our broadcast before its first (it had broadcast before we started), it is dropped once;
    when it comes back it was there all along and ignored `hor?`: from then on it is kept."""
    node = NodeCore(0.0, Config(broadcast_address=BROADCAST[0], broadcast_interval=0.5,
                                inactive_peer_time=1.0, heartbeat_max_wait=0.3))
    go = GoPeer(node, interval=5.0, first=3.0, lost={4})
    seen = run_go(node, go, 60.0)
    joined, left = joins_and_leaves(seen)
    assert (len(joined), len(left)) == (2, 1), seen
    assert left[0] < 3.0 <= joined[1] and GoPeer.ADDRESS in node.peers


def test_peer_broadcast_interval_0_removes_by_the_heartbeat_alone():
    node = NodeCore(0.0, Config(broadcast_address=BROADCAST[0], peer_broadcast_interval=0))
    go = GoPeer(node, interval=5.0, first=0.3, lost={3})
    joined, left = joins_and_leaves(run_go(node, go, 25.0))
    assert (joined, left) == ([0.05, 20.3], [18.3])  # the seed's rule: 10.3 + 5 + 3 x 1


def test_remembered_mute_addresses_are_at_most_max_peers():
    node = NodeCore(0.0, Config(max_peers=2, broadcast_address=BROADCAST[0],
                                inactive_peer_time=1.0, heartbeat_max_wait=0.1))
    node.handle_timer(0.0)
    for n in range(3):  # three heartbeat-less peers, found by our broadcast, each dropped
        node.receive_datagram(RESPOND, (f"10.9.0.{60 + n}", 40000), 0.1)
        for _ in range(10):  # `hor?` at 1.1 s, then three misses
            if node.peers:
                node.handle_timer(node.get_timer())
        assert not node.peers
        node._next_broadcast = node.last_broadcast = 0.0
    assert list(node.mute) == [("10.9.0.61", 21450), ("10.9.0.62", 21450)]
    node.receive_datagram(RESPOND, ("10.9.0.62", 40000), 0.2)
    node.receive_datagram(PING, ("10.9.0.62", 40000), 0.3)  # it speaks heartbeat after all
    assert node.peers[("10.9.0.62", 21450)].heartbeats and list(node.mute) == [("10.9.0.61", 21450)]
