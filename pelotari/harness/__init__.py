"""The benchmark harness (orchestration): load-generator agents, the systems measured, the
lossless-rate search, soak sampling and JSON-lines results.

It runs programs kept outside the package, in the source tree's top-level `bench/` folder (the C
reference backbone, the asyncio baseline, the peers' C client, micro-benchmarks); `source_tree()`
is the one place that finds that tree.
"""
import os
import pathlib

import pelotari


def source_tree() -> pathlib.Path:
    """The checkout pelotari runs from (holds bench/ and fastpath/include); PELOTARI_SOURCE_TREE
    overrides it (PELOTARI_BENCH_DIR still names bench/ alone)."""
    env = os.environ.get("PELOTARI_SOURCE_TREE")
    return pathlib.Path(env) if env else pathlib.Path(pelotari.__file__).resolve().parent.parent
