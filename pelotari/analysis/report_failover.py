"""The backbone cluster's failovers (`pelotari cluster-bench` records): analysis, picture, table.

failover.png: every SIGKILL of the active in the newest run per client kind, one dot per kill and
measure, against the 500 ms goal and the anchors' defaults. The summary's table of kills per
client kind and fault."""
import pathlib
import statistics
from typing import Dict, List

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from pelotari.analysis.plotting import _commits_note, _ms, _ms_tick, _number, _short
from pelotari.analysis.trend import ENV, Section


# ---- analysis: pure DataFrame -> DataFrame functions over the records ----------------------------

FAILOVER_KINDS = ("fyrehose-failover", "fyrehose-failover-run")


FAILOVER_MEASURES = ("new_active_s", "arrive_s", "deliver_s", "confirm_s")


FAILOVER_COUNTS = ("confirmed", "sent", "failed", "confirmed_not_delivered",
                   "sequences_two_messages", "duplicates_delivered", "resent", "moves",
                   "lost_ranges", "resyncs")


FAILOVER_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("clients", StringType()),
    StructField("fault", StringType()),
    StructField("kill", LongType()),
    StructField("kills", LongType()),
    StructField("rate", DoubleType()),
    StructField("subscribers", LongType()),
    StructField("members", LongType()),
    *[StructField(m, DoubleType()) for m in FAILOVER_MEASURES],
    *[StructField(c, LongType()) for c in FAILOVER_COUNTS],
    StructField("env", ENV),
])


def failover_kills(raw: DataFrame) -> DataFrame:
    """fyrehose-failover records → one row per fault: clients (pelotari: given every member;
    floating: seed clients of the floating address), the fault (kill when the record has
    none: pelotari.harness.failover.FAULTS), rate, subscribers, commit, the run's
    time, and seconds from the SIGKILL until the new active sequenced (`new_active_s`), its
    first DELIVER reached every subscriber (`arrive_s`), every subscriber had it in order
    (`deliver_s`) and the publisher was confirmed again (`confirm_s`); null: never seen."""
    return (raw.where(F.col("kind") == "fyrehose-failover")
            .select("clients", F.coalesce("fault", F.lit("kill")).alias("fault"), "rate",
                    "subscribers", "kill", *FAILOVER_MEASURES,
                    F.col("env.commit").alias("commit"),
                    F.to_timestamp("env.time").alias("time")))


def failovers(raw: DataFrame) -> DataFrame:
    """Per (clients, fault, rate, subscribers, commit), dated by the commit's first run: kills, the
    median and worst of each FAILOVER_MEASURES (a kill never seen counts as worst: `missing`),
    and the runs' counts summed (confirmed but never delivered, sequence numbers naming two
    messages, duplicates delivered, re-sends, ...)."""
    key = ["clients", "fault", "rate", "subscribers", "commit"]
    kills = failover_kills(raw).groupBy(*key).agg(
        F.min("time").alias("time"), F.count(F.lit(1)).alias("kills"),
        *[F.median(m).alias(f"{m[:-2]}_median_s") for m in FAILOVER_MEASURES],
        *[F.max(m).alias(f"{m[:-2]}_worst_s") for m in FAILOVER_MEASURES],
        F.sum(sum(F.col(m).isNull().cast("long") for m in FAILOVER_MEASURES)).alias("missing"))
    runs = (raw.where(F.col("kind") == "fyrehose-failover-run")
            .select("clients", F.coalesce("fault", F.lit("kill")).alias("fault"), "rate",
                    "subscribers", F.col("env.commit").alias("commit"), *FAILOVER_COUNTS)
            .groupBy(*key).agg(F.count(F.lit(1)).alias("runs"),
                               *[F.sum(c).alias(c) for c in FAILOVER_COUNTS]))
    return kills.join(runs, key, "left")


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


def _analyse(raw: DataFrame, threshold: float) -> Dict[str, DataFrame]:
    return {"failover_kills": failover_kills(raw), "failovers": failovers(raw)}


def _plots(data: Dict[str, List[dict]], out: pathlib.Path, pyplot) -> List[pathlib.Path]:
    if not data.get("failover_kills"):
        return []
    return [_failover_plot(data["failover_kills"], out / "failover.png", pyplot())]


SECTIONS = (Section("failover", FAILOVER_KINDS, FAILOVER_SCHEMA, _analyse, _plots,
                    lambda data, threshold: _failover_markdown(data)),)
