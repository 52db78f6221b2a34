"""Client-side fast path: the journal ring and the gap tracker, with an injected clock; every
test runs on fastpath.journal and on its pure-Python twin fastpath.refjournal."""
import pytest
from hypothesis import given, settings, strategies as st

from conftest import implementations
from fastpath import refcodec
from fastpath.packets import MAX_SEQUENCE, Deliver

JOURNALS = implementations("journal", "refjournal")


@pytest.fixture(params=sorted(JOURNALS))
def jm(request):
    """Each journal implementation in turn (the Cython build and the pure-Python twin)."""
    return JOURNALS[request.param]


def test_journal_keeps_the_most_recent_capacity_messages(jm):
    j = jm.Journal(4)
    for seq in range(10, 16):
        j.store(seq, b"m%d" % seq)
    assert len(j) == 4
    assert j.get(11) is None  # evicted: 15 took its slot
    assert [j.get(s) for s in (12, 13, 14, 15)] == [b"m12", b"m13", b"m14", b"m15"]


def test_journal_capacity_limit(jm):
    jm.Journal(1).store(5, b"x")
    with pytest.raises(ValueError):
        jm.Journal(0)


def test_journal_serves_stored_part_of_a_range_as_delivers(jm):
    j = jm.Journal(16)
    for seq in (3, 4, 6):
        j.store(seq, b"d%d" % seq)
    out = j.serve(2, 7)
    assert [refcodec.decode(d) for d in out] == [Deliver(3, b"d3"), Deliver(4, b"d4"),
                                                 Deliver(6, b"d6")]
    assert len(j.serve(3, 6, limit=2)) == 2  # the limit is honoured: 3 and 4 only


def test_journal_serves_across_the_48_bit_wrap(jm):
    j = jm.Journal(8)
    j.store(MAX_SEQUENCE, b"last")
    j.store(0, b"first")
    assert [refcodec.decode(d).sequence for d in j.serve(MAX_SEQUENCE, 0)] == [MAX_SEQUENCE, 0]


def tracker(jm, **kw):
    kw.setdefault("request_delay", 0.1)
    kw.setdefault("backoff", 2.0)
    kw.setdefault("retries", 2)
    return jm.GapTracker(**kw)


def test_in_order_messages_are_released_at_once(jm):
    t = tracker(jm)
    for seq in (100, 101, 102):
        assert t.offer(seq, b"%d" % seq, 0.0) == jm.ACCEPTED
    assert t.ready() == [(jm.MESSAGE, 100, b"100"), (jm.MESSAGE, 101, b"101"), (jm.MESSAGE, 102, b"102")]
    assert t.next_sequence == 103 and t.due(10.0) == [] and t.next_deadline() is None


def test_duplicates_are_discarded(jm):
    t = tracker(jm)
    t.offer(5, b"a", 0)
    t.offer(7, b"c", 0)
    assert t.offer(5, b"a", 0) == jm.DUPLICATE  # already released
    assert t.offer(7, b"c", 0) == jm.DUPLICATE  # held behind the gap
    assert t.duplicates == 2
    assert t.ready() == [(jm.MESSAGE, 5, b"a")]


def test_gap_is_requested_after_the_delay_then_filled_in_order(jm):
    t = tracker(jm)
    t.offer(1, b"1", 0.0)
    t.offer(4, b"4", 0.0)
    assert t.ready() == [(jm.MESSAGE, 1, b"1")]
    assert t.open_gaps() == [(2, 3)]
    assert t.next_deadline() == pytest.approx(0.1)
    assert t.due(0.05) == []  # a reordered DELIVER may still come
    assert t.due(0.1) == [(2, 3)]
    t.offer(3, b"3", 0.2)
    assert t.ready() == [] and t.open_gaps() == [(2, 2)]
    t.offer(2, b"2", 0.2)
    assert t.ready() == [(jm.MESSAGE, 2, b"2"), (jm.MESSAGE, 3, b"3"), (jm.MESSAGE, 4, b"4")]
    assert t.open_gaps() == []


def test_retries_back_off_then_the_gap_is_reported_lost_in_order(jm):
    t = tracker(jm, retries=2)
    t.offer(10, b"a", 0.0)
    t.offer(13, b"d", 0.0)
    t.ready()
    times = []
    now = 0.0
    for _ in range(20):
        now = t.next_deadline()
        if now is None:
            break
        if t.due(now):
            times.append(round(now, 3))
    assert times == [0.1, 0.3, 0.7]  # first REQUEST after the delay, then 0.2 and 0.4 later
    assert t.ready() == [(jm.LOST, 11, 12), (jm.MESSAGE, 13, b"d")]
    assert t.lost_messages == 2 and t.next_sequence == 14


