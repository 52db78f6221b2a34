"""What a running potato client shows at `--metrics` (pelotari.metrics): its relay, election
and transport counters as Prometheus metrics, each peer link at /status."""
PREFIX = "pelotari_potato_"
DROP_PREFIXES = ("dropped_", "send_dropped_", "frame_refused_", "abstained_",
                 "picture_refused_", "page_send_dropped_", "page_refused_", "signal_dropped_",
                 "signal_refused_", "http_refused_")


class PotatoMetrics:
    """A MetricsSource for a running potato Node (read on its loop: pelotari.metrics.OnLoop)."""

    def __init__(self, node, pages=None):
        self.node = node
        self.pages = pages  # the PageServer, with --http

    def _stats(self) -> dict:
        stats = {**self.node.core.stats, **getattr(self.node.transport, "stats", {})}
        if self.node.browsers is not None:  # the pages' links, and their server
            stats.update({f"page_{k}": v for k, v in self.node.browsers.stats.items()})
        if self.pages is not None:
            stats.update(self.pages.stats)
        return stats

    def collect(self):
        """Counters by name, drops by reason, the peers and the frame, now."""
        from pelotari.metrics import gauge, gauges_by, stats_families

        yield from stats_families(PREFIX, self._stats(), DROP_PREFIXES)
        yield gauge(PREFIX + "peers", "Peers messages can be sent to now.", len(self.node.peers()))
        yield gauges_by(PREFIX + "frame_info", "The frame this client is on (value 1).",
                        "frame", {self.node.frame: 1})

    def status(self) -> dict:
        """Counters and each peer link: direction, bytes each way, seconds since heard."""
        import asyncio

        loop_now = asyncio.get_running_loop().time()  # the links' clock (status runs on it)
        links = list(getattr(self.node.transport, "_peers", {}).items())
        if self.node.browsers is not None:
            links += list(self.node.browsers._peers.items())
        entries = []
        for name, link in links:
            entry = {"peer": name, "open": bool(link.is_open), "outgoing": bool(link.outgoing),
                     "remote_host": link.remote_host, "bytes_received": link.rx_bytes,
                     "bytes_spent_replying": link.spent, "held": bool(link.held)}
            entry["seconds_since_heard"] = round(loop_now - link.last_rx, 3)
            entries.append(entry)
        return {"protocol": "potato", "name": self.node.core.name, "frame": self.node.frame,
                "stats": self._stats(), "entries": entries}
