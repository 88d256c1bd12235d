#!/usr/bin/env bash
# The adversarial corpus: every entry of corpus.tsv must get its verdict from pkb-eval, and the
# escape attempts must leave nothing on the host. CPU entries run through mpirun; .cu entries
# here are all stopped by the static check, before any compile or GPU.
#   run_corpus.sh PKB_EVAL [SOURCE_DIR] [--gpu]
# PKB_CORPUS_LOGS=DIR (optional) keeps each entry's rank logs in DIR/<n>-<file>-w<W>/ (device
# runs bring them back to trace a verdict). The scratch is the submission's to write: only plain
# files are copied (no link followed, no FIFO read).
# --gpu runs corpus_gpu.tsv instead (the device machine). Exits 77 (skipped, with the reason)
# where the sandbox cannot be built (user namespaces off), or with --gpu where there is no GPU.
set -uo pipefail
EVAL=${1:?usage: run_corpus.sh PKB_EVAL [SOURCE_DIR] [--gpu]}
SRC=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
HERE=$SRC/tests/adversarial
CORPUS=$HERE/corpus.tsv
if [ "${3:-}" = --gpu ]; then
  CORPUS=$HERE/corpus_gpu.tsv
  gpus=$("$(dirname "$EVAL")/pkb-rank" probe 2>/dev/null || echo 0)
  if [ "${gpus:-0}" -lt 1 ]; then echo "SKIPPED: no GPU on this machine"; exit 77; fi
fi
if ! bwrap --die-with-parent --unshare-all --ro-bind /usr /usr --symlink usr/lib64 /lib64 \
     --symlink usr/lib /lib --symlink usr/bin /bin /bin/true 2>/tmp/pkb-corpus-probe.$$; then
  echo "SKIPPED: the sandbox cannot be built here: $(cat /tmp/pkb-corpus-probe.$$)"
  rm -f /tmp/pkb-corpus-probe.$$
  exit 77
fi
rm -f /tmp/pkb-corpus-probe.$$
work=$(mktemp -d)
markers=(/tmp/pkb-escape-marker /etc/pkb-escape-marker /usr/pkb-escape-marker
         /root/pkb-escape-marker /var/tmp/pkb-escape-marker /work/pkb-escape-marker)
rm -f "${markers[@]}"
# A listener on the host's loopback that escape_network.cc tries to reach; it counts connections.
python3 - "$work" <<'PY' &
import socket, sys, os
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
open(os.path.join(sys.argv[1], "port"), "w").write(str(s.getsockname()[1]))
while True:
    c, _ = s.accept(); open(os.path.join(sys.argv[1], "connections"), "a").write("x\n"); c.close()
PY
listener=$!
trap 'kill $listener 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
export PKB_TOKEN=corpus-secret-token PKB_ADVERSARIAL_SECRET=corpus-secret

fail=0 n=0
while IFS=$'\t' read -r file backend world want what flags check; do
  [[ -z "$file" || "$file" == \#* ]] && continue
  base=$(basename "$file")
  sed "s/@PORT@/$(cat "$work/port")/g" "$HERE/$file" > "$work/$base"
  extra=()
  [ "$backend" = cpu ] && extra+=(--backend cpu -I "$SRC/tests/engine/cpu_candidates" -I "$HERE")
  [[ "$base" == fork_bomb* || "$base" == *infinite* ]] && extra+=(--timeout 10)
  own=()
  # shellcheck disable=SC2206  # the flags column is a list of words
  [ -n "${flags:-}" ] && [ "$flags" != - ] && own=($flags)
  extra+=(${own[@]+"${own[@]}"})
  t0=$(date +%s.%N)
  # Many timed iterations re-checked (8 of each kind in each of the candidate's 5 rounds), besides
  # each round's last call: the cheats here skip a known share of calls, and the test must not
  # depend on which iterations the random picks hit.
  # As many warm-up calls as timed ones: a cheat that replays what it has seen would meet every
  # timed set in the warm-up if the warm-up shared the timed sets.
  size=(--m 64 --n 64 --warmup 8 --iters 8 --spot-checks 40)
  [ "$backend" = cuda ] && [ "$CORPUS" != "$HERE/corpus.tsv" ] && size=(--warmup 20 --iters 50)
  # An entry's own flags replace the defaults of the same name (pkb-eval takes each once); the
  # defaults are flag-value pairs.
  kept=()
  for ((k = 0; k < ${#size[@]}; k += 2)); do
    [[ " ${own[*]-} " == *" ${size[$k]} "* ]] || kept+=("${size[$k]}" "${size[$((k + 1))]}")
  done
  size=("${kept[@]}")
  keep=()
  if [ -n "${PKB_CORPUS_LOGS:-}" ] && rm -rf "$work/scratch" && mkdir -p "$work/scratch" &&
     chmod 0711 "$work" "$work/scratch"; then
    keep=(--keep-scratch --scratch "$work/scratch")
  fi
  json=$("$EVAL" --json -p 1 -w "$world" "${size[@]}" "${extra[@]}" ${keep[@]+"${keep[@]}"} \
         "$work/$base" 2>"$work/stderr")
  if [ ${#keep[@]} -gt 0 ]; then
    logs="$PKB_CORPUS_LOGS/$((n + 1))-$base-w$world"
    mkdir -p "$logs" && cp "$work/stderr" "$logs/pkb-eval.stderr"
    find "$work/scratch" -type f -name '*.log' -exec cp -P {} "$logs/" \; 2>/dev/null
    rm -rf "$work/scratch"
  fi
  got=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])' <<<"$json" 2>/dev/null)
  msg=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["message"][:160])' <<<"$json" 2>/dev/null)
  secs=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')")
  n=$((n + 1))
  # An entry may add a check on the JSON result (a Python expression over r).
  # `want` may list verdicts that are all right for the entry: MISMATCH|RUNTIME_ERROR.
  [[ -n "$got" && "|$want|" == *"|$got|"* ]] && want=$got
  if [ "$got" = "$want" ] && [ -n "${check:-}" ] &&
     ! python3 -c "import json,sys; r=json.load(sys.stdin); sys.exit(0 if ($check) else 1)" \
       <<<"$json" 2>/dev/null; then
    got="$got, but not: $check"
  fi
  if [ "$got" = "$want" ]; then
    echo "ok   $base -> $got in ${secs} s ($what): $msg"
  else
    echo "FAIL $base -> ${got:-no result} (expected $want; $what): $msg"
    tail -5 "$work/stderr"
    fail=1
  fi
done < "$CORPUS"

for m in "${markers[@]}"; do
  if [ -e "$m" ]; then echo "FAIL escape: $m exists on the host"; fail=1; rm -f "$m"; fi
done
if [ -s "$work/connections" ]; then
  echo "FAIL escape: the host listener saw $(wc -l < "$work/connections") connection(s)"; fail=1
fi
for _ in $(seq 50); do left=$(pgrep -u 65534 -c . 2>/dev/null || true); [ "${left:-0}" = 0 ] && break; sleep 0.1; done
if [ "${left:-0}" != 0 ]; then echo "FAIL $left process(es) of the sandbox uid left"; fail=1; fi
echo "$n entries, $([ $fail = 0 ] && echo 'all as expected' || echo 'some FAILED')"
exit $fail
