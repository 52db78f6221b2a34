"""The bench: lossless-rate search on modelled systems, the table, and a real small run."""
import json
import os
import re
import subprocess

import pytest

from pelotari.harness.results import combine_rounds, table
from pelotari.harness.runner import BenchRunner, Failed, Measured, Probe, Skipped, Turn
from pelotari.harness.search import find_lossless_rate
from pelotari.harness.systems import Unavailable
from pelotari.harness.trial import Scenario, TrialResult

from conftest import PELOTARI


def model(capacity, subscribers=4, publisher_max=float("inf"), flaky_calls=()):
    """A system that delivers everything up to `capacity` msgs/s in and drops the excess
    (and 10 % more on the trials numbered in flaky_calls)."""
    calls = []

    def trial(rate):
        flaky = len(calls) in flaky_calls
        calls.append(rate)
        sent_rate = min(rate or publisher_max, publisher_max)
        if sent_rate == float("inf"):
            sent_rate = capacity * 3
        kept = min(sent_rate, capacity)
        if flaky:
            kept *= 0.9
        return TrialResult(offered_rate=rate, sent=int(sent_rate), unique=int(kept * subscribers),
                           expected=int(sent_rate) * subscribers, duplicates=0, reordered=0,
                           elapsed=1.0, server_cpu=0.5, client_cpu={},
                           latency={"p50_ns": 1000, "p99_ns": 5000})
    trial.calls = calls
    return trial


def test_search_finds_the_capacity_within_the_precision():
    trial = model(100_000)
    found = find_lossless_rate(trial, precision=0.05, max_probes=20)
    assert 100_000 / 1.05 <= found.rate <= 100_000
    assert len(found.repeats) == 3 and all(r.loss == 0 for r in found.repeats)
    assert [t.offered_rate for t in found.latency_trials] == [found.rate / 2] * 3
    assert found.latency() == {"p50_ns": 1000, "p99_ns": 5000}


def test_search_stops_climbing_when_the_publishers_are_the_limit():
    trial = model(1_000_000, publisher_max=50_000)
    found = find_lossless_rate(trial, max_probes=20)
    assert found.rate == pytest.approx(50_000)
    # ceiling, 50k (passes), 75k (publishers fall short: stop), 3 repeats, 3 latency trials
    assert trial.calls[:3] == [0.0, 50_000, 75_000] and len(trial.calls) == 9


def test_search_steps_down_when_the_repeats_are_not_lossless():
    clean = find_lossless_rate(model(100_000), precision=0.05, max_probes=20)
    first_repeat = len(clean.probes) - 6  # the probes end with 3 repeats and 3 latency trials
    rate = clean.repeats[0].offered_rate
    # Two of the three repeats lose 10 %: the median is not lossless, so step down and repeat.
    trial = model(100_000, flaky_calls={first_repeat, first_repeat + 1})
    found = find_lossless_rate(trial, precision=0.05, max_probes=20)
    assert trial.calls[first_repeat:first_repeat + 6] == [rate] * 3 + [pytest.approx(rate * 0.9)] * 3
    assert found.median("loss") == 0


def buffering_model(capacity, subscribers=4, duration=1.0):
    """A broker that never drops (it buffers without limit) but falls behind above capacity."""
    def trial(rate):
        sent = int((rate or capacity * 5) * duration)
        return TrialResult(offered_rate=rate, sent=sent, unique=sent * subscribers,
                           expected=sent * subscribers, duplicates=0, reordered=0,
                           elapsed=duration, server_cpu=0.5, client_cpu={}, latency={},
                           received_until=max(duration, sent / capacity))
    return trial


def test_a_broker_that_buffers_is_held_to_the_rate_it_keeps_up_with():
    found = find_lossless_rate(buffering_model(200_000), precision=0.05, max_probes=20)
    assert 200_000 / 1.05 <= found.rate <= 200_000 * 1.1  # lag within 10 % of the duration
    assert all(r.sustained for r in found.repeats)
    flat_out = found.probes[0]
    assert flat_out.loss == 0 and not flat_out.sustained  # no loss, yet 5x behind
    assert flat_out.delivered_rate == pytest.approx(200_000 * 4)  # counted to the last receipt


