#!/usr/bin/env bash
# Fails when the README's parameter table differs from the one gfshim-info generates from
# config/params.def (the single source). Usage: readme_params_test.sh GFSHIM_INFO README.md
set -euo pipefail
info=$1
readme=$2
expected=$("$info" --params-markdown)
actual=$(sed -n '/<!-- params:begin -->/,/<!-- params:end -->/p' "$readme" | sed '1d;$d')
if [[ "$expected" != "$actual" ]]; then
  echo "README.md parameter table is out of date. Regenerate it with:"
  echo "  build/gfshim-info --params-markdown"
  diff <(echo "$expected") <(echo "$actual") || true
  exit 1
fi
echo "README parameter table matches config/params.def"
