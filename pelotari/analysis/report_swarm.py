"""swarm's analysis, picture and summary tables (`swarm simulate` and `swarm bench` records).

swarm.png: the simulator's join and recovery times and GetConnections/Connections traffic per
node against the swarm's size; the benchmark's bytes per connection and Pongs per second, pure
Python and Cython side by side. The summary's joining, recovery and benchmark tables."""
import pathlib
from typing import Dict, List

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from pelotari.analysis.plotting import (_bars, _categories, _check, _commits_note, _ms, _number,
                                        _runs_note, _short, _wrap, latest_per)
from pelotari.analysis.trend import ENV, Section


# ---- analysis: pure DataFrame -> DataFrame functions over the records ----------------------------

SWARM_KINDS = ("swarm-sim", "swarm-bench")


# Every field nullable: records written before a field existed, or by a newer writer with
# fields this schema does not name (those are dropped), load all the same.
SWARM_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("where", StringType()),  # "simulator"
    # swarm-sim: N nodes join through the first `bootstraps` (phase "join"), then a share of
    # them crash at once (phase "crash": the survivors' recovery)
    StructField("phase", StringType()),
    StructField("nodes", LongType()),
    StructField("bootstraps", LongType()),
    StructField("seed", LongType()),
    # swarm-sim: share of datagrams every link drops; swarm-bench sockets: of Pings unanswered
    StructField("loss", DoubleType()),
    StructField("target_direct", LongType()),  # direct connections every node wants
    StructField("capacity", LongType()),  # each node's connection table
    StructField("max_known", LongType()),  # known peers each node keeps
    StructField("bootstrap_capacity", LongType()),  # the bootstraps' tables
    StructField("bootstrap_vague_pongs_per_slot", LongType()),  # the bootstraps' Pong budget
    StructField("table", StringType()),  # the connection table's implementation
    StructField("macs", StringType()),  # the MACs'
    StructField("join_spread", DoubleType()),  # join: node k starts at k × spread / nodes
    StructField("last_joined", DoubleType()),  # join: when the last node started
    StructField("converged", BooleanType()),  # every (live) node at target_direct by the limit
    StructField("seconds", DoubleType()),  # simulated, until then (null: never); checked each s
    StructField("short", LongType()),  # nodes still short of target_direct at the end
    StructField("crashed", LongType()),  # crash: nodes crashed
    StructField("direct_to_crashed", LongType()),  # crash: survivors' direct links to the dead
    StructField("datagrams", LongType()),  # sent in the phase, all nodes
    StructField("bytes", LongType()),
    StructField("cpu_seconds", DoubleType()),  # the simulator's CPU time for the phase
    StructField("peak_rss_mb", DoubleType()),  # the simulator process's peak RSS so far
    StructField("sent_GetConnections_per_node", DoubleType()),  # per live node, in the phase
    StructField("sent_bytes_GetConnections_per_node", DoubleType()),
    StructField("sent_Connections_per_node", DoubleType()),
    StructField("sent_bytes_Connections_per_node", DoubleType()),
    StructField("sent_bytes_per_node", DoubleType()),
    StructField("sent_Ping_per_node", DoubleType()),
    StructField("sent_Connect_per_node", DoubleType()),
    StructField("sent_Reset_per_node", DoubleType()),
    StructField("learned_per_node", DoubleType()),
    StructField("direct_min", LongType()),  # direct connections of the live nodes at the end
    StructField("direct_median", LongType()),
    StructField("direct_max", LongType()),
    # swarm-bench: one figure of one stack ("Cython" or "pure Python")
    StructField("measure", StringType()),  # "memory", "pingpong", "sockets", ...
    StructField("stack", StringType()),
    StructField("implementation", StringType()),  # the connection table's
    StructField("mac", StringType()),  # the MAC's
    StructField("connections", LongType()),
    StructField("rss_growth", DoubleType()),  # memory: bytes, for `connections`
    StructField("bytes_per_connection", DoubleType()),
    StructField("pings", LongType()),  # pingpong, sockets
    StructField("pongs", LongType()),
    StructField("pongs_per_second", DoubleType()),
    StructField("us_per_ping", DoubleType()),
    # sockets: a real node and the load generator's `peers` over loopback UDP
    StructField("datagram_path", StringType()),  # the node's: "C (fastpath.swarmpath)", "Python"
    StructField("peers", LongType()),
    StructField("established", LongType()),  # peers the node held once the handshakes were done
    StructField("offered_per_second", DoubleType()),  # Pings offered
    StructField("node_cpu_seconds", DoubleType()),  # the node process's, while Pings were offered
    StructField("pongs_per_cpu_second", DoubleType()),  # Pongs per node CPU second: per core
    StructField("latency_p50_us", DoubleType()),  # Ping sent → its Pong received
    StructField("latency_p99_us", DoubleType()),
    StructField("node_runqueue_wait_seconds", DoubleType()),  # the node waiting for a CPU
    StructField("loadavg_1m", DoubleType()),  # the machine's, during the run
    StructField("env", ENV),
])


