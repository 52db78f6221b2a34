"""Load a results folder into Spark, run the trend transformations, write Parquet/PNG/Markdown.

Each protocol's pictures and summary sections are its report_<protocol> module's (fyrehose,
bully, failover, potato, swarm, fuzz; what they share is plotting.py's): _plots and _markdown
here say which are drawn, in which order."""
import json
import pathlib
from typing import Dict, List

from pelotari.analysis import trend
from pelotari.analysis.report_bully import _bully_markdown, _bully_plot, _bully_sync_plot
from pelotari.analysis.report_failover import _failover_markdown, _failover_plot
from pelotari.analysis.report_fuzz import _fuzz_markdown
from pelotari.analysis.report_fyrehose import (_bench_markdown, _bench_plots, _rates_markdown,
                                               _rates_plot)
from pelotari.analysis.report_potato import (_potato_markdown, _potato_mesh_plot,
                                             _potato_plot)
from pelotari.analysis.report_swarm import _swarm_markdown, _swarm_plot


def find(folder: pathlib.Path) -> Dict[str, List[str]]:
    """The bench records (*.jsonl: `pelotari bench`'s, the bully benchmark's, potato's, swarm's) and
    pytest-benchmark files (*.json) under folder."""
    found = {"bench": sorted(str(p) for p in folder.rglob("*.jsonl")),
             "micro": sorted(str(p) for p in folder.rglob("*.json") if _is_pytest_benchmark(p))}
    return {k: v for k, v in found.items() if v}


def load(spark, files: Dict[str, List[str]]) -> Dict[str, object]:
    """Spark DataFrames of the files find() returned: "bench" (`pelotari bench` records),
    "bully" (the bully benchmark's, when there are any), "potato" (potato's: the simulator's
    and real meshes', when there are any), "swarm" (swarm's: the simulator's and the benchmark's,
    when there are any), "fuzz" (bench/fuzz's runs, when there are any) and "micro". The
    JSON-lines files are read once per schema; "bench" is left out when they hold nothing but
    bully, potato, swarm and fuzz records."""
    jsonl, bench_json = files.get("bench"), files.get("micro")
    frames = {}
    if jsonl:
        kinds = {r["kind"] for r in spark.read.schema("kind string").json(jsonl)
                 .select("kind").distinct().collect()}
        bully = kinds & set(trend.BULLY_KINDS)
        potato = kinds & set(trend.POTATO_KINDS)
        swarm = kinds & set(trend.SWARM_KINDS)
        fuzz = kinds & set(trend.FUZZ_KINDS)
        failover = kinds & set(trend.FAILOVER_KINDS)
        rates = kinds & set(trend.RATES_KINDS)
        if kinds - bully - potato - swarm - fuzz - failover - rates or \
                not (bully or potato or swarm or fuzz or failover or rates):
            frames["bench"] = spark.read.schema(trend.BENCH_SCHEMA).json(jsonl)
        if rates:
            frames["rates"] = spark.read.schema(trend.RATES_SCHEMA).json(jsonl)
        if fuzz:
            frames["fuzz"] = spark.read.schema(trend.FUZZ_SCHEMA).json(jsonl)
        if failover:
            frames["failover"] = spark.read.schema(trend.FAILOVER_SCHEMA).json(jsonl)
        if bully:
            frames["bully"] = spark.read.schema(trend.BULLY_SCHEMA).json(jsonl)
        if potato:
            frames["potato"] = spark.read.schema(trend.POTATO_SCHEMA).json(jsonl)
        if swarm:
            frames["swarm"] = spark.read.schema(trend.SWARM_SCHEMA).json(jsonl)
    if bench_json:
        frames["micro"] = spark.read.option("multiLine", True).json(bench_json)
    return frames


def _is_pytest_benchmark(path: pathlib.Path) -> bool:
    try:
        with open(path) as f:
            head = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and "benchmarks" in head and "machine_info" in head


