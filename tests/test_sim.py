"""The shared network simulator, driving real sans-IO cores (prototari's NodeCore) through
discovery, loss, a partition, a crash and a restart — without sleeping, deterministically."""
from pelotari.prototari.core import Config, NodeCore, PeerJoined, PeerLeft
from pelotari.sim import LinkSpec, Simulator

CFG = Config(broadcast_interval=1.0, inactive_peer_time=1.0, heartbeat_max_wait=0.3,
             reservation_timeout=1.0, response_window=0.5)


def lan(n, seed=1, loss=0.0):
    sim = Simulator(seed=seed, default=LinkSpec(delay=0.0005, jitter=0.0005, loss=loss))
    addrs = [("10.0.0.%d" % k, 21450) for k in range(1, n + 1)]
    for k, a in enumerate(addrs):
        sim.call_at(k * 0.137, lambda a=a: sim.add(a, lambda now, a=a: NodeCore(now, CFG, {a}),
                                                  listens=(21451,)))
    return sim, addrs


def peers_of(sim, a):
    return set(sim.nodes[a].core.peers)


def full(sim, addrs):
    return all(a in sim.nodes and peers_of(sim, a) == set(addrs) - {a} for a in addrs)


def test_ten_nodes_find_each_other():
    sim, addrs = lan(10)
    assert sim.run_until(lambda: full(sim, addrs), limit=30)
    assert sim.now < 10  # a few broadcast intervals, simulated
    assert all(len(sim.events(a, PeerJoined)) == 9 for a in addrs)


def test_loss_slows_discovery_but_everyone_gets_there():
    sim, addrs = lan(10, loss=0.2)
    assert sim.run_until(lambda: full(sim, addrs), limit=120)
    assert sim.stats.lost > 0


def test_a_partition_splits_the_peers_and_healing_joins_them():
    sim, addrs = lan(6)
    assert sim.run_until(lambda: full(sim, addrs), limit=30)
    left, right = {a[0] for a in addrs[:3]}, {a[0] for a in addrs[3:]}
    sim.partition(left, right)
    sim.run(sim.now + 5)  # inactive 1 s + 3 x 0.3 s, and then some
    for a in addrs:
        side = left if a[0] in left else right
        assert {p[0] for p in peers_of(sim, a)} == side - {a[0]}
    sim.heal()
    assert sim.run_until(lambda: full(sim, addrs), limit=sim.now + 30)
    assert sim.stats.cut > 0


def test_a_crashed_node_is_dropped_and_admitted_again_after_a_restart():
    sim, addrs = lan(4)
    assert sim.run_until(lambda: full(sim, addrs), limit=30)
    victim = addrs[1]
    sim.crash(victim)
    sim.run(sim.now + 3)
    assert all(victim not in peers_of(sim, a) for a in addrs if a != victim)
    assert all(any(e.peer == victim for e in sim.events(a, PeerLeft)) for a in addrs if a != victim)
    sim.restart(victim, lambda now: NodeCore(now, CFG, {victim}))
    assert sim.run_until(lambda: full(sim, addrs), limit=sim.now + 30)


def test_the_same_seed_gives_the_same_history_and_another_seed_another():
    def history(seed):
        sim, addrs = lan(6, seed=seed, loss=0.1)
        sim.run(20)
        return [(round(t, 9), a, e) for a in addrs for t, e in sim.nodes[a].events]

    assert history(7) == history(7)
    assert history(7) != history(8)


def test_an_asymmetric_link_and_a_stream_link():
    sim = Simulator(seed=3)
    sim.link("a", "b", LinkSpec(delay=0.010), both_ways=False)
    sim.link("b", "a", LinkSpec(delay=0.050), both_ways=False)
    sim.link("a", "c", LinkSpec(delay=0.001, jitter=0.05, reliable=True))
    got = []

    class Echo:
        """A minimal core: records what arrives and when."""

        def __init__(self, name):
            self.name, self.out = name, []

        def receive_datagram(self, data, src, now):
            got.append((self.name, data, round(now, 6)))

        def handle_timer(self, now):
            pass

        def get_timer(self):
            return None

        def datagrams_to_send(self):
            out, self.out = self.out, []
            return out

        def next_event(self):
            return None

    nodes = {h: sim.add((h, 1), lambda now, h=h: Echo(h)) for h in "abc"}
    nodes["a"].core.out = [(b"to-b", ("b", 1))] + [(b"%d" % i, ("c", 1)) for i in range(20)]
    nodes["b"].core.out = [(b"to-a", ("a", 1))]
    sim._pump(nodes["a"])
    sim._pump(nodes["b"])
    sim.run(1)
    assert ("b", b"to-b", 0.01) in got and ("a", b"to-a", 0.05) in got
    assert [d for n, d, _ in got if n == "c"] == [b"%d" % i for i in range(20)]  # in order


def test_without_keep_events_the_cores_events_are_drained_and_dropped():
    kept, addrs = lan(6)
    dropped = Simulator(seed=1, default=LinkSpec(delay=0.0005, jitter=0.0005), keep_events=False)
    for k, a in enumerate(addrs):
        dropped.call_at(k * 0.137, lambda a=a: dropped.add(
            a, lambda now, a=a: NodeCore(now, CFG, {a}), listens=(21451,)))
    for s in (kept, dropped):
        assert s.run_until(lambda s=s: full(s, addrs), limit=30)
    assert all(len(kept.events(a, PeerJoined)) == 5 for a in addrs)
    assert all(dropped.nodes[a].events == [] for a in addrs)
    assert all(dropped.nodes[a].core.next_event() is None for a in addrs)  # drained all the same
