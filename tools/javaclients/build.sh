#!/bin/bash
# Check the tools, then compile the three clients (unmodified, from fetch.sh's checkouts), our
# P2P-Client driver (P2PDriver.java) and the LD_PRELOAD shim (bindshim.c) into $JC_WORK/build/.
#
#   build.sh            check (install what is missing when root and apt-get exists), then build
#   build.sh --check    only check the tools and the checkouts
#
# Needs: a JDK 17 with AWT's X11 library (Debian/Ubuntu: openjdk-17-jdk-headless + openjdk-17-jre;
# P2P-Client opens a Swing window), Xvfb (xvfb), gcc (gcc, libc6-dev), python3, ss (iproute2).
# JDK 17 is looked for in $JDK17_HOME, $JAVA_HOME, /usr/lib/jvm/*17*, then javac on PATH.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
CHECK_ONLY=0
case "${1:-}" in
  --check) CHECK_ONLY=1 ;;
  -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
  "") ;;
  *) jc_die "unknown argument $1 (see --help)" ;;
esac

find_jdk17() { # prints the JDK home of the first JDK 17 found
  local h v cands=()
  [ -n "${JDK17_HOME:-}" ] && cands+=("$JDK17_HOME")
  [ -n "${JAVA_HOME:-}" ] && cands+=("$JAVA_HOME")
  cands+=(/usr/lib/jvm/java-17-openjdk-* /usr/lib/jvm/*-17* /usr/lib/jvm/*17*)
  command -v javac >/dev/null && cands+=("$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")")
  for h in "${cands[@]}"; do
    [ -x "$h/bin/javac" ] && [ -x "$h/bin/java" ] || continue
    v=$("$h/bin/javac" -version 2>&1) || continue
    [[ "$v" =~ ^javac\ 17(\.|$) ]] && { echo "$h"; return 0; }
  done
  return 1
}

missing_pkgs() { # apt package names for what is missing
  local jdk
  if jdk=$(find_jdk17); then
    [ -n "$(find "$jdk/lib" -name 'libawt_xawt.so' 2>/dev/null | head -1)" ] || echo openjdk-17-jre
  else
    echo openjdk-17-jdk-headless openjdk-17-jre
  fi
  command -v Xvfb >/dev/null || echo xvfb
  command -v gcc >/dev/null || echo gcc libc6-dev
  command -v python3 >/dev/null || echo python3
  command -v ss >/dev/null || echo iproute2
  command -v git >/dev/null || echo git
}

pkgs=$(missing_pkgs | xargs)
if [ -n "$pkgs" ]; then
  if [ "$CHECK_ONLY" = 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing: $pkgs"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $pkgs ||
      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $pkgs; }
    pkgs=$(missing_pkgs | xargs)
  fi
  [ -z "$pkgs" ] || jc_die "missing tools; install them with: sudo apt-get install $pkgs"
fi
JDK=$(find_jdk17)
echo "JDK 17: $JDK ($("$JDK/bin/java" -version 2>&1 | head -1))"

bad=0
for c in "${JC_CLIENTS[@]}"; do jc_verify_src "$c" || bad=1; done
[ "$bad" = 0 ] || jc_die "sources not at their pins: run $JC_HERE/fetch.sh"
echo "sources at their pins in $JC_SRC"
[ "$CHECK_ONLY" = 0 ] || exit 0

jc_check_work
B=$JC_BUILD
rm -rf "$B"; mkdir -p "$B"
JAVAC=("$JDK/bin/javac" -nowarn -encoding UTF-8)
mapfile -t f < <(find "$JC_SRC/peerbox/src" -name '*.java' | sort)
"${JAVAC[@]}" -d "$B/peerbox" "${f[@]}"
mapfile -t f < <(find "$JC_SRC/VSP2P/src" -name '*.java' | sort)
"${JAVAC[@]}" -d "$B/VSP2P" "${f[@]}"
"${JAVAC[@]}" -d "$B/P2P-Client" "$JC_SRC/P2P-Client/P2P-Client/src/"*.java
"${JAVAC[@]}" -cp "$B/P2P-Client" -d "$B/driver" "$JC_HERE/P2PDriver.java"
gcc -shared -fPIC -O2 -Wall -o "$B/bindshim.so" "$JC_HERE/bindshim.c" -ldl
{
  echo "# written by build.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "JAVA=$JDK/bin/java"
  for c in "${JC_CLIENTS[@]}"; do echo "# $c ${JC_GITHUB[$c]} $(git -C "$JC_SRC/$c" rev-parse HEAD)"; done
} > "$B/env"
for c in "${JC_CLIENTS[@]}"; do jc_verify_src "$c"; done   # the build wrote nothing into them
echo "built in $B: peerbox/ VSP2P/ P2P-Client/ driver/ bindshim.so env"
