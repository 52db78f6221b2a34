"""bench/fuzz's runs: the summary's table of each target's newest run per build (no picture)."""
from typing import Dict, List

from pelotari.analysis.plotting import _short


def _fuzz_markdown(data: Dict[str, List[dict]]) -> List[str]:
    rows = data.get("fuzz", [])
    if not rows:
        return []
    lines = ["## Fuzzing (bench/fuzz: each target's newest run per build)", "",
             "| target | build | inputs | inputs/s | coverage (edges / features) | crashes | "
             "commit | runs (inputs, crashes in all) |", "|---|---|---:|---:|---:|---:|---|---|"]
    for r in sorted(rows, key=lambda r: (r["target"], r["implementation"] or "", r["native_coverage"])):
        build = ("Cython, instrumented + ASan" if r["native_coverage"] else
                 {"cython": "Cython", "python": "pure Python"}.get(r["implementation"], "?")
                 + ", Python coverage")
        lines.append(f"| {r['target']} | {build} | {r['inputs'] or 0:,} | "
                     f"{r['inputs_per_second'] or 0:,} | {r['coverage_edges'] or 0:,} / "
                     f"{r['features'] or 0:,} | {r['crashes']} | `{_short(r['commit'])}` | "
                     f"{r['runs']} ({r['inputs_all'] or 0:,}, {r['crashes_all']}) |")
    return lines + [""]
