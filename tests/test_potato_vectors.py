"""The shared vectors (tests/vectors/potato.json) that the browser's JS core is held to as well
(tests/js/potato_core.test.mjs): decoding, frame identifiers, internal votes, taking frames."""
import json
from pathlib import Path

import pytest

from pelotari.potato import wire
from pelotari.potato.core import Delivered, FrameChanged, PotatoNode, VoteCast

VECTORS = json.loads((Path(__file__).parent / "vectors" / "potato.json").read_text())


def data_of(v: dict) -> bytes:
    """A decode vector's bytes (the recipe is in the vectors' decode_about)."""
    if "data_hex" in v:
        return bytes.fromhex(v["data_hex"])
    if "data_parts" in v:
        return "".join(p if isinstance(p, str) else p[0] * p[1]
                       for p in v["data_parts"]).encode()
    return v["data"].encode()


DECODE = VECTORS["decode"]


@pytest.mark.parametrize("v", DECODE, ids=[v["why"] for v in DECODE])
def test_decode_vectors(v):
    data = data_of(v)
    if "bytes" in v:
        assert len(data) == v["bytes"]
    limits = wire.Limits(**v.get("limits", {}))
    if v["ok"]:
        msg = wire.decode(data, limits)
        if "encoded" in v:
            assert wire.encode(msg).decode() == v["encoded"]
    else:
        with pytest.raises(wire.PotatoError) as e:
            wire.decode(data, limits)
        assert e.value.reason == v["reason"]


def test_every_reason_and_each_type_has_a_vector():
    assert {v["reason"] for v in DECODE if not v["ok"]} == {
        "not_json", "bad_field", "unknown_type", "too_large"}
    types = {json.loads(data_of(v))["type"] for v in DECODE if v["ok"]}
    assert types == set(wire.TYPES)


def test_a_node_counts_each_bad_vector_by_reason_and_relays_none():
    for v in DECODE:
        if v["ok"] or "limits" in v:
            continue
        n = listener()
        n.receive("P", data_of(v), 0.0)
        assert n.stats[f"dropped_{v['reason']}"] == 1, v["why"]
        assert n.messages_to_send() == [], v["why"]


@pytest.mark.parametrize("v", VECTORS["frame_ids"], ids=lambda v: f"{v['name'][:12]}-{v['now_ms']}")
def test_frame_id_vectors(v):
    assert wire.frame_id(v["name"], v["now_ms"], v["random"]) == v["id"]


# ---- steps on a listener -----------------------------------------------------------------------

def listener(frame="F0"):
    """A client on `frame` with two peers: P hands it messages, Q shows what it relays."""
    n = PotatoNode("A", 0.0, frame=frame)
    n.peer_up("P", 0.0)
    n.peer_up("Q", 0.0)
    while n.next_event() is not None:
        pass
    return n


def request(parent, nxt, origin):
    return wire.encode(wire.Message("indirect_election_request", wire.new_identifier(), origin,
                                    (), None, {"parent": parent, "next": nxt,
                                               "originator": origin, "direct_participants": []}))


def frame_broadcast(body, origin):
    return wire.encode(wire.Message("broadcast", wire.new_identifier(), origin, (origin,), None,
                                    body))


def run_steps(scenario):
    """The steps of an internal_vote or taking_frames scenario (vectors' decode_about)."""
    n = listener(scenario["frame"])
    for step in scenario["steps"]:
        what = f"{scenario['why']}: {step}"
        origin = step.get("origin", "Z")
        before = dict(n.stats)
        if "request" in step:
            n.receive("P", request(*step["request"], origin), step["at"])
        elif "frame_broadcast" in step:
            n.receive("P", frame_broadcast(step["frame_broadcast"], origin), step["at"])
        elif step.get("timer"):
            n.handle_timer(step["at"])
        elif step.get("propose"):
            n.propose(step["at"])
        events = list(iter(n.next_event, None))
        if "vote" in step:
            parent, nxt = step["request"]
            assert [e.vote for e in events if isinstance(e, VoteCast) and e.parent == parent
                    and e.next == nxt] == step["vote"], what
        if "refused" in step:
            taken = [e for e in events if isinstance(e, FrameChanged)]
            if step["refused"] is None:
                assert [(e.frame, e.by, e.via) for e in taken] == [
                    (step["frame_broadcast"]["frame"], origin, "P")], what
            else:
                key = f"frame_refused_{step['refused']}"
                assert not taken and n.stats[key] - before.get(key, 0) == 1, what
        if step.get("delivered"):
            assert len([e for e in events if isinstance(e, Delivered)]) == 1, what
        if "frame" in step:
            assert n.frame == step["frame"], what


SCENARIOS = VECTORS["internal_vote"] + VECTORS["taking_frames"]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["why"] for s in SCENARIOS])
def test_listener_scenarios(scenario):
    run_steps(scenario)
