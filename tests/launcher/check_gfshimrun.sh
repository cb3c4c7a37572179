#!/usr/bin/env bash
# Runs tools/gfshimrun once in a scratch directory and checks its exit status and output.
#
# usage: check_gfshimrun.sh --gfshimrun SCRIPT --shim LIB --flavour openmpi|mpich
#                           [--layout libdir|installed|none] [--fake-srun] [--fake-python3]
#                           [--env NAME=VALUE]... [--status N] [--expect-line TEXT]...
#                           [--expect REGEX]... [--reject REGEX]... [--expect-engine]
#                           -- GFSHIMRUN ARGS...
# Where gfshimrun finds the shim (LIB copied, so that the path it picks tells which place it
# looked at; default libdir):
#   libdir     GFSHIM_LIBDIR=TMP/lib with TMP/lib/FLAVOUR/libgfshim.so
#   installed  gfshimrun copied to TMP/prefix/bin, the shim to TMP/prefix/lib/gfshim/FLAVOUR/
#   none       gfshimrun copied to TMP/prefix/bin, GFSHIM_LIBDIR=TMP/lib, no shim anywhere
# --fake-srun: TMP/bin/srun, first on PATH, prints its environment's LD_PRELOAD and GFSHIM_LIBDIR
# and its arguments. --fake-python3: TMP/bin/python3, first on PATH, an interpreter without
# mpi4py (every command fails). @TMP@ in ARGS, --env, --expect-line and --expect stands for TMP.
# --expect-line: a whole line of the output, exactly. --status: the exit status (default 0).
# --expect-engine: the shim's GFSHIM STATS summary shows engine calls (give --env GFSHIM_STATS=1).
set -euo pipefail

gfshimrun="" shim="" flavour="" layout=libdir fake_srun=0 fake_python3=0 status_wanted=0
expect_engine=0 envs=() lines=() expects=() rejects=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --gfshimrun) gfshimrun=$2; shift 2 ;;
    --shim) shim=$2; shift 2 ;;
    --flavour) flavour=$2; shift 2 ;;
    --layout) layout=$2; shift 2 ;;
    --fake-srun) fake_srun=1; shift ;;
    --fake-python3) fake_python3=1; shift ;;
    --env) envs+=("$2"); shift 2 ;;
    --status) status_wanted=$2; shift 2 ;;
    --expect-line) lines+=("$2"); shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --reject) rejects+=("$2"); shift 2 ;;
    --expect-engine) expect_engine=1; shift ;;
    --) shift; break ;;
    *) echo "check_gfshimrun.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

tmp=$(readlink -f "$(mktemp -d)")
trap 'rm -rf "$tmp"' EXIT
scratch() { printf '%s\n' "${1//@TMP@/$tmp}"; }

# Only what the test gives reaches gfshimrun: no GFSHIM_* or LD_PRELOAD of the caller.
while read -r name; do unset "$name"; done < <(compgen -e | grep -E '^(GFSHIM_|LD_PRELOAD$)' || true)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for e in "${envs[@]+"${envs[@]}"}"; do export "$(scratch "$e")"; done

case $layout in
  libdir)
    mkdir -p "$tmp/lib/$flavour"
    cp "$shim" "$tmp/lib/$flavour/libgfshim.so"
    export GFSHIM_LIBDIR=$tmp/lib
    ;;
  installed | none)
    mkdir -p "$tmp/prefix/bin"
    cp "$gfshimrun" "$tmp/prefix/bin/gfshimrun"
    gfshimrun=$tmp/prefix/bin/gfshimrun
    if [[ $layout == installed ]]; then
      mkdir -p "$tmp/prefix/lib/gfshim/$flavour"
      cp "$shim" "$tmp/prefix/lib/gfshim/$flavour/libgfshim.so"
    else
      mkdir -p "$tmp/lib"
      export GFSHIM_LIBDIR=$tmp/lib
    fi
    ;;
  *) echo "check_gfshimrun.sh: unknown layout $layout" >&2; exit 2 ;;
esac
mkdir -p "$tmp/bin"
export PATH=$tmp/bin:$PATH
if [[ $fake_srun == 1 ]]; then
  cat >"$tmp/bin/srun" <<'EOF'
#!/bin/sh
echo "fake srun: LD_PRELOAD=${LD_PRELOAD-unset} GFSHIM_LIBDIR=${GFSHIM_LIBDIR-unset}"
echo "fake srun: $*"
EOF
  chmod +x "$tmp/bin/srun"
fi
if [[ $fake_python3 == 1 ]]; then
  printf '#!/bin/sh\necho "No module named mpi4py" >&2\nexit 1\n' >"$tmp/bin/python3"
  chmod +x "$tmp/bin/python3"
fi

args=()
for a in "$@"; do args+=("$(scratch "$a")"); done
echo "# gfshimrun ${args[*]}"
log=$tmp/output
timeout -k 10 300 "$gfshimrun" "${args[@]}" >"$log" 2>&1 && status=0 || status=$?
output=$(<"$log")
echo "$output"
echo "# exit status $status"

fail() { echo "check_gfshimrun.sh: FAILED: $*"; exit 1; }
[[ $status -eq $status_wanted ]] || fail "exit status $status, expected $status_wanted"
for line in "${lines[@]+"${lines[@]}"}"; do
  line=$(scratch "$line")
  grep -Fxq -- "$line" <<<"$output" || fail "no output line is exactly: $line"
done
for re in "${expects[@]+"${expects[@]}"}"; do
  re=$(scratch "$re")
  grep -Eq -- "$re" <<<"$output" || fail "output lacks /$re/"
done
for re in "${rejects[@]+"${rejects[@]}"}"; do
  if grep -Eq -- "$re" <<<"$output"; then fail "output contains /$re/"; fi
done
if [[ $expect_engine == 1 ]]; then
  grep -Eq 'GFSHIM STATS summary engine_calls=[1-9]' <<<"$output" ||
    fail "no GFSHIM STATS summary with engine calls (was the shim loaded, did its engine run?)"
fi
echo "check_gfshimrun.sh: ok"
