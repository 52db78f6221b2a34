#!/bin/bash
# Profile a backbone under a fixed load with perf: where its CPU goes (user space vs kernel).
#
#   sudo bash bench/profile/backbone.sh [RATE] [SUBSCRIBERS] [-- BACKBONE COMMAND...]
#
# Default: `pelotari backbone --no-gso` on core 0, 150,000 16-byte (PAYLOAD=...) msgs/s from one publisher
# and 4 subscribers on core 1 (the load generator), perf record -g for 3 s of the 6 s run.
# The default load saturates the backbone (drops then show up in "load:"): that is the point.
# Prints the share of samples per DSO (kernel, the Cython loop, libc...) and the top symbols.
set -euo pipefail
cd "$(dirname "$0")/../.."
RATE=${1:-150000}
SUBS=${2:-4}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
PORT=23999
PY=${PYTHON:-.venv/bin/python}
if [ $# -eq 0 ]; then
    set -- "$PY" -m pelotari backbone --host 127.0.0.1 --port $PORT --no-gso --stats-interval 3600
fi
command -v perf >/dev/null || { echo "perf is not installed (Debian: linux-perf)" >&2; exit 1; }
OUT=$(mktemp -d)
taskset -c 0 "$@" & BB=$!
trap 'kill -INT $BB 2>/dev/null || true; rm -rf "$OUT"' EXIT
sleep 1.5
"$PY" - "$PORT" "$RATE" "$SUBS" <<'PY' & LG=$!
import os, sys, threading
os.sched_setaffinity(0, {1})
from fastpath.loadgen import SubscriberGroup, publish_fyrehose
port, rate, subs = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
g = SubscriberGroup("127.0.0.1", port, subs)
g.sign_on()
res = {}
t = threading.Thread(target=lambda: res.update(g.measure(8, 1.0)))
t.start()
pub = publish_fyrehose("127.0.0.1", port, payload_size=int(os.environ.get("PAYLOAD", "16")), duration=6, rate=rate)
t.join()
g.sign_off()
print(f"load: sent {pub['sent']}, received {res['unique']} of {pub['sent'] * subs}", file=sys.stderr)
PY
sleep 2
ctxt() { cat /proc/$BB/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}'; }
ticks() { awk '{print $14 + $15}' /proc/$BB/stat; }
c0=$(ctxt); t0=$(ticks)
perf record -q -g -p $BB -o "$OUT/perf.data" -- sleep 3 2>/dev/null
c1=$(ctxt); t1=$(ticks)
wait $LG
echo "== backbone over the 3 s: CPU $(( (t1 - t0) * 100 / $(getconf CLK_TCK) / 3 )) %, $(( (c1 - c0) / 3 )) context switches/s"
echo "== samples by DSO"
perf report -i "$OUT/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep "%" | head -8
echo "== top symbols"
perf report -i "$OUT/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep "%" | head -20
