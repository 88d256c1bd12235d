#!/usr/bin/env bash
# Builds the SDK's wheel (pkb-client, with the pkb.v1 stubs generated from proto/ and the candidate
# headers inside) into OUT_DIR, from a copy so that the build leaves nothing in the source tree.
# Uses the system's setuptools and grpcio-tools (scripts/install-deps.sh): no download.
# Usage: build_wheel.sh PYTHON OUT_DIR      (PKB_PROTO_DIR: proto/ of the checkout, by default ../../proto)
set -euo pipefail
py=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
export PKB_PROTO_DIR=${PKB_PROTO_DIR:-$here/../../proto}
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$here/pyproject.toml" "$here/setup.py" "$here/README.md" "$here/pkb" "$src/"
rm -rf "$src/pkb/v1" "$src/pkb/data"
find "$src" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$out"
rm -f "$out"/pkb_client-*.whl
"$py" -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$out" "$src"
ls "$out"/pkb_client-*.whl
