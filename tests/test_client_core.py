"""The sans-IO client core: datagrams and `now` in, datagrams and events out; no sockets."""
import pytest

from fastpath import refcodec as wire
from fastpath.packets import NOJOURNAL, NOSUBSCRIBE, Keepalive, Push, Request
from pelotari.fyrehose.core import MAX_HOLD, ClientConfig, ClientCore
from pelotari.fyrehose.events import (BackboneDown, BackboneUp, Lost, Message,
                                      PublishConfirmed, PublishFailed, Resync)

BB = ("127.0.0.1", 2323)
PEER = ("127.0.0.1", 40000)


def events(core):
    out = []
    while (ev := core.next_event()) is not None:
        out.append(ev)
    return out


def sent(core):
    return [(wire.decode(d), addr) for d, addr in core.datagrams_to_send()]


def make(**kw):
    kw.setdefault("request_delay", 0.1)
    return ClientCore(BB, 0.0, ClientConfig(**kw))


def test_keepalive_at_once_then_every_interval_and_ack_brings_backbone_up():
    core = make(keepalive_interval=0.5, flags=NOJOURNAL)
    assert core.get_timer() == 0.0
    core.handle_timer(0.0)
    (ka, addr), = sent(core)
    assert isinstance(ka, Keepalive) and addr == BB
    assert (ka.addr, ka.port, ka.flags) == ("0.0.0.0", 0, NOJOURNAL)  # zero: "my source address"
    assert core.get_timer() == 0.5
    core.receive_datagram(wire.encode_keepalive_ack(ka.token), BB, 0.02)
    assert events(core) == [BackboneUp(pytest.approx(0.02))]
    core.handle_timer(0.5)
    (ka2, _), = sent(core)
    assert ka2.token != ka.token


def test_keepalive_interval_may_not_exceed_one_second():
    ClientConfig(keepalive_interval=1.0)
    with pytest.raises(ValueError):
        ClientConfig(keepalive_interval=1.01)


def test_ack_with_unknown_token_is_dropped_and_our_token_names_the_backbones_source():
    core = make()
    core.handle_timer(0.0)
    (ka, _), = sent(core)
    core.receive_datagram(wire.encode_keepalive_ack(b"\0" * 16), BB, 0.1)
    assert events(core) == [] and core.stats["dropped_unknown_ack"] == 1
    # Only the backbone can echo a token we sent: it answers from there (another address of
    # a multi-homed host), so its DELIVERs and FORWARDs are taken from there from now on.
    core.receive_datagram(wire.encode_keepalive_ack(ka.token), PEER, 0.1)
    assert isinstance(events(core)[0], BackboneUp) and core.backbone_source == PEER
    core.receive_datagram(wire.encode_deliver(7, b"x"), PEER, 0.2)
    assert events(core) == [Message(7, b"x")]


def test_silence_reports_backbone_down_once_then_up_again():
    core = make(backbone_silence=2.5)
    t = 0.0
    while t <= 4.0:
        core.handle_timer(t)
        t += 1.0
    downs = [e for e in events(core) if isinstance(e, BackboneDown)]
    assert len(downs) == 1 and downs[0].silent_for == pytest.approx(3.0)
    ka = [p for p, _ in sent(core)][-1]
    core.receive_datagram(wire.encode_keepalive_ack(ka.token), BB, 4.1)
    assert isinstance(events(core)[0], BackboneUp)


def test_publish_is_confirmed_by_the_matching_deliver():
    core = make()
    pid = core.publish(b"hello", 0.0)
    (push, addr), = sent(core)
    assert push == Push(b"hello") and addr == BB
    core.receive_datagram(wire.encode_deliver(77, b"other"), BB, 0.01)
    core.receive_datagram(wire.encode_deliver(78, b"hello"), BB, 0.01)
    evs = events(core)
    assert PublishConfirmed(pid, 78) in evs
    assert [e for e in evs if isinstance(e, Message)] == [Message(77, b"other"),
                                                         Message(78, b"hello")]


def test_publish_times_out_when_no_deliver_comes_back():
    core = make(publish_timeout=1.0)
    pid = core.publish(b"x", 0.0)
    assert core.get_timer() == 0.0  # keepalive first
    core.handle_timer(0.0)
    assert core.get_timer() == pytest.approx(1.0)
    core.handle_timer(1.0)
    assert PublishFailed(pid, "timeout") in events(core)
    core.receive_datagram(wire.encode_deliver(5, b"x"), BB, 1.5)  # too late: just a message
    assert not any(isinstance(e, PublishConfirmed) for e in events(core))


