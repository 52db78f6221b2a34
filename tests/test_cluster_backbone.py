"""`pelotari backbone --cluster`, three real processes on 127.0.0.x: one active, the others
standing by (subscribed to it); SIGKILL the active and another takes over, sequencing past
every SEQUENCE the dead one gave; the killed one, started again, stands by; a seed publisher
pointed at the new active is served (docs/protocols/fyrehose-cluster.md)."""
import random
import re
import signal
import subprocess

import pytest
from conftest import PELOTARI, wait_for
from nodeproc import NodeProcess

from fastpath import refcodec
from fastpath.packets import MAX_SEQUENCE

HOSTS = ["127.0.0.91", "127.0.0.92", "127.0.0.93"]
ACTIVE = re.compile(r"active: epoch (\d+), sequencing from (\d+)")
FOLLOWING = re.compile(r"standby: following the active at ([\d.]+):")


def member(host, ports, state_dir):
    data, bully, cluster = ports
    peers = ",".join(h for h in HOSTS if h != host)
    key = state_dir.parent / "cluster.key"  # every member the same secret
    key.write_bytes(b"a secret the three members share")
    return NodeProcess("backbone", "--host", host, "--port", str(data), "--cluster", "test",
                       "--peers", peers, "--bully-port", str(bully), "--cluster-port",
                       str(cluster), "--state-dir", str(state_dir), "--stats-interval", "60",
                       "--metrics", f"{host}:{data}", "--cluster-key-file", str(key),
                       as_json=False, stdin=subprocess.DEVNULL)


def scrape(host, port, path="/metrics"):
    import urllib.request

    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as r:
        return r.read().decode()


def lines(p, pattern):
    return [m for m in map(pattern.search, p.stderr) if m]


