#!/usr/bin/env bash
# What operations relies on, end to end with the real binaries on loopback:
#  - --help on every binary; --print-config; flags > environment > config file;
#  - systemd readiness: READY=1 reaches $NOTIFY_SOCKET from the coordinator and the worker;
#  - Prometheus metrics scraped over HTTP from both while a job runs through (the engine is the
#    test double tests/service/fake_pkb_eval.sh: this is about the service, not evaluation),
#    names and labels following Prometheus conventions, no job id in any label; /healthz.
#   ops_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
BUILD=${1:?usage: ops_test.sh BUILD_DIR SOURCE_DIR}
SRC=${2:?usage: ops_test.sh BUILD_DIR SOURCE_DIR}
COORD=$BUILD/server/pkb-coordinator WORKER=$BUILD/worker/daemon/pkb-worker CLI=$BUILD/client/pkb
FAKE=$SRC/tests/service/fake_pkb_eval.sh
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 200); do eval "$1" && return 0; sleep 0.05; done; return 1; }

# --help everywhere.
for b in "$COORD" "$WORKER" "$CLI" "$BUILD/worker/engine/pkb-eval"; do
  [ -x "$b" ] || continue
  if "$b" --help >"$work/help" 2>&1 && grep -q -- "--" "$work/help"; then ok "$(basename "$b") --help"
  else bad "$(basename "$b") --help"; fi
done

# Configuration precedence, read back with --print-config.
cat >"$work/coordinator.toml" <<TOML
listen = "127.0.0.1:1111"
submit-rate = 3
job-deadline = 77
TOML
printed=$(PKB_COORDINATOR_SUBMIT_RATE=5 "$COORD" --config "$work/coordinator.toml" --job-deadline 99 --print-config)
grep -q 'listen="127.0.0.1:1111"\|listen = "127.0.0.1:1111"' <<<"$printed" && ok "config file value used" || bad "config file value: $printed"
grep -Eq 'submit-rate ?= ?5' <<<"$printed" && ok "environment beats the file" || bad "environment over file: $(grep submit-rate <<<"$printed")"
grep -Eq 'job-deadline ?= ?99' <<<"$printed" && ok "flag beats the file" || bad "flag over file: $(grep job-deadline <<<"$printed")"
if PKB_COORDINATOR_CONFIG="$work/coordinator.toml" "$COORD" --print-config | grep -Eq 'submit-rate ?= ?3'; then
  ok "PKB_COORDINATOR_CONFIG names the file"; else bad "PKB_COORDINATOR_CONFIG"; fi
echo 'lisen = "x"' >"$work/typo.toml"
if "$COORD" --config "$work/typo.toml" --print-config >"$work/typo.out" 2>&1; then bad "unknown key accepted"
else grep -q "lisen" "$work/typo.out" && ok "unknown config key refused, named" || bad "typo message: $(cat "$work/typo.out")"; fi

# A notify socket standing in for systemd: records every datagram.
python3 - "$work/notify.sock" "$work/notify.log" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(sys.argv[1])
while True:
    msg, _ = s.recvfrom(4096)
    with open(sys.argv[2], "a") as f: f.write(msg.decode() + "\n")
PY
pids+=($!)
wait_for "[ -S $work/notify.sock ]" || bad "notify socket"

port=$(free_port) cmetrics=$(free_port) wmetrics=$(free_port)
NOTIFY_SOCKET=$work/notify.sock PKB_COORDINATOR_METRICS_LISTEN=127.0.0.1:$cmetrics \
  "$COORD" --listen "127.0.0.1:$port" --db "$work/jobs.db" --engine "$FAKE" \
  --heartbeat-interval 0.2 >"$work/coordinator.log" 2>&1 &
