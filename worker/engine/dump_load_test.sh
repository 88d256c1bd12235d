#!/usr/bin/env bash
# Dumps every problem (`pkb-eval --dump-inputs`, W = 2, small shapes, CPU) and loads all the
# dumps in one Python process with stock torch.load (dump_load_test.py).
#
#   dump_load_test.sh PKB_EVAL PYTHON
#
# Exits 77 (skipped) where Python has no torch. On CPU machines the CUDA wheel is installed
# without its CUDA libraries (scripts/install-deps.sh: --no-deps), and `import torch` stops at
# the first one missing; the test then gives the loader empty stand-ins for those libraries,
# which CPU-only use never calls (lazy binding).
set -euo pipefail
eval_bin=$1
py=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

probe='import sys, os; sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL); import torch'
if ! "$py" -c "$probe" 2>"$work/probe.err"; then
  if ! "$py" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)'; then
    echo "SKIP: $py has no torch"
    exit 77
  fi
  mkdir -p "$work/stubs"
  for _ in 1 2 3 4 5 6 7 8; do
    missing=$(grep -o 'lib[A-Za-z0-9_]*\.so[.0-9]*: cannot open shared object' "$work/probe.err" |
      head -1 | cut -d: -f1 || true)
    [[ -n $missing ]] || break
    echo "stand-in for $missing"
    echo 'void pkb_stub(void) {}' | cc -shared -x c - -o "$work/stubs/$missing"
    if LD_LIBRARY_PATH="$work/stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$py" -c "$probe" \
      2>"$work/probe.err"; then
      break
    fi
  done
  export LD_LIBRARY_PATH="$work/stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKB_TORCH_LAZY=1
  "$py" -c "$probe" || { cat "$work/probe.err"; exit 1; }
fi

# The shapes of problem_cpu_check (problems/CMakeLists.txt) where 64 x 64 does not run.
declare -A args=([19]="--m 64 --n 128" [36]="--m 128 --n 256" [37]="--m 128 --n 384"
  [38]="--m 128 --n 256" [39]="--m 128 --n 256" [54]="--m 128 --n 512" [55]="--m 128 --n 512"
  [56]="--m 128 --n 512" [57]="--m 128 --n 512" [77]="--m 64 --n 2" [78]="--m 64 --n 128")
ids=$("$eval_bin" --catalog | "$py" -c 'import json, sys; print(*[p["id"] for p in json.load(sys.stdin)["problems"]])')
count=0
for id in $ids; do
  # shellcheck disable=SC2086  # the arguments are words
  "$eval_bin" --problem "$id" --world-size 2 ${args[$id]:---m 64 --n 64} \
    --dump-inputs "$work/dumps/$(printf %03d "$id")" >/dev/null
  count=$((count + 1))
done
echo "dumped $count problems"
"$py" "$here/dump_load_test.py" "$work/dumps"
