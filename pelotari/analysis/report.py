"""Load a results folder into Spark, run the trend transformations, write Parquet/PNG/Markdown."""
import json
import math
import statistics
import pathlib
from typing import Dict, List

from pelotari.analysis import trend


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
        if kinds - bully - potato - swarm - fuzz - failover or \
                not (bully or potato or swarm or fuzz or failover):
            frames["bench"] = spark.read.schema(trend.BENCH_SCHEMA).json(jsonl)
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
    if not any(data.get(t) for t in ("throughput", "bully_elections", "bully_sync",
                                     "potato_broadcasts", "potato_elections", "potato_meshes",
                                     "swarm_joins", "swarm_recoveries", "swarm_bench",
                                     "failover_kills")):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if data.get("throughput"):
        written += _bench_plots(data, out, plt)
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


# One colour, marker and name per bench system, in every plot (pelotari.harness.systems).
SYSTEM_STYLE = {
    "pelotari": ("pelotari (GSO fan-out)", "#1f77b4", "o"),
    "pelotari-plain": ("pelotari, no GSO", "#6baed6", "s"),
    "pelotari-packed": ("pelotari, packed clients (extension)", "#08306b", "P"),
    "pelotari-gro": ("pelotari, GRO subscribers (extension)", "#9ecae1", "X"),
    "reference": ("C reference, sendmmsg", "#d62728", "^"),
    "reference-gso": ("C reference, GSO", "#ff9896", "v"),
    "asyncio": ("naive asyncio backbone", "#7f7f7f", "D"),
    "redis": ("Redis pub/sub", "#2ca02c", "<"),
    "nats": ("NATS", "#9467bd", ">"),
    "zeromq": ("ZeroMQ XSUB/XPUB", "#e377c2", "h"),
}
_FALLBACK_COLOURS = ("#bcbd22", "#17becf", "#8c564b", "#ff7f0e", "#393b79", "#637939")
BENCH_HOW = ("highest lossless rate (loss < 0.1 %) found by search; msgs/s delivered = "
             "messages x subscribers; S = payload bytes, N = subscribers, P = publishers")
CLIENT_BOUND_NOTE = "client-bound (load generator saturated; the server had room)"


def plural(n: int, word: str) -> str:
    """'1 subscriber', '16 subscribers'."""
    return f"{n:,} {word if n == 1 else word + 's'}"


def system_style(system: str) -> tuple:
    """(label, colour, marker) of a bench system: fixed for the known ones, and for any other
    chosen from its name, so it is the same in every plot and every run."""
    if system in SYSTEM_STYLE:
        return SYSTEM_STYLE[system]
    k = sum(system.encode()) % len(_FALLBACK_COLOURS)
    return system, _FALLBACK_COLOURS[k], "*"


def _system_order(systems) -> List[str]:
    known = [s for s in SYSTEM_STYLE if s in systems]
    return known + sorted(set(systems) - set(known))


def _scenario_order(rows: List[dict]) -> List[str]:
    keys = {}
    for r in rows:
        keys.setdefault(r["scenario"], (r.get("payload") or 0, r.get("subscribers") or 0))
    return sorted(keys, key=lambda s: (keys[s], s))


def _system_legend(fig, systems, extra=(), ncol=3) -> None:
    """One legend under the figure: every system shown (and `extra` handles), never on data."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=system_style(s)[1], marker=system_style(s)[2], ls="-",
                      label=system_style(s)[0]) for s in systems]
    fig.legend(handles=handles + list(extra), loc="lower center", ncol=ncol, fontsize=8,
               frameon=False)


def _commit_label(commit: str, when) -> str:
    day = when.strftime("%m-%d") if hasattr(when, "strftime") else str(when or "")[5:10]
    return f"{_short(commit)}\n{day}"


def _bench_plots(data: Dict[str, List[dict]], out: pathlib.Path, plt) -> List[pathlib.Path]:
    from matplotlib.lines import Line2D

    written = []
    rows = data["throughput"]
    scenarios = _scenario_order(rows)
    systems = _system_order({r["system"] for r in rows})
    first_seen = {}
    for r in sorted(rows, key=lambda r: (str(r["time"]), r["commit"] or "")):
        first_seen.setdefault(r["commit"], r["time"])
    order = list(first_seen)
    cols = min(3, len(scenarios))
    nrows = (len(scenarios) + cols - 1) // cols
    legend_rows = (len(systems) + 1 + 2) // 3
    height = 3.3 * nrows + 0.9 + 0.2 * legend_rows
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, height), squeeze=False)
    for ax, sc in zip(axes.flat, scenarios):
        for system in systems:
            pts = sorted((order.index(r["commit"]), r["delivered_rate"], bool(r["client_bound"]))
                         for r in rows if r["scenario"] == sc and r["system"] == system)
            if not pts:
                continue
            label, colour, marker = system_style(system)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour, lw=1, alpha=0.8)
            for x, y, bound in pts:
                ax.plot([x], [y], marker=marker, color=colour, ms=6, ls="none",
                        markerfacecolor="white" if bound else colour)
        ax.set_title(sc, fontsize=10)
        ax.set_yscale("log")  # systems differ by 100x: a linear axis hides the close ones
        ax.set_ylabel("delivered msgs/s (log)")
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels([_commit_label(c, first_seen[c]) for c in order], fontsize=6)
        ax.set_xlabel("commit and date of its first run (oldest left)", fontsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(scenarios):]:
        ax.axis("off")
    hollow = Line2D([], [], marker="o", color="black", markerfacecolor="white", ls="none",
                    label="hollow: " + CLIENT_BOUND_NOTE)
    _system_legend(fig, systems, [hollow], ncol=3)
    fig.suptitle("Delivered rate per commit: " + BENCH_HOW, fontsize=9)
    fig.tight_layout(rect=(0, (0.2 * legend_rows + 0.15) / height, 1, 1 - 0.45 / height))
    path = out / "throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    if data.get("targets"):
        written.append(_ratios_plot(data["targets"], scenarios, out / "ratios.png", plt))
    if data.get("latency"):
        written.append(_latency_plot(data["latency"], scenarios, out / "latency.png", plt))
        written.append(_headline_plot(rows, data["latency"], out / "headline.png", plt))
    return written


def latest_commit_rows(rows: List[dict]) -> List[dict]:
    """Per (scenario, system), the row of its latest commit (by the time it was first run)."""
    return latest_per(rows, "scenario", "system")


def _ratios_plot(targets: List[dict], scenarios: List[str], path: pathlib.Path, plt):
    """Each target's latest ratio per scenario: a bar from 1.0 (as fast as the denominator) up
    to the ratio (numerator ahead) or down to it (behind), capped at its value. On the log axis
    a bar from 1.0 is as long as the ratio says: 2x ahead and 2x behind are bars of one length
    (a bar from the axis' bottom would have a length that says nothing)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    lines = target_lines(targets, scenarios)
    fig, ax = plt.subplots(figsize=(10, 5))
    n = max(1, len(lines))
    width = 0.8 / n
    colours = plt.get_cmap("tab10")
    shown = [1.0, 0.9]
    for k, (target, (xs, ys)) in enumerate(sorted(lines.items())):
        offset = (k - (n - 1) / 2) * width  # dodged: no series hides under another
        pts = [(x + offset, y) for x, y in zip(xs, ys) if _number(y) and y > 0]
        shown += [y for _, y in pts]
        ax.bar([x for x, _ in pts], [y - 1.0 for _, y in pts], width * 0.9, bottom=1.0,
               color=colours(k % 10), label=target)
        # the value itself, so a ratio near 1.0 (a bar of no length) still shows
        ax.hlines([y for _, y in pts], [x - width * 0.45 for x, _ in pts],
                  [x + width * 0.45 for x, _ in pts], color=colours(k % 10), lw=2)
    ax.axhline(1.0, color="black", lw=1, label="1.0: as fast as the denominator")
    ax.axhline(0.9, color="black", lw=1, ls="--", label="0.9: the target's floor")
    ax.set_yscale("log")
    lo, hi = min(shown), max(shown)
    ax.set_ylim(lo / 1.4, hi * 1.4)
    ticks = [m * 10 ** e for e in range(math.floor(math.log10(lo / 1.4)),
                                        math.ceil(math.log10(hi * 1.4)) + 1) for m in (1, 2, 5)]
    ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if lo / 1.4 <= t <= hi * 1.4]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylabel("delivered rate ratio, numerator/denominator\n(log scale: 2× and ½× "
                  "equally far from 1×)")
    ax.set_xlabel("scenario (S = payload bytes, N = subscribers, P = publishers)")
    ax.set_title("pelotari against the C reference and the brokers at the latest commit that ran "
                 "both\n(each bar: one ratio of highest lossless delivered rates, from 1.0 to "
                 "it; up: the numerator ahead, down: behind)", fontsize=9)
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels([sc.replace(" ", "\n") for sc in scenarios], fontsize=8)
    ax.set_xlim(-0.5, len(scenarios) - 0.5)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _latency_plot(latency: List[dict], scenarios: List[str], path: pathlib.Path, plt):
    """Per scenario, each system's latest p50 (hollow) and p99 (filled) as points joined by a
    line: points, not bars, on the log axis (a bar's length there says nothing). The markers
    are sized to their slot, so neighbouring systems never overlap."""
    from matplotlib.lines import Line2D

    rows = latest_commit_rows(latency)
    systems = _system_order({r["system"] for r in rows})
    fig, ax = plt.subplots(figsize=(14, 5.6))
    slot = 0.84 / max(1, len(systems))
    markers = []
    for k, system in enumerate(systems):
        label, colour, marker = system_style(system)
        offset = (k - (len(systems) - 1) / 2) * slot
        p50, p99 = [], []
        for r in rows:
            if r["system"] != system or r["scenario"] not in scenarios:
                continue
            x = scenarios.index(r["scenario"]) + offset
            ends = [r[f] for f in ("p50_us", "p99_us") if _number(r.get(f))]
            if len(ends) == 2:  # the range from the median to the 99th percentile
                ax.plot([x, x], ends, color=colour, lw=1.2, solid_capstyle="butt")
            if _number(r.get("p50_us")):
                p50.append((x, r["p50_us"]))
            if _number(r.get("p99_us")):
                p99.append((x, r["p99_us"]))
        for pts, face in ((p50, "white"), (p99, colour)):
            if pts:
                markers += ax.plot([x for x, _ in pts], [y for _, y in pts], ls="none",
                                   marker=marker, color=colour, markerfacecolor=face, mew=1.2)
    ax.set_yscale("log")
    _log_ticks(ax.yaxis, lambda v: f"{v:,.0f}")
    ax.set_ylabel("one-way latency, µs (log scale)")
    ax.set_xlabel("scenario (S = payload bytes, N = subscribers, P = publishers)")
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels([sc.replace(" ", "\n") for sc in scenarios], fontsize=8)
    ax.set_xlim(-0.5, len(scenarios) - 0.5)
    for i in range(1, len(scenarios)):  # the scenarios' columns apart
        ax.axvline(i - 0.5, color="grey", lw=0.6, alpha=0.4)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title("Latency at half the highest lossless rate, each system's latest commit: "
                 "hollow = p50, filled = p99, line = from one to the other\n(publish to "
                 "delivery, measured by the load generator on this host)", fontsize=9)
    handles = [Line2D([], [], color=system_style(s)[1], marker=system_style(s)[2], lw=1.2,
                      label=system_style(s)[0]) for s in systems]
    handles += [Line2D([], [], marker="o", color="black", markerfacecolor="white", ls="none",
                       label="hollow: p50 (median)"),
                Line2D([], [], marker="o", color="black", ls="none", label="filled: p99")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1),
              frameon=False)
    fig.tight_layout()
    # Each system's slot is `slot` data units wide: markers at most 80 % of it (in points).
    x0, x1 = ax.get_xlim()
    slot_pt = slot * ax.bbox.width / (x1 - x0) * 72 / fig.dpi
    for line in markers:
        line.set_markersize(max(2.5, min(7.0, 0.8 * slot_pt - line.get_markeredgewidth())))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