pids+=($!)
wait_for "curl -sf http://127.0.0.1:$cmetrics/healthz >/dev/null" && ok "coordinator /healthz 200" || bad "coordinator /healthz"
wait_for "grep -q READY=1 $work/notify.log 2>/dev/null" && ok "coordinator READY=1" || bad "coordinator READY=1"
: >"$work/notify.log"
NOTIFY_SOCKET=$work/notify.sock "$WORKER" --coordinator "127.0.0.1:$port" --worker-id w1 \
  --engine "$FAKE" --scratch "$work" --gpu-class cpu --metrics-listen "127.0.0.1:$wmetrics" \
  >"$work/worker.log" 2>&1 &
pids+=($!)
wait_for "grep -q READY=1 $work/notify.log 2>/dev/null" && ok "worker READY=1 once registered" || bad "worker READY=1"
printf '// FAKE_OK\n' >"$work/k.cu"
"$CLI" --coordinator "127.0.0.1:$port" submit "$work/k.cu" --problem 1 --world-size 2 >"$work/submit.log" 2>&1 \
  && ok "job submitted and finished" || bad "submit: $(tail -3 "$work/submit.log")"
"$CLI" --coordinator "127.0.0.1:$port" submit "$work/k.cu" --problem 1 --world-size 2 >/dev/null 2>&1  # a cache hit
# The OK job's confirmation run (the service times a ranked result again, queued before its DONE)
# and whatever follows it: the coordinator is quiet once none is queued or running.
c=$work/coordinator.prom w=$work/worker.prom
wait_for "curl -sf http://127.0.0.1:$cmetrics/metrics >$c && grep -q '^pkb_queue_depth 0' $c && grep -q '^pkb_jobs_running 0' $c" \
  && ok "coordinator quiet (queue depth gauge 0)" || bad "coordinator not quiet: $(grep -E '^pkb_(queue_depth|jobs_running)' "$c")"
finished=$(sed -n 's/^pkb_jobs_finished_total{cached="false",status="OK"} \([0-9]*\)$/\1/p' "$c")
wait_for "curl -sf http://127.0.0.1:$wmetrics/metrics >$w && grep -q 'pkb_worker_jobs_total{status=\"OK\"} ${finished:-x}\$' $w" \
  && ok "worker counted its jobs (${finished:-none}: the job and its confirmation run)" \
  || bad "worker /metrics: $(grep jobs_total "$w"), coordinator: ${finished:-none} finished OK"
expect() { if grep -Eq -- "$2" "$3"; then ok "$1"; else bad "$1: no /$2/ in $(basename "$3")"; fi; }
expect "new job counted" 'pkb_jobs_submitted_total\{outcome="new"\} 1' "$c"
expect "cache hit counted" 'pkb_jobs_submitted_total\{outcome="cached"\} 1' "$c"
expect "confirmation run counted" 'pkb_jobs_submitted_total\{outcome="confirmation"\} 1' "$c"
[ "${finished:-0}" -ge 2 ] && ok "verdicts by status (the job and its confirmation run OK)" \
  || bad "verdicts by status: ${finished:-none} OK, not cached"
expect "job duration histogram" "^pkb_job_duration_seconds_count ${finished:-x}\$" "$c"
expect "workers connected" '^pkb_workers_connected 1' "$c"
expect "worker connected gauge" '^pkb_worker_connected 1' "$w"
expect "worker GPU health gauge" '^pkb_worker_gpu_healthy 1' "$w"
expect "worker info" 'pkb_worker_info\{gpu_class="cpu"' "$w"
# Conventions: every sample named pkb_*; counters end in _total; no job id in labels.
if grep -v '^#' "$c" "$w" | cut -d: -f2- | grep -Ev '^pkb_[a-z_]+(\{[^}]*\})? ' | grep -q .; then
  bad "a sample outside pkb_[a-z_]"; else ok "sample names follow pkb_[a-z_]+"; fi
if grep -h '^# TYPE .* counter' "$c" "$w" | grep -v '_total counter' | grep -q .; then bad "counter without _total"
else ok "counters end in _total"; fi
if grep -h 'j[0-9a-f]\{6,\}-' "$c" "$w" | grep -q .; then bad "a job id in the metrics"; else ok "no job id in any label"; fi
exit $fail
