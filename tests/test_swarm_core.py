"""The swarm core's rules (docs/protocols/swarm.md, "Timers and rules"), by hand with an injected
clock and through pelotari.sim (seeded; delays, loss, partitions, crashes) — never sleeping."""
import random
from collections import Counter

import pytest

from pelotari.sim import LinkSpec, Simulator
from pelotari.swarm import wire
from pelotari.swarm.core import (
    Config,
    Connected,
    ConnectionsLearned,
    Demoted,
    Forgotten,
    Promoted,
    Reset,
    SwarmNode,
    UserMessage,
)
from pelotari.swarm.table import (
    NIL,
    RECORD_BYTES,
    S_ASKED,
    S_DIRECT,
    S_ESTABLISHED,
    S_PROMOTING,
    ConnectionTable,
    Full,
)
from pelotari.swarm.wire import Keyring

KEY = bytes(range(32))
WALL = 1_800_000_000.0  # Unix time at now = 0: an epoch starts there (30 s of one epoch)
KR = Keyring([KEY])
A = ("10.0.0.1", 21452)
B = ("10.0.0.2", 21452)
C = ("10.0.0.3", 21452)


def node(addr=A, cfg=None, now=0.0):
    return SwarmNode(addr, KR, now, cfg, wall_offset=WALL,
                     secret=addr[0].encode().ljust(32, b"."), seed=7)


def sent(n, now=0.0):
    """(message, destination, size) for what n queued, decoded."""
    return [(wire.decode(d, KR, WALL + now), to, len(d)) for d, to in n.datagrams_to_send()]


def events(n):
    out = []
    while (e := n.next_event()) is not None:
        out.append(e)
    return out


def dg(msg, now=0.0):
    """A datagram as a key holder signs it."""
    return wire.encode(msg, KR, WALL + now)


def step(n, until):
    """Run n's timers up to `until`; what it sent on the way, decoded."""
    out = []
    while (t := n.get_timer()) is not None and t <= until:
        n.handle_timer(t)
        out += [(t, m, to) for m, to, _ in sent(n, t)]
    return out


def inbound(n, src, now=0.0, attempt=0, token=None):
    """src completes a handshake with n (n holds it as vague); returns src's token."""
    token = token or (hash(src) & 0xFFFFFFFF) + 1
    n.receive_datagram(dg(wire.connect(attempt, token), now), src, now)
    (answer, to, _), = sent(n, now)
    assert to == src and answer.ack and answer.echo == token
    n.receive_datagram(dg(wire.connect(attempt, token, ack=True, echo=answer.token), now), src, now)
    assert sent(n, now) == []
    return token


def handshake(a, b, now=0.0):
    """a dials b, every datagram delivered at once."""
    a.connect(b.address, now)
    pump({a.address: a, b.address: b}, now)


def pump(nodes, now, drop=lambda data, src, dst: False):
    """Deliver everything queued between nodes, at `now`, until quiet."""
    moved = True
    while moved:
        moved = False
        for n in list(nodes.values()):
            for data, to in n.datagrams_to_send():
                moved = True
                if to in nodes and not drop(data, n.address, to):
                    nodes[to].receive_datagram(data, n.address, now)


# ---- the table -----------------------------------------------------------------------------

def test_a_record_is_57_bytes_and_slots_stay_dense():
    assert RECORD_BYTES == 57  # + the index: under 64 a connection
    t = ConnectionTable(8)
    slots = [t.add(("10.0.0.%d" % k, 1), k) for k in range(5)]
    assert slots == [0, 1, 2, 3, 4] and len(t) == 5
    t.set_due(4, 500)
    assert t.remove(1) == 4  # the last record moved into the hole
    assert t.lookup(("10.0.0.4", 1)) == 1 and t.lookup(("10.0.0.1", 1)) == -1
    assert t.heard[1] == 4 and t.next_due() == 500 and t.pop_due(500) == [1]
    assert t.remove(3) == -1 and len(t) == 3
    assert list(t.lru()) == [0, 2, 1]  # by last heard, the moves kept


def test_eviction_order_is_least_recently_heard_and_never_a_direct_one():
    t = ConnectionTable(3)
    for k in range(3):
        t.add(("10.0.0.%d" % k, 1), 10 * k)
    t.touch(0, 100)  # heard again: last to go
    assert t.evictable() == 1
    t.set_direct(1, True)
    assert t.evictable() == 2 and 1 in t.direct
    t.set_direct(2, True)
    t.set_direct(0, True)
    assert t.evictable() == -1
    with pytest.raises(Full):
        t.add(("10.0.0.9", 1), 0)
    t.set_direct(2, False)  # demoted: first to go
    assert t.evictable() == 2


