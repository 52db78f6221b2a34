"""The Spark trend transformations on small fixture data with exact expected values, through a
session-scoped local SparkSession (as chispa's conftest does), and `pelotari trend` end to end."""
import datetime
import json
import math
import subprocess

import pytest

pyspark = pytest.importorskip("pyspark", reason="the analysis extra is part of the test set-up")

from pelotari.analysis import report, trend  # noqa: E402

from conftest import PELOTARI  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    from pelotari.analysis.spark import session

    s = session("local[2]", "pelotari-tests")
    yield s
    s.stop()


def ts(text):
    return datetime.datetime.fromisoformat(text).replace(tzinfo=None)


def bench_record(system, scenario, rate, commit, time, kind="bench", p99=100.0, client_bound=None):
    payload, subs = (int(x.split("=")[1]) for x in scenario.split()[:2])
    p99 = float(p99)
    return {"kind": kind, "system": system, "scenario": scenario, "payload": payload,
            "subscribers": subs, "publishers": 1, "lossless_rate": rate / subs,
            "delivered_rate": rate, "ingress_rate": rate / subs, "loss": 0.0,
            "latency_p50_us": p99 / 4, "latency_p90_us": p99 / 2, "latency_p99_us": p99,
            "server_cpu_us_per_msg": 1.0, "client_bound": client_bound,
            "env": {"commit": commit, "time": time, "host": "h", "cores": 2, "kernel": "k"}}


RECORDS = [
    # commit aaa, two runs: medians of 100/300 and 200/400
    bench_record("pelotari", "S=16 N=4", 100.0, "aaa", "2026-11-01T10:00:00+00:00", p99=10),
    bench_record("pelotari", "S=16 N=4", 300.0, "aaa", "2026-11-01T11:00:00+00:00", p99=30),
    bench_record("reference", "S=16 N=4", 200.0, "aaa", "2026-11-01T10:00:00+00:00"),
    bench_record("reference", "S=16 N=4", 400.0, "aaa", "2026-11-01T11:00:00+00:00"),
    bench_record("redis", "S=16 N=4", 1000.0, "aaa", "2026-11-01T10:00:00+00:00"),
    bench_record("nats", "S=16 N=4", 2000.0, "aaa", "2026-11-01T10:00:00+00:00", client_bound=True),
    # commit bbb: pelotari falls 25 %, reference 5 %
    bench_record("pelotari", "S=16 N=4", 150.0, "bbb", "2026-11-02T10:00:00+00:00", p99=20),
    bench_record("reference", "S=16 N=4", 285.0, "bbb", "2026-11-02T10:00:00+00:00"),
    {"kind": "bench-skipped", "system": "zeromq", "reason": "not installed",
     "env": {"commit": "bbb", "time": "2026-11-02T10:00:00+00:00"}},
]


@pytest.fixture(scope="session")
def raw(spark):
    return spark.createDataFrame(RECORDS, schema=trend.BENCH_SCHEMA)


def collect(df, *order):
    return [r.asDict() for r in df.orderBy(*order).collect()]


def test_bench_runs_types_rows_and_drops_skipped(raw):
    runs = trend.bench_runs(raw)
    assert runs.count() == 8
    first = collect(runs.where("system = 'nats'"), "system")[0]
    assert first["run_time"] == ts("2026-11-01T10:00:00") and first["client_bound"] is True
    assert collect(runs.where("system = 'redis'"), "system")[0]["client_bound"] is False


def test_throughput_trend_is_the_median_per_commit(raw):
    t = trend.throughput_trend(trend.bench_runs(raw))
    rows = collect(t.select("system", "commit", "time", "delivered_rate", "runs", "client_bound"),
                   "system", "commit")
    assert rows == [
        {"system": "nats", "commit": "aaa", "time": ts("2026-11-01T10:00:00"), "delivered_rate": 2000.0, "runs": 1, "client_bound": True},
        {"system": "pelotari", "commit": "aaa", "time": ts("2026-11-01T10:00:00"), "delivered_rate": 200.0, "runs": 2, "client_bound": False},
        {"system": "pelotari", "commit": "bbb", "time": ts("2026-11-02T10:00:00"), "delivered_rate": 150.0, "runs": 1, "client_bound": False},
        {"system": "redis", "commit": "aaa", "time": ts("2026-11-01T10:00:00"), "delivered_rate": 1000.0, "runs": 1, "client_bound": False},
        {"system": "reference", "commit": "aaa", "time": ts("2026-11-01T10:00:00"), "delivered_rate": 300.0, "runs": 2, "client_bound": False},
        {"system": "reference", "commit": "bbb", "time": ts("2026-11-02T10:00:00"), "delivered_rate": 285.0, "runs": 1, "client_bound": False},
    ]


