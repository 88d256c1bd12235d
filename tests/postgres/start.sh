#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for the tests, listening on a unix socket only:
#   tests/postgres/start.sh DIR [BINDIR]
# DIR holds the cluster (DIR/data), its log (DIR/log) and the socket; BINDIR has initdb and
# pg_ctl (default: the newest /usr/lib/postgresql/*/bin). Prints the connection URI (superuser
# `pkb`, database `postgres`, trust auth), which the tests read from PKB_TEST_POSTGRES.
# PostgreSQL refuses to run as root, and CI runs as root: there the server runs as `nobody`.
# Durability settings are off: the tests crash coordinators, never this server.
set -euo pipefail
dir=$1
bin=${2:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
if [[ ! -x "$bin/initdb" ]]; then
  echo "no PostgreSQL server (initdb) in '$bin': run scripts/install-deps.sh" >&2
  exit 1
fi
as=()
if [[ $(id -u) == 0 ]]; then as=(runuser -u nobody --); fi
# A server left by an interrupted run holds the socket: stop it first.
if [[ -f "$dir/data/postmaster.pid" ]]; then
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
fi
rm -rf "$dir"
mkdir -p "$dir"
if ((${#as[@]})); then chown nobody "$dir"; fi
"${as[@]}" "$bin/initdb" -D "$dir/data" -U pkb --auth=trust -E UTF8 --locale=C --no-sync \
  >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
opts="-c listen_addresses='' -k $dir -c fsync=off -c synchronous_commit=off"
opts+=" -c full_page_writes=off -c max_connections=200"
if ! "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -o "$opts" -w -t 30 start >/dev/null; then
  cat "$dir/log" >&2
  exit 1
fi
echo "postgresql:///postgres?host=$dir&user=pkb"
