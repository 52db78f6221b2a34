"""Every bench system and load-generator path, for real: exact counts at a modest rate.

The peers come from bench/peers/install.sh, which `bash tools/run test` runs when it can (as
root); elsewhere a missing peer is skipped with the reason, never faked.
"""
import pytest

from pelotari.harness.systems import SYSTEMS
from pelotari.harness.trial import Scenario, Session

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_one_trial_delivers_every_message_exactly_once(name):
    system = SYSTEMS[name]
    why = system.check()
    if why:
        pytest.skip(f"{name}: {why}")
    with Session(system, Scenario(payload=100, subscribers=3, publishers=2)) as session:
        # idle 3 s: the count waits out any stall of a loaded machine (an outcome, not a speed;
        # whether a system keeps up is the bench's `sustained`, measured there)
        result = session.trial(rate=2000, duration=0.5, idle=3.0)
    assert 0 < result.sent <= 1002  # 2 publishers x 1,000 msgs/s x 0.5 s, fewer if starved
    assert result.unique == result.sent * 3, result.as_dict()
    assert result.duplicates == 0 and result.loss == 0
    assert result.latency["count"] == result.unique and result.latency["p50_ns"] > 0
    assert result.server_cpu > 0 and set(result.client_cpu) == {"subscribers", "publisher-0", "publisher-1"}


def test_list_names_every_system():
    import subprocess

    from conftest import PELOTARI

    out = subprocess.run(PELOTARI + ["bench", "--list"], capture_output=True, text=True).stdout
    assert [line.split()[0] for line in out.splitlines() if not line.startswith(" ")] == list(SYSTEMS)
