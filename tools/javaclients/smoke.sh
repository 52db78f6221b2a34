#!/bin/bash
# Smoke test: each client once as leader on 127.0.0.1 and once as a peer on 127.0.0.2 joining it;
# prints the start-up and join lines and what listens, says PASS or FAIL (the peer got an ID),
# stops both. Usage: smoke.sh [peerbox|VSP2P|P2P-Client]...
# Writes $JC_WORK/runs/smoke-<UTC time>/ (symlink runs/latest-smoke): smoke.txt + the instances' dirs.
set -u
case "${1:-}" in -h|--help) sed -n '2,5p' "$0"; exit 0 ;; esac
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
jc_need_build
RUN_DIR=$JC_WORK/runs/smoke-$(date -u +%Y%m%dT%H%M%SZ)
export RUN_DIR
mkdir -p "$RUN_DIR"; ln -sfn "$(basename "$RUN_DIR")" "$JC_WORK/runs/latest-smoke"
exec > >(tee "$RUN_DIR/smoke.txt") 2>&1

current=
cleanup() {
  if [ -n "$current" ]; then
    "$JC_HERE/$current.sh" stop 127.0.0.2 >/dev/null; "$JC_HERE/$current.sh" stop 127.0.0.1 >/dev/null
    current=
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fails=()
for c in ${@:-peerbox VSP2P P2P-Client}; do
  [ -n "${JC_PIN[$c]+x}" ] || { echo "unknown client $c"; fails+=("$c"); continue; }
  echo "=== $c"
  current=$c
  "$JC_HERE/$c.sh" leader 127.0.0.1 >/dev/null; sleep 4
  "$JC_HERE/$c.sh" peer 127.0.0.2 127.0.0.1 >/dev/null; sleep 6
  L=$RUN_DIR/$c-127.0.0.1/out.log P=$RUN_DIR/$c-127.0.0.2/out.log
  case $c in
    peerbox) grep -a -E "Started|Our id|> |entry" "$L" "$P"; ok='^Our id = [0-9]+' ;;
    VSP2P) grep -a -E "gestartet, warte|Id .* zugewiesen|EntryResponseMsg gesendet|Connection refused" "$L" "$P"
           ok='Id [0-9]+ wurde vom Server zugewiesen' ;;
    P2P-Client) grep -a -E "DRIVER: started|R 1|R 2" "$L" "$P" | cut -c1-180; ok='CLIENT: R 2 <---' ;;
  esac
  pids=$(cat "$RUN_DIR/$c"-127.0.0.[12]/{pid,port80.pid} 2>/dev/null | paste -sd'|')
  ss -ltnp | grep -E "pid=(${pids:-none})," | awk '{print "  listening", $4}' | sort -u
  if grep -a -q -E "$ok" "$P"; then echo "PASS $c: the peer on 127.0.0.2 joined"
  else echo "FAIL $c: no '$ok' in $P"; fails+=("$c"); fi
  cleanup; sleep 1
done
echo "smoke: ${#fails[@]} failed${fails[*]:+ (${fails[*]})}; output in $RUN_DIR/smoke.txt"
[ ${#fails[@]} = 0 ]
