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


def test_the_bench_command_writes_both_stacks_records(tmp_path):
    import json
    import subprocess

    from conftest import PELOTARI

    out = tmp_path / "swarm.jsonl"
    res = subprocess.run(PELOTARI + ["swarm", "bench", "-o", str(out)], capture_output=True,
                         text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    recs = [json.loads(line) for line in open(out)]
    assert sorted((r["stack"], r["measure"]) for r in recs) == [
        ("Cython", "memory"), ("Cython", "pingpong"), ("pure Python", "memory"),
        ("pure Python", "pingpong")]
    assert all(r["kind"] == "swarm-bench" and r["env"]["commit"] for r in recs)
    assert "| Cython |" in res.stdout
