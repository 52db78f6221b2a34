"""The one rule that picks each fastpath module's implementation: the Cython build or its twin.

PELOTARI_PURE_PYTHON=1 (any value but empty or 0) selects every pure-Python twin (as msgpack's MSGPACK_PUREPYTHON does), and
so does a compiled module that is not built. Every selector asks compiled(): codec -> refcodec,
journal -> refjournal, batchio -> refbatchio (pelotari/fyrehose/{codec,journal,batchio}.py), the
backbone's core and loop (pelotari/fyrehose/backbone.py), swarm's MACs, connection table and
datagram path (pelotari/swarm/{wire,table,node}.py). The load generators (loadgen, swarmload) have
no twin: they are benchmark tools, and their figures are meant to be the compiled path's.
"""
import importlib
import os

PURE_PYTHON = os.environ.get("PELOTARI_PURE_PYTHON", "") not in ("", "0")


def compiled(name):
    """The extension module fastpath.<name>, or None under PELOTARI_PURE_PYTHON=1 or unbuilt."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(f"fastpath.{name}")
    except ImportError:  # pragma: no cover - only without a built extension
        return None
