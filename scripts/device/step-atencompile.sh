#!/usr/bin/env bash
# What the ATen glue header costs a compile on the GPU node (docs/candidate-api.md, "Using ATen"):
# problem 13's worked example as it is (pkb/aten_core.h and <ATen/ops/matmul.h>) against the same
# source with pkb/aten.h, each compiled PKB_ATENCOMPILE_RUNS times (default 3), alternating, by
# pkb-eval --compile-only in a cache folder of its own (every compile runs), then each run at
# W = 1 for its verdict. Exits non-zero when pkb-eval did (a compile not COMPILED, a run not OK)
# or gave no JSON.
set -o pipefail
BIN=$1
RUNS=${PKB_ATENCOMPILE_RUNS:-3}
dir=$(mktemp -d /tmp/pkb-atencompile-XXXXXX); chmod 0755 "$dir"
trap 'rm -rf "$dir"' EXIT
core=problems/examples/p013_gemm_allreduce_symm.cu
full=$dir/p013_aten_full.cu
grep -q '#include "pkb/aten_core.h"' "$core" || { echo "$core does not include pkb/aten_core.h"; exit 1; }
sed -e '/#include <ATen\/ops\/matmul.h>/d' -e 's|#include "pkb/aten_core.h"|#include "pkb/aten.h"|' \
  "$core" > "$full"
failed=0
compile() {
  local name=$1 src=$2 cache; cache=$(mktemp -d "$dir/cache-XXXXXX"); chmod 0755 "$cache"
  "$BIN/pkb-eval" --compile-only -p 13 -w 1 --cache-dir="$cache" --json "$src" 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin); c=r.get("compile") or {}; print("%-9s %-14s compile %6.2f s  cache_hit %s" % (sys.argv[1], r["status"], (r.get("stage_seconds") or {}).get("compile",-1), c.get("cache_hit",False)))' "$name" ||
    failed=1
}
for _ in $(seq "$RUNS"); do
  compile aten_core "$core"
  compile aten "$full"
done
for src in "$core" "$full"; do
  "$BIN/pkb-eval" -p 13 -w 1 --cache-dir="$dir/verdicts" --json "$src" 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("%-40s %s speedup %.3f compile %.2f s" % (sys.argv[1], r["status"], r.get("speedup") or 0, (r.get("stage_seconds") or {}).get("compile",-1)))' "$(basename "$src")" ||
    failed=1
done
exit "$failed"
