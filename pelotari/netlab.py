"""A real LAN on one machine: network namespaces joined by a bridge (root only).

Used by the tests (the `lan` fixture) and by `pelotari lan-demo`.

    with LanHarness() as lan:
        a = lan.add_host("a")            # namespace, veth, 10.<k>.0.2/24 with a broadcast address
        proc = lan.spawn(a, [...])       # a process inside the host's namespace
        lan.loss(a, 20)                  # drop 20 % of UDP arriving at a
        lan.set_link(a, False)           # cut a off (True heals it)

Namespaces, links and addresses are made over netlink (pyroute2). Loss uses tc netem when the
kernel has it, else an nftables `numgen random` rule (the project's CI kernel is built without
netem). Every namespace, link and rule is removed on close: each is recorded *before* it is
created, so an interruption half-way through leaves nothing behind; a constructor or add_host
that fails removes what it made before raising; every process is started in its own process
group, which close() kills (with anything else still running in the harness's namespaces).
"""
import errno
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
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return "pyroute2 is not installed"
    if not shutil.which("ip"):
        return "iproute2 (ip) is not installed (processes are started with `ip netns exec`)"
    return ""


def _sh(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, check=check)


@dataclass
class Host:
    name: str
    namespace: str
    interface: str
    address: str
    outside: str = ""  # the veth's end on the bridge (set_link(host, False) cuts the host off)


