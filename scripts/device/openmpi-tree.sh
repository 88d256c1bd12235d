#!/usr/bin/env bash
# A relocatable OpenMPI for the GPU node, which has none and no network: functional runs start
# their ranks with mpirun and the judges' collectives go over MPI (backend cuda-shared).
#
#   scripts/device/openmpi-tree.sh download DEBS_DIR     here: Debian 12's packages (.deb files)
#   scripts/device/openmpi-tree.sh assemble DEBS_DIR DEST there (or here, to check it): one folder
#   scripts/device/openmpi-tree.sh cmake-args DEST       FindMPI's settings for that folder
#   scripts/device/openmpi-tree.sh packages              the Debian packages it is made of
#
# DEST is self-contained: bin/ (mpirun, orted, ompi_info), lib/ (libmpi and the libraries it
# needs that a stock Ubuntu image lacks: PMIx, hwloc, libevent, libudev, libmunge),
# lib/openmpi/ (MCA plugins), lib/pmix/ (PMIx's), include/ (mpi.h, for FindMPI and host-only
# C++ candidates), share/ (help texts), etc/ (the MCA defaults), MANIFEST and env.sh. Debian's
# binaries look for all of that under /usr, /etc/openmpi and /usr/lib/x86_64-linux-gnu/pmix2;
# `source DEST/env.sh` points them at DEST instead (OpenMPI's OPAL_* variables, PMIx's PMIX_*
# ones) and puts DEST/bin and DEST/lib first on PATH and LD_LIBRARY_PATH. DEST can be moved:
# env.sh finds its own folder.
#
# Plugins and libraries that need a library neither in DEST nor in every Linux image (glibc, the
# C++ runtime, zlib) are left out: the UCX, libfabric, verbs and PSM transports and netlink
# (MANIFEST lists them). A single node's ranks talk through shared memory (btl vader) and need
# none of them; a plugin kept without its library would be a load error printed by every rank.
set -euo pipefail

# The packages, all of Debian 12 (bookworm), amd64.
MPI_PACKAGES="openmpi-bin libopenmpi3 openmpi-common libopenmpi-dev libpmix2 libhwloc15
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libudev1 libmunge2"
# Libraries every image has (glibc, the C++ runtime, zlib): never carried, never a reason to drop.
BASE_LIBS=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1
  ld-linux-x86-64.so.2 libz.so.1 libgcc_s.so.1 libstdc++.so.6 "
# What a single-node run cannot do without: checked after the pruning.
REQUIRED="bin/orterun bin/orted lib/libmpi.so.40 lib/libopen-rte.so.40 lib/libopen-pal.so.40
  lib/libpmix.so.2 lib/libhwloc.so.15 lib/openmpi/mca_pml_ob1.so lib/openmpi/mca_btl_vader.so
  lib/openmpi/mca_btl_self.so lib/openmpi/mca_coll_tuned.so include/mpi.h
  share/openmpi/help-mpi-runtime.txt"

die() { echo "openmpi-tree: $*" >&2; exit 1; }
# The .deb file of package $2 in folder $1 ("" when there is none).
deb_of() { local f=("$1/${2}_"*.deb); if [ -e "${f[0]}" ]; then echo "${f[0]}"; fi; }
need() { command -v "$1" >/dev/null || die "'$1' is missing ($2)"; }

download() {
  local dir=${1:?usage: $0 download DEBS_DIR}
  need apt-get "Debian's apt, to download the packages"
  mkdir -p "$dir"
  local missing=()
  for p in $MPI_PACKAGES; do
    [ -n "$(deb_of "$dir" "$p")" ] || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    (cd "$dir" && apt-get download "${missing[@]}") ||
      die "apt-get download ${missing[*]} failed (this must run on Debian 12 with its archive)"
  fi
}

# The sonames a shared object needs.
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

