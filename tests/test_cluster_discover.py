"""`--discover`: backbone cluster members that find each other on a LAN with no address typed
(prototari), and clients that find them (docs/protocols/fyrehose-cluster.md, "Discovery").

The codec and the list-fixing logic on the sans-IO cores, with an injected clock; then three
members and two clients as processes in network namespaces on one bridge (the `lan` fixture):
messages flow, the active is SIGKILLed, the clients follow the new one, and every message the
publisher saw confirmed reaches the subscriber."""
import json
import re
import signal
import subprocess
import threading

import pytest
from conftest import PELOTARI, wait_for
from nodeproc import NodeProcess

from pelotari.fyrehose import discover as d

KEY = b"a secret the members share, 32 b"
PORTS = (2323, 2324, 2325)
HOSTS = ["10.9.0.2", "10.9.0.3", "10.9.0.4"]


def member(host, now=0.0, size=3, key=KEY, **kw):
    return d.MemberDiscovery(b"test", host, size, PORTS, now, key=key, incarnation=7, **kw)


def announce(host, members=(), key=KEY, name=b"test", size=3, ports=PORTS, incarnation=1,
             kind=d.ANNOUNCE, token=bytes(16)):
    return d.encode(d.Announcement(kind, name, host, *ports, size, incarnation, token,
                                   tuple(members)), key)


def events(core):
    out = []
    while (ev := core.next_event()) is not None:
        out.append(ev)
    return out


class Lan:
    """Members' discovery cores wired together as prototari peers (every one the peer of every
    other), with a clock; deliver() moves announcements until none is in flight."""

    def __init__(self, hosts, now=0.0, **kw):
        self.now = now
        self.cores = {h: member(h, now, **kw) for h in hosts}
        for h, core in self.cores.items():
            for other in self.cores:
                if other != h:
                    core.peer_joined(other, now)

    def run(self, seconds, step=0.1, drop=lambda src, dst: False):
        end = self.now + seconds
        while self.now < end:
            self.now = round(self.now + step, 6)
            for core in self.cores.values():
                core.handle_timer(self.now)
                assert core.get_timer() > self.now  # (an adapter would spin otherwise)
            for h, core in list(self.cores.items()):
                for data, ip in core.datagrams_to_send():
                    if ip in self.cores and not drop(h, ip):
                        self.cores[ip].receive(data, h, self.now)


# ---- the codec ------------------------------------------------------------------------------

def test_an_announcement_round_trips_and_every_kind_is_128_bytes():
    data = announce("10.9.0.3", members=("10.9.0.4", "10.9.0.2", "10.9.0.3"))
    assert len(data) == d.SIZE == 128 and data.startswith(b"fyrehose-cluster")
    ann = d.decode(data, KEY)
    assert ann.members == ("10.9.0.2", "10.9.0.3", "10.9.0.4")  # sorted by address
    assert (ann.host, ann.ports, ann.size, ann.keyed) == ("10.9.0.3", PORTS, 3, True)
    ask = d.encode_ask(b"t" * 16, b"test")
    assert len(ask) == 128 and d.decode(ask).token == b"t" * 16
    assert d.decode(d.encode_ask(b"t" * 16)).name == b""  # any cluster


@pytest.mark.parametrize("mangle, reason", [
    (lambda b: b[:-1], "bad_size"),
    (lambda b: b + b"\0", "bad_size"),
    (lambda b: b"x" + b[1:], "bad_magic"),
    (lambda b: b[:16] + b"\x02" + b[17:], "bad_version"),
    (lambda b: b[:17] + b"\x09" + b[18:], "bad_kind"),
    (lambda b: b[:100] + b"\xff" + b[101:], "bad_tag"),  # any byte under the tag
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "bad_tag"),
])
def test_garbage_is_refused_with_a_reason(mangle, reason):
    with pytest.raises(d.BadAnnouncement, match=reason):
        d.decode(mangle(announce("10.9.0.3")), KEY)


