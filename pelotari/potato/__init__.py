"""Potato Protocol v2.1 (potato.md): mesh relay of JSON messages and direct/indirect elections
of the next shared frame, over WebRTC data channels or TCP."""
