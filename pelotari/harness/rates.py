"""Latency at the same offered load for every system (`pelotari bench --latency-rates`): each
system serves each scenario at each of the chosen rates, several trials, the systems taking
turns; and the loopback floor, the kernel's own one-way latency with no server in the way.

A trial is one `Session.trial` at a fixed offered rate; its record (kind "latency-rate") keeps
p50/p99/max, loss, whether delivery kept up and whether the load generator was the bottleneck,
so the analysis can leave lossy points out and mark client-bound ones (analysis/report_fyrehose.py,
latency_at_rates).
"""
import json
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence

from pelotari.harness import results
from pelotari.harness.search import LOSSLESS
from pelotari.harness.systems import System, Unavailable, bench_dir, compile_c, pin
from pelotari.harness.trial import MAX_LAG, MIN_LAG, Scenario, Session, TrialResult

FLOOR_RATE = 10_000  # the floor's ping-pong rate: far below any rate a round trip limits
FLOOR_COUNT = 50_000
WAKEUP_SECONDS = 2.0
WAKEUP_NAP_US = 50  # about what the publisher naps between sends at 1,000,000 msgs/s
TIMELINE = 0.001  # the subscribers keep the worst latency of every millisecond (stalled_ms)


@dataclass(frozen=True)
class RateTrial:
    """One trial: a system, a scenario, an offered rate, which trial of how many."""

    system: str
    scenario: Scenario
    rate: float
    trial: int  # 0-based, of `trials`
    trials: int
    number: int  # 1-based, of `total`
    total: int


@dataclass(frozen=True)
class RateMeasured:
    """A trial's record."""

    at: RateTrial
    record: dict


@dataclass(frozen=True)
class RateFailed:
    """A system that stopped being available in a trial (its other rates in it are skipped)."""

    at: RateTrial
    reason: str


def kept_up(result: TrialResult) -> bool:
    """Delivery kept up with the offered rate: the last message came soon after publishing
    ended (TrialResult.sustained), or no message took longer than that margin to arrive. The
    second is the direct measure: a client that hears something unrelated late (NATS's agent
    at 10,000/s: its last activity 0.3 s after publishing ended, its slowest message 4 ms)
    has not fallen behind."""
    margin = max(MAX_LAG * result.elapsed, MIN_LAG)
    slowest = result.latency.get("max_ns", 0) / 1e9
    return result.sustained or (result.unique > 0 and slowest <= margin)


def lossless(result: TrialResult) -> bool:
    """Under LOSSLESS lost, kept up, and the publishers reached 90 % of the offered rate."""
    return (result.loss < LOSSLESS and kept_up(result)
            and result.ingress_rate >= 0.9 * result.offered_rate)


def record(system: str, scenario: Scenario, result: TrialResult, trial: int, env: dict,
           placement: str, duration: float, version: str = "", interval: float = 0.0) -> dict:
    """The JSON-lines record of one trial at one offered rate."""
    lat = result.latency
    return {"kind": "latency-rate", "system": system, "system_version": version,
            "scenario": scenario.name, "payload": scenario.payload,
            "subscribers": scenario.subscribers, "publishers": scenario.publishers,
            "offered_rate": result.offered_rate, "trial": trial,
            "ingress_rate": result.ingress_rate, "delivered_rate": result.delivered_rate,
            "loss": result.loss, "sustained": result.sustained,
            "elapsed_s": result.elapsed, "lossless": lossless(result),
            "client_bound": result.client_bound,
            "latency_p50_us": lat.get("p50_ns", 0) / 1000,
            "latency_p90_us": lat.get("p90_ns", 0) / 1000,
            "latency_p99_us": lat.get("p99_ns", 0) / 1000,
            "latency_max_us": lat.get("max_ns", 0) / 1000,
            "server_cpu_s": result.server_cpu, "client_cpu_s": result.client_cpu,
            "notes": result.notes, "duration_s": duration,
            "publish_interval_s": interval, "stalled_ms": stalled_ms(result),
            "placement": placement, "env": env}


def stalled_ms(result: TrialResult) -> int:
    """Milliseconds of the trial in which some message arrived more than 1 ms late (from the
    subscribers' timeline of worst latency per millisecond; -1 without one)."""
    if not result.timeline_worst_ns:
        return -1
    return sum(1 for worst in result.timeline_worst_ns if worst > 1_000_000)


