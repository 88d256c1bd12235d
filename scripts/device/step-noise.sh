#!/usr/bin/env bash
# Where the between-process spread of host-bound timings comes from (issue 20): the node's
# facts (NUMA, huge pages, clocks), then the p001 and p013 examples evaluated several times with
# the default address-space layout, with randomisation off (setarch -R, inherited by the ranks and
# hosts), and on one hardware thread per physical core (taskset: no two of the job's threads on
# siblings), each run's judge-clock figures for both sides printed.
#   step-noise.sh BIN OUT      (PKB_NOISE_RUNS, default 6)
set -uo pipefail
BIN=$1; OUT=$2
RUNS=${PKB_NOISE_RUNS:-6}
mkdir -p "$OUT"
{
  lscpu | grep -E 'Model name|^CPU\(s\)|Socket|NUMA|Thread|Core|MHz'
  echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
  echo "governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo none)"
  echo "randomize_va_space: $(cat /proc/sys/kernel/randomize_va_space)"
  lscpu -e=CPU,CORE,SOCKET,NODE | head -40
  nvidia-smi topo -m
  nvidia-smi --query-gpu=persistence_mode,clocks.sm,clocks.max.sm,clocks.mem --format=csv
} 2>&1
run() {  # condition example problem i
  local cond=$1 ex=$2 p=$3 i=$4 pre=() json=$OUT/noise-$1-$2-$4.json
  [ "$cond" = noaslr ] && pre=(setarch "$(uname -m)" -R)
  [ "$cond" = nosmt ] && pre=(taskset -c "$ONE_PER_CORE")
  "${pre[@]}" "$BIN/pkb-eval" -p "$p" -w 1 --json "problems/examples/$ex.cu" > "$json" 2> "${json%.json}.err"
  python3 - "$json" "$cond" "$ex" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], sys.argv[3], "no result:", e); sys.exit()
c = r.get("candidate", {}); b = r.get("baseline", {})
print("%-7s %-26s %-6s cand wall %7.2f us events %6.2f | base wall %7.2f us rounds %s graph %.3f"
      % (sys.argv[2], sys.argv[3], r["status"], c.get("wall_per_iter_us", 0), c.get("median_us", 0),
         b.get("wall_per_iter_us", 0), ",".join("%.2f" % x for x in b.get("round_wall_per_iter_us", [])),
         r.get("baseline_graph_us", 0)))
PY
}
# The first hardware thread of each physical core.
ONE_PER_CORE=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -k1,1n | awk -F, '!seen[$2]++ {print $1}' | paste -sd,)
echo "one hardware thread per core: $ONE_PER_CORE"
for cond in default noaslr nosmt; do
  for ex in "1 p001_allreduce_symm" "13 p013_gemm_allreduce_symm"; do
    read -r p name <<<"$ex"
    for i in $(seq "$RUNS"); do run "$cond" "$name" "$p" "$i"; done
  done
done
