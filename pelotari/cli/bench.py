"""`pelotari bench`: the side-by-side benchmark."""
import datetime
import pathlib
import sys
import time

import click

from pelotari.cli import main

DEFAULT_SYSTEMS = ("pelotari,pelotari-plain,pelotari-packed,reference,reference-gso,asyncio,redis,nats,"
                   "zeromq")


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
@click.option("--rounds", type=click.IntRange(1, 15), default=1, show_default=True,
              help="Search every system this many times per scenario, taking the systems in "
                   "turn (A B C A B C...), and report each one's median round: slow drift of a "
                   "shared machine then falls on all systems alike.")
@click.option("--precision", type=click.FloatRange(0.01, 1.0), default=0.05, show_default=True,
              help="The search stops when the lowest failing rate is within this fraction above "
                   "the highest lossless one.")
@click.option("-o", "--output", type=click.Path(path_type=pathlib.Path), default=None,
              help="JSON-lines file to append to [default: results/bench-TIME.jsonl].")
@click.option("--list", "list_systems", is_flag=True, help="List the systems and whether each can run here.")
def bench(systems, payloads, subscribers, publishers, duration, repeats, rounds, precision, output,
          list_systems):
    """Measure systems side by side: the highest lossless rate of each scenario.

    For every payload size S and subscriber count N, each system is started alone on one core
    (the load generator runs on the others), its highest offered rate with loss < 0.1 % is found
    by search, run --repeats times (median), and latency measured at half that rate. Delivered
    msgs/s (summed over subscribers), ingress, loss, latency and the server's CPU are written
    as JSON lines; the side-by-side table with pelotari's ratios is printed at the end.
    With --rounds R every system is searched R times per scenario, the systems taking turns,
    and each one's median round is reported (every round's rates are kept in its record).
    """
    from pelotari.harness import results
    from pelotari.harness.search import find_lossless_rate
    from pelotari.harness.systems import SYSTEMS, Unavailable
    from pelotari.harness.trial import Scenario, Session, placement

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
    total = len(scenarios) * len(runnable) * rounds
    started = time.monotonic()
    done = 0
    for scenario in scenarios:
        per_round = {name: [] for name in runnable}
        for name, rnd in [(n, r) for r in range(rounds) for n in runnable]:
            done += 1
            spent = time.monotonic() - started
            eta = f" ETA {_clock(spent / (done - 1) * (total - done + 1))}" if done > 1 else ""
            filled = round(20 * (done - 1) / total)
            label = (f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{total}{eta} {name:<13} "
                     f"{scenario.name}" + (f" round {rnd + 1}/{rounds}" if rounds > 1 else ""))

            def progress(what, r, label=label):
                click.echo(f"\r{label}  {what:<14} offered {_r(r.offered_rate):>7}/s  "
                           f"delivered {_r(r.delivered_rate):>7}/s  loss {r.loss:7.3%}"
                           f"{'  client-bound' if r.client_bound else ''}\033[K", nl=False, err=True)

            try:
                with Session(SYSTEMS[name], scenario) as session:
                    found = find_lossless_rate(lambda rate: session.trial(rate, duration),
                                               repeats=repeats, precision=precision,
                                               progress=progress)
                rec = results.record(name, scenario, found, env, where, duration, versions[name])
            except Unavailable as exc:
                click.secho(f"\n{label}: {exc}", fg="red", err=True)
                rec = results.skipped(name, str(exc), env)
            per_round[name].append(rec)
            if rnd == rounds - 1:
                records.append(results.combine_rounds(per_round[name]))
                results.write(output, records[-1:])
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
    from pelotari.harness.results import _rate

    return _rate(v)


@main.command()
@click.option("--system", default="pelotari", show_default=True,
              help="System to soak (see `pelotari bench --list`).")
@click.option("-S", "--payload", type=click.IntRange(16, 65498), default=16, show_default=True,
              help="Payload size in bytes.")
@click.option("-N", "--subscribers", type=click.IntRange(1, 1024), default=4, show_default=True,
              help="Subscribers.")
@click.option("-m", "--minutes", type=click.FloatRange(0.01, 1440), default=10.0, show_default=True,
              help="How long to publish.")
@click.option("--fraction", type=click.FloatRange(0.01, 1.0), default=0.8, show_default=True,
              help="Share of the highest lossless rate to publish at (found first by a short search).")
@click.option("--rate", type=click.FloatRange(1), default=None,
              help="Publish at this many msgs/s instead of searching.")
@click.option("--interval", type=click.FloatRange(0.5, 600), default=5.0, show_default=True,
              help="Seconds between memory samples.")
@click.option("--tolerance", type=click.IntRange(0), default=1024, show_default=True,
              help="KiB of resident-memory growth after warm-up still called flat.")
