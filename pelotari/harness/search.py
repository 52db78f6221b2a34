"""Finding a scenario's highest lossless rate, then measuring it."""
import math
import statistics
from dataclasses import dataclass
from typing import Callable, List, Optional

from pelotari.harness.trial import TrialResult

LOSSLESS = 0.001  # loss below 0.1 % counts as lossless


@dataclass
class SearchResult:
    """The highest lossless offered rate, its repeats, and latency at half of it."""

    rate: float
    repeats: List[TrialResult]
    latency_trials: List[TrialResult]
    probes: List[TrialResult]

    def latency(self) -> dict:
        """Median over the latency trials of each percentile (single runs are noisy)."""
        if not self.latency_trials:
            return {}
        keys = self.latency_trials[0].latency.keys()
        return {k: statistics.median(t.latency[k] for t in self.latency_trials) for k in keys}

    def median(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.repeats) if self.repeats else 0.0


def find_lossless_rate(trial: Callable[[float], TrialResult], *, threshold: float = LOSSLESS,
                       precision: float = 0.1, max_probes: int = 10, repeats: int = 3,
                       floor: float = 100.0,
                       progress: Callable[[str, TrialResult], None] = lambda *_: None) -> SearchResult:
    """Probe as fast as possible to find the ceiling, then bisect (in log space) between the
    highest offered rate that was lossless (loss < threshold, delivery kept up) and the lowest
    that was not, until they are
    within `precision`. The winner is repeated `repeats` times; if their median loss is not
    below the threshold the rate steps down 10 % and is repeated again. Latency is measured
    at half the rate, `repeats` times. Rates are what the publishers achieved, not what they were asked for:
    when they cannot reach the offered rate the search stops climbing (the run is client-bound).
    """
    probes: List[TrialResult] = []

    def run(rate: float, what: str) -> TrialResult:
        result = trial(rate)
        probes.append(result)
        progress(what, result)
        return result

    flat_out = run(0.0, "ceiling")
    # What the system absorbed flat out: no lossless rate can be far above it.
    subscribers = flat_out.expected / flat_out.sent if flat_out.sent else 1
    ceiling = max(flat_out.delivered_rate / subscribers, floor)
    passed: Optional[float] = None
    failed: Optional[float] = None
    rate = ceiling
    for _ in range(max_probes):
        result = run(rate, "search")
        publishers_short = result.ingress_rate < 0.9 * rate
        if result.lossless(threshold):
            passed = result.ingress_rate if publishers_short else rate
            if publishers_short:  # the load generator is the limit: no higher rate is reachable
                break
        else:
            failed = rate
        if failed is None:
            rate *= 1.5
        elif passed is None:
            rate /= 2
            if rate < floor:
                break
        elif failed / passed <= 1 + precision:
            break
        else:
            rate = math.sqrt(passed * failed)
    if passed is None:
        return SearchResult(0.0, [], [], probes)
    for attempt in range(3):
        runs = [run(passed, f"repeat {i + 1}/{repeats}") for i in range(repeats)]
        if statistics.median(r.loss for r in runs) < threshold and \
                sum(r.sustained for r in runs) * 2 > len(runs):
            break
        passed *= 0.9
    latency = [run(passed / 2, f"latency {i + 1}/{repeats}") for i in range(repeats)]
    return SearchResult(statistics.median(r.ingress_rate for r in runs), runs, latency, probes)
