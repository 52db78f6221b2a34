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


USAGE = """\
usage: bash tools/run test [--under-load] [--rounds N] [--workers N|auto] [PYTEST ARGS...]

The suite on the Cython build, then on the pure-Python twins (PELOTARI_PURE_PYTHON=1), each
summarised, then one total line; non-zero status if either pass failed or ran no test.
Its own flags come first, each as its own word; the rest goes to pytest (-k, -x, a file...).

  --under-load    every pass with the CPU saturated (stress-ng --cpu NPROC, or Python loops)
  --rounds N      repeat both passes N times
  --workers N     pytest-xdist workers (auto: one per core, at least 2; env
                  PELOTARI_TEST_WORKERS sets the default)
"""


def usage_error(message):
    """One line on stderr and status 2, as click does for a bad option."""
    print(f"tools/run test: {message}", file=sys.stderr)
    sys.exit(2)


def whole(value):
    """Whether value is a whole number written in ASCII digits."""
    return value.isascii() and value.isdigit()


def parse_args(argv):
    """(under_load, rounds, workers, pytest_args) from the command line (its front) and
    PELOTARI_TEST_WORKERS."""
    under_load, rounds = False, 1
    workers = os.environ.get("PELOTARI_TEST_WORKERS", "auto")
    where = "PELOTARI_TEST_WORKERS"
    rest = list(argv)
    if rest[:1] in (["-h"], ["--help"]):
        print(USAGE, end="")
        sys.exit(0)
    while rest and rest[0] in ("--under-load", "--rounds", "--workers"):
        flag = rest.pop(0)
        if flag == "--under-load":
            under_load = True
            continue
        if not rest:
            usage_error(f"{flag} needs a number" + (" or auto" if flag == "--workers" else ""))
        value = rest.pop(0)
        if flag == "--rounds":
            if not whole(value) or int(value) < 1:
                usage_error(f"--rounds must be a whole number >= 1, not {value!r}")
            rounds = int(value)
        else:
            workers, where = value, "--workers"
    if workers != "auto" and (not whole(workers) or int(workers) < 1):
        usage_error(f"{where} must be a whole number >= 1 or auto, not {workers!r}")
    for flag in ("--under-load", "--rounds", "--workers"):
        if any(a == flag or a.startswith(flag + "=") for a in rest):
            usage_error(f"{flag} goes before pytest's arguments, as its own word")
    return under_load, rounds, workers, rest


def worker_count(workers):
    """pytest-xdist's -n value: `auto` is one worker per core, at least 2 (the suite waits on
    processes, timers and sockets as much as it computes)."""
    if workers == "auto":
        return max(2, os.cpu_count() or 1)
    return int(workers)


class held_signals:
    """Ctrl-C, SIGTERM and SIGHUP ignored within it (a teardown is not cut short)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in self.SIGNALS}

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


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


class Stopped(Exception):
    """SIGTERM or SIGHUP came: stop as Ctrl-C does."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _stop(signum, frame):
    raise Stopped(signum)


TEARDOWN = 60.0  # seconds pytest has after SIGINT to run its teardowns before SIGKILL


def stop_pytest(proc):
    """Ctrl-C to pytest's process group (its own session: the terminal's never reaches it), so
    fixtures tear down what they made; SIGKILL to the group after TEARDOWN seconds."""
    for sig, wait in ((signal.SIGINT, TEARDOWN), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(wait)
            if sig == signal.SIGINT:  # pytest ended; what its workers left goes too
                os.killpg(proc.pid, signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


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
        with held_signals():
            stop_pytest(proc)
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


def summarise(results, rounds, workers, burner):
    """Each pass's summary line with the commit, then the total; whether any pass failed."""
    load = f", under load ({burner.what})" if burner else ""
    print(f"\ntools/run test: commit {commit()}, {workers} workers{load}")
    total = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    bad = False
    for round_no, name, counts, line, seconds, status in results:
        label = f"round {round_no} {name}" if rounds > 1 else name
        print(f"  {label} pass: {line} ({seconds / 60:.1f} min)")
        for key in total:
            total[key] += counts.get(key, 0)
        # (5: no test ran in this pass: fine for one, e.g. bully's tests in the pure pass)
        bad |= status not in (0, 5) or counts.get("failed", 0) > 0 or counts.get("errors", 0) > 0
    failed = total["failed"] + total["errors"]
    print(f"total: {total['passed']} passed, {failed} failed, {total['skipped']} skipped")
    if results and all(r[5] == 5 for r in results):  # a -k or path that matches nothing
        print("tools/run test: no test ran in any pass (pytest's arguments matched none)")
        bad = True
    return bad


def main(argv):
    """Run the passes (and rounds), print their summaries and a total; return the exit status."""
    under_load, rounds, workers, pytest_args = parse_args(argv)
    workers = worker_count(workers)
    # Ctrl-C raises here even if started with SIGINT ignored (a script's background job), and
    # so pytest, which inherits the default rather than the ignoring, tears down on it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    burner = None
    results = []
    try:
        burner = Burner() if under_load else None
        for round_no in range(1, rounds + 1):
            for name, env in PASSES:
                counts, line, seconds, status = run_pass(name, env, pytest_args, workers)
                results.append((round_no, name, counts, line, seconds, status))
    except (KeyboardInterrupt, Stopped) as exc:
        with held_signals():
            if burner:
                burner.stop()
            if results:  # the passes that ended before it
                summarise(results, rounds, workers, burner)
        print("tools/run test: interrupted", file=sys.stderr)
        return 128 + exc.signum if isinstance(exc, Stopped) else 130
    finally:
        if burner:
            burner.stop()
    return 1 if summarise(results, rounds, workers, burner) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