def test_fields_out_of_their_rules_are_refused():
    import struct

    def body(**change):
        fields = dict(zip(["magic", "version", "kind", "flags", "size", "count", "name_len",
                           "data", "bully", "cluster", "host", "inc", "token", "members", "name",
                           "reserved"], d._LAYOUT.unpack(announce("10.9.0.3", key=None)[:112])))
        fields.update(change)
        return d._LAYOUT.pack(*fields.values()) + bytes(16)
    assert d.decode(body())  # the untouched one is fine
    four = b"".join(map(bytes, ([10, 9, 0, 2], [10, 9, 0, 3]))) + bytes(12)
    for change in [dict(flags=0x4), dict(reserved=b"\0\0\0\1"), dict(name_len=33),
                   dict(name_len=0), dict(size=1), dict(size=6), dict(data=0),
                   dict(host=bytes(4)), dict(name=b"test" + b"x" + bytes(27)),
                   dict(flags=d.F_FIXED, count=0), dict(count=2, members=four),
                   dict(flags=d.F_FIXED, count=2, members=four),  # count != size
                   dict(flags=d.F_FIXED, count=3, members=four[4:8] + four[:4] + b"\n\t\0\4"
                        + bytes(8))]:  # not sorted
        with pytest.raises(d.BadAnnouncement, match="bad_field"):
            d.decode(body(**change))
    with pytest.raises(d.BadAnnouncement, match="bad_field"):  # a tag on an unkeyed one
        d.decode(body()[:-1] + b"\1")
    with pytest.raises(d.BadAnnouncement, match="unkeyed"):  # a member with a key wants one
        d.decode(body(), KEY)
    assert struct.calcsize("!16sBBBBBBHHH4sQ16s20s32s4s") == 112


# ---- the member: fixing the list ------------------------------------------------------------

def test_three_members_fix_the_same_list_after_the_settle_time():
    lan = Lan(HOSTS)
    lan.run(0.5)
    assert all(c.fixed is None for c in lan.cores.values())  # (settle: one interval)
    lan.run(2.0)
    assert {c.fixed for c in lan.cores.values()} == {tuple(HOSTS)}
    for core in lan.cores.values():
        fixed = [e for e in events(core) if isinstance(e, d.Fixed)]
        assert len(fixed) == 1 and fixed[0].members == tuple(HOSTS)
        assert not any(k.startswith("dropped") for k in core.stats), core.stats


def test_a_member_restarted_later_adopts_the_list_the_others_announce():
    lan = Lan(HOSTS)
    lan.run(3.0)
    old = lan.cores[HOSTS[2]]
    # It comes back with nothing (a new incarnation); one running member's word and its own
    # place in the list are a majority of 3.
    new = d.MemberDiscovery(b"test", HOSTS[2], 3, PORTS, lan.now, key=KEY, incarnation=8)
    lan.cores[HOSTS[2]] = new
    new.peer_joined(HOSTS[0], lan.now)
    lan.run(0.3, drop=lambda src, dst: HOSTS[1] in (src, dst))
    assert new.fixed == tuple(HOSTS) and new.fixed == old.fixed
    assert [e.how for e in events(new) if isinstance(e, d.Fixed)] == ["adopted"]


def test_a_list_is_adopted_only_once_a_majority_of_it_announces_it():
    five = [f"10.9.0.{i}" for i in range(2, 7)]
    core = member(five[0], size=5)
    for ip in five[1:3]:
        core.peer_joined(ip, 0.0)
    core.receive(announce(five[1], members=five, size=5), five[1], 0.1)
    core.handle_timer(0.2)
    assert core.fixed is None and core.get_timer() > 0.2  # two of five: not yet
    assert [type(e) for e in events(core)] == [d.Heard, d.Waiting]
    core.receive(announce(five[2], members=five, size=5), five[2], 0.3)
    assert core.fixed == tuple(five)  # three of five, this one included
    assert events(core)[-1] == d.Fixed(tuple(five), "adopted", five[1])


