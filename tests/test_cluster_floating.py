"""The cluster's floating address for seed clients (docs/protocols/fyrehose-cluster.md,
"Floating address"): the frame and rules it uses, its usage errors, and, on a namespaced LAN,
three members holding it in turn while a plain `pelotari sub -b FLOAT` and `pub -b FLOAT` go on
through a SIGKILL of the active and a cut of its link.

`python tests/test_cluster_floating.py [--kills 5]` (root) measures the time from SIGKILL to a
seed subscriber's first DELIVER from the new active, for --keepalive 1 and 0.1."""
import json
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from conftest import PELOTARI, wait_for
from nodeproc import NodeProcess

from pelotari.cli import main
from pelotari.fyrehose import floating

PORT = 2323
WRAP = 1 << 48
ACTIVE = re.compile(r"active: epoch (\d+), sequencing from (\d+)")
FOLLOWING = re.compile(r"standby: following the active at ([\d.]+):")
TAKEN = re.compile(r"floating address ([\d.]+) taken \(gratuitous ARP on (\S+)\)")
RELEASED = re.compile(r"floating address ([\d.]+) released")


# ---- the pieces (fast) ---------------------------------------------------------------------

def test_the_gratuitous_arp_frame_byte_for_byte():
    mac = bytes.fromhex("020000c0ffee")
    frame = floating.garp_frame(mac, "192.0.2.10")
    assert frame == bytes.fromhex(
        "ffffffffffff" "020000c0ffee" "0806"  # Ethernet: broadcast, from us, ARP
        "0001" "0800" "06" "04" "0001"  # Ethernet/IPv4 hardware/protocol, sizes, request
        "020000c0ffee" "c000020a"  # sender: us, the floating address
        "000000000000" "c000020a")  # target: unknown hardware address, the same address
    assert len(frame) == 42
    with pytest.raises(ValueError):
        floating.garp_frame(b"\x02\x00", "192.0.2.10")


def test_the_nft_script_replaces_its_own_table_and_dnats_only_the_data_port():
    script = floating.nft_rules(floating.table_name(2323), "192.0.2.10", 2323, "192.0.2.1")
    assert script.startswith("add table ip pelotari_float_2323\n"
                             "delete table ip pelotari_float_2323\n")
    rule = "ip daddr 192.0.2.10 udp dport 2323 dnat to 192.0.2.1"
    assert script.count(rule) == 2  # arriving (prerouting) and local clients (output)
    assert "hook prerouting" in script and "hook output" in script


@pytest.mark.parametrize("text, why", [
    ("192.0.2.10", "ADDR/PREFIX"), ("192.0.2.10/33", "ADDR/PREFIX"), ("::1/64", "ADDR/PREFIX"),
    ("host/24", "ADDR/PREFIX"), ("127.0.0.5/8", "not an address"), ("0.0.0.0/0", "not an"),
    ("224.0.0.1/4", "not an address"), ("192.0.2.0/24", "broadcast"),
    ("192.0.2.255/24", "broadcast")])
def test_a_floating_address_that_is_not_one_is_refused(text, why):
    with pytest.raises(floating.FloatingError, match=why):
        floating.parse_address(text)
    assert floating.parse_address("192.0.2.10/24").network.prefixlen == 24
    assert str(floating.parse_address("192.0.2.10/32").ip) == "192.0.2.10"


CLUSTER = ["backbone", "--host", "127.0.0.61", "--cluster", "t", "--peers", "127.0.0.62",
           "--cluster-key-file", "/nonexistent"]


@pytest.mark.parametrize("args, said", [
    (["backbone", "--floating-address", "192.0.2.10/24", "--floating-dev", "eth0"],
     "--floating-address needs --cluster NAME"),
    (CLUSTER[:-2] + ["--floating-address", "192.0.2.10/24"], "go together"),
    (CLUSTER[:-2] + ["--floating-dev", "eth0"], "go together"),
    (CLUSTER[:-2] + ["--floating-address", "192.0.2.10", "--floating-dev", "eth0"],
     "ADDR/PREFIX"),
    (CLUSTER[:-2] + ["--floating-address", "127.0.0.62/8", "--floating-dev", "eth0"],
     "not an address a host can hold"),
    (CLUSTER[:-2] + ["--floating-address", "192.0.2.10/24", "--floating-dev", "pt-nodev0"],
     "no such network device"),
    (CLUSTER[:-2] + ["--floating-address", "192.0.2.10/24", "--floating-dev", "lo"],
     "not an Ethernet device"),
])
def test_floating_usage_errors_are_one_line_before_anything_binds(args, said):
    if ("pt-nodev0" in args or args[-1] == "lo") and floating.os.geteuid() != 0:
        pytest.skip("the device is looked at only with the capabilities (root here)")
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert said in res.output
    assert "listening" not in res.output


