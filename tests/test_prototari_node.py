"""The prototari asyncio adapter in-process on loopback (127.0.0.2 and 127.0.0.3): events in
order, the timer re-armed only when the core's changes, socket errors counted, close()."""
import asyncio

from pelotari.prototari import Config, Message, Node, PeerJoined


def _config(port, **kw):
    return Config(unicast_port=port, broadcast_port=port + 1,
                  broadcast_address="127.255.255.255", broadcast_interval=0.2, **kw)


async def _pair(port, **kw):
    a = await Node.start(_config(port, **kw), host="127.0.0.2")
    b = await Node.start(_config(port, **kw), host="127.0.0.3")
    for node in (a, b):
        ev = await node.next_event(5)
        assert isinstance(ev, PeerJoined), ev
    return a, b


def test_the_timer_is_rearmed_only_when_the_cores_changes(port_pair):
    async def main():
        # Inactivity far off: the broadcast is the core's next timer, and traffic moves it not.
        a, b = await _pair(port_pair, inactive_peer_time=30.0)
        try:
            before = a._timer.rearms
            for i in range(200):
                b.send(("127.0.0.2", a.address[1]), b"%d" % i)
            got = [await a.next_event(3) for _ in range(200)]
            assert all(isinstance(e, Message) for e in got), got[:3]
            assert [e.data for e in got] == [b"%d" % i for i in range(200)]
            # 200 datagrams in; only the broadcasts (every 0.2 s) move the timer
            assert a._timer.rearms - before < 10, a._timer.rearms - before
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_close_ends_the_event_stream_and_stops_the_timer(port_pair):
    async def main():
        a, b = await _pair(port_pair)
        await a.close()
        assert await a.next_event(1) is None
        assert [ev async for ev in a.events()] == []
        assert a._timer.when is None
        await a.close()  # twice: nothing more
        await b.close()

    asyncio.run(main())