def test_scan_is_bounded_by_its_probe_and_goes_round():
    t = ConnectionTable(100)
    for k in range(100):
        t.add(("10.0.%d.1" % k, 1), 0)
        t.state[k] = S_ESTABLISHED if k % 10 == 0 else 0
    got, cur = t.scan(0, 8, 25, S_DIRECT | S_ESTABLISHED, S_ESTABLISHED)
    assert got == [0, 10, 20] and cur == 25  # looked at 25 slots, no more
    got, cur = t.scan(cur, 2, 1000, S_DIRECT | S_ESTABLISHED, S_ESTABLISHED)
    assert got == [30, 40] and cur == 41
    seen = Counter()
    for _ in range(50):
        got, cur = t.scan(cur, 1, 100, S_DIRECT | S_ESTABLISHED, S_ESTABLISHED)
        seen.update(got)
    assert set(seen) == set(range(0, 100, 10)) and max(seen.values()) == 5  # round robin


def test_rebase_moves_every_time_back_and_keeps_timers_armed():
    t = ConnectionTable(4)
    s = t.add(("10.0.0.1", 1), 1 << 31)
    t.set_due(s, (1 << 31) + 5)
    t.pinged[s] = 100
    t.rebase(1 << 30)
    assert t.heard[s] == 1 << 30 and t.due[s] == (1 << 30) + 5 and t.pinged[s] == 0
    assert t.next_due() == (1 << 30) + 5 and t.prev[s] == NIL


def test_config_is_validated():
    for bad in (dict(slot=0), dict(ping_interval=-1), dict(connect_backoff=()),
                dict(max_direct=4, target_direct=8), dict(get_room=35), dict(ping_jitter=0.5),
                dict(capacity=0), dict(max_missed=0), dict(vague_pongs_per_slot=-1)):
        with pytest.raises(ValueError):
            Config(**bad)
    Config(target_direct=0, max_direct=1, vague_pongs_per_slot=0)


# ---- the handshake -------------------------------------------------------------------------

def test_the_handshake_is_three_connects_with_tokens_echoed():
    a, b = node(A), node(B)
    a.connect(B, 0.0)
    (m1, to, size), = sent(a)
    assert to == B and m1.type == 0 and not m1.ack and m1.attempt == 0 and m1.echo == 0
    assert size == 52
    b.receive_datagram(dg(m1), A, 0.0)
    (m2, to, _), = sent(b)
    assert to == A and m2.ack and m2.echo == m1.token and len(b.table) == 0  # stateless
    a.receive_datagram(dg(m2), B, 0.0)
    (m3, to, _), = sent(a)
    assert m3.ack and m3.echo == m2.token and m3.token == m1.token and m3.attempt == 0
    assert events(a) == [Connected(B, True, False)]
    b.receive_datagram(dg(m3), A, 0.0)
    assert sent(b) == [] and events(b) == [Connected(A, False, True)]
    assert [(c.address, c.status) for c in a.connections()] == [(B, "direct")]
    assert [(c.address, c.status) for c in b.connections()] == [(A, "vague")]


def test_connect_sent_resends_the_same_bytes_then_gives_up_and_redials_a_later_attempt():
    a = node(A)
    a.connect(B, 0.0)
    first = a.datagrams_to_send()
    out = []
    while (t := a.get_timer()) <= 29.0:
        a.handle_timer(t)
        out += [(round(t, 3), d) for d, to in a.datagrams_to_send() if to == B]
    assert [t for t, _ in out] == [1.0, 3.0, 7.0]  # 4 sends: 0, 1, 3, 7 s
    assert all(d == first[0][0] for _, d in out)  # the same bytes (one epoch)
    assert a.stats["connect_gave_up"] == 1 and a.connections()[0].status == "connecting"
    later = step(a, 60.0)
    (t, m, to), = [x for x in later if x[1].type == 0][:1]
    assert t == pytest.approx(45.0) and m.attempt == 1 and not m.ack  # 15 s + 30 s, Attempt + 1


def test_connect_received_is_not_resent_and_an_identical_connect_without_ack_gets_ours_again():
    b = node(B)
    hello = dg(wire.connect(3, 0xAB))
    b.receive_datagram(hello, A, 0.0)
    first = b.datagrams_to_send()
    b.receive_datagram(hello, A, 1.0)  # A lost ours: the same Connect again
    assert b.datagrams_to_send() == first  # ours again, the same bytes (same epoch)
    assert step(b, 100.0) == []  # and never on its own
    # With a record: an established vague peer that lost our last Connect.
    c = node(C)
    tok = inbound(c, A)
    c.receive_datagram(dg(wire.connect(0, tok)), A, 2.0)
    (m, to, _), = sent(c, 2.0)
    assert m.type == 0 and m.ack and m.echo == tok and to == A
    assert [x for x in step(c, 60.0) if x[1].type == 0] == []  # Connect Received: no resends


def test_an_older_attempt_is_ignored_modulo_16():
    b = node(B)
    inbound(b, A, attempt=2, token=77)
    b.receive_datagram(dg(wire.connect(15, 99)), A, 1.0)  # 15 is 3 before 2 (mod 16)
    b.receive_datagram(dg(wire.connect(1, 99)), A, 1.0)
    assert sent(b, 1.0) == [] and b.stats["ignored_old_attempt"] == 2
    b.receive_datagram(dg(wire.connect(3, 99)), A, 1.0)  # newer: the peer's new handshake
    (m, _, _), = sent(b, 1.0)
    assert m.ack and m.echo == 99 and b.stats["peer_new_attempt"] == 1
    assert b.connections()[0].status == "half_open"


