#!/usr/bin/env bash
# The build folder's layout (server/, worker/daemon/, worker/engine/, client/) for the scripts that
# start the service from a build folder, made of the binaries carried to the device: the engine's
# from BIN (built on the device), the service's from BIN/../service/bin (built on the Debian
# machine and packed by build-on-device.sh prepare, with their libraries). The engine runs from a
# script that gives it back the library path the service's scripts replaced.
#   make-layout.sh BIN DIR      (exit 3: the service's binaries were not carried)
set -euo pipefail
BIN=$(cd "$1" && pwd); layout=$2
svc=$(dirname "$BIN")/service/bin
rm -rf "$layout" && mkdir -p "$layout/server" "$layout/worker/daemon" "$layout/worker/engine" "$layout/client"
for b in pkb-coordinator pkb-worker pkb; do
  if [ -x "$BIN/$b" ]; then from=$BIN/$b; elif [ -x "$svc/$b" ]; then from=$svc/$b; else
    echo "no $b in $BIN or $svc: the service's binaries were not carried (build-on-device.sh prepare packs them from a build folder)"
    exit 3
  fi
  case $b in
    pkb-coordinator) ln -s "$from" "$layout/server/$b" ;;
    pkb-worker) ln -s "$from" "$layout/worker/daemon/$b" ;;
    pkb) ln -s "$from" "$layout/client/$b" ;;
  esac
done
cat > "$layout/worker/engine/pkb-eval" <<EOF_WRAP
#!/bin/sh
if [ -n "\${PKB_ENGINE_LD_LIBRARY_PATH+x}" ]; then export LD_LIBRARY_PATH="\$PKB_ENGINE_LD_LIBRARY_PATH"; fi
exec "$BIN/pkb-eval" "\$@"
EOF_WRAP
chmod +x "$layout/worker/engine/pkb-eval"
ln -s "$BIN/pkb-rank" "$layout/worker/engine/pkb-rank"
