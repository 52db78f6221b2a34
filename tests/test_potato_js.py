"""The browser's potato core (pelotari/potato/web/core.js) under Node's own test runner:
tests/js/, which reads the shared vectors (tests/vectors/potato.json) as this suite does.
(About 0.4 s: not marked slow.)"""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_js_core_passes_node_test():
    node = shutil.which("node")
    if node is None:
        pytest.fail("node (Node.js 20) is not installed: the JS core's tests need it "
                    "(bash tools/run test installs it)")
    res = subprocess.run([node, "--test", "tests/js/"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, f"node --test tests/js/ failed:\n{res.stdout}\n{res.stderr}"
