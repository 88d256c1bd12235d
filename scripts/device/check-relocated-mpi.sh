#!/usr/bin/env bash
# Checks here, without a GPU node, that the OpenMPI which travels to the node (openmpi-tree.sh)
# runs from its private prefix alone. The node has no OpenMPI at all; this machine has Debian's in
# /usr, so a bubblewrap sandbox hides it: its folders (/usr/lib/x86_64-linux-gnu/openmpi, pmix2,
# hwloc, /etc/openmpi, /usr/share/openmpi) become empty, and /dev/null is bound over every file
# its packages put in /usr/bin and /usr/lib/x86_64-linux-gnu (libmpi, libpmix, libhwloc,
# libevent, orterun behind /usr/bin/mpirun...), so any use of them fails loudly. Inside:
#   1. the tree is assembled from the .deb files prepare downloaded, as build-on-device.sh build
#      does, under /tmp, and env.sh is sourced as gpu-run.sh does;
#   2. FindMPI configures a small MPI program with the settings build uses (cmake-args), and the
#      relocated mpirun runs it on 2 ranks;
#   3. mpirun -np 2 problem_cpu_check --problem P, then the same with --staged, both under
#      strace -f; then every file the runs opened that belongs to OpenMPI, PMIx, hwloc, libevent
#      must lie in the tree, and so must every such library a rank has mapped just before
#      MPI_Finalize (its /proc/self/maps, written by a preloaded MPI_Finalize).
# Then 3. again with the system's OpenMPI visible: a node that has another OpenMPI must not mix it
# in either. And a control: without env.sh's OPAL_* and PMIX_* the same check must object.
# Last, the engine's own path, where one was built beside problem_cpu_check (build/worker/engine):
#   4. pkb-eval -w 2 on three host-only C++ candidates (correct, wrong, crashing), with the system's
#      OpenMPI hidden but its headers (this machine's pkb-eval names /usr's for compiling such
#      candidates; the node's names the tree's): the engine's sandbox (bubblewrap as nobody) runs
#      the tree's mpirun as a functional run does, binding the tree and passing OPAL_* and
#      PMIX_*; the same strace check applies, and the verdicts must be OK, MISMATCH, RUNTIME_ERROR.
#
# What it cannot show: the node's Ubuntu 24.04 has a newer glibc (2.39) than Debian 12's (2.36);
# the tree needs at most GLIBC_2.36 (libevent), and newer glibcs keep the old symbol versions,
# but that is not exercised here. Nor are GPUs, the engine's own sandbox (step-shared.sh runs
# pkb-eval --functional there), or a node image that lacks zlib (assumed present, as everywhere).
#
#   scripts/device/check-relocated-mpi.sh [PROBLEM_CPU_CHECK]
#     PROBLEM_CPU_CHECK: a problem_cpu_check built with MPI (default build/problems/...)
#     PKB_CHECK_PROBLEM=0 checks every problem (slower); default 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CHECK=$(realpath "${1:-build/problems/problem_cpu_check}")
EVAL=${PKB_EVAL:-$(dirname "$(dirname "$CHECK")")/worker/engine/pkb-eval}
PROBLEM=${PKB_CHECK_PROBLEM:-1}
DEBS=${PKB_MPI_DEBS:-$ROOT/.devdeps/debs-mpi}
WORK=${PKB_MPI_CHECK_DIR:-/tmp/pkb-mpi-check}
TREE=$WORK/carry/openmpi

die() { echo "check-relocated-mpi: $*" >&2; exit 1; }
for t in bwrap strace cmake c++ dpkg-query; do
  command -v "$t" >/dev/null || die "'$t' is missing (apt-get install bubblewrap strace cmake g++)"
