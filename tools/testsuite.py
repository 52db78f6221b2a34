"""The README's test command: the suite on the Cython build, then on the pure-Python twins.

Both passes always run (a failure in the first does not hide the second); each pass's pytest
summary is repeated at the end with the commit and the time it took, then one total line, and the
exit status is non-zero if either pass failed. The pure pass leaves out the tests marked
`one_build` (tests/conftest.py says which and why).

    python tools/testsuite.py [--under-load] [--rounds N] [--workers N] [PYTEST ARGS...]

--under-load runs every pass with the CPU saturated by something else (stress-ng --cpu NPROC
from Debian when installed, else one pure-Python busy loop per core), to prove that no test
depends on how fast the machine is; --rounds N repeats both passes N times (each summarised).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")
PASSES = (("compiled", {}), ("pure", {"PELOTARI_PURE_PYTHON": "1"}))


def usage_error(message):
    """One line on stderr and status 2, as click does for a bad option."""
    print(f"tools/run test: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    """(under_load, rounds, workers, pytest_args) from the command line."""
    under_load, rounds = False, 1
    workers = os.environ.get("PELOTARI_TEST_WORKERS", "auto")
    rest = list(argv)
    while rest and rest[0] in ("--under-load", "--rounds", "--workers"):
        flag = rest.pop(0)
        if flag == "--under-load":
            under_load = True
            continue
        if not rest:
            usage_error(f"{flag} needs a number")
        value = rest.pop(0)
        if flag == "--rounds":
            if not value.isdigit() or int(value) < 1:
                usage_error(f"--rounds must be a whole number >= 1, not {value!r}")
            rounds = int(value)
        else:
            if value != "auto" and not value.isdigit():
                usage_error(f"--workers must be a whole number or auto, not {value!r}")
            workers = value
    return under_load, rounds, workers, rest


def worker_count(workers):
    """pytest-xdist's -n value: `auto` is one worker per core, at least 2 (the suite waits on
    processes, timers and sockets as much as it computes)."""
    if workers == "auto":
        return max(2, os.cpu_count() or 1)
    return int(workers)


class Burner:
    """Saturates every core with busy processes (stress-ng or Python), each in its own session."""

    def __init__(self):
        cores = os.cpu_count() or 1
        if shutil.which("stress-ng"):
            self.what = f"stress-ng --cpu {cores}"
            argv = [["stress-ng", "--cpu", str(cores), "--quiet"]]
        else:
            self.what = f"{cores} Python busy loops"
            argv = [[sys.executable, "-c", "while True: pass"]] * cores
        self.procs = [subprocess.Popen(a, stdin=subprocess.DEVNULL, start_new_session=True)
                      for a in argv]

    def stop(self):
        """Kill every burner process group and reap it."""
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def run_pass(name, extra_env, pytest_args, workers):
    """One pytest run, its output passed through; (summary counts, summary line, seconds, status)."""
    env = dict(os.environ, **extra_env)
    argv = [sys.executable, "-m", "pytest"]
    if workers > 1:  # the Spark tests share one worker (tests/conftest.py: xdist_group)
        argv += ["-n", str(workers), "--dist", "loadgroup"]
    argv += pytest_args
    print(f"tools/run test: {name} pass: {' '.join(argv[1:])}", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    last = ""
    try:
        for raw in proc.stdout:
            sys.stdout.buffer.write(raw)
            sys.stdout.flush()
            line = raw.decode(errors="replace").strip()
            if COUNT.search(line) and " in " in line:
                last = line.strip("= ")
        status = proc.wait()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    counts = {}
    for number, word in COUNT.findall(last):
        word = "errors" if word.startswith("error") else word
        counts[word] = counts.get(word, 0) + int(number)
    return counts, last or f"pytest exited {status} with no summary", time.monotonic() - started, status


def commit():
    """The checked-out commit (with + when the tree has changes), or '?' outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               text=True, capture_output=True).stdout.strip()
        return head + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main(argv):
    """Run the passes (and rounds), print their summaries and a total; return the exit status."""
    under_load, rounds, workers, pytest_args = parse_args(argv)
    workers = worker_count(workers)
    burner = Burner() if under_load else None
    results = []
    try:
        for round_no in range(1, rounds + 1):
            for name, env in PASSES:
                counts, line, seconds, status = run_pass(name, env, pytest_args, workers)
                results.append((round_no, name, counts, line, seconds, status))
    except KeyboardInterrupt:
        print("tools/run test: interrupted", file=sys.stderr)
        return 130
    finally:
        if burner:
            burner.stop()
    where = commit()
    load = f", under load ({burner.what})" if burner else ""
    print(f"\ntools/run test: commit {where}, {workers} workers{load}")
    total = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    bad = False
    for round_no, name, counts, line, seconds, status in results:
        label = f"round {round_no} {name}" if rounds > 1 else name
        print(f"  {label} pass: {line} ({seconds / 60:.1f} min)")
        for key in total:
            total[key] += counts.get(key, 0)
        bad |= status not in (0, 5) or counts.get("failed", 0) > 0 or counts.get("errors", 0) > 0
    failed = total["failed"] + total["errors"]
    print(f"total: {total['passed']} passed, {failed} failed, {total['skipped']} skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
