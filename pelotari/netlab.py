"""A real LAN on one machine: network namespaces joined by a bridge (root only).

Used by the tests (the `lan` fixture) and by `pelotari lan-demo`.

    with LanHarness() as lan:
        a = lan.add_host("a")            # namespace, veth, 10.<k>.0.2/24 with a broadcast address
        proc = lan.spawn(a, [...])       # a process inside the host's namespace
        lan.loss(a, 20)                  # drop 20 % of UDP arriving at a

Loss uses tc netem when the kernel has it, else an nftables `numgen random` rule (the project's
CI kernel is built without netem). Every namespace, link and rule is removed on close: each is
recorded *before* it is created, so an interruption half-way through leaves nothing behind, and
every process is started in its own process group, which close() kills (with anything else
still running in the harness's namespaces).
"""
import itertools
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass

_counter = itertools.count()


def available() -> str:
    """Why the harness cannot run here ('' if it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip"):
        return "iproute2 (ip) is not installed"
    return ""


def _sh(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, check=check)


@dataclass
class Host:
    name: str
    namespace: str
    interface: str
    address: str


class LanHarness:
    """Namespaced hosts on one bridge, with addresses inside the namespaces only."""

    def __init__(self):
        n = next(_counter)
        self.tag = f"pt{os.getpid() % 10000}x{n}"
        self.bridge = f"{self.tag}br"[:15]
        self.subnet = f"10.{200 + (os.getpid() + n) % 50}.{n % 250}"
        self.hosts: list[Host] = []
        self.procs: list[subprocess.Popen] = []
        # What close() removes, recorded before it is created (removing what was never made
        # is harmless; missing what was made leaks it).
        self.namespaces: list[str] = []
        self.links: list[str] = [self.bridge]
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "link", "set", self.bridge, "up")

    def add_host(self, name: str) -> Host:
        index = len(self.namespaces) + 2  # every attempt counts: names stay unique
        ns = f"{self.tag}{name}"[:30]
        outside, inside = f"{self.tag}{index}"[:15], f"{self.tag}{index}i"[:15]
        self.namespaces.append(ns)
        _sh("ip", "netns", "add", ns)
        self.links.append(outside)  # deleting one end of a veth deletes both
        _sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _sh("ip", "link", "set", inside, "netns", ns)
        _sh("ip", "link", "set", outside, "master", self.bridge)
        _sh("ip", "link", "set", outside, "up")
        address = f"{self.subnet}.{index}"
        self.exec_in(ns, "ip", "link", "set", "lo", "up")
        self.exec_in(ns, "ip", "addr", "add", f"{address}/24", "brd", "+", "dev", inside)
        self.exec_in(ns, "ip", "link", "set", inside, "up")
        host = Host(name, ns, inside, address)
        self.hosts.append(host)
        return host

    @staticmethod
    def exec_in(namespace: str, *argv, check=True):
        return _sh("ip", "netns", "exec", namespace, *argv, check=check)

    def spawn(self, host: Host, argv: list[str], **popen) -> subprocess.Popen:
        """Start a process inside the host's namespace, in a process group of its own (so a
        Ctrl-C at the terminal does not reach it; close() kills the group)."""
        popen.setdefault("start_new_session", True)
        proc = subprocess.Popen(["ip", "netns", "exec", host.namespace, *argv], **popen)
        self.procs.append(proc)
        return proc

    def loss(self, host: Host, percent: int) -> str:
        """Drop `percent` % of the UDP datagrams arriving at host; return the mechanism used."""
        res = self.exec_in(host.namespace, "tc", "qdisc", "add", "dev", host.interface, "root",
                           "netem", "loss", f"{percent}%", check=False)
        if res.returncode == 0:
            return "netem"
        if not shutil.which("nft"):
            raise RuntimeError("no tc netem in this kernel and no nft to emulate loss")
        rules = ("table inet loss {\n chain input {\n  type filter hook input priority 0;\n"
                 f"  meta l4proto udp numgen random mod 100 < {percent} drop\n }}\n}}\n")
        subprocess.run(["ip", "netns", "exec", host.namespace, "nft", "-f", "-"], input=rules,
                       text=True, check=True, capture_output=True)
        return "nftables"

    def close(self) -> None:
        """Kill every process started here (its whole group) and any other process still in
        one of the namespaces, then remove the namespaces and links. SIGINT and SIGTERM wait
        until it is done (a second Ctrl-C cannot leave half of it behind)."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for proc in self.procs:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # a session leader: pgid == pid
                except (ProcessLookupError, PermissionError):
                    pass
                if proc.poll() is None:
                    proc.kill()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            for ns in self.namespaces:
                res = _sh("ip", "netns", "pids", ns, check=False)
                for pid in res.stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                _sh("ip", "netns", "del", ns, check=False)
            for link in reversed(self.links):
                _sh("ip", "link", "del", link, check=False)
            self.procs, self.namespaces, self.links = [], [], []
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
