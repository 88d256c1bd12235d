#!/usr/bin/env bash
# The main job (README.md): on a fresh machine, install what is needed, build, then start a
# coordinator on SQLite and a local worker, submit an example candidate and print the streamed
# verdict. Arguments go to scripts/run-local.sh (a candidate file, --problem, --world-size).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/sandbox-paths.sh
BUILD=${PKB_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Everything a real run needs: pkb-eval starts pkb-rank, and sandboxed GPU runs start their ranks
# through pkb-rank-group (the engine refuses a job at once, naming what is missing).
cmake --build "$BUILD" -j "$(nproc)" --target pkb-coordinator pkb-worker pkb pkb-eval pkb-rank \
  pkb-rank-group
exec bash scripts/run-local.sh --build "$(cd "$BUILD" && pwd)" "$@"