def test_the_token_must_be_echoed():
    b = node(B)
    b.receive_datagram(dg(wire.connect(0, 5, ack=True, echo=12345)), A, 0.0)
    assert sent(b) == [] and len(b.table) == 0 and b.stats["ignored_bad_echo"] == 1
    a = node(A)
    a.connect(B, 0.0)
    (m, _, _), = sent(a)
    a.receive_datagram(dg(wire.connect(0, 9, ack=True, echo=m.token ^ 1)), B, 0.0)
    assert sent(a) == [] and events(a) == [] and a.stats["ignored_bad_echo"] == 1
    a.receive_datagram(dg(wire.connect(0, 9, ack=True, echo=m.token)), B, 0.0)
    assert events(a) == [Connected(B, True, False)]


def test_a_spoofed_or_replayed_ack_makes_no_record():
    """The echo is bound to the address the answer went to: the same Connect from elsewhere is
    refused."""
    a, b = node(A), node(B)
    a.connect(B, 0.0)
    b.receive_datagram(a.datagrams_to_send()[0][0], A, 0.0)
    a.receive_datagram(b.datagrams_to_send()[0][0], B, 0.0)
    third = a.datagrams_to_send()[0][0]
    b.receive_datagram(third, C, 0.0)
    assert len(b.table) == 0 and b.stats["ignored_bad_echo"] == 1


def test_a_half_open_inbound_handshake_is_forgotten_after_30_s():
    b = node(B)
    tok = inbound(b, A)
    b.receive_datagram(dg(wire.connect(1, tok + 1)), A, 1.0)  # a new handshake, never finished
    sent(b, 1.0)
    events(b)
    step(b, 30.5)
    assert len(b.table) == 1
    step(b, 31.5)
    assert len(b.table) == 0 and events(b) == [Forgotten(A, "half_open")]


# ---- Reset ---------------------------------------------------------------------------------

def test_reset_answers_a_verified_datagram_from_an_address_we_hold_nothing_for():
    b = node(B, Config(resets_per_slot=2))
    for src in (A, A, C, ("10.0.0.4", 1)):
        b.receive_datagram(dg(wire.ping(1)), src, 0.2)
    out = sent(b, 0.2)
    assert [(m.type, to, size) for m, to, size in out] == [(1, A, 36), (1, C, 36)]
    assert b.stats["limited_reset"] == 2  # one per source per slot, two per slot in all
    b.receive_datagram(dg(wire.reset(0)), A, 1.5)  # never a Reset to a Reset
    b.receive_datagram(dg(wire.ping(1)), A, 1.5)  # a new slot
    assert [(m.type, to) for m, to, _ in sent(b, 1.5)] == [(1, A)]


def test_a_reset_makes_a_direct_peer_redial_with_the_next_attempt_and_a_vague_one_forgotten():
    a, b = node(A), node(B)
    handshake(a, b)
    events(a), events(b)
    a.ping(B, 1.0), b.ping(A, 1.0)  # a Reset answers a request of ours
    sent(a, 1.0), sent(b, 1.0)
    a.receive_datagram(dg(wire.reset(0)), B, 1.0)
    assert events(a) == [Reset(B, True)]
    (m, to, _), = sent(a, 1.0)
    assert m.type == 0 and m.attempt == 1 and not m.ack and to == B
    b.receive_datagram(dg(wire.reset(0)), A, 1.0)
    assert events(b) == [Reset(A, False), Forgotten(A, "reset")] and len(b.table) == 0


def test_a_reset_older_than_the_attempt_seen_is_ignored_unless_it_answers_our_ping():
    b = node(B)
    inbound(b, A, attempt=5)
    b.receive_datagram(dg(wire.reset(4)), A, 1.0)  # no request of ours out: a replay
    assert b.stats["ignored_reset_unasked"] == 1 and len(b.table) == 1
    b._send_get(b.table.lookup(A), 1.5)  # a request out, but the Reset is older than Attempt 5
    b.receive_datagram(dg(wire.reset(4)), A, 1.5)
    assert b.stats["ignored_old_reset"] == 1 and len(b.table) == 1
    b.ping(A, 2.0)  # outstanding: a peer that restarted (Attempt 0 again) answers it with Reset
    sent(b, 2.0)
    b.receive_datagram(dg(wire.reset(0)), A, 2.1)
    assert len(b.table) == 0 and b.stats["reset"] == 1


def test_a_restarted_peer_is_reconnected_through_reset():
    a, b = node(A), node(B)
    handshake(a, b)
    b2 = node(B)  # B restarts: no state
    nodes = {A: a, B: b2}
    t = 0.0
    for _ in range(40):
        t = a.get_timer()
        a.handle_timer(t)
        pump(nodes, t)
    assert any(isinstance(e, Reset) for e in events(a))
    assert [c.status for c in a.connections()] == ["direct"]
    assert [c.status for c in b2.connections()] == ["vague"]


# ---- direct connections: pinged, demoted; vague ones promoted ------------------------------

