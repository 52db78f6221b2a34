"""`pelotari prototari` as a service: stdin closed, /dev/null or a pipe; lines read without
blocking the node; bad lines reported and skipped; SIGTERM and Ctrl-C stop it cleanly; the
default interface and visible send errors (namespaced LAN, root).

The stdin tests run nodes on loopback: 127.0.0.2 and 127.0.0.3 are two addresses of this host,
so two default (peer = address) nodes can share one port.
"""
import json
import os
import signal
import socket
import subprocess
import time

import pytest
from conftest import PELOTARI
from nodeproc import NodeProcess, Spawner, is_event

pytestmark = pytest.mark.e2e

FAST = ["--broadcast-interval", "0.5", "--inactive-peer-time", "0.3", "--heartbeat-max-wait", "0.2",
        "--reservation-timeout", "1", "--response-window", "0.5"]


class Loopback(NodeProcess):
    """`pelotari prototari` bound to one loopback address, with events on a queue."""

    def __init__(self, address, port, *extra, **kwargs):
        super().__init__("prototari", "--host", address, "--broadcast-address",
                         "127.255.255.255", "--unicast-port", str(port), "--broadcast-port",
                         str(port + 1), *FAST, *extra, new_session=False, **kwargs)
        self.address = f"{address}:{port}"

    stop = NodeProcess.stop_reported


@pytest.fixture
def nodes():
    with Spawner(Loopback) as make:
        yield make


def close_stdin():
    os.close(0)


@pytest.mark.parametrize("stdin", ["devnull", "closed", "pipe closed at once"])
def test_runs_until_sigterm_whatever_stdin_is(nodes, stdin, port_pair):
    port = port_pair
    kwargs = {"devnull": {"stdin": subprocess.DEVNULL},
              "closed": {"stdin": subprocess.DEVNULL, "preexec_fn": close_stdin},
              "pipe closed at once": {"stdin": subprocess.PIPE}}[stdin]
    a = nodes("127.0.0.2", port, **kwargs)
    if stdin.startswith("pipe"):
        a.proc.stdin.close()
    started = a.wait(is_event("started"), 10)
    assert started is not None, a.proc.stderr.read()
    assert started["address"] == a.address and started["broadcast"] == f"127.255.255.255:{port + 1}"
    b = nodes("127.0.0.3", port, stdin=subprocess.DEVNULL)  # a peer, to show a keeps working
    assert a.wait(is_event("joined", peer=f"127.0.0.3:{port}"), 5)
    time.sleep(1.0)  # end of input (or none at all) does not stop it
    assert a.proc.poll() is None
    code, stopped, stderr = a.stop(signal.SIGTERM)
    assert (code, stderr) == (0, "")
    assert stopped["signal"] == "SIGTERM" and f"127.0.0.3:{port}" in stopped["peers"]
    code, _, stderr = b.stop(signal.SIGINT)  # Ctrl-C: status 130 (SIGTERM's is 0)
    assert (code, stderr) == (130, ""), stderr


def test_ctrl_c_in_text_mode_prints_no_traceback(nodes, port_pair):
    a = nodes("127.0.0.2", port_pair, stdin=subprocess.DEVNULL, as_json=False)
    assert a.wait(lambda line: " started " in line, 10)
    code, _, stderr = a.stop(signal.SIGINT)
    assert code == 130 and stderr == ""
    assert a.wait(lambda line: " stopped by SIGINT" in line, 5)


def pair(nodes, port):
    a = nodes("127.0.0.2", port)
    b = nodes("127.0.0.3", port, stdin=subprocess.DEVNULL)
    assert a.wait(is_event("joined", peer=f"127.0.0.3:{port}"), 5)
    assert b.wait(is_event("joined", peer=f"127.0.0.2:{port}"), 5)
    return a, b, port


def test_a_partial_line_does_not_stop_the_node_from_answering(nodes, port_pair):
    a, b, port = pair(nodes, port_pair)
    a.write(b"half a li")  # no newline: a node that blocked reading it would miss heartbeats
    time.sleep(2.5)  # b drops a silent peer after 0.3 + 3 x 0.2 = 0.9 s
    assert b.wait(is_event("left"), 0.1) is None
    a.write(b"ne\n")
    assert b.wait(is_event("message", peer=f"127.0.0.2:{port}", data="half a line"), 5)


