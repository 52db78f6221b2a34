"""Shared CLI plumbing: one-line errors, address parsing (every protocol's), live status
lines, inert text."""
import os
import re
import sys
import time

import click


class PelotariGroup(click.Group):
    """A group whose commands report user errors as one line, not a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            _deaf_to_stops()  # (exiting: another Ctrl-C must not cut the exit short, -2)
            StatusLine.finish_all()  # "interrupted" on a line of its own, not after the status
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:  # `pelotari sub | head`: the reader is gone, so are we
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(0)
        except (OSError, ValueError) as exc:
            raise click.ClickException(_one_line(exc)) from None

    def list_commands(self, ctx):
        return list(self.commands)  # registration order: the order a new user needs them


def _deaf_to_stops() -> None:
    """Ignore SIGINT and SIGTERM from here on: the process is ending with its status already
    decided, and a signal during the interpreter's shutdown would end it by the signal."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.filename:
            text += f": {exc.filename}"
    return text.splitlines()[0]


def split_address(text: str, default_port: int) -> tuple[str, int]:
    """HOST, HOST:PORT, an IPv6 address, or [IPv6]:PORT -> (host, port), unresolved;
    ValueError (one line naming the text) for a missing host or a bad port."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"bad address {text!r} (an IPv6 one is written [ADDRESS]:PORT)")
        port_text = rest[1:] if rest else str(default_port)
    elif text.count(":") > 1:  # an IPv6 address without a port
        host, port_text = text, str(default_port)
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, str(default_port)
    if not host:
        raise ValueError(f"no host in address {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bad port in address {text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} outside 0..65535")
    return host, port


def resolve_ipv4(address: tuple[str, int]) -> tuple[str, int]:
    """(host, port) with host resolved to an IPv4 address (blocking); ValueError."""
    import socket

    try:
        return socket.gethostbyname(address[0]), address[1]
    except OSError:
        raise ValueError(f"cannot resolve host {address[0]!r}") from None


class AddressType(click.ParamType):
    """HOST:PORT, HOST or :PORT, resolved to an IPv4 address."""

    name = "HOST:PORT"

    def __init__(self, default_port: int):
        self.default_port = default_port

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        if value.startswith(":") and value.count(":") == 1:  # :PORT
            value = "0.0.0.0" + value
        try:
            return resolve_ipv4(split_address(value, self.default_port))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def drawing_allowed(stream) -> bool:
    """Whether stream is a terminal this process may draw on: its foreground process group's."""
    try:
        fd = stream.fileno()
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (AttributeError, ValueError, OSError):
        return False


class StatusLine:
    """A line redrawn in place on a terminal (in its foreground only); plain lines otherwise."""

    _drawn: set = set()  # in-place lines drawn and not yet ended

    @classmethod
    def finish_all(cls) -> None:
        """End every in-place line still drawn (before a closing message)."""
        for line in list(cls._drawn):
            line.finish()

    def __init__(self, stream=None, interval: float = 1.0, plain_interval: float = 10.0):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = interval if self.tty else plain_interval
        self._last = 0.0
        self._width = 0

    def due(self) -> bool:
        """Whether update() would print now."""
        return time.monotonic() - self._last >= self.interval

    def update(self, text: str, force: bool = False) -> None:
        """Show text (at most once per interval unless forced)."""
        if not force and not self.due():
            return
        self._last = time.monotonic()
        if self.tty:
            if not drawing_allowed(self.stream):
                self._width = 0  # in the background: the shell has taken the line over
                return
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            StatusLine._drawn.add(self)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        """End the in-place line."""
        if self.tty and self._width and drawing_allowed(self.stream):
            self.stream.write("\n")
            self.stream.flush()
        self._width = 0
        StatusLine._drawn.discard(self)


def human_rate(value: float) -> str:
    """1234567 → '1.23M'."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"


# What escape_text() escapes: the backslash itself, C0 and C1 controls and DEL (newlines, ESC and
# so terminal escapes), U+2028/U+2029 (line and paragraph separators), and the bidi controls
# (U+061C, U+200E/F, U+202A-E, U+2066-9), which can make a line read other than it is.
_UNSAFE = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                     "\u2066-\u2069]")
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match) -> str:
    c = match.group()
    return _ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def escape_text(text: str) -> str:
    """text as one inert line for a terminal or a log: a backslash becomes \\\\, newline, CR
    and tab \\n \\r \\t, other C0/C1 controls and DEL \\xNN, U+2028/2029 and the bidi
    controls \\uNNNN; everything else (printable non-ASCII included) is kept. Unambiguous: every
    backslash in the result starts an escape."""
    return _UNSAFE.sub(_escape_char, text)


class MetricsAddressType(click.ParamType):
    """PORT, :PORT, HOST:PORT or HOST for --metrics; the host defaults to loopback. For another
    server (`what`, e.g. --http's page server) HOST alone is an error: the metrics port is
    not its default."""

    name = "HOST:PORT"

    def __init__(self, what: str = "the metrics server", port_required: bool = False):
        self.what, self.port_required = what, port_required

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        from pelotari.metrics import DEFAULT_HOST, DEFAULT_PORT

        text = value.strip()
        if text.lstrip("+-").isdigit():
            text = f"{DEFAULT_HOST}:{text}"
        elif text.startswith(":") and text.count(":") == 1:
            text = DEFAULT_HOST + text
        if text.startswith("[") or text.count(":") > 1:
            self.fail(f"{value!r}: {self.what} listens on IPv4 (HOST:PORT)", param, ctx)
        if self.port_required and ":" not in text:
            self.fail(f"{value!r} has no port: HOST:PORT, or PORT alone for {DEFAULT_HOST} (0 "
                      "picks a free one)", param, ctx)
        try:
            return resolve_ipv4(split_address(text, DEFAULT_PORT))
        except ValueError as exc:
            self.fail(f"{value!r}: {exc}", param, ctx)


def metrics_option(fn):
    """The --metrics option every long-running command takes (see start_metrics)."""
    return click.option(
        "--metrics", "metrics", type=MetricsAddressType(), default=None, metavar="HOST:PORT",
        help="Serve Prometheus metrics at http://HOST:PORT/metrics and a JSON status view at "
             "/status (HOST defaults to 127.0.0.1, loopback; PORT alone is enough; 0 picks a "
             "free port and prints it).")(fn)


def start_metrics(address, source, announce=None):
    """A started MetricsServer for `source` on `address` ((host, port)) or None when address is
    None; says where it listens (a line on stderr, or announce(text, url)); a bind failure is
    one line (ClickException)."""
    if address is None:
        return None
    from pelotari.metrics import MetricsServer

    try:
        server = MetricsServer(source, host=address[0], port=address[1]).start()
    except OSError as exc:
        raise click.ClickException(
            f"cannot serve metrics on {address[0]}:{address[1]}: {exc.strerror or exc}") from None
    text = f"metrics at {server.url}/metrics (Prometheus) and {server.url}/status (JSON)"
    if announce is None:
        click.echo(text, err=True)
    else:
        announce(text, server.url)
    return server


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 peer', '2 peers', '1,000 messages' (`many` for an irregular plural)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


class FiniteRange(click.FloatRange):
    """click.FloatRange that also refuses NaN and infinities (which pass its comparisons)."""

    def convert(self, value, param, ctx):
        """The number, or a usage error for one that is not finite or is out of range."""
        import math

        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number
