#!/usr/bin/env bash
# Stop the object store that up.sh started in DIR: each daemon by the PID up.sh recorded, and
# only if that PID still is the process up.sh started (same kernel start time), gateway first.
# SIGTERM, then SIGKILL after FETCHPROXY_OBJECT_STORE_STOP seconds (10). Data and logs stay in
# DIR. Safe to run twice, or after a failed up.sh.
#
#   .ci/object-store/down.sh DIR            stop it
#   .ci/object-store/down.sh --check DIR    exit 0 if any of its daemons still runs, 1 if none
set -euo pipefail

CHECK=false
if [ "${1:-}" = --check ]; then
    CHECK=true
    shift
fi
DIR=${1:?usage: down.sh [--check] DIR}
PIDS=$DIR/pids
GRACE=${FETCHPROXY_OBJECT_STORE_STOP:-10}
[ -f "$PIDS" ] || { $CHECK && exit 1; echo "down.sh: no $PIDS: nothing to stop" >&2; exit 0; }

ours() {  # ours PID START: whether PID is still the live process started at START
    local stat fields
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    read -r -a fields <<<"${stat##*) }"
    # fields[0] is the state (Z: exited, not yet reaped by its parent), fields[19] the start time
    [ "${fields[0]}" != Z ] && [ "${fields[19]}" = "$2" ]
}

if $CHECK; then
    while read -r _name pid start; do
        ours "$pid" "$start" && exit 0
    done <"$PIDS"
    exit 1
fi

# Newest first: the gateway, then the OSD, then the monitor they both talk to.
tac "$PIDS" | while read -r name pid start; do
    ours "$pid" "$start" || continue
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq $((GRACE * 10))); do
        ours "$pid" "$start" || break
        sleep 0.1
    done
    if ours "$pid" "$start"; then
        echo "down.sh: $name (PID $pid) ignored SIGTERM for ${GRACE}s; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            ours "$pid" "$start" || break
            sleep 0.1
        done
    fi
    if ours "$pid" "$start"; then
        echo "down.sh: $name (PID $pid) is still running" >&2
        exit 1
    fi
    echo "down.sh: stopped $name (PID $pid)" >&2
done
