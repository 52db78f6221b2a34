"""The Spark trend transformations on small fixture data with exact expected values, through a
session-scoped local SparkSession (as chispa's conftest does), and `pelotari trend` end to end."""
import datetime
import json
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

