"""`pelotari trend`: bench results → Spark → Parquet, plots and a Markdown summary."""
import importlib
import logging
import os
import pathlib
import signal
import sys
import time

import click

from pelotari.cli import main
from pelotari.cli.common import FiniteRange
from pelotari.cli.service import INTERRUPTED, SignalInterrupt

ANALYSIS_EXTRA = ("pyspark", "matplotlib")  # pyproject.toml's [analysis]: what trend imports

@main.command()
@click.argument("results", type=click.Path(exists=True, file_okay=False, path_type=pathlib.Path),
                default="results")
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=pathlib.Path),
              default=None, help="Where to write [default: RESULTS/trend].")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master URL (e.g. spark://host:7077) for results that outgrow one machine.")
@click.option("--threshold", type=FiniteRange(0, 1), default=0.1, show_default=True,
              help="Flag a regression when a scenario's median falls more than this fraction "
                   "below its previous median.")
def trend(results, out, master, threshold):
    """Analyse every bench result under RESULTS in Spark.

    Loads every JSON-lines file (`pelotari bench` records, the bully benchmark's, `pelotari
    potato simulate` and `potato bench` records, `pelotari swarm simulate` and `swarm bench`
    records, and `pelotari cluster-bench` records) and pytest-benchmark JSON file under the
    folder, and writes: throughput per
    scenario and system over commits, pelotari's ratios to the reference and the peers,
    regressions, latency percentiles, latency at the same offered rates (`bench
    --latency-rates`: p50, p99 and max per system and rate, each run's loopback floor and
    wake-up stalls), micro-benchmarks, bully election times, election messages
    and clock-sync spreads, potato's simulated broadcast reach, redundancy and latency,
    election times, messages per edge and clients counted, and its real meshes' set-up and
    election times and CPU per delivery, and swarm's simulated join and recovery times and
    GetConnections/Connections traffic per node, and its benchmark's bytes per connection and
    Pongs per second, pure Python against Cython, and the backbone cluster's failover times
    and losses per fault — as Parquet tables, PNG plots and summary.md.
    """
    _require_analysis_extra()
    from pelotari.analysis import report
    from pelotari.analysis.spark import session, silence

    out = out or results / "trend"
    files = report.find(results)
    if not files:
        raise click.ClickException(f"no bench results (*.jsonl) or pytest-benchmark files in {results}")
    started = time.monotonic()
    click.echo(f"{sum(map(len, files.values()))} result files; starting Spark ({master})...", err=True)
    # A service stop ends it as Ctrl-C does. From the signal on, nothing PySpark's threads or
    # the JVM say reaches the terminal (silence()): the accumulator server's thread printed an
    # EOFError traceback once its JVM was killed; one line, "interrupted", says what happened.
    interrupts = SignalInterrupt(signal.SIGTERM, then=silence)
    # py4j logs (with a traceback) any KeyboardInterrupt that lands while it talks to the JVM:
    # what goes wrong reaches us as exceptions, so its logging is only noise here.
    logging.disable(logging.CRITICAL)
    try:
        try:
            spark = session(master)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from None
        # PySpark's own SIGINT handler asks the JVM to cancel jobs (more Java traces, and a
        # wait); ours just interrupts, and the except below kills the JVM.
        interrupts.watch(signal.SIGINT)
        frames = report.load(spark, files)
        click.echo(f"loaded {', '.join(frames)} results; analysing...", err=True)
        tables = report.analyse(frames, threshold)
        written = report.write(tables, out, threshold)
        spark.stop()
    except KeyboardInterrupt:
        # Spark's JVM ignores SIGINT, and stopping it mid-job prints pages of Java stack
        # traces (and can wait on a JVM still starting): kill it and go, saying one line.
        _quit_interrupted()
    except Exception:
        # The interrupt can land inside PySpark's own error handling, which then fails on
        # the half-read py4j connection and raises its error instead (Py4JNetworkError:
        # "Answer from Java side is empty"): after a signal, any error means interrupted.
        if interrupts.came:
            _quit_interrupted()
        raise
    if interrupts.came:  # a KeyboardInterrupt that py4j swallowed
        _quit_interrupted()
    for path in written:
        click.echo(str(path))
    click.echo(f"done in {time.monotonic() - started:.1f}s; summary: {out / 'summary.md'}", err=True)


def _require_analysis_extra():
    """A one-line error naming what is missing and how to install it, without the extra."""
    from pelotari.analysis import install_hint

    for name in ANALYSIS_EXTRA:
        try:
            importlib.import_module(name)
        except ImportError:
            raise click.ClickException(
                f"pelotari trend needs the analysis extra ({name} is not installed): "
                f"{install_hint()}") from None


def _quit_interrupted():
    """After Ctrl-C or SIGTERM: no JVM left, one line, exit status 130 — without the
    interpreter's exit hooks, which would talk to the JVM just killed (py4j's errors)."""
    from pelotari.analysis.spark import kill_children, silence

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
    for stream in (sys.stdout, sys.stderr):  # what was said before the interrupt
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    terminal = silence()  # before the JVM goes: its end wakes PySpark's threads
    kill_children()
    try:
        os.write(terminal, b"interrupted\n")
    except OSError:
        pass
    os._exit(INTERRUPTED)