def test_lines_too_long_or_not_utf8_are_reported_and_skipped(nodes, port_pair):
    a, b, port = pair(nodes, port_pair)
    a.write(b"x" * 70000 + b"\n")
    a.write(b"caf\xe9\n")
    a.write(b"y" * 65503 + b"\n")  # the largest DATA: sent
    a.write(b"@127.0.0.3 to one\n@127.0.0.9 nobody\n@bogus hi\n@127.0.0.3:x hi\n")
    a.write("after ✓\n".encode())
    assert b.wait(is_event("message", data="after ✓"), 5)
    a.wait(lambda e: False, 0.3)
    errors = [e["message"] for e in a.seen if e["event"] == "error"]
    assert errors == ["stdin line 1: longer than 65536 bytes (70000); skipped",
                      "stdin line 2: not UTF-8 (byte 3); skipped",
                      f"127.0.0.9:{port} is not a peer (peers: 127.0.0.3:{port}); a direct "
                      "message is @ADDRESS:PORT text",
                      "'bogus' is not a peer's ADDRESS:PORT; a direct message is @ADDRESS:PORT "
                      "text",
                      "'127.0.0.3:x' is not a peer's ADDRESS:PORT; a direct message is "
                      "@ADDRESS:PORT text"], errors
    got = [e["data"] for e in b.seen if e["event"] == "message"]
    assert got == ["y" * 65503, "to one", "after ✓"]
    assert a.proc.poll() is None


def test_bad_lines_in_text_mode_are_one_line_each_on_stderr(nodes, port_pair):
    a = nodes("127.0.0.2", port_pair, as_json=False)
    assert a.wait(lambda line: " started " in line, 10)
    a.write(b"z" * 100000 + b"\n\xff\xfe\nfine\n")
    assert a.wait(lambda line: " sent " in line, 5)
    code, _, stderr = a.stop()
    lines = stderr.splitlines()
    assert code == 0 and len(lines) == 2, stderr
    assert "stdin line 1: longer than 65536 bytes (100000); skipped" in lines[0]
    assert "stdin line 2: not UTF-8 (byte 0); skipped" in lines[1]


# ---- the default interface -----------------------------------------------------------------

def iface(name, address, broadcast="auto", up=True, loopback=False, can_broadcast=True):
    from pelotari.prototari.node import Interface

    if broadcast == "auto":
        broadcast = address.rsplit(".", 1)[0] + ".255" if address else None
    return Interface(name, address, broadcast, up, loopback, can_broadcast)


@pytest.mark.parametrize("address,private", [
    ("10.0.0.2", True), ("10.255.255.254", True), ("11.0.0.1", False), ("9.255.255.255", False),
    ("172.16.0.1", True), ("172.31.255.254", True), ("172.15.255.254", False),
    ("172.32.0.1", False), ("192.168.0.2", True), ("192.168.255.254", True),
    ("192.169.0.1", False), ("192.0.2.2", False), ("100.64.0.1", False)])
def test_private_ranges_at_their_edges(address, private):
    assert iface("eth0", address).private is private


def test_choose_interface_picks_the_one_private_broadcast_interface():
    from pelotari.prototari.node import choose_interface

    lo = iface("lo", "127.0.0.1", broadcast=None, loopback=True, can_broadcast=False)
    public = iface("eth1", "192.0.2.2")
    down = iface("eth2", "10.1.0.2", up=False)
    p2p = iface("tun0", "10.8.0.2", broadcast=None, can_broadcast=False)
    lan = iface("eth0", "192.168.1.20")
    assert choose_interface([lo, public, down, p2p, lan]) is lan
    with pytest.raises(ValueError, match=r"^no private IPv4 interface .*pass -i/--interface$"):
        choose_interface([lo, public, down, p2p])
    with pytest.raises(ValueError, match=r"^several private IPv4 interfaces: eth0 \(192.168.1.20\), "
                                         r"wlan0 \(10.0.0.5\); pass -i/--interface to choose$"):
        choose_interface([lan, iface("wlan0", "10.0.0.5")])