def test_more_members_than_the_size_fix_no_list_and_say_so_once():
    hosts = HOSTS + ["10.9.0.5"]
    lan = Lan(hosts)
    lan.run(5.0)
    for core in lan.cores.values():
        assert core.fixed is None
        too = [e for e in events(core) if isinstance(e, d.TooMany)]
        assert [e.hosts for e in too] == [tuple(hosts)]
    del lan.cores["10.9.0.5"]  # the extra one stops: its announcements expire
    for core in lan.cores.values():
        core.peer_left("10.9.0.5", lan.now)
    lan.run(3.0)
    assert {c.fixed for c in lan.cores.values()} == {tuple(HOSTS)}


def test_a_late_fourth_member_is_refused_by_the_majority_s_list():
    lan = Lan(HOSTS)
    lan.run(3.0)
    late = member("10.9.0.1", lan.now)
    lan.cores["10.9.0.1"] = late
    for h in HOSTS:
        late.peer_joined(h, lan.now)
        lan.cores[h].peer_joined("10.9.0.1", lan.now)
    lan.run(1.0)
    assert late.fixed is None and late.refused.members == tuple(HOSTS)
    assert [type(e) for e in events(late)].count(d.NotAMember) == 1
    for h in HOSTS:  # the members keep their list, and say once who knocked
        assert lan.cores[h].fixed == tuple(HOSTS)
        assert [e.host for e in events(lan.cores[h]) if isinstance(e, d.Stranger)] == \
            ["10.9.0.1"]


def test_forged_and_garbage_announcements_are_counted_and_dropped():
    core = member(HOSTS[0])
    core.peer_joined(HOSTS[1], 0.0)
    for data, ip in [
        (b"\x00junk", HOSTS[1]),  # another application's prototari data
        (announce(HOSTS[1])[:-3], HOSTS[1]),
        (announce(HOSTS[1], key=b"not the members' key, but long"), HOSTS[1]),
        (announce(HOSTS[1], key=None), HOSTS[1]),
        (announce(HOSTS[2]), HOSTS[1]),  # speaks for another host
        (announce(HOSTS[1], name=b"other"), HOSTS[1]),
        (announce(HOSTS[1], size=5), HOSTS[1]),
        (announce(HOSTS[1], ports=(1, 2, 3)), HOSTS[1]),
        (announce(HOSTS[1], kind=d.ANSWER, members=(HOSTS[0], HOSTS[1], HOSTS[2])), HOSTS[1]),
    ]:
        core.receive(data, ip, 0.1)
    assert core.members == {} and core.fixed is None
    assert {k: v for k, v in core.stats.items() if k != "announcements_out"} == {
        "not_announcement": 1, "dropped_bad_size": 1, "dropped_bad_tag": 1,
        "dropped_unkeyed": 1, "dropped_host_mismatch": 1, "dropped_other_cluster": 1,
        "dropped_mismatch": 2, "dropped_bad_kind": 1}
    assert [e.what for e in events(core)] == ["--cluster-size 5", "ports 1/2/3"]


def test_a_flood_of_announcers_is_bounded_and_keyed_members_still_fix():
    """A stranger without the key, announcing from 10,000 addresses (prototari would have
    registered at most max_peers of them): nothing is kept; the members fix their list."""
    lan = Lan(HOSTS)
    core = lan.cores[HOSTS[0]]
    for i in range(10000):
        ip = f"10.8.{i // 250}.{i % 250 + 1}"
        core.peer_joined(ip, 0.0)
        core.receive(announce(ip, key=b"a stranger's own key, 20 bytes+"), ip, 0.0)
    assert len(core.peers) <= 64 and core.members == {}
    assert core.stats["dropped_bad_tag"] == 10000
    lan.run(3.0)
    assert {c.fixed for c in lan.cores.values()} == {tuple(HOSTS)}
    # Without a key, announcements that decode are kept, at most max_entries of them.
    open_core = member(HOSTS[0], key=None, max_entries=64)
    for i in range(1000):
        ip = f"10.8.{i // 250}.{i % 250 + 1}"
        open_core.receive(announce(ip, key=None), ip, 0.0)
    assert len(open_core.members) == 64 and open_core.stats["dropped_table_full"] == 936
    assert open_core.fixed is None  # too many: it waits (the Security section's residual)