def test_search_gives_zero_when_nothing_is_lossless():
    found = find_lossless_rate(model(10), floor=100)
    assert found.rate == 0 and found.repeats == []


def rec(system, scenario, rate, **kw):
    return {"kind": "bench", "system": system, "scenario": scenario, "delivered_rate": rate,
            "client_bound": False, "latency_p99_us": 120.0, "server_cpu_us_per_msg": 1.5, **kw}


def test_table_shows_rates_and_pelotari_ratios():
    records = [rec("pelotari", "S=16 N=4 P=1", 900_000), rec("reference", "S=16 N=4 P=1", 1_000_000),
               rec("asyncio", "S=16 N=4 P=1", 50_000, client_bound=True),
               {"kind": "bench-skipped", "system": "redis", "reason": "not installed"}]
    assert table(records, ["pelotari", "reference", "asyncio"]).splitlines() == [
        "| scenario | pelotari msgs/s | reference msgs/s | asyncio msgs/s | pelotari/reference"
        " | pelotari p99 µs | pelotari µs CPU/msg |",
        "|---|---|---|---|---|---|---|",
        "| S=16 N=4 P=1 | 900.0k | 1.00M | 50.0k (client-bound) | 0.90 | 120 | 1.50 |",
    ]


def test_table_shows_every_target_ratio_that_both_sides_ran():
    sc = "S=16 N=4 P=1"
    records = [rec("pelotari", sc, 600_000), rec("pelotari-plain", sc, 270_000),
               rec("pelotari-packed", sc, 20_000_000, latency_p99_us=4000.0),
               rec("reference", sc, 300_000), rec("reference-gso", sc, 500_000),
               rec("redis", sc, 4_000_000), rec("nats", sc, 5_000_000)]
    systems = ["pelotari", "pelotari-plain", "pelotari-packed", "reference", "reference-gso",
               "redis", "nats"]
    head, _, row = table(records, systems).splitlines()
    cells = dict(zip(head.strip("| ").split(" | "), row.strip("| ").split(" | ")))
    assert cells["pelotari-plain/reference"] == "0.90" and cells["pelotari/reference"] == "2.00"
    assert cells["pelotari/reference-gso"] == "1.20" and cells["pelotari/best peer"] == "0.12"
    assert cells["pelotari-packed/redis"] == "5.00" and cells["pelotari-packed/nats"] == "4.00"
    assert cells["pelotari-packed/best peer"] == "4.00"
    assert cells["pelotari-packed p99 µs"] == "4000" and cells["pelotari-plain µs CPU/msg"] == "1.50"
    without_peers = table(records[:4], systems[:4]).splitlines()[0]
    assert "best peer" not in without_peers and "redis" not in without_peers


def test_rounds_combine_into_the_median_round_with_every_round_kept():
    rounds = [rec("pelotari", "S=16 N=4 P=1", rate, lossless_rate=rate / 4, loss=0.0)
              for rate in (300_000, 100_000, 200_000)]
    combined = combine_rounds(rounds)
    assert combined["delivered_rate"] == 200_000 and combined["rounds_run"] == 3
    assert [r["delivered_rate"] for r in combined["rounds"]] == [300_000, 100_000, 200_000]
    assert combine_rounds(rounds[:2])["delivered_rate"] == 100_000  # the lower middle of two
    assert "rounds" not in rounds[0] and combine_rounds(rounds[:1]) is rounds[0]


def test_rounds_skip_a_round_that_did_not_run_and_keep_a_system_that_never_ran():
    ran = rec("reference", "S=16 N=4 P=1", 500_000, lossless_rate=1.0, loss=0.0)
    missing = {"kind": "bench-skipped", "system": "reference", "reason": "gone"}
    combined = combine_rounds([missing, ran])
    assert combined["delivered_rate"] == 500_000 and len(combined["rounds"]) == 1
    assert combined["rounds_run"] == 2
    assert combine_rounds([missing, missing]) is missing


