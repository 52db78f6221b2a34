#!/usr/bin/env bash
# Installs the peer systems `pelotari bench` compares against, from Debian's packages:
# Redis (redis-server), NATS (nats-server) and ZeroMQ (libzmq3-dev: the bench builds its own
# XSUB/XPUB proxy and clients against it). The bench starts its own instances on 127.0.0.1 with
# free ports and no persistence, so the services the packages start are stopped again.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
    echo "bench/peers/install.sh: needs root (apt-get); try: sudo bash bench/peers/install.sh" >&2
    exit 1
fi
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    redis-server nats-server libzmq3-dev pkg-config >/dev/null
for service in redis-server nats-server; do
    (service "$service" stop || true) >/dev/null 2>&1
done
pkill -x redis-server 2>/dev/null || true
echo "installed: $(redis-server --version | cut -d' ' -f1-3), nats-server $(nats-server --version 2>&1 | sed 's/.*v//'), libzmq $(pkg-config --modversion libzmq)"