def test_a_direct_connection_is_demoted_after_3_unanswered_pings():
    a, b = node(A), node(B)
    handshake(a, b)
    events(a)
    pings = []
    while not (evs := events(a)):
        t = a.get_timer()
        a.handle_timer(t)
        pings += [t for m, to, _ in sent(a, t) if m.type == 2]  # B hears nothing any more
    assert evs == [Demoted(B)] and len(pings) == 3
    assert [c.status for c in a.connections()] == ["vague"]


def test_pongs_keep_a_direct_connection_and_a_replayed_pong_counts_for_nothing():
    a, b = node(A), node(B)
    handshake(a, b)
    nodes = {A: a, B: b}
    replay = []
    t = 0.0
    while t < 60:
        t = a.get_timer()
        a.handle_timer(t)
        for data, to in a.datagrams_to_send():
            b.receive_datagram(data, A, t)
        for data, to in b.datagrams_to_send():
            if wire.parse(data).type == 3:
                replay.append(data)
            a.receive_datagram(data, B, t)
        pump(nodes, t)
    assert not any(isinstance(e, Demoted) for e in events(a)) and a.table.rtt[0] == 0
    before = a.stats["ignored_pong"]
    a.receive_datagram(replay[-1], B, t)  # already counted
    assert a.stats["ignored_pong"] == before + 1
    inbound(a, C, t)
    a.ping(C, t)
    sent(a, t)
    a.receive_datagram(replay[-1], C, t)  # B's Pong from C: C's mask does not fit it
    assert a.stats["ignored_pong"] == before + 2 and a.stats["received_Pong"] > 10


def test_a_fast_vague_connection_is_promoted_and_a_slow_one_is_not():
    sim = Simulator(seed=3, default=LinkSpec(delay=0.005))
    sim.link("10.0.0.3", "10.0.0.1", LinkSpec(delay=0.060))  # C: a 120 ms round trip
    cfg = Config(target_direct=2, max_direct=2)
    for addr in (A, B, C):
        sim.add(addr, lambda now, addr=addr: node(addr, cfg, now))
    sim.do(B, lambda c, now: c.connect(A, now))
    sim.do(C, lambda c, now: c.connect(A, now))
    sim.run(10)
    promoted = sim.events(A, Promoted)
    assert [e.address for e in promoted] == [B] and promoted[0].rtt == pytest.approx(0.010)
    assert sorted(a for a in sim.nodes[A].core.direct()) == [B]
    assert sim.nodes[A].core.stats["promotion_pings"] > 2  # C was asked and kept vague


# ---- GetConnections / Connections ----------------------------------------------------------

def test_connections_teach_known_peers_which_are_dialled():
    sim = Simulator(seed=4, default=LinkSpec(delay=0.002, jitter=0.002))
    hub = ("10.0.0.100", 21452)
    for addr in (hub, A, B, C):
        sim.add(addr, lambda now, addr=addr: node(addr, Config(target_direct=3), now))
    for addr in (A, B, C):
        sim.do(addr, lambda c, now: c.connect(hub, now))
    sim.run(90)
    learned = {a for e in sim.events(A, ConnectionsLearned) for a in e.learned}
    assert {B, C} <= learned and A not in learned
    assert set(sim.nodes[A].core.direct()) == {hub, B, C}


def test_a_connections_answer_never_outgrows_the_request_and_leaves_the_requester_out():
    b = node(B)
    peers = [("10.0.1.%d" % k, 21452) for k in range(1, 40)]
    for p in peers:
        inbound(b, p)
    room = 36 + 2 + 6 * 5  # room for five IPv4 entries
    b.receive_datagram(dg(wire.get_connections(room)), peers[0], 1.0)
    (m, to, size), = sent(b, 1.0)
    assert m.type == 5 and to == peers[0] and size <= room and len(m.entries) == 5
    assert peers[0] not in [e.address for e in m.entries]
    b.receive_datagram(dg(wire.get_connections()), peers[1], 2.0)
    (m, _, size), = sent(b, 2.0)
    assert size <= 1024 and len(m.entries) == 38 and peers[1] not in [e.address for e in m.entries]


def test_unasked_connections_are_ignored():
    b = node(B)
    inbound(b, A)
    b.receive_datagram(dg(wire.connections([wire.Entry("10.9.9.9", 1)])), A, 1.0)
    assert b.known() == [] and b.stats["ignored_unasked"] == 1 and sent(b, 1.0) == []


def test_a_user_message_from_an_established_peer_is_handed_up():
    a, b = node(A), node(B)
    handshake(a, b)
    a.send(B, 4242, b"hello", 1.0, flags=0x8001)
    pump({A: a, B: b}, 1.0)
    assert [e for e in events(b) if isinstance(e, UserMessage)] == [
        UserMessage(A, 4242, 0x8001, b"hello")]
    with pytest.raises(KeyError):
        a.send(C, 4242, b"x", 1.0)


# ---- vague connections: checked a few at a time, rate-limited Pings ------------------------

