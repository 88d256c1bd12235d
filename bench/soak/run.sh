#!/bin/bash
# Starts the real pkb-coordinator on a fresh SQLite file, with /metrics on, and drives it with
# coordinator_soak at a fixed rate (see coordinator_soak.cc and RESULTS.md). Prints the load
# average before and after, and the coordinator's log tail on failure.
#   bench/soak/run.sh BUILD_DIR [coordinator_soak flags...]     (e.g. --duration 600 --rate 100)
set -euo pipefail
build=${1:?build dir}; shift
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
coord=
trap '[ -n "$coord" ] && kill $coord 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
bash "$here/../../tests/service/fake_pkb_eval.sh" --catalog > "$tmp/catalog.json"
metrics=127.0.0.1:$(free_port)
"$build/server/pkb-coordinator" --listen 127.0.0.1:0 --port-file "$tmp/port" --db "$tmp/soak.db" \
  --catalog-json "$tmp/catalog.json" --metrics-listen "$metrics" > "$tmp/coordinator.log" 2>&1 &
coord=$!
for _ in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
echo "start: $(date -u '+%F %T UTC'), commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo ?), $(nproc) cores, $(uptime | sed 's/.*load/load/')"
( while sleep 10; do echo "loadavg $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; done ) &
loadmon=$!
rc=0
"$build/bench/soak/coordinator_soak" --coordinator "127.0.0.1:$(cat "$tmp/port")" \
  --metrics "$metrics" --coordinator-pid "$coord" "$@" || rc=$?
kill $loadmon 2>/dev/null || true
echo "end: $(date -u '+%F %T UTC'), $(uptime | sed 's/.*load/load/'); coordinator $(grep -E 'VmRSS|VmHWM|Threads' /proc/$coord/status | tr -s ' \t' ' ' | tr '\n' ' ')"
[ $rc = 0 ] || tail -20 "$tmp/coordinator.log"
exit $rc