done
[ -x "$CHECK" ] || die "no problem_cpu_check at '$CHECK' (build it with PKB_WITH_MPI=ON, or give its path)"
ls "$DEBS"/*.deb >/dev/null 2>&1 || die "no .deb files in $DEBS (run scripts/device/build-on-device.sh prepare)"

rm -rf "$WORK" && mkdir -p "$WORK"
bash scripts/device/openmpi-tree.sh assemble "$DEBS" "$TREE"

# What the sandbox hides: the folders, and the files of the same packages installed here.
HIDE=()
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
         /usr/lib/x86_64-linux-gnu/hwloc /etc/openmpi /usr/share/openmpi; do
  [ -d "$d" ] && HIDE+=(--tmpfs "$d")
done
hidden_files=0
for p in $(bash scripts/device/openmpi-tree.sh packages); do
  dpkg-query -L "$p" 2>/dev/null || true
done | grep -E '^/usr/(bin|lib/x86_64-linux-gnu)/[^/]+$' | sort -u | while read -r f; do
  if [ -f "$f" ] && [ ! -L "$f" ]; then echo "$f"; fi
done > "$WORK/hidden-files.txt"
while read -r f; do
  HIDE+=(--ro-bind /dev/null "$f")
  hidden_files=$((hidden_files + 1))
done < "$WORK/hidden-files.txt"
echo "hiding $(grep -o -- --tmpfs <<<"${HIDE[*]}" | wc -l) folders and $hidden_files files of the packages installed here"

# A small MPI program for FindMPI: configured and built with build-on-device.sh's settings.
mkdir -p "$WORK/findmpi"
cat > "$WORK/findmpi/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(findmpi_check CXX)
find_package(MPI REQUIRED COMPONENTS CXX)
message(STATUS "MPI_CXX_INCLUDE_DIRS=${MPI_CXX_INCLUDE_DIRS} MPI_CXX_LIBRARIES=${MPI_CXX_LIBRARIES}")
add_executable(hello hello.cc)
target_link_libraries(hello PRIVATE MPI::MPI_CXX)
add_library(finalize_maps SHARED finalize_maps.cc)
target_link_libraries(finalize_maps PRIVATE MPI::MPI_CXX)
EOF
# Preloaded into the ranks (the MPI profiling interface): each rank's /proc/self/maps just before
# MPI_Finalize, when every plugin MPI_Init opened is still mapped.
cat > "$WORK/findmpi/finalize_maps.cc" <<'EOF'
#include <mpi.h>
#include <cstdio>
#include <cstdlib>
extern "C" int MPI_Finalize(void) {
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (const char* out = std::getenv("PKB_MAPS_OUT")) {
    char path[4096];
    std::snprintf(path, sizeof path, "%s.rank%d.txt", out, rank);
    FILE* in = std::fopen("/proc/self/maps", "r");
    FILE* to = std::fopen(path, "w");
    char buf[4096];
    size_t n;
    while (in && to && (n = std::fread(buf, 1, sizeof buf, in)) > 0) std::fwrite(buf, 1, n, to);
    if (in) std::fclose(in);
    if (to) std::fclose(to);
  }
  return PMPI_Finalize();
}
EOF
cat > "$WORK/findmpi/hello.cc" <<'EOF'
#include <mpi.h>
#include <cstdio>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, sum = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int one = 1;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("hello: %d ranks, allreduce %d\n", size, sum);
  MPI_Finalize();
  return sum == size ? 0 : 1;
}
EOF
bash scripts/device/openmpi-tree.sh cmake-args "$TREE" > "$WORK/cmake-args.txt"

# Runs inside the sandbox: $1 = a label (hidden or visible), $2 = 1 to check FindMPI too.
cat > "$WORK/inside.sh" <<'EOF'
set -uo pipefail
label=$1; findmpi=$2
if [ "$label" = control ]; then
  # The control: the tree's binaries and libraries, without env.sh's OPAL_* and PMIX_*.
  export PATH="$TREE/bin:$PATH" LD_LIBRARY_PATH="$TREE/lib"
else
  source "$TREE/env.sh"
fi
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader)
echo "[$label] mpirun on PATH: $(command -v mpirun) -> $(readlink -f "$(command -v mpirun)")"
if [ "$label" = hidden ]; then
  if /usr/bin/mpirun --version >/dev/null 2>&1; then echo "[$label] FAIL: /usr/bin/mpirun still runs"; exit 1; fi
  echo "[$label] /usr/bin/mpirun does not run here: $(/usr/bin/mpirun --version 2>&1 | head -1)"
fi
ompi_info --path all | grep -E ' (Prefix|Libdir|Pkglibdir|Sysconfdir|Pkgdatadir):' | sort -u | sed "s/^ */[$label] ompi_info: /"
rc=0
if [ "$findmpi" = 1 ]; then
  mapfile -t args < "$WORK/cmake-args.txt"
  if cmake -S "$WORK/findmpi" -B "$WORK/findmpi/build" "${args[@]}" > "$WORK/findmpi.log" 2>&1 &&
     cmake --build "$WORK/findmpi/build" >> "$WORK/findmpi.log" 2>&1; then
    grep -E 'Found MPI|MPI_CXX_INCLUDE_DIRS' "$WORK/findmpi.log" | sed "s/^/[$label] cmake: /"
    out=$("${MPIRUN[@]}" -np 2 "$WORK/findmpi/build/hello" 2>&1); r=$?
    echo "[$label] FindMPI program under mpirun -np 2: $out (exit $r)"; [ $r = 0 ] || rc=1
  else
    echo "[$label] FAIL: FindMPI configure or build (tail of $WORK/findmpi.log):"; tail -20 "$WORK/findmpi.log"; rc=1
  fi
