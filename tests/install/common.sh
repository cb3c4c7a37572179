# shellcheck shell=bash
# Sourced by the install tests: failure reporting, the expected layout, and keeping a build
# directory's install manifests as they were (the uninstall target reads install_manifest.txt,
# and every `cmake --install` or cpack run of that build rewrites it).

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# Runs a command quietly; on failure prints its output and what it was.
quiet() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    fail "command failed: $*"
    return 1
  fi
  rm -f "$log"
}

# The files one flavour's build installs under LIBDIR/gfshim/FLAVOUR, relative to the prefix.
# flavourFiles LIBDIR FLAVOUR PLUGIN(yes|no)
flavourFiles() {
  local dir="$1/gfshim/$2"
  echo "$dir/libgfshim.so"
  echo "$dir/gfshim-info"
  if [ "$3" = yes ]; then echo "$dir/libgfshim_cuda.so"; fi
}

# The files every build installs: the launcher, the gfshim-info wrapper, the documentation.
# commonFiles SOURCE_DIR BINDIR DOCDIR
commonFiles() {
  echo "$2/gfshimrun"
  echo "$2/gfshim-info"
  echo "$3/README.md"
  if [ -d "$1/docs" ]; then
    (cd "$1" && find docs -type f) | sed "s|^|$3/|"
  fi
}

# Keeps the install_manifest*.txt files of each build directory given under $scratch (set by the
# caller) and puts them back as they were on exit: cmake --install writes install_manifest.txt,
# cpack's install of one component install_manifest_<component>.txt.
saved_manifests=()
keepManifests() {
  local build keep
  for build in "$@"; do
    keep="${scratch:?}/manifests/${#saved_manifests[@]}"
    mkdir -p "$keep"
    find "$build" -maxdepth 1 -name 'install_manifest*.txt' -exec cp {} "$keep/" \;
    saved_manifests+=("$build")
  done
  trap restoreManifests EXIT
}
restoreManifests() {
  local i build
  for i in "${!saved_manifests[@]}"; do
    build=${saved_manifests[$i]}
    find "$build" -maxdepth 1 -name 'install_manifest*.txt' -delete
    find "${scratch:?}/manifests/$i" -name 'install_manifest*.txt' -exec cp {} "$build/" \;
  done
}

# Every shared object and program found under DIR loads: no "not found" from ldd.
checkLinks() {
  local file
  while IFS= read -r file; do
    if ldd "$file" 2>&1 | grep -q "not found"; then
      fail "$file: a library it needs is not found: $(ldd "$file" 2>&1 | grep "not found" | tr '\n' ' ')"
    fi
  done < <(find "$1" -type f \( -name "*.so" -o -name gfshim-info \))
}
