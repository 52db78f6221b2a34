"""The swarm connection table's Cython twin (fastpath.swarmtable) against the pure one
(pelotari.swarm.table.PyConnectionTable): the same operations give the same results and the same
field values, on random sequences, at capacity and at the limits."""
import os
import random

import pytest

from pelotari.swarm import table as table_mod
from pelotari.swarm.table import (
    FIELDS,
    NIL,
    S_DIRECT,
    S_ESTABLISHED,
    S_OUTBOUND,
    S_WANTED,
    Full,
    PyConnectionTable,
)

swarmtable = pytest.importorskip("fastpath.swarmtable")
CConnectionTable = swarmtable.ConnectionTable
IMPLS = [PyConnectionTable, CConnectionTable]
# table.Full is the twin's when the twin is selected; with PELOTARI_PURE_PYTHON=1 each has its own
FULL = (Full, swarmtable.Full)

# Hosts that pack (canonical text) and hosts that are kept as given (every one a distinct key).
HOSTS = ["10.0.0.1", "10.0.0.2", "127.0.0.1", "192.168.1.254", "255.255.255.255", "0.0.0.0",
         "::1", "::", "2001:db8::1", "2001:db8::2", "fe80::1:2:3:4", "2001:db8:0:1:1:1:1:1",
         "1:2:3:4:5:6:7:8", "::ffff:1.2.3.4", "1.2.3.4", "::FFFF:1.2.3.4", "2001:DB8::1",
         "2001:db8:0:0:0:0:0:1", "fe80::1%eth0", "localhost", "01.2.3.4", "::102:304",
         "::1.2.3.4", "1.2.3.4 ", ""]
PORTS = [0, 1, 80, 21452, 65535]


def test_the_selected_table_matches_the_environment():
    expected = "cython" if os.environ.get("PELOTARI_PURE_PYTHON", "") in ("", "0") else "python"
    assert table_mod.IMPLEMENTATION == expected
    assert (table_mod.ConnectionTable is CConnectionTable) == (expected == "cython")
    assert (table_mod.Full is swarmtable.Full) == (expected == "cython")


def check_same(a, b, pool):
    assert (a.count, len(a), a.capacity) == (b.count, len(b), b.capacity)
    for name in FIELDS:  # every field, free slots' stale values included
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
    assert list(a.addresses) == list(b.addresses)
    assert len(a.addresses) == len(b.addresses) == a.capacity
    assert list(a.lru()) == list(b.lru())
    assert a.direct == b.direct and a.evictable() == b.evictable()
    assert a.next_due() == b.next_due()
    for address in pool:
        assert a.lookup(address) == b.lookup(address)
        assert (address in a) == (address in b)
    for s in range(a.count):
        assert a.lookup(a.addresses[s]) == s == b.lookup(b.addresses[s])
        assert (a.ours(s), a.seen(s)) == (b.ours(s), b.seen(s))


def same(ta, tb, fn):
    """fn on both tables: the same result, or the same exception type."""
    out = []
    for t in (ta, tb):
        try:
            out.append(("ok", fn(t)))
        except Exception as e:  # noqa: BLE001 - compared across the two
            out.append(("raised", type(e).__name__))
    assert out[0] == out[1], out
    return out[0][1] if out[0][0] == "ok" else None