def test_ratios_to_every_other_system(raw):
    r = trend.ratios(trend.throughput_trend(trend.bench_runs(raw)))
    assert [(x["commit"], x["versus"], x["ratio"]) for x in collect(r, "commit", "versus")] == [
        ("aaa", "nats", 0.1), ("aaa", "redis", 0.2), ("aaa", "reference", 200 / 300),
        ("bbb", "reference", 150 / 285)]


def test_best_peer_ratio_picks_the_fastest_peer(raw):
    r = trend.ratios(trend.throughput_trend(trend.bench_runs(raw)))
    rows = collect(trend.best_peer_ratio(r), "commit")
    assert [(x["commit"], x["best_peer"], x["ratio"]) for x in rows] == [("aaa", "nats", 0.1)]


def test_target_ratios_pair_the_named_systems_and_the_best_peer(raw, spark):
    t = trend.throughput_trend(trend.bench_runs(raw))
    rows = collect(trend.target_ratios(t), "commit", "target")
    assert [(x["commit"], x["target"], x["ratio"]) for x in rows] == [
        ("aaa", "pelotari/best peer", 0.1), ("aaa", "pelotari/reference", 200 / 300),
        ("bbb", "pelotari/reference", 150 / 285)]  # bbb has no peers: no best-peer ratio
    extra = spark.createDataFrame([
        bench_record("pelotari-packed", "S=16 N=4", 5000.0, "aaa", "2026-11-01T10:00:00+00:00"),
        bench_record("pelotari-plain", "S=16 N=4", 270.0, "aaa", "2026-11-01T10:00:00+00:00"),
    ], schema=trend.BENCH_SCHEMA)
    t = trend.throughput_trend(trend.bench_runs(raw.unionByName(extra)))
    got = {x["target"]: x["ratio"] for x in collect(trend.target_ratios(t), "target")
           if x["commit"] == "aaa"}
    assert got == {"pelotari/best peer": 0.1, "pelotari/reference": 200 / 300,
                   "pelotari-plain/reference": 0.9, "pelotari-packed/redis": 5.0,
                   "pelotari-packed/nats": 2.5, "pelotari-packed/best peer": 2.5}


def test_regressions_flag_a_fall_beyond_the_threshold(raw):
    t = trend.throughput_trend(trend.bench_runs(raw))
    rows = collect(trend.regressions(t, 0.1), "system")
    assert [(x["system"], x["previous_commit"], x["commit"], x["previous_rate"],
             x["delivered_rate"], round(x["change"], 6)) for x in rows] == [
        ("pelotari", "aaa", "bbb", 200.0, 150.0, -0.25)]
    assert trend.regressions(t, 0.3).count() == 0  # -25 % is inside a 30 % threshold
    assert trend.regressions(t, 0.04).count() == 2  # reference's -5 % too


def test_latency_medians(raw):
    rows = collect(trend.latency(trend.bench_runs(raw)).where("system = 'pelotari'"), "commit")
    assert [(x["commit"], x["p50_us"], x["p90_us"], x["p99_us"]) for x in rows] == [
        ("aaa", 5.0, 10.0, 20.0), ("bbb", 5.0, 10.0, 20.0)]


MICRO = {"machine_info": {"node": "h"}, "commit_info": {"id": "aaa"},
         "datetime": "2026-11-01T10:00:00+00:00",
         "benchmarks": [{"name": "test_codec[decode-cython]", "group": None, "extra_info": {},
                         "stats": {"median": 4.5e-7, "ops": 2000000.0}},
                        {"name": "test_codec[decode-python]", "group": None, "extra_info": {},
                         "stats": {"median": 2.0e-6, "ops": 500000.0}},
                        {"name": "test_fanout[16-4]", "group": None,
                         "extra_info": {"messages_per_round": 3200},
                         "stats": {"median": 6.4e-5, "ops": 15625.0}}]}