def test_nosubscribe_publish_is_fire_and_forget():
    core = make(flags=NOSUBSCRIBE)
    assert core.publish(b"x", 0.0) is None
    assert [p for p, _ in sent(core)] == [Push(b"x")]


def test_pending_publish_limit_at_and_past():
    core = make(max_pending_publishes=2)
    core.publish(b"a", 0)
    core.publish(b"b", 0)
    with pytest.raises(OverflowError):
        core.publish(b"c", 0)


def test_gap_leads_to_request_with_zero_address_then_lost_after_retries():
    core = make(request_retries=1, request_backoff=2.0, tail_probe=0)
    core.receive_datagram(wire.encode_deliver(10, b"a"), BB, 0.0)
    core.receive_datagram(wire.encode_deliver(13, b"d"), BB, 0.0)
    core.handle_timer(0.0)
    sent(core)
    assert events(core) == [Message(10, b"a")]
    core.handle_timer(0.1)
    reqs = [p for p, _ in sent(core) if isinstance(p, Request)]
    assert reqs == [Request("0.0.0.0", 0, 11, 12)]
    assert core.get_timer() == pytest.approx(0.3)  # backoff: twice the delay
    core.handle_timer(core.get_timer())
    assert [p for p, _ in sent(core) if isinstance(p, Request)] == [Request("0.0.0.0", 0, 11, 12)]
    assert core.get_timer() == pytest.approx(0.7)
    core.handle_timer(core.get_timer())
    assert events(core) == [Lost(11, 12), Message(13, b"d")]
    assert core.stats["lost"] == 2


def test_forward_is_served_from_the_journal_to_the_requester():
    core = make()
    for seq in range(1, 6):
        core.receive_datagram(wire.encode_deliver(seq, b"m%d" % seq), BB, 0)
    sent(core)
    core.receive_datagram(wire.encode_forward("127.0.0.9", 5555, 2, 4), BB, 0.1)
    out = sent(core)
    assert [(p.sequence, bytes(p.data), a) for p, a in out] == [
        (2, b"m2", ("127.0.0.9", 5555)), (3, b"m3", ("127.0.0.9", 5555)),
        (4, b"m4", ("127.0.0.9", 5555))]


def test_forward_not_from_the_backbone_is_ignored():
    core = make()
    core.receive_datagram(wire.encode_deliver(1, b"m"), BB, 0)
    sent(core)
    core.receive_datagram(wire.encode_forward("10.9.9.9", 80, 1, 1), PEER, 0.1)
    assert sent(core) == [] and core.stats["dropped_forward_not_from_backbone"] == 1


def test_nojournal_client_keeps_nothing_and_serves_nothing():
    core = make(flags=NOJOURNAL)
    core.receive_datagram(wire.encode_deliver(1, b"m"), BB, 0)
    assert len(core.journal) == 0
    sent(core)
    core.receive_datagram(wire.encode_forward("127.0.0.9", 5555, 1, 1), BB, 0.1)
    assert sent(core) == [] and core.stats["dropped_forward_nojournal"] == 1


def test_repaired_deliver_from_a_peer_fills_the_gap():
    core = make()
    core.receive_datagram(wire.encode_deliver(1, b"a"), BB, 0)
    core.receive_datagram(wire.encode_deliver(3, b"c"), BB, 0)
    core.handle_timer(0.1)
    assert Request("0.0.0.0", 0, 2, 2) in [p for p, _ in sent(core)]
    core.receive_datagram(wire.encode_deliver(2, b"b"), PEER, 0.2)  # FORWARD's answer
    core.receive_datagram(wire.encode_deliver(2, b"b"), BB, 0.2)    # a late duplicate
    assert events(core) == [Message(1, b"a"), Message(2, b"b"), Message(3, b"c")]
    assert core.stats["duplicates"] == 1


# ---- issue 11: DELIVERs are believed only from the backbone, or when asked for -------------