def test_without_the_capabilities_it_says_root_or_cap_net_admin(monkeypatch):
    monkeypatch.setattr(floating, "_capabilities", lambda field: 0)
    f = floating.FloatingAddress("192.0.2.10/24", "pt-nodev0", "192.0.2.1", PORT)
    with pytest.raises(floating.FloatingError, match="root or CAP_NET_ADMIN"):
        f.prepare()
    assert "root or CAP_NET_ADMIN" in " ".join(
        CliRunner().invoke(main, ["backbone", "--help"]).output.split())


def test_keepalive_option_sets_the_interval_and_keeps_the_seed_rule():
    runner = CliRunner()
    for command in ("pub", "sub"):
        res = runner.invoke(main, [command, "--keepalive", "1.5"])
        assert res.exit_code == 2 and "--keepalive" in res.output
        assert "--keepalive" in runner.invoke(main, [command, "--help"]).output


def test_the_address_is_wanted_only_while_this_member_serves_its_epoch():
    """Held from the first moment it may sequence in an epoch (winning one is the only way),
    through a used-up reservation, until it is no longer active or its lease lapsed."""
    from types import SimpleNamespace

    from pelotari.fyrehose.cluster_backbone import ClusterBackbone

    class Core(SimpleNamespace):
        def may_issue(self, now):
            return self.limit if self.role == "active" and now < self.lease_until else None

    class Float:
        wanted = None
        text, dev, held, garps_sent = "192.0.2.10/24", "eth0", False, 0

        def want(self, hold):
            self.wanted = hold

        def events(self):
            return []

    core = Core(role="standby", epoch=1, lease_until=0.0, limit=None, active=None)
    clock = SimpleNamespace(t=0.0)
    f = Float()
    member = ClusterBackbone(SimpleNamespace(set_info=lambda info: None), "192.0.2.1",
                             peers=["192.0.2.2"], data_port=PORT, bully_port=2324,
                             cluster_port=2325, state_dir="/nonexistent", name=b"t",
                             floating=f)
    member.node = SimpleNamespace(core=core, _now=lambda: clock.t)
    member._tick()
    assert f.wanted is False
    core.role, core.epoch, core.lease_until = "active", 2, 1.0  # won, reservation unconfirmed
    member._tick()
    assert f.wanted is False
    core.limit = 100  # may sequence: take it
    member._tick()
    assert f.wanted is True
    core.limit = None  # its reservation used up for a moment: still held
    member._tick()
    assert f.wanted is True
    clock.t = 1.0  # the lease lapsed (before the core stepped down)
    member._tick()
    assert f.wanted is False
    clock.t, core.lease_until, core.limit = 1.1, 2.0, 200
    member._tick()
    assert f.wanted is True
    core.role = "standby"
    member._tick()
    assert f.wanted is False
    core.role, core.epoch, core.limit = "active", 3, None  # a new epoch: not before it serves
    member._tick()
    assert f.wanted is False


# ---- on a namespaced LAN (slow) ------------------------------------------------------------