HEADLINE_SCENARIO = "S=16 N=16 P=1"  # the README's headline: a small message, many subscribers


def headline_scenario(rows: List[dict]) -> str:
    """The scenario the headline shows: HEADLINE_SCENARIO, else the one most systems ran."""
    names = [r["scenario"] for r in rows]
    if HEADLINE_SCENARIO in names:
        return HEADLINE_SCENARIO
    return max(set(names), key=lambda s: (len({r["system"] for r in rows if r["scenario"] == s}), s))


def _log_ticks(axis, fmt) -> None:
    """Label a log axis's decades with fmt (no 10^k), its 2s and 5s too when it spans few."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = sorted(axis.get_view_interval())
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    if hi / lo < 10 ** 2.5:
        axis.set_minor_locator(LogLocator(subs=(2, 5)))
        axis.set_minor_formatter(FuncFormatter(lambda v, _: fmt(v)))
    else:
        axis.set_minor_formatter(NullFormatter())


def _rate_tick(v: float) -> str:
    """msgs/s on an axis: 100k, 1M, 20M."""
    return f"{v / 1e6:g}M" if v >= 1e6 else f"{v / 1e3:g}k" if v >= 1e3 else f"{v:g}"


def _headline_plot(throughput: List[dict], latency: List[dict], path: pathlib.Path, plt):
    """Every system in one scenario, one row each: its delivered rate (left) and p99 latency
    (right) as points on log axes, each with its figure; hollow: client-bound."""
    from matplotlib.lines import Line2D

    scenario = headline_scenario(throughput)
    rates = {r["system"]: r for r in latest_commit_rows(throughput) if r["scenario"] == scenario}
    lat = {r["system"]: r for r in latest_commit_rows(latency) if r["scenario"] == scenario}
    systems = _system_order(rates)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.45 * len(systems) + 2.2),
                                      gridspec_kw={"width_ratios": [1.4, 1]})
    ys = list(range(len(systems)))[::-1]
    for y, system in zip(ys, systems):
        label, colour, marker = system_style(system)
        r = rates[system]
        bound = bool(r.get("client_bound"))
        left.plot([r["delivered_rate"]], [y], ls="none", marker=marker, ms=9, mew=1.5,
                  color=colour, markerfacecolor="white" if bound else colour)
        left.annotate(f"{r['delivered_rate'] / 1e6:.2f}M", (r["delivered_rate"], y),
                      xytext=(8, 0), textcoords="offset points", va="center", fontsize=8)
        if system in lat and _number(lat[system].get("p99_us")):
            right.plot([lat[system]["p99_us"]], [y], ls="none", marker=marker, ms=9,
                       color=colour)
            right.annotate(f"{lat[system]['p99_us']:,.0f}", (lat[system]["p99_us"], y),
                           xytext=(8, 0), textcoords="offset points", va="center", fontsize=8)
    shown_rates = [rates[s]["delivered_rate"] for s in systems]
    shown_p99 = [lat[s]["p99_us"] for s in systems if s in lat and _number(lat[s].get("p99_us"))]
    for ax, values, fmt in ((left, shown_rates, _rate_tick), (right, shown_p99,
                                                              lambda v: f"{v:,.0f}")):
        if values:  # points, not bars: on a log axis a bar's length says nothing
            ax.set_xscale("log")
            ax.set_xlim(min(values) / 1.6, max(values) * 4)  # room for the figure after each
            _log_ticks(ax.xaxis, fmt)
        ax.set_yticks(ys)
        ax.set_yticklabels([system_style(s)[0] for s in systems], fontsize=8)
        ax.set_ylim(-0.6, len(systems) - 0.4)
        ax.grid(alpha=0.3)
    right.set_yticklabels([])
    left.set_xlabel("delivered msgs/s at the highest lossless rate (log scale; right is better)")
    right.set_xlabel("p99 latency at half that rate, µs (log scale; left is better)")
    when = {_short(r["commit"]) for r in rates.values()}
    one = next(r for r in throughput if r["scenario"] == scenario)
    fig.suptitle(f"Every system at {scenario} ({one['payload']}-byte messages to "
                 f"{plural(one['subscribers'], 'subscriber')}), latest run of each; commits "
                 f"{', '.join(sorted(when))}", fontsize=9)
    fig.legend(handles=[Line2D([], [], marker="o", ms=9, mew=1.5, color="grey",
                               markerfacecolor="white", ls="none",
                               label="hollow: " + CLIENT_BOUND_NOTE)], loc="lower center",
               fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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


# ---- bully --------------------------------------------------------------------------------------

# (where, how) of an election series → its name on plots; unknown series keep "where, how".
ELECTION_SERIES = {("simulator", "kill"): "simulator, leader killed (its connections reset)",
                   ("simulator", "crash"): "simulator, leader silent (crashed host)",
                   ("processes", "SIGKILL"): "real processes, leader SIGKILLed"}
SYNC_METHODS = {"berkeley": "Berkeley", "rtt-blind average": "RTT-blind average"}
ELECTION_GOAL_S = 1.0  # a new leader within 1 s of a survivor declaring the old one dead
SYNC_GOAL_MS = 1.0  # logical clocks within 1 ms of each other


def latest_per(rows: List[dict], *key: str) -> List[dict]:
    """The rows of each `key` combination's newest commit (by its first run's time), so a
    configuration measured only at an older commit still shows with its last figures."""
    def when(r):  # records without an env (no time, no commit) are the oldest
        return (r["time"] is not None, r["time"] if r["time"] is not None else 0,
                r["commit"] or "")
    newest = {}
    for r in rows:
        k = tuple(r[c] for c in key)
        if k not in newest or when(r) > newest[k]:
            newest[k] = when(r)
    return [r for r in rows if when(r) == newest[tuple(r[c] for c in key)]]


def _number(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _ms(v_ms, signed: bool = False) -> str:
    """A duration in ms, to about three significant figures; "—" if unknown."""
    if not _number(v_ms):
        return "—"
    sign = "+" if signed and v_ms >= 0 else ""
    a = abs(v_ms)
    if a >= 10_000:
        return f"{sign}{v_ms / 1000:.0f} s"
    return f"{sign}{v_ms:.{2 if a < 10 else 1 if a < 100 else 0}f} ms"


def _seconds(v_s) -> str:
    return _ms(v_s * 1000 if _number(v_s) else None)


def _commits_note(rows: List[dict]) -> str:
    commits = sorted({_short(r["commit"]) for r in rows})
    return f"commit {commits[0]}" if len(commits) == 1 else f"commits {', '.join(commits)}"


def _runs_note(rows: List[dict]) -> str:
    runs = sorted({r["runs"] for r in rows})
    return f"{runs[0]} run{'s' if runs[0] > 1 else ''}" if len(runs) == 1 else \
        f"{runs[0]}–{runs[-1]} runs"


def _log_axis(ax, fmt) -> None:
    """A log y axis spanning a decade at least, its decades labelled by fmt (no 10^k)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    if hi / lo < 10:
        mid = math.sqrt(lo * hi)
        ax.set_ylim(mid / math.sqrt(10), mid * math.sqrt(10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    lo, hi = ax.get_ylim()
    if math.log10(hi / lo) < 2.5:  # few decades: label 2 and 5 of each too
        def minor(v, _):
            mantissa = round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6)
            return fmt(v) if mantissa in (2, 5) else ""
        ax.yaxis.set_minor_formatter(FuncFormatter(minor))
        ax.tick_params(axis="y", which="minor", labelsize=8)
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


def _ms_tick(v_ms: float) -> str:
    return f"{v_ms / 1000:g} s" if v_ms >= 1000 else f"{v_ms:g} ms"


def bully_election_series(rows: List[dict]) -> Dict[tuple, List[dict]]:
    """The series bully.png draws: (where, how) → the rows of its newest commit, by nodes;
    ELECTION_SERIES' first, in that order. README.md's bully table quotes these figures
    (tests/test_trend.py reads them from the committed records through this function)."""
    rows = latest_per(rows, "where", "how")
    keys = sorted({(r["where"], r["how"]) for r in rows},
                  key=lambda k: (list(ELECTION_SERIES).index(k) if k in ELECTION_SERIES
                                 else len(ELECTION_SERIES), k))
    return {k: sorted((r for r in rows if (r["where"], r["how"]) == k), key=lambda r: r["nodes"])
            for k in keys}


def _bully_plot(rows: List[dict], path: pathlib.Path, plt) -> pathlib.Path:
    """Left: time from a survivor declaring the leader dead to every survivor naming the new
    one, per series, against the 1 s goal; right: election messages against n(n-1)/2. Each
    point has its figure written by it; series with the same figures at every size are drawn
    as one line that says so (one line over another would hide it)."""
    series = bully_election_series(rows)
    rows = [r for pts in series.values() for r in pts]
    nodes = sorted({r["nodes"] for r in rows})
    several_commits = len({r["commit"] for r in rows}) > 1
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.8))
    markers = "os^Dvx"
    names, styles = {}, {}
    for i, (k, pts) in enumerate(series.items()):
        names[k] = ELECTION_SERIES.get(k, ", ".join(k))
        if several_commits:
            names[k] += f" (commit {_short(pts[0]['commit'])})"
        # The same colour and marker for a series in every plot, whichever series ran.
        c = list(ELECTION_SERIES).index(k) if k in ELECTION_SERIES else len(ELECTION_SERIES) + i
        styles[k] = dict(marker=markers[c % len(markers)], color=f"C{c % 10}", lw=2, ms=7)
    # Above left of each point: the lines rise to the right, so nothing is drawn there.
    value_label = dict(xytext=(-4, 4), textcoords="offset points", ha="right", va="bottom",
                       fontsize=8, bbox=dict(fc="white", ec="none", alpha=0.7, pad=0.1))
    for k, pts in series.items():
        after = [(r["nodes"], r["elected_after_detect_s"] * 1000) for r in pts
                 if _number(r["elected_after_detect_s"])]
        left.plot([n for n, _ in after], [v for _, v in after], label=names[k], **styles[k])
        for n, v in after:
            left.annotate(_ms(v), (n, v), color=styles[k]["color"], **value_label)
    left.axhline(ELECTION_GOAL_S * 1000, color="black", lw=1, ls="--",
                 label=f"goal: a new leader within {ELECTION_GOAL_S:g} s of the leader "
                       f"being declared dead")
    coincide = {}  # the messages per size → the series that sent exactly those
    for k, pts in series.items():
        msgs = tuple((r["nodes"], r["messages"]) for r in pts if _number(r["messages"]))
        if msgs:
            coincide.setdefault(msgs, []).append(k)
    for msgs, keys in coincide.items():
        if len(keys) == 1:
            style, label = styles[keys[0]], names[keys[0]]
        else:
            style = dict(marker="o", color="black", lw=2, ms=7)
            label = (f"all {len(keys)} series on the left sent the same counts: one line"
                     if len(keys) == len(series)
                     else _wrap(" = ".join(names[k] for k in keys) + ": the same counts", 70))
        right.plot([n for n, _ in msgs], [m for _, m in msgs], label=label, **style)
        for n, m in msgs:
            right.annotate(f"{m:g}", (n, m), color=style["color"], **value_label)
    textbook = sorted({(r["nodes"], r["textbook_messages"]) for r in rows
                       if _number(r["textbook_messages"])})
    right.plot([n for n, _ in textbook], [m for _, m in textbook], color="grey", lw=1,
               ls=":", marker=".", label="textbook bully worst case: n(n-1)/2 messages")
    for n, m in textbook:
        right.annotate(f"{m:g}", (n, m), color="grey", **value_label)
    left.set_title("Election time, from the first survivor declaring the leader dead\n"
                   "(and starting an election) until every survivor names the new one",
                   fontsize=10)
    left.set_ylabel("time (log scale)")
    _log_axis(left, _ms_tick)
    lo, hi = left.get_ylim()
    left.set_ylim(lo, max(hi, ELECTION_GOAL_S * 1000 * 2))  # the goal line clear of the frame
    right.set_title("Election messages sent by all survivors\n"
                    "(AreYouAlive, their answers, IAmLeader)", fontsize=10)
    right.set_ylabel("messages per election (log scale)")
    _log_axis(right, lambda v: f"{v:g}")
    for ax in (left, right):
        ax.set_xlabel("nodes in the network, the dead leader included")
        ax.set_xticks(nodes)
        ax.set_xticklabels([str(n) for n in nodes])
        if nodes:  # room for the figures left of the first points
            ax.set_xlim(nodes[0] - 0.16 * (nodes[-1] - nodes[0] or 1),
                        nodes[-1] + 0.06 * (nodes[-1] - nodes[0] or 1))
        ax.grid(alpha=0.3, which="both")
    _figure_legend(fig, (left, right), ncol=2)
    fig.suptitle(f"bully elections after the leader dies (median of {_runs_note(rows)} per "
                 f"point; {_commits_note(rows)})", fontsize=11)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    for ax in (left, right):
        _spread_labels(ax)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _spread_labels(ax) -> None:
    """Move the figures written by points of one x up, each clear of the one below it: points
    of series that nearly coincide would have them one over another. Call once laid out."""
    renderer = ax.figure.canvas.get_renderer()
    columns = {}
    for a in ax.texts:
        columns.setdefault(a.xy[0], []).append(a)
    for labels in columns.values():
        labels.sort(key=lambda a: a.get_window_extent(renderer).y0)
        top = None
        for a in labels:
            box = a.get_window_extent(renderer)
            if top is not None and box.y0 < top + 1:
                dx, dy = a.xyann
                a.xyann = (dx, dy + (top + 1 - box.y0) * 72 / ax.figure.dpi)
                box = a.get_window_extent(renderer)
            top = box.y1