def test_a_peer_deliver_before_any_request_is_not_believed():
    core = make()
    core.receive_datagram(wire.encode_deliver(1, b"a"), BB, 0)
    core.receive_datagram(wire.encode_deliver(3, b"c"), BB, 0)
    core.receive_datagram(wire.encode_deliver(2, b"forged"), PEER, 0.01)  # nothing asked yet
    core.handle_timer(0.1)
    core.receive_datagram(wire.encode_deliver(2, b"real"), PEER, 0.15)
    assert events(core) == [Message(1, b"a"), Message(2, b"real"), Message(3, b"c")]
    assert core.stats["dropped_unsolicited_deliver"] == 1


def test_a_forged_next_sequence_does_not_replace_the_real_message():
    core = make()
    core.receive_datagram(wire.encode_deliver(10, b"a"), BB, 0)
    core.receive_datagram(wire.encode_deliver(11, b"FORGED"), PEER, 0.01)
    core.receive_datagram(wire.encode_deliver(11, b"real"), BB, 0.02)
    assert events(core) == [Message(10, b"a"), Message(11, b"real")]
    assert core.journal.get(11) == b"real"  # and the forgery never reaches peers via FORWARD


def test_a_forged_jump_from_a_peer_moves_nothing_and_sends_no_request():
    core = make()
    core.receive_datagram(wire.encode_deliver(100, b"a"), BB, 0)
    for k in range(200):  # 20,000 ahead; a burst of forgeries
        core.receive_datagram(wire.encode_deliver(100 + 20000 + k, b"x"), PEER, 0.01)
    for t in (0.2, 0.5, 1.0, 2.0, 4.0):
        core.handle_timer(t)
    assert [p for p, _ in sent(core) if isinstance(p, Request)] == []
    assert core.tracker.highest_sequence == 100
    core.receive_datagram(wire.encode_deliver(101, b"b"), BB, 4.1)
    stream = [e for e in events(core) if isinstance(e, (Message, Lost, Resync))]
    assert stream == [Message(100, b"a"), Message(101, b"b")]  # no Lost, no Resync
    assert core.stats["dropped_unsolicited_deliver"] == 200


def test_a_peer_deliver_for_a_requested_gap_never_moves_the_highest_sequence():
    core = make()
    core.receive_datagram(wire.encode_deliver(1, b"a"), BB, 0)
    core.receive_datagram(wire.encode_deliver(5, b"e"), BB, 0)
    core.handle_timer(0.1)  # REQUEST 2..4
    core.receive_datagram(wire.encode_deliver(6, b"beyond"), PEER, 0.15)  # not asked for
    core.receive_datagram(wire.encode_deliver(3, b"c"), PEER, 0.15)
    assert core.tracker.highest_sequence == 5 and core.tracker.open_gaps() == [(2, 2), (4, 4)]
    assert core.stats["dropped_unsolicited_deliver"] == 1


# ---- issue 11: repair served within a per-requester budget ----------------------------------

def test_forwards_are_served_within_the_requesters_byte_budget():
    core = make(serve_burst=10 * 109, serve_rate=1000 * 109)  # 109-byte DELIVERs: 10, +1/ms
    for seq in range(1, 101):
        core.receive_datagram(wire.encode_deliver(seq, b"p" * 100), BB, 0)
    core.receive_datagram(wire.encode_forward("127.0.0.9", 5555, 1, 100), BB, 1.0)
    assert len(core.datagrams_to_send()) == 10  # the burst, at the limit
    core.receive_datagram(wire.encode_forward("127.0.0.9", 5555, 1, 100), BB, 1.0)
    assert core.datagrams_to_send() == []  # one past it
    core.receive_datagram(wire.encode_forward("127.0.0.9", 5555, 1, 100), BB, 1.0051)
    assert len(core.datagrams_to_send()) == 5  # refilled at the rate
    core.receive_datagram(wire.encode_forward("127.0.0.8", 5555, 1, 100), BB, 1.0051)
    assert len(core.datagrams_to_send()) == 10  # another requester has its own budget
    assert core.stats["forward_budget_exhausted"] == 4  # one per FORWARD cut short


def test_the_budget_table_is_bounded():
    core = make(serve_requesters=4)
    core.receive_datagram(wire.encode_deliver(1, b"x"), BB, 0)
    for port in range(1000, 1100):
        core.receive_datagram(wire.encode_forward("127.0.0.9", port, 1, 1), BB, 0.5)
    assert len(core._serve_budget) == 4
    assert len(core.datagrams_to_send()) == 100


