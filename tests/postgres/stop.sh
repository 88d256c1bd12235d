#!/usr/bin/env bash
# Stops the server tests/postgres/start.sh DIR [BINDIR] started and removes DIR.
set -euo pipefail
dir=$1
bin=${2:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
as=()
if [[ $(id -u) == 0 ]]; then as=(runuser -u nobody --); fi
if [[ -f "$dir/data/postmaster.pid" ]]; then
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null
fi
rm -rf "$dir"
