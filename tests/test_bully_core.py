"""The bully core's rules, driven through pelotari.sim (no sockets, no sleeping) and by hand."""
import pytest

from pelotari.bully import clock as clk
from pelotari.bully import wire
from pelotari.bully.core import (
    BullyNode,
    Close,
    Config,
    Connect,
    Continue,
    ElectionStarted,
    Found,
    Joined,
    JoinFailed,
    NewLeader,
    NotFound,
    PeerLeft,
    Send,
    Shutdown,
    SyncDone,
    TextFailed,
    TextReceived,
)
from pelotari.bully.wire import Message, Peer, encode
from pelotari.sim import LinkSpec, Simulator

FAST = Config(heartbeat=1.0, peer_timeout=3.5)
LEADER = ("10.0.0.100", 3333)


def host(k):
    return (f"10.0.0.{k}", 3333)


def network(n, config=FAST, seed=1, spec=None, offsets=None, leader_offset=0.0):
    """A leader (ID max_id) and n peers joining one after another; returns the simulator."""
    sim = Simulator(seed=seed, default=spec or LinkSpec(delay=0.0005, jitter=0.0002))
    sim.add(LEADER, lambda now: BullyNode(*LEADER, now, config=config,
                                          system=lambda: 1.7e9 + sim.now,
                                          clock_offset=leader_offset))
    for k in range(1, n + 1):
        off = offsets[k - 1] if offsets else 0.0
        sim.call_at(0.01 * k, lambda a=host(k), off=off: sim.add(
            a, lambda now: BullyNode(*a, now, leader=LEADER, config=config,
                                     system=lambda: 1.7e9 + sim.now, clock_offset=off)))
    sim.run(0.01 * n + 3 * config.heartbeat)
    return sim


def nodes(sim, alive_only=True):
    return [n.core for n in sim.nodes.values() if not (alive_only and n.crashed)]


# ---- joining -----------------------------------------------------------------------------

def test_join_gives_lowest_free_ids_and_the_leader_keeps_the_highest():
    sim = network(6)
    ids = sorted(c.id for c in nodes(sim))
    assert ids == [1, 2, 3, 4, 5, 6, 25]
    for a in map(host, range(1, 7)):
        c = sim.nodes[a].core
        assert c.leader == Peer(*LEADER, 25)
        assert 1 <= len(c.peers()) <= 4
        assert sim.events(a, Joined)[0].id == c.id
        assert c.book_complete and set(c.known()) == set(ids) - {c.id}


def test_26th_joiner_is_refused_with_id_0_and_told_why():
    sim = network(24, config=Config(heartbeat=1.0, peer_timeout=3.5, max_ids_per_host=1))
    assert sorted(c.id for c in nodes(sim)) == list(range(1, 26))
    sim.add(host(99), lambda now: BullyNode(*host(99), now, leader=LEADER, config=FAST))
    sim.run(sim.now + 1)
    assert sim.nodes[host(99)].core.id == 0
    assert "full" in sim.events(host(99), JoinFailed)[0].reason
    assert sim.nodes[LEADER].core.stats["entry_refused_full"] == 1


def test_ids_per_host_at_the_limit_and_one_past():
    cfg = Config(heartbeat=1.0, peer_timeout=3.5, max_ids_per_host=3)
    sim = Simulator(seed=2)
    sim.add(LEADER, lambda now: BullyNode(*LEADER, now, config=cfg))
    for port in (4000, 4001, 4002, 4003):  # four nodes on one host: the fourth is refused
        sim.add(("10.0.0.7", port), lambda now, p=port: BullyNode("10.0.0.7", p, now,
                                                                   leader=LEADER, config=cfg))
    sim.run(1)
    got = {p: sim.nodes[("10.0.0.7", p)].core.id for p in (4000, 4001, 4002, 4003)}
    assert sorted(got.values()) == [0, 1, 2, 3]
    sim.add(host(8), lambda now: BullyNode(*host(8), now, leader=LEADER, config=cfg))
    sim.run(2)
    assert sim.nodes[host(8)].core.id == 4  # another host still gets in


def test_entry_again_from_the_same_address_gets_the_same_id():
    leader = BullyNode(*LEADER, 0.0, config=FAST)
    ids = []
    for _ in range(2):
        c = leader.accept(("10.0.0.5", 50000), 0.0)
        leader.data_received(c, encode(wire.entry("10.0.0.5", 3333)), 0.0)
        (send,) = [a for a in leader.actions() if isinstance(a, Send)]
        ids.append(wire.decode(send.data).id)
    assert ids == [1, 1]


def test_a_dropped_peers_id_goes_to_nobody_else_until_its_quarantine_ends():
    cfg = Config(heartbeat=1.0, peer_timeout=3.5, id_quarantine=30.0)
    sim = network(3, config=cfg)
    sim.crash(host(2))
    t = sim.now
    sim.run(t + cfg.peer_timeout + cfg.heartbeat + 0.1)
    left = sim.events(LEADER, PeerLeft)
    assert [e.peer.id for e in left] == [2]
    # A newcomer gets a fresh ID: the dropped holder may still be alive, cut off.
    sim.add(host(9), lambda now: BullyNode(*host(9), now, leader=LEADER, config=cfg))
    sim.run(sim.now + 1)
    assert sim.nodes[host(9)].core.id == 4
    assert sim.nodes[LEADER].core.stats["entry_refused_full"] == 0
    # Once the quarantine is over, the ID is free for anybody.
    sim.run(sim.now + 30.0)
    sim.add(host(8), lambda now: BullyNode(*host(8), now, leader=LEADER, config=cfg))
    sim.run(sim.now + 1)
    assert sim.nodes[host(8)].core.id == 2


def test_a_dropped_peer_that_comes_back_keeps_its_id():
    cfg = Config(heartbeat=1.0, peer_timeout=3.5, id_quarantine=30.0)
    sim = network(3, config=cfg)
    sim.crash(host(2))
    sim.run(sim.now + cfg.peer_timeout + cfg.heartbeat + 0.1)
    assert 2 not in sim.nodes[LEADER].core.members
    sim.restart(host(2), lambda now: BullyNode(*host(2), now, leader=LEADER, config=cfg))
    sim.run(sim.now + 1)
    assert sim.nodes[host(2)].core.id == 2  # its Entry from the same address: the same ID
    assert sim.nodes[LEADER].core.members[2].peer.address == host(2)


def test_the_leader_keeps_a_peer_that_heartbeats_once_a_minute():
    # The seed's limit: "min. 1 per minute". The default peer_timeout waits longer than that.
    assert Config().peer_timeout > 60
    slow = Config(heartbeat=60.0)
    sim = Simulator(seed=4)
    sim.add(LEADER, lambda now: BullyNode(*LEADER, now))
    sim.add(host(1), lambda now: BullyNode(*host(1), now, leader=LEADER, config=slow))
    sim.run(10 * 60)
    assert not sim.events(LEADER, PeerLeft) and 1 in sim.nodes[LEADER].core.members
    sim.crash(host(1))  # and one that stops is dropped after the timeout
    sim.run(sim.now + 65 + 0.1)
    assert [e.peer.id for e in sim.events(LEADER, PeerLeft)] == [1]


