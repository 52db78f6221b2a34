"""PELOTARI_PURE_PYTHON=1 selects every pure-Python twin (fastpath/implementation.py), so the
whole client stack and every protocol core run without a compiler."""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys

import pytest

from fastpath.implementation import PURE_PYTHON
from pelotari.fyrehose import batchio, codec, journal

# Imports every pelotari module, then names each fastpath module that is a compiled extension.
PROBE = """
import importlib, importlib.machinery, pkgutil, sys
import pelotari
for info in pkgutil.walk_packages(pelotari.__path__, "pelotari."):
    importlib.import_module(info.name)
print(" ".join(sorted(name for name, module in sys.modules.items()
                      if name.split(".")[0] == "fastpath" and isinstance(
                          getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader))))
"""


def compiled_modules_after_importing_everything(pure, value="1"):
    env = dict(os.environ)
    env.pop("PELOTARI_PURE_PYTHON", None)
    if pure:
        env["PELOTARI_PURE_PYTHON"] = value
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_no_compiled_module_is_imported_under_pure_python():
    assert compiled_modules_after_importing_everything(pure=True) == []


def built(name):
    """Whether fastpath.<name> is a built extension (found, not imported)."""
    spec = importlib.util.find_spec(f"fastpath.{name}")
    return spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)


@pytest.mark.parametrize("value", [None, "0", ""])
def test_the_built_modules_are_imported_without_it(value):
    # The probe can see an extension: without the variable (or set to 0 or empty) every built
    # module is used. PELOTARI_PURE_PYTHON=0 used to select the twins.
    expected = {f"fastpath.{name}" for name in ("codec", "journal", "batchio", "backbone")
                if built(name)}
    found = compiled_modules_after_importing_everything(pure=value is not None, value=value)
    assert expected <= set(found)


def test_the_selected_implementations_match_the_environment():
    expected = "cython" if os.environ.get("PELOTARI_PURE_PYTHON", "") in ("", "0") else "python"
    assert PURE_PYTHON == (expected == "python")
    assert codec.IMPLEMENTATION == journal.IMPLEMENTATION == batchio.IMPLEMENTATION == expected
    assert codec.decode(codec.encode_push(b"x")) == codec.Push(b"x")
    tracker = journal.GapTracker()
    assert tracker.offer(7, b"m", 0.0) == journal.ACCEPTED
    assert tracker.ready() == [(journal.MESSAGE, 7, b"m")]


def test_bench_records_say_which_implementation_ran():
    from pelotari.harness.results import environment

    expected = "cython" if os.environ.get("PELOTARI_PURE_PYTHON", "") in ("", "0") else "python"
    assert environment()["implementation"] == expected
