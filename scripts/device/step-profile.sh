#!/usr/bin/env bash
# The profile pass on a GPU: the p001 and p013 examples at W = 1, their text reports (the
# profile's lines at the end) and the JSON's profiles.
BIN=$1; OUT=$2
for ex in "1 p001_allreduce_symm" "13 p013_gemm_allreduce_symm"; do
  read -r p name <<<"$ex"
  "$BIN/pkb-eval" -p "$p" -w 1 "problems/examples/$name.cu" 2>&1 | sed -n '/^profile/,$p'
  "$BIN/pkb-eval" -p "$p" -w 1 --json "problems/examples/$name.cu" > "$OUT/profile-$name.json" 2>/dev/null
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); p=r.get("profiles",[{}])[0]; print(sys.argv[2], r["status"], "candidate", len(p.get("candidate",{}).get("records",[])), "records", p.get("candidate",{}).get("note",""), "| reference", len(p.get("reference",{}).get("records",[])), "records", p.get("reference",{}).get("note",""))' "$OUT/profile-$name.json" "$name"
done