def test_unavailable_system_is_reported_not_faked(tmp_path):
    env = dict(os.environ, PELOTARI_BENCH_DIR=str(tmp_path))
    out = subprocess.run(PELOTARI + ["bench", "--list"], capture_output=True, text=True, env=env)
    assert out.returncode == 0
    assert re.search(r"^reference +unavailable: needs the source tree's bench/ folder",
                     out.stdout, re.M)
    assert re.search(r"^pelotari +ok$", out.stdout, re.M)
    # the names' column is as wide as the longest name: every status starts in one column
    first = out.stdout.splitlines()[0]
    column = first.index("ok")
    assert all(line[column - 1] == " " and line[column] != " "
               for line in out.stdout.splitlines()[::2])
    res = subprocess.run(PELOTARI + ["bench", "--systems", "reference", "-S", "16", "-N", "1",
                                     "-o", str(tmp_path / "r.jsonl")],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0 and "skipping reference: needs the source tree" in res.stderr
    (skipped,) = [json.loads(line) for line in open(tmp_path / "r.jsonl")]
    assert skipped["kind"] == "bench-skipped" and skipped["system"] == "reference"


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_bad_bench_options_are_one_line():
    for args, needle in ((["--systems", "nope"], "unknown system 'nope'"),
                         (["-S", "8"], "at least 16"), (["-N", "x"], "comma-separated")):
        res = subprocess.run(PELOTARI + ["bench", *args], capture_output=True, text=True)
        assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr


@pytest.mark.e2e
def test_a_small_bench_run_writes_records_and_the_table(tmp_path):
    out = tmp_path / "bench.jsonl"
    res = subprocess.run(PELOTARI + ["bench", "--systems", "pelotari,reference", "-S", "16",
                                     "-N", "2", "-d", "0.3", "--repeats", "1", "--rounds", "2",
                                     "-o", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    records = [json.loads(line) for line in open(out)]
    assert [r["system"] for r in records] == ["pelotari", "reference"]
    # The rounds take the systems in turn, and each record is its system's median round.
    turns = [res.stderr.index(f"{name:<13} S=16 N=2 P=1 round {k}/2")
             for k, name in ((1, "pelotari"), (1, "reference"), (2, "pelotari"), (2, "reference"))]
    assert turns == sorted(turns)
    # stderr is no terminal here: whole lines, no carriage returns or terminal escapes.
    assert "\r" not in res.stderr and "\033" not in res.stderr
    assert res.stderr.count("lossless") >= 4  # every round's result on its own line
    for r in records:
        assert len(r["rounds"]) == 2 and r["rounds_run"] == 2
        assert r["delivered_rate"] == min(x["delivered_rate"] for x in r["rounds"])
    for r in records:
        assert r["kind"] == "bench" and r["scenario"] == "S=16 N=2 P=1"
        # figures, not outcomes: how fast and how lossless is the machine's business (a loaded
        # one found 31 % loss at the rate an idle one finds lossless); the record holds them
        assert r["lossless_rate"] > 0 and r["delivered_rate"] > 0 and 0 <= r["loss"] <= 1
        assert r["runs"][0]["duplicates"] == 0
        assert r["latency_p99_us"] > 0 and r["server_cpu_s"] > 0
        assert {"commit", "time", "cores", "kernel", "python", "versions"} <= set(r["env"])
        assert r["system_version"]
    assert "| S=16 N=2 P=1 |" in res.stdout and "pelotari/reference" in res.stdout
    assert records[0]["system_version"] == "pelotari 0.1.0"
    assert records[1]["system_version"].startswith(("cc ", "gcc "))  # the compiler that built it
    assert "[#####...............] 2/4" in res.stderr  # the progress bar, a quarter full at the second


def test_memory_trend_ignores_warm_up_and_catches_growth():
    from pelotari.harness.soak import MemoryTrend

    flat = MemoryTrend()
    for t in range(0, 601, 5):  # buffers fill in the first minute, then nothing moves
        flat.add(float(t), 20_000 + min(t, 30) * 100 + (t % 10 == 0) * 8)
    s = flat.summary()
    assert flat.flat() and s["growth_after_warmup_kib"] <= 8 and abs(s["slope_kib_per_min"]) < 2
    leaking = MemoryTrend()
    for t in range(0, 601, 5):
        leaking.add(float(t), 20_000 + t * 4)  # 240 KiB a minute
    s = leaking.summary()
    assert not leaking.flat() and s["slope_kib_per_min"] == pytest.approx(240)
    assert s["growth_after_warmup_kib"] == 4 * 600 - 4 * 60
    slow = MemoryTrend()
    for t in range(0, 601, 5):
        slow.add(float(t), 20_000 + t // 2)  # 60 KiB a minute: 540 KiB over the steady part
    assert slow.flat(tolerance_kib=1024) and not slow.flat(tolerance_kib=256)


@pytest.mark.e2e
def test_soak_samples_the_servers_memory_and_writes_a_record(tmp_path):
    out = tmp_path / "soak.jsonl"
    # A 3-second run: its slope is extrapolated to a minute, so 100 KiB of allocator noise
    # reads as 2 MiB/min (it failed CI twice that way): the tolerance is the run's, 8 MiB.
    res = subprocess.run(PELOTARI + ["soak", "--minutes", "0.05", "--rate", "2000",
                                     "--interval", "0.5", "-N", "2", "--tolerance", "8192",
                                     "-o", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    import re

    got, want = map(int, re.search(r"(\d+) of (\d+) delivered", res.stdout).groups())
    assert "FLAT" in res.stdout and got == want and want > 0  # ~2,000/s x 3 s x 2, fewer if starved
    (rec,) = [json.loads(line) for line in open(out)]
    assert rec["kind"] == "soak" and rec["flat"] and len(rec["memory_samples"]) >= 4
    assert rec["trial"]["loss"] < 0.001 and rec["memory"]["rss_end_kib"] > 1000


def test_soak_refuses_an_unknown_system_in_one_line():
    res = subprocess.run(PELOTARI + ["soak", "--system", "nope"], capture_output=True, text=True)
    assert res.returncode == 2 and "unknown system 'nope'" in res.stderr


class FakeSystem:
    """A system the runner can start: `why` says why it cannot run (None: it can)."""

    def __init__(self, name, capacity, why=None, fail_on=()):
        self.name, self.capacity, self.why, self.fail_on = name, capacity, why, set(fail_on)
        self.sessions = 0
        self.asked = []  # (timeline, interval) of each trial

    def check(self):
        return self.why

    def version(self):
        return f"{self.name} 1.0"


class FakeSession:
    """A system on a scenario as a model; each trial costs a second of the fake clock."""

    def __init__(self, system, scenario, clock, log):
        system.sessions += 1
        self.system = system
        if system.sessions in system.fail_on:
            raise Unavailable(f"{system.name} exited during the run")
        self.trial_model = model(system.capacity, subscribers=scenario.subscribers)
        self.clock, self.log = clock, log
        log.append((system.name, scenario.name))

    def trial(self, rate, duration, timeline=0.0, interval=0.0):
        self.clock.now += duration
        self.system.asked.append((timeline, interval))
        return self.trial_model(rate)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def fake_runner(tmp_path, systems, rounds=1, subscribers=(1,)):
    clock, log = FakeClock(), []
    runner = BenchRunner({s.name: s for s in systems}, [s.name for s in systems],
                         [Scenario(16, n) for n in subscribers], 1.0, tmp_path / "r.jsonl",
                         repeats=1, rounds=rounds, precision=0.05, env={"commit": "x"},
                         placement="here",
                         session=lambda system, scenario: FakeSession(system, scenario, clock, log),
                         clock=clock)
    return runner, log


def test_the_runner_takes_systems_in_turn_and_keeps_each_ones_median_round(tmp_path):
    fast, slow = FakeSystem("fast", 200_000), FakeSystem("slow", 50_000)
    runner, log = fake_runner(tmp_path, [fast, slow], rounds=3, subscribers=(1, 4))
    events = []
    done = runner.run(events.append)
    assert log == [("fast", "S=16 N=1 P=1"), ("slow", "S=16 N=1 P=1")] * 3 + [
        ("fast", "S=16 N=4 P=1"), ("slow", "S=16 N=4 P=1")] * 3
    measured = [e for e in events if isinstance(e, Measured)]
    assert [(e.turn.number, e.turn.total, e.turn.system, e.turn.round) for e in measured[:3]] == [
        (1, 12, "fast", 0), (2, 12, "slow", 0), (3, 12, "fast", 1)]
    assert all(isinstance(e.turn, Turn) for e in events if isinstance(e, Probe))
    assert done.runnable == ["fast", "slow"] and len(done.records) == 4
    assert [(r["system"], r["scenario"], r["rounds_run"]) for r in done.records] == [
        ("fast", "S=16 N=1 P=1", 3), ("slow", "S=16 N=1 P=1", 3),
        ("fast", "S=16 N=4 P=1", 3), ("slow", "S=16 N=4 P=1", 3)]
    assert 200_000 / 1.05 <= done.records[0]["lossless_rate"] <= 200_000
    assert done.records[3]["delivered_rate"] == pytest.approx(4 * done.records[3]["lossless_rate"])
    written = [json.loads(line) for line in open(tmp_path / "r.jsonl")]
    assert written == done.records
    assert done.elapsed == sum(1 for e in events if isinstance(e, Probe))  # a second per trial


def test_the_runner_reports_the_eta_from_the_pace_so_far(tmp_path):
    runner, _ = fake_runner(tmp_path, [FakeSystem("a", 100_000), FakeSystem("b", 100_000)])
    events = []
    runner.run(events.append)
    turns_ = [e.turn for e in events if isinstance(e, Measured)]
    first_turn = sum(1 for e in events if isinstance(e, Probe) and e.turn.number == 1)
    assert turns_[0].eta is None and turns_[0].done == 0
    assert turns_[1].eta == pytest.approx(first_turn * 1.0) and turns_[1].done == 0.5


def test_the_runner_skips_a_system_that_cannot_run_or_stops_running(tmp_path):
    gone = FakeSystem("gone", 1, why="not installed")
    flaky = FakeSystem("flaky", 100_000, fail_on={1})  # its first session dies, its second runs
    runner, log = fake_runner(tmp_path, [gone, flaky], rounds=2)
    events = []
    done = runner.run(events.append)
    assert events[0] == Skipped("gone", "not installed")
    failed = [e for e in events if isinstance(e, Failed)]
    assert [(e.turn.system, e.turn.round, e.reason) for e in failed] == [
        ("flaky", 0, "flaky exited during the run")]
    assert done.runnable == ["flaky"] and log == [("flaky", "S=16 N=1 P=1")]
    skipped, ran = done.records
    assert skipped == {"kind": "bench-skipped", "system": "gone", "reason": "not installed",
                       "env": {"commit": "x"}}
    assert ran["kind"] == "bench" and ran["rounds_run"] == 2 and len(ran["rounds"]) == 1
    assert ran["system_version"] == "flaky 1.0" and ran["placement"] == "here"


def test_the_soak_sampler_samples_every_interval_until_stopped():
    from pelotari.harness.soak import MemoryTrend, sample_memory

    clock, memory, seen, waits = FakeClock(), MemoryTrend(), [], []
    readings = iter([1000, 1100, 1200, 1300])

    def stop(interval):  # as Event.wait: waits `interval`, true once the trial is over
        waits.append(interval)
        clock.now += interval
        return len(waits) == 3

    sample_memory(memory, lambda: next(readings), interval=5.0, stop=stop, clock=clock,
                  started=clock.now - 1.0, on_sample=lambda t, m: seen.append((t, len(m.samples))))
    assert memory.samples == [(1.0, 1000), (6.0, 1100), (11.0, 1200)]
    assert seen == [(1.0, 1), (6.0, 2), (11.0, 3)] and waits == [5.0] * 3

    def gone():
        raise ProcessLookupError("no such process")

    quiet = MemoryTrend()
    sample_memory(quiet, gone, interval=5.0, stop=stop, clock=clock, started=0.0)
    assert quiet.samples == []  # the server exited: the sampler ends, the trial reports it


def test_a_soak_samples_while_the_trial_runs_and_once_after():
    import itertools
    import threading

    from pelotari.harness.soak import soak

    three = threading.Event()
    kib = itertools.count(5000, 100)

    class Session:
        def trial(self, rate, duration, idle=0.5):
            assert three.wait(10)  # the sampler runs beside the trial
            return model(100_000)(rate)

    done = soak(Session(), 2000.0, 60.0, interval=0.001, tolerance_kib=512,
                read_kib=lambda: next(kib), on_sample=lambda t, m: len(m.samples) >= 3 and three.set())
    n = len(done.memory.samples)
    assert [k for _, k in done.memory.samples] == list(range(5000, 5000 + 100 * n, 100))
    assert len(done.memory.samples) >= 4 and done.trial.offered_rate == 2000.0
    assert done.passed == (done.flat and done.trial.loss < 0.001) and done.tolerance_kib == 512
    rec = done.record("pelotari", Scenario(16, 2), 1.0, 0.8, "here", {})
    assert rec["kind"] == "soak" and rec["rate"] == 2000.0 and rec["minutes"] == 1.0
    assert rec["memory_samples"] == done.memory.samples and rec["flat"] == done.flat


def test_memory_slope_is_the_least_squares_fit():
    from pelotari.harness.soak import MemoryTrend

    trend = MemoryTrend()
    for t, k in ((0, 0), (10, 100), (20, 100), (30, 400), (40, 300)):
        trend.add(float(t), 10_000 + k)
    # Steady samples are t >= 4 s: least squares over (10,100),(20,100),(30,400),(40,300).
    assert trend.slope_kib_per_min() == pytest.approx(60 * 9.0)
    one_instant = MemoryTrend([(0.0, 5), (0.0, 9)])
    assert one_instant.slope_kib_per_min() == 0.0


# ---- `pelotari bench --latency-rates` (pelotari/harness/rates.py) ------------------------------

def fake_rates_runner(tmp_path, systems, rates=(10_000, 50_000), trials=2, interval=0.0):
    from pelotari.harness.rates import RatesRunner

    clock, log = FakeClock(), []
    return RatesRunner({s.name: s for s in systems}, [s.name for s in systems],
                       [Scenario(16, 4)], rates, 1.0, tmp_path / "r.jsonl", trials,
                       env={"commit": "x"}, placement="here", interval=interval,
                       session=lambda system, scenario: FakeSession(system, scenario, clock,
                                                                    log)), log


def test_the_rates_runner_takes_systems_in_turn_trial_after_trial(tmp_path):
    from pelotari.harness.rates import RateMeasured, RateTrial

    fast, slow = FakeSystem("fast", 200_000), FakeSystem("slow", 30_000)
    runner, log = fake_rates_runner(tmp_path, [fast, slow], interval=0.05)
    events = []
    records = runner.run(events.append)
    # a fresh session per system and trial, the systems taking turns; every trial keeps the
    # worst latency of each millisecond and is published with the runner's interval
    assert fast.asked == slow.asked == [(0.001, 0.05)] * 4
    assert log == [("fast", "S=16 N=4 P=1"), ("slow", "S=16 N=4 P=1")] * 2
    asked = [(e.system, e.rate, e.trial, e.number, e.total) for e in events
             if isinstance(e, RateTrial)]
    assert asked == [("fast", 10_000, 0, 1, 8), ("fast", 50_000, 0, 2, 8),
                     ("slow", 10_000, 0, 3, 8), ("slow", 50_000, 0, 4, 8),
                     ("fast", 10_000, 1, 5, 8), ("fast", 50_000, 1, 6, 8),
                     ("slow", 10_000, 1, 7, 8), ("slow", 50_000, 1, 8, 8)]
    assert len([e for e in events if isinstance(e, RateMeasured)]) == 8
    assert [(r["system"], r["offered_rate"], r["trial"], r["lossless"]) for r in records] == [
        ("fast", 10_000, 0, True), ("fast", 50_000, 0, True), ("slow", 10_000, 0, True),
        ("slow", 50_000, 0, False), ("fast", 10_000, 1, True), ("fast", 50_000, 1, True),
        ("slow", 10_000, 1, True), ("slow", 50_000, 1, False)]  # 30,000/s: 40 % of 50k lost
    assert records[3]["loss"] == pytest.approx(0.4)
    assert all(r["kind"] == "latency-rate" and r["scenario"] == "S=16 N=4 P=1" and
               r["system_version"] == f"{r['system']} 1.0" and r["placement"] == "here"
               and r["publish_interval_s"] == 0.05 and r["stalled_ms"] == -1  # (no timeline)
               for r in records)
    assert [json.loads(line) for line in open(tmp_path / "r.jsonl")] == records


def test_the_rates_runner_skips_a_system_that_cannot_run_or_dies_in_a_trial(tmp_path):
    from pelotari.harness.rates import RateFailed

    gone = FakeSystem("gone", 1, why="not installed")
    flaky = FakeSystem("flaky", 100_000, fail_on={1})  # its first session dies
    runner, log = fake_rates_runner(tmp_path, [gone, flaky], rates=(1_000, 2_000, 3_000))
    events = []
    records = runner.run(events.append)
    assert records[0] == {"kind": "bench-skipped", "system": "gone", "reason": "not installed",
                          "env": {"commit": "x"}}
    (failed,) = [e for e in events if isinstance(e, RateFailed)]
    assert (failed.at.system, failed.at.trial, failed.reason) == (
        "flaky", 0, "flaky exited during the run")
    # the second trial ran all three rates, numbered after the first trial's three places
    assert [(r["offered_rate"], r["trial"]) for r in records[1:]] == [
        (1_000, 1), (2_000, 1), (3_000, 1)]
    numbers = [e.number for e in events if hasattr(e, "number")]
    assert numbers == [4, 5, 6]


@pytest.mark.slow  # compiles and runs a C ping-pong and the wake-up meter
def test_the_loopback_floor_is_half_a_round_trip_over_udp_and_tcp():
    from pelotari.harness.rates import floor_records

    import os

    cpus = sorted(os.sched_getaffinity(0))[:2]
    recs = floor_records(1, {"commit": "x"}, "here", wakeup_cpus=set(cpus))
    assert [(r["kind"], r.get("transport", r.get("cpu"))) for r in recs] == [
        *[("latency-wakeup", cpu) for cpu in cpus], ("latency-floor", "udp"),
        ("latency-floor", "tcp")]
    for r in recs[len(cpus):]:
        assert r["count"] > 0 and 0 < r["latency_p50_us"] <= r["latency_p99_us"] <= \
            r["latency_max_us"]
    for r in recs[:len(cpus)]:  # each core's napping thread: counts that nest
        assert r["naps"] > 0 and r["nap_us"] == 50 and r["seconds"] >= 2.0
        assert r["late_500us"] >= r["late_1ms"] >= r["late_2ms"] >= r["late_4ms"] >= 0
        assert (r["worst_us"] >= 1000) == (r["late_1ms"] > 0)


def test_a_trial_that_heard_something_late_but_delivered_every_message_soon_kept_up():
    # NATS's agent at 10,000/s: its last activity 0.3 s after publishing ended (the bench's
    # `sustained` says no), every message within 4 ms (it kept up).
    from pelotari.harness.rates import kept_up, lossless

    def trial(max_ms, until):
        return TrialResult(offered_rate=10_000, sent=20_000, unique=80_000, expected=80_000,
                           duplicates=0, reordered=0, elapsed=2.0, server_cpu=0.1,
                           client_cpu={}, latency={"p99_ns": 300_000, "max_ns": max_ms * 1e6},
                           received_until=until)
    late_activity = trial(4, 2.3)
    assert not late_activity.sustained and kept_up(late_activity) and lossless(late_activity)
    behind = trial(300, 2.3)  # a message 0.3 s late: it fell behind
    assert not kept_up(behind) and not lossless(behind)
    assert kept_up(trial(300, 2.1))  # the last came within the margin (0.2 s of 2 s)


def test_the_rates_table_says_when_no_trial_ran():
    from pelotari.cli.bench import _rates_table

    assert _rates_table([], []) == "no trial ran (the reasons are above)"


def _rate_record(system, scenario, p99, rate=50_000.0):
    return {"system": system, "scenario": scenario, "offered_rate": rate, "lossless": True,
            "latency_p50_us": p99 / 4, "latency_p99_us": p99, "latency_max_us": p99 * 10,
            "client_bound": False, "delivered_rate": 4 * rate,
            "subscribers": int(scenario.split("N=")[1].split()[0])}


def test_the_rates_table_names_its_scenario():
    from pelotari.cli.bench import _rates_table

    one = _rates_table([_rate_record("pelotari", "S=16 N=4 P=1", 300.0),
                        _rate_record("reference", "S=16 N=4 P=1", 310.0)], [])
    assert one.splitlines()[0] == "S=16 N=4 P=1:"
    assert "| pelotari | 300 µs (300–300) |" in one
    assert "| pelotari | 75 (75–75); 3,000 (3,000–3,000) |" in one  # p50; max
    two = _rate_record("pelotari", "S=16 N=10000 P=1", 900.0, rate=100.0)
    both = _rate_record("pelotari", "S=16 N=4 P=1", 300.0, rate=100.0)
    lines = _rates_table([both, two], []).splitlines()
    assert lines[0].startswith("| system |")  # each row names its scenario instead
    assert any(line.startswith("| pelotari (S=16 N=10000 P=1) |") for line in lines)


@pytest.mark.parametrize("args, why", [
    (["--pack-interval", "0.05"], "needs --latency-rates"),
    (["--latency-rates", "100", "--systems", "pelotari-packed,nats", "--pack-interval", "0.05"],
     "nats has no pack interval"),
    (["--latency-rates", "100", "-N", "16385"], "at most 16,384"),
    (["--latency-rates", "100", "-N", "0,4"], "0: every number must be positive"),
    (["--latency-rates", "100,,200"], "not a comma-separated list of whole numbers"),
    (["--trials", "3"], "needs --latency-rates"),
    (["--latency-rates", "100", "--rounds", "3"], "not to --latency-rates"),
    (["--latency-rates", "100", "--repeats", "3"], "not to --latency-rates"),
    (["--latency-rates", "10,100"], "at least 100 messages"),
    (["--latency-rates", "100", "-d", "0.5"], "at least 100 messages"),
], ids=["without-rates", "a-peer", "too-many-subscribers", "a-zero", "an-empty-item",
        "trials-without-rates", "rounds-with-rates", "repeats-with-rates", "a-rate-too-low",
        "a-trial-too-short"])
def test_bench_refuses_what_it_cannot_run_in_one_line(args, why):
    from click.testing import CliRunner

    from pelotari.cli import main

    res = CliRunner().invoke(main, ["bench", *args, "-o", "/dev/null"])
    assert res.exit_code == 2 and why in res.output, res.output


def test_latency_rates_with_no_trial_run_exits_with_an_error(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from pelotari.cli import main
    from pelotari.harness import rates

    monkeypatch.setattr(rates, "floor_records", lambda *args, **kw: [])
    monkeypatch.setattr(rates.RatesRunner, "run", lambda self, show: [])
    res = CliRunner().invoke(main, ["bench", "--latency-rates", "100", "--systems", "pelotari",
                                    "-o", str(tmp_path / "r.jsonl")])
    assert res.exit_code == 1 and "no trial ran" in res.output, res.output


def test_a_busy_machine_is_named_before_the_trials():
    from pelotari.cli.bench import _busy_warning
    from pelotari.harness.rates import BUSY_LATE_PER_S

    def wake(cpu, late):
        return {"kind": "latency-wakeup", "cpu": cpu, "seconds": 2.0, "late_1ms": late}
    quiet = [wake(0, 3), wake(0, 2), wake(1, 0)]
    assert _busy_warning(quiet) == ""
    at_limit = [wake(0, 2 * BUSY_LATE_PER_S)]  # exactly the limit: still quiet
    assert _busy_warning(at_limit) == ""
    busy = [wake(0, 82), wake(0, 84), wake(0, 80), wake(1, 0)]
    assert _busy_warning(busy).startswith("warning: the machine is busy: core 0 woke at least "
                                          "1 ms late 41.0 times a second")
    assert "core 1" not in _busy_warning(busy)
    from pelotari.analysis.report_fyrehose import BUSY_LATE_PER_S as SUMMARYS
    assert SUMMARYS == BUSY_LATE_PER_S  # the summary flags the same runs the bench warned of