# ---- the backbone cluster's failovers ----------------------------------------------------------

FAILOVER_LABELS = {"new_active_s": "a new active\nsequences",
                   "arrive_s": "its first DELIVER\nat every subscriber",
                   "deliver_s": "every subscriber\nin order again",
                   "confirm_s": "the publisher\nconfirmed again"}
FAILOVER_CLIENTS = {"pelotari": "pelotari clients (given every member: -b A,B,C)",
                    "floating": "seed clients of the floating address"}
FAILOVER_GOAL_S = 0.5
# Documented defaults of the anchors (README: "Run a highly available backbone").
FAILOVER_ANCHORS = ((2.0, "NATS: reconnect_time_wait, 2 s"),
                    (3.0, "keepalived/VRRP: 3 missed 1 s adverts, ≈3 s"),
                    (30.0, "Redis Sentinel: down-after-milliseconds, 30 s"))


def failover_series(rows: List[dict]) -> Dict[str, List[dict]]:
    """The kills failover.png draws: clients → the rows of its newest run (one commit) of
    SIGKILLs of the active (the other faults are in the summary's table)."""
    rows = [r for r in rows if r.get("fault", "kill") == "kill"]
    out = {}
    for clients in sorted({r["clients"] for r in rows}, key=lambda c: (c != "pelotari", c)):
        mine = [r for r in rows if r["clients"] == clients]
        newest = max(r["time"] for r in mine)
        out[clients] = sorted((r for r in mine if r["time"] == newest), key=lambda r: r["kill"])
    return out


