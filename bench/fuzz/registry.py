"""Every fuzz target, by name (imported lazily, so the worker can instrument them first)."""
from __future__ import annotations

import importlib
from typing import Dict, List

from bench.fuzz.common import Target

# module -> the names of its targets, in the order `tools/run fuzz` runs them
MODULES = {
    "bench.fuzz.fyrehose": ["fyrehose-codec", "fyrehose-client", "fyrehose-backbone"],
    "bench.fuzz.prototari": ["prototari-node"],
    "bench.fuzz.potato": ["potato-wire", "potato-node"],
    "bench.fuzz.swarm": ["swarm-datagram", "swarm-node", "swarm-path"],
    "bench.fuzz.bully": ["bully-framing", "bully-node"],
    "bench.fuzz.layers": ["scapy-layers"],
}
NAMES: List[str] = [name for names in MODULES.values() for name in names]


def module_of(name: str) -> str:
    """The module that defines target `name` (KeyError if none)."""
    for module, names in MODULES.items():
        if name in names:
            return module
    raise KeyError(name)


def load(name: str) -> Target:
    """The Target called name."""
    targets: Dict[str, Target] = {t.name: t for t in importlib.import_module(module_of(name)).TARGETS}
    return targets[name]
