"""Processes a benchmark starts: `pelotari ... --json` commands whose events are read without
blocking, commanded on stdin, and stopped with everything they started."""
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import psutil


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
        """Signal its process group; SIGKILL after 5 s."""
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
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
