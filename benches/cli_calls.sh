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
# e.g. another commit's, for a before/after in one sitting). Every call of every size is timed
# (the 5,000-step run is 15,000 processes: several minutes).
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
WORK=$(mktemp -d)

MODES=${MODES:-"relay alone"}
server=
stop_server() { [ -z "$server" ] || { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; server=; }; }
trap 'stop_server; [ -n "${KEEP_DATA:-}" ] || rm -rf "$WORK"' EXIT

for mode in $MODES; do
for n in $SIZES; do
  dir="$WORK/$mode-$n"
  mkdir -p "$dir"
  python3 - "$n" "$dir/plan.json" <<'PY'
import json, sys
n, path = int(sys.argv[1]), sys.argv[2]
steps = [{"step_id": f"1.{i}", "agent_name": "worker", "task_description": "do it"} for i in range(1, n + 1)]
json.dump({"task_id": f"bench-{n}", "task_summary": "CLI call cost", "phases": [{"phase_id": 1, "name": "All", "steps": steps}]}, open(path, "w"))
PY
  export BATON_DATA_DIR="$dir/data"
  "$BATON" execute start --plan "$dir/plan.json" >/dev/null
  if [ "$mode" = relay ]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$BATON" serve --bind "127.0.0.1:$port" 2>"$dir/serve.log" &
    server=$!
    until [ -S "$BATON_DATA_DIR/cli.sock" ]; do sleep 0.05; done
  fi
  : >"$dir/times"
  for i in $(seq 1 "$n"); do
    for cmd in next dispatched record; do
      case $cmd in
        next) args=(execute next --task-id "bench-$n") ;;
        dispatched) args=(execute dispatched --task-id "bench-$n" --step-id "1.$i" --agent worker) ;;
        record) args=(execute record --task-id "bench-$n" --step-id "1.$i" --agent worker) ;;
      esac
      t0=${EPOCHREALTIME/./}
      "$BATON" "${args[@]}" >/dev/null 2>&1
      t1=${EPOCHREALTIME/./}
      echo "$cmd $i $(( t1 - t0 ))" >>"$dir/times"
    done
  done
  stop_server
  python3 - "$n" "$dir/times" "$mode" <<'PY'
import statistics, sys
n, path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rows = [l.split() for l in open(path)]
tenth = max(1, n // 10)
for cmd in ("next", "dispatched", "record"):
    us = [(int(i), int(t)) for c, i, t in rows if c == cmd]
    first = statistics.median(t for i, t in us if i <= tenth) / 1000
    last = statistics.median(t for i, t in us if i > n - tenth) / 1000
    whole = statistics.median(t for _, t in us) / 1000
    print(f"{mode:<5} {n:>5} steps  {cmd:<10}  median {whole:6.1f} ms  first tenth {first:6.1f} ms  last tenth {last:6.1f} ms  last/first {last / first:4.2f}x")
PY
done
done
