#!/usr/bin/env bash
# TEST DOUBLE for pkb-eval (worker/engine): speaks the engine's command-line (--spec, --job-key, or
# the flags) and --events contract
# (JSON lines of pkb.v1.EvalEvent, DONE last with the EvalResult) without compiling or running
# anything. Used where the real engine is not built. What it answers depends on the source text:
#   FAKE_COMPILE_ERROR  -> COMPILE_ERROR     FAKE_OK -> OK (speedup 1.5, or FAKE_SPEEDUP=x; the
#                          baseline 15 us per call, the roofline floor 5 us)
#   FAKE_REJECT         -> REJECTED          FAKE_SECRET_MISMATCH -> MISMATCH with --set-offset
#   FAKE_HANG           -> sleeps 600 s after COMPILING (for cancel and kill tests)
#   FAKE_MISMATCH       -> MISMATCH on rank 1, trial 2
#   FAKE_HARDCODED_M=k  -> MISMATCH when the spec's m is not k (a candidate tuned for one shape)
#   FAKE_LINGER=s       -> with FAKE_OK or FAKE_MISMATCH: the engine ends s seconds after its
#                          verdict (its ranks' teardown), then logs "ended"
#   FAKE_CRASH          -> the engine dies mid-run without a verdict, by SIGSEGV (FAKE_CRASH=exit:
#                          exit status 3); the worker reports INTERNAL
#   otherwise           -> NO_DEVICE after compiling, like the real engine on a GPU-less node
# With --compile-only (a compile task): FAKE_COMPILE_ERROR -> COMPILE_ERROR, FAKE_REJECT ->
# REJECTED with a policy finding, FAKE_HANG -> sleeps 600 s, otherwise COMPILED; not logged.
# FAKE_LEAKY_MESSAGE anywhere in the source: the source's line holding it is echoed, as a compiler
# or a candidate's own error would echo it, into every free-text field (event messages, the
# verdict's message, compile command/log/diagnostics, rank errors, output problems, the failing
# rank's log, a stage name), whatever the verdict; for the web board's leak tests.
# FAKE_PKB_EVAL_LOG=file appends one line per evaluation (with the source's file name); FAKE_PKB_EVAL_DELAY=seconds per stage,
# or FAKE_DELAY=seconds in the source for that source alone; FAKE_COMPILE_DELAY=seconds in the
# source: a compile task (--compile-only) of it takes that long more; FAKE_COMPILE_CACHE_HIT: its
# report says it came from the compile cache. FAKE_SPEEDUP_FACTOR=x (environment)
# multiplies every OK speedup: a node that times slower, for the confirmation-run tests.
# Like pkb-eval, it does not outlive the worker that started it: the worker's pdeathsig covers it
# once set, and it checks its parent between stages for the moment before that (a kill -9 of the
# worker right after its fork), so a chaos test finds no stray engine.
set -euo pipefail
if [[ "${1:-}" == "--gpu-selftest" ]]; then exit 0; fi
if [[ "${1:-}" == "--catalog" ]]; then
  cat <<'JSON'
{"problems":[{"id":1,"slug":"1_allreduce","version":1,"origin":"test double","category":"collective",
"statement":"All-reduce (sum) of a bf16 tensor across ranks.","defaultM":8192,"defaultN":8192,
"defaultDtype":"bfloat16","candidateApiVersion":1,"isCollective":true,"busbwFactor":1.75,
"sources":[{"path":"problems/collectives/p001_allreduce.cc","text":"// the test double's problem 1"}],
"tolerances":[{"output":"out","atol":0.01,"rtol":0.01,"rationale":"bf16 sum of W terms"}],
"layouts":[{"worldSize":1,"supported":true},{"worldSize":2,"supported":true,
"ranks":[{"inputs":[{"name":"x","shape":["8192","8192"],"dtype":"bfloat16","note":"filled with rank + 1"}],
"scalars":[{"name":"scale","kind":"float","value":0.5},{"name":"chunks","kind":"int","value":4}],
"outputs":[{"name":"out","shape":["8192","8192"],"dtype":"bfloat16"}]}],
"groups":[{"name":"world","partition":[{"ranks":[0,1]}]}],"nvlinkBytes":134217728,"hbmBytes":402653184},
{"worldSize":3,"supported":false,"unsupportedReason":"m must divide by the world size"},
{"worldSize":4,"supported":true},{"worldSize":8,"supported":true}]},
{"id":2,"slug":"2_allgather","version":3,"origin":"test double","category":"collective",
"statement":"All-gather.","defaultM":4096,"defaultN":1024,"defaultDtype":"bfloat16",
"layouts":[{"worldSize":2,"supported":true,"rankedShapes":{"mMin":"2048","mMax":"8192",
"mStep":"1024","nMin":"1024","nMax":"1024","nStep":"1"}},{"worldSize":8,"supported":true}]}]}
JSON
  exit 0
