"""`pelotari cluster-demo` and `pelotari cluster-bench`: the backbone cluster on a namespaced
LAN (pelotari.harness.failover), narrated or measured."""
import sys
import tempfile
import time

import click

from pelotari.cli import main
from pelotari.cli.common import FiniteRange, plural
from pelotari.cli.lan_demo import _Interrupted, _Interrupts

ROOT_ONLY = ("Creates network namespaces on a bridge: root only. Ctrl-C (SIGINT) or SIGTERM at "
             "any moment stops every process it started and removes every namespace, link and "
             "file it made, prints one line saying so, and exits with 130 (SIGINT) or 143.")


def _lan(what):
    from pelotari import netlab

    why = netlab.available()
    if why:
        raise click.ClickException(f"{what} needs network namespaces: {why}")
    return netlab.LanHarness()


def _run_lab(what, body):
    """body(lan, workdir, interrupted) inside a LAN and a temporary directory; interrupts and
    the lab's errors end as one line."""
    interrupted = _Interrupts()  # first: from here on no signal can leave anything behind
    try:
        with tempfile.TemporaryDirectory(prefix="pelotari-cluster-") as workdir, \
                _lan(what) as lan:
            return body(lan, workdir, interrupted.check)
    except _Interrupted as exc:
        click.echo(f"{what}: interrupted by {exc.signame}; every process, namespace and file "
                   "it made is removed", err=True)
        sys.exit(128 + exc.signum)
    except RuntimeError as exc:
        raise click.ClickException(f"{exc} (everything it made is removed)") from None


@main.command("cluster-demo", epilog=ROOT_ONLY)
@click.option("--rate", type=FiniteRange(1, 20000), default=1000, show_default=True,
              help="Messages per second the publisher sends.")
@click.option("--kills", type=click.IntRange(1, 10), default=2, show_default=True,
              help="How many times the active backbone is killed.")
@click.option("--floating", is_flag=True,
              help="Clients know only a floating address the active holds (seed clients' way, "
                   "a KEEPALIVE every 0.1 s; see `pelotari backbone --floating-address`).")
def cluster_demo(rate, kills, floating):
    """Show a highly available backbone: 3 backbones, 3 subscribers, a publisher; the active
    is killed, another takes over, the killed one comes back as a standby, and again.

    Everything runs on a namespaced LAN (one namespace per host). The narration gives, for
    each kill, how long until the new active sequenced, until its first message reached
    every subscriber, until they had it in order (the old active's last messages repaired or
    given up), and until the publisher was confirmed again. At the end: messages the
    publisher saw confirmed that a subscriber never got (must be 0), sequence numbers naming
    two messages (must be 0), and the publisher's re-sends.
    """
    from pelotari.harness import failover

    start = time.monotonic()
    narrating = [True]  # (the members' lines while the demo runs, not while it tears down)

    def say(text):
        click.secho(f"[{time.monotonic() - start:6.2f}s] {text}", bold=True)

    def member_line(member, line):
        if narrating[0]:
            _member_line(member, line)

    def body(lan, workdir, check):
        records, summary = failover.run(lan, workdir, kills=kills, rate=rate, floating=floating,
                                        keepalive=0.1 if floating else 0.0, settle=3.0,
                                        say=say, interrupted=check, on_line=member_line)
        narrating[0] = False
        for r in records:
            say(f"kill {r['kill']}: {r['old']} → {r['new']}: new active after "
                f"{_ms(r['new_active_s'])}, its first message at every subscriber after "
                f"{_ms(r['arrive_s'])}, in order after {_ms(r['deliver_s'])}, publisher "
                f"confirmed again after {_ms(r['confirm_s'])}")
        return _verdict(summary, say)

    ok = _run_lab("cluster-demo", body)
    say("stopped every process; namespaces and bridge removed")
    sys.exit(0 if ok else 1)


def _member_line(member, line):
    text = line.text
    if any(word in text for word in ("active:", "standby:", "stepped down", "floating",
                                     "Traceback", "Error")):
        click.echo(f"  [b{member.index + 1}] {text}")


def _ms(seconds):
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"


def _verdict(summary, say) -> bool:
    bad = summary["confirmed_not_delivered"] or summary["sequences_two_messages"]
    say(f"{summary['confirmed']:,} messages confirmed to the publisher "
        f"({summary['resent']:,} re-sent after {plural(summary['moves'], 'move')}, "
        f"{summary['failed']:,} unconfirmed); confirmed but never delivered to a subscriber: "
        f"{summary['confirmed_not_delivered']}; sequence numbers naming two messages: "
        f"{summary['sequences_two_messages']}; duplicates delivered (re-sends the old active "
        f"had sequenced): {summary['duplicates_delivered']}")
    return not bad


