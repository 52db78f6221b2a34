"""The source passes ruff's pyflakes checks (unused imports and names, undefined names), as
asyncpg runs flake8 as a test."""
import ast
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is part of the test dependencies"
    res = subprocess.run([ruff, "check", "--select", "F,E9", "--no-cache", "--output-format",
                          "concise", "pelotari", "fastpath", "tests", "bench", "tools/scapy-shell"],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


# What picks a build: every module that asks fastpath.implementation.compiled(), every compiled
# fastpath module (a .pyx) and every twin (fastpath/ref*.py).
def build_pickers():
    """Module names whose code differs between the Cython build and the pure-Python pass."""
    names = {f"fastpath.{p.stem}" for p in (ROOT / "fastpath").glob("*.pyx")}
    names |= {f"fastpath.{p.stem}" for p in (ROOT / "fastpath").glob("ref*.py")}
    for path in (ROOT / "pelotari").rglob("*.py"):
        if "compiled(" in path.read_text():
            names.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return names - {"fastpath.wire"}  # C helpers only the other extensions cimport


# A fyrehose or swarm command started as a process: PELOTARI plus a list whose first word is one of these.
STARTS_A_PICKER = re.compile(r'PELOTARI\s*\+\s*\[\s*"(backbone|sub|pub|swarm|demo|bench|soak)"')
PICKER_FIXTURES = {"codec", "backbone", "backbone_factory"}


@pytest.mark.slow  # a process per module
def test_the_one_build_modules_reach_no_module_that_picks_a_build():
    """The pure-Python pass leaves out conftest's ONE_BUILD_MODULES: each must import nothing that
    picks a build, take no fixture that does, and start no fyrehose or swarm command."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import ONE_BUILD_MODULES

    pickers = build_pickers()
    assert {"fastpath.codec", "fastpath.refcodec", "pelotari.swarm.table"} <= pickers
    probe = ("import importlib, json, sys\n"
             "sys.path[:0] = [sys.argv[1] + '/tests', sys.argv[1]]\n"
             "importlib.import_module('conftest')\n"
             "before = set(sys.modules)\n"
             "importlib.import_module(sys.argv[2])\n"
             "print(json.dumps(sorted(set(sys.modules) - before)))\n")
    for name in sorted(ONE_BUILD_MODULES):
        path = ROOT / "tests" / f"{name}.py"
        assert path.exists(), f"{name} is listed in ONE_BUILD_MODULES but does not exist"
        source = path.read_text()
        assert not STARTS_A_PICKER.search(source), f"{name} starts a fyrehose or swarm command"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                used = {a.arg for a in node.args.args} & PICKER_FIXTURES
                assert not used, f"{name}.{node.name} takes {used}, which pick a build"
        res = subprocess.run([sys.executable, "-c", probe, str(ROOT), name], capture_output=True,
                             text=True, cwd=ROOT)
        assert res.returncode == 0, res.stderr
        imported = set(json.loads(res.stdout.splitlines()[-1]))
        assert not imported & pickers, f"{name} imports {sorted(imported & pickers)}"
