"""Throughput trend analysis of bench results in PySpark."""
import re
import shlex
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # the pelotari package's folder


def checkout(package: Path = PACKAGE) -> Path | None:
    """The source checkout the package runs from (an editable install, or the tree), or None."""
    root = package.parent
    try:
        text = (root / "pyproject.toml").read_text()
    except (OSError, UnicodeDecodeError):
        return None
    return root if re.search(r'^name\s*=\s*"pelotari"\s*$', text, re.M) else None


def install_hint(package: Path = PACKAGE) -> str:
    """The command that installs the analysis extra: into the checkout (editable), else PyPI's."""
    root = checkout(package)
    if root is None:
        return "pip install 'pelotari[analysis]'"
    try:
        here = Path.cwd().resolve() == root
    except OSError:  # the current folder is gone
        here = False
    return "pip install -e " + shlex.quote(("." if here else str(root)) + "[analysis]")