def _failover_plot(rows: List[dict], path: pathlib.Path, plt) -> pathlib.Path:
    """Every kill of the newest run per client kind: one dot per kill and measure, the
    median and the worst written by them, against the 500 ms goal and the anchors' defaults."""
    series = failover_series(rows)
    measures = list(FAILOVER_LABELS)
    fig, ax = plt.subplots(figsize=(12, 6.2))
    width = 0.8 / max(1, len(series))
    for i, (clients, kills) in enumerate(series.items()):
        color = f"C{i}"
        for j, m in enumerate(measures):
            values = sorted(r[m] * 1000 for r in kills if _number(r[m]))
            x0 = j - 0.4 + width * (i + 0.5)
            xs = [x0 + width * 0.6 * ((k * 0.618) % 1 - 0.5) for k in range(len(values))]
            ax.scatter(xs, values, s=14, color=color, alpha=0.6,
                       label=f"{FAILOVER_CLIENTS.get(clients, clients)}: one dot per kill "
                             f"({len(kills)} kills, {kills[0]['rate']:,.0f} msgs/s, "
                             f"{kills[0]['subscribers']} subscribers)" if j == 0 else None)
            if values:
                med = statistics.median(values)  # (as the summary's table: Spark's median)
                ax.hlines(med, x0 - width * 0.4, x0 + width * 0.4, color=color, lw=2.5)
                ax.annotate(f"median {_ms(med)}\nworst {_ms(values[-1])}", (x0, values[-1]),
                            xytext=(0, 6), textcoords="offset points", ha="center",
                            va="bottom", fontsize=8, color=color)
            missing = sum(not _number(r[m]) for r in kills)
            if missing:
                ax.annotate(f"{missing} never", (x0, 1.2), ha="center", fontsize=8, color="red")
    ax.axhline(FAILOVER_GOAL_S * 1000, color="black", lw=1.2, ls="--",
               label=f"goal: {_ms(FAILOVER_GOAL_S * 1000)} worst case")
    for seconds, text in FAILOVER_ANCHORS:
        ax.axhline(seconds * 1000, color="grey", lw=1, ls=":")
        ax.annotate(text + " (default, for comparison)", (-0.45, seconds * 1000),
                    xytext=(0, 3), textcoords="offset points", ha="left", va="bottom",
                    fontsize=8, color="dimgrey")
    ax.set_yscale("log")
    ax.set_ylim(1, 60_000)
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _ms_tick(v)))
    ax.set_ylabel("time from the SIGKILL of the active backbone (log scale)")
    ax.set_xticks(range(len(measures)))
    ax.set_xticklabels([FAILOVER_LABELS[m] for m in measures])
    ax.set_xlim(-0.5, len(measures) - 0.5)
    ax.grid(alpha=0.3, axis="y", which="both")
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    ax.set_title("Failover of a 3-backbone cluster: the active SIGKILLed, real processes in "
                 f"network namespaces ({_commits_note([r for k in series.values() for r in k])})",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _failover_markdown(data: Dict[str, List[dict]]) -> List[str]:
    rows = data.get("failovers", [])
    if not rows:
        return []
    lines = ["## Backbone cluster failovers", "",
             "Per client kind, the newest commit's kills (from the SIGKILL of the active; "
             "median / worst) and the runs' counts.", "",
             "| clients | fault | msgs/s | kills | new active | first DELIVER at every "
             "subscriber | in order again | publisher confirmed again | confirmed, never "
             "delivered | numbers naming two messages | duplicates delivered | re-sent | commit |",
             "|---|---|---:|---:|---|---|---|---|---:|---:|---:|---:|---|"]
    kinds = sorted({(r["clients"], r["fault"]) for r in rows},
                   key=lambda k: (k[0] != "pelotari", k[0], k[1] != "kill", k[1]))
    for clients, fault in kinds:
        r = max((r for r in rows if (r["clients"], r["fault"]) == (clients, fault)),
                key=lambda r: r["time"])
        cells = [f"{_ms(_scaled(r[f'{m[:-2]}_median_s']))} / {_ms(_scaled(r[f'{m[:-2]}_worst_s']))}"
                 for m in FAILOVER_LABELS]
        lines.append(f"| {clients} | {fault} | {r['rate']:,.0f} | {r['kills']} | " +
                     " | ".join(cells) +
                     f" | {r['confirmed_not_delivered']} | {r['sequences_two_messages']} | "
                     f"{r['duplicates_delivered']} | {r['resent']} | `{_short(r['commit'])}` |")
    lines.append("")
    return lines


def _scaled(seconds):
    return seconds * 1000 if _number(seconds) else None


def _bully_sync_plot(rows: List[dict], path: pathlib.Path, plt) -> pathlib.Path:
    """Points per sync configuration, each with its figure: the clocks' spread (and, in the
    simulator, their largest distance from the true time; with processes, the spread right
    after the round), log ms, against the 1 ms goal. Points, not bars: the figures span
    sub-millisecond to minutes, a log axis, where a bar's length says nothing."""
    rows = sorted(latest_per(rows, "where", "method", "nodes"),
                  key=lambda r: (r["where"] != "simulator", r["method"] != "berkeley",
                                 r["method"] or "", r["nodes"]))
    measures = (("spread_right_after_ms", "spread between the clocks, right after the round "
                                          "(real processes only)", "C1", "D"),
                ("spread_ms", "spread between the clocks, once slewed", "C0", "o"),
                ("max_abs_error_ms", "largest distance of a clock from the true time "
                                     "(simulator only)", "C3", "s"))
    width = 0.8 / len(measures)
    fig, ax = plt.subplots(figsize=(max(8.0, 2.8 * len(rows)), 6.0))
    labelled = set()
    for i, r in enumerate(rows):
        shown = [b for b in measures if _number(r[b[0]])]
        for j, (field, label, color, marker) in enumerate(shown):  # centred on the configuration
            x, y = i + (j - (len(shown) - 1) / 2) * width, r[field]
            ax.plot([x], [y], ls="none", marker=marker, ms=9, color=color,
                    label=None if label in labelled else label)
            labelled.add(label)
            below = y < SYNC_GOAL_MS  # its figure then clear of the goal line
            ax.annotate(_ms(y), (x, y), ha="center", va="top" if below else "bottom",
                        fontsize=8, xytext=(0, -8 if below else 7), textcoords="offset points",
                        bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.3))
    ax.axhline(SYNC_GOAL_MS, color="black", lw=1, ls="--",
               label=f"goal: clocks within {SYNC_GOAL_MS:g} ms of each other")
    ax.set_ylabel("time (log scale)")
    _log_axis(ax, _ms_tick)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo / 2, hi * 2)  # room for the figures above and below the points

    def name(r):
        where = {"simulator": "simulator", "processes": "real processes"}.get(r["where"], r["where"])
        text = f"{where}, {r['nodes']} nodes\n{SYNC_METHODS.get(r['method'], r['method'])}"
        if _number(r["start_spread_s"]):
            text += f"\nclocks started up to {_seconds(r['start_spread_s'])} apart"
        return text
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([name(r) for r in rows], fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.grid(alpha=0.3, axis="y")
    handles, labels = ax.get_legend_handles_labels()
    rank = [b[1] for b in measures]  # the measures' order, then the goal
    order = sorted(range(len(labels)),
                   key=lambda k: rank.index(labels[k]) if labels[k] in rank else len(rank))
    fig.legend([handles[k] for k in order], [labels[k] for k in order], fontsize=8,
               loc="lower center", ncol=2, frameon=False)
    ax.set_title(f"bully clock sync after one round, lower is better (median of "
                 f"{_runs_note(rows)} per point; {_commits_note(rows)})", fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _bully_markdown(data: Dict[str, List[dict]]) -> List[str]:
    elections, sync = data.get("bully_elections", []), data.get("bully_sync", [])
    if not elections and not sync:
        return []
    lines = ["## bully", "",
             "The bully benchmark's latest figures per configuration (medians over its runs; "
             "times from the leader's death).", ""]
    if elections:
        order = list(ELECTION_SERIES)
        rows = sorted(latest_per(elections, "where", "how", "nodes"),
                      key=lambda r: (r["nodes"], order.index((r["where"], r["how"]))
                                     if (r["where"], r["how"]) in order else len(order),
                                     r["where"], r["how"]))
        lines += ["### Elections", "",
                  f"detect: until the first survivor starts an election; elected after detection: "
                  f"from then until every survivor names the new leader (goal: "
                  f"{ELECTION_GOAL_S:g} s); messages: election messages sent by all survivors, "
                  f"against the textbook worst case n(n-1)/2.", "",
                  "| nodes | where | how | detect | elected after detection | elected | "
                  "messages / textbook | runs | agreed | commit |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            msgs = (f"{r['messages']:g} / {r['textbook_messages']}" if _number(r["messages"])
                    else f"— / {r['textbook_messages']}")
            lines.append(f"| {r['nodes']} | {r['where']} | {r['how']} | {_seconds(r['detect_s'])} | "
                         f"{_seconds(r['elected_after_detect_s'])} | {_seconds(r['elected_s'])} | "
                         f"{msgs} | {r['runs']} | {r['agreed']:.0%} | `{_short(r['commit'])}` |")
        lines.append("")
    if sync:
        rows = sorted(latest_per(sync, "where", "method", "nodes"),
                      key=lambda r: (r["where"] != "simulator", r["method"] != "berkeley",
                                     r["method"] or "", r["nodes"]))
        lines += ["### Clock sync (one round)", "",
                  f"spread: between the nodes' logical clocks once slewed (goal: {SYNC_GOAL_MS:g} "
                  f"ms); error: their distance from the true time (simulator only).", "",
                  "| where | method | nodes | clocks started apart | spread right after | spread | "
                  "mean error | max error | outliers / unanswered | runs | commit |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            health = (f"{r['outliers']} / {r['unanswered']}"
                      if _number(r["outliers"]) or _number(r["unanswered"]) else "—")
            started = _seconds(r["start_spread_s"])
            lines.append(f"| {r['where']} | {SYNC_METHODS.get(r['method'], r['method'])} | "
                         f"{r['nodes']} | {started} | {_ms(r['spread_right_after_ms'])} | "
                         f"{_ms(r['spread_ms'])} | {_ms(r['mean_error_ms'], signed=True)} | "
                         f"{_ms(r['max_abs_error_ms'])} | {health} | {r['runs']} | "
                         f"`{_short(r['commit'])}` |")
        lines.append("")
    return lines


# ---- potato -------------------------------------------------------------------------------------

POTATO_MESSAGES_PER_EDGE_GOAL = 4  # election messages per edge of the mesh, at most
POTATO_DEADLINE_MS = 300  # the seed's: an originator counts the answers it has after 300 ms
TRANSPORTS = {"webrtc": "WebRTC", "tcp": "TCP"}
MESH_NAMES = {"A-G": "the seed's A–G example"}


def potato_condition(r: dict) -> str:
    """A simulator row's network conditions, in words."""
    parts = ["cut in two halves"] if r["partition"] else []
    if _number(r["loss"]) and r["loss"] > 0:
        parts.append(f"{r['loss'] * 100:g} % of messages lost")
    return ", ".join(parts) or "no loss"


def _condition_order(r: dict):
    return (bool(r["partition"]), r["loss"] or 0.0)


def _config(r: dict) -> str:
    return f"{r['nodes']:,} clients, average degree {r['degree']:g}"


def _mesh_name(r: dict) -> str:
    name = MESH_NAMES.get(r["mesh"])
    if name is None:
        name = "a random mesh" if r["mesh"] == f"{r['nodes']} clients" else r["mesh"]
    return f"{name}\n({r['nodes']} clients, {r['edges']} links)"


def _bars(ax, series, fmt, width: float = 0.8) -> None:
    """Grouped bars: series are (label, values per category (None: not measured), style[,
    notes per category]), side by side within each category, each bar labelled with
    fmt(value) and its note below that."""
    w = width / len(series)
    for j, (label, values, style, *notes) in enumerate(series):
        first = True
        for i, v in enumerate(values):
            if not _number(v):
                continue
            x = i + (j - (len(series) - 1) / 2) * w
            ax.bar(x, v, w * 0.95, label=label if first else None, **style)
            first = False
            text = fmt(v) + (f"\n{notes[0][i]}" if notes and notes[0][i] else "")
            ax.annotate(text, (x, v), ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points",
                        bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.3))


def _goal(ax, y: float, label: str, color: str = "black", side: str = "right",
          written: bool = True) -> None:
    """A dashed goal line, its label written on it at the right (or left), or only in the
    legend."""
    ax.axhline(y, color=color, lw=1, ls="--", label=label)
    if written:
            ax.annotate(label, (1 if side == "right" else 0, y), xycoords=("axes fraction", "data"),
                    xytext=(-4 if side == "right" else 4, 3), textcoords="offset points", ha=side,
                    va="bottom", fontsize=8, color=color,
                    bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.3))


def _categories(ax, names: List[str]) -> None:
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.grid(alpha=0.3, axis="y", which="both")


def _figure_legend(fig, axes, ncol: int = 2) -> None:
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)


