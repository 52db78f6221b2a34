"""Every number option refuses NaN (it passes FloatRange's comparisons) and infinities: status 2."""
import subprocess

import click
import pytest

from conftest import PELOTARI
from pelotari.cli import main
from pelotari.cli.common import FiniteRange

DEADLINE = 60  # seconds; a usage error takes well under one, even on a slow machine


def float_options(group, path=()):
    """(command words, option) for every option of a float type under group."""
    for name, command in group.commands.items():
        words = (*path, name)
        if isinstance(command, click.Group):
            yield from float_options(command, words)
            continue
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type,
                                                              click.types.FloatParamType):
                yield words, param


def test_the_options_are_found():
    found = {(words, max(param.opts, key=len)) for words, param in float_options(main)}
    assert {(("prototari",), "--inactive-peer-time"), (("bully", "join"), "--heartbeat"),
            (("backbone",), "--stats-interval"), (("wait",), "--timeout")} <= found
    assert len(found) > 40


def test_every_float_option_refuses_nan_and_infinities():
    """Each option's own conversion (no command runs)."""
    for words, param in float_options(main):
        for value in ("nan", "inf", "-inf"):
            with pytest.raises(click.BadParameter):
                param.type.convert(value, param, None)
                pytest.fail(f"{' '.join(words)} {param.opts}: {value} accepted")


@pytest.mark.parametrize("value", ["nan", "inf"])
@pytest.mark.parametrize("command", [
    ["prototari", "--inactive-peer-time"], ["prototari", "--broadcast-interval"],
    ["prototari", "--peer-broadcast-interval"], ["bully", "join", "127.0.0.1:3333", "--heartbeat"],
    ["backbone", "--host", "127.0.0.1", "--port", "0", "--stats-interval"]],
    ids=lambda words: " ".join(w for w in words if not w[0].isdigit() and w != "--host"))
def test_nan_and_inf_are_one_usage_error_line(command, value):
    res = subprocess.run(PELOTARI + command + [value], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=DEADLINE)
    assert res.returncode == 2, res.stderr
    last = res.stderr.splitlines()[-1]
    assert last.startswith(f"Error: Invalid value for '{command[-1]}': "), res.stderr
    assert value in last and "Traceback" not in res.stderr


def test_finite_range_keeps_its_bounds_and_finite_numbers():
    assert FiniteRange(0.1, 3600).convert("2.5", None, None) == 2.5
    with pytest.raises(click.BadParameter, match="not a finite number"):
        FiniteRange().convert("nan", None, None)
    with pytest.raises(click.BadParameter, match="range"):
        FiniteRange(0.1, 3600).convert("0", None, None)