class LanHarness:
    """Namespaced hosts on one bridge, with addresses inside the namespaces only."""

    def __init__(self):
        from pyroute2 import IPRoute

        n = next(_counter)
        self.tag = f"pt{os.getpid() % 10000}x{n}"
        self.bridge = f"{self.tag}br"[:15]
        self.subnet = f"10.{200 + (os.getpid() + n) % 50}.{n % 250}"
        self.hosts: list[Host] = []
        self.procs: list[subprocess.Popen] = []
        # What close() removes, recorded before it is created (removing what was never made
        # is harmless; missing what was made leaks it), unless it existed already (_create).
        self.namespaces: list[str] = []
        self.links: list[str] = []
        self._numbers = itertools.count(2)  # every attempt takes one: names stay unique
        self._ipr = IPRoute()
        try:
            self._create(self.links, self.bridge,
                         lambda: self._ipr.link("add", ifname=self.bridge, kind="bridge"))
            self._ipr.link("set", index=self._index(self.bridge), state="up")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _create(records: list, name: str, make) -> None:
        """make() what is called name, recording it first; one that existed already is someone
        else's, and is not recorded (neither a failed set-up nor close() removes it)."""
        from pyroute2.netlink.exceptions import NetlinkError

        records.append(name)
        try:
            make()
        except (FileExistsError, NetlinkError) as exc:
            if isinstance(exc, FileExistsError) or exc.code == errno.EEXIST:
                records.remove(name)
            raise

    def _index(self, ifname: str, ipr=None) -> int:
        found = (ipr or self._ipr).link_lookup(ifname=ifname)
        if not found:
            raise RuntimeError(f"no link {ifname}")
        return found[0]

    def add_host(self, name: str) -> Host:
        """A namespace with a veth to the bridge, lo and the veth up, and an address; on
        failure, what it made is removed before the exception propagates."""
        from pyroute2 import netns

        number = next(self._numbers)
        ns = f"{self.tag}{name}"[:30]
        outside, inside = f"{self.tag}{number}"[:15], f"{self.tag}{number}i"[:15]
        address = f"{self.subnet}.{number}"
        ipr = self._ipr
        before = len(self.namespaces), len(self.links)
        try:
            self._create(self.namespaces, ns, lambda: netns.create(ns))
            # deleting one end of a veth deletes both: the outside end stands for the pair
            self._create(self.links, outside,
                         lambda: ipr.link("add", ifname=outside, kind="veth", peer=inside))
            ipr.link("set", index=self._index(inside), net_ns_fd=ns)
            ipr.link("set", index=self._index(outside), master=self._index(self.bridge))
            ipr.link("set", index=self._index(outside), state="up")
            self._configure(ns, inside, address)
        except BaseException:
            self._remove(self.namespaces[before[0]:], self.links[before[1]:])
            del self.namespaces[before[0]:], self.links[before[1]:]
            raise
        host = Host(name, ns, inside, address, outside)
        self.hosts.append(host)
        return host

    def _configure(self, ns: str, interface: str, address: str) -> None:
        """Inside the namespace: lo up, the address (broadcast .255) on interface, interface up."""
        from pyroute2 import IPRoute

        with IPRoute(netns=ns, flags=0) as inner:  # flags=0: never create the namespace here
            inner.link("set", index=self._index("lo", inner), state="up")
            index = self._index(interface, inner)
            inner.addr("add", index=index, address=address, prefixlen=24,
                       broadcast=f"{self.subnet}.255")
            inner.link("set", index=index, state="up")

    @staticmethod
    def exec_in(namespace: str, *argv, check=True):
        """Run a command inside a namespace and wait for it."""
        return _sh("ip", "netns", "exec", namespace, *argv, check=check)

    def spawn(self, host: Host, argv: list[str], **popen) -> subprocess.Popen:
        """Start a process inside the host's namespace, in a process group of its own (so a
        Ctrl-C at the terminal does not reach it; close() kills the group)."""
        popen.setdefault("start_new_session", True)
        # `ip netns exec`, not a preexec_fn calling setns: a preexec_fn is unsafe once threads
        # run (lan-demo reads its nodes in threads), and ip also applies /etc/netns/<ns>.
        proc = subprocess.Popen(["ip", "netns", "exec", host.namespace, *argv], **popen)
        self.procs.append(proc)
        return proc

    def set_link(self, host: Host, up: bool) -> None:
        """Cut (False) or heal (True) the host's link, at the bridge's end: the host keeps its
        addresses and sees its carrier go."""
        self._ipr.link("set", index=self._index(host.outside), state="up" if up else "down")

    def loss(self, host: Host, percent: int) -> str:
        """Drop `percent` % of the UDP datagrams arriving at host; return the mechanism used."""
        if not 0 <= percent <= 100:
            raise ValueError(f"loss is a percentage (0 to 100), not {percent}")
        # tc itself, not pyroute2's netem: this kernel has no netem to check that encoding on
        res = self.exec_in(host.namespace, "tc", "qdisc", "add", "dev", host.interface, "root",
                           "netem", "loss", f"{percent}%", check=False)
        if res.returncode == 0:
            return "netem"
        if not shutil.which("nft"):
            raise RuntimeError("no tc netem in this kernel and no nft to emulate loss")
        share = "" if percent == 100 else f" numgen random mod 100 < {percent}"  # < 100: out of range
        rules = ("table inet loss {\n chain input {\n  type filter hook input priority 0;\n"
                 f"  meta l4proto udp{share} drop\n }}\n}}\n")
        subprocess.run(["ip", "netns", "exec", host.namespace, "nft", "-f", "-"], input=rules,
                       text=True, check=True, capture_output=True)
        return "nftables"

    def loss_from(self, host: Host, percent: int, sources: list[str]) -> None:
        """Drop `percent` % of the UDP datagrams arriving at host from the given addresses
        (an nftables `numgen random` rule; 1..99)."""
        if not 0 < percent < 100:
            raise ValueError(f"loss is a percentage (1 to 99), not {percent}")
        rules = ("table inet lossfrom {\n chain input {\n  type filter hook input priority 0;\n"
                 f"  ip saddr {{ {', '.join(sources)} }} meta l4proto udp "
                 f"numgen random mod 100 < {percent} drop\n }}\n}}\n")
        subprocess.run(["ip", "netns", "exec", host.namespace, "nft", "-f", "-"], input=rules,
                       text=True, check=True, capture_output=True)

    def _remove(self, namespaces: list[str], links: list[str]) -> None:
        """Kill every process in the namespaces, delete them, then delete the links (what does
        not exist is skipped)."""
        from pyroute2 import netns
        from pyroute2.netlink.exceptions import NetlinkError

        if namespaces:
            inside = netns.ns_pids()
            for ns in namespaces:
                for pid in inside.get(ns, ()):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    netns.remove(ns)
                except OSError:
                    pass
        for link in reversed(links):
            found = self._ipr.link_lookup(ifname=link)
            if found:
                try:
                    self._ipr.link("del", index=found[0])
                except NetlinkError:
                    pass  # gone meanwhile (a veth goes with its peer's namespace)

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
            if self._ipr is not None:
                self._remove(self.namespaces, self.links)
                self._ipr.close()
                self._ipr = None
            self.procs, self.namespaces, self.links = [], [], []
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