def run_in(lan, host, *args, timeout=30):
    return subprocess.run(["ip", "netns", "exec", host.namespace, *PELOTARI, "prototari", *args],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_no_private_interface_or_several_is_one_clear_line(lan):
    none, two = lan.add_host("none"), lan.add_host("two")
    lan.exec_in(none.namespace, "ip", "addr", "flush", "dev", none.interface)
    res = run_in(lan, none)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr == ("Error: cannot start: no private IPv4 interface (10/8, 172.16/12, "
                          "192.168/16; up, not loopback, with a broadcast address): pass "
                          "-i/--interface\n")
    lan.exec_in(two.namespace, "ip", "link", "add", "second7", "type", "veth", "peer", "name",
                "second7p")  # a second private interface, both ends inside the namespace
    lan.exec_in(two.namespace, "ip", "addr", "add", "192.168.77.1/24", "brd", "+", "dev", "second7")
    for link in ("second7", "second7p"):
        lan.exec_in(two.namespace, "ip", "link", "set", link, "up")
    res = run_in(lan, two)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "several private IPv4 interfaces: " in res.stderr
    assert f"{two.interface} ({two.address})" in res.stderr and "second7 (192.168.77.1)" in res.stderr
    assert res.stderr.endswith("; pass -i/--interface to choose\n")


@pytest.mark.parametrize("address,prefix,broadcast", [
    ("10.1.2.3", 24, "10.1.2.255"), ("10.1.2.3", 8, "10.255.255.255"),
    ("192.168.1.129", 25, "192.168.1.255"), ("192.168.1.126", 25, "192.168.1.127"),
    ("172.16.5.4", 12, "172.31.255.255"), ("10.0.0.1", 30, "10.0.0.3"),
    ("10.0.0.1", 0, "255.255.255.255"), ("10.0.0.1", 31, None), ("10.0.0.1", 32, None)])
def test_the_broadcast_address_is_derived_from_the_netmask(address, prefix, broadcast):
    from pelotari.prototari.node import broadcast_address

    assert broadcast_address(address, prefix) == broadcast


def test_an_interface_without_a_broadcast_address_broadcasts_where_its_netmask_says(lan):
    """`ip addr add ADDR/24` sets no broadcast address (the kernel reports 0.0.0.0): the node
    derives ADDR's .255 from the netmask, with -i and without, and is found by its broadcast;
    a /32 gives none, and the node says so in one line."""
    from test_prototari_lan import NodeProcess, addr

    quiet, bare, chosen, single = (lan.add_host(n) for n in ("q", "bare", "chosen", "single"))
    for host, prefix in ((bare, 24), (chosen, 24), (single, 32)):
        lan.exec_in(host.namespace, "ip", "addr", "flush", "dev", host.interface)
        lan.exec_in(host.namespace, "ip", "addr", "add", f"{host.address}/{prefix}", "dev",
                    host.interface)
        shown = lan.exec_in(host.namespace, "ip", "-4", "addr", "show", "dev", host.interface)
        assert f"inet {host.address}/{prefix} scope" in shown.stdout  # no "brd"
    derived = bare.address.rsplit(".", 1)[0] + ".255:21451"

    # q broadcasts once, before the others exist: bare can only be found by its own broadcast
    q = NodeProcess(lan, quiet, "--broadcast-interval", "1000", stdin=subprocess.DEVNULL)
    assert q.wait(lambda e: e["event"] == "started", 10)
    b = NodeProcess(lan, bare, interface=bare.interface, stdin=subprocess.DEVNULL)
    started = b.wait(lambda e: e["event"] == "started", 10)
    assert started["broadcast"] == derived and started["interface"] == bare.interface, started
    joined = q.wait(lambda e: e["event"] == "joined" and e["peer"] == addr(bare), 10)
    assert joined and joined["via"] == "confirmation", q.seen  # q answered bare's broadcast

    c = NodeProcess(lan, chosen, stdin=subprocess.DEVNULL)  # no -i: chosen by default
    started = c.wait(lambda e: e["event"] == "started", 10)
    assert started["broadcast"] == derived and started["interface"] == chosen.interface, started

    res = run_in(lan, single, "-i", single.interface)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr == (f"Error: cannot start: interface {single.interface} ({single.address})"
                          " has no broadcast address and a /32 network has none: pass "
                          "--broadcast-address\n")


def test_send_errors_are_reported_once_per_kind_and_counted(lan):
    """Bound to all addresses with the default 255.255.255.255 on a host with no default route:
    every broadcast fails. The user hears of it once, and the counter has them all."""
    host = lan.add_host("a")
    proc = lan.spawn(host, PELOTARI + ["prototari", "--json", "--host", "0.0.0.0",
                                       "--broadcast-interval", "0.2"],
                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    events = [json.loads(line) for line in out.splitlines()]
    warnings = [e for e in events if e["event"] == "warning"]
    assert proc.returncode == 0 and err == ""
    assert events[0]["event"] == "started" and events[0]["interface"] is None
    assert events[0]["broadcast"] == "255.255.255.255:21451"
    assert len(warnings) == 1, warnings
    assert warnings[0]["kind"] == "send ENETUNREACH"
    assert warnings[0]["message"].startswith("cannot send to 255.255.255.255:21451: ")
    assert events[-1]["stats"]["send_errors"] >= 5


def test_send_errors_in_text_mode_go_to_stderr_once(lan):
    host = lan.add_host("a")
    proc = lan.spawn(host, PELOTARI + ["prototari", "--host", "0.0.0.0", "--broadcast-interval",
                                       "0.2"],
                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert err.count("\n") == 1 and "warning cannot send to 255.255.255.255:21451: " in err, err


# ---- output never blocks the node; peers' data cannot forge output ---------------------------

def test_an_unread_stdout_does_not_stop_the_node_answering_heartbeats(lan):
    """The node's stdout is a pipe nobody reads while a peer sends it 2,500 1-KB messages: it
    keeps answering heartbeats (the peer keeps it), drops and counts the lines that cannot wait,
    says so once on stderr, and reports the count when stopped."""
    from test_prototari_lan import FAST, NodeProcess, addr

    a, b = lan.add_host("a"), lan.add_host("b")
    stuck = lan.spawn(a, PELOTARI + ["prototari", "--json", *FAST], stdin=subprocess.DEVNULL,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        peer = NodeProcess(lan, b)
        assert peer.wait(lambda e: e["event"] == "joined" and e["peer"] == addr(a), 10), peer.seen
        for k in range(25):
            peer.write("".join(f"{k:02d}{i:02d}" + "x" * 1020 + "\n"
                               for i in range(100)).encode())
            time.sleep(0.02)
        time.sleep(3.0)  # the peer drops a silent node after 1 + 3 x 0.3 s
        assert peer.wait(lambda e: e["event"] == "left", 0.5) is None, "the peer dropped it"
        assert stuck.poll() is None
        stuck.send_signal(signal.SIGTERM)
        out, err = stuck.communicate(timeout=15)  # read at last
    finally:
        if stuck.poll() is None:
            stuck.kill()
            stuck.wait()
    events = [json.loads(line) for line in out.splitlines()]
    stopped = events[-1]
    assert stuck.returncode == 0 and stopped["event"] == "stopped", (stuck.returncode, err)
    assert addr(b) in stopped["peers"]
    assert stopped["output_dropped"] > 0
    messages = sum(e["event"] == "message" for e in events)
    assert messages + stopped["output_dropped"] <= stopped["stats"]["messages_in"] + 5
    assert stopped["stats"]["messages_in"] > 1000
    warnings = err.decode().splitlines()
    assert len(warnings) == 1 and "output cannot keep up" in warnings[0], warnings


def test_a_peers_data_is_one_escaped_line_in_text_mode(nodes, port_pair):
    """A peer cannot forge output lines or send terminal escapes: its data is escaped as
    `pelotari sub` escapes it (not-UTF-8 as a bytes literal)."""
    from pelotari.prototari.core import DATA_MAGIC

    port = port_pair
    a = nodes("127.0.0.2", port, stdin=subprocess.DEVNULL, as_json=False)
    b = nodes("127.0.0.3", port, stdin=subprocess.DEVNULL)
    assert a.wait(lambda line: f" joined  127.0.0.3:{port} " in line, 5), a.seen
    assert b.wait(is_event("joined", peer=f"127.0.0.2:{port}"), 5)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # b's IP: a peer, any port
        s.bind(("127.0.0.3", 0))
        for data in (b"hi\n12:00:00 joined  10.6.6.6:21450 fake",
                     "\x1b[2J\\x1b\r\u2028".encode(), b"\xff\x1b\n", "ok ✓".encode()):
            s.sendto(DATA_MAGIC + data, ("127.0.0.2", port))
    assert a.wait(lambda line: "ok ✓" in line, 5), a.seen
    shown = [line.rstrip("\n").split(" ", 3)[3] for line in a.seen if " message " in line]
    assert shown == ["hi\\n12:00:00 joined  10.6.6.6:21450 fake",
                     "\\x1b[2J\\\\x1b\\r\\u2028",
                     "b'\\xff\\x1b\\n'",
                     "ok ✓"], a.seen
    assert not any(line.startswith("12:00:00") for line in a.seen)
    assert not any("\x1b" in line or "\r" in line for line in a.seen)


def test_the_heartbeatless_peers_grace_is_an_option_and_a_negative_one_is_refused():
    from click.testing import CliRunner

    from pelotari.cli import main

    runner = CliRunner()
    assert "--peer-broadcast-interval" in runner.invoke(main, ["prototari", "--help"]).output
    res = runner.invoke(main, ["prototari", "--peer-broadcast-interval", "-1"])
    assert res.exit_code == 2 and "--peer-broadcast-interval" in res.output
