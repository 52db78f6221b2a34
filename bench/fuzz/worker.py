"""One target under atheris: `python -m bench.fuzz.worker NAME [libFuzzer options] [CORPUS]`.

The target's modules are imported inside atheris.instrument_imports(), so libFuzzer sees the
coverage of pelotari's Python code; Cython modules report theirs when the worker runs on the
instrumented build (`python -m bench.fuzz build`, then `run --native`).
"""
import importlib
import os
import sys

import atheris

from bench.fuzz import registry


def main() -> None:
    """Instrument, then fuzz until libFuzzer stops (it exits the process)."""
    name, options = sys.argv[1], sys.argv[2:]
    native = os.environ.get("PELOTARI_FUZZ_NATIVE")
    if native:  # ahead of the working directory, which holds the plain build
        sys.path.insert(0, native)
    with atheris.instrument_imports(include=["pelotari", "fastpath"]):
        target = registry.load(name)
        for module in target.modules:
            importlib.import_module(module)
    atheris.Setup([sys.argv[0]] + options, target.one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
