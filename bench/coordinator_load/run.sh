#!/bin/bash
# Starts a coordinator on a fresh SQLite file and drives it with coordinator_load.
#   bench/coordinator_load/run.sh BUILD_DIR [coordinator_load flags...]
set -euo pipefail
build=${1:?build dir}; shift
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'kill $coord 2>/dev/null; wait $coord 2>/dev/null; rm -rf "$tmp"' EXIT
bash "$here/../../tests/service/fake_pkb_eval.sh" --catalog > "$tmp/catalog.json"
"$build/server/pkb-coordinator" --listen 127.0.0.1:0 --port-file "$tmp/port" --db "$tmp/load.db" \
  --catalog-json "$tmp/catalog.json" > "$tmp/coordinator.log" 2>&1 &
coord=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
uptime
"$build/bench/coordinator_load/coordinator_load" --coordinator "127.0.0.1:$(cat "$tmp/port")" "$@"
echo "coordinator: $(grep -E 'VmRSS|Threads' /proc/$coord/status | tr -s ' \t' ' ' | tr '\n' ' ')"
