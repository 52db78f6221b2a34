"""bench/fuzz's runs: their analysis and the summary's table of each target's newest run per
build (no picture)."""
from typing import Dict, List

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, LongType, StringType,
                               StructField, StructType)

from pelotari.analysis.plotting import _short
from pelotari.analysis.trend import Section


# ---- analysis: pure DataFrame -> DataFrame functions over the records ----------------------------

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


SECTIONS = (Section("fuzz", FUZZ_KINDS, FUZZ_SCHEMA, lambda raw, threshold: {"fuzz": fuzz_runs(raw)},
                    lambda data, out, pyplot: [], lambda data, threshold: _fuzz_markdown(data)),)
