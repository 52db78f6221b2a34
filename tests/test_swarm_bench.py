"""pelotari.swarm.bench: its figures come from real tables and a real core (small sizes here)."""
import pytest

from conftest import compiled_tool
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


def test_sockets_brings_every_peer_to_a_real_node_and_counts_its_pongs():
    compiled_tool("swarmload")
    r = bench.sockets(False, peers=2000, seconds=1.0, rate=5000)
    assert r["established"] == r["node_established_after"] == r["peers"] == 2000
    assert 0 < r["pongs"] <= r["pings"] and r["bad_mac"] == 0 and r["pongs_unmatched"] == 0
    assert r["node_cpu_seconds"] >= 0 and r["config"]["slot"] == bench.SLOT
    assert r["config"]["capacity"] >= 2016 and r["config"]["target_direct"] == 0
    with pytest.raises(ValueError, match="two slots"):
        bench.sockets(False, peers=2000, seconds=1.0, rate=10_001)


def test_the_bench_command_writes_both_stacks_records(tmp_path):
    import json
    import subprocess

    from conftest import PELOTARI

    compiled_tool("swarmload")  # its sockets measure drives both stacks with the C generator
    out = tmp_path / "swarm.jsonl"
    res = subprocess.run(PELOTARI + ["swarm", "bench", "-o", str(out), "--peers", "2000",
                                     "--rate", "5000", "--seconds", "1"],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    recs = [json.loads(line) for line in open(out)]
    assert sorted((r["stack"], r["measure"]) for r in recs) == [
        ("Cython", "memory"), ("Cython", "pingpong"), ("Cython", "sockets"),
        ("pure Python", "memory"), ("pure Python", "pingpong"), ("pure Python", "sockets")]
    assert all(r["kind"] == "swarm-bench" and r["env"]["commit"] for r in recs)
    socks = {r["stack"]: r for r in recs if r["measure"] == "sockets"}
    assert socks["pure Python"]["implementation"] == "python"
    assert socks["Cython"]["implementation"] == "cython"
    assert "| Cython |" in res.stdout and "peers ready" in res.stderr


def test_the_bench_command_refuses_pings_closer_than_two_slots():
    import subprocess

    from conftest import PELOTARI

    res = subprocess.run(PELOTARI + ["swarm", "bench", "--only", "sockets", "--peers", "1000",
                                     "--rate", "9000"], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and "--rate at most 5,000" in res.stderr


def test_the_sockets_measure_under_pelotari_pure_python_is_one_line_before_any_measure(tmp_path):
    """It used to measure for a while, then fail unclearly (the generator needs the C MACs)."""
    import os
    import subprocess

    from conftest import PELOTARI

    env = dict(os.environ, PELOTARI_PURE_PYTHON="1")
    for stack in ("cython", "python"):
        res = subprocess.run(PELOTARI + ["swarm", "bench", "--stack", stack, "-o",
                                         str(tmp_path / "swarm.jsonl")],
                             capture_output=True, text=True, timeout=120, env=env,
                             stdin=subprocess.DEVNULL)
        assert res.returncode == 1 and res.stderr == (
            "Error: the sockets measure needs the compiled build in this process (its load "
            "generator, for either stack), which PELOTARI_PURE_PYTHON turns off: unset "
            "PELOTARI_PURE_PYTHON (--stack python still measures the pure-Python node) or pass "
            "--skip-sockets\n"), res.stderr
    assert not (tmp_path / "swarm.jsonl").exists()
