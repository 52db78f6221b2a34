"""potato's analysis, pictures and summary tables (`potato simulate` and `potato bench` records).

potato.png: the simulator's broadcast reach, redundancy and latency and its election's time,
messages per edge and clients counted, per network condition and mesh configuration;
potato-mesh.png: real processes' set-up time, election time and CPU per delivery, per mesh and
transport. The summary's Simulator, Real processes and pages-in-a-browser tables."""
import pathlib
from typing import Dict, List

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from pelotari.analysis.plotting import (_bars, _categories, _check, _commits_note, _figure_legend,
                                        _goal, _ms, _number, _runs_note, _short, latest_per)
from pelotari.analysis.trend import ENV, Section


# ---- analysis: pure DataFrame -> DataFrame functions over the records ----------------------------

POTATO_KINDS = ("potato-sim-broadcast", "potato-sim-election", "potato-mesh", "potato-mixed")


POTATO_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("where", StringType()),  # "simulator" or "processes"
    StructField("nodes", LongType()),
    StructField("seed", LongType()),
    # the simulator: a random mesh of `nodes` clients, `degree` peers each on average (measured)
    StructField("degree", DoubleType()),
    StructField("loss", DoubleType()),  # share of messages the links drop
    StructField("partition", BooleanType()),  # a random half cut off from the other
    # potato-sim-broadcast: one broadcast from a random client
    StructField("reached", DoubleType()),  # share of the other clients it reached
    StructField("reached_of_reachable", DoubleType()),  # ... of those a partition left reachable
    StructField("messages", LongType()),  # broadcast copies sent; election messages
    StructField("rmr", DoubleType()),  # relative message redundancy m / (r - 1) - 1
    StructField("last_hops", LongType()),
    StructField("latency_p50_ms", DoubleType()),
    StructField("latency_p99_ms", DoubleType()),
    # potato-sim-election: one election from a random client
    StructField("elected_ms", DoubleType()),
    StructField("won", BooleanType()),
    StructField("yes", DoubleType()),
    StructField("no", LongType()),
    StructField("counted", LongType()),  # other clients the result counted
    StructField("reachable_others", LongType()),
    StructField("counted_once", BooleanType()),
    StructField("messages_per_edge", DoubleType()),  # over the edges the originator reaches
    StructField("took_frame", DoubleType()),  # share of the reachable clients on the new frame
    # potato-mesh: real processes
    StructField("mesh", StringType()),  # "A-G" (the seed's example), "20 clients"
    StructField("transport", StringType()),  # "webrtc", "tcp"
    StructField("edges", LongType()),
    StructField("setup_s", DoubleType()),
    StructField("elections", LongType()),
    StructField("election_p50_ms", DoubleType()),
    StructField("election_p99_ms", DoubleType()),
    StructField("broadcasts", LongType()),
    StructField("cpu_us_per_delivery", DoubleType()),
    # potato-mixed: pages in headless chromium beside Python clients (bench.run_mixed)
    StructField("python_clients", LongType()),
    StructField("pages", LongType()),
    StructField("page_first_peer_ms_p50", DoubleType()),  # page start to its first peer
    StructField("page_first_peer_ms_max", DoubleType()),
    StructField("elections_won", LongType()),
    StructField("frames_agreed", LongType()),  # elections won whose frame every client took
    StructField("node_cpu_idle_pct", DoubleType()),  # a page-serving node, no page yet
    StructField("node_cpu_pct_per_page", DoubleType()),  # what each page added to it, idle
    StructField("env", ENV),
])


POTATO_SIM_KEY = ("nodes", "degree", "loss", "partition")


def potato_broadcasts(raw: DataFrame) -> DataFrame:
    """potato-sim-broadcast records → medians per (nodes, degree, loss, partition, commit) over
    the seeds, dated by the commit's first run: the share of the clients the origin could reach
    that the broadcast reached (and the worst run's), relative message redundancy (RMR) and its
    goal, degree − 1 (every client forwards once to every peer but the one it heard from), the
    hops of the last delivery, delivery latency p50/p99 and `runs`."""
    return (raw.where(F.col("kind") == "potato-sim-broadcast")
            .groupBy(*POTATO_SIM_KEY, F.col("env.commit").alias("commit"))
            .agg(F.min(F.to_timestamp("env.time")).alias("time"),
                 F.median("reached").alias("reached"),
                 F.median("reached_of_reachable").alias("reached_of_reachable"),
                 F.min("reached_of_reachable").alias("worst_reached_of_reachable"),
                 F.median("messages").alias("messages"),
                 F.median("rmr").alias("rmr"),
                 F.median("last_hops").alias("last_hops"),
                 F.median("latency_p50_ms").alias("latency_p50_ms"),
                 F.median("latency_p99_ms").alias("latency_p99_ms"),
                 F.count(F.lit(1)).alias("runs"))
            .withColumn("rmr_goal", F.col("degree") - 1))


