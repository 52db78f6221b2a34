"""The backbone cluster's core (pelotari.fyrehose.cluster) in the simulator: one active at a
time, no sequence issued twice, failover on a kill, a silence and a partition, and no second
outage when an old active comes back (docs/protocols/fyrehose-cluster.md)."""
import random
import struct

import pytest

from pelotari.fyrehose import cluster as cl
from pelotari.fyrehose.cluster import BecameActive, ClusterCore, Config, SteppedDown
from pelotari.sim import LinkSpec, Simulator

CPORT, BPORT = 2325, 2324
WALL = 1.7e9


def member(k):
    return (f"10.0.1.{k}", CPORT)


class Cluster:
    """n members in a simulator, and a data plane: every millisecond the active issues the
    positions its lease and reservation allow (`rate` per second), and every member it reaches
    holds them (its journal). It checks, every millisecond, that at most one member may issue,
    and that no position is issued twice."""

    def __init__(self, n, seed=0, loss=0.0, config=None, witness=(), size=None, rate=10_000,
                 key=None):
        self.key = key
        self.sim = Simulator(seed=seed, default=LinkSpec(delay=0.0002, jitter=0.0001,
                                                         loss=loss))
        self.n = n
        self.rate = rate
        self.config = config or Config(cluster_size=size or n)
        self.witness = set(witness)
        self.issued = {}  # position -> (member, epoch)
        self.overlaps = 0
        self.states = {}  # each member's stored state (survives a restart, as a file would)
        for k in range(1, n + 1):
            self.start(k, founder=(k == 1))
        self.sim.call_at(0.001, self.tick)

    def make(self, k, founder):
        cfg = self.config
        if k in self.witness:
            cfg = Config(**{**cfg.__dict__, "witness": True})
        peers = [member(j) for j in range(1, self.n + 1) if j != k]
        leader = None if founder else (member(1)[0], BPORT)
        return lambda now: ClusterCore(member(k), peers, now, bully_port=BPORT,
                                       bully_leader=leader, config=cfg, incarnation=k,
                                       wall=lambda: WALL + self.sim.now,
                                       state=self.states.get(k), key=self.key)

    def start(self, k, founder=False, leader=None):
        make = self.make(k, founder)
        if leader is not None:
            peers = [member(j) for j in range(1, self.n + 1) if j != k]
            make = (lambda now: ClusterCore(member(k), peers, now, bully_port=BPORT,
                                            bully_leader=(leader[0], BPORT), config=self.config,
                                            incarnation=100 + k,
                                            wall=lambda: WALL + self.sim.now,
                                            state=self.states.get(k)))
        if member(k) in self.sim.nodes:
            self.states[k] = self.core(k).state  # what it saved before it died
            self.sim.restart(member(k), make)
        else:
            self.sim.add(member(k), make, also=[(member(k)[0], BPORT)])

    def bully_leader_for(self, k, down):
        """Whom a restarted member k joins: a live bully leader, else any live member (as
        the adapter will, asking the members it knows)."""
        up = [j for j in range(1, self.n + 1) if j != k and j not in down]
        leaders = [j for j in up if self.core(j).bully.is_leader]
        return (leaders or up)[0]

    def core(self, k):
        return self.sim.nodes[member(k)].core

    def alive(self, k):
        return not self.sim.nodes[member(k)].crashed

    def actives(self):
        now = self.sim.now
        return [k for k in range(1, self.n + 1)
                if self.alive(k) and self.core(k).may_issue(now) is not None]

    def tick(self):
        now = self.sim.now
        actives = self.actives()
        if len(actives) > 1:
            self.overlaps += 1
        for k in actives:
            c = self.core(k)
            limit = c.may_issue(now)
            first = c.next
            last = min(limit, first + max(1, int(self.rate / 1000)) - 1)
            for pos in range(first, last + 1):
                assert pos not in self.issued, (pos, k, self.issued[pos])
                self.issued[pos] = (k, c.epoch)
            if last >= first:
                c.issued(last + 1, now)
                for j in range(1, self.n + 1):  # the DELIVERs reach whom the active reaches
                    if j != k and self.alive(j) and self.sim._reachable(
                            member(k)[0], member(j)[0]):
                        self.core(j).holding(last)
            self.sim._pump(self.sim.nodes[member(k)])
        self.sim.call_at(now + 0.001, self.tick)

    def run(self, seconds):
        self.sim.run(self.sim.now + seconds)

    def until(self, predicate, seconds):
        return self.sim.run_until(predicate, self.sim.now + seconds)

    def became(self, k):
        return self.sim.events(member(k), BecameActive)