def test_backbone_restart_is_a_resync_with_no_duplicates_and_no_stall():
    core = make(max_gap=1000)
    for seq in (5000, 5001):
        core.receive_datagram(wire.encode_deliver(seq, b"old%d" % seq), BB, 0)
    core.receive_datagram(wire.encode_deliver(20, b"new"), BB, 1.0)
    core.receive_datagram(wire.encode_deliver(21, b"new2"), BB, 1.0)
    assert events(core) == [Message(5000, b"old5000"), Message(5001, b"old5001"),
                            Resync(5002, 20), Message(20, b"new"), Message(21, b"new2")]


def test_malformed_datagrams_are_counted_by_reason_and_dropped():
    core = make()
    for junk in (b"", b"\x01\x00", b"\x77" * 20, b"\x02\x00\x01" + b"\0" * 6):
        core.receive_datagram(junk, PEER, 0)
    core.receive_datagram(wire.encode_push(b"not for clients"), PEER, 0)
    assert events(core) == []
    assert core.stats["dropped_truncated"] == 2
    assert core.stats["dropped_unknown_type"] == 1
    assert core.stats["dropped_length_mismatch"] == 1
    assert core.stats["dropped_unexpected_type"] == 1


def test_quiet_stream_probes_for_a_lost_tail_with_backoff_then_stops():
    core = make(tail_probe=0.25, request_retries=2, tail_probe_range=8)
    core.handle_timer(0.0)
    sent(core)
    core.receive_datagram(wire.encode_deliver(41, b"a"), BB, 0.0)
    core.receive_datagram(wire.encode_deliver(42, b"b"), BB, 0.0)
    probes = []
    for _ in range(30):
        t = core.get_timer()
        if t > 5.0:
            break
        core.handle_timer(t)
        probes += [(round(t, 3), p) for p, _ in sent(core) if isinstance(p, Request)]
    assert probes == [(0.25, Request("0.0.0.0", 0, 43, 50)), (0.75, Request("0.0.0.0", 0, 43, 50)),
                      (1.75, Request("0.0.0.0", 0, 43, 50))]
    # A peer's answer to the probe is a normal message, and quiet starts over.
    core.receive_datagram(wire.encode_deliver(43, b"c"), PEER, 2.0)
    assert Message(43, b"c") in events(core)
    assert core.get_timer() == pytest.approx(2.25)


def test_tail_probe_can_be_disabled():
    core = make(tail_probe=0)
    core.handle_timer(0.0)
    core.receive_datagram(wire.encode_deliver(1, b"a"), BB, 0.0)
    assert core.get_timer() == 1.0  # only the next KEEPALIVE


# ---- packing extension -----------------------------------------------------------------------

def test_a_packing_client_announces_packed_and_its_limit_in_every_keepalive():
    from fastpath.packets import PACKED, pack_limit

    core = make(pack=8000, flags=NOJOURNAL)
    core.handle_timer(0.0)
    (ka, _), = sent(core)
    assert ka.flags & PACKED and ka.flags & NOJOURNAL and pack_limit(ka.flags) == 8000
    core.set_flags(NOSUBSCRIBE, 0.1)
    (ka, _), = sent(core)
    assert ka.flags & PACKED and ka.flags & NOSUBSCRIBE and pack_limit(ka.flags) == 8000


def test_a_packed_deliver_gives_each_message_in_order_and_confirms_publishes():
    core = make(pack=1472)
    ids = core.publish_many([b"a", b"b", b"c"], 0.0)
    (datagram, addr), = core.datagrams_to_send()  # three PUSH frames, one datagram
    assert addr == BB and datagram == b"".join(wire.encode_push(d) for d in (b"a", b"b", b"c"))
    pack = b"".join(wire.encode_deliver(10 + i, d) for i, d in enumerate((b"a", b"b", b"c")))
    core.receive_datagram(pack, BB, 0.01)
    got = events(core)
    assert [e for e in got if isinstance(e, Message)] == [Message(10, b"a"), Message(11, b"b"),
                                                         Message(12, b"c")]
    assert [e for e in got if isinstance(e, PublishConfirmed)] == [
        PublishConfirmed(ids[0], 10), PublishConfirmed(ids[1], 11), PublishConfirmed(ids[2], 12)]
    assert core.stats["packs_in"] == 1


