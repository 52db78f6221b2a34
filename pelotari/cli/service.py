"""What every long-running `pelotari` command shares to run as a service: output that never
blocks the event loop (events as text or JSON lines), stdin read in a thread (a terminal, a pipe,
/dev/null or closed), the standard fds kept open, and the signals that stop it cleanly."""
import asyncio
import collections
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

MAX_LINE = 65536  # bytes per stdin line (prototari's largest DATA is 65,503 bytes)
OUTPUT_LIMIT = 1 << 20  # bytes of output waiting per stream (stdout, stderr) before lines drop
DRAIN_TIMEOUT = 2.0  # seconds a stopping command waits for a slow reader to take what is left
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, a service stop, a hangup
# Every long-running command's exit status after Ctrl-C (128 + SIGINT), once it has said its one
# closing line: the shell's convention, so a script can tell an interrupted run from a finished
# one. A service stopped by SIGTERM, SIGHUP or `quit` ends with 0 (a clean stop).
INTERRUPTED = 128 + signal.SIGINT


def ensure_standard_fds():
    """Open /dev/null on any of fds 0-2 that is closed (`prog <&-`), so that no socket is given
    one of those numbers and then read as stdin or written as output."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            new = os.open(os.devnull, os.O_RDWR)
            if new != fd:
                os.dup2(new, fd)
                os.close(new)
    # Python leaves sys.stdin/stdout/stderr as None for an fd closed at start: give them the
    # /dev/null now in its place, so that code writing to them needs no check.
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))


class Writer(threading.Thread):
    """Writes the lines queued for one fd (os.write: no Python buffer, no lock a stuck write
    could hold at exit). At most `limit` bytes wait; a line that does not fit (or any line
    once the fd is broken: its reader is gone) is dropped and counted."""

    def __init__(self, fd, limit):
        super().__init__(daemon=True, name=f"output-{fd}")
        self.fd, self.limit = fd, limit
        self.lines: collections.deque[bytes] = collections.deque()
        self.queued = 0  # bytes in lines
        self.writing = False
        self.dropped = 0
        self.broken = False
        self.cond = threading.Condition()

    def put(self, data: bytes, force=False) -> bool:
        with self.cond:
            if self.broken or (not force and self.lines and self.queued + len(data) > self.limit):
                self.dropped += 1
                return False
            self.lines.append(data)
            self.queued += len(data)
            self.cond.notify()
            return True

    def run(self):
        while True:
            with self.cond:
                while not self.lines:
                    self.cond.wait()
                data = self.lines.popleft()
                self.writing = True
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError:  # EPIPE (the reader is gone), EBADF...: drop from now on
                with self.cond:
                    self.broken = True
                    self.dropped += 1 + len(self.lines)
                    self.lines.clear()
                    self.queued = 0
            with self.cond:
                self.queued -= len(data) if not self.broken else 0
                self.writing = False
                self.cond.notify_all()

    def drain(self, deadline: float) -> None:
        with self.cond:
            while (self.lines or self.writing) and not self.broken:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.cond.wait(left)


class Output:
    """stdout and stderr, each written by a thread of its own, so that a reader that is slow,
    stopped or gone never blocks the event loop (and with it the heartbeat). What cannot wait
    is dropped and counted; the first drop is reported by one line on stderr. As a context
    manager, close() at the end."""

    def __init__(self, as_json, limit=OUTPUT_LIMIT, time_key="time", label=True):
        self.as_json = as_json
        self.time_key = time_key  # the JSON field of the wall-clock time
        self.label = label  # text lines name the event after the time
        self.encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        self.writers = {fd: Writer(fd, limit) for fd in (1, 2)}
        for w in self.writers.values():
            w.start()
        self.warned = False

    @property
    def dropped(self) -> int:
        return sum(w.dropped for w in self.writers.values())

    def line(self, text: str, err=False, force=False) -> None:
        data = (text + "\n").encode(self.encoding, "backslashreplace")
        if self.writers[2 if err else 1].put(data, force) or self.warned:
            return
        self.warned = True
        self.writers[2].put(f"{time.strftime('%H:%M:%S')} warning output cannot keep up (or its "
                            "reader is gone): lines are dropped and counted (output_dropped in "
                            "the stopped event)\n".encode())

    def event(self, event, text=None, /, err=False, force=False, **fields):
        """One event: a JSON line on stdout (json.dumps escapes every control and non-ASCII
        character), or a text line (`text`, else the fields' values; on stderr when err). A
        field may be named `text` or `event` too (positional-only parameters)."""
        if self.as_json:
            self.line(json.dumps({self.time_key: time.time(), "event": event, **fields}),
                      force=force)
        else:
            text = text if text is not None else " ".join(f"{v}" for v in fields.values())
            label = f" {event:<7}" if self.label else ""
            self.line(f"{time.strftime('%H:%M:%S')}{label} {text}", err, force)

    def listing(self, event, lines, field="lines"):
        """Lines for a person (e.g. `help`): as they are on stdout, or one event with them in
        `field`."""
        if self.as_json:
            self.event(event, "", **{field: list(lines)})
        else:
            for line in lines:
                self.line(line)

    def hint(self, text):
        """A line on stderr for a person at a terminal (stdin a terminal, text mode only)."""
        if not self.as_json and os.isatty(0):
            self.line(text, err=True)

    def end_of_input(self, what="node"):
        """On a terminal, say that the end of stdin does not stop the command."""
        self.hint(f"end of input: the {what} keeps running until Ctrl-C or SIGTERM")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self, timeout=DRAIN_TIMEOUT) -> None:
        """Give a slow reader up to `timeout` seconds for what is queued; then leave it (the
        threads are daemons: a write nobody reads does not keep the process alive)."""
        deadline = time.monotonic() + timeout
        for w in self.writers.values():
            w.drain(deadline)


class StdinLines(threading.Thread):
    """Reads fd 0 in a thread (any kind of file: a terminal, a pipe, /dev/null, a regular
    file), splits lines itself with a bounded length, and hands ("line", text) or ("error",
    message) to the event loop; ("eof", None) at the end. At most `slots` items wait in the
    loop at once, so a fast pipe cannot fill memory."""

    def __init__(self, loop, deliver, fd=0, limit=MAX_LINE, slots=64):
        super().__init__(daemon=True, name="stdin")
        self.loop, self.deliver, self.fd, self.limit = loop, deliver, fd, limit
        self.slots = threading.Semaphore(slots)
        self.number = 0

    def _put(self, kind, value):
        self.slots.acquire()
        self.loop.call_soon_threadsafe(self.deliver, (kind, value))

    def _line(self, raw: bytes, dropped: int) -> None:
        self.number += 1
        if dropped:
            self._put("error", f"stdin line {self.number}: longer than {self.limit} bytes "
                               f"({dropped + len(raw)}); skipped")
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._put("error", f"stdin line {self.number}: not UTF-8 (byte {exc.start}); skipped")
            return
        self._put("line", text.rstrip("\r"))

    def run(self):
        buf, dropped = bytearray(), 0
        try:
            while True:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""  # closed or unreadable: the end of input
                if not chunk:
                    break
                start = 0
                while start < len(chunk):
                    nl = chunk.find(b"\n", start)
                    piece = chunk[start:] if nl < 0 else chunk[start:nl]
                    if dropped:
                        dropped += len(piece)
                    else:
                        buf += piece
                        if len(buf) > self.limit:  # too long: discard it up to its newline
                            dropped, buf = len(buf), bytearray()
                    if nl < 0:
                        break
                    self._line(bytes(buf), dropped)
                    buf, dropped, start = bytearray(), 0, nl + 1
            if buf or dropped:  # a last line without a newline
                self._line(bytes(buf), dropped)
            self._put("eof", None)
        except RuntimeError:  # the loop closed under us: the node is stopping
            pass


async def read_commands(on_line: Callable[[str], None], on_error: Callable[[str], None],
                        on_eof: Callable[[], None] = lambda: None) -> None:
    """Read stdin in a StdinLines thread: each line to on_line, each unreadable one to on_error,
    until the end of input (on_eof). Cancel it to stop reading."""
    lines: asyncio.Queue = asyncio.Queue()
    reader = StdinLines(asyncio.get_running_loop(), lines.put_nowait)
    reader.start()
    while True:
        kind, text = await lines.get()
        reader.slots.release()
        if kind == "eof":
            on_eof()
            return
        (on_error if kind == "error" else on_line)(text)


def exit_if_interrupted(why: str | None) -> None:
    """After a command's closing line: exit with INTERRUPTED if `why` (a Stopper's reason, a
    signal's name) is Ctrl-C's SIGINT; return for any other stop (SIGTERM, SIGHUP, quit)."""
    if why == signal.SIGINT.name:
        import click

        raise click.exceptions.Exit(INTERRUPTED)


class SignalInterrupt:
    """For commands without an event loop: each signal watched raises KeyboardInterrupt, as
    Ctrl-C does, and `came` remembers it even where a library swallowed or replaced that
    exception (py4j does both). `then`, if given, is called (once) first, from the handler."""

    def __init__(self, *signals: int, then: Callable[[], None] | None = None):
        self.came = False
        self.then = then
        self.watch(*signals)

    def watch(self, *signals: int) -> None:
        """Raise KeyboardInterrupt on these signals too, from now on."""
        for sig in signals:
            signal.signal(sig, self._raise)

    def _raise(self, signum, frame):
        if not self.came and self.then is not None:
            self.came = True
            self.then()
        self.came = True
        raise KeyboardInterrupt


class Stopper:
    """What stops a long-running command cleanly: `signals` (each handled from construction until
    close()) or stop(why), e.g. a `quit` command. `why`: the first reason, None if none."""

    def __init__(self, signals=STOP_SIGNALS):
        self.loop = asyncio.get_running_loop()
        self.signals = signals
        self.stopped = asyncio.Event()
        self.reasons: list[str] = []
        for sig in signals:
            self.loop.add_signal_handler(sig, self.stop, sig.name)

    def stop(self, why: str) -> None:
        """Stop, for this reason (a signal's name, "quit")."""
        self.reasons.append(why)
        self.stopped.set()

    @property
    def why(self) -> str | None:
        return self.reasons[0] if self.reasons else None

    def close(self) -> None:
        """Give the signals back their default handling."""
        for sig in self.signals:
            self.loop.remove_signal_handler(sig)


async def run_until_stopped(stopper: Stopper, coros) -> None:
    """Run the coroutines as tasks until the stopper stops; then close it, cancel them and
    raise the first exception one of them ended with (a bug must not pass silently). The
    command is ready from here on (its sockets and --metrics listen): `pelotari wait` is told."""
    from pelotari.cli.ready import announce

    tasks = [asyncio.ensure_future(c) for c in coros]
    announce()
    try:
        await stopper.stopped.wait()
    finally:
        stopper.close()
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception):
            raise result


def quiet_logging(name: str) -> None:
    """Warnings of logger `name` reach the user as events: keep logging's last-resort handler
    from printing them a second time."""
    logger = logging.getLogger(name)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
