"""The build lists every package and extension that is on disk."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def setup_constant(name):
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not in setup.py")


def test_every_package_on_disk_is_listed():
    on_disk = sorted(
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("pelotari", "fastpath") for p in (ROOT / top).rglob("__init__.py"))
    assert sorted(setup_constant("PACKAGES")) == on_disk


def test_every_pyx_is_built():
    assert sorted(setup_constant("MODULES")) == sorted(p.stem for p in (ROOT / "fastpath").glob("*.pyx"))
