"""Issue 11's prototari rules on the sans-IO core (injected clock, no sleeping), each at its
limit and one past it:

* a peer is its IP address; everything goes to its IP at the unicast port; datagrams are
  accepted from any source port of a registered IP (multi_node opts into IP:port);
* `aupa!` counts only within response_window of our last broadcast; one IP is one peer;
* reservations for strangers' broadcasts are bounded (half the table by default);
* a stranger never gets more bytes back than it sent.
"""
import pytest

from pelotari.prototari.core import (
    CONFIRM,
    DATA_MAGIC,
    DISCOVER,
    PING,
    PONG,
    RESPOND,
    Config,
    Message,
    NodeCore,
    PeerJoined,
)

ME = ("10.9.0.1", 21450)
BRD = ("10.9.0.255", 21451)


def node(now=0.0, **cfg):
    """A node that broadcast at `now` (so its response window opened then)."""
    cfg.setdefault("broadcast_address", BRD[0])
    n = NodeCore(now, Config(**cfg), self_addresses={ME})
    n.handle_timer(now)
    assert n.datagrams_to_send() == [(DISCOVER, BRD)] and n.last_broadcast == now
    return n


def events(n):
    out = []
    while (ev := n.next_event()) is not None:
        out.append(ev)
    return out


# ---- 7. a peer is its IP address --------------------------------------------------------------

def test_a_response_from_an_ephemeral_port_registers_the_address_and_confirms_at_21450():
    n = node()
    n.receive_datagram(RESPOND, ("10.9.0.7", 40001), 0.1)  # the Go implementation's ephemeral port
    assert events(n) == [PeerJoined(("10.9.0.7", 21450), "handshake")]
    assert n.datagrams_to_send() == [(CONFIRM, ("10.9.0.7", 21450))]


def test_a_broadcast_from_an_ephemeral_port_is_answered_at_21450_and_confirmed_from_any_port():
    n = node(broadcast_interval=100)
    n.receive_datagram(DISCOVER, ("10.9.0.7", 53000), 0.1)
    assert n.datagrams_to_send() == [(RESPOND, ("10.9.0.7", 21450))]  # not to port 53000
    assert set(n.reservations) == {("10.9.0.7", 21450)}
    n.receive_datagram(CONFIRM, ("10.9.0.7", 53999), 0.2)  # dale! from yet another port
    assert events(n) == [PeerJoined(("10.9.0.7", 21450), "confirmation")]


def test_every_message_from_any_port_of_a_peer_counts_and_replies_go_to_21450():
    n = node(inactive_peer_time=3.0)
    n.receive_datagram(RESPOND, ("10.9.0.7", 40001), 0.1)
    n.datagrams_to_send(), events(n)
    n.receive_datagram(DATA_MAGIC + b"hi", ("10.9.0.7", 40002), 0.2)
    assert events(n) == [Message(("10.9.0.7", 21450), b"hi")]
    n.receive_datagram(PING, ("10.9.0.7", 40003), 0.3)
    assert n.datagrams_to_send() == [(PONG, ("10.9.0.7", 21450))]
    n.handle_timer(3.3)  # inactive since 0.3: hor? to 21450
    assert n.datagrams_to_send() == [(PING, ("10.9.0.7", 21450))]
    n.receive_datagram(PONG, ("10.9.0.7", 40004), 3.4)
    assert n.peers[("10.9.0.7", 21450)].pongs == 1 and n.peers[("10.9.0.7", 21450)].missed == 0
    n.send(("10.9.0.7", 12345), b"x")  # a peer is its address: any port names it
    assert n.datagrams_to_send() == [(DATA_MAGIC + b"x", ("10.9.0.7", 21450))]


def test_a_configured_unicast_port_is_where_everything_goes():
    n = node(unicast_port=30000)
    n.receive_datagram(DISCOVER, ("10.9.0.7", 21450), 0.1)
    n.receive_datagram(RESPOND, ("10.9.0.8", 21450), 0.1)
    assert n.datagrams_to_send() == [(RESPOND, ("10.9.0.7", 30000)), (CONFIRM, ("10.9.0.8", 30000))]


