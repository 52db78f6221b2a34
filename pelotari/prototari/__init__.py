"""prototari: LAN peer discovery by UDP broadcast, handshake, heartbeat, disconnect, delivery."""
from pelotari.prototari.core import (Config, Message, NodeCore, PeerJoined, PeerLeft)

__all__ = ["Config", "Message", "NodeCore", "PeerJoined", "PeerLeft"]
