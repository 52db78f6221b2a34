"""How the bench harness gives its systems a port: any port, and the one bound read back from the
kernel, or a port chosen first and chosen again when it was taken before the system bound it."""
import socket
import subprocess
import sys

import psutil
import pytest

from pelotari.harness import systems
from pelotari.harness.systems import SYSTEMS, System, Unavailable

# A server that binds the port it is given and says so (or dies saying the address is in use).
SERVER = ("import socket, sys, time\n"
          "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
          "s.bind(('127.0.0.1', int(sys.argv[1])))\n"
          "print('listening on 127.0.0.1:%d' % s.getsockname()[1], flush=True)\n"
          "time.sleep(60)\n")


def _bound_udp_ports(pid):
    return {c.laddr.port for c in psutil.Process(pid).net_connections(kind="udp4")}


@pytest.mark.parametrize("name", [n for n, s in SYSTEMS.items() if s.any_port is not None])
def test_a_system_asked_for_any_port_is_found_on_the_port_it_bound(name):
    system = SYSTEMS[name]
    why = system.check()
    if why:
        pytest.skip(f"{name}: {why}")
    server = system.start()
    try:
        assert server.port > 0 and server.sub_port == server.port
        kind = "udp4" if system.transport == socket.SOCK_DGRAM else "tcp4"
        assert {c.laddr.port for c in psutil.Process(server.proc.pid).net_connections(kind)
                if c.laddr} == {server.port}
    finally:
        server.stop()


def test_bound_port_waits_for_the_bind_and_gives_up_on_a_process_that_binds_none():
    from pelotari.harness.procs import bound_port

    late = subprocess.Popen([sys.executable, "-c", "import socket, time; time.sleep(0.3);"
                             "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
                             "s.bind(('127.0.0.1', 0)); print(s.getsockname()[1], flush=True);"
                             "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert bound_port(late.pid) == int(late.stdout.readline())
        with pytest.raises(TimeoutError):
            bound_port(late.pid, socket.SOCK_STREAM, timeout=0.2)
    finally:
        late.kill()
        late.wait()


def test_a_system_given_a_port_taken_meanwhile_is_started_again_on_another(monkeypatch):
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    taken.bind(("127.0.0.1", 0))
    real = systems.free_port
    handed = []

    def first_taken(kind=socket.SOCK_DGRAM):
        handed.append(real(kind) if handed else taken.getsockname()[1])
        return handed[-1]

    monkeypatch.setattr(systems, "free_port", first_taken)
    system = System("test", "fyrehose", "a server on the port it is given",
                    lambda port: [sys.executable, "-c", SERVER, str(port)])
    try:
        server = system.start()
        try:
            assert len(handed) == 2 and server.port == handed[1] != handed[0]
            assert _bound_udp_ports(server.proc.pid) == {server.port}
        finally:
            server.stop()
    finally:
        taken.close()


def test_a_system_that_fails_for_another_reason_is_not_retried():
    starts = []
    system = System("test", "fyrehose", "a server that exits at once",
                    lambda port: starts.append(port) or [sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(Unavailable, match="did not start"):
        system.start()
    assert len(starts) == 1


def test_a_port_that_stays_taken_gives_up_after_the_attempts(monkeypatch):
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    taken.bind(("127.0.0.1", 0))
    monkeypatch.setattr(systems, "free_port", lambda kind=socket.SOCK_DGRAM: taken.getsockname()[1])
    starts = []
    system = System("test", "fyrehose", "a server on the port it is given",
                    lambda port: starts.append(port) or [sys.executable, "-c", SERVER, str(port)])
    try:
        with pytest.raises(Unavailable, match="did not start"):
            system.start(attempts=3)
    finally:
        taken.close()
    assert len(starts) == 3