def test_one_address_is_one_reservation_and_one_peer_whatever_its_ports():
    n = node()
    for port in range(50000, 50005):
        n.receive_datagram(DISCOVER, ("10.9.0.7", port), 0.1)
    assert n.datagrams_to_send() == [(RESPOND, ("10.9.0.7", 21450))]  # one aupa!, not five
    assert n.stats["dropped_discover_already_reserved"] == 4
    for port in range(40000, 40100):  # 100 aupa! from one address, inside the window
        n.receive_datagram(RESPOND, ("10.9.0.8", port), 0.2)
    assert set(n.peers) == {("10.9.0.8", 21450)}
    assert n.datagrams_to_send() == [(CONFIRM, ("10.9.0.8", 21450))]  # one dale!, not 100
    assert n.stats["dropped_respond_repeated"] == 99


def test_our_own_addresses_are_ignored_from_any_port():
    n = node()
    n.receive_datagram(DISCOVER, (ME[0], 40000), 0.1)
    n.receive_datagram(RESPOND, (ME[0], 21450), 0.1)
    assert n.stats["own_datagrams"] == 2 and not n.peers and n.datagrams_to_send() == []


def test_multi_node_replies_to_the_source_port_and_another_port_of_ours_is_a_peer():
    n = node(multi_node=True)
    n.receive_datagram(RESPOND, ("10.9.0.7", 40001), 0.1)
    n.receive_datagram(RESPOND, (ME[0], 21460), 0.1)  # a second node on this host
    n.receive_datagram(DISCOVER, ME, 0.1)  # our own broadcast
    assert set(n.peers) == {("10.9.0.7", 40001), (ME[0], 21460)}
    assert n.datagrams_to_send() == [(CONFIRM, ("10.9.0.7", 40001)), (CONFIRM, (ME[0], 21460))]
    assert n.stats["own_datagrams"] == 1


# ---- 8. aupa! only answers our broadcast -----------------------------------------------------

@pytest.mark.parametrize("after,accepted", [(0.0, True), (1.999, True), (2.0, False), (2.001, False)])
def test_a_response_counts_only_within_the_window_after_our_broadcast(after, accepted):
    n = node(now=10.0, response_window=2.0)
    n.receive_datagram(RESPOND, ("10.9.0.7", 21450), 10.0 + after)
    assert bool(n.peers) is accepted
    if not accepted:
        assert n.datagrams_to_send() == [] and events(n) == []  # nothing back, nothing kept
        assert n.stats["dropped_respond_outside_window"] == 1


def test_a_response_before_any_broadcast_is_dropped():
    n = NodeCore(0.0, Config(broadcast_address=BRD[0]))
    n.receive_datagram(RESPOND, ("10.9.0.7", 21450), 0.0)
    assert not n.peers and n.datagrams_to_send() == []
    assert n.stats["dropped_respond_outside_window"] == 1


def test_the_window_reopens_at_each_broadcast():
    n = node(broadcast_interval=5.0, response_window=1.0)
    n.receive_datagram(RESPOND, ("10.9.0.7", 21450), 4.0)
    assert not n.peers
    n.handle_timer(5.0)
    assert n.datagrams_to_send() == [(DISCOVER, BRD)]
    n.receive_datagram(RESPOND, ("10.9.0.7", 21450), 5.5)
    assert set(n.peers) == {("10.9.0.7", 21450)}


def test_a_lost_confirmation_is_repeated_once_per_broadcast():
    n = node(broadcast_interval=5.0)
    n.receive_datagram(RESPOND, ("10.9.0.7", 21450), 0.1)
    n.datagrams_to_send()
    n.receive_datagram(RESPOND, ("10.9.0.7", 21450), 0.2)  # same broadcast: already confirmed
    assert n.datagrams_to_send() == []
    n.handle_timer(5.0)
    n.datagrams_to_send()
    for t in (5.1, 5.2):  # the next broadcast: it still lacks us, so confirm again, once
        n.receive_datagram(RESPOND, ("10.9.0.7", 21450), t)
    assert n.datagrams_to_send() == [(CONFIRM, ("10.9.0.7", 21450))]
    assert n.stats["reconfirmed"] == 1 and n.stats["dropped_respond_repeated"] == 2


def test_a_flood_of_unsolicited_responses_takes_no_spot_and_a_new_node_still_joins():
    """Issue 11: 100 `aupa!` filled the 64-peer table; now none outside the window count."""
    n = node(broadcast_interval=5.0, response_window=2.0)
    for i in range(100):
        n.receive_datagram(RESPOND, (f"10.9.{1 + i // 200}.{i % 200 + 2}", 40000 + i), 2.5)
    assert not n.peers and not n.full and n.datagrams_to_send() == []
    assert n.stats["dropped_respond_outside_window"] == 100
    n.handle_timer(5.0)
    assert n.datagrams_to_send() == [(DISCOVER, BRD)]  # not full: it still broadcasts
    n.receive_datagram(RESPOND, ("10.9.0.99", 21450), 5.01)  # a real node answers it
    assert set(n.peers) == {("10.9.0.99", 21450)}