def test_heartbeat_goes_at_the_configured_interval_and_never_past_a_minute():
    sim = network(2, config=Config(heartbeat=2.0, peer_timeout=7))
    c = sim.nodes[host(1)].core
    before = c.sent["IAmAlive"]
    sim.run(sim.now + 20)
    assert c.sent["IAmAlive"] - before == 10
    with pytest.raises(ValueError):
        Config(heartbeat=60.5, peer_timeout=120)
    Config(heartbeat=60, peer_timeout=120)


def test_peer_timeout_follows_the_heartbeat_unless_given():
    assert Config.for_heartbeat(5.0).peer_timeout == 65.0  # more than the seed's minute
    assert Config.for_heartbeat(2.0).peer_timeout == 65.0
    assert Config.for_heartbeat(30.0).peer_timeout == pytest.approx(96.0)  # 3.2 beats
    assert Config.for_heartbeat(2.0, 2.5).peer_timeout == 2.5
    with pytest.raises(ValueError, match="peer_timeout must be longer than heartbeat"):
        Config.for_heartbeat(2.0, 2.0)


# ---- search and text -----------------------------------------------------------------------

def test_search_floods_once_per_node_and_the_destination_answers_the_searcher():
    sim = network(10)
    sid = sim.do(host(1), lambda c, now: c.search(9, now))
    sim.run(sim.now + 1)
    (found,) = sim.events(host(1), Found)
    assert found.peer == Peer(*host(9), 9) and found.search_id == sid
    forwarded = sum(c.stats["searches_forwarded"] for c in nodes(sim))
    assert forwarded <= len(nodes(sim))  # each node forwards a search at most once
    assert sum(c.sent["IAmFound"] for c in nodes(sim)) == 1


def test_a_founding_leader_finds_its_members_by_search():
    sim = network(3)
    lead = sim.nodes[LEADER].core
    lead.neighbours.clear()  # as under Java members, which never send a NodeRequest
    sids = {}
    for k in (1, 2, 3):
        sim.do(LEADER, lambda c, now, k=k: sids.setdefault(k, c.search(k, now)))
    sim.run(sim.now + 0.5)
    assert sorted(e.peer.id for e in sim.events(LEADER, Found)) == [1, 2, 3]
    assert not sim.events(LEADER, NotFound)


def test_search_for_an_absent_id_ends_not_found():
    sim = network(4)
    sid = sim.do(host(1), lambda c, now: c.search(20, now))
    sim.run(sim.now + FAST.search_timeout + 0.1)
    assert sim.events(host(1), NotFound) == [NotFound(20, sid)]


def test_text_reaches_the_peer_by_id_even_when_it_must_be_searched_for():
    sim = network(6)
    src = sim.nodes[host(1)].core
    sim.do(host(1), lambda c, now: c.text(5, "kaixo, 5 ✓".encode(), now))
    del src.book[6]  # not known: found by search first
    sim.do(host(1), lambda c, now: c.text(6, b"and 6", now))
    sim.run(sim.now + 1)
    assert [e.text for e in sim.events(host(5), TextReceived)] == ["kaixo, 5 ✓"]
    assert [(e.peer.id, e.text) for e in sim.events(host(6), TextReceived)] == [(1, "and 6")]
    sim.do(host(1), lambda c, now: c.text(21, b"nobody", now))
    sim.run(sim.now + FAST.search_timeout + 0.5)
    assert sim.events(host(1), TextFailed)[0].destination_id == 21


# ---- election ------------------------------------------------------------------------------

def agreed(sim, leader_id):
    return all(c.leader is not None and c.leader.id == leader_id for c in nodes(sim))


@pytest.mark.parametrize("n", [4, 9, 24])
def test_killed_leader_highest_survivor_wins_with_far_fewer_messages_than_textbook(n):
    sim = network(n)
    before = sum(sum(c.sent.values()) for c in nodes(sim))
    sim.kill(LEADER)
    t0 = sim.now
    assert sim.run_until(lambda: agreed(sim, n), t0 + 2)
    assert sim.now - t0 < 0.05  # a kill resets the heartbeat connections: seen at once
    sim.run(sim.now + 0.2)
    election = sum(c.sent[m] for c in nodes(sim)
                   for m in ("AreYouAlive", "IAmAlive", "IAmLeader"))
    assert election - sum(c.sent["IAmAlive"] for c in nodes(sim)) <= n - 1 + n  # ~one IAmLeader each
    assert sum(sum(c.sent.values()) for c in nodes(sim)) - before < n * (n - 1) / 2 + 3 * n
    assert sim.nodes[host(n)].core.is_leader
    assert len(sim.events(host(n), NewLeader)) == 1


def test_silent_leader_is_noticed_by_heartbeat_and_replaced():
    sim = network(8)
    sim.crash(LEADER)
    t0 = sim.now
    assert sim.run_until(lambda: agreed(sim, 8), t0 + 10)
    # Noticed within a heartbeat plus the reply and connect timeouts, then elected quickly.
    assert sim.now - t0 < FAST.heartbeat + FAST.connect_timeout + FAST.reply_timeout + 0.5


def test_are_you_alive_is_answered_with_tag_5_on_the_same_connection():
    n = BullyNode("10.0.0.3", 3333, 0.0, leader=LEADER, config=FAST)
    n.id = 3
    n.actions()
    c = n.accept(("10.0.0.1", 50123), 0.0)
    n.data_received(c, encode(Message(9, Peer("10.0.0.1", 3333, 1))), 0.0)
    sends = [a for a in n.actions() if isinstance(a, Send) and a.conn == c]
    assert sends[0].data == bytes.fromhex("05010a0000030d050003")  # IAmAlive, not an echo of 9
    assert isinstance(n.next_event(), ElectionStarted)


def test_manual_election_by_a_low_id_keeps_the_highest_as_leader():
    sim = network(6)
    sim.do(host(2), lambda c, now: c.elect(now))
    sim.run(sim.now + 2)
    assert agreed(sim, 25)
    assert sim.events(host(2), ElectionStarted)


def test_a_lower_id_claiming_the_lead_is_bullied_by_a_higher_one():
    sim = network(5)
    sim.kill(LEADER)
    sim.run(sim.now + 1)
    assert agreed(sim, 5)
    for k in (2, 5):  # node 1 says it leads: 2 and 5 do not follow; 5 keeps the lead
        sim.do(host(1), lambda c, now, k=k: c._send_to(host(k), c._msg("IAmLeader"), now))
    sim.run(sim.now + 1)
    assert agreed(sim, 5)
    assert sim.nodes[host(5)].core.stats["leader_claim_lower_id"] == 1


def test_new_leader_takes_over_ids_heartbeats_and_joins():
    sim = network(5)
    sim.kill(LEADER)
    sim.run(sim.now + 2 * FAST.heartbeat)
    new = sim.nodes[host(5)].core
    assert sorted(new.members) == [1, 2, 3, 4]
    sim.add(host(9), lambda now: BullyNode(*host(9), now, leader=host(5), config=FAST))
    sim.run(sim.now + 1)
    assert sim.nodes[host(9)].core.id == 6  # lowest free ID below... none: above the leader's
    sim.run(sim.now + FAST.peer_timeout + 1)
    assert sorted(new.members) == [1, 2, 3, 4, 6]  # all heartbeat the new leader


# ---- time ----------------------------------------------------------------------------------

