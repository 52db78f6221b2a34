"""The cluster member's asyncio adapter (pelotari.fyrehose.cluster_node) on real sockets on
127.0.0.x: one active, a failover when it dies, stored state, no position issued twice."""
import asyncio
import json
import random

import pytest

from pelotari.bully.node import BindError
from pelotari.fyrehose.cluster import BecameActive, Config
from pelotari.fyrehose.cluster_node import ClusterNode, MemoryPlane, StateFile

HOSTS = ["127.0.0.61", "127.0.0.62", "127.0.0.63"]


async def start_cluster(tmp_path, attempts=20):
    """Three members on HOSTS, sharing one bully port and one cluster port (found free)."""
    for _ in range(attempts):
        bport = random.randrange(20000, 60000)
        cport = bport + 1
        nodes, events = [], {h: [] for h in HOSTS}
        try:
            for i, h in enumerate(HOSTS):
                peers = [(o, cport) for o in HOSTS if o != h]
                nodes.append(await ClusterNode.start(
                    h, bport, cluster_port=cport, peers=peers, plane=MemoryPlane(),
                    config=Config(cluster_size=3), state_path=str(tmp_path / f"{h}.json"),
                    bully_leader=None if i == 0 else (HOSTS[0], bport),
                    on_event=events[h].append))
            return nodes, events
        except BindError:
            for n in nodes:
                await n.close()
    raise RuntimeError("no free port pair")


async def wait_for(predicate, timeout):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def actives(nodes):
    return [n for n in nodes if not n._closed and n.plane.until > 0 and
            n.core.may_issue(n._now()) is not None]


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_a_killed_active_is_replaced_and_no_position_is_issued_twice(tmp_path):
    async def main():
        nodes, events = await start_cluster(tmp_path)
        try:
            assert await wait_for(lambda: len(actives(nodes)) == 1, 20)
            issued = []

            async def publish():
                while True:
                    for n in actives(nodes):
                        issued.extend(n.plane.advance(20))
                    await asyncio.sleep(0.002)
            task = asyncio.create_task(publish())
            assert await wait_for(lambda: len(issued) > 2000, 20)
            (old,) = actives(nodes)
            before = max(issued)
            old.kill()
            killed = asyncio.get_running_loop().time()
            alive = [n for n in nodes if n is not old]
            assert await wait_for(lambda: len(actives(alive)) == 1, 20)
            print(f"failover {1000 * (asyncio.get_running_loop().time() - killed):.1f} ms")
            (new,) = actives(alive)
            (won,) = [e for e in events[new.host] if isinstance(e, BecameActive)]
            assert won.first > before
            count = len(issued)
            assert await wait_for(lambda: len(issued) > count + 2000, 20)
            task.cancel()
            assert len(issued) == len(set(issued))  # no position twice
            # The state each member stored says what it promised and confirmed.
            stored = StateFile(str(tmp_path / f"{new.host}.json")).load()
            assert stored.promised == won.epoch and stored.reserved >= max(issued)
            other = next(n for n in alive if n is not new)
            raw = json.loads((tmp_path / f"{other.host}.json").read_text())
            assert raw["promised"] == won.epoch
        finally:
            for n in nodes:
                await n.close()

    asyncio.run(main())


def test_a_broken_state_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "state.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a cluster state file"):
        StateFile(str(bad)).load()
    assert StateFile(str(tmp_path / "none.json")).load() is None
    for promised in ("18446744073709551616", "-5", "1e300", "1.5", "true"):
        bad.write_text(f'{{"promised": {promised}, "reserved": 0}}')
        with pytest.raises(ValueError, match="not a cluster state file"):
            StateFile(str(bad)).load()


def test_a_reservation_used_up_between_two_looks_leaves_the_gate_at_its_end():
    """_sync_plane looks at may_issue, reports the plane's progress, and looks again: a plane
    that used its whole reservation meanwhile gets no new limit (it raised a TypeError)."""
    from types import SimpleNamespace

    class Core(SimpleNamespace):
        def may_issue(self, now):
            return None if self.next > self.reserved else self.reserved

        def issued(self, position, now):
            self.next = position

        def table_due(self, now):
            return False

    class Plane(MemoryPlane):
        def __init__(self):
            super().__init__()
            self.allowed = []

        def position(self):
            return 11  # it issued up to the reservation's end, 10

        def allow(self, limit, until):
            self.allowed.append(limit)

    node = ClusterNode.__new__(ClusterNode)
    node.core = Core(next=5, reserved=10, lease_until=1.0)
    node.plane, node._active, node._now = Plane(), False, lambda: 0.0
    node._sync_plane()
    assert node.plane.allowed == [] and node._active
    node.core.reserved = 20  # the next reservation confirmed
    node._sync_plane()
    assert node.plane.allowed == [20]


def test_a_member_hosts_datagrams_are_rate_limited_before_any_work():
    """A flood forged from a member's address costs a lookup per datagram (no HMAC, no
    decoding) past MEMBER_BURST at once and MEMBER_RATE a second; the member's own pace (tens
    a second) is far below."""
    from pelotari.fyrehose.cluster_node import MEMBER_BURST, MEMBER_RATE

    node = ClusterNode.__new__(ClusterNode)
    node._buckets = {}
    passed = sum(node._allowed("10.0.0.2", 1.0) for _ in range(int(MEMBER_BURST) + 100))
    assert passed == int(MEMBER_BURST)
    assert node._allowed("10.0.0.3", 1.0)  # another host has its own
    assert not node._allowed("10.0.0.2", 1.0)
    assert node._allowed("10.0.0.2", 1.0 + 2 / MEMBER_RATE)  # refilled
    # A member at its normal pace (LEASEs and answers every 50 ms, a TABLE, a RESERVE) for a
    # minute is never refused.
    node._buckets = {}
    assert all(node._allowed("10.0.0.4", t / 200) for t in range(200 * 60))