SWARM_SIM_KEY = ("nodes", "bootstraps", "loss", "target_direct", "capacity", "max_known")


def _swarm_phase(raw: DataFrame, phase: str, *extra) -> DataFrame:
    """One phase's records → per (SWARM_SIM_KEY, commit) over the seeds: the median, fastest
    and slowest simulated seconds of the runs that converged, the share of runs that converged
    and the most nodes any run left short, medians of the traffic per (live) node, the fewest
    direct connections any node held at the end, datagrams and CPU, the largest peak RSS;
    `runs`."""
    converged = F.coalesce("converged", F.lit(False))
    seconds = F.when(converged, F.col("seconds"))
    return (raw.where((F.col("kind") == "swarm-sim") & (F.col("phase") == phase))
            .groupBy(*SWARM_SIM_KEY, F.col("env.commit").alias("commit"))
            .agg(F.min(F.to_timestamp("env.time")).alias("time"),
                 F.median(seconds).alias("seconds"),
                 F.min(seconds).alias("fastest_s"),
                 F.max(seconds).alias("slowest_s"),
                 F.avg(converged.cast("double")).alias("converged"),
                 F.max("short").alias("short"),
                 F.median("sent_GetConnections_per_node").alias("get_connections_per_node"),
                 F.median("sent_Connections_per_node").alias("connections_per_node"),
                 F.median("sent_bytes_GetConnections_per_node")
                 .alias("get_connections_bytes_per_node"),
                 F.median("sent_bytes_Connections_per_node").alias("connections_bytes_per_node"),
                 F.median("sent_bytes_per_node").alias("bytes_per_node"),
                 F.min("direct_min").alias("direct_min"),
                 F.median("datagrams").alias("datagrams"),
                 F.median("cpu_seconds").alias("cpu_seconds"),
                 F.max("peak_rss_mb").alias("peak_rss_mb"),
                 *extra,
                 F.count(F.lit(1)).alias("runs")))


def swarm_joins(raw: DataFrame) -> DataFrame:
    """swarm-sim join records → per (nodes, bootstraps, loss, target_direct, capacity,
    max_known, commit) over the seeds, dated by the commit's first run: simulated seconds from
    the first node's start until every node holds target_direct direct connections (median,
    fastest and slowest of the runs that converged; null when none did), the share of runs that
    converged, GetConnections and Connections sent per node (count and bytes, the bytes null
    for records without them), all bytes, Pings and Connects sent per node, peers learned per
    node, the fewest direct connections any node held, the simulator's peak RSS (MB, when
    recorded), datagrams and CPU seconds; `runs`."""
    return _swarm_phase(raw, "join",
                        F.median("sent_Ping_per_node").alias("pings_per_node"),
                        F.median("sent_Connect_per_node").alias("connects_per_node"),
                        F.median("learned_per_node").alias("learned_per_node"))


def swarm_recoveries(raw: DataFrame) -> DataFrame:
    """swarm-sim crash records → per (nodes, bootstraps, loss, target_direct, capacity,
    max_known, commit) over the seeds: how many nodes crashed (median) and the simulated seconds
    from the crash until every survivor again holds target_direct direct connections, all to
    live nodes (median, fastest, slowest of the runs that converged), the share that converged,
    GetConnections and Connections (and bytes, when recorded) sent per survivor meanwhile, the
    fewest direct connections a survivor held at the end, the most direct links to crashed
    nodes any run left; `runs`."""
    return _swarm_phase(raw, "crash",
                        F.median("crashed").alias("crashed"),
                        F.max("direct_to_crashed").alias("direct_to_crashed"))


# measure → (its headline column, True when higher is better); other measures keep their row
# with a null `value`. Over sockets, Pongs per node CPU second: the Pongs per second are capped
# by the Pings offered, and the goal is per core (the core measure is CPU-bound: its Pongs per
# second are per CPU second already).
SWARM_MEASURES = {"memory": ("bytes_per_connection", False),
                  "pingpong": ("pongs_per_second", True),
                  "sockets": ("pongs_per_cpu_second", True)}


SWARM_STACKS = ("pure Python", "Cython")