def offsets_after_sync(sim):
    return [c.clock.offset(sim.now) for c in nodes(sim)]


def test_sync_brings_clocks_together_and_leaves_the_hour_off_clock_alone():
    offs = [0.004, -0.003, 2.5, -1.0, 3600.0, 0.010, -0.007, 0.001]
    spec = LinkSpec(delay=0.002, jitter=0.0005)
    sim = network(len(offs), spec=spec, offsets=offs, seed=5)
    sim.do(LEADER, lambda c, now: c.start_sync(now))
    sim.run(sim.now + 3)
    (done,) = sim.events(LEADER, SyncDone)
    hour = sim.nodes[host(5)].core.id
    odd = sim.nodes[host(3)].core.id  # 2.5 s off: an outlier, still told the time
    assert done.left_out == {hour: "beyond_max_correction"} and not done.unanswered
    assert odd in done.outliers and hour not in done.outliers
    assert done.offsets[hour] == pytest.approx(3600.0, abs=0.01)
    after = {c.id: c.clock.offset(sim.now) for c in nodes(sim)}
    # Not moved by more than max_correction: the hour-off clock is left where it was.
    assert after.pop(hour) == pytest.approx(3600.0)
    # The others within the jitter of the last message's trip plus the wire's millisecond.
    assert max(after.values()) - min(after.values()) < 0.0015
    # The average is of the clocks that agree with the leader's (not dragged by the 2.5 s one).
    assert abs(sum(after.values()) / len(after)) < 1.0


def test_a_leader_is_never_the_outlier_of_its_own_round_even_with_two_clocks():
    sim = network(1, offsets=[30.0])  # one peer, 30 s off: past outlier_bound, within 60 s
    sim.do(LEADER, lambda c, now: c.start_sync(now))
    sim.run(sim.now + 3)
    (done,) = sim.events(LEADER, SyncDone)
    peer = sim.nodes[host(1)].core
    assert done.outliers == (peer.id,) and done.average == 0.0
    assert abs(sim.nodes[LEADER].core.clock.offset(sim.now)) < 1e-9  # the leader did not move
    assert abs(peer.clock.offset(sim.now)) < 0.0015  # the peer took the leader's time


def test_a_peer_whose_answers_contradict_each_other_is_left_out_and_not_told():
    sim = network(2)
    leader = sim.nodes[LEADER].core
    liar = sim.nodes[host(2)].core
    rng = iter(range(1, 100))
    # It answers every TellMeYourTime with a different random-looking clock (as VSP2P does).
    liar.clock.read_ms = lambda now: int((1.7e9 + sim.now) * 1000) + 7_000 * next(rng) % 50_000
    sim.do(LEADER, lambda c, now: c.start_sync(now))
    sim.run(sim.now + 3)
    (done,) = sim.events(LEADER, SyncDone)
    assert done.left_out == {liar.id: "contradictory"}
    assert leader.stats["sync_left_out_contradictory"] == 1
    assert liar.stats["received_HereIsYourNewTime"] == 0
    assert sim.nodes[host(1)].core.stats["received_HereIsYourNewTime"] == 1


def test_a_peer_never_moves_its_clock_past_max_correction():
    sim = network(1, config=Config(heartbeat=1.0, peer_timeout=3.5, max_correction=10.0))
    p = sim.nodes[host(1)].core
    c = p.accept((LEADER[0], 50000), sim.now)
    now_ms = p.time_ms(sim.now)
    for value in (now_ms + 10_001, now_ms - 10_001, 75_000):  # one past the bound; a relative
        p.data_received(c, encode(Message(13, Peer(*LEADER, 25), time_ms=value)), sim.now)
    assert p.stats["dropped_wild_time"] == 3 and abs(p.clock.offset(sim.now)) < 1e-9
    p.data_received(c, encode(Message(13, Peer(*LEADER, 25), time_ms=now_ms + 9_999)), sim.now)
    assert p.clock.target == pytest.approx(9.999, abs=0.002)  # at the bound: taken


def test_rtt_blind_averaging_is_dragged_by_the_outlier_and_the_delay():
    offs = [0.0, 0.0, 0.0, 3600.0]
    spec = LinkSpec(delay=0.02)
    # (max_correction lifted: the Java clients have no such bound)
    blind = network(4, config=Config(heartbeat=1, peer_timeout=3.5, rtt_blind=True,
                                     max_correction=1e9),
                    spec=spec, offsets=offs)
    blind.do(LEADER, lambda c, now: c.start_sync(now))
    blind.run(blind.now + 3)
    b = offsets_after_sync(blind)
    assert min(b) > 600  # everybody moved ~an hour/5 toward the broken clock
    good = network(4, spec=spec, offsets=offs)
    good.do(LEADER, lambda c, now: c.start_sync(now))
    good.run(good.now + 3)
    g = offsets_after_sync(good)
    assert g.pop() == 3600.0  # pelotari leaves the broken clock alone (max_correction)
    assert max(g) - min(g) < 0.001 and abs(max(g)) < 0.005


def test_asymmetric_links_cost_half_the_asymmetry():
    sim = Simulator(seed=3, default=LinkSpec(delay=0.001))
    sim.add(LEADER, lambda now: BullyNode(*LEADER, now, config=FAST,
                                          system=lambda: 1.7e9 + sim.now))
    sim.add(host(1), lambda now: BullyNode(*host(1), now, leader=LEADER, config=FAST,
                                           system=lambda: 1.7e9 + sim.now, clock_offset=5.0))
    sim.link(LEADER[0], host(1)[0], LinkSpec(delay=0.001), both_ways=False)
    sim.link(host(1)[0], LEADER[0], LinkSpec(delay=0.005), both_ways=False)
    sim.run(2)
    sim.do(LEADER, lambda c, now: c.start_sync(now))
    sim.run(sim.now + 3)
    a, b = (c.clock.offset(sim.now) for c in nodes(sim))
    assert abs(abs(a - b) - 0.002) < 0.0011  # (5 ms - 1 ms) / 2, within the ms resolution


def test_peers_answer_time_only_to_their_leader_and_take_new_time_only_from_it():
    sim = network(2)
    p = sim.nodes[host(1)].core
    c = p.accept(("10.0.0.2", 50000), sim.now)
    p.data_received(c, encode(Message(11, Peer("10.0.0.2", 3333, 2))), sim.now)
    p.data_received(c, encode(Message(13, Peer("10.0.0.2", 3333, 2), time_ms=0)), sim.now)
    assert p.stats["dropped_not_leader"] == 2
    assert not [a for a in p.actions() if isinstance(a, Send) and a.conn == c]
    assert abs(p.clock.offset(sim.now)) < 1e-9


def test_logical_clock_slews_at_the_bound_and_steps_past_the_threshold():
    c = clk.LogicalClock(0.0, system=lambda: 1000.0, max_slew=0.0005)
    assert c.correct(0.128, 0.0) is False  # at the threshold: slew
    assert c.offset(10.0) == pytest.approx(0.005)  # 500 ppm
    assert c.offset(256.0) == pytest.approx(0.128)
    c2 = clk.LogicalClock(0.0, system=lambda: 1000.0)
    assert c2.correct(0.1281, 0.0) is True  # one past it: step
    assert c2.offset(0.0) == pytest.approx(0.1281)
    c3 = clk.LogicalClock(0.0, system=lambda: 1000.0, max_slew=0.0005)
    c3.correct(-0.1, 0.0)
    assert c3.read(20.0) == pytest.approx(1000.0 - 0.01)  # slews back, never jumps


