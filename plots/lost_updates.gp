# lost_updates.gp — the master-weights ablation (MPT §3.1): the share of nonzero optimizer
# updates that left the stored weight unchanged, over steps (top, pooled over the layers) and
# per layer (bottom, pooled over the statistics steps), one line per method.
# Variables: files (space-separated "steps.tsv|layers.tsv|label"; steps: step lost_pct;
# layers: layer name lost_pct), colours (one style index per file), out, ext. Per layer as
# points: a hundred layers joined by lines read as a sawtooth that means nothing.
load "plots/common.gp"
n = words(files)
field(i, k) = (s = word(files, i), k == 1 ? substr(s, 1, strstrt(s, "|") - 1) : \
    (r = substr(s, strstrt(s, "|") + 1, 999), k == 2 ? substr(r, 1, strstrt(r, "|") - 1) : \
    substr(r, strstrt(r, "|") + 1, 999)))
colour(i) = int(word(colours, i))
set multiplot layout 2,1 title tag font ",13"
set key outside right top font ",10"
set logscale y
set format y "10^{%L}"
set ylabel "lost updates (%)"
set title "Weight updates lost in storage, all layers: FP32 masters keep them; 16-bit weights without masters lose,\nwith nearest rounding, every update below half an ulp, with stochastic rounding one of f ulp with probability 1 - f" font ",11"
set xlabel "step"
plot for [i = 1:n] field(i, 1) using 1:($2 > 0 ? $2 : NaN) every ::1 with linespoints ls colour(i) pt 7 ps 0.6 title field(i, 3) noenhanced
set title "Per layer, pooled over the statistics steps" font ",11"
set xlabel "layer (forward order)"
plot for [i = 1:n] field(i, 2) using 1:($3 > 0 ? $3 : NaN) every ::1 with points ls colour(i) pt 7 ps 0.5 title field(i, 3) noenhanced
unset multiplot
