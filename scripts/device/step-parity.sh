#!/usr/bin/env bash
# Inputs bit-identical to PKB's: dump every rank's inputs as pkb-eval draws them (libtorch C++, on
# the GPU when there is one) and redraw them with Python torch as PKB does (scripts/device/parity.py),
# then compare bytes. All ranks of a dump are drawn in one process on one device, so W=4 needs
# no more GPUs than W=1.
#   step-parity.sh BIN OUT          (PARITY_DEVICE=cpu for the CPU build; PARITY_DUMPS=folder)
# Every problem in the binary is dumped at W=2 (W=1 where the problem cannot run at W=2), at a
# small M, N where its shapes follow M, N (PKB's defaults where its sizes are fixed); problems whose ranks differ in role or layout also at
# W=4, and a few at trial 1 (--set-offset 1: the 1000003·t term of the seed).
set -uo pipefail
BIN=$1; OUT=$2
DEVICE=${PARITY_DEVICE:-cuda}
D=${PARITY_DUMPS:-/tmp/pkb-parity}
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$D" && mkdir -p "$D"

# Base shape per problem: small where the inputs follow M and N (the Python side redraws the same
# shape from the folder name); 54 at 256 x 512 so that its B and T differ.
shape() {
  case $1 in
    54) echo "256 512" ;;
    60|62|63|71|72|74|75|76|77|78|80|81|87) echo "1024 1024" ;;  # PKB's sizes are fixed; ours shrink only below 1024
    *) echo "256 256" ;;
  esac
}
W4="5 8 15 20 22 40 41 42 43 45 46 47 48 51 55 56 57 62 69 70 74 75 79 81 82 85"
T1="9 13 24 28 29 49"
T3="85"  # trial 3: the odd ranks' shards are empty

dump() {  # id world trial -> 0 when written
  local id=$1 w=$2 t=$3 m n; read -r m n < <(shape "$id")
  local dir="$D/p$id-w$w-m$m-n$n-t$t" err="$D/err-$id-$w-$t.txt"
  "$BIN/pkb-eval" -p "$id" -w "$w" --m "$m" --n "$n" --set-offset "$t" --dump-inputs "$dir" \
    >/dev/null 2>"$err" && { rm -f "$err"; return 0; }
  rm -rf "$dir"; return 1
}
dump_problem() {  # every dump of one problem; prints what was refused
  local id=$1
  if ! dump "$id" 2 0; then
    echo "p$id: W=2 refused ($(head -c 300 "$D/err-$id-2-0.txt")); dumping W=1"
    dump "$id" 1 0 || echo "PARITY BAD  p$id: pkb-eval --dump-inputs failed: $(head -c 300 "$D/err-$id-1-0.txt")"
  fi
  if [[ " $W4 " == *" $id "* ]]; then dump "$id" 4 0 || echo "p$id: W=4 refused"; fi
  if [[ " $T1 " == *" $id "* ]]; then dump "$id" 2 1 || echo "p$id: trial 1 refused"; fi
  if [[ " $T3 " == *" $id "* ]]; then dump "$id" 2 3 || echo "p$id: trial 3 refused"; fi
}

# PARITY_FROM=31: only problems with ids from 31 on.
ids=$("$BIN/pkb-eval" --catalog | python3 -c \
  'import json, sys, os; f = int(os.environ.get("PARITY_FROM", "0")); print(" ".join(str(p["id"]) for p in json.load(sys.stdin)["problems"] if p["id"] >= f))')
# PARITY_IDS="40 41 42 47": exactly these.
[ -z "${PARITY_IDS:-}" ] || ids=$PARITY_IDS
covered=" $(python3 "$HERE/parity.py" --list 2>/dev/null) "
echo "problems in $BIN/pkb-eval: $ids"
skipped=""; kept=""
for id in $ids; do if [[ "$covered" == *" $id "* ]]; then kept+=" $id"; else skipped+=" $id"; fi; done
ids=$kept
[ -z "$skipped" ] || echo "not covered by parity.py (no Python draw yet):$skipped"
start=$(date +%s)
# A few problems at a time: each pkb-eval spends most of its time starting libtorch and CUDA.
for id in $ids; do
  while (( $(jobs -rp | wc -l) >= ${PARITY_JOBS:-6} )); do wait -n; done
  dump_problem "$id" > "$D/log-$id.txt" &
done
wait
cat "$D"/log-*.txt 2>/dev/null
failed=0; grep -q "PARITY BAD" "$D"/log-*.txt 2>/dev/null && failed=1
rm -f "$D"/log-*.txt "$D"/err-*.txt
echo "dumps written in $(( $(date +%s) - start )) s"
python3 "$HERE/parity.py" --device "$DEVICE" --dumps "$D" 2>&1 | grep -v -e UserWarning -e _conversion_method_template
rc=${PIPESTATUS[0]}; [ "$failed" = 0 ] || rc=1
echo "parity step done in $(( $(date +%s) - start )) s, exit $rc"
exit "$rc"
