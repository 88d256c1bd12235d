#!/usr/bin/env bash
# deploy/ checked without a cluster: the Helm chart lints, renders for each supported setup and
# its manifests validate against the Kubernetes API schemas (kubernetes-validate --strict);
# wrong values are refused with their reason; the systemd units pass systemd-analyze verify; the
# Slurm script passes shellcheck.
#   deploy_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
SRC=${1:?usage: deploy_test.sh SOURCE_DIR BUILD_DIR}
BUILD=${2:?usage: deploy_test.sh SOURCE_DIR BUILD_DIR}
CHART=$SRC/deploy/helm/pkb
for tool in helm kubernetes-validate shellcheck systemd-analyze; do
  command -v "$tool" >/dev/null || { echo "FAILED: $tool is not installed (scripts/install-deps.sh)"; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

pem=(--set-string tls.cert=CERT --set-string tls.key=KEY)
declare -A setups=(
  [sqlite-tls]="${pem[*]}"
  [postgresql-tokens-seed-monitor]="${pem[*]} --set store.type=postgresql --set store.postgresql.existingSecret=pkb-pg --set-string auth.tokens=TOKENS --set-string auth.workerToken=W --set-string secretSeed.value=S --set serviceMonitor.enabled=true"
  [existing-secrets]="--set tls.existingSecret=pkb-tls --set auth.existingSecret=pkb-tokens --set secretSeed.existingSecret=pkb-seed --set store.sqlite.existingClaim=pkb-store"
  [plaintext-no-workers]="--set tls.enabled=false --set worker.enabled=false"
)
if helm lint "$CHART" --strict "${pem[@]}" >"$work/lint" 2>&1; then ok "helm lint --strict"; else bad "helm lint"; cat "$work/lint"; fi
for name in "${!setups[@]}"; do
  # shellcheck disable=SC2086 # the flags are words on purpose
  if ! helm template pkb "$CHART" ${setups[$name]} >"$work/$name.yaml" 2>"$work/$name.err"; then
    bad "render $name: $(cat "$work/$name.err")"; continue
  fi
  if kubernetes-validate --strict --quiet "$work/$name.yaml" >"$work/$name.val" 2>&1; then
    ok "render + validate $name ($(grep -c '^kind:' "$work/$name.yaml") objects)"
  else
    bad "validate $name"; cat "$work/$name.val"
  fi
done
# What the chart promises, in the rendered manifests.
m=$work/postgresql-tokens-seed-monitor.yaml
expect() { if grep -qE -- "$2" "$3"; then ok "$1"; else bad "$1: no /$2/ in $(basename "$3")"; fi; }
expect "coordinator updates by Recreate (one scheduler per store)" "type: Recreate" "$m"
expect "workers ask for every GPU of the node" "nvidia.com/gpu: 8" "$m"
expect "workers only on NVIDIA nodes" "key: nvidia.com/gpu.present" "$m"
expect "workers tolerate the GPU taint" "key: nvidia.com/gpu$" "$m"
expect "workers update one node at a time" "maxUnavailable: 1" "$m"
expect "PostgreSQL URI from its Secret" "name: pkb-pg" "$m"
expect "PostgreSQL URI in the environment, not the command line" "name: PKB_COORDINATOR_STORE" "$m"
if grep -q -- "--store" "$m"; then bad "a --store flag rendered for PostgreSQL"; else ok "no store flag on the PostgreSQL command line"; fi
expect "ServiceMonitor rendered" "kind: ServiceMonitor" "$m"
expect "with tokens, workers register under the worker token's name" "--worker-id=worker-pool/\\\$\\(NODE_NAME\\)" "$m"
expect "TLS probes use /healthz" "path: /healthz" "$m"
expect "plaintext coordinator probes speak gRPC health" "grpc:" "$work/plaintext-no-workers.yaml"
if grep -q "kind: DaemonSet" "$work/plaintext-no-workers.yaml"; then bad "worker.enabled=false still renders workers"; else ok "worker.enabled=false renders no workers"; fi
# Refusals, each with its reason.
refuse() {
  local what=$1 want=$2; shift 2
  if helm template pkb "$CHART" "$@" >/dev/null 2>"$work/err"; then bad "$what: rendered"
  elif grep -q -- "$want" "$work/err"; then ok "$what refused"
  else bad "$what: refused without '$want': $(cat "$work/err")"; fi
}
refuse "TLS without a certificate" "tls.enabled needs" 
refuse "PostgreSQL without its Secret" "needs store.postgresql.existingSecret" "${pem[@]}" --set store.type=postgresql
refuse "a misspelt key" "Additional property grpcPrt" "${pem[@]}" --set coordinator.grpcPrt=1
refuse "an unknown store" "store.type" "${pem[@]}" --set store.type=mysql
refuse "a port out of range" "grpcPort" "${pem[@]}" --set coordinator.grpcPort=70000
# systemd units, with ExecStart pointed at the binaries of this build.
for unit in "$SRC"/deploy/systemd/*.service; do
  sed -e "s|/usr/lib/pkb/pkb-coordinator|$BUILD/server/pkb-coordinator|" \
      -e "s|/usr/lib/pkb/pkb-worker|$BUILD/worker/daemon/pkb-worker|" "$unit" >"$work/$(basename "$unit")"
  for key in "Type=notify" "KillMode=process" "LimitMEMLOCK=infinity"; do
    grep -qx "$key" "$unit" || bad "$(basename "$unit") lacks $key"
  done
  if systemd-analyze verify "$work/$(basename "$unit")" >"$work/verify" 2>&1; then
    ok "systemd-analyze verify $(basename "$unit")"
  else
    bad "systemd-analyze verify $(basename "$unit")"; cat "$work/verify"
  fi
done
if shellcheck -x "$SRC"/deploy/slurm/*.sbatch "$SRC"/tests/deploy/*.sh; then ok "shellcheck deploy/slurm"; else bad "shellcheck"; fi
usage=$(bash "$SRC/deploy/slurm/pkb-workers.sbatch" 2>&1)
if [[ "$usage" == *"usage:"* ]]; then ok "Slurm script without a coordinator prints its usage"; else bad "Slurm script usage"; fi
exit $fail
