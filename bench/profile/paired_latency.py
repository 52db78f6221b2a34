"""Two systems' p99 at one offered rate, trial by trial in turn (A B B A A B ...: each goes first
in every other pair) with both kept running, so that the machine's drift falls on both alike: each
one's median p99, over the pairs in which both were lossless, their stalled milliseconds, in how
many pairs the first was lower (with the two-sided sign test's p), and the median of the pairs'
differences with its 95 % confidence interval (distribution-free: order statistics).

    .venv/bin/python bench/profile/paired_latency.py SYSTEM,SYSTEM RATE [PAIRS] [N]

e.g. `pelotari-plain,reference 50000 15` (S=16, N=4 by default; 2 s trials).

Each trial's line also says where the machine's time went while it ran, read from /proc (the
same counters for any server): `wait` the server's serving thread's milliseconds runnable but not
running, and how many times it was preempted; `sub wait` the same for the subscribers' agent,
all its threads; `steal` the hypervisor's (all vCPUs); `rcvbuf`/`sndbuf` the kernel's UDP
datagrams dropped for a full receive buffer or refused for a full send buffer.
"""
import argparse
import math
import os
import statistics
import sys
from contextlib import ExitStack

from pelotari.harness.procs import STOP_SIGNALS, Children
from pelotari.harness.rates import TIMELINE, lossless, stalled_ms
from pelotari.harness.systems import MAX_SUBSCRIBERS, SYSTEMS, Unavailable
from pelotari.harness.trial import Scenario, Session

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_wakes import serving_thread  # noqa: E402


MIN_RATE = 50.0


