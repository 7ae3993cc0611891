#!/usr/bin/env bash
# HTTP load test of `baton serve`, run by hand (never in CI):
#
#   benches/load.sh
#
# Builds the release binary, starts `baton serve --demo` on a fresh temp data dir on
# 127.0.0.1, seeds SPECS specs through the REST API (created and enriched; the first FIRED
# of them approved and fired, so there are executions, whose demo agents run until their
# first approval), waits until no driver is running, then runs wrk against
# /api/v1/board, / (the board page) and /executions/<task_id> (a fired spec's page) and
# prints p50/p99 latency and requests/s of each. Target: p99 < 50 ms.
#
# Every request goes to the loopback address; every loop is bounded. The server and the temp
# dir are removed on exit.
#
# Environment (defaults): PORT (18741), SPECS (1000), FIRED (10), DURATION (20s),
# CONNECTIONS (8), THREADS (1), SETTLE_SECS (300: longest wait for fired executions to
# park), KEEP_DATA (unset; 1 keeps the data dir and leaves the server running, for a look
# at the database; its pid and path are printed), CARGO_TARGET_DIR (target), CARGO_LOCK
# (unset; a lock file to run cargo under `flock`, for shared build machines).
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${PORT:-18741}
SPECS=${SPECS:-1000}
FIRED=${FIRED:-10}
DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-1}
SETTLE_SECS=${SETTLE_SECS:-300}
BASE="http://127.0.0.1:${PORT}"

need() {
  command -v "$1" >/dev/null 2>&1 && return
  echo "installing $2" >&2
  apt-get update -qq && apt-get install -y -qq "$2" >/dev/null
}
need wrk wrk
need curl curl

echo "== building the release binary" >&2
if [[ -n "${CARGO_LOCK:-}" ]]; then
  flock "$CARGO_LOCK" cargo build --release --locked --bin baton
else
  cargo build --release --locked --bin baton
fi
BIN="${CARGO_TARGET_DIR:-target}/release/baton"

DATA=$(mktemp -d)
SERVER_PID=
cleanup() {
  if [[ "${KEEP_DATA:-}" == 1 ]]; then
    echo "kept: data dir ${DATA}, server pid ${SERVER_PID} on ${BASE}" >&2
    return
  fi
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -rf "$DATA"
}
trap cleanup EXIT

echo "== baton serve --demo on ${BASE} (data dir ${DATA})" >&2
"$BIN" --data-dir "$DATA/data" serve --demo --bind "127.0.0.1:${PORT}" >"$DATA/serve.log" 2>&1 &
SERVER_PID=$!
for i in $(seq 1 60); do
  curl -sf --max-time 2 "${BASE}/healthz" >/dev/null 2>&1 && break
  if [[ $i == 60 ]] || ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "the server did not come up; its log:" >&2
    cat "$DATA/serve.log" >&2
    exit 1
  fi
  sleep 0.5
done

api() { # METHOD PATH [JSON]: the response body; fails on an HTTP error.
  curl -sf --max-time 30 -X "$1" -H 'content-type: application/json' -H 'x-baton-actor: load' \
    ${3:+--data "$3"} "${BASE}$2"
}
# FIELD: its first value in JSON on stdin. Reads all of it (`sed -n 1p`, not `head`): with
# pipefail, a reader that stops early fails a long response's writer (SIGPIPE), which ended the
# run once there were 1,000 executions.
first() { grep -o "\"$1\":[^,}]*" | sed -n 1p | cut -d: -f2- | tr -d '"'; }

echo "== seeding ${SPECS} specs (create + enrich; the first ${FIRED} approved and fired)" >&2
watch_seed=$(date +%s)
for i in $(seq 1 "$SPECS"); do
  body="{\"project\":\"demo\",\"title\":\"Load spec ${i}: add greeting variant ${i}\",\"body\":\"Add greeting variant ${i} to the greeting service, with a test.\",\"priority\":$((i % 4))}"
  id=$(api POST /api/v1/specs "$body" | first spec_id)
  [[ -n "$id" ]] || { echo "creating spec ${i} failed" >&2; exit 1; }
  api POST "/api/v1/specs/${id}/enrich" >/dev/null
  if ((i <= FIRED)); then
    api POST "/api/v1/specs/${id}/review" '{"decision":"approve"}' >/dev/null
    api POST "/api/v1/specs/${id}/fire" >/dev/null
  fi
  if ((i % 100 == 0)); then echo "   ${i} specs" >&2; fi
done
echo "   seeded in $(($(date +%s) - watch_seed)) s" >&2

TASK_ID=$(api GET /api/v1/executions | first task_id)
[[ -n "$TASK_ID" ]] || { echo "no execution to load (FIRED=0?)" >&2; exit 1; }

echo "== waiting (up to ${SETTLE_SECS} s) until no driver is running, so agents do not share the CPU with wrk" >&2
deadline=$(($(date +%s) + SETTLE_SECS))
while :; do
  running=$(curl -sf --max-time 5 "${BASE}/readyz" | first running)
  [[ "${running:-1}" == 0 ]] && break
  if (($(date +%s) >= deadline)); then
    echo "   ${running:-?} drivers still running; measuring anyway" >&2
    break
  fi
  sleep 2
done
executions=$(api GET /api/v1/executions | grep -o '"task_id"' | wc -l)

run_wrk() { # NAME PATH
  local out p50 p99 rps
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "${BASE}$2")
  if grep -q 'Non-2xx' <<<"$out"; then
    echo "$1: non-2xx answers:" >&2
    echo "$out" >&2
    exit 1
  fi
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  rps=$(awk '$1 == "Requests/sec:" {print $2}' <<<"$out")
  printf '| %-32s | %8s | %8s | %9s |\n' "$1" "$p50" "$p99" "$rps"
}

echo "== wrk -t${THREADS} -c${CONNECTIONS} -d${DURATION} (${SPECS} specs, ${executions} executions; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
printf '| %-32s | %8s | %8s | %9s |\n' "GET" "p50" "p99" "req/s"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..34})" "---------:" "---------:" "----------:"
run_wrk "/api/v1/board" /api/v1/board
run_wrk "/ (board page)" /
run_wrk "/executions/<task_id>" "/executions/${TASK_ID}"
