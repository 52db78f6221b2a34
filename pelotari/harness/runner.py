"""The bench run: every system's lossless rate searched on every scenario, the systems taking
turns round after round, each turn's probes and result reported as events to whoever prints them."""
import pathlib
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from pelotari.harness import results
from pelotari.harness.search import SearchResult, find_lossless_rate
from pelotari.harness.systems import System, Unavailable
from pelotari.harness.trial import Scenario, Session, TrialResult


@dataclass(frozen=True)
class Turn:
    """One system searched on one scenario in one round, and how far the run is."""

    number: int  # 1-based, of `total`
    total: int
    system: str
    scenario: Scenario
    round: int  # 0-based, of `rounds`
    rounds: int
    eta: Optional[float]  # seconds this turn and the rest should take at the pace so far

    @property
    def done(self) -> float:
        """Share of the turns finished before this one."""
        return (self.number - 1) / self.total


@dataclass(frozen=True)
class Skipped:
    """A system that cannot run here, left out of the run (its record is written)."""

    system: str
    reason: str


@dataclass(frozen=True)
class Probe:
    """One trial of a turn's search: what it was for (ceiling, search, repeat, latency)."""

    turn: Turn
    what: str
    result: TrialResult


@dataclass(frozen=True)
class Failed:
    """A turn whose system stopped being available (its round counts as skipped)."""

    turn: Turn
    reason: str


@dataclass(frozen=True)
class Measured:
    """A turn's result: its bench record."""

    turn: Turn
    record: dict


@dataclass
class BenchOutcome:
    """What a run wrote: one record per system and scenario, the systems that ran, seconds."""

    records: List[dict] = field(default_factory=list)
    runnable: List[str] = field(default_factory=list)
    elapsed: float = 0.0


def turns(names: Sequence[str], scenarios: Sequence[Scenario], rounds: int):
    """(scenario, system, round) in run order: per scenario, the systems in turn round after round
    (A B C A B C), so a shared machine's slow drift falls on all systems alike."""
    return [(scenario, name, rnd) for scenario in scenarios
            for rnd in range(rounds) for name in names]


@dataclass
class BenchRunner:
    """Searches each system's highest lossless rate on each scenario; records are appended to
    `output` as each system finishes a scenario (the median of its rounds)."""

    systems: Dict[str, System]
    names: Sequence[str]
    scenarios: Sequence[Scenario]
    duration: float
    output: pathlib.Path
    repeats: int = 3
    rounds: int = 1
    precision: float = 0.05
    env: dict = field(default_factory=dict)
    placement: str = ""
    session: Callable[[System, Scenario], Session] = Session
    search: Callable[..., SearchResult] = find_lossless_rate
    clock: Callable[[], float] = time.monotonic

    def run(self, report: Callable[[object], None] = lambda event: None) -> BenchOutcome:
        """Run every turn, passing each event (Skipped, Probe, Failed, Measured) to `report`."""
        out = BenchOutcome()
        for name in self.names:
            why = self.systems[name].check()
            if why:
                report(Skipped(name, why))
                self._keep(out, results.skipped(name, why, self.env))
            else:
                out.runnable.append(name)
        versions = {name: self.systems[name].version() for name in out.runnable}
        order = turns(out.runnable, self.scenarios, self.rounds)
        started = self.clock()
        per_round: Dict[str, List[dict]] = {}
        for number, (scenario, name, rnd) in enumerate(order, 1):
            spent = self.clock() - started
            eta = spent / (number - 1) * (len(order) - number + 1) if number > 1 else None
            turn = Turn(number, len(order), name, scenario, rnd, self.rounds, eta)
            if rnd == 0:
                per_round[name] = []
            try:
                with self.session(self.systems[name], scenario) as session:
                    found = self.search(lambda rate: session.trial(rate, self.duration),
                                        repeats=self.repeats, precision=self.precision,
                                        progress=lambda what, r: report(Probe(turn, what, r)))
                rec = results.record(name, scenario, found, self.env, self.placement,
                                     self.duration, versions[name])
                report(Measured(turn, rec))
            except Unavailable as exc:
                report(Failed(turn, str(exc)))
                rec = results.skipped(name, str(exc), self.env)
            per_round[name].append(rec)
            if rnd == self.rounds - 1:
                self._keep(out, results.combine_rounds(per_round[name]))
        out.elapsed = self.clock() - started
        return out

    def _keep(self, out: BenchOutcome, record: dict) -> None:
        out.records.append(record)
        results.write(self.output, [record])