def test_the_vague_timer_checks_some_never_all_and_forgets_the_silent():
    b = node(B, Config(vague_batch=8, target_direct=0))
    peers = [("10.0.1.%d" % k, 21452) for k in range(1, 101)]
    for p in peers:
        inbound(b, p)
    per_tick = []
    for k in range(1, 40):
        out = step(b, k + 0.5)
        per_tick.append(len([m for _, m, _ in out if m.type == 2]))
    assert max(per_tick) == 8  # 8 of 100 per slot
    assert b.stats["vague_checked"] == 8 * 39
    # Each was checked about 3 times, never answered: the first 3 rounds' are forgotten.
    forgotten = [e for e in events(b) if isinstance(e, Forgotten)]
    assert forgotten and all(e.reason == "silent" for e in forgotten)
    assert len(b.table) == 100 - len(forgotten) and len(forgotten) < 100


def _vague_node(cfg, n):
    b = node(B, cfg)
    peers = [("10.0.1.%d" % k, 21452) for k in range(1, n + 1)]
    for p in peers:
        inbound(b, p)
    return b, peers


def pongs(b, now):
    return [to for m, to, _ in sent(b, now) if m.type == 3]


def test_the_global_vague_ping_limit_at_the_limit_and_one_past():
    b, peers = _vague_node(Config(vague_pongs_per_slot=5), 6)
    for p in peers[:5]:
        b.receive_datagram(dg(wire.ping(1)), p, 1.1)
    assert len(pongs(b, 1.1)) == 5 and b.stats["limited_global"] == 0
    b.receive_datagram(dg(wire.ping(1)), peers[5], 1.2)
    assert pongs(b, 1.2) == [] and b.stats["limited_global"] == 1
    b.receive_datagram(dg(wire.ping(1)), peers[5], 2.0)  # the next slot
    assert pongs(b, 2.0) == [peers[5]]


def test_a_connection_claims_the_global_limit_once_per_slot():
    b, (p,) = _vague_node(Config(), 1)
    b.receive_datagram(dg(wire.ping(1)), p, 1.1)
    b.receive_datagram(dg(wire.ping(2)), p, 1.9)
    assert pongs(b, 1.9) == [p] and b.stats["limited_claim"] == 1
    b.receive_datagram(dg(wire.ping(3)), p, 2.1)
    assert pongs(b, 2.1) == [p]


def test_the_per_connection_limit_burst_3_then_one_per_4_s():
    b, (p,) = _vague_node(Config(ping_burst=3, ping_refill=4.0), 1)
    got = []
    for k in range(1, 13):
        b.receive_datagram(dg(wire.ping(k)), p, k + 0.5)
        got.append(bool(pongs(b, k + 0.5)))
    # a burst of 3 at 1.5, 2.5, 3.5; the first token is back 4 s after the first was taken
    assert got == [True, True, True, False, True, False, False, False, True, False, False, False]
    assert b.stats["limited_own"] == 7


def test_a_direct_peers_pings_are_answered_once_per_slot():
    a, b = node(A), node(B)
    handshake(a, b)
    for k in range(5):  # a Ping replayed from the direct peer's (spoofed) address
        a.receive_datagram(dg(wire.ping(k + 1)), B, 1.0 + k * 0.1)
    assert len(pongs(a, 1.5)) == 1 and a.stats["limited_claim"] == 4
    for k in range(5):  # no bucket: one a slot, every slot
        a.receive_datagram(dg(wire.ping(k + 1)), B, 2.0 + k)
    assert len(pongs(a, 7.0)) == 5


# ---- strangers: counted, dropped, never amplified ------------------------------------------

MALFORMED = [
    (b"\x00\x02" + bytes(42), "bad_mac"),  # a Ping's size, a forged MAC
    (bytes(1025), "too_long"),  # past the limit: no HMAC even tried
    (b"\x00\x02\x00", "truncated"),
    (KR.sign(b"\x00\x02\x00\x00" + bytes(7), WALL + 1), "bad_length"),  # a Ping of 7 bytes
    (KR.sign(b"\x00\x05\x00\x00\x07\x01" + bytes(6), WALL + 1), "unknown_family"),
    (KR.sign(b"\x00\x04\x00\x00\x01", WALL + 1), "invalid_field"),  # padding not zero
    (Keyring([bytes(32)]).sign(b"\x00\x02\x00\x00" + bytes(8), WALL + 1), "bad_mac"),  # other key
    (KR.sign(b"\x00\x02\x00\x00" + bytes(8), WALL - 60), "bad_mac"),  # two epochs old
]


@pytest.mark.parametrize("data,reason", MALFORMED)
def test_bad_datagrams_are_counted_and_dropped_without_an_answer(data, reason):
    b = node(B)
    inbound(b, A)
    b.receive_datagram(data, A, 1.0)
    b.receive_datagram(data, C, 1.0)
    assert b.stats[f"dropped_{reason}"] == 2 and sent(b, 1.0) == []
    assert len(b.table) == 1


