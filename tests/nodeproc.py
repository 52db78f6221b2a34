"""One `pelotari ...` node process for the node and CLI tests of every protocol: its events
(JSON objects, or text lines) read by a thread onto a queue, its stderr kept, commands on stdin,
stopped by a signal and timed. (pelotari.harness.procs.JsonProcess is the benchmarks' kind:
polled without threads, stderr dropped, no choice of stdin.)"""
import json
import os
import queue
import signal
import subprocess
import threading
import time

from conftest import PELOTARI, wait_event


def is_event(kind, /, **fields):
    """A predicate: an event of that kind whose fields have those values."""
    return lambda e: e["event"] == kind and all(e.get(k) == v for k, v in fields.items())


class NodeProcess:
    """`pelotari ARGS [--json]`, in a session of its own (new_session) so that kill() takes
    whatever it started. `stdin` and `preexec_fn` as for Popen (a test closes fd 0 with
    preexec_fn to start it with stdin closed); `popen(argv, **kwargs)` starts it (e.g. in a
    network namespace: netlab's spawn)."""

    def __init__(self, *args, stdin=subprocess.PIPE, as_json=True, preexec_fn=None, env=None,
                 new_session=True, popen=subprocess.Popen):
        argv = PELOTARI + list(args) + (["--json"] if as_json else [])
        self.proc = popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=new_session, preexec_fn=preexec_fn,
                          env=env)  # noqa: PLW1509
        self.as_json = as_json
        self.new_session = new_session
        self.events: queue.Queue = queue.Queue()
        self.seen: list = []
        self.stderr: list[str] = []
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        threading.Thread(target=self._read, daemon=True).start()
        self._stderr_reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.put(json.loads(line) if self.as_json else line.decode())

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode())

    def stderr_text(self, timeout=5.0) -> str:
        """Everything it wrote on stderr (all of it once the process has ended)."""
        if self.proc.poll() is not None:
            self._stderr_reader.join(timeout)
        return "".join(self.stderr)

    def wait(self, predicate, timeout=5.0):
        """The first event (seen before, or printed within timeout) satisfying predicate."""
        return wait_event(self.events, self.seen, predicate, timeout)

    def wait_named(self, event, timeout=10.0, check=None, **fields):
        """The first event of that kind with those fields (and check(event), if given)."""
        kind = is_event(event, **fields)
        return wait_event(self.events, self.seen,
                          lambda e: kind(e) and (check is None or check(e)), timeout)

    def drain(self):
        """Move every event printed so far to seen."""
        while True:
            try:
                self.seen.append(self.events.get_nowait())
            except queue.Empty:
                return

    def wait_new(self, predicate, timeout=5.0, drain=True):
        """The first matching event printed from now on (events already printed are skipped)."""
        if drain:
            self.drain()
        fresh = []
        try:
            return wait_event(self.events, fresh, predicate, timeout)
        finally:
            self.seen.extend(fresh)

    def write(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def command(self, line: str):
        """One line on its stdin."""
        self.write(line.encode() + b"\n")

    def ask(self, line: str, event: str, timeout=5.0):
        """Send a command; the first event of that kind printed after it."""
        self.drain()
        self.command(line)
        return self.wait_new(lambda e: e["event"] == event, timeout, drain=False)

    def send(self, sig):
        """Send sig to it (to its whole session when it has one of its own)."""
        try:
            if self.new_session:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def stop(self, sig=signal.SIGTERM):
        """Send sig; (exit status, seconds it took to exit)."""
        t0 = time.monotonic()
        self.send(sig)
        return self.proc.wait(10), time.monotonic() - t0

    def stop_reported(self, sig=signal.SIGTERM):
        """Stop it with a signal; (exit code, its "stopped" event, its stderr)."""
        code, _ = NodeProcess.stop(self, sig)
        stopped = self.wait(lambda e: e["event"] == "stopped", 5) if self.as_json else None
        return code, stopped, self.stderr_text()

    def group_gone(self) -> bool:
        """Whether nothing is left of its session (it and whatever it started)."""
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return True
        return False

    def kill(self):
        """SIGKILL it (and, in its own session, anything it started)."""
        if self.proc.poll() is None:
            self.send(signal.SIGKILL)
        self.proc.wait(10)

    def close(self):
        self.kill()
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


class Spawner:
    """For a fixture: `with Spawner(cls) as make: yield make`; every process made is closed
    at the end."""

    def __init__(self, cls):
        self.cls = cls
        self.started: list = []

    def __call__(self, *args, **kwargs):
        p = self.cls(*args, **kwargs)
        self.started.append(p)
        return p

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.started:
            p.close()
