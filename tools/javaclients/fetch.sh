#!/bin/bash
# Get each Java client's source at its pinned commit into $JC_WORK/src/<client>/
# (JC_WORK = ${PELOTARI_JAVACLIENTS:-$HOME/.cache/pelotari-javaclients}).
#
#   fetch.sh [--from-mirror DIR] [CLIENT...]      CLIENT: peerbox VSP2P P2P-Client (default: all three)
#
# By default each one is `git clone https://github.com/<owner>/<name>` and a checkout of the pin.
# --from-mirror DIR (or PELOTARI_JAVACLIENTS_MIRROR=DIR) clones a local git directory instead:
# DIR/<owner>+<name>/repo, or DIR/<owner>+<name> if that is itself a git directory.
# A checkout that is already at its pin and unchanged is left as it is. The checked-out commit
# must equal the pin; the sources are never changed. Pins: common.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MIRROR=${PELOTARI_JAVACLIENTS_MIRROR:-}
want=()
while [ $# -gt 0 ]; do
  case "$1" in
    --from-mirror) MIRROR=${2:?--from-mirror DIR}; shift 2 ;;
    --from-mirror=*) MIRROR=${1#*=}; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) jc_die "unknown option $1 (see --help)" ;;
    *) [ -n "${JC_PIN[$1]+x}" ] || jc_die "unknown client $1 (peerbox, VSP2P, P2P-Client)"; want+=("$1"); shift ;;
  esac
done
[ ${#want[@]} -gt 0 ] || want=("${JC_CLIENTS[@]}")
command -v git >/dev/null || jc_die "git is missing: install git (apt-get install git)"
jc_check_work
mkdir -p "$JC_SRC"
export GIT_TERMINAL_PROMPT=0

source_of() { # client -> clone URL or local git dir
  local gh=${JC_GITHUB[$1]} m
  if [ -z "$MIRROR" ]; then echo "https://github.com/$gh"; return; fi
  m=$MIRROR/${gh/\//+}
  if [ -d "$m/repo" ]; then echo "$(realpath "$m/repo")"
  elif git -C "$m" rev-parse --git-dir >/dev/null 2>&1; then echo "$(realpath "$m")"
  else jc_die "no mirror of $gh in $MIRROR (expected $m/repo)"; fi
}

rc=0
for c in "${want[@]}"; do
  pin=${JC_PIN[$c]} dest=$JC_SRC/$c
  if [ -e "$dest" ]; then
    if jc_verify_src "$c" 2>/dev/null; then
      echo "$c: $dest already at $pin"; continue
    fi
    jc_verify_src "$c" || true
    echo "$c: leaving $dest alone; remove it and run fetch.sh again" >&2; rc=1; continue
  fi
  src=$(source_of "$c")
  tmp=$(mktemp -d "$JC_SRC/.$c.XXXXXX")
  echo "$c: git clone $src (pin $pin)"
  if ! git clone -q --no-checkout "$src" "$tmp/repo"; then
    rm -rf "$tmp"; echo "$c: clone of $src failed" >&2; rc=1; continue
  fi
  if ! git -C "$tmp/repo" cat-file -e "$pin^{commit}" 2>/dev/null; then
    git -C "$tmp/repo" fetch -q origin "$pin" || true   # pin not on a branch: fetch it by id
  fi
  if ! git -C "$tmp/repo" -c advice.detachedHead=false checkout -q --detach "$pin"; then
    rm -rf "$tmp"; echo "$c: commit $pin not found in $src" >&2; rc=1; continue
  fi
  mv "$tmp/repo" "$dest"; rmdir "$tmp"
  if jc_verify_src "$c"; then
    echo "$c: $dest at $(git -C "$dest" rev-parse HEAD) ($(git -C "$dest" log -1 --format='%cI %s'))"
  else
    rc=1
  fi
done
exit $rc
