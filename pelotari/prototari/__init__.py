"""prototari: LAN peer discovery by UDP broadcast, handshake, heartbeat, disconnect, delivery."""
from pelotari.prototari.core import Config, Message, NodeCore, PeerJoined, PeerLeft
from pelotari.prototari.node import Node, NodeWarning

__all__ = ["Config", "Message", "Node", "NodeCore", "NodeWarning", "PeerJoined", "PeerLeft"]