def test_a_peer_that_is_no_backbone_hears_three_announcements_then_nothing():
    core = member(HOSTS[0])
    core.peer_joined("10.9.0.77", 0.0)
    sent = []
    for step in range(1, 100):
        core.handle_timer(step * 0.1)
        sent += core.datagrams_to_send()
    assert [ip for _, ip in sent] == ["10.9.0.77"] * 3
    assert core.get_timer() == float("inf")


def test_asks_are_answered_once_fixed_as_large_and_rate_limited():
    lan = Lan(HOSTS)
    core = lan.cores[HOSTS[0]]
    ask = d.encode_ask(b"k" * 16, b"test")
    assert core.answer(ask, ("10.9.0.9", 4000), lan.now) is None  # nothing fixed yet
    lan.run(3.0)
    reply = core.answer(ask, ("10.9.0.9", 4000), lan.now)
    assert len(reply) == len(ask)
    ann = d.decode(reply, KEY)
    assert (ann.kind, ann.token, ann.members) == (d.ANSWER, b"k" * 16, tuple(HOSTS))
    assert core.answer(ask, ("10.9.0.9", 4000), lan.now + 0.01) is None  # per source
    assert core.answer(d.encode_ask(b"k" * 16, b"other"), ("10.9.0.10", 1), lan.now) is None
    assert core.answer(b"fyrehose-cluster junk", ("10.9.0.11", 1), lan.now) is None
    answered = sum(core.answer(ask, (f"10.7.{i // 250}.{i % 250}", 1), lan.now + 1) is not None
                   for i in range(1000))
    assert answered <= 101  # a burst of half a second's worth (answer_rate 200/s), then none
    assert core.stats["asks_rate_limited"] >= 899


# ---- the client's search ----------------------------------------------------------------------

def answer_from(core, search, ip, now):
    """The member at ip answers the search's ASKs to it (the client is at 10.9.0.50)."""
    for data, to in search.datagrams_to_send():
        if to[0] == ip:
            reply = core.answer(data, ("10.9.0.50", 5555), now)
            if reply is not None:
                search.answered(reply, (ip, 2325), now)


def test_a_search_needs_a_majority_of_the_members_to_answer_alike():
    lan = Lan(HOSTS)
    lan.run(3.0)
    search = d.ClusterSearch(b"test", lan.now)
    search.heard(b"pelotari?", HOSTS[0], lan.now)
    search.heard(b"hor?", HOSTS[1], lan.now)  # not a broadcast of discovery
    answer_from(lan.cores[HOSTS[0]], search, HOSTS[0], lan.now)
    assert search.result is None  # one of three
    search.heard(b"pelotari?", HOSTS[1], lan.now)
    search.answered(announce(HOSTS[1], members=HOSTS, kind=d.ANSWER, token=bytes(16)),
                    (HOSTS[1], 2325), lan.now)  # not our token
    search.answered(b"garbage", (HOSTS[1], 2325), lan.now)
    search.answered(b"garbage", ("10.9.0.99", 2325), lan.now)  # never asked
    assert search.result is None
    answer_from(lan.cores[HOSTS[1]], search, HOSTS[1], lan.now)
    assert search.result == tuple((h, 2323) for h in HOSTS)
    assert search.stats["dropped_not_ours"] == 1 and search.stats["dropped_bad_size"] == 1
    assert search.stats["dropped_not_asked"] == 1 and search.stats["dropped_not_discover"] == 1


