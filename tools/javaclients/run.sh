#!/bin/bash
# Mixed pelotari / Java bully networks: see mixed.py's docstring (./run.sh -h).
#   ./run.sh A            pelotari leader + peerbox, VSP2P, P2P-Client peers (5 min hold)
#   ./run.sh B peerbox    (or VSP2P, P2P-Client, all) Java leader + two pelotari peers
#   ./run.sh all          everything, one after another (about 30 min)
#   ./run.sh stop         kill what an interrupted run left (recorded pids only)
# Options: --hold S (default 300), --after S (A: watched after the hand election, default 180),
# --elect-on peerbox|VSP2P|P2P-Client (A). Output: $JC_WORK/runs/<scenario>-<UTC time>/.
exec python3 "$(dirname "${BASH_SOURCE[0]}")/mixed.py" "$@"
