"""Memory soak: a system served at a steady share of its highest lossless rate for minutes, with
its resident memory sampled, to show that nothing grows with traffic or time."""
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from pelotari.harness.search import LOSSLESS, find_lossless_rate
from pelotari.harness.trial import TrialResult

WARMUP_SHARE = 0.1  # samples before this share of the run are warm-up (buffers filling)


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB."""
    import psutil

    try:
        return psutil.Process(pid).memory_info().rss // 1024
    except psutil.Error as exc:  # gone or not ours: an OSError, as /proc's reader raised
        raise ProcessLookupError(f"cannot read the memory of process {pid}: {exc}") from None


@dataclass
class MemoryTrend:
    """Resident memory over a run: (seconds since start, KiB) samples and what they show."""

    samples: List[Tuple[float, int]] = field(default_factory=list)

    def add(self, t: float, kib: int) -> None:
        """Note `kib` resident at `t` seconds."""
        self.samples.append((t, kib))

    def steady(self) -> List[Tuple[float, int]]:
        """Samples after the warm-up share of the run."""
        if not self.samples:
            return []
        cut = self.samples[-1][0] * WARMUP_SHARE
        return [s for s in self.samples if s[0] >= cut] or self.samples[-1:]

    def slope_kib_per_min(self) -> float:
        """Least-squares growth of the steady samples, KiB per minute."""
        pts = self.steady()
        if len(pts) < 2:
            return 0.0
        try:
            fit = statistics.linear_regression([p[0] for p in pts], [p[1] for p in pts])
        except statistics.StatisticsError:  # every sample at one instant: no slope
            return 0.0
        return 60.0 * fit.slope

    def summary(self) -> dict:
        """Start, after-warm-up, end and highest RSS, growth after warm-up and slope."""
        pts = self.steady()
        start, end = pts[0][1], pts[-1][1]
        return {"samples": len(self.samples), "rss_start_kib": self.samples[0][1],
                "rss_after_warmup_kib": start, "rss_end_kib": end,
                "rss_max_kib": max(k for _, k in self.samples),
                "growth_after_warmup_kib": end - start,
                "slope_kib_per_min": self.slope_kib_per_min()}

    def flat(self, tolerance_kib: int = 1024) -> bool:
        """No more than `tolerance_kib` growth after warm-up, and no steady upward slope that
        would reach it within the run's length again."""
        s = self.summary()
        minutes = (self.samples[-1][0] - self.steady()[0][0]) / 60.0 if self.samples else 0.0
        return (s["growth_after_warmup_kib"] <= tolerance_kib
                and s["slope_kib_per_min"] * max(minutes, 1.0) <= tolerance_kib)


def sample_memory(memory: MemoryTrend, read_kib: Callable[[], int], *, interval: float,
                  stop: Callable[[float], bool], clock: Callable[[], float], started: float,
                  on_sample: Callable[[float, MemoryTrend], None] = lambda t, m: None) -> None:
    """Add a sample to `memory` now and every `interval` seconds, until `stop(interval)` (which
    waits up to that long, as threading.Event.wait) says true or the process is gone."""
    while True:
        t = clock() - started
        try:
            memory.add(t, read_kib())
        except (OSError, ValueError):
            return
        on_sample(t, memory)
        if stop(interval):
            return


def lossless_rate(session, progress: Callable[[str, TrialResult], None] = lambda *_: None) -> float:
    """The session's highest lossless rate by a short search (1 s trials, no repeats; 0: none)."""
    return find_lossless_rate(lambda rate: session.trial(rate, 1.0), repeats=1,
                              progress=progress).rate


@dataclass
class SoakResult:
    """A soak's trial and the server's memory over it."""

    rate: float
    duration: float
    trial: TrialResult
    memory: MemoryTrend
    tolerance_kib: int = 1024

    @property
    def flat(self) -> bool:
        return self.memory.flat(self.tolerance_kib)

    @property
    def passed(self) -> bool:
        """Memory stayed flat and the run was lossless."""
        return self.flat and self.trial.loss < LOSSLESS

    def record(self, system: str, scenario, minutes: float, fraction: float, placement: str,
               env: dict) -> dict:
        """The soak's JSON-lines record."""
        return {"kind": "soak", "system": system, "scenario": scenario.name,
                "payload": scenario.payload, "subscribers": scenario.subscribers,
                "rate": self.rate, "minutes": minutes, "fraction": fraction,
                "memory": self.memory.summary(), "memory_samples": self.memory.samples,
                "flat": self.flat, "tolerance_kib": self.tolerance_kib,
                "trial": self.trial.as_dict(), "placement": placement, "env": env}


def soak(session, rate: float, duration: float, *, interval: float, tolerance_kib: int = 1024,
         on_sample: Callable[[float, MemoryTrend], None] = lambda t, m: None,
         read_kib: Optional[Callable[[], int]] = None,
         clock: Callable[[], float] = time.monotonic) -> SoakResult:
    """Publish at `rate` for `duration` seconds while a thread samples the server's RSS every
    `interval` seconds (and once more at the end)."""
    memory = MemoryTrend()
    if read_kib is None:
        pid = session.server.proc.pid
        read_kib = lambda: rss_kib(pid)  # noqa: E731
    done = threading.Event()
    started = clock()
    sampler = threading.Thread(target=sample_memory, args=(memory, read_kib), daemon=True,
                               kwargs={"interval": interval, "stop": done.wait, "clock": clock,
                                       "started": started, "on_sample": on_sample})
    sampler.start()
    try:
        # 2 s of silence ends the count (the bench's 0.5 s asks for speed; a soak asks whether
        # everything arrives, and a loaded machine's stall is not a loss)
        trial = session.trial(rate, duration, idle=2.0)
    finally:
        done.set()
        sampler.join()
    memory.add(clock() - started, read_kib())
    return SoakResult(rate, duration, trial, memory, tolerance_kib)
