"""Load a results folder into Spark, run the trend transformations, write Parquet/PNG/Markdown."""
import json
import pathlib
from typing import Dict, List

from pelotari.analysis import trend


def find(folder: pathlib.Path) -> Dict[str, List[str]]:
    """The bench records (*.jsonl) and pytest-benchmark files (*.json) under folder."""
    found = {"bench": sorted(str(p) for p in folder.rglob("*.jsonl")),
             "micro": sorted(str(p) for p in folder.rglob("*.json") if _is_pytest_benchmark(p))}
    return {k: v for k, v in found.items() if v}


def load(spark, files: Dict[str, List[str]]) -> Dict[str, object]:
    """Spark DataFrames of the files find() returned."""
    jsonl, bench_json = files.get("bench"), files.get("micro")
    frames = {}
    if jsonl:
        frames["bench"] = spark.read.schema(trend.BENCH_SCHEMA).json(jsonl)
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


def _short(commit: str) -> str:
    return (commit or "unknown")[:8]


def _plots(data: Dict[str, List[dict]], out: pathlib.Path) -> List[pathlib.Path]:
    if not data.get("throughput"):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    rows = data["throughput"]
    scenarios = sorted({r["scenario"] for r in rows},
                       key=lambda s: next((r["payload"], r["subscribers"]) for r in rows
                                          if r["scenario"] == s))
    commits = sorted({(r["time"], r["commit"]) for r in rows})
    order = []
    for _, c in commits:
        if c not in order:
            order.append(c)
    cols = min(3, len(scenarios))
    nrows = (len(scenarios) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.4 * nrows), squeeze=False)
    for ax, sc in zip(axes.flat, scenarios):
        for system in sorted({r["system"] for r in rows}):
            pts = sorted((order.index(r["commit"]), r["delivered_rate"]) for r in rows
                         if r["scenario"] == sc and r["system"] == system)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=system)
        ax.set_title(sc, fontsize=10)
        ax.set_yscale("log")  # systems differ by 100x: a linear axis hides the close ones
        ax.set_ylabel("delivered msgs/s")
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels([_short(c) for c in order], rotation=30, fontsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(scenarios):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Highest lossless delivered rate per commit (loss < 0.1 %)")
    fig.tight_layout()
    path = out / "throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    if data.get("targets"):
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for target, (xs, ys) in target_lines(data["targets"], scenarios).items():
            ax.plot(xs, ys, marker="o", label=target)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(0.9, color="grey", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_ylabel("delivered rate ratio (latest commit)")
        ax.set_title("Target ratios: -- is 0.9 of the reference; above 1 is ahead", fontsize=10)
        ax.set_xticks(range(len(scenarios)))
        ax.set_xticklabels(scenarios, rotation=30, fontsize=7)
        ax.legend(fontsize=7, ncol=2)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out / "ratios.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def target_lines(targets: List[dict], scenarios: List[str]) -> Dict[str, tuple]:
    """Each target's latest ratio per scenario as (positions in `scenarios`, ratios), in
    scenario order. Positions, not names: matplotlib orders category names by first use."""
    lines = {}
    for target in sorted({r["target"] for r in targets}):
        latest = {}
        for r in sorted(targets, key=lambda r: r["time"]):
            if r["target"] == target:
                latest[r["scenario"]] = r["ratio"]
        shown = [s for s in scenarios if s in latest]
        lines[target] = ([scenarios.index(s) for s in shown], [latest[s] for s in shown])
    return lines


def _rate(v) -> str:
    if v is None:
        return "—"
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k"


def _markdown(data: Dict[str, List[dict]], threshold: float, plots: List[str]) -> str:
    lines = ["# pelotari throughput trend", ""]
    rows = data.get("throughput", [])
    if rows:
        latest_time = max(r["time"] for r in rows)
        latest_commit = next(r["commit"] for r in rows if r["time"] == latest_time)
        commits = {r["commit"] for r in rows}
        lines += [f"{len(commits)} commit(s), {len(data.get('runs', []))} bench records; latest "
                  f"commit `{_short(latest_commit)}`.", "",
                  "## Latest delivered msgs/s (highest lossless rate)", ""]
        latest = [r for r in rows if r["commit"] == latest_commit]
        systems = sorted({r["system"] for r in latest}, key=lambda s: (s != "pelotari", s))
        scenarios = sorted({r["scenario"] for r in latest},
                           key=lambda s: next((r["payload"], r["subscribers"]) for r in latest
                                              if r["scenario"] == s))
        head = ["scenario"] + systems
        ratio_of = {(r["scenario"], r["target"]): r["ratio"] for r in data.get("targets", [])
                    if r["commit"] == latest_commit}
        targets = [f"{a}/{b}" for a, b in trend.TARGETS
                   if any(t == f"{a}/{b}" for _, t in ratio_of)]
        head += targets
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        cell = {(r["scenario"], r["system"]): r for r in latest}
        for sc in scenarios:
            row = [sc]
            for s in systems:
                r = cell.get((sc, s))
                row.append(_rate(r["delivered_rate"]) + (" (client-bound)" if r and r["client_bound"] else "")
                           if r else "—")
            row += [f"{ratio_of[(sc, t)]:.2f}" if (sc, t) in ratio_of else "—" for t in targets]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    regs = data.get("regressions", [])
    lines += [f"## Regressions (median down more than {threshold:.0%} from the previous commit)", ""]
    if regs:
        lines += ["| scenario | system | from | to | before | after | change |", "|---|---|---|---|---|---|---|"]
        for r in sorted(regs, key=lambda r: (r["scenario"], r["system"], r["time"])):
            lines.append(f"| {r['scenario']} | {r['system']} | `{_short(r['previous_commit'])}` | "
                         f"`{_short(r['commit'])}` | {_rate(r['previous_rate'])} | "
                         f"{_rate(r['delivered_rate'])} | {r['change']:+.1%} |")
    else:
        lines.append("None.")
    lines.append("")
    lat = data.get("latency", [])
    if lat:
        lines += ["## Latency at half the lossless rate (latest commit, µs)", "",
                  "| scenario | system | p50 | p90 | p99 |", "|---|---|---|---|---|"]
        newest = max(r["time"] for r in lat)
        for r in sorted((r for r in lat if r["time"] == newest), key=lambda r: (r["scenario"], r["system"])):
            lines.append(f"| {r['scenario']} | {r['system']} | {r['p50_us']:.0f} | {r['p90_us']:.0f} | {r['p99_us']:.0f} |")
        lines.append("")
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
