#!/usr/bin/env bash
# The never-slower sweep (bench/never_slower.sh) on the device machine, whose 16 cores let np 4 and
# 8 run without the scheduler deciding every figure, as it does on this project's 2 cores.
#
#   bench/device_sweep.sh prepare        here: packs Debian's Open MPI and MPICH runtimes with the
#                                        libraries they load, and each build's libgfshim.so,
#                                        gfshim-info and bench/call_patterns, into .sweep-carry/runtime.tar.gz
#                                        (git-ignored; MPICH alone is 41 MB unpacked)
#   bench/device_sweep.sh run [--configs "..."] [-- call_patterns args]
#                                        there, with .sweep-carry/ carried: unpacks it under /tmp
#                                        and runs bench/never_slower.sh with the carried MPIs
#                                        (default configs: Open MPI and MPICH at np 2, 4 and 8).
#                                        Output also goes to $OUT/device_sweep.log if $OUT is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carry="$root/.sweep-carry"
# shellcheck source=bench/carry_mpi.sh
source "$root/bench/carry_mpi.sh"
mode=${1:-}
[[ $# -gt 0 ]] && shift

prepare() {
  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  carry_openmpi "$stage"
  carry_mpich "$stage"
  for flavour in openmpi:build mpich:build-mpich; do
    local name=${flavour%%:*} build="$root/${flavour#*:}"
    cmake --build "$build" -j "$(nproc)" --target gfshim gfshim-info call_patterns >/dev/null
    mkdir -p "$stage/builds/$name/bench"
    cp "$build/libgfshim.so" "$build/gfshim-info" "$stage/builds/$name/"
    cp "$build/bench/call_patterns" "$stage/builds/$name/bench/"
  done
  carry_libraries_of "$stage" "$stage"/builds/*/libgfshim.so "$stage"/builds/*/bench/call_patterns
  rm -rf "$carry"
  mkdir -p "$carry"
  tar -C "$stage" -czf "$carry/runtime.tar.gz" .
  du -sh "$carry/runtime.tar.gz"
}

run() {
  [[ -f $carry/runtime.tar.gz ]] ||
    { echo "device_sweep: no $carry (run 'bench/device_sweep.sh prepare' on the build machine)"; exit 2; }
  local unpacked=/tmp/gfshim-sweep configs="openmpi:2 openmpi:4 openmpi:8 mpich:2 mpich:4 mpich:8"
  if [[ ${1:-} == --configs ]]; then configs=$2; shift 2; fi
  [[ ${1:-} == -- ]] && shift
  [[ -n ${OUT:-} ]] && exec > >(tee "$OUT/device_sweep.log") 2>&1
  rm -rf "$unpacked" && mkdir -p "$unpacked" && tar -C "$unpacked" -xzf "$carry/runtime.tar.gz"
  use_carried_mpis "$unpacked"
  echo "== device_sweep $(date -u +%FT%TZ) on $(hostname): $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  OPENMPI_BUILD="$unpacked/builds/openmpi" MPICH_BUILD="$unpacked/builds/mpich" \
    "$root/bench/never_slower.sh" --configs "$configs" -- "$@"
}

case $mode in
  prepare) prepare ;;
  run) run "$@" ;;
  *) echo "usage: bench/device_sweep.sh prepare | run [--configs \"...\"] [-- call_patterns args]"; exit 2 ;;
esac
