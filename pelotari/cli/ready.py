"""`pelotari wait PID`: go on once a command started in the background is ready.

A shell runs `pelotari backbone &` and goes straight on to the next line, before the backbone
has bound its socket; `pelotari sub &` goes on before the backbone has signed the subscriber
on, so a message published at once is not delivered to it. So every long-running command says
when it is ready (announce()): a server once its sockets and its --metrics server listen,
`pelotari sub` once the backbone has acknowledged its subscription (a message published after
that reaches it). It does so with a small file named after its process ID in a directory of
the user's own (mode 0700): `$XDG_RUNTIME_DIR/pelotari`, else `pelotari-UID` in the temporary
directory. `pelotari wait PID` (`$!` after `command &`) returns once that process, or one it
started (`bash tools/run backbone &`, `timeout 60 pelotari sub &`), has said so, and fails at
once if it ends first.

Each file holds the process's start time (/proc/PID/stat), so a file a killed process left
behind is never taken for a new process given the same ID; a process removes its file when it
exits, and any it finds stale when it announces.
"""
import atexit
import json
import os
import stat
import tempfile
import time
from pathlib import Path

import click

from pelotari.cli import main
from pelotari.cli.common import FiniteRange

POLL = 0.02  # seconds between looks while waiting (a stat or two; descendants every 10th)


def directory() -> Path:
    """Where this user's commands record that they are ready."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        return Path(runtime) / "pelotari"
    return Path(tempfile.gettempdir()) / f"pelotari-{os.geteuid()}"


def _private(path: Path, create: bool) -> Path:
    """path, a directory only this user can use (made when create); OSError otherwise."""
    if create:
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise OSError(f"{path} is not a directory of this user's alone (mode 0700)")
    return path


def _usable(folder: Path) -> None:
    """Nothing if folder is this user's alone or not made yet; else a one-line error."""
    try:
        _private(folder, create=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        why = f"{exc.filename}: {exc.strerror}" if exc.strerror else str(exc)
        raise click.ClickException(f"{why}, so no command can record there that it is ready: "
                                   "remove it (or give it to this user, mode 0700)") from None


def start_ticks(pid: int) -> int | None:
    """When process pid started (clock ticks since boot), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])  # field 22 of proc(5); fields[0] is field 3 (state)


def _record(folder: Path, pid: int) -> Path:
    return folder / f"ready-{pid}.json"


def is_ready(pid: int, folder: Path | None = None) -> bool:
    """Whether the process pid (the very one running now) has announced it is ready: a record in
    a directory of this user's alone (one others can write to proves nothing)."""
    folder = folder or directory()
    try:
        record = json.loads(_record(_private(folder, create=False), pid).read_text())
    except (OSError, ValueError):
        return False
    started = start_ticks(pid)
    return started is not None and record.get("started") == started


_announced: list[Path] = []


def announce(what: str | None = None) -> None:
    """Record that this process (`what`: the command running) is ready, for `pelotari wait`; the
    record goes when the process exits. Never raises: a failure is one warning line on stderr."""
    if what is None:
        context = click.get_current_context(silent=True)
        what = context.command_path if context is not None else "command"
    pid = os.getpid()
    try:
        folder = _private(directory(), create=True)
        path = _record(folder, pid)
        temporary = folder / f".ready-{pid}.tmp"
        temporary.write_text(json.dumps({"pid": pid, "started": start_ticks(pid),
                                         "command": what, "time": time.time()}))
        os.replace(temporary, path)
    except OSError as exc:
        click.echo(f"warning: cannot record that `{what}` is ready for `pelotari wait`: "
                   f"{exc.strerror or exc}", err=True)
        return
    if not _announced:
        atexit.register(_withdraw)
    _announced.append(path)
    _sweep(folder, pid)


def _withdraw() -> None:
    for path in _announced:
        try:
            path.unlink()
        except OSError:
            pass


def _sweep(folder: Path, me: int) -> None:
    """Remove the records of processes that are gone (killed before they could)."""
    for path in folder.glob("ready-*.json"):
        try:
            pid = int(path.name[len("ready-"):-len(".json")])
            if pid != me and not is_ready(pid, folder):
                path.unlink()
        except (ValueError, OSError):
            pass


class _Target:
    """One PID given to `pelotari wait`: ready when it or a descendant has announced."""

    def __init__(self, pid: int):
        import psutil

        self.pid = pid
        try:
            self.process = psutil.Process(pid)
        except psutil.NoSuchProcess:
            raise click.ClickException(f"no process {pid}") from None
        self.family: list[int] = [pid]

    def ended(self) -> bool:
        import psutil

        try:
            return self.process.status() == psutil.STATUS_ZOMBIE  # ended; its shell not told yet
        except psutil.NoSuchProcess:
            return True

    def refresh(self) -> None:
        """Learn the processes it has started since (a wrapper's child, say)."""
        import psutil

        try:
            self.family = [self.pid] + [p.pid for p in self.process.children(recursive=True)]
        except psutil.NoSuchProcess:
            self.family = [self.pid]

    def describe(self) -> str:
        """'process 1234 (pelotari sub --count 3)'."""
        import psutil

        try:
            words = self.process.cmdline()
        except psutil.Error:
            words = []
        if len(words) > 1 and Path(words[1]).name == "pelotari":  # python .../bin/pelotari ...
            words = words[1:]
        elif words[1:3] == ["-m", "pelotari"]:  # python -m pelotari ...
            words = words[2:]
        shown = " ".join([Path(words[0]).name, *words[1:]])[:80] if words else ""
        return f"process {self.pid}" + (f" ({shown})" if shown else "")

    def ready(self, folder: Path) -> bool:
        return any(is_ready(pid, folder) for pid in self.family)


@main.command()
@click.argument("pids", metavar="PID...", nargs=-1, required=True, type=click.IntRange(1))
@click.option("--timeout", type=FiniteRange(0), default=60.0, show_default=True,
              help="Give up after this many seconds (exit status 1).")
def wait(pids, timeout):
    """Wait until pelotari commands started in the background are ready.

    PID is a process ID, as the shell's `$!` gives it after `command &` (after `a | b &`, b's).
    The command, or one it started (through `bash tools/run` or `timeout`, say), is ready once
    it says so:
    `pelotari backbone` when its UDP socket and --metrics server listen; `pelotari sub` when
    the backbone has acknowledged its subscription, so that a message published after that
    reaches it; the prototari, swarm, potato and bully nodes when they listen (and serve
    --metrics). Exit status 0 once every PID is ready; 1 as soon as one ends before it was
    ready, or after --timeout seconds. It must run as the same user as the commands.

    \b
      pelotari backbone --metrics 9466 & pelotari wait $!
      pelotari sub --count 3 > got.txt & pelotari wait $! && pelotari pub a b c
    """
    targets = [_Target(pid) for pid in pids]
    folder = directory()
    deadline = time.monotonic() + timeout
    looks = 0
    while True:
        if looks % 10 == 0:
            for t in targets:
                t.refresh()
            _usable(folder)
        looks += 1
        waiting = []
        for t in targets:
            if t.ready(folder):
                continue
            if t.ended():
                raise click.ClickException(f"process {t.pid} ended before it was ready")
            waiting.append(t)
        if not waiting:
            return
        targets = waiting
        if time.monotonic() >= deadline:
            raise click.ClickException(f"{targets[0].describe()} is not ready after {timeout:g} s")
        time.sleep(POLL)
