#!/usr/bin/env bash
# Installs the SDK the way a user does (pip, stubs generated from proto/ at build time) into a
# throwaway folder, then runs its pytest suite with that folder first on the path. The build uses
# the system's setuptools and grpcio-tools (scripts/install-deps.sh): no download.
# Usage: run_tests.sh PYTHON INSTALL_DIR [pytest args]
set -euo pipefail
py=$1 target=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
export PKB_PROTO_DIR=${PKB_PROTO_DIR:-$here/../../proto}
rm -rf "$target"
# Built from a copy, so the build leaves nothing in the source tree.
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$here/pyproject.toml" "$here/setup.py" "$here/README.md" "$here/pkb" "$src/"
rm -rf "$src/pkb/v1"
"$py" -m pip install -q --root-user-action=ignore --no-deps --no-build-isolation --no-index --target "$target" "$src"
cd "$target"  # not the source folder: tests import the installed package
PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$py" -m pytest -q -p no:cacheprovider --rootdir "$here/tests" "$here/tests" "$@" \
  --import-mode=importlib
