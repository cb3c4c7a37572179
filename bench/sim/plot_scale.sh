#!/usr/bin/env bash
# Plots bench/sim/scale.sh's raw lines: busbw (nccl-tests' definition, 2(p-1)/p x bytes / time)
# against the number of simulated ranks, one line per algorithm (the shim's and SMPI's), for one
# platform and message size. Needs gnuplot (Debian gnuplot-nox).
# The shim's torus with columns by recursive halving and doubling (scale.sh's "torus2d/halving")
# or split (a ring, then halving: "torus2d/split") is a series of its own, "torus2d-halving" or
# "torus2d-split".
# usage: bench/sim/plot_scale.sh RESULTS.tsv PLATFORM BYTES OUT.png [MORE_RESULTS.tsv ...]
set -euo pipefail
input=$1 platform=$2 bytes=$3 out=$4
shift 4
command -v gnuplot >/dev/null || { echo "plot_scale.sh: gnuplot is missing (apt-get install gnuplot-nox)" >&2; exit 1; }
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# One file per series ("shim ring", "smpi rab_rdb", ...): ranks and busbw, sorted by ranks; the
# last line of a point wins where a point was simulated twice. auto is left out: it is one of
# the shim's algorithms (its choice is in the table).
awk -F'\t' -v p="$platform" -v b="$bytes" -v dir="$data" '
  $1 == p && $3 == b && $6 != "" && $5 != "auto" {
    name = $4 "_" (($4 == "shim" && $7 ~ /^torus2d\//) ? "torus2d-" substr($7, 9) : $5)
    busbw[name, $2] = 2 * ($2 - 1) / $2 * $3 / ($6 * 1e-6) / 1e9
    series[name] = 1; ranks[$2] = 1 }
  END {
    for (s in series) for (r in ranks) if ((s, r) in busbw) print r, busbw[s, r] > (dir "/" s)
  }' "$input" "$@"
plots=()
for file in "$data"/*; do
  [[ -e $file ]] || { echo "plot_scale.sh: no points for $platform at $bytes bytes in $input" >&2; exit 1; }
  sort -n -o "$file" "$file"
  name=$(basename "$file")
  side=${name%%_*} algo=${name#*_}
  width=1; [[ $side == shim ]] && width=3
  plots+=("'$file' using 1:2 with linespoints lw $width title '$side $algo'")
done
{
  echo "set terminal pngcairo size 720,480 font ',10' noenhanced"
  echo "set output '$out'"
  echo "set title 'Allreduce of $((bytes / 1048576)) MiB (float SUM) on simulated $platform (SimGrid SMPI): the shim against SMPI'"
  echo "set logscale x 2; set xlabel 'simulated ranks'; set ylabel 'busbw (GB/s)'"
  echo "set yrange [0:*]; set key bottom left; set grid"
  (IFS=,; echo "plot ${plots[*]}")
} | gnuplot
echo "wrote $out"
