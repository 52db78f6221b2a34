"""fyrehose: a sequenced UDP pub/sub backbone with client-side gap repair through peers."""
from pelotari.fyrehose.aio import AsyncClient
from pelotari.fyrehose.backbone import DEFAULT_PORT, Backbone, BackboneConfig
from pelotari.fyrehose.client import Client, Published, PublishStream, PublishTimeout
from pelotari.fyrehose.core import ClientConfig, ClientCore
from pelotari.fyrehose.events import (BackboneDown, BackboneMoved, BackboneUp, Event, Lost,
                                      Message, NoQuorum, PublishConfirmed, PublishFailed,
                                      Resync)

__all__ = [
    "AsyncClient", "Backbone", "BackboneConfig", "BackboneDown", "BackboneMoved", "BackboneUp",
    "Client", "ClientConfig", "ClientCore", "DEFAULT_PORT", "Event", "Lost", "Message",
    "NoQuorum", "PublishConfirmed",
    "PublishFailed", "PublishStream", "PublishTimeout", "Published", "Resync",
]
