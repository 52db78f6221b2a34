"""`pelotari trend`: bench results → Spark → Parquet, plots and a Markdown summary."""
import pathlib
import time

import click

from pelotari.cli import main


@main.command()
@click.argument("results", type=click.Path(exists=True, file_okay=False, path_type=pathlib.Path),
                default="results")
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=pathlib.Path),
              default=None, help="Where to write [default: RESULTS/trend].")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master URL (e.g. spark://host:7077) for results that outgrow one machine.")
@click.option("--threshold", type=click.FloatRange(0, 1), default=0.1, show_default=True,
              help="Flag a regression when a scenario's median falls more than this fraction "
                   "below its previous median.")
def trend(results, out, master, threshold):
    """Analyse every bench result under RESULTS in Spark.

    Loads every JSON-lines file (`pelotari bench` records, the bully benchmark's, `pelotari
    potato simulate` and `potato bench` records, and `pelotari swarm simulate` and `swarm
    bench` records) and pytest-benchmark JSON file under the folder, and writes: throughput per
    scenario and system over commits, pelotari's ratios to the reference and the peers,
    regressions, latency percentiles, micro-benchmarks, bully election times, election messages
    and clock-sync spreads, potato's simulated broadcast reach, redundancy and latency,
    election times, messages per edge and clients counted, and its real meshes' set-up and
    election times and CPU per delivery, and swarm's simulated join and recovery times and
    GetConnections/Connections traffic per node, and its benchmark's bytes per connection and
    Pongs per second, pure Python against Cython — as Parquet tables, PNG plots and summary.md.
    """
    try:
        from pelotari.analysis import report
        from pelotari.analysis.spark import session
    except ImportError as exc:
        if "pyspark" not in str(exc):
            raise
        raise click.ClickException(
            "pelotari trend needs PySpark: pip install 'pelotari[analysis]'") from None

    out = out or results / "trend"
    files = report.find(results)
    if not files:
        raise click.ClickException(f"no bench results (*.jsonl) or pytest-benchmark files in {results}")
    started = time.monotonic()
    click.echo(f"{sum(map(len, files.values()))} result files; starting Spark ({master})...", err=True)
    try:
        spark = session(master)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        frames = report.load(spark, files)
        click.echo(f"loaded {', '.join(frames)} results; analysing...", err=True)
        tables = report.analyse(frames, threshold)
        written = report.write(tables, out, threshold)
    finally:
        spark.stop()
    for path in written:
        click.echo(str(path))
    click.echo(f"done in {time.monotonic() - started:.1f}s; summary: {out / 'summary.md'}", err=True)
