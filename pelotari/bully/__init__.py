"""The bully P2P client of p2p-bully-client.md: leader join, search, text, bully election and
Berkeley time sync over TCP 3333. So far: the wire format (wire.py)."""
from pelotari.bully.wire import (DEFAULT_PORT, BullyError, Framer, Message, Peer, decode, encode)

__all__ = ["DEFAULT_PORT", "BullyError", "Framer", "Message", "Peer", "decode", "encode"]
