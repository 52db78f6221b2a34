"""The fyrehose benchmark's analysis, pictures and summary tables (`pelotari bench` and
`pelotari bench --latency-rates` records).

throughput.png: each system's delivered rate per commit, one panel per scenario; ratios.png:
pelotari against the C reference and the brokers at the latest commit; latency.png: each
system's latest p50 and p99 per scenario; headline.png: every system in the README's headline
scenario; latency-rates.png: p99 against the offered rate, every system, per scenario (`bench
--latency-rates`). The summary's latest delivered rates, regressions and latency tables, and the
same-rate tables (p50, p99, max) with each run's loopback floor and wake-up stalls."""
import math
import pathlib
from typing import Dict, Iterable, List

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from pelotari.analysis.plotting import _number, _short, latest_per, plural
from pelotari.analysis.trend import ENV, Section
from pelotari.harness.rates import BUSY_LATE_PER_S


# ---- analysis: pure DataFrame -> DataFrame functions over the records ----------------------------

PEERS = ("redis", "nats", "zeromq")


BENCH_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("system", StringType()),
    StructField("scenario", StringType()),
    StructField("payload", LongType()),
    StructField("subscribers", LongType()),
    StructField("publishers", LongType()),
    StructField("lossless_rate", DoubleType()),
    StructField("delivered_rate", DoubleType()),
    StructField("ingress_rate", DoubleType()),
    StructField("loss", DoubleType()),
    StructField("latency_p50_us", DoubleType()),
    StructField("latency_p90_us", DoubleType()),
    StructField("latency_p99_us", DoubleType()),
    StructField("server_cpu_us_per_msg", DoubleType()),
    StructField("client_bound", BooleanType()),
    StructField("env", ENV),
])


def bench_runs(raw: DataFrame) -> DataFrame:
    """Bench records → one typed row per (run, system, scenario); skipped systems dropped."""
    return (raw.where(F.col("kind") == "bench")
            .select("system", "scenario", "payload", "subscribers", "publishers",
                    "delivered_rate", "ingress_rate", "loss", "latency_p50_us",
                    "latency_p90_us", "latency_p99_us", "server_cpu_us_per_msg",
                    F.coalesce("client_bound", F.lit(False)).alias("client_bound"),
                    F.col("env.commit").alias("commit"),
                    F.to_timestamp("env.time").alias("run_time"),
                    F.col("env.host").alias("host")))


def throughput_trend(runs: DataFrame) -> DataFrame:
    """Median delivered and ingress msgs/s per (scenario, system, commit), dated by the
    commit's first run; `runs` counts how many runs each median is over."""
    return (runs.groupBy("scenario", "payload", "subscribers", "system", "commit")
            .agg(F.min("run_time").alias("time"),
                 F.median("delivered_rate").alias("delivered_rate"),
                 F.median("ingress_rate").alias("ingress_rate"),
                 F.max(F.col("client_bound").cast("int")).cast("boolean").alias("client_bound"),
                 F.count(F.lit(1)).alias("runs")))


def ratios(trend: DataFrame, base: str = "pelotari") -> DataFrame:
    """base's delivered rate over every other system's, per (scenario, commit)."""
    mine = trend.where(F.col("system") == base).select(
        "scenario", "commit", "time", F.col("delivered_rate").alias("base_rate"))
    other = trend.where(F.col("system") != base).select(
        "scenario", "commit", F.col("system").alias("versus"),
        F.col("delivered_rate").alias("versus_rate"))
    return (mine.join(other, ["scenario", "commit"])
            .withColumn("ratio", F.col("base_rate") / F.col("versus_rate"))
            .select("scenario", "commit", "time", "versus", "base_rate", "versus_rate", "ratio"))


def best_peer_ratio(ratio_rows: DataFrame, peers: Iterable[str] = PEERS) -> DataFrame:
    """The ratio to the fastest peer broker per (scenario, commit)."""
    w = Window.partitionBy("scenario", "commit").orderBy(F.col("versus_rate").desc())
    return (ratio_rows.where(F.col("versus").isin(list(peers)))
            .withColumn("rank", F.row_number().over(w)).where(F.col("rank") == 1)
            .select("scenario", "commit", "time", F.col("versus").alias("best_peer"),
                    "versus_rate", "base_rate", "ratio"))


# The performance targets' ratios (numerator, denominator); "best peer" is the fastest of PEERS.
TARGETS = (("pelotari-plain", "reference"), ("pelotari", "reference"),
           ("pelotari", "reference-gso"), ("pelotari", "best peer"),
           ("pelotari-packed", "redis"), ("pelotari-packed", "nats"),
           ("pelotari-packed", "best peer"))