class Cluster:
    """Three members on a namespaced LAN with the floating address .250/24, and client hosts."""

    def __init__(self, lan, tmp_path, clients=1, leftovers=()):
        self.lan = lan
        self.tmp = tmp_path
        self.hosts = [lan.add_host(f"m{i}") for i in (1, 2, 3)]
        self.clients = [lan.add_host(f"c{i}") for i in range(1, clients + 1)]
        self.float = f"{lan.subnet}.250"
        self.key = tmp_path / "cluster.key"
        self.key.write_bytes(b"a secret the three members share")
        for name in leftovers:  # as a run killed with its guard would leave them
            h = self.host(name)
            lan.exec_in(h.namespace, "ip", "addr", "add", f"{self.float}/24", "dev", h.interface)
            lan.exec_in(h.namespace, "nft", "add", "table", "ip", "pelotari_float_2323")
        self.procs = {h.name: self.start(h) for h in self.hosts}

    def host(self, name):
        return next(h for h in self.hosts + self.clients if h.name == name)

    def start(self, host):
        """`pelotari backbone --cluster ... --floating-address` in host's namespace."""
        peers = ",".join(h.address for h in self.hosts if h is not host)
        return NodeProcess(
            "backbone", "--host", host.address, "--port", str(PORT), "--cluster", "float",
            "--peers", peers, "--state-dir", str(self.tmp / host.name), "--stats-interval",
            "60", "--metrics", f"{host.address}:9100", "--cluster-key-file", str(self.key),
            "--floating-address", f"{self.float}/24", "--floating-dev", host.interface,
            as_json=False, stdin=subprocess.DEVNULL,
            popen=lambda argv, **kw: self.lan.spawn(host, argv, **kw))

    def lines(self, name, pattern, since=0):
        return [m for m in map(pattern.search, self.procs[name].stderr[since:]) if m]

    def stderr(self):
        return {n: p.stderr_text(0)[-3000:] for n, p in self.procs.items()}

    def holders(self):
        """The member hosts whose device holds the floating address now."""
        out = []
        for h in self.hosts:
            text = self.lan.exec_in(h.namespace, "ip", "-4", "-o", "addr", "show", "dev",
                                    h.interface).stdout
            if f" {self.float}/" in text:
                out.append(h.name)
        return out

    def tables(self, host):
        return self.lan.exec_in(host.namespace, "nft", "list", "tables").stdout

    def serving(self):
        """The one live member that says it took the address last (None if not exactly one
        member holds it and says so)."""
        held = self.holders()
        if len(held) != 1:
            return None
        name = held[0]
        taken = self.lines(name, TAKEN)
        released = self.lines(name, RELEASED)
        return name if len(taken) > len(released) else None

    def metrics(self, name):
        h = self.host(name)
        code = ("import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("
                f"'http://{h.address}:9100/metrics', timeout=10).read().decode())")
        return self.lan.exec_in(h.namespace, sys.executable, "-c", code).stdout


class Lines:
    """A process's stdout lines, each with the monotonic time it was read."""

    def __init__(self, proc):
        self.proc = proc
        self.items: list = []
        self.parsed: list = []  # (time, JSON object) of the lines that are one
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            t = time.monotonic()
            self.items.append((t, line))
            if line.startswith("{"):
                self.parsed.append((t, json.loads(line)))

    def json(self):
        return list(self.parsed)


def seed_sub(cl, host, keepalive):
    """A plain `pelotari sub -b FLOAT` (one address: no cluster mode)."""
    proc = cl.lan.spawn(host, PELOTARI + ["sub", "-b", f"{cl.float}:{PORT}", "--json",
                                          "--keepalive", str(keepalive)],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        stdin=subprocess.DEVNULL)
    return Lines(proc)