def analyse(frames: Dict[str, object], threshold: float) -> Dict[str, object]:
    """Every trend table, as Spark DataFrames."""
    out = {}
    if "bench" in frames:
        runs = trend.bench_runs(frames["bench"]).cache()
        t = trend.throughput_trend(runs).cache()
        r = trend.ratios(t)
        out.update(runs=runs, throughput=t, ratios=r, best_peer=trend.best_peer_ratio(r),
                   targets=trend.target_ratios(t),
                   regressions=trend.regressions(t, threshold), latency=trend.latency(runs))
    if "bully" in frames:
        out.update(bully_elections=trend.bully_elections(frames["bully"]),
                   bully_sync=trend.bully_sync(frames["bully"]))
    if "potato" in frames:
        out.update(potato_broadcasts=trend.potato_broadcasts(frames["potato"]),
                   potato_elections=trend.potato_elections(frames["potato"]),
                   potato_meshes=trend.potato_meshes(frames["potato"]),
                   potato_mixed=trend.potato_mixed(frames["potato"]))
    if "swarm" in frames:
        bench = trend.swarm_bench(frames["swarm"]).cache()
        out.update(swarm_joins=trend.swarm_joins(frames["swarm"]),
                   swarm_recoveries=trend.swarm_recoveries(frames["swarm"]),
                   swarm_bench=bench, swarm_speedups=trend.swarm_speedups(bench))
    if "fuzz" in frames:
        out["fuzz"] = trend.fuzz_runs(frames["fuzz"])
    if "failover" in frames:
        out.update(failover_kills=trend.failover_kills(frames["failover"]),
                   failovers=trend.failovers(frames["failover"]))
    if "rates" in frames:
        out.update(latency_rates=trend.latency_at_rates(frames["rates"]),
                   latency_floor=trend.latency_floor(frames["rates"]),
                   wakeup_stalls=trend.wakeup_stalls(frames["rates"]))
    if "micro" in frames:
        out["micro"] = trend.micro_benchmarks(frames["micro"])
    return out


def _rows(df) -> List[dict]:
    return [r.asDict() for r in df.collect()]


def write(tables: Dict[str, object], out: pathlib.Path, threshold: float) -> List[pathlib.Path]:
    """Parquet per table, PNG plots and summary.md under out; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, df in tables.items():
        path = out / "parquet" / name
        df.write.mode("overwrite").parquet(str(path))
        written.append(path)
    data = {name: _rows(df) for name, df in tables.items()}
    written += _plots(data, out)
    summary = out / "summary.md"
    summary.write_text(_markdown(data, threshold, [p.name for p in written if p.suffix == ".png"]))
    written.append(summary)
    return written


def _plots(data: Dict[str, List[dict]], out: pathlib.Path) -> List[pathlib.Path]:
    if not any(data.get(t) for t in ("throughput", "bully_elections", "bully_sync",
                                     "potato_broadcasts", "potato_elections", "potato_meshes",
                                     "swarm_joins", "swarm_recoveries", "swarm_bench",
                                     "failover_kills", "latency_rates")):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if data.get("throughput"):
        written += _bench_plots(data, out, plt)
    if data.get("latency_rates"):
        written.append(_rates_plot(data["latency_rates"], data.get("latency_floor", []),
                                   out / "latency-rates.png", plt))
    if data.get("bully_elections"):
        written.append(_bully_plot(data["bully_elections"], out / "bully.png", plt))
    if data.get("failover_kills"):
        written.append(_failover_plot(data["failover_kills"], out / "failover.png", plt))
    if data.get("bully_sync"):
        written.append(_bully_sync_plot(data["bully_sync"], out / "bully-sync.png", plt))
    if data.get("potato_broadcasts") or data.get("potato_elections"):
        written.append(_potato_plot(data.get("potato_broadcasts", []),
                                    data.get("potato_elections", []), out / "potato.png", plt))
    if data.get("potato_meshes"):
        written.append(_potato_mesh_plot(data["potato_meshes"], out / "potato-mesh.png", plt))
    if any(data.get(t) for t in ("swarm_joins", "swarm_recoveries", "swarm_bench")):
        written.append(_swarm_plot(data, out / "swarm.png", plt))
    return written


def _markdown(data: Dict[str, List[dict]], threshold: float, plots: List[str]) -> str:
    bench = "regressions" in data  # `pelotari bench` records were loaded
    lines = ["# pelotari throughput trend" if bench else "# pelotari trend", ""]
    lines += _bench_markdown(data, threshold)
    lines += _rates_markdown(data)
    lines += _bully_markdown(data)
    lines += _failover_markdown(data)
    lines += _potato_markdown(data)
    lines += _swarm_markdown(data)
    lines += _fuzz_markdown(data)
    micro = data.get("micro", [])
    if micro:
        lines += ["## Micro-benchmarks (latest file)", "",
                  "| benchmark | median ns per call | ns per item | calls/s |", "|---|---|---|---|"]
        newest = max(r["time"] for r in micro)
        for r in sorted((r for r in micro if r["time"] == newest), key=lambda r: r["name"]):
            lines.append(f"| {r['name']} | {r['median_ns']:.0f} | {r['per_item_ns']:.1f} | {r['ops']:.0f} |")
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)