def test_give_up_loses_the_gaps_within_a_range_at_once_and_releases_in_order(jm):
    t = tracker(jm)
    t.offer(10, b"a", 0.0)
    t.offer(13, b"d", 0.0)
    t.offer(20, b"k", 0.0)
    t.ready()
    assert t.open_gaps() == [(11, 12), (14, 19)]
    assert t.give_up(11, 13) == 1  # only gaps wholly inside: 14..19 is not
    assert t.ready() == [(jm.LOST, 11, 12), (jm.MESSAGE, 13, b"d")]
    assert t.open_gaps() == [(14, 19)]
    assert t.give_up(100, 200) == 0 and t.ready() == []
    assert t.give_up(14, 19) == 1
    assert t.ready() == [(jm.LOST, 14, 19), (jm.MESSAGE, 20, b"k")]
    assert t.lost_messages == 8 and t.next_deadline() is None


def test_give_up_before_any_deliver_does_nothing(jm):
    assert tracker(jm).give_up(0, 10) == 0


def test_a_gap_split_by_a_late_arrival_keeps_its_repair_state(jm):
    t = tracker(jm, retries=0)
    t.offer(0, b"0", 0.0)
    t.offer(5, b"5", 0.0)
    assert t.due(0.1) == [(1, 4)]
    t.offer(3, b"3", 0.15)
    assert t.open_gaps() == [(1, 2), (4, 4)]
    t.due(1.0)  # retries exhausted for both halves
    assert t.ready() == [(jm.MESSAGE, 0, b"0"), (jm.LOST, 1, 2), (jm.MESSAGE, 3, b"3"), (jm.LOST, 4, 4),
                         (jm.MESSAGE, 5, b"5")]
    assert t.next_sequence == 6


def test_requests_are_split_at_max_request_range(jm):
    t = tracker(jm, max_request_range=4)
    t.offer(0, b"", 0)
    t.offer(11, b"", 0)
    assert t.due(1.0) == [(1, 4), (5, 8), (9, 10)]


def test_too_many_held_messages_give_up_the_oldest_gap(jm):
    t = tracker(jm, max_held=3)
    t.offer(0, b"0", 0)
    t.ready()
    for seq in (2, 3, 4):
        t.offer(seq, b"%d" % seq, 0)
    assert t.ready() == []  # three held: at the limit
    t.offer(5, b"5", 0)     # one past it
    assert t.ready() == [(jm.LOST, 1, 1)] + [(jm.MESSAGE, s, b"%d" % s) for s in (2, 3, 4, 5)]


def test_held_bytes_past_the_limit_give_up_the_oldest_gap(jm):
    t = tracker(jm, max_held_bytes=30)
    t.offer(0, b"", 0)
    t.ready()
    for seq in (2, 3, 4):
        t.offer(seq, b"x" * 10, 0)
    assert t.ready() == [] and t.held_bytes == 30  # at the limit
    t.offer(5, b"y", 0)                             # one byte past it
    assert t.ready() == [(jm.LOST, 1, 1)] + [(jm.MESSAGE, s, b"x" * 10) for s in (2, 3, 4)] + [
        (jm.MESSAGE, 5, b"y")]
    assert t.held_bytes == 0 and t.held_count == 0


def test_one_large_message_gives_up_as_many_gaps_as_it_takes(jm):
    # Held behind three gaps: 2, 4, 6. A big message at 8 passes the byte limit; losing gap 1
    # alone frees 2 bytes, not enough, so gaps go oldest first until the rest fits.
    t = tracker(jm, max_held_bytes=100)
    t.offer(0, b"", 0)
    for seq in (2, 4, 6):
        t.offer(seq, b"ab", 0)
    t.ready()
    t.offer(8, b"z" * 99, 0)
    out = t.ready()
    assert out == [(jm.LOST, 1, 1), (jm.MESSAGE, 2, b"ab"), (jm.LOST, 3, 3), (jm.MESSAGE, 4, b"ab"),
                   (jm.LOST, 5, 5), (jm.MESSAGE, 6, b"ab")]
    assert t.held_bytes == 99 and t.open_gaps() == [(7, 7)]
    assert t.lost_messages == 3


