"""bully's analysis, pictures and summary tables (the bully benchmark's records).

bully.png: election time and election messages against the nodes, per series (simulator,
real processes); bully-sync.png: the clocks' spread after one sync round per configuration. The
summary's Elections and Clock sync tables."""
import pathlib
from typing import Dict, List

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from pelotari.analysis.plotting import (_commits_note, _figure_legend, _log_axis, _ms, _ms_tick,
                                        _number, _runs_note, _seconds, _short, _wrap, latest_per)
from pelotari.analysis.trend import ENV, Section


# ---- analysis: pure DataFrame -> DataFrame functions over the records ----------------------------

BULLY_KINDS = ("bully-election", "bully-sim-sync", "bully-sync")


BULLY_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("where", StringType()),  # "simulator" or "processes"
    StructField("how", StringType()),  # elections: "kill", "crash" (simulator), "SIGKILL"
    StructField("method", StringType()),  # simulated sync: "berkeley", "rtt-blind average"
    StructField("nodes", LongType()),
    StructField("seed", LongType()),
    StructField("agreed", BooleanType()),
    StructField("detect_s", DoubleType()),
    StructField("elected_after_detect_s", DoubleType()),
    StructField("elected_s", DoubleType()),
    StructField("messages", LongType()),  # simulator
    StructField("messages_total_after_kill", LongType()),  # processes
    StructField("textbook_messages", LongType()),
    StructField("hour_off", BooleanType()),
    StructField("start_spread_s", DoubleType()),
    StructField("spread_ms", DoubleType()),
    StructField("spread_right_after_ms", DoubleType()),
    StructField("mean_error_ms", DoubleType()),
    StructField("max_abs_error_ms", DoubleType()),
    StructField("outliers", LongType()),
    StructField("unanswered", LongType()),
    StructField("env", ENV),
])


def bully_elections(raw: DataFrame) -> DataFrame:
    """bully-election records → medians per (where, how, nodes, commit), dated by the commit's
    first run: seconds from the leader's death until every survivor names the new leader
    (`elected_s`), until the first survivor starts an election (`detect_s`) and between the two
    (`elected_after_detect_s`); election messages (the simulator's `messages`, the processes'
    `messages_total_after_kill`) against the textbook n(n-1)/2; `runs`, and the fraction of
    runs where every survivor agreed. A run that never agreed may carry NaN times (processes),
    which sort above every time: a median is NaN once half the runs or more are NaN."""
    return (raw.where(F.col("kind") == "bully-election")
            .withColumn("messages", F.coalesce("messages", "messages_total_after_kill"))
            .groupBy("where", "how", "nodes", F.col("env.commit").alias("commit"))
            .agg(F.min(F.to_timestamp("env.time")).alias("time"),
                 F.median("elected_s").alias("elected_s"),
                 F.median("detect_s").alias("detect_s"),
                 F.median("elected_after_detect_s").alias("elected_after_detect_s"),
                 F.median("messages").alias("messages"),
                 F.max("textbook_messages").alias("textbook_messages"),
                 F.count(F.lit(1)).alias("runs"),
                 F.avg(F.coalesce(F.col("agreed"), F.lit(False)).cast("double")).alias("agreed")))


def bully_sync(raw: DataFrame) -> DataFrame:
    """bully-sim-sync and bully-sync records → medians per (where, method, nodes, commit):
    the spread of the logical clocks once slewed (`spread_ms`); in the simulator, their mean
    and largest distance from the true time; with processes (which run Berkeley), the spread
    right after the round and the most outliers and unanswered peers of any run."""
    method = F.when(F.col("kind") == "bully-sync",
                    F.coalesce("method", F.lit("berkeley"))).otherwise(F.col("method"))
    return (raw.where(F.col("kind").isin("bully-sim-sync", "bully-sync"))
            .withColumn("method", method)
            .groupBy("where", "method", "nodes", F.col("env.commit").alias("commit"))
            .agg(F.min(F.to_timestamp("env.time")).alias("time"),
                 F.median("start_spread_s").alias("start_spread_s"),
                 F.median("spread_ms").alias("spread_ms"),
                 F.median("mean_error_ms").alias("mean_error_ms"),
                 F.median("max_abs_error_ms").alias("max_abs_error_ms"),
                 F.median("spread_right_after_ms").alias("spread_right_after_ms"),
                 F.max("outliers").alias("outliers"),
                 F.max("unanswered").alias("unanswered"),
                 F.count(F.lit(1)).alias("runs")))


# (where, how) of an election series → its name on plots; unknown series keep "where, how".
ELECTION_SERIES = {("simulator", "kill"): "simulator, leader killed (its connections reset)",
                   ("simulator", "crash"): "simulator, leader silent (crashed host)",
                   ("processes", "SIGKILL"): "real processes, leader SIGKILLed"}
SYNC_METHODS = {"berkeley": "Berkeley", "rtt-blind average": "RTT-blind average"}
ELECTION_GOAL_S = 1.0  # a new leader within 1 s of a survivor declaring the old one dead
SYNC_GOAL_MS = 1.0  # logical clocks within 1 ms of each other


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


def _analyse(raw: DataFrame, threshold: float) -> Dict[str, DataFrame]:
    return {"bully_elections": bully_elections(raw), "bully_sync": bully_sync(raw)}


def _plots(data: Dict[str, List[dict]], out: pathlib.Path, pyplot) -> List[pathlib.Path]:
    written = []
    if data.get("bully_elections"):
        written.append(_bully_plot(data["bully_elections"], out / "bully.png", pyplot()))
    if data.get("bully_sync"):
        written.append(_bully_sync_plot(data["bully_sync"], out / "bully-sync.png", pyplot()))
    return written


SECTIONS = (Section("bully", BULLY_KINDS, BULLY_SCHEMA, _analyse, _plots,
                    lambda data, threshold: _bully_markdown(data)),)
