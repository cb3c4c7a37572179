#!/usr/bin/env bash
# Fails when the parameter table of docs/parameters.md differs from the one gfshim-info generates
# from config/params.def (the single source). Usage: docs_params_test.sh GFSHIM_INFO PARAMETERS_MD
set -euo pipefail
info=$1
doc=$2
expected=$("$info" --params-markdown)
actual=$(sed -n '/<!-- params:begin -->/,/<!-- params:end -->/p' "$doc" | sed '1d;$d')
if [[ "$expected" != "$actual" ]]; then
  echo "$doc: the parameter table is out of date. Regenerate it with:"
  echo "  build/gfshim-info --params-markdown  (paste between the params:begin/end markers)"
  diff <(echo "$expected") <(echo "$actual") || true
  exit 1
fi
echo "$doc: parameter table matches config/params.def"
