# underflow.gp — activation-gradient underflow rate per layer, one line per method.
# Variables: files (space-separated "path|label"; TSV layer name rate_pct), out, ext.
load "plots/common.gp"
set title "Activation gradients flushed to zero by FP16, per layer\n(flushed / nonzero, summed over statistics steps)" font ",12"
set xlabel "layer (forward order)"
set ylabel "underflow rate (%)"
set logscale y
set format y "10^{%L}"
set key outside right top font ",10"
n = words(files)
path(i) = substr(word(files, i), 1, strstrt(word(files, i), "|") - 1)
name(i) = substr(word(files, i), strstrt(word(files, i), "|") + 1, 999)
plot for [i = 1:n] path(i) using 1:($3 > 0 ? $3 : NaN) every ::1 with linespoints pt 7 ps 0.5 title name(i) noenhanced
