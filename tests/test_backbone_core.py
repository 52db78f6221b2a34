"""The backbone's sans-IO core, in memory with a fake clock (integer nanoseconds): every rule,
limit and drop reason without a socket or a sleep, on the compiled core and its pure-Python
twin, and the two fed the same traffic must send the same bytes and count alike. (B1)..(B5)
are the seed's RULES (BACKBONE). The socket loops are tested in test_backbone.py."""
import pytest

from fastpath import refcodec as wire
from fastpath.packets import (MAX_DATA, MAX_SEQUENCE, NOJOURNAL, NOSUBSCRIBE, PACKED, Deliver,
                              Forward, KeepaliveAck, packed_flags)

from fastpath.implementation import compiled
from test_backbone import CORPUS as SOCKET_CORPUS
from pelotari.fyrehose import backbone_core

COMPILED = compiled("backbone")
CORES = {"python": backbone_core.BackboneCore}
if COMPILED is not None:
    CORES["cython"] = COMPILED.BackboneCore
S = 1_000_000_000  # one second of the core's clock
TOKEN = b"T" * 16
PUB = ("127.0.0.9", 9)


@pytest.fixture(params=sorted(CORES))
def make_core(request):
    """A factory of cores of each implementation, first SEQUENCE 1000, a fixed rng seed."""
    return lambda **kw: CORES[request.param](**{"first_sequence": 1000, "seed": 7, **kw})


def host(k, port=5000):
    return ("127.0.0.%d" % k, port)


def sign_on(core, src, now=0, flags=0, addr="", port=0):
    """Send a KEEPALIVE from src; return what the core sent (its ACK, if any)."""
    core.receive_datagrams([(wire.encode_keepalive(addr, port, flags, TOKEN), src)], now)
    return core.datagrams_to_send()


def push(core, payloads, now=0, src=PUB):
    core.receive_datagrams([(wire.encode_push(p), src) for p in payloads], now)
    return core.datagrams_to_send()


def decoded(sends, dst=None):
    return [wire.decode(d) for d, to in sends if dst is None or to == dst]


def test_keepalive_is_acked_to_its_source_with_the_same_token(make_core):  # (B1)
    core = make_core()
    assert sign_on(core, host(2)) == [(b"\x20" + TOKEN, host(2))]


def test_push_is_sequenced_and_sent_to_every_subscriber_in_order(make_core):  # (B2)(B3)(B5)
    core = make_core()
    subs = [host(k) for k in (2, 3, 4)]
    for s in subs:
        sign_on(core, s)
    sent = push(core, [b"m%d" % i for i in range(5)])
    for s in subs:
        assert decoded(sent, s) == [Deliver(1000 + i, b"m%d" % i) for i in range(5)]
    assert decoded(sent, PUB) == []
    st = core.stats(0)
    assert (st["pushes"], st["delivers"], st["subscribers"], st["next_sequence"]) == (5, 15, 3, 1005)
    assert (st["datagrams_out"], st["bytes_out"]) == (3 + 15, 3 * 17 + 15 * 11)


