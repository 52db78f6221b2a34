"""Memory soak: a system served at a steady share of its highest lossless rate for minutes, with
its resident memory sampled, to show that nothing grows with traffic or time."""
import statistics
from dataclasses import dataclass, field
from typing import List, Tuple

WARMUP_SHARE = 0.1  # samples before this share of the run are warm-up (buffers filling)


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB."""
    import psutil

    return psutil.Process(pid).memory_info().rss // 1024


@dataclass
class MemoryTrend:
    """Resident memory over a run: (seconds since start, KiB) samples and what they show."""

    samples: List[Tuple[float, int]] = field(default_factory=list)

    def add(self, t: float, kib: int) -> None:
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
        ts, ks = [p[0] for p in pts], [p[1] for p in pts]
        mt, mk = statistics.fmean(ts), statistics.fmean(ks)
        var = sum((t - mt) ** 2 for t in ts)
        return 60.0 * sum((t - mt) * (k - mk) for t, k in zip(ts, ks)) / var if var else 0.0

    def summary(self) -> dict:
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