def test_probe_bounds_intersect_below_the_millisecond():
    # The peer runs 2.3456 ms ahead; answers are read mid-way and rounded down to the ms.
    probes = []
    for k in range(8):
        t0 = 10.0 + k * 0.00037
        t1 = t0 + 0.0001
        remote = (t0 + 0.00005 + 0.0023456) * 1000 // 1
        probes.append(clk.Probe(t0, t1, int(remote)))
    est = clk.estimate_offset(probes)
    assert abs(est.offset - 0.0023456) <= est.error <= 0.0002
    single = clk.estimate_offset(probes[:1])
    assert single.error > 0.0004


def test_fault_tolerant_average_drops_the_outliers():
    avg, kept = clk.fault_tolerant_average({1: 0.0, 2: 0.01, 3: -0.01, 4: 3600.0}, 1.0)
    assert kept == {1, 2, 3} and avg == pytest.approx(0.0)


# ---- bad input and limits --------------------------------------------------------------------

def fresh():
    n = BullyNode(*LEADER, 0.0, config=Config(heartbeat=1, peer_timeout=3.5, max_connections=4,
                                              max_connections_per_host=2))
    n.actions()
    return n


def test_bad_bytes_close_the_connection_and_are_counted():
    n = fresh()
    for data, reason in ((b"\xff", "unknown_tag"), (b"\x03\x00", "bad_version"),
                         (b"\x08\x01" + bytes(8) + b"\xff\xff", None)):
        c = n.accept(("10.0.0.9", 50000), 0.0)
        n.data_received(c, data, 0.0)
        acts = n.actions()
        if reason:
            assert Close(c) in acts and n.stats[f"dropped_{reason}"] == 1
        else:
            assert Close(c) not in acts  # a long text is still arriving: held, not an error
            n.connection_lost(c, 0.0)
            assert n.stats["dropped_truncated"] == 1


def test_split_and_coalesced_reads_are_framed():
    n = fresh()
    c = n.accept(("10.0.0.1", 50000), 0.0)
    msg = encode(Message(8, Peer("10.0.0.1", 3333, 1), data=b"hello"))
    for b in msg + msg[:3]:
        n.data_received(c, bytes([b]), 0.0)
    n.data_received(c, msg[3:] + msg, 0.0)
    texts = []
    while (e := n.next_event()) is not None:
        texts += [e.text] if isinstance(e, TextReceived) else []
    assert texts == ["hello"] * 3


def test_a_request_is_answered_on_its_connection_which_then_closes():
    n = fresh()
    for tag in (1, 3, 9):  # Entry, NodeRequest, AreYouAlive: the answer ends the exchange
        c = n.accept(("10.0.0.1", 50000 + tag), 0.0)
        n.actions()
        n.data_received(c, encode(Message(tag, Peer("10.0.0.1", 3333, 0 if tag == 1 else 1))),
                        0.0)
        mine = [a for a in n.actions() if getattr(a, "conn", None) == c]
        assert [type(a) for a in mine] == [Send, Close]
        assert wire.decode(mine[0].data).tag == {1: 2, 3: 4, 9: 5}[tag]


def test_connection_limits_at_and_past():
    n = fresh()
    a, b = n.accept(("10.0.0.1", 1), 0.0), n.accept(("10.0.0.1", 2), 1.0)
    assert a and b  # per host: 2
    n.actions()
    # One past the host's limit: its oldest connection with nothing half-read makes room (a
    # Java client sends one message per connection and never closes).
    c = n.accept(("10.0.0.1", 3), 2.0)
    assert c is not None and n.actions() == [Close(a)]
    # A host whose every connection holds half a message is refused instead.
    for conn in (b, c):
        n.data_received(conn, b"\x05\x01\x7f", 3.0)
    assert n.accept(("10.0.0.1", 4), 3.0) is None
    assert n.accept(("10.0.0.2", 1), 3.0) and n.accept(("10.0.0.3", 1), 3.0)
    n.actions()
    # Full (4): a new host takes the quietest slot of the host holding the most...
    assert n.accept(("10.0.0.4", 1), 3.0) is not None
    assert sum(isinstance(x, Close) for x in n.actions()) == 1
    # ... but once every host holds one, a fifth is refused.
    assert n.accept(("10.0.0.5", 1), 3.0) is None
    assert n.stats["connections_refused_limit"] == 1
    assert n.stats["connections_evicted"] == 1
    assert n.stats["connections_evicted_host_limit"] == 1
    assert n.stats["connections_refused_host_limit"] == 1


def test_idle_connections_close_and_free_their_slot():
    n = fresh()
    cs = [n.accept(("10.0.0.1", p), 0.0) for p in (1, 2)]
    assert n.get_timer() <= n.config.idle_timeout
    n.handle_timer(n.config.idle_timeout)
    assert {Close(c) for c in cs} <= set(n.actions())
    assert n.accept(("10.0.0.1", 3), n.config.idle_timeout) is not None


def test_a_message_naming_another_host_is_dropped():
    n = fresh()
    c = n.accept(("10.0.0.66", 1), 0.0)
    n.data_received(c, encode(Message(5, Peer("10.0.0.1", 3333, 1))), 0.0)
    n.data_received(c, encode(Message(10, Peer("10.0.0.1", 3333, 99))), 0.0)
    assert n.stats["dropped_forged_source"] == 2
    assert n.is_leader and not n.members


def test_found_is_not_aimed_at_an_address_nobody_vouches_for():
    n = BullyNode("10.0.0.3", 3333, 0.0, leader=LEADER, config=FAST)
    n.id = 3
    n.actions()
    c = n.accept(("10.0.0.66", 1), 0.0)
    victim = Message(6, Peer("192.0.2.1", 80), source_id=7, search_id=1, destination_id=3)
    n.data_received(c, encode(victim), 0.0)
    assert not [a for a in n.actions() if isinstance(a, Connect)]
    assert n.stats["dropped_unverified_searcher"] == 1


def test_search_forwarding_is_rate_bounded_and_its_memory_is_bounded():
    cfg = Config(heartbeat=1, peer_timeout=3.5, forward_burst=5, forward_rate=1.0,
                 max_searches=100)
    n = BullyNode("10.0.0.3", 3333, 0.0, leader=LEADER, config=cfg)
    n.id = 3
    n.neighbours = {1: Peer("10.0.0.1", 3333, 1)}
    n.actions()
    c = n.accept(("10.0.0.66", 1), 0.0)
    for sid in range(101):  # one past the memory's size
        n.data_received(c, encode(Message(6, Peer("10.0.0.66", 3333), source_id=9,
                                          search_id=sid, destination_id=20)), 0.0)
    assert sum(isinstance(a, Connect) for a in n.actions()) == 5
    assert n.stats["search_not_forwarded_rate"] == 96
    assert len(n._seen) == 100 and n.stats["search_memory_evicted"] == 1


