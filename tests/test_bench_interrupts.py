"""Issue 27: a bench stopped by Ctrl-C, by a second Ctrl-C during its teardown, or by SIGTERM, at
several moments (its first node starting, its network up, mid-measurement), leaves no process
it started: not one, not even one re-parented to PID 1 (they are found by an environment
marker every process the bench starts inherits); it ends with status 130 and one line."""
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import uuid

import psutil
import pytest

from conftest import PELOTARI, wait_for
from fastpath.implementation import compiled

pytestmark = pytest.mark.e2e

MARKER = "PELOTARI_BENCH_INTERRUPT_TEST"
DEADLINE = 60.0  # s: for every wait, on a machine ten times slower than ours
PYTHON = os.path.realpath(sys.executable)


class Bench:
    """A bench command started as a shell starts a job: in a process group of its own."""

    def __init__(self, *args: str):
        self.marker = uuid.uuid4().hex
        self.proc = subprocess.Popen(PELOTARI + list(args), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True,
                                     env={**os.environ, MARKER: self.marker})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.peak = 0  # the most processes it had running at once

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def running(self) -> int:
        """How many Python processes (not e.g. `git`) run below it, zombies left out."""
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return 0
        n = 0
        for p in tree:
            try:
                n += p.exe() == PYTHON and p.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                pass
        self.peak = max(self.peak, n)
        return n

    def wait_running(self, predicate, what: str) -> None:
        """Wait until predicate(processes running) holds; fail if the bench ended first."""
        assert wait_for(lambda: self.proc.poll() is not None or predicate(self.running()),
                        DEADLINE), f"never {what}: {''.join(self.lines)}"
        assert self.proc.poll() is None, f"ended before {what}: {''.join(self.lines)}"

    def ctrl_c(self) -> None:
        """SIGINT to its group, as a terminal's Ctrl-C (not to nodes in sessions of their own)."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def finish(self) -> str:
        """Its stderr, once it has ended; fails if it has not within the deadline."""
        try:
            self.proc.wait(DEADLINE)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._reader.join(DEADLINE)
        return "".join(self.lines)

    def left(self) -> list[str]:
        """The processes it started that are still running (killed, so no test inherits them)."""
        found = []
        for p in psutil.process_iter():
            try:
                if p.environ().get(MARKER) == self.marker and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(" ".join(p.cmdline()[3:7]))
                    p.kill()
            except psutil.Error:
                continue
        return found


# Below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768 and up here), where
# no socket of another test is given a port by bind(0) or connect() between our check and the
# bench's own bind (a port from bind(0), released, was taken so once in CI).
FIXED_PORTS = range(20000, 32000)


def _free(kind, port: int, hosts=("127.0.0.1",)) -> bool:
    for host in hosts:
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def _udp_port_pair() -> int:
    """A UDP port free on 127.0.0.1–.3, with the one 10 above it (bully's sync)."""
    hosts = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    for _ in range(100):
        port = random.choice(FIXED_PORTS)
        if _free(socket.SOCK_DGRAM, port, hosts) and _free(socket.SOCK_DGRAM, port + 10, hosts):
            return port
    raise RuntimeError("no free port pair")


def _tcp_port() -> int:
    """A TCP port free on 127.0.0.1 (the potato bench's first client's)."""
    for _ in range(100):
        port = random.choice(FIXED_PORTS)
        if _free(socket.SOCK_STREAM, port):
            return port
    raise RuntimeError("no free port")


def bully_bench():
    """3 processes elect, then 2 sync: the smallest real run."""
    return Bench("bully", "bench", "--sizes", "3", "--sync-nodes", "2", "--seeds", "1",
                 "--port", str(_udp_port_pair()), "-o", os.devnull)


def potato_bench():
    """The A-G mesh first: 7 clients started one after the other."""
    return Bench("potato", "bench", "--port", str(_tcp_port()), "-o", os.devnull)


def _interrupted_cleanly(bench: Bench) -> None:
    err = bench.finish()
    left = bench.left()
    assert not left, (left, err)
    assert bench.proc.returncode == 130, (bench.proc.returncode, err)
    assert "Traceback" not in err and err.splitlines()[-1:] == ["interrupted"], err


BENCHES = pytest.mark.parametrize("make,network", [(bully_bench, 3), (potato_bench, 7)],
                                  ids=["bully", "potato"])  # network: its first one's nodes


@pytest.mark.parametrize("first_only", [True, False],
                         ids=["its first node starts", "its network is started"])
@BENCHES
def test_ctrl_c_while_the_nodes_start_stops_every_node(make, network, first_only):
    bench = make()
    bench.wait_running(lambda n: n >= (1 if first_only else network), "its nodes start")
    bench.ctrl_c()
    _interrupted_cleanly(bench)


def test_ctrl_c_mid_election_stops_every_node():
    bench = bully_bench()
    bench.wait_running(lambda n: n >= 3, "its network is started")
    bench.wait_running(lambda n: n < bench.peak, "its leader is killed")  # the survivors elect
    bench.ctrl_c()
    _interrupted_cleanly(bench)


@BENCHES
def test_a_second_ctrl_c_during_the_teardown_still_stops_every_node(make, network):
    bench = make()
    bench.wait_running(lambda n: n >= network, "its network is started")
    bench.ctrl_c()
    # the teardown has begun once the first node is gone
    assert wait_for(lambda: bench.proc.poll() is not None or bench.running() < network, DEADLINE)
    if bench.proc.poll() is None:
        bench.ctrl_c()
    _interrupted_cleanly(bench)


@BENCHES
def test_sigterm_stops_the_bench_and_every_node(make, network):
    bench = make()
    bench.wait_running(lambda n: n >= network, "its network is started")
    bench.proc.terminate()
    _interrupted_cleanly(bench)


def _browser_running(bench: Bench) -> bool:
    try:
        tree = psutil.Process(bench.proc.pid).children(recursive=True)
    except psutil.Error:
        return False
    for p in tree:
        try:
            if "chromium" in p.name() and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            pass
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_the_mixed_potato_bench_stopped_with_pages_open_stops_the_browser_and_every_node(sig):
    bench = Bench("potato", "bench", "--mixed", "--port", str(_tcp_port()), "-o", os.devnull)
    assert wait_for(lambda: bench.proc.poll() is not None or _browser_running(bench),
                    DEADLINE), bench.lines
    assert bench.proc.poll() is None, bench.lines
    bench.ctrl_c() if sig == signal.SIGINT else bench.proc.terminate()
    _interrupted_cleanly(bench)


def test_swarm_bench_stopped_during_a_measure_in_a_child_stops_the_child():
    bench = Bench("swarm", "bench", "--only", "memory", "--stack", "python", "-o", os.devnull)
    bench.wait_running(lambda n: n >= 1, "its child starts")
    bench.proc.terminate()
    _interrupted_cleanly(bench)


@pytest.mark.skipif(compiled("swarmload") is None,
                    reason="the sockets measure needs the Cython build (and selected)")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_swarm_bench_stopped_while_its_node_serves_stops_the_node(sig):
    bench = Bench("swarm", "bench", "--only", "sockets", "--stack", "cython", "--peers", "2000",
                  "--rate", "5000", "--seconds", "30", "-o", os.devnull)
    assert wait_for(lambda: bench.proc.poll() is not None or any(
        "peers ready" in line for line in bench.lines), DEADLINE), bench.lines
    assert bench.proc.poll() is None, bench.lines
    bench.ctrl_c() if sig == signal.SIGINT else bench.proc.terminate()
    _interrupted_cleanly(bench)


@pytest.mark.parametrize("command", [
    ["bench", "--systems", "pelotari", "-S", "16", "-N", "1", "-d", "0.5", "--repeats", "1"],
    ["soak", "--system", "pelotari", "-m", "0.1", "--rate", "1000"],
    ["bench", "--systems", "pelotari", "--latency-rates", "1000,2000", "--trials", "3", "-d",
     "0.5"]], ids=["bench", "soak", "latency-rates"])
def test_sigterm_to_the_side_by_side_bench_stops_its_server_and_load_generators(command,
                                                                                 tmp_path):
    bench = Bench(*command, "-o", str(tmp_path / "out.jsonl"))
    bench.wait_running(lambda n: n >= 3, "its server and both load generators run")
    bench.proc.terminate()
    _interrupted_cleanly(bench)


# ---- the mechanism itself: pelotari.harness.procs.Children, in this process -------------------

# A child that, asked to stop, presses Ctrl-C on its parent and takes half a second to go:
# the parent's teardown is then under way when its Ctrl-C comes.
_CTRL_C_ON_STOP = """
import os, signal, sys, time
def stop(*_):
    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(0.5)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:
    signal.pause()
"""


def _child(code="import signal; print('ready', flush=True); signal.pause()", **popen):
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             **popen)
    assert child.stdout.readline() == "ready\n"
    return child


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (a grandchild is reaped by PID 1, in its time)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_children_stops_what_the_block_started_and_its_children_only():
    from pelotari.harness.procs import Children

    before = _child()
    try:
        with Children():
            plain = _child()
            # a session of its own, with a child of its own
            leader = _child("import subprocess, sys, signal\n"
                            "subprocess.Popen([sys.executable, '-c', 'import signal; "
                            "signal.pause()'])\nprint('ready', flush=True)\nsignal.pause()",
                            start_new_session=True)
            assert wait_for(lambda: psutil.Process(leader.pid).children(), DEADLINE)
            grandchild = psutil.Process(leader.pid).children()[0]
        assert all(_gone(p.pid) for p in (plain, leader, grandchild))
        assert before.poll() is None
    finally:
        before.kill()
        before.wait()


