"""The bully P2P client of p2p-bully-client.md: leader join, search, text, bully election and
Berkeley time sync over TCP 3333.

wire.py (the 13 messages, the stream framer), clock.py (logical clock, Berkeley maths), core.py
(the sans-IO node), node.py (its asyncio adapter: `Node`), bench.py (measurements); the
`pelotari bully` command is pelotari/cli/bully.py. `Node` and `BindError` are imported on first
use, so that importing the wire format (the scapy layer does) does not load asyncio and the core.
"""
from pelotari.bully.wire import (
    DEFAULT_PORT,
    BullyError,
    Framer,
    Message,
    Peer,
    decode,
    encode,
)

__all__ = ["DEFAULT_PORT", "BindError", "BullyError", "Framer", "Message", "Node", "Peer",
           "decode", "encode"]


def __getattr__(name):
    if name in ("Node", "BindError"):
        from pelotari.bully import node

        return getattr(node, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
