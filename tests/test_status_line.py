"""A live status line is drawn only while its process is in the terminal's foreground."""
import os
import pty
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from conftest import wait_for
from pelotari.cli.common import StatusLine, drawing_allowed

pytestmark = pytest.mark.e2e
DEADLINE = 60  # seconds; what takes a second here may take ten on a slow machine
BIN = Path(sys.executable).parent  # the venv's bin: its `pelotari`

CHILD = r"""
import fcntl, os, signal, subprocess, sys, termios
from pelotari.cli.common import StatusLine, drawing_allowed
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
tty = open(2, "w", closefd=False)
other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                         stdin=subprocess.PIPE, preexec_fn=os.setpgrp)
seen = []
line = StatusLine(tty, interval=0)
seen.append(drawing_allowed(tty))
line.update("drawn-1")
os.tcsetpgrp(2, other.pid)
seen.append(drawing_allowed(tty))
line.update("hidden-2")
line.finish()
os.tcsetpgrp(2, os.getpgrp())
seen.append(drawing_allowed(tty))
line.update("drawn-3")
line.finish()
other.stdin.close()
other.wait()
print(seen)
"""


class Terminal:
    """What a pty's other end shows, read as it comes; type() writes keys to it."""

    def __init__(self, master: int):
        self.master = master
        self.text = ""
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every process holding the terminal has closed it
                chunk = b""
            with self.cond:
                self.text += chunk.decode("utf-8", "replace")
                self.cond.notify_all()
            if not chunk:
                return

    def type(self, keys: str):
        os.write(self.master, keys.encode())

    def wait_for(self, pattern: str, start: int = 0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: pattern in self.text[start:], DEADLINE)


def test_drawing_allowed_follows_the_terminals_foreground_process_group():
    master, slave = pty.openpty()
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=slave, stderr=slave,
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
    finally:
        os.close(slave)
    term = Terminal(master)
    try:
        out, _ = child.communicate(timeout=DEADLINE)
        term.reader.join(DEADLINE)
    finally:
        child.kill()
        os.close(master)
    assert child.returncode == 0 and out == "[True, False, True]\n"
    assert term.text == "\rdrawn-1\rdrawn-3\r\n"


INTERRUPTED = r"""
import fcntl, termios
import click
from pelotari.cli.common import PelotariGroup, StatusLine
fcntl.ioctl(0, termios.TIOCSCTTY, 0)

@click.group(cls=PelotariGroup)
def group():
    pass

@group.command()
def run():
    StatusLine(interval=0).update("trial 3 of 20")
    raise KeyboardInterrupt  # Ctrl-C while the line is drawn

group(["run"])
"""


def test_ctrl_c_says_interrupted_on_a_line_of_its_own():
    master, slave = pty.openpty()
    try:
        child = subprocess.Popen([sys.executable, "-c", INTERRUPTED], stdin=slave, stderr=slave,
                                 stdout=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(slave)
    term = Terminal(master)
    try:
        child.wait(timeout=DEADLINE)
        term.reader.join(DEADLINE)
    finally:
        child.kill()
        os.close(master)
    assert child.returncode == 130
    assert term.text == "\rtrial 3 of 20\r\ninterrupted\r\n"


def test_no_terminal_or_no_descriptor_is_never_drawn_on(tmp_path):
    with open(tmp_path / "log", "w") as log:
        assert not drawing_allowed(log)
        line = StatusLine(log, interval=0, plain_interval=0)
        line.update("plain")
    assert (tmp_path / "log").read_text() == "plain\n"  # a log still gets its periodic lines
    assert not drawing_allowed(object())


def _uptime(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as res:
        text = res.read().decode()
    return float(re.search(r"^pelotari_fyrehose_uptime_seconds (\S+)$", text, re.M).group(1))


def test_a_backbone_in_the_background_draws_nothing_until_brought_to_the_foreground(tmp_path):
    import psutil

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    master, slave = pty.openpty()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PS1="$ ")
    try:
        bash = subprocess.Popen(["setsid", "--ctty", "bash", "--norc", "--noprofile", "-i"],
                                stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=env)
    finally:
        os.close(slave)
    term = Terminal(master)
    try:
        term.type(f"pelotari backbone --host 127.0.0.1 --port 0 --stats-interval 0.1 "
                  f"--metrics {port} & pelotari wait $! && echo READY$((6*7))\n")
        assert term.wait_for("READY42"), term.text
        # ten status ticks at least: the old code drew the line at each
        assert wait_for(lambda: _uptime(port) >= 1.0, DEADLINE), term.text
        assert "listening on 127.0.0.1:" in term.text and "push/s" not in term.text
        mark = len(term.text)
        term.type("fg\n")
        assert term.wait_for("push/s", mark), term.text[mark:]
        term.type("\x03")
        assert term.wait_for("stopped after", mark), term.text[mark:]
        term.type("exit\n")
        bash.wait(DEADLINE)
    finally:
        try:
            family = psutil.Process(bash.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        for p in family + [bash]:
            try:
                p.kill()
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass
        bash.wait(DEADLINE)
        term.reader.join(DEADLINE)
        os.close(master)