def test_the_book_is_bounded_and_a_live_id_is_not_stolen():
    cfg = Config(heartbeat=1, peer_timeout=3.5, max_book=3)
    n = BullyNode("10.0.0.3", 3333, 0.0, leader=LEADER, config=cfg)
    n.id = 3
    for k in (1, 2, 4, 5):
        n._learn(Peer(f"10.0.0.{k}", 3333, k), 0.0, first_hand=True)
    assert len(n.book) == 3
    n._learn(Peer("10.0.0.66", 3333, 5), 1.0, first_hand=True)
    assert n.book[5].peer.host == "10.0.0.5" and n.stats["id_conflict"] == 1


def test_sim_refuses_and_resets_like_tcp():
    sim = network(2)
    p = sim.nodes[host(1)].core
    sim.kill(host(2))
    sim.do(host(1), lambda c, now: c._send_to(host(2), c._msg("Text", data=b"x"), now, peer_id=2))
    sim.run(sim.now + 0.1)
    assert sim.stats.refused >= 1
    assert 2 not in p.neighbours  # a peer that refuses is no neighbour


def test_sync_with_a_peer_that_answers_each_probe_on_a_new_connection():
    # The Java clients that read one message and close: each HereIsMyTime comes on a new
    # connection; the leader still gets its probes and tells the peer its new time.
    wall = [1000.0]
    leader = BullyNode("10.0.0.100", 3333, 0.0, config=Config(heartbeat=1, peer_timeout=3.5,
                                                              sync_interval=0),
                       system=lambda: wall[0])
    c = leader.accept(("10.0.0.5", 50000), 0.0)
    leader.data_received(c, encode(wire.entry("10.0.0.5", 3333)), 0.0)
    leader.actions()
    leader.start_sync(0.0)
    now, probes = 0.0, 0
    while True:
        connects = [a for a in leader.actions() if isinstance(a, Connect)]
        if not connects:  # the new time waits for a whole millisecond
            now = leader.get_timer()
            wall[0] = 1000.0 + now
            leader.handle_timer(now)
            connects = [a for a in leader.actions() if isinstance(a, Connect)]
        (conn,) = [a.conn for a in connects]
        leader.connection_made(conn, ("10.0.0.100", 40000 + probes), now)
        sent = [wire.decode(a.data) for a in leader.actions() if isinstance(a, Send)]
        while not sent:  # the new time (on a new connection) waits for a whole millisecond
            now = leader.get_timer()
            wall[0] = 1000.0 + now
            leader.handle_timer(now)
            sent = [wire.decode(a.data) for a in leader.actions() if isinstance(a, Send)]
        if sent[0].tag == 13:
            break
        assert sent[0].tag == 11
        leader.connection_lost(conn, now)  # read one message, closed
        now += 0.001
        wall[0] = 1000.0 + now
        back = leader.accept(("10.0.0.5", 50001 + probes), now)
        leader.data_received(back, encode(Message(12, Peer("10.0.0.5", 3333, 1),
                                                  time_ms=int((wall[0] + 5.25) * 1000))), now)
        probes += 1
    assert probes == leader.config.sync_probes
    events = []
    while (e := leader.next_event()) is not None:
        events.append(e)
    (done,) = [e for e in events if isinstance(e, SyncDone)]
    assert abs(done.offsets[1] - 5.25) < 0.002


def test_a_connect_under_way_is_not_idle_at_a_large_monotonic_clock():
    n = BullyNode("127.0.0.2", 3333, 1000.0, leader=("127.0.0.1", 3333))
    (connect,) = [a for a in n.actions() if isinstance(a, Connect)]
    n.handle_timer(1000.001)
    assert Close(connect.conn) not in n.actions() and not n.stats["connections_idle_closed"]


def test_a_node_bound_to_any_address_names_the_address_a_connection_came_to():
    leader = BullyNode("0.0.0.0", 3333, 0.0)
    c = leader.accept(("127.0.0.2", 40000), 0.0, ("127.0.0.1", 3333))
    leader.data_received(c, encode(wire.entry("127.0.0.2", 3333)), 0.0)
    (send,) = [a for a in leader.actions() if isinstance(a, Send)]
    assert wire.decode(send.data).peers == (Peer("127.0.0.1", 3333, 25),)


def test_manual_election_while_the_leader_lives_ends_at_once():
    sim = network(3)
    sim.do(host(1), lambda c, now: c.elect(now))
    sim.run(sim.now + 0.5)
    assert all(c.election is None for c in nodes(sim)) and agreed(sim, 25)
    assert len(sim.events(host(1), ElectionStarted)) == 1
    assert not sim.events(LEADER, ElectionStarted)  # asked, it only answers and announces


def test_a_burst_of_searches_opens_at_most_max_outgoing_per_host_to_one_host():
    n, hb = joined_peer()
    n.neighbours[2] = Peer("10.0.0.2", 3333, 2)
    for dest in range(3, 23):  # 20 searches: each to the neighbour and to the leader
        n.search(dest, 0.01)
    conns = [a for a in n.actions() if isinstance(a, Connect) and a.address[0] == "10.0.0.2"]
    assert len(conns) == n.config.max_outgoing_per_host == 8
    assert n.stats["sends_paced"] >= 12  # (and those to the leader beyond its room)
    for a in conns:  # each written, then half-closed: a pelotari peer closes at the EOF
        n.connection_made(a.conn, ("10.0.0.1", 41000 + a.conn), 0.02)
    acts = n.actions()
    assert [type(a) for a in acts if getattr(a, "conn", None) == conns[0].conn] == [
        Send, Shutdown]
    for a in conns[:3]:
        n.connection_lost(a.conn, 0.03)
    assert n.get_timer() <= 0.03  # room again: due at once
    n.handle_timer(0.03)
    more = [a for a in n.actions() if isinstance(a, Connect) and a.address[0] == "10.0.0.2"]
    assert len(more) == 3
    # The searches that waited count their time from when they went.
    assert all(s.deadline >= 0.03 + n.config.search_timeout - 1e-9
               for s in n._searches.values() if s.destination in (11, 12, 13))


def test_a_refused_peer_leaves_the_book_and_is_not_a_neighbour_again():
    n, hb = joined_peer()
    for k in (2, 3):
        n._learn(Peer(f"10.0.0.{k}", 3333, k), 0.01, first_hand=True)
        n._add_neighbour(Peer(f"10.0.0.{k}", 3333, k))
    n.search(7, 0.02)
    (to2,) = [a for a in n.actions() if isinstance(a, Connect) and a.address[0] == "10.0.0.2"]
    n.connection_lost(to2.conn, 0.03)  # refused: nothing listens there
    assert 2 not in n.known() and 2 not in n.neighbours and 3 in n.neighbours
    n._drop_neighbour(3, 0.04)  # the refill from the book does not bring it back
    assert 2 not in n.neighbours and n.stats["unreachable_forgotten"] == 1


def test_a_hand_sync_restarts_the_periodic_rounds_count():
    sim = network(2)
    lead = sim.nodes[LEADER].core
    due = lead._next_sync
    sim.run(due - 5.0)
    sim.do(LEADER, lambda c, now: c.start_sync(now))
    rounds = lead.stats["sync_rounds"]
    sim.run(due + 5.0)  # the old due time passes: no second round so soon
    assert lead.stats["sync_rounds"] == rounds
    sim.run(sim.now + lead.config.sync_interval)
    assert lead.stats["sync_rounds"] == rounds + 1


