"""Where a packed trial's latency tail comes from: run bench trials with the subscribers' per-
millisecond timeline while perf records every context switch (CLOCK_MONOTONIC, the load
generator's clock), then print, for each stall (a millisecond whose worst message was over
STALL_MS late), what each CPU ran during the time that message waited.

    sudo .venv/bin/python bench/profile/stalls.py [SYSTEM] [RATE] [TRIALS] [STALL_MS]

Default: pelotari-packed, 1,000,000 msgs/s, 3 trials of 2 s, S=16 N=4, stalls over 2 ms. A stall
during which the server's CPU shows no context switch at all (while datagrams arrive every
~0.1 ms) is time that CPU did not run: on a virtual machine, its vCPU was not scheduled.
"""
import argparse
import bisect
import collections
import os
import re
import shutil
import subprocess
import tempfile
import time

import psutil

from pelotari.harness.systems import SYSTEMS
from pelotari.harness.trial import Scenario, Session

SWITCH = re.compile(r"\s*\[(\d+)\]\s+([\d.]+):.*prev_comm=(.*?) prev_pid=(\d+).*"
                    r"==> next_comm=(.*?) next_pid=(\d+)")


def arguments(argv):
    """The command line, checked before anything starts (one line for a user's error)."""
    parser = argparse.ArgumentParser(prog="bench/profile/stalls.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("system", nargs="?", default="pelotari-packed")
    parser.add_argument("rate", nargs="?", type=float, default=1_000_000.0, help="msgs/s")
    parser.add_argument("trials", nargs="?", type=int, default=3)
    parser.add_argument("stall_ms", nargs="?", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.system not in SYSTEMS or SYSTEMS[args.system].protocol != "fyrehose":
        parser.error(f"a fyrehose system, one of: "
                     f"{', '.join(n for n, s in SYSTEMS.items() if s.protocol == 'fyrehose')}")
    if not (0 < args.rate < float("inf")) or args.trials < 1 or not args.stall_ms > 0:
        parser.error("RATE > 0, TRIALS >= 1, STALL_MS > 0")
    if shutil.which("perf") is None:
        parser.error("perf is not installed (Debian: linux-perf)")
    return args.system, args.rate, args.trials, args.stall_ms * 1e6


def main(argv=None):
    system, rate, trials, stall_ns = arguments(argv)
    work = tempfile.mkdtemp()
    data = os.path.join(work, "switches.data")
    with Session(SYSTEMS[system], Scenario(16, 4)) as session:
        names = {}  # every thread of the three processes (perf names threads by their id)
        for proc, who in ((session.server.proc, "server"), (session.sub.proc, "subscribers"),
                          (session.pubs[0].proc, "publisher")):
            names.update({t.id: who for t in psutil.Process(proc.pid).threads()})
        perf = subprocess.Popen(["perf", "record", "-q", "-k", "mono", "-m", "32M", "-a",
                                 "-e", "sched:sched_switch", "-o", data],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)  # perf enabling its tracepoints on every CPU is itself a stall
        try:
            results = []
            for _ in range(trials):
                # (the subscribers' clock, CLOCK_MONOTONIC, is perf's -k mono)
                results.append(session.trial(rate, 2.0, timeline=0.001))
        finally:
            perf.send_signal(2)
            perf.wait()
    text = subprocess.run(["perf", "script", "-i", data, "-F", "cpu,time,trace"],
                          capture_output=True, text=True).stdout
    shutil.rmtree(work)
    runs, last = [], {}  # (start, end, cpu, pid, comm): what ran on a CPU between switches
    for line in text.splitlines():
        m = SWITCH.match(line)
        if not m:
            continue
        cpu, t, _, _, ncomm, npid = m.groups()
        t = float(t)
        if cpu in last:
            runs.append((last[cpu][0], t, int(cpu), last[cpu][1], last[cpu][2]))
        last[cpu] = (t, int(npid), ncomm)
    starts = [r[0] for r in runs]
    for k, result in enumerate(results):
        lat = result.latency
        tl = result.timeline_worst_ns
        stalls = [i for i, w in enumerate(tl) if w > stall_ns and (i == 0 or tl[i - 1] <= stall_ns)]
        busy = ", ".join(f"{who} {cpu / result.elapsed:.0%}" for who, cpu in
                         [("server", result.server_cpu), *result.client_cpu.items()])
        print(f"trial {k + 1}: p50 {lat['p50_ns'] / 1e3:.0f} µs, p99 {lat['p99_ns'] / 1e3:.0f} µs, "
              f"{sum(1 for w in tl if w > 1e6)} ms with a message over 1 ms late, "
              f"{len(stalls)} stalls over {stall_ns / 1e6:g} ms; CPU busy: {busy}")
        base = result.timeline_start_ns / 1e9
        for i in stalls:
            end = base + (i + 1) / 1000
            begin = end - tl[i] / 1e9
            busy = collections.defaultdict(float)
            switches = collections.Counter()
            for a, b, cpu, pid, comm in runs[max(0, bisect.bisect_left(starts, begin) - 50):
                                             bisect.bisect_right(starts, end)]:
                lo, hi = max(a, begin), min(b, end)
                if hi > lo:
                    busy[(cpu, names.get(pid, comm))] += hi - lo
                if begin <= a <= end:
                    switches[cpu] += 1
            what = "; ".join(f"cpu {cpu} {who} {s * 1e3:.2f} ms"
                             for (cpu, who), s in sorted(busy.items()) if s >= 1e-4)
            print(f"  at {i} ms: a message waited {tl[i] / 1e6:.1f} ms; switches per cpu "
                  f"{dict(sorted(switches.items()))}; ran: {what}")


if __name__ == "__main__":
    main()
