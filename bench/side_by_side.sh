#!/usr/bin/env bash
# side_by_side.sh - time libgfshim against the native MPI allreduce in one run.
#
# Usage:
#   bench/side_by_side.sh [--mpi openmpi|mpich] [--np N]
#                         [--shim /abs/path/libgfshim.so] [--bench BINARY]
#                         [-- extra allreduce_bench args]
#
# Launches allreduce_bench ONCE, with the shim preloaded into every rank
# (never into the launcher) and with -p, so that MPI_Allreduce (intercepted
# by the shim) and PMPI_Allreduce (native MPI) are timed in interleaved
# rounds inside the same processes.  ratio = shim/native (< 1: shim faster).
#
# Defaults: --mpi openmpi, --np 2, --shim <repo>/build/libgfshim.so
# (<repo>/build-mpich/libgfshim.so for mpich), --bench <shim dir>/bench/allreduce_bench.
# Every GFSHIM_* variable of the environment is forwarded to the ranks.
# The launcher can be overridden with MPIRUN=... (default mpirun.openmpi or
# mpiexec.mpich).
#
# Examples:
#   bench/side_by_side.sh -- -e 16M -c
#   GFSHIM_FOO=1 bench/side_by_side.sh --mpi mpich --np 2 -- -d double -o max
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

die() {
    echo "side_by_side.sh: error: $*" >&2
    exit 2
}

need_arg() {
    [[ $# -ge 2 && -n $2 ]] || die "option $1 needs an argument"
}

mpi=openmpi
np=2
shim=
bench=
extra=()

while [[ $# -gt 0 ]]; do
    case $1 in
        --mpi) need_arg "$@"; mpi=$2; shift 2 ;;
        --np) need_arg "$@"; np=$2; shift 2 ;;
        --shim) need_arg "$@"; shim=$2; shift 2 ;;
        --bench) need_arg "$@"; bench=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        *) die "unknown argument '$1' (see --help; benchmark args go after --)" ;;
    esac
done

case $mpi in
    openmpi) build_dir=$repo_root/build; launcher=${MPIRUN:-mpirun.openmpi} ;;
    mpich) build_dir=$repo_root/build-mpich; launcher=${MPIRUN:-mpiexec.mpich} ;;
    *) die "--mpi must be openmpi or mpich, not '$mpi'" ;;
esac
[[ $np =~ ^[1-9][0-9]*$ ]] || die "--np must be a positive integer, not '$np'"

shim=${shim:-$build_dir/libgfshim.so}
[[ -f $shim ]] || die "shim library '$shim' does not exist;" \
    "build the project first (into ${build_dir#"$repo_root"/}/ for --mpi $mpi) or pass --shim"
shim=$(realpath "$shim") # LD_PRELOAD in the ranks needs an absolute path

bench=${bench:-$(dirname "$shim")/bench/allreduce_bench}
[[ -f $bench && -x $bench ]] || die "benchmark binary '$bench' does not exist" \
    "or is not executable; build it first (it is built next to the shim) or pass --bench"
bench=$(realpath "$bench")

command -v "$launcher" >/dev/null || die "MPI launcher '$launcher' not found in PATH"

# GFSHIM_* variables exported in this environment, forwarded to every rank.
gfshim_vars=()
while IFS= read -r name; do
    if [[ $name == GFSHIM_* ]]; then
        gfshim_vars+=("$name")
    fi
done < <(compgen -e)

cmd=()
if [[ $mpi == openmpi ]]; then
    # Root / oversubscription permissions go to the launcher (harmless when
    # not root); the shim and its settings go to the ranks only via -x.
    cmd=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
         OMPI_MCA_rmaps_base_oversubscribe=1
         "$launcher" -np "$np" -x "LD_PRELOAD=$shim")
    for name in "${gfshim_vars[@]}"; do
        cmd+=(-x "$name")
    done
else
    cmd=("$launcher" -n "$np" -genv LD_PRELOAD "$shim")
    for name in "${gfshim_vars[@]}"; do
        cmd+=(-genv "$name" "${!name}")
    done
fi
cmd+=("$bench" -p "${extra[@]}")

printf '# cmd:'
printf ' %q' "${cmd[@]}"
printf '\n'
exec "${cmd[@]}"