def potato_elections(raw: DataFrame) -> DataFrame:
    """potato-sim-election records → per (nodes, degree, loss, partition, commit): the median
    and slowest time to the originator's result, median election messages and messages per
    edge (over the edges the originator can reach), the median and smallest share of the
    reachable clients the result counted, the fractions of runs where every reachable client
    was counted exactly once and where YES won, the smallest share of the reachable clients
    that took the new frame (null for records without it); `runs`."""
    counted = F.col("counted") / F.col("reachable_others")
    return (raw.where(F.col("kind") == "potato-sim-election")
            .groupBy(*POTATO_SIM_KEY, F.col("env.commit").alias("commit"))
            .agg(F.min(F.to_timestamp("env.time")).alias("time"),
                 F.median("elected_ms").alias("elected_ms"),
                 F.max("elected_ms").alias("slowest_elected_ms"),
                 F.median("messages").alias("messages"),
                 F.median("messages_per_edge").alias("messages_per_edge"),
                 F.median(counted).alias("counted_share"),
                 F.min(counted).alias("worst_counted_share"),
                 F.avg(F.coalesce("counted_once", F.lit(False)).cast("double"))
                 .alias("counted_once"),
                 F.avg(F.coalesce("won", F.lit(False)).cast("double")).alias("won"),
                 F.min("took_frame").alias("took_frame"),
                 F.count(F.lit(1)).alias("runs")))


def potato_meshes(raw: DataFrame) -> DataFrame:
    """potato-mesh records (real processes) → medians per (mesh, transport, nodes, edges,
    commit) over the runs: set-up time (first start until every client has all its peers),
    each run's election p50 and p99, CPU of all clients per broadcast delivered; `runs` and the
    elections they timed in all."""
    return (raw.where(F.col("kind") == "potato-mesh")
            .groupBy("mesh", "transport", "nodes", "edges", F.col("env.commit").alias("commit"))
            .agg(F.min(F.to_timestamp("env.time")).alias("time"),
                 F.median("setup_s").alias("setup_s"),
                 F.median("election_p50_ms").alias("election_p50_ms"),
                 F.median("election_p99_ms").alias("election_p99_ms"),
                 F.median("cpu_us_per_delivery").alias("cpu_us_per_delivery"),
                 F.sum("elections").alias("elections"),
                 F.count(F.lit(1)).alias("runs")))


def potato_mixed(raw: DataFrame) -> DataFrame:
    """potato-mixed records (pages in chromium and Python clients) → per (mesh, transport,
    python_clients, pages, edges, commit): medians over the runs of set-up, page start to first
    peer, each run's election p50 and p99 (with their smallest and largest), the node's idle
    CPU and what each page adds to it; elections, won and agreed by every client, summed;
    `runs`."""
    return (raw.where(F.col("kind") == "potato-mixed")
            .groupBy("mesh", "transport", "python_clients", "pages", "edges",
                     F.col("env.commit").alias("commit"))
            .agg(F.min(F.to_timestamp("env.time")).alias("time"),
                 F.median("setup_s").alias("setup_s"),
                 F.median("page_first_peer_ms_p50").alias("page_first_peer_ms"),
                 F.median("election_p50_ms").alias("election_p50_ms"),
                 F.min("election_p50_ms").alias("election_p50_ms_min"),
                 F.max("election_p50_ms").alias("election_p50_ms_max"),
                 F.median("election_p99_ms").alias("election_p99_ms"),
                 F.min("election_p99_ms").alias("election_p99_ms_min"),
                 F.max("election_p99_ms").alias("election_p99_ms_max"),
                 F.median("node_cpu_idle_pct").alias("node_cpu_idle_pct"),
                 F.median("node_cpu_pct_per_page").alias("node_cpu_pct_per_page"),
                 F.sum("elections").alias("elections"),
                 F.sum("elections_won").alias("elections_won"),
                 F.sum("frames_agreed").alias("frames_agreed"),
                 F.count(F.lit(1)).alias("runs")))


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


def _potato_plot(broadcasts: List[dict], elections: List[dict], path: pathlib.Path,
                 plt) -> pathlib.Path:
    """The simulator's mesh, per network condition (x) and mesh configuration (bars): a
    broadcast's reach, redundancy (goal: degree − 1) and latency; an election's time to the
    result (against the 300 ms deadline), messages per edge (goal: 4) and clients counted."""
    broadcasts = latest_per(broadcasts, *POTATO_SIM_KEY)
    elections = latest_per(elections, *POTATO_SIM_KEY)
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
        key = POTATO_SIM_KEY
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


def _analyse(raw: DataFrame, threshold: float) -> Dict[str, DataFrame]:
    return {"potato_broadcasts": potato_broadcasts(raw), "potato_elections": potato_elections(raw),
            "potato_meshes": potato_meshes(raw), "potato_mixed": potato_mixed(raw)}


def _plots(data: Dict[str, List[dict]], out: pathlib.Path, pyplot) -> List[pathlib.Path]:
    written = []
    if data.get("potato_broadcasts") or data.get("potato_elections"):
        written.append(_potato_plot(data.get("potato_broadcasts", []),
                                    data.get("potato_elections", []), out / "potato.png",
                                    pyplot()))
    if data.get("potato_meshes"):
        written.append(_potato_mesh_plot(data["potato_meshes"], out / "potato-mesh.png",
                                         pyplot()))
    return written


SECTIONS = (Section("potato", POTATO_KINDS, POTATO_SCHEMA, _analyse, _plots,
                    lambda data, threshold: _potato_markdown(data)),)