def test_a_fresh_cluster_elects_one_active_and_sequences_from_the_wall_clock():
    c = Cluster(3)
    assert c.until(lambda: c.actives() == [1], 5)
    c.run(1.0)
    (ev,) = c.became(1)
    assert abs(ev.first - WALL * 1e6) < 5e6  # microseconds, as a lone backbone starts
    assert len(c.issued) > 5000 and c.overlaps == 0
    assert {k for k, _ in c.issued.values()} == {1}
    for k in (2, 3):
        assert c.core(k).active == member(1) and c.core(k).high > ev.first


def test_a_killed_active_is_replaced_at_once_past_every_sequence_it_issued():
    c = Cluster(3)
    assert c.until(lambda: c.actives() == [1], 5)
    c.run(1.0)
    before = max(c.issued)
    killed = c.sim.now
    c.sim.kill(member(1))
    assert c.until(lambda: len(c.actives()) == 1, 2)
    took = c.sim.now - killed
    assert took < 0.05, took  # the watch connections: no lease to wait out
    (new,) = c.actives()
    (ev,) = c.became(new)
    assert ev.first > before and ev.epoch > c.core(2 if new == 3 else 3).epoch - 1
    c.run(1.0)
    assert c.overlaps == 0 and max(c.issued) > ev.first + 5000


def test_a_new_actives_first_reservation_covers_a_second_of_the_old_actives_rate():
    """The clients re-send at once what the dead active never confirmed: a reservation of the
    usual size would be used up by that burst, and the rest dropped (`not_active`)."""
    c = Cluster(3, rate=10_000)
    assert c.until(lambda: c.actives() == [1], 5)
    c.run(1.0)
    c.sim.kill(member(1))
    assert c.until(lambda: len(c.actives()) == 1, 2)
    (new,) = c.actives()
    (ev,) = c.became(new)
    first_reservation = c.core(new).reserved - ev.first + 1
    assert 0.8 * 10_000 <= first_reservation <= c.config.reserve_max
    # Later ones follow the rate it sees itself (reserve_ahead of it, at least reserve_min).
    c.run(1.0)
    assert c.core(new).reserved - c.core(new).next + 1 <= \
        c.config.reserve_ahead * 10_000 * 1.2 + 1
    assert c.overlaps == 0


def test_two_claimants_of_one_epoch_do_not_cancel_each_other():
    """Bully can have two leaders for a moment: both claim, the same epoch (the wall clock in
    ms). Each granting the other's claim and dropping its own would leave nobody active until
    the next silence; the higher address keeps its claim."""
    c = Cluster(3)
    assert c.until(lambda: c.actives() == [1], 5)
    c.run(0.5)
    c.sim.kill(member(1))
    now = c.sim.now
    for k in (2, 3):
        core = c.core(k)
        core.active_dead = True
        core._start_claim(now)
        c.sim._pump(c.sim.nodes[member(k)])
    assert c.core(2)._claim.epoch == c.core(3)._claim.epoch
    assert c.until(lambda: len(c.actives()) == 1, 0.1)
    assert c.actives() == [3] and c.overlaps == 0