def seed_pub(cl, host):
    """A plain `pelotari pub -b FLOAT` at 200 messages/s, for long enough. (A new active
    confirms its publishes only from its next KEEPALIVE: the others wait out --timeout, and
    a window that large never fills.)"""
    return cl.lan.spawn(host, PELOTARI + ["pub", "-b", f"{cl.float}:{PORT}", "-r", "200", "-n",
                                          "100000", "--timeout", "5", "--in-flight", "20000",
                                          "--keepalive", "0.1", "-q", "tick"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                        stdin=subprocess.DEVNULL)


def after(seq, first):
    """Whether SEQUENCE seq is at or past first (mod 2^48; both near each other)."""
    return (seq - first) % WRAP < 1 << 40


def kill_the_active(cl, subs):
    """SIGKILL the member holding the address; (its name, the new one's, its first sequence,
    seconds from the kill to each subscriber's first message from the new active)."""
    old = cl.serving()
    since = {n: len(p.stderr) for n, p in cl.procs.items()}
    t0 = time.monotonic()
    cl.procs[old].send(signal.SIGKILL)
    cl.procs[old].proc.wait(30)

    def new_active():
        found = [n for n in cl.procs if n != old and cl.lines(n, ACTIVE, since[n])]
        return found[0] if found else None
    assert wait_for(new_active, 60), cl.stderr()
    new = new_active()
    first = int(cl.lines(new, ACTIVE, since[new])[-1].group(2))

    def firsts():
        out = []
        for s in subs:
            got = [t for t, m in s.json() if "sequence" in m and after(m["sequence"], first)
                   and t > t0]
            out.append(got[0] - t0 if got else None)
        return out
    assert wait_for(lambda: None not in firsts(), 60, interval=0.05), (firsts(), cl.stderr())
    return old, new, first, firsts()


def ready(cl, subs):
    """One member holds the address, the others follow it, every subscriber receives."""
    assert wait_for(cl.serving, 60, interval=0.1), cl.stderr()
    active = cl.serving()
    assert wait_for(lambda: all(cl.lines(n, FOLLOWING) for n in cl.procs if n != active), 60)
    count = [len(s.json()) for s in subs]
    assert wait_for(lambda: all(len(s.json()) > c + 20 for s, c in zip(subs, count)), 60), \
        [s.proc.stderr.read() if s.proc.poll() is not None else "" for s in subs]
    return active


def test_a_seed_subscriber_goes_on_through_a_kill_of_the_active(lan, tmp_path):
    cl = Cluster(lan, tmp_path, clients=2)
    sub_host, pub_host = cl.clients
    sub = seed_sub(cl, sub_host, 1.0)
    pub = seed_pub(cl, pub_host)
    old = ready(cl, [sub])
    assert cl.holders() == [old]
    assert "pelotari_float_2323" in cl.tables(cl.host(old))
    assert "pelotari_fyrehose_cluster_floating_held 1.0" in cl.metrics(old)

    old, new, first, (seconds,) = kill_the_active(cl, [sub])
    print(f"\nSIGKILL -> the seed subscriber's first DELIVER from the new active: "
          f"{seconds * 1000:.0f} ms")
    # The address moved to exactly the new active (the dead one's guard removed its copy).
    assert wait_for(lambda: cl.holders() == [new], 30, interval=0.1), (cl.holders(), new)
    assert "pelotari_float_2323" not in cl.tables(cl.host(old))
    # Messages published after the kill keep coming, from FLOAT (the only address a seed
    # client believes a DELIVER from), with no Resync.
    count = len([m for _, m in sub.json() if "sequence" in m and after(m["sequence"], first)])
    assert wait_for(lambda: len([m for _, m in sub.json() if "sequence" in m
                                 and after(m["sequence"], first)]) > count + 100, 60,
                    interval=0.05)
    assert not [m for _, m in sub.json() if "resync" in m]
    # The killed one, started again, stands by and does not hold the address.
    since = len(cl.procs[new].stderr)
    cl.procs[old] = cl.start(cl.host(old))
    assert wait_for(lambda: cl.lines(old, FOLLOWING), 60), cl.stderr()[old]
    assert cl.lines(old, FOLLOWING)[-1].group(1) == cl.host(new).address
    assert not cl.lines(old, TAKEN) and cl.holders() == [new]
    assert "pelotari_fyrehose_cluster_floating_held 0.0" in cl.metrics(old)
    assert "pelotari_fyrehose_cluster_floating_held 1.0" in cl.metrics(new)
    assert not cl.lines(new, RELEASED, since)
    pub.kill()
    # SIGTERM (and SIGINT for the holder: Ctrl-C) leave nothing behind.
    codes = {n: p.stop(signal.SIGINT if n == new else signal.SIGTERM)[0]
             for n, p in cl.procs.items() if p.proc.poll() is None}
    assert codes == {n: 130 if n == new else 0 for n in codes}, cl.stderr()
    assert cl.lines(new, RELEASED)
    assert cl.holders() == []
    assert not [h for h in cl.hosts if "pelotari_float" in cl.tables(h)]


def test_a_cut_off_active_releases_and_the_majority_moves_the_address(lan, tmp_path):
    cl = Cluster(lan, tmp_path, clients=2, leftovers=["m1", "m3"])
    sub = seed_sub(cl, cl.clients[0], 0.2)
    pub = seed_pub(cl, cl.clients[1])
    old = ready(cl, [sub])
    # What an earlier run left was removed at start, before anything bound.
    for name in ("m1", "m3"):
        said = cl.procs[name].stderr
        removed = [i for i, line in enumerate(said) if "(left by an earlier run)" in line]
        assert removed and removed[0] < [i for i, line in enumerate(said)
                                         if "listening on" in line][0], said[:3]
    assert cl.holders() == [old]
    assert [h.name for h in cl.hosts if "pelotari_float" in cl.tables(h)] == [old]
    since = {n: len(p.stderr) for n, p in cl.procs.items()}
    lan.set_link(cl.host(old), False)
    # The majority elects another, which takes the address; the cut-off one's lease lapses
    # and it releases its copy.
    assert wait_for(lambda: [n for n in cl.procs if n != old
                             and cl.lines(n, TAKEN, since[n])], 60), cl.stderr()
    new = [n for n in cl.procs if n != old and cl.lines(n, TAKEN, since[n])][0]
    assert wait_for(lambda: cl.lines(old, RELEASED, since[old]), 60), cl.stderr()[old]
    assert wait_for(lambda: cl.holders() == [new], 30, interval=0.1), cl.holders()
    assert "pelotari_float_2323" not in cl.tables(cl.host(old))
    # The seed subscriber, on the majority's side, is served by the new active.
    first = int(cl.lines(new, ACTIVE, since[new])[-1].group(2))
    assert wait_for(lambda: [m for _, m in sub.json() if "sequence" in m
                             and after(m["sequence"], first)], 60, interval=0.05)
    # Healed: the old one follows the new active and exactly one member holds the address.
    following = len(cl.lines(old, FOLLOWING))
    lan.set_link(cl.host(old), True)
    assert wait_for(lambda: len(cl.lines(old, FOLLOWING)) > following, 60), cl.stderr()[old]
    assert cl.lines(old, FOLLOWING)[-1].group(1) == cl.host(new).address
    assert cl.holders() == [new] and cl.serving() == new
    assert len(cl.lines(old, TAKEN)) == len(cl.lines(old, RELEASED))
    assert not [m for _, m in sub.json() if "resync" in m]
    pub.kill()
    codes = {n: p.stop(signal.SIGTERM)[0] for n, p in cl.procs.items()}
    assert set(codes.values()) == {0}, cl.stderr()
    assert cl.holders() == []
    assert not [h for h in cl.hosts if "pelotari_float" in cl.tables(h)]


PROBE = """
import socket, sys, time
from fastpath import refcodec
address, port, keepalive = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.005)
due = 0.0
while True:
    now = time.monotonic()
    if now >= due:  # NOJOURNAL: a plain seed subscriber that serves no repair
        s.sendto(refcodec.encode_keepalive("0.0.0.0", 0, 2, bytes(16)), (address, port))
        due = now + keepalive
    try:
        data, source = s.recvfrom(65536)
    except socket.timeout:
        continue
    if data[0] == 1:
        print(time.monotonic(), source[0], int.from_bytes(data[3:9], "big"), flush=True)
"""


def probe(cl, host, keepalive):
    """A minimal seed subscriber: each DELIVER's arrival (monotonic time), source, SEQUENCE."""
    return Lines(cl.lan.spawn(host, [sys.executable, "-c", PROBE, cl.float, str(PORT),
                                     str(keepalive)], stdout=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL))


def measure(kills: int) -> None:
    """Kill the active `kills` times; print the seed clients' failover times: to the first
    DELIVER datagram from the new active (a minimal subscriber), and to `pelotari sub`'s first
    message from it (after the gap it REQUESTs is repaired or reported lost)."""
    import tempfile
    from pathlib import Path

    from pelotari.netlab import LanHarness

    keepalives = (1.0, 0.1)
    times: dict = {(k, what): [] for k in keepalives for what in ("DELIVER", "sub")}
    with LanHarness() as lan, tempfile.TemporaryDirectory() as tmp:
        cl = Cluster(lan, Path(tmp), clients=3)
        subs = [seed_sub(cl, h, k) for h, k in zip(cl.clients, keepalives)]
        probes = [probe(cl, h, k) for h, k in zip(cl.clients, keepalives)]
        seed_pub(cl, cl.clients[2])
        for i in range(kills):
            ready(cl, subs)
            # (a random phase: the kill would otherwise follow the last failover, and so the
            # clients' KEEPALIVEs, by as long each time: the same point of the interval)
            time.sleep(random.uniform(0, 1))
            t0 = time.monotonic()
            old, new, first, seconds = kill_the_active(cl, subs)
            line = []
            for k, s, p in zip(keepalives, seconds, probes):
                got = [(float(t), src) for t, src, seq in (x.split() for _, x in list(p.items))
                       if float(t) > t0 and after(int(seq), first)]
                assert got and got[0][1] == cl.float, got[:1]
                times[k, "DELIVER"].append(got[0][0] - t0)
                times[k, "sub"].append(s)
                line.append(f"--keepalive {k}: DELIVER {(got[0][0] - t0) * 1000:.0f} ms, "
                            f"sub {s * 1000:.0f} ms")
            print(f"kill {i + 1}: {old} -> {new}: " + "; ".join(line), flush=True)
            cl.procs[old] = cl.start(cl.host(old))
            assert wait_for(lambda: cl.lines(old, FOLLOWING), 60)
    for (k, what), ts in times.items():
        ms = sorted(t * 1000 for t in ts)
        print(f"--keepalive {k}, first {what} from the new active: median "
              f"{statistics.median(ms):.0f} ms, min {ms[0]:.0f}, max {ms[-1]:.0f} "
              f"({len(ms)} kills)")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    measure(parser.parse_args().kills)