def arguments(argv):
    """The command line, checked before any server starts (one line for a user's error)."""
    parser = argparse.ArgumentParser(prog="bench/profile/paired_latency.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("systems", help="two systems, comma-separated (pelotari bench --list)")
    parser.add_argument("rate", type=float, help="offered msgs/s")
    parser.add_argument("pairs", type=int, nargs="?", default=15, help="pairs of trials [15]")
    parser.add_argument("subscribers", type=int, nargs="?", default=4, help="N [4]")
    args = parser.parse_args(argv)
    names = args.systems.split(",")
    fyrehose = [n for n, s in SYSTEMS.items() if s.protocol == "fyrehose"]
    if len(names) != 2 or names[0] == names[1] or any(n not in fyrehose for n in names):
        parser.error(f"two different fyrehose systems (the per-millisecond timeline is "
                     f"pelotari's load generator's), comma-separated, from: {', '.join(fyrehose)}")
    if not MIN_RATE <= args.rate < float("inf"):
        parser.error(f"RATE must be at least {MIN_RATE:g} msgs/s (a 2 s trial's p99 needs 100 "
                     f"messages), and finite")
    if args.pairs < 1:
        parser.error("PAIRS must be at least 1")
    if not 1 <= args.subscribers <= MAX_SUBSCRIBERS:
        parser.error(f"N must be from 1 to {MAX_SUBSCRIBERS}")
    return names, args.rate, args.pairs, args.subscribers


def main(argv=None):
    args = arguments(argv)
    try:
        with Children(interrupt=STOP_SIGNALS):  # servers and agents end with us, however we end
            run(*args)
    except Unavailable as exc:
        sys.exit(str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def run(names, rate, pairs, subscribers):
    p99 = {n: [] for n in names}  # of the pairs in which both were lossless
    stalls = {n: [] for n in names}
    lossy = {n: 0 for n in names}
    waits = {n: [] for n in names}  # the server thread's, every trial
    with ExitStack() as stack:
        sessions = {n: stack.enter_context(Session(SYSTEMS[n], Scenario(16, subscribers)))
                    for n in names}
        probes = {n: Probe(serving_thread(s.server.proc), s.sub.proc.pid)
                  for n, s in sessions.items()}
        for k in range(pairs):
            got, where = {}, {}
            for n in (names if k % 2 == 0 else names[::-1]):
                try:
                    before = probes[n].read()
                    got[n] = sessions[n].trial(rate, 2.0, timeline=TIMELINE)
                    where[n] = Probe.delta(before, probes[n].read())
                except OSError:  # (its /proc entries are gone)
                    raise Unavailable(f"{n} exited during the run") from None
            got = {n: got[n] for n in names}
            for n, result in got.items():
                lossy[n] += not lossless(result)
                waits[n].append(where[n]["wait_ms"])
            print(f"pair {k + 1}: " + ", ".join(
                f"{n} {r.latency['p99_ns'] / 1000:.0f} µs"
                + ("" if lossless(r) else f" (lost {r.loss:.2%})")
                + f" [{Probe.describe(where[n])}]" for n, r in got.items()),
                flush=True)
            if all(lossless(r) for r in got.values()):
                for n, result in got.items():
                    p99[n].append(result.latency["p99_ns"] / 1000)
                    stalls[n].append(stalled_ms(result))
    if not p99[names[0]]:
        sys.exit("no pair in which both were lossless")
    for n in names:
        print(f"{n}: median p99 {statistics.median(p99[n]):.0f} µs "
              f"({min(p99[n]):.0f} – {max(p99[n]):.0f}), median stalled "
              f"{statistics.median(stalls[n]):g} ms; {lossy[n]} of {pairs} trials lossy; "
              f"server thread waited {statistics.median(waits[n]):.1f} ms a trial (median)")
    a, b = names
    lower = sum(x < y for x, y in zip(p99[a], p99[b]))
    higher = sum(x > y for x, y in zip(p99[a], p99[b]))
    print(f"{a} lower in {lower} of {len(p99[a])} pairs "
          f"({len(p99[a]) - lower - higher} equal); sign test p = {sign_test(lower, higher):.2f}")
    diffs = sorted(x - y for x, y in zip(p99[a], p99[b]))
    lo, hi = median_interval(diffs)
    print(f"{a} minus {b}: median {statistics.median(diffs):+.0f} µs"
          + (f", 95 % interval {lo:+.0f} to {hi:+.0f} µs" if lo is not None else
             " (too few pairs for a 95 % interval)"))


class Probe:
    """Where the machine's time went, from /proc: one server thread, one agent process, the
    hypervisor's steal and the kernel's UDP buffer errors."""

    TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")

    def __init__(self, server_tid: int, agent_pid: int):
        self.server = f"/proc/{_pid_of(server_tid)}/task/{server_tid}"
        self.agent_pid = agent_pid

    @staticmethod
    def _thread(path):
        with open(f"{path}/schedstat") as f:
            wait_ns = int(f.read().split()[1])
        with open(f"{path}/status") as f:
            preempted = next(int(line.split()[1]) for line in f
                             if line.startswith("nonvoluntary_ctxt_switches"))
        return wait_ns, preempted

    def read(self) -> dict:
        """The counters now."""
        wait, preempted = self._thread(self.server)
        agent_wait = 0
        for tid in os.listdir(f"/proc/{self.agent_pid}/task"):
            try:
                agent_wait += self._thread(f"/proc/{self.agent_pid}/task/{tid}")[0]
            except OSError:
                continue
        with open("/proc/stat") as f:
            steal = int(f.readline().split()[8])
        with open("/proc/net/snmp") as f:
            udp = [line.split() for line in f if line.startswith("Udp:")]
        udp = dict(zip(udp[0][1:], map(int, udp[1][1:])))
        return {"wait_ms": wait / 1e6, "preempted": preempted, "sub_wait_ms": agent_wait / 1e6,
                "steal_ms": steal * self.TICK_MS, "rcvbuf": udp["RcvbufErrors"],
                "sndbuf": udp["SndbufErrors"]}

    @staticmethod
    def delta(before: dict, after: dict) -> dict:
        """What changed between two reads."""
        return {k: after[k] - before[k] for k in before}

    @staticmethod
    def describe(d: dict) -> str:
        """One trial's counters in a few words."""
        return (f"wait {d['wait_ms']:.1f} ms/{d['preempted']}, sub wait {d['sub_wait_ms']:.0f} ms, "
                f"steal {d['steal_ms']:.0f} ms, rcvbuf {d['rcvbuf']}, sndbuf {d['sndbuf']}")


def _pid_of(tid: int) -> int:
    """The process a thread belongs to."""
    with open(f"/proc/{tid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Tgid:"))


def sign_test(wins: int, losses: int) -> float:
    """Two-sided sign test: the chance of a split at least this uneven between two equals."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def median_interval(values, level=0.95):
    """A distribution-free confidence interval for the median of sorted `values`: the order
    statistics (k, n-1-k) with the largest k whose binomial coverage is at least `level`;
    (None, None) below 6 values."""
    n = len(values)
    best = None
    for k in range(n // 2):
        # P(k < count below the median <= n-1-k) for Binomial(n, 1/2)
        cover = sum(math.comb(n, j) for j in range(k + 1, n - k)) / 2 ** n
        if cover >= level:
            best = k
    if best is None:
        return None, None
    return values[best], values[n - 1 - best]


if __name__ == "__main__":
    main()
