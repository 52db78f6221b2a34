#!/bin/bash
# P2P-Client (Shaflo/P2P-Client) on its own 127.0.0.x address, one peer per JVM, driven by
# P2PDriver.java (ours: stdin -> the Swing buttons) on a private Xvfb display.
#   P2P-Client.sh leader IP [PORT]          P2P(PORT=3333, "localhost"): leader, gives IDs from 0 (itself)
#   P2P-Client.sh peer IP LEADER_IP [PORT]  P2P(PORT=3333, LEADER_IP); the leader is always contacted on
#                                           P2P.defaultPort = 3333 (P2P.java:25), override: LEADER_PORT=n
#   P2P-Client.sh cmd IP 'LINE'             search <id> | elect | timesync | msg <id> <text> | list | status | chat | quit
#   P2P-Client.sh stop IP | P2P-Client.sh log IP
# Instances live in $RUN_DIR/P2P-Client-IP/ (default RUN_DIR: $JC_WORK/runs/hand, see common.sh).
# The announced IP comes from new Socket("www.google.de",80).getLocalAddress() (P2P.java:1023):
# the hosts file maps www.google.de (and "localhost", which the leader uses for itself) to IP,
# port80stub.py accepts on IP:80 (needs root or net.ipv4.ip_unprivileged_port_start <= 80),
# the LD_PRELOAD shim binds sockets to IP.
set -e
CLIENT=P2P-Client
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
CP=$JC_BUILD/P2P-Client:$JC_BUILD/driver
case "$1" in
  leader|peer)
    jc_need_build
    IP=$2; check_ip "$IP"
    if [ "$1" = leader ]; then LEADER=localhost; PORT=${3:-3333}
    else LEADER=${3:?leader IP}; check_ip "$LEADER"; PORT=${4:-3333}; fi
    command -v Xvfb >/dev/null || jc_die "Xvfb is missing (apt-get install xvfb)"
    if [ "$(id -u)" != 0 ] && [ "$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start 2>/dev/null || echo 1024)" -gt 80 ]; then
      jc_die "port80stub.py must listen on $IP:80: run as root or sudo sysctl net.ipv4.ip_unprivileged_port_start=80"
    fi
    d=$(prepare "$IP")
    printf '%s %s\n%s localhost\n%s www.google.de\n' "$IP" "$(host_name)" "$IP" "$IP" > "$d/hosts"
    python3 "$JC_HERE/port80stub.py" "$IP" >"$d/port80.log" 2>&1 & echo $! > "$d/port80.pid"
    disp=$(( 100 + $(echo "$IP" | awk -F. '{print ($2*65536+$3*256+$4) % 60000}') ))
    Xvfb ":$disp" -nolisten tcp >"$d/xvfb.log" 2>&1 & echo $! > "$d/xvfb.pid"
    sleep 1
    for what in port80 xvfb; do
      if ! kill -0 "$(cat "$d/$what.pid")" 2>/dev/null; then
        echo "$what did not start for $IP (log: $d/$what.log):" >&2; tail -3 "$d/$what.log" >&2
        stop_inst "$IP" >/dev/null; exit 1
      fi
    done
    DISPLAY=":$disp" launch "$d" -cp "$CP" P2PDriver "$PORT" "$LEADER" ;;
  cmd) send_cmd "$2" "$3" ;;
  stop) stop_inst "$2" ;;
  log) cat "$(inst_dir "$2")/out.log" ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
