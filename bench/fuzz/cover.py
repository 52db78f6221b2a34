"""`python -m bench.fuzz.cover TARGET CORPUS`: replay a corpus under coverage.py, started
before anything of pelotari's is imported; print {module path: % of its lines reached}."""
import json
import os
import sys

import coverage

from bench.fuzz import registry  # imports nothing of pelotari's


def main() -> None:
    """Measure one target's corpus."""
    name, corpus = sys.argv[1], sys.argv[2]
    cov = coverage.Coverage(source_pkgs=["pelotari", "fastpath"], data_file=None)
    cov.start()
    target = registry.load(name)
    for entry in sorted(os.listdir(corpus)):
        with open(os.path.join(corpus, entry), "rb") as f:
            data = f.read()
        try:
            target.one_input(data)
        except Exception:  # noqa: BLE001 - a crash input in the corpus: `run` reports those
            pass
    cov.stop()
    out = {}
    for module in target.modules:
        path = getattr(sys.modules.get(module), "__file__", "") or ""
        if path.endswith(".py"):  # a compiled module has no lines to count here
            _, statements, _, missing, _ = cov.analysis2(path)
            out[os.path.relpath(path)] = 100.0 * (len(statements) - len(missing)) / max(len(statements), 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