def swarm_bench(raw: DataFrame) -> DataFrame:
    """swarm-bench records → medians per (measure, stack, commit) over the runs, dated by the
    commit's first run: bytes per connection (memory), Pongs per second and µs per Ping
    (pingpong: through the sans-IO core; sockets: over real sockets, with the Pings offered
    per second, the share unanswered, the node's CPU seconds and Pongs per CPU second, Ping →
    Pong latency p50/p99, the seconds the node waited for a CPU, the machine's load average,
    the load generator's peers and the fewest the node established), the
    largest `connections`, the table, MAC and datagram-path implementations named; `value`, the
    measure's headline figure, SWARM_MEASURES' (null for a measure not there: its row stays);
    `runs`."""
    value = F.lit(None).cast("double")
    for measure, (column, _) in SWARM_MEASURES.items():
        value = F.when(F.col("measure") == measure, F.col(column)).otherwise(value)
    return (raw.where(F.col("kind") == "swarm-bench")
            .withColumn("value", value)
            .groupBy("measure", "stack", F.col("env.commit").alias("commit"))
            .agg(F.min(F.to_timestamp("env.time")).alias("time"),
                 F.median("value").alias("value"),
                 F.median("bytes_per_connection").alias("bytes_per_connection"),
                 F.median("pongs_per_second").alias("pongs_per_second"),
                 F.median("us_per_ping").alias("us_per_ping"),
                 F.median("offered_per_second").alias("offered_per_second"),
                 F.median("loss").alias("loss"),
                 F.median("node_cpu_seconds").alias("node_cpu_seconds"),
                 F.median("pongs_per_cpu_second").alias("pongs_per_cpu_second"),
                 F.median("latency_p50_us").alias("latency_p50_us"),
                 F.median("latency_p99_us").alias("latency_p99_us"),
                 F.median("node_runqueue_wait_seconds").alias("node_runqueue_wait_seconds"),
                 F.median("loadavg_1m").alias("loadavg_1m"),
                 F.max("peers").alias("peers"),
                 F.min("established").alias("established"),
                 F.concat_ws(", ", F.sort_array(F.collect_set("datagram_path")))
                 .alias("datagram_path"),
                 F.max("connections").alias("connections"),
                 F.concat_ws(", ", F.sort_array(F.collect_set("implementation")))
                 .alias("implementation"),
                 F.concat_ws(", ", F.sort_array(F.collect_set("mac"))).alias("mac"),
                 F.count(F.lit(1)).alias("runs")))


def swarm_speedups(bench: DataFrame) -> DataFrame:
    """swarm_bench rows → per (measure, commit) where both stacks ran: the pure-Python and the
    Cython headline values and how many times better Cython's is (`ratio`: Cython / pure Python
    when higher is better, pure Python / Cython when lower is); measures with no headline
    figure are left out."""
    higher = F.lit(None).cast("boolean")
    for measure, (_, better_high) in SWARM_MEASURES.items():
        higher = F.when(F.col("measure") == measure, F.lit(better_high)).otherwise(higher)
    rows = bench.where(F.col("value").isNotNull())
    pure = rows.where(F.col("stack") == "pure Python").select(
        "measure", "commit", F.col("time").alias("pure_time"), F.col("value").alias("pure"))
    cython = rows.where(F.col("stack") == "Cython").select(
        "measure", "commit", F.col("time").alias("cython_time"), F.col("value").alias("cython"))
    return (pure.join(cython, ["measure", "commit"])
            .withColumn("higher_is_better", higher)
            .withColumn("time", F.least("pure_time", "cython_time"))
            .withColumn("ratio", F.when(F.col("higher_is_better"), F.col("cython") / F.col("pure"))
                        .otherwise(F.col("pure") / F.col("cython")))
            .select("measure", "commit", "time", "pure", "cython", "higher_is_better", "ratio"))


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
    fields = [k for k in SWARM_SIM_KEY if k != "nodes"]
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
    return tuple(r[k] for k in SWARM_SIM_KEY if k != "nodes")


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
    joins = latest_per(data.get("swarm_joins", []), *SWARM_SIM_KEY)
    recoveries = latest_per(data.get("swarm_recoveries", []), *SWARM_SIM_KEY)
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
    order = lambda r: tuple((r[k] is None, r[k]) for k in SWARM_SIM_KEY)  # noqa: E731
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
        for r in sorted(latest_per(joins, *SWARM_SIM_KEY), key=order):
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
        for r in sorted(latest_per(recoveries, *SWARM_SIM_KEY), key=order):
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
            for stack in SWARM_STACKS:
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


def _analyse(raw: DataFrame, threshold: float) -> Dict[str, DataFrame]:
    bench = swarm_bench(raw).cache()
    return {"swarm_joins": swarm_joins(raw), "swarm_recoveries": swarm_recoveries(raw),
            "swarm_bench": bench, "swarm_speedups": swarm_speedups(bench)}


def _plots(data: Dict[str, List[dict]], out: pathlib.Path, pyplot) -> List[pathlib.Path]:
    if not any(data.get(t) for t in ("swarm_joins", "swarm_recoveries", "swarm_bench")):
        return []
    return [_swarm_plot(data, out / "swarm.png", pyplot())]


SECTIONS = (Section("swarm", SWARM_KINDS, SWARM_SCHEMA, _analyse, _plots,
                    lambda data, threshold: _swarm_markdown(data)),)
