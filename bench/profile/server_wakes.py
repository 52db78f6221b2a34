"""What each server does with a datagram, side by side: run two fyrehose systems' trials in turn
(A B B A ...) while perf records, for their serving threads only, every wake-up, switch-in and
recvmmsg entry and return (CLOCK_MONOTONIC; the same four events per wake-up for any server, so
tracing costs both alike), then print for each system:

  queued    wake-up to running (the run queue's delay, and a halted vCPU's);
  received  running to recvmmsg's return;
  handled   a recvmmsg's return with datagrams to the next recvmmsg call: the batch's whole
            work, its fan-out sends included;
  total     wake-up to the next recvmmsg call, for batches that followed a wake-up;

as p50 / p90 / p99 / max in µs over the batches, with the datagrams per batch; then `handled`
again for each batch size that makes up at least 5 % of the batches (a stall is followed by a
few large batches, and their share moves the p99 of all batches from run to run).

    .venv/bin/python bench/profile/server_wakes.py [SYSTEM,SYSTEM] [RATE] [PAIRS]

Default: pelotari,reference-gso at 50,000 msgs/s, 3 pairs of 2 s trials, S=16 N=4. Needs root
(perf records every CPU). perf writes to /dev/shm where there is one. Any stall at a fixed time
into the run lands on the same trial slot every time, so run both orders (A,B and B,A).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from pelotari.harness.procs import STOP_SIGNALS, Children
from pelotari.harness.systems import SYSTEMS
from pelotari.harness.trial import Scenario, Session

LINE = re.compile(r"\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")
RECEIVES = ("syscalls:sys_enter_recvmmsg", "syscalls:sys_exit_recvmmsg")


def arguments(argv):
    """The command line, checked before anything starts (one line for a user's error)."""
    parser = argparse.ArgumentParser(prog="bench/profile/server_wakes.py",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("systems", nargs="?", default="pelotari,reference-gso",
                        help="two servers, comma-separated [pelotari,reference-gso]")
    parser.add_argument("rate", nargs="?", type=float, default=50_000.0,
                        help="offered msgs/s [50000]")
    parser.add_argument("pairs", nargs="?", type=int, default=3,
                        help="pairs of 2 s trials [3]")
    args = parser.parse_args(argv)
    names = args.systems.split(",")
    if len(names) != 2 or names[0] == names[1] or any(n not in SERVERS for n in names):
        parser.error("two different servers that read with recvmmsg, comma-separated, from: "
                     + ", ".join(SERVERS))
    if not (0 < args.rate < float("inf")) or args.pairs < 1:
        parser.error("RATE > 0, PAIRS >= 1")
    if shutil.which("perf") is None:
        parser.error("perf is not installed (Debian: linux-perf)")
    return names, args.rate, args.pairs


RECVMMSG = 299  # x86_64
SERVERS = [n for n, s in SYSTEMS.items() if s.protocol == "fyrehose" and n != "asyncio"]


def serving_thread(proc, patience: float = 5.0) -> int:
    """The thread that waits in the server's recvmmsg (an idle server's serving thread; looked
    for again while it is busy with a KEEPALIVE)."""
    deadline = time.monotonic() + patience
    while True:
        for t in psutil.Process(proc.pid).threads():
            try:
                with open(f"/proc/{proc.pid}/task/{t.id}/syscall") as f:
                    if f.read().split()[0] == str(RECVMMSG):
                        return t.id
            except (OSError, IndexError):
                continue
        if time.monotonic() > deadline:
            raise SystemExit(f"no thread of process {proc.pid} waits in recvmmsg")
        time.sleep(0.05)


def batches(events):
    """Per batch of one serving thread (a recvmmsg that returned datagrams) in time order:
    (handled µs, datagrams, (queued, received, total) µs or None when no wake-up preceded it)."""
    out = []
    woke = running = received = None
    count = 0
    for t, event, fields in events:
        if event == "sched:sched_wakeup":
            woke, running = t, None
        elif event == "sched:sched_switch":
            if woke is not None and running is None:
                running = t
        elif event == "syscalls:sys_exit_recvmmsg":
            ret = int(fields.rsplit("0x", 1)[1], 16) if "0x" in fields else -1
            received, count = (t, ret) if 0 < ret < (1 << 31) else (None, 0)
        elif event == "syscalls:sys_enter_recvmmsg" and received is not None:
            wake = None
            if woke is not None and running is not None and woke <= running <= received:
                wake = ((running - woke) * 1e6, (received - running) * 1e6, (t - woke) * 1e6)
            out.append(((t - received) * 1e6, count, wake))
            woke = running = received = None
    return out


def summary(values):
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]
    return (f"{pick(0.5):6.1f} {pick(0.9):6.1f} {pick(0.99):7.1f} {values[-1]:8.1f}   "
            f"mean {statistics.fmean(values):5.1f}")


def main(argv=None):
    args = arguments(argv)
    try:
        with Children(interrupt=STOP_SIGNALS):  # servers, agents and perf end with us
            run(*args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def run(names, rate, pairs):
    # In memory where it can be: writing the trace out to a disk is itself a stall.
    work = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    data = os.path.join(work, "wakes.data")
    try:
        with Session(SYSTEMS[names[0]], Scenario(16, 4)) as a, \
                Session(SYSTEMS[names[1]], Scenario(16, 4)) as b:
            sessions = dict(zip(names, (a, b)))
            tids = {n: serving_thread(s.server.proc) for n, s in sessions.items()}
            pids = " || ".join(f"common_pid == {t}" for t in tids.values())
            argv = ["perf", "record", "-q", "-k", "mono", "-m", "64M", "-a", "-o", data,
                    "-e", "sched:sched_wakeup", "--filter",
                    " || ".join(f"pid == {t}" for t in tids.values()),
                    "-e", "sched:sched_switch", "--filter",
                    " || ".join(f"next_pid == {t}" for t in tids.values())]
            for event in RECEIVES:
                argv += ["-e", event, "--filter", pids]
            with open(os.path.join(work, "perf.err"), "w") as err:
                perf = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
            time.sleep(1.5)  # perf enabling its tracepoints on every CPU is itself a stall
            if perf.poll() is not None:
                with open(os.path.join(work, "perf.err")) as err:
                    why = err.read().strip().splitlines()
                raise SystemExit(f"perf record failed: {why[-1] if why else perf.returncode}"
                                 " (it needs root)")
            p99 = {n: [] for n in names}
            try:
                for k in range(pairs):
                    for n in (names if k % 2 == 0 else names[::-1]):
                        r = sessions[n].trial(rate, 2.0)
                        p99[n].append(r.latency["p99_ns"] / 1e3)
            finally:
                perf.send_signal(2)
                perf.wait()
        text = subprocess.run(["perf", "script", "--ns", "-i", data, "-F",
                               "tid,cpu,time,event,trace"],
                              capture_output=True, text=True).stdout
    finally:
        shutil.rmtree(work)
    by_tid = {t: [] for t in tids.values()}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        tid, _, t, event, fields = m.groups()
        # a wake-up is recorded in the waker's context: file it under the wakee
        owner = int(tid)
        if event == "sched:sched_wakeup":
            owner = int(re.search(r"(?<!_)pid=(\d+)", fields).group(1))
        elif event == "sched:sched_switch":
            owner = int(re.search(r"next_pid=(\d+)", fields).group(1))
        if owner in by_tid:
            by_tid[owner].append((float(t), event, fields))
    print(f"{rate:,.0f} msgs/s, S=16 N=4, {pairs} trial{'s' if pairs > 1 else ''} each "
          f"(µs: p50 p90 p99 max, mean)")
    for n in names:
        rows = batches(by_tid[tids[n]])
        woken = [w for _, _, w in rows if w is not None]
        if not woken:
            print(f"{n}: no wake-up recorded")
            continue
        print(f"{n}: {len(rows)} batches, {len(woken)} after a wake-up; trial p99s "
              f"{', '.join(f'{x:.0f}' for x in p99[n])} µs; "
              f"datagrams/batch {statistics.mean(r[1] for r in rows):.2f}")
        print(f"  {'queued':9} {summary([w[0] for w in woken])}")
        print(f"  {'received':9} {summary([w[1] for w in woken])}")
        print(f"  {'handled':9} {summary([r[0] for r in rows])}")
        print(f"  {'total':9} {summary([w[2] for w in woken])}")
        sizes = {}
        for handled, count, _ in rows:
            sizes.setdefault(count, []).append(handled)
        for count, values in sorted(sizes.items()):
            if len(values) >= 0.05 * len(rows):
                print(f"  handled, {count} datagrams ({len(values) / len(rows):.0%} of the "
                      f"batches): {summary(values)}")


if __name__ == "__main__":
    main()
