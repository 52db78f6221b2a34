"""fyrehose client receive path: 1,000 in-order DELIVERs through the bare sans-IO core and
through AsyncClient (its events, queue and timer), side by side: the adapter's cost.

    .venv/bin/python -m pytest bench/micro/test_client_bench.py --benchmark-enable
"""
import asyncio

import pytest

from fastpath import refcodec as wire
from pelotari.fyrehose import AsyncClient, ClientConfig, ClientCore
from pelotari.fyrehose.codec import NOJOURNAL

BB = ("127.0.0.1", 2323)
N = 1000


class NullTransport:
    def sendto(self, data, addr):
        pass

    def close(self):
        pass


def delivers(first):
    return [wire.encode_deliver(first + i, b"x" * 100) for i in range(N)]


@pytest.mark.parametrize("path", ["core", "asyncio-client"])
def test_client_receive_1000_delivers(benchmark, path):
    config = ClientConfig(flags=NOJOURNAL)
    state = {"next": 1000}

    def batch():
        first = state["next"]
        state["next"] += N
        return (delivers(first),), {}

    if path == "core":
        core = ClientCore(BB, 0.0, config)

        def run(datagrams):
            for d in datagrams:
                core.receive_datagram(d, BB, 1.0)
            while core.next_event() is not None:
                pass

        benchmark.pedantic(run, setup=batch, rounds=50)
        return

    loop = asyncio.new_event_loop()
    try:
        async def make():
            client = AsyncClient(BB, config, receive=False)
            client.connection_made(NullTransport())
            return client

        client = loop.run_until_complete(make())

        def run(datagrams):
            for d in datagrams:
                client.datagram_received(d, BB)

        benchmark.pedantic(run, setup=batch, rounds=50)
        assert client.stats()["delivers_in"] == 50 * N
        loop.run_until_complete(client.close())
    finally:
        loop.close()
