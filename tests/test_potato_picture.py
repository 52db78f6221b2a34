"""A frame's picture (a stroke list): the rules from the shared vectors, and pictures riding on
the winner's frame broadcast."""
import json
from pathlib import Path

import pytest

from pelotari.potato import wire
from pelotari.potato.core import Config, FrameChanged, PotatoNode

VECTORS = json.loads((Path(__file__).parent / "vectors" / "potato.json").read_text())


def recipe(r: dict) -> list:
    """A generated stroke list (the recipe rules are in the vectors file; the JS suite builds
    the same)."""
    out = []
    for i in range(r["strokes"]):
        p = []
        for j in range(r["points_each"]):
            if r.get("wide_coordinates"):
                p += [1000 + (i + j) % 24, 700 + (i + j) % 68]
            else:
                p += [(i * 7 + j) % 1024, (i * 3 + j) % 768]
        out.append({"c": "#000000", "w": r.get("width", 1), "p": p})
    return out


def test_the_limits_are_the_vectors():
    lim = VECTORS["picture_limits"]
    assert (wire.WIDTH, wire.HEIGHT, wire.MAX_STROKES, wire.MAX_POINTS, wire.MAX_WIDTH) == (
        lim["width"], lim["height"], lim["max_strokes"], lim["max_points"], lim["max_line_width"])


CASES = [(v["why"], v["strokes"], v["ok"], v.get("reason")) for v in VECTORS["pictures"]] + \
    [(r["why"], recipe(r), r["ok"], r.get("reason")) for r in VECTORS["picture_recipes"]]


@pytest.mark.parametrize("why,strokes,ok,reason", CASES, ids=[c[0] for c in CASES])
def test_picture_rules(why, strokes, ok, reason):
    if ok:
        assert wire.strokes(strokes) == strokes
    else:
        with pytest.raises(wire.PotatoError) as e:
            wire.strokes(strokes)
        assert e.value.reason == reason


def test_the_largest_picture_fits_a_message_with_room_for_visited():
    (big,) = [r for r in VECTORS["picture_recipes"] if r.get("wide_coordinates")]
    body = {"frame": "f" * 40, "parent": "e" * 40, "strokes": recipe(big)}
    msg = wire.Message("broadcast", "i" * 32, "n" * 100, tuple("v%099d" % k for k in range(190)),
                       None, body)
    data = wire.encode(msg)
    assert len(json.dumps(recipe(big), separators=(",", ":"))) <= 44802
    assert len(data) <= wire.Limits().max_message
    assert wire.decode(data).body["strokes"] == body["strokes"]


def pair():
    a, b = PotatoNode("A", 0.0, Config()), PotatoNode("B", 0.0, Config())
    a.peer_up("B", 0.0)
    b.peer_up("A", 0.0)
    return a, b


def run(a, b, now=0.0):
    """Carry messages both ways until both are quiet."""
    nodes = {"A": a, "B": b}
    moved = True
    while moved:
        moved = False
        for name, n in nodes.items():
            for peer, data in n.messages_to_send():
                nodes[peer].receive(name, data, now)
                moved = True


def frames(n):
    return [ev for ev in iter(n.next_event, None) if isinstance(ev, FrameChanged)]


def test_the_winner_broadcasts_its_picture_and_the_others_take_it():
    a, b = pair()
    a.picture = [{"c": "#ff0000", "w": 3, "p": [1, 2, 3, 4]}]
    nxt = a.propose(0.0)
    run(a, b)
    (mine,), (theirs,) = frames(a), frames(b)
    assert (mine.frame, mine.picture) == (nxt, a.picture)
    assert (theirs.frame, theirs.by, theirs.picture) == (nxt, "A", a.picture)
    assert b.picture == a.picture  # B's canvas is the frame's now: its next win carries it


def test_a_frame_without_a_picture_is_the_seeds_frame_broadcast():
    a, b = pair()
    a.propose(0.0)
    sent = []
    nodes = {"A": a, "B": b}
    for _ in range(4):
        for name, n in nodes.items():
            for peer, data in n.messages_to_send():
                sent.append(json.loads(data))
                nodes[peer].receive(name, data, 0.0)
    (fb,) = [m for m in sent if m["type"] == "broadcast"]
    assert set(fb["body"]) == {"frame", "parent"}  # nothing a seed client does not expect
    (ev,) = frames(b)
    assert ev.picture is None and b.picture is None


def test_a_bad_picture_still_moves_the_frame_but_is_never_drawn():
    a, b = pair()
    a.picture = [{"c": "javascript:alert(1)", "w": 3, "p": [1, 2]}]
    nxt = a.propose(0.0)
    b.picture = [{"c": "#000000", "w": 1, "p": [0, 0]}]
    run(a, b)
    (ev,) = frames(b)
    assert (b.frame, ev.picture) == (nxt, None)  # the seed: every client takes the frame
    assert b.picture == [{"c": "#000000", "w": 1, "p": [0, 0]}]  # its canvas is kept
    assert b.stats["picture_refused_bad_picture"] == 1
