"""`pelotari bench`: the side-by-side benchmark."""
import datetime
import pathlib
import time

import click

from pelotari.cli import main

DEFAULT_SYSTEMS = "pelotari,reference,reference-gso,asyncio,redis,nats,zeromq"


def _int_list(ctx, param, value):
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of numbers") from None
    if not out or min(out) < 1:
        raise click.BadParameter("needs at least one positive number")
    return out


@main.command()
@click.option("--systems", default=DEFAULT_SYSTEMS, show_default=True,
              help="Comma-separated systems to measure (see --list).")
@click.option("-S", "--payloads", default="16,256,1024", show_default=True, callback=_int_list,
              help="Payload sizes in bytes (at least 16: the timestamp stamp).")
@click.option("-N", "--subscribers", default="1,4,16", show_default=True, callback=_int_list,
              help="Subscriber counts.")
@click.option("-P", "--publishers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Publisher processes.")
@click.option("-d", "--duration", type=click.FloatRange(0.2, 600), default=2.0, show_default=True,
              help="Seconds each trial publishes.")
@click.option("--repeats", type=click.IntRange(1, 15), default=3, show_default=True,
              help="Runs at the lossless rate; the median is reported.")
@click.option("-o", "--output", type=click.Path(path_type=pathlib.Path), default=None,
              help="JSON-lines file to append to [default: results/bench-TIME.jsonl].")
@click.option("--list", "list_systems", is_flag=True, help="List the systems and whether each can run here.")
def bench(systems, payloads, subscribers, publishers, duration, repeats, output, list_systems):
    """Measure systems side by side: the highest lossless rate of each scenario.

    For every payload size S and subscriber count N, each system is started alone on one core
    (the load generator runs on the others), its highest offered rate with loss < 0.1 % is found
    by search, run --repeats times (median), and latency measured at half that rate. Delivered
    msgs/s (summed over subscribers), ingress, loss, latency and the server's CPU are written
    as JSON lines; the side-by-side table with pelotari's ratios is printed at the end.
    """
    from pelotari.bench import results
    from pelotari.bench.search import find_lossless_rate
    from pelotari.bench.systems import SYSTEMS, Unavailable
    from pelotari.bench.trial import Scenario, Session, placement

    if list_systems:
        for name, system in SYSTEMS.items():
            why = system.check()
            click.echo(f"{name:<14} {'ok' if why is None else 'unavailable: ' + why}\n"
                       f"{'':<14} {system.description}")
        return
    names = [s.strip() for s in systems.split(",") if s.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise click.BadParameter(f"unknown system {unknown[0]!r}; choose from {', '.join(SYSTEMS)}",
                                 param_hint="--systems")
    if min(payloads) < 16:
        raise click.BadParameter("payloads must be at least 16 bytes", param_hint="--payloads")
    output = output or pathlib.Path("results") / (
        "bench-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + ".jsonl")
    env = results.environment()
    where = placement()[2]
    click.echo(f"pelotari bench: {', '.join(names)}; S={payloads} N={subscribers} P={publishers}; "
               f"{duration:g}s trials; {where}", err=True)
    records, runnable = [], []
    for name in names:
        why = SYSTEMS[name].check()
        if why:
            click.secho(f"skipping {name}: {why}", fg="yellow", err=True)
            records.append(results.skipped(name, why, env))
            results.write(output, records[-1:])
        else:
            runnable.append(name)
    versions = {name: SYSTEMS[name].version() for name in runnable}
    scenarios = [Scenario(s, n, publishers) for s in payloads for n in subscribers]
    total = len(scenarios) * len(runnable)
    started = time.monotonic()
    done = 0
    for scenario in scenarios:
        for name in runnable:
            done += 1
            spent = time.monotonic() - started
            eta = f" ETA {_clock(spent / (done - 1) * (total - done + 1))}" if done > 1 else ""
            filled = round(20 * (done - 1) / total)
            label = f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{total}{eta} {name:<13} {scenario.name}"

            def progress(what, r, label=label):
                click.echo(f"\r{label}  {what:<14} offered {_r(r.offered_rate):>7}/s  "
                           f"delivered {_r(r.delivered_rate):>7}/s  loss {r.loss:7.3%}"
                           f"{'  client-bound' if r.client_bound else ''}\033[K", nl=False, err=True)

            try:
                with Session(SYSTEMS[name], scenario) as session:
                    found = find_lossless_rate(lambda rate: session.trial(rate, duration),
                                               repeats=repeats, progress=progress)
                rec = results.record(name, scenario, found, env, where, duration, versions[name])
            except Unavailable as exc:
                click.secho(f"\n{label}: {exc}", fg="red", err=True)
                rec = results.skipped(name, str(exc), env)
            records.append(rec)
            results.write(output, [rec])
            if rec["kind"] == "bench":
                click.echo(f"\r{label}  lossless {_r(rec['lossless_rate'])}/s in, "
                           f"{_r(rec['delivered_rate'])}/s delivered, p99 "
                           f"{rec['latency_p99_us']:.0f} µs at 50%, server "
                           f"{rec['server_cpu_us_per_msg']:.2f} µs CPU/msg\033[K", err=True)
    elapsed = time.monotonic() - started
    click.echo(f"\n{results.table(records, runnable)}\n")
    click.echo(f"{where}; {duration:g}s trials; loss < 0.1 %; results in {output} "
               f"({elapsed:.0f}s)", err=True)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{secs:02d}s"


def _r(v):
    from pelotari.bench.results import _rate

    return _rate(v)