def joined_peer():
    """A peer core that has joined a leader at 10.0.0.100 and sent its first heartbeat
    (IAmAlive on one connection, kept; NodeRequest on another)."""
    n = BullyNode("10.0.0.1", 3333, 0.0, leader=LEADER, config=FAST)
    (join,) = [a for a in n.actions() if isinstance(a, Connect)]
    n.connection_made(join.conn, ("10.0.0.1", 40000), 0.0)
    n.data_received(join.conn, encode(Message(2, id=1, peers=(Peer(*LEADER, 25),))), 0.0)
    n.handle_timer(0.0)
    hb, ask = [a for a in n.actions() if isinstance(a, Connect) and a.address == LEADER]
    n.connection_made(hb.conn, ("10.0.0.1", 40001), 0.0)
    n.connection_made(ask.conn, ("10.0.0.1", 40002), 0.0)
    sent = {a.conn: wire.decode(a.data).tag for a in n.actions() if isinstance(a, Send)}
    assert sent == {hb.conn: 5, ask.conn: 3}  # one message per connection
    n.data_received(ask.conn, encode(Message(4, Peer(*LEADER, 25))), 0.001)
    n.actions()
    return n, hb.conn


def probe_after_eof(n, hb, now):
    n.connection_lost(hb, now)
    (probe,) = [a for a in n.actions() if isinstance(a, Connect)]
    n.connection_made(probe.conn, ("10.0.0.1", 40003), now)
    sent = [wire.decode(a.data).tag for a in n.actions() if isinstance(a, Send)]
    assert sent == [5]  # IAmAlive: what the seed defines; a reset, not silence, means dead
    return probe.conn


def events_of(n):
    out = []
    while (e := n.next_event()) is not None:
        out.append(e)
    return out


def test_a_leader_whose_kernel_accepts_then_resets_is_dead():
    n, hb = joined_peer()
    probe = probe_after_eof(n, hb, 0.5)
    n.connection_lost(probe, 0.501, reset=True)  # a dying process's backlog: handshake, reset
    assert n.stats["leader_failed"] == 1
    assert ElectionStarted("the leader reset the connection") in events_of(n)
    assert n.is_leader  # nobody above ID 1 is known: it leads


def test_a_refused_heartbeat_means_the_leader_is_dead():
    n, hb = joined_peer()
    n.handle_timer(FAST.heartbeat)
    (beat,) = [a for a in n.actions() if isinstance(a, Connect) and a.address == LEADER][:1]
    n.connection_lost(beat.conn, FAST.heartbeat + 0.001)  # refused: never up
    assert ElectionStarted("the leader refused the connection") in events_of(n)


@pytest.mark.parametrize("how", ["closes", "keeps it open unanswered", "answers"])
def test_a_leader_that_reads_one_message_per_connection_lives(how):
    # Java leaders read one message per connection, then close it or leave it open; the seed
    # defines no answer to IAmAlive. None of that is death.
    n, hb = joined_peer()
    probe = probe_after_eof(n, hb, 0.5)
    if how == "closes":
        n.connection_lost(probe, 0.501)  # EOF, not a reset
    elif how == "answers":
        n.data_received(probe, encode(Message(4, Peer(*LEADER, 25))), 0.501)
        assert Close(probe) in n.actions()
    n.handle_timer(0.5 + FAST.connect_timeout + FAST.reply_timeout)
    assert n.election is None and not n.stats["leader_failed"] and n.leader.id == 25
    assert n._leader_probe is None
    for beat in range(1, 5):  # and every heartbeat after
        n.handle_timer(beat * FAST.heartbeat)
        for a in n.actions():
            if isinstance(a, Connect):
                n.connection_made(a.conn, ("10.0.0.1", 41000 + a.conn), beat * FAST.heartbeat)
    assert not n.stats["leader_failed"]


def test_after_a_partition_heals_the_highest_id_leads_everybody_again():
    sim = network(8)
    majority = [LEADER[0]] + [host(k)[0] for k in range(1, 5)]
    minority = [host(k)[0] for k in range(5, 9)]
    sim.partition(majority, minority)
    sim.run(sim.now + FAST.peer_timeout + 3 * FAST.heartbeat)
    assert all(sim.nodes[host(k)].core.leader.id == 8 for k in range(5, 9))
    assert all(sim.nodes[host(k)].core.leader.id == 25 for k in range(1, 5))
    assert sorted(sim.nodes[LEADER].core.members) == [1, 2, 3, 4]
    sim.heal()
    assert sim.run_until(lambda: agreed(sim, 25), sim.now + 2 * Config().lost_probe)
    sim.run(sim.now + 2 * FAST.heartbeat)
    assert sorted(sim.nodes[LEADER].core.members) == list(range(1, 9))
    assert not sim.nodes[host(8)].core.is_leader


def test_a_leader_started_again_takes_the_lead_back():
    sim = network(4)
    sim.kill(LEADER)
    sim.run(sim.now + 1)
    assert agreed(sim, 4)
    sim.restart(LEADER, lambda now: BullyNode(*LEADER, now, config=FAST))
    assert sim.run_until(lambda: agreed(sim, 25), sim.now + 2 * Config().lost_probe)
    sim.run(sim.now + 2 * FAST.heartbeat)
    assert sorted(sim.nodes[LEADER].core.members) == [1, 2, 3, 4]


# ---- what the attack review found (each failed before its fix) ------------------------------

def test_are_you_alive_flood_opens_a_bounded_number_of_connections():
    leader = BullyNode(*LEADER, 0.0, config=FAST)
    leader.actions()
    for k in range(100):  # each on its own connection (an answered one is closed)
        c = leader.accept(("10.0.0.66", 1 + k), 0.0)
        leader.data_received(c, encode(Message(9, Peer("10.0.0.66", 4000 + k, 3))), 0.0)
    connects = [a for a in leader.actions() if isinstance(a, Connect)]
    assert len(connects) == FAST.answer_burst
    assert leader.stats["dropped_answer_rate"] == 100 - FAST.answer_burst
    # From many hosts: never more than max_outgoing of our connections at once.
    cfg = Config(heartbeat=1, peer_timeout=3.5, max_outgoing=32)
    leader = BullyNode(*LEADER, 0.0, config=cfg)
    for h in range(200):
        src = f"10.1.{h // 250}.{h % 250 + 1}"
        c = leader.accept((src, 1), 0.0)
        leader.data_received(c, encode(Message(9, Peer(src, 4000, 3))), 0.0)
    assert sum(isinstance(a, Connect) for a in leader.actions()) == 32
    assert leader.stats["dropped_outgoing_limit"] == 200 - 32


def test_search_flood_for_our_id_answers_a_bounded_number_of_times():
    n = BullyNode("10.0.0.3", 3333, 0.0, leader=LEADER, config=FAST)
    n.id = 3
    n.actions()
    c = n.accept(("10.0.0.66", 1), 0.0)
    for sid in range(200):
        n.data_received(c, encode(Message(6, Peer("10.0.0.66", 4000), source_id=9,
                                          search_id=sid, destination_id=3)), 0.0)
    assert sum(isinstance(a, Connect) for a in n.actions()) == FAST.answer_burst


