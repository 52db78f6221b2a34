"""A mixed network with the Java clients, in the simulator: stand-ins that behave on the wire as
peerbox, VSP2P and P2P-Client do (tests/javalike.py) beside pelotari's core, for five simulated
minutes and through a leader's death (issue 28's "what it must show", minus the real JVMs:
docs/protocols/bully.md, "The Java clients", has the hand run against them)."""
import pytest

from javalike import JavaLike
from pelotari.bully.core import (BullyNode, ClockRefused, Config, ElectionStarted, NewLeader,
                                 PeerLeft, SyncDone, TextReceived)
from pelotari.bully.wire import Peer
from pelotari.sim import LinkSpec, Simulator

LEADER = ("10.0.0.100", 3333)
WALL = 1.7e9


def host(k):
    return (f"10.0.0.{k}", 3333)


def sim_with(seed=1):
    return Simulator(seed=seed, default=LinkSpec(delay=0.0005, jitter=0.0002))


def pelotari(sim, address, leader=None, **config):
    return sim.add(address, lambda now: BullyNode(
        *address, now, leader=leader, config=Config(**config),
        system=lambda: WALL + sim.now)).core


def java(sim, address, family, leader=None, **kw):
    return sim.add(address, lambda now: JavaLike(
        *address, now, family=family, leader=leader, clock=lambda: WALL + sim.now,
        **kw)).core


def test_a_pelotari_leader_keeps_a_peer_of_each_java_family_for_five_minutes():
    sim = sim_with()
    leader = pelotari(sim, LEADER)
    peers = {"peerbox": java(sim, host(1), "peerbox", LEADER),
             "vsp2p": java(sim, host(2), "vsp2p", LEADER),
             "p2p": java(sim, host(3), "p2p", LEADER),
             # the seed's limit: a heartbeat once a minute, exactly
             "limit": java(sim, host(4), "vsp2p", LEADER, heartbeat=60.0)}
    sim.run(300.0)
    assert not sim.events(LEADER, PeerLeft)  # nobody flapped
    assert sorted(leader.members) == [1, 2, 3, 4]
    assert {p.id for p in peers.values()} == {1, 2, 3, 4}  # each its own ID
    assert {leader.members[p.id].peer.address for p in peers.values()} == {
        host(1), host(2), host(3), host(4)}
    assert leader.stats["dropped_id_conflict"] == 0 and leader.stats["id_conflict"] == 0
    assert peers["limit"].heartbeats >= 4
    # P2P-Client reads each exchange until EOF: the leader closes it, so it is never held up.
    assert peers["p2p"].blocked == 0 and peers["p2p"].heartbeats >= 7
    # Clients that never close their connections do not pile them up at the leader.
    assert len(leader._conns) <= 2 * len(peers)
    # Text both ways (VSP2P's own Text is 14 + N bytes: only pelotari's way is shown).
    for k, p in enumerate(peers.values(), 1):
        sim.do(LEADER, lambda c, now, k=k: c.text(k, b"hello %d" % k, now))
    sim.do(host(1), lambda c, now: c.text(LEADER, b"from peerbox", now))
    sim.do(host(3), lambda c, now: c.text(LEADER, b"from p2p", now))
    sim.run(sim.now + 5)
    assert sorted(t for p in peers.values() for t in p.texts) == [
        (25, "hello 1"), (25, "hello 2"), (25, "hello 3"), (25, "hello 4")]
    got = sorted(e.text for e in sim.events(LEADER, TextReceived))
    assert got == ["from p2p", "from peerbox"]


def test_java_clients_that_never_close_do_not_lock_their_host_out():
    sim = sim_with()
    leader = pelotari(sim, LEADER)
    box = java(sim, host(1), "peerbox", LEADER)
    sim.run(2.0)
    for i in range(40):  # one after another, each on a connection peerbox never closes
        sim.call_at(sim.now + 0.01 * i, lambda i=i: sim.do(
            host(1), lambda c, now: c.text(LEADER, b"t%d" % i, now)))
    sim.run(sim.now + 0.5)
    # ... and the IAmLeader that ends an election still gets through.
    sim.do(host(1), lambda c, now: c.announce(LEADER, now))
    sim.run(sim.now + 2)
    assert len(sim.events(LEADER, TextReceived)) == 40
    assert leader.stats["connections_refused_host_limit"] == 0
    assert leader.stats["received_IAmLeader"] == 1 and box.id == 1


