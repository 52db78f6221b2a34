"""Trend transformations: pure DataFrame -> DataFrame functions over bench results.

Input rows come from `pelotari bench` JSON lines (one record per system and scenario of a run),
from the bully benchmark's JSON lines (pelotari/bully/bench.py: one record per election or sync
round), from potato's (pelotari/potato/simulate.py and bench.py: one record per simulated
broadcast or election, or per real mesh), from swarm's (pelotari/swarm/simulate.py: one record
per phase of a simulated swarm; bench.py: one per figure and stack) and from pytest-benchmark
JSON files, and from the fuzz runner's (bench/fuzz: one record per target run). Nothing here
reads or writes files; see report.py.
"""
from typing import Iterable

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, LongType, StringType,
                               StructField, StructType)

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
    StructField("env", StructType([
        StructField("commit", StringType()),
        StructField("time", StringType()),
        StructField("host", StringType()),
        StructField("cores", LongType()),
        StructField("kernel", StringType()),
    ])),
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


def micro_benchmarks(raw: DataFrame) -> DataFrame:
    """pytest-benchmark files → one row per benchmark: name, median ns per call and per item
    (a benchmark that times several items per call says how many in extra_info's
    `messages_per_round`), ops/s, commit."""
    rows = raw.select(F.col("commit_info.id").alias("commit"),
                      F.to_timestamp("datetime").alias("time"),
                      F.explode("benchmarks").alias("b"))
    bench_fields = rows.schema["b"].dataType.fieldNames()
    per_call = F.col("b.extra_info.messages_per_round") if (
        "extra_info" in bench_fields
        and "messages_per_round" in rows.schema["b"].dataType["extra_info"].dataType.fieldNames()
    ) else F.lit(None)
    median_ns = F.col("b.stats.median") * 1e9
    return rows.select("commit", "time", F.col("b.name").alias("name"),
                       F.col("b.group").alias("group"), median_ns.alias("median_ns"),
                       (median_ns / F.coalesce(per_call, F.lit(1))).alias("per_item_ns"),
                       F.col("b.stats.ops").alias("ops"))


# ---- the bully client's benchmark (pelotari/bully/bench.py) -----------------------------------

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
    StructField("env", BENCH_SCHEMA["env"].dataType),
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


# ---- potato: the simulator (pelotari/potato/simulate.py) and real meshes (bench.py) ------------

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
    StructField("env", BENCH_SCHEMA["env"].dataType),
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


# ---- swarm: the simulator (pelotari/swarm/simulate.py) and the benchmark (bench.py) -----------

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
    StructField("env", BENCH_SCHEMA["env"].dataType),
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


# ---- fuzzing (bench/fuzz `run --out`) ---------------------------------------------------------

# ---- the backbone cluster's failover benchmark (pelotari/harness/failover.py) --------------

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
    StructField("env", BENCH_SCHEMA["env"].dataType),
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


FUZZ_KINDS = ("fuzz",)
FUZZ_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("target", StringType()),
    StructField("commit", StringType()),
    StructField("when", StringType()),
    StructField("implementation", StringType()),
    StructField("native_coverage", BooleanType()),
    StructField("seconds", DoubleType()),
    StructField("inputs", LongType()),
    StructField("inputs_per_second", LongType()),
    StructField("coverage_edges", LongType()),
    StructField("features", LongType()),
    StructField("corpus", LongType()),
    StructField("crashes", ArrayType(StringType())),
    StructField("exit", LongType()),
])


def fuzz_runs(raw: DataFrame) -> DataFrame:
    """Fuzz records → per target and build (implementation, instrumented Cython or not) its
    newest run: inputs, inputs/s, coverage, corpus, crashes found, commit and time; and `runs`,
    `inputs_all` and `crashes_all` over every run of that target and build."""
    runs = (raw.where(F.col("kind") == "fuzz")
            .withColumn("time", F.to_timestamp("when"))
            .withColumn("crash_count", F.coalesce(F.size("crashes"), F.lit(0)))
            .withColumn("native_coverage", F.coalesce("native_coverage", F.lit(False))))
    key = ["target", "implementation", "native_coverage"]
    newest = Window.partitionBy(*key).orderBy(F.col("time").desc_nulls_last())
    totals = runs.groupBy(*key).agg(F.count(F.lit(1)).alias("runs"),
                                    F.sum("inputs").alias("inputs_all"),
                                    F.sum("crash_count").alias("crashes_all"))
    return (runs.withColumn("k", F.row_number().over(newest)).where(F.col("k") == 1)
            .join(totals, key)
            .select("target", "implementation", "native_coverage", "commit", "time", "inputs",
                    "inputs_per_second", "coverage_edges", "features", "corpus",
                    F.col("crash_count").alias("crashes"), "runs", "inputs_all", "crashes_all"))


# ---- latency at the same offered rate (`pelotari bench --latency-rates`, harness/rates.py) ------

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
