#!/usr/bin/env bash
# Cost of one CLI call as a run goes on, run by hand (never in CI):
#
#   benches/cli_calls.sh            # plans of 10, 500 and 5000 steps
#   SIZES="10 500" benches/cli_calls.sh
#
# Builds the release binary, then for each size drives a one-phase plan of that many steps
# the way an external orchestrator does, one process per call: `execute next`, `execute
# dispatched`, `execute record` for every step. It times every call (wall clock, process start
# to exit, read from bash's $EPOCHREALTIME so no clock process is timed with it) and prints,
# per command, the median of the first tenth and of the last tenth of the run and their ratio.
# Targets (issue 14.8): every call ≤ 10 ms median, the last tenth within 2× the first at every
# size.
#
# Each size runs in each of MODES: `relay` with `baton serve` running on the data dir (the
# calls are run by the server through the CLI relay, as when a team runs Baton as a service),
# `alone` with no server (each call opens the store and loads the execution itself).
#
# Environment (defaults): SIZES ("10 500 5000"), MODES ("relay alone"), CARGO_TARGET_DIR (target), CARGO_LOCK (unset;
# a lock file to run cargo under `flock`, for shared build machines), KEEP_DATA (unset; 1 keeps
# the temp data dirs), BATON (unset; a baton binary to time instead of building this checkout,
# e.g. another commit's), VS (unset; a second baton binary: both drive their own copy of each
# run in lockstep, step by step, which of the two goes first alternating, and a last line per
# command gives the ratio of their medians — the comparison to trust on a machine whose speed
# drifts by tens of percent within the hour, as whole runs timed one after the other do not
# cancel that drift). Every call of every size is timed (the 5,000-step run is 15,000
# processes: several minutes; twice that with VS).
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"10 500 5000"}
TARGET=${CARGO_TARGET_DIR:-target}
if [ -n "${BATON:-}" ]; then
  : # a binary given: time it as it is (e.g. another commit's build, to compare)
elif [ -n "${CARGO_LOCK:-}" ]; then
  flock "$CARGO_LOCK" cargo build --release --locked --quiet
else
  cargo build --release --locked --quiet
fi
BATON=${BATON:-"$TARGET/release/baton"}
BINS=("$BATON")
[ -z "${VS:-}" ] || BINS+=("$VS")
WORK=$(mktemp -d)

MODES=${MODES:-"relay alone"}
servers=()
stop_servers() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; done
  servers=()
}
trap 'stop_servers; [ -n "${KEEP_DATA:-}" ] || rm -rf "$WORK"' EXIT

for mode in $MODES; do
for n in $SIZES; do
  for b in "${!BINS[@]}"; do
    dir="$WORK/$mode-$n-$b"
    mkdir -p "$dir"
    python3 - "$n" "$dir/plan.json" <<'PY'
import json, sys
n, path = int(sys.argv[1]), sys.argv[2]
steps = [{"step_id": f"1.{i}", "agent_name": "worker", "task_description": "do it"} for i in range(1, n + 1)]
json.dump({"task_id": f"bench-{n}", "task_summary": "CLI call cost", "phases": [{"phase_id": 1, "name": "All", "steps": steps}]}, open(path, "w"))
PY
    export BATON_DATA_DIR="$dir/data"
    "${BINS[b]}" execute start --plan "$dir/plan.json" >/dev/null
    if [ "$mode" = relay ]; then
      port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      "${BINS[b]}" serve --bind "127.0.0.1:$port" 2>"$dir/serve.log" &
      servers+=($!)
      until [ -S "$BATON_DATA_DIR/cli.sock" ]; do sleep 0.05; done
    fi
    : >"$dir/times"
  done
  for i in $(seq 1 "$n"); do
    order=("${!BINS[@]}")
    if [ "${#BINS[@]}" -eq 2 ] && [ $((i % 2)) -eq 0 ]; then order=(1 0); fi
    for b in "${order[@]}"; do
      dir="$WORK/$mode-$n-$b"
      export BATON_DATA_DIR="$dir/data"
      for cmd in next dispatched record; do
        case $cmd in
          next) args=(execute next --task-id "bench-$n") ;;
          dispatched) args=(execute dispatched --task-id "bench-$n" --step-id "1.$i" --agent worker) ;;
          record) args=(execute record --task-id "bench-$n" --step-id "1.$i" --agent worker) ;;
        esac
        t0=${EPOCHREALTIME/./}
        "${BINS[b]}" "${args[@]}" >/dev/null 2>&1
        t1=${EPOCHREALTIME/./}
        echo "$cmd $i $(( t1 - t0 ))" >>"$dir/times"
      done
    done
  done
  stop_servers
  python3 - "$n" "$mode" "$WORK/$mode-$n" "${BINS[@]}" <<'PY'
import statistics, sys
n, mode, base, bins = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
tenth = max(1, n // 10)
medians = []
for b, binary in enumerate(bins):
    rows = [l.split() for l in open(f"{base}-{b}/times")]
    label = "" if len(bins) == 1 else f"  [{'A' if b == 0 else 'B'}: {binary}]"
    whole_by_cmd = {}
    for cmd in ("next", "dispatched", "record"):
        us = [(int(i), int(t)) for c, i, t in rows if c == cmd]
        first = statistics.median(t for i, t in us if i <= tenth) / 1000
        last = statistics.median(t for i, t in us if i > n - tenth) / 1000
        whole = statistics.median(t for _, t in us) / 1000
        whole_by_cmd[cmd] = whole
        print(f"{mode:<5} {n:>5} steps  {cmd:<10}  median {whole:6.1f} ms  first tenth {first:6.1f} ms  last tenth {last:6.1f} ms  last/first {last / first:4.2f}x{label}")
    medians.append(whole_by_cmd)
if len(bins) == 2:
    for cmd in ("next", "dispatched", "record"):
        print(f"{mode:<5} {n:>5} steps  {cmd:<10}  A/B {medians[0][cmd] / medians[1][cmd]:4.2f}x  (medians, the two run in lockstep)")
PY
done
done