@dataclass
class RatesRunner:
    """Every system at every rate on every scenario, `trials` times: per scenario and trial,
    the systems take turns (A B C A B C), each one started afresh and stepped through the
    rates from the lowest; records are appended to `output` as they come."""

    systems: Dict[str, System]
    names: Sequence[str]
    scenarios: Sequence[Scenario]
    rates: Sequence[float]
    duration: float
    output: object
    trials: int = 5
    env: dict = field(default_factory=dict)
    placement: str = ""
    session: Callable[[System, Scenario], Session] = Session
    interval: float = 0.0  # publishers send at most once per interval (0: as each is due)

    def run(self, report: Callable[[object], None] = lambda event: None) -> List[dict]:
        """Run every trial; each event (RateTrial before, RateMeasured or RateFailed after)
        goes to `report`. The systems that cannot run here are left out (a bench-skipped
        record says why)."""
        out: List[dict] = []
        runnable = []
        for name in self.names:
            why = self.systems[name].check()
            if why:
                rec = results.skipped(name, why, self.env)
                out.append(rec)
                results.write(self.output, [rec])
            else:
                runnable.append(name)
        versions = {name: self.systems[name].version() for name in runnable}
        rates = sorted(self.rates)
        total = len(self.scenarios) * self.trials * len(runnable) * len(rates)
        number = 0
        for scenario in self.scenarios:
            for k in range(self.trials):
                for name in runnable:
                    block = number
                    try:
                        with self.session(self.systems[name], scenario) as session:
                            for rate in rates:
                                number += 1
                                at = RateTrial(name, scenario, rate, k, self.trials, number,
                                               total)
                                report(at)
                                result = session.trial(rate, self.duration, timeline=TIMELINE,
                                                       interval=self.interval)
                                rec = record(name, scenario, result, k, self.env,
                                             self.placement, self.duration, versions[name],
                                             self.interval)
                                out.append(rec)
                                results.write(self.output, [rec])
                                report(RateMeasured(at, rec))
                    except Unavailable as exc:
                        report(RateFailed(RateTrial(name, scenario, 0, k, self.trials,
                                                    max(number, block + 1), total), str(exc)))
                        number = block + len(rates)
        return out


def loopback_floor(transport: str, cpus=None, count: int = FLOOR_COUNT,
                   rate: float = FLOOR_RATE, size: int = 16) -> dict:
    """The kernel's one-way latency over loopback (half a ping-pong's round trip, C on both
    ends), as {"p50_ns", "p90_ns", "p99_ns", "max_ns", ...}."""
    program = compile_c(bench_dir() / "floor" / "loopback.c")
    res = subprocess.run([str(program), transport, str(count), str(int(rate)), str(size)],
                         capture_output=True, text=True, timeout=120, preexec_fn=pin(cpus))
    if res.returncode != 0:
        raise Unavailable(f"the loopback floor ({transport}) failed: "
                          f"{res.stderr.strip()[-200:]}")
    return json.loads(res.stdout)


def wakeup_stalls(cpus, seconds: float = WAKEUP_SECONDS, nap_us: int = WAKEUP_NAP_US) -> list:
    """How late this machine wakes a napping thread: bench/floor/wakeup.c on each of `cpus` at
    once for `seconds` (naps of `nap_us`); one dict per cpu, its counts of naps that overslept
    by at least 0.5, 1, 2 and 4 ms and the worst oversleep."""
    program = compile_c(bench_dir() / "floor" / "wakeup.c")
    procs = [(cpu, subprocess.Popen([str(program), str(seconds), str(nap_us)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=pin({cpu})))
             for cpu in sorted(cpus)]
    out = []
    try:
        for cpu, proc in procs:
            stdout, stderr = proc.communicate(timeout=seconds + 60)
            if proc.returncode != 0:
                raise Unavailable(f"the wake-up meter failed: {stderr.strip()[-200:]}")
            out.append(dict(json.loads(stdout), cpu=cpu))
    finally:
        for _, proc in procs:  # (an interrupt, a failure: none is left running)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out


# The wake-up meter's naps woken >= 1 ms late a second above which a run's machine was busy and
# its latencies are not comparable with a quiet one's (a quiet 2-vCPU VM: about 1.5). The bench
# warns of it; the analysis flags it.
BUSY_LATE_PER_S = 10.0


def floor_records(trials: int, env: dict, placement: str, cpus=None,
                  progress: Callable[[str], None] = lambda text: None,
                  wakeup_cpus=()) -> List[dict]:
    """`trials` runs of the UDP and the TCP floor, one record each (kind "latency-floor"),
    and with `wakeup_cpus` of the wake-up meter on those cores at once (kind
    "latency-wakeup", one record per core); progress(text) before each (a floor takes 5 s,
    the meter WAKEUP_SECONDS)."""
    out = []
    for k in range(trials):
        if wakeup_cpus:
            progress(f"wake-up stalls: a thread napping {WAKEUP_NAP_US} µs on each core, "
                     f"trial {k + 1}/{trials}")
            for got in wakeup_stalls(wakeup_cpus):
                out.append({"kind": "latency-wakeup", "trial": k, **got,
                            "placement": placement, "env": env})
        for transport in ("udp", "tcp"):
            progress(f"the loopback floor: {transport.upper()} ping-pong, trial {k + 1}/{trials}")
            got = loopback_floor(transport, cpus)
            out.append({"kind": "latency-floor", "transport": transport, "trial": k,
                        "rate": got["rate"], "size": got["size"], "count": got["count"],
                        "latency_p50_us": got["p50_ns"] / 1000,
                        "latency_p90_us": got["p90_ns"] / 1000,
                        "latency_p99_us": got["p99_ns"] / 1000,
                        "latency_max_us": got["max_ns"] / 1000, "placement": placement,
                        "env": env})
    return out
