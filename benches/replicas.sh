#!/usr/bin/env bash
# Scale-out bench (issue 17), run by hand (never in CI):
#
#   benches/replicas.sh
#
# On this machine, in one run, it prints:
#  1. durable transitions/s on SQLite and on PostgreSQL with one and with three replicas
#     (`cargo bench --bench replicas`: the same executions, split over 1 or 3 processes, each
#     with its own store on the one database);
#  2. the board's p50/p99 (`GET /api/v1/board`, wrk) with `baton serve` on SQLite, then on
#     PostgreSQL with one and with three replicas (three servers on one database, the load split
#     evenly over them, as a round-robin proxy would);
#  3. takeover time: two replicas on PostgreSQL, an execution whose agent runs for a while
#     driven by replica A; A is killed (SIGKILL) and the time until another process holds the
#     execution's lease is measured, in seconds and in lease periods (target: under 2).
#
# Every server listens on loopback; every loop is bounded; servers, data dirs and the bench
# databases are removed on exit.
#
# Environment (defaults): PG (postgres://baton@127.0.0.1:55432/postgres: a cluster where the
# bench may create databases), PORT (18751; PORT..PORT+2 are used), SPECS (200), FIRED (10),
# DURATION (10s), CONNECTIONS (6), LEASE_SECS (30: the lease period), PARTS ("1 2 3": which
# measures), BUILD (1; 0 uses the release binary already built), CARGO_LOCK (unset; a lock file
# to run cargo under `flock`, for shared build machines).
set -euo pipefail
cd "$(dirname "$0")/.."

PG=${PG:-postgres://baton@127.0.0.1:55432/postgres}
PORT=${PORT:-18751}
SPECS=${SPECS:-200}
FIRED=${FIRED:-10}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-6}
LEASE_SECS=${LEASE_SECS:-30}
# Every replica runs with this lease period (`[cluster] lease_secs`).
export BATON_LEASE_SECS=$LEASE_SECS
PARTS=${PARTS:-1 2 3}
part() { [[ " ${PARTS} " == *" $1 "* ]]; }

need() {
  command -v "$1" >/dev/null 2>&1 && return
  echo "installing $2" >&2
  apt-get update -qq && apt-get install -y -qq "$2" >/dev/null
}
need wrk wrk
need curl curl
need psql postgresql-client

cargo_() { if [[ -n "${CARGO_LOCK:-}" ]]; then flock "$CARGO_LOCK" cargo "$@"; else cargo "$@"; fi; }

TMP=$(mktemp -d)
PIDS=()
DBS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  done
  for db in "${DBS[@]}"; do psql -q "$PG" -c "drop database if exists ${db} with (force)" >/dev/null 2>&1 || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# A new database on the cluster; prints its URL.
new_db() {
  local name="baton_bench_$1_$$"
  psql -q "$PG" -c "drop database if exists ${name} with (force)" >/dev/null
  psql -q "$PG" -c "create database ${name}" >/dev/null
  DBS+=("$name")
  echo "${PG%/*}/${name}"
}

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GB, load average $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ "${BUILD:-1}" == 1 ]]; then
  echo "== building (release)" >&2
  cargo_ build --release --locked --bin baton
fi
BIN="${CARGO_TARGET_DIR:-target}/release/baton"

if part 1; then
  echo
  echo "== 1. durable transitions/s"
  BENCH_DATABASE_URL=$(new_db transitions) cargo_ bench --locked --bench replicas
fi

# Starts `baton serve` on PORT+$1 with data dir $2 (and extra args); records its pid.
serve() {
  local port=$((PORT + $1)) data=$2
  shift 2
  "$BIN" --data-dir "$data" serve --bind "127.0.0.1:${port}" "$@" >"$data.log" 2>&1 &
  PIDS+=($!)
  for i in $(seq 1 120); do
    curl -sf --max-time 2 "http://127.0.0.1:${port}/healthz" >/dev/null 2>&1 && return
    if [[ $i == 120 ]] || ! kill -0 "${PIDS[-1]}" 2>/dev/null; then
      echo "the server on ${port} did not come up; its log:" >&2
      cat "$data.log" >&2
      exit 1
    fi
    sleep 0.5
  done
}

stop_servers() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  done
  PIDS=()
}

# One server key for every data dir: replicas of one database must share it (one that does not
# refuses to start).
SERVER_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')

# Data dir $1 on database URL $2 (empty: SQLite), with extra baton.toml lines $3 and the shared
# server key.
data_dir() {
  mkdir -p "$1"
  (umask 077 && printf '%s' "$SERVER_KEY" >"$1/server.key")
  { [[ -n "$2" ]] && printf "[database]\nurl = '%s'\n" "$2"; printf '%b' "${3:-}"; } >"$1/baton.toml" || true
}

api() { # PORT-OFFSET METHOD PATH [JSON]
  curl -sf --max-time 30 -X "$2" -H 'content-type: application/json' -H 'x-baton-actor: bench' \
    ${4:+--data "$4"} "http://127.0.0.1:$((PORT + $1))$3"
}
first() { grep -o "\"$1\":[^,}]*" | sed -n 1p | cut -d: -f2- | tr -d '"'; }

