"""pelotari.swarm.bench: its figures come from real tables and a real core (small sizes here)."""
import pytest

from pelotari.swarm import bench


@pytest.mark.parametrize("pure", [True, False])
def test_memory_is_rss_growth_per_connection(pure):
    m = bench.memory(pure, 50_000)
    assert m["implementation"] == ("python" if pure else "cython")
    assert m["connections"] == 50_000 and m["rss_growth"] > 0
    if not pure:
        assert m["bytes_per_connection"] <= 64  # the goal, for the twin
    else:
        assert m["bytes_per_connection"] > 100  # a tuple and a dict entry per connection


def test_pingpong_answers_every_ping_through_the_core():
    p = bench.pingpong(False, connections=600, rounds=2)  # two slots of handshakes
    assert (p["pings"], p["pongs"]) == (1200, 1200) and p["pongs_per_second"] > 0
