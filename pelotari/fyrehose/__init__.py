"""fyrehose: a sequenced UDP pub/sub backbone with client-side gap repair through peers."""
from pelotari.fyrehose.aio import AsyncClient
from pelotari.fyrehose.backbone import DEFAULT_PORT, Backbone, BackboneConfig
from pelotari.fyrehose.client import Client, Published, PublishStream, PublishTimeout
from pelotari.fyrehose.core import ClientConfig, ClientCore
from pelotari.fyrehose.events import (BackboneDown, BackboneUp, Event, Lost, Message,
                                      PublishConfirmed, PublishFailed, Resync)

__all__ = [
    "AsyncClient", "Backbone", "BackboneConfig", "BackboneDown", "BackboneUp", "Client",
    "ClientConfig", "ClientCore", "DEFAULT_PORT", "Event", "Lost", "Message", "PublishConfirmed",
    "PublishFailed", "PublishStream", "PublishTimeout", "Published", "Resync",
]
