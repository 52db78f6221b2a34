"""A stranger on the LAN attacks a pelotari node with real datagrams (root: namespaced LAN).

The attacker's host has 60 extra addresses (other IPs it really owns, so whatever the victim
sends them comes back to it and is counted). Issue 11: 100 `aupa!` used to fill the 64-peer
table and keep new nodes out. Now `aupa!` outside the response window after the victim's own
broadcast takes no spot, one address is one peer, and a `pelotari?` flood holds at most half
the table, so a real node is still admitted within one broadcast interval.
"""
import json
import signal
import subprocess
import sys
import time

import pytest
from test_prototari_lan import NodeProcess

pytestmark = pytest.mark.e2e

ATTACKER = r'''
import json, select, socket, sys, time

phase, victim, primary = sys.argv[1], sys.argv[2], sys.argv[3]
aliases, window, duration = json.loads(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
V_UNI, V_BRD = 21450, 21451
got, sent = {}, {"datagrams": 0, "bytes": 0}

catch = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # whatever the victim sends us
catch.bind(("0.0.0.0", 21450))
hear = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the victim's broadcasts
hear.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
hear.bind(("", 21451))


def collect(timeout):
    end = time.monotonic() + timeout
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([catch], [], [], left)
        if ready:
            data, src = catch.recvfrom(65535)
            got[data.decode("utf-8", "replace")] = got.get(data.decode("utf-8", "replace"), 0) + 1


def blast(message, sources, port):
    for ip in sources:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((ip, 0))  # a new source port every time
        s.sendto(message, (victim, port))
        s.close()
        sent["datagrams"] += 1
        sent["bytes"] += len(message)


def next_broadcast():
    while True:
        data, (ip, _) = hear.recvfrom(65535)
        if ip == victim and data == b"pelotari?":
            return time.monotonic()


if phase == "outside":  # aupa! (and everything else) between the victim's response windows
    for _ in range(2):
        seen = next_broadcast()
        time.sleep(max(0.0, seen + window + 0.2 - time.monotonic()))
        blast(b"aupa!", (aliases + [primary]) * 3, V_UNI)  # 183 aupa! from 61 addresses
        for msg in (b"hor?", b"hemen nago!", b"dale!", b"\x01PTDhello", b"junk"):
            blast(msg, aliases[:20], V_UNI)
    collect(1.0)
elif phase == "inside":  # 100 aupa! from one address, many ports, right after a broadcast
    next_broadcast()
    blast(b"aupa!", [primary] * 100, V_UNI)
    collect(0.5)
elif phase == "discover":  # pelotari? from 60 addresses, 20 times a second
    end = time.monotonic() + duration
    while time.monotonic() < end:
        blast(b"pelotari?", aliases, V_BRD)
        collect(0.05)
    collect(0.5)
print(json.dumps({"phase": phase, "got": got, "sent": sent}), flush=True)
'''

VICTIM = ["--broadcast-interval", "2", "--response-window", "0.5", "--max-peers", "4",
          "--reservation-timeout", "1"]


def attack(lan, host, script, phase, victim, aliases, duration=0.0, wait=True):
    proc = lan.spawn(host, [sys.executable, str(script), phase, victim.address, host.address,
                            json.dumps(aliases), "0.5", str(duration)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return json.loads(out)


def test_a_stranger_cannot_fill_the_table_or_lock_out_a_real_node(lan, tmp_path):
    script = tmp_path / "attacker.py"
    script.write_text(ATTACKER)
    hv, hx, hn = (lan.add_host(n) for n in ("victim", "x", "new"))
    prefix = hx.address.rsplit(".", 1)[0]
    aliases = [f"{prefix}.{100 + i}" for i in range(60)]
    for ip in aliases:  # addresses the attacker owns, besides its own
        lan.exec_in(hx.namespace, "ip", "addr", "add", f"{ip}/24", "dev", hx.interface)
    victim = NodeProcess(lan, hv, *VICTIM, stdin=subprocess.DEVNULL)
    assert victim.wait(lambda e: e["event"] == "started", 10)

    # 1. 183 aupa! from 61 addresses and fresh ports, outside the window, twice; and hor?,
    #    hemen nago!, dale!, data and junk from 20 addresses: nobody joins, nothing comes back.
    outside = attack(lan, hx, script, "outside", hv, aliases)
    assert outside["sent"]["datagrams"] == 2 * (183 + 5 * 20)
    assert outside["got"] == {}, outside
    victim.wait(lambda e: False, 0.3)
    assert victim.peers() == set()

    # 2. 100 aupa! from one address, inside the window: one peer, one dale!.
    inside = attack(lan, hx, script, "inside", hv, aliases)
    assert inside["got"] == {"dale!": 1}, inside
    assert victim.wait(lambda e: e["event"] == "joined", 2)["peer"] == f"{hx.address}:21450"
    victim.wait(lambda e: False, 0.3)
    assert victim.peers() <= {f"{hx.address}:21450"}

    # 3. pelotari? from 60 addresses, 20 times a second, while a real node starts: the real
    #    node is admitted within one broadcast interval (2 s) of starting.
    flood = attack(lan, hx, script, "discover", hv, aliases, duration=6.0, wait=False)
    time.sleep(1.0)
    new = NodeProcess(lan, hn, *VICTIM, stdin=subprocess.DEVNULL)
    assert new.wait(lambda e: e["event"] == "started", 10)
    t0 = time.monotonic()
    joined = victim.wait(lambda e: e["event"] == "joined" and e["peer"] == f"{hn.address}:21450",
                         5)
    admitted_after = time.monotonic() - t0
    assert joined is not None and admitted_after <= 2.0 + 0.5, admitted_after
    out, _ = flood.communicate(timeout=30)
    discover = json.loads(out)
    # Every aupa! the flood earned held a reservation: at most 2 (half of 4 spots) at a time,
    # each for 1 s, over 6.5 s.
    assert 1 <= discover["got"].get("aupa!", 0) <= 2 * 8, discover
    assert set(discover["got"]) <= {"aupa!", "hor?", "dale!"}, discover
    assert sum(len(k) * v for k, v in discover["got"].items()) < discover["sent"]["bytes"]

    code, stopped, stderr = victim.stop(signal.SIGTERM)
    assert code == 0 and stderr == ""
    stats = stopped["stats"]
    assert stats["dropped_respond_outside_window"] >= 2 * 183
    assert stats["dropped_respond_repeated"] == 99
    assert stats["dropped_discover_reservations_full"] > 0
    assert f"{hn.address}:21450" in stopped["peers"]
    print(f"admitted after {admitted_after:.2f} s under the flood; "
          f"{discover['sent']['datagrams']} pelotari? earned {discover['got'].get('aupa!', 0)} aupa!")