fi
# --standby W:BACKEND [--job-from FIFO] (the worker's engine started ahead of its job): the job's
# arguments come later, one line of a JSON array of strings; then it runs them as if they had
# followed the others, and its log line says "standby=W:BACKEND".
standby="" job_from="-" rest=() settle="" max_age=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --standby) standby="$2"; shift 2 ;;
    --job-from) job_from="$2"; shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
if [[ -n "$standby" ]]; then
  if [[ "$job_from" == "-" ]]; then IFS= read -r line; else IFS= read -r line < "$job_from"; fi
  mapfile -d '' job < <(python3 -c 'import json, sys
for a in json.loads(sys.argv[1]): sys.stdout.write(a + "\0")' "$line")
  FAKE_STANDBY="$standby" exec "$0" "${rest[@]}" "${job[@]}"
fi
set -- "${rest[@]}"
problem="" world="" source="" events=0 offset=0 dtype=bfloat16 spec="" job_key="" compile_only=0 gpus="" quiet=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --problem) problem="$2"; shift 2 ;;
    --world-size) world="$2"; shift 2 ;;
    --source) source="$2"; shift 2 ;;
    --spec) spec="$2"; shift 2 ;;
    --job-key) job_key="$2"; shift 2 ;;
    --events) events=1; shift ;;
    --functional) shift ;;  # flags without a value
    --compile-only) compile_only=1; shift ;;
    --set-offset) offset="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --settle-baseline=*) settle="${1#*=}"; shift ;;
    --baseline-max-age-hours=*) max_age="${1#*=}"; shift ;;
    --gpus=*) gpus="${1#*=}"; shift ;;
    --quiet-from) quiet="$2"; shift 2 ;;
    --*=*) shift ;;  # --flag=value
    --*) shift 2 ;;
    *) source="$1"; shift ;;  # the source is positional, as in pkb-eval
  esac
done
# The job's spec as the worker writes it (text format, pkb.v1.EvalSpec): its fields win over flags.
spec_field() { sed -n "s/^$1: \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$spec" | head -1; }
if [[ -n "$spec" ]]; then
  [[ -f "$spec" ]] || { echo "fake_pkb_eval: no spec file $spec" >&2; exit 2; }
  problem=$(spec_field problem_id) world=$(spec_field world_size)
  offset=$(spec_field set_offset) dtype=$(spec_field dtype)
  offset=${offset:-0} dtype=${dtype:-bfloat16}
  m=$(spec_field m) n=$(spec_field n)
fi
m=${m:-} n=${n:-}
[[ -n "$problem" && -n "$world" && -f "$source" && $events == 1 ]] || { echo "fake_pkb_eval: bad usage" >&2; exit 2; }
# --quiet-from FIFO: listening from the start (read-write, so the open does not wait), the word
# ("quiet N") is read after BENCHMARKING, 2 s at most, and N reported as compilesBeside (-1: none).
[[ -n "$quiet" ]] && exec 9<>"$quiet"
beside=0
delay="${FAKE_PKB_EVAL_DELAY:-0.05}"
own_delay=$(grep -o 'FAKE_DELAY=[0-9.]*' "$source" | head -1 | cut -d= -f2 || true)
delay=${own_delay:-$delay}
parent=$PPID
# Sleeps $1 seconds in steps of at most 0.2 s; leaves when the worker that started it has gone.
pause() {
  local left_ms step_ms stat
  left_ms=$(awk -v s="$1" 'BEGIN { printf "%d", s * 1000 }')
  while ((left_ms > 0)); do
    step_ms=$((left_ms < 200 ? left_ms : 200))
    sleep "$((step_ms / 1000)).$(printf %03d $((step_ms % 1000)))"
    left_ms=$((left_ms - step_ms))
    read -r -a stat < /proc/$$/stat
    [[ "${stat[3]}" == "$parent" ]] || exit 1
  done
}
[[ -n "${FAKE_PKB_EVAL_LOG:-}" && $compile_only == 0 ]] && echo "ran problem=$problem world=$world offset=$offset m=$m n=$n pid=$$${FAKE_STANDBY:+ standby=$FAKE_STANDBY}${settle:+ settle=$settle}${max_age:+ max_age=$max_age}${gpus:+ gpus=$gpus} source=$(basename "$source")" >> "$FAKE_PKB_EVAL_LOG"
seq=0
leak=""
if grep -q FAKE_LEAKY_MESSAGE "$source"; then
  leak=$(grep -m1 FAKE_LEAKY_MESSAGE "$source" | tr -d '"\\' | tr -d '\000-\037')
