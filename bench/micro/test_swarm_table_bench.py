"""What a swarm connection costs in memory and per lookup: the pure-Python ConnectionTable
(pelotari.swarm.table.PyConnectionTable) and its Cython twin (fastpath.swarmtable), each filled
with 100,000 distinct (127.x.y.z, port) connections.

Bytes per connection is RSS growth (psutil) from before the table is made to after it
is full, in a fresh interpreter per implementation (pelotari.swarm.bench.memory); the twin's goal is
at most 64 (docs/protocols/swarm.md, "State per connection"). Run:

    .venv/bin/python bench/micro/test_swarm_table_bench.py            # both figures, printed
    .venv/bin/python -m pytest bench/micro --benchmark-enable -k swarm_table -s
"""

import pytest

N = 100_000
LOOKUPS = 10_000
IMPLS = {"python": "PyConnectionTable", "cython": "fastpath.swarmtable"}

def measure(impl, n=N):
    """Bytes per connection of a table filled to n, in a fresh interpreter (nothing else
    allocated in between, no freed arenas to reuse): pelotari.swarm.bench's measurement."""
    from pelotari.swarm import bench

    return bench.memory(pure=impl == "python", n=n)


def addresses(n):
    return [("127.%d.%d.%d" % (k >> 16 & 0xFF, k >> 8 & 0xFF, k & 0xFF), 1024 + k % 60000)
            for k in range(n)]


def table(impl, addrs):
    if impl == "cython":
        from fastpath.swarmtable import ConnectionTable
    else:
        from pelotari.swarm.table import PyConnectionTable as ConnectionTable
    t = ConnectionTable(len(addrs))
    for k, a in enumerate(addrs):
        t.add(a, k)
    return t


@pytest.mark.parametrize("impl", list(IMPLS))
def test_swarm_table_bytes_per_connection(impl, record_property):
    if impl == "cython":
        pytest.importorskip("fastpath.swarmtable")
    m = measure(impl)
    record_property("bytes_per_connection", m["bytes_per_connection"])
    print(f"\n{impl}: {m['bytes_per_connection']:.1f} bytes per connection "
          f"({m['rss_growth']:,} bytes RSS for {m['connections']:,})")
    if impl == "cython":
        assert m["bytes_per_connection"] <= 64


@pytest.fixture(scope="module")
def filled():
    addrs = addresses(N)
    out = {}
    for impl in IMPLS:
        try:
            out[impl] = table(impl, addrs)
        except ImportError:
            pass
    return addrs, out


@pytest.mark.parametrize("impl", list(IMPLS))
def test_swarm_table_lookup(benchmark, filled, impl):
    addrs, tables = filled
    if impl not in tables:
        pytest.skip("fastpath.swarmtable is not built")
    lookup = tables[impl].lookup
    probe = addrs[::N // LOOKUPS]  # fresh tuples each time, as a datagram's source is
    probe = [(h, p) for h, p in probe]

    def run():
        for a in probe:
            lookup(a)

    assert all(lookup(a) == k * (N // LOOKUPS) for k, a in enumerate(probe))
    benchmark.extra_info.update(lookups_per_round=len(probe))
    benchmark(run)


@pytest.mark.parametrize("impl", list(IMPLS))
def test_swarm_table_address(benchmark, filled, impl):
    """t.addresses[slot]: a stored tuple (pure), built from 18 bytes (twin)."""
    _, tables = filled
    if impl not in tables:
        pytest.skip("fastpath.swarmtable is not built")
    view = tables[impl].addresses
    slots = range(0, N, N // LOOKUPS)

    def run():
        for s in slots:
            view[s]

    benchmark.extra_info.update(lookups_per_round=len(slots))
    benchmark(run)


def main():
    import timeit

    addrs = addresses(N)
    probe = [(h, p) for h, p in addrs[::N // LOOKUPS]]
    for impl in IMPLS:
        m = measure(impl)
        t = table(impl, addrs)
        lookup = t.lookup
        best = min(timeit.repeat(lambda: [lookup(a) for a in probe], number=1, repeat=20))
        view = t.addresses
        best_addr = min(timeit.repeat(lambda: [view[s] for s in range(0, N, N // LOOKUPS)],
                                      number=1, repeat=20))
        print(f"{impl:7s} {m['bytes_per_connection']:6.1f} bytes/connection "
              f"(RSS +{m['rss_growth']:,} for {N:,})   lookup {best / len(probe) * 1e9:5.0f} ns"
              f"   addresses[slot] {best_addr / len(probe) * 1e9:5.0f} ns")


if __name__ == "__main__":
    main()