@pytest.mark.parametrize("capacity,seed", [(1, 1), (3, 2), (5, 3), (16, 4), (64, 5), (200, 6)])
def test_random_operations_match(capacity, seed):
    rng = random.Random(seed)
    pool = [(h, p) for h in HOSTS for p in PORTS]
    pool += [("10.%d.%d.%d" % (rng.randrange(4), rng.randrange(4), rng.randrange(256)),
              rng.choice(PORTS)) for _ in range(200)]
    pool += [("10.0.0.1", 80.0), ("10.0.0.1", 70000), ("10.0.0.1", -1), ("x",), "not a tuple",
             (b"10.0.0.1", 80), ("10.0.0.1", "80")]
    a, b = PyConnectionTable(capacity), CConnectionTable(capacity)
    now = 1000
    for step in range(3000):
        now += rng.randrange(0, 50)
        op = rng.random()
        # now and then a slot out of range (a free slot's stale links are the caller's bug in
        # both: touching one can loop the pure table's LRU list)
        slot = capacity if rng.random() < 0.03 else (rng.randrange(a.count) if a.count else 0)
        if op < 0.25:  # a new record, evicting first like the core does
            address = rng.choice(pool)
            if address not in a and a.count >= a.capacity and rng.random() < 0.8:
                victim = same(a, b, lambda t: t.evictable())
                if victim >= 0:
                    same(a, b, lambda t: t.remove(victim))
            same(a, b, lambda t: t.add(address, now))
        elif op < 0.35:
            if a.count or rng.random() < 0.1:
                same(a, b, lambda t: t.remove(slot))
                same(a, b, lambda t: t.remove(t.count))
        elif op < 0.5 and a.count:
            same(a, b, lambda t: t.touch(slot, now))
        elif op < 0.6 and a.count:
            d = rng.random() < 0.6
            same(a, b, lambda t: t.set_direct(slot, d))
        elif op < 0.7 and a.count:
            when = rng.choice([0, now + rng.randrange(200), now + rng.randrange(200) + 0.5])
            same(a, b, lambda t: t.set_due(slot, when))
        elif op < 0.75:
            same(a, b, lambda t: t.pop_due(now))
        elif op < 0.8:
            args = (rng.randrange(-1, capacity + 2), rng.randrange(0, 5), rng.randrange(-1, 70),
                    rng.choice([S_DIRECT | S_ESTABLISHED, S_ESTABLISHED, S_WANTED, 0]),
                    rng.choice([S_ESTABLISHED, 0, S_WANTED]))
            same(a, b, lambda t: t.scan(*args))
        elif op < 0.85 and a.count and slot < capacity:  # what the core writes: fields, keeping the DIRECT bit
            st = (a.state[slot] & S_DIRECT) | rng.choice([S_ESTABLISHED, S_OUTBOUND, S_WANTED, 0])
            v = rng.randrange(1 << 32)
            for t in (a, b):
                t.state[slot] = st
                t.pinged[slot] = v
                t.their[slot] = v * 7919
                t.missed[slot] = v & 0xFF
                t.claimed[slot] = (v >> 8) & 0xFF
                t.rtt[slot] = v & 0xFFFF
                t.bucket[slot] = v >> 1
        elif op < 0.9 and a.count:
            ours, seen = rng.randrange(-20, 40), rng.randrange(-20, 40)
            same(a, b, lambda t: t.set_attempts(slot, ours, seen))
        elif op < 0.91:
            shift = rng.choice([0, 500, now // 2, now + 10])
            same(a, b, lambda t: t.rebase(shift))
        elif op < 0.93:
            same(a, b, lambda t: t.next_due())
        elif op < 0.95:
            address = rng.choice(pool)
            same(a, b, lambda t: (t.lookup(address), address in t))
        else:
            same(a, b, lambda t: (t.ours(slot), t.seen(slot)))
        if step % 25 == 0:
            check_same(a, b, pool)
    check_same(a, b, pool)


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_the_index_at_capacity():
    n = 100_000
    rng = random.Random(7)
    addresses = [("127.%d.%d.%d" % (k >> 16, (k >> 8) & 0xFF, k & 0xFF), 1024 + k % 50000)
                 for k in range(n)]
    a, b = PyConnectionTable(n), CConnectionTable(n)
    for t in (a, b):
        for k, address in enumerate(addresses):
            assert t.add(address, k) == k
        with pytest.raises(FULL):
            t.add(("127.255.255.255", 1), 0)
        with pytest.raises(KeyError):
            t.add(addresses[n // 2], 0)
    assert b.index_bytes() <= 4 * n * 4 / 3 + 4
    for k in range(0, n, 7):
        assert b.lookup(addresses[k]) == k and b.addresses[k] == addresses[k]
    assert b.lookup(("127.255.255.255", 1)) == -1 and b.lookup(("127.0.0.0", 1025)) == -1
    gone = set()
    for _ in range(n // 2):  # half of them, in random order (backward shifts all over)
        victim = rng.randrange(b.count)
        gone.add(b.addresses[victim])
        assert a.remove(victim) == b.remove(victim)
    for address in addresses:
        sa, sb = a.lookup(address), b.lookup(address)
        assert sa == sb and (sb == -1) == (address in gone)
        assert sb == -1 or b.addresses[sb] == address
    for k, address in enumerate(sorted(gone)):  # refill
        assert a.add(address, k) == b.add(address, k)
    assert len(b) == n and all(b.lookup(x) == a.lookup(x) for x in addresses)
    assert list(a.lru()) == list(b.lru())
    while b.count:
        assert a.remove(0) == b.remove(0)
    assert all(b.lookup(x) == -1 for x in addresses)


def test_ipv6_and_other_hosts_round_trip_as_given():
    t = CConnectionTable(len(HOSTS) * 2 + 4)
    keys = [(h, 21452) for h in HOSTS] + [("2001:db8::1", 1), ("::ffff:1.2.3.4", 1)]
    for k, address in enumerate(keys):
        assert t.add(address, k) == k
    for k, address in enumerate(keys):
        got = t.addresses[k]
        assert got == address and type(got[0]) is str and type(got[1]) is int
        assert t.lookup(address) == k and address in t
    # "1.2.3.4" and "::ffff:1.2.3.4" (one IPv4 address, two keys) stay apart
    assert t.lookup(("1.2.3.4", 21452)) != t.lookup(("::ffff:1.2.3.4", 21452))
    assert t.lookup(("2001:db8::1", 21452.0)) == t.lookup(("2001:db8::1", 21452))
    assert t.lookup(("2001:db8::1", 21453)) == -1 and t.lookup(("2001:db8::3", 21452)) == -1
    while t.count:  # odd ones and packed ones move around alike
        t.remove(t.count // 2)
        for s in range(t.count):
            assert t.lookup(t.addresses[s]) == s


def test_limits():
    for impl in IMPLS:
        for bad in (0, -1, NIL, NIL + 1):
            with pytest.raises(ValueError):
                impl(bad)
        t = impl(1)
        assert t.add(("10.0.0.1", 1), 5) == 0 and len(t) == 1 and t.evictable() == 0
        with pytest.raises(KeyError):
            t.add(("10.0.0.1", 1), 5)
        with pytest.raises(FULL):
            t.add(("10.0.0.2", 1), 5)
        t.set_direct(0, True)
        assert t.evictable() == -1 and t.direct == {0}
        with pytest.raises(FULL):
            t.add(("10.0.0.2", 1), 5)
        with pytest.raises(IndexError):
            t.remove(1)
        with pytest.raises(IndexError):
            t.touch(1, 0)  # past the capacity
        assert t.addresses[0] == ("10.0.0.1", 1)
        assert t.remove(0) == -1 and len(t) == 0 and t.addresses[0] is None and not t.direct
        with pytest.raises(IndexError):
            t.remove(0)
        assert t.scan(0, 1, 1, 0, 0) == ([], 0) and t.next_due() is None and t.pop_due(10) == []
        assert t.add(("::1", 65535), 2**32 - 1) == 0 and t.heard[0] == 2**32 - 1
        assert t.memory() == 57


def test_the_twin_refuses_what_would_corrupt_it():
    t = CConnectionTable(4)
    t.add(("10.0.0.1", 1), 0)
    with pytest.raises(BufferError):
        t.state.append(1)  # its arrays cannot be resized under the C code
    with pytest.raises(AttributeError):
        t.state = None
    t.next[0] = 1000  # a link out of range: refused, as the pure table's arrays do
    with pytest.raises(IndexError):
        t.set_direct(0, True)
    for bad in (-1, 4, 2**40):
        for call in (lambda: t.touch(bad, 0), lambda: t.set_due(bad, 1), lambda: t.ours(bad)):
            with pytest.raises((IndexError, OverflowError)):
                call()