fi
# The lease's key, reported as the engine reports it (a leak test puts its own text there).
key_field=""; [[ -n "$job_key" && -z "$leak" ]] && key_field=",\"jobKey\":\"$job_key\""
emit() { seq=$((seq + 1)); echo "{\"sequence\":\"$seq\",$1}"; }
# A message, with the leaked line when there is one.
say() { if [[ -n "$leak" ]]; then echo "$1: $leak"; else echo "$1"; fi; }
# The compile report: $1 ok (true/false), $2 more fields of it.
compile_report() {
  if [[ -n "$leak" ]]; then
    echo ",\"compile\":{\"ok\":$1,\"command\":\"nvcc $leak\",\"log\":\"candidate.cu:1: $leak\",\"diagnostics\":[{\"file\":\"candidate.cu\",\"line\":1,\"severity\":\"error\",\"message\":\"$leak\"}]}"
  else
    echo ",\"compile\":{\"ok\":$1$2}"
  fi
}
# Rank trials: $1 ok (true/false); only for a mismatch or a leak.
rank_trials() {
  local error="" problem=""
  if [[ -n "$leak" ]]; then error=",\"error\":\"$leak\""; problem=",\"problem\":\"$leak\""; fi
  echo ",\"rankTrials\":[{\"rank\":1,\"trial\":2,\"ok\":$1$error,\"outputs\":[{\"index\":0,\"name\":\"out\",\"ok\":$1$problem,\"maxAbsError\":0.5,\"badCount\":3,\"numel\":16}]}]"
}
leak_fields() {
  if [[ -n "$leak" ]]; then echo ",\"failedRankLog\":\"rank 1 stderr: $leak\",\"jobKey\":\"$leak\"$(rank_trials false)"; fi
}
done_with() {
  local said=""
  [[ -n "$leak" ]] && said=",\"message\":\"$(say done)\""
  emit "\"stage\":\"DONE\"$said,\"result\":{\"status\":\"$1\",\"message\":\"$(say "$2")\",\"problemId\":$problem,\"worldSize\":$world,\"dtype\":\"$dtype\",\"harnessVersion\":\"pkb-harness-6\"$key_field$3}"
}
# FAKE_LINGER=s: the engine ends s seconds after its verdict, as the real one does while its rank
# processes end; the log says when.
linger_after_verdict() {
  local linger
  linger=$(grep -o 'FAKE_LINGER=[0-9.]*' "$source" | head -1 | cut -d= -f2 || true)
  if [[ -n "$linger" ]]; then
    pause "$linger"
    [[ -n "${FAKE_PKB_EVAL_LOG:-}" ]] && echo "ended pid=$$ source=$(basename "$source")" >> "$FAKE_PKB_EVAL_LOG"
  fi
  return 0
}
emit "\"stage\":\"COMPILING\",\"message\":\"$(say "nvcc (test double)")\""
pause "$delay"
if grep -q FAKE_COMPILE_ERROR "$source"; then
  done_with COMPILE_ERROR "the candidate does not compile (test double)" "$(compile_report false ',"diagnostics":[{"file":"candidate.cu","line":3,"severity":"error","message":"expected ;"}]')$(leak_fields)"
  exit 0
fi
if grep -q FAKE_HANG "$source"; then pause 600; fi
if [[ $compile_only == 1 ]]; then
  compile_delay=$(grep -o 'FAKE_COMPILE_DELAY=[0-9.]*' "$source" | head -1 | cut -d= -f2 || true)
  [[ -n "$compile_delay" ]] && pause "$compile_delay"
  if grep -q FAKE_REJECT "$source"; then
    done_with REJECTED "the source breaks 1 rule(s) of the candidate policy (test double)" ',"policyFindings":[{"file":"candidate.cu","line":2,"severity":"error","message":"[environment] (test double)"}]'
  else
    hit=""
    grep -q FAKE_COMPILE_CACHE_HIT "$source" && hit=',"cacheHit":true'
    done_with COMPILED "compiled candidate.cu in 0.10 s with 0 warning(s); nothing was run (compile only, test double)" "$(compile_report true ",\"command\":\"nvcc (test double)\"$hit")"
  fi
  exit 0
fi
if grep -q FAKE_CRASH "$source"; then
  emit '"stage":"VERIFYING","trial":0,"trialOk":true'
  pause "$delay"
  grep -q FAKE_CRASH=exit "$source" && exit 3
  ulimit -c 0
  kill -SEGV $$
fi
if grep -q FAKE_REJECT "$source"; then
  done_with REJECTED "timed work escaped the window (test double)" "$(leak_fields)"
  exit 0
fi
if grep -q FAKE_SECRET_MISMATCH "$source" && [[ "$offset" != 0 ]]; then
  done_with MISMATCH "wrong on the secret inputs (test double)" "$(leak_fields)"
  exit 0
