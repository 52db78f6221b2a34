"""A backbone for bench/profile/interleaved.py with its --metrics exporter scraped as an operator
would, or without one, to measure what exposition costs:

    .venv/bin/python bench/profile/scraped_backbone.py PORT [SCRAPE_INTERVAL]

With SCRAPE_INTERVAL (seconds) the backbone serves metrics on 127.0.0.1 and a thread of this
process GETs /metrics and /status that often (a Prometheus at a 1 s interval is 1); without it,
no exporter runs. Stops on SIGINT/SIGTERM.
"""
import sys
import threading
import urllib.request

from pelotari.fyrehose import Backbone
from pelotari.fyrehose.metrics import BackboneMetrics
from pelotari.metrics import MetricsServer


def main():
    port = int(sys.argv[1])
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else None
    bb = Backbone(host="127.0.0.1", port=port).start()
    stop = threading.Event()
    server = None
    if interval is not None:
        server = MetricsServer(BackboneMetrics(bb)).start()

        def scrape():
            while not stop.wait(interval):
                for path in ("/metrics", "/status"):
                    with urllib.request.urlopen(server.url + path, timeout=5) as answer:
                        answer.read()

        threading.Thread(target=scrape, daemon=True).start()
    try:
        bb.serve_forever(interval=3600)
    finally:
        stop.set()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