def test_nothing_a_stranger_sends_makes_the_node_send_more_bytes_than_it_received():
    """Random bytes, forgeries and replays of two other nodes' traffic (from their addresses
    and from spoofed ones), with the node's timers running: for every source, bytes sent to
    it <= bytes it sent."""
    rng = random.Random(5)
    # Capture a real exchange between P and Q (handshake, pings, requests, answers, user).
    p, q = node(("10.1.0.1", 21452)), node(("10.1.0.2", 21452))
    captured = []
    nodes = {p.address: p, q.address: q}

    def tap(data, src, dst):
        captured.append((data, src))
        return False

    p.connect(q.address, 0.0)
    pump(nodes, 0.0, tap)
    for t in (1.0, 6.0, 11.0):
        p.handle_timer(t)
        q.handle_timer(t)
        pump(nodes, t, tap)
    p.send(q.address, 9, b"x" * 900, 12.0)
    q.receive_datagram(dg(wire.get_connections(), 12.0), p.address, 12.0)
    pump(nodes, 12.0, tap)
    assert {wire.parse(d).type for d, _ in captured} >= {0, 2, 3, 4, 5, 9}
    n = node(("10.2.0.1", 21452), Config(target_direct=4))
    got, gave = Counter(), Counter()
    sources = [p.address, q.address] + [("10.3.%d.%d" % (k, k), 1000 + k) for k in range(30)]
    now = 13.0
    for _ in range(6000):
        now += rng.random() * 0.01
        src = rng.choice(sources)
        r = rng.random()
        if r < 0.5:
            data, _ = rng.choice(captured)
        elif r < 0.7:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 1100)))
        elif r < 0.9:
            data = bytearray(rng.choice(captured)[0])
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            data = bytes(data)
        else:
            data = wire.pack(wire.ping(rng.getrandbits(64)))[:4] + bytes(32) + bytes(8)
        got[src] += len(data)
        n.receive_datagram(data, src, now)
        if n.get_timer() <= now:
            n.handle_timer(now)
        for out, to in n.datagrams_to_send():
            gave[to] += len(out)
    assert got and all(gave[s] <= got[s] for s in gave), (gave, got)
    assert sum(gave.values()) > 0  # it did answer some (Connect 52 -> 52, anything -> Reset)
    assert len(n.table) == 0  # no replayed handshake made a record


# ---- meshes in the simulator ---------------------------------------------------------------