def test_a_search_without_a_name_refuses_to_choose_between_two_clusters():
    one, two = Lan(HOSTS), Lan(["10.9.1.2", "10.9.1.3"], size=2)
    for core in two.cores.values():
        core.name = b"two"
    one.run(3.0)
    two.run(3.0)
    search = d.ClusterSearch(None, 3.0)
    for ip in ("10.9.1.2", "10.9.1.3"):  # (the majority of two is two)
        search.heard(b"pelotari?", ip, 3.0)
        answer_from(two.cores[ip], search, ip, 3.0)
    assert search.result == (("10.9.1.2", 2323), ("10.9.1.3", 2323))
    search = d.ClusterSearch(None, 4.0)
    search.heard(b"pelotari?", HOSTS[0], 4.0)
    answer_from(one.cores[HOSTS[0]], search, HOSTS[0], 4.0)
    search.heard(b"pelotari?", "10.9.1.2", 4.0)
    answer_from(two.cores["10.9.1.2"], search, "10.9.1.2", 4.0)
    search.heard(b"pelotari?", "10.9.1.3", 4.0)
    with pytest.raises(d.DiscoverError, match="several backbone clusters"):
        answer_from(two.cores["10.9.1.3"], search, "10.9.1.3", 4.0)


@pytest.mark.slow  # a process per case
def test_usage_errors_are_one_line():
    for argv, text in [
        (["backbone", "--cluster", "x", "--discover"], "--discover needs --cluster-size"),
        (["backbone", "--discover"], "--discover needs --cluster NAME"),
        (["backbone", "--cluster", "x", "--discover", "--cluster-size", "3", "--peers",
          "10.0.0.9"], "exclude each other"),
        (["backbone", "--cluster", "x", "--host", "127.0.0.9", "--peers", "127.0.0.8",
          "--cluster-size", "3"], "--cluster-size 3, but --peers lists 1"),
        (["backbone", "--cluster", "x", "--host", "127.0.0.9", "--discover",
          "--cluster-size", "3"], "--discover needs the primary address of an interface"),
        (["sub", "--discover", "x", "-b", "127.0.0.1"], "give -b"),
        (["sub", "--cluster-port", "9"], "need --discover"),
    ]:
        res = subprocess.run(PELOTARI + argv, capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        assert res.returncode == 2 and text in res.stderr, (argv, res.stderr)


# ---- on a namespaced LAN ------------------------------------------------------------------------

ACTIVE = re.compile(r"active: epoch (\d+), sequencing from (\d+)")
FOLLOWING = re.compile(r"standby: following the active at ([\d.]+):")
FIXED = re.compile(r"members fixed \((\w+)[^)]*\): (.*)$")


def lines(p, pattern):
    return [m for m in map(pattern.search, p.stderr) if m]


def start_member(lan, host, tmp_path):
    key = tmp_path / "cluster.key"
    key.write_bytes(KEY)
    return NodeProcess("backbone", "--cluster", "test", "--discover", "--cluster-size", "3",
                       "--state-dir", str(tmp_path / host.name), "--stats-interval", "60",
                       "--cluster-key-file", str(key), as_json=False,
                       stdin=subprocess.DEVNULL,
                       popen=lambda argv, **kw: lan.spawn(host, argv, **kw))


@pytest.mark.slow  # real processes in namespaces
def test_members_and_clients_find_each_other_and_follow_a_failover(lan, tmp_path):
    """Three members started with no address typed fix one list; a subscriber and a publisher
    with --discover find them; SIGKILL the active mid-stream; every message the publisher saw
    confirmed reaches the subscriber; the killed member, started again, adopts the list."""
    hosts = [lan.add_host(n) for n in ("m1", "m2", "m3")]
    client = lan.add_host("c")
    everyone = sorted((h.address for h in hosts), key=d.ip_key)
    procs = {h.name: start_member(lan, h, tmp_path) for h in hosts}
    sub = pub = None
    try:
        def the_active():
            found = [n for n, p in procs.items() if p.proc.poll() is None and lines(p, ACTIVE)]
            return found[0] if len(found) == 1 else None
        assert wait_for(the_active, 60), {n: p.stderr_text(0) for n, p in procs.items()}
        for p in procs.values():
            assert [m.group(2) for m in lines(p, FIXED)] == [", ".join(everyone)]
        old = the_active()
        assert wait_for(lambda: all(lines(procs[n], FOLLOWING) for n in procs if n != old), 60)
        sub = NodeProcess("sub", "--discover", "test", "--json", as_json=False,
                          stdin=subprocess.DEVNULL,
                          popen=lambda argv, **kw: lan.spawn(client, argv, **kw))
        got = []

        def received():
            while not sub.events.empty():
                got.append(json.loads(sub.events.get()))
            return got

        def warm():  # the subscriber found the cluster and is signed on at the active
            lan.exec_in(client.namespace, *PELOTARI, "pub", "--timeout", "5", "warm",
                        "--discover=test", check=False)
            return any(m.get("data") == "warm" for m in received())
        assert wait_for(warm, 60), sub.stderr_text(0)
        assert "discovered cluster 'test': " + ", ".join(f"{h}:2323" for h in everyone) in \
            sub.stderr_text(0)
        pub = lan.spawn(client, PELOTARI + ["pub", "-r", "200", "--timeout", "10",
                                            "--discover=test"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        stdin=subprocess.PIPE)
        result = {}
        talk = threading.Thread(target=lambda: result.update(zip(("out", "err"), pub.communicate(
            "".join(f"m{i}\n" for i in range(600)), timeout=150))))
        talk.start()
        assert wait_for(lambda: len(received()) >= 101, 60), sub.stderr_text(0)
        procs[old].send(signal.SIGKILL)
        talk.join(180)
        out, err = result["out"], result["err"]
        assert pub.returncode == 0, err.splitlines()[-3:]
        confirmed = [int(line.split("\t")[0]) for line in out.splitlines() if "\t" in line]
        assert len(confirmed) == 600, err
        assert re.search(r"followed [1-9]\d* failover", err), err
        want = set(confirmed)

        def missing():
            return want - {m["sequence"] for m in received() if "sequence" in m}
        assert wait_for(lambda: not missing(), 60), (sorted(missing())[:10], [
            m for m in got if "lost" in m])
        # The killed member, started again, adopts the list the others announce.
        procs[old].proc.wait(30)
        procs[old] = start_member(lan, next(h for h in hosts if h.name == old), tmp_path)
        assert wait_for(lambda: lines(procs[old], FOLLOWING), 60), procs[old].stderr_text(0)
        assert [(m.group(1), m.group(2)) for m in lines(procs[old], FIXED)] == [
            ("adopted", ", ".join(everyone))]
    finally:
        if pub is not None and pub.poll() is None:
            pub.kill()
        if sub is not None:
            sub.stop(signal.SIGTERM)
        codes = {n: p.stop(signal.SIGTERM)[0] for n, p in procs.items()
                 if p.proc.poll() is None}
    assert all(code == 0 for code in codes.values()), codes


@pytest.mark.slow  # a real process in a namespace
def test_a_client_that_finds_nothing_says_so_in_one_line(lan):
    host = lan.add_host("c")
    res = lan.exec_in(host.namespace, *PELOTARI, "sub", "--discover", "nobody",
                      "--discover-timeout", "1", check=False)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        "discovering cluster 'nobody' on the LAN (up to 1 s)",
        "Error: no backbone cluster 'nobody' found on this LAN within 1 s (no prototari "
        "broadcast (`pelotari?`) reached this host; members run `pelotari backbone --cluster "
        "NAME --discover`)"]


@pytest.mark.slow  # real processes in a namespace
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_a_member_or_a_client_still_discovering_stops_cleanly(lan, tmp_path, sig, code):
    host = lan.add_host("m")
    alone = start_member(lan, host, tmp_path)
    client = NodeProcess("sub", "--discover", "test", "--discover-timeout", "600", as_json=False,
                         stdin=subprocess.DEVNULL,
                         popen=lambda argv, **kw: lan.spawn(host, argv, **kw))
    assert wait_for(lambda: "discovering: cluster 'test' of 3" in alone.stderr_text(0), 60)
    assert wait_for(lambda: "discovering cluster 'test' on the LAN" in client.stderr_text(0), 60)
    assert alone.stop(sig)[0] == (130 if sig == signal.SIGINT else 0), alone.stderr_text()
    assert "stopped after" in alone.stderr_text()
    assert client.stop(sig)[0] == code, client.stderr_text()
    assert client.stderr_text().strip().splitlines()[-1] == \
        "interrupted while discovering the cluster"
    assert alone.group_gone() and client.group_gone()
