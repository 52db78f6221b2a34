"""The namespaced-LAN harness itself: hosts reach each other, and a step that fails removes
what was made before it (root only: skipped with the reason elsewhere)."""
import subprocess
import sys

import pytest

from pelotari import netlab

pytestmark = pytest.mark.skipif(bool(netlab.available()), reason=netlab.available() or "ok")


def _left(tag):
    """Namespaces and links whose name starts with tag."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout.split()
    links = [line.split()[0].split("@")[0] for line in subprocess.run(
        ["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout.splitlines()]
    return {"namespaces": [n for n in namespaces if n.startswith(tag)],
            "links": [link for link in links if link.startswith(tag)]}


def test_two_hosts_exchange_a_broadcast_and_close_leaves_nothing():
    with netlab.LanHarness() as lan:
        a, b = lan.add_host("a"), lan.add_host("b")
        assert a.address != b.address and a.address.rsplit(".", 1)[0] == lan.subnet
        receiver = lan.spawn(b, [sys.executable, "-c",
                                 "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
                                 "s.bind(('', 47001)); print('ready', flush=True);"
                                 "s.settimeout(10); print(s.recvfrom(100)[0].decode())"],
                             stdout=subprocess.PIPE, text=True)
        assert receiver.stdout.readline() == "ready\n"
        lan.exec_in(a.namespace, sys.executable, "-c",
                    "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
                    "s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1);"
                    f"s.sendto(b'hello', ('{lan.subnet}.255', 47001))")
        assert receiver.stdout.readline() == "hello\n"
        assert len(_left(lan.tag)["namespaces"]) == 2
        tag = lan.tag
    assert _left(tag) == {"namespaces": [], "links": []}


def test_add_host_failing_at_its_last_step_removes_its_namespace_and_veth(monkeypatch):
    configure = netlab.LanHarness._configure

    def configure_then_fail(self, *args):
        configure(self, *args)  # everything of the host exists, its address too
        raise OSError("refused (test)")

    with netlab.LanHarness() as lan:
        lan.add_host("a")
        with monkeypatch.context() as m:
            m.setattr(netlab.LanHarness, "_configure", configure_then_fail)
            with pytest.raises(OSError, match="refused"):
                lan.add_host("b")
        assert _left(lan.tag) == {"namespaces": [f"{lan.tag}a"],
                                  "links": [lan.bridge, f"{lan.tag}2"]}
        c = lan.add_host("c")  # the harness is still usable
        assert c.address == f"{lan.subnet}.4"
        tag = lan.tag
    assert _left(tag) == {"namespaces": [], "links": []}


def test_add_host_failing_at_its_veth_removes_its_namespace_and_nothing_it_did_not_make():
    with netlab.LanHarness() as lan:
        taken = f"{lan.tag}2i"  # the inside end the first host's veth would get
        subprocess.run(["ip", "link", "add", taken, "type", "bridge"], check=True)
        try:
            with pytest.raises(Exception):
                lan.add_host("a")
            assert _left(lan.tag) == {"namespaces": [], "links": [lan.bridge, taken]}
        finally:
            subprocess.run(["ip", "link", "del", taken], check=True)
        tag = lan.tag
    assert _left(tag) == {"namespaces": [], "links": []}


@pytest.mark.parametrize("what", ["namespace", "outside end of the veth"])
def test_a_host_whose_name_is_taken_fails_and_leaves_the_other_owners_one(what):
    with netlab.LanHarness() as lan:
        tag = lan.tag
        if what == "namespace":
            theirs, make, drop = f"{tag}a", ["ip", "netns", "add"], ["ip", "netns", "del"]
        else:
            theirs, make, drop = f"{tag}2", ["ip", "link", "add"], ["ip", "link", "del"]
        subprocess.run([*make, theirs] + ([] if what == "namespace" else ["type", "bridge"]),
                       check=True)
        try:
            with pytest.raises(Exception):
                lan.add_host("a")
            lan.close()
            assert _left(tag) == {"namespaces": [theirs] if what == "namespace" else [],
                                  "links": [] if what == "namespace" else [theirs]}
        finally:
            subprocess.run([*drop, theirs], check=True)


def test_a_constructor_failing_after_the_bridge_removes_the_bridge(monkeypatch):
    looked_up = []

    def fail(self, ifname, ipr=None):  # the step after the bridge is made
        looked_up.append(ifname)
        raise OSError("refused (test)")

    monkeypatch.setattr(netlab.LanHarness, "_index", fail)
    with pytest.raises(OSError, match="refused"):
        netlab.LanHarness()
    bridge = looked_up[0]
    assert bridge.endswith("br") and _left(bridge) == {"namespaces": [], "links": []}


RECEIVE = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("", 47002))
print("ready", flush=True)
s.settimeout(3)
got = 0
try:
    while True:
        s.recvfrom(100)
        got += 1
        s.settimeout(0.5)
except socket.timeout:
    print(got)
"""


@pytest.mark.parametrize("percent", [0, 100])
def test_loss_drops_that_share_of_udp_arriving_at_the_host(percent):
    with netlab.LanHarness() as lan:
        a, b = lan.add_host("a"), lan.add_host("b")
        assert lan.loss(b, percent) in ("netem", "nftables")
        receiver = lan.spawn(b, [sys.executable, "-c", RECEIVE], stdout=subprocess.PIPE, text=True)
        assert receiver.stdout.readline() == "ready\n"
        lan.exec_in(a.namespace, sys.executable, "-c",
                    "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                    f"for _ in range(50): s.sendto(b'x', ('{b.address}', 47002))")
        assert int(receiver.stdout.readline()) == 50 * (100 - percent) // 100


@pytest.mark.parametrize("percent", [-1, 101])
def test_loss_outside_0_to_100_is_refused(percent):
    with netlab.LanHarness() as lan:
        with pytest.raises(ValueError, match="percentage"):
            lan.loss(lan.add_host("a"), percent)