def test_a_plain_client_refuses_a_pack_and_does_not_pack_its_publishes():
    core = make()
    core.publish_many([b"a", b"b"], 0.0)
    assert [d for d, _ in core.datagrams_to_send()] == [wire.encode_push(b"a"), wire.encode_push(b"b")]
    core.receive_datagram(wire.encode_deliver(1, b"a") + wire.encode_deliver(2, b"b"), BB, 0.0)
    assert not [e for e in events(core) if isinstance(e, Message)]
    assert core.stats["dropped_length_mismatch"] == 1


def test_pack_limit_is_checked():
    with pytest.raises(ValueError):
        ClientConfig(pack=8)
    with pytest.raises(ValueError):
        ClientConfig(pack=65508)
    assert ClientConfig(pack=9).pack == 9 and ClientConfig(pack=65507).pack == 65507


def test_a_pack_of_pushes_sent_to_a_packing_client_is_counted_and_dropped():
    core = make(pack=1472)
    core.receive_datagram(b"\x02\x00\x01" + bytes(6) + b"a" + b"\x02\x00\x00" + bytes(6), PEER, 0.0)
    assert core.stats["dropped_unexpected_type"] == 1 and core.next_event() is None


# ---- the backbone cluster (docs/protocols/fyrehose-cluster.md) ------------------------------

M1, M2, M3 = ("127.0.0.91", 2323), ("127.0.0.92", 2323), ("127.0.0.93", 2323)


def clustered(**kw):
    return ClientCore(M1, 0.0, ClientConfig(cluster=(M1, M2, M3), request_delay=0.1, **kw))


def info(token, epoch, active, flags=0x2):
    return wire.encode_info(token, epoch, active[0], active[1], flags, (M1, M2, M3))


def following_m1(**kw):
    """A cluster client that follows M1 (epoch 5) and got SEQUENCE 100 from it."""
    core = clustered(**kw)
    core.handle_timer(0.0)
    token = sent(core)[1][0].token
    core.receive_datagram(info(token, 5, M1), M1, 0.001)
    core.receive_datagram(wire.encode_deliver(100, b"a"), M1, 0.002)
    events(core)
    return core


def test_a_cluster_client_asks_every_member_and_follows_only_the_active_itself():
    from fastpath.packets import CLUSTER, Query
    from pelotari.fyrehose.events import BackboneMoved

    core = clustered()
    core.handle_timer(0.0)
    out = sent(core)
    assert [(type(p).__name__, a) for p, a in out] == [
        ("Keepalive", M1), ("Query", M1), ("Query", M2), ("Query", M3)]
    assert out[0][0].flags & CLUSTER
    token = out[1][0].token
    assert all(p.token == token for p, _ in out[1:]) and isinstance(out[1][0], Query)
    # M2 (a standby) says M3 leads epoch 7: not believed until M3 itself says so.
    core.receive_datagram(info(token, 7, M3, flags=0), M2, 0.01)
    ((q, to),) = sent(core)
    assert to == M3 and isinstance(q, Query) and core.backbone == M1
    core.receive_datagram(info(q.token, 7, M3), M3, 0.02)
    assert [e for e in events(core) if isinstance(e, BackboneMoved)] == [
        BackboneMoved(M1, M3, 7, 0)]
    assert core.backbone == M3 and core.epoch == 7
    assert [type(p).__name__ for p, a in sent(core)] == ["Keepalive"]


def test_an_info_without_our_token_or_from_a_stranger_moves_nothing():
    core = clustered()
    core.handle_timer(0.0)
    sent(core)
    core.receive_datagram(info(b"x" * 16, 99, M3), M3, 0.01)  # not our token: a hint only
    core.receive_datagram(info(bytes(16), 99, M3), ("127.0.0.66", 2323), 0.01)
    assert core.backbone == M1 and core.epoch == 0
    assert core.stats["info_unasked"] == 2
    # ... and answers, however many, make at most one QUERY round per quarter interval.
    rounds = [p for p, _ in sent(core) if type(p).__name__ == "Query"]
    assert len(rounds) <= 3