def test_micro_benchmarks_from_pytest_benchmark_json(spark, tmp_path):
    path = tmp_path / "micro.json"
    path.write_text(json.dumps(MICRO))
    df = spark.read.option("multiLine", True).json(str(path))
    rows = collect(trend.micro_benchmarks(df), "name")
    assert [(x["commit"], x["name"], round(x["median_ns"], 6), round(x["per_item_ns"], 6), x["ops"])
            for x in rows] == [
        ("aaa", "test_codec[decode-cython]", 450.0, 450.0, 2000000.0),
        ("aaa", "test_codec[decode-python]", 2000.0, 2000.0, 500000.0),
        ("aaa", "test_fanout[16-4]", 64000.0, 20.0, 15625.0)]


def test_micro_benchmarks_without_extra_info(spark, tmp_path):
    old = dict(MICRO, benchmarks=[{k: v for k, v in b.items() if k != "extra_info"}
                                  for b in MICRO["benchmarks"]])
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    rows = collect(trend.micro_benchmarks(spark.read.option("multiLine", True).json(str(path))), "name")
    assert [round(x["per_item_ns"], 6) for x in rows] == [450.0, 2000.0, 64000.0]


def write_results(folder):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "bench-a.jsonl", "w") as f:
        for rec in RECORDS[:6]:
            f.write(json.dumps(rec) + "\n")
    with open(folder / "bench-b.jsonl", "w") as f:
        for rec in RECORDS[6:]:
            f.write(json.dumps(rec) + "\n")
    (folder / "micro.json").write_text(json.dumps(MICRO))
    (folder / "unrelated.json").write_text("{\"not\": \"a benchmark\"}")