def test_the_new_active_adopts_the_clients_the_old_one_told_the_standbys_of():
    """TABLE: the active tells the standbys its cluster clients (48 a datagram); the one that
    takes over gets them with what was left of their time; only the active's TABLE counts,
    and a standby keeps at most max_table."""
    key = b"k" * 32
    c = Cluster(3, config=Config(cluster_size=3, max_table=100), key=key)
    assert c.until(lambda: c.actives() == [1], 5)
    clients = [(f"10.1.{k // 250}.{k % 250 + 1}", 5000 + k, 0x8, 4.0) for k in range(120)]
    active = c.core(1)
    active.publish_table(clients, c.sim.now)  # (at most max_table go)
    active.publish_table(clients[100:], c.sim.now)  # ... and 20 others later
    out = active.datagrams_to_send()
    tables = [d for d, dst in out if d[0] == cl.TABLE and dst == member(2)]
    assert [(len(cl.decode(d, key)[3]) - 1) // 3 for d in tables] == [48, 48, 4, 20]
    for d, dst in out:
        k = next(j for j in (2, 3) if member(j) == dst)
        c.core(k).receive_datagram(d, member(1), c.sim.now)
    assert len(c.core(2)._table) == 100 and c.core(2).stats["dropped_table_full"] == 20
    # A TABLE from a standby (not the active) is dropped.
    forged = cl.encode(cl.TABLE, c.core(3).name, 3, c.core(3).epoch, 1 << 16 | 9, 0, 1000,
                       key=key)
    c.core(2).receive_datagram(forged, member(3), c.sim.now)
    assert c.core(2).stats["dropped_table_not_active"] == 1
    c.sim.kill(member(1))
    assert c.until(lambda: len(c.actives()) == 1, 2)
    (new,) = c.actives()
    # What the adapter adopts when the core says it won: once, with the time left.
    got = c.core(new).adoptable(c.sim.now)
    assert len(got) == 100 and all(0 < left < 4.0 for *_, left in got)
    assert {(h, p, f) for h, p, f, _ in got} <= {(h, p, f) for h, p, f, _ in clients}
    assert c.core(new).adoptable(c.sim.now) == []


def test_without_a_key_no_table_is_sent_nor_taken():
    """Whoever can forge the active's address could aim the next active at any address (5 s of
    DELIVERs) or fill its table: an unkeyed cluster adopts nobody."""
    c = Cluster(3)
    assert c.until(lambda: c.actives() == [1], 5)
    c.core(1).publish_table([("10.9.9.9", 5000, 0x8, 4.0)], c.sim.now)
    assert not [d for d, _ in c.core(1).datagrams_to_send() if d[0] == cl.TABLE]
    forged = cl.encode(cl.TABLE, c.core(2).name, 1, c.core(2).epoch, 1 << 16 | 9, 0, 1000)
    c.core(2).receive_datagram(forged, member(1), c.sim.now)
    assert c.core(2).stats["dropped_table_unkeyed"] == 1 and c.core(2).adoptable(c.sim.now) == []


def test_a_silent_active_is_replaced_after_its_lease_and_never_overlaps():
    c = Cluster(3)
    assert c.until(lambda: c.actives() == [1], 5)
    c.run(1.0)
    crashed = c.sim.now
    c.sim.crash(member(1))  # a machine gone: nothing resets anything
    assert c.until(lambda: any(c.actives()) and c.actives() != [1], 3)
    took = c.sim.now - crashed
    # (silence counts from the last LEASE heard, up to one interval before the crash)
    assert c.config.silence - c.config.lease_interval < took < 1.0, took
    c.run(1.0)
    assert c.overlaps == 0


def test_the_minority_side_stops_and_a_healed_partition_keeps_the_new_active():
    c = Cluster(3)
    assert c.until(lambda: c.actives() == [1], 5)
    c.run(0.5)
    cut = c.sim.now
    c.sim.partition([member(1)[0]], [member(2)[0], member(3)[0]])
    assert c.until(lambda: c.actives() not in ([], [1]), 3)
    (new,) = c.actives()
    stopped = c.sim.events(member(1), SteppedDown)
    assert stopped and stopped[-1].why == "lost quorum"
    assert c.overlaps == 0 and c.sim.now - cut > c.config.lease
    c.run(2.0)  # the minority keeps trying: its claims are refused, its epoch does not climb
    c.sim.heal()
    c.run(3.0)
    assert c.actives() == [new] and len(c.became(new)) == 1  # no second outage
    assert c.core(1).active == member(new) and c.overlaps == 0


def test_a_restarted_old_active_rejoins_as_a_standby():
    c = Cluster(3)
    assert c.until(lambda: c.actives() == [1], 5)
    c.sim.kill(member(1))
    assert c.until(lambda: len(c.actives()) == 1, 2)
    (new,) = c.actives()
    c.start(1, leader=member(new))  # joins the bully network the survivors lead
    c.run(5.0)
    assert c.actives() == [new] and c.core(1).role == "standby"
    assert c.core(1).active == member(new) and c.overlaps == 0


def test_two_backbones_never_fail_over_alone_but_do_with_a_witness():
    c = Cluster(2)
    assert c.until(lambda: c.actives() == [1], 5)
    c.sim.kill(member(1))
    c.run(3.0)
    assert c.actives() == []  # a majority of 2 is 2: one alone never sequences
    w = Cluster(3, witness=[3])
    assert w.until(lambda: w.actives() == [1], 5)
    w.sim.kill(member(1))
    assert w.until(lambda: w.actives() == [2], 2)
    w.run(1.0)
    assert w.core(3).role == "standby" and not w.became(3) and w.overlaps == 0


@pytest.mark.parametrize("seed", range(6))
def test_random_faults_never_make_two_actives_or_reuse_a_sequence(seed):
    """Invariant (checked every simulated millisecond): at most one member may issue, and no
    position is issued twice; kills, crashes, partitions, heals and restarts at random, with
    5 % loss on every link."""
    rng = random.Random(seed)
    c = Cluster(5, seed=seed, loss=0.05)
    assert c.until(lambda: len(c.actives()) == 1, 5)
    down = set()
    for _ in range(25):
        c.run(rng.uniform(0.05, 1.0))
        what = rng.choice(["kill", "crash", "partition", "heal", "restart"])
        up = [k for k in range(1, 6) if k not in down]
        if what in ("kill", "crash") and len(up) > 2:
            k = rng.choice(up)
            (c.sim.kill if what == "kill" else c.sim.crash)(member(k))
            down.add(k)
        elif what == "partition":
            hosts = [member(k)[0] for k in range(1, 6)]
            rng.shuffle(hosts)
            cut = rng.randint(1, 4)
            c.sim.partition(hosts[:cut], hosts[cut:])
        elif what == "heal":
            c.sim.heal()
        elif what == "restart" and down:
            k = rng.choice(sorted(down))
            c.start(k, leader=member(c.bully_leader_for(k, down)))
            down.discard(k)
    assert c.overlaps == 0
    c.sim.heal()
    for k in sorted(down):
        c.start(k, leader=member(c.bully_leader_for(k, down)))
        down.discard(k)
    assert c.until(lambda: len(c.actives()) == 1, 10)
    c.run(2.0)
    assert len(c.actives()) == 1 and c.overlaps == 0


def test_garbage_and_strangers_are_counted_and_dropped():
    c = Cluster(3)
    assert c.until(lambda: c.actives() == [1], 5)
    core = c.core(2)
    for data in (b"", b"\x01", b"\x63" * 40, cl.encode(cl.CLAIM, b"fyrehose", 9, 1 << 62)[:-1]):
        c.sim.do(member(2), lambda x, now, d=data: x.receive_datagram(d, member(3), now))
    epoch = int((WALL + 10) * 1000)  # plausible: about the wall clock in ms
    claim = cl.encode(cl.CLAIM, b"fyrehose", 9, epoch)
    c.sim.do(member(2), lambda x, now: x.receive_datagram(claim, ("10.0.9.9", CPORT), now))
    other = cl.encode(cl.CLAIM, b"another", 9, epoch)
    c.sim.do(member(2), lambda x, now: x.receive_datagram(other, member(3), now))
    assert core.stats["dropped_truncated"] == 2 and core.stats["dropped_unknown_type"] == 1
    assert core.stats["dropped_bad_size"] == 1 and core.stats["dropped_not_member"] == 1
    assert core.stats["dropped_other_cluster"] == 1
    # A member's claim while the active serves is refused: no epoch moves.
    c.sim.do(member(2), lambda x, now: x.receive_datagram(claim, member(3), now))
    c.run(0.5)
    assert c.actives() == [1] and core.stats["claims_refused"] >= 1
    assert core.promised < epoch
    # Forged from a member's address (no key): fields past any plausible value are dropped,
    # so nothing can push an epoch to the end of the range, nor a reservation 2^48 ahead.
    for data in (cl.encode(cl.STALE, b"fyrehose", 9, (1 << 64) - 1),
                 cl.encode(cl.STALE, b"fyrehose", 9, 1 << 61),
                 cl.encode(cl.RESERVE, b"fyrehose", 9, c.core(1).epoch,
                           core.reserved + (1 << 48))):
        c.sim.do(member(2), lambda x, now, d=data: x.receive_datagram(d, member(1), now))
    assert core.stats["dropped_out_of_range"] == 1 and core.stats["dropped_implausible"] == 2
    c.run(0.5)
    assert c.actives() == [1] and core.reserved < c.core(1).next + (1 << 32)


def test_with_a_key_only_tagged_datagrams_count():
    key = b"k" * 32

    class Keyed(Cluster):
        def make(self, k, founder):
            peers = [member(j) for j in range(1, self.n + 1) if j != k]
            leader = None if founder else (member(1)[0], BPORT)
            return lambda now: ClusterCore(member(k), peers, now, bully_port=BPORT,
                                           bully_leader=leader, config=self.config,
                                           incarnation=k, wall=lambda: WALL + self.sim.now,
                                           key=key)
    c = Keyed(3)
    assert c.until(lambda: c.actives() == [1], 5)
    core = c.core(2)
    forged = cl.encode(cl.LEASE, b"fyrehose", 9, c.core(1).epoch + 1, 1, core.reserved,
                       core.reserved)  # spoofed from member 3, untagged: no election
    c.sim.do(member(2), lambda x, now: x.receive_datagram(forged, member(3), now))
    wrong = cl.encode(cl.STALE, b"fyrehose", 9, c.core(1).epoch + 5, key=b"x" * 32)
    c.sim.do(member(1), lambda x, now: x.receive_datagram(wrong, member(3), now))
    assert core.stats["dropped_bad_size"] == 1 and c.core(1).stats["dropped_bad_tag"] == 1
    c.sim.kill(member(1))
    assert c.until(lambda: len(c.actives()) == 1, 2) and c.overlaps == 0


def test_a_member_host_holds_at_most_two_watch_connections():
    c = Cluster(3)
    assert c.until(lambda: c.actives() == [1], 5)
    active = c.core(1)
    conns = [active.accept((member(2)[0], 50000 + i), c.sim.now, member(1)) for i in range(50)]
    assert all(x is not None for x in conns)
    assert sum(1 for h in active._watched.values() if h == member(2)[0]) == 2
    assert active.stats["watch_evicted"] >= 48


def test_the_wire_round_trips_and_checks_sizes():
    for kind, n in cl.FIELDS.items():
        n = n or 4  # a TABLE: an epoch and one entry
        data = cl.encode(kind, b"x", 7, *range(1, n + 1))
        assert cl.decode(data) == (kind, b"x", 7, tuple(range(1, n + 1)))
        with pytest.raises(cl.ClusterError):
            cl.decode(data + b"\0")
    with pytest.raises(ValueError):
        cl.encode(cl.LEASE, b"x", 7, 1)
    # A TABLE: an epoch and 1..TABLE_ENTRIES entries of three fields, no other count.
    most = cl.encode(cl.TABLE, b"x", 7, 5, *range(3 * cl.TABLE_ENTRIES))
    assert len(cl.decode(most)[3]) == 1 + 3 * cl.TABLE_ENTRIES
    for count in (1, 3, 5, 2 + 3 * cl.TABLE_ENTRIES + 2, 1 + 3 * (cl.TABLE_ENTRIES + 1)):
        with pytest.raises(ValueError):
            cl.encode(cl.TABLE, b"x", 7, *range(count))
        raw = struct.pack(f"!BB1sQ{count}Q", cl.TABLE, 1, b"x", 7, *range(count))
        with pytest.raises(cl.ClusterError):
            cl.decode(raw)


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_five_percent_loss_for_a_minute_makes_no_spurious_failover():
    c = Cluster(3, seed=7, loss=0.05)
    assert c.until(lambda: len(c.actives()) == 1, 5)
    (first,) = c.actives()
    c.run(60.0)
    assert c.actives() == [first] and len(c.became(first)) == 1
    assert sum(len(c.became(k)) for k in (1, 2, 3)) == 1 and c.overlaps == 0


def test_a_cut_off_minority_does_not_raise_the_epoch_it_would_bring_back():
    c = Cluster(5)
    assert c.until(lambda: c.actives() == [1], 5)
    c.sim.partition([member(k)[0] for k in (1, 2)], [member(k)[0] for k in (3, 4, 5)])
    assert c.until(lambda: c.actives() not in ([], [1]), 3)
    (new,) = c.actives()
    epoch = c.core(new).epoch
    c.run(5.0)  # the minority's bully leader claims again and again, refused
    assert max(c.core(k).promised for k in (1, 2)) <= epoch
    c.sim.heal()
    c.run(2.0)
    assert c.actives() == [new] and c.core(new).epoch == epoch
