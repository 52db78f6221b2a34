"""The source passes ruff's pyflakes checks (unused imports and names, undefined names), as
asyncpg runs flake8 as a test."""
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is part of the test dependencies"
    res = subprocess.run([ruff, "check", "--select", "F,E9", "--no-cache", "--output-format",
                          "concise", "pelotari", "fastpath", "tests", "bench", "tools/scapy-shell"],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout
