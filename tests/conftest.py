"""Shared fixtures: both codec implementations, a live backbone on 127.0.0.1, raw sockets."""
import importlib
import os
import socket
import sys
import threading
import time

import pytest

from fastpath.implementation import compiled


def implementations(name, twin):
    """{"cython": fastpath.<name>, "python": fastpath.<twin>}; the twin alone where the compiled
    module is not selected (PELOTARI_PURE_PYTHON=1, or not built)."""
    found = {"python": importlib.import_module(f"fastpath.{twin}")}
    if compiled(name) is not None:
        found["cython"] = compiled(name)
    return found


def compiled_tool(name):
    """fastpath.<name>, a benchmark tool that measures the compiled path and so has no twin; skips
    the calling test (or test module) where the compiled modules are not selected."""
    module = compiled(name)
    if module is None:
        pytest.skip(f"fastpath.{name} is a benchmark tool of the compiled path (no twin)",
                    allow_module_level=True)
    return module


CODECS = implementations("codec", "refcodec")


@pytest.fixture(params=sorted(CODECS))
def codec(request):
    """Each codec implementation in turn (the Cython build and the pure-Python reference)."""
    return CODECS[request.param]


class RawPeer:
    """A plain UDP socket on 127.0.0.1 for poking a backbone by hand."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(2.0)

    @property
    def address(self):
        return self.sock.getsockname()

    def send(self, data, addr):
        self.sock.sendto(data, addr)

    def recv(self, timeout=2.0):
        """One datagram, or None after timeout."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recvfrom(70000)
        except socket.timeout:
            return None

    def recv_all(self, quiet=0.2):
        """Every datagram until `quiet` seconds pass with none."""
        out = []
        while (got := self.recv(quiet)) is not None:
            out.append(got)
        return out

    def close(self):
        self.sock.close()


@pytest.fixture
def raw_peer():
    """Factory of RawPeer sockets, closed after the test."""
    peers = []

    def make():
        peer = RawPeer()
        peers.append(peer)
        return peer

    yield make
    for p in peers:
        p.close()


@pytest.fixture
def backbone_factory():
    """Start Backbones on 127.0.0.1 with a free port; all are stopped after the test."""
    from pelotari.fyrehose import Backbone

    started = []

    def make(**overrides):
        overrides.setdefault("host", "127.0.0.1")
        overrides.setdefault("port", 0)
        bb = Backbone(**overrides).start()
        started.append(bb)
        return bb

    yield make
    for bb in started:
        bb.stop()