def test_within_the_window_distinct_addresses_can_take_the_free_spots():
    """What a stranger that forges many source addresses can still do (documented): answer
    inside the window; every spot it takes needs one address, and the table's limit holds."""
    n = node(max_peers=4)
    for i in range(10):
        n.receive_datagram(RESPOND, (f"10.9.0.{100 + i}", 21450), 0.5)
    assert len(n.peers) == 4 and n.stats["dropped_respond_while_full"] == 6


# ---- 8. reservations are bounded -------------------------------------------------------------

@pytest.mark.parametrize("max_peers,limit", [(1, 1), (2, 1), (3, 1), (64, 32), (65, 32)])
def test_reservations_are_bounded_to_half_the_table(max_peers, limit):
    n = node(max_peers=max_peers, broadcast_interval=100)
    assert n.config.reservation_limit == limit
    for i in range(limit + 1):  # at the limit, then one past it
        n.receive_datagram(DISCOVER, (f"10.9.1.{i + 2}", 21450), 0.5)
    assert len(n.reservations) == limit
    assert len(n.datagrams_to_send()) == limit  # one aupa! (5 bytes) per pelotari? (9 bytes)
    # (with max_peers 1 that one reservation is the whole table: "full" says it first)
    assert n.stats["dropped_discover_reservations_full"] + n.stats["dropped_discover_while_full"] == 1


def test_reservations_expire_and_make_room_again():
    n = node(max_peers=4, reservation_timeout=2.0, broadcast_interval=100)
    for i in range(5):
        n.receive_datagram(DISCOVER, (f"10.9.1.{i + 2}", 21450), 0.5)
    assert len(n.reservations) == 2
    n.handle_timer(2.49)
    assert len(n.reservations) == 2
    n.handle_timer(2.5)  # reserved at 0.5 for 2 s
    assert not n.reservations and n.stats["reservations_expired"] == 2
    n.datagrams_to_send()
    n.receive_datagram(DISCOVER, ("10.9.1.50", 21450), 2.6)
    assert n.datagrams_to_send() == [(RESPOND, ("10.9.1.50", 21450))]


def test_max_reservations_can_be_set():
    n = node(max_peers=64, max_reservations=3)
    for i in range(4):
        n.receive_datagram(DISCOVER, (f"10.9.1.{i + 2}", 21450), 0.5)
    assert len(n.reservations) == 3


def test_a_discover_flood_from_many_addresses_does_not_lock_out_a_real_node():
    n = node(max_peers=4, reservation_timeout=1.0, broadcast_interval=2.0, response_window=0.5)
    t = 0.0
    while t < 6.0:  # 50 forged broadcasters, 20 times a second, for 6 s
        for i in range(50):
            n.receive_datagram(DISCOVER, (f"10.9.2.{i + 2}", 21450), t)
        if n.get_timer() <= t:
            n.handle_timer(t)
        assert len(n.reservations) <= 2
        if t == 4.0:  # our broadcast went out at 4.0; a real node answers it
            n.receive_datagram(RESPOND, ("10.9.0.99", 21450), 4.0)
        t = round(t + 0.05, 2)
    assert ("10.9.0.99", 21450) in n.peers
    aupas = [d for d, _ in n.datagrams_to_send() if d == RESPOND]
    assert len(aupas) <= 2 * 7  # two reservations, each renewed at most once a second


# ---- a stranger gets back no more bytes than it sent -----------------------------------------

def test_strangers_get_nothing_but_one_aupa_per_discover():
    n = node(broadcast_interval=100, response_window=1.0)
    sent = received = 0
    stranger = ("10.9.3.3", 40000)
    for data in (PING, PONG, CONFIRM, DATA_MAGIC + b"x", b"junk", RESPOND, DISCOVER, DISCOVER,
                 PING):
        n.receive_datagram(data, stranger, 5.0)  # outside the window
        sent += len(data)
        received += sum(len(d) for d, _ in n.datagrams_to_send())
    assert received == len(RESPOND)  # one aupa!, for the first pelotari?
    assert received <= sent and n.stats["dropped_ping_from_stranger"] == 2