def test_after_a_failover_unconfirmed_publishes_are_sent_again_to_the_new_active():
    from pelotari.fyrehose.events import BackboneMoved

    core = clustered(cluster_silence=0.25)
    core.handle_timer(0.0)
    token = sent(core)[1][0].token
    core.receive_datagram(info(token, 5, M1), M1, 0.001)
    core.receive_datagram(wire.encode_keepalive_ack(core._keepalives_sent and next(
        iter(core._keepalives_sent))), M1, 0.002)
    events(core)
    sent(core)
    core.publish(b"one", 0.01)
    core.publish(b"two", 0.01)
    sent(core)
    # M1 dies: no ACK; after cluster_silence the client asks every member.
    now = 0.01
    queries = []
    while not queries:
        now = core.get_timer()
        core.handle_timer(now)
        queries = [p for p, _ in sent(core) if type(p).__name__ == "Query"]
    assert now > 0.25
    core.receive_datagram(info(queries[0].token, 6, M2), M2, now + 0.001)
    moved = [e for e in events(core) if isinstance(e, BackboneMoved)]
    assert moved == [BackboneMoved(M1, M2, 6, 2)]
    out = sent(core)
    assert type(out[0][0]).__name__ == "Keepalive"  # signed on first: the DELIVERs come back
    pushes = [(p.data, a) for p, a in out if isinstance(p, Push)]
    assert pushes == [(b"one", M2), (b"two", M2)] and core.stats["resent"] == 2
    # An older epoch's INFO never moves it back.
    core._query(now + 1.0)
    old_token = sent(core)[0][0].token
    core.receive_datagram(info(old_token, 5, M1), M1, now + 1.01)
    assert core.backbone == M2 and core.epoch == 6


def test_after_a_failover_the_gap_below_the_new_actives_first_deliver_is_given_up_soon():
    """The old active's unused reservation: repaired from journals for failover_repair, then
    Lost "failover" (not after the whole REQUEST schedule), and what follows is released."""
    from pelotari.fyrehose.events import BackboneMoved, Lost, Message

    core = clustered(failover_repair=0.15)
    core.handle_timer(0.0)
    token = sent(core)[1][0].token
    core.receive_datagram(info(token, 5, M1), M1, 0.001)
    core.receive_datagram(wire.encode_deliver(100, b"a"), M1, 0.002)
    core.receive_datagram(wire.encode_deliver(101, b"b"), M1, 0.003)
    events(core)
    now = 0.003
    queries = []
    while not queries:  # M1 dies
        now = core.get_timer()
        core.handle_timer(now)
        queries = [p for p, _ in sent(core) if type(p).__name__ == "Query"]
    core.receive_datagram(info(queries[0].token, 6, M2), M2, now)
    assert [type(e) for e in events(core)] == [BackboneMoved]
    # The new active starts past the old reservation: 102..199 is the failover's gap.
    core.receive_datagram(wire.encode_deliver(200, b"c"), M2, now + 0.01)
    assert events(core) == []
    core.handle_timer(now + 0.111)  # request_delay later: repaired from journals if held
    assert [(p.from_seq, p.to_seq) for p, a in sent(core)
            if type(p).__name__ == "Request" and a == M2] == [(102, 199)]
    core.receive_datagram(wire.encode_deliver(102, b"held"), PEER, now + 0.12)
    t = core.get_timer()
    assert now + 0.01 < t <= now + 0.01 + 0.15 + 1e-9
    core.handle_timer(now + 0.01 + 0.15)
    got = events(core)
    assert got == [Message(102, b"held"), Lost(103, 199, "failover"), Message(200, b"c")]
    assert core.stats["lost_failover"] == 97
    # One past the window, an ordinary gap is repaired on the usual schedule (no "failover").
    core.receive_datagram(wire.encode_deliver(203, b"d"), M2, now + 0.2)
    core.handle_timer(now + 0.5)
    assert events(core) == []