fi
if grep -q FAKE_MISMATCH "$source"; then
  emit '"stage":"VERIFYING","trial":0,"trialOk":true'
  pause "$delay"
  emit "\"stage\":\"VERIFYING\",\"trial\":2,\"trialOk\":false,\"message\":\"$(say "rank 1 wrong")\""
  extra=""; [[ -n "$leak" ]] && extra=",\"failedRankLog\":\"rank 1 stderr: $leak\""
  done_with MISMATCH "rank 1 is wrong (test double)" "$(compile_report true '')$(rank_trials false)$extra"
  linger_after_verdict
  exit 0
fi
# A candidate that hard-codes M: wrong at any other shape (what shape runs catch).
hard_m=$(grep -o 'FAKE_HARDCODED_M=[0-9]*' "$source" | head -1 | cut -d= -f2 || true)
if [[ -n "$hard_m" && -n "$m" && "$m" != "$hard_m" ]]; then
  done_with MISMATCH "M is hard-coded to $hard_m, the job's is $m (test double)" "$(leak_fields)"
  exit 0
fi
if grep -q FAKE_OK "$source"; then
  speedup=$(grep -o 'FAKE_SPEEDUP=[0-9.]*' "$source" | head -1 | cut -d= -f2 || true)
  speedup=${speedup:-1.5}
  if [[ -n "${FAKE_SPEEDUP_FACTOR:-}" ]]; then
    speedup=$(awk -v s="$speedup" -v f="$FAKE_SPEEDUP_FACTOR" 'BEGIN { printf "%.6g", s * f }')
  fi
  cand=$(awk -v s="$speedup" 'BEGIN { printf "%.6g", 15 / s }')
  pct=$(awk -v s="$speedup" 'BEGIN { printf "%.6g", 100 * 5 * s / 15 }')
  trial_msg=""; [[ -n "$leak" ]] && trial_msg=",\"message\":\"$(say ok)\""
  for t in 0 1 2 3 4; do emit "\"stage\":\"VERIFYING\",\"trial\":$t,\"trialOk\":true$trial_msg"; pause "$delay"; done
  emit "\"stage\":\"BENCHMARKING\"$trial_msg"
  if [[ -n "$quiet" ]]; then
    beside=-1
    if read -r -t 2 -u 9 word; then [[ "$word" =~ ^quiet\ ([0-9]+)$ ]] && beside=${BASH_REMATCH[1]}; fi
  fi
  pause "$delay"
  slug=1_allreduce; [[ "$problem" == 2 ]] && slug=2_allgather
  stages="\"compile\":0.1,\"verify\":0.2,\"benchmark\":0.2"
  extra=""
  if [[ -n "$leak" ]]; then
    stages="$stages,\"$leak\":1"
    extra="$(compile_report true '')$(rank_trials true),\"failedRankLog\":\"$leak\",\"jobKey\":\"$leak\""
  fi
  # One profiled call of each side; the candidate's kernel is named from the source (as a real
  # one would be) where it leaks.
  kname="fake_kernel"; [[ -n "$leak" ]] && kname="$leak"
  profile="\"profiles\":[{\"candidate\":{\"records\":[{\"kind\":\"KERNEL\",\"name\":\"$kname\",\"startUs\":0,\"durationUs\":$cand,\"grid\":[132,1,1],\"block\":[512,1,1]},{\"kind\":\"MEMCPY\",\"name\":\"copy peer to peer\",\"startUs\":1,\"durationUs\":2,\"bytes\":4096,\"stream\":7}],\"spanUs\":$cand,\"busyUs\":$cand},\"reference\":{\"records\":[{\"kind\":\"KERNEL\",\"name\":\"ncclDevKernel_AllReduce_Sum_bf16_RING_LL\",\"startUs\":0,\"durationUs\":12,\"grid\":[2,1,1],\"block\":[640,1,1]}],\"spanUs\":15,\"busyUs\":12}}],"
  done_with OK "correct on every rank; ${speedup}x faster than the baseline (test double)" ",$profile\"speedup\":$speedup,\"problemSlug\":\"$slug\",\"gpu\":\"test double\",\"candidate\":{\"medianUs\":$cand,\"wallPerIterUs\":$cand,\"perRankMedianUs\":[$cand,$cand]},\"baseline\":{\"medianUs\":15,\"wallPerIterUs\":15},\"roofline\":{\"floorUs\":5,\"percentOfRoofline\":$pct},\"totalSeconds\":0.5,\"compilesBeside\":$beside,\"stageSeconds\":{$stages}$extra"
  linger_after_verdict
  exit 0
fi
done_with NO_DEVICE "compiled; this node has no GPU, so nothing ran (test double)" "$(compile_report true '')$(leak_fields)"