def test_ids_outside_1_to_25_are_not_believed():
    leader = BullyNode(*LEADER, 0.0, config=FAST)
    c = leader.accept(("10.0.0.66", 1), 0.0)
    leader.data_received(c, encode(Message(5, Peer("10.0.0.66", 3333, 1000))), 0.0)
    leader.data_received(c, encode(Message(10, Peer("10.0.0.66", 3333, 60000))), 0.0)
    assert leader.stats["dropped_invalid_id"] == 2
    assert not leader.members and leader.is_leader and 1000 not in leader.book


class Mute(BullyNode):
    """A member that answers AreYouAlive but never runs an election (a stranger, or a broken
    client): it must not leave the network without a leader."""

    def _start_election(self, reason, now, asker=0):
        pass


def test_a_higher_id_that_answers_but_never_leads_is_skipped():
    sim = network(4)
    mute = host(5)
    sim.add(mute, lambda now: Mute(*mute, now, leader=LEADER, config=FAST))
    sim.run(sim.now + 3 * FAST.heartbeat)
    assert sim.nodes[mute].core.id == 5
    sim.kill(LEADER)
    real = [sim.nodes[host(k)].core for k in range(1, 5)]
    assert sim.run_until(lambda: all(c.leader is not None and c.leader.id == 4 for c in real),
                         sim.now + 3 * FAST.leader_wait)
    assert sim.nodes[host(4)].core.stats["election_restarted"] >= 1


def test_are_you_alive_to_a_peer_starts_at_most_one_election_per_holdoff():
    sim = network(5)
    p = sim.nodes[host(1)].core
    before = p.stats["elections"]
    for k in range(50):  # 10 per second for 5 s, from a stranger on another host
        sim.call_at(sim.now + k * 0.1, lambda: sim.do(host(1), lambda c, now: (
            c.data_received(c.accept(("10.0.0.66", 1), now),
                            encode(Message(9, Peer("10.0.0.66", 3333, 7))), now))))
    sim.run(sim.now + 5.05)
    assert p.stats["elections"] - before <= 5.05 / FAST.election_holdoff + 1
    assert p.stats["election_holdoff"] >= 1


def test_a_lower_claim_is_ignored_while_the_leader_lives_even_mid_heartbeat():
    n, hb = joined_peer()
    n.handle_timer(FAST.heartbeat)  # a heartbeat is connecting
    n.actions()
    c = n.accept(("10.0.0.2", 50000), FAST.heartbeat)
    n.data_received(c, encode(Message(10, Peer("10.0.0.2", 3333, 20))), FAST.heartbeat)
    assert n.leader.id == 25 and n.stats["leader_claim_below_leader"] == 1
    (probe,) = [a for a in n.actions() if isinstance(a, Connect)]
    n.connection_made(probe.conn, ("10.0.0.1", 45000), FAST.heartbeat + 0.001)
    n.handle_timer(FAST.heartbeat + FAST.connect_timeout + FAST.reply_timeout)
    assert n.leader.id == 25 and n._pending_claim is None  # the leader lives: ignored


def test_text_sent_is_reported_once_written_and_failed_when_refused():
    sim = network(3)
    sim.kill(host(3))
    sim.do(host(1), lambda c, now: c.text(2, b"hi", now))
    sim.do(host(1), lambda c, now: c.text(3, b"lost", now))
    sim.run(sim.now + 0.2)
    from pelotari.bully.core import TextSent
    assert [e.peer.id for e in sim.events(host(1), TextSent)] == [2]
    assert [e.destination_id for e in sim.events(host(1), TextFailed)] == [3]


def test_joining_something_that_is_not_a_bully_leader_fails_at_once():
    n = BullyNode("10.0.0.1", 3333, 0.0, leader=LEADER, config=FAST)
    (join,) = [a for a in n.actions() if isinstance(a, Connect)]
    n.connection_made(join.conn, ("10.0.0.1", 40000), 0.0)
    n.data_received(join.conn, b"HTTP/1.1 400 Bad Request\r\n", 0.01)
    (failed,) = [e for e in iter(n.next_event, None) if isinstance(e, JoinFailed)]
    assert "is not a bully leader" in failed.reason
    assert n.get_timer() is None or n.get_timer() > 1.0  # no retry


def test_a_lower_claim_that_arrives_before_news_of_the_leaders_death_is_followed():
    n, hb = joined_peer()
    c = n.accept(("10.0.0.2", 50000), 0.5)
    n.data_received(c, encode(Message(10, Peer("10.0.0.2", 3333, 20))), 0.5)
    assert n.leader.id == 25  # not yet: the leader is asked first
    (probe,) = [a for a in n.actions() if isinstance(a, Connect) and a.address == LEADER]
    n.connection_lost(probe.conn, 0.501)  # refused: the leader is dead
    assert n.leader.id == 20 and n.election is None
    assert not [a for a in n.actions() if isinstance(a, Send)
                and wire.decode(a.data).tag == 9]  # no election messages


# ---- what the second attack review found (each failed before its fix) -----------------------

def test_an_iamleader_naming_our_leaders_own_id_from_elsewhere_is_not_followed():
    sim = network(2)
    p = sim.nodes[host(1)].core
    sim.do(host(1), lambda c, now: c.data_received(
        c.accept(("10.0.0.99", 50000), now), encode(Message(10, Peer("10.0.0.99", 4000, 25))),
        now))
    sim.run(sim.now + 3)  # the leader is asked, answers: the claim is dropped
    assert p.leader == Peer(*LEADER, 25) and p.stats["leader_claim_below_leader"] == 1


def test_a_stranger_cannot_take_an_id_the_leader_vouched_for_nor_the_leaders():
    sim = network(3)
    p = sim.nodes[host(2)].core
    sim.run(sim.now + 70)  # long after anything first-hand from ID 1 or the leader's join
    for claimed in (1, 25):
        c = p.accept(("10.0.0.99", 50000 + claimed), sim.now)
        p.data_received(c, encode(Message(3, Peer("10.0.0.99", 4000, claimed))), sim.now)
    assert p.book[1].peer.address == host(1) and p.book[25].peer.address == LEADER
    assert p.stats["id_conflict"] >= 2
    # ... nor have a Text shown as theirs.
    c = p.accept(("10.0.0.99", 50100), sim.now)
    p.data_received(c, encode(Message(8, Peer("10.0.0.99", 4000, 25), data=b"obey")), sim.now)
    assert not [e for e in sim.events(host(2), TextReceived) if e.text == "obey"]
    assert p.stats["dropped_id_conflict"] == 1


def test_an_unasked_node_response_is_not_believed():
    sim = network(2)
    p = sim.nodes[host(1)].core
    before = dict(p.book)
    c = p.accept(("10.0.0.99", 50000), sim.now)
    fake = tuple(Peer("10.0.0.99", 4000 + i, i) for i in (10, 11, 12, 13))
    p.data_received(c, encode(Message(4, peers=fake)), sim.now)
    assert dict(p.book) == before and p.stats["dropped_unexpected"] == 1


def test_quarantined_ids_count_toward_their_hosts_share():
    cfg = Config(heartbeat=1.0, peer_timeout=3.5, max_ids_per_host=4)
    leader = BullyNode(*LEADER, 0.0, config=cfg)
    given = []
    for rnd in range(3):  # Entries from one host that never heartbeat, again and again
        now = rnd * 10.0
        leader.handle_timer(now)
        for k in range(4):
            c = leader.accept(("10.0.0.99", 50000 + k), now)
            leader.data_received(c, encode(wire.entry("10.0.0.99", 4000 + 10 * rnd + k)), now)
            sent = [wire.decode(a.data) for a in leader.actions() if isinstance(a, Send)]
            given.append(sent[-1].id)
    assert given[:4] == [1, 2, 3, 4] and set(given[4:]) == {0}  # held in quarantine: full