fi
if [ "$label" = engine ]; then
  cd "$ROOT"
  for c in "p001_correct OK" "p001_wrong MISMATCH" "p001_crash RUNTIME_ERROR"; do
    read -r name want <<<"$c"
    strace -f -qq -e trace=open,openat,execve -o "$WORK/strace-engine-$name.log" \
      "$EVAL" --json -p 1 -w 2 -I tests/engine/cpu_candidates "tests/engine/cpu_candidates/$name.cc" \
      > "$WORK/engine-$name.json" 2> "$WORK/engine-$name.err"
    got=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["status"], "|", r["message"][:90])' \
          "$WORK/engine-$name.json" 2>&1)
    echo "[$label] pkb-eval -w 2 $name.cc (sandboxed, mpirun from PATH): $got"
    [ "${got%% *}" = "$want" ] || { echo "[$label] FAIL: expected $want"; rc=1; }
  done
  exit $rc
fi
for mode in plain staged; do
  extra=(); [ "$mode" = staged ] && extra=(--staged)
  log=$WORK/strace-$label-$mode.log
  t0=$(date +%s%N)
  out=$(strace -f -qq -e trace=open,openat,execve -o "$log" \
        "${MPIRUN[@]}" -x LD_PRELOAD="$WORK/findmpi/build/libfinalize_maps.so" \
        -x PKB_MAPS_OUT="$WORK/maps-$label-$mode" \
        -np 2 "$CHECK" --problem "$PROBLEM" "${extra[@]}" 2>&1); r=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "[$label] mpirun -np 2 problem_cpu_check --problem $PROBLEM${extra[*]:+ ${extra[*]}}: exit $r in $((ms / 1000)).$(printf %03d $((ms % 1000))) s: $(echo "$out" | tail -1)"
  [ $r = 0 ] || { echo "$out" | tail -30; rc=1; }
done
exit $rc
EOF