@main.command("cluster-bench", epilog=ROOT_ONLY)
@click.option("--kills", type=click.IntRange(1, 200), default=20, show_default=True,
              help="Kills of the active backbone per client kind.")
@click.option("--rate", type=FiniteRange(1, 100000), default=10000, show_default=True,
              help="Messages per second the publisher sends.")
@click.option("--subscribers", type=click.IntRange(1, 8), default=3, show_default=True)
@click.option("--clients", type=click.Choice(["pelotari", "floating", "both"]), default="both",
              show_default=True,
              help="pelotari: clients given every member (-b A,B,C); floating: seed clients of "
                   "the floating address only; both: one run each.")
@click.option("--keepalive", type=FiniteRange(0.01, 1.0), default=0.1, show_default=True,
              help="(floating) The seed clients' KEEPALIVE interval: a new active learns a "
                   "subscriber at its next KEEPALIVE.")
@click.option("--fault", type=click.Choice(["kill", "cut", "standby", "double", "loss"]),
              default="kill", show_default=True,
              help="kill: SIGKILL the active; cut: cut its link (it lives on, alone) and heal "
                   "it later; standby: SIGKILL a standby (no failover may follow); double: "
                   "SIGKILL the active, then the new one as soon as it sequences (give "
                   "--members 5: 3 cannot keep a majority); loss: SIGKILL the active with 5 % "
                   "of UDP between the backbones dropped.")
@click.option("--members", type=click.IntRange(3, 5), default=3, show_default=True,
              help="Backbones in the cluster.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              default="results/cluster.jsonl", show_default=True,
              help="JSON-lines file the records are appended to (`pelotari trend` reads it).")
def cluster_bench(kills, rate, subscribers, clients, keepalive, fault, members, output):
    """Measure failovers: SIGKILL the active backbone (or another --fault) KILLS times under
    RATE messages/s.

    MEMBERS backbones, SUBSCRIBERS subscribers and a publisher, each in a namespace of its
    own on a bridge. Per kill: the new active's first sequenced message, its first DELIVER at every
    subscriber, every subscriber in order again, the publisher confirmed again (all from the
    kill, on one clock). Per run: messages confirmed to the publisher and never delivered to
    a subscriber, sequence numbers naming two messages, duplicates delivered, re-sends.
    One record per kill and one per run are appended to OUTPUT.
    """
    import pathlib

    from pelotari.harness import failover
    from pelotari.harness.results import environment, write

    start = time.monotonic()
    env = environment()  # (commit, time, machine: `pelotari trend` dates the figures by it)

    def say(text):
        click.echo(f"[{time.monotonic() - start:6.1f}s] {text}", err=True)

    kinds = ["pelotari", "floating"] if clients == "both" else [clients]
    records = []
    for kind in kinds:
        def body(lan, workdir, check, kind=kind):
            return failover.run(lan, workdir, kills=kills, rate=rate, subscribers=subscribers,
                                floating=kind == "floating", fault=fault, members=members,
                                keepalive=keepalive if kind == "floating" else 0.0,
                                say=say, interrupted=check)
        per_kill, summary = _run_lab("cluster-bench", body)
        records += [{**r, "env": env} for r in (*per_kill, summary)]
        _verdict(summary, say)
    write(pathlib.Path(output), records)
    click.echo(_table(records))
    click.echo(f"{plural(len(records), 'record')} appended to {output}", err=True)


def _table(records) -> str:
    """Medians and worst cases per client kind, as a Markdown table."""
    lines = ["| clients | fault | kills | new active | first DELIVER at every subscriber | "
             "every subscriber in order | publisher confirmed again | lost confirmed | "
             "two messages, one number | duplicates | re-sent |",
             "|---|---|---:|---|---|---|---|---:|---:|---:|---:|"]
    for s in records:
        if s["kind"] != "fyrehose-failover-run":
            continue
        cells = [f"{_ms(s[f'{k}_median'])} / {_ms(s[f'{k}_worst'])}"
                 for k in ("new_active_s", "arrive_s", "deliver_s", "confirm_s")]
        lines.append(f"| {s['clients']} | {s['fault']} | {s['kills']} | " + " | ".join(cells) +
                     f" | {s['confirmed_not_delivered']} | {s['sequences_two_messages']} | "
                     f"{s['duplicates_delivered']} | {s['resent']} |")
    lines.append("(median / worst, from the kill)")
    return "\n".join(lines)
