#!/usr/bin/env bash
# Installs the SDK the way a user does, from its wheel (PKB_WHEEL: the build's, from
# client/python/CMakeLists.txt; else one built here by build_wheel.sh) into a throwaway folder, then
# runs its pytest suite with that folder first on the path. No download: the system's setuptools,
# grpcio-tools, mcp and pytest (scripts/install-deps.sh).
# Usage: run_tests.sh PYTHON INSTALL_DIR [pytest args]
set -euo pipefail
py=$1 target=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
export PKB_PROTO_DIR=${PKB_PROTO_DIR:-$here/../../proto}
rm -rf "$target"
if [[ -z "${PKB_WHEEL:-}" ]]; then
  dist=$(mktemp -d)
  trap 'rm -rf "$dist"' EXIT
  PKB_WHEEL=$(bash "$here/build_wheel.sh" "$py" "$dist" | tail -1)
  export PKB_WHEEL
fi
"$py" -m pip install -q --root-user-action=ignore --no-deps --no-index --target "$target" "$PKB_WHEEL"
cd "$target"  # not the source folder: tests import the installed package
PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$py" -m pytest -q -p no:cacheprovider --rootdir "$here/tests" "$here/tests" "$@" \
  --import-mode=importlib