@click.option("-o", "--output", type=click.Path(path_type=pathlib.Path), default=None,
              help="JSON-lines file to append the soak record to [default: results/soak-TIME.jsonl].")
def soak(system, payload, subscribers, minutes, fraction, rate, interval, tolerance, output):
    """Serve a steady load for minutes and watch the server's memory.

    The system runs alone on one core as in `pelotari bench`; unless --rate is given its
    highest lossless rate is found first (1 s trials), then the publisher sends --fraction of
    it for --minutes while the server's resident memory (VmRSS) is sampled. Memory is "flat"
    when, after the first 10 % of the run, it grows by at most --tolerance KiB and shows no
    steady upward slope. Exit status 1 if it is not flat or the run lost messages.
    """
    import threading

    from pelotari.harness import results
    from pelotari.harness.search import LOSSLESS, find_lossless_rate
    from pelotari.harness.soak import MemoryTrend, rss_kib
    from pelotari.harness.systems import SYSTEMS, Unavailable
    from pelotari.harness.trial import Scenario, Session, placement

    if system not in SYSTEMS:
        raise click.BadParameter(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}",
                                 param_hint="--system")
    why = SYSTEMS[system].check()
    if why:
        raise click.ClickException(f"{system} cannot run here: {why}")
    output = output or pathlib.Path("results") / (
        "soak-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + ".jsonl")
    scenario = Scenario(payload, subscribers)
    where = placement()[2]
    duration = minutes * 60.0
    try:
        with Session(SYSTEMS[system], scenario) as session:
            if rate is None:
                def progress(what, r):
                    click.echo(f"\rsearching the lossless rate: {what:<12} offered "
                               f"{_r(r.offered_rate):>7}/s  loss {r.loss:7.3%}\033[K", nl=False,
                               err=True)

                found = find_lossless_rate(lambda x: session.trial(x, 1.0), repeats=1,
                                           progress=progress)
                if not found.rate:
                    raise click.ClickException(f"{system} was not lossless at any rate")
                rate = fraction * found.rate
                click.echo(f"\rhighest lossless rate {_r(found.rate)}/s; soaking at "
                           f"{fraction:.0%}: {_r(rate)}/s in, {_r(rate * subscribers)}/s "
                           f"delivered, for {minutes:g} min ({where})\033[K", err=True)
            memory = MemoryTrend()
            pid = session.server.proc.pid
            done = threading.Event()
            started = time.monotonic()

            def sample():
                while True:
                    t = time.monotonic() - started
                    try:
                        memory.add(t, rss_kib(pid))
                    except (OSError, ValueError):
                        return
                    click.echo(f"\r{_clock(t)} / {_clock(duration)}  server RSS "
                               f"{memory.samples[-1][1] / 1024:.1f} MiB (start "
                               f"{memory.samples[0][1] / 1024:.1f})\033[K", nl=False, err=True)
                    if done.wait(interval):
                        return

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            trial = session.trial(rate, duration)
            done.set()
            sampler.join()
            memory.add(time.monotonic() - started, rss_kib(pid))
    except Unavailable as exc:
        raise click.ClickException(str(exc)) from None
    summary = memory.summary()
    flat = memory.flat(tolerance)
    rec = {"kind": "soak", "system": system, "scenario": scenario.name, "payload": payload,
           "subscribers": subscribers, "rate": rate, "minutes": minutes, "fraction": fraction,
           "memory": summary, "memory_samples": memory.samples, "flat": flat,
           "tolerance_kib": tolerance, "trial": trial.as_dict(), "placement": where,
           "env": results.environment()}
    results.write(output, [rec])
    click.echo(f"\n{system} {scenario.name}: {_r(trial.ingress_rate)}/s in for {minutes:g} min, "
               f"{trial.unique} of {trial.expected} delivered (loss {trial.loss:.4%}), server "
               f"{trial.server_cpu / max(trial.sent, 1) * 1e6:.2f} µs CPU/msg")
    click.echo(f"server RSS: {summary['rss_start_kib'] / 1024:.1f} MiB at start, "
               f"{summary['rss_after_warmup_kib'] / 1024:.1f} after warm-up, "
               f"{summary['rss_end_kib'] / 1024:.1f} at the end (max "
               f"{summary['rss_max_kib'] / 1024:.1f}); growth after warm-up "
               f"{summary['growth_after_warmup_kib']:+d} KiB, slope "
               f"{summary['slope_kib_per_min']:+.1f} KiB/min: {'FLAT' if flat else 'GROWING'}")
    click.echo(f"record in {output}", err=True)
    if not flat or trial.loss >= LOSSLESS:
        sys.exit(1)
