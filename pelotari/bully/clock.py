"""Time for the bully client's Berkeley sync: a logical clock that slews, and the leader's maths.

A node never sets the system clock (no root needed). Its logical clock is the system clock plus
an offset; a correction moves the offset toward its target at no more than `max_slew` seconds
per second (chrony's largest slew, 83,333 ppm: a correction just under the threshold takes
1.5 s), and jumps only when the correction is larger than `step_threshold` (ntpd's 128 ms). Slewing is measured on the monotonic clock, so a system clock stepped by
someone else moves the logical clock with it and nothing runs backwards by our doing.

The leader's estimate of a peer's offset follows Gusella & Zatti's TEMPO and BSD `timed`:
several probes, each bounding the offset by the interval the answer could have been read in;
the intervals are intersected (the least-delayed probes bound it most), and a fault-tolerant
average (centred on the leader's own clock, outliers excluded) gives the time everybody is
told; a peer whose probes contradict each other, or whose correction would pass a sanity
bound, is left out altogether (docs/protocols/bully.md, Time).
"""
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from statistics import median_low

STEP_THRESHOLD = 0.128  # seconds: corrections larger than this step, smaller ones slew (ntpd)
MAX_SLEW = 0.083333  # seconds of correction per second: chrony's maxslewrate, 83,333 ppm
RESOLUTION = 0.001  # the wire's Time is whole milliseconds


class LogicalClock:
    """system clock + offset; corrections slew at a bounded rate unless past the threshold."""

    def __init__(self, now: float, system: Callable[[], float] = time.time, offset: float = 0.0,
                 max_slew: float = MAX_SLEW, step_threshold: float = STEP_THRESHOLD):
        if max_slew <= 0 or max_slew >= 1:
            raise ValueError("max_slew must be within (0, 1)")
        if step_threshold < 0:
            raise ValueError("step_threshold must not be negative")
        self.system = system
        self.max_slew = max_slew
        self.step_threshold = step_threshold
        self._base = offset  # the offset at self._since (monotonic)
        self._target = offset
        self._since = now

    def offset(self, now: float) -> float:
        """Logical minus system clock at monotonic `now`."""
        gap = self._target - self._base
        room = max(0.0, now - self._since) * self.max_slew
        if abs(gap) <= room:
            return self._target
        return self._base + (room if gap > 0 else -room)

    def read(self, now: float) -> float:
        """Logical time (seconds since the Unix epoch) at monotonic `now`."""
        return self.system() + self.offset(now)

    def read_ms(self, now: float) -> int:
        """Logical time as the wire's Time: whole milliseconds, rounded down (as Java's clock)."""
        return int(self.read(now) * 1000 // 1)

    @property
    def target(self) -> float:
        """The offset the clock is slewing to (reached at once after a step)."""
        return self._target

    def remaining(self, now: float) -> float:
        """Correction still to slew (0 once reached)."""
        return self._target - self.offset(now)

    def correct(self, delta: float, now: float) -> bool:
        """Move the logical clock by delta seconds: a step past the threshold, else a slew from
        where it is now. Whether it stepped."""
        current = self.offset(now)
        self._base, self._since = current, now
        self._target = current + delta
        if abs(delta) > self.step_threshold:
            self._base = self._target
            return True
        return False

    def set_to(self, logical: float, now: float) -> tuple[float, bool]:
        """Aim the logical clock at `logical` (seconds) as of `now`: (correction, stepped)."""
        delta = logical - self.read(now)
        return delta, self.correct(delta, now)


@dataclass(frozen=True)
class Probe:
    """One TellMeYourTime/HereIsMyTime exchange, as the leader saw it: its logical clock when it
    sent (t0) and received (t1), in seconds, and the peer's answer in whole milliseconds."""

    t0: float
    t1: float
    remote_ms: int

    @property
    def rtt(self) -> float:
        return self.t1 - self.t0

    def bounds(self, resolution: float = RESOLUTION) -> tuple[float, float]:
        """Where peer minus leader can be: the peer read its clock at some instant in [t0, t1]
        and reported it rounded down to the resolution."""
        remote = self.remote_ms / 1000
        return remote - self.t1, remote + resolution - self.t0


@dataclass(frozen=True)
class Estimate:
    """A peer's offset (peer minus leader, seconds), the most it can be off, the least round
    trip seen, and how far apart the probes' bounds lie when they do not intersect (0 when
    they do: a clock that answers at random contradicts itself by seconds)."""

    offset: float
    error: float
    rtt: float
    gap: float = 0.0


def estimate_offset(probes: Iterable[Probe], resolution: float = RESOLUTION) -> Estimate | None:
    """The offset the probes agree on: the intersection of their bounds, or, when they do not
    intersect (a clock moved while probing), the least-delayed probe's midpoint."""
    probes = [p for p in probes if p.rtt >= 0]
    if not probes:
        return None
    lo = max(p.bounds(resolution)[0] for p in probes)
    hi = min(p.bounds(resolution)[1] for p in probes)
    best = min(probes, key=lambda p: p.rtt)
    if lo <= hi:
        return Estimate((lo + hi) / 2, (hi - lo) / 2, best.rtt)
    gap = lo - hi
    lo, hi = best.bounds(resolution)
    return Estimate((lo + hi) / 2, (hi - lo) / 2, best.rtt, gap)


def fault_tolerant_average(offsets: dict[Hashable, float], bound: float,
                           centre: Hashable | None = None) -> tuple[float, set]:
    """The mean of the offsets within `bound` of the centre's (of their low median when no
    centre is named), and whose they are (the others are outliers: they do not pull everybody
    toward them). The centre itself is always kept."""
    if not offsets:
        raise ValueError("no offsets to average")
    # The low median is one of the clocks, so at least that one is kept.
    m = offsets[centre] if centre is not None else median_low(offsets.values())
    kept = {k for k, v in offsets.items() if abs(v - m) <= bound}
    return sum(offsets[k] for k in kept) / len(kept), kept
