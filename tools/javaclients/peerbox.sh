#!/bin/bash
# peerbox (coffeenotfound/peerbox) on its own 127.0.0.x address.
#   peerbox.sh leader IP              StartServer: listens IP:3333 (port hard-coded, Peer.java:44,101), takes ID 0
#   peerbox.sh peer IP LEADER_IP      StartPeer: listens IP:<ephemeral port> (Peer.java:101), joins "localhost":3333
#                                     (hard-coded, Peer.java:49); "localhost" is mapped to LEADER_IP
#   peerbox.sh cmd IP 'LINE'          one stdin line: help | msg <id> <text> | leader | peerlist | elect | time | timesync
#   peerbox.sh stop IP | peerbox.sh log IP
# Instances live in $RUN_DIR/peerbox-IP/ (default RUN_DIR: $JC_WORK/runs/hand, see common.sh).
# The announced IP is InetAddress.getLocalHost() (Peer.java:119): a per-instance hosts file
# (-Djdk.net.hosts.file) maps this machine's hostname to IP; the LD_PRELOAD shim binds the
# listening socket and every outgoing loopback connection to IP.
# stdin must never reach EOF (Peer.java:1082: nextLine() throws, the loop spins printing errors):
# the fifo is opened read-write.
set -e
CLIENT=peerbox
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
CP=$JC_BUILD/peerbox
case "$1" in
  leader|peer)
    jc_need_build
    IP=$2; check_ip "$IP"
    if [ "$1" = peer ]; then LEADER=${3:?leader IP}; check_ip "$LEADER"; fi
    d=$(prepare "$IP")
    if [ "$1" = leader ]; then
      printf '%s %s\n%s localhost\n' "$IP" "$(host_name)" "$IP" > "$d/hosts"
      launch "$d" -cp "$CP" de.katzer.peerbox.start.StartServer
    else
      printf '%s %s\n%s localhost\n' "$IP" "$(host_name)" "$LEADER" > "$d/hosts"
      launch "$d" -cp "$CP" de.katzer.peerbox.start.StartPeer
    fi ;;
  cmd) send_cmd "$2" "$3" ;;
  stop) stop_inst "$2" ;;
  log) cat "$(inst_dir "$2")/out.log" ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