def publish(host, port, count, tag):
    """`pelotari pub` of count messages to host:port; the SEQUENCEs it printed, confirmed."""
    res = subprocess.run(PELOTARI + ["pub", "-b", f"{host}:{port}", "-n", str(count),
                                     "--timeout", "5", f"{tag}"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    return [int(line.split("\t")[0]) for line in res.stdout.splitlines() if "\t" in line]


@pytest.mark.slow  # real processes (tests/conftest.py: the fast loop)
def test_kill_the_active_and_another_takes_over_past_its_sequences(tmp_path):
    base = random.randrange(20000, 50000)
    ports = (base, base + 1, base + 2)
    procs = {h: member(h, ports, tmp_path / h) for h in HOSTS}
    try:
        def the_active():
            found = [h for h, p in procs.items() if p.proc.poll() is None and lines(p, ACTIVE)]
            return found[0] if len(found) == 1 else None
        assert wait_for(the_active, 60), {h: p.stderr_text(0) for h, p in procs.items()}
        old = the_active()
        others = [h for h in HOSTS if h != old]
        assert wait_for(lambda: all(lines(procs[h], FOLLOWING) for h in others), 60)
        first = publish(old, ports[0], 20, "before")
        assert len(first) == 20
        procs[old].send(signal.SIGKILL)
        procs[old].proc.wait(30)

        def new_active():
            found = [h for h in others if lines(procs[h], ACTIVE)]
            return found[0] if found else None
        assert wait_for(new_active, 60), {h: procs[h].stderr_text(0) for h in others}
        new = new_active()
        epoch, start = map(int, lines(procs[new], ACTIVE)[-1].groups())
        # Past every SEQUENCE the dead active gave (mod 2^48: it started from the clock).
        assert 0 < (start - max(first)) % (MAX_SEQUENCE + 1) < 1 << 20
        after = publish(new, ports[0], 20, "after")
        assert len(after) == 20 and not set(after) & set(first)
        # The old one, started again with its state, stands by: no second outage.
        procs[old] = member(old, ports, tmp_path / old)
        assert wait_for(lambda: lines(procs[old], FOLLOWING), 60), procs[old].stderr_text(0)
        assert lines(procs[old], FOLLOWING)[-1].group(1) == new
        assert not lines(procs[old], ACTIVE)
        # A QUERY to any member is answered with the cluster's state (as large as it).
        info = query(old, ports[0])
        assert (info.addr, info.port) == (new, ports[0]) and info.epoch == epoch
        # What an operator sees: the role, epoch and failovers in /metrics and /status.
        text = scrape(new, ports[0])
        assert 'pelotari_fyrehose_cluster_role{role="active"} 1.0' in text
        value = re.search(r"^pelotari_fyrehose_cluster_epoch (\S+)$", text, re.M).group(1)
        assert float(value) == epoch
        assert "pelotari_fyrehose_cluster_became_active_total 1.0" in text
        import json
        status = json.loads(scrape(old, ports[0], "/status"))
        assert status["cluster"]["role"] == "standby" and status["cluster"]["epoch"] == epoch
        assert status["cluster"]["active"] == f"{new}:{ports[0]}"
    finally:
        codes = {h: p.stop(signal.SIGTERM)[0] for h, p in procs.items()
                 if p.proc.poll() is None}
    assert all(code == 0 for code in codes.values()), codes


def query(host, port):
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(10)
        q = refcodec.encode_query(b"q" * 16)
        s.sendto(q, (host, port))
        data, _ = s.recvfrom(2048)
        assert len(data) == len(q)
        return refcodec.decode(data)


@pytest.mark.slow  # real processes (tests/conftest.py: the fast loop)
def test_clients_given_every_member_follow_the_active_through_a_kill(tmp_path):
    """A subscriber and a publisher at 200 messages/s, both given the three members: kill the
    active mid-stream; both move to the new one; every message the publisher saw confirmed
    reaches the subscriber (repaired from journals if need be), or is reported lost; the
    publisher's re-sends are counted."""
    import json

    base = random.randrange(20000, 50000)
    ports = (base, base + 1, base + 2)
    procs = {h: member(h, ports, tmp_path / h) for h in HOSTS}
    everyone = ",".join(f"{h}:{ports[0]}" for h in HOSTS)
    sub = pub = None
    try:
        def the_active():
            found = [h for h, p in procs.items() if p.proc.poll() is None and lines(p, ACTIVE)]
            return found[0] if len(found) == 1 else None
        assert wait_for(the_active, 60)
        old = the_active()
        assert wait_for(lambda: all(lines(procs[h], FOLLOWING) for h in HOSTS if h != old), 60)
        sub = NodeProcess("sub", "-b", everyone, "--json", as_json=False,
                          stdin=subprocess.DEVNULL)
        got = []

        def received():
            while not sub.events.empty():
                got.append(json.loads(sub.events.get()))
            return got
        def warm():  # the subscriber is signed on at the active: it sees what is published
            subprocess.run(PELOTARI + ["pub", "-b", everyone, "--timeout", "5", "warm"],
                           capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
            return any(m.get("data") == "warm" for m in received())
        assert wait_for(warm, 60), sub.stderr_text(0)
        # Each message its own payload: a DELIVER confirms the publish whose DATA it carries.
        pub = subprocess.Popen(PELOTARI + ["pub", "-b", everyone, "-r", "200", "--timeout", "10"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.PIPE)
        import threading

        result = {}
        talk = threading.Thread(target=lambda: result.update(zip(("out", "err"), pub.communicate(
            "".join(f"m{i}\n" for i in range(600)), timeout=120))))
        talk.start()
        assert wait_for(lambda: len(received()) >= 101, 60), sub.stderr_text(0)
        procs[old].send(signal.SIGKILL)
        talk.join(150)
        out, err = result["out"], result["err"]
        assert pub.returncode == 0, err.splitlines()[-1:] + err.splitlines()[:2]
        confirmed = [int(line.split("\t")[0]) for line in out.splitlines() if "\t" in line]
        assert len(confirmed) == 600, err  # every publish confirmed, before or after the move
        want = set(confirmed)

        def missing():
            return want - {m["sequence"] for m in received() if "sequence" in m}
        # Confirmed to the publisher and never delivered to the live subscriber: none (what
        # the old active sent to some and not others is repaired from the journals).
        assert wait_for(lambda: not missing(), 60), (sorted(missing())[:10], [
            m for m in got if "lost" in m])
    finally:
        if pub is not None and pub.poll() is None:
            pub.kill()
        if sub is not None:
            sub.stop(signal.SIGTERM)
        for p in procs.values():
            if p.proc.poll() is None:
                p.stop(signal.SIGTERM)