def mesh(n, boot=3, seed=1, loss=0.0, cfg=None):
    cfg = cfg or Config(capacity=1024)
    sim = Simulator(seed=seed, default=LinkSpec(delay=0.005, jitter=0.010, loss=loss))
    addrs = [("10.%d.%d.1" % (k // 250, k % 250), 21452) for k in range(n)]
    boots = addrs[:boot]

    def join(k, a):
        sim.add(a, lambda now: SwarmNode(a, KR, now, cfg, wall_offset=WALL,
                                         secret=k.to_bytes(32, "big"), seed=k))
        for b in boots:
            if b != a:
                sim.do(a, lambda c, now, b=b: c.connect(b, now))

    for k, a in enumerate(addrs):
        sim.call_at(k * 0.02, lambda k=k, a=a: join(k, a))
    return sim, addrs


def at_target(sim, addrs, target=16):
    return all(len(sim.nodes[a].core.table.direct) >= target for a in addrs
               if a in sim.nodes and not sim.nodes[a].crashed)


def checked_every(sim, period, pred, limit):
    """run_until with the predicate checked every `period` simulated seconds (cheap)."""
    while sim.now < limit:
        sim.run(sim.now + period)
        if pred():
            return True
    return False


def test_50_nodes_through_3_bootstraps_reach_16_direct_each():
    sim, addrs = mesh(50)
    assert checked_every(sim, 0.5, lambda: len(sim.nodes) == 50 and at_target(sim, addrs), 30)
    assert sim.now < 10
    cores = [sim.nodes[a].core for a in addrs]
    assert all(len(c.table.direct) <= c.config.max_direct for c in cores)
    assert all(c.stats["dropped_bad_mac"] == 0 for c in cores)


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_a_lossy_mesh_gets_there_and_a_crash_of_20_percent_is_repaired():
    sim, addrs = mesh(50, seed=2, loss=0.05)
    assert checked_every(sim, 0.5, lambda: len(sim.nodes) == 50 and at_target(sim, addrs), 60)
    for a in addrs[-10:]:
        sim.crash(a)
    sim.run(sim.now + 40)  # 3 missed Pings: demoted; known peers and promotion refill
    alive = addrs[:-10]
    assert checked_every(sim, 1.0, lambda: at_target(sim, alive), sim.now + 120)
    for a in alive:
        assert not set(sim.nodes[a].core.direct()) & set(addrs[-10:])
    assert sum(len(sim.events(a, Demoted)) for a in alive) > 0


def test_a_partition_heals():
    sim, addrs = mesh(30, seed=3, cfg=Config(capacity=1024, target_direct=8, max_direct=16))
    assert checked_every(sim, 0.5, lambda: len(sim.nodes) == 30 and at_target(sim, addrs, 8),
                         30)
    left = {a[0] for a in addrs[:15]}
    sim.partition(left, {a[0] for a in addrs[15:]})
    sim.run(sim.now + 60)
    for a in addrs:
        side = left if a[0] in left else set()
        assert all((d[0] in left) == (a[0] in left) for d in sim.nodes[a].core.direct()), side
    sim.heal()
    sim.run(sim.now + 30)
    assert at_target(sim, addrs, 8)


def test_the_same_seed_gives_the_same_history():
    def history(seed):
        sim, addrs = mesh(12, seed=seed, loss=0.05,
                          cfg=Config(capacity=64, target_direct=4, max_direct=8))
        sim.run(20)
        return [(round(t, 9), a, e) for a in addrs for t, e in sim.nodes[a].events]

    assert history(1) == history(1)
    assert history(1) != history(2)


# ---- the table when full -------------------------------------------------------------------

def test_a_full_table_evicts_the_vague_connection_heard_least_recently_with_a_reset():
    b = node(B, Config(capacity=3, target_direct=1, max_direct=1))
    peers = [("10.0.1.%d" % k, 21452) for k in range(1, 4)]
    for k, p in enumerate(peers):
        inbound(b, p, now=k)
    b.receive_datagram(dg(wire.ping(1), 5.0), peers[0], 5.0)  # heard again
    sent(b, 5.0)
    events(b)
    b.receive_datagram(dg(wire.connect(0, 4), 6.0), C, 6.0)
    (m, _, _), = sent(b, 6.0)
    b.receive_datagram(dg(wire.connect(0, 4, ack=True, echo=m.token), 6.0), C, 6.0)
    assert [(x.type, to) for x, to, _ in sent(b, 6.0)] == [(1, peers[1])]  # Reset to the evicted
    assert events(b)[0] == Forgotten(peers[1], "evicted")
    assert set(x.address for x in b.connections()) == {peers[0], peers[2], C}


def test_a_table_full_of_direct_connections_refuses_new_ones():
    a = node(A, Config(capacity=1, target_direct=1, max_direct=1))
    b = node(B)
    handshake(a, b)
    assert a.direct() == [B]
    a.receive_datagram(dg(wire.connect(0, 4)), C, 1.0)
    (m, _, _), = sent(a, 1.0)
    a.receive_datagram(dg(wire.connect(0, 4, ack=True, echo=m.token)), C, 1.0)
    assert a.stats["refused_full"] == 1 and a.direct() == [B] and len(a.table) == 1


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_the_swarm_simulation_records():
    from pelotari.swarm import simulate

    join, crash = simulate.run_one(120, seed=1, limit=120)
    assert join["kind"] == crash["kind"] == "swarm-sim"
    assert join["converged"] and join["direct_min"] >= 16 and join["seconds"] < 30
    assert crash["converged"] and crash["crashed"] == 24 and crash["direct_to_crashed"] == 0
    import json
    json.dumps([join, crash])


def test_only_the_pong_of_our_last_ping_counts_and_only_once():
    from pelotari.swarm.table import S_PONGED

    a, b = node(A), node(B)
    handshake(a, b)
    slot = a.table.lookup(B)
    a.ping(B, 1.0)
    (ping, _), = a.datagrams_to_send()
    b.receive_datagram(ping, A, 1.0)
    (first_pong, _), = b.datagrams_to_send()
    a.ping(B, 2.5)  # a newer Ping (next slot: b holds us as vague): the first one's Pong no longer counts
    (ping2, _), = a.datagrams_to_send()
    a.receive_datagram(first_pong, B, 2.6)
    assert a.stats["ignored_pong"] == 1 and not a.table.state[slot] & S_PONGED
    assert a.last_ping(B) == (a.table.pinged[slot], False)
    b.receive_datagram(ping2, A, 2.6)
    (pong2, _), = b.datagrams_to_send()
    a.receive_datagram(pong2, B, 2.7)
    assert a.last_ping(B) == (a.table.pinged[slot], True)
    a.receive_datagram(pong2, B, 2.8)  # replayed
    assert a.stats["ignored_pong"] == 2 and a.table.missed[slot] == 0
    assert [c.rtt for c in a.connections() if c.address == B] == [0.2]


def test_a_known_peer_that_connects_to_us_is_no_longer_listed_as_known():
    a = node(A)
    a._known[C] = None  # learned from someone's Connections, not dialled yet
    inbound(a, C)
    assert C not in a.known() and [c.status for c in a.connections() if c.address == C] == [
        "vague"]


def test_send_checks_what_the_user_gave_before_looking_for_the_connection():
    a = node()
    nobody = ("10.0.0.9", 21452)
    with pytest.raises(ValueError, match="user types"):
        a.send(nobody, 3, b"x", 0.0)
    with pytest.raises(ValueError, match="at most"):
        a.send(nobody, 7, bytes(wire.MAX_BODY + 1), 0.0)
    with pytest.raises(KeyError):
        a.send(nobody, 7, bytes(wire.MAX_BODY), 0.0)


@pytest.mark.parametrize("name", ["slot", "redial", "half_open", "ping_interval", "get_interval",
                                  "vague_get_interval", "promote_rtt", "ping_refill"])
def test_intervals_are_bounded_by_what_the_tables_u32_ms_hold(name):
    from pelotari.swarm.core import MAX_INTERVAL

    Config(**{name: MAX_INTERVAL})
    for bad in (MAX_INTERVAL + 1, float("inf"), float("nan"), 0):
        with pytest.raises(ValueError, match=name):
            Config(**{name: bad})
    Config(connect_backoff=(MAX_INTERVAL,))
    with pytest.raises(ValueError, match="connect_backoff"):
        Config(connect_backoff=(1.0, MAX_INTERVAL + 1))


def test_stateless_connect_answers_at_the_limit_and_one_past():
    b = node(B, Config(connect_answers_per_slot=3))
    strangers = [("10.0.2.%d" % k, 21452) for k in range(1, 5)]
    for k, s in enumerate(strangers[:3]):
        b.receive_datagram(dg(wire.connect(0, 50 + k)), s, 1.1)
    assert [to for m, to, _ in sent(b, 1.1)] == strangers[:3]
    b.receive_datagram(dg(wire.connect(0, 60)), strangers[3], 1.2)
    assert sent(b, 1.2) == [] and b.stats["limited_connect_answer"] == 1
    b.receive_datagram(dg(wire.connect(0, 60)), strangers[3], 2.0)  # the next slot
    assert [to for m, to, _ in sent(b, 2.0)] == [strangers[3]]
    assert len(b.table) == 0  # answers are stateless: no record until the echo


def test_known_peers_at_the_limit_and_one_past_drop_the_oldest():
    b = node(B, Config(max_known=3, target_direct=0))
    inbound(b, A)
    b.table.state[b.table.lookup(A)] |= S_ASKED  # our GetConnections is out

    def answer(entries, now):
        b.table.state[b.table.lookup(A)] |= S_ASKED
        b.receive_datagram(dg(wire.connections(
            [wire.Entry(h, 21452, True) for h in entries]), now), A, now)

    answer(["10.0.3.1", "10.0.3.2", "10.0.3.3"], 1.0)  # queued in random order
    first = [h for h, _ in b.known()]
    assert sorted(first) == ["10.0.3.1", "10.0.3.2", "10.0.3.3"]
    assert b.stats["known_dropped"] == 0
    answer(["10.0.3.4"], 2.0)
    assert [h for h, _ in b.known()] == first[1:] + ["10.0.3.4"]  # the oldest went
    assert b.stats["known_dropped"] == 1


def test_promotion_pings_per_slot_at_the_limit():
    b, peers = _vague_node(Config(promote_pings_per_slot=2, target_direct=4, vague_batch=1,
                                  vague_get_interval=1000), 6)
    out = step(b, 1.05)
    assert b.stats["promotion_pings"] == 2
    assert sum(1 for _, m, _ in out if m.type == 2) == 2  # the check's Ping is one of them
    promoting = [s for s in range(b.table.count) if b.table.state[s] & S_PROMOTING]
    assert len(promoting) == 2


def test_a_few_vague_connections_are_checked_once_per_check_interval_not_every_slot():
    # Before: with 3 vague connections and 8 checks a slot, each was pinged every second (more
    # often than a direct one); after the 1,000-node join vague checks were 85,110 of 181,355
    # Pings in 30 s.
    b, peers = _vague_node(Config(vague_batch=8, target_direct=0, vague_max_missed=100,
                                  vague_check_interval=5.0), 3)
    pings = Counter()
    for k in range(1, 31):
        for _, m, to in step(b, k + 0.5):
            if m.type == 2:
                pings[to] += 1
    assert set(pings) == set(peers) and all(5 <= n <= 6 for n in pings.values()), pings
    assert b.stats["vague_checked"] == sum(pings.values())


def test_a_silent_vague_connection_is_forgotten_while_the_node_is_short_of_direct_ones():
    # Short of target_direct, the promotion scan meets the same few vague connections every
    # slot: its Pings count misses and keep the check interval too (a first version of the
    # interval let promotion Pings, every slot, keep a dead peer from ever being checked).
    b, (p,) = _vague_node(Config(target_direct=16, vague_check_interval=5.0), 1)
    pings = 0
    for k in range(1, 41):
        pings += sum(1 for _, m, to in step(b, k + 0.5) if m.type == 2 and to == p)
    assert [e for e in events(b) if isinstance(e, Forgotten)] == [Forgotten(p, "silent")]
    assert 3 <= pings <= 5 and len(b.table) == 0


def test_a_dial_nobody_answers_is_reported_redialled_if_wanted_forgotten_if_only_known():
    from pelotari.swarm.core import Unanswered

    a = node(A)
    a.connect(B, 0.0)  # wanted: redialled
    step(a, 16.0)
    assert [e for e in events(a) if isinstance(e, Unanswered)] == [Unanswered(B, 4, 30.0)]
    b = node(B, Config(target_direct=1))
    inbound(b, A)
    b.table.state[b.table.lookup(A)] |= S_ASKED
    b.receive_datagram(dg(wire.connections([wire.Entry("10.0.9.9", 21452, True)]), 1.0), A, 1.0)
    step(b, 20.0)  # a known peer, dialled at the tick, never answers: given up and forgotten
    got = [e for e in events(b) if isinstance(e, (Unanswered, Forgotten))
           and e.address != A]  # (A, silent to b's checks, is forgotten too)
    assert got == [Unanswered(("10.0.9.9", 21452), 4, None),
                   Forgotten(("10.0.9.9", 21452), "unanswered")]
