#!/usr/bin/env bash
# Inputs bit-identical to PKB's: dump every rank's inputs as pkb-eval draws them (libtorch C++, on
# the GPU when there is one) and redraw them with Python torch as PKB does (scripts/device/parity.py),
# then compare bytes. All ranks of a dump are drawn in one process on one device, so W=4 needs
# no more GPUs than W=1.
#   step-parity.sh BIN OUT          (PARITY_DEVICE=cpu for the CPU build; PARITY_DUMPS=folder)
# Every problem in the binary is dumped at W=2 (W=1 where the problem cannot run at W=2) and at the
# shape, worlds and trials its redraw declares beside its .cc (problems/*/pNNN_*.parity.py:
# @problem(ID, shape=..., also=[(world, trial), ...]); `parity.py --plan` lists them).
set -uo pipefail
BIN=$1; OUT=$2
DEVICE=${PARITY_DEVICE:-cuda}
D=${PARITY_DUMPS:-/tmp/pkb-parity}
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$D" && mkdir -p "$D"

# Each redraw's dump plan: base shape and the extra (world, trial) dumps.
declare -A SHAPE ALSO
while read -r id m n also; do
  SHAPE[$id]="$m $n"; [ "$also" = - ] && ALSO[$id]="" || ALSO[$id]=$also
done < <(python3 "$HERE/parity.py" --plan)

dump() {  # id world trial -> 0 when written
  local id=$1 w=$2 t=$3 m n; read -r m n <<< "${SHAPE[$id]}"
  local dir="$D/p$id-w$w-m$m-n$n-t$t" err="$D/err-$id-$w-$t.txt"
  "$BIN/pkb-eval" -p "$id" -w "$w" --m "$m" --n "$n" --set-offset "$t" --dump-inputs "$dir" \
    >/dev/null 2>"$err" && { rm -f "$err"; return 0; }
  rm -rf "$dir"; return 1
}
dump_problem() {  # every dump of one problem; prints what was refused
  local id=$1 w t
  if ! dump "$id" 2 0; then
    echo "p$id: W=2 refused ($(head -c 300 "$D/err-$id-2-0.txt")); dumping W=1"
    dump "$id" 1 0 || echo "PARITY BAD  p$id: pkb-eval --dump-inputs failed: $(head -c 300 "$D/err-$id-1-0.txt")"
  fi
  for wt in ${ALSO[$id]//,/ }; do
    w=${wt%:*}; t=${wt#*:}
    if [ "$t" = 0 ]; then dump "$id" "$w" 0 || echo "p$id: W=$w refused"
    else dump "$id" "$w" "$t" || echo "p$id: trial $t refused"; fi
  done
}

# PARITY_FROM=31: only problems with ids from 31 on.
ids=$("$BIN/pkb-eval" --catalog | python3 -c \
  'import json, sys, os; f = int(os.environ.get("PARITY_FROM", "0")); print(" ".join(str(p["id"]) for p in json.load(sys.stdin)["problems"] if p["id"] >= f))')
# PARITY_IDS="40 41 42 47": exactly these.
[ -z "${PARITY_IDS:-}" ] || ids=$PARITY_IDS
covered=" ${!SHAPE[*]} "
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
