"""Batch datagram I/O: fastpath.batchio (recvmmsg/sendmmsg), or its twin fastpath.refbatchio."""
from fastpath.implementation import compiled

if compiled("batchio") is None:
    from fastpath.refbatchio import *  # noqa: F401,F403
    IMPLEMENTATION = "python"
else:
    from fastpath.batchio import *  # noqa: F401,F403
    IMPLEMENTATION = "cython"