def test_report_writes_parquet_plots_and_summary(spark, tmp_path):
    write_results(tmp_path / "results")
    files = report.find(tmp_path / "results")
    assert {k: len(v) for k, v in files.items()} == {"bench": 2, "micro": 1}
    tables = report.analyse(report.load(spark, files), 0.1)
    out = tmp_path / "trend"
    report.write(tables, out, 0.1)
    assert spark.read.parquet(str(out / "parquet" / "throughput")).count() == 6
    assert (out / "throughput.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "ratios.png").stat().st_size > 1000
    summary = (out / "summary.md").read_text()
    assert "| S=16 N=4 | pelotari | `aaa` | `bbb` | 0.2k | 0.1k | -25.0% |" in summary
    assert "| test_codec[decode-cython] | 450 | 450.0 | 2000000 |" in summary
    assert "| test_fanout[16-4] | 64000 | 20.0 | 15625 |" in summary
    assert "| scenario | pelotari | reference | pelotari/reference |" in summary  # latest: bbb
    assert "| S=16 N=4 | 0.1k | 0.3k | 0.53 |" in summary


@pytest.mark.e2e
def test_trend_command_end_to_end(tmp_path):
    write_results(tmp_path / "results")
    res = subprocess.run(PELOTARI + ["trend", str(tmp_path / "results")], capture_output=True,
                         text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "results" / "trend" / "summary.md").exists()
    noise = [line for line in res.stderr.splitlines()
             if "WARN" in line or "log level" in line or "incubator" in line]
    assert noise == []  # Spark starts quiet


def test_trend_on_an_empty_folder_is_one_line(tmp_path):
    res = subprocess.run(PELOTARI + ["trend", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stderr.strip() == f"Error: no bench results (*.jsonl) or pytest-benchmark files in {tmp_path}"


def test_trend_without_pyspark_says_how_to_get_it_in_one_line(tmp_path):
    import os

    fake = tmp_path / "nospark" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named pyspark')\n")
    write_results(tmp_path / "results")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "nospark"))
    res = subprocess.run(PELOTARI + ["trend", str(tmp_path / "results")], capture_output=True,
                         text=True, env=env, timeout=60)
    assert res.returncode == 1
    assert res.stderr.strip() == "Error: pelotari trend needs PySpark: pip install 'pelotari[analysis]'"


def test_target_lines_follow_the_scenario_order_and_take_the_latest_commit():
    targets = [
        {"target": "a/b", "scenario": "S=16 N=1000", "ratio": 3.0, "time": "2026-11-01"},
        {"target": "c/d", "scenario": "S=16 N=1", "ratio": 1.5, "time": "2026-11-01"},
        {"target": "c/d", "scenario": "S=256 N=1", "ratio": 0.5, "time": "2026-11-01"},
        {"target": "c/d", "scenario": "S=256 N=1", "ratio": 0.8, "time": "2026-11-02"},
        {"target": "a/b", "scenario": "S=16 N=1", "ratio": 2.0, "time": "2026-11-02"},
    ]
    scenarios = ["S=16 N=1", "S=16 N=1000", "S=256 N=1"]
    assert report.target_lines(targets, scenarios) == {
        "a/b": ([0, 1], [2.0, 3.0]),
        "c/d": ([0, 2], [1.5, 0.8]),
    }



# ---- the bully benchmark's records (pelotari/bully/bench.py) ----------------------------------

def bully_env(commit="aaa", time="2026-11-01T10:00:00+00:00"):
    return {"commit": commit, "time": time, "host": "h", "cores": 2, "kernel": "k"}


def election(where, how, n, elected, detect, messages, agreed=True, commit="aaa",
             time="2026-11-01T10:00:00+00:00", seed=0):
    rec = {"kind": "bully-election", "where": where, "how": how, "nodes": n, "agreed": agreed,
           "detect_s": detect, "elected_after_detect_s": elected - detect, "elected_s": elected,
           "textbook_messages": n * (n - 1) // 2, "env": bully_env(commit, time)}
    if where == "simulator":
        rec.update(seed=seed, messages=messages)
    else:  # real processes count every election message after the kill, and have no seed
        rec.update(messages_total_after_kill=messages)
    return rec


def sim_sync(method, spread, mean, worst, seed=0, commit="aaa"):
    return {"kind": "bully-sim-sync", "where": "simulator", "method": method, "nodes": 25,
            "seed": seed, "hour_off": True, "start_spread_s": 3600.0, "spread_ms": spread,
            "mean_error_ms": mean, "max_abs_error_ms": worst, "env": bully_env(commit)}


def proc_sync(right_after, spread, seed=0, unanswered=0):
    return {"kind": "bully-sync", "where": "processes", "nodes": 25, "seed": seed,
            "start_spread_s": 19.0, "spread_right_after_ms": right_after, "spread_ms": spread,
            "outliers": 1, "unanswered": unanswered, "env": bully_env()}


BULLY_RECORDS = [
    election("simulator", "kill", 5, 0.002, 0.001, 3, seed=0),
    election("simulator", "kill", 5, 0.004, 0.002, 5, seed=1),
    election("simulator", "kill", 5, 0.009, 0.003, 4, seed=2),
    election("simulator", "crash", 5, 2.0, 1.9, 3),
    election("simulator", "kill", 5, 0.5, 0.1, 9, commit="bbb", time="2026-11-02T10:00:00+00:00"),
    election("processes", "SIGKILL", 5, 3.2, 3.1, 4),
    election("processes", "SIGKILL", 5, 3.4, 3.0, 6, agreed=False),
    sim_sync("berkeley", 1.0, 0.5, 2.0, seed=0),
    sim_sync("berkeley", 3.0, -0.5, 4.0, seed=1),
    sim_sync("rtt-blind average", 10.0, 144000.0, 144010.0),
    proc_sync(0.9, 0.3, seed=0),
    proc_sync(1.1, 0.5, seed=1, unanswered=2),
]


@pytest.fixture(scope="session")
def bully_raw(spark):
    """The bully records and the fyrehose bench records, one table as report.load reads them."""
    return spark.createDataFrame(BULLY_RECORDS + RECORDS, schema=trend.BULLY_SCHEMA)


def test_bully_elections_are_medians_per_where_how_nodes_and_commit(bully_raw):
    rows = collect(trend.bully_elections(bully_raw), "where", "how", "commit")
    assert [(r["where"], r["how"], r["nodes"], r["commit"], r["runs"]) for r in rows] == [
        ("processes", "SIGKILL", 5, "aaa", 2), ("simulator", "crash", 5, "aaa", 1),
        ("simulator", "kill", 5, "aaa", 3), ("simulator", "kill", 5, "bbb", 1)]
    kill = rows[2]
    assert kill["time"] == ts("2026-11-01T10:00:00")
    assert kill["elected_s"] == pytest.approx(0.004) and kill["detect_s"] == pytest.approx(0.002)
    assert kill["elected_after_detect_s"] == pytest.approx(0.002)  # median of 1, 2, 6 ms
    assert (kill["messages"], kill["textbook_messages"], kill["agreed"]) == (4.0, 10, 1.0)


def test_bully_elections_coalesce_the_processes_message_count(bully_raw):
    procs = collect(trend.bully_elections(bully_raw).where("where = 'processes'"), "commit")[0]
    assert procs["messages"] == 5.0  # median of messages_total_after_kill 4 and 6
    assert procs["elected_s"] == pytest.approx(3.3) and procs["agreed"] == 0.5


def test_bully_elections_take_a_never_agreed_runs_nan_as_slowest(spark):
    recs = [election("processes", "SIGKILL", 5, t, t, 4, agreed=not math.isnan(t))
            for t in (1.0, float("nan"), 3.0)]
    row = collect(trend.bully_elections(spark.createDataFrame(recs, schema=trend.BULLY_SCHEMA)),
                  "nodes")[0]
    assert row["elected_s"] == 3.0 and row["agreed"] == pytest.approx(2 / 3)


def test_bully_sync_medians_and_berkeley_for_processes(bully_raw):
    rows = collect(trend.bully_sync(bully_raw), "where", "method")
    got = [(r["where"], r["method"], r["nodes"], r["runs"], r["spread_ms"], r["mean_error_ms"],
            r["max_abs_error_ms"], r["spread_right_after_ms"], r["outliers"], r["unanswered"])
           for r in rows]
    assert got == [("processes", "berkeley", 25, 2, 0.4, None, None, 1.0, 1, 2),
                   ("simulator", "berkeley", 25, 2, 2.0, 0.0, 3.0, None, None, None),
                   ("simulator", "rtt-blind average", 25, 1, 10.0, 144000.0, 144010.0, None,
                    None, None)]


def test_bully_functions_ignore_other_kinds(spark, raw, bully_raw):
    fyrehose_only = spark.createDataFrame(RECORDS, schema=trend.BULLY_SCHEMA)
    assert trend.bully_elections(fyrehose_only).count() == 0
    assert trend.bully_sync(fyrehose_only).count() == 0
    elections_only = spark.createDataFrame([r for r in BULLY_RECORDS if r["kind"] == "bully-election"],
                                           schema=trend.BULLY_SCHEMA)
    assert trend.bully_sync(elections_only).count() == 0
    # ... and the fyrehose tables are the same with bully records in the same files
    mixed = spark.createDataFrame(BULLY_RECORDS + RECORDS, schema=trend.BENCH_SCHEMA)
    assert trend.bench_runs(mixed).count() == 8
    assert (collect(trend.throughput_trend(trend.bench_runs(mixed)), "system", "commit")
            == collect(trend.throughput_trend(trend.bench_runs(raw)), "system", "commit"))


def test_latest_per_takes_each_configurations_newest_commit():
    rows = [{"where": "simulator", "commit": "aaa", "time": 1, "v": 1},
            {"where": "simulator", "commit": "bbb", "time": 2, "v": 2},
            {"where": "processes", "commit": "aaa", "time": 1, "v": 3}]
    assert [r["v"] for r in report.latest_per(rows, "where")] == [2, 3]


def test_durations_read_in_ms_or_s():
    assert [report._ms(v) for v in (0.123, 15.81, 1981.2, 143994.0, None, float("nan"))] == [
        "0.12 ms", "15.8 ms", "1981 ms", "144 s", "—", "—"]
    assert report._ms(-0.8, signed=True) == "-0.80 ms" and report._ms(2.5, signed=True) == "+2.50 ms"


def write_bully_results(folder, processes=False):
    """Records from the bully benchmark itself (simulator only: fast), and hand-made ones in
    the shape of its real-process drivers (a run that never agreed carries NaN times)."""
    from pelotari.bully import bench

    folder.mkdir(parents=True, exist_ok=True)
    recs = bench.run(sizes=(5,), real=False, seeds=1)
    if processes:
        env = recs[0]["env"]
        recs += [{**election("processes", "SIGKILL", 5, 3.2, 3.1, 4), "env": env},
                 {**election("processes", "SIGKILL", 5, float("nan"), float("nan"), 7,
                             agreed=False), "env": env},
                 {**election("processes", "SIGKILL", 5, 3.4, 3.2, 6), "env": env},
                 {**proc_sync(0.9, 0.3), "env": env}]
    with open(folder / "bully.jsonl", "w") as f:
        for rec in recs:
            f.write(json.dumps(rec) + "\n")  # NaN is written as NaN, which Spark reads back
    return recs


def test_report_on_bully_records_only(spark, tmp_path):
    recs = write_bully_results(tmp_path / "results")
    files = report.find(tmp_path / "results")
    frames = report.load(spark, files)
    assert set(frames) == {"bully"}  # no empty fyrehose tables
    tables = report.analyse(frames, 0.1)
    assert set(tables) == {"bully_elections", "bully_sync"}
    out = tmp_path / "trend"
    written = report.write(tables, out, 0.1)
    assert {p.name for p in written} == {"bully_elections", "bully_sync", "bully.png",
                                         "bully-sync.png", "summary.md"}
    elections = spark.read.parquet(str(out / "parquet" / "bully_elections"))
    assert elections.count() == 2  # simulator kill and crash, 5 nodes
    assert spark.read.parquet(str(out / "parquet" / "bully_sync")).count() == 2
    for png in ("bully.png", "bully-sync.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    summary = (out / "summary.md").read_text()
    assert "## bully" in summary and "Regressions" not in summary and "throughput" not in summary
    kill = next(r for r in recs if r["kind"] == "bully-election" and r["how"] == "kill")
    assert (f"| 5 | simulator | kill | {report._seconds(kill['detect_s'])} | "
            f"{report._seconds(kill['elected_after_detect_s'])} | "
            f"{report._seconds(kill['elected_s'])} | {kill['messages']} / 10 | 1 | 100% |") in summary
    assert "| simulator | Berkeley | 25 |" in summary
    assert "| simulator | RTT-blind average | 25 |" in summary
    assert "![bully.png](bully.png)" in summary


def test_report_on_fyrehose_and_bully_records(spark, tmp_path):
    write_results(tmp_path / "results")
    write_bully_results(tmp_path / "results", processes=True)
    files = report.find(tmp_path / "results")
    assert {k: len(v) for k, v in files.items()} == {"bench": 3, "micro": 1}
    frames = report.load(spark, files)
    assert set(frames) == {"bench", "bully", "micro"}
    tables = report.analyse(frames, 0.1)
    out = tmp_path / "trend"
    report.write(tables, out, 0.1)
    assert spark.read.parquet(str(out / "parquet" / "throughput")).count() == 6  # as without bully
    procs = (spark.read.parquet(str(out / "parquet" / "bully_elections"))
             .where("where = 'processes'").collect())[0]
    assert (procs["messages"], procs["elected_s"], procs["runs"]) == (6.0, 3.4, 3)
    assert procs["agreed"] == pytest.approx(2 / 3)
    for png in ("throughput.png", "ratios.png", "bully.png", "bully-sync.png"):
        assert (out / png).stat().st_size > 1000
    summary = (out / "summary.md").read_text()
    assert "| S=16 N=4 | pelotari | `aaa` | `bbb` | 0.2k | 0.1k | -25.0% |" in summary
    assert "| test_fanout[16-4] | 64000 | 20.0 | 15625 |" in summary
    assert "| 5 | processes | SIGKILL | 3200 ms | 200 ms | 3400 ms | 6 / 10 | 3 | 67% |" in summary  # NaN sorts last
    assert "| processes | Berkeley | 25 | 19 s | 0.90 ms | 0.30 ms | — | — | 1 / 0 | 1 |" in summary
