#!/usr/bin/env bash
# Plots the output of bench/best_native.sh: for each layout, the efficiency (node limit / time) of
# every Open MPI configuration it ran, of the best of them per size ("best native", drawn thick),
# and of the shim's GFSHIM_ALGO=auto (the median of its runs), against the message size. The node
# limit is best_native.sh's: 2(N-1)/N x size through one node link at TCP goodput, so 1 is the
# fastest any algorithm can be. Needs gnuplot (Debian gnuplot-nox).
# usage: bench/plot_best_native.sh BEST_NATIVE_OUTPUT OUT.png
set -euo pipefail
input=$1 out=$2
command -v gnuplot >/dev/null || { echo "plot_best_native.sh: gnuplot is missing (apt-get install gnuplot-nox)" >&2; exit 1; }
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# One file per layout and series (size, efficiency). A summary table's header names the
# configurations between "size" and "best"; each row gives their seconds, the best one's name,
# the shim's median and range, shim/best and the best's and the shim's efficiency, from which
# the node limit (eff_best x best seconds) and so every configuration's efficiency follow.
awk -v dir="$data" '
  /^## / { layout = $2 "x" $5; order[++n] = layout; configs = 0; next }
  /^#/ { configs = 0; next }  # the raw allreduce_bench output after the tables
  /^ +size / { configs = 0
               for (i = 2; $i != "best"; i++) name[++configs] = $i
               for (i = 1; i <= configs; i++) names[layout] = names[layout] " " name[i]
               next }
  /^ +[0-9]+ / && configs > 0 && NF == configs + 7 {
    size = $1; best = $(configs + 2); shim = $(configs + 3); effShim = $(configs + 7)
    effBest = $(configs + 6)
    for (i = 1; i <= configs; i++) if (name[i] == best) bestSeconds = $(i + 1)
    limit = effBest * bestSeconds
    for (i = 1; i <= configs; i++) print size, limit / $(i + 1) >> (dir "/" layout "." name[i])
    print size, effBest >> (dir "/" layout ".best")
    print size, effShim >> (dir "/" layout ".shim") }
  END { for (i = 1; i <= n; i++) print order[i], names[order[i]] > (dir "/layouts") }' "$input"
count=$(wc -l <"$data/layouts")
{
  echo "set terminal pngcairo size $((480 * count)),440 font ',10'"
  echo "set output '$out'"
  echo "set multiplot layout 1,$count title 'Allreduce (float SUM) on the emulated cluster: efficiency = node limit / time'"
  echo "set logscale x 2; set xlabel 'message size (MiB)'; set ylabel 'efficiency (1 = node limit)'"
  echo "set yrange [0:1.1]; set key bottom right; set grid"
  while read -r layout configs; do
    echo "set title '${layout%x*} nodes x ${layout#*x} ranks'"
    plots=()
    for config in $configs; do
      plots+=("'$data/$layout.$config' using (\$1/1048576):2 with linespoints lw 1 dt 2 title 'Open MPI $config'")
    done
    plots+=("'$data/$layout.best' using (\$1/1048576):2 with linespoints lw 3 title 'best native'")
    plots+=("'$data/$layout.shim' using (\$1/1048576):2 with linespoints lw 3 title 'shim auto'")
    (IFS=,; echo "plot ${plots[*]}")
  done <"$data/layouts"
  echo "unset multiplot"
} | gnuplot
echo "wrote $out"