def test_ctrl_c_during_the_teardown_interrupts_once_it_is_done():
    from pelotari.harness.procs import Children

    with pytest.raises(KeyboardInterrupt), Children():
        child = _child(_CTRL_C_ON_STOP)
    assert _gone(child.pid)  # waited for, not left behind


def test_ctrl_c_during_the_teardown_of_an_interrupted_block_is_not_a_second_interrupt():
    from pelotari.harness.procs import Children

    with pytest.raises(KeyboardInterrupt) as raised, Children():
        child = _child(_CTRL_C_ON_STOP)
        raise KeyboardInterrupt("the first")
    assert str(raised.value) == "the first" and _gone(child.pid)


def test_sigterm_within_the_block_is_an_interrupt_and_its_handler_is_put_back():
    from pelotari.harness.procs import Children

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), Children(interrupt=(signal.SIGTERM,)):
        child = _child()
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before and _gone(child.pid)


def test_an_interrupt_python_drops_where_it_lands_is_raised_again(capsys):
    # As a signal coming during Popen's fork lands in a callback run after the fork, where
    # Python prints the KeyboardInterrupt and goes on (the soak ran to its end once): here, a
    # finalizer.
    from pelotari.harness.procs import Children

    class Dropping:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs here, and its KeyboardInterrupt is dropped
                pass

    hook = sys.unraisablehook
    with pytest.raises(KeyboardInterrupt), Children(interrupt=(signal.SIGTERM,)):
        Dropping()
        wait_for(lambda: False, DEADLINE)  # until the signal, sent again, interrupts it
    assert sys.unraisablehook is hook and "Exception ignored" not in capsys.readouterr().err
