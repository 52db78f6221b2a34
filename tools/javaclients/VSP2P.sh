#!/bin/bash
# VSP2P (nama17/VSP2P) on its own 127.0.0.x address.
#   VSP2P.sh leader IP                      stdin "" -> access server on IP:3333 (Main.java:33-39, no bully ID)
#                                           + its own client on IP:3334 that joins it and gets ID 1 (Main.java:41-45)
#   VSP2P.sh peer IP LEADER_IP [LEADER_PORT] stdin "LEADER_IP", "PORT" (0 = 3333, Main.java:24-32);
#                                           the client listens on IP:3333 (fixed, Main.java:41)
#   VSP2P.sh cmd IP 'LINE'                  suche <id> | sende <id> <text> | list | election | time
#                                           (CommandMonitor.java:16-20; ids are 1-2 digits)
#   VSP2P.sh stop IP | VSP2P.sh log IP
# Instances live in $RUN_DIR/VSP2P-IP/ (default RUN_DIR: $JC_WORK/runs/hand, see common.sh).
# The announced IP is InetAddress.getLocalHost().getHostAddress() (Main.java:35,43): mapped by a
# per-instance hosts file; the LD_PRELOAD shim makes ServerSocket(3333/3334) listen on IP only.
# Send commands one at a time (>= 0.3 s apart): CommandMonitor makes a new Scanner per line
# (CommandMonitor.java:26) and a line that arrives in the same read as the previous one is lost.
# Leader start-up race (Main.java:37-45): when the out.log lacks "Id 1 wurde", stop and restart it.
set -e
CLIENT=VSP2P
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
CP=$JC_BUILD/VSP2P
case "$1" in
  leader|peer)
    jc_need_build
    IP=$2; check_ip "$IP"
    if [ "$1" = peer ]; then LEADER=${3:?leader IP}; check_ip "$LEADER"; fi
    d=$(prepare "$IP")
    printf '%s %s\n%s localhost\n' "$IP" "$(host_name)" "$IP" > "$d/hosts"
    launch "$d" -cp "$CP" core.Main
    if [ "$1" = leader ]; then
      printf '\n' > "$d/in"
    else
      printf '%s\n%s\n' "$LEADER" "${4:-0}" > "$d/in"
    fi
    sleep 0.5 ;;
  cmd) send_cmd "$2" "$3"; sleep 0.3 ;;
  stop) stop_inst "$2" ;;
  log) cat "$(inst_dir "$2")/out.log" ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
