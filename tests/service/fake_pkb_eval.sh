#!/usr/bin/env bash
# TEST DOUBLE for pkb-eval (worker/engine): speaks the engine's command-line and --events contract
# (JSON lines of pkb.v1.EvalEvent, DONE last with the EvalResult) without compiling or running
# anything. Used where the real engine is not built. What it answers depends on the source text:
#   FAKE_COMPILE_ERROR  -> COMPILE_ERROR     FAKE_OK -> OK (speedup 1.5, or FAKE_SPEEDUP=x)
#   FAKE_REJECT         -> REJECTED          FAKE_SECRET_MISMATCH -> MISMATCH with --set-offset
#   FAKE_HANG           -> sleeps 600 s after COMPILING (for cancel and kill tests)
#   otherwise           -> NO_DEVICE after compiling, like the real engine on a GPU-less node
# FAKE_PKB_EVAL_LOG=file appends one line per evaluation (with the source's file name); FAKE_PKB_EVAL_DELAY=seconds per stage.
set -euo pipefail
if [[ "${1:-}" == "--catalog" ]]; then
  cat <<'JSON'
{"problems":[{"id":1,"slug":"1_allreduce","version":1,"origin":"test double","category":"collective",
"statement":"All-reduce (sum) of a bf16 tensor across ranks.","defaultM":8192,"defaultN":8192,
"defaultDtype":"bfloat16","candidateApiVersion":1,"isCollective":true,"busbwFactor":1.75,
"layouts":[{"worldSize":1,"supported":true},{"worldSize":2,"supported":true},
{"worldSize":3,"supported":false,"unsupportedReason":"m must divide by the world size"},
{"worldSize":4,"supported":true},{"worldSize":8,"supported":true}]},
{"id":2,"slug":"2_allgather","version":3,"origin":"test double","category":"collective",
"statement":"All-gather.","defaultM":4096,"defaultN":1024,"defaultDtype":"bfloat16",
"layouts":[{"worldSize":2,"supported":true},{"worldSize":8,"supported":true}]}]}
JSON
  exit 0
fi
problem="" world="" source="" events=0 offset=0 dtype=bfloat16
while [[ $# -gt 0 ]]; do
  case "$1" in
    --problem) problem="$2"; shift 2 ;;
    --world-size) world="$2"; shift 2 ;;
    --source) source="$2"; shift 2 ;;
    --events) events=1; shift ;;
    --set-offset) offset="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --*) shift 2 ;;
    *) source="$1"; shift ;;  # the source is positional, as in pkb-eval
  esac
done
[[ -n "$problem" && -n "$world" && -f "$source" && $events == 1 ]] || { echo "fake_pkb_eval: bad usage" >&2; exit 2; }
delay="${FAKE_PKB_EVAL_DELAY:-0.05}"
[[ -n "${FAKE_PKB_EVAL_LOG:-}" ]] && echo "ran problem=$problem world=$world offset=$offset pid=$$ source=$(basename "$source")" >> "$FAKE_PKB_EVAL_LOG"
seq=0
emit() { seq=$((seq + 1)); echo "{\"sequence\":\"$seq\",$1}"; }
done_with() {
  emit "\"stage\":\"DONE\",\"result\":{\"status\":\"$1\",\"message\":\"$2\",\"problemId\":$problem,\"worldSize\":$world,\"dtype\":\"$dtype\",\"harnessVersion\":\"pkb-harness-2\"$3}"
}
emit '"stage":"COMPILING","message":"nvcc (test double)"'
sleep "$delay"
if grep -q FAKE_COMPILE_ERROR "$source"; then
  done_with COMPILE_ERROR "the candidate does not compile (test double)" ',"compile":{"ok":false,"diagnostics":[{"file":"candidate.cu","line":3,"severity":"error","message":"expected ;"}]}'
  exit 0
fi
if grep -q FAKE_HANG "$source"; then sleep 600; fi
if grep -q FAKE_REJECT "$source"; then
  done_with REJECTED "timed work escaped the window (test double)" ''
  exit 0
fi
if grep -q FAKE_SECRET_MISMATCH "$source" && [[ "$offset" != 0 ]]; then
  done_with MISMATCH "wrong on the secret inputs (test double)" ''
  exit 0
fi
if grep -q FAKE_OK "$source"; then
  speedup=$(grep -o 'FAKE_SPEEDUP=[0-9.]*' "$source" | head -1 | cut -d= -f2 || true)
  speedup=${speedup:-1.5}
  cand=$(awk -v s="$speedup" 'BEGIN { printf "%.6g", 15 / s }')
  for t in 0 1 2 3 4; do emit "\"stage\":\"VERIFYING\",\"trial\":$t,\"trialOk\":true"; sleep "$delay"; done
  emit '"stage":"BENCHMARKING"'
  sleep "$delay"
  slug=1_allreduce; [[ "$problem" == 2 ]] && slug=2_allgather
  done_with OK "correct on every rank; ${speedup}x faster than the baseline (test double)" ",\"speedup\":$speedup,\"problemSlug\":\"$slug\",\"gpu\":\"test double\",\"candidate\":{\"medianUs\":$cand},\"baseline\":{\"medianUs\":15},\"totalSeconds\":0.5,\"stageSeconds\":{\"compile\":0.1,\"verify\":0.2,\"benchmark\":0.2}"
  exit 0
fi
done_with NO_DEVICE "compiled; this node has no GPU, so nothing ran (test double)" ',"compile":{"ok":true}'