def target_ratios(trend: DataFrame, targets: Iterable = TARGETS,
                  peers: Iterable[str] = PEERS) -> DataFrame:
    """numerator/denominator delivered-rate ratios for each target pair, per (scenario, commit),
    where both ran; `target` is "numerator/denominator"."""
    rates = trend.select("scenario", "commit", "time", "system", "delivered_rate")
    best = (trend.where(F.col("system").isin(list(peers)))
            .groupBy("scenario", "commit")
            .agg(F.min("time").alias("time"), F.max("delivered_rate").alias("delivered_rate"))
            .withColumn("system", F.lit("best peer")))
    rates = rates.unionByName(best)
    pairs = trend.sparkSession.createDataFrame(list(targets), "numerator string, denominator string")
    num = rates.join(pairs, rates.system == pairs.numerator).select(
        "scenario", "commit", "time", "numerator", "denominator",
        F.col("delivered_rate").alias("numerator_rate"))
    den = rates.select("scenario", "commit", F.col("system").alias("denominator"),
                       F.col("delivered_rate").alias("denominator_rate"))
    return (num.join(den, ["scenario", "commit", "denominator"])
            .withColumn("target", F.concat_ws("/", "numerator", "denominator"))
            .withColumn("ratio", F.col("numerator_rate") / F.col("denominator_rate"))
            .select("scenario", "commit", "time", "target", "numerator", "denominator",
                    "numerator_rate", "denominator_rate", "ratio"))


def regressions(trend: DataFrame, threshold: float = 0.1) -> DataFrame:
    """(scenario, system) medians that fell more than `threshold` below the previous one."""
    w = Window.partitionBy("scenario", "system").orderBy("time")
    return (trend.withColumn("previous_rate", F.lag("delivered_rate").over(w))
            .withColumn("previous_commit", F.lag("commit").over(w))
            .where(F.col("previous_rate").isNotNull())
            .withColumn("change", F.col("delivered_rate") / F.col("previous_rate") - 1)
            .where(F.col("change") < -threshold)
            .select("scenario", "system", "previous_commit", "commit", "time", "previous_rate",
                    "delivered_rate", "change"))


def latency(runs: DataFrame) -> DataFrame:
    """Median latency percentiles (µs, measured at half the lossless rate) per (scenario,
    system, commit)."""
    return (runs.groupBy("scenario", "system", "commit")
            .agg(F.min("run_time").alias("time"),
                 F.median("latency_p50_us").alias("p50_us"),
                 F.median("latency_p90_us").alias("p90_us"),
                 F.median("latency_p99_us").alias("p99_us")))


RATES_KINDS = ("latency-rate", "latency-floor", "latency-wakeup")


# The bench record's fields it shares (same names and types), and its own.
RATES_SCHEMA = StructType([BENCH_SCHEMA[name] for name in (
    "kind", "system", "scenario", "payload", "subscribers", "publishers", "ingress_rate",
    "delivered_rate", "loss", "client_bound", "latency_p50_us", "latency_p99_us", "env")] + [
    StructField("offered_rate", DoubleType()),
    StructField("trial", LongType()),
    StructField("lossless", BooleanType()),  # loss < 0.1 %, kept up, publishers reached 90 %
    StructField("latency_max_us", DoubleType()),
    StructField("transport", StringType()),  # latency-floor: "udp" or "tcp"
    StructField("publish_interval_s", DoubleType()),  # --pack-interval (0 or absent: none)
    StructField("stalled_ms", LongType()),  # ms in which a message came > 1 ms late (-1: ?)
    # latency-wakeup (bench/floor/wakeup.c): one core's napping thread
    StructField("cpu", LongType()),
    StructField("seconds", DoubleType()),
    StructField("nap_us", LongType()),
    StructField("naps", LongType()),
    StructField("late_1ms", LongType()),
    StructField("late_2ms", LongType()),
    StructField("worst_us", DoubleType()),
])


# One `pelotari bench --latency-rates` run: its records share the commit and the start time
# (env.time), so two runs at one commit (one of them with uncommitted changes) are never pooled.
def _run():
    return F.col("env.commit").alias("commit"), F.to_timestamp("env.time").alias("time")


