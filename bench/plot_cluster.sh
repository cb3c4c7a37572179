#!/usr/bin/env bash
# Plots the output of bench/cluster_numbers.sh: for each layout, the throughput each node's link
# reaches, as a fraction of the link rate, against the message size, for native Open MPI and the
# shim's ring, torus2d and auto. A node must push 2(Y-1)/Y x N bytes through its link for an
# allreduce of N bytes over Y nodes (whatever the algorithm), so
#   fraction = 2(Y-1)/Y x N / time / link rate
# (1 is the link's raw rate; TCP goodput is about 0.956 of it). Needs gnuplot (Debian gnuplot-nox).
# usage: bench/plot_cluster.sh CLUSTER_NUMBERS_OUTPUT OUT.png [LINK_BYTES_PER_S (default 125e6)]
set -euo pipefail
input=$1 out=$2 link=${3:-125e6}
command -v gnuplot >/dev/null || { echo "plot_cluster.sh: gnuplot is missing (apt-get install gnuplot-nox)" >&2; exit 1; }
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# One file per layout and series: size, fraction. Native comes from every run (each interleaves
# native with the shim); its fraction is averaged over the runs of a layout.
awk -v dir="$data" -v link="$link" '
  /^## / { nodes = $2; ppn = $5; algo = $NF; sub(/GFSHIM_ALGO=/, "", algo); layout = nodes "x" ppn
           if (!(layout in seen)) { seen[layout] = 1; order[++n] = layout } next }
  /^ +[0-9]+ +[0-9]+ / && algo != "" {
    bytes = $1; limit = 2 * (nodes - 1) / nodes * bytes / link
    print bytes, limit / ($6 / 1e6) >> (dir "/" layout "." algo)
    nsum[layout, bytes] += limit / ($5 / 1e6); ncount[layout, bytes]++; sizes[layout, bytes] = 1 }
  END {
    for (key in sizes) { split(key, k, SUBSEP); print k[2], nsum[key] / ncount[key] >> (dir "/" k[1] ".native") }
    for (i = 1; i <= n; i++) print order[i] > (dir "/layouts") }' "$input"
for f in "$data"/*.*; do sort -n -o "$f" "$f"; done
layouts=$(cat "$data/layouts")
count=$(wc -w <<<"$layouts")
{
  echo "set terminal pngcairo size $((480 * count)),420 font ',10'"
  echo "set output '$out'"
  echo "set multiplot layout 1,$count title 'Allreduce (float SUM) across emulated nodes: link throughput / link rate'"
  echo "set logscale x 2; set xlabel 'message size (MiB)'; set ylabel 'fraction of the link rate'"
  echo "set yrange [0:1.1]; set key bottom right; set grid"
  for layout in $layouts; do
    echo "set title '${layout%x*} nodes x ${layout#*x} ranks'"
    plots=("'$data/$layout.native' using (\$1/1048576):2 with linespoints lw 2 title 'native Open MPI'")
    for algo in ring torus2d auto; do
      [[ -f $data/$layout.$algo ]] && plots+=("'$data/$layout.$algo' using (\$1/1048576):2 with linespoints lw 2 title 'shim $algo'")
    done
    (IFS=,; echo "plot ${plots[*]}")
  done
  echo "unset multiplot"
} | gnuplot
echo "wrote $out"