assemble() {
  local debs=${1:?usage: $0 assemble DEBS_DIR DEST} dest=${2:?usage: $0 assemble DEBS_DIR DEST}
  need dpkg "to unpack the .deb files (dpkg -x, never installed)"
  need readelf "binutils: to read which libraries each plugin needs"
  local p
  for p in $MPI_PACKAGES; do
    [ -n "$(deb_of "$debs" "$p")" ] ||
      die "no ${p}_*.deb in $debs (run build-on-device.sh prepare on the Debian machine)"
  done
  UNPACK=$(mktemp -d /tmp/pkb-openmpi-unpack.XXXXXX)
  trap 'rm -rf "$UNPACK"' EXIT
  local x=$UNPACK
  for p in $MPI_PACKAGES; do dpkg -x "$(deb_of "$debs" "$p")" "$x"; done
  local ml=$x/usr/lib/x86_64-linux-gnu
  rm -rf "$dest" && mkdir -p "$dest"/{bin,lib/openmpi,lib/pmix,share,etc}

  cp -P "$x"/usr/bin/{orterun,orted,ompi_info} "$dest/bin/"
  ln -s orterun "$dest/bin/mpirun"
  ln -s orterun "$dest/bin/mpiexec"
  # The runtime libraries (files and their soname links), then the link-time names FindMPI wants.
  find "$ml" -maxdepth 1 \( -type f -o -type l \) -name 'lib*.so.*' ! -name 'libpmix*' \
    -exec cp -P {} "$dest/lib/" \;
  # libpmix's file is in pmix2/lib (the links beside libmpi point there).
  cp -P "$ml"/pmix2/lib/libpmix.so.* "$dest/lib/"
  local link
  for link in "$ml"/openmpi/lib/lib*.so; do
    [ -e "$dest/lib/$(basename "$(readlink "$link")")" ] &&
      ln -sf "$(basename "$(readlink "$link")")" "$dest/lib/$(basename "$link")"
  done
  cp -P "$ml"/openmpi/lib/openmpi3/* "$dest/lib/openmpi/"
  cp -P "$ml"/pmix2/lib/pmix/* "$dest/lib/pmix/"
  cp -a "$ml"/openmpi/include "$dest/include"
  cp -a "$x"/usr/share/openmpi "$dest/share/openmpi"
  cp -a "$ml"/pmix2/share/pmix "$dest/share/pmix"
  cp -P "$x"/etc/openmpi/* "$dest/etc/"
  # PMIx's defaults name its plugin folder by absolute path (/usr/lib/x86_64-linux-gnu/pmix2/...):
  # env.sh gives the relocated one instead, and the file keeps the rest.
  grep -v '^mca_base_component_path' "$ml"/pmix2/share/pmix-mca-params.conf \
    > "$dest/etc/pmix-mca-params.conf"

  # Leave out what needs a library that is neither here nor in every image, until nothing does
  # (a plugin can need a library that was itself left out).
  local pruned=() changed=1 f lib
  while [ "$changed" = 1 ]; do
    changed=0
    for f in "$dest"/lib/*.so.* "$dest"/lib/openmpi/*.so "$dest"/lib/pmix/*.so; do
      if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
      for lib in $(needed "$f"); do
        if [[ "$BASE_LIBS" != *" $lib "* ]] && [ ! -e "$dest/lib/$lib" ]; then
          pruned+=("${f#"$dest"/} (needs $lib)")
          rm -f "$f"
          changed=1
          break
        fi
      done
    done
    # Links whose file went.
    find "$dest/lib" -xtype l -delete
  done
  for f in "$dest"/bin/{orterun,orted,ompi_info}; do
    for lib in $(needed "$f"); do
      [[ "$BASE_LIBS" == *" $lib "* ]] || [ -e "$dest/lib/$lib" ] ||
        die "$(basename "$f") needs $lib, which is not in $dest/lib (add its package to MPI_PACKAGES)"
    done
  done
  for f in $REQUIRED; do
    [ -e "$dest/$f" ] || die "$dest/$f is missing after assembly (the packages changed?)"
  done

  write_env "$dest"
  {
    echo "# Relocatable OpenMPI assembled by scripts/device/openmpi-tree.sh"
    for p in $MPI_PACKAGES; do echo "package $(basename "$(deb_of "$debs" "$p")")"; done
    for f in "${pruned[@]}"; do echo "left out $f"; done
  } > "$dest/MANIFEST"
  chmod -R a+rX "$dest"
  echo "openmpi-tree: $dest ($(du -sh "$dest" | cut -f1), ${#pruned[@]} plugins/libraries left out: see MANIFEST)"
}

write_env() {
  cat > "$1/env.sh" <<'EOF'
# Source (bash) to use the relocated OpenMPI in this folder (scripts/device/openmpi-tree.sh).
# OpenMPI's binaries were built for /usr; OPAL_* tells them where their libraries, plugins, help
# texts and defaults are now, PMIX_* does the same for PMIx (its own install-dir variables), and
# HWLOC_PLUGINS_PATH keeps hwloc from loading a different hwloc's plugins from /usr. mpirun passes
# the environment to the ranks, so they find the same. The folder is given by its real path: the
# engine's sandbox binds it at that path (engine.cc MpiPrefix: the folder above mpirun's bin/).
_pkb_mpi=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
export PATH="$_pkb_mpi/bin:$PATH"
export LD_LIBRARY_PATH="$_pkb_mpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$_pkb_mpi" OPAL_EXEC_PREFIX="$_pkb_mpi" OPAL_BINDIR="$_pkb_mpi/bin" \
  OPAL_SBINDIR="$_pkb_mpi/bin" OPAL_LIBEXECDIR="$_pkb_mpi/bin" OPAL_LIBDIR="$_pkb_mpi/lib" \
  OPAL_INCLUDEDIR="$_pkb_mpi/include" OPAL_PKGINCLUDEDIR="$_pkb_mpi/include/openmpi" \
  OPAL_PKGLIBDIR="$_pkb_mpi/lib/openmpi" OPAL_DATAROOTDIR="$_pkb_mpi/share" \
  OPAL_DATADIR="$_pkb_mpi/share" OPAL_PKGDATADIR="$_pkb_mpi/share/openmpi" \
  OPAL_SYSCONFDIR="$_pkb_mpi/etc"
export PMIX_PREFIX="$_pkb_mpi" PMIX_EXEC_PREFIX="$_pkb_mpi" PMIX_LIBDIR="$_pkb_mpi/lib" \
  PMIX_PKGLIBDIR="$_pkb_mpi/lib/pmix" PMIX_DATAROOTDIR="$_pkb_mpi/share" \
  PMIX_DATADIR="$_pkb_mpi/share" PMIX_PKGDATADIR="$_pkb_mpi/share/pmix" \
  PMIX_SYSCONFDIR="$_pkb_mpi/etc" PMIX_MCA_mca_base_component_path="$_pkb_mpi/lib/pmix"
export HWLOC_PLUGINS_PATH="$_pkb_mpi/lib/hwloc"
unset _pkb_mpi
EOF
}

# FindMPI's settings, one a line: the tree's mpi.h and libmpi given directly. The mpicxx wrapper is
# not carried (its compiled-in paths are /usr's), so neither the wrapper nor guessing is tried;
# the MPI-2 C++ bindings are skipped (our code uses the C API), so libmpi alone is linked.
cmake_args() {
  local dest=${1:?usage: $0 cmake-args DEST}
  if [ ! -f "$dest/include/mpi.h" ] || [ ! -e "$dest/lib/libmpi.so" ]; then
    die "$dest has no include/mpi.h or lib/libmpi.so (run assemble first)"
  fi
  dest=$(cd "$dest" && pwd -P)
  printf '%s\n' -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_SKIP_GUESSING=ON -DMPI_CXX_SKIP_MPICXX=ON \
    "-DMPI_CXX_HEADER_DIR=$dest/include" -DMPI_CXX_LIB_NAMES=mpi \
    "-DMPI_mpi_LIBRARY=$dest/lib/libmpi.so" "-DMPIEXEC_EXECUTABLE=$dest/bin/mpiexec"
}

case "${1:-}" in
  download) shift; download "$@" ;;
  assemble) shift; assemble "$@" ;;
  cmake-args) shift; cmake_args "$@" ;;
  packages) echo "${MPI_PACKAGES//$'\n'/ }" | tr -s ' ' ;;
  *) echo "usage: $0 download DEBS_DIR | assemble DEBS_DIR DEST | cmake-args DEST | packages" >&2
     exit 2 ;;
esac