seed() { # through the server on PORT
  for i in $(seq 1 "$SPECS"); do
    body="{\"project\":\"demo\",\"title\":\"Bench spec ${i}\",\"body\":\"Add greeting variant ${i}.\",\"priority\":$((i % 4))}"
    id=$(api 0 POST /api/v1/specs "$body" | first spec_id)
    [[ -n "$id" ]] || { echo "creating spec ${i} failed" >&2; exit 1; }
    api 0 POST "/api/v1/specs/${id}/enrich" >/dev/null
    if ((i <= FIRED)); then
      api 0 POST "/api/v1/specs/${id}/review" '{"decision":"approve"}' >/dev/null
      api 0 POST "/api/v1/specs/${id}/fire" >/dev/null
    fi
  done
  for _ in $(seq 1 150); do # until no driver runs (each parks at its first approval)
    local busy=0
    for ((k = 0; k < $1; k++)); do
      running=$(curl -sf --max-time 5 "http://127.0.0.1:$((PORT + k))/readyz" | first running)
      ((${running:-1} == 0)) || busy=1
    done
    ((busy == 0)) && return
    sleep 2
  done
}

board() { # NAME REPLICAS: wrk on every replica at once, CONNECTIONS split evenly
  local n=$2 outs=() worst=0 rps=0 p50s=()
  for ((k = 0; k < n; k++)); do
    wrk -t1 -c$((CONNECTIONS / n)) -d"$DURATION" --latency "http://127.0.0.1:$((PORT + k))/api/v1/board" >"$TMP/wrk-$k" &
    outs+=($!)
  done
  for pid in "${outs[@]}"; do wait "$pid"; done
  for ((k = 0; k < n; k++)); do
    if grep -q 'Non-2xx' "$TMP/wrk-$k"; then cat "$TMP/wrk-$k" >&2; exit 1; fi
    p99=$(awk '$1 == "99%" {print $2}' "$TMP/wrk-$k")
    p50s+=("$(awk '$1 == "50%" {print $2}' "$TMP/wrk-$k")")
    ms=$(awk -v v="$p99" 'BEGIN { if (v ~ /us$/) print v/1000; else if (v ~ /ms$/) print v+0; else print v*1000 }')
    worst=$(awk -v a="$worst" -v b="$ms" 'BEGIN { print (b > a) ? b : a }')
    rps=$(awk -v a="$rps" -v b="$(awk '$1 == "Requests/sec:" {print $2}' "$TMP/wrk-$k")" 'BEGIN { print a + b }')
  done
  printf '| %-28s | %-22s | %9.1f ms | %9.0f |\n' "$1" "${p50s[*]}" "$worst" "$rps"
}

if part 2; then
echo
echo "== 2. board p99 (GET /api/v1/board; ${SPECS} specs, ${FIRED} executions; wrk -c${CONNECTIONS} split over the replicas, ${DURATION})"
printf '| %-28s | %-22s | %12s | %9s |\n' "store" "p50 per replica" "worst p99" "req/s"
printf '|%s|%s|%s|%s|\n' "------------------------------" "------------------------" "-------------:" "----------:"
for setting in sqlite pg1 pg3; do
  case $setting in
  sqlite) url= n=1 ;;
  pg1) url=$(new_db board1) n=1 ;;
  pg3) url=$(new_db board3) n=3 ;;
  esac
  for ((k = 0; k < n; k++)); do
    data_dir "$TMP/$setting-$k" "$url"
    if ((k == 0)); then serve 0 "$TMP/$setting-0" --demo; else serve "$k" "$TMP/$setting-$k"; fi
  done
  seed "$n"
  case $setting in
  sqlite) board "SQLite, 1 server" 1 ;;
  pg1) board "PostgreSQL, 1 replica" 1 ;;
  pg3) board "PostgreSQL, 3 replicas" 3 ;;
  esac
  stop_servers
done
fi

part 3 || exit 0
echo
echo "== 3. takeover after a replica dies (lease period ${LEASE_SECS} s)"
url=$(new_db takeover)
slow="[agents.technical-writer]\nprofile = 'command'\ncommand = ['sh', '-c', 'cat >/dev/null; sleep 600; echo guide > GUIDE.md']\n"
data_dir "$TMP/take-a" "$url" "$slow"
data_dir "$TMP/take-b" "$url" "$slow"
serve 0 "$TMP/take-a" --demo
A_PID=${PIDS[-1]}
serve 1 "$TMP/take-b"
# Spec 3 of the demo board is approved and runs the technical writer's step.
api 0 POST /api/v1/specs/3/fire >/dev/null
TASK=$(api 0 GET /api/v1/specs/3 | first task_id)
[[ -n "$TASK" ]] || { echo "spec 3 was not fired" >&2; exit 1; }
lease_holder() { psql -qtA "$url" -c "select holder from leases where task_id = '${TASK}'" 2>/dev/null || true; }
for _ in $(seq 1 120); do [[ "$(lease_holder)" == *":${A_PID}:"* ]] && break; sleep 0.25; done
echo "replica A (pid ${A_PID}) drives ${TASK}: lease $(lease_holder)"
kill -KILL "$A_PID"
start=$(date +%s.%N)
deadline=$(($(date +%s) + 3 * LEASE_SECS))
taken=
while (($(date +%s) < deadline)); do
  holder=$(lease_holder)
  if [[ -n "$holder" && "$holder" != *":${A_PID}:"* && "$holder" != *":${A_PID}" ]]; then
    taken=$holder
    break
  fi
  sleep 0.2
done
if [[ -n "$taken" ]]; then
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  echo "taken over by ${taken} after ${secs} s = $(awk -v s="$secs" -v l="$LEASE_SECS" 'BEGIN { printf "%.2f", s / l }') lease periods (target < 2)"
else
  echo "not taken over within $((3 * LEASE_SECS)) s: no replica claimed it"
fi
# The agent A left running detached: stop its process group (from its run directory).
for g in $(grep -rhoE '"agent_pgid": *[0-9]+' "$TMP/take-a/runs/${TASK}" 2>/dev/null | grep -oE '[0-9]+$' | sort -u); do
  ((g > 1)) && kill -TERM -- "-$g" 2>/dev/null || true
done
