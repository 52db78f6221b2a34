"""`pelotari bench`: the side-by-side benchmark."""
import datetime
import pathlib
import sys
import time

import click

from fastpath.packets import MAX_DATA
from pelotari.cli import main
from pelotari.cli.common import FiniteRange, StatusLine

DEFAULT_SYSTEMS = ("pelotari,pelotari-plain,pelotari-packed,reference,reference-gso,asyncio,redis,nats,"
                   "zeromq")


def _int_list(ctx, param, value):
    if value is None:
        return None
    try:
        out = [int(v) for v in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of whole numbers") \
            from None
    if min(out) < 1:
        raise click.BadParameter(f"{min(out)}: every number must be positive")
    return list(dict.fromkeys(out))  # (each once, in the order given)


@main.command()
@click.option("--systems", default=DEFAULT_SYSTEMS, show_default=True,
              help="Comma-separated systems to measure (see --list).")
@click.option("-S", "--payloads", default=None, callback=_int_list,
              help="Payload sizes in bytes (at least 16: the timestamp stamp) [default: "
                   "16,256,1024; with --latency-rates 16].")
@click.option("-N", "--subscribers", default=None, callback=_int_list,
              help="Subscriber counts [default: 1,4,16; with --latency-rates 4].")
@click.option("-P", "--publishers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Publisher processes.")
@click.option("-d", "--duration", type=FiniteRange(0.2, 600), default=2.0, show_default=True,
              help="Seconds each trial publishes.")
@click.option("--repeats", type=click.IntRange(1, 15), default=3, show_default=True,
              help="Runs at the lossless rate; the median is reported.")
@click.option("--rounds", type=click.IntRange(1, 15), default=1, show_default=True,
              help="Search every system this many times per scenario, taking the systems in "
                   "turn (A B C A B C...), and report each one's median round: slow drift of a "
                   "shared machine then falls on all systems alike.")
@click.option("--precision", type=FiniteRange(0.01, 1.0), default=0.05, show_default=True,
              help="The search stops when the lowest failing rate is within this fraction above "
                   "the highest lossless one.")
@click.option("--latency-rates", "latency_rates", default=None, callback=_int_list,
              metavar="RATE,RATE,...",
              help="Instead of searching each system's lossless rate: latency of every system "
                   "at these same offered rates (msgs/s in), --trials times each, and the "
                   "loopback floor (a C ping-pong over UDP and TCP); `pelotari trend` plots p99 "
                   "against the offered rate.")
@click.option("--trials", type=click.IntRange(1, 50), default=5, show_default=True,
              help="With --latency-rates: trials per system and rate (the systems take turns "
                   "trial after trial); a figure is their median, with the smallest and "
                   "largest.")
@click.option("--pack-interval", type=FiniteRange(0, 10), default=0.0, show_default=True,
              metavar="SECONDS",
              help="With --latency-rates: each publisher sends at most once per this many "
                   "seconds, everything due by then (with pelotari-packed: one pack; other "
                   "fyrehose systems get the messages as a burst of datagrams); 0 sends each "
                   "message when it is due. Latency still runs from each message's send, so it "
                   "leaves out the wait before it. Fan-out to thousands of subscribers needs "
                   "packs of several messages, e.g. -N 10000 --systems pelotari-packed "
                   "--pack-interval 0.05 (fyrehose systems only: the others' load generator "
                   "has no such option).")
@click.option("-o", "--output", type=click.Path(path_type=pathlib.Path), default=None,
              help="JSON-lines file to append to [default: results/bench-TIME.jsonl].")
@click.option("--list", "list_systems", is_flag=True, help="List the systems and whether each can run here.")
def bench(systems, payloads, subscribers, publishers, duration, repeats, rounds, precision,
          latency_rates, trials, pack_interval, output, list_systems):
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
    from pelotari.harness.procs import STOP_SIGNALS, Children
    from pelotari.harness.runner import BenchRunner, Failed, Measured, Probe, Skipped
    from pelotari.harness.systems import MAX_SUBSCRIBERS, SYSTEMS
    from pelotari.harness.trial import Scenario, placement

    if list_systems:
        width = max(map(len, SYSTEMS)) + 1
        for name, system in SYSTEMS.items():
            why = system.check()
            click.echo(f"{name:<{width}} {'ok' if why is None else 'unavailable: ' + why}\n"
                       f"{'':<{width}} {system.description}")
        return
    names = [s.strip() for s in systems.split(",") if s.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise click.BadParameter(f"unknown system {unknown[0]!r}; choose from {', '.join(SYSTEMS)}",
                                 param_hint="--systems")
    if latency_rates and min(latency_rates) * duration < MIN_MESSAGES:
        raise click.BadParameter(
            f"each trial must offer at least {MIN_MESSAGES} messages (a p99 needs 100): "
            f"{min(latency_rates)} msgs/s for {duration:g} s is {min(latency_rates) * duration:g}",
            param_hint="--latency-rates")
    given = click.get_current_context().get_parameter_source
    default = click.core.ParameterSource.DEFAULT
    for name, hint in (("pack_interval", "--pack-interval"), ("trials", "--trials")):
        if not latency_rates and given(name) != default:
            raise click.BadParameter("needs --latency-rates", param_hint=hint)
    for name, hint in (("repeats", "--repeats"), ("rounds", "--rounds"),
                       ("precision", "--precision")):
        if latency_rates and given(name) != default:
            raise click.BadParameter("belongs to the lossless-rate search, not to "
                                     "--latency-rates (which runs --trials trials at each "
                                     "rate)", param_hint=hint)
    others = [n for n in names if SYSTEMS[n].protocol != "fyrehose"]
    if pack_interval and others:
        raise click.BadParameter(f"{others[0]} has no pack interval (fyrehose systems only: "
                                 f"name them with --systems)", param_hint="--pack-interval")
    payloads = payloads or ([16] if latency_rates else [16, 256, 1024])
    subscribers = subscribers or ([4] if latency_rates else [1, 4, 16])
    if min(payloads) < 16:
        raise click.BadParameter("payloads must be at least 16 bytes", param_hint="--payloads")
    if max(subscribers) > MAX_SUBSCRIBERS:
        raise click.BadParameter(f"at most {MAX_SUBSCRIBERS:,} (the load generator's largest "
                                 f"group)", param_hint="--subscribers")
    output = output or pathlib.Path("results") / (
        "bench-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + ".jsonl")
    where = placement()[2]
    scenarios = [Scenario(s, n, publishers) for s in payloads for n in subscribers]
    if latency_rates:
        _latency_rates(SYSTEMS, names, scenarios, latency_rates, trials, duration, output,
                       where, pack_interval)
        return
    click.echo(f"pelotari bench: {', '.join(names)}; S={payloads} N={subscribers} P={publishers}; "
               f"{duration:g}s trials; {where}", err=True)

    # On a terminal each probe rewrites one line; in a log, a probe line every 10 s at most
    # and every result on its own line (no carriage returns).
    progress = StatusLine(interval=0.0, plain_interval=10.0)

    def show(event):
        if isinstance(event, Skipped):
            progress.finish()
            click.secho(f"skipping {event.system}: {event.reason}", fg="yellow", err=True)
        elif isinstance(event, Probe):
            r = event.result
            progress.update(f"{_label(event.turn)}  {event.what:<14} offered "
                            f"{_r(r.offered_rate):>7}/s  delivered {_r(r.delivered_rate):>7}/s  "
                            f"loss {r.loss:7.3%}{'  client-bound' if r.client_bound else ''}")
        elif isinstance(event, Failed):
            progress.finish()
            click.secho(f"{_label(event.turn)}: {event.reason}", fg="red", err=True)
        elif isinstance(event, Measured):
            rec = event.record
            progress.update(f"{_label(event.turn)}  lossless {_r(rec['lossless_rate'])}/s in, "
                            f"{_r(rec['delivered_rate'])}/s delivered, p99 "
                            f"{rec['latency_p99_us']:.0f} µs at 50%, server "
                            f"{rec['server_cpu_us_per_msg']:.2f} µs CPU/msg", force=True)
            progress.finish()

    with Children(interrupt=STOP_SIGNALS):
        runner = BenchRunner(SYSTEMS, names, scenarios, duration, output, repeats=repeats, rounds=rounds,
                             precision=precision, env=results.environment(), placement=where)
        done = runner.run(show)
    progress.finish()
    click.echo(f"\n{results.table(done.records, done.runnable)}\n")
    click.echo(f"{where}; {duration:g}s trials; loss < 0.1 %; results in {output} "
               f"({done.elapsed:.0f}s)", err=True)


def _latency_rates(systems, names, scenarios, rates, trials, duration, output, where,
                   interval=0.0):
    """`pelotari bench --latency-rates`: every system at the same offered rates, and the floor."""
    from pelotari.harness import results
    from pelotari.harness.procs import STOP_SIGNALS, Children
    from pelotari.harness.rates import (RateFailed, RateMeasured, RatesRunner, RateTrial,
                                        floor_records)
    from pelotari.harness.systems import Unavailable
    from pelotari.harness.trial import placement

    click.echo(f"pelotari bench --latency-rates: {', '.join(names)}; "
               f"{', '.join(s.name for s in scenarios)}; offered "
               f"{', '.join(_r(r) for r in rates)} msgs/s"
               + (f" (sent every {interval * 1000:g} ms)" if interval else "")
               + f"; {trials} trial{'s' if trials != 1 else ''} of {duration:g}s; {where}",
               err=True)
    progress = StatusLine(interval=0.0, plain_interval=10.0)
    started = time.monotonic()

    def show(event):
        if isinstance(event, RateTrial):
            eta = ""
            if event.number > 1:
                left = (time.monotonic() - started) / (event.number - 1) * \
                    (event.total - event.number + 1)
                eta = f" ETA {_clock(left)}"
            progress.update(f"[{event.number}/{event.total}{eta}] {event.system:<15} "
                            f"{event.scenario.name} trial {event.trial + 1}/{event.trials} "
                            f"at {_r(event.rate)}/s")
        elif isinstance(event, RateMeasured):
            r = event.record
            what = "lossless" if r["lossless"] else f"loss {r['loss']:.2%}" if r["loss"] \
                else "fell behind"
            progress.update(f"[{event.at.number}/{event.at.total}] {event.at.system:<15} "
                            f"{_r(event.at.rate)}/s: p50 {r['latency_p50_us']:.0f} µs, p99 "
                            f"{r['latency_p99_us']:.0f} µs, {_r(r['delivered_rate'])}/s "
                            f"delivered, {what}"
                            + (" (client-bound)" if r["client_bound"] else ""),
                            force=True)
        elif isinstance(event, RateFailed):
            progress.finish()
            click.secho(f"{event.at.system}: {event.reason}", fg="red", err=True)

    env = results.environment()
    try:
        with Children(interrupt=STOP_SIGNALS):
            server_cpus, client_cpus, _ = placement()
            floor = floor_records(trials, env, where, client_cpus, progress=progress.update,
                                  wakeup_cpus=(server_cpus or set()) | (client_cpus or set()))
            results.write(output, floor)
            busy = _busy_warning([f for f in floor if f["kind"] == "latency-wakeup"])
            if busy:
                progress.finish()
                click.secho(busy, fg="yellow", err=True)
            done = RatesRunner(systems, names, scenarios, rates, duration, output, trials,
                               env=env, placement=where, interval=interval).run(show)
    except Unavailable as exc:
        progress.finish()
        raise click.ClickException(str(exc)) from None
    progress.finish()
    measured = [r for r in done if r.get("kind") == "latency-rate"]
    if not measured:
        raise click.ClickException("no trial ran (the reasons are above)")
    click.echo(_rates_table(measured, [f for f in floor if f["kind"] == "latency-floor"]))
    click.echo(_wakeup_line([f for f in floor if f["kind"] == "latency-wakeup"]))
    click.echo(f"{where}; {trials} trial{'s' if trials != 1 else ''} of {duration:g}s per "
               f"system and rate; results in "
               f"{output} ({time.monotonic() - started:.0f}s); `pelotari trend` plots them",
               err=True)


def _rates_table(records, floor) -> str:
    """p99 per system and rate: median of the lossless trials (all trials lossy: "lossy");
    then p50 and max the same way."""
    import statistics

    def spread(values, unit=" µs"):
        return f"{statistics.median(values):,.0f}{unit} ({min(values):,.0f}–{max(values):,.0f})"

    if not records:
        return "no trial ran (the reasons are above)"
    rates = sorted({r["offered_rate"] for r in records})
    scenarios = list(dict.fromkeys(r["scenario"] for r in records))
    rows = [(sc, s) for sc in scenarios for s in dict.fromkeys(
        r["system"] for r in records if r["scenario"] == sc)]

    def table(heading, cell):
        """One row per system: cell(its lossless trials) at each rate, or "—" / "lossy"."""
        out = ["| system | " + " | ".join(f"{_r(x)}/s {heading}" for x in rates) + " |",
               "|---|" + "---|" * len(rates)]
        for sc, s in rows:
            cells = []
            for x in rates:
                ran = [r for r in records if r["scenario"] == sc and r["system"] == s
                       and r["offered_rate"] == x]
                ok = [r for r in ran if r["lossless"]]
                cells.append("—" if not ran else "lossy" if len(ok) * 2 <= len(ran) else cell(ok))
            out.append(f"| {s}" + (f" ({sc})" if len(scenarios) > 1 else "") + " | "
                       + " | ".join(cells) + " |")
        return out

    def p99_cell(ok):
        bound = " (client-bound)" if any(r["client_bound"] for r in ok) else ""
        delivered = statistics.median(r["delivered_rate"] for r in ok)
        return (f"{spread([r['latency_p99_us'] for r in ok])}{bound}"
                + (f", {_r(delivered)}/s delivered" if ok[0]["subscribers"] > 16 else ""))

    lines = [f"{scenarios[0]}:"] if len(scenarios) == 1 else []  # else each row names its own
    lines += table("p99", p99_cell)
    for t in ("udp", "tcp"):
        p99 = [f["latency_p99_us"] for f in floor if f["transport"] == t]
        if p99:
            lines.append(f"| loopback floor, {t.upper()} ping-pong | "
                         + " | ".join(f"{statistics.median(p99):,.1f} µs" for _ in rates) + " |")
    lines += ["", "p50 and max, µs, the same way (median of the lossless trials, smallest–largest):"]
    lines += table("p50; max", lambda ok: f"{spread([r['latency_p50_us'] for r in ok], '')}; "
                                          f"{spread([r['latency_max_us'] for r in ok], '')}")
    return "\n".join(lines)


MIN_MESSAGES = 100  # per trial, at the lowest rate: a p99 of fewer says nothing


def _busy_warning(records) -> str:
    """A warning when the wake-up meter found the machine busy ('' when it is quiet)."""
    import statistics

    from pelotari.harness.rates import BUSY_LATE_PER_S

    busy = {}
    for cpu in sorted({r["cpu"] for r in records}):
        per_s = statistics.median(r["late_1ms"] / r["seconds"] for r in records if r["cpu"] == cpu)
        if per_s > BUSY_LATE_PER_S:
            busy[cpu] = per_s
    if not busy:
        return ""
    return ("warning: the machine is busy: " + ", ".join(
        f"core {cpu} woke at least 1 ms late {v:.1f} times a second" for cpu, v in busy.items())
        + f" (more than {BUSY_LATE_PER_S:g}); these latencies are not comparable with a quiet "
        "machine's")


def _wakeup_line(records) -> str:
    """The wake-up meter's figures per core: naps at least 1 ms late per second, the worst."""
    import statistics

    parts = []
    for cpu in sorted({r["cpu"] for r in records}):
        mine = [r for r in records if r["cpu"] == cpu]
        per_s = [r["late_1ms"] / r["seconds"] for r in mine]
        parts.append(f"core {cpu}: {statistics.median(per_s):.1f}/s ({min(per_s):.1f}–"
                     f"{max(per_s):.1f}), worst {max(r['worst_us'] for r in mine) / 1000:.1f} ms")
    return ("wake-up stalls (a thread napping 50 µs woke ≥ 1 ms late): " + "; ".join(parts)) \
        if parts else ""


def _label(turn) -> str:
    """The progress line's head: a bar of the turns done, ETA, system, scenario and round.
    Our own bar, not click.progressbar: it shares its line with the search's probes (redrawn
    after a carriage return) and must show in logs, where click's shows only its label (no tty)."""
    filled = round(20 * (turn.number - 1) / turn.total)
    eta = f" ETA {_clock(turn.eta)}" if turn.eta is not None else ""
    return (f"[{'#' * filled}{'.' * (20 - filled)}] {turn.number}/{turn.total}{eta} "
            f"{turn.system:<13} {turn.scenario.name}"
            + (f" round {turn.round + 1}/{turn.rounds}" if turn.rounds > 1 else ""))


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{secs:02d}s"


def _r(v):
    from pelotari.harness.results import _rate

    return _rate(v)


@main.command()
@click.option("--system", default="pelotari", show_default=True,
              help="System to soak (see `pelotari bench --list`).")
@click.option("-S", "--payload", type=click.IntRange(16, MAX_DATA), default=16, show_default=True,
              help="Payload size in bytes.")
@click.option("-N", "--subscribers", type=click.IntRange(1, 1024), default=4, show_default=True,
              help="Subscribers.")
@click.option("-m", "--minutes", type=FiniteRange(0.01, 1440), default=10.0, show_default=True,
              help="How long to publish.")
@click.option("--fraction", type=FiniteRange(0.01, 1.0), default=0.8, show_default=True,
              help="Share of the highest lossless rate to publish at (found first by a short search).")
@click.option("--rate", type=FiniteRange(1), default=None,
              help="Publish at this many msgs/s instead of searching.")
@click.option("--interval", type=FiniteRange(0.5, 600), default=5.0, show_default=True,
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
    from pelotari.harness import results
    from pelotari.harness.procs import STOP_SIGNALS, Children
    from pelotari.harness.soak import lossless_rate, soak as run_soak
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

    progress = StatusLine(interval=0.0, plain_interval=10.0)  # in place, or a line per 10 s

    def searching(what, r):
        progress.update(f"searching the lossless rate: {what:<12} offered "
                        f"{_r(r.offered_rate):>7}/s  loss {r.loss:7.3%}")

    def sampled(t, memory):
        progress.update(f"{_clock(t)} / {_clock(duration)}  server RSS "
                        f"{memory.samples[-1][1] / 1024:.1f} MiB (start "
                        f"{memory.samples[0][1] / 1024:.1f})")

    try:
        with Children(interrupt=STOP_SIGNALS), \
                Session(SYSTEMS[system], scenario) as session:
            if rate is None:
                found = lossless_rate(session, searching)
                if not found:
                    raise click.ClickException(f"{system} was not lossless at any rate")
                rate = fraction * found
                progress.finish()
                click.echo(f"highest lossless rate {_r(found)}/s; soaking at "
                           f"{fraction:.0%}: {_r(rate)}/s in, {_r(rate * subscribers)}/s "
                           f"delivered, for {minutes:g} min ({where})", err=True)
            done = run_soak(session, rate, duration, interval=interval, tolerance_kib=tolerance,
                            on_sample=sampled)
    except Unavailable as exc:
        progress.finish()
        raise click.ClickException(str(exc)) from None
    progress.finish()
    trial, summary = done.trial, done.memory.summary()
    results.write(output, [done.record(system, scenario, minutes, fraction, where,
                                       results.environment())])
    click.echo(f"\n{system} {scenario.name}: {_r(trial.ingress_rate)}/s in for {minutes:g} min, "
               f"{trial.unique} of {trial.expected} delivered (loss {trial.loss:.4%}), server "
               f"{trial.server_cpu / max(trial.sent, 1) * 1e6:.2f} µs CPU/msg")
    click.echo(f"server RSS: {summary['rss_start_kib'] / 1024:.1f} MiB at start, "
               f"{summary['rss_after_warmup_kib'] / 1024:.1f} after warm-up, "
               f"{summary['rss_end_kib'] / 1024:.1f} at the end (max "
               f"{summary['rss_max_kib'] / 1024:.1f}); growth after warm-up "
               f"{summary['growth_after_warmup_kib']:+d} KiB, slope "
               f"{summary['slope_kib_per_min']:+.1f} KiB/min: {'FLAT' if done.flat else 'GROWING'}")
    click.echo(f"record in {output}", err=True)
    if not done.passed:
        sys.exit(1)
