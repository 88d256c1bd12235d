#!/usr/bin/env bash
# The node's compiles on a GPU (worker/engine/node_compiles.h): problem 1's example timed while
# another compile of the node runs (pkb-eval --compile-only of a source that compiles for minutes,
# as another worker's compile task would), then with that compile stopped (SIGSTOP, as its worker
# stops it), then after it was killed. Counted beside the first job only; only the others' references
# join the node's baseline. Then settling (--settle-baseline) beside a running compile: it stops at
# its first run.
BIN=$1; OUT=$2
cache=$(mktemp -d /tmp/pkb-nodecompiles-XXXXXX); chmod 0755 "$cache"
# PKB_NODECOMPILES_EXAMPLE: the job's source (default problem 1's example; a CPU candidate tries the
# script on a machine without a GPU, with PKB_NODECOMPILES_FLAGS="-I tests/engine/cpu_candidates").
ex=${PKB_NODECOMPILES_EXAMPLE:-problems/examples/p001_allreduce_symm.cu}
read -r -a FLAGS <<<"${PKB_NODECOMPILES_FLAGS:-}"
job() {
  local name=$1; shift
  "$BIN/pkb-eval" -p 1 -w 1 --cache-dir="$cache" ${FLAGS[@]+"${FLAGS[@]}"} --json "$@" 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%-10s %-8s speedup %6.3f  compiles beside %2s  node baseline %s over %s" % (sys.argv[1], r["status"], r.get("speedup",0), r.get("compiles_beside",0), r.get("baseline_node_us",0), r.get("baseline_node_samples",0)))' "$name"
}
# The other compile's process tree, from its entry's pid (the run's file with no end marker).
holder() {
  python3 - "$cache/compiles" <<'PY'
import os, sys
names = os.listdir(sys.argv[1])
ends = {n.rsplit(".", 2)[0] for n in names if n.endswith(".done")}
for n in names:
    if n.endswith(".run") and n[:-4] not in ends:
        print(n.split(".")[1])
PY
}
tree() { local p=$1; echo "$p"; for c in $(pgrep -P "$p"); do tree "$c"; done; }
signal_tree() { for p in $(tree "$1"); do kill -"$2" "$p" 2>/dev/null; done; }
job alone-1 "$ex"
job alone-2 "$ex"
"$BIN/pkb-eval" --compile-only -p 1 -w 1 --cache-dir="$cache" -I tests/engine/cpu_candidates \
  tests/engine/cpu_candidates/p001_slow_compile.cc > "$OUT/nodecompiles-slow.log" 2>&1 &
for _ in $(seq 100); do h=$(holder); [ -n "$h" ] && break; sleep 0.1; done
echo "the other compile: pkb-eval pid ${h:-none}; entries: $(ls "$cache/compiles" | wc -l)"
job beside "$ex"
signal_tree "$h" STOP; signal_tree "$h" STOP; sleep 0.2
job stopped "$ex"
echo "settling beside it, running again:"
signal_tree "$h" CONT
"$BIN/pkb-eval" -p 1 -w 1 --cache-dir="$cache" ${FLAGS[@]+"${FLAGS[@]}"} --settle-baseline 10 --json "$ex" 2>/dev/null |
  python3 -c 'import json,sys; r=json.load(sys.stdin); print("settle     %s speedup %.3f compiles beside %s node baseline over %s | %s" % (r["status"], r.get("speedup",0), r.get("compiles_beside",0), r.get("baseline_node_samples",0), r["message"][:200]))'
signal_tree "$h" KILL; wait
job killed "$ex"
echo "entries left: $(ls "$cache/compiles" | sort | sed 's/^[0-9]*\.//' | cut -c1-40 | paste -sd' ')"