# ---- a registered peer's IP gets at most one `hemen nago!` per pong_interval -------------------

def peer_node(**cfg):
    n = node(broadcast_interval=100, inactive_peer_time=100, **cfg)
    n.receive_datagram(RESPOND, ("10.9.0.7", 40001), 0.1)
    n.datagrams_to_send(), events(n)
    return n


def pongs(n):
    return [d for d, _ in n.datagrams_to_send() if d == PONG]


def test_hor_is_answered_at_most_once_per_pong_interval_from_any_port():
    n = peer_node()
    assert Config().pong_interval == 0.1
    n.receive_datagram(PING, ("10.9.0.7", 40002), 1.0)
    assert pongs(n) == [PONG]
    for port, t in ((40003, 1.0), (40004, 1.05), (40005, 1.0999)):  # one past: inside 100 ms
        n.receive_datagram(PING, ("10.9.0.7", port), t)  # a forger using the peer's IP
        assert pongs(n) == [], t
    n.receive_datagram(PING, ("10.9.0.7", 40006), 1.1)  # at the limit: answered
    assert pongs(n) == [PONG]
    n.receive_datagram(PING, ("10.9.0.7", 40007), 1.1999)
    assert pongs(n) == [] and n.stats["dropped_ping_rate_limited"] == 4


def test_a_hor_flood_toward_a_peer_is_bounded_by_bytes():
    n = peer_node()
    sent = 0
    for k in range(10000):  # 10,000 hor? over 1 s
        n.receive_datagram(PING, ("10.9.0.7", 40000 + k % 1000), 1.0 + k / 10000)
        sent += len(pongs(n)) * len(PONG)
    assert sent <= 10 * len(PONG)  # at most one 11-byte answer per 100 ms


def test_pong_interval_is_per_peer_and_settable():
    n = peer_node(pong_interval=0.5)
    n.receive_datagram(RESPOND, ("10.9.0.8", 40001), 0.2)  # a second peer, in the window
    n.datagrams_to_send()
    n.receive_datagram(PING, ("10.9.0.7", 40002), 1.0)
    n.receive_datagram(PING, ("10.9.0.8", 40002), 1.0)  # the other peer's limit is its own
    assert pongs(n) == [PONG, PONG]
    n.receive_datagram(PING, ("10.9.0.7", 40002), 1.4999)
    assert pongs(n) == []
    n.receive_datagram(PING, ("10.9.0.7", 40002), 1.5)
    assert pongs(n) == [PONG]
    unlimited = peer_node(pong_interval=0)
    for _ in range(3):
        unlimited.receive_datagram(PING, ("10.9.0.7", 40002), 1.0)
    assert pongs(unlimited) == [PONG] * 3
    with pytest.raises(ValueError):
        Config(pong_interval=-0.1)


def test_the_heartbeat_of_a_fast_peer_is_never_rate_limited():
    """Two nodes with the CLI-test settings (inactive 0.3 s, wait 0.2 s) and b answering
    nothing but hor?: every hor? of a's is answered, none dropped."""
    a = NodeCore(0.0, Config(inactive_peer_time=0.3, heartbeat_max_wait=0.2,
                             broadcast_interval=100, broadcast_address=BRD[0]), {ME})
    b = NodeCore(0.0, Config(inactive_peer_time=100, broadcast_interval=100,
                             broadcast_address=BRD[0]), {("10.9.0.7", 21450)})
    a.handle_timer(0.0)
    a.datagrams_to_send()
    a.receive_datagram(RESPOND, ("10.9.0.7", 21450), 0.01)
    a.datagrams_to_send()
    b.receive_datagram(DISCOVER, ME, 0.0)
    b.datagrams_to_send()
    b.receive_datagram(CONFIRM, ME, 0.01)
    asked = 0
    for step in range(1, 1000):  # 10 s in 10 ms steps
        now = step / 100
        a.handle_timer(now)
        for data, _ in a.datagrams_to_send():
            if data == PING:
                asked += 1
                b.receive_datagram(PING, ME, now)
        for data, _ in b.datagrams_to_send():
            a.receive_datagram(data, ("10.9.0.7", 21450), now)
    assert asked >= 25 and b.stats["dropped_ping_rate_limited"] == 0
    assert a.peers[("10.9.0.7", 21450)].pongs == asked