# OpenMPI's, PMIx's, hwloc's and libevent's files, by name.
MPI_FILES='openmpi|pmix|hwloc|libevent|libmpi|libopen-(pal|rte)|liboshmem|libmca_|libudev|libmunge|/mca_[a-z]|help-[a-z0-9_-]+\.txt|mca-params\.conf|default-hostfile'
# $1 label; $2 what may lie outside the tree and is only noted (a regex; default none).
verify() {
  local label=$1 tolerated=${2:-^$} bad=0 log opened outside tried f noted
  for log in "$WORK"/strace-"$label"-*.log; do
    # Successful opens (a descriptor came back) and executions.
    opened=$(grep -E '(open|openat)\(.*\) = [0-9]+$|execve\(.*\) = 0$' "$log" |
      grep -oE '"/[^"]+"' | tr -d '"' | sort -u)
    # Not the session folder: what the running job itself creates (PMIx's and hwloc's shared
    # segments), in $TMPDIR/ompi.<host>.<uid>/.
    # Nor bubblewrap's own set-up of a sandbox (/newroot/...).
    outside=$(echo "$opened" | grep -E "$MPI_FILES" | grep -v "^$TREE/" |
      grep -vE '/ompi\.[^/]+/|^/newroot/' || true)
    noted=$(echo "$outside" | grep -E "$tolerated" || true)
    outside=$(echo "$outside" | grep -vE "$tolerated" || true)
    [ -z "$noted" ] || echo "[$label]   note, opened outside the tree: $(echo "$noted" | tr '\n' ' ')"
    echo "[$label] $(basename "$log"): $(echo "$opened" | grep -E "$MPI_FILES" | grep -cvE '/ompi\.[^/]+/|^/newroot/') OpenMPI files opened, $(echo "$opened" | grep -c "^$TREE/") of them in the tree; executed: $(grep -E 'execve\(.*\) = 0$' "$log" | grep -oE 'execve\("[^"]+"' | cut -d'"' -f2 | sort -u | xargs -n1 basename | sort -u | tr '\n' ' ')"
    if [ -n "$outside" ]; then
      echo "[$label] FAIL: opened outside the tree:"; while read -r f; do echo "    $f"; done <<<"$outside"; bad=1
    fi
    tried=$(grep -E '(open|openat)\(.*= -1 ' "$log" | grep -oE '"/[^"]+"' | tr -d '"' |
      grep -E "$MPI_FILES" | grep -v "^$TREE/" | sort -u | head -5)
    [ -z "$tried" ] || echo "[$label]   looked for, not found (harmless): $(echo "$tried" | tr '\n' ' ')"
  done
  local mode rank maps libs key
  [ "$label" = engine ] && return $bad  # no preloaded MPI_Finalize there
  for mode in plain staged; do
    for rank in 0 1; do
      maps=$WORK/maps-$label-$mode.rank$rank.txt
      [ -f "$maps" ] || { echo "[$label] FAIL: rank $rank ($mode) wrote no maps"; bad=1; continue; }
      libs=$(awk '$6 ~ /\.so/ {print $6}' "$maps" | sort -u)
      outside=$(echo "$libs" | grep -E "$MPI_FILES" | grep -v "^$TREE/" || true)
      echo "[$label] rank $rank ($mode) before MPI_Finalize: $(echo "$libs" | wc -l) libraries mapped, $(echo "$libs" | grep -c "^$TREE/") of them from the tree, none of OpenMPI's from elsewhere: $([ -z "$outside" ] && echo yes || echo NO)"
      [ -z "$outside" ] || { echo "[$label] FAIL: mapped outside the tree: $outside"; bad=1; }
      for key in lib/libmpi.so.40 lib/libpmix.so.2 lib/openmpi/mca_pml_ob1.so lib/openmpi/mca_btl_vader.so; do
        grep -q "^$TREE/${key%.so*}" <<<"$libs" || { echo "[$label] FAIL: $key not mapped"; bad=1; }
      done
    done
  done
  return $bad
}

status=0
echo "== the system's OpenMPI hidden (as on the node)"
env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" TREE="$TREE" WORK="$WORK" CHECK="$CHECK" \
  PROBLEM="$PROBLEM" bwrap --dev-bind / / "${HIDE[@]}" bash "$WORK/inside.sh" hidden 1 || status=1
verify hidden || status=1
echo "== the system's OpenMPI visible (a node with another OpenMPI)"
env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" TREE="$TREE" WORK="$WORK" CHECK="$CHECK" \
  PROBLEM="$PROBLEM" bwrap --dev-bind / / bash "$WORK/inside.sh" visible 0 || status=1
verify visible || status=1
echo "== control: the tree's mpirun without env.sh's OPAL_* and PMIX_* (the check must object)"
env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" TREE="$TREE" WORK="$WORK" CHECK="$CHECK" \
  PROBLEM="$PROBLEM" bwrap --dev-bind / / bash "$WORK/inside.sh" control 0 > "$WORK/control.txt" 2>&1
if verify control > "$WORK/control-verify.txt"; then
  echo "FAIL: the check saw nothing outside the tree even without OPAL_* and PMIX_*"; status=1
else
  echo "ok: without them the check objects: $(grep -cE '^    /' "$WORK/control-verify.txt") files opened outside the tree, e.g. $(grep -E '^    /' "$WORK/control-verify.txt" | grep -m3 -E 'openmpi3|pmix2|/etc/openmpi' | tr -d ' ' | tr '\n' ' ')"
fi
if [ -x "$EVAL" ]; then
  echo "== the engine: pkb-eval's sandbox starting the tree's mpirun (headers of the system's left visible)"
  ENGINE_HIDE=()
  for ((i = 0; i < ${#HIDE[@]}; i++)); do
    if [ "${HIDE[i]}" = --tmpfs ] && [ "${HIDE[i+1]}" = /usr/lib/x86_64-linux-gnu/openmpi ]; then
      ENGINE_HIDE+=(--tmpfs /usr/lib/x86_64-linux-gnu/openmpi/lib); i=$((i + 1))
    else
      ENGINE_HIDE+=("${HIDE[i]}")
    fi
  done
  env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" TREE="$TREE" WORK="$WORK" CHECK="$CHECK" \
    PROBLEM="$PROBLEM" EVAL="$EVAL" ROOT="$ROOT" bwrap --dev-bind / / "${ENGINE_HIDE[@]}" \
    bash "$WORK/inside.sh" engine 0 || status=1
  # g++ reads the system's headers (see above); hwloc, inside the engine's sandbox, looks for
  # plugins in its built-in folder: the sandbox passes no HWLOC_ variable (empty here, absent on
  # a node without hwloc's plugins).
  verify engine '^/usr/lib/x86_64-linux-gnu/openmpi/include/|^/usr/lib/x86_64-linux-gnu/hwloc$' || status=1
else
  echo "== the engine: skipped (no pkb-eval at $EVAL; PKB_EVAL=... to give one)"
fi
if [ $status = 0 ]; then
  echo "PASS: the relocated OpenMPI ran alone (logs in $WORK)"
else
  echo "FAIL: see above (logs in $WORK)"
fi
exit $status