def test_the_held_limits_must_be_positive(jm):
    for bad in ({"max_held": 0}, {"max_held_bytes": 0}):
        with pytest.raises(ValueError):
            jm.GapTracker(**bad)


def test_backwards_jump_beyond_max_gap_is_a_resync_not_a_duplicate(jm):
    t = tracker(jm, max_gap=100)
    t.offer(5000, b"a", 0)
    t.offer(5002, b"c", 0)  # leaves gap 5001
    t.ready()
    assert t.offer(7, b"new", 0) == jm.RESYNCED  # the backbone restarted
    assert t.ready() == [(jm.LOST, 5001, 5001), (jm.MESSAGE, 5002, b"c"), (jm.RESET, 5003, 7),
                         (jm.MESSAGE, 7, b"new")]
    assert t.offer(8, b"next", 0) == jm.ACCEPTED
    assert t.ready() == [(jm.MESSAGE, 8, b"next")]


def test_forward_jump_beyond_max_gap_is_a_resync_without_requests(jm):
    t = tracker(jm, max_gap=100)
    t.offer(10, b"a", 0)
    assert t.offer(10 + 101, b"b", 0) == jm.RESYNCED
    assert t.due(100.0) == []
    assert t.ready() == [(jm.MESSAGE, 10, b"a"), (jm.RESET, 11, 111), (jm.MESSAGE, 111, b"b")]
    t2 = tracker(jm, max_gap=100)
    t2.offer(10, b"a", 0)
    assert t2.offer(10 + 100, b"b", 0) == jm.ACCEPTED  # exactly max_gap: still a gap
    assert t2.open_gaps() == [(11, 109)]


def test_sequence_wraps_at_48_bits(jm):
    t = tracker(jm)
    t.offer(MAX_SEQUENCE - 1, b"a", 0)
    t.offer(1, b"d", 0)  # MAX_SEQUENCE and 0 missing
    assert t.open_gaps() == [(MAX_SEQUENCE, 0)]
    assert t.due(1.0) == [(MAX_SEQUENCE, 0)]
    t.offer(0, b"c", 1.0)
    t.offer(MAX_SEQUENCE, b"b", 1.0)
    assert [i[1] for i in t.ready()] == [MAX_SEQUENCE - 1, MAX_SEQUENCE, 0, 1]


# One step of a random session: ("offer", seq offset, time step) or ("due", 0, time step).
steps = st.lists(st.tuples(st.sampled_from(["offer", "offer", "offer", "due", "give_up"]),
                           st.integers(-40, 40), st.floats(0, 0.5)), max_size=120)


@pytest.mark.skipif(len(JOURNALS) < 2, reason="compares fastpath.journal with its twin")
@given(start=st.integers(0, MAX_SEQUENCE), steps=steps)
@settings(max_examples=200, deadline=None)
def test_the_twin_tracks_exactly_as_the_compiled_tracker(start, steps):
    trackers = [JOURNALS[k].GapTracker(max_gap=32, max_held=16, max_held_bytes=40,
                                       max_request_range=8, request_delay=0.1, retries=2)
                for k in ("cython", "python")]
    now, seq = 0.0, start
    for kind, offset, dt in steps:
        now += dt
        seq = (seq + offset) & MAX_SEQUENCE
        if kind == "offer":
            results = [t.offer(seq, b"%d" % seq, now) for t in trackers]
        elif kind == "give_up":  # every gap within seq - 20 .. seq + |offset|
            results = [t.give_up((seq - 20) & MAX_SEQUENCE, (seq + abs(offset)) & MAX_SEQUENCE)
                       for t in trackers]
        else:
            results = [t.due(now) for t in trackers]
        results += [(t.ready(), t.open_gaps(), t.next_deadline(), t.requested(seq), t.held_count,
                     t.held_bytes, t.next_sequence, t.duplicates, t.resets, t.lost_messages) for t in trackers]
        assert results[0] == results[1] and results[2] == results[3]


def test_open_gaps_after_a_resync_to_below_sequence_zero(jm):
    # Found by the differential test: positions then are negative, and the compiled open_gaps()
    # once raised OverflowError on them.
    t = tracker(jm, max_gap=32)
    t.offer(0, b"a", 0)
    assert t.offer(MAX_SEQUENCE - 31, b"b", 0) == jm.RESYNCED
    t.offer(MAX_SEQUENCE - 29, b"c", 0)
    assert t.open_gaps() == [(MAX_SEQUENCE - 30, MAX_SEQUENCE - 30)]
