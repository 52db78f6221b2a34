"""`--metrics` on every long-running node command (prototari, swarm node, potato node, bully
start/join): real processes on 127.x with stdin from /dev/null, scraped over HTTP; the values
read back are what the nodes did; a signal stops the exporter with the node."""
import json
import signal
import subprocess
import urllib.request

import pytest

from conftest import wait_for
from nodeproc import NodeProcess, Spawner, is_event
from test_metrics_e2e import scrape
from test_bully_node import FAST as BULLY_FAST, Bully, bound_port
from test_potato_node import Potato
from test_prototari_cli import Loopback
from test_swarm_node import FAST as SWARM_FAST, Swarm, key_file, udp_port

pytestmark = pytest.mark.e2e
METRICS = ["--metrics", "127.0.0.1:0"]


def metrics_url(node):
    """The URL a node's `metrics` event announced."""
    ev = NodeProcess.wait(node, is_event("metrics"), 10)  # (some wrappers wait by name)
    assert ev, node.stderr_text()
    return ev["url"]


def status(url, query=""):
    with urllib.request.urlopen(url + "/status" + query, timeout=5) as answer:
        return json.loads(answer.read())


def stopped_cleanly(node, url):
    code = node.stop(signal.SIGINT)[0]
    assert code == 130, node.stderr_text()  # Ctrl-C's status
    assert "Traceback" not in node.stderr_text()
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/metrics", timeout=2)


def test_prototari_exports_its_peers_and_messages(port_pair):
    with Spawner(Loopback) as nodes:
        a = nodes("127.0.0.2", port_pair, *METRICS)
        b = nodes("127.0.0.3", port_pair, stdin=subprocess.DEVNULL)
        url = metrics_url(a)
        assert a.wait(is_event("joined", peer=f"127.0.0.3:{port_pair}"), 5)
        a.write(b"kaixo\n")
        assert b.wait(is_event("message", data="kaixo"), 5)
        assert wait_for(lambda: scrape(url).get("pelotari_prototari_peers") == 1, 5)
        got = scrape(url)
        assert got["pelotari_prototari_datagrams_in_total"] >= 1
        assert got["pelotari_prototari_max_peers"] == 64
        entries = status(url)["entries"]
        assert [e["address"] for e in entries] == [f"127.0.0.3:{port_pair}"]
        assert entries[0]["missed"] >= 0 and entries[0]["seconds_since_heard"] < 5
        stopped_cleanly(a, url)


def test_swarm_node_exports_its_connections_by_status(tmp_path):
    key = key_file(tmp_path / "swarm.key")
    port = udp_port("127.0.0.2", "127.0.0.3")
    with Spawner(Swarm) as swarm:
        a = swarm("--listen", f"127.0.0.2:{port}", "--key-file", key, *SWARM_FAST, *METRICS,
                  stdin=subprocess.DEVNULL)
        url = metrics_url(a)
        b = swarm("--listen", f"127.0.0.3:{port}", "--key-file", key, "--bootstrap",
                  f"127.0.0.2:{port}", *SWARM_FAST)
        assert a.wait("connected", peer=f"127.0.0.3:{port}"), a.stderr_text()
        assert wait_for(lambda: scrape(url).get(
            'pelotari_swarm_connections{status=direct}') == 1, 5)
        got = scrape(url)
        assert got["pelotari_swarm_received_bytes_total"] > 0
        assert got["pelotari_swarm_connected_total"] == 1
        entries = status(url)["entries"]
        assert [(e["address"], e["status"]) for e in entries] == [(f"127.0.0.3:{port}", "direct")]
        stopped_cleanly(a, url)
        assert b.stop()[0] == 0


def test_potato_node_exports_what_it_relayed_and_its_peer_links():
    with Spawner(Potato) as potato:
        a = potato("--name", "A", "--listen", "127.0.0.1:0", "--transport", "tcp", *METRICS,
                   stdin=subprocess.DEVNULL)
        port = a.wait("listening")["port"]
        url = metrics_url(a)
        b = potato("--name", "B", "--listen", f"127.0.0.2:{port}", "--connect",
                   f"127.0.0.1:{port}", "--transport", "tcp")
        assert b.wait("connected", peer="A")
        b.command("broadcast hello")
        assert a.wait("message", kind="broadcast", body="hello")
        got = scrape(url)
        assert got["pelotari_potato_received_broadcast_total"] == 1
        assert got["pelotari_potato_peers"] == 1
        assert got["pelotari_potato_frame_info{frame=INITIAL}"] == 1
        entries = status(url)["entries"]
        assert [(e["peer"], e["open"]) for e in entries] == [("B", True)]
        assert entries[0]["bytes_received"] > 0
        stopped_cleanly(a, url)
        assert b.stop()[0] == 0


def test_bully_leader_and_joiner_export_who_leads():
    with Spawner(Bully) as bully:
        leader = bully("start", "--bind", "127.0.0.1:0", *BULLY_FAST, *METRICS,
                       stdin=subprocess.DEVNULL)
        port = bound_port(leader)
        lead_url = metrics_url(leader)
        peer = bully("join", f"127.0.0.1:{port}", "--bind", f"127.0.0.2:{port}", *BULLY_FAST,
                     *METRICS)
        assert peer.wait(is_event("joined"), 10), peer.stderr_text()
        peer_url = metrics_url(peer)
        lead, follower = scrape(lead_url), scrape(peer_url)
        assert lead["pelotari_bully_is_leader"] == 1 and follower["pelotari_bully_is_leader"] == 0
        assert lead["pelotari_bully_id"] == 25 and 1 <= follower["pelotari_bully_id"] < 25
        assert follower[f"pelotari_bully_leader_info{{leader=127.0.0.1:{port} ID 25}}"] == 1
        assert wait_for(lambda: scrape(lead_url).get(
            "pelotari_bully_messages_sent_total{message=EntryResponse}", 0) >= 1, 5), scrape(lead_url)
        entries = status(lead_url)["entries"]
        assert [e["address"] for e in entries] == [f"127.0.0.2:{port}"]
        stopped_cleanly(peer, peer_url)
        stopped_cleanly(leader, lead_url)
