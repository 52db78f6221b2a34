"""Trend transformations: pure DataFrame -> DataFrame functions over bench results.

Input rows come from `pelotari bench` JSON lines (one record per system and scenario of a run),
from the bully benchmark's JSON lines (pelotari/bully/bench.py: one record per election or sync
round), from potato's (pelotari/potato/simulate.py and bench.py: one record per simulated
broadcast or election, or per real mesh) and from pytest-benchmark JSON files. Nothing here reads or writes files; see report.py.
"""
from typing import Iterable

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (BooleanType, DoubleType, LongType, StringType, StructField,
                               StructType)

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

POTATO_KINDS = ("potato-sim-broadcast", "potato-sim-election", "potato-mesh")

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
