"""Processes a benchmark starts: `pelotari ... --json` commands whose events are read without
blocking, commanded on stdin, and stopped with everything they started."""
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable

import psutil

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, a stop, a hangup
STOP_TIMEOUT = 5.0  # seconds processes have, all together, to end after SIGTERM before SIGKILL


class HeldSignals:
    """The STOP_SIGNALS held within it (a teardown is not cut short), then raised if `deliver`."""

    def __init__(self, deliver: bool = True):
        self.deliver = deliver
        self.held: list[int] = []
        self.previous: dict = {}

    def _hold(self, signum, frame):
        if signum not in self.held:
            self.held.append(signum)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # handlers live there only
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # an ignored one stays so
                    self.previous[sig] = signal.signal(sig, self._hold)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            # None: a handler not set from Python; the default is the nearest we can put back
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self.previous = {}
        if self.deliver:
            for sig in self.held:
                signal.raise_signal(sig)


def stop_processes(pids: Iterable[int], sig: int = signal.SIGTERM,
                   timeout: float = STOP_TIMEOUT) -> None:
    """Stop these processes and all they started at once: `sig`, one deadline, then SIGKILL."""
    with HeldSignals():
        tree: list[psutil.Process] = []
        groups = set()
        for pid in pids:
            try:
                root = psutil.Process(pid)
                tree += [root, *root.children(recursive=True)]
                if os.getpgid(pid) == pid:
                    groups.add(pid)
            except (psutil.Error, ProcessLookupError):
                continue
        _signal(groups, tree, sig)
        _, alive = psutil.wait_procs(tree, timeout)
        if alive:
            _signal({g for g in groups if any(p.pid == g for p in alive)}, alive, signal.SIGKILL)
            psutil.wait_procs(alive, timeout)


def _signal(groups: set[int], procs: list[psutil.Process], sig: int) -> None:
    for group in groups:  # a group takes along what left the tree (a dead parent's children)
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            p.send_signal(sig)  # psutil checks that the pid is still the process it was
        except psutil.Error:
            pass


def _children() -> set[tuple[int, float]]:
    found = set()
    for child in psutil.Process().children():
        try:
            found.add((child.pid, child.create_time()))
        except psutil.Error:
            continue
    return found


class Children:
    """Every process started within the block, and theirs, stopped together however it ends."""

    # Owned: the children of this process (from any thread) that were not there at the start,
    # found by the process tree, so a process is owned from the moment it exists, before any
    # code has its handle; their trees and process groups go with them.

    def __init__(self, timeout: float = STOP_TIMEOUT, interrupt: Iterable[int] = ()):
        self.timeout = timeout
        self.interrupt = tuple(interrupt)  # signals raising KeyboardInterrupt within the block
        self.came = 0  # the last signal of `interrupt` that came
        self._before: set[tuple[int, float]] = set()
        self._previous: dict = {}
        self._hook = None

    def _raise(self, signum, frame):
        self.came = signum
        raise KeyboardInterrupt

    def _unraisable(self, unraisable):
        # A KeyboardInterrupt raised where Python can only print it (a callback run right
        # after a fork, which is where a signal coming during Popen's fork lands; a finalizer)
        # is lost: the signal is sent again, to land in our code.
        if self.came and issubclass(unraisable.exc_type, KeyboardInterrupt):
            again = threading.Timer(0.01, os.kill, (os.getpid(), self.came))
            again.daemon = True
            again.start()
        else:
            self._hook(unraisable)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.interrupt:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
                    self._previous[sig] = signal.signal(sig, self._raise)
            if self._previous:
                self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        self._before = _children()
        return self

    def __exit__(self, exc_type, exc, tb):
        # a signal held during the teardown is raised after it, unless the block already ends
        # by an interrupt
        stopping = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        try:
            with HeldSignals(deliver=not stopping):
                stop_processes([pid for pid, _ in _children() - self._before],
                               timeout=self.timeout)
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)
            self._previous = {}
            if self._hook is not None:
                sys.unraisablehook, self._hook = self._hook, None
        if self.came and not stopping:  # an interrupt that was lost all the same
            raise KeyboardInterrupt


class JsonProcess:
    """One `python -m pelotari ARGS` process printing one JSON object per line."""

    def __init__(self, args: list[str], stderr=subprocess.DEVNULL):
        self.p = subprocess.Popen([sys.executable, "-m", "pelotari", *args],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                  start_new_session=True)
        os.set_blocking(self.p.stdout.fileno(), False)
        self._buf = b""
        self.events: list[dict] = []

    def poll(self) -> None:
        """Read the events printed since the last call into `events`."""
        try:
            chunk = os.read(self.p.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def command(self, line: str) -> None:
        """One line on its stdin."""
        try:
            self.p.stdin.write(line.encode() + b"\n")
            self.p.stdin.flush()
        except OSError:
            pass

    def cpu(self) -> float:
        """User + system CPU seconds so far."""
        times = psutil.Process(self.p.pid).cpu_times()
        return times.user + times.system

    def stop(self, sig=signal.SIGTERM) -> None:
        """Signal it and its process group; SIGKILL after STOP_TIMEOUT (stop_processes)."""
        if self.p.poll() is None:
            stop_processes([self.p.pid], sig)
        self.p.wait()


def bound_port(pid: int, kind: int = socket.SOCK_DGRAM, host: str = "127.0.0.1",
               timeout: float = 10.0) -> int:
    """The port a process bound on host (it was asked for any port): read from the kernel's
    socket table, so nothing else can take it between choosing and binding."""
    deadline = time.monotonic() + timeout
    while True:
        for c in psutil.Process(pid).net_connections(kind="inet4"):
            if c.type == kind and c.laddr and c.laddr.ip == host and c.laddr.port:
                return c.laddr.port
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} bound no port on {host} in {timeout} s")
        time.sleep(0.02)


def wait_all(procs: list[JsonProcess], done: Callable[[], bool], timeout: float) -> bool:
    """Read every process's events until done() or timeout; whether done() held."""
    sel = selectors.DefaultSelector()
    for p in procs:
        sel.register(p.p.stdout, selectors.EVENT_READ, p)
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            for key, _ in sel.select(max(0.0, min(0.05, end - time.monotonic()))):
                key.data.poll()
            if done():
                return True
        return done()
    finally:
        sel.close()
