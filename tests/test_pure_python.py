"""The codec switch: PELOTARI_PURE_PYTHON=1 selects the reference codec everywhere."""
import os

from pelotari.fyrehose import codec


def test_the_selected_codec_matches_the_environment():
    expected = "python" if os.environ.get("PELOTARI_PURE_PYTHON") else "cython"
    assert codec.IMPLEMENTATION == expected
    assert codec.decode(codec.encode_push(b"x")) == codec.Push(b"x")