def latency_at_rates(raw: DataFrame) -> DataFrame:
    """latency-rate records → per (scenario, system, offered rate, pack interval, run):
    trials, how many were lossless, and over the lossless ones the median p50, p99 and max
    (each with its smallest and largest), delivered msgs/s and stalled milliseconds, and whether any was
    client-bound; `lossy` when at most half the trials were lossless (then the latencies say
    nothing)."""
    ok = F.coalesce("lossless", F.lit(False))

    def over_lossless(column):
        return F.when(ok, F.col(column))
    return (raw.where(F.col("kind") == "latency-rate")
            .withColumn("publish_interval_s", F.coalesce("publish_interval_s", F.lit(0.0)))
            .groupBy("scenario", "payload", "subscribers", "publishers", "system",
                     "offered_rate", "publish_interval_s", *_run())
            .agg(F.count(F.lit(1)).alias("trials"),
                 F.sum(ok.cast("long")).alias("lossless_trials"),
                 F.median(over_lossless("latency_p50_us")).alias("p50_us"),
                 F.min(over_lossless("latency_p50_us")).alias("p50_us_min"),
                 F.max(over_lossless("latency_p50_us")).alias("p50_us_max"),
                 F.median(over_lossless("latency_p99_us")).alias("p99_us"),
                 F.min(over_lossless("latency_p99_us")).alias("p99_us_min"),
                 F.max(over_lossless("latency_p99_us")).alias("p99_us_max"),
                 F.median(over_lossless("latency_max_us")).alias("max_us"),
                 F.min(over_lossless("latency_max_us")).alias("max_us_min"),
                 F.max(over_lossless("latency_max_us")).alias("max_us_max"),
                 F.median(over_lossless("delivered_rate")).alias("delivered_rate"),
                 F.median(F.when(ok & (F.col("stalled_ms") >= 0), F.col("stalled_ms")))
                 .alias("stalled_ms"),
                 F.max(over_lossless("loss")).alias("worst_lossless_loss"),
                 F.median("loss").alias("loss"),
                 F.max((ok & F.coalesce("client_bound", F.lit(False))).cast("int"))
                 .cast("boolean").alias("client_bound"))
            .withColumn("lossy", F.col("lossless_trials") * 2 <= F.col("trials")))


def wakeup_stalls(raw: DataFrame) -> DataFrame:
    """latency-wakeup records → per (core, run): trials, and the naps woken at least 1 ms
    late per second (median, smallest, largest) and the worst oversleep, in µs."""
    late = F.col("late_1ms") / F.col("seconds")
    return (raw.where(F.col("kind") == "latency-wakeup")
            .groupBy("cpu", "nap_us", *_run())
            .agg(F.count(F.lit(1)).alias("trials"),
                 F.median(late).alias("late_1ms_per_s"),
                 F.min(late).alias("late_1ms_per_s_min"),
                 F.max(late).alias("late_1ms_per_s_max"),
                 F.max("worst_us").alias("worst_us")))


def latency_floor(raw: DataFrame) -> DataFrame:
    """latency-floor records → per (transport, run): median p50 and p99 of the one-way
    loopback latency with their smallest and largest, and `trials`."""
    return (raw.where(F.col("kind") == "latency-floor")
            .groupBy("transport", *_run())
            .agg(F.count(F.lit(1)).alias("trials"),
                 F.median("latency_p50_us").alias("p50_us"),
                 F.median("latency_p99_us").alias("p99_us"),
                 F.min("latency_p99_us").alias("p99_us_min"),
                 F.max("latency_p99_us").alias("p99_us_max")))


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


def _rate(v) -> str:
    if v is None:
        return "—"
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k"


