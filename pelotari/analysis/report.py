"""Load a results folder into Spark, run the trend transformations, write Parquet/PNG/Markdown.

Each protocol's schemas, analysis, pictures and summary sections are its report_<protocol>
module's (fyrehose, bully, failover, potato, swarm, fuzz; what they share is trend.py's and
plotting.py's): SECTIONS here only says in which order they are run and written."""
import json
import pathlib
from typing import Dict, List

from pelotari.analysis import (report_bully, report_failover, report_fuzz, report_fyrehose,
                               report_potato, report_swarm, trend)

SECTIONS = (*report_fyrehose.SECTIONS, *report_bully.SECTIONS, *report_failover.SECTIONS,
            *report_potato.SECTIONS, *report_swarm.SECTIONS, *report_fuzz.SECTIONS)


def find(folder: pathlib.Path) -> Dict[str, List[str]]:
    """The bench records (*.jsonl: `pelotari bench`'s, the bully benchmark's, potato's, swarm's) and
    pytest-benchmark files (*.json) under folder."""
    found = {"bench": sorted(str(p) for p in folder.rglob("*.jsonl")),
             "micro": sorted(str(p) for p in folder.rglob("*.json") if _is_pytest_benchmark(p))}
    return {k: v for k, v in found.items() if v}


def load(spark, files: Dict[str, List[str]]) -> Dict[str, object]:
    """Spark DataFrames of the files find() returned: one per section of SECTIONS whose record
    kinds they hold, under its `frame` name ("bench": `pelotari bench` records and any kind no
    section reads; left out when every record is some section's), and "micro"
    (pytest-benchmark files). The JSON-lines files are read once per schema."""
    jsonl, bench_json = files.get("bench"), files.get("micro")
    frames = {}
    if jsonl:
        kinds = {r["kind"] for r in spark.read.schema("kind string").json(jsonl)
                 .select("kind").distinct().collect()}
        claimed = set()
        for section in SECTIONS:
            if section.kinds and kinds & set(section.kinds):
                frames[section.frame] = spark.read.schema(section.schema).json(jsonl)
                claimed |= set(section.kinds)
        for section in SECTIONS:
            if section.kinds is None and (kinds - claimed or not claimed):
                frames[section.frame] = spark.read.schema(section.schema).json(jsonl)
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
    for section in SECTIONS:
        if section.frame in frames:
            out.update(section.analyse(frames[section.frame], threshold))
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
    plt = []

    def pyplot():
        if not plt:  # (imported only when something is drawn)
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot

            plt.append(matplotlib.pyplot)
        return plt[0]
    written = []
    for section in SECTIONS:
        written += section.plots(data, out, pyplot)
    return written


def _markdown(data: Dict[str, List[dict]], threshold: float, plots: List[str]) -> str:
    bench = "regressions" in data  # `pelotari bench` records were loaded
    lines = ["# pelotari throughput trend" if bench else "# pelotari trend", ""]
    for section in SECTIONS:
        lines += section.markdown(data, threshold)
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
