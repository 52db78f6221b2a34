"""The plumbing the protocol commands share: pelotari.cli.common's address parsing and
pelotari.cli.service's event lines, stop signals and task running."""
import asyncio
import json
import os
import signal

import click
import pytest

from pelotari.cli.common import AddressType, split_address
from pelotari.cli.service import Output, Stopper, run_until_stopped


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.2", ("127.0.0.2", 7)),
    ("127.0.0.2:0", ("127.0.0.2", 0)),
    ("127.0.0.2:65535", ("127.0.0.2", 65535)),
    (" name:80 ", ("name", 80)),
    ("::1", ("::1", 7)),
    ("[::1]:9", ("::1", 9)),
    ("[::1]", ("::1", 7)),
])
def test_split_address(text, expected):
    assert split_address(text, 7) == expected


@pytest.mark.parametrize("text,message", [
    ("127.0.0.2:65536", "port 65536 outside 0..65535"),
    ("127.0.0.2:-1", "port -1 outside 0..65535"),
    ("127.0.0.2:x", "bad port in address '127.0.0.2:x'"),
    (":5", "no host in address ':5'"),
    ("[::1", "bad address '[::1'"),
    ("[::1]x", "bad address '[::1]x'"),
])
def test_split_address_errors_are_one_line_naming_the_text(text, message):
    with pytest.raises(ValueError) as info:
        split_address(text, 7)
    assert str(info.value).startswith(message)


def test_address_type_resolves_to_ipv4_and_reads_a_bare_port_as_any_address():
    t = AddressType(3333)
    assert t.convert("127.0.0.3", None, None) == ("127.0.0.3", 3333)
    assert t.convert(":4", None, None) == ("0.0.0.0", 4)
    assert t.convert("localhost:5", None, None) == ("127.0.0.1", 5)
    with pytest.raises(click.BadParameter, match="outside 0..65535"):
        t.convert("127.0.0.1:65536", None, None)


def test_an_event_field_may_be_called_text_or_event(capfd):
    out = Output(True, time_key="t")
    out.event("text", "human", text="the field", event_id=1)
    out.close()
    line = json.loads(capfd.readouterr().out)
    assert line["event"] == "text" and line["text"] == "the field" and "t" in line
    out = Output(False, label=False)
    out.event("text", "human line", text="x")
    out.close()
    assert capfd.readouterr().out.split(" ", 1)[1] == "human line\n"


def test_stopper_stops_on_its_signals_and_on_request_and_gives_them_back():
    async def main():
        stopper = Stopper((signal.SIGHUP,))
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.wait_for(stopper.stopped.wait(), 5)
        stopper.stop("quit")
        assert stopper.why == "SIGHUP" and stopper.reasons == ["SIGHUP", "quit"]
        stopper.close()
        assert signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, signal.default_int_handler)

    asyncio.run(main())


def test_run_until_stopped_cancels_the_tasks_and_raises_a_tasks_bug():
    async def main():
        stopper = Stopper(())
        cancelled = []

        async def forever():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(1)
                raise

        async def buggy():
            await asyncio.sleep(0)
            stopper.stop("quit")
            raise KeyError("a bug")

        with pytest.raises(KeyError):
            await run_until_stopped(stopper, [forever(), buggy()])
        assert cancelled == [1]

        stopper = Stopper(())
        asyncio.get_running_loop().call_later(0.01, stopper.stop, "quit")
        await run_until_stopped(stopper, [forever()])  # stopped: nothing raised
        assert cancelled == [1, 1]

    asyncio.run(main())


def test_a_listing_is_its_lines_as_text_and_one_event_as_json(capfd):
    out = Output(False)
    out.listing("help", ["a  b", "c"], "commands")
    out.close()
    assert capfd.readouterr().out == "a  b\nc\n"
    out = Output(True)
    out.listing("help", ["a  b", "c"], "commands")
    out.close()
    line = json.loads(capfd.readouterr().out)  # stdout stays one JSON object per line
    assert line["event"] == "help" and line["commands"] == ["a  b", "c"]
