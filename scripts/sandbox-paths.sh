#!/usr/bin/env bash
# The sandbox runs submissions as uid 65534 (nobody), and bubblewrap opens what it binds (the
# engine's binaries, libtorch, the candidate API headers) as that uid. Python environments often
# live under a home folder that others cannot search (/root is 0700). This gives search-only
# permission (o+x: no listing, no reading of anything else) on each folder above the paths the
# engine needs, and says what it changed. Run as root on machines that evaluate submissions.
set -euo pipefail
[ "$(id -u)" = 0 ] || exit 0
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
paths=("$PWD")
torch_dir=$("$py" -c "import importlib.util as u; s=u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')" 2>/dev/null || true)
[ -n "$torch_dir" ] && paths+=("$torch_dir")
# The folders themselves too: a checkout made inside `mktemp -d` is 0700.
for p in "${paths[@]}"; do
  d=$p
  while :; do
    if [ -d "$d" ] && [ $(( 0$(stat -c %a "$d") & 1 )) = 0 ]; then
      chmod o+x "$d"
      echo "sandbox-paths: gave others search permission on $d (for the sandbox's uid)"
    fi
    [ "$d" = / ] && break
    d=$(dirname "$d")
  done
done
