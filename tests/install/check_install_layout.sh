#!/usr/bin/env bash
# install_prefix_layout: `cmake --install` of this build, and of the other flavour's build where
# there is one, into one scratch prefix; the prefix must hold exactly the expected files (both
# flavours side by side, nothing of the tests, benches or examples), the installed programs must
# answer --help and the wrapper must run the flavour asked for; then the uninstall target of each
# build must leave no file behind.
#
#   check_install_layout.sh --source DIR --build DIR --flavour F --plugin yes|no
#                           --libdir L --bindir B --docdir D
#                           [--other-build DIR --other-flavour F [--require-other]]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/install/common.sh
source "$here/common.sh"

other_build="" other_flavour="" require_other=no
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source_dir=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --flavour) flavour=$2; shift 2 ;;
    --plugin) plugin=$2; shift 2 ;;
    --libdir) libdir=$2; shift 2 ;;
    --bindir) bindir=$2; shift 2 ;;
    --docdir) docdir=$2; shift 2 ;;
    --other-build) other_build=$2; shift 2 ;;
    --other-flavour) other_flavour=$2; shift 2 ;;
    --require-other) require_other=yes; shift ;;
    *) echo "check_install_layout.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

scratch="$build/install-test"
rm -rf "$scratch"
mkdir -p "$scratch"
prefix="$scratch/prefix"

builds=("$build")
declare -A flavour_of=(["$build"]=$flavour)
declare -A plugin_of=(["$build"]=$plugin)
if [ -n "$other_build" ]; then
  if [ -f "$other_build/libgfshim.so" ] && [ -f "$other_build/cmake_install.cmake" ]; then
    builds+=("$other_build")
    flavour_of[$other_build]=$other_flavour
    plugin_of[$other_build]=$([ -f "$other_build/libgfshim_cuda.so" ] && echo yes || echo no)
  elif [ "$require_other" = yes ]; then
    echo "FAIL: the $other_flavour build $other_build has no libgfshim.so: build it" \
         "(scripts/build.sh), or configure this build without GFSHIM_OTHER_FLAVOUR_SHIM" >&2
    exit 1
  else
    echo "note: no $other_flavour build in $other_build; checking $flavour alone"
  fi
fi
keepManifests "${builds[@]}"

# ---- install -----------------------------------------------------------------------------------
for b in "${builds[@]}"; do
  quiet cmake --install "$b" --prefix "$prefix" || exit 1
done

# ---- exactly the expected files ----------------------------------------------------------------
{
  commonFiles "$source_dir" "$bindir" "$docdir"
  for b in "${builds[@]}"; do
    flavourFiles "$libdir" "${flavour_of[$b]}" "${plugin_of[$b]}"
  done
} | sort -u >"$scratch/expected"
(cd "$prefix" && find . -type f -o -type l) | sed 's|^\./||' | sort >"$scratch/installed"
while IFS= read -r missing; do fail "not installed: $prefix/$missing"; done \
  < <(comm -23 "$scratch/expected" "$scratch/installed")
while IFS= read -r extra; do fail "installed but not expected: $prefix/$extra"; done \
  < <(comm -13 "$scratch/expected" "$scratch/installed")
for program in "$bindir/gfshimrun" "$bindir/gfshim-info"; do
  [ -x "$prefix/$program" ] || fail "$prefix/$program is not executable"
done
checkLinks "$prefix/$libdir/gfshim"

# ---- the installed programs answer --help; the wrapper runs the flavour asked for ---------------
for program in "$prefix/$bindir/gfshimrun" "$prefix/$bindir/gfshim-info" \
               "$prefix/$libdir"/gfshim/*/gfshim-info; do
  if ! out=$("$program" --help 2>&1); then
    fail "$program --help exited with an error: $out"
  elif [ -z "$out" ]; then
    fail "$program --help printed nothing"
  fi
done
for b in "${builds[@]}"; do
  name=$([ "${flavour_of[$b]}" = openmpi ] && echo "Open MPI" || echo "MPICH")
  out=$(GFSHIM_INFO_MPI=${flavour_of[$b]} "$prefix/$bindir/gfshim-info" 2>&1)
  echo "$out" | grep -q "^built for   : $name\$" ||
    fail "GFSHIM_INFO_MPI=${flavour_of[$b]} $bindir/gfshim-info did not run the $name one: $out"
done

# ---- uninstall: every file goes, and gfshim's own directories ---------------------------------
for b in "${builds[@]}"; do
  quiet cmake --build "$b" --target uninstall
done
left=$(cd "$prefix" && find . -type f -o -type l)
[ -z "$left" ] || fail "left after uninstall in $prefix: $left"
for dir in "$libdir/gfshim" "$docdir"; do
  [ ! -e "$prefix/$dir" ] || fail "left after uninstall: the directory $prefix/$dir"
done

if [ "$failures" -gt 0 ]; then
  echo "install prefix layout: $failures failure(s)" >&2
  exit 1
fi
echo "install prefix layout: ok (${builds[*]} into $prefix: $(wc -l <"$scratch/installed") files, all removed)"
rm -rf "$scratch/prefix"