def test_a_search_naming_a_searcher_that_did_not_send_it_is_not_forwarded():
    sim = network(3)
    p = sim.nodes[host(1)].core
    c = p.accept(("10.0.0.99", 50000), sim.now)
    p.actions()
    p.data_received(c, encode(Message(6, Peer("10.0.0.77", 46000), source_id=9, search_id=1,
                                      destination_id=2)), sim.now)
    assert not [a for a in p.actions() if isinstance(a, Connect)]
    assert p.stats["search_not_forwarded_unverified"] == 1


def test_new_times_never_add_up_past_max_correction():
    sim = network(1, config=Config(heartbeat=1.0, peer_timeout=3.5, max_correction=60.0))
    p = sim.nodes[host(1)].core
    for _ in range(10):
        c = p.accept((LEADER[0], 50000), sim.now)
        p.data_received(c, encode(Message(13, Peer(*LEADER, 25),
                                          time_ms=p.time_ms(sim.now) + 59_900)), sim.now)
    assert p.clock.target == pytest.approx(59.9, abs=0.01) and p.stats["dropped_wild_time"] == 9


def test_a_burst_of_texts_to_one_peer_all_arrive():
    sim = network(2)
    for i in range(40):
        sim.do(host(1), lambda c, now, i=i: c.text(2, b"line %d" % i, now))
    sim.run(sim.now + 5)
    got = sorted(e.text for e in sim.events(host(2), TextReceived))
    assert got == sorted(f"line {i}" for i in range(40))
    assert sim.nodes[host(2)].core.stats["connections_evicted_host_limit"] == 0


def test_texts_from_one_host_are_rate_bounded():
    n = fresh()
    for k in range(200):
        c = n.accept(("10.0.0.1", 1 + k % 2), 0.0)
        n.data_received(c, encode(Message(8, Peer("10.0.0.1", 3333, 1), data=b"x")), 0.0)
    shown = 0
    while (e := n.next_event()) is not None:
        shown += isinstance(e, TextReceived)
    assert shown == n.config.text_burst and n.stats["dropped_text_rate"] == 200 - shown


# ---- a stranger's review (issue 28): each finding's regression ------------------------------

def test_a_host_whose_ports_never_read_holds_back_only_searches_to_itself():
    n, hb = joined_peer()
    stranger = "10.0.0.66"
    for port in range(7000, 7004):  # four IDs on ports that accept and never read
        n.neighbours[60 + port - 7000] = Peer(stranger, port, 0)
    for k in range(60):  # our own searches, each to every neighbour
        n.search(3 + k % 20, 0.01 + k * 0.001)
    n.actions()
    waiting = len(n._waiting.get(stranger, ()))
    assert waiting == n.config.max_waiting_per_host and n.stats["dropped_paced_backlog"] > 0
    # Nothing else waits behind them: an AreYouAlive to a real peer goes at once.
    n._learn(Peer("10.0.0.2", 3333, 2), 0.1, first_hand=True)
    n._send_to(("10.0.0.2", 3333), n._msg("AreYouAlive"), 0.1, "elect", 2)
    assert any(isinstance(a, Connect) and a.address == ("10.0.0.2", 3333) for a in n.actions())
    n.text(2, b"still goes", 0.1)
    assert any(isinstance(a, Connect) and a.address == ("10.0.0.2", 3333) for a in n.actions())


def test_one_host_naming_every_id_cannot_make_the_network_full():
    lead = BullyNode(*LEADER, 0.0, config=FAST)
    lead.actions()
    for i in range(1, 25):  # a Text naming each ID, from one host: each a first-hand claim
        c = lead.accept(("10.0.0.61", 50000 + i), 0.1)
        lead.data_received(c, encode(Message(8, Peer("10.0.0.61", 7000 + i, i), data=b"x")),
                           0.1)
    joiner = lead.accept(("10.0.0.55", 40000), 0.2)
    lead.data_received(joiner, encode(Message(1, Peer("10.0.0.55", 3333))), 0.2)
    (answer,) = [a for a in lead.actions() if isinstance(a, Send) and a.conn == joiner]
    assert wire.decode(answer.data).id != 0  # an ID, not "the network is full"


def test_a_flood_on_one_connection_is_handled_a_read_at_a_time():
    n = fresh()
    c = n.accept(("10.0.0.7", 50000), 0.0)
    one = encode(Message(6, Peer("10.0.0.7", 3333), source_id=7, search_id=1, destination_id=9))
    n.data_received(c, one * 1000, 0.0)
    assert n.stats["received_NodeSearch"] == n.config.max_messages_per_read
    rounds = 1
    while Continue(c) in n.actions():  # the adapter calls again, reading nothing meanwhile
        n.data_received(c, b"", 0.0)
        rounds += 1
    assert n.stats["received_NodeSearch"] == 1000 and rounds == -(-1000 // 64)


def test_a_request_on_our_own_connection_is_not_answered():
    n, hb = joined_peer()
    n.neighbours[2] = Peer("10.0.0.2", 3333, 2)
    n.search(7, 0.01)
    (conn,) = [a for a in n.actions() if isinstance(a, Connect) and a.address[0] == "10.0.0.2"]
    n.connection_made(conn.conn, ("10.0.0.1", 41000), 0.02)
    n.actions()
    for tag in (3, 1, 11):  # NodeRequest, Entry, TellMeYourTime on our half-closed search
        n.data_received(conn.conn, encode(Message(tag, Peer("10.0.0.2", 3333, 2))), 0.03)
    assert not [a for a in n.actions() if isinstance(a, Send)]
    assert n.stats["dropped_request_on_own_connection"] == 3


def test_a_search_waiting_its_turn_is_not_given_up_before_it_goes():
    n, hb = joined_peer()
    n.neighbours[2] = Peer("10.0.0.2", 3333, 2)  # accepts, never closes: its slots stay taken
    for dest in range(3, 23):
        n.search(dest, 0.01)
    for a in n.actions():
        if isinstance(a, Connect):
            n.connection_made(a.conn, ("10.0.0.1", 42000 + a.conn), 0.02)
    n.handle_timer(0.01 + n.config.search_timeout + 0.001)
    gone = [e for e in events_of(n) if isinstance(e, NotFound)]
    waiting = {c.search for q in n._waiting.values() for c in q}
    assert waiting and not {e.search_id for e in gone} & waiting


def test_a_found_naming_an_id_we_know_elsewhere_is_not_believed():
    n, hb = joined_peer()
    n._learn(Peer("10.0.0.2", 3333, 2), 0.01, first_hand=True)
    sid = n.search(2, 0.01)
    n.actions()
    c = n.accept(("10.0.0.62", 50000), 0.02)
    n.data_received(c, encode(Message(7, Peer("10.0.0.62", 7000, 2), search_id=sid)), 0.02)
    assert not [e for e in events_of(n) if isinstance(e, Found)]
    assert n.stats["dropped_id_conflict"] == 1 and n.known()[2].address == ("10.0.0.2", 3333)
