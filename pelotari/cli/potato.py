"""`pelotari potato`: the Potato Protocol v2.1 mesh (potato.md)."""
import pathlib
import time

import click

from pelotari.cli import main
from pelotari.cli.common import PelotariGroup

GROUP_HELP = """Potato mesh: relay and elections among clients that are not all peers.

Clients relay JSON messages (direct to one client by name, or broadcast to all) across a mesh
in which not every client is connected to every other, and agree on the next shared "frame" by
direct and indirect elections, without knowing who is in the mesh.
"""


@main.group(cls=PelotariGroup, help=GROUP_HELP)
def potato():
    pass


@potato.command()
@click.option("-n", "--nodes", type=click.IntRange(3, 100000), default=1000, show_default=True,
              help="Clients in the mesh.")
@click.option("-d", "--degree", type=click.FloatRange(2, 50), default=6.0, show_default=True,
              help="Average peers per client (a random connected mesh).")
@click.option("--seeds", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Meshes per measurement (seeds 0..N-1).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="results/potato.jsonl",
              show_default=True, help="JSON-lines file the records are appended to "
                                      "(`pelotari trend` reads it).")
def simulate(nodes, degree, seeds, output):
    """Measure broadcasts and elections in a simulated mesh.

    For each of: no loss; 1 % of messages lost; the mesh cut in two halves — a broadcast from a
    random client (share reached, relative message redundancy RMR = m/(n-1) - 1, hops of the
    last delivery, latency p50/p99) and an election (time to the result, election messages per
    edge, and whether every client reachable was counted exactly once). Links: 1 ms, 0.5 ms of
    jitter. Deterministic for a given seed.
    """
    from statistics import median

    from pelotari.bench.results import environment, write
    from pelotari.potato import simulate as sim

    started = time.monotonic()
    env = environment()
    records = [{**r, "env": env} for r in sim.run(nodes, degree, seeds, progress=lambda s: click.echo(
        f"[{time.monotonic() - started:5.1f}s] {s}", err=True))]
    write(pathlib.Path(output), records)
    click.echo("| conditions | reached | RMR | last hops | latency p50 / p99 | election | "
               "msgs/edge | counted once |")
    click.echo("|---|---|---|---|---|---|---|---|")
    for loss, part in ((0.0, False), (0.01, False), (0.0, True)):
        b = [r for r in records if r["kind"] == "potato-sim-broadcast" and r["loss"] == loss
             and r["partition"] == part]
        e = [r for r in records if r["kind"] == "potato-sim-election" and r["loss"] == loss
             and r["partition"] == part]
        what = "partition" if part else f"{loss:.0%} loss"
        click.echo(f"| {what} | {median(r['reached_of_reachable'] for r in b):.1%} of reachable | "
                   f"{median(r['rmr'] for r in b):.2f} | {median(r['last_hops'] for r in b):g} | "
                   f"{median(r['latency_p50_ms'] for r in b):.1f} / "
                   f"{median(r['latency_p99_ms'] for r in b):.1f} ms | "
                   f"{median(r['elected_ms'] for r in e):.0f} ms | "
                   f"{median(r['messages_per_edge'] for r in e):.2f} | "
                   f"{sum(r['counted_once'] for r in e)}/{len(e)} |")
    click.echo(f"{len(records)} records appended to {output}", err=True)