def test_subscriber_is_live_until_the_window_ends_and_not_at_its_end(make_core):  # (B2)
    core = make_core(window=0.3)
    sign_on(core, host(2), now=0)
    assert decoded(push(core, [b"last"], now=3 * S // 10 - 1)) == [Deliver(1000, b"last")]
    assert push(core, [b"gone"], now=3 * S // 10) == []
    assert core.stats(3 * S // 10)["subscribers"] == 0
    assert core.subscribers(3 * S // 10 - 1) == [("127.0.0.2", 5000, 0, 1e-9)]
    sign_on(core, host(2), now=S)  # signing on again works; the sequence went on
    assert decoded(push(core, [b"again"], now=S)) == [Deliver(1002, b"again")]


def test_each_keepalive_renews_the_window_and_replaces_the_flags(make_core):
    core = make_core(window=1.0)
    sign_on(core, host(2), now=0)
    sign_on(core, host(2), now=S // 2)
    assert len(push(core, [b"x"], now=S + S // 4)) == 1
    sign_on(core, host(2), now=S + S // 4, flags=NOSUBSCRIBE)
    assert push(core, [b"y"], now=S + S // 4) == []
    assert core.stats(S + S // 4)["clients"] == 1


def test_the_sweep_timer_comes_every_second_and_only_when_due(make_core):
    core = make_core()
    core.handle_timer(5 * S)
    assert core.get_timer() == 6 * S
    core.handle_timer(6 * S - 1)  # not due: nothing moves
    assert core.get_timer() == 6 * S
    core.handle_timer(6 * S)
    assert core.get_timer() == 7 * S


def test_a_full_table_is_swept_at_most_every_10_ms(make_core):
    core = make_core(max_subscribers=1, window=1.0)
    assert sign_on(core, host(2), now=0)
    assert sign_on(core, host(3), now=S - 5_000_000) == []  # sweeps: host 2 still live
    assert sign_on(core, host(3), now=S + 4_999_999) == []  # host 2 expired, but no sweep yet
    assert core.stats(S)["drops"]["table_full"] == 2
    assert sign_on(core, host(3), now=S + 5_000_000) == [(b"\x20" + TOKEN, host(3))]


def test_the_timer_sweep_frees_the_table_for_the_next_client(make_core):
    core = make_core(max_subscribers=1, window=1.0)
    sign_on(core, host(2), now=0)
    assert sign_on(core, host(3), now=S - 5_000_000) == []  # a full sweep: the timer restarts
    due = core.get_timer()
    assert due == 2 * S - 5_000_000
    core.handle_timer(due)  # drops host 2
    assert sign_on(core, host(3), now=due + 1) == [(b"\x20" + TOKEN, host(3))]
    assert core.get_timer() == due + S  # admitted without another sweep


def test_subscriber_table_limit_at_and_past(make_core):
    core = make_core(max_subscribers=3)
    assert [len(sign_on(core, host(k))) for k in (2, 3, 4, 5)] == [1, 1, 1, 0]
    assert core.stats(0)["drops"]["table_full"] == 1
    assert sign_on(core, host(2)) == [(b"\x20" + TOKEN, host(2))]  # known clients still refresh


def test_entries_per_host_limit_at_and_past_leaves_room_for_another_host(make_core):
    core = make_core(max_subscribers=64, max_per_address=16)
    for port in range(1, 300):  # one host, many sockets, again and again
        sign_on(core, ("127.0.0.1", port), now=port)
    assert sign_on(core, host(2), now=S) == [(b"\x20" + TOKEN, host(2))]
    hosts = [h for h, *_ in core.subscribers(S)]
    assert hosts.count("127.0.0.1") == 16 and hosts.count("127.0.0.2") == 1
    assert core.stats(S)["drops"]["address_limit"] == 299 - 16


def test_a_keepalive_or_request_naming_another_address_is_refused_by_default(make_core):
    core = make_core()
    sign_on(core, host(3))
    assert sign_on(core, host(2), addr="10.1.2.3", port=9) == []
    assert sign_on(core, host(2), addr="127.0.0.2", port=5001) == []  # another port of its own
    assert sign_on(core, host(2), addr="127.0.0.2", port=5000) != []  # itself, named
    core.receive_datagrams([(wire.encode_request("10.1.2.3", 9, 1, 1), host(2))], 0)
    assert core.datagrams_to_send() == []
    assert core.stats(0)["drops"]["foreign_address"] == 3


def test_allow_foreign_addresses_signs_on_the_named_address(make_core):
    core = make_core(allow_foreign_addresses=True)
    assert sign_on(core, host(2), addr="127.0.0.7", port=77) == [(b"\x20" + TOKEN, host(2))]
    assert decoded(push(core, [b"x"])) == [Deliver(1000, b"x")]
    assert core.subscribers(0)[0][:2] == ("127.0.0.7", 77)


def test_request_goes_to_a_journaling_subscriber_never_nojournal_nor_the_requester(make_core):
    core = make_core()  # (B4)
    sign_on(core, host(2))
    sign_on(core, host(3))
    sign_on(core, host(4), flags=NOJOURNAL)
    core.receive_datagrams([(wire.encode_request("", 0, 5, 9), host(2))] * 30, 0)
    assert core.datagrams_to_send() == [(wire.encode_forward("127.0.0.2", 5000, 5, 9), host(3))] * 30
    assert core.stats(0)["forwards"] == 30


def test_request_choice_is_spread_over_journaling_subscribers(make_core):
    core = make_core()
    for k in (2, 3, 4, 5):
        sign_on(core, host(k))
    core.receive_datagrams([(wire.encode_request("", 0, 1, 1), host(2))] * 150, 0)
    targets = [to for _, to in core.datagrams_to_send()]
    counts = [targets.count(host(k)) for k in (3, 4, 5)]
    assert sum(counts) == 150 and all(c >= 20 for c in counts), counts


def test_request_choice_weighs_each_host_alike_however_many_entries_it_holds(make_core):
    core = make_core(max_per_address=0)
    sign_on(core, host(2))
    for port in range(100):  # one host with 100 journaling entries, another with one
        sign_on(core, host(3, 6000 + port))
    sign_on(core, host(4))
    core.receive_datagrams([(wire.encode_request("", 0, 1, 1), host(2))] * 200, 0)
    targets = [to for _, to in core.datagrams_to_send()]
    assert 60 <= targets.count(host(4)) <= 140, targets.count(host(4))  # about half, not 1/101


def test_request_from_no_live_subscriber_or_with_no_journal_peer_is_counted(make_core):
    core = make_core(window=1.0)
    core.receive_datagrams([(wire.encode_request("", 0, 1, 2), host(2))], 0)
    sign_on(core, host(2))
    core.receive_datagrams([(wire.encode_request("", 0, 1, 2), host(2))], 0)
    sign_on(core, host(3))
    core.receive_datagrams([(wire.encode_request("", 0, 1, 2), host(2))], S)  # both expired
    assert core.datagrams_to_send() == []
    drops = core.stats(S)["drops"]
    assert (drops["request_not_subscribed"], drops["no_journal_peer"]) == (2, 1)


def test_request_range_limit_at_and_past(make_core):
    core = make_core(max_request_range=10)
    sign_on(core, host(2))
    sign_on(core, host(3))
    core.receive_datagrams([(wire.encode_request("", 0, 100, 109), host(2)),
                            (wire.encode_request("", 0, 100, 110), host(2))], 0)
    assert decoded(core.datagrams_to_send()) == [Forward("127.0.0.2", 5000, 100, 109)]
    assert core.stats(0)["drops"]["request_too_large"] == 1


def test_repair_budget_at_the_limit_and_one_past_then_refilled_by_the_clock(make_core):
    core = make_core(repair_burst=300, repair_rate=100)
    sign_on(core, host(2))
    sign_on(core, host(3))
    ask = (wire.encode_request("", 0, 1000, 1099), host(2))  # 100 sequences
    core.receive_datagrams([ask] * 4, 0)
    assert len(core.datagrams_to_send()) == 3  # the burst: 300
    core.receive_datagrams([ask], S - 1)  # 99.9999999 sequences refilled: one short
    assert core.datagrams_to_send() == []
    core.receive_datagrams([ask], S)
    assert len(core.datagrams_to_send()) == 1
    assert core.stats(S)["drops"]["repair_budget"] == 2
    entries = {(e["host"], e["port"]): e for e in core.table(S)}
    asker, answerer = entries[host(2)], entries[host(3)]
    assert (asker["requested"], asker["refused"], asker["forwarded"]) == (600, 2, 0)
    assert (answerer["requested"], answerer["refused"], answerer["forwarded"]) == (0, 0, 4)
    assert asker["keepalives"] == 1 and asker["age"] == 1.0


def test_receive_batches_are_counted_by_size_for_the_histogram(make_core):
    core = make_core(batch=7)
    core.receive_datagrams([(wire.encode_push(b"x"), PUB)] * 10, 0)  # batches of 7 and 3
    core.receive_datagrams([(wire.encode_push(b"x"), PUB)], 0)  # and of 1
    assert core.stats(0)["batch_sizes"] == [1, 0, 1, 1, 0, 0, 0, 0]  # <=1, <=4, <=8
    assert core.stats(0)["batches"] == 3


def test_each_entry_counts_the_deliveries_it_was_sent_plain_or_packed(make_core):
    core = make_core()
    sign_on(core, host(2))
    sign_on(core, host(3), flags=packed_flags(2000))
    push(core, [b"x" * 100] * 10)
    entries = {(e["host"], e["port"]): e for e in core.table(0)}
    assert entries[host(2)]["delivered"] == entries[host(3)]["delivered"] == 10
    assert entries[host(2)]["datagrams"] == 10  # one datagram per DELIVER
    assert entries[host(3)]["datagrams"] == 1  # ten packed in one
    assert entries[host(3)]["pack_limit"] == 2000 and entries[host(2)]["pack_limit"] == 0


def test_sequence_wraps_from_the_largest_48_bit_value_to_zero(make_core):
    core = make_core(first_sequence=MAX_SEQUENCE)
    sign_on(core, host(2))
    assert [d.sequence for d in decoded(push(core, [b"a", b"b"]))] == [MAX_SEQUENCE, 0]


def test_max_data_limit_at_and_past(make_core):
    core = make_core(max_data=100)
    sign_on(core, host(2))
    assert [len(d.data) for d in decoded(push(core, [b"x" * 100, b"x" * 101]))] == [100]
    assert core.stats(0)["drops"]["oversize"] == 1


def test_empty_and_largest_payloads(make_core):
    core = make_core()
    sign_on(core, host(2))
    assert decoded(push(core, [b"", b"z" * MAX_DATA])) == [Deliver(1000, b""),
                                                             Deliver(1001, b"z" * MAX_DATA)]


# Every datagram the socket test sends, and two that only the core can be given: one past a
# receive slot (the kernel truncates it) and a KEEPALIVE from port 0.
CORPUS = SOCKET_CORPUS + [
    (b"\x02" + b"\x00" * 70000, "oversize"),
    (b"\x10" + b"\x00" * 6 + b"\x00" * 6 + TOKEN, "zero_port"),  # (allow_foreign: own port 0)
]


def test_malformed_corpus_is_counted_by_reason_and_state_survives(make_core):
    core = make_core(allow_foreign_addresses=True)
    sign_on(core, host(2))
    core.receive_datagrams([(d, ("127.0.0.66", 0 if r == "zero_port" else 6)) for d, r in CORPUS], 0)
    assert core.datagrams_to_send() == []
    expected = {}
    for _, reason in CORPUS:
        expected[reason] = expected.get(reason, 0) + 1
    assert {k: v for k, v in core.stats(0)["drops"].items() if v} == expected
    assert decoded(push(core, [b"after"])) == [Deliver(1000, b"after")]


def test_more_datagrams_than_a_batch_go_in_several_batches(make_core):
    core = make_core(batch=4)
    sign_on(core, host(2))
    assert [d.sequence for d in decoded(push(core, [b"x"] * 10))] == list(range(1000, 1010))
    assert core.stats(0)["batches"] == 1 + 3


def test_keep_sends_off_counts_the_fan_out_without_keeping_it(make_core):
    core = make_core(first_sequence=0, keep_sends=False)
    core.receive_datagrams([(wire.encode_keepalive("", 0, 0, TOKEN), host(k)) for k in (2, 3, 4)], 0)
    core.receive_datagrams([(wire.encode_push(b"x"), PUB)] * 10, 0, repeat=7)
    st = core.stats(0)
    assert (st["delivers"], st["next_sequence"], st["subscribers"]) == (210, 70, 3)
    assert st["datagrams_out"] == 3 + 210 and core.datagrams_to_send() == []


def test_gso_runs_reach_each_subscriber_as_the_plain_datagrams(make_core):
    payloads = [b"x" * 16] * 64 + [b"y" * 20, b"y" * 20, b"z" * 1500, b"z" * 1500]
    plain, gso = make_core(gso=False), make_core(gso=True)
    for core in (plain, gso):
        for k in (2, 3, 4, 5):
            sign_on(core, host(k))
    sent, expected = push(gso, payloads), push(plain, payloads)
    for k in (2, 3, 4, 5):
        assert [d for d, to in sent if to == host(k)] == [d for d, to in expected if to == host(k)]
    st = gso.stats(0)
    # 64 equal frames, then two more, in one send each per subscriber; past gso_max_segment
    # (1,472) the two large ones go one per send.
    assert (st["gso_sends"], st["gso_segments"], st["datagrams_out"]) == (8, 264, 4 + 4 * 4)
    assert plain.stats(0)["gso_sends"] == 0


def test_packs_go_to_packing_subscribers_up_to_their_limit(make_core):
    core = make_core(first_sequence=0, gso=False)
    for k in (2, 3):
        sign_on(core, host(k), flags=packed_flags(1472))
    sign_on(core, host(4))
    sign_on(core, PUB, flags=NOSUBSCRIBE | PACKED)
    pack = wire.encode_push(b"x" * 16) * 58  # 1,450 bytes
    core.receive_datagrams([(pack, PUB)] * 3, 0)
    sent = core.datagrams_to_send()
    for k in (2, 3):
        mine = [d for d, to in sent if to == host(k)]
        assert [len(d) for d in mine] == [1450] * 3
        assert [f.sequence for d in mine for f in wire.decode_pack(d)] == list(range(174))
    assert len([d for d, to in sent if to == host(4)]) == 174
    st = core.stats(0)
    assert (st["pushes"], st["packs_in"], st["packs_out"], st["delivers"]) == (174, 3, 6, 522)


def test_a_pack_from_a_client_that_did_not_announce_packed_is_dropped_whole(make_core):
    core = make_core()
    sign_on(core, host(2))
    assert push(core, [b""] * 1, src=host(3)) != []
    core.receive_datagrams([(wire.encode_push(b"") * 50, host(3))], 0)
    assert core.datagrams_to_send() == []
    assert core.stats(0)["drops"]["pack_not_signed_on"] == 1


@pytest.mark.skipif(COMPILED is None, reason="the compiled core's hash index (the twin's is a dict)")
def test_many_hosts_on_one_port_spread_over_the_index():
    # Review of issue 11: hosts sharing a port shared one probe chain with a multiplicative
    # hash.
    core = COMPILED.BackboneCore(max_subscribers=4096, max_per_address=0, window=60, keep_sends=False)
    ka = wire.encode_keepalive("", 0, NOSUBSCRIBE, TOKEN)
    hosts = [("10.%d.%d.%d" % (k >> 16, (k >> 8) & 255, k & 255), 5000) for k in range(1, 4097)]
    core.receive_datagrams([(ka, h) for h in hosts], 0)
    assert core.stats(0)["clients"] == 4096
    longest, mean = core.probe_lengths()
    assert longest < 64 and mean < 2.0, (longest, mean)


def test_limits_are_validated_at_and_past(make_core):
    make_core(max_subscribers=1, max_request_range=1, max_pack_frames=2, max_data=MAX_DATA)
    for bad in ({"max_subscribers": 0}, {"window": 0}, {"max_data": MAX_DATA + 1},
                {"max_request_range": 0}, {"first_sequence": MAX_SEQUENCE + 1},
                {"max_pack_frames": 1}, {"max_per_address": -1}, {"repair_burst": 0.5}):
        with pytest.raises(ValueError):
            make_core(**bad)
    assert KeepaliveAck(TOKEN) == wire.decode(sign_on(make_core(), host(2))[0][0])


def traffic(rng, sources, steps):
    """Seeded random traffic: [(now, [(datagram, source), ...])], a handle_timer() when the
    batch is None. Every kind of datagram, valid or not, from a few hosts and ports."""
    now, out = 0, []
    for _ in range(steps):
        now += rng.choice((0, 1, 1_000_000, 5_000_000, 9_999_999, 50_000_000, 400_000_000))
        if rng.random() < 0.1:
            out.append((now, None))
            continue
        batch = []
        for _ in range(rng.randint(1, 80)):
            src = rng.choice(sources)
            kind = rng.random()
            if kind < 0.25:
                flags = rng.choice((0, NOSUBSCRIBE, NOJOURNAL, NOJOURNAL | NOSUBSCRIBE, PACKED,
                                    PACKED | rng.choice((1, 200, 1472, 65507)) << 16))
                addr, port = rng.choice((("", 0), ("", 0), src, ("127.0.0.77", 7)))
                batch.append((wire.encode_keepalive(addr, port, flags, rng.randbytes(16)), src))
            elif kind < 0.58:
                batch.append((wire.encode_push(b"p" * rng.choice((0, 1, 16, 16, 100, 1500))), src))
            elif kind < 0.6:  # a burst of equal PUSHes: GSO runs up to their limits
                size = rng.choice((16, 1400, 1472))
                batch.extend([(wire.encode_push(b"b" * size), src)] * rng.randint(20, 70))
            elif kind < 0.605:  # packs of more frames than one fan-out holds (FRAME_CAP)
                batch.extend([(wire.encode_push(b"") * 2000, src)] * 5)
            elif kind < 0.7:
                sizes = [rng.choice((0, 16, 16, 300)) for _ in range(rng.randint(2, 40))]
                batch.append((b"".join(wire.encode_push(b"q" * n) for n in sizes), src))
            elif kind < 0.85:
                lo = rng.randint(0, 1000)
                batch.append((wire.encode_request("", 0, lo, lo + rng.choice((0, 5, 40, 99))), src))
            else:
                batch.append((rng.choice([d for d, _ in CORPUS]), src))
        out.append((now, batch))
    return out


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
@pytest.mark.skipif(COMPILED is None, reason="compares the compiled core with its twin")
@pytest.mark.parametrize("seed", range(6))
def test_the_twin_sends_what_the_compiled_core_sends_byte_for_byte(seed):
    import random

    rng = random.Random(seed)
    options = dict(first_sequence=MAX_SEQUENCE - 500, seed=seed + 1, window=1.0,
                   max_subscribers=rng.choice((4, 12, 64)), max_per_address=rng.choice((0, 3)),
                   repair_rate=50.0, repair_burst=120.0, max_request_range=64,
                   batch=(64, 7, 64, 1, 64, 64)[seed], gso=seed % 2 == 0, max_pack=4000,
                   max_pack_frames=(30, 2000)[seed >= 3], allow_foreign_addresses=seed % 3 == 0)
    cores = [COMPILED.BackboneCore(**options), backbone_core.BackboneCore(**options)]
    sources = [("127.0.0.%d" % h, 4000 + p) for h in (1, 2, 3, 4) for p in range(5)]
    requested = False  # an entry's `requested` counter was compared non-zero at some point
    cluster = random.Random(seed + 100) if seed >= 3 else None  # the cluster extension too
    for now, batch in traffic(rng, sources, 120):
        if cluster is not None and cluster.random() < 0.1:
            limit = (cores[0].next_sequence + cluster.randint(-5, 60)) & MAX_SEQUENCE
            until = now + cluster.choice((-1, 0, 1, S))
            info = bytes([0x80]) + bytes(cluster.getrandbits(8) for _ in range(63))
            adopted = [(*cluster.choice(sources + [("127.0.0.9", 0)]), cluster.getrandbits(48),
                        now + cluster.choice((-1, 0, 1, S // 2, 3 * S)))
                       for _ in range(cluster.randint(0, 6))]
            for core in cores:
                core.gate(limit, until)
                core.set_info(info)
                core.adopt(adopted)
        for core in cores:
            if batch is None:
                core.handle_timer(now)
            else:
                core.receive_datagrams(batch, now)
        compiled_sends, twin_sends = (core.datagrams_to_send() for core in cores)
        assert twin_sends == compiled_sends, now
        assert cores[1].get_timer() == cores[0].get_timer()
        assert cores[1].stats(now) == cores[0].stats(now)
        assert cores[1].subscribers(now) == cores[0].subscribers(now)
        assert cores[1].table(now) == cores[0].table(now)  # per-entry counters too
        requested = requested or any(e["requested"] for e in cores[0].table(now))
    st = cores[0].stats(now)
    assert requested
    assert st["pushes"] and st["forwards"] and st["keepalives"] and sum(st["drops"].values())


# ---- the backbone-cluster extension (docs/protocols/fyrehose-cluster.md) ---------------------

def test_a_gated_core_sequences_up_to_its_limit_and_until_its_lease_ends(make_core):
    core = make_core()
    sign_on(core, host(2))
    core.gate(1002, 3 * S)  # SEQUENCEs 1000..1002, until 3 s
    assert [d.sequence for d in decoded(push(core, [b"a", b"b", b"c", b"d"], now=S))] == [
        1000, 1001, 1002]
    assert core.stats(S)["drops"]["not_active"] == 1
    core.gate(1010, 3 * S)
    assert decoded(push(core, [b"e"], now=3 * S - 1)) == [Deliver(1003, b"e")]
    # Past the lease: nothing sequenced, nobody signed on, no repair asked.
    assert push(core, [b"f"], now=3 * S) == [] and sign_on(core, host(3), now=3 * S) == []
    core.receive_datagrams([(wire.encode_request("", 0, 1000, 1000), host(2))], 3 * S)
    assert core.datagrams_to_send() == []
    assert core.stats(3 * S)["drops"]["not_active"] == 4
    assert core.next_sequence == 1004


def test_a_gated_core_takes_a_pack_whole_or_not_at_all(make_core):
    core = make_core()
    sign_on(core, host(2), flags=packed_flags())
    core.gate(1001, S)  # room for two
    three = wire.encode_push(b"x") * 3
    core.receive_datagrams([(three, host(2))], 0)
    assert core.datagrams_to_send() == [] and core.stats(0)["drops"]["not_active"] == 1
    core.receive_datagrams([(wire.encode_push(b"y") * 2, host(2))], 0)
    ((packed, _),) = core.datagrams_to_send()  # (to a packing subscriber: one datagram)
    assert [d.sequence for d in wire.decode_pack(packed)] == [1000, 1001]


def test_a_new_epoch_starts_at_its_first_sequence_across_the_wrap(make_core):
    core = make_core()
    sign_on(core, host(2))
    core.gate(0, 0)  # a standby: closed
    core.set_next_sequence(MAX_SEQUENCE)
    core.gate(1, S)  # ... then active: MAX_SEQUENCE, 0, 1
    assert [d.sequence for d in decoded(push(core, [b"a", b"b", b"c", b"d"]))] == [
        MAX_SEQUENCE, 0, 1]
    with pytest.raises(ValueError):
        core.set_next_sequence(MAX_SEQUENCE + 1)


def test_a_query_is_answered_with_the_info_and_its_own_token_only_in_cluster_mode(make_core):
    core = make_core()
    query = wire.encode_query(b"Q" * 16)
    core.receive_datagrams([(query, host(5))], 0)
    assert core.datagrams_to_send() == [] and core.stats(0)["drops"]["unexpected_type"] == 1
    info = wire.encode_info(bytes(16), 7, "127.0.0.2", 2323, 0x2, (("127.0.0.2", 2323),))
    core.set_info(info)
    core.receive_datagrams([(query, host(5))], 0)
    ((answer, to),) = core.datagrams_to_send()
    assert to == host(5) and len(answer) == len(query) == 64  # never more bytes out than in
    assert wire.decode(answer) == wire.decode(info)._replace(token=b"Q" * 16)
    core.receive_datagrams([(answer, host(5))], 0)  # an INFO sent to a backbone: unexpected
    assert core.datagrams_to_send() == [] and core.stats(0)["drops"]["unexpected_type"] == 2
    with pytest.raises(ValueError):
        core.set_info(info[:-1])
    core.set_info(None)
    core.receive_datagrams([(query, host(5))], 0)
    assert core.datagrams_to_send() == []


def test_a_new_active_adopts_the_old_ones_entries_without_extending_them(make_core):
    """adopt(): applied at the next timer; never past the window, never over a fresher entry
    of the client's own, refused like a KEEPALIVE when the table is full; no ACK sent; at
    most max_subscribers entries wait."""
    core = make_core(max_subscribers=3, first_sequence=1000)
    sign_on(core, host(1), now=0)  # its own KEEPALIVE: until 5 s
    core.datagrams_to_send()
    core.adopt([(*host(1), 0x8, 2 * S), (*host(2), 0x8, 99 * S), (*host(5), 0, 10)])
    assert core.subscribers(0) == [(*host(1), 0, 5.0)]  # nothing yet: the loop applies it
    core.handle_timer(100)
    subs = {(h, p): (f, round(left, 3)) for h, p, f, left in core.subscribers(100)}
    assert subs == {host(1): (0, 5.0), host(2): (0x8, 5.0)}  # host 5's had expired
    core.adopt([(*host(3), 0, 2 * S), (*host(4), 0, 2 * S), (*host(6), 0, S), (*host(7), 0, S)])
    core.handle_timer(200)
    st = core.stats(200)
    assert st["adopted"] == 2  # host 2 and host 3
    assert st["drops"]["table_full"] == 3  # hosts 4 and 6 found the table full, 7 the mailbox
    assert core.datagrams_to_send() == []  # adoption is answered with nothing
    sends = push(core, [b"x"], now=300)
    assert sorted(a for _, a in sends) == sorted([host(1), host(2), host(3)])


def test_a_request_is_never_forwarded_to_a_client_that_signed_on_after_those_sequences(make_core):
    """A journal holds none of what we sequenced before it signed on: a REQUEST for it goes to
    those that were there (after a failover: the old active's clients the new one adopted,
    not a seed client that signed on again a moment later)."""
    core = make_core(first_sequence=1000)
    early, requester = host(1), host(2)
    sign_on(core, early)
    sign_on(core, requester)
    push(core, [b"a", b"b", b"c"])  # 1000..1002
    late = host(3)
    sign_on(core, late)  # signs on at 1003
    for _ in range(20):  # 1000..1002: only `early` can hold them
        core.receive_datagrams([(wire.encode_request("", 0, 1000, 1002), requester)], 0)
        assert [to for _, to in core.datagrams_to_send()] == [early]
    push(core, [b"d"])  # 1003: either may hold it
    chosen = set()
    for _ in range(40):
        core.receive_datagrams([(wire.encode_request("", 0, 1003, 1003), requester)], 0)
        chosen |= {to for _, to in core.datagrams_to_send()}
    assert chosen == {early, late}
    # A new epoch (a cluster member's takeover): adopted entries hold what they had; a client
    # signing on again later is left out of the new epoch's first sequences only.
    core.set_next_sequence(5000)
    core.adopt([(*host(4), 0, 10 * S), (*host(6), 0, 10 * S)])  # host 6 died with the old one
    core.handle_timer(1)
    push(core, [b"e", b"f"], now=2)  # 5000, 5001
    sign_on(core, host(5), now=3)  # at 5002
    sign_on(core, host(4), now=3)  # adopted, and heard from: a candidate from now on
    for lo, hi in ((5000, 5001), (4990, 5001)):  # (the second reaches back into the old epoch)
        for _ in range(20):
            core.receive_datagrams([(wire.encode_request("", 0, lo, hi), requester)], 4)
            assert [to for _, to in core.datagrams_to_send()] in ([early], [late], [host(4)])
    old = set()
    for _ in range(60):  # the old epoch's: anyone of ours may hold them (we did not give them)
        core.receive_datagrams([(wire.encode_request("", 0, 900, 905), requester)], 4)
        old |= {to for _, to in core.datagrams_to_send()}
    assert {host(4), host(5)} <= old and host(6) not in old  # (never heard from: not asked)
