"""What every protocol's analysis shares: the records' `env` (where and when a run was made),
and the pytest-benchmark files' micro-benchmarks. Each protocol's own schemas and pure
DataFrame -> DataFrame functions are in its report_<protocol> module, beside its plots and
summary; report.py loads the files and runs them. Nothing here reads or writes files.
"""
import pathlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

# Every record's `env` (pelotari/harness/results.py environment()): the fields analysis reads.
ENV = StructType([
    StructField("commit", StringType()),
    StructField("time", StringType()),
    StructField("host", StringType()),
    StructField("cores", LongType()),
    StructField("kernel", StringType()),
])


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


@dataclass(frozen=True)
class Section:
    """One protocol's part of the report (report.py runs every SECTIONS entry in turn)."""
    frame: str  # its DataFrame's name in report.load()'s result
    kinds: Optional[Tuple[str, ...]]  # the record kinds it reads (None: any kind no other reads)
    schema: StructType
    analyse: Callable[[DataFrame, float], Dict[str, DataFrame]]  # (frame, threshold) -> tables
    # (the tables' rows, the output folder, pyplot on first call) -> the PNGs written
    plots: Callable[[Dict[str, List[dict]], pathlib.Path, Callable], List[pathlib.Path]]
    markdown: Callable[[Dict[str, List[dict]], float], List[str]]  # (rows, threshold) -> lines