@pytest.mark.parametrize("family", ["peerbox", "vsp2p", "p2p"])
def test_pelotari_peers_under_a_java_leader_stay_whole_then_elect_the_highest(family):
    sim = sim_with(seed=2)
    boss = java(sim, LEADER, family)
    a = pelotari(sim, host(1), LEADER)
    b = pelotari(sim, host(2), LEADER)
    sim.run(300.0)
    for node, address in ((a, host(1)), (b, host(2))):
        assert not sim.events(address, ElectionStarted), family  # the Java leader lives
        assert node.leader.address == LEADER and node.stats["leader_failed"] == 0
    assert a.id != b.id and {a.id, b.id} <= set(range(1, 26))
    if family != "vsp2p":  # (VSP2P's leader is a directory without an ID)
        assert a.leader.id == 0
        sim.do(host(1), lambda c, now: c.text(0, b"to the leader", now))
    sim.do(host(2), lambda c, now: c.text(a.id, b"to a peer", now))
    sim.run(sim.now + 5)
    assert [e.text for e in sim.events(host(1), TextReceived)] == ["to a peer"]
    if family != "vsp2p":
        assert any(t == "to the leader" for _, t in boss.texts)
    assert abs(a.clock.offset(sim.now)) < 1e-9 and abs(b.clock.offset(sim.now)) < 1e-9
    # The Java leader dies: the pelotari peers notice and agree on the highest live ID.
    sim.kill(LEADER)
    high = max(a.id, b.id)
    assert sim.run_until(lambda: a.leader.id == b.leader.id == high, sim.now + 30)
    assert [e.me for e in sim.events(host(1) if a.id == high else host(2), NewLeader)] == [True]
    # An election that searches every higher ID (VSP2P's leader never answers a NodeRequest,
    # so the book is never known whole) does not run into the other peer's host limit.
    assert a.stats["connections_refused_host_limit"] == b.stats[
        "connections_refused_host_limit"] == 0
    if family == "vsp2p":
        assert a.stats["sends_paced"] + b.stats["sends_paced"] > 0


def test_a_java_leaders_new_time_never_moves_a_clock_past_the_bound():
    sim = sim_with()
    boss = java(sim, LEADER, "p2p")
    a = pelotari(sim, host(1), LEADER)
    sim.run(5.0)
    # P2P-Client as leader: a time relative to what the peer reported, 75 s: refused.
    sim.do(LEADER, lambda c, now: c.new_time(host(1), 75_000, now))
    sim.run(sim.now + 1)
    assert a.stats["dropped_wild_time"] == 1 and abs(a.clock.offset(sim.now)) < 1e-9
    assert isinstance(sim.events(host(1), ClockRefused)[0], ClockRefused)
    # peerbox's absolute time, 2 s ahead: taken.
    sim.do(LEADER, lambda c, now: c.new_time(host(1), int((WALL + now + 2) * 1000), now))
    sim.run(sim.now + 1)
    assert a.clock.target == pytest.approx(2.0, abs=0.01) and boss.family == "p2p"


def test_vsp2ps_random_times_leave_it_out_of_a_pelotari_round():
    sim = sim_with()
    leader = pelotari(sim, LEADER, sync_interval=0)
    vsp = java(sim, host(1), "vsp2p", LEADER)
    b = sim.add(host(2), lambda now: BullyNode(*host(2), now, leader=LEADER,
                                               system=lambda: WALL + sim.now,
                                               clock_offset=0.3)).core
    sim.run(3.0)
    sim.do(LEADER, lambda c, now: c.start_sync(now))
    sim.run(sim.now + 5)
    (done,) = sim.events(LEADER, SyncDone)
    assert done.left_out == {vsp.id: "contradictory"} and vsp.times == []
    assert abs(b.clock.offset(sim.now) - leader.clock.offset(sim.now)) < 0.002
    assert abs(leader.clock.offset(sim.now)) < 0.2  # the leader was never the outlier


def test_peerbox_echoing_9_counts_as_alive_and_vsp2ps_9_naming_us_is_answered():
    sim = sim_with()
    node = sim.add(LEADER, lambda now: BullyNode(*LEADER, now, node_id=1)).core
    box = java(sim, host(9), "peerbox", LEADER)  # gets ID 2: above the leader's
    sim.run(2.0)
    assert box.id == 2
    sim.do(LEADER, lambda c, now: c.elect(now))  # asks ID 2, which echoes the 9
    sim.run(sim.now + 1.0)
    assert node.stats["are_you_alive_echo"] == 1 and node.election.phase == "waiting"
    sim.run(sim.now + 5.0)  # it never announces itself: skipped by the next election
    reasons = [e.reason for e in sim.events(LEADER, ElectionStarted)]
    assert reasons == ["asked by hand", "the higher ID that answered never took the lead"]
    # VSP2P's AreYouAlive names the receiver: answered with IAmAlive all the same.
    vsp = java(sim, host(3), "vsp2p", LEADER)
    sim.run(sim.now + 2)
    before = node.sent["IAmAlive"]
    sim.do(host(3), lambda c, now: c.ask(Peer(*LEADER, node.id), now))
    sim.run(sim.now + 2)
    assert node.stats["are_you_alive_naming_us"] == 1 and node.sent["IAmAlive"] == before + 1
    assert vsp.id == 3