def _bench_markdown(data: Dict[str, List[dict]], threshold: float) -> List[str]:
    """The summary's fyrehose sections: the latest delivered rates and target ratios, the
    regressions (when `pelotari bench` records were loaded) and the latest latency."""
    bench = "regressions" in data  # `pelotari bench` records were loaded
    lines = []
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
        targets = [f"{a}/{b}" for a, b in TARGETS
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
    return lines


# ---- latency at the same offered rate (`pelotari bench --latency-rates`) ------------------------

def _spread(row: dict, key: str) -> str:
    """A median with its smallest and largest: '328 (180 – 1,245)'."""
    lo, hi = row.get(f"{key}_min"), row.get(f"{key}_max")
    if not _number(row.get(key)):
        return "—"
    return f"{row[key]:,.0f}" + (f" ({lo:,.0f} – {hi:,.0f})" if _number(lo) and _number(hi)
                                 else "")


def _run_of(rows: List[dict], panel: List[dict]) -> List[dict]:
    """The rows measured in the same run as a panel's rows (none when that run measured none:
    another run's floor is not this one's)."""
    runs = {(r["commit"], r["time"]) for r in panel}
    return [r for r in rows if (r["commit"], r["time"]) in runs]


def _latest_run(rows: List[dict]) -> List[dict]:
    """The rows of the newest run (its commit and start time)."""
    if not rows:
        return []
    newest = max(rows, key=lambda r: str(r["time"]))
    return [r for r in rows if (r["commit"], r["time"]) == (newest["commit"], newest["time"])]


def _latest_per_scenario(rows: List[dict]) -> List[dict]:
    """Each scenario's rows of its newest run (a later run of one scenario leaves the
    others' panels as they were); a run with a publish interval is a scenario of its own
    ("S=16 N=10000 P=1, sent every 50 ms")."""
    rows = [dict(r, scenario=f"{r['scenario']}, sent every {r['publish_interval_s'] * 1000:g} ms")
            if _number(r.get("publish_interval_s")) and r["publish_interval_s"] > 0 else r
            for r in rows]
    out = []
    for sc in dict.fromkeys(r["scenario"] for r in rows):
        out += _latest_run([r for r in rows if r["scenario"] == sc])
    return out


def _delivered_note(row: dict) -> str:
    """What a point of a large group delivered: '1.95M/s delivered'."""
    v = row.get("delivered_rate")
    if not _number(v):
        return ""
    return (f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.0f}k" if v >= 1e3 else f"{v:.0f}") \
        + "/s delivered"


def _rates_plot(rates: List[dict], floor: List[dict], path: pathlib.Path, plt) -> pathlib.Path:
    """p99 against the offered rate, one line per system (the band: smallest to largest p99
    of its lossless trials), log axes, client-bound points hollow, lossy points left out and
    named; the loopback floor measured in the panel's run dashed. One panel per scenario,
    with its newest run's records; in a panel of over 16 subscribers each point says what it delivered."""
    from matplotlib.lines import Line2D

    rows = _latest_per_scenario(rates)
    scenarios = _scenario_order(rows)
    systems = _system_order({r["system"] for r in rows})
    cols = min(2, len(scenarios))
    nrows = (len(scenarios) + cols - 1) // cols
    legend_rows = (len(systems) + 2 + 1) // 2
    height = 5.6 * nrows + 0.8 + 0.25 * legend_rows
    fig, axes = plt.subplots(nrows, cols, figsize=(11 if cols == 1 else 8.5 * cols, height),
                             squeeze=False)
    for ax, sc in zip(axes.flat, scenarios):
        left_out = []
        plotted = False
        for system in systems:
            mine = sorted((r for r in rows if r["scenario"] == sc and r["system"] == system),
                          key=lambda r: r["offered_rate"])
            if not mine:
                continue
            label, colour, marker = system_style(system)
            left_out += [f"{label} at {_rate_tick(r['offered_rate'])}/s" for r in mine
                         if r["lossy"]]
            ok = [r for r in mine if not r["lossy"] and _number(r["p99_us"])]
            if not ok:
                continue
            plotted = True
            x = [r["offered_rate"] for r in ok]
            ax.plot(x, [r["p99_us"] for r in ok], color=colour, lw=1.4)
            ax.fill_between(x, [r["p99_us_min"] for r in ok], [r["p99_us_max"] for r in ok],
                            color=colour, alpha=0.15, lw=0)
            for r in ok:  # (the bar: the same spread, visible at a lone point too)
                spread = [[r["p99_us"] - r["p99_us_min"]], [r["p99_us_max"] - r["p99_us"]]]
                ax.errorbar([r["offered_rate"]], [r["p99_us"]], yerr=spread, color=colour,
                            lw=0.8, capsize=3, ls="none")
                ax.plot([r["offered_rate"]], [r["p99_us"]], marker=marker, color=colour, ms=7,
                        ls="none", markerfacecolor="white" if r["client_bound"] else colour)
                if r["subscribers"] > 16:
                    ax.annotate(_delivered_note(r), (r["offered_rate"], r["p99_us"]),
                                textcoords="offset points", xytext=(0, 9), ha="center",
                                fontsize=7, color=colour)
        wide = any(r["subscribers"] > 16 for r in rows if r["scenario"] == sc)
        panel = [r for r in rows if r["scenario"] == sc]
        # (a fan-out to thousands is not one message's trip)
        for f in ([] if wide else _run_of(floor, panel)):
            style = {"udp": (0, (5, 3)), "tcp": (0, (1, 2))}.get(f["transport"], "--")
            ax.axhline(f["p99_us"], color="black", lw=1, ls=style)
            ax.annotate(f"loopback floor, {f['transport'].upper()} ping-pong p99 "
                        f"{f['p99_us']:.1f} µs", (0.01, f["p99_us"]), xycoords=("axes fraction",
                                                                                "data"),
                        fontsize=7, va="top" if f["transport"] == "udp" else "bottom")
        ax.set_xscale("log")
        ax.set_yscale("log")
        if wide:
            ax.margins(x=0.12, y=0.25)  # room for the delivered labels
        _log_ticks(ax.xaxis, _rate_tick)
        ax.set_xlabel("offered msgs/s in (log)")
        ax.set_ylabel("p99 one-way latency, µs (log)")
        if wide:  # less than a decade: dense ticks, labelled in ms
            from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

            ax.yaxis.set_major_locator(LogLocator(subs=(1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g} ms"))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_ylabel("p99 one-way latency (log)")
        if not plotted:  # every point lossy: say so, not an empty log grid
            for artist in list(ax.lines) + list(ax.texts):  # (the floor's lines)
                artist.remove()
            ax.set_xscale("linear")
            ax.set_yscale("linear")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, "every point lossy (named above)", transform=ax.transAxes,
                    ha="center", va="center", fontsize=9)
        title = f"{sc}: p99 at the same offered rate"
        if wide:
            title += "\n(each datagram is one send to every subscriber, one after another: " \
                "the last waits for the whole fan-out)"
        if left_out:
            title += "\nleft out, lossy (half the trials or more lost ≥ 0.1 % or fell behind): " + \
                "; ".join(left_out)
        ax.set_title(_wrap_title(title), fontsize=8)
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(scenarios):]:
        ax.axis("off")
    hollow = Line2D([], [], marker="o", color="black", markerfacecolor="white", ls="none",
                    label="hollow: " + CLIENT_BOUND_NOTE)
    band = Line2D([], [], color="grey", lw=6, alpha=0.3,
                  label="band and bar: smallest to largest p99 of the lossless trials")
    _system_legend(fig, systems, [hollow, band], ncol=2)
    least = min((r["trials"] for r in rows), default=0)
    most = max((r["trials"] for r in rows), default=0)
    trials = plural(most, "trial") if least == most else f"{least} to {most} trials"
    commits = ", ".join(dict.fromkeys(_short(r["commit"]) for r in rows)) or "?"
    fig.suptitle(f"Latency at the same load: median p99 of {trials} per point; commit "
                 f"{commits}", fontsize=10)
    fig.tight_layout(rect=(0, (0.25 * legend_rows + 0.1) / height, 1, 1 - 0.4 / height))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _wrap_title(text: str, width: int = 110) -> str:
    import textwrap

    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def _rates_markdown(data: Dict[str, List[dict]]) -> List[str]:
    rows = _latest_per_scenario(data.get("latency_rates", []))
    if not rows:
        return []
    lines = ["## Latency at the same offered rate", "",
             "`pelotari bench --latency-rates`: every system at the same offered rates; each "
             "cell the median p99 of the lossless trials (smallest – largest), µs; `lossy`: "
             "half the trials or more lost ≥ 0.1 % or fell behind; (cb): client-bound; "
             "stalled: the median trial's milliseconds in which some message arrived over "
             "1 ms late (given where the load generator measured it and it was at least 1). "
             "Latency runs from each message's send: with a publish interval, not the wait "
             "before it.", ""]
    for sc in _scenario_order(rows):
        rates = sorted({r["offered_rate"] for r in rows if r["scenario"] == sc})
        lines += [f"### {sc}", "",
                  "| system | " + " | ".join(f"{_rate_tick(x)}/s" for x in rates) + " |",
                  "|---|" + "---|" * len(rates)]
        for system in _system_order({r["system"] for r in rows if r["scenario"] == sc}):
            cells = []
            for x in rates:
                r = next((r for r in rows if r["scenario"] == sc and r["system"] == system
                          and r["offered_rate"] == x), None)
                if r is None:
                    cells.append("—")
                elif r["lossy"]:
                    cells.append(f"lossy ({r['loss']:.1%} lost)")
                else:
                    cells.append(f"{r['p99_us']:,.0f} ({r['p99_us_min']:,.0f} – "
                                 f"{r['p99_us_max']:,.0f})" + (" (cb)" if r["client_bound"]
                                                                else "")
                                 + (f", {_delivered_note(r)}" if r["subscribers"] > 16
                                    else "")
                                 + (f"; {r['stalled_ms']:g} ms stalled"
                                    if _number(r.get("stalled_ms")) and r["stalled_ms"] >= 1
                                    and r["subscribers"] <= 16 else ""))
            lines.append(f"| {system_style(system)[0]} | " + " | ".join(cells) + " |")
        lines += ["", f"{sc}, every lossless point: p50, p99 and max, µs, each the median of "
                  "the lossless trials (smallest – largest):", "",
                  "| system | offered msgs/s | lossless trials | p50 | p99 | max |",
                  "|---|---|---|---|---|---|"]
        for system in _system_order({r["system"] for r in rows if r["scenario"] == sc}):
            for r in sorted((r for r in rows if r["scenario"] == sc and r["system"] == system
                             and not r["lossy"]), key=lambda r: r["offered_rate"]):
                lines.append(f"| {system_style(system)[0]} | {_rate_tick(r['offered_rate'])} | "
                             f"{r['lossless_trials']} of {r['trials']} | "
                             + " | ".join(_spread(r, q) for q in ("p50_us", "p99_us", "max_us"))
                             + " |")
        panel = [r for r in rows if r["scenario"] == sc]
        lines += [""] + _machine_lines(_run_of(data.get("latency_floor", []), panel),
                                       _run_of(data.get("wakeup_stalls", []), panel))
        lines.append("")
    return lines


def _machine_lines(floor: List[dict], wakeups: List[dict]) -> List[str]:
    """The loopback floor and the wake-up stalls one run measured, a line each."""
    lines = []
    for f in sorted(floor, key=lambda f: (f["transport"] != "udp", f["transport"])):
        lines.append(f"Loopback floor of this run, {f['transport'].upper()} ping-pong (C, one "
                     f"way = half the round trip): p50 {f['p50_us']:.1f} µs, p99 "
                     f"{f['p99_us']:.1f} µs ({f['p99_us_min']:.1f} – {f['p99_us_max']:.1f}, "
                     f"{plural(f['trials'], 'trial')}).")
    for w in sorted(wakeups, key=lambda w: w["cpu"]):
        lines.append(f"Wake-up stalls of this run, core {w['cpu']} (a thread napping "
                     f"{w['nap_us']} µs, bench/floor/wakeup.c): woken ≥ 1 ms late "
                     f"{w['late_1ms_per_s']:.1f} times a second ({w['late_1ms_per_s_min']:.1f} – "
                     f"{w['late_1ms_per_s_max']:.1f}, {plural(w['trials'], 'trial')}), worst "
                     f"{w['worst_us'] / 1000:.1f} ms."
                     + (f" **A busy machine** (over {BUSY_LATE_PER_S:g} a second): this run's "
                        "latencies are not comparable with a quiet machine's."
                        if w["late_1ms_per_s"] > BUSY_LATE_PER_S else ""))
    return lines


def _analyse_bench(raw: DataFrame, threshold: float) -> Dict[str, DataFrame]:
    runs = bench_runs(raw).cache()
    t = throughput_trend(runs).cache()
    r = ratios(t)
    return {"runs": runs, "throughput": t, "ratios": r, "best_peer": best_peer_ratio(r),
            "targets": target_ratios(t), "regressions": regressions(t, threshold),
            "latency": latency(runs)}


def _analyse_rates(raw: DataFrame, threshold: float) -> Dict[str, DataFrame]:
    return {"latency_rates": latency_at_rates(raw), "latency_floor": latency_floor(raw),
            "wakeup_stalls": wakeup_stalls(raw)}


def _bench_section_plots(data, out: pathlib.Path, pyplot) -> List[pathlib.Path]:
    return _bench_plots(data, out, pyplot()) if data.get("throughput") else []


def _rates_section_plots(data, out: pathlib.Path, pyplot) -> List[pathlib.Path]:
    if not data.get("latency_rates"):
        return []
    return [_rates_plot(data["latency_rates"], data.get("latency_floor", []),
                        out / "latency-rates.png", pyplot())]


# `pelotari bench` records: kinds=None, any record no other section reads.
SECTIONS = (Section("bench", None, BENCH_SCHEMA, _analyse_bench, _bench_section_plots,
                    _bench_markdown),
            Section("rates", RATES_KINDS, RATES_SCHEMA, _analyse_rates, _rates_section_plots,
                    lambda data, threshold: _rates_markdown(data)))
