# Shared settings and helpers, sourced by every script here (not run on its own).
#
# Paths: the scripts' own directory (JC_HERE), the pelotari repository (JC_REPO, two levels up),
# and the work directory JC_WORK = ${PELOTARI_JAVACLIENTS:-$HOME/.cache/pelotari-javaclients}
# that holds everything fetched, built and run:
#   $JC_WORK/src/<client>/      the client's git checkout at its pinned commit (fetch.sh)
#   $JC_WORK/build/             classes per client, the P2P-Client driver, bindshim.so, env (build.sh)
#   $JC_WORK/runs/              hand runs (runs/hand/<client>-<ip>/), smoke-*/, A-*/, B-*/
#
# A running instance lives in $RUN_DIR/<client>-<ip>/ (RUN_DIR defaults to $JC_WORK/runs/hand):
#   in (fifo = the client's stdin), out.log, pid (+ xvfb.pid, port80.pid for P2P-Client), hosts.

JC_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
JC_REPO=$(cd "$JC_HERE/../.." && pwd)
JC_WORK=$(realpath -m "${PELOTARI_JAVACLIENTS:-$HOME/.cache/pelotari-javaclients}")
JC_SRC=$JC_WORK/src
JC_BUILD=$JC_WORK/build
SHIM=$JC_BUILD/bindshim.so
RUN_DIR=${RUN_DIR:-$JC_WORK/runs/hand}

# The three clients: GitHub repository and the commit everything here was written and tested against.
JC_CLIENTS=(peerbox VSP2P P2P-Client)
declare -A JC_GITHUB=(
  [peerbox]=coffeenotfound/peerbox
  [VSP2P]=nama17/VSP2P
  [P2P-Client]=Shaflo/P2P-Client
)
declare -A JC_PIN=(
  [peerbox]=8cc2085b071f4eca1a299353c478cac71a9875cc
  [VSP2P]=be21421e5346f4e7cfc58992a131ff83c1172ddd
  [P2P-Client]=fc3b2cd52faf46038da877520b939e8918038939
)

jc_die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# The work directory must not be inside the git tree, unless git ignores it there.
jc_check_work() {
  case "$JC_WORK/" in
    "$JC_REPO"/*)
      if git -C "$JC_REPO" rev-parse --git-dir >/dev/null 2>&1 &&
         ! git -C "$JC_REPO" check-ignore -q "$JC_WORK"; then
        jc_die "work directory $JC_WORK is inside the git tree $JC_REPO and not ignored by git; set PELOTARI_JAVACLIENTS elsewhere"
      fi ;;
  esac
}

# jc_verify_src CLIENT: its checkout exists, HEAD is the pin, and nothing in it is changed or added.
jc_verify_src() {
  local c=$1 d=$JC_SRC/$1 head dirty
  [ -d "$d" ] || { echo "$c: no checkout in $d (run fetch.sh)" >&2; return 1; }
  head=$(git -C "$d" rev-parse HEAD 2>/dev/null) || { echo "$c: $d is not a git checkout" >&2; return 1; }
  if [ "$head" != "${JC_PIN[$c]}" ]; then
    echo "$c: $d is at $head, not the pinned ${JC_PIN[$c]}" >&2; return 1
  fi
  dirty=$(git -C "$d" status --porcelain --ignored 2>/dev/null | head -5)
  if [ -n "$dirty" ]; then
    echo "$c: $d differs from the pinned commit:" >&2; echo "$dirty" >&2; return 1
  fi
}

# For the run scripts: the build exists; JAVA (the JDK 17 java that build.sh found) unless set.
jc_need_build() {
  [ -f "$JC_BUILD/env" ] || jc_die "not built in $JC_WORK: run $JC_HERE/fetch.sh and $JC_HERE/build.sh first"
  # shellcheck disable=SC1091
  JAVA=${JAVA:-$(. "$JC_BUILD/env"; echo "$JAVA")}
}

inst_dir() { echo "$RUN_DIR/$CLIENT-$1"; }

check_ip() {
  [[ "$1" =~ ^127\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "need a 127.x.y.z address, got '$1'" >&2; exit 2; }
}

# hosts-file line for this machine's name (what InetAddress.getLocalHost() resolves)
host_name() { uname -n; }

prepare() { # ip -> creates a fresh instance dir with a fifo
  local d; d=$(inst_dir "$1")
  if [ -f "$d/pid" ] && kill -0 "$(cat "$d/pid")" 2>/dev/null; then
    echo "$CLIENT on $1 already running (pid $(cat "$d/pid"))" >&2; exit 1
  fi
  rm -rf "$d"; mkdir -p "$d"; mkfifo "$d/in"
  echo "$d"
}

# launch DIR ARGS... : java with the shim, stdin = fifo opened read-write (never EOF)
launch() {
  local d=$1; shift
  ( cd "$d" && BIND_IP=$IP LD_PRELOAD=$SHIM exec "$JAVA" -Djava.net.preferIPv4Stack=true \
      -Dfile.encoding=UTF-8 -Djdk.net.hosts.file="$d/hosts" "$@" 0<>"$d/in" >"$d/out.log" 2>&1 ) &
  echo $! > "$d/pid"
  echo "started $CLIENT pid $(cat "$d/pid") on $IP; log: $d/out.log; commands: $0 cmd $IP '<line>'"
}

send_cmd() { # ip line
  local d; d=$(inst_dir "$1")
  [ -p "$d/in" ] || { echo "no instance on $1 in $RUN_DIR" >&2; exit 1; }
  printf '%s\n' "$2" > "$d/in"
}

stop_inst() {
  local d p; d=$(inst_dir "$1")
  for p in "$d"/*.pid "$d"/pid; do
    [ -f "$p" ] || continue
    kill "$(cat "$p")" 2>/dev/null && echo "killed $(basename "$p") $(cat "$p")"
    rm -f "$p"
  done
  return 0
}
