#!/usr/bin/env bash
# TEST DOUBLE for pkb-eval (worker/engine): speaks the engine's command-line and --events contract
# (JSON lines of pkb.v1.EvalEvent, DONE last with the EvalResult) without compiling or running
# anything. Used where the real engine is not built. What it answers depends on the source text:
#   FAKE_COMPILE_ERROR  -> COMPILE_ERROR     FAKE_OK -> OK (speedup 1.5)
#   FAKE_HANG           -> sleeps 600 s after COMPILING (for cancel and kill tests)
#   otherwise           -> NO_DEVICE after compiling, like the real engine on a GPU-less node
# FAKE_PKB_EVAL_LOG=file appends one line per evaluation; FAKE_PKB_EVAL_DELAY=seconds per stage.
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
problem="" world="" source="" events=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --problem) problem="$2"; shift 2 ;;
    --world-size) world="$2"; shift 2 ;;
    --source) source="$2"; shift 2 ;;
    --events) events=1; shift ;;
    --*) shift 2 ;;
    *) source="$1"; shift ;;  # the source is positional, as in pkb-eval
  esac
done
[[ -n "$problem" && -n "$world" && -f "$source" && $events == 1 ]] || { echo "fake_pkb_eval: bad usage" >&2; exit 2; }
delay="${FAKE_PKB_EVAL_DELAY:-0.05}"
[[ -n "${FAKE_PKB_EVAL_LOG:-}" ]] && echo "ran problem=$problem world=$world pid=$$" >> "$FAKE_PKB_EVAL_LOG"
seq=0
emit() { seq=$((seq + 1)); echo "{\"sequence\":\"$seq\",$1}"; }
done_with() {
  emit "\"stage\":\"DONE\",\"result\":{\"status\":\"$1\",\"message\":\"$2\",\"problemId\":$problem,\"worldSize\":$world,\"harnessVersion\":\"pkb-harness-1\"$3}"
}
emit '"stage":"COMPILING","message":"nvcc (test double)"'
sleep "$delay"
if grep -q FAKE_COMPILE_ERROR "$source"; then
  done_with COMPILE_ERROR "the candidate does not compile (test double)" ',"compile":{"ok":false,"diagnostics":[{"file":"candidate.cu","line":3,"severity":"error","message":"expected ;"}]}'
  exit 0
fi
if grep -q FAKE_HANG "$source"; then sleep 600; fi
if grep -q FAKE_OK "$source"; then
  for t in 0 1 2 3 4; do emit "\"stage\":\"VERIFYING\",\"trial\":$t,\"trialOk\":true"; sleep "$delay"; done
  emit '"stage":"BENCHMARKING"'
  sleep "$delay"
  done_with OK "correct on every rank; 1.50x faster than the baseline (test double)" ',"speedup":1.5,"problemSlug":"1_allreduce","candidate":{"medianUs":10},"baseline":{"medianUs":15}'
  exit 0
fi
done_with NO_DEVICE "compiled; this node has no GPU, so nothing ran (test double)" ',"compile":{"ok":true}'