class HeldBackbone:
    """A backbone whose socket is bound at once and whose loop starts at release(): what is
    sent before then waits in the socket, so the loop's first receive batch holds a whole
    burst however slow or loaded the machine (a running loop may take a burst one by one)."""

    def __init__(self, **options):
        from pelotari.fyrehose.backbone import BackboneLoop
        from pelotari.fyrehose.batchio import set_buffers

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        set_buffers(self.sock, 8 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.address = self.sock.getsockname()
        self.loop = BackboneLoop(self.sock.fileno(), first_sequence=100, **options)
        self.thread = None

    def queued(self, timeout=10.0):
        """Wait until a datagram waits in the socket (it is left there)."""
        self.sock.settimeout(timeout)
        self.sock.recvfrom(70000, socket.MSG_PEEK)
        self.sock.settimeout(None)

    def release(self):
        """Start (or restart) the loop."""
        self.thread = threading.Thread(target=self.loop.serve, daemon=True)
        self.thread.start()

    def pause(self):
        """Stop the loop (its table stays); release() goes on from here."""
        self.loop.stop()
        self.thread.join(10.0)

    def stats(self):
        return self.loop.stats()

    def close(self):
        if self.thread is not None and self.thread.is_alive():
            self.loop.stop()
            self.thread.join(5.0)
        self.sock.close()


@pytest.fixture
def held_backbone():
    """Factory of HeldBackbones on 127.0.0.1 (first sequence 100), closed after the test."""
    made = []

    def make(**options):
        made.append(HeldBackbone(**options))
        return made[-1]

    yield make
    for bb in made:
        bb.close()


@pytest.fixture
def backbone(backbone_factory):
    """One running backbone (first sequence 1000, default window)."""
    return backbone_factory(first_sequence=1000)


def wait_for(predicate, timeout=5.0, interval=0.01):
    """Poll predicate until true; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


PELOTARI = [sys.executable, "-m", "pelotari"]


def wait_event(events, seen, predicate, timeout):
    """The first event satisfying predicate, from those already `seen` and then from the
    `events` queue (each appended to `seen`); None after timeout."""
    import queue

    deadline = time.monotonic() + timeout
    for ev in seen:
        if predicate(ev):
            return ev
    while time.monotonic() < deadline:
        try:
            ev = events.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(ev)
        if predicate(ev):
            return ev
    return None


@pytest.fixture
def lan():
    """A namespaced LAN (tests/lan.py); skipped, with the reason, where it cannot run."""
    from pelotari import netlab as lan_module

    why = lan_module.available()
    if why:
        pytest.skip(why)
    with lan_module.LanHarness() as harness:
        yield harness


@pytest.fixture
def port_pair():
    """A UDP port and the next one for prototari nodes on 127.0.0.2 and 127.0.0.3 (unicast,
    broadcast), held for the test: prototari puts every node on one shared pair, so the numbers
    precede the nodes; 127.0.0.1:port stays bound (no wildcard or 127.0.0.1 bind takes it) and
    port + 1 is shared with SO_REUSEPORT as the nodes' listeners share it (no one else binds it)."""
    for _ in range(50):
        unicast = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        broadcast = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        broadcast.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        broadcast.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            unicast.bind(("127.0.0.1", 0))
            port = unicast.getsockname()[1]
            broadcast.bind(("", port + 1))  # port 65535 has no next: OverflowError
        except (OSError, OverflowError):
            unicast.close()
            broadcast.close()
            continue
        try:
            yield port
        finally:
            unicast.close()
            broadcast.close()
        return
    raise RuntimeError("no free port pair")


# The fast developer loop is `pytest -m "not slow"` (under 30 s; CI runs everything). Slow:
# every test over about half a second (marked where it stands), every e2e test (real processes),
# every test using Spark or a network namespace, and the modules below, whose tests drive real sockets, timers or large simulated meshes (the rules
# they check are tested fast on the sans-IO cores: test_*_core.py, test_backbone_core.py).
SLOW_FIXTURES = {"spark", "lan"}
SLOW_MODULES = {
    "test_backbone", "test_backbone_gso", "test_backbone_packing", "test_hostile_fyrehose",
    "test_repair", "test_harness_ports", "test_netlab", "test_codec_crosscheck",
    "test_bully_node", "test_potato_node", "test_potato_transport", "test_potato_hostile",
    "test_potato_page", "test_potato_browser", "test_potato_js",
    "test_prototari_node", "test_swarm_node", "test_swarm_hostile", "test_swarm_load",
    "test_swarm_bench", "test_swarm_path", "test_swarm_sim", "test_report_plots",
    "test_pure_python", "test_loadgen",
}


# The pure-Python pass (PELOTARI_PURE_PYTHON=1, the second pass of `tools/run test`) runs every
# test but those marked `one_build`: the ONE_BUILD_MODULES, which reach no compiled fastpath
# module nor its twin (potato, bully, prototari, the analysis...), so they would run the same code
# twice. The default is to run: a new module is in both passes unless it is listed here, and
# tests/test_sourcecode.py checks that a listed module imports no module that picks a build and
# starts no fyrehose or swarm command.
# PELOTARI_BOTH_BUILDS=1 runs them in the pure pass anyway. (test_trend's swarm simulations do
# run swarm's table, whose twin test_swarm_table, _core and _sim cover on both builds.)
ONE_BUILD_MODULES = {
    "test_potato_core", "test_potato_hostile", "test_potato_node", "test_potato_transport",
    "test_potato_picture", "test_potato_page", "test_potato_browser", "test_potato_js",
    "test_layers_potato", "test_bully_core", "test_bully_javalike", "test_bully_node",
    "test_bully_wire",
    "test_layers_bully", "test_prototari_core", "test_prototari_rules", "test_prototari_node",
    "test_prototari_cli", "test_prototari_attack", "test_prototari_lan",
    "test_prototari_seed_interop", "test_layers_prototari", "test_sim", "test_trend",
    "test_report_plots", "test_sourcecode", "test_packaging", "test_adapter", "test_netlab",
    "test_harness_ports", "test_cli_service", "test_testsuite",
}
PURE_PASS = os.environ.get("PELOTARI_PURE_PYTHON", "") not in ("", "0") and \
    os.environ.get("PELOTARI_BOTH_BUILDS", "") in ("", "0")


def pytest_collection_modifyitems(config, items):
    """Mark as slow: e2e tests, tests using a slow fixture, and the SLOW_MODULES; in the pure
    pass, leave out the `one_build` tests."""
    for item in items:
        if (item.get_closest_marker("e2e") or item.module.__name__ in SLOW_MODULES
                or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)
        if item.module.__name__ in ONE_BUILD_MODULES:
            item.add_marker(pytest.mark.one_build)
        if "spark" in getattr(item, "fixturenames", ()):
            # one worker holds the session's Spark (a JVM) under `pytest -n N --dist loadgroup`
            item.add_marker(pytest.mark.xdist_group("spark"))
    if PURE_PASS:
        same = [item for item in items if item.get_closest_marker("one_build")]
        if same:
            config.hook.pytest_deselected(items=same)
            items[:] = [item for item in items if not item.get_closest_marker("one_build")]


# A test over 1 s is slow by definition: the fast loop names any that is not marked (a hint, not a
# failure: a loaded machine makes fast tests slow too).
SLOW_SECONDS = 1.0
_unmarked_slow = []


def pytest_runtest_logreport(report):
    """Remember a test outside `slow` whose call took over SLOW_SECONDS."""
    if report.when == "call" and report.duration > SLOW_SECONDS and "slow" not in report.keywords:
        _unmarked_slow.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter):
    """List the unmarked slow tests, slowest first."""
    if _unmarked_slow:
        terminalreporter.section(f"over {SLOW_SECONDS:.0f} s but not marked slow")
        for seconds, nodeid in sorted(_unmarked_slow, reverse=True):
            terminalreporter.write_line(f"{seconds:6.2f}s {nodeid}")