def test_delivers_from_a_new_active_are_kept_until_it_answers_as_the_active():
    """A new active that adopted our table entry sends DELIVERs before we know it leads: they
    are kept (not believed yet), we ask, and once it answers our QUERY as the active of a newer
    epoch they are ours, in order. A non-member's DELIVERs are never kept."""
    from pelotari.fyrehose.events import BackboneMoved, Lost, Message

    core = following_m1()
    sent(core)
    core.receive_datagram(wire.encode_deliver(500, b"x"), PEER, 0.030)  # a stranger: dropped
    assert core.stats["dropped_unsolicited_deliver"] == 1
    core.receive_datagram(wire.encode_deliver(200, b"n1"), M2, 0.031)
    core.receive_datagram(wire.encode_deliver(201, b"n2"), M2, 0.032)
    assert events(core) == [] and core.stats["hold_kept"] == 2
    queries = [p for p, _ in sent(core) if type(p).__name__ == "Query"]
    assert len(queries) == 3  # asked at once, every member (one round, not one per DELIVER)
    core.receive_datagram(info(queries[-1].token, 6, M2), M2, 0.033)
    got = events(core)
    assert got[0] == BackboneMoved(M1, M2, 6, 0)
    core.handle_timer(0.033 + 0.2)  # the failover's gap (101..199) is given up
    got += events(core)
    assert [e for e in got if not isinstance(e, BackboneMoved)] == [
        Lost(101, 199, "failover"), Message(200, b"n1"), Message(201, b"n2")]


def test_kept_delivers_older_than_hold_for_are_never_believed():
    """A stranger forging a standby's address long before a failover: what it sent is dropped,
    not replayed as the new active's first messages when that standby wins."""
    from pelotari.fyrehose.core import HOLD_FOR

    core = following_m1()
    core.receive_datagram(wire.encode_deliver(150, b"FORGED"), M2, 0.03)
    later = 0.03 + HOLD_FOR + 0.1
    core.receive_datagram(wire.encode_deliver(200, b"real"), M2, later)  # M2 took over
    queries = [p for p, _ in sent(core) if type(p).__name__ == "Query"]
    core.receive_datagram(info(queries[-1].token, 6, M2), M2, later + 0.001)
    core.handle_timer(later + 0.5)
    got = [e for e in events(core) if type(e).__name__ == "Message"]
    assert got == [Message(200, b"real")] and core.stats["hold_dropped"] == 1


def test_kept_delivers_of_a_member_that_is_not_the_new_active_are_dropped():
    core = clustered()
    core.handle_timer(0.0)
    token = sent(core)[1][0].token
    core.receive_datagram(info(token, 5, M1), M1, 0.001)
    sent(core)
    for k in range(MAX_HOLD + 3):  # bounded
        core.receive_datagram(wire.encode_deliver(300 + k, b"s"), M3, 0.03)
    assert core.stats["hold_kept"] == MAX_HOLD and core.stats["hold_dropped"] == 3
    queries = [p for p, _ in sent(core) if type(p).__name__ == "Query"]
    assert len(queries) <= 3  # (one round per member, not per DELIVER)
    core.receive_datagram(info(queries[-1].token, 6, M2), M2, 0.04)  # M2 is the active
    assert core.backbone == M2 and core.stats["hold_dropped"] == MAX_HOLD + 3
    assert not [e for e in events(core) if type(e).__name__ == "Message"]


def test_a_silent_active_and_a_member_without_quorum_is_said_once():
    """The minority side of a partition: the client is told (NoQuorum), once per silence, and
    goes on asking; an ACK (or a move) makes the next silence say it again."""
    from pelotari.fyrehose.events import NoQuorum

    core = clustered()
    core.handle_timer(0.0)
    token = sent(core)[1][0].token
    core.receive_datagram(info(token, 5, M1), M1, 0.001)
    events(core)
    now, said = 0.001, []
    while now < 1.0:  # M1 silent; M2 answers every round: no quorum, no active
        now = core.get_timer()
        core.handle_timer(now)
        for p, to in sent(core):
            if type(p).__name__ == "Query" and to == M2:
                core.receive_datagram(wire.encode_info(p.token, 5, "0.0.0.0", 0, 0x1,
                                                       (M1, M2, M3)), M2, now)
        said += [e for e in events(core) if isinstance(e, NoQuorum)]
    assert said == [NoQuorum(M2, 5)] and core.backbone == M1


def test_a_plain_client_ignores_info_and_sends_no_query():
    core = make()
    core.handle_timer(0.0)
    assert [type(p).__name__ for p, _ in sent(core)] == ["Keepalive"]
    core.receive_datagram(info(bytes(16), 9, M3), BB, 0.01)
    assert core.backbone == BB and core.stats["dropped_unexpected_type"] == 1
