#!/usr/bin/env bash
# install_deb_installs_and_removes: cpack builds the .deb from this build and the other flavour's
# (CPACK_INSTALL_CMAKE_PROJECTS, cmake/install.cmake); dpkg installs it into a scratch root with
# its own empty database (the machine's dpkg database is never opened), both flavours must be
# there with the launcher, the wrapper and the documentation, and `dpkg -r` must remove them all.
#
#   check_deb.sh --cpack CPACK --source DIR --build DIR --flavour F --plugin yes|no
#                --other-build DIR --other-flavour F --libdir L --bindir B --docdir D
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/install/common.sh
source "$here/common.sh"

cpack=cpack
while [ $# -gt 0 ]; do
  case "$1" in
    --cpack) cpack=$2; shift 2 ;;
    --source) source_dir=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --flavour) flavour=$2; shift 2 ;;
    --plugin) plugin=$2; shift 2 ;;
    --other-build) other_build=$2; shift 2 ;;
    --other-flavour) other_flavour=$2; shift 2 ;;
    --libdir) libdir=$2; shift 2 ;;
    --bindir) bindir=$2; shift 2 ;;
    --docdir) docdir=$2; shift 2 ;;
    *) echo "check_deb.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ ! -f "$other_build/libgfshim.so" ]; then
  echo "FAIL: the package holds both flavours, but the $other_flavour build $other_build has no" \
       "libgfshim.so: build it (scripts/build.sh), or configure without GFSHIM_OTHER_FLAVOUR_SHIM" >&2
  exit 1
fi
other_plugin=$([ -f "$other_build/libgfshim_cuda.so" ] && echo yes || echo no)

scratch="$build/deb-test"
rm -rf "$scratch"
mkdir -p "$scratch/pkg"
keepManifests "$build" "$other_build"

# ---- the package ---------------------------------------------------------------------------------
quiet "$cpack" --config "$build/CPackConfig.cmake" -G DEB -B "$scratch/pkg" || exit 1
debs=("$scratch"/pkg/*.deb)
if [ "${#debs[@]}" -ne 1 ] || [ ! -f "${debs[0]}" ]; then
  echo "FAIL: cpack made no single .deb in $scratch/pkg: ${debs[*]}" >&2
  exit 1
fi
deb=${debs[0]}
[ "$(dpkg-deb -f "$deb" Package)" = libgfshim ] || fail "$deb: Package is not libgfshim"
[ -n "$(dpkg-deb -f "$deb" Version)" ] || fail "$deb: no Version"
[ -n "$(dpkg-deb -f "$deb" Maintainer)" ] || fail "$deb: no Maintainer"
dpkg-deb -f "$deb" Depends | grep -q "libopenmpi3 | libmpich12" ||
  fail "$deb: Depends does not name the MPI libraries: $(dpkg-deb -f "$deb" Depends)"

# ---- install into a scratch root with an empty database of its own -------------------------------
root="$scratch/root"
admin="$root/var/lib/dpkg"
mkdir -p "$admin/info" "$admin/updates" "$admin/triggers"
touch "$admin/status" "$admin/available"
# The Depends are not in the scratch database; there are no maintainer scripts or triggers.
dpkg_scratch=(dpkg "--root=$root" "--admindir=$admin" "--log=$scratch/dpkg.log"
              --force-not-root --force-depends --no-triggers)
system_state=$(dpkg-query -W -f='${db:Status-Status}' libgfshim 2>/dev/null || echo absent)
quiet "${dpkg_scratch[@]}" -i "$deb" || exit 1
state=$(dpkg-query "--admindir=$admin" -W -f='${db:Status-Status}' libgfshim 2>/dev/null)
[ "$state" = installed ] || fail "after dpkg -i the scratch database says libgfshim is '$state'"

usr="$root/usr"
{
  commonFiles "$source_dir" "$bindir" "$docdir"
  flavourFiles "$libdir" "$flavour" "$plugin"
  flavourFiles "$libdir" "$other_flavour" "$other_plugin"
} | sort -u >"$scratch/expected"
(cd "$usr" && find . -type f -o -type l) | sed 's|^\./||' | sort >"$scratch/installed"
while IFS= read -r missing; do fail "not installed by the package: $usr/$missing"; done \
  < <(comm -23 "$scratch/expected" "$scratch/installed")
while IFS= read -r extra; do fail "installed by the package but not expected: $usr/$extra"; done \
  < <(comm -13 "$scratch/expected" "$scratch/installed")
"${dpkg_scratch[@]}" -L libgfshim | grep -q "/usr/$libdir/gfshim/$other_flavour/libgfshim.so\$" ||
  fail "dpkg -L libgfshim does not list the $other_flavour shim"
for program in "$usr/$bindir/gfshimrun" "$usr/$bindir/gfshim-info" \
               "$usr/$libdir/gfshim/$flavour/gfshim-info" "$usr/$libdir/gfshim/$other_flavour/gfshim-info"; do
  out=$("$program" --help 2>&1) || fail "$program --help exited with an error: $out"
done
checkLinks "$usr/$libdir/gfshim"

# ---- remove: nothing of the package is left --------------------------------------------------------
quiet "${dpkg_scratch[@]}" -r libgfshim
left=$(cd "$usr" 2>/dev/null && find . -type f -o -type l)
[ -z "$left" ] || fail "left after dpkg -r in $usr: $left"
[ ! -e "$usr/$libdir/gfshim" ] || fail "left after dpkg -r: the directory $usr/$libdir/gfshim"
# Without conffiles dpkg -r forgets the package: "no packages found", or not-installed.
state=$(dpkg-query "--admindir=$admin" -W -f='${db:Status-Status}' libgfshim 2>/dev/null)
case "$state" in
  "" | not-installed) ;;
  *) fail "after dpkg -r the scratch database says libgfshim is '$state'" ;;
esac
after=$(dpkg-query -W -f='${db:Status-Status}' libgfshim 2>/dev/null || echo absent)
[ "$after" = "$system_state" ] || fail "the machine's dpkg database changed: libgfshim '$system_state' -> '$after'"

if [ "$failures" -gt 0 ]; then
  echo "deb install and removal: $failures failure(s)" >&2
  exit 1
fi
echo "deb install and removal: ok ($(basename "$deb"), $(wc -l <"$scratch/installed") files under /usr, all removed)"
rm -rf "$root" "$scratch/pkg/_CPack_Packages"