def _potato_plot(broadcasts: List[dict], elections: List[dict], path: pathlib.Path,
                 plt) -> pathlib.Path:
    """The simulator's mesh, per network condition (x) and mesh configuration (bars): a
    broadcast's reach, redundancy (goal: degree − 1) and latency; an election's time to the
    result (against the 300 ms deadline), messages per edge (goal: 4) and clients counted."""
    broadcasts = latest_per(broadcasts, *trend.POTATO_SIM_KEY)
    elections = latest_per(elections, *trend.POTATO_SIM_KEY)
    rows = broadcasts + elections
    conditions = []
    for r in sorted(rows, key=_condition_order):
        if potato_condition(r) not in conditions:
            conditions.append(potato_condition(r))
    configs = sorted({(r["nodes"], r["degree"]) for r in rows})
    several = len(configs) > 1

    def values(table, field, config, scale=1.0):
        cell = {potato_condition(r): r for r in table if (r["nodes"], r["degree"]) == config}
        return [cell[c][field] * scale if c in cell and _number(cell[c][field]) else None
                for c in conditions]

    def label(config, what=""):
        name = _config(dict(nodes=config[0], degree=config[1])) if several else ""
        return ", ".join(x for x in (name, what) if x) or None

    def colour(k, shade=0):
        return dict(color=f"C{(2 * k + shade) % 10}" if several else f"C{shade}")

    fig, axes = plt.subplots(2, 3, figsize=(16, 9.2))
    (reach, rmr, lat), (took, per_edge, counted) = axes
    pct = lambda v: f"{v:.1f} %" if v < 99.95 else "100 %"  # noqa: E731
    _bars(reach, [(label(c), values(broadcasts, "reached_of_reachable", c, 100), colour(k))
                  for k, c in enumerate(configs)], pct)
    reach.set_ylim(0, 135)
    reach.set_ylabel("clients reached (% of those reachable)")
    reach.set_title("Broadcast: share of the clients it could reach\n"
                    "that it reached (higher is better)", fontsize=10)
    _bars(rmr, [(None, values(broadcasts, "rmr", c), colour(k))
                for k, c in enumerate(configs)], lambda v: f"{v:.2f}")
    for k, c in enumerate(configs):
        _goal(rmr, c[1] - 1, f"goal: RMR ≤ degree − 1 = {c[1] - 1:g}"
              + (f" ({c[0]:,} clients, degree {c[1]:g})" if several else ""),
              colour(k)["color"] if several else "black", written=not several)
    rmr.set_ylim(0, max([c[1] - 1 for c in configs] + [r["rmr"] for r in broadcasts
                                                        if _number(r["rmr"])]) * 1.25)
    rmr.set_ylabel("RMR = copies sent / (clients reachable − 1) − 1")
    rmr.set_title("Broadcast: relative message redundancy\n"
                  "(extra copies per client reached; lower is better)", fontsize=10)
    _bars(lat, [s for k, c in enumerate(configs) for s in (
        (label(c, "median client (p50)"), values(broadcasts, "latency_p50_ms", c), colour(k)),
        (label(c, "99th percentile (p99)"), values(broadcasts, "latency_p99_ms", c),
         dict(colour(k), alpha=0.55, hatch="//")))], (lambda v: f"{v:.1f}") if several else _ms)
    lat.set_ylim(0, max([r["latency_p99_ms"] for r in broadcasts
                         if _number(r["latency_p99_ms"])] + [1]) * 1.2)
    lat.set_ylabel("delivery latency (ms)")
    if broadcasts and not several:
        lat.legend(fontsize=8, loc="upper left")
    lat.set_title("Broadcast: time from sending to delivery\n"
                  "(solid: median client, hatched: 99th percentile)", fontsize=10)
    _bars(took, [(label(c), values(elections, "elected_ms", c), colour(k))
                 for k, c in enumerate(configs)], _ms)
    _goal(took, POTATO_DEADLINE_MS, f"{POTATO_DEADLINE_MS} ms deadline: the originator\n"
                                    "waits this long for lost answers", "dimgrey")
    # A linear axis, as the other panels: bars there are as long as their figures (on a log
    # axis their length said nothing); the deadline bounds the figures but for stragglers.
    took.set_ylabel("time to the result (ms)")
    took.set_ylim(0, max([POTATO_DEADLINE_MS] + [r["elected_ms"] for r in elections
                                                 if _number(r["elected_ms"])]) * 1.3)
    took.set_title("Election: from `propose` until the originator\n"
                   "has its result (lower is better)", fontsize=10)
    _bars(per_edge, [(label(c), values(elections, "messages_per_edge", c), colour(k))
                     for k, c in enumerate(configs)], lambda v: f"{v:.2f}")
    _goal(per_edge, POTATO_MESSAGES_PER_EDGE_GOAL,
          f"goal: ≤ {POTATO_MESSAGES_PER_EDGE_GOAL} election messages per edge")
    per_edge.set_ylim(0, POTATO_MESSAGES_PER_EDGE_GOAL * 1.3)
    per_edge.set_ylabel("election messages / edges the originator reaches")
    per_edge.set_title("Election: messages per edge (requests and answers;\n"
                       "in a cut mesh, over the originator's side)", fontsize=10)
    def exact(config):  # how many runs counted everybody exactly once, above each bar
        cell = {potato_condition(r): r for r in elections if (r["nodes"], r["degree"]) == config}
        notes = []
        for cond in conditions:
            r = cell.get(cond)
            note = None
            if r and several:  # narrow bars
                note = f"{round(r['counted_once'] * r['runs'])}/{r['runs']}\nexact"
            elif r:
                note = f"exact in {round(r['counted_once'] * r['runs'])} of {r['runs']} runs"
                if r["worst_counted_share"] < r["counted_share"]:
                    note += f"\n(worst run {r['worst_counted_share']:.1%})"
            notes.append(note)
        return notes
    _bars(counted, [(label(c), values(elections, "counted_share", c, 100), colour(k), exact(c))
                    for k, c in enumerate(configs)], pct)
    counted.set_ylim(0, 135)
    counted.set_ylabel("clients counted (% of those reachable)")
    counted.set_title("Election: reachable clients the result counted\n"
                      "(the goal: all of them, each counted exactly once)", fontsize=10)
    for ax in axes.flat:
        _categories(ax, conditions)
    for table, kind, row in ((broadcasts, "broadcast", axes[0]), (elections, "election", axes[1])):
        for ax in row if not table else ():
            ax.text(0.5, 0.5, f"no {kind} records", transform=ax.transAxes, ha="center",
                    color="grey")
    if several:  # the configurations' colours and their RMR goals under the plots
        _figure_legend(fig, [lat, rmr], ncol=2)
    what = "" if several else f"{_config(rows[0])}, "
    fig.suptitle(f"potato in the simulator: {what}one broadcast and one election from a random "
                 f"client per run (median of {_runs_note(rows)} per bar, one seed each; "
                 f"{_commits_note(rows)})", fontsize=11)
    fig.tight_layout(rect=(0, 0.03 + 0.022 * len(configs) if several else 0, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _potato_mesh_plot(rows: List[dict], path: pathlib.Path, plt) -> pathlib.Path:
    """Real processes, per mesh (x) and transport (bars): set-up time, election p50/p99 and CPU
    per delivered broadcast."""
    rows = latest_per(rows, "mesh", "transport", "nodes", "edges")
    meshes = sorted({(r["nodes"], r["edges"], r["mesh"]) for r in rows})
    transports = sorted({r["transport"] for r in rows},
                        key=lambda t: (list(TRANSPORTS).index(t) if t in TRANSPORTS
                                       else len(TRANSPORTS), t))
    cell = {((r["nodes"], r["edges"], r["mesh"]), r["transport"]): r for r in rows}

    def values(t, field):
        return [cell[(m, t)][field] if (m, t) in cell else None for m in meshes]

    def name(t):
        return TRANSPORTS.get(t, t)

    def colour(t):  # the same colour for a transport in every plot, whichever ran
        known = list(TRANSPORTS)
        return f"C{known.index(t) if t in known else len(known) + transports.index(t)}"

    fig, (setup, took, cpu) = plt.subplots(1, 3, figsize=(16, 5.8))
    _bars(setup, [(name(t), values(t, "setup_s"), dict(color=colour(t))) for t in transports],
          lambda v: f"{v:.2f} s")
    setup.set_ylabel("set-up time (s)")
    setup.set_title("Set-up: from starting the first client until\n"
                    "every client has all its peers (lower is better)", fontsize=10)
    _bars(took, [s for t in transports for s in (
        (None, values(t, "election_p50_ms"), dict(color=colour(t))),
        (None, values(t, "election_p99_ms"), dict(color=colour(t), alpha=0.55, hatch="//")))],
          lambda v: f"{v:.1f}")
    took.set_ylabel("election time (ms)")
    took.set_title("Election: from `propose` until the originator has its result\n"
                   "(solid: median, hatched: p99, here the slowest of a run's elections)",
                   fontsize=10)
    _bars(cpu, [(name(t), values(t, "cpu_us_per_delivery"), dict(color=colour(t)))
                for t in transports], lambda v: f"{v:.0f} µs")
    cpu.set_ylabel("CPU time of all clients per delivery (µs)")
    cpu.set_title("CPU cost: all clients' CPU time per broadcast\n"
                  "delivered to one client (lower is better)", fontsize=10)
    for ax in (setup, took, cpu):
        _categories(ax, [_mesh_name(dict(zip(("nodes", "edges", "mesh"), m))) for m in meshes])
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # room for the value labels
    from matplotlib.patches import Patch

    handles = [Patch(color=colour(t), label=name(t)) for t in transports]
    handles += [Patch(facecolor="white", edgecolor="black", hatch="//",
                      label="hatched: a run's p99 election time (solid: its p50)")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8,
               frameon=False)
    fig.suptitle(f"potato with real processes on one machine (clients on 127.0.0.k): median of "
                 f"{_runs_note(rows)} per bar; {_commits_note(rows)}", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _check(ok: bool) -> str:
    return " ✓" if ok else " ✗"


def _potato_markdown(data: Dict[str, List[dict]]) -> List[str]:
    broadcasts = data.get("potato_broadcasts", [])
    elections = data.get("potato_elections", [])
    meshes = data.get("potato_meshes", [])
    mixed = data.get("potato_mixed", [])
    if not (broadcasts or elections or meshes or mixed):
        return []
    lines = ["## potato", "",
             "Potato's latest figures per configuration (medians over its runs).", ""]
    if broadcasts or elections:
        key = trend.POTATO_SIM_KEY
        cells = {}
        for kind, rows in (("b", latest_per(broadcasts, *key)), ("e", latest_per(elections, *key))):
            for r in rows:
                cells.setdefault(tuple(r[k] for k in key), {})[kind] = r
        lines += ["### Simulator", "",
                  "A broadcast and an election from a random client per run (one seed each). "
                  "reached: of the clients the origin could reach; RMR: copies sent / (clients "
                  "reachable − 1) − 1, goal ≤ degree − 1; election: until the originator has its "
                  f"result (deadline {POTATO_DEADLINE_MS} ms); messages per edge: over the edges "
                  f"the originator can reach, goal ≤ {POTATO_MESSAGES_PER_EDGE_GOAL}; counted "
                  "once: runs whose result counted every reachable client exactly once; took the "
                  "frame: share of the reachable clients on the winner's frame afterwards.", "",
                  "| clients | degree | conditions | reached | RMR | last hops | latency p50 / p99 "
                  "| election | messages per edge | counted once | took the frame "
                  "| runs (broadcasts / elections) | commit |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for k in sorted(cells, key=lambda k: (k[0], k[1], _condition_order(dict(zip(key, k))))):
            b, e = cells[k].get("b"), cells[k].get("e")
            any_row = b or e
            if b:
                reached = f"{b['reached_of_reachable']:.1%}"
                if b["worst_reached_of_reachable"] < b["reached_of_reachable"]:
                    reached += f" (worst {b['worst_reached_of_reachable']:.1%})"
                rmr = f"{b['rmr']:.2f}{_check(b['rmr'] <= b['rmr_goal'])}"
                hops = f"{b['last_hops']:g}"
                lat = f"{_ms(b['latency_p50_ms'])} / {_ms(b['latency_p99_ms'])}"
            else:
                reached = rmr = hops = lat = "—"
            if e:
                took = _ms(e["elected_ms"])
                per_edge = (f"{e['messages_per_edge']:.2f}"
                            f"{_check(e['messages_per_edge'] <= POTATO_MESSAGES_PER_EDGE_GOAL)}")
                once = f"{round(e['counted_once'] * e['runs'])} of {e['runs']}"
                if e["worst_counted_share"] < 1:
                    once += (f" (worst run counted {e['worst_counted_share']:.1%}, median "
                             f"{e['counted_share']:.1%})")
                frame = "—" if e.get("took_frame") is None else f"{e['took_frame']:.1%}"
            else:
                took = per_edge = once = frame = "—"
            runs = sorted({r["runs"] for r in (b, e) if r})
            runs = f"{runs[0]}" if len(runs) == 1 else f"{b['runs']} / {e['runs']}"
            commits = sorted({_short(r["commit"]) for r in (b, e) if r})
            lines.append(f"| {any_row['nodes']} | {any_row['degree']:g} | "
                         f"{potato_condition(any_row)} | {reached} | {rmr} | {hops} | {lat} | "
                         f"{took} | {per_edge} | {once} | {frame} | {runs} | "
                         f"{', '.join(f'`{c}`' for c in commits)} |")
        lines.append("")
    if meshes:
        rows = sorted(latest_per(meshes, "mesh", "transport", "nodes", "edges"),
                      key=lambda r: (r["nodes"], r["mesh"], list(TRANSPORTS).index(r["transport"])
                                     if r["transport"] in TRANSPORTS else len(TRANSPORTS),
                                     r["transport"]))
        lines += ["### Real processes", "",
                  "set-up: from the first client's start until every client has all its peers; "
                  "election: from `propose` until the originator has its result (each run's "
                  "p50 and p99); CPU: all clients' CPU time per broadcast delivered to one "
                  "client.", "",
                  "| mesh | clients | links | transport | set-up | election p50 / p99 | "
                  "CPU per delivery | runs | commit |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {_mesh_name(r).split(chr(10))[0]} | {r['nodes']} | "
                         f"{r['edges']} | {TRANSPORTS.get(r['transport'], r['transport'])} | "
                         f"{r['setup_s']:.2f} s | {_ms(r['election_p50_ms'])} / "
                         f"{_ms(r['election_p99_ms'])} | {r['cpu_us_per_delivery']:.0f} µs | "
                         f"{r['runs']} | `{_short(r['commit'])}` |")
        lines.append("")
    if mixed:
        rows = sorted(latest_per(mixed, "mesh", "transport", "python_clients", "pages", "edges"),
                      key=lambda r: (r["python_clients"] + r["pages"], r["mesh"]))
        lines += ["### Pages in a browser beside Python clients", "",
                  "Pages in headless chromium, each linked to the Python client that served it "
                  "and to that client's other pages; elections proposed by a page. set-up: "
                  "from the first client's start until every client and page has all its "
                  "peers; page to first peer: from the page's start (navigation) to its first "
                  "link open; election: from `propose` until the page has its result "
                  "(medians of each run's p50 and p99, smallest – largest in brackets); "
                  "agreed: elections won whose frame every client and page took; node CPU: "
                  "a page-serving node's CPU, idle, and what each page adds to it.", "",
                  "| mesh | Python clients | pages | links | transport | set-up | page to "
                  "first peer | election p50 / p99 | agreed | node CPU idle / per page | "
                  "runs | commit |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(
                f"| {r['mesh']} | {r['python_clients']} | {r['pages']} | {r['edges']} | "
                f"{TRANSPORTS.get(r['transport'], r['transport'])} | {r['setup_s']:.2f} s | "
                f"{r['page_first_peer_ms']:.0f} ms | {_ms(r['election_p50_ms'])} "
                f"({_ms(r['election_p50_ms_min'])} – {_ms(r['election_p50_ms_max'])}) / "
                f"{_ms(r['election_p99_ms'])} ({_ms(r['election_p99_ms_min'])} – "
                f"{_ms(r['election_p99_ms_max'])}) | {r['frames_agreed']} of "
                f"{r['elections_won']} won ({r['elections']} run) | "
                f"{r['node_cpu_idle_pct']:.1f} % / {r['node_cpu_pct_per_page']:.1f} % | "
                f"{r['runs']} | `{_short(r['commit'])}` |")
        lines.append("")
    return lines


# ---- swarm --------------------------------------------------------------------------------------

SWARM_BYTES_GOAL = 64  # bytes per connection in the table, at most (docs/protocols/swarm.md)
SWARM_PONGS_GOAL = 100_000  # Ping → Pong per second on one core, at least (issue 14)
SWARM_STACK_COLOURS = {"pure Python": "C0", "Cython": "C1"}


def _swarm_stacks(rows: List[dict]) -> List[str]:
    known = list(SWARM_STACK_COLOURS)
    return sorted({r["stack"] for r in rows}, key=lambda s: (known.index(s) if s in known
                                                             else len(known), s or ""))


def _stack_colour(stack: str, stacks: List[str]) -> str:
    known = list(SWARM_STACK_COLOURS)
    return SWARM_STACK_COLOURS.get(stack) or f"C{len(known) + stacks.index(stack)}"


def _loss(v) -> str:
    return f"{v * 100:g} % lost" if _number(v) and v > 0 else "no loss"


SWARM_CONFIG_WORDS = {"bootstraps": lambda v: f"{v} bootstrap{'s' if v != 1 else ''}",
                      "loss": _loss,
                      "target_direct": lambda v: f"target {v} direct",
                      "capacity": lambda v: f"tables of {v:,}",
                      "max_known": lambda v: f"{v:,} known peers kept"}


def swarm_configs(rows: List[dict]) -> Dict[tuple, str]:
    """The simulator's configurations (SWARM_SIM_KEY but nodes) → a name saying what differs
    between them ("" when there is one); one with settings not recorded (an older or broken
    record) says so."""
    fields = [k for k in trend.SWARM_SIM_KEY if k != "nodes"]
    configs = sorted({tuple(r[k] for k in fields) for r in rows},
                     key=lambda c: tuple((v is None, v) for v in c))
    varying = [i for i in range(len(fields))
               if len({c[i] for c in configs if c[i] is not None}) > 1]
    names = {}
    for c in configs:
        parts = [SWARM_CONFIG_WORDS[fields[i]](c[i]) for i in varying if c[i] is not None]
        if None in c and len(configs) > 1:
            parts.append("settings not recorded")
        names[c] = ", ".join(parts)
    return names


def _swarm_config(r: dict) -> tuple:
    return tuple(r[k] for k in trend.SWARM_SIM_KEY if k != "nodes")


def _wrap(text: str, width: int = 112) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _converged_note(r: dict) -> str:
    ok = round(r["converged"] * r["runs"])
    return "" if ok == r["runs"] else f"converged in {ok} of {r['runs']}"


def swarm_bench_cells(bench: List[dict], speedups: List[dict]) -> Dict[str, dict]:
    """measure → {"rows": {stack: row}, "ratio": speedup row or None}: each measure's newest
    commit where both stacks ran (its ratio then is of the bars shown), else each stack's
    newest."""
    out = {}
    for m in sorted({r["measure"] for r in bench}, key=lambda m: (m is None, m)):
        mine = [r for r in bench if r["measure"] == m]
        both = latest_per([s for s in speedups if s["measure"] == m], "measure")
        if both:
            rows = [r for r in mine if r["commit"] == both[0]["commit"]]
        else:
            rows = latest_per(mine, "stack")
        out[m] = {"rows": {r["stack"]: r for r in rows}, "ratio": both[0] if both else None}
    return out


def _swarm_time_panel(ax, joins, recoveries, configs, markers) -> None:
    for phase, rows, colour in (("join", joins, "C0"), ("recovery", recoveries, "C3")):
        for k, (config, name) in enumerate(configs.items()):
            pts = sorted((r for r in rows if _swarm_config(r) == config), key=lambda r: r["nodes"])
            if not pts:
                continue
            if phase == "join":
                label = "join: from the first node's start until every node holds its target"
            else:
                shares = sorted({round(100 * r["crashed"] / r["nodes"]) for r in pts
                                 if _number(r["crashed"])})
                label = (f"recovery: from crashing {'/'.join(map(str, shares)) or '?'} % of the "
                         f"nodes until every survivor again holds its target, all live")
            label = _wrap(label + (f" ({name})" if name else ""))
            shown = [r for r in pts if _number(r["seconds"])]
            ax.errorbar([r["nodes"] for r in shown], [r["seconds"] for r in shown],
                        yerr=[[r["seconds"] - r["fastest_s"] for r in shown],
                              [r["slowest_s"] - r["seconds"] for r in shown]],
                        color=colour, marker=markers[k % len(markers)], ls=["-", "--", ":"][k % 3],
                        capsize=3, label=label)
            for r in pts:
                note = _converged_note(r)
                if not _number(r["seconds"]):
                    ax.annotate(f"{phase}{f' ({name})' if name else ''}: never converged",
                                (r["nodes"], 0.97),
                                xycoords=("data", "axes fraction"), ha="center", va="top",
                                fontsize=8, color=colour)
                elif note:
                    ax.annotate(note, (r["nodes"], r["slowest_s"]), xytext=(0, 4),
                                textcoords="offset points", ha="center", fontsize=8, color=colour)


def _swarm_traffic_panel(ax, joins, recoveries, configs, markers) -> bool:
    """GetConnections and Connections sent per node against the swarm's size: their bytes when
    the records have them (True), else their counts. Join and recovery differ in line style
    and marker fill (hollow: recovery), so a series of one point still says which it is. With
    one swarm size, bars per phase (and configuration) with their figures instead."""
    in_bytes = any(_number(r["connections_bytes_per_node"]) for r in joins + recoveries)
    suffix = "_bytes_per_node" if in_bytes else "_per_node"
    messages = (("GetConnections", "C2", "get_connections" + suffix),
                ("Connections", "C4", "connections" + suffix))
    phases = (("join", joins, "-", None), ("recovery", recoveries, "--", "white"))
    sizes = sorted({r["nodes"] for r in joins + recoveries})
    if len(sizes) == 1:
        cells = [(phase, config, name, {_swarm_config(r): r for r in rows}.get(config))
                 for phase, rows, _, _ in phases for config, name in configs.items()]
        cells = [c for c in cells if c[3]]
        fmt = (lambda v: f"{v:,.0f}") if in_bytes else (lambda v: f"{v:.1f}")
        _bars(ax, [(f"{what} ({'requests' if what == 'GetConnections' else 'answers'})",
                    [r[field] for *_, r in cells], dict(color=colour))
                   for what, colour, field in messages], fmt)
        names = [("join, per node" if phase == "join" else
                  f"recovery from crashing {_crashed_share(r)} % of\nthe nodes, per survivor")
                 + (f"\n({name})" if name else "") for phase, _, name, r in cells]
        _categories(ax, names)
        ax.set_xlabel(f"phase, in a swarm of {sizes[0]:,} nodes")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)  # room for the figures
        return in_bytes
    for phase, rows, ls, face in phases:
        for what, colour, field in messages:
            for k, (config, name) in enumerate(configs.items()):
                pts = sorted((r for r in rows if _swarm_config(r) == config
                              and _number(r[field])), key=lambda r: r["nodes"])
                if not pts:
                    continue
                who = "node" if phase == "join" else "survivor"
                label = _wrap(f"{what}{' bytes' if in_bytes else ''} sent per {who}, {phase}"
                              + (f" ({name})" if name else ""))
                # Counts: a Connections answers each GetConnections, the two lines nearly
                # coincide, the first drawn wider underneath.
                wide = what == "GetConnections" and not in_bytes
                ax.plot([r["nodes"] for r in pts], [r[field] for r in pts], color=colour, ls=ls,
                        marker=markers[k % len(markers)], markerfacecolor=face or colour,
                        lw=4 if wide else 1.5, ms=9 if wide else 6, label=label)
    return in_bytes


def _crashed_share(r: dict) -> str:
    return f"{100 * r['crashed'] / r['nodes']:.0f}" if _number(r.get("crashed")) else "?"


def _nodes_axis(ax, nodes: List[int]) -> None:
    from matplotlib.ticker import NullLocator

    if nodes and nodes[-1] / nodes[0] >= 8:
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(nodes)
    ax.set_xticklabels([f"{n:,}" for n in nodes], fontsize=8)
    ax.set_xlabel("nodes in the swarm" + (" (log scale)" if ax.get_xscale() == "log" else ""))
    ax.grid(alpha=0.3)


def _swarm_bench_panel(ax, cells, measures, field, fmt, goal, goal_label, short_goal,
                       category) -> None:
    """Bars per measure (x) and stack (side by side), each labelled with its value (inside the
    bar when it is tall enough, else above), and above each pair how many times better Cython
    is than pure Python."""
    from matplotlib.ticker import FuncFormatter

    rows = [r for m in measures for r in cells[m]["rows"].values()]
    stacks = _swarm_stacks(rows)
    values = [r[field] for r in rows if _number(r[field])]
    top = max([goal] + values) * 1.3  # room above the tallest bar for the ratio
    ax.set_ylim(0, top)
    width = 0.7 / len(stacks)
    label_box = dict(fc="white", ec="none", alpha=0.8, pad=0.3)
    for j, stack in enumerate(stacks):
        first = True
        for i, m in enumerate(measures):
            r = cells[m]["rows"].get(stack)
            if not r or not _number(r[field]):
                continue
            v, x = r[field], i + (j - (len(stacks) - 1) / 2) * width
            ax.bar(x, v, width * 0.95, color=_stack_colour(stack, stacks),
                   label=stack if first else None)
            first = False
            text = fmt(v)
            inside = v / top >= 0.035 * (text.count("\n") + 1) + 0.02
            ax.annotate(text, (x, v), ha="center", va="top" if inside else "bottom",
                        xytext=(0, -3 if inside else 3), textcoords="offset points", fontsize=8,
                        color="white" if inside else "black",
                        fontweight="bold" if inside else "normal",
                        bbox=None if inside else label_box)
    for i, m in enumerate(measures):
        ratio = cells[m]["ratio"]
        if not ratio or not _number(ratio["ratio"]):
            continue
        pair = [r[field] for r in cells[m]["rows"].values() if _number(r[field])]
        y = max(pair)
        if y < goal and goal - y < 0.15 * top:  # above the goal line rather than across it
            y = goal
        better = "faster" if ratio["higher_is_better"] else "smaller"
        ax.annotate(f"Cython: {ratio['ratio']:.1f}× {better}\nthan pure Python", (i, y),
                    xytext=(0, 5), textcoords="offset points", ha="center", va="bottom",
                    fontsize=9, bbox=label_box)
    ax.axhline(goal, color="black", lw=1, ls="--", label=goal_label, zorder=0.9)  # under bars
    ax.annotate(short_goal, (0, goal), xycoords=("axes fraction", "data"), xytext=(4, 3),
                textcoords="offset points", ha="left", va="bottom", fontsize=8, bbox=label_box)
    names = [category(m, cells[m]["rows"]) for m in measures]
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_xlim(-0.85, len(names) - 0.15)
    ax.grid(alpha=0.3, axis="y")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))


def _sockets_category(rows: Dict[str, dict]) -> str:
    stacks = _swarm_stacks(list(rows.values()))

    def each(field, fmt):
        return " / ".join(fmt(rows[s][field]) if _number(rows[s][field]) else "?"
                          for s in stacks)
    peers = sorted({r["peers"] for r in rows.values() if _number(r["peers"])})
    loads = sorted({f"{r['loadavg_1m']:.1f}" for r in rows.values() if _number(r["loadavg_1m"])},
                   key=float)
    load = f"\nmachine load average {'–'.join(dict.fromkeys((loads[0], loads[-1])))}" \
        if loads else ""
    return "\n".join([
        "over real UDP sockets, per node CPU second",
        f"({'/'.join(f'{p:,}' for p in peers) or '?'} peers; {' / '.join(stacks)}:",
        f"Pings/s offered {each('offered_per_second', lambda v: f'{v:,.0f}')},",
        f"Pongs/s {each('pongs_per_second', lambda v: f'{v:,.0f}')}, "
        f"lost {each('loss', lambda v: f'{v:.1%}')}{load})"])


def _swarm_plot(data: Dict[str, List[dict]], path: pathlib.Path, plt) -> pathlib.Path:
    """Top: the simulator, against the swarm's size: seconds to join and to recover from a
    crash (median, bars from fastest to slowest seed), GetConnections and Connections sent per
    node. Bottom: the benchmark, pure Python and Cython side by side: bytes per connection
    against the ≤ 64 goal, Pongs per second against the ≥ 100,000 goal, Cython's ratio to pure
    Python written on its bars."""
    joins = latest_per(data.get("swarm_joins", []), *trend.SWARM_SIM_KEY)
    recoveries = latest_per(data.get("swarm_recoveries", []), *trend.SWARM_SIM_KEY)
    cells = swarm_bench_cells(data.get("swarm_bench", []), data.get("swarm_speedups", []))
    sims = joins + recoveries
    configs = swarm_configs(sims)
    markers = "osD^v"
    nodes = sorted({r["nodes"] for r in sims})
    targets = sorted({r["target_direct"] for r in sims if _number(r["target_direct"])})
    target = "/".join(map(str, targets)) or "its target of"
    fig = plt.figure(figsize=(15, 12.5))
    grid = fig.add_gridspec(2, 6)  # the Pongs panel, with two measures, twice the memory's
    took, traffic = fig.add_subplot(grid[0, :3]), fig.add_subplot(grid[0, 3:])
    memory, pongs = fig.add_subplot(grid[1, :2]), fig.add_subplot(grid[1, 2:])
    _swarm_time_panel(took, joins, recoveries, configs, markers)
    took.set_ylabel("simulated seconds (checked once a second)")
    took.set_ylim(0, took.get_ylim()[1] * 1.1)
    took.set_title(f"Simulated swarm: seconds until every node holds {target} direct\n"
                   f"connections (median; bars: fastest to slowest seed)", fontsize=10)
    if _swarm_traffic_panel(traffic, joins, recoveries, configs, markers):
        traffic.set_ylabel("bytes sent per node (per survivor in the recovery)")
        traffic.set_title("Simulated swarm: bytes of GetConnections (requests, padded to the\n"
                          "answer's room) and Connections (answers: known peers) sent per node\n"
                          "during the join and the recovery (median over the seeds)", fontsize=10)
        from matplotlib.ticker import FuncFormatter

        traffic.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    else:
        traffic.set_ylabel("messages sent per node (per survivor in the recovery)")
        traffic.set_title("Simulated swarm: GetConnections and Connections sent per node during\n"
                          "the join and the recovery (median over the seeds; a Connections\n"
                          "answers each GetConnections, so the two nearly match)",
                          fontsize=10)
    traffic.set_ylim(0, traffic.get_ylim()[1] * 1.1)
    for ax in (took, traffic):
        if sims:
            if ax is took or len(nodes) > 1:  # one size: the traffic panel is bars per phase
                _nodes_axis(ax, nodes)
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8,
                      frameon=False)
        else:
            ax.text(0.5, 0.5, "no swarm-sim records", transform=ax.transAxes, ha="center",
                    color="grey")
    mem = [m for m in cells if m == "memory"]
    if mem:
        _swarm_bench_panel(
            memory, cells, mem, "value", lambda v: f"{v:.1f} bytes",
            SWARM_BYTES_GOAL, f"goal: ≤ {SWARM_BYTES_GOAL} bytes per connection",
            f"goal ≤ {SWARM_BYTES_GOAL}",
            lambda m, rows: f"a connection table filled to {max(r['connections'] or 0 for r in rows.values()):,}\n"
                            "(RSS growth while it fills / connections)")
        memory.set_ylabel("bytes per connection (lower is better)")
    else:
        memory.text(0.5, 0.5, "no swarm-bench memory records", transform=memory.transAxes,
                    ha="center", color="grey")
    memory.set_title("Benchmark: memory per connection in a node's table,\n"
                     "pure Python and Cython side by side", fontsize=10)
    rates = [m for m in ("pingpong", "sockets") if m in cells]
    if rates:
        _swarm_bench_panel(
            pongs, cells, rates, "value", lambda v: f"{v:,.0f}",
            SWARM_PONGS_GOAL, f"goal: ≥ {SWARM_PONGS_GOAL:,} Pongs per second per core",
            f"goal ≥ {SWARM_PONGS_GOAL:,}",
            lambda m, rows: (_sockets_category(rows) if m == "sockets" else
                             f"through the sans-IO core, no sockets\n({max(r['connections'] or 0 for r in rows.values()):,} "
                             f"connections, rate limits lifted;\none busy core: per wall-clock "
                             f"second)"))
        pongs.set_ylabel("Pongs per second of one core (higher is better)")
    else:
        pongs.text(0.5, 0.5, "no swarm-bench Ping → Pong records", transform=pongs.transAxes,
                   ha="center", color="grey")
    pongs.set_title("Benchmark: signed Pings answered with signed Pongs per second of one\n"
                    "core (each verified, looked up, answered), pure Python and Cython",
                    fontsize=10)
    if mem or rates:  # the stacks' colours, then the goals, under the benchmark's panels
        handles = {}
        for ax in (memory, pongs):
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
        labels = sorted(handles, key=lambda lab: lab.startswith("goal"))
        fig.legend([handles[lab] for lab in labels], labels, loc="lower center",
                   ncol=len(labels), fontsize=8, frameon=False)
    bench_rows = [r for c in cells.values() for r in c["rows"].values()]
    parts = []
    if sims:
        parts.append(f"simulator: median of {_runs_note(sims)} per point, {_commits_note(sims)}")
    if bench_rows:
        parts.append(f"benchmark: median of {_runs_note(bench_rows)} per bar, "
                     f"{_commits_note(bench_rows)}")
    fig.suptitle(f"swarm peer discovery ({'; '.join(parts)})", fontsize=11)
    fig.tight_layout(rect=(0, 0.025 if mem or rates else 0, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _range_s(r: dict) -> str:
    if not _number(r["seconds"]):
        return "never"
    text = f"{r['seconds']:g} s"
    if r["runs"] > 1 and r["fastest_s"] != r["slowest_s"]:
        text += f" ({r['fastest_s']:g}–{r['slowest_s']:g})"
    return text


def _share(v) -> str:
    return f"{v:.1%}" if _number(v) else "—"


def _messages(r: dict, what: str) -> str:
    """Messages sent per node, and their bytes when recorded: "16.0 (1,234 B)"."""
    text = _per(r[f"{what}_per_node"])
    b = r.get(f"{what}_bytes_per_node")
    return text + (f" ({b:,.0f} B)" if _number(b) else "")


def _per(v, digits: int = 1) -> str:
    return f"{v:,.{digits}f}" if _number(v) else "—"


def _swarm_markdown(data: Dict[str, List[dict]]) -> List[str]:
    joins, recoveries = data.get("swarm_joins", []), data.get("swarm_recoveries", [])
    bench = data.get("swarm_bench", [])
    if not (joins or recoveries or bench):
        return []
    lines = ["## swarm", "", "Swarm's latest figures per configuration (medians over its runs).", ""]
    order = lambda r: tuple((r[k] is None, r[k]) for k in trend.SWARM_SIM_KEY)  # noqa: E731
    if joins:
        lines += ["### Simulator: joining", "",
                  "Every node dials the bootstrap nodes; join: simulated seconds from the first "
                  "node's start until every node holds its target of direct connections (checked "
                  "once a simulated second; median, fastest–slowest seed); messages (and their "
                  "bytes) and all bytes sent per node until then; fewest direct: the fewest any "
                  "node held at the end; peak RSS and CPU: the simulator's.", "",
                  "| nodes | bootstraps | loss | target direct | join | converged | "
                  "GetConnections / node | Connections / node | bytes sent / node | "
                  "fewest direct | peak RSS | CPU | runs | commit |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(latest_per(joins, *trend.SWARM_SIM_KEY), key=order):
            ok = round(r["converged"] * r["runs"])
            rss = f"{r['peak_rss_mb']:,.0f} MB" if _number(r["peak_rss_mb"]) else "—"
            lines.append(f"| {r['nodes']:,} | {r['bootstraps']} | {_loss(r['loss'])} | "
                         f"{r['target_direct']} | {_range_s(r)} | {ok} of {r['runs']}"
                         f"{_check(ok == r['runs'])} | {_messages(r, 'get_connections')} | "
                         f"{_messages(r, 'connections')} | {_per(r['bytes_per_node'], 0)} | "
                         f"{_per(r['direct_min'], 0)} | {rss} | {_per(r['cpu_seconds'])} s | "
                         f"{r['runs']} | `{_short(r['commit'])}` |")
        lines.append("")
    if recoveries:
        lines += ["### Simulator: recovery after a crash", "",
                  "Once joined, a share of the nodes (never a bootstrap) crash at once; recovery: "
                  "simulated seconds until every survivor again holds its target of direct "
                  "connections, all to live nodes; messages (and their bytes) and all bytes sent "
                  "per survivor meanwhile; fewest direct: the fewest a survivor held at the end; "
                  "links to crashed nodes left: the most any run ended with.", "",
                  "| nodes | crashed | bootstraps | loss | recovery | converged | "
                  "GetConnections / survivor | Connections / survivor | bytes sent / survivor | "
                  "fewest direct | links to crashed left | runs | commit |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(latest_per(recoveries, *trend.SWARM_SIM_KEY), key=order):
            ok = round(r["converged"] * r["runs"])
            crashed = f"{r['crashed']:g}" if _number(r["crashed"]) else "—"
            lines.append(f"| {r['nodes']:,} | {crashed} | {r['bootstraps']} | {_loss(r['loss'])} "
                         f"| {_range_s(r)} | {ok} of {r['runs']}{_check(ok == r['runs'])} | "
                         f"{_messages(r, 'get_connections')} | {_messages(r, 'connections')} | "
                         f"{_per(r['bytes_per_node'], 0)} | {_per(r['direct_min'], 0)} | "
                         f"{_per(r['direct_to_crashed'], 0)} | {r['runs']} | "
                         f"`{_short(r['commit'])}` |")
        lines.append("")
    if bench:
        cells = swarm_bench_cells(bench, data.get("swarm_speedups", []))
        goals = {"memory": (f"≤ {SWARM_BYTES_GOAL}", lambda v: v <= SWARM_BYTES_GOAL,
                            lambda v: f"{v:.1f}"),
                 "pingpong": (f"≥ {SWARM_PONGS_GOAL:,}", lambda v: v >= SWARM_PONGS_GOAL,
                              lambda v: f"{v:,.0f}"),
                 "sockets": (f"≥ {SWARM_PONGS_GOAL:,}", lambda v: v >= SWARM_PONGS_GOAL,
                             lambda v: f"{v:,.0f}")}
        names = {"memory": "bytes per connection (table of {connections:,})",
                 "pingpong": "Pongs per second through the sans-IO core ({connections:,} "
                             "connections, no sockets)",
                 "sockets": "Pongs per node CPU second over real UDP sockets"}
        lines += ["### Benchmark", "",
                  "`pelotari swarm bench`, each figure in a fresh interpreter; memory: RSS growth "
                  "while a connection table fills, per connection; Pongs per second: signed Pings "
                  "verified, looked up and answered with signed Pongs (through the core: no "
                  "sockets, rate limits lifted).", "",
                  "| figure | pure Python | Cython | Cython vs pure Python | goal | runs | commit |",
                  "|---|---|---|---|---|---|---|"]
        unknown = []
        for m, cell in cells.items():
            rows = cell["rows"]
            if m not in goals:
                runs = ", ".join(f"{s}: {r['runs']} runs" for s, r in rows.items())
                unknown.append(f"{m} ({runs})")
                continue
            goal, met, fmt = goals[m]
            conns = max((r["connections"] or 0 for r in rows.values()), default=0)
            figures = []
            for stack in trend.SWARM_STACKS:
                r = rows.get(stack)
                figures.append(f"{fmt(r['value'])}{_check(met(r['value']))}"
                               if r and _number(r["value"]) else "—")
            ratio = cell["ratio"]
            vs = (f"{ratio['ratio']:.1f}× {'faster' if ratio['higher_is_better'] else 'smaller'}"
                  if ratio and _number(ratio["ratio"]) else "—")
            runs = sorted({r["runs"] for r in rows.values()})
            commits = sorted({_short(r["commit"]) for r in rows.values()})
            lines.append(f"| {names[m].format(connections=conns)} | {' | '.join(figures)} | {vs} "
                         f"| {goal} | {'/'.join(map(str, runs))} | "
                         f"{', '.join(f'`{c}`' for c in commits)} |")
        lines.append("")
        sockets = cells.get("sockets", {}).get("rows", {})
        if sockets:
            lines += ["Over real sockets: a node and the load generator's peers on loopback "
                      "UDP; lost: Pings offered that got no Pong; Pongs per CPU second: per "
                      f"core of the node's (goal ≥ {SWARM_PONGS_GOAL:,}, whatever the rate "
                      "offered); latency: a Ping sent until its Pong came back; waited: the "
                      "node's time waiting for a CPU (other processes), with the machine's load "
                      "average.", "",
                      "| stack | node's datagram path | peers (established) | Pings/s offered | "
                      "Pongs/s | lost | node CPU | Pongs per CPU second | latency p50 / p99 | "
                      "waited (load) |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            for stack in _swarm_stacks(list(sockets.values())):
                r = sockets[stack]
                peers = f"{r['peers']:,}" if _number(r["peers"]) else "—"
                if _number(r["established"]) and r["established"] != r["peers"]:
                    peers += f" ({r['established']:,})"
                per_cpu = _per(r["pongs_per_cpu_second"], 0)
                if _number(r["pongs_per_cpu_second"]):
                    per_cpu += _check(r["pongs_per_cpu_second"] >= SWARM_PONGS_GOAL)
                lat = (f"{_ms(r['latency_p50_us'] / 1000)} / {_ms(r['latency_p99_us'] / 1000)}"
                       if _number(r["latency_p50_us"]) and _number(r["latency_p99_us"]) else "—")
                waited = (f"{r['node_runqueue_wait_seconds']:.2f} s"
                          if _number(r["node_runqueue_wait_seconds"]) else "—")
                if _number(r["loadavg_1m"]):
                    waited += f" ({r['loadavg_1m']:.1f})"
                lines.append(f"| {stack} | {r['datagram_path'] or '—'} | {peers} | "
                             f"{_per(r['offered_per_second'], 0)} | "
                             f"{_per(r['pongs_per_second'], 0)} | {_share(r['loss'])} | "
                             f"{_per(r['node_cpu_seconds'], 2)} s | {per_cpu} | {lat} | "
                             f"{waited} |")
            lines.append("")
        if unknown:
            lines += [f"Other measures recorded, not summarised here: {'; '.join(unknown)}.", ""]
    return lines


def _rate(v) -> str:
    if v is None:
        return "—"
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k"


def _fuzz_markdown(data: Dict[str, List[dict]]) -> List[str]:
    rows = data.get("fuzz", [])
    if not rows:
        return []
    lines = ["## Fuzzing (bench/fuzz: each target's newest run per build)", "",
             "| target | build | inputs | inputs/s | coverage (edges / features) | crashes | "
             "commit | runs (inputs, crashes in all) |", "|---|---|---:|---:|---:|---:|---|---|"]
    for r in sorted(rows, key=lambda r: (r["target"], r["implementation"] or "", r["native_coverage"])):
        build = ("Cython, instrumented + ASan" if r["native_coverage"] else
                 {"cython": "Cython", "python": "pure Python"}.get(r["implementation"], "?")
                 + ", Python coverage")
        lines.append(f"| {r['target']} | {build} | {r['inputs'] or 0:,} | "
                     f"{r['inputs_per_second'] or 0:,} | {r['coverage_edges'] or 0:,} / "
                     f"{r['features'] or 0:,} | {r['crashes']} | `{_short(r['commit'])}` | "
                     f"{r['runs']} ({r['inputs_all'] or 0:,}, {r['crashes_all']}) |")
    return lines + [""]


def _markdown(data: Dict[str, List[dict]], threshold: float, plots: List[str]) -> str:
    bench = "regressions" in data  # `pelotari bench` records were loaded
    lines = ["# pelotari throughput trend" if bench else "# pelotari trend", ""]
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
    if bench:
        regs = data["regressions"]
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
